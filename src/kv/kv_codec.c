/* kv_codec.c - KV encoders and decoders; see kv_codec.h for the formats,
 * the fp8_e4m3 scale policy and the KIVI layouts.
 *
 * Sections: SIMD choice, fp8 elements, inner loops (reference + AVX2), the
 * stage, writing (rows, fp8_e4m3 scales, KIVI seal/unseal), block refs,
 * reading (dequant, transposed dequant, fused K dot, V axpy), inspection.
 *
 * Inner loops come in pairs, *_ref and *_avx2, behind one small dispatcher
 * each. The AVX2 versions compute the same roundings as the reference
 * (conversions through F16C are exact, affine steps are mul then add, not
 * FMA), so decoded values are bit-identical; only the f32 dot and axpy
 * loops use FMA, and they differ from the reference in summation order.
 */
#include "kv/kv_codec.h"

#include "base/err.h"
#include "base/mem.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "tensor/half.h"
#include "tensor/quant.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define KV_X86 1
#include <immintrin.h>
#else
#define KV_X86 0
#endif

/* ------------------------------------------------------------ SIMD choice */

/* -1 not decided yet, 0 reference, 1 AVX2. Racing first callers all store
 * the same answer. */
static _Atomic int kv_simd_state = -1;

static int kv_cpu_has_avx2(void)
{
#if KV_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}

static inline bool kv_simd(void)
{
    int s = atomic_load_explicit(&kv_simd_state, memory_order_relaxed);
    if (__builtin_expect(s < 0, 0)) {
        s = kv_cpu_has_avx2();
        atomic_store_explicit(&kv_simd_state, s, memory_order_relaxed);
    }
    return s == 1;
}

void kv_codec_set_simd(bool on) { atomic_store(&kv_simd_state, on ? kv_cpu_has_avx2() : 0); }

const char *kv_codec_variant(void) { return kv_simd() ? "avx2" : "ref"; }

/* ------------------------------------------------------------ fp8 elements */

/* Magnitude code of a finite f32 whose bits without the sign are a, in a
 * format with M mantissa bits and exponent bias `bias`: round to nearest,
 * ties to even, in one step from the 24-bit significand. The result may
 * exceed the format's max (the caller saturates); a carry out of the
 * mantissa moves into the exponent by itself (code = (E - 1) << M + r,
 * where r holds the implicit bit), and a subnormal that rounds up to
 * 2^M becomes the smallest normal the same way. */
static uint32_t fp8_round(uint32_t a, int M, int bias)
{
    if (a < 0x00800000u) return 0; /* f32 zero or subnormal: far below half the smallest fp8 step */
    const int e = (int)(a >> 23) - 127, emin = 1 - bias;
    const uint32_t mant = (a & 0x007FFFFFu) | 0x00800000u;
    const int shift = 23 - M + (e < emin ? emin - e : 0);
    if (shift > 24) return 0; /* below half the smallest subnormal, never a tie */
    const uint32_t half = 1u << (shift - 1), rem = mant & ((1u << shift) - 1);
    uint32_t r = mant >> shift;
    if (rem > half || (rem == half && (r & 1))) r++;
    return e < emin ? r : ((uint32_t)(e + bias - 1) << M) + r;
}

uint8_t kv_e4m3_from_f32(float x)
{
    const uint32_t u = half_bits_f32(x), sign = (u >> 24) & 0x80, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint8_t)(sign | 0x7F);  /* NaN */
    if (a == 0x7F800000u) return (uint8_t)(sign | 0x7E); /* no inf in e4m3: saturate */
    const uint32_t c = fp8_round(a, 3, 7);
    return (uint8_t)(sign | (c > 0x7E ? 0x7E : c));
}

uint8_t kv_e5m2_from_f32(float x)
{
    const uint32_t u = half_bits_f32(x), sign = (u >> 24) & 0x80, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint8_t)(sign | 0x7E);  /* quiet NaN, like f16 0x7E00 */
    if (a == 0x7F800000u) return (uint8_t)(sign | 0x7C); /* inf stays inf */
    const uint32_t c = fp8_round(a, 2, 15);
    return (uint8_t)(sign | (c > 0x7B ? 0x7B : c));      /* finite overflow saturates */
}

/* ------------------------------------------------------------ inner loops */

/* Code i of a LSB-first packed array of `bits`-bit codes (bits divides 8). */
static inline uint32_t kv_code_at(const uint8_t *p, uint32_t bits, uint64_t i)
{
    const uint64_t bit = i * bits;
    return (uint32_t)(p[bit >> 3] >> (bit & 7)) & ((1u << bits) - 1);
}

static void cvt_f16_ref(const uint16_t *src, float *dst, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) dst[i] = f16_to_f32(src[i]);
}

static void cvt_e4m3_ref(const uint8_t *src, float s, float *dst, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) dst[i] = kv_e4m3_to_f32(src[i]) * s;
}

static void cvt_e5m2_ref(const uint8_t *src, float *dst, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) dst[i] = kv_e5m2_to_f32(src[i]);
}

/* dst[j] = m + d x code(first + j), j < n. */
static void kivi_decode_ref(const uint8_t *codes, uint32_t bits, uint64_t first, uint32_t n, float d, float m,
                            float *dst)
{
    for (uint32_t j = 0; j < n; j++) dst[j] = m + d * (float)kv_code_at(codes, bits, first + j);
}

static float dot_ref(const float *a, const float *b, uint32_t n)
{
    float s = 0;
    for (uint32_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void axpy_ref(float *y, float a, const float *x, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) y[i] += a * x[i];
}

#if KV_X86
#define KA __attribute__((target("avx2,fma,f16c")))

KA static void cvt_f16_avx2(const uint16_t *src, float *dst, uint32_t n)
{
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    cvt_f16_ref(src + i, dst + i, n - i);
}

/* e4m3 -> half bits (magnitude << 7 | sign << 8), F16C, x 256 s; the NaN
 * code is patched in (its half would read 480). */
KA static void cvt_e4m3_avx2(const uint8_t *src, float s, float *dst, uint32_t n)
{
    const __m256 k = _mm256_set1_ps(256.0f * s), nan = _mm256_set1_ps(NAN);
    const __m128i mag = _mm_set1_epi16(0x7F), sgn = _mm_set1_epi16(0x80);
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(src + i)));
        __m128i m = _mm_and_si128(b, mag);
        __m128i h = _mm_or_si128(_mm_slli_epi16(m, 7), _mm_slli_epi16(_mm_and_si128(b, sgn), 8));
        __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(h), k);
        __m256 isnan = _mm256_castsi256_ps(_mm256_cvtepi16_epi32(_mm_cmpeq_epi16(m, mag)));
        _mm256_storeu_ps(dst + i, _mm256_blendv_ps(v, nan, isnan));
    }
    cvt_e4m3_ref(src + i, s, dst + i, n - i);
}

KA static void cvt_e5m2_avx2(const uint8_t *src, float *dst, uint32_t n)
{
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(src + i)));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_slli_epi16(b, 8)));
    }
    cvt_e5m2_ref(src + i, dst + i, n - i);
}

/* 8 codes from a byte boundary: they fill `bits` bytes, read as one word and
 * spread over 8 lanes by variable shifts. Reads exactly `bits` bytes. */
KA static inline __m256 kivi_unpack8(const uint8_t *p, uint32_t bits)
{
    static const int32_t sh4[8] = {0, 4, 8, 12, 16, 20, 24, 28}, sh2[8] = {0, 2, 4, 6, 8, 10, 12, 14};
    uint32_t w = 0;
    memcpy(&w, p, bits);
    __m256i sh = _mm256_loadu_si256((const __m256i *)(bits == 4 ? sh4 : sh2));
    __m256i c = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int32_t)w), sh),
                                 _mm256_set1_epi32((int32_t)((1u << bits) - 1)));
    return _mm256_cvtepi32_ps(c);
}

KA static void kivi_decode_avx2(const uint8_t *codes, uint32_t bits, uint64_t first, uint32_t n, float d, float m,
                                float *dst)
{
    const uint32_t per_byte = 8 / bits;
    uint32_t j = 0;
    /* scalar up to a byte boundary, 8 at a time, scalar tail */
    while (j < n && (first + j) % per_byte) {
        dst[j] = m + d * (float)kv_code_at(codes, bits, first + j);
        j++;
    }
    const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(dst + j,
                         _mm256_add_ps(vm, _mm256_mul_ps(vd, kivi_unpack8(codes + (first + j) * bits / 8, bits))));
    kivi_decode_ref(codes, bits, first + j, n - j, d, m, dst + j);
}

KA static float dot_avx2(const float *a, const float *b, uint32_t n)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    uint32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s0 = _mm256_add_ps(s0, s1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float s = _mm_cvtss_f32(h);
    for (; i < n; i++) s = fmaf(a[i], b[i], s);
    return s;
}

KA static void axpy_avx2(float *y, float a, const float *x, uint32_t n)
{
    const __m256 va = _mm256_set1_ps(a);
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] = fmaf(a, x[i], y[i]); /* fused like the lanes: y[i] never depends on n */
}
/* KIVI keys, fused: scores[k][t] += qd[k][i] x code(i, first + t) over the
 * head's D channels, 8 tokens a vector (from byte-aligned codes), the other
 * tokens one at a time with fmaf, so each (k, t) sees the same fused steps
 * wherever t falls. */
KA static void kivi_k_acc_avx2(const uint8_t *col0, uint64_t cb, uint32_t D, uint32_t bits, uint32_t first,
                               uint32_t n, const float *qd, int n_q, float *scores, size_t ld)
{
    const uint32_t per_byte = 8 / bits;
    uint32_t a = 0; /* tokens [a, b) go by vectors */
    while (a < n && (first + a) % per_byte) a++;
    const uint32_t b = a + (n - a) / 8 * 8;
    for (uint32_t i = 0; i < D; i++) {
        const uint8_t *col = col0 + i * cb;
        for (uint32_t t = a; t < b; t += 8) {
            const __m256 c = kivi_unpack8(col + (first + t) * bits / 8, bits);
            for (int k = 0; k < n_q; k++) {
                float *sp = scores + (size_t)k * ld + t;
                _mm256_storeu_ps(sp, _mm256_fmadd_ps(_mm256_set1_ps(qd[(size_t)k * D + i]), c, _mm256_loadu_ps(sp)));
            }
        }
        for (int part = 0; part < 2; part++) /* the tokens before a, then those from b */
            for (uint32_t t = part ? b : 0; t < (part ? n : a); t++) {
                const float c = (float)kv_code_at(col, bits, first + t);
                for (int k = 0; k < n_q; k++) {
                    float *sp = scores + (size_t)k * ld + t;
                    *sp = fmaf(qd[(size_t)k * D + i], c, *sp);
                }
            }
    }
}
#define KV_PICK(f, ...) (kv_simd() ? f##_avx2(__VA_ARGS__) : f##_ref(__VA_ARGS__))
#else
#define KV_PICK(f, ...) f##_ref(__VA_ARGS__)
#endif

static void cvt_f16(const uint16_t *s, float *d, uint32_t n) { KV_PICK(cvt_f16, s, d, n); }
static void cvt_e4m3(const uint8_t *s, float k, float *d, uint32_t n) { KV_PICK(cvt_e4m3, s, k, d, n); }
static void cvt_e5m2(const uint8_t *s, float *d, uint32_t n) { KV_PICK(cvt_e5m2, s, d, n); }
static void kivi_decode(const uint8_t *c, uint32_t bits, uint64_t first, uint32_t n, float d, float m, float *o)
{
    KV_PICK(kivi_decode, c, bits, first, n, d, m, o);
}
static float dot(const float *a, const float *b, uint32_t n) { return KV_PICK(dot, a, b, n); }

/* The reference of kivi_k_acc_avx2: channel by channel, token by token. */
static void kivi_k_acc_ref(const uint8_t *col0, uint64_t cb, uint32_t D, uint32_t bits, uint32_t first, uint32_t n,
                           const float *qd, int n_q, float *scores, size_t ld)
{
    for (uint32_t i = 0; i < D; i++)
        for (uint32_t t = 0; t < n; t++) {
            const float c = (float)kv_code_at(col0 + i * cb, bits, first + t);
            for (int k = 0; k < n_q; k++) scores[(size_t)k * ld + t] += qd[(size_t)k * D + i] * c;
        }
}

static void kivi_k_acc(const uint8_t *col0, uint64_t cb, uint32_t D, uint32_t bits, uint32_t first, uint32_t n,
                       const float *qd, int n_q, float *scores, size_t ld)
{
    KV_PICK(kivi_k_acc, col0, cb, D, bits, first, n, qd, n_q, scores, ld);
}
static void axpy(float *y, float a, const float *x, uint32_t n) { KV_PICK(axpy, y, a, x, n); }

/* ---------------------------------------------------------------- stage */

uint64_t kv_stage_bytes(const kv_geom *g)
{
    const kv_shape *s = &g->s;
    const uint64_t b = kv_dtype_stage_bytes(s->dtype, s->n_layers, s->n_kv_heads, s->head_dim, s->block_size);
    return s->kind == KV_KIND_LATENT ? b / 2 : b;
}

int kv_stage_init(kv_stage *st, const kv_geom *g)
{
    const kv_shape *s = &g->s;
    kv_stage t = {.n_layers = s->n_layers, .block_size = s->block_size, .planes = s->kind == KV_KIND_LATENT ? 1 : 2,
                  .kv_dim = g->kv_dim};
    if (kv_dtype_staged(s->dtype)) {
        t.bytes = kv_stage_bytes(g);
        if (t.bytes == 0 || t.bytes > SIZE_MAX)
            return err_set(PL_ERANGE, "KV stage: %u layers x %u tokens x %llu overflows", s->n_layers,
                           s->block_size, (unsigned long long)g->kv_dim);
        t.rows = mem_alloc_aligned((size_t)t.bytes, 64);
        if (!t.rows) return err_prefix(PL_ENOMEM, "KV stage of %llu bytes", (unsigned long long)t.bytes);
    }
    *st = t;
    return 0;
}

void kv_stage_free(kv_stage *st)
{
    if (!st) return;
    mem_free(st->rows);
    memset(st, 0, sizeof *st);
}

void kv_stage_copy(kv_stage *dst, const kv_stage *src)
{
    assert(dst->bytes == src->bytes && dst->kv_dim == src->kv_dim && dst->block_size == src->block_size);
    if (src->bytes) memcpy(dst->rows, src->rows, (size_t)src->bytes);
}

/* --------------------------------------------------------- writing rows */

/* ------------------------------------------------------ fp8_e4m3 seal */

/* Element i of a head's rows: f16 stage rows or f32 rows (one of the two). */
static inline float e4m3_src(const uint16_t *h16, const float *f32, uint64_t i)
{
    return h16 ? f16_to_f32(h16[i]) : f32[i];
}

/* The scale search measures, for a candidate s, sum (y - e4m3(y))^2 over
 * y = |x| / s of a head's elements, in f32, in 8 lanes (element i goes to
 * lane i % 8, the lanes are added in one fixed order), so that the
 * reference and the AVX2 loop give the same bits and pick the same scale.
 * e4m3(y) for 0 <= y (<= 448 x (1 + 2^-23): s >= amax / 448) is rounding to
 * the grid step of y's binade, 2^(e - 3) (2^-9 below 2^-6: subnormals),
 * nearest-even: y x 2^(3 - e) is exact, rint rounds it, and the product
 * by the step is exact; saturated at 448. Equal to kv_e4m3_to_f32(
 * kv_e4m3_from_f32(y)) there (tests/test_kv_codec.c checks the seal). */
#define E4M3_SEARCH_CHUNK 512 /* floats of a head's elements searched at a time (stack buffer) */

static inline float e4m3_grid_ref(float y)
{
    const uint32_t b = half_bits_f32(y), e = b & 0x7F800000u;
    const bool sub = b < 0x3C800000u; /* y < 2^-6 */
    const float inv = sub ? 512.0f : half_f32_bits((257u << 23) - e), step = sub ? 0x1p-9f : half_f32_bits(e - (3u << 23));
    const float r = rintf(y * inv) * step;
    return r < 448.0f ? r : 448.0f;
}

static void e4m3_sse_ref(const float *x, uint32_t n, float s, float acc[8])
{
    for (uint32_t i = 0; i < n; i++) {
        const float y = fabsf(x[i]) / s, d = y - e4m3_grid_ref(y);
        acc[i % 8] = acc[i % 8] + d * d;
    }
}

#if KV_X86
KA static void e4m3_sse_avx2(const float *x, uint32_t n, float s, float acc[8])
{
    const __m256 vs = _mm256_set1_ps(s), absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256i expm = _mm256_set1_epi32(0x7F800000), minnorm = _mm256_set1_epi32(0x3C800000 - 1);
    const __m256i k257 = _mm256_set1_epi32((int)(257u << 23)), k3 = _mm256_set1_epi32(3 << 23);
    const __m256 sub_inv = _mm256_set1_ps(512.0f), sub_step = _mm256_set1_ps(0x1p-9f), vmax = _mm256_set1_ps(448.0f);
    __m256 va = _mm256_loadu_ps(acc);
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 y = _mm256_div_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), absm), vs);
        const __m256i b = _mm256_castps_si256(y), e = _mm256_and_si256(b, expm);
        const __m256 norm = _mm256_castsi256_ps(_mm256_cmpgt_epi32(b, minnorm)); /* y >= 2^-6 */
        const __m256 inv = _mm256_blendv_ps(sub_inv, _mm256_castsi256_ps(_mm256_sub_epi32(k257, e)), norm);
        const __m256 step = _mm256_blendv_ps(sub_step, _mm256_castsi256_ps(_mm256_sub_epi32(e, k3)), norm);
        __m256 r = _mm256_mul_ps(_mm256_round_ps(_mm256_mul_ps(y, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                                 step);
        r = _mm256_min_ps(r, vmax);
        const __m256 d = _mm256_sub_ps(y, r);
        va = _mm256_add_ps(va, _mm256_mul_ps(d, d));
    }
    _mm256_storeu_ps(acc, va);
    e4m3_sse_ref(x + i, n - i, s, acc); /* i % 8 == 0: the tail keeps its lanes */
}
#endif

static void e4m3_sse(const float *x, uint32_t n, float s, float acc[8]) { KV_PICK(e4m3_sse, x, n, s, acc); }

/* Encodes one plane of a full block: T rows of C = H x D elements (row t,
 * element c at src[t * C + c]) into T e4m3 rows of `stride` bytes and the
 * per-head f32 scales of the tail. Per head: amax over the block's finite
 * values; the scale is the candidate s_k = amax / 448 x 2^(k / 16), k = 0
 * .. 16, with the least squared error over the block (first on ties, so
 * amax / 448 -- the largest value exact -- wins when nothing is better);
 * see kv_codec.h. Deterministic: the same rows give the same bytes on
 * either variant. */
static void e4m3_seal_plane(uint8_t *plane, uint64_t stride, const uint16_t *h16, const float *f32, uint32_t T,
                            uint32_t H, uint32_t D)
{
    const uint64_t C = (uint64_t)H * D, n = (uint64_t)T * D;
    uint8_t *tail = plane + stride * T;
    float buf[E4M3_SEARCH_CHUNK];
    for (uint32_t h = 0; h < H; h++) {
        float amax = 0;
        for (uint32_t t = 0; t < T; t++)
            for (uint32_t i = 0; i < D; i++) {
                const float a = fabsf(e4m3_src(h16, f32, t * C + (uint64_t)h * D + i));
                if (a > amax && a <= FLT_MAX) amax = a;
            }
        float s = 0;
        if (amax > 0) {
            float cand[KV_E4M3_SCALE_STEPS + 1], acc[KV_E4M3_SCALE_STEPS + 1][8];
            for (int k = 0; k <= KV_E4M3_SCALE_STEPS; k++) {
                cand[k] = amax / KV_E4M3_MAX * exp2f((float)k / KV_E4M3_SCALE_STEPS);
                memset(acc[k], 0, sizeof acc[k]);
            }
            /* the head's elements in order (row t, dim i), a chunk at a time */
            uint32_t t = 0, i = 0;
            for (uint64_t j0 = 0; j0 < n; j0 += E4M3_SEARCH_CHUNK) {
                const uint32_t m = (uint32_t)(n - j0 < E4M3_SEARCH_CHUNK ? n - j0 : E4M3_SEARCH_CHUNK);
                for (uint32_t j = 0; j < m; j++) {
                    const float x = e4m3_src(h16, f32, (uint64_t)t * C + (uint64_t)h * D + i);
                    buf[j] = isfinite(x) ? x : 0.0f;
                    if (++i == D) i = 0, t++;
                }
                for (int k = 0; k <= KV_E4M3_SCALE_STEPS; k++)
                    if (cand[k] >= FLT_MIN) e4m3_sse(buf, m, cand[k], acc[k]);
            }
            double best = INFINITY;
            for (int k = 0; k <= KV_E4M3_SCALE_STEPS; k++) {
                if (!(cand[k] >= FLT_MIN)) continue; /* tiny amax: keep 1 / s finite */
                const float *a = acc[k];
                const float sum = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
                const double e = (double)sum * cand[k] * cand[k]; /* back to units of x */
                if (e < best) best = e, s = cand[k];
            }
            if (s == 0) s = FLT_MIN;
        }
        memcpy(tail + 4 * h, &s, 4);
        for (uint32_t t = 0; t < T; t++) {
            uint8_t *q = plane + t * stride + (uint64_t)h * D;
            for (uint32_t i = 0; i < D; i++) {
                const float x = e4m3_src(h16, f32, t * C + (uint64_t)h * D + i);
                /* s = 0: only zeros (and non-finite values, which keep their class) */
                q[i] = kv_e4m3_from_f32(s > 0 ? x / s : isfinite(x) ? x * 0.0f : x);
            }
        }
    }
}

void kv_codec_e4m3_seal_f16(uint8_t *plane, uint64_t stride, const uint16_t *rows, uint32_t T, uint32_t H, uint32_t D)
{
    e4m3_seal_plane(plane, stride, rows, NULL, T, H, D);
}

void kv_codec_reseal_plane(kv_pool *pool, uint32_t b, uint32_t layer, kv_plane p, const float *rows)
{
    const kv_geom *g = &pool->g;
    assert(g->s.dtype == KV_FP8_E4M3);
    e4m3_seal_plane(kv_block_plane(pool, b, layer, p), g->row_bytes[p], NULL, rows, g->s.block_size, g->s.n_kv_heads,
                    g->s.head_dim);
}

void kv_codec_write_row(kv_pool *pool, uint32_t b, uint32_t layer, kv_plane p, uint32_t slot, const float *row)
{
    const kv_geom *g = &pool->g;
    assert(!kv_dtype_staged(g->s.dtype) && slot < g->s.block_size);
    uint8_t *dst = kv_block_plane(pool, b, layer, p) + (uint64_t)slot * g->row_bytes[p];
    const int64_t n = (int64_t)g->kv_dim;
    if (kv_plane_cols(pool, p)) { /* f16 columns: element c at stride T */
        assert(g->s.dtype == KV_F16);
        uint16_t *col = (uint16_t *)kv_block_plane(pool, b, layer, p) + slot;
        for (int64_t c = 0; c < n; c++) col[(uint64_t)c * g->s.block_size] = f32_to_f16(row[c]);
        return;
    }
    if (kv_plane_heads(pool, p)) { /* f16 rows grouped by head: head h's slice at (h T + slot) */
        assert(g->s.dtype == KV_F16);
        const uint64_t D = g->s.head_dim;
        uint16_t *base = (uint16_t *)kv_block_plane(pool, b, layer, p);
        for (uint64_t h = 0; h < g->s.n_kv_heads; h++)
            quant_f16_quantize_row(row + h * D, base + (h * g->s.block_size + slot) * D, (int64_t)D);
        return;
    }
    switch (g->s.dtype) {
    case KV_F32: memcpy(dst, row, (size_t)n * sizeof(float)); break;
    case KV_F16: quant_f16_quantize_row(row, (uint16_t *)dst, n); break;
    case KV_BF16: quant_bf16_quantize_row(row, (uint16_t *)dst, n); break;
    case KV_Q8_0: quant_q8_0_quantize_row(row, (block_q8_0 *)dst, n); break;
    /* ggml's reference rounding, as llama.cpp's cache (and kv_writer.c) do */
    case KV_Q4_0: quant_q4_0_quantize_row_ref(row, (block_q4_0 *)dst, n); break;
    case KV_FP8_E5M2:
        for (int64_t i = 0; i < n; i++) dst[i] = kv_e5m2_from_f32(row[i]);
        break;
    default: assert(!"kv_codec_write_row: staged dtype"); break;
    }
}

/* ------------------------------------------------------------------ KIVI */

#define KIVI_G 32 /* values: elements per group along the KV row */

static inline uint32_t kivi_bits(kv_dtype t) { return kv_dtype_get(t)->plane[KV_PLANE_K].bits; }
static inline uint64_t kivi_col_bytes(uint32_t T, uint32_t bits) { return ((uint64_t)T * bits + 7) / 8; }
static inline uint64_t kivi_group_bytes(uint32_t bits) { return 4 + KIVI_G * bits / 8; }

static inline float ld_f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return f16_to_f32(h);
}

static inline void st_f16(uint8_t *p, uint16_t h) { memcpy(p, &h, 2); }

/* Quantizes n staged halves x[0], x[stride], ... into LSB-first packed
 * codes (zeroed first) with d = f16((max - min) / L), m = f16(min). NaN
 * inputs are left out of min/max and get code 0. */
static void kivi_quant(const uint16_t *x, uint64_t stride, uint32_t n, uint32_t bits, uint8_t *codes,
                       uint16_t *dh, uint16_t *mh)
{
    const float L = (float)((1u << bits) - 1);
    float mn = INFINITY, mx = -INFINITY;
    for (uint32_t t = 0; t < n; t++) {
        float v = f16_to_f32(x[t * stride]);
        if (v < mn) mn = v;
        if (v > mx) mx = v;
    }
    if (!(mn <= mx)) mn = mx = 0; /* all NaN */
    /* Staged values are halves, so m = min exactly; d rounds (to nearest). */
    *mh = f32_to_f16(mn);
    *dh = f32_to_f16((mx - mn) / L);
    const float m = f16_to_f32(*mh), d = f16_to_f32(*dh), id = d > 0 ? 1.0f / d : 0.0f;
    memset(codes, 0, (size_t)kivi_col_bytes(n, bits));
    for (uint32_t t = 0; t < n; t++) {
        float q = (f16_to_f32(x[t * stride]) - m) * id;
        q = q > 0 ? q : 0; /* also NaN -> 0 */
        q = q < L ? q : L;
        const uint64_t bit = (uint64_t)t * bits;
        codes[bit >> 3] |= (uint8_t)(quant_round_nearest(q) << (bit & 7));
    }
}

void kv_codec_f16_row(const float *row, uint16_t *dst, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        float x = row[i];
        x = x > 65504.0f ? 65504.0f : x < -65504.0f ? -65504.0f : x; /* saturate; NaN passes */
        dst[i] = f32_to_f16(x);
    }
}

void kv_codec_stage_row(kv_stage *st, uint32_t layer, kv_plane p, uint32_t slot, const float *row)
{
    assert(slot < st->block_size);
    kv_codec_f16_row(row, kv_stage_plane(st, layer, p) + (uint64_t)slot * st->kv_dim, st->kv_dim);
}

/* K plane: | col 0 .. col C-1 | d[C] | m[C] |, one column per channel. */
static void kivi_seal_k(uint8_t *plane, const uint16_t *rows, uint32_t T, uint64_t C, uint32_t bits)
{
    const uint64_t cb = kivi_col_bytes(T, bits);
    uint8_t *dp = plane + C * cb, *mp = dp + 2 * C;
    for (uint64_t c = 0; c < C; c++) {
        uint16_t dh, mh;
        kivi_quant(rows + c, C, T, bits, plane + c * cb, &dh, &mh);
        st_f16(dp + 2 * c, dh);
        st_f16(mp + 2 * c, mh);
    }
}

/* V plane: rows of groups | d | m | 32 codes |. */
static void kivi_seal_v(uint8_t *plane, const uint16_t *rows, uint32_t T, uint64_t C, uint32_t bits)
{
    const uint64_t gb = kivi_group_bytes(bits);
    for (uint32_t t = 0; t < T; t++)
        for (uint64_t g = 0; g < C / KIVI_G; g++) {
            uint8_t *grp = plane + (t * (C / KIVI_G) + g) * gb;
            uint16_t dh, mh;
            kivi_quant(rows + t * C + g * KIVI_G, 1, KIVI_G, bits, grp + 4, &dh, &mh);
            st_f16(grp, dh);
            st_f16(grp + 2, mh);
        }
}

void kv_codec_seal_rows(kv_pool *pool, uint32_t b, uint32_t layer, const uint16_t *k_rows, const uint16_t *v_rows)
{
    const kv_geom *g = &pool->g;
    assert(kv_dtype_staged(g->s.dtype));
    if (g->s.dtype == KV_FP8_E4M3) {
        e4m3_seal_plane(kv_block_k(pool, b, layer), g->row_bytes[0], k_rows, NULL, g->s.block_size, g->s.n_kv_heads,
                        g->s.head_dim);
        e4m3_seal_plane(kv_block_v(pool, b, layer), g->row_bytes[1], v_rows, NULL, g->s.block_size, g->s.n_kv_heads,
                        g->s.head_dim);
        return;
    }
    const uint32_t bits = kivi_bits(g->s.dtype);
    kivi_seal_k(kv_block_k(pool, b, layer), k_rows, g->s.block_size, g->kv_dim, bits);
    kivi_seal_v(kv_block_v(pool, b, layer), v_rows, g->s.block_size, g->kv_dim, bits);
}

void kv_codec_seal(kv_pool *pool, uint32_t b, uint32_t layer, const kv_stage *st)
{
    assert(st->kv_dim == pool->g.kv_dim && st->block_size == pool->g.s.block_size);
    kv_codec_seal_rows(pool, b, layer, kv_stage_plane(st, layer, KV_PLANE_K), kv_stage_plane(st, layer, KV_PLANE_V));
}

void kv_codec_put(kv_pool *pool, kv_stage *st, uint32_t b, uint32_t layer, uint32_t slot, const float *k,
                  const float *v)
{
    if (!kv_dtype_staged(pool->g.s.dtype)) {
        kv_codec_write_row(pool, b, layer, KV_PLANE_K, slot, k);
        kv_codec_write_row(pool, b, layer, KV_PLANE_V, slot, v);
        return;
    }
    kv_codec_stage_row(st, layer, KV_PLANE_K, slot, k);
    kv_codec_stage_row(st, layer, KV_PLANE_V, slot, v);
    if (slot + 1 == pool->g.s.block_size) kv_codec_seal(pool, b, layer, st);
}

void kv_codec_unseal(const kv_pool *pool, uint32_t b, kv_stage *st)
{
    const kv_geom *g = &pool->g;
    const uint32_t T = g->s.block_size;
    const uint64_t C = g->kv_dim;
    assert(kv_dtype_staged(g->s.dtype) && st->kv_dim == C && st->block_size == T);
    for (uint32_t l = 0; l < g->s.n_layers; l++) {
        const kv_block_ref r = kv_codec_ref(pool, b, l);
        uint16_t *k = kv_stage_plane(st, l, KV_PLANE_K), *v = kv_stage_plane(st, l, KV_PLANE_V);
        if (g->s.dtype == KV_FP8_E4M3) { /* rows: decode each head's slice, round to the stage's f16 */
            float x[64];
            for (int p = 0; p < 2; p++)
                for (uint32_t t = 0; t < T; t++)
                    for (uint32_t h = 0; h < g->s.n_kv_heads; h++)
                        for (uint32_t i0 = 0; i0 < g->s.head_dim; i0 += 64) {
                            const uint32_t n = g->s.head_dim - i0 < 64 ? g->s.head_dim - i0 : 64;
                            float s;
                            memcpy(&s, r.plane[p] + r.row_bytes[p] * T + 4 * h, 4);
                            const uint8_t *q = r.plane[p] + t * r.row_bytes[p] + (uint64_t)h * g->s.head_dim + i0;
                            for (uint32_t i = 0; i < n; i++) x[i] = kv_e4m3_to_f32(q[i]) * s;
                            kv_codec_f16_row(x, (p ? v : k) + t * C + (uint64_t)h * g->s.head_dim + i0, n);
                        }
            continue;
        }
        float d, m;
        for (uint64_t c = 0; c < C; c++) {
            kv_codec_kivi_k_param(&r, c, &d, &m);
            for (uint32_t t = 0; t < T; t++) k[t * C + c] = f32_to_f16(m + d * (float)kv_codec_kivi_k_code(&r, c, t));
        }
        for (uint32_t t = 0; t < T; t++)
            for (uint64_t c = 0; c < C; c++) {
                if (c % KIVI_G == 0) kv_codec_kivi_v_param(&r, t, c / KIVI_G, &d, &m);
                v[t * C + c] = f32_to_f16(m + d * (float)kv_codec_kivi_v_code(&r, t, c));
            }
    }
}

/* ----------------------------------------------------------------- refs */

kv_block_ref kv_codec_ref(const kv_pool *pool, uint32_t b, uint32_t layer)
{
    const kv_geom *g = &pool->g;
    return (kv_block_ref){
        .dtype = g->s.dtype,
        .plane = {kv_block_k(pool, b, layer), kv_block_v(pool, b, layer)},
        .row_bytes = {g->row_bytes[0], g->row_bytes[1]},
        .block_size = g->s.block_size,
        .n_kv_heads = g->s.n_kv_heads,
        .head_dim = g->s.head_dim,
        .k_cols = kv_plane_cols(pool, KV_PLANE_K),
        .v_heads = kv_plane_heads(pool, KV_PLANE_V),
    };
}

kv_block_ref kv_codec_ref_stage(const kv_pool *pool, const kv_stage *st, uint32_t layer)
{
    const kv_geom *g = &pool->g;
    assert(st && st->rows && st->kv_dim == g->kv_dim);
    return (kv_block_ref){
        .dtype = KV_F16,
        .plane = {(const uint8_t *)kv_stage_plane(st, layer, KV_PLANE_K),
                  (const uint8_t *)kv_stage_plane(st, layer, KV_PLANE_V)},
        .row_bytes = {g->kv_dim * 2, g->kv_dim * 2},
        .block_size = g->s.block_size,
        .n_kv_heads = g->s.n_kv_heads,
        .head_dim = g->s.head_dim,
    };
}

kv_block_ref kv_codec_ref_seq(const kv_pool *pool, const kv_stage *st, const uint32_t *table, uint32_t n_tokens,
                              uint32_t i, uint32_t layer)
{
    const uint32_t T = pool->g.s.block_size;
    assert(n_tokens > 0 && i <= (n_tokens - 1) / T);
    if (kv_dtype_staged(pool->g.s.dtype) && i == n_tokens / T) return kv_codec_ref_stage(pool, st, layer);
    return kv_codec_ref(pool, table[i], layer);
}

/* -------------------------------------------------------------- reading */

size_t kv_codec_scratch_floats(uint32_t head_dim, uint32_t block_size, int n_q)
{
    return ((size_t)n_q + 2) * head_dim + (size_t)n_q + block_size + 64;
}

/* Head h of row t of a ROWS plane of groups of 32 (q8_0, q4_0): dequantizes
 * the whole groups that cover the head (through span when the head does not
 * start and end on group edges). span: D + 64 floats. */
static void ggml_head(uint32_t type, const uint8_t *row, uint64_t gb, uint32_t h, uint32_t D, float *out,
                      float *span)
{
    const uint64_t e0 = (uint64_t)h * D, g0 = e0 / 32, g1 = (e0 + D + 31) / 32;
    if (e0 % 32 == 0 && D % 32 == 0) {
        quant_dequant_row(type, row + g0 * gb, out, D);
        return;
    }
    quant_dequant_row(type, row + g0 * gb, span, (int64_t)((g1 - g0) * 32));
    memcpy(out, span + (e0 - g0 * 32), D * sizeof(float));
}

/* KIVI values: head h of row t (groups of 32 may cross head edges). */
static void kivi_v_head(const kv_block_ref *r, uint32_t t, uint32_t h, float *out)
{
    const uint32_t bits = kivi_bits(r->dtype), D = r->head_dim;
    const uint64_t gb = kivi_group_bytes(bits), e0 = (uint64_t)h * D;
    const uint8_t *row = r->plane[KV_PLANE_V] + t * r->row_bytes[KV_PLANE_V];
    for (uint64_t e = e0; e < e0 + D;) {
        const uint64_t g = e / KIVI_G, end = (g + 1) * KIVI_G < e0 + D ? (g + 1) * KIVI_G : e0 + D;
        const uint8_t *grp = row + g * gb;
        kivi_decode(grp + 4, bits, e - g * KIVI_G, (uint32_t)(end - e), ld_f16(grp), ld_f16(grp + 2), out + (e - e0));
        e = end;
    }
}

/* One head's slice of token t of plane p, any dtype except KIVI keys.
 * span: D + 64 floats (q8_0/q4_0 heads off group edges). */
static void row_head(const kv_block_ref *r, kv_plane p, uint32_t h, uint32_t t, float *out, float *span)
{
    const uint32_t D = r->head_dim;
    if (p == KV_PLANE_K && r->k_cols) { /* f16 columns: element i at stride T */
        const uint16_t *c = (const uint16_t *)r->plane[p] + (uint64_t)h * D * r->block_size + t;
        for (uint32_t i = 0; i < D; i++) out[i] = f16_to_f32(c[(uint64_t)i * r->block_size]);
        return;
    }
    if (p == KV_PLANE_V && r->v_heads) { /* f16 rows grouped by head */
        cvt_f16((const uint16_t *)r->plane[p] + ((uint64_t)h * r->block_size + t) * D, out, D);
        return;
    }
    const uint8_t *row = r->plane[p] + t * r->row_bytes[p];
    const uint64_t e0 = (uint64_t)h * D;
    switch (r->dtype) {
    case KV_F32: memcpy(out, row + e0 * 4, D * sizeof(float)); break;
    case KV_F16: cvt_f16((const uint16_t *)row + e0, out, D); break;
    case KV_BF16: quant_bf16_dequant_row((const uint16_t *)row + e0, out, D); break;
    case KV_Q8_0: ggml_head(DT_Q8_0, row, sizeof(block_q8_0), h, D, out, span); break;
    case KV_Q4_0: ggml_head(DT_Q4_0, row, sizeof(block_q4_0), h, D, out, span); break;
    case KV_FP8_E4M3: {
        float s;
        memcpy(&s, r->plane[p] + r->row_bytes[p] * r->block_size + 4 * h, 4);
        cvt_e4m3(row + e0, s, out, D);
        break;
    }
    case KV_FP8_E5M2: cvt_e5m2(row + e0, out, D); break;
    case KV_INT4:
    case KV_INT2: assert(p == KV_PLANE_V); kivi_v_head(r, t, h, out); break;
    default: assert(!"row_head: dtype"); break;
    }
}

static bool kivi_k(const kv_block_ref *r, kv_plane p)
{
    return p == KV_PLANE_K && (r->dtype == KV_INT4 || r->dtype == KV_INT2);
}

/* KIVI keys: channel c's column, its d and m. */
static const uint8_t *kivi_col(const kv_block_ref *r, uint64_t c, float *d, float *m)
{
    const uint64_t C = (uint64_t)r->n_kv_heads * r->head_dim, cb = kivi_col_bytes(r->block_size, kivi_bits(r->dtype));
    const uint8_t *plane = r->plane[KV_PLANE_K];
    *d = ld_f16(plane + C * cb + 2 * c);
    *m = ld_f16(plane + C * cb + 2 * C + 2 * c);
    return plane + c * cb;
}

void kv_codec_dequant_kt(const kv_block_ref *r, kv_plane p, uint32_t head, uint32_t first, uint32_t n, float *out,
                         float *scratch)
{
    const uint32_t D = r->head_dim;
    assert(head < r->n_kv_heads && first + n <= r->block_size);
    if (kivi_k(r, p)) { /* one contiguous run per channel */
        const uint32_t bits = kivi_bits(r->dtype);
        for (uint32_t i = 0; i < D; i++) {
            float d, m;
            const uint8_t *col = kivi_col(r, (uint64_t)head * D + i, &d, &m);
            kivi_decode(col, bits, first, n, d, m, out + (size_t)i * n);
        }
        return;
    }
    for (uint32_t t = 0; t < n; t++) {
        row_head(r, p, head, first + t, scratch, scratch + D);
        for (uint32_t i = 0; i < D; i++) out[(size_t)i * n + t] = scratch[i];
    }
}

void kv_codec_dequant(const kv_block_ref *r, kv_plane p, uint32_t head, uint32_t first, uint32_t n, float *out,
                      float *scratch)
{
    const uint32_t D = r->head_dim;
    assert(head < r->n_kv_heads && first + n <= r->block_size);
    if (kivi_k(r, p)) { /* columns -> rows, through a small tile of the scratch */
        const uint32_t bits = kivi_bits(r->dtype);
        for (uint32_t i = 0; i < D; i++) {
            float d, m;
            const uint8_t *col = kivi_col(r, (uint64_t)head * D + i, &d, &m);
            for (uint32_t t0 = 0; t0 < n; t0 += 64) {
                const uint32_t k = n - t0 < 64 ? n - t0 : 64;
                kivi_decode(col, bits, first + t0, k, d, m, scratch);
                for (uint32_t t = 0; t < k; t++) out[(size_t)(t0 + t) * D + i] = scratch[t];
            }
        }
        return;
    }
    for (uint32_t t = 0; t < n; t++) row_head(r, p, head, first + t, out + (size_t)t * D, scratch);
}

/* q . k for KIVI keys without expanding K:
 *   q . k_t = sum_i q_i (m_i + d_i c_it) = sum_i q_i m_i + sum_i (q_i d_i) c_it,
 * accumulated over channels, each a contiguous run of codes. */
static void kivi_k_dot(const kv_block_ref *r, uint32_t head, uint32_t first, uint32_t n, const float *const *q,
                       int n_q, float *scores, size_t ld, float *scratch)
{
    const uint32_t D = r->head_dim, bits = kivi_bits(r->dtype);
    float *qd = scratch, *bias = qd + (size_t)n_q * D;
    for (int k = 0; k < n_q; k++) {
        bias[k] = 0;
        memset(scores + (size_t)k * ld, 0, n * sizeof(float));
    }
    for (uint32_t i = 0; i < D; i++) {
        float d, m;
        kivi_col(r, (uint64_t)head * D + i, &d, &m);
        for (int k = 0; k < n_q; k++) {
            qd[(size_t)k * D + i] = q[k][i] * d;
            bias[k] += q[k][i] * m;
        }
    }
    float d, m;
    kivi_k_acc(kivi_col(r, (uint64_t)head * D, &d, &m), kivi_col_bytes(r->block_size, bits), D, bits, first, n, qd,
               n_q, scores, ld);
    for (int k = 0; k < n_q; k++)
        for (uint32_t t = 0; t < n; t++) scores[(size_t)k * ld + t] += bias[k];
}

void kv_codec_k_dot(const kv_block_ref *r, uint32_t head, uint32_t first, uint32_t n, const float *const *q,
                    int n_q, float *scores, size_t ld, float *scratch)
{
    const uint32_t D = r->head_dim;
    assert(head < r->n_kv_heads && first + n <= r->block_size && n_q >= 1);
    if (kivi_k(r, KV_PLANE_K)) {
        kivi_k_dot(r, head, first, n, q, n_q, scores, ld, scratch);
        return;
    }
    for (uint32_t t = 0; t < n; t++) {
        row_head(r, KV_PLANE_K, head, first + t, scratch, scratch + D);
        for (int k = 0; k < n_q; k++) scores[(size_t)k * ld + t] = dot(q[k], scratch, D);
    }
}

void kv_codec_v_axpy(const kv_block_ref *r, uint32_t head, uint32_t first, uint32_t n, const float *w, size_t ldw,
                     int n_q, float *const *acc, float *scratch)
{
    const uint32_t D = r->head_dim;
    assert(head < r->n_kv_heads && first + n <= r->block_size && n_q >= 1);
    for (uint32_t t = 0; t < n; t++) {
        row_head(r, KV_PLANE_V, head, first + t, scratch, scratch + D);
        for (int k = 0; k < n_q; k++) axpy(acc[k], w[(size_t)k * ldw + t], scratch, D);
    }
}

/* ------------------------------------------------------------ inspection */

float kv_codec_e4m3_scale(const kv_pool *pool, uint32_t b, uint32_t layer, kv_plane p, uint32_t head)
{
    assert(pool->g.s.dtype == KV_FP8_E4M3 && head < pool->g.s.n_kv_heads);
    float s;
    memcpy(&s, kv_block_tail(pool, b, layer, p) + 4 * head, 4);
    return s;
}

void kv_codec_kivi_k_param(const kv_block_ref *r, uint64_t c, float *d, float *m)
{
    assert(kivi_k(r, KV_PLANE_K) && c < (uint64_t)r->n_kv_heads * r->head_dim);
    kivi_col(r, c, d, m);
}

uint32_t kv_codec_kivi_k_code(const kv_block_ref *r, uint64_t c, uint32_t t)
{
    float d, m;
    assert(t < r->block_size);
    return kv_code_at(kivi_col(r, c, &d, &m), kivi_bits(r->dtype), t);
}

static const uint8_t *kivi_group(const kv_block_ref *r, uint32_t t, uint64_t g)
{
    assert(kivi_k(r, KV_PLANE_K) && t < r->block_size && g < (uint64_t)r->n_kv_heads * r->head_dim / KIVI_G);
    return r->plane[KV_PLANE_V] + t * r->row_bytes[KV_PLANE_V] + g * kivi_group_bytes(kivi_bits(r->dtype));
}

void kv_codec_kivi_v_param(const kv_block_ref *r, uint32_t t, uint64_t g, float *d, float *m)
{
    const uint8_t *grp = kivi_group(r, t, g);
    *d = ld_f16(grp);
    *m = ld_f16(grp + 2);
}

uint32_t kv_codec_kivi_v_code(const kv_block_ref *r, uint32_t t, uint64_t e)
{
    return kv_code_at(kivi_group(r, t, e / KIVI_G) + 4, kivi_bits(r->dtype), e % KIVI_G);
}
