/* model.c - opening a model file: config, weights, fingerprint; and the
 * model's shape as kv/ takes it (KV dtype rule, RoPE for re-rotation). */
#include "model/model.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "base/err.h"
#include "base/mem.h"
#include "kv/kv_latent.h"
#include "model/rope_scaling.h"

/* Slices of the tensor data in a fingerprint: two files whose headers and
 * sizes agree (fine-tunes of one base, re-quantized weights) differ there. */
#define MODEL_FP_SLICES 16
#define MODEL_FP_SLICE_BYTES 4096

/* One shard's part of the fingerprint: its header (metadata and tensor
 * directory), its size, and MODEL_FP_SLICES slices spread over its data. */
static XXH128_hash_t model_fp_shard(const gguf_file *f, uint64_t seed)
{
    const uint8_t *b = gguf_file_bytes(f);
    const uint64_t size = gguf_file_size(f), data = gguf_data_offset(f), span = size > data ? size - data : 0;
    XXH3_state_t st;
    XXH3_128bits_reset_withSeed(&st, seed ^ size);
    XXH3_128bits_update(&st, b, (size_t)data);
    for (uint64_t i = 0; span && i < MODEL_FP_SLICES; i++) {
        uint64_t at = data + span / MODEL_FP_SLICES * i, n = size - at < MODEL_FP_SLICE_BYTES ? size - at : MODEL_FP_SLICE_BYTES;
        XXH3_128bits_update(&st, b + at, (size_t)n);
    }
    return XXH3_128bits_digest(&st);
}

/* model_key_cost's estimate. A latent (MLA) layer attends over its
 * latent row: kv_lora_rank + rope_dim for the scores, kv_lora_rank for the
 * V sum, a head; every other layer head_dim each. Local (sliding-window)
 * layers are counted as global: an over-estimate, on the side of shorter
 * chunks. */
static double key_cost_of(model *m)
{
    const model_config *c = &m->cfg;
    const double dims = c->mla.kv_lora_rank ? 2.0 * c->mla.kv_lora_rank + c->rope_dim : 2.0 * c->head_dim;
    const double att = (double)c->n_layers * c->n_heads * dims;
    const double mm = model_weights_token_cost(&m->w, c->n_layers, c->moe.n_expert, c->moe.n_used);
    return mm > 0 ? att / mm : 0;
}

double model_key_cost(const model *m) { return m->key_cost; }

int model_open(model **out, const char *path)
{
    model *m = mem_calloc(1, sizeof *m);
    if (!m) return PL_ENOMEM;
    int rc = gguf_open_model(&m->file, path); /* all shards of a split model */
    if (!rc) rc = model_config_read(m->file, &m->cfg);
    if (!rc) rc = model_weights_bind(m->file, &m->cfg, &m->w);
    /* gguf_open maps the file read-only, so the packed tensors' pages can
     * be dropped (weights.h) */
    if (!rc) model_weights_repack(&m->w, m->cfg.n_layers, true);
    if (rc) {
        if (m->file) gguf_close(m->file);
        free(m);
        return rc;
    }
    /* The fingerprint names these weights in prefix-cache keys, which the
     * KV tiers keep across runs and models: the header, the file size and
     * 64 KiB of the weights identify a file without reading gigabytes; a
     * split model chains its shards. */
    XXH128_hash_t h = model_fp_shard(m->file, 0);
    for (uint32_t i = 1; i < gguf_shard_count(m->file); i++) h = model_fp_shard(gguf_shard(m->file, i), h.low64 ^ h.high64);
    m->fingerprint[0] = h.low64;
    m->fingerprint[1] = h.high64;
    m->key_cost = key_cost_of(m);
    *out = m;
    return 0;
}

void model_close(model *m)
{
    if (!m) return;
    model_weights_free(&m->w);
    gguf_close(m->file);
    free(m);
}

int model_kv_dtype_check(const model *m, kv_dtype t)
{
    if (m->cfg.mla.kv_lora_rank) return kv_latent_check(t, m->cfg.n_kv_heads, m->cfg.head_dim);
    return kv_dtype_check_heads(t, m->cfg.n_kv_heads, m->cfg.head_dim);
}

int model_set_rope(model *m, const rope_override *o)
{
    if ((m->w.rope_long.data || m->w.rope_short.data) && !rope_override_empty(o))
        return err_set(PL_EUNSUPPORTED, "%s: its LongRoPE scaling (factor tensors) cannot be replaced",
                       gguf_path(m->file));
    model_config c = m->cfg;
    const int rc = model_config_rope_override(&c, gguf_path(m->file), o);
    if (rc || memcmp(&c, &m->cfg, sizeof c) == 0) return rc;
    m->cfg = c;
    const rope_scaling *rs = &c.rope_scaling;
    const struct {
        uint64_t fp[2];
        uint32_t type, ctx_orig;
        float factor, base, scale, base_local, scale_local;
        float ext, yarn_attn, beta_fast, beta_slow;
        uint32_t pad; /* no padding bytes of unknown value in the hash */
    } in = {{m->fingerprint[0], m->fingerprint[1]},
            (uint32_t)rs->type,
            rs->ctx_orig,
            rs->factor,
            c.rope_base,
            c.rope_scale,
            c.rope_base_local,
            c.rope_scale_local,
            rs->ext_set ? rs->ext_factor : -1.0f,
            rs->yarn_attn,
            rs->beta_fast,
            rs->beta_slow,
            0};
    static_assert(sizeof in == 64, "the hashed RoPE record has no padding");
    const XXH128_hash_t h = XXH3_128bits(&in, sizeof in);
    m->fingerprint[0] = h.low64;
    m->fingerprint[1] = h.high64;
    return 0;
}

kv_rope model_kv_rope(const model *m)
{
    const model_config *c = &m->cfg;
    return (kv_rope){c->rope_dim, c->rope_neox, c->rope_base, c->rope_scale, m->w.rope_freqs.data};
}

bool model_rope_shiftable(const model *m)
{
    const model_config *c = &m->cfg;
    /* kv_shift re-rotates with plain RoPE (base, scale): no YaRN ramp, no cos/sin multiplier */
    const rope_spec g = rope_spec_make(&c->rope_scaling, c->rope_dim, c->rope_base, c->rope_scale, c->rope_scale, NULL);
    return rope_spec_plain(&g) && !m->w.rope_long.data && !m->w.rope_short.data &&
           (!c->local_window || (c->rope_base_local == c->rope_base && c->rope_scale_local == c->rope_scale));
}
