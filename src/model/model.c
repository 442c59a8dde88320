/* model.c - opening a model file: config, weights, fingerprint; and the
 * model's shape as kv/ takes it (KV dtype rule, RoPE for re-rotation). */
#include "model/model.h"

#include <stdlib.h>
#include <xxhash.h>

#include "base/err.h"
#include "base/mem.h"
#include "kv/kv_latent.h"

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
    /* The fingerprint names these weights in prefix-cache keys: the header
     * (metadata and tensor directory) and the file size identify a file
     * without reading gigabytes of weights; a split model chains its shards. */
    XXH128_hash_t h = XXH3_128bits_withSeed(gguf_file_bytes(m->file), gguf_data_offset(m->file), gguf_file_size(m->file));
    for (uint32_t i = 1; i < gguf_shard_count(m->file); i++) {
        const gguf_file *s = gguf_shard(m->file, i);
        h = XXH3_128bits_withSeed(gguf_file_bytes(s), gguf_data_offset(s), gguf_file_size(s) ^ h.low64 ^ h.high64);
    }
    m->fingerprint[0] = h.low64;
    m->fingerprint[1] = h.high64;
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

kv_rope model_kv_rope(const model *m)
{
    const model_config *c = &m->cfg;
    return (kv_rope){c->rope_dim, c->rope_neox, c->rope_base, c->rope_scale, m->w.rope_freqs.data};
}

bool model_rope_shiftable(const model *m)
{
    const model_config *c = &m->cfg;
    if (c->mla.kv_lora_rank) return false; /* the latent rows hold k_pe after c_kv: kv_shift does not know them */
    return c->rope_scaling.type != ROPE_SCALING_YARN && c->rope_scaling.attn_factor == 1.0f && !m->w.rope_long.data &&
           !m->w.rope_short.data && (!c->local_window || (c->rope_base_local == c->rope_base &&
                                                           c->rope_scale_local == c->rope_scale));
}
