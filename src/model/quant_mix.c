/* quant_mix.c - llama.cpp's per-tensor type rules for its quantization
 * presets (src/llama-quant.cpp: tensor_allows_quantization,
 * llama_tensor_get_type, tensor_type_fallback): the float, legacy, k-quant,
 * iq4 and ternary presets, and the lattice i-quant ones (iq3_m ... iq1_s).
 * The rules that depend on an importance matrix (iq3_xxs's attn_v and
 * ffn_down, iq4_*'s and q4_0/q5_0's first ffn_down) follow
 * quant_model.has_imatrix (without one, llama.cpp itself refuses to write
 * iq3_xxs / iq2_* / iq1_* tensors; the mix is then what its --dry-run
 * reports).
 *
 * A tensor's type, in order:
 *   1. not a weight matrix (1-D, norms, routers, positional tables...):
 *      kept as it is;
 *   2. float presets (f32, f16, bf16): that type, no fallback;
 *   3. the preset's rule for the tensor's category: the output projection
 *      (output.weight, or token_embd.weight when the model has no
 *      output.weight) gets q6_K (q5_K for iq3_xxs / iq2_* / iq1_*; q8_0 if
 *      its row does not fit the default type's block, or for q8_0 itself);
 *      attn_v and ffn_down get more bits in the layers use_more_bits()
 *      picks (q4_k_m, q5_k_m), in the first layers (q3_k_m, q4_k_s, iq4_*,
 *      iq3_xxs, iq3_m, iq2_*, iq1_*), or everywhere (q2_k, q3_k_l, and
 *      attn_v in iq3_*); attn_output gets more in q2_k / q3_k_m / q3_k_l /
 *      iq3_xxs / iq3_m / iq2_s / iq2_m / iq1_*; iq3_xs and iq3_xxs give
 *      attn_q / attn_k (and iq3_xs the middle layers' ffn_gate / ffn_up)
 *      fewer;
 *   4. fallback when the row length is not a multiple of the block:
 *      q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0, q2_K / q3_K / tq* -> q4_0,
 *      iq4_xs and the lattice types -> iq4_nl; and f16 if even that block
 *      does not divide it.
 * The layer of an attn_v / ffn_* tensor is its rank among the tensors of
 * its kind in llama.cpp's order (by "blk.<i>." number, then by name), as
 * llama.cpp counts them; MoE models (n_expert > 1) read it from the name,
 * except in the iq2_* / iq1_* mixes, whose ffn_down rule uses the rank.
 */
#include "model/quant_mix.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/err.h"
#include "base/mem.h"
#include "tensor/dtype.h"

/* llama.cpp's llama_ftype values (include/llama.h). */
enum {
    FT_F32 = 0, FT_F16 = 1, FT_Q4_0 = 2, FT_Q4_1 = 3, FT_Q8_0 = 7, FT_Q5_0 = 8, FT_Q5_1 = 9,
    FT_Q2_K = 10, FT_Q3_K_S = 11, FT_Q3_K_M = 12, FT_Q3_K_L = 13, FT_Q4_K_S = 14, FT_Q4_K_M = 15,
    FT_Q5_K_S = 16, FT_Q5_K_M = 17, FT_Q6_K = 18, FT_IQ2_XXS = 19, FT_IQ2_XS = 20, FT_IQ3_XS = 22,
    FT_IQ3_XXS = 23, FT_IQ1_S = 24, FT_IQ4_NL = 25, FT_IQ3_S = 26, FT_IQ3_M = 27, FT_IQ2_S = 28,
    FT_IQ2_M = 29, FT_IQ4_XS = 30, FT_IQ1_M = 31, FT_BF16 = 32, FT_TQ1_0 = 36, FT_TQ2_0 = 37,
};

static const quant_preset presets[] = {
    {"f32", FT_F32, DT_F32},         {"f16", FT_F16, DT_F16},         {"bf16", FT_BF16, DT_BF16},
    {"q8_0", FT_Q8_0, DT_Q8_0},      {"q4_0", FT_Q4_0, DT_Q4_0},      {"q4_1", FT_Q4_1, DT_Q4_1},
    {"q5_0", FT_Q5_0, DT_Q5_0},      {"q5_1", FT_Q5_1, DT_Q5_1},      {"q2_k", FT_Q2_K, DT_Q2_K},
    {"q3_k_s", FT_Q3_K_S, DT_Q3_K},  {"q3_k_m", FT_Q3_K_M, DT_Q3_K},  {"q3_k_l", FT_Q3_K_L, DT_Q3_K},
    {"q4_k_s", FT_Q4_K_S, DT_Q4_K},  {"q4_k_m", FT_Q4_K_M, DT_Q4_K},  {"q5_k_s", FT_Q5_K_S, DT_Q5_K},
    {"q5_k_m", FT_Q5_K_M, DT_Q5_K},  {"q6_k", FT_Q6_K, DT_Q6_K},      {"iq4_nl", FT_IQ4_NL, DT_IQ4_NL},
    {"iq4_xs", FT_IQ4_XS, DT_IQ4_XS}, {"tq1_0", FT_TQ1_0, DT_TQ1_0}, {"tq2_0", FT_TQ2_0, DT_TQ2_0},
    {"iq3_m", FT_IQ3_M, DT_IQ3_S},   {"iq3_s", FT_IQ3_S, DT_IQ3_S},   {"iq3_xs", FT_IQ3_XS, DT_IQ3_S},
    {"iq3_xxs", FT_IQ3_XXS, DT_IQ3_XXS}, {"iq2_m", FT_IQ2_M, DT_IQ2_S}, {"iq2_s", FT_IQ2_S, DT_IQ2_XS},
    {"iq2_xs", FT_IQ2_XS, DT_IQ2_XS}, {"iq2_xxs", FT_IQ2_XXS, DT_IQ2_XXS}, {"iq1_m", FT_IQ1_M, DT_IQ1_M},
    {"iq1_s", FT_IQ1_S, DT_IQ1_S},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

const quant_preset *quant_preset_find(const char *name)
{
    for (size_t i = 0; name && i < N_PRESETS; i++)
        if (strcasecmp(presets[i].name, name) == 0) return &presets[i];
    return NULL;
}

const char *const *quant_preset_names(void)
{
    static const char *names[N_PRESETS + 1];
    for (size_t i = 0; i < N_PRESETS; i++) names[i] = presets[i].name;
    return names;
}

/* ------------------------------------------------------------ categories */

typedef enum {
    CAT_OTHER, CAT_OUTPUT, CAT_TOKEN_EMBD, CAT_ATTN_V, /* attn_v, attn_qkv, attn_kv_b */
    CAT_ATTN_K, CAT_ATTN_Q, CAT_ATTN_OUTPUT, CAT_FFN_UP, CAT_FFN_GATE, CAT_FFN_DOWN,
} tensor_cat;

static tensor_cat category_of(const char *n)
{
    if (strcmp(n, "output.weight") == 0) return CAT_OUTPUT;
    if (strcmp(n, "token_embd.weight") == 0 || strcmp(n, "per_layer_token_embd.weight") == 0)
        return CAT_TOKEN_EMBD;
    if (strstr(n, "attn_qkv.weight") || strstr(n, "attn_kv_b.weight") || strstr(n, "attn_v.weight"))
        return CAT_ATTN_V;
    if (strstr(n, "attn_k.weight")) return CAT_ATTN_K;
    if (strstr(n, "attn_q.weight")) return CAT_ATTN_Q;
    if (strstr(n, "attn_output.weight")) return CAT_ATTN_OUTPUT;
    if (strstr(n, "ffn_up")) return CAT_FFN_UP;
    if (strstr(n, "ffn_gate")) return CAT_FFN_GATE;
    if (strstr(n, "ffn_down")) return CAT_FFN_DOWN;
    return CAT_OTHER;
}

/* Name parts llama.cpp never quantizes (small or structural tensors). */
static const char *const never_quantized[] = {
    "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
    "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
    "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight",
    "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight",
    "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight",
    "time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.",
    "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
};

static bool allows_quantization(const quant_mix_tensor *t)
{
    uint32_t rank = 1; /* ggml_n_dims: trailing 1s do not count */
    for (uint32_t d = 1; d < 4 && d < t->n_dims; d++)
        if (t->ne[d] > 1) rank = d + 1;
    if (rank < 2) return false;
    if (t->type == DT_I8 || t->type == DT_I16 || t->type == DT_I32 || t->type == DT_I64) return false;
    const size_t len = strlen(t->name);
    if (len < 6 || strcmp(t->name + len - 6, "weight") != 0) return false;
    if (strcmp(t->name, "position_embd.weight") == 0 || strcmp(t->name, "token_types.weight") == 0) return false;
    for (size_t i = 0; i < sizeof never_quantized / sizeof never_quantized[0]; i++)
        if (strstr(t->name, never_quantized[i])) return false;
    return true;
}

/* ----------------------------------------------------------- the rules */

typedef struct {
    uint32_t ftype;
    bool falcon, is_70b, tied, has_imatrix;
    uint32_t n_gqa, n_expert, n_layer;
    int n_attn_v, i_attn_v, i_ffn_down, i_ffn_gate, i_ffn_up;
} mix_state;

static bool use_more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* The "<i>" of a "blk.<i>." name, or -1 (llama.cpp reads it with sscanf). */
static int name_layer(const char *name)
{
    if (strncmp(name, "blk.", 4) != 0) return -1;
    const char *p = name + 4;
    if (*p < '0' || *p > '9') return -1;
    long v = 0;
    while (*p >= '0' && *p <= '9' && v < 1000000) v = v * 10 + (*p++ - '0');
    return (int)v;
}

/* The layer an ffn tensor counts as: its rank (dense), or its name's (MoE). */
static int layer_of(const mix_state *s, int rank, const char *name, int *layer)
{
    *layer = rank;
    if (s->n_expert <= 1) return 0;
    *layer = name_layer(name);
    if (*layer < 0 || (uint32_t)*layer >= s->n_layer)
        return err_set(PL_EINVAL, "tensor '%s': no layer in [0, %u) in its name (needed for an MoE mix)", name,
                       s->n_layer);
    return 0;
}

/* The iq2_* / iq1_* presets: llama.cpp gives them a rule set of their own. */
static bool low_bit_mix(uint32_t ft)
{
    return ft == FT_IQ2_XXS || ft == FT_IQ2_XS || ft == FT_IQ2_S || ft == FT_IQ2_M || ft == FT_IQ1_S
           || ft == FT_IQ1_M;
}

static uint32_t output_type(const mix_state *s, uint32_t nt, uint64_t ne0)
{
    if (s->falcon || ne0 % dtype_get(nt)->blck_size != 0) return DT_Q8_0;
    if (low_bit_mix(s->ftype) || s->ftype == FT_IQ3_XXS) return DT_Q5_K;
    return nt != DT_Q8_0 ? DT_Q6_K : nt;
}

/* token_embd.weight when the model has its own output.weight. */
static uint32_t token_embd_type(uint32_t ft, uint32_t nt)
{
    if (ft == FT_IQ2_XXS || ft == FT_IQ2_XS || ft == FT_IQ1_S || ft == FT_IQ1_M) return DT_Q2_K;
    if (ft == FT_IQ2_S || ft == FT_IQ2_M || ft == FT_IQ3_XXS) return DT_IQ3_S;
    if (ft == FT_TQ1_0 || ft == FT_TQ2_0) return DT_Q4_K;
    return nt;
}

/* Every other tensor of an iq2_* / iq1_* mix. Its ffn_down layer is the
 * tensor's rank even in MoE models (llama.cpp reads no name there). */
static uint32_t low_bit_type(mix_state *s, tensor_cat cat, uint32_t nt)
{
    const uint32_t ft = s->ftype;
    const uint32_t more = ft == FT_IQ2_S || ft == FT_IQ2_M ? DT_IQ3_S : DT_Q2_K;
    switch (cat) {
    case CAT_ATTN_V:
        s->i_attn_v++;
        return s->n_gqa >= 4 || s->n_expert >= 4 ? DT_Q4_K : more;
    case CAT_ATTN_K: return s->n_expert == 8 ? DT_Q4_K : nt;
    case CAT_FFN_DOWN: return s->i_ffn_down++ < (int)s->n_layer / 8 ? more : nt;
    case CAT_ATTN_OUTPUT:
        if (s->n_expert == 8) return DT_Q5_K;
        if (ft == FT_IQ1_S || ft == FT_IQ1_M) return DT_IQ2_XXS;
        return ft == FT_IQ2_S || ft == FT_IQ2_M ? DT_IQ3_S : nt;
    default: return nt;
    }
}

static uint32_t attn_v_type(mix_state *s, uint32_t nt)
{
    const uint32_t ft = s->ftype;
    if (ft == FT_Q2_K) nt = s->n_gqa >= 4 ? DT_Q4_K : DT_Q3_K;
    else if (ft == FT_IQ3_XXS) nt = s->n_gqa >= 4 ? DT_Q4_K : s->has_imatrix ? DT_IQ3_XXS : DT_IQ3_S;
    else if ((ft == FT_IQ3_XS || ft == FT_IQ3_S) && s->n_gqa >= 4) nt = DT_Q4_K;
    else if (ft == FT_IQ3_M) nt = DT_Q4_K;
    else if (ft == FT_Q3_K_M) nt = s->i_attn_v < 2 ? DT_Q5_K : DT_Q4_K;
    else if (ft == FT_Q3_K_L) nt = DT_Q5_K;
    else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && s->n_gqa >= 4) nt = DT_Q5_K;
    else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(s->i_attn_v, s->n_attn_v)) nt = DT_Q6_K;
    else if (ft == FT_Q4_K_S && s->i_attn_v < 4) nt = DT_Q5_K;
    /* 70B: 8 heads share attn_v, which is 8x smaller than attn_q */
    if (s->is_70b && (nt == DT_Q3_K || nt == DT_Q4_K)) nt = DT_Q5_K;
    if (s->n_expert == 8) nt = DT_Q8_0;
    s->i_attn_v++;
    return nt;
}

static uint32_t ffn_down_type(const mix_state *s, uint32_t nt, int i, int n)
{
    const uint32_t ft = s->ftype;
    if (ft == FT_Q2_K) return DT_Q3_K;
    if (ft == FT_IQ3_XXS && !s->has_imatrix) return i < n / 8 ? DT_Q4_K : DT_Q3_K;
    if (ft == FT_Q3_K_M)
        return i < n / 16 ? DT_Q5_K : !s->falcon || use_more_bits(i, n) ? DT_Q4_K : DT_Q3_K;
    if (ft == FT_IQ3_M && (i < n / 8 || (s->n_expert == 8 && use_more_bits(i, n)))) return DT_Q4_K;
    if (ft == FT_Q3_K_L) return s->falcon ? DT_Q4_K : DT_Q5_K;
    if (ft == FT_Q4_K_M) {
        if (s->falcon) return i < n / 16 ? DT_Q6_K : use_more_bits(i, n) ? DT_Q5_K : DT_Q4_K;
        return use_more_bits(i, n) ? DT_Q6_K : nt;
    }
    if (i < n / 8 && (ft == FT_IQ4_NL || ft == FT_IQ4_XS) && !s->has_imatrix) return DT_Q5_K;
    /* llama.cpp's guard for the first ffn_down layers, taken only with an importance matrix */
    if (i < n / 8 && s->has_imatrix && (ft == FT_Q4_0 || ft == FT_Q5_0)) return ft == FT_Q4_0 ? DT_Q4_1 : DT_Q5_1;
    if (ft == FT_Q5_K_M && use_more_bits(i, n)) return DT_Q6_K;
    if (ft == FT_Q4_K_S && !s->falcon && i < n / 8) return DT_Q5_K;
    return nt;
}

static uint32_t attn_output_type(const mix_state *s, uint32_t nt)
{
    const uint32_t ft = s->ftype;
    if (s->falcon) return ft == FT_Q3_K_L ? DT_Q4_K : nt;
    if (s->n_expert == 8)
        return ft == FT_Q2_K || ft == FT_IQ3_XS || ft == FT_IQ3_XXS || ft == FT_Q3_K_S || ft == FT_Q3_K_M
                       || ft == FT_IQ4_NL || ft == FT_Q4_K_S || ft == FT_Q4_K_M || ft == FT_IQ3_S
                       || ft == FT_IQ3_M || ft == FT_IQ4_XS
                   ? DT_Q5_K
                   : nt;
    if (ft == FT_Q2_K) return DT_Q3_K;
    if (ft == FT_IQ3_XXS) return DT_IQ3_S;
    if (ft == FT_Q3_K_M || ft == FT_IQ3_M) return DT_Q4_K;
    if (ft == FT_Q3_K_L) return DT_Q5_K;
    return nt;
}

/* attn_q / attn_k: fewer bits in iq3_xs and iq3_xxs; q8_0 for the attn_k of
 * 8-expert models. */
static uint32_t attn_qk_type(const mix_state *s, tensor_cat cat, uint32_t nt)
{
    if (cat == CAT_ATTN_K && s->n_expert == 8) return DT_Q8_0;
    if (s->ftype == FT_IQ3_XS) return DT_IQ3_XXS;
    if (s->ftype == FT_IQ3_XXS) return DT_IQ2_S;
    return nt;
}

/* The rule for one weight matrix of a quantized preset, before fallback. */
static int rule_type(mix_state *s, const quant_mix_tensor *t, uint32_t nt, uint32_t *out)
{
    const tensor_cat cat = category_of(t->name);
    const int n = (int)s->n_layer;
    int layer, rc = 0;
    if (cat == CAT_OUTPUT || (s->tied && cat == CAT_TOKEN_EMBD)) nt = output_type(s, nt, t->ne[0]);
    else if (cat == CAT_TOKEN_EMBD) nt = token_embd_type(s->ftype, nt);
    else if (low_bit_mix(s->ftype)) nt = low_bit_type(s, cat, nt);
    else if (cat == CAT_ATTN_V) nt = attn_v_type(s, nt);
    else if (cat == CAT_ATTN_K || cat == CAT_ATTN_Q) nt = attn_qk_type(s, cat, nt);
    else if (cat == CAT_ATTN_OUTPUT) nt = attn_output_type(s, nt);
    else if (cat == CAT_FFN_DOWN) {
        rc = layer_of(s, s->i_ffn_down++, t->name, &layer);
        if (!rc) nt = ffn_down_type(s, nt, layer, n);
    } else if (cat == CAT_FFN_GATE || cat == CAT_FFN_UP) {
        rc = layer_of(s, cat == CAT_FFN_GATE ? s->i_ffn_gate++ : s->i_ffn_up++, t->name, &layer);
        /* iq3_xs: the middle layers' gate and up in iq3_xxs */
        if (!rc && s->ftype == FT_IQ3_XS && layer >= n / 8 && layer < 7 * n / 8) nt = DT_IQ3_XXS;
    }
    *out = nt;
    return rc;
}

/* A type whose block divides the row length ne0. */
static int fallback_type(const quant_mix_tensor *t, uint32_t nt, uint32_t *out)
{
    const uint32_t blck = dtype_get(nt)->blck_size;
    *out = nt;
    if (t->ne[0] % blck == 0) return 0;
    switch (nt) {
    case DT_IQ1_S: case DT_IQ1_M: case DT_IQ2_XXS: case DT_IQ2_XS: case DT_IQ2_S: case DT_IQ3_XXS: case DT_IQ3_S:
    case DT_IQ4_XS: nt = DT_IQ4_NL; break;
    case DT_Q2_K: case DT_Q3_K: case DT_TQ1_0: case DT_TQ2_0: nt = DT_Q4_0; break;
    case DT_Q4_K: nt = DT_Q5_0; break;
    case DT_Q5_K: nt = DT_Q5_1; break;
    case DT_Q6_K: nt = DT_Q8_0; break;
    default:
        if (blck > 32)
            return err_set(PL_EUNSUPPORTED, "tensor '%s': rows of %llu do not fit %s and no fallback is defined",
                           t->name, (unsigned long long)t->ne[0], dtype_get(nt)->name);
    }
    *out = t->ne[0] % dtype_get(nt)->blck_size == 0 ? nt : DT_F16;
    return 0;
}

/* llama.cpp's visiting order: by layer number (-1 first), then name. */
static int order_cmp(const void *a, const void *b, void *base)
{
    const quant_mix_tensor *ts = base;
    const quant_mix_tensor *x = &ts[*(const size_t *)a], *y = &ts[*(const size_t *)b];
    const int lx = name_layer(x->name), ly = name_layer(y->name);
    if (lx != ly) return lx < ly ? -1 : 1;
    return strcmp(x->name, y->name);
}

static void state_init(mix_state *s, const quant_preset *p, const quant_model *m, const quant_mix_tensor *ts,
                       size_t n)
{
    memset(s, 0, sizeof *s);
    s->ftype = p->ftype;
    const char *arch = m->arch ? m->arch : "";
    const uint32_t n_head_kv = m->n_head_kv ? m->n_head_kv : m->n_head;
    s->falcon = strcmp(arch, "falcon") == 0;
    s->is_70b = strcmp(arch, "llama") == 0 && m->n_layer == 80 && m->n_head != n_head_kv;
    s->n_gqa = n_head_kv ? m->n_head / n_head_kv : 0;
    s->n_expert = m->n_expert;
    s->n_layer = m->n_layer;
    s->has_imatrix = m->has_imatrix;
    s->tied = true;
    for (size_t i = 0; i < n; i++) {
        const tensor_cat c = category_of(ts[i].name);
        if (c == CAT_ATTN_V) s->n_attn_v++;
        if (c == CAT_OUTPUT) s->tied = false;
    }
}

int quant_mix_types(const quant_preset *p, const quant_model *m, const quant_mix_tensor *ts, size_t n,
                    uint32_t *out)
{
    mix_state s;
    state_init(&s, p, m, ts, n);
    size_t *order = mem_calloc(n ? n : 1, sizeof *order);
    if (!order) return err_set(PL_ENOMEM, "quantize: out of memory");
    for (size_t i = 0; i < n; i++) order[i] = i;
    qsort_r(order, n, sizeof *order, order_cmp, (void *)ts);
    const bool quantized = dtype_get(p->type)->blck_size > 1;
    int rc = 0;
    for (size_t k = 0; k < n && !rc; k++) {
        const quant_mix_tensor *t = &ts[order[k]];
        uint32_t nt = t->type;
        if (allows_quantization(t)) {
            nt = p->type;
            if (quantized) {
                rc = rule_type(&s, t, nt, &nt);
                if (!rc) rc = fallback_type(t, nt, &nt);
            }
        }
        out[order[k]] = nt;
    }
    free(order);
    return rc;
}
