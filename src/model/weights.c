/* weights.c - binding and checking the model's tensors; see weights.h. */
#include "model/weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

/* Binds name, expecting dims [n_in] (n_out == 0) or [n_in, n_out].
 * A vector must be F32 (norms and biases are added, not multiplied). */
static int bind(const gguf_file *f, const char *name, uint64_t n_in, uint64_t n_out, bool optional, weight *w)
{
    const gguf_tensor *t = gguf_tensor_find(f, name);
    if (!t) {
        if (optional) { memset(w, 0, sizeof *w); return 0; }
        return err_set(PL_EFORMAT, "%s: tensor '%s' is missing", gguf_path(f), name);
    }
    uint64_t want1 = n_out ? n_out : 1;
    if (t->ne[0] != n_in || t->ne[1] != want1 || t->ne[2] != 1 || t->ne[3] != 1)
        return err_set(PL_EFORMAT, "%s: tensor '%s': shape [%llu, %llu, %llu, %llu], expected [%llu, %llu]",
                       gguf_path(f), name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                       (unsigned long long)t->ne[2], (unsigned long long)t->ne[3], (unsigned long long)n_in,
                       (unsigned long long)want1);
    const dtype_traits *tr = dtype_get(t->type);
    if (n_out == 0 && t->type != DT_F32)
        return err_set(PL_EUNSUPPORTED, "%s: tensor '%s': vector of type %s, expected f32", gguf_path(f), name, tr ? tr->name : "?");
    if (!tr || !tr->computable || !quant_supported(t->type))
        return err_set(PL_EUNSUPPORTED, "%s: tensor '%s': type %s is not supported (f32, f16, bf16, q8_0, q4_0, q4_K, q6_K)",
                       gguf_path(f), name, tr ? tr->name : "?");
    *w = (weight){t->data, t->type, t->ne[0], want1};
    return 0;
}

static int bind_layer(const gguf_file *f, const model_config *c, uint32_t l, layer_weights *lw)
{
    const uint64_t d = c->dim, q = (uint64_t)c->n_heads * c->head_dim, kv = (uint64_t)c->n_kv_heads * c->head_dim;
    const bool bias = c->arch == ARCH_QWEN2, qk_norm = c->arch == ARCH_QWEN3;
    char n[96];
    int rc = 0;
#define B(suffix, in, out, opt, dst) \
    if (!rc) { snprintf(n, sizeof n, "blk.%u." suffix, l); rc = bind(f, n, in, out, opt, dst); }
    B("attn_norm.weight", d, 0, false, &lw->attn_norm);
    B("attn_q.weight", d, q, false, &lw->wq);
    B("attn_k.weight", d, kv, false, &lw->wk);
    B("attn_v.weight", d, kv, false, &lw->wv);
    B("attn_output.weight", q, d, false, &lw->wo);
    B("attn_q.bias", q, 0, !bias, &lw->bq);
    B("attn_k.bias", kv, 0, !bias, &lw->bk);
    B("attn_v.bias", kv, 0, !bias, &lw->bv);
    B("attn_q_norm.weight", c->head_dim, 0, !qk_norm, &lw->q_norm);
    B("attn_k_norm.weight", c->head_dim, 0, !qk_norm, &lw->k_norm);
    B("ffn_norm.weight", d, 0, false, &lw->ffn_norm);
    B("ffn_gate.weight", d, c->ffn_dim, false, &lw->w_gate);
    B("ffn_up.weight", d, c->ffn_dim, false, &lw->w_up);
    B("ffn_down.weight", c->ffn_dim, d, false, &lw->w_down);
#undef B
    return rc;
}

int model_weights_bind(const gguf_file *f, const model_config *c, model_weights *out)
{
    model_weights w;
    memset(&w, 0, sizeof w);
    int rc = bind(f, "token_embd.weight", c->dim, c->n_vocab, false, &w.tok_embd);
    if (!rc) rc = bind(f, "output_norm.weight", c->dim, 0, false, &w.output_norm);
    if (!rc) rc = bind(f, "output.weight", c->dim, c->n_vocab, true, &w.output);
    if (!rc && !w.output.data) w.output = w.tok_embd; /* tied embeddings */
    if (!rc) rc = bind(f, "rope_freqs.weight", c->rope_dim / 2, 0, true, &w.rope_freqs);
    if (rc) return rc;
    w.layers = mem_calloc(c->n_layers, sizeof *w.layers);
    if (!w.layers) return PL_ENOMEM;
    for (uint32_t l = 0; l < c->n_layers && !rc; l++) rc = bind_layer(f, c, l, &w.layers[l]);
    if (rc) { free(w.layers); return rc; }
    *out = w;
    return 0;
}

void model_weights_free(model_weights *w)
{
    free(w->layers);
    w->layers = NULL;
}
