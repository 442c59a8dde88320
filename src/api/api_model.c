/* api_model.c - pl_model: a GGUF model (src/model) with its tokenizer and
 * chat template, as the public header hands it out. */
#include "pagellm.h"

#include <stdlib.h>
#include <string.h>

#include "api/api_impl.h"
#include "base/err.h"
#include "base/mem.h"
#include "model/mla.h"
#include "model/moe.h"
#include "tensor/dtype.h"
#include "tokenizer/tokenizer.h"

struct pl_model {
    model *m;
    pl_vocab *vocab;
    char *chat_template; /* NUL-terminated copy, or NULL */
    char *chat_template_tool_use; /* tokenizer.chat_template.tool_use, or NULL */
    bool used; /* a context was made from it (pl_model_set_rope is too late) */
};

int pl_model_load(pl_model **out, const char *path)
{
    if (!out || !path) return err_set(PL_EINVAL, "pl_model_load: NULL argument");
    pl_model *pm = mem_calloc(1, sizeof *pm);
    if (!pm) return PL_ENOMEM;
    int rc = model_open(&pm->m, path);
    if (!rc) rc = tok_vocab_load(&pm->vocab, pm->m->file); /* the open file: no second mmap */
    if (!rc && (uint32_t)pl_vocab_size(pm->vocab) > pm->m->cfg.n_vocab)
        rc = err_set(PL_EFORMAT, "%s: tokenizer has %d tokens but the model's vocabulary is %u",
                     path, pl_vocab_size(pm->vocab), pm->m->cfg.n_vocab);
    gguf_str t;
    if (!rc && gguf_get_str(pm->m->file, "tokenizer.chat_template", &t) == 0) {
        pm->chat_template = strndup(t.ptr, t.len);
        if (!pm->chat_template) rc = err_set(PL_ENOMEM, "out of memory");
    }
    if (!rc && gguf_get_str(pm->m->file, "tokenizer.chat_template.tool_use", &t) == 0) {
        pm->chat_template_tool_use = strndup(t.ptr, t.len);
        if (!pm->chat_template_tool_use) rc = err_set(PL_ENOMEM, "out of memory");
    }
    if (rc) {
        pl_model_free(pm);
        return rc;
    }
    *out = pm;
    return 0;
}

void pl_model_free(pl_model *pm)
{
    if (!pm) return;
    if (pm->vocab) pl_vocab_free(pm->vocab);
    if (pm->m) model_close(pm->m);
    free(pm->chat_template);
    free(pm->chat_template_tool_use);
    free(pm);
}

const pl_vocab *pl_model_vocab(const pl_model *pm) { return pm->vocab; }
uint32_t pl_model_n_vocab(const pl_model *pm) { return pm->m->cfg.n_vocab; }
void api_model_mark_used(pl_model *pm) { __atomic_store_n(&pm->used, true, __ATOMIC_RELAXED); } /* contexts may be made on several threads */

int pl_model_set_rope(pl_model *pm, const pl_rope_params *p)
{
    if (!pm || !p) return err_set(PL_EINVAL, "pl_model_set_rope: NULL argument");
    if (__atomic_load_n(&pm->used, __ATOMIC_RELAXED)) return err_set(PL_EINVAL, "pl_model_set_rope: a context was already made from the model");
    int type = -1;
    if (p->type) {
        static const char *const names[] = {"none", "linear", "yarn"};
        static const int types[] = {ROPE_SCALING_NONE, ROPE_SCALING_LINEAR, ROPE_SCALING_YARN};
        for (size_t i = 0; i < sizeof names / sizeof names[0] && type < 0; i++)
            if (strcmp(p->type, names[i]) == 0) type = types[i];
        if (type < 0) return err_set(PL_EINVAL, "RoPE scaling '%.32s': none, linear or yarn", p->type);
    }
    const rope_override o = {type, p->factor, p->freq_base, p->orig_ctx, p->yarn_ext_set, p->yarn_ext_factor,
                             p->yarn_attn_factor, p->yarn_beta_fast, p->yarn_beta_slow};
    return model_set_rope(pm->m, &o);
}

uint32_t pl_model_n_ctx_train(const pl_model *pm) { return pm->m->cfg.ctx_train; }

uint32_t pl_model_n_ctx_rope(const pl_model *pm) { return model_config_ctx_rope(&pm->m->cfg); }
uint32_t pl_model_sliding_window(const pl_model *pm) { return pm->m->cfg.sliding_window; }
const char *pl_model_chat_template(const pl_model *pm) { return pm->chat_template; }
uint32_t pl_model_n_embd(const pl_model *pm) { return pm->m->cfg.dim; }
pl_pooling pl_model_pooling(const pl_model *pm)
{
    return pm->m->cfg.pooling == MODEL_POOL_NONE ? PL_POOL_MEAN : (pl_pooling)pm->m->cfg.pooling;
}

const char *pl_model_chat_template_named(const pl_model *pm, const char *name)
{
    if (!name) return pm->chat_template;
    return strcmp(name, "tool_use") == 0 ? pm->chat_template_tool_use : NULL;
}

static uint64_t weight_bytes(const weight *w)
{
    return w->data ? dtype_row_bytes(w->type, w->n_in) * w->n_out : 0;
}

uint64_t pl_model_decode_bytes(const pl_model *pm) { return pl_model_step_bytes(pm, 1); }

uint64_t pl_model_step_bytes(const pl_model *pm, uint32_t n_tokens)
{
    const model *m = pm->m;
    uint64_t b = weight_bytes(&m->w.output_norm) + weight_bytes(&m->w.output);
    for (uint32_t l = 0; l < m->cfg.n_layers; l++) {
        const layer_weights *w = &m->w.layers[l];
        const weight *all[] = {&w->attn_norm, &w->wq, &w->wk, &w->wv, &w->wo, &w->bq, &w->bk, &w->bv,
                               &w->q_norm, &w->k_norm, &w->ffn_norm, &w->w_gate, &w->w_up, &w->w_down};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) b += weight_bytes(all[i]);
        if (w->moe) b += moe_step_bytes(w->moe, &m->cfg.moe, n_tokens);
        if (w->mla) { /* deepseek2's attention matrices and norms (model/mla.h) */
            const weight *a[] = {&w->mla->wq, &w->mla->wq_a, &w->mla->q_a_norm, &w->mla->wq_b, &w->mla->wkv_a,
                                 &w->mla->kv_a_norm};
            for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) b += weight_bytes(a[i]);
            for (uint32_t h = 0; h < m->cfg.n_heads; h++)
                b += weight_bytes(&w->mla->wk_b[h]) + weight_bytes(&w->mla->wv_b[h]);
        }
    }
    return b;
}

const model *api_model_get(const pl_model *pm) { return pm->m; }
