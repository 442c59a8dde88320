/* fuzz_model.c - libFuzzer target for reading a model from GGUF: the
 * hyper-parameters (model_config_read, with the mixture-of-experts keys)
 * and the binding of every tensor to its shape (model_weights_bind, with
 * the 3-D expert tensors cut into one view per expert).
 *
 * Each input is opened with gguf_open_mem over libFuzzer's exact-size
 * buffer. A refusal must be a negative code with a message. An accepted
 * config must hold its invariants (1 <= experts per token <= experts <=
 * MOE_EXPERTS_MAX, expert rows > 0); accepted weights must lie inside the
 * buffer, expert views included (their first and last bytes are read, so
 * ASan flags a view past the tensor). A small accepted MoE layer is then
 * run on one and on three tokens (moe_ffn), which walks the routing and
 * grouping over the fuzzed shape. deepseek2 files add the latent attention
 * tensors (per-head views of attn_k_b / attn_v_b, touched like the experts)
 * and the V3 routing keys (bias, groups, scale).
 *
 * Built with -DFUZZ_SEEDGEN instead, this file is a plain program that
 * writes seeds: small complete models of each MoE architecture, deepseek2
 * and a dense llama (f32 weights of zeros).
 *
 *   tests/fuzz/run.sh SECONDS model
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/mla.h"
#include "model/moe.h"
#include "model/weights.h"
#include "tensor/dtype.h"

#ifndef FUZZ_SEEDGEN

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_model: broken property: %s (%s)\n", what, err_msg());
    abort();
}

static const uint8_t *g_lo, *g_hi;
static volatile unsigned g_sink;

static void touch(const weight *w)
{
    if (!w->data) return;
    const uint8_t *p = w->data;
    const uint64_t n = dtype_row_bytes(w->type, w->n_in) * w->n_out;
    if (n == 0 || p < g_lo || n > (uint64_t)(g_hi - p)) fail("a weight lies outside the file");
    g_sink += p[0] + p[n - 1];
}

/* moe_ffn over T tokens of ones, when the layer's scratch is small. */
static void run_layer(const model_config *c, const moe_layer *m, int T)
{
    const uint64_t P = (uint64_t)T * c->moe.n_used;
    const uint64_t floats = P * (2 * c->dim + 2ull * c->moe.ffn_exp) + (uint64_t)T * c->moe.n_expert
                            + (uint64_t)T * (2ull * c->moe.ffn_shexp + c->dim);
    if (floats > (1u << 20)) return;
    moe_state *s;
    if (moe_state_new(&s, c, T) != 0) fail("moe_state_new");
    float *x = malloc(sizeof(float) * T * c->dim);
    if (!x) fail("malloc");
    for (uint64_t i = 0; i < (uint64_t)T * c->dim; i++) x[i] = 1.0f - 0.001f * (float)(i % 7);
    moe_ffn(s, c, m, x, x, T, NULL);
    g_sink += (unsigned)(x[0] == x[0]);
    free(x);
    moe_state_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gguf_file *f;
    if (gguf_open_mem(&f, data, size, "fuzz.gguf") != 0) return 0;
    model_config c;
    int rc = model_config_read(f, &c);
    if (rc) {
        if (rc >= 0 || !err_msg()[0]) fail("config refused without a negative code and a message");
        gguf_close(f);
        return 0;
    }
    const moe_config *mc = &c.moe;
    if (mc->n_expert && (mc->n_used < 1 || mc->n_used > mc->n_expert || mc->n_expert > MOE_EXPERTS_MAX ||
                         mc->ffn_exp == 0))
        fail("an accepted expert config breaks its invariants");
    model_weights w;
    rc = model_weights_bind(f, &c, &w);
    if (rc) {
        if (rc >= 0 || !err_msg()[0]) fail("weights refused without a negative code and a message");
        gguf_close(f);
        return 0;
    }
    g_lo = data;
    g_hi = data + size;
    touch(&w.tok_embd);
    touch(&w.output);
    for (uint32_t l = 0; l < c.n_layers; l++) {
        const layer_weights *lw = &w.layers[l];
        const weight *ws[] = {&lw->wq, &lw->wk, &lw->wv, &lw->wo, &lw->w_gate, &lw->w_up, &lw->w_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) touch(ws[i]);
        if (lw->mla) {
            weight **hm = malloc(sizeof *hm * (size_t)mla_layer_matrices(lw->mla, c.n_heads, NULL));
            if (!hm) fail("malloc");
            const int n = mla_layer_matrices(lw->mla, c.n_heads, hm);
            for (int i = 0; i < n; i++) touch(hm[i]);
            free(hm);
        }
        if (!lw->moe) continue;
        weight *mats[3 * MOE_EXPERTS_MAX + 5];
        const int n = moe_layer_matrices(lw->moe, mc->n_expert, mats);
        for (int i = 0; i < n; i++) touch(mats[i]);
        if (l == c.moe.n_dense_lead) { /* the first MoE layer */
            run_layer(&c, lw->moe, 1);
            run_layer(&c, lw->moe, 3);
        }
    }
    model_weights_free(&w);
    gguf_close(f);
    return 0;
}

#else /* FUZZ_SEEDGEN */

#define DIM 32
#define FFN 64
#define VOCAB 16

static void tensor(gguf_writer *w, const char *name, uint64_t ne0, uint64_t ne1, uint64_t ne2)
{
    static float zeros[DIM * FFN * 8];
    uint64_t ne[3] = {ne0, ne1, ne2};
    const uint32_t n_dims = ne2 > 1 ? 3 : ne1 > 1 ? 2 : 1;
    if (gguf_writer_add_tensor(w, name, DT_F32, n_dims, ne, zeros) < 0) {
        fprintf(stderr, "seedgen: %s: %s\n", name, err_msg());
        exit(1);
    }
}

/* A one-layer model of arch (mixtral: llama with experts). */
static void write_seed(const char *dir, const char *arch, uint32_t n_expert, uint32_t n_used, bool shared)
{
    const bool moe = n_expert > 0, qwen2 = strncmp(arch, "qwen2", 5) == 0, qwen3 = strncmp(arch, "qwen3", 5) == 0;
    gguf_writer *w = gguf_writer_new();
    char key[96], name[64];
#define K(n) (snprintf(key, sizeof key, "%s." n, arch), key)
    gguf_writer_set_str(w, "general.architecture", arch);
    gguf_writer_set_u32(w, K("block_count"), 1);
    gguf_writer_set_u32(w, K("embedding_length"), DIM);
    gguf_writer_set_u32(w, K("attention.head_count"), 2);
    gguf_writer_set_u32(w, K("attention.head_count_kv"), 1);
    gguf_writer_set_u32(w, K("feed_forward_length"), FFN);
    gguf_writer_set_u32(w, K("context_length"), 64);
    gguf_writer_set_u32(w, K("vocab_size"), VOCAB);
    if (moe) {
        gguf_writer_set_u32(w, K("expert_count"), n_expert);
        gguf_writer_set_u32(w, K("expert_used_count"), n_used);
        if (strcmp(arch, "llama")) gguf_writer_set_u32(w, K("expert_feed_forward_length"), 32);
        if (shared) gguf_writer_set_u32(w, K("expert_shared_feed_forward_length"), 32);
    }
#undef K
    const uint32_t fe = strcmp(arch, "llama") ? 32 : FFN, hd = DIM / 2;
    tensor(w, "token_embd.weight", DIM, VOCAB, 1);
    tensor(w, "output_norm.weight", DIM, 1, 1);
#define T(suffix, a, b, c) (snprintf(name, sizeof name, "blk.0." suffix), tensor(w, name, a, b, c))
    T("attn_norm.weight", DIM, 1, 1);
    T("attn_q.weight", DIM, DIM, 1);
    T("attn_k.weight", DIM, hd, 1);
    T("attn_v.weight", DIM, hd, 1);
    T("attn_output.weight", DIM, DIM, 1);
    if (qwen2) {
        T("attn_q.bias", DIM, 1, 1);
        T("attn_k.bias", hd, 1, 1);
        T("attn_v.bias", hd, 1, 1);
    }
    if (qwen3) {
        T("attn_q_norm.weight", hd, 1, 1);
        T("attn_k_norm.weight", hd, 1, 1);
    }
    T("ffn_norm.weight", DIM, 1, 1);
    if (!moe) {
        T("ffn_gate.weight", DIM, FFN, 1);
        T("ffn_up.weight", DIM, FFN, 1);
        T("ffn_down.weight", FFN, DIM, 1);
    } else {
        T("ffn_gate_inp.weight", DIM, n_expert, 1);
        T("ffn_gate_exps.weight", DIM, fe, n_expert);
        T("ffn_up_exps.weight", DIM, fe, n_expert);
        T("ffn_down_exps.weight", fe, DIM, n_expert);
        if (shared) {
            T("ffn_gate_inp_shexp.weight", DIM, 1, 1);
            T("ffn_gate_shexp.weight", DIM, 32, 1);
            T("ffn_up_shexp.weight", DIM, 32, 1);
            T("ffn_down_shexp.weight", 32, DIM, 1);
        }
    }
#undef T
    char path[512];
    snprintf(path, sizeof path, "%s/seed-%s-%u-%u.gguf", dir, strcmp(arch, "llama") || !moe ? arch : "mixtral",
             n_expert, n_used);
    if (gguf_writer_write(w, path, NULL, NULL) != 0) {
        fprintf(stderr, "seedgen: %s: %s\n", path, err_msg());
        exit(1);
    }
    gguf_writer_free(w);
}

/* A two-layer deepseek2 (the first dense): q LoRA, latent attention,
 * V3-style routing over 2 groups of 2 experts with a shared expert. */
static void write_deepseek2(const char *dir)
{
    gguf_writer *w = gguf_writer_new();
    char name[64];
    const uint32_t H = 2, R = 16, D = 8, N = 8, V = 8, QL = 16, E = 4, FE = 32;
    gguf_writer_set_str(w, "general.architecture", "deepseek2");
#define K(n, v) gguf_writer_set_u32(w, "deepseek2." n, v)
    K("block_count", 2);
    K("embedding_length", DIM);
    K("attention.head_count", H);
    K("attention.head_count_kv", 1);
    K("feed_forward_length", FFN);
    K("context_length", 64);
    K("vocab_size", VOCAB);
    K("rope.dimension_count", D);
    K("attention.q_lora_rank", QL);
    K("attention.kv_lora_rank", R);
    K("attention.key_length", R + D);
    K("attention.value_length", R);
    K("attention.key_length_mla", N + D);
    K("attention.value_length_mla", V);
    K("expert_count", E);
    K("expert_used_count", 2);
    K("expert_feed_forward_length", FE);
    K("expert_shared_count", 1);
    K("leading_dense_block_count", 1);
    K("expert_gating_func", 2);
    K("expert_group_count", 2);
    K("expert_group_used_count", 1);
#undef K
    gguf_writer_set_f32(w, "deepseek2.expert_weights_scale", 2.5f);
    gguf_writer_set_bool(w, "deepseek2.expert_weights_norm", true);
    tensor(w, "token_embd.weight", DIM, VOCAB, 1);
    tensor(w, "output_norm.weight", DIM, 1, 1);
    for (int l = 0; l < 2; l++) {
#define T(suffix, a, b, c) (snprintf(name, sizeof name, "blk.%d." suffix, l), tensor(w, name, a, b, c))
        T("attn_norm.weight", DIM, 1, 1);
        T("attn_q_a.weight", DIM, QL, 1);
        T("attn_q_a_norm.weight", QL, 1, 1);
        T("attn_q_b.weight", QL, H * (N + D), 1);
        T("attn_kv_a_mqa.weight", DIM, R + D, 1);
        T("attn_kv_a_norm.weight", R, 1, 1);
        T("attn_k_b.weight", N, R, H);
        T("attn_v_b.weight", R, V, H);
        T("attn_output.weight", H * V, DIM, 1);
        T("ffn_norm.weight", DIM, 1, 1);
        if (l == 0) {
            T("ffn_gate.weight", DIM, FFN, 1);
            T("ffn_up.weight", DIM, FFN, 1);
            T("ffn_down.weight", FFN, DIM, 1);
            continue;
        }
        T("ffn_gate_inp.weight", DIM, E, 1);
        T("exp_probs_b.bias", E, 1, 1);
        T("ffn_gate_exps.weight", DIM, FE, E);
        T("ffn_up_exps.weight", DIM, FE, E);
        T("ffn_down_exps.weight", FE, DIM, E);
        T("ffn_gate_shexp.weight", DIM, FE, 1);
        T("ffn_up_shexp.weight", DIM, FE, 1);
        T("ffn_down_shexp.weight", FE, DIM, 1);
#undef T
    }
    char path[512];
    snprintf(path, sizeof path, "%s/seed-deepseek2.gguf", dir);
    if (gguf_writer_write(w, path, NULL, NULL) != 0) {
        fprintf(stderr, "seedgen: %s: %s\n", path, err_msg());
        exit(1);
    }
    gguf_writer_free(w);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: seedgen DIR\n");
        return 2;
    }
    write_seed(argv[1], "llama", 0, 0, false);
    write_seed(argv[1], "llama", 4, 2, false);
    write_seed(argv[1], "qwen2moe", 4, 2, true);
    write_seed(argv[1], "qwen3moe", 8, 8, false);
    write_seed(argv[1], "qwen3moe", 4, 1, false);
    write_deepseek2(argv[1]);
    return 0;
}

#endif
