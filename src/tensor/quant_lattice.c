/* quant_lattice.c - the lattice i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
 * IQ3_S, IQ1_S, IQ1_M; layouts in blocks.h, codebooks in quant_grids.h):
 * dequantization in ggml's float operations (so the bits are ggml's, which
 * test_tensor checks), and each super-block as integers for the dot
 * kernels: x[i] = d * sc[i / 16] * q[i], exactly.
 *
 * The quantizer is quant_lattice_enc.c.
 */
#include <assert.h>

#include "tensor/half.h"
#include "tensor/quant.h"
#include "tensor/quant_grids.h"

quant_grid_tables quant_grids;

static uint64_t expand8(uint16_t e, const uint8_t *lv)
{
    uint64_t v = 0;
    for (int j = 0; j < 8; j++) v |= (uint64_t)lv[(e >> (2 * j)) & 3] << (8 * j);
    return v;
}

static uint32_t expand4(uint16_t e, const uint8_t *lv)
{
    uint32_t v = 0;
    for (int j = 0; j < 4; j++) v |= (uint32_t)lv[(e >> (3 * j)) & 7] << (8 * j);
    return v;
}

__attribute__((constructor)) static void quant_grids_expand(void)
{
    static const uint8_t iq2[3] = {8, 25, 43}, iq1[3] = {0xFF, 0, 1};
    static const uint8_t iq3xxs[8] = {4, 12, 20, 28, 36, 44, 52, 62}, iq3s[8] = {1, 3, 5, 7, 9, 11, 13, 15};
    for (int e = 0; e < 256; e++) quant_grids.iq2xxs[e] = expand8(quant_grid_iq2xxs[e], iq2);
    for (int e = 0; e < 512; e++) quant_grids.iq2xs[e] = expand8(quant_grid_iq2xs[e], iq2);
    for (int e = 0; e < 1024; e++) quant_grids.iq2s[e] = expand8(quant_grid_iq2s[e], iq2);
    for (int e = 0; e < 2048; e++) quant_grids.iq1s[e] = expand8(quant_grid_iq1s[e], iq1);
    for (int e = 0; e < 256; e++) quant_grids.iq3xxs[e] = expand4(quant_grid_iq3xxs[e], iq3xxs);
    for (int e = 0; e < 512; e++) quant_grids.iq3s[e] = expand4(quant_grid_iq3s[e], iq3s);
    for (uint32_t f = 0; f < 128; f++) {
        uint64_t m = 0;
        for (int j = 0; j < 8; j++) m |= (uint64_t)(quant_signs7(f) >> j & 1 ? 0xFF : 0) << (8 * j);
        quant_grids.signs7[f] = m;
    }
}

static inline uint32_t load_u32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint8_t grid_byte(uint64_t g, int j) { return (uint8_t)(g >> (8 * j)); }

/* --------------------------------------------------------- dequantization */

void quant_iq2_xxs_dequant_row(const block_iq2_xxs *x, float *y, int64_t n)
{
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = f16_to_f32(x[b].d);
        for (int s = 0; s < 8; s++) {
            const uint32_t idx = load_u32(x[b].qs + 4 * s), sg = load_u32(x[b].qs + 4 * s + 2);
            const float db = d * (0.5f + (float)(sg >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++) {
                const uint64_t g = quant_grids.iq2xxs[(idx >> (8 * l)) & 0xFF];
                const uint8_t signs = quant_signs7((sg >> (7 * l)) & 127);
                for (int j = 0; j < 8; j++) y[j] = db * (float)grid_byte(g, j) * (signs >> j & 1 ? -1.f : 1.f);
                y += 8;
            }
        }
    }
}

void quant_iq2_xs_dequant_row(const block_iq2_xs *x, float *y, int64_t n)
{
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = f16_to_f32(x[b].d);
        for (int s = 0; s < 8; s++) {
            const float db[2] = {d * (0.5f + (float)(x[b].scales[s] & 0xF)) * 0.25f,
                                 d * (0.5f + (float)(x[b].scales[s] >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++) {
                const uint16_t q = x[b].qs[4 * s + l];
                const uint64_t g = quant_grids.iq2xs[q & 511];
                const uint8_t signs = quant_signs7(q >> 9);
                for (int j = 0; j < 8; j++) y[j] = db[l / 2] * (float)grid_byte(g, j) * (signs >> j & 1 ? -1.f : 1.f);
                y += 8;
            }
        }
    }
}

void quant_iq2_s_dequant_row(const block_iq2_s *x, float *y, int64_t n)
{
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = f16_to_f32(x[b].d);
        const uint8_t *qs = x[b].qs, *signs = x[b].qs + QK_K / 8;
        for (int s = 0; s < 8; s++) {
            const float db[2] = {d * (0.5f + (float)(x[b].scales[s] & 0xF)) * 0.25f,
                                 d * (0.5f + (float)(x[b].scales[s] >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++) {
                const uint64_t g = quant_grids.iq2s[qs[4 * s + l] | ((x[b].qh[s] << (8 - 2 * l)) & 0x300)];
                for (int j = 0; j < 8; j++)
                    y[j] = db[l / 2] * (float)grid_byte(g, j) * (signs[4 * s + l] >> j & 1 ? -1.f : 1.f);
                y += 8;
            }
        }
    }
}

void quant_iq3_xxs_dequant_row(const block_iq3_xxs *x, float *y, int64_t n)
{
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = f16_to_f32(x[b].d);
        const uint8_t *qs = x[b].qs;
        for (int s = 0; s < 8; s++) {
            const uint32_t sg = load_u32(x[b].qs + QK_K / 4 + 4 * s);
            const float db = d * (0.5f + (float)(sg >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++) {
                const uint8_t signs = quant_signs7((sg >> (7 * l)) & 127);
                const uint32_t g1 = quant_grids.iq3xxs[qs[2 * l]], g2 = quant_grids.iq3xxs[qs[2 * l + 1]];
                for (int j = 0; j < 4; j++) {
                    y[j] = db * (float)grid_byte(g1, j) * (signs >> j & 1 ? -1.f : 1.f);
                    y[j + 4] = db * (float)grid_byte(g2, j) * (signs >> (j + 4) & 1 ? -1.f : 1.f);
                }
                y += 8;
            }
            qs += 8;
        }
    }
}

void quant_iq3_s_dequant_row(const block_iq3_s *x, float *y, int64_t n)
{
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = f16_to_f32(x[b].d);
        for (int s = 0; s < 8; s++) {
            const uint8_t *qs = x[b].qs + 8 * s, *signs = x[b].signs + 4 * s, qh = x[b].qh[s];
            const float db = d * (float)(1 + 2 * ((x[b].scales[s / 2] >> (4 * (s & 1))) & 0xF));
            for (int l = 0; l < 4; l++) {
                const uint32_t g1 = quant_grids.iq3s[qs[2 * l] | ((qh << (8 - 2 * l)) & 256)];
                const uint32_t g2 = quant_grids.iq3s[qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256)];
                for (int j = 0; j < 4; j++) {
                    y[j] = db * (float)grid_byte(g1, j) * (signs[l] >> j & 1 ? -1.f : 1.f);
                    y[j + 4] = db * (float)grid_byte(g2, j) * (signs[l] >> (j + 4) & 1 ? -1.f : 1.f);
                }
                y += 8;
            }
        }
    }
}

void quant_iq1_s_dequant_row(const block_iq1_s *x, float *y, int64_t n)
{
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = f16_to_f32(x[b].d);
        for (int s = 0; s < 8; s++) {
            const uint16_t qh = x[b].qh[s];
            const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
            const float delta = qh & 0x8000 ? -0.125f : 0.125f;
            for (int l = 0; l < 4; l++) {
                const uint64_t g = quant_grids.iq1s[x[b].qs[4 * s + l] | (((qh >> (3 * l)) & 7) << 8)];
                for (int j = 0; j < 8; j++) y[j] = dl * ((float)(int8_t)grid_byte(g, j) + delta);
                y += 8;
            }
        }
    }
}

/* IQ1_M's super-block scale: an f16 whose 4 nibbles are the top nibbles of
 * the 4 little-endian u16 of scales[]. */
static uint16_t iq1_m_d(const block_iq1_m *x, uint16_t sc[4])
{
    memcpy(sc, x->scales, 8);
    return (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
}

/* Group l (0..3, 8 elements) of IQ1_M sub-block s: grid index and whether
 * its delta is negative. */
static int iq1_m_index(const block_iq1_m *x, int s, int l, bool *neg)
{
    const uint8_t qh = x->qh[2 * s + l / 2];
    *neg = qh & (l & 1 ? 0x80 : 0x08);
    return x->qs[4 * s + l] | ((l & 1 ? qh << 4 : qh << 8) & 0x700);
}

void quant_iq1_m_dequant_row(const block_iq1_m *x, float *y, int64_t n)
{
    for (int64_t b = 0; b < n / QK_K; b++) {
        uint16_t sc[4];
        const float d = f16_to_f32(iq1_m_d(&x[b], sc));
        for (int s = 0; s < 8; s++) {
            const float dl[2] = {d * (float)(2 * ((sc[s / 2] >> (6 * (s % 2))) & 7) + 1),
                                 d * (float)(2 * ((sc[s / 2] >> (6 * (s % 2) + 3)) & 7) + 1)};
            for (int l = 0; l < 4; l++) {
                bool neg;
                const uint64_t g = quant_grids.iq1s[iq1_m_index(&x[b], s, l, &neg)];
                const float delta = neg ? -0.125f : 0.125f;
                for (int j = 0; j < 8; j++) y[j] = dl[l / 2] * ((float)(int8_t)grid_byte(g, j) + delta);
                y += 8;
            }
        }
    }
}

/* ------------------------------------------------------ integer view */

float quant_lattice_d(uint32_t t, const void *row, int64_t b)
{
    switch (t) {
    case DT_IQ2_XXS: return f16_to_f32(((const block_iq2_xxs *)row)[b].d) * 0.125f;
    case DT_IQ2_XS: return f16_to_f32(((const block_iq2_xs *)row)[b].d) * 0.125f;
    case DT_IQ2_S: return f16_to_f32(((const block_iq2_s *)row)[b].d) * 0.125f;
    case DT_IQ3_XXS: return f16_to_f32(((const block_iq3_xxs *)row)[b].d) * 0.25f;
    case DT_IQ3_S: return f16_to_f32(((const block_iq3_s *)row)[b].d);
    case DT_IQ1_S: return f16_to_f32(((const block_iq1_s *)row)[b].d) * 0.125f;
    default: {
        assert(t == DT_IQ1_M);
        uint16_t sc[4];
        return f16_to_f32(iq1_m_d((const block_iq1_m *)row + b, sc)) * 0.125f;
    }
    }
}

bool quant_is_lattice(uint32_t t)
{
    return t == DT_IQ2_XXS || t == DT_IQ2_XS || t == DT_IQ2_S || t == DT_IQ3_XXS || t == DT_IQ3_S ||
           t == DT_IQ1_S || t == DT_IQ1_M;
}

/* 8 values of a grid entry with 8 signs into q. */
static inline void put8(int8_t *q, uint64_t g, uint8_t signs)
{
    for (int j = 0; j < 8; j++) {
        const int v = grid_byte(g, j);
        q[j] = (int8_t)(signs >> j & 1 ? -v : v);
    }
}

static inline void put4(int8_t *q, uint32_t g, uint8_t signs4)
{
    for (int j = 0; j < 4; j++) {
        const int v = grid_byte(g, j);
        q[j] = (int8_t)(signs4 >> j & 1 ? -v : v);
    }
}

/* IQ1: 8 (g + delta) as 8g +- 1. */
static inline void put8_iq1(int8_t *q, uint64_t g, bool neg)
{
    for (int j = 0; j < 8; j++) q[j] = (int8_t)(8 * (int8_t)grid_byte(g, j) + (neg ? -1 : 1));
}

void quant_lattice_unpack(uint32_t t, const void *row, int64_t b, quant_lattice_block *u)
{
    int8_t *q = u->q;
    u->d = quant_lattice_d(t, row, b);
    switch (t) {
    case DT_IQ2_XXS: {
        const block_iq2_xxs *x = (const block_iq2_xxs *)row + b;
        for (int s = 0; s < 8; s++) {
            const uint32_t idx = load_u32(x->qs + 4 * s), sg = load_u32(x->qs + 4 * s + 2);
            u->sc[2 * s] = u->sc[2 * s + 1] = (int8_t)(2 * (sg >> 28) + 1);
            for (int l = 0; l < 4; l++, q += 8)
                put8(q, quant_grids.iq2xxs[(idx >> (8 * l)) & 0xFF], quant_signs7((sg >> (7 * l)) & 127));
        }
        break;
    }
    case DT_IQ2_XS: {
        const block_iq2_xs *x = (const block_iq2_xs *)row + b;
        for (int s = 0; s < 8; s++) {
            u->sc[2 * s] = (int8_t)(2 * (x->scales[s] & 0xF) + 1);
            u->sc[2 * s + 1] = (int8_t)(2 * (x->scales[s] >> 4) + 1);
            for (int l = 0; l < 4; l++, q += 8) {
                const uint16_t e = x->qs[4 * s + l];
                put8(q, quant_grids.iq2xs[e & 511], quant_signs7(e >> 9));
            }
        }
        break;
    }
    case DT_IQ2_S: {
        const block_iq2_s *x = (const block_iq2_s *)row + b;
        for (int s = 0; s < 8; s++) {
            u->sc[2 * s] = (int8_t)(2 * (x->scales[s] & 0xF) + 1);
            u->sc[2 * s + 1] = (int8_t)(2 * (x->scales[s] >> 4) + 1);
            for (int l = 0; l < 4; l++, q += 8)
                put8(q, quant_grids.iq2s[x->qs[4 * s + l] | ((x->qh[s] << (8 - 2 * l)) & 0x300)],
                     x->qs[QK_K / 8 + 4 * s + l]);
        }
        break;
    }
    case DT_IQ3_XXS: {
        const block_iq3_xxs *x = (const block_iq3_xxs *)row + b;
        for (int s = 0; s < 8; s++) {
            const uint32_t sg = load_u32(x->qs + QK_K / 4 + 4 * s);
            u->sc[2 * s] = u->sc[2 * s + 1] = (int8_t)(2 * (sg >> 28) + 1);
            for (int l = 0; l < 4; l++, q += 8) {
                const uint8_t signs = quant_signs7((sg >> (7 * l)) & 127);
                put4(q, quant_grids.iq3xxs[x->qs[8 * s + 2 * l]], signs & 0xF);
                put4(q + 4, quant_grids.iq3xxs[x->qs[8 * s + 2 * l + 1]], signs >> 4);
            }
        }
        break;
    }
    case DT_IQ3_S: {
        const block_iq3_s *x = (const block_iq3_s *)row + b;
        for (int s = 0; s < 8; s++) {
            const uint8_t *qs = x->qs + 8 * s, *signs = x->signs + 4 * s, qh = x->qh[s];
            u->sc[2 * s] = u->sc[2 * s + 1] = (int8_t)(1 + 2 * ((x->scales[s / 2] >> (4 * (s & 1))) & 0xF));
            for (int l = 0; l < 4; l++, q += 8) {
                put4(q, quant_grids.iq3s[qs[2 * l] | ((qh << (8 - 2 * l)) & 256)], signs[l] & 0xF);
                put4(q + 4, quant_grids.iq3s[qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256)], signs[l] >> 4);
            }
        }
        break;
    }
    case DT_IQ1_S: {
        const block_iq1_s *x = (const block_iq1_s *)row + b;
        for (int s = 0; s < 8; s++) {
            const uint16_t qh = x->qh[s];
            u->sc[2 * s] = u->sc[2 * s + 1] = (int8_t)(2 * ((qh >> 12) & 7) + 1);
            for (int l = 0; l < 4; l++, q += 8)
                put8_iq1(q, quant_grids.iq1s[x->qs[4 * s + l] | (((qh >> (3 * l)) & 7) << 8)], qh & 0x8000);
        }
        break;
    }
    case DT_IQ1_M: {
        const block_iq1_m *x = (const block_iq1_m *)row + b;
        uint16_t sc[4];
        iq1_m_d(x, sc);
        for (int s = 0; s < 8; s++) {
            u->sc[2 * s] = (int8_t)(2 * ((sc[s / 2] >> (6 * (s % 2))) & 7) + 1);
            u->sc[2 * s + 1] = (int8_t)(2 * ((sc[s / 2] >> (6 * (s % 2) + 3)) & 7) + 1);
            for (int l = 0; l < 4; l++, q += 8) {
                bool neg;
                const int e = iq1_m_index(x, s, l, &neg);
                put8_iq1(q, quant_grids.iq1s[e], neg);
            }
        }
        break;
    }
    default: assert(!"quant_lattice_unpack: not a lattice type");
    }
}
