/* kern_avx512_q8.c - AVX-512 (VNNI) kernels for Q8_0 and Q4_0 weights.
 *
 * The same tiles as kern_avx2.c's Q8_0/Q4_0 section, with VNNI's vpdpbusd
 * (u8 x s8, 4 products summed into each int32 lane, added to the
 * accumulator operand: one uop) in place of AVX2's maddubs + madd + add.
 * The tiles are laid out for 8 lanes (8 packed weight rows, or ggml's 8
 * partial sums of 4) in 256-bit (VL) forms, Zen 4 running 512-bit
 * operations as two halves anyway; the packed GEMM at m >= 2 also has a
 * pair tile (q8p_tile2: two groups of 8 rows in 512-bit lanes) for CPUs
 * with full-width pipes (Intel, Zen 5; kern_dispatch.c keeps Zen 4 on the 8-row
 * tile).
 *
 * Numerics: the integer block sums are exact whatever the order, and every
 * float operation is kern_avx2.c's, so
 * - the packed GEMM (every m for weights packed at load, m > KERN_DOT_MAX_M
 *   for ggml rows) equals the reference bit for bit (per block the exact integer sum, then the reference's float step in
 *   the weight row's lane: kern_impl.h's invariant);
 * - the decode dot tiles have ggml's AVX2 float layout (kern_impl.h "DECODE
 *   DOT TILES"); their int32 lanes hold the same sums of 4 consecutive
 *   products as AVX2's madd(maddubs), so they equal the AVX2 tiles bit for
 *   bit too.
 *
 * Packed GEMM, vpdpbusd wants its unsigned operand first:
 * - Q4_0: the packed nibbles q (0..15) are unsigned already;
 *   sum (q - 8) x = sum q x - 8 sum x;
 * - Q8_0: the weights made unsigned by xor 0x80 (w + 128 in 0..255);
 *   sum w x = sum (w + 128) x - 128 sum x.
 * Each row's int32 accumulator starts, per block, at that offset term:
 * kern_xblk.q4off holds -8 sum x as two int16 halves, so one vpdpwssd of
 * them against words 1 (Q4_0) or 16 (Q8_0) gives -8 sum x or -128 sum x as
 * int32 (|.| <= 128 * 32 * 127, no overflow; no int16 intermediate
 * anywhere, so the AVX2 tiles' saturation bounds do not apply).
 *
 * Speed: at m = 8 the packed tile is bound by the multiply pipes, which
 * vpdpbusd shares with the offset's vpdpwssd and the two float multiplies
 * per row and block of the reference's step. On Zen 4, which runs a zmm
 * operation as two halves, 512-bit forms did not pay; on CPUs with full
 * 512-bit pipes two weight groups per zmm against one broadcast activation
 * (q8p_tile2) do. The other ways tried to form the offset term were slower.
 * docs/speed.md ("Kernel choices") has the measurements.
 */
#include "kernels/kern_impl.h"
#include "kernels/avx512_intrin.h"

#ifdef PL_HAVE_AVX512_CODE

#include <assert.h>
#include <string.h>

#include "tensor/blocks.h"

/* f16 -> f32 of a block scale by table (kern_f16_lut): cheaper than F16C on
 * a scalar (kern_avx2.c). */
K5I float f16s(uint16_t h) { return kern_f16_lut[h]; }

/* acc + the dot of u with the broadcast of the 4 bytes (dpbusd_b32) or 2
 * words (dpwssd_b32) at p, the broadcast embedded in the instruction
 * (m32bcst): GCC keeps a separate vpbroadcastd for _mm256_set1_epi32 from
 * memory, and the packed tiles do one such broadcast per row and vector
 * (measured 6% at m = 8 for Q4_0). The emulation build has the intrinsics. */
#ifdef PL_AVX512_EMU
K5I __m256i bcast32(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}
#define dpbusd_b32(acc, u, p) _mm256_dpbusd_epi32(acc, u, bcast32(p))
#define dpwssd_b32(acc, u, p) _mm256_dpwssd_epi32(acc, u, bcast32(p))
#else
typedef int32_t __attribute__((may_alias)) i32_alias; /* the 4 bytes are int8 or int16 data */
K5I __m256i dpbusd_b32(__m256i acc, __m256i u, const void *p)
{
    __asm__("vpdpbusd %2%{1to8%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*(const i32_alias *)p));
    return acc;
}

K5I __m256i dpwssd_b32(__m256i acc, __m256i u, const void *p)
{
    __asm__("vpdpwssd %2%{1to8%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*(const i32_alias *)p));
    return acc;
}
#endif

/* Block b of a Q4_0 row as 32 signed bytes (q - 8), in element order. */
K5I __m256i q4_0_load(const block_q4_0 *wb)
{
    const __m128i t = _mm_loadu_si128((const __m128i *)wb->qs);
    const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
    return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
}

/* 32 int8 weights w (any sign, aw = |w|) times 32 int8 activations x: the 8
 * int32 sums of 4 consecutive products. ggml's sign trick moves w's sign
 * onto x (|w| <= 128 fits u8). */
K5I __m256i dot_i8_i32(__m256i aw, __m256i w, __m256i x)
{
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, _mm256_sign_epi8(x, w));
}

/* ------------------------------------------------------ decode dot tiles
 * kern_avx2.c's layout: per block, the 8 int32 lanes to float, fma'd with
 * dw*dx into 8-lane accumulators, two accumulators over alternating blocks,
 * one horizontal sum at the end. */

K5I float hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

K5I void q8dot_block(bool is_q4, int NX, int b, __m256 *acc, size_t acc_stride, const void *w, const uint8_t *x,
                     size_t xs)
{
    __m256i wq;
    float dw;
    if (is_q4) {
        const block_q4_0 *w4 = (const block_q4_0 *)w + b;
        wq = q4_0_load(w4);
        dw = f16s(w4->d);
    } else {
        const block_q8_0 *w8 = (const block_q8_0 *)w + b;
        wq = _mm256_loadu_si256((const __m256i *)w8->qs);
        dw = f16s(w8->d);
    }
    const __m256i aw = _mm256_sign_epi8(wq, wq);
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) {
        const block_q8_0 *xb = (const block_q8_0 *)(x + r * xs) + b;
        const __m256 p = _mm256_cvtepi32_ps(dot_i8_i32(aw, wq, _mm256_loadu_si256((const __m256i *)xb->qs)));
        acc[r * acc_stride] = _mm256_fmadd_ps(_mm256_set1_ps(dw * f16s(xb->d)), p, acc[r * acc_stride]);
    }
}

K5I void q8dot_tile(bool is_q4, int NX, int nb, float *s, size_t ss, const void *w, const uint8_t *x, size_t xs)
{
    __m256 acc[KERN_DOT_NX_MAX][2];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    int b = 0;
    for (; b + 2 <= nb; b += 2) {
        q8dot_block(is_q4, NX, b, &acc[0][0], 2, w, x, xs);
        q8dot_block(is_q4, NX, b + 1, &acc[0][1], 2, w, x, xs);
    }
    if (b < nb) q8dot_block(is_q4, NX, b, &acc[0][0], 2, w, x, xs);
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) s[r * ss] = hsum_ps(_mm256_add_ps(acc[r][0], acc[r][1]));
}

KERN_Q8DOT_DRIVER(dot_q8_0_x512, K5, q8dot_tile, false)
KERN_Q8DOT_DRIVER(dot_q4_0_x512, K5, q8dot_tile, true)

/* No ggml-row GEMM tiles (gemm[DT_Q8_0/Q4_0]): kern_matmul never reaches
 * them for these types (m <= KERN_DOT_MAX_M takes the dot tiles, larger m
 * the per-call packed GEMM), so the stacked table keeps AVX2's. */

/* The reference's float step per lane of the packed tile:
 *   Q8_0: s + (float)isum * (dw * dx),  Q4_0: s + ((float)isum * dw) * dx. */
K5I __m256 q8_acc8(bool is_q4, __m256 s, __m256i isum, __m256 dw, float dx)
{
    const __m256 f = _mm256_cvtepi32_ps(isum), vx = _mm256_set1_ps(dx);
    return _mm256_add_ps(s, is_q4 ? _mm256_mul_ps(_mm256_mul_ps(f, dw), vx) : _mm256_mul_ps(f, _mm256_mul_ps(dw, vx)));
}


/* ------------------------------------------------------- packed GEMM
 * kern_pack.c's layout (8 weight rows per group; per block, 32-byte vectors
 * of 4 consecutive values of each row; the f16 scales after the quants): a
 * broadcast of 4 activation bytes against a vector gives the 8 rows' partial
 * sums in 8 lanes, so the reference's float chain runs per lane. The
 * activations come re-laid by kern_matmul (kern_px, filled by the AVX2
 * variant's px_row: the layout is kern_impl.h's). */

/* Software prefetch: for one activation row the CPU's stream prefetch
 * (kern_pf_stream, kern_impl.h: none on Zen 4, 16 KiB on Zen 5, 8 KiB into
 * L2 elsewhere). With the scales interleaved with the quants (kern_pack.c)
 * a group is read at rising addresses, and at m = 1 Zen 4's hardware
 * prefetcher keeps up alone: software prefetches on top cost queue slots.
 * From m = 2 on, a group takes longer to compute and the hardware
 * prefetcher alone falls behind on every CPU measured, so more rows
 * prefetch Q8P_PREFETCH_* bytes ahead into L2: for Q4_0 16 KiB, as many
 * blocks ahead as Q8_0's 8 KiB (a Q4_0 block is half the bytes; Q8_0 read
 * no better at 16). Distances (bytes ahead; 0 = none) and hint stay
 * overridable for other machines; docs/speed.md has the measurements. */
#ifndef Q8P_PREFETCH_Q4
#define Q8P_PREFETCH_Q4 16384
#endif
#ifndef Q8P_PREFETCH_Q8
#define Q8P_PREFETCH_Q8 8192
#endif
#ifndef Q8P_HINT
#define Q8P_HINT _MM_HINT_T1
#endif

/* Independent accumulator chains per activation row and block: vpdpbusd
 * has latency 4 at 2 per cycle, so 8 chains keep it busy; with fewer rows
 * each row's block sum is split over up to 4 chains (added at the block's
 * end: integers, so exact). The counts per tile height are the measured
 * best (docs/speed.md). */
#define Q8P_CHAINS(NX) ((NX) >= 3 ? 2 : 4)

K5I void q8p_tile(bool is_q4, int NX, int nw, int nb, float *y, size_t ys, const uint8_t *wp, const kern_px *px)
{
    const int CH = Q8P_CHAINS(NX);
    const size_t gq = is_q4 ? 128 : 256; /* bytes of one block's quants in a group */
    const size_t pf = NX == 1 ? (size_t)kern_pf_stream : is_q4 ? Q8P_PREFETCH_Q4 : Q8P_PREFETCH_Q8; /* 0 = none */
    const __m256i m4 = _mm256_set1_epi8(0x0F), m4h = _mm256_set1_epi8((char)0xF0), flip = _mm256_set1_epi8((char)0x80);
    const __m256i offmul = _mm256_set1_epi16(is_q4 ? 1 : 16); /* q4off (-8 sum x) times 1 or 16 */
    const size_t rows = px->rows;
    const int8_t *xq = px->q;
    const kern_xblk *xa = px->a;
    __m256 acc[8];
#pragma GCC unroll 8
    for (int r = 0; r < NX; r++) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++, xq += rows * 32, xa += rows) {
        const uint8_t *g = kern_pack_quants(wp, gq, b);
        if (pf) KERN_PACK_PREFETCH(g, gq, b, pf, Q8P_HINT);
        __m256i is[8][4];
#pragma GCC unroll 8
        for (int r = 0; r < NX; r++) {
            is[r][0] = dpwssd_b32(_mm256_setzero_si256(), offmul, &xa[r].q4off);
#pragma GCC unroll 4
            for (int c = 1; c < CH; c++) is[r][c] = _mm256_setzero_si256();
        }
        if (is_q4) {
            /* vector v: low nibbles = elements 4v..4v+3, high = 16+4v..;
             * the high nibbles stay in place (16 x their value, into the
             * odd chains, shifted down once at the block's end: exact) */
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) {
                const __m256i pv = _mm256_load_si256((const __m256i *)(g + 32 * v));
                const __m256i lo = _mm256_and_si256(pv, m4), hi = _mm256_and_si256(pv, m4h);
#pragma GCC unroll 8
                for (int r = 0; r < NX; r++) {
                    __m256i *c0 = &is[r][(2 * v) % CH], *c1 = &is[r][(2 * v + 1) % CH];
                    *c0 = dpbusd_b32(*c0, lo, xq + 32 * r + 4 * v);
                    *c1 = dpbusd_b32(*c1, hi, xq + 32 * r + 16 + 4 * v);
                }
            }
        } else {
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m256i wu = _mm256_xor_si256(_mm256_load_si256((const __m256i *)(g + 32 * k)), flip);
#pragma GCC unroll 8
                for (int r = 0; r < NX; r++) is[r][k % CH] = dpbusd_b32(is[r][k % CH], wu, xq + 32 * r + 4 * k);
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)kern_pack_scales(wp, gq, b)));
#pragma GCC unroll 8
        for (int r = 0; r < NX; r++) {
            if (is_q4) { /* even chains: low nibbles (+ offset), odd: 16 x high nibbles */
                __m256i lo = is[r][0], hi = is[r][1];
#pragma GCC unroll 4
                for (int c = 2; c < CH; c++) {
                    if (c % 2) hi = _mm256_add_epi32(hi, is[r][c]);
                    else lo = _mm256_add_epi32(lo, is[r][c]);
                }
                is[r][0] = _mm256_add_epi32(lo, _mm256_srai_epi32(hi, 4));
            } else {
#pragma GCC unroll 4
                for (int c = 1; c < CH; c++) is[r][0] = _mm256_add_epi32(is[r][0], is[r][c]);
            }
            acc[r] = q8_acc8(is_q4, acc[r], is[r][0], dw, xa[r].d);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NX; r++) {
        if (nw == 8) {
            _mm256_storeu_ps(y + r * ys, acc[r]);
        } else {
            float out[8];
            _mm256_storeu_ps(out, acc[r]);
            for (int c = 0; c < nw; c++) y[r * ys + c] = out[c];
        }
    }
}

/* Two groups side by side in 512-bit lanes (rows 0-7: the group at wp,
 * 8-15: the one gb bytes further, nw of the 16 stored), for NX >= 2:
 * q8p_tile's operations lane for lane (the same bits), each vpdpbusd
 * serving 16 weight rows against one broadcast activation dword. On a CPU
 * with full 512-bit pipes (a zmm vpdpbusd issues as often as a ymm one, so
 * twice the products an instruction) the GEMM's multiply pipes do twice
 * the work per uop; the two weight streams cost one insert per vector.
 * (Zen 4 splits a zmm operation in two halves: no gain there, see
 * kern_avx512_fill_q8.) */
K5I void q8p_tile2(bool is_q4, int NX, int nw, int nb, float *y, size_t ys, const uint8_t *wp, size_t gb, const kern_px *px)
{
    const int CH = Q8P_CHAINS(NX);
    const size_t gq = is_q4 ? 128 : 256;
    const size_t pf = is_q4 ? Q8P_PREFETCH_Q4 : Q8P_PREFETCH_Q8;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m4h = _mm512_set1_epi8((char)0xF0), flip = _mm512_set1_epi8((char)0x80);
    const __m512i offmul = _mm512_set1_epi16(is_q4 ? 1 : 16);
    const size_t rows = px->rows;
    const int8_t *xq = px->q;
    const kern_xblk *xa = px->a;
    const uint8_t *wb = wp + gb;
    __m512 acc[8];
#pragma GCC unroll 8
    for (int r = 0; r < NX; r++) acc[r] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++, xq += rows * 32, xa += rows) {
        const uint8_t *ga = kern_pack_quants(wp, gq, b), *gbq = kern_pack_quants(wb, gq, b);
        if (pf) {
            KERN_PACK_PREFETCH(ga, gq, b, pf, Q8P_HINT);
            KERN_PACK_PREFETCH(gbq, gq, b, pf, Q8P_HINT);
        }
        __m512i is[8][4];
#pragma GCC unroll 8
        for (int r = 0; r < NX; r++) {
            is[r][0] = _mm512_dpwssd_epi32(_mm512_setzero_si512(), offmul, _mm512_set1_epi32(xa[r].q4off));
#pragma GCC unroll 4
            for (int c = 1; c < CH; c++) is[r][c] = _mm512_setzero_si512();
        }
        if (is_q4) {
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) {
                const __m512i pv = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_load_si256((const __m256i *)(ga + 32 * v))),
                                                      _mm256_load_si256((const __m256i *)(gbq + 32 * v)), 1);
                const __m512i lo = _mm512_and_si512(pv, m4), hi = _mm512_and_si512(pv, m4h);
#pragma GCC unroll 8
                for (int r = 0; r < NX; r++) {
                    __m512i *c0 = &is[r][(2 * v) % CH], *c1 = &is[r][(2 * v + 1) % CH];
                    int32_t w0, w1;
                    memcpy(&w0, xq + 32 * r + 4 * v, 4);
                    memcpy(&w1, xq + 32 * r + 16 + 4 * v, 4);
                    *c0 = _mm512_dpbusd_epi32(*c0, lo, _mm512_set1_epi32(w0));
                    *c1 = _mm512_dpbusd_epi32(*c1, hi, _mm512_set1_epi32(w1));
                }
            }
        } else {
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m512i pv = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_load_si256((const __m256i *)(ga + 32 * k))),
                                                      _mm256_load_si256((const __m256i *)(gbq + 32 * k)), 1);
                const __m512i wu = _mm512_xor_si512(pv, flip);
#pragma GCC unroll 8
                for (int r = 0; r < NX; r++) {
                    int32_t w0;
                    memcpy(&w0, xq + 32 * r + 4 * k, 4);
                    is[r][k % CH] = _mm512_dpbusd_epi32(is[r][k % CH], wu, _mm512_set1_epi32(w0));
                }
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_set_m128i(_mm_load_si128((const __m128i *)kern_pack_scales(wb, gq, b)),
                                                           _mm_load_si128((const __m128i *)kern_pack_scales(wp, gq, b))));
#pragma GCC unroll 8
        for (int r = 0; r < NX; r++) {
            if (is_q4) {
                __m512i lo = is[r][0], hi = is[r][1];
#pragma GCC unroll 4
                for (int c = 2; c < CH; c++) {
                    if (c % 2) hi = _mm512_add_epi32(hi, is[r][c]);
                    else lo = _mm512_add_epi32(lo, is[r][c]);
                }
                is[r][0] = _mm512_add_epi32(lo, _mm512_srai_epi32(hi, 4));
            } else {
#pragma GCC unroll 4
                for (int c = 1; c < CH; c++) is[r][0] = _mm512_add_epi32(is[r][0], is[r][c]);
            }
            const __m512 f = _mm512_cvtepi32_ps(is[r][0]), vx = _mm512_set1_ps(xa[r].d);
            acc[r] = _mm512_add_ps(acc[r], is_q4 ? _mm512_mul_ps(_mm512_mul_ps(f, dw), vx) : _mm512_mul_ps(f, _mm512_mul_ps(dw, vx)));
        }
    }
    const __mmask16 keep = (__mmask16)((1u << nw) - 1);
#pragma GCC unroll 8
    for (int r = 0; r < NX; r++) _mm512_mask_storeu_ps(y + r * ys, keep, acc[r]);
}

/* The packed GEMM over up to two groups (kern_packed.gw = 2): a pair in
 * one q8p_tile2 sweep when nx >= Q8P_PAIR_MIN_NX; a lone group, or m = 1,
 * by q8p_tile: one weight stream at a time, which reads DRAM better at
 * decode than the pair's two (docs/speed.md), as for the F16 tile. */
#ifndef Q8P_PAIR_MIN_NX
#define Q8P_PAIR_MIN_NX 2
#endif
#define Q8P_NX_CASES(CALL) \
    switch (nx) {          \
    case 1: CALL(1); break; \
    case 2: CALL(2); break; \
    case 3: CALL(3); break; \
    case 4: CALL(4); break; \
    case 5: CALL(5); break; \
    case 6: CALL(6); break; \
    case 7: CALL(7); break; \
    default: CALL(8); break; \
    }
#define Q8P_PAIR_DRIVER(name, is_q4)                                                                    \
    static K5 void name(int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xs,   \
                        const kern_px *px, int nx)                                                     \
    {                                                                                                  \
        (void)x, (void)xs;                                                                             \
        const int nb = n / 32;                                                                         \
        const bool q4 = (is_q4);                                                                       \
        const size_t gb = kern_pack_group_bytes(q4 ? DT_Q4_0 : DT_Q8_0, n);                            \
        const uint8_t *w8 = wp;                                                                        \
        if (nw > KERN_PACK_ROWS && nx >= Q8P_PAIR_MIN_NX) {                                            \
            assert(nw <= 2 * KERN_PACK_ROWS);                                                          \
            Q8P_NX_CASES(Q8P_T2_)                                                                      \
            return;                                                                                    \
        }                                                                                              \
        for (int c = 0; c < nw; c += KERN_PACK_ROWS, w8 += gb) {                                       \
            const int cw = nw - c < KERN_PACK_ROWS ? nw - c : KERN_PACK_ROWS;                          \
            Q8P_NX_CASES(Q8P_T1_)                                                                      \
        }                                                                                              \
    }
#define Q8P_T2_(NX) q8p_tile2(q4, NX, nw, nb, y, ys, w8, gb, px)
#define Q8P_T1_(NX) q8p_tile(q4, NX, cw, nb, y + c, ys, w8, px)
Q8P_PAIR_DRIVER(gemmp_q4_0_x512, true)
Q8P_PAIR_DRIVER(gemmp_q8_0_x512, false)

void kern_avx512_fill_q8(kern_vtable *t)
{
    /* the activations' re-laid copy is the AVX2 variant's (same bytes for
     * any variant: kern_impl.h's kern_px/kern_xblk); its tile height too */
    const kern_vtable *a2 = kern_vt_avx2();
    t->dot[DT_Q8_0] = dot_q8_0_x512;
    t->dot[DT_Q4_0] = dot_q4_0_x512;
    t->packed[DT_Q8_0] = (kern_packed){a2->packed[DT_Q8_0].nx, a2->packed[DT_Q8_0].px_row, gemmp_q8_0_x512, 2, NULL, NULL};
    t->packed[DT_Q4_0] = (kern_packed){a2->packed[DT_Q4_0].nx, a2->packed[DT_Q4_0].px_row, gemmp_q4_0_x512, 2, NULL, NULL};
}

#else

void kern_avx512_fill_q8(kern_vtable *t) { (void)t; }

#endif
