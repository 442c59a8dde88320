/* kv_dtype.c - the KV dtype table and its byte arithmetic; see kv_dtype.h.
 *
 * Sizes are uint64_t and every product and sum is overflow-checked (a
 * result of 0 means "does not fit or overflows"), because the dimensions
 * come from GGUF files and command-line flags.
 */
#include "kv/kv_dtype.h"

#include "base/err.h"
#include "base/mem.h"
#include "tensor/dtype.h"

#include <assert.h>
#include <stddef.h>
#include <stdio.h>
#include <strings.h>

/* Rows of plain elements of `bytes` each, no tail. */
#define KV_PLAIN(bytes) {KV_LAYOUT_ROWS, 1, (bytes), 0, 0}
/* Rows of ggml blocks of 32 elements (the scale sits inside each block). */
#define KV_GROUP32(bytes) {KV_LAYOUT_ROWS, 32, (bytes), 0, 0}
/* KIVI keys: per-channel columns of `bits`-bit codes + f16 scale and min. */
#define KV_KIVI_K(bits) {KV_LAYOUT_CHANNELS, 1, 4, 0, (bits)}
/* KIVI values: rows of groups of 32: f16 scale, f16 min, 32 codes. */
#define KV_KIVI_V(bits) {KV_LAYOUT_ROWS, 32, 4 + 32 * (bits) / 8, 0, (bits)}

static const kv_dtype_traits kv_traits[KV_DTYPE_COUNT] = {
    [KV_F32] = {"f32", "4 bytes per element", KV_F32, {KV_PLAIN(4), KV_PLAIN(4)}},
    /* keys in columns, values in rows grouped by head (see kv_dtype.h: the decode attention's layout) */
    [KV_F16] = {"f16", "2 bytes per element (IEEE half)", KV_F16,
                {{KV_LAYOUT_COLUMNS, 1, 2, 0, 0}, {KV_LAYOUT_HEADS, 1, 2, 0, 0}}},
    [KV_BF16] = {"bf16", "2 bytes per element (bfloat16)", KV_BF16, {KV_PLAIN(2), KV_PLAIN(2)}},
    [KV_Q8_0] = {"q8_0", "groups of 32 along the KV row: 32 x i8 + f16 scale (34 B)", KV_Q8_0,
                 {KV_GROUP32(34), KV_GROUP32(34)}},
    [KV_Q4_0] = {"q4_0", "groups of 32 along the KV row: 32 x 4 bit + f16 scale (18 B)", KV_Q4_0,
                 {KV_GROUP32(18), KV_GROUP32(18)}},
    /* One f32 scale per (block, layer, K|V, KV head): 4 bytes per head in
     * each plane's tail. Staged like KIVI: the block being filled stays in
     * f16 and is encoded when full, with scales chosen from the whole block
     * (kv_codec.h says why). */
    [KV_FP8_E4M3] = {"fp8_e4m3", "1 byte per element + an f32 scale per block, layer, K|V and KV head; "
                                 "the filling block in f16 per sequence",
                     KV_F16, {{KV_LAYOUT_ROWS, 1, 1, 4, 0}, {KV_LAYOUT_ROWS, 1, 1, 4, 0}}},
    [KV_FP8_E5M2] = {"fp8_e5m2", "1 byte per element, no scale", KV_FP8_E5M2, {KV_PLAIN(1), KV_PLAIN(1)}},
    /* KIVI: K per channel over the block (packed column + f16 d, m per
     * channel), V per token in groups of 32 (f16 d, m + codes); written in
     * f16 (staging) until the block is full. */
    [KV_INT4] = {"kivi4", "KIVI 4 bit: keys per channel over each block, values per token (groups of 32); "
                          "f16 scale+min per group; the filling block in f16 per sequence",
                 KV_F16, {KV_KIVI_K(4), KV_KIVI_V(4)}},
    [KV_INT2] = {"kivi2", "KIVI 2 bit: keys per channel over each block, values per token (groups of 32); "
                          "f16 scale+min per group; the filling block in f16 per sequence",
                 KV_F16, {KV_KIVI_K(2), KV_KIVI_V(2)}},
};

/* Names accepted besides the table's. */
static const struct {
    const char *alias;
    kv_dtype t;
} kv_aliases[] = {{"fp8", KV_FP8_E4M3}, {"int4", KV_INT4}, {"int2", KV_INT2}};

const kv_dtype_traits *kv_dtype_get(kv_dtype t)
{
    assert((unsigned)t < KV_DTYPE_COUNT);
    return &kv_traits[t];
}

const char *kv_dtype_name(kv_dtype t)
{
    if ((unsigned)t >= KV_DTYPE_COUNT) return "?";
    return kv_traits[t].name;
}

int kv_dtype_from_name(const char *name, kv_dtype *out)
{
    for (size_t i = 0; name && i < sizeof kv_aliases / sizeof kv_aliases[0]; i++)
        if (strcasecmp(name, kv_aliases[i].alias) == 0) { *out = kv_aliases[i].t; return 0; }
    for (int t = 0; name && t < KV_DTYPE_COUNT; t++)
        if (strcasecmp(name, kv_traits[t].name) == 0) { *out = (kv_dtype)t; return 0; }
    /* The known names, from the table, so that the text never goes stale. */
    char known[256];
    size_t n = 0;
    known[0] = 0;
    for (int t = 0; t < KV_DTYPE_COUNT && n < sizeof known; t++)
        n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", t ? ", " : "", kv_traits[t].name);
    return err_set(PL_EINVAL, "unknown KV dtype '%s' (known: %s; aliases fp8, int4, int2)", name ? name : "(null)",
                   known);
}

int kv_dtype_check(kv_dtype t, uint32_t n_kv_heads, uint32_t head_dim)
{
    if ((unsigned)t >= KV_DTYPE_COUNT) return err_set(PL_EINVAL, "KV dtype %d out of range", (int)t);
    if (n_kv_heads == 0 || head_dim == 0)
        return err_set(PL_EINVAL, "KV shape %u x %u: heads and head dim must be >= 1", n_kv_heads, head_dim);
    uint64_t kv_dim = (uint64_t)n_kv_heads * head_dim;
    for (int p = 0; p < 2; p++) {
        const kv_plane_traits *pt = &kv_traits[t].plane[p];
        if (kv_layout_rows(pt->layout) && kv_dim % pt->group != 0)
            return err_set(PL_EINVAL, "%s needs the KV row (%u heads x %u = %llu) to be a multiple of %u",
                           kv_traits[t].name, n_kv_heads, head_dim, (unsigned long long)kv_dim, pt->group);
    }
    return 0;
}

uint32_t kv_dtype_head_type(kv_dtype t)
{
    switch (t) {
    case KV_F32: return DT_F32;
    case KV_F16: return DT_F16;
    case KV_BF16: return DT_BF16;
    case KV_Q8_0: return DT_Q8_0;
    case KV_Q4_0: return DT_Q4_0;
    default: return DT_COUNT;
    }
}

int kv_dtype_check_heads(kv_dtype t, uint32_t n_kv_heads, uint32_t head_dim)
{
    const uint32_t rt = kv_dtype_head_type(t);
    if (rt == DT_COUNT && (unsigned)t < KV_DTYPE_COUNT) {
        /* fp8 fits any shape; KIVI needs kv_dim % 32 == 0 (its value groups) */
        if (kv_dtype_check(t, n_kv_heads, head_dim) != 0)
            return err_prefix(PL_EUNSUPPORTED, "--kv-dtype %s cannot hold this model's KV", kv_dtype_name(t));
        return 0;
    }
    if (rt == DT_COUNT) return err_set(PL_EUNSUPPORTED, "--kv-dtype %s: not supported by the forward pass", kv_dtype_name(t));
    if (dtype_row_bytes(rt, head_dim) == 0)
        return err_set(PL_EUNSUPPORTED,
                       "--kv-dtype %s: this model's head dim %u is not a multiple of %u (%s quantizes each KV "
                       "head in groups of %u)", kv_dtype_name(t), head_dim, dtype_get(rt)->blck_size,
                       kv_dtype_name(t), dtype_get(rt)->blck_size);
    return 0;
}

bool kv_dtype_heads_ok(kv_dtype t, uint32_t n_kv_heads, uint32_t head_dim)
{
    const uint32_t rt = kv_dtype_head_type(t);
    if (rt == DT_COUNT && (unsigned)t < KV_DTYPE_COUNT)
        return kv_dtype_row_bytes(t, KV_PLANE_V, (uint64_t)n_kv_heads * head_dim) != 0;
    return rt != DT_COUNT && dtype_row_bytes(rt, head_dim) != 0;
}

uint64_t kv_dtype_row_bytes(kv_dtype t, kv_plane p, uint64_t kv_dim)
{
    const kv_plane_traits *pt = &kv_dtype_get(t)->plane[p];
    uint64_t r;
    if (!kv_layout_rows(pt->layout) || kv_dim == 0 || kv_dim % pt->group != 0) return 0;
    if (!mul_u64(kv_dim / pt->group, pt->group_bytes, &r)) return 0;
    return r;
}

/* KIVI keys: kv_dim x (a packed column of T codes + the channel's d, m). */
static uint64_t kv_channels_plane_bytes(const kv_plane_traits *pt, uint32_t block_size, uint64_t kv_dim)
{
    uint64_t col = ((uint64_t)block_size * pt->bits + 7) / 8, per, total;
    if (kv_dim == 0 || block_size == 0) return 0;
    if (!add_u64(col, pt->group_bytes, &per) || !mul_u64(per, kv_dim, &total)) return 0;
    return total;
}

uint64_t kv_dtype_plane_bytes(kv_dtype t, kv_plane p, uint32_t block_size, uint32_t n_kv_heads,
                              uint32_t head_dim)
{
    const kv_plane_traits *pt = &kv_dtype_get(t)->plane[p];
    if (pt->layout == KV_LAYOUT_CHANNELS) return kv_channels_plane_bytes(pt, block_size, (uint64_t)n_kv_heads * head_dim);
    if (pt->layout == KV_LAYOUT_COLUMNS) { /* T elements a channel, no tail */
        uint64_t col, total;
        if (block_size == 0 || !mul_u64(block_size, pt->group_bytes, &col) ||
            !mul_u64(col, (uint64_t)n_kv_heads * head_dim, &total))
            return 0;
        return total;
    }
    uint64_t row = kv_dtype_row_bytes(t, p, (uint64_t)n_kv_heads * head_dim);
    uint64_t rows, tail = (uint64_t)n_kv_heads * pt->head_tail_bytes, total;
    if (row == 0 || block_size == 0) return 0;
    if (!mul_u64(row, block_size, &rows) || !add_u64(rows, tail, &total)) return 0;
    return total;
}

double kv_dtype_bytes_per_token(kv_dtype t, uint32_t n_layers, uint32_t n_kv_heads, uint32_t head_dim,
                                uint32_t block_size)
{
    uint64_t k = kv_dtype_plane_bytes(t, KV_PLANE_K, block_size, n_kv_heads, head_dim);
    uint64_t v = kv_dtype_plane_bytes(t, KV_PLANE_V, block_size, n_kv_heads, head_dim);
    uint64_t kv, all;
    if (k == 0 || v == 0 || n_layers == 0) return 0;
    if (!add_u64(k, v, &kv) || !mul_u64(kv, n_layers, &all))
        return (double)n_layers * ((double)k + (double)v) / (double)block_size;
    /* One division of the exact block total: exact whenever it divides. */
    return (double)all / (double)block_size;
}

uint64_t kv_dtype_stage_bytes(kv_dtype t, uint32_t n_layers, uint32_t n_kv_heads, uint32_t head_dim,
                              uint32_t block_size)
{
    uint64_t r = 2 * 2; /* K and V, 2 bytes per f16 element */
    if (!kv_dtype_staged(t) || n_layers == 0 || block_size == 0 || n_kv_heads == 0 || head_dim == 0) return 0;
    if (!mul_u64(r, n_layers, &r) || !mul_u64(r, block_size, &r) || !mul_u64(r, n_kv_heads, &r) ||
        !mul_u64(r, head_dim, &r))
        return 0;
    return r;
}
