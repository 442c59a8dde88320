/* test_kernels.c - the numeric kernels against their reference and against
 * plain math.
 *
 * - Every SIMD variant's GEMM tiles and activation conversions vs the
 *   reference (conversions byte for byte; dots within 2e-6 of sum |w*x|, the
 *   scale of the rounding error, since the integer sums are exact and only
 *   the float accumulation order differs; see TOL_SIMD_VS_REF).
 * - The reference matmul vs a naive double computation from dequantized
 *   weights and dequantized converted activations.
 * - Every SIMD variant's decode dot tiles (nx <= KERN_DOT_NX_MAX) vs the
 *   reference, same tolerance; one PASS line per variant and weight type,
 *   the block formats also on extreme blocks, NEON's tiles of those and
 *   every variant's TQ1_0 tiles bit for bit; every variant has tiles of
 *   its own for every block format.
 * - Threaded matmul equals single-threaded bit for bit; within each of
 *   matmul's two paths rows are batch-invariant bit for bit (m <= 4: the
 *   decode dot tiles; m = 5..33: the GEMM), and the two paths agree within
 *   rounding (every weight type).
 * - rope, rmsnorm, softmax, swiglu at hand-computed values.
 * - When the llama.cpp peer is built (tests/peer.sh), our dots vs ggml's own
 *   vec_dot on the same bytes (the oracle: logits must agree with llama.cpp).
 *
 * Operands: tests/mm_data.h (shared with the matmul micro-benchmarks,
 * bench/micro/bench_matmul*.c, which time these kernels).
 */
#include "test.h"
#include "kern_variants.h"
#include "mm_data.h"
#include "rng.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

#include "base/threadpool.h"
#include "kernels/kern_impl.h"
#include "kernels/kernels.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "tensor/half.h"
#include "tensor/quant.h"

/* ------------------------------------------------------------ test cases */

/* One matmul problem with everything the checks need. */
typedef struct {
    uint32_t wtype;
    int dt, m, n_in, n_out;
    uint8_t *w;
    size_t w_row;
    float *x;     /* [m][n_in] */
    uint8_t *xa;  /* [m][x_row]: x converted by the reference */
    size_t x_row;
    float *wd;    /* dequantized weights [n_out][n_in] */
    float *xd;    /* dequantized converted activations [m][n_in] */
} mm_case;

/* xa, wd and xd from w and x (again after a test rewrote them). */
static void case_derive(mm_case *c)
{
    const int m = c->m, n_in = c->n_in, n_out = c->n_out;
    for (int j = 0; j < n_out; j++)
        quant_dequant_row(c->wtype, c->w + (size_t)j * c->w_row, c->wd + (size_t)j * n_in, n_in);
    for (int i = 0; i < m; i++) {
        uint8_t *xr = c->xa + (size_t)i * c->x_row;
        if (c->dt == DT_F32) memcpy(xr, c->x + (size_t)i * n_in, c->x_row);
        else kern_vt_ref.conv[c->dt](xr, c->x + (size_t)i * n_in, n_in);
        quant_dequant_row((uint32_t)c->dt, xr, c->xd + (size_t)i * n_in, n_in);
    }
}

static void case_make(mm_case *c, uint32_t wtype, int m, int n_in, int n_out, uint64_t seed)
{
    rng_seed(seed);
    c->wtype = wtype;
    c->dt = kern_dot_type(wtype);
    c->m = m, c->n_in = n_in, c->n_out = n_out;
    c->w = mm_weights_make(wtype, n_out, n_in);
    c->w_row = dtype_row_bytes(wtype, (uint64_t)n_in);
    c->x = mm_acts_make(m, n_in);
    c->x_row = dtype_row_bytes((uint32_t)c->dt, (uint64_t)n_in);
    c->xa = malloc(c->x_row * (size_t)m);
    c->wd = malloc(sizeof(float) * (size_t)n_out * (size_t)n_in);
    c->xd = malloc(sizeof(float) * (size_t)m * (size_t)n_in);
    case_derive(c);
}

/* The activations as tile g takes them: c->xa, or, for a tile with a form
 * of its own (kern_gemm.xconv), c->x converted by it into *own (the caller
 * frees it); *x_row: the row stride. */
static const uint8_t *case_gemm_x(const mm_case *c, const kern_gemm *g, size_t *x_row, uint8_t **own)
{
    *own = NULL;
    *x_row = c->x_row;
    if (!g->xconv) return c->xa;
    *x_row = (size_t)c->n_in * (size_t)g->x_elem;
    *own = malloc(*x_row * (size_t)c->m);
    for (int i = 0; i < c->m; i++) g->xconv(*own + (size_t)i * *x_row, c->x + (size_t)i * c->n_in, c->n_in);
    return *own;
}

static void case_free(mm_case *c)
{
    free(c->w);
    free(c->x);
    free(c->xa);
    free(c->wd);
    free(c->xd);
}

/* Exact-ish dot of dequantized values, and the error scale sum |w*x|.
 * Q8_1 activations (of Q4_1/Q5_1): a block's min term is m * s, with s the
 * block's stored f16 d*sum(q) (what ggml multiplies), not the sum of the
 * dequantized values. */
static double case_naive(const mm_case *c, int i, int j, double *mag)
{
    const float *w = c->wd + (size_t)j * c->n_in, *x = c->xd + (size_t)i * c->n_in;
    double s = 0.0, a = 0.0;
    if (c->dt == DT_Q8_1) {
        const block_q8_1 *xb = (const block_q8_1 *)(c->xa + (size_t)i * c->x_row);
        const uint8_t *wr = c->w + (size_t)j * c->w_row;
        const size_t bs = dtype_get(c->wtype)->type_size;
        for (int b = 0; b < c->n_in / 32; b++) {
            uint16_t mh;
            memcpy(&mh, wr + (size_t)b * bs + 2, 2); /* Q4_1 and Q5_1: m follows d */
            const double m = f16_to_f32(mh);
            for (int k = 32 * b; k < 32 * b + 32; k++) {
                s += ((double)w[k] - m) * x[k];
                a += fabs((double)w[k] * x[k]);
            }
            s += m * f16_to_f32(xb[b].s);
        }
        *mag = a;
        return s;
    }
    for (int k = 0; k < c->n_in; k++) {
        s += (double)w[k] * x[k];
        a += fabs((double)w[k] * x[k]);
    }
    *mag = a;
    return s;
}

static const uint32_t mm_types[] = {DT_F32,     DT_F16,    DT_BF16,  DT_Q8_0,    DT_Q4_0,  DT_Q4_K,  DT_Q6_K,
                                    DT_Q4_1,    DT_Q5_0,   DT_Q5_1,  DT_Q2_K,    DT_Q3_K,  DT_Q5_K,  DT_IQ4_NL,
                                    DT_IQ4_XS,  DT_TQ1_0,  DT_TQ2_0, DT_IQ2_XXS, DT_IQ2_XS, DT_IQ2_S, DT_IQ3_XXS,
                                    DT_IQ3_S,   DT_IQ1_S,  DT_IQ1_M};
#define N_MM_TYPES (int)(sizeof mm_types / sizeof mm_types[0])

/* Tolerances, as a fraction of sum |w*x| (the natural scale of rounding
 * error: relative error of the result itself is unbounded under
 * cancellation). Measured on this data: SIMD vs ref <= 5e-8 for every type
 * (float lanes vs double, or a different float order of exact block sums);
 * ref vs naive <= 1e-8 for float types (double sums: one final rounding)
 * and <= 3e-8 for the block types (float sums over blocks). */
#define TOL_SIMD_VS_REF 2e-6
static double tol_ref_vs_naive(uint32_t t) { return dtype_get(t)->blck_size == 1 ? 1e-7 : 1e-6; }

/* The SIMD variants this CPU can run (the reference is not one of them). */
static int simd_variants(const kern_vtable **out) { return kern_simd_variants(out); }

/* ------------------------------------------------------------ dispatch */

/* The CPU family of an AMD x86 CPU from /proc/cpuinfo (not CPUID, as
 * kern_init reads it), 0 for any other vendor or architecture (an arm64
 * build under qemu-user reads the host's /proc/cpuinfo, which may say AMD). */
static int amd_family(void)
{
#if defined(__x86_64__) || defined(__i386__)
    FILE *f = fopen("/proc/cpuinfo", "r");
#else
    FILE *f = NULL;
#endif
    bool amd = false;
    int family = 0;
    for (char line[256]; f && fgets(line, sizeof line, f);) {
        if (!strncmp(line, "vendor_id", 9)) amd = strstr(line, "AuthenticAMD") != NULL;
        if (!strncmp(line, "cpu family", 10) && strchr(line, ':')) {
            family = atoi(strchr(line, ':') + 1);
            break; /* after vendor_id in the first processor's lines */
        }
    }
    if (f) fclose(f);
    return amd ? family : 0;
}

/* kern_init picks the best variant the CPU has, and PAGELLM_KERNELS caps
 * it (then kern_init(0) again restores the default for the other tests). */
TEST(dispatch_picks_best_variant_and_env_caps_it)
{
    const unsigned x512 = kern_cpu_has_avx2() ? kern_cpu_avx512() : 0;
    const char *best = kern_vt_neon()                  ? kern_vt_neon()->name
                       : x512 & KERN_X512_BASE         ? kern_vt_avx512(x512)->name
                       : kern_cpu_has_avx2()           ? "avx2"
                                                       : "ref";
    unsetenv("PAGELLM_KERNELS");
    kern_init(0);
    CHECK_STR(kern_variant(), best);
    setenv("PAGELLM_KERNELS", "ref", 1);
    kern_init(0);
    CHECK_STR(kern_variant(), "ref");
    if (kern_cpu_has_avx2()) {
        setenv("PAGELLM_KERNELS", "avx2", 1);
        kern_init(0);
        CHECK_STR(kern_variant(), "avx2");
        /* the cap keeps every entry of the AVX2 table */
        CHECK(kern_vt.packed[DT_Q4_0].gemm == kern_vt_avx2()->packed[DT_Q4_0].gemm);
    }
    setenv("PAGELLM_KERNELS", "avx512", 1);
    kern_init(0);
    CHECK_STR(kern_variant(), best);
    if (x512 & KERN_X512_BASE) { /* the Q8_0/Q4_0 pair tile: off on Zen 4 (family 25), on elsewhere */
        const int fam = amd_family(), gw = fam && fam < 26 ? 1 : 2;
        CHECK_EQ_INT(kern_vt.packed[DT_Q4_0].gw, gw);
        CHECK_EQ_INT(kern_vt.packed[DT_Q8_0].gw, gw);
    }
    kern_init(1); /* force_ref wins over the environment */
    CHECK_STR(kern_variant(), "ref");
    unsetenv("PAGELLM_KERNELS");
    kern_init(0);
    CHECK_STR(kern_variant(), best);
}

/* The decode stream's prefetch distance (kern_impl.h): none on x86 AMD
 * before Zen 5, 16 KiB from Zen 5 on (every tile), else
 * KERN_PF_STREAM_BYTES, PAGELLM_PREFETCH over it; the vendor is read here
 * from /proc/cpuinfo, not CPUID as kern_init does. A distance changes no
 * value: the f16, bf16, q6_K and packed q4_0 decode rows are the same bits
 * with and without it. */
TEST(stream_prefetch_follows_cpu_and_env)
{
    const int family = amd_family(), amd = family > 0;
    /* Zen 5 is family 26 */
    const int cpu = amd ? (family >= 26 ? 16384 : 0) : KERN_PF_STREAM_BYTES;
    static const struct { const char *env; int want; } cases[] = {
        {NULL, -1}, {"auto", -1}, {"none", 0}, {"0", 0}, {"4096", 4096}, {"65536", 65536},
        {"65537", -1}, {"-1", -1}, {"4k", -1}, {"", -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].env) setenv("PAGELLM_PREFETCH", cases[i].env, 1);
        else unsetenv("PAGELLM_PREFETCH");
        kern_init(0);
        CHECK_EQ_INT(kern_pf_stream, cases[i].want < 0 ? cpu : cases[i].want);
    }
    /* the decode tiles that prefetch: f16 rows and packed, bf16, q6_K, packed q4_0 */
    static const uint32_t types[] = {DT_F16, DT_BF16, DT_Q6_K, DT_Q4_0, DT_F16};
    const int n_in = 2048, n_out = 64;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t t = types[ti];
        uint8_t *w = mm_weights_make(t, n_out, n_in);
        float *x = mm_acts_make(1, n_in), *y[2];
        const bool packable = (t == DT_Q4_0 || ti == 4) && kern_pack_supports(t, n_in);
        const size_t pb = packable ? kern_pack_bytes(t, n_in, n_out) : 0;
        uint8_t *packed = packable ? aligned_alloc(64, (pb + 63) / 64 * 64) : NULL;
        if (packable) kern_pack(packed, w, t, n_in, n_out);
        const kern_mat m = {packable ? NULL : w, packed, t, n_in, n_out};
        const kern_mat *mp = &m;
        for (int k = 0; k < 2; k++) {
            setenv("PAGELLM_PREFETCH", k ? "8192" : "none", 1);
            kern_init(0);
            y[k] = malloc(sizeof(float) * n_out);
            kern_matmul_mats(1, &y[k], x, &mp, 1, NULL);
        }
        CHECK(memcmp(y[0], y[1], sizeof(float) * n_out) == 0);
        free(y[0]), free(y[1]), free(x), free(w), free(packed);
    }
    unsetenv("PAGELLM_PREFETCH");
    kern_init(0);
}

/* ------------------------------------------------- dots and conversions */

/* The block formats beside Q8_0/Q4_0/Q4_K/Q6_K for which every SIMD
 * variant has GEMM and decode dot tiles of its own. */
static const uint32_t block_formats[] = {DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_IQ4_NL, DT_Q2_K,
                                         DT_Q3_K, DT_Q5_K, DT_IQ4_XS, DT_TQ2_0, DT_TQ1_0};
#define N_BLOCK_FORMATS (int)(sizeof block_formats / sizeof block_formats[0])

TEST(simd_variants_cover_block_formats)
{
    const kern_vtable *vs[4] = {0};
    const int nv = simd_variants(vs);
    for (int v = 0; v < nv; v++)
        for (int i = 0; i < N_BLOCK_FORMATS; i++) {
            const uint32_t t = block_formats[i];
            CHECK_MSG(vs[v]->gemm[t].fn && vs[v]->dot[t], "%s has no %s of its own for %s", vs[v]->name,
                      vs[v]->gemm[t].fn ? "decode dot" : "GEMM tile", dtype_get(t)->name);
        }
    /* the AVX-512 table itself, not only as stacked over AVX2 */
    const unsigned x512 = kern_cpu_has_avx2() ? kern_cpu_avx512() : 0;
    const kern_vtable *own = kern_vt_avx512(x512);
    for (int i = 0; own && i < N_BLOCK_FORMATS; i++) {
        const uint32_t t = block_formats[i];
        CHECK_MSG(own->gemm[t].fn && own->dot[t] && own->gemm[t].fn != kern_vt_avx2()->gemm[t].fn,
                  "%s inherits AVX2's tiles of %s", own->name, dtype_get(t)->name);
    }
}

/* Whether variant v's tiles of type t give the reference's bits: the NEON
 * tiles of the block formats (kern_neon_quants.c) and every variant's
 * TQ1_0 and lattice i-quant tiles (kern_avx2_tq1.c, kern_avx512_tq1.c,
 * kern_avx2_lattice.c). */
static bool tiles_exact(const kern_vtable *v, uint32_t t)
{
    if (t == DT_TQ1_0 || quant_is_lattice(t)) return true;
    if (v != kern_vt_neon()) return false;
    for (int i = 0; i < N_BLOCK_FORMATS; i++)
        if (block_formats[i] == t) return true;
    return false;
}

/* Rewrites a block format's case into extreme blocks against activations
 * of +-1 (quantized to +-127): pattern 1 every weight byte 0xFF (the
 * largest levels, scale codes and mins), 2 every byte 0, 3 each byte 0 or
 * 0xFF at random; activations all +1 (1, 2) or -1 (pattern 3: each at
 * random), so the integer sums reach their bounds. d, m, dmin stay small
 * and finite. */
static void case_extreme(mm_case *c, int pat)
{
    const size_t bs = dtype_get(c->wtype)->type_size, nb = c->w_row / bs * (size_t)c->n_out;
    size_t d_at = 0, m_at = 0; /* m_at 0: none */
    switch (c->wtype) {
    case DT_Q4_1: m_at = offsetof(block_q4_1, m); break;
    case DT_Q5_1: m_at = offsetof(block_q5_1, m); break;
    case DT_Q2_K: d_at = offsetof(block_q2_K, d), m_at = offsetof(block_q2_K, dmin); break;
    case DT_Q3_K: d_at = offsetof(block_q3_K, d); break;
    case DT_Q5_K: m_at = offsetof(block_q5_K, dmin); break;
    case DT_TQ2_0: d_at = offsetof(block_tq2_0, d); break;
    case DT_TQ1_0: d_at = offsetof(block_tq1_0, d); break;
    default: break; /* Q5_0, IQ4_NL, IQ4_XS: d first */
    }
    for (size_t b = 0; b < nb; b++) {
        uint8_t *blk = c->w + b * bs;
        for (size_t k = 0; k < bs; k++) blk[k] = pat == 1 ? 0xFF : pat == 2 ? 0x00 : (rng_u32() & 1) ? 0xFF : 0x00;
        const uint16_t d = f32_to_f16(0.001f * (float)(1 + b % 7)), m = f32_to_f16(0.002f * (float)(1 + b % 3));
        if (c->wtype == DT_IQ1_M) {
            mm_iq1_m_set_d((block_iq1_m *)blk, d);
            continue;
        }
        memcpy(blk + d_at, &d, 2);
        if (m_at) memcpy(blk + m_at, &m, 2);
    }
    for (int k = 0; k < c->m * c->n_in; k++) c->x[k] = pat == 3 && (rng_u32() & 1) ? -1.0f : 1.0f;
    case_derive(c);
}

/* Variant v's GEMM tiles (every shape up to KERN_NW_MAX x KERN_NX_MAX) and
 * decode dot tiles on case c against the reference tile: within
 * TOL_SIMD_VS_REF of sum |w*x|, or equal where tiles_exact. Returns false
 * with the first difference in why. */
static bool tiles_match_ref(const kern_vtable *v, mm_case *c, const char *what, char *why, size_t why_size)
{
    const uint32_t t = c->wtype;
    const double tol = tiles_exact(v, t) ? 0.0 : TOL_SIMD_VS_REF;
    size_t gx_row;
    uint8_t *gx_own;
    const uint8_t *gx = case_gemm_x(c, &v->gemm[t], &gx_row, &gx_own);
    bool ok = true;
    for (int nx = 1; ok && nx <= KERN_NX_MAX; nx++)
        for (int nw = 1; ok && nw <= KERN_NW_MAX; nw++) {
            float sr[KERN_NX_MAX][KERN_NW_MAX], sv[KERN_NX_MAX][KERN_NW_MAX];
            kern_vt_ref.gemm[t].fn(c->n_in, &sr[0][0], KERN_NW_MAX, c->w, c->w_row, nw, c->xa, c->x_row, nx);
            v->gemm[t].fn(c->n_in, &sv[0][0], KERN_NW_MAX, c->w, c->w_row, nw, gx, gx_row, nx);
            for (int r = 0; ok && r < nx; r++)
                for (int j = 0; ok && j < nw; j++) {
                    double mag;
                    case_naive(c, r, j, &mag);
                    if (!(fabs((double)sv[r][j] - sr[r][j]) <= tol * mag + (tol ? 1e-30 : 0.0))) {
                        snprintf(why, why_size, "%s %s %s n=%d tile %dx%d row %d col %d: %.9g vs ref %.9g (|wx| %.3g)",
                                 v->name, dtype_get(t)->name, what, c->n_in, nw, nx, r, j, sv[r][j], sr[r][j], mag);
                        ok = false;
                    }
                }
        }
    for (int nx = 1; ok && v->dot[t] && nx <= KERN_DOT_NX_MAX; nx++)
        for (int j = 0; ok && j < KERN_NW_MAX; j++) {
            float sr[KERN_DOT_NX_MAX], sv[KERN_DOT_NX_MAX];
            const uint8_t *wj = c->w + (size_t)j * c->w_row;
            kern_vt_ref.gemm[t].fn(c->n_in, sr, 1, wj, c->w_row, 1, c->xa, c->x_row, nx);
            v->dot[t](c->n_in, sv, 1, wj, c->xa, c->x_row, nx);
            for (int r = 0; ok && r < nx; r++) {
                double mag;
                case_naive(c, r, j, &mag);
                if (!(fabs((double)sv[r] - sr[r]) <= tol * mag + (tol ? 1e-30 : 0.0))) {
                    snprintf(why, why_size, "%s %s %s n=%d decode dot nx=%d row %d col %d: %.9g vs ref %.9g (|wx| %.3g)",
                             v->name, dtype_get(t)->name, what, c->n_in, nx, r, j, sv[r], sr[r], mag);
                    ok = false;
                }
            }
        }
    free(gx_own);
    return ok;
}

/* The (variant, weight type) simd_dots_match_ref checks, one PASS line each. */
static const kern_vtable *dots_variant;
static uint32_t dots_type;

/* dots_variant's tiles of dots_type vs the reference on random operands of
 * several lengths, and for the block formats on extreme blocks too. */
TEST(simd_dots_match_ref)
{
    const kern_vtable *v = dots_variant;
    const uint32_t t = dots_type;
    static const int n_small[] = {32, 96, 256, 288, 4096};
    static const int n_k[] = {256, 512, 4096};
    static const int n_float[] = {1, 7, 33, 256, 259, 4096};
    const int blk = (int)dtype_get(t)->blck_size;
    const int *ns = blk == 1 ? n_float : blk == 32 ? n_small : n_k;
    const int nn = blk == 1 ? 6 : blk == 32 ? 5 : 3;
    bool is_block_format = false;
    for (int i = 0; i < N_BLOCK_FORMATS; i++) is_block_format |= block_formats[i] == t;
    is_block_format |= quant_is_lattice(t);
    char why[400] = "";
    for (int q = 0; q < nn && !why[0]; q++)
        for (int pat = 0; pat < (is_block_format ? 4 : 1) && !why[0]; pat++) {
            mm_case c;
            case_make(&c, t, KERN_NX_MAX, ns[q], KERN_NW_MAX, 100 + (uint64_t)q);
            if (pat) case_extreme(&c, pat);
            char what[32];
            snprintf(what, sizeof what, pat ? "extreme pattern %d" : "random", pat);
            tiles_match_ref(v, &c, what, why, sizeof why);
            case_free(&c);
        }
    CHECK_MSG(!why[0], "%s", why);
}

/* The AVX-512 F32/F16 GEMM tiles (16 lanes, another order than AVX2's 8:
 * simd_dots_match_ref checks them against the reference) keep kern_impl.h's
 * invariant: an element is the same bits on every tile shape, tails
 * included (n = 33, 259), as from the 1 x 1 tile; and the F16 tile's own
 * activation form (kern_gemm.xconv) holds the values of conv[DT_F16], bit
 * for bit. */
TEST(avx512_float_gemm_tile_invariant)
{
    const unsigned x512 = kern_cpu_has_avx2() ? kern_cpu_avx512() : 0;
    const kern_vtable *vs[2] = {kern_vt_avx512(x512 & ~(unsigned)KERN_X512_BF16), kern_vt_avx512(x512)};
    if (!vs[0]) return;
    static const uint32_t ts[] = {DT_F32, DT_F16};
    static const int ns[] = {33, 259, 4096};
    for (int v = 0; v < 2; v++)
        for (int ti = 0; ti < 2; ti++)
            for (int q = 0; q < 3 && vs[v]->gemm[ts[ti]].fn; q++) {
                const uint32_t t = ts[ti];
                const kern_gemm *g = &vs[v]->gemm[t];
                const int n = ns[q];
                mm_case c;
                case_make(&c, t, KERN_NX_MAX, n, KERN_NW_MAX, 300 + (uint64_t)q);
                size_t gx_row;
                uint8_t *gx_own;
                const uint8_t *gx = case_gemm_x(&c, g, &gx_row, &gx_own);
                if (gx_own) /* the f32 form's values: the f16 conversion's, widened */
                    CHECK(memcmp(gx, c.xd, sizeof(float) * (size_t)c.m * (size_t)n) == 0);
                float one[KERN_NX_MAX][KERN_NW_MAX];
                for (int r = 0; r < KERN_NX_MAX; r++)
                    for (int j = 0; j < KERN_NW_MAX; j++)
                        g->fn(n, &one[r][j], 1, c.w + (size_t)j * c.w_row, c.w_row, 1, gx + (size_t)r * gx_row, gx_row, 1);
                for (int nx = 1; nx <= KERN_NX_MAX; nx++)
                    for (int nw = 1; nw <= KERN_NW_MAX; nw++) {
                        float sv[KERN_NX_MAX][KERN_NW_MAX];
                        g->fn(n, &sv[0][0], KERN_NW_MAX, c.w, c.w_row, nw, gx, gx_row, nx);
                        for (int r = 0; r < nx; r++)
                            for (int j = 0; j < nw; j++)
                                CHECK_MSG(memcmp(&one[r][j], &sv[r][j], sizeof(float)) == 0,
                                          "%s %s n=%d tile %dx%d [%d][%d]: %.9g vs 1x1 %.9g", vs[v]->name,
                                          dtype_get(t)->name, n, nw, nx, r, j, sv[r][j], one[r][j]);
                    }
                free(gx_own);
                case_free(&c);
            }
}

/* Rows that exercise the rounding rules of the activation quantizers. */
static void fill_special_rows(float *x, int n, int which)
{
    for (int k = 0; k < n; k++) x[k] = rng_gauss() * 3.0f;
    switch (which) {
    case 1: /* ties: amax 127 gives Q8_0 scale 1, so x.5 must round away from zero */
        for (int k = 0; k < n; k++) x[k] = (float)((int)(rng_u32() % 254) - 127) + 0.5f;
        for (int k = 0; k < n; k += 32) x[k] = 127.0f;
        break;
    case 2: /* Q8_K: max -127 gives iscale 1, ties must go to even */
        for (int k = 0; k < n; k++) x[k] = (float)((int)(rng_u32() % 252) - 126) + 0.5f;
        for (int k = 0; k < n; k += 256) x[k + 5] = -127.0f;
        break;
    case 3: /* equal magnitudes of both signs: the first one sets the sign of d */
        for (int k = 0; k < n; k += 256) { x[k + 7] = -50.0f; x[k + 9] = 50.0f; }
        for (int k = 0; k < n; k += 32) x[k + 1] = (k / 32) % 2 ? 50.0f : -50.0f;
        break;
    case 4: /* zeros and tiny values */
        for (int k = 0; k < n; k++) x[k] = k < 256 ? 0.0f : rng_sym() * 1e-30f;
        break;
    case 5: /* bf16 ties (low 16 bits exactly half way), inf */
        for (int k = 0; k < n; k++) {
            uint32_t u = (rng_u32() & 0xBFFF0000u) | 0x8000u; /* exponent below inf */
            memcpy(&x[k], &u, 4);
        }
        x[3] = INFINITY, x[4] = -INFINITY;
        break;
    case 6: /* NaNs whose payload sits in the low bits only (bf16 must stay NaN) */
        for (int k = 0; k < n; k += 3) {
            uint32_t u = 0x7F800000u | (rng_u32() & 0xFFFFu) | 1u | (k & 4 ? 0x80000000u : 0);
            memcpy(&x[k], &u, 4);
        }
        break;
    }
}

TEST(simd_conversions_bit_exact)
{
    const kern_vtable *vs[4] = {0};
    const int nv = simd_variants(vs);
    float x[1024];
    static uint8_t a[2048 * 2], b[2048 * 2];
    static const int dts[] = {DT_F16, DT_BF16, DT_Q8_0, DT_Q8_K, DT_Q8_1};
    rng_seed(7);
    for (int v = 0; v < nv; v++)
        for (int which = 0; which < 14; which++)
            for (int d = 0; d < 5; d++) {
                /* rows of 1024, then of 29 Q8_0 blocks (not a multiple of the 8 blocks AVX2 converts at once) */
                const int n = which < 7 ? 1024 : 928;
                if (!vs[v]->conv[dts[d]] || (n % 256 && dts[d] == DT_Q8_K)) continue;
                const bool q8 = dts[d] == DT_Q8_0 || dts[d] == DT_Q8_K || dts[d] == DT_Q8_1;
                if (which % 7 == 5 && q8) continue; /* finite input only */
                if (which % 7 == 6 && dts[d] != DT_BF16) continue; /* f16 NaN payloads may differ */
                fill_special_rows(x, n, which % 7);
                const size_t bytes = dtype_row_bytes((uint32_t)dts[d], (uint64_t)n);
                memset(a, 0, bytes);
                memset(b, 0xAB, bytes);
                if (q8) quant_quantize_row((uint32_t)dts[d], x, a, n);
                else kern_vt_ref.conv[dts[d]](a, x, n);
                vs[v]->conv[dts[d]](b, x, n);
                for (size_t k = 0; k < bytes; k++)
                    CHECK_MSG(a[k] == b[k], "%s conv to %s, row kind %d: byte %zu: %d vs ref %d", vs[v]->name,
                              dtype_get((uint32_t)dts[d])->name, which, k, b[k], a[k]);
            }
}

TEST(f16_rows_bit_exact)
{
    const kern_vtable *vs[4] = {0};
    const int nv = simd_variants(vs);
    static float f[65536], g[65536];
    static uint16_t h[65536], h2[65536];
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    kern_init(0);
    kern_f16_to_f32_row(f, h, 65536 - 3); /* odd length: SIMD body and scalar tail */
    for (int i = 0; i < 65536 - 3; i++) {
        const float want = f16_to_f32(h[i]);
        if (isnan(want)) CHECK_MSG(isnan(f[i]), "f16 %04x: NaN expected", i);
        else CHECK_MSG(memcmp(&want, &f[i], 4) == 0, "f16 %04x: %g vs %g", i, f[i], want);
    }
    /* f32 -> f16: every f16 value, the midpoints between neighbours (ties),
     * and values around them. */
    rng_seed(11);
    for (int i = 0; i < 65536; i++) {
        const float a = f16_to_f32((uint16_t)i), b = f16_to_f32((uint16_t)(i + 1));
        g[i] = (i & 3) == 0 ? a : (i & 3) == 1 ? (a + b) * 0.5f : (i & 3) == 2 ? a * (1 + 1e-4f * rng_sym()) : rng_gauss() * 1e5f;
    }
    g[0] = INFINITY, g[1] = -INFINITY, g[2] = 65520.0f, g[3] = 1e-8f, g[4] = -0.0f;
    for (int v = 0; v <= nv; v++) {
        void (*fn)(uint16_t *, const float *, int) = v < nv ? vs[v]->f32_to_f16 : kern_f32_to_f16_row;
        if (!fn) continue;
        fn(h2, g, 65536 - 5);
        for (int i = 0; i < 65536 - 5; i++) {
            const uint16_t want = f32_to_f16(g[i]);
            if (isnan(g[i])) CHECK_MSG((h2[i] & 0x7C00) == 0x7C00 && (h2[i] & 0x3FF), "NaN lost at %d", i);
            else CHECK_MSG(h2[i] == want, "f32 %.9g -> f16 %04x, want %04x", g[i], h2[i], want);
        }
    }
}

/* -------------------------------------------------------------- matmul */

static int check_vs_naive(const mm_case *c, const float *y, double rel, char *why, size_t wn)
{
    for (int i = 0; i < c->m; i++)
        for (int j = 0; j < c->n_out; j++) {
            double mag;
            const double want = case_naive(c, i, j, &mag);
            const double got = y[(size_t)i * c->n_out + j];
            if (!(fabs(got - want) <= rel * mag + 1e-30)) {
                snprintf(why, wn, "%s m=%d n_in=%d n_out=%d: y[%d][%d] = %.9g, naive %.9g (|wx| %.3g)",
                         dtype_get(c->wtype)->name, c->m, c->n_in, c->n_out, i, j, got, want, mag);
                return 0;
            }
        }
    return 1;
}

TEST(ref_matmul_matches_naive)
{
    static const int ms[] = {1, 7};
    static const int n_ins[] = {256, 512};
    kern_init(1);
    CHECK_STR(kern_variant(), "ref");
    for (int ti = 0; ti < N_MM_TYPES; ti++)
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++) {
                mm_case c;
                char why[256] = "";
                case_make(&c, mm_types[ti], ms[a], n_ins[b], 33, 1000 + (uint64_t)(ti * 4 + a * 2 + b));
                float *y = malloc(sizeof(float) * (size_t)c.m * (size_t)c.n_out);
                kern_matmul(y, c.x, c.w, c.wtype, c.m, c.n_in, c.n_out, NULL);
                int ok = check_vs_naive(&c, y, tol_ref_vs_naive(c.wtype), why, sizeof why);
                free(y);
                case_free(&c);
                CHECK_MSG(ok, "%s", why);
            }
    kern_init(0);
}

TEST(simd_matmul_matches_ref)
{
    static const int shapes[][3] = {{1, 256, 33}, {7, 512, 33}, {64, 256, 17}, {5, 4096, 9}};
    for (int ti = 0; ti < N_MM_TYPES; ti++)
        for (int s = 0; s < 4; s++) {
            mm_case c;
            case_make(&c, mm_types[ti], shapes[s][0], shapes[s][1], shapes[s][2], 2000 + (uint64_t)s);
            const size_t ny = (size_t)c.m * (size_t)c.n_out;
            float *yr = malloc(sizeof(float) * ny), *yv = malloc(sizeof(float) * ny);
            kern_init(1);
            kern_matmul(yr, c.x, c.w, c.wtype, c.m, c.n_in, c.n_out, NULL);
            kern_init(0);
            kern_matmul(yv, c.x, c.w, c.wtype, c.m, c.n_in, c.n_out, NULL);
            char why[256] = "";
            for (int i = 0; i < c.m && !why[0]; i++)
                for (int j = 0; j < c.n_out; j++) {
                    double mag;
                    case_naive(&c, i, j, &mag);
                    const size_t k = (size_t)i * c.n_out + j;
                    if (!(fabs((double)yv[k] - yr[k]) <= TOL_SIMD_VS_REF * mag + 1e-30)) {
                        snprintf(why, sizeof why, "%s %s m=%d n_in=%d: y[%d][%d] %.9g vs ref %.9g (|wx| %.3g)",
                                 kern_variant(), dtype_get(c.wtype)->name, c.m, c.n_in, i, j, yv[k], yr[k], mag);
                        break;
                    }
                }
            free(yr);
            free(yv);
            case_free(&c);
            CHECK_MSG(!why[0], "%s", why);
        }
}

TEST(threaded_matmul_equals_single)
{
    /* 40 threads: more than kern_matmul gives runs of their own (its
     * shared-counter path); 2 and 3: runs of chunks, stolen at the end */
    threadpool *tp2 = tp_new(2), *tp3 = tp_new(3), *tp40 = tp_new(40);
    CHECK(tp2 && tp3 && tp40);
    char why[256] = "";
    for (int force_ref = 0; force_ref < 2 && !why[0]; force_ref++) {
        kern_init(force_ref);
        for (int ti = 0; ti < N_MM_TYPES && !why[0]; ti++) {
            mm_case c;
            case_make(&c, mm_types[ti], 7, 512, 129, 3000 + (uint64_t)ti);
            const size_t ny = (size_t)c.m * (size_t)c.n_out;
            float *y1 = malloc(sizeof(float) * ny), *y2 = malloc(sizeof(float) * ny), *y3 = malloc(sizeof(float) * ny);
            float *y4 = malloc(sizeof(float) * ny);
            for (size_t k = 0; k < ny; k++) y2[k] = y3[k] = y4[k] = NAN; /* every element must be written */
            kern_matmul(y1, c.x, c.w, c.wtype, c.m, c.n_in, c.n_out, NULL);
            kern_matmul(y2, c.x, c.w, c.wtype, c.m, c.n_in, c.n_out, tp2);
            kern_matmul(y3, c.x, c.w, c.wtype, c.m, c.n_in, c.n_out, tp3);
            kern_matmul(y4, c.x, c.w, c.wtype, c.m, c.n_in, c.n_out, tp40);
            if (memcmp(y1, y2, ny * 4) || memcmp(y1, y3, ny * 4) || memcmp(y1, y4, ny * 4))
                snprintf(why, sizeof why, "%s %s: threaded result differs", kern_variant(), dtype_get(c.wtype)->name);
            free(y1);
            free(y2);
            free(y3);
            free(y4);
            case_free(&c);
        }
    }
    kern_init(0);
    tp_free(tp2);
    tp_free(tp3);
    tp_free(tp40);
    CHECK_MSG(!why[0], "%s", why);
}

/* kern_matmul's two paths (kern_matmul.c) and their invariants. For every
 * weight type, m in 1..33 and several n_out (odd ones: edge tiles, partial
 * packed groups), single-threaded and on 2 threads:
 * - m <= KERN_DOT_MAX_M (decode dot tiles): every row equals, bit for bit,
 *   the same row computed alone (m = 1);
 * - m > KERN_DOT_MAX_M (GEMM): every row equals, bit for bit, the same row
 *   of the full 33-row product: THE INVARIANT of kern_impl.h (the K-quants
 *   and IQ4_XS with kern_kgemm: below its min_m, of the widest product
 *   below it);
 * - the GEMM agrees with the reference within the SIMD tolerance (exactly
 *   for Q8_0/Q4_0 with packed tiles and the K-quants and IQ4_XS with
 *   kern_kgemm tiles: their SIMD paths perform the reference's own float
 *   operations), and so does the decode path; a type without decode dot
 *   tiles takes the GEMM for every m, so its two results are equal. */
TEST(gemm_bit_identical_to_single_rows)
{
    static const int n_outs[] = {1, 7, 33, 77};
    threadpool *tp2 = tp_new(2);
    CHECK(tp2 != NULL);
    char why[320] = "";
    kern_init(0);
    for (int ti = 0; ti < N_MM_TYPES && !why[0]; ti++) {
        const uint32_t t = mm_types[ti];
        const int blk = (int)dtype_get(t)->blck_size;
        const int n_in = blk == 1 ? 259 : blk == 32 ? 288 : 512;
        for (int oi = 0; oi < 4 && !why[0]; oi++) {
            const int n_out = n_outs[oi], M = 33;
            _Static_assert(KERN_KPACK_MIN_M <= 33, "the 33-row product reaches kern_kgemm (most types)");
            mm_case c;
            case_make(&c, t, M, n_in, n_out, 5000 + (uint64_t)(ti * 8 + oi));
            const size_t ny = (size_t)M * n_out;
            float *one = malloc(sizeof(float) * ny), *big = malloc(sizeof(float) * ny);
            float *ref = malloc(sizeof(float) * ny);
            float *y = malloc(sizeof(float) * ny), *y2 = malloc(sizeof(float) * ny);
            for (int i = 0; i < M; i++)
                kern_matmul(one + (size_t)i * n_out, c.x + (size_t)i * n_in, c.w, t, 1, n_in, n_out, NULL);
            kern_matmul(big, c.x, c.w, t, M, n_in, n_out, NULL);
            kern_init(1);
            kern_matmul(ref, c.x, c.w, t, M, n_in, n_out, NULL);
            kern_init(0);
            const bool has_dot = kern_vt.dot[t] != NULL;
            for (int k = 0; k < (int)ny && !why[0]; k++) {
                double mag;
                case_naive(&c, k / n_out, k % n_out, &mag);
                const double tol = TOL_SIMD_VS_REF * mag + 1e-30;
                /* the packed GEMMs perform the reference's own float operations */
                const bool exact = ((t == DT_Q8_0 || t == DT_Q4_0) && kern_vt.packed[t].gemm) ||
                                   (kern_vt.kgemm[t].gemm && M >= kern_vt.kgemm[t].min_m);
                const double tol_gemm = exact ? 0.0 : tol;
                const char *what = NULL;
                double a = 0, b = 0;
                if (!(fabs((double)big[k] - ref[k]) <= tol_gemm)) what = "GEMM vs ref", a = big[k], b = ref[k];
                else if (!(fabs((double)one[k] - ref[k]) <= tol)) what = "decode vs ref", a = one[k], b = ref[k];
                else if (!(fabs((double)one[k] - big[k]) <= (has_dot ? tol : 0.0)))
                    what = "decode vs GEMM", a = one[k], b = big[k];
                if (what)
                    snprintf(why, sizeof why, "%s %s n_out=%d: y[%d][%d] %s: %.9g vs %.9g (|wx| %.3g)", kern_variant(),
                             dtype_get(t)->name, n_out, k / n_out, k % n_out, what, a, b, mag);
            }
            /* the K-quants and IQ4_XS with kern_kgemm: the GEMM tiles below
             * KERN_KPACK_MIN_M rows, a band of its own (its widest product) */
            const bool banded = kern_vt.kgemm[t].gemm && kern_kpack_layout(t);
            const int kmin = banded ? kern_vt.kgemm[t].min_m : 0, mid_m = kmin - 1 < M ? kmin - 1 : M;
            float *mid = malloc(sizeof(float) * ny);
            if (banded) {
                kern_matmul(mid, c.x, c.w, t, mid_m, n_in, n_out, NULL);
                for (int k = 0; k < mid_m * n_out && !why[0]; k++) {
                    double mag;
                    case_naive(&c, k / n_out, k % n_out, &mag);
                    if (!(fabs((double)mid[k] - ref[k]) <= TOL_SIMD_VS_REF * mag + 1e-30))
                        snprintf(why, sizeof why, "%s %s n_out=%d: y[%d][%d] GEMM tiles vs ref: %.9g vs %.9g", kern_variant(),
                                 dtype_get(t)->name, n_out, k / n_out, k % n_out, mid[k], ref[k]);
                }
            }
            for (int m = 1; m <= M && !why[0]; m++) {
                const size_t nm = (size_t)m * n_out;
                const float *want = m <= KERN_DOT_MAX_M ? one : banded && m < kmin ? mid : big;
                for (size_t k = 0; k < nm; k++) y[k] = y2[k] = NAN;
                kern_matmul(y, c.x, c.w, t, m, n_in, n_out, NULL);
                kern_matmul(y2, c.x, c.w, t, m, n_in, n_out, tp2);
                for (size_t k = 0; k < nm && !why[0]; k++)
                    if (memcmp(&y[k], &want[k], 4) != 0 || memcmp(&y2[k], &want[k], 4) != 0)
                        snprintf(why, sizeof why,
                                 "%s %s m=%d n_out=%d: y[%zu][%zu] = %.9g (2 threads %.9g), %s %.9g: not batch-invariant",
                                 kern_variant(), dtype_get(t)->name, m, n_out, k / n_out, k % n_out, y[k], y2[k],
                                 m <= KERN_DOT_MAX_M ? "alone" : "in the band's widest product", want[k]);
            }
            free(mid);
            free(one);
            free(big);
            free(ref);
            free(y);
            free(y2);
            case_free(&c);
        }
    }
    tp_free(tp2);
    CHECK_MSG(!why[0], "%s", why);
}

/* TQ1_0's tiles perform the reference's own operations on every table
 * (kern_avx2_tq1.c, kern_avx512_tq1.c, kern_neon_quants.c): kern_matmul
 * gives the reference's bits through both of its paths (the decode dots
 * up to KERN_DOT_MAX_M rows, the GEMM tiles above), single-threaded and
 * on 2 threads, on random and extreme blocks (all bytes 0xFF, 0, or each
 * 0 or 0xFF). */
TEST(tq1_0_matmul_equals_reference_on_every_table)
{
    static const int ms[] = {1, 2, 3, 4, 5, 8, 9, 33, 40};
    const int n_in = 1024, n_out = 37, M = 40;
    threadpool *tp2 = tp_new(2);
    CHECK(tp2 != NULL);
    const kern_vtable *vs[4] = {0};
    const int nv = simd_variants(vs);
    char why[320] = "";
    for (int pat = 0; pat < 4 && !why[0]; pat++) {
        mm_case c;
        case_make(&c, DT_TQ1_0, M, n_in, n_out, 6000 + (uint64_t)pat);
        if (pat) case_extreme(&c, pat);
        const size_t ny = (size_t)M * n_out;
        float *ref = malloc(sizeof(float) * ny), *y = malloc(sizeof(float) * ny), *y2 = malloc(sizeof(float) * ny);
        kern_init(1);
        for (int v = 0; v < nv && !why[0]; v++) {
            CHECK(vs[v]->gemm[DT_TQ1_0].fn && vs[v]->dot[DT_TQ1_0]);
            for (int mi = 0; mi < (int)(sizeof ms / sizeof ms[0]) && !why[0]; mi++) {
                const int m = ms[mi];
                const size_t nm = (size_t)m * n_out;
                kern_init(1);
                kern_matmul(ref, c.x, c.w, DT_TQ1_0, m, n_in, n_out, NULL);
                kern_vt_overlay(&kern_vt, vs[v]);
                for (size_t k = 0; k < nm; k++) y[k] = y2[k] = NAN;
                kern_matmul(y, c.x, c.w, DT_TQ1_0, m, n_in, n_out, NULL);
                kern_matmul(y2, c.x, c.w, DT_TQ1_0, m, n_in, n_out, tp2);
                for (size_t k = 0; k < nm && !why[0]; k++)
                    if (memcmp(&y[k], &ref[k], 4) != 0 || memcmp(&y2[k], &ref[k], 4) != 0)
                        snprintf(why, sizeof why, "%s tq1_0 pattern %d m=%d: y[%zu][%zu] = %.9g (2 threads %.9g) vs ref %.9g",
                                 vs[v]->name, pat, m, k / n_out, k % n_out, y[k], y2[k], ref[k]);
            }
        }
        free(ref), free(y), free(y2);
        case_free(&c);
    }
    kern_init(0);
    tp_free(tp2);
    CHECK_MSG(!why[0], "%s", why);
}

/* ------------------------------------------------------ packed weights */

/* The documented layout (kern_pack.c), decoded independently: row c's
 * block b bytes (Q8_0: 32 qs; Q4_0: 16 qs) and its f16 scale. */
/* kern_pack.c's layout, restated: runs of 4 blocks, each a 64-byte line of
 * scales (block j of the run at 16j, row c at 2c) then the run's quants
 * (vector k of block j at 32 * (qv * j + k), row c's 4 bytes at 4c). */
static void unpack_block(uint32_t t, const uint8_t *group, int b, int c, uint8_t *qs, uint16_t *d)
{
    const int qv = t == DT_Q8_0 ? 8 : 4;
    const uint8_t *run = group + (size_t)(b / 4) * (64 + 4 * 32 * qv);
    for (int i = 0; i < 4 * qv; i++) qs[i] = run[64 + 32 * (qv * (b % 4) + i / 4) + 4 * c + i % 4];
    memcpy(d, run + 16 * (b % 4) + 2 * c, 2);
}

/* Packing keeps every byte (quants and scales) at its documented place, on
 * odd shapes (n_out not a multiple of 8, one block per row); the padding
 * rows of the last group are zero; the size is the rows' own bytes plus
 * group padding. */
TEST(pack_round_trip)
{
    static const int shapes[][2] = {{32, 1}, {32, 9}, {96, 8}, {288, 13}, {2048, 3}};
    static const uint32_t types[] = {DT_Q8_0, DT_Q4_0};
    CHECK(!kern_pack_supports(DT_Q2_K, 256) && !kern_pack_supports(DT_F16, 48) && !kern_pack_supports(DT_Q8_0, 48));
    CHECK(!kern_pack_supports(DT_F32, 64) && !kern_pack_supports(DT_BF16, 64));
    /* F16 packs where the variant has its own tile (AVX2, AVX-512), not on the portable one */
    CHECK(kern_pack_supports(DT_F16, 64) == (kern_vt.packed[DT_F16].gemm != NULL));
    CHECK(kern_pack_bytes(DT_Q2_K, 256, 8) == 0 && kern_pack_bytes(DT_F16, 48, 8) == 0);
    for (int ti = 0; ti < 2; ti++)
        for (int si = 0; si < 5; si++) {
            const uint32_t t = types[ti];
            const int n_in = shapes[si][0], n_out = shapes[si][1], nb = n_in / 32, ng = (n_out + 7) / 8;
            rng_seed(7000 + (uint64_t)(ti * 8 + si));
            uint8_t *w = mm_weights_make(t, n_out, n_in);
            const size_t wr = dtype_row_bytes(t, (uint64_t)n_in), bytes = kern_pack_bytes(t, n_in, n_out);
            CHECK(bytes >= (size_t)ng * 8 * wr && bytes % 64 == 0 && bytes < (size_t)ng * 8 * wr + (size_t)ng * 64);
            uint8_t *p = aligned_alloc(64, bytes);
            memset(p, 0xA5, bytes); /* packing must write every byte it owns */
            kern_pack(p, w, t, n_in, n_out);
            const size_t gb = bytes / (size_t)ng;
            int bad = 0;
            for (int r = 0; r < ng * 8 && !bad; r++)
                for (int b = 0; b < nb && !bad; b++) {
                    uint8_t qs[32], want[32] = {0};
                    uint16_t d, want_d = 0;
                    unpack_block(t, p + (size_t)(r / 8) * gb, b, r % 8, qs, &d);
                    if (r < n_out) {
                        const uint8_t *blk = w + (size_t)r * wr + (size_t)b * (t == DT_Q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_0));
                        memcpy(&want_d, blk, 2);
                        memcpy(want, blk + 2, t == DT_Q8_0 ? 32 : 16);
                    }
                    if (memcmp(qs, want, t == DT_Q8_0 ? 32 : 16) || d != want_d) bad = r + 1;
                }
            CHECK_MSG(!bad, "%s n_in=%d n_out=%d: packed row %d differs from its ggml row", dtype_get(t)->name, n_in,
                      n_out, bad - 1);
            /* the unused scales of a short last run are zero */
            for (int g = 0; g < ng && nb % 4; g++) {
                const uint8_t *last = p + (size_t)g * gb + (size_t)(nb / 4) * (64 + 128 * (t == DT_Q8_0 ? 8 : 4));
                for (int i = 16 * (nb % 4); i < 64; i++) bad |= last[i] != 0;
            }
            CHECK_MSG(!bad, "%s n_in=%d: a short run's unused scales are not zero", dtype_get(t)->name, n_in);
            free(w);
            free(p);
        }
}

/* Packed weights (kern_matmul_mats with a packed matrix): for every m in
 * 1..13 (every tile height 1..8, and two groups of rows beyond), single-
 * threaded and on 2 threads, with the AVX2 variant and the portable packed
 * GEMM (forced reference), every row equals bit for bit the reference
 * variant's product of the unpacked rows: the packed path keeps the
 * reference's float order for every m (decode included), so rows do not
 * depend on m, batching, threads or variant. n_out = 1001 is wide enough
 * for the call's tail of quarter chunks on 2 threads (kern_matmul.c). */
TEST(packed_matmul_equals_reference)
{
    static const int n_outs[] = {1, 7, 8, 9, 77, 1001};
    static const uint32_t types[] = {DT_Q8_0, DT_Q4_0};
    const kern_vtable *vs[4] = {0};
    const int nv = simd_variants(vs);
    threadpool *tp2 = tp_new(2);
    CHECK(tp2 != NULL);
    char why[320] = "";
    for (int ti = 0; ti < 2 && !why[0]; ti++)
        for (int oi = 0; oi < 6 && !why[0]; oi++) {
            const uint32_t t = types[ti];
            const int n_in = oi == 4 ? 1024 : 288, n_out = n_outs[oi], M = 13;
            mm_case c;
            case_make(&c, t, M, n_in, n_out, 8000 + (uint64_t)(ti * 8 + oi));
            const size_t ny = (size_t)M * n_out;
            uint8_t *wp = aligned_alloc(64, kern_pack_bytes(t, n_in, n_out));
            kern_pack(wp, c.w, t, n_in, n_out);
            const kern_mat pm = {NULL, wp, t, n_in, n_out}, *pmp = &pm;
            float *ref = malloc(sizeof(float) * ny), *y = malloc(sizeof(float) * ny);
            kern_init(1);
            kern_matmul(ref, c.x, c.w, t, M, n_in, n_out, NULL);
            /* the chosen table, the portable tiles, then every SIMD table
             * this CPU has as built (so the AVX-512 pair tile runs even
             * where kern_init keeps it off: AMD) */
            for (int v = -2; v < nv && !why[0]; v++) {
                if (v < 0) kern_init(v == -1);
                else kern_vt = *vs[v];
                for (int m = 1; m <= M && !why[0]; m++)
                    for (int th = 0; th < 2 && !why[0]; th++) {
                        for (size_t k = 0; k < (size_t)m * n_out; k++) y[k] = NAN;
                        kern_matmul_mats(1, &y, c.x, &pmp, m, th ? tp2 : NULL);
                        for (size_t k = 0; k < (size_t)m * n_out && !why[0]; k++)
                            if (memcmp(&y[k], &ref[k], 4) != 0)
                                snprintf(why, sizeof why, "%s %s n_in=%d n_out=%d m=%d threads=%d: y[%zu][%zu] = %.9g, ref %.9g",
                                         kern_variant(), dtype_get(t)->name, n_in, n_out, m, th + 1, k / n_out, k % n_out,
                                         y[k], ref[k]);
                    }
            }
            kern_init(0);
            free(wp);
            free(ref);
            free(y);
            case_free(&c);
        }
    tp_free(tp2);
    CHECK_MSG(!why[0], "%s", why);
}

/* The packed tiles' integer sums at their bounds: every weight at an
 * extreme (Q4_0 nibbles 0 or 15, Q8_0 -128 or 127) against activations
 * quantized to +-127 or 0, all of one sign or mixed, for every tile height
 * (m 1..8): the int16 accumulations (Q4_0's sums with their -8 sum x
 * start, Q8_0's pair products up to 2 * 128 * 127) must neither overflow
 * nor saturate, so the packed product equals the reference bit for bit. */
/* The K-quant/IQ4_XS packed GEMM (kern_kgemm) of every SIMD variant that
 * has one (AVX2 and AVX-512), tile by tile: one packed group of nw rows
 * (partial groups included; 8 and 9 on either side of the AVX2 tile's half
 * group) against nx = 1..KERN_KPACK_NX rows equals the reference tile
 * bit for bit, and the variant's own packing writes kern_kpack_group's
 * bytes, on random blocks and on extreme ones (every byte 0xFF or random,
 * so the largest quants and scales, with a small finite d) against
 * activations of all +-127, and every byte 0xFF against activations all
 * of one sign (the AVX2 tile's int16 run sums at their bound). */
TEST(kgemm_tiles_equal_reference)
{
    static const uint32_t types[] = {DT_Q2_K,    DT_Q3_K,   DT_Q4_K,  DT_Q5_K,    DT_Q6_K,  DT_IQ4_XS, DT_IQ2_XXS,
                                     DT_IQ2_XS,  DT_IQ2_S,  DT_IQ3_XXS, DT_IQ3_S, DT_IQ1_S,  DT_IQ1_M};
    const int nt = (int)(sizeof types / sizeof types[0]);
    static const int ns[] = {256, 768, 4096}, nws[] = {1, 5, 8, 9, KERN_KPACK_ROWS};
    const kern_vtable *vs[4] = {0};
    const int nv = simd_variants(vs);
    char why[320] = "";
    rng_seed(8900);
    for (int ti = 0; ti < nt && kern_vt_avx2() && kern_cpu_has_avx2(); ti++)
        CHECK_MSG(kern_vt_avx2()->kgemm[types[ti]].gemm != NULL, "the AVX2 table lacks %s's kgemm",
                  dtype_get(types[ti])->name);
    for (int v = 0; v < nv && !why[0]; v++)
        for (int ti = 0; ti < nt && !why[0]; ti++) {
            const uint32_t t = types[ti];
            if (!vs[v]->kgemm[t].gemm) continue;
            for (int q = 0; q < 3 && !why[0]; q++)
                for (int pat = 0; pat < 4 && !why[0]; pat++) {
                    const int n = ns[q], rows = KERN_KPACK_ROWS, M = KERN_KPACK_NX;
                    const size_t wr = dtype_row_bytes(t, (uint64_t)n), bb = dtype_row_bytes(t, QK_K);
                    uint8_t *w = mm_weights_make(t, rows, n);
                    float *x = mm_acts_make(M, n);
                    for (int k = 0; pat > 0 && k < M * n; k++) x[k] = pat == 3 || (rng_u32() & 1) ? 1.0f : -1.0f;
                    for (int b = 0; pat > 0 && b < rows * n / QK_K; b++) {
                        uint8_t *blk = w + (size_t)b * bb;
                        for (size_t k = 0; k < bb; k++) blk[k] = pat == 1 || pat == 3 ? 0xFF : (uint8_t)rng_u32();
                        const uint16_t d = f32_to_f16(0.001f * (float)(1 + b % 7));
                        const size_t d_at = t == DT_Q6_K   ? offsetof(block_q6_K, d)
                                            : t == DT_Q3_K ? offsetof(block_q3_K, d)
                                            : t == DT_Q2_K ? offsetof(block_q2_K, d)
                                                           : 0;
                        if (t == DT_IQ1_M) mm_iq1_m_set_d((block_iq1_m *)blk, d);
                        else memcpy(blk + d_at, &d, 2);
                        if (t == DT_Q4_K || t == DT_Q5_K || t == DT_Q2_K) memcpy(blk + d_at + 2, &d, 2); /* dmin */
                    }
                    const size_t xr = dtype_row_bytes(DT_Q8_K, (uint64_t)n);
                    uint8_t *xa = malloc(xr * M), *wp = aligned_alloc(64, kern_kpack_group_bytes(n));
                    uint8_t *wp2 = aligned_alloc(64, kern_kpack_group_bytes(n));
                    for (int r = 0; r < M; r++) kern_vt_ref.conv[DT_Q8_K](xa + r * xr, x + (size_t)r * n, n);
                    for (int wi = 0; wi < 5 && !why[0]; wi++) {
                        const int nw = nws[wi];
                        kern_kpack_group(t, wp, w, wr, nw, n);
                        if (vs[v]->kgemm[t].pack) { /* the variant's packing: the same bytes */
                            memset(wp2, 0x5A, kern_kpack_group_bytes(n));
                            vs[v]->kgemm[t].pack(t, wp2, w, wr, nw, n);
                            if (memcmp(wp, wp2, kern_kpack_group_bytes(n)) != 0)
                                snprintf(why, sizeof why, "%s %s n=%d pattern %d nw=%d: packing differs from kern_kpack_group",
                                         vs[v]->name, dtype_get(t)->name, n, pat, nw);
                        }
                        for (int nx = 1; nx <= M && !why[0]; nx++) {
                            float yr[KERN_KPACK_NX][KERN_KPACK_ROWS], yv[KERN_KPACK_NX][KERN_KPACK_ROWS];
                            memset(yv, 0xAB, sizeof yv); /* lanes past nw must stay */
                            kern_vt_ref.gemm[t].fn(n, &yr[0][0], rows, w, wr, nw, xa, xr, nx);
                            vs[v]->kgemm[t].gemm(n, &yv[0][0], rows, wp, nw, xa, xr, nx);
                            for (int r = 0; r < M && !why[0]; r++)
                                for (int c = 0; c < rows && !why[0]; c++) {
                                    uint32_t bits;
                                    memcpy(&bits, &yv[r][c], 4);
                                    const bool bad = r < nx && c < nw ? memcmp(&yv[r][c], &yr[r][c], 4) != 0
                                                                      : bits != 0xABABABABu;
                                    if (bad)
                                        snprintf(why, sizeof why, "%s %s n=%d pattern %d nw=%d nx=%d: y[%d][%d] = %.9g, ref %.9g",
                                                 vs[v]->name, dtype_get(t)->name, n, pat, nw, nx, r, c, yv[r][c],
                                                 r < nx && c < nw ? yr[r][c] : 0.0f);
                                }
                        }
                    }
                    free(w), free(x), free(xa), free(wp), free(wp2);
                }
        }
    CHECK_MSG(!why[0], "%s", why);
}

TEST(packed_matmul_extreme_values)
{
    static const uint32_t types[] = {DT_Q8_0, DT_Q4_0};
    const int n_in = 256, n_out = 16, M = 8;
    char why[320] = "";
    rng_seed(8800);
    for (int ti = 0; ti < 2 && !why[0]; ti++)
        for (int pat = 0; pat < 4 && !why[0]; pat++) {
            const uint32_t t = types[ti];
            const size_t wr = dtype_row_bytes(t, (uint64_t)n_in);
            uint8_t *w = malloc(wr * n_out);
            float *x = malloc(sizeof(float) * (size_t)M * n_in);
            for (int j = 0; j < n_out; j++)
                for (int b = 0; b < n_in / 32; b++) {
                    uint8_t *blk = w + (size_t)j * wr + (size_t)b * (t == DT_Q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_0));
                    const uint16_t d = f32_to_f16(0.01f * (float)(1 + (j + b) % 5));
                    memcpy(blk, &d, 2);
                    for (int q = 0; q < (t == DT_Q8_0 ? 32 : 16); q++) {
                        /* pattern 0: all high, 1: all low, 2, 3: random extremes */
                        const bool hi = pat == 0 || (pat >= 2 && (rng_u32() & 1));
                        blk[2 + q] = t == DT_Q8_0 ? (hi ? 127 : 0x80) : (hi ? 0xFF : 0x00);
                    }
                }
            for (int k = 0; k < M * n_in; k++) {
                /* pattern 0, 1: all +1 or all -1 (quantized to +-127); 2: random signs; 3: random signs and zeros */
                const uint32_t r = rng_u32();
                x[k] = pat == 0 ? 1.0f : pat == 1 ? -1.0f : (pat == 3 && r % 3 == 0) ? 0.0f : (r & 2) ? 1.0f : -1.0f;
            }
            uint8_t *wp = aligned_alloc(64, kern_pack_bytes(t, n_in, n_out));
            kern_pack(wp, w, t, n_in, n_out);
            const kern_mat pm = {NULL, wp, t, n_in, n_out}, *pmp = &pm;
            float *ref = malloc(sizeof(float) * (size_t)M * n_out), *y = malloc(sizeof(float) * (size_t)M * n_out);
            kern_init(1);
            kern_matmul(ref, x, w, t, M, n_in, n_out, NULL);
            kern_init(0);
            for (int m = 1; m <= M && !why[0]; m++) {
                kern_matmul_mats(1, &y, x, &pmp, m, NULL);
                for (int k = 0; k < m * n_out && !why[0]; k++)
                    if (memcmp(&y[k], &ref[k], 4) != 0)
                        snprintf(why, sizeof why, "%s %s pattern %d m=%d: y[%d][%d] = %.9g, ref %.9g", kern_variant(),
                                 dtype_get(t)->name, pat, m, k / n_out, k % n_out, y[k], ref[k]);
            }
            free(w);
            free(x);
            free(wp);
            free(ref);
            free(y);
        }
    CHECK_MSG(!why[0], "%s", why);
}

/* The F16 layout (kern_pack.c): row c's element k at [k][c % 16] of group
 * c / 16, the padding rows zero, 32 bytes per element and group. */
TEST(pack_f16_round_trip)
{
    static const int shapes[][2] = {{32, 1}, {64, 15}, {96, 16}, {288, 33}};
    for (int si = 0; si < 4; si++) {
        const int n_in = shapes[si][0], n_out = shapes[si][1], ng = (n_out + 15) / 16;
        rng_seed(7100 + (uint64_t)si);
        uint16_t *w = (uint16_t *)mm_weights_make(DT_F16, n_out, n_in);
        const size_t bytes = kern_pack_bytes(DT_F16, n_in, n_out);
        CHECK(bytes == (size_t)ng * 16 * (size_t)n_in * 2 && kern_pack_group_bytes(DT_F16, n_in) == bytes / (size_t)ng);
        uint16_t *p = aligned_alloc(64, bytes);
        memset(p, 0xA5, bytes);
        kern_pack(p, w, DT_F16, n_in, n_out);
        int bad = 0;
        for (int c = 0; c < ng * 16 && !bad; c++)
            for (int k = 0; k < n_in && !bad; k++) {
                const uint16_t got = p[(size_t)(c / 16) * 16 * (size_t)n_in + (size_t)k * 16 + (size_t)(c % 16)];
                if (got != (c < n_out ? w[(size_t)c * (size_t)n_in + (size_t)k] : 0)) bad = c + 1;
            }
        CHECK_MSG(!bad, "f16 n_in=%d n_out=%d: packed row %d differs", n_in, n_out, bad - 1);
        free(w);
        free(p);
    }
}

/* THE PACKED F16 ORDER (kern_impl.h), restated from the ggml row and the
 * f16-rounded activations. */
static float f16p_order(const uint16_t *w, const float *x16, int n)
{
    float tot = 0.0f;
    for (int k0 = 0; k0 < n; k0 += 256) {
        float acc = 0.0f;
        for (int k = k0; k < n && k < k0 + 256; k++) acc = fmaf(f16_to_f32(w[k]), x16[k], acc);
        tot += acc;
    }
    return tot;
}

/* Packed F16 weights (kern_matmul_mats with a packed matrix): for every m
 * in 1..13 (every tile height and shape of AVX-512's and AVX2's), n_in
 * over one and several 256-element blocks, n_out with partial groups and
 * tiles (1001: the call's tail of quarter chunks on 2 threads), one and 2
 * threads, the portable tile (reference variant) and every SIMD variant:
 * each element is the packed F16 order's bits, and within the SIMD
 * tolerance of the double sum. */
TEST(packed_f16_matmul_same_bits)
{
    static const int n_ins[] = {32, 288, 544, 1024};
    static const int n_outs[] = {1, 15, 17, 33, 100, 1001};
    const kern_vtable *vs[4] = {0};
    const int nv = simd_variants(vs);
    threadpool *tp2 = tp_new(2);
    CHECK(tp2 != NULL);
    char why[320] = "";
    int runs = 0;
    for (int ii = 0; ii < 4 && !why[0]; ii++)
        for (int oi = 0; oi < 6 && !why[0]; oi++) {
            const int n_in = n_ins[ii], n_out = n_outs[oi], M = 13;
            if (n_out == 1001 && n_in > 288) continue; /* time: the tail needs one size */
            mm_case c;
            case_make(&c, DT_F16, M, n_in, n_out, 8100 + (uint64_t)(ii * 8 + oi));
            const size_t ny = (size_t)M * n_out;
            uint8_t *wp = aligned_alloc(64, kern_pack_bytes(DT_F16, n_in, n_out));
            kern_pack(wp, c.w, DT_F16, n_in, n_out);
            const kern_mat pm = {NULL, wp, DT_F16, n_in, n_out}, *pmp = &pm;
            float *want = malloc(sizeof(float) * ny), *y = malloc(sizeof(float) * ny);
            for (size_t k = 0; k < ny && !why[0]; k++) {
                double mag;
                const double exact = case_naive(&c, (int)(k / n_out), (int)(k % n_out), &mag);
                want[k] = f16p_order((const uint16_t *)(c.w + (k % n_out) * c.w_row), c.xd + (k / n_out) * n_in, n_in);
                if (!(fabs(want[k] - exact) <= TOL_SIMD_VS_REF * mag + 1e-30))
                    snprintf(why, sizeof why, "n_in=%d: the packed f16 order %.9g vs %.9g (|wx| %.3g)", n_in, want[k],
                             exact, mag);
            }
            for (int v = -1; v < nv && !why[0]; v++) {
                if (v < 0) kern_init(1); /* the portable tile */
                else if (vs[v]->packed[DT_F16].gemm) kern_vt = *vs[v];
                else continue;
                for (int m = 1; m <= M && !why[0]; m++)
                    for (int th = 0; th < 2 && !why[0]; th++) {
                        for (size_t k = 0; k < (size_t)m * n_out; k++) y[k] = NAN;
                        kern_matmul_mats(1, &y, c.x, &pmp, m, th ? tp2 : NULL);
                        runs++;
                        for (size_t k = 0; k < (size_t)m * n_out && !why[0]; k++)
                            if (memcmp(&y[k], &want[k], 4) != 0)
                                snprintf(why, sizeof why, "%s n_in=%d n_out=%d m=%d threads=%d: y[%zu][%zu] = %.9g, want %.9g",
                                         v < 0 ? "portable" : vs[v]->name, n_in, n_out, m, th + 1, k / n_out, k % n_out,
                                         y[k], want[k]);
                    }
                kern_init(0); /* back to the chosen table */
            }
            free(wp);
            free(want);
            free(y);
            case_free(&c);
        }
    tp_free(tp2);
    CHECK(runs > 0);
    CHECK_MSG(!why[0], "%s", why);
}

/* One dispatch for several matrices of one input (kern_matmul_mats, as the
 * forward pass fuses q/k/v and gate/up): each output equals, bit for bit,
 * the matrix multiplied alone, with mixed types (dot types Q8_0, Q8_K, F16
 * converted side by side), packed and not, at decode and prefill sizes. */
TEST(matmul_mats_equal_single)
{
    static const uint32_t types[] = {DT_Q4_0, DT_Q6_K, DT_Q8_0, DT_F16};
    static const int n_outs[] = {40, 17, 8, 5};
    static const int ms[] = {1, 2, 7};
    const int n_in = 512;
    threadpool *tp2 = tp_new(2);
    CHECK(tp2 != NULL);
    kern_init(0);
    mm_case c[4];
    uint8_t *wp[4] = {0};
    kern_mat mats[4];
    const kern_mat *mp[4];
    for (int i = 0; i < 4; i++) {
        case_make(&c[i], types[i], 7, n_in, n_outs[i], 9000 + (uint64_t)i);
        if (i != 0) memcpy(c[i].x, c[0].x, sizeof(float) * 7 * (size_t)n_in); /* one input */
        if (kern_pack_supports(types[i], n_in) && (i == 0 || i == 3)) { /* q4_0 and f16 packed */
            wp[i] = aligned_alloc(64, kern_pack_bytes(types[i], n_in, n_outs[i]));
            kern_pack(wp[i], c[i].w, types[i], n_in, n_outs[i]);
        }
        mats[i] = (kern_mat){wp[i] ? NULL : c[i].w, wp[i], types[i], n_in, n_outs[i]};
        mp[i] = &mats[i];
    }
    char why[256] = "";
    for (int mi = 0; mi < 3 && !why[0]; mi++)
        for (int th = 0; th < 2 && !why[0]; th++) {
            const int m = ms[mi];
            float *ys[4], *alone[4];
            for (int i = 0; i < 4; i++) {
                ys[i] = malloc(sizeof(float) * (size_t)m * n_outs[i]);
                alone[i] = malloc(sizeof(float) * (size_t)m * n_outs[i]);
                for (int k = 0; k < m * n_outs[i]; k++) ys[i][k] = NAN;
                kern_matmul_mats(1, &alone[i], c[0].x, &mp[i], m, NULL);
            }
            kern_matmul_mats(4, ys, c[0].x, mp, m, th ? tp2 : NULL);
            for (int i = 0; i < 4; i++) {
                if (!why[0] && memcmp(ys[i], alone[i], sizeof(float) * (size_t)m * n_outs[i]) != 0)
                    snprintf(why, sizeof why, "matrix %d (%s%s) m=%d threads=%d: fused result differs from alone", i,
                             dtype_get(types[i])->name, wp[i] ? ", packed" : "", m, th + 1);
                free(ys[i]);
                free(alone[i]);
            }
        }
    for (int i = 0; i < 4; i++) {
        free(wp[i]);
        case_free(&c[i]);
    }
    tp_free(tp2);
    CHECK_MSG(!why[0], "%s", why);
}

TEST(matmul_reserve_and_supports)
{
    CHECK(kern_matmul_supports(DT_Q4_K));
    CHECK(kern_matmul_supports(DT_BF16));
    CHECK(kern_matmul_supports(DT_Q5_K) && kern_matmul_supports(DT_IQ4_XS) && kern_matmul_supports(DT_TQ1_0));
    CHECK(kern_matmul_supports(DT_IQ2_XXS) && kern_matmul_supports(DT_IQ1_M));
    CHECK(!kern_matmul_supports(DT_MXFP4));
    CHECK(!kern_matmul_supports(DT_Q8_1));
    CHECK(!kern_matmul_supports(DT_Q8_K));
    CHECK_EQ_INT(kern_matmul_reserve(16, 4096), 0);
    kern_scratch_free();
    CHECK_EQ_INT(kern_matmul_reserve(0, 4096), 0);
}

/* ------------------------------------------------------------ row kernels */

TEST(rope_known_values)
{
    kern_init(0);
    /* pos 0: identity, bit for bit */
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, x0[8];
    memcpy(x0, x, sizeof x);
    kern_rope(x, 2, 4, 4, 0, 10000.0f, 1.0f, false, NULL);
    CHECK(memcmp(x, x0, sizeof x) == 0);
    kern_rope(x, 2, 4, 4, 0, 10000.0f, 1.0f, true, NULL);
    CHECK(memcmp(x, x0, sizeof x) == 0);

    /* pos 1, head_dim 2: rotation by 1 radian */
    float p[2] = {1, 0}, q[2] = {0, 1};
    kern_rope(p, 1, 2, 2, 1, 10000.0f, 1.0f, false, NULL);
    kern_rope(q, 1, 2, 2, 1, 10000.0f, 1.0f, false, NULL);
    CHECK_NEAR(p[0], cos(1.0), 1e-7);
    CHECK_NEAR(p[1], sin(1.0), 1e-7);
    CHECK_NEAR(q[0], -sin(1.0), 1e-7);
    CHECK_NEAR(q[1], cos(1.0), 1e-7);

    /* head_dim 4, base 100, pos 3: pair 0 turns by 3, pair 1 by 3/10.
     * llama pairs (0,1),(2,3); neox pairs (0,2),(1,3). */
    float l[4] = {1, 2, 3, 4}, n[4] = {1, 2, 3, 4};
    kern_rope(l, 1, 4, 4, 3, 100.0f, 1.0f, false, NULL);
    kern_rope(n, 1, 4, 4, 3, 100.0f, 1.0f, true, NULL);
    const double a0 = 3.0, a1 = 0.3;
    CHECK_NEAR(l[0], 1 * cos(a0) - 2 * sin(a0), 1e-6);
    CHECK_NEAR(l[1], 1 * sin(a0) + 2 * cos(a0), 1e-6);
    CHECK_NEAR(l[2], 3 * cos(a1) - 4 * sin(a1), 1e-6);
    CHECK_NEAR(l[3], 3 * sin(a1) + 4 * cos(a1), 1e-6);
    CHECK_NEAR(n[0], 1 * cos(a0) - 3 * sin(a0), 1e-6);
    CHECK_NEAR(n[2], 1 * sin(a0) + 3 * cos(a0), 1e-6);
    CHECK_NEAR(n[1], 2 * cos(a1) - 4 * sin(a1), 1e-6);
    CHECK_NEAR(n[3], 2 * sin(a1) + 4 * cos(a1), 1e-6);

    /* freq_scale halves the angles, freq_factors divide them; dims past
     * rope_dim are untouched; every head turns the same. */
    float f[12] = {1, 0, 1, 0, 9, 9, 1, 0, 1, 0, 9, 9};
    const float ff[2] = {1.0f, 4.0f};
    kern_rope(f, 2, 6, 4, 2, 100.0f, 0.5f, false, ff);
    for (int h = 0; h < 2; h++) {
        CHECK_NEAR(f[6 * h + 0], cos(1.0), 1e-6);
        CHECK_NEAR(f[6 * h + 1], sin(1.0), 1e-6);
        CHECK_NEAR(f[6 * h + 2], cos(0.2 * 0.5 / 4), 1e-6);
        CHECK_NEAR(f[6 * h + 3], sin(0.2 * 0.5 / 4), 1e-6);
        CHECK(f[6 * h + 4] == 9.0f && f[6 * h + 5] == 9.0f);
    }
}

TEST(rope_angles_follow_ggml_iteration)
{
    /* ggml iterates theta *= powf(base, -2/n_dims) in float; at a long
     * position the last pair's angle differs from the exact power in the low
     * bits, so the result must match the iterated form exactly. */
    const int hd = 128, pos = 30000;
    float x[128], want[128];
    for (int i = 0; i < hd; i++) x[i] = want[i] = (float)(i % 7) - 3.0f;
    const float ts = powf(10000.0f, -2.0f / hd);
    float theta = (float)pos;
    for (int i0 = 0; i0 < hd; i0 += 2) {
        const float c = cosf(theta), s = sinf(theta), a = want[i0], b = want[i0 + 1];
        want[i0] = a * c - b * s;
        want[i0 + 1] = a * s + b * c;
        theta *= ts;
    }
    kern_rope(x, 1, hd, hd, pos, 10000.0f, 1.0f, false, NULL);
    for (int i = 0; i < hd; i++) CHECK_MSG(x[i] == want[i], "dim %d: %.9g vs %.9g", i, x[i], want[i]);
}

TEST(rmsnorm_known_values)
{
    const kern_vtable *vs[4] = {0};
    const int nv = simd_variants(vs);
    for (int v = -1; v < nv; v++) {
        const kern_vtable *k = v < 0 ? &kern_vt_ref : vs[v];
        float x[4] = {1, 2, 3, 4}, y[4];
        const float w[4] = {1, 0.5f, 2, -1};
        k->rmsnorm(y, x, NULL, 4, 1e-5f);
        const float scale = 1.0f / sqrtf(7.5f + 1e-5f); /* mean of squares 30/4 */
        for (int i = 0; i < 4; i++) CHECK_MSG(y[i] == x[i] * scale, "%s y[%d] = %.9g", k->name, i, y[i]);
        k->rmsnorm(x, x, w, 4, 1e-5f); /* in place, with weight */
        for (int i = 0; i < 4; i++) CHECK_MSG(x[i] == ((float)(i + 1) * scale) * w[i], "%s weighted y[%d]", k->name, i);
        float z[3] = {0, 0, 0};
        k->rmsnorm(z, z, NULL, 3, 1.0f);
        CHECK(z[0] == 0 && z[1] == 0 && z[2] == 0);
    }
    /* SIMD vs ref on a long row (double sums: equal in practice). */
    static float a[4099], r1[4099], r2[4099], w[4099];
    rng_seed(5);
    for (int i = 0; i < 4099; i++) a[i] = rng_gauss() * 10, w[i] = rng_gauss();
    kern_vt_ref.rmsnorm(r1, a, w, 4099, 1e-6f);
    for (int v = 0; v < nv; v++) {
        vs[v]->rmsnorm(r2, a, w, 4099, 1e-6f);
        for (int i = 0; i < 4099; i++) CHECK_NEAR(r2[i], r1[i], 1e-6 * fabs(r1[i]));
    }
}

static int softmax_check(float (*fn)(float *, int), const char *name, char *why, size_t wn)
{
    static float x[1031];
    rng_seed(9);
    for (int n = 1; n <= 1031; n += 103) {
        for (int i = 0; i < n; i++) x[i] = rng_gauss() * 20.0f + 500.0f; /* large: max subtraction needed */
        if (n > 3) x[1] = -INFINITY;
        double mx = -INFINITY, se = 0.0; /* the log-sum-exp it must return, in double */
        for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
        for (int i = 0; i < n; i++) se += exp((double)x[i] - mx);
        const float lse = fn(x, n);
        if (fabs(lse - (mx + log(se))) > 1e-3)
            return snprintf(why, wn, "%s n=%d: log-sum-exp %.7g, want %.7g", name, n, lse, mx + log(se)), 0;
        double s = 0.0;
        for (int i = 0; i < n; i++) {
            if (!(x[i] >= 0.0f && x[i] <= 1.0f)) return snprintf(why, wn, "%s n=%d x[%d] = %g", name, n, i, x[i]), 0;
            s += x[i];
        }
        if (fabs(s - 1.0) > 1e-5) return snprintf(why, wn, "%s n=%d: sum %.9g", name, n, s), 0;
        if (n > 3 && x[1] != 0.0f) return snprintf(why, wn, "%s: exp(-inf) = %g", name, x[1]), 0;
    }
    float two[2] = {1000.0f, 1000.0f};
    fn(two, 2);
    if (two[0] != 0.5f || two[1] != 0.5f) return snprintf(why, wn, "%s: [1000,1000] -> %g %g", name, two[0], two[1]), 0;
    return 1;
}

TEST(softmax_sums_to_one)
{
    const kern_vtable *vs[4] = {0};
    const int nv = simd_variants(vs);
    char why[200] = "";
    CHECK_MSG(softmax_check(kern_vt_ref.softmax, "ref", why, sizeof why), "%s", why);
    for (int v = 0; v < nv; v++) CHECK_MSG(softmax_check(vs[v]->softmax, vs[v]->name, why, sizeof why), "%s", why);
    /* SIMD vs ref: a few ulp (vector expf) */
    static float x[1000], a[1000], b[1000];
    rng_seed(10);
    for (int i = 0; i < 1000; i++) x[i] = a[i] = rng_gauss() * 8.0f;
    kern_vt_ref.softmax(a, 1000);
    for (int v = 0; v < nv; v++) {
        memcpy(b, x, sizeof b); /* in place: each variant from the same input */
        vs[v]->softmax(b, 1000);
        for (int i = 0; i < 1000; i++) CHECK_NEAR(b[i], a[i], 5e-7 * a[i] + 1e-38);
    }
}

TEST(swiglu_known_values)
{
    const kern_vtable *vs[4] = {0};
    const int nv = simd_variants(vs);
    for (int v = -1; v < nv; v++) {
        const kern_vtable *k = v < 0 ? &kern_vt_ref : vs[v];
        /* 9 values: the SIMD body (8) and the scalar tail */
        float a[9] = {0, 1, -1, 100, -100, 2, 0.5f, -200, 3};
        const float b[9] = {1, 1, 1, 1, 1, 2, 4, 1, -1};
        k->swiglu(a, b, 9);
        CHECK(a[0] == 0.0f);
        CHECK_NEAR(a[1], 1.0 / (1.0 + exp(-1.0)), 1e-7);
        CHECK_NEAR(a[2], -1.0 / (1.0 + exp(1.0)), 1e-7);
        CHECK(a[3] == 100.0f);
        CHECK(a[4] > -1e-40f && a[4] <= 0.0f);
        CHECK_NEAR(a[5], 2 * 2.0 / (1.0 + exp(-2.0)), 2e-7);
        CHECK_NEAR(a[6], 4 * 0.5 / (1.0 + exp(-0.5)), 2e-7);
        CHECK(a[7] == 0.0f); /* -200 * 1/(1+e^200) underflows to -0 */
        CHECK_NEAR(a[8], -3.0 / (1.0 + exp(-3.0)), 2e-7);
    }
    /* SIMD vs ref over a wide range: within a few ulp */
    static float x[4096], g[4096], r1[4096], r2[4096];
    rng_seed(12);
    for (int i = 0; i < 4096; i++) x[i] = rng_gauss() * 30.0f, g[i] = rng_gauss();
    memcpy(r1, x, sizeof x);
    kern_vt_ref.swiglu(r1, g, 4096);
    for (int v = 0; v < nv; v++) {
        memcpy(r2, x, sizeof x);
        vs[v]->swiglu(r2, g, 4096);
        for (int i = 0; i < 4096; i++) CHECK_NEAR(r2[i], r1[i], 6e-7 * fabs(r1[i]) + 1e-37);
    }
}

TEST(exp_row_accuracy)
{
    const kern_vtable *vs[4] = {0};
    const int nv = simd_variants(vs);
    static float x[4096], y[4096];
    for (int v = -1; v < nv; v++) {
        const kern_vtable *k = v < 0 ? &kern_vt_ref : vs[v];
        double worst = 0.0;
        float worst_x = 0.0f;
        for (int rep = 0; rep < 64; rep++) {
            for (int i = 0; i < 4096; i++) x[i] = -87.0f + 175.5f * (float)(rep * 4096 + i) / (64.0f * 4096.0f);
            k->exp_row(y, x, 4096 - (rep & 7)); /* also odd lengths: scalar tail */
            for (int i = 0; i < 4096 - (rep & 7); i++) {
                const double t = exp((double)x[i]);
                const double ulp = (double)nextafterf((float)t, INFINITY) - (float)t;
                const double e = fabs((double)y[i] - t) / ulp;
                if (e > worst) worst = e, worst_x = x[i];
            }
        }
        CHECK_MSG(worst <= 1.5, "%s: expf error %.2f ulp at %.9g", k->name, worst, worst_x);
        float sp[11] = {-INFINITY, -200.0f, -104.0f, 89.0f, 100.0f, INFINITY, NAN, 0.0f, -0.0f, 1.0f, -1.0f};
        k->exp_row(sp, sp, 11);
        CHECK(sp[0] == 0.0f && sp[1] == 0.0f && sp[2] == 0.0f);
        CHECK(isinf(sp[3]) && isinf(sp[4]) && isinf(sp[5]) && sp[5] > 0);
        CHECK(isnan(sp[6]));
        CHECK(sp[7] == 1.0f && sp[8] == 1.0f);
        CHECK_NEAR(sp[9], exp(1.0), 3e-7);
        CHECK_NEAR(sp[10], exp(-1.0), 1e-7);
    }
}

/* --------------------------------------------------- llama.cpp as oracle */

/* ggml-cpu.h's struct ggml_type_traits_cpu and vec_dot, declared here so the
 * test needs no ggml headers; the library is opened at run time. */
typedef struct {
    void (*from_float)(const float *x, void *y, int64_t n);
    void (*vec_dot)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by, int nrc);
    int vec_dot_type;
    int64_t nrows;
} ggml_traits_cpu;

/* ggml's CPU type traits getter from the peer build, or NULL. */
static const ggml_traits_cpu *(*ggml_oracle(void))(int)
{
    const char *dir = getenv("PEER_DIR") ? getenv("PEER_DIR") : "/tmp/llamacpp-peer";
    char path[1024];
    snprintf(path, sizeof path, "%s/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so", dir);
    if (!dlopen(path, RTLD_NOW | RTLD_GLOBAL)) return NULL;
    snprintf(path, sizeof path, "%s/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-cpu-%s.so", dir,
             kern_cpu_has_avx2() ? "haswell" : "x64");
    void *h = dlopen(path, RTLD_NOW);
    if (!h) return NULL;
    void (*init)(void) = (void (*)(void))dlsym(h, "ggml_cpu_init");
    const ggml_traits_cpu *(*get)(int) = (const ggml_traits_cpu *(*)(int))dlsym(h, "ggml_get_type_traits_cpu");
    if (!init || !get) return NULL;
    init();
    /* the layout we assume: dot types as in kern_impl.h */
    if (get(DT_Q4_K)->vec_dot_type != DT_Q8_K || get(DT_Q4_0)->vec_dot_type != DT_Q8_0 || !get(DT_Q6_K)->vec_dot)
        return NULL;
    return get;
}

static const ggml_traits_cpu *(*oracle_get)(int);

TEST(dots_match_llama_cpp)
{
    const ggml_traits_cpu *(*get)(int) = oracle_get;
    kern_init(0);
    const kern_vtable *vts[2] = {&kern_vt_ref, kern_active()};
    for (int ti = 1; ti < N_MM_TYPES; ti++) { /* F32's ggml dot is plain; the rest matter */
        CHECK_MSG(get((int)mm_types[ti])->vec_dot_type == kern_dot_type(mm_types[ti]), "%s: ggml multiplies it with %d, we with %d",
                  dtype_get(mm_types[ti])->name, get((int)mm_types[ti])->vec_dot_type, kern_dot_type(mm_types[ti]));
        mm_case c;
        case_make(&c, mm_types[ti], KERN_NX_MAX, 4096, 8, 4000 + (uint64_t)ti);
        for (int v = 0; v < 2; v++)
            for (int j = 0; j < c.n_out; j++)
                for (int r = 0; r < c.m; r++) {
                    float sg, sv;
                    const uint8_t *wj = c.w + (size_t)j * c.w_row, *xr = c.xa + (size_t)r * c.x_row;
                    get((int)c.wtype)->vec_dot(c.n_in, &sg, 0, wj, 0, xr, 0, 1);
                    if (vts[v]->dot[c.wtype]) /* what decode runs: ggml's order */
                        vts[v]->dot[c.wtype](c.n_in, &sv, 1, wj, xr, c.x_row, 1);
                    else { /* no decode dot: the GEMM tile (none of these types has an own form) */
                        assert(!vts[v]->gemm[c.wtype].xconv);
                        vts[v]->gemm[c.wtype].fn(c.n_in, &sv, 1, wj, c.w_row, 1, xr, c.x_row, 1);
                    }
                    double mag;
                    case_naive(&c, r, j, &mag);
                    if (!(fabs((double)sv - sg) <= TOL_SIMD_VS_REF * mag + 1e-30)) {
                        case_free(&c);
                        CHECK_MSG(0, "%s %s row %d col %d: %.9g vs ggml %.9g (|wx| %.3g)", vts[v]->name,
                                  dtype_get(mm_types[ti])->name, r, j, sv, sg, mag);
                    }
                }
        case_free(&c);
    }
}

int main(void)
{
    kern_init(0);
    printf("# kernel variant: %s\n", kern_variant());
    RUN(dispatch_picks_best_variant_and_env_caps_it);
    RUN(stream_prefetch_follows_cpu_and_env);
    const kern_vtable *vs[4] = {0};
    const int have_simd = simd_variants(vs) > 0;
    if (have_simd) {
        RUN(simd_variants_cover_block_formats);
        for (int v = 0; v < simd_variants(vs); v++)
            for (int ti = 0; ti < N_MM_TYPES; ti++) {
                if (!vs[v]->gemm[mm_types[ti]].fn) continue;
                char name[96];
                snprintf(name, sizeof name, "simd_dots_match_ref/%s/%s", vs[v]->name, dtype_get(mm_types[ti])->name);
                dots_variant = vs[v], dots_type = mm_types[ti];
                test_run(name, simd_dots_match_ref);
            }
        RUN(simd_conversions_bit_exact);
        RUN(avx512_float_gemm_tile_invariant);
    } else {
        test_skip("simd_dots_match_ref", "no SIMD variant on this CPU");
        test_skip("simd_conversions_bit_exact", "no SIMD variant on this CPU");
    }
    RUN(f16_rows_bit_exact);
    RUN(ref_matmul_matches_naive);
    if (have_simd) RUN(simd_matmul_matches_ref);
    else test_skip("simd_matmul_matches_ref", "no SIMD variant on this CPU");
    RUN(threaded_matmul_equals_single);
    RUN(gemm_bit_identical_to_single_rows);
    if (have_simd) RUN(tq1_0_matmul_equals_reference_on_every_table);
    else test_skip("tq1_0_matmul_equals_reference_on_every_table", "no SIMD variant on this CPU");
    RUN(pack_round_trip);
    RUN(packed_matmul_equals_reference);
    RUN(packed_matmul_extreme_values);
    RUN(kgemm_tiles_equal_reference);
    RUN(pack_f16_round_trip);
    RUN(packed_f16_matmul_same_bits);
    RUN(matmul_mats_equal_single);
    RUN(matmul_reserve_and_supports);
    RUN(rope_known_values);
    RUN(rope_angles_follow_ggml_iteration);
    RUN(rmsnorm_known_values);
    RUN(softmax_sums_to_one);
    RUN(swiglu_known_values);
    RUN(exp_row_accuracy);
    oracle_get = ggml_oracle();
    if (oracle_get) RUN(dots_match_llama_cpp);
    else test_skip("dots_match_llama_cpp", "llama.cpp peer library not built (tests/peer.sh)");
    kern_scratch_free();
    return test_summary();
}
