/* attention_mla_driver.h - the part of the latent attention's SIMD files
 * that is the same for every instruction set: the value pass's walk over
 * runs of MLA_VROWS rows and groups of 8 heads, one function per row type
 * (so each tile is compiled for its type), and the two entry points.
 *
 * Included once at the end of attention_mla_avx2.c and _avx512.c, after
 * they define:
 *   MLA_DRV_INLINE  the always-inline target attribute of their tiles,
 *   MLA_DRV_FN      the target attribute of a plain function,
 *   MLA_DRV_NAME(x) x with the file's suffix (attn_mla_scores_avx2 ...),
 *   scores_t(t, kv, q, qs, nh, j0, j1, sc, ld) and
 *   values_tile(t, i0, i1, r, rs, kp, nk, p[8], o[8]) (rs: attn_mla_row_scale
 *   of each row, kp: attn_mla_row_kivi of each row).
 */
#ifndef PL_ATTENTION_MLA_DRIVER_H
#define PL_ATTENTION_MLA_DRIVER_H

#define MLA_VROWS 16

/* out[h][i0, i1) += the rows j_begin .. j_end - 1 of every head h < nh
 * weighted by p[h][j] (row stride ld): runs of MLA_VROWS rows, 8 heads a
 * tile; a group's missing heads read head h0's weights and write to spare. */
MLA_DRV_INLINE void values_t(uint32_t t, const attn_mla_kv *kv, const float *p, size_t ld, int nh, int j_begin,
                             int j_end, int i0, int i1, float *out, size_t os, float *spare)
{
    for (int j0 = j_begin; j0 < j_end; j0 += MLA_VROWS) {
        const int nk = j_end - j0 < MLA_VROWS ? j_end - j0 : MLA_VROWS;
        const uint8_t *r[MLA_VROWS];
        float rs[MLA_VROWS];
        const uint16_t *kp[MLA_VROWS];
        for (int b = 0; b < nk; b++) { /* t is the caller's constant: no KIVI look-up for other types */
            r[b] = attn_mla_row(kv, j0 + b), rs[b] = attn_mla_row_scale(kv, j0 + b);
            kp[b] = attn_mla_kivi_bits(t) ? attn_mla_row_kivi(kv, j0 + b) : NULL;
        }
        for (int h0 = 0; h0 < nh; h0 += 8) {
            const float *pp[8];
            float *oo[8];
            for (int h = 0; h < 8; h++) {
                const bool real = h0 + h < nh;
                pp[h] = p + (size_t)(real ? h0 + h : h0) * ld + j0;
                oo[h] = real ? out + (size_t)(h0 + h) * os : spare;
            }
            values_tile(t, i0, i1, r, rs, kp, nk, pp, oo);
        }
    }
}

#define MLA_TYPED(name, T)                                                                                              \
    static MLA_DRV_FN void scores_##name(const attn_mla_kv *kv, const float *q, size_t qs, int nh, int j0, int j1,     \
                                         float *sc, size_t ld)                                                         \
    {                                                                                                                   \
        scores_t(T, kv, q, qs, nh, j0, j1, sc, ld);                                                                     \
    }                                                                                                                   \
    static MLA_DRV_FN void values_##name(const attn_mla_kv *kv, const float *p, size_t ld, int nh, int j0, int j1,     \
                                         int i0, int i1, float *out, size_t os, float *spare)                          \
    {                                                                                                                   \
        values_t(T, kv, p, ld, nh, j0, j1, i0, i1, out, os, spare);                                                     \
    }
MLA_TYPED(f32, DT_F32)
MLA_TYPED(f16, DT_F16)
MLA_TYPED(bf16, DT_BF16)
MLA_TYPED(q8_0, DT_Q8_0)
MLA_TYPED(q4_0, DT_Q4_0)
MLA_TYPED(e4m3, ATTN_KV_FP8_E4M3)
MLA_TYPED(e5m2, ATTN_KV_FP8_E5M2)
MLA_TYPED(kivi4, ATTN_MLA_KIVI4)
MLA_TYPED(kivi2, ATTN_MLA_KIVI2)
#undef MLA_TYPED

void MLA_DRV_NAME(attn_mla_scores_)(const attn_mla_kv *kv, const float *q, size_t qs, int nh, int j0, int j1,
                                    float *sc, size_t ld)
{
    switch (kv->type) {
    case DT_F32: scores_f32(kv, q, qs, nh, j0, j1, sc, ld); break;
    case DT_F16: scores_f16(kv, q, qs, nh, j0, j1, sc, ld); break;
    case DT_BF16: scores_bf16(kv, q, qs, nh, j0, j1, sc, ld); break;
    case DT_Q4_0: scores_q4_0(kv, q, qs, nh, j0, j1, sc, ld); break;
    case ATTN_KV_FP8_E4M3: scores_e4m3(kv, q, qs, nh, j0, j1, sc, ld); break;
    case ATTN_KV_FP8_E5M2: scores_e5m2(kv, q, qs, nh, j0, j1, sc, ld); break;
    case ATTN_MLA_KIVI4: scores_kivi4(kv, q, qs, nh, j0, j1, sc, ld); break;
    case ATTN_MLA_KIVI2: scores_kivi2(kv, q, qs, nh, j0, j1, sc, ld); break;
    default: scores_q8_0(kv, q, qs, nh, j0, j1, sc, ld); break;
    }
}

void MLA_DRV_NAME(attn_mla_values_)(const attn_mla_kv *kv, const float *p, size_t ld, int nh, int j0, int j1, int i0,
                                    int i1, float *out, size_t os, float *spare)
{
    switch (kv->type) {
    case DT_F32: values_f32(kv, p, ld, nh, j0, j1, i0, i1, out, os, spare); break;
    case DT_F16: values_f16(kv, p, ld, nh, j0, j1, i0, i1, out, os, spare); break;
    case DT_BF16: values_bf16(kv, p, ld, nh, j0, j1, i0, i1, out, os, spare); break;
    case DT_Q4_0: values_q4_0(kv, p, ld, nh, j0, j1, i0, i1, out, os, spare); break;
    case ATTN_KV_FP8_E4M3: values_e4m3(kv, p, ld, nh, j0, j1, i0, i1, out, os, spare); break;
    case ATTN_KV_FP8_E5M2: values_e5m2(kv, p, ld, nh, j0, j1, i0, i1, out, os, spare); break;
    case ATTN_MLA_KIVI4: values_kivi4(kv, p, ld, nh, j0, j1, i0, i1, out, os, spare); break;
    case ATTN_MLA_KIVI2: values_kivi2(kv, p, ld, nh, j0, j1, i0, i1, out, os, spare); break;
    default: values_q8_0(kv, p, ld, nh, j0, j1, i0, i1, out, os, spare); break;
    }
}

#endif
