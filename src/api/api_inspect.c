/* api_inspect.c - pl_file_inspect: what a GGUF file holds, for `pagellm
 * inspect` and anyone sizing a KV cache for it.
 *
 * Reads any architecture, not only the ones src/model can run: the
 * hyper-parameters are the "<arch>.*" keys of general.architecture, each
 * optional (0 when absent) except for the defaults every llama-like loader
 * applies:
 *   n_kv_heads = attention.head_count_kv, default head_count (no GQA)
 *   head_dim   = attention.key_length, default embedding_length / head_count
 *   rope_dim   = rope.dimension_count, default head_dim
 *   rope_base  = rope.freq_base, default 10000
 *   vocab_size = <arch>.vocab_size, default the length of tokenizer.ggml.tokens
 * A key that is present with the wrong type is an error naming the file,
 * its offset and the key (the GGUF getters' text).
 *
 * Strings copied into pl_file_info are truncated to their buffers at a UTF-8
 * character boundary, with control characters replaced by '?', so that they
 * can be printed and put into JSON as they are.
 */
#include "pagellm.h"

#include "base/err.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "tensor/dtype.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Copies s into dst[cap] as described in the header. */
static void info_copy_str(char *dst, size_t cap, const char *s, size_t len)
{
    size_t n = len < cap - 1 ? len : cap - 1;
    /* Do not cut a multi-byte character: back up over continuation bytes. */
    if (n < len)
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
    for (size_t i = 0; i < n; i++) dst[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    dst[n] = '\0';
}

static int info_get_str(const gguf_file *f, const char *key, char *dst, size_t cap)
{
    gguf_str s;
    if (!gguf_meta_find(f, key)) return 0;
    int rc = gguf_get_str(f, key, &s);
    if (rc) return rc;
    info_copy_str(dst, cap, s.ptr, (size_t)s.len);
    return 0;
}

/* "<arch>.<name>" into *out if present; absent leaves *out alone. */
static int info_arch_u32(const gguf_file *f, const char *arch, const char *name, uint32_t *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, name);
    return gguf_meta_find(f, key) ? gguf_get_u32(f, key, out) : 0;
}

static int info_arch_f32(const gguf_file *f, const char *arch, const char *name, float *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, name);
    return gguf_meta_find(f, key) ? gguf_get_f32(f, key, out) : 0;
}

static int info_hparams(const gguf_file *f, pl_file_info *o)
{
    const char *a = o->arch;
    int rc = 0;
    o->rope_base = 10000.0f;
    rc = rc ? rc : info_arch_u32(f, a, "block_count", &o->n_layers);
    rc = rc ? rc : info_arch_u32(f, a, "embedding_length", &o->dim);
    rc = rc ? rc : info_arch_u32(f, a, "attention.head_count", &o->n_heads);
    o->n_kv_heads = o->n_heads;
    rc = rc ? rc : info_arch_u32(f, a, "attention.head_count_kv", &o->n_kv_heads);
    if (o->n_heads > 0 && o->dim % o->n_heads == 0) o->head_dim = o->dim / o->n_heads;
    rc = rc ? rc : info_arch_u32(f, a, "attention.key_length", &o->head_dim);
    rc = rc ? rc : info_arch_u32(f, a, "feed_forward_length", &o->ffn_dim);
    rc = rc ? rc : info_arch_u32(f, a, "context_length", &o->ctx_train);
    o->rope_dim = o->head_dim;
    rc = rc ? rc : info_arch_u32(f, a, "rope.dimension_count", &o->rope_dim);
    rc = rc ? rc : info_arch_f32(f, a, "rope.freq_base", &o->rope_base);
    rc = rc ? rc : info_arch_f32(f, a, "attention.layer_norm_epsilon", &o->norm_eps);
    rc = rc ? rc : info_arch_f32(f, a, "attention.layer_norm_rms_epsilon", &o->norm_eps);
    rc = rc ? rc : info_arch_u32(f, a, "vocab_size", &o->vocab_size);
    rc = rc ? rc : info_arch_u32(f, a, "attention.sliding_window", &o->sliding_window);
    rc = rc ? rc : info_arch_u32(f, a, "expert_count", &o->n_expert);
    rc = rc ? rc : info_arch_u32(f, a, "expert_used_count", &o->n_expert_used);
    return rc;
}

/* What the model config makes of the window (gemma2/3: local layers,
 * phi3: none, as llama.cpp); a file it refuses is summarised as it is. */
static void info_layers(const gguf_file *f, pl_file_info *o)
{
    model_config c;
    if (model_config_read(f, &c) != 0) return;
    o->sliding_window = c.sliding_window;
    o->local_window = c.local_window;
    o->kv_lora_rank = c.mla.kv_lora_rank;
    static const char *const scalings[] = {"none", "linear", "yarn", "longrope"};
    const bool longrope = gguf_tensor_find(f, "rope_factors_long.weight") != NULL; /* phi3's: no type key */
    snprintf(o->rope_scaling, sizeof o->rope_scaling, "%s", longrope ? "longrope" : scalings[c.rope_scaling.type]);
    o->rope_factor = c.rope_scaling.type == ROPE_SCALING_NONE ? 0 : c.rope_scaling.factor;
    o->rope_orig_ctx = c.rope_scaling.ctx_orig;
    o->ctx_rope = model_config_ctx_rope(&c);
    for (uint32_t l = 0; l < c.n_layers; l++) o->local_layers += model_config_layer_local(&c, l);
}

static int info_tokenizer(const gguf_file *f, pl_file_info *o)
{
    int rc = info_get_str(f, "tokenizer.ggml.model", o->tokenizer, sizeof o->tokenizer);
    if (rc || o->vocab_size || !gguf_meta_find(f, "tokenizer.ggml.tokens")) return rc;
    const gguf_value *toks;
    if ((rc = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &toks))) return rc;
    o->vocab_size = toks->v.arr.n > UINT32_MAX ? UINT32_MAX : (uint32_t)toks->v.arr.n;
    return 0;
}

static int info_type_cmp(const void *a, const void *b)
{
    const pl_type_summary *x = a, *y = b;
    return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : strcmp(x->type, y->type);
}

/* Elements of t a token's pass uses: of a routed expert tensor
 * (blk.N.ffn_*_exps.*, [.., .., n_expert]) the chosen experts' share. */
static uint64_t info_active_elements(const pl_file_info *o, const gguf_tensor *t, uint64_t elems)
{
    const bool exps = t->name.len > 5 && memmem(t->name.ptr, t->name.len, "_exps.", 6) != NULL;
    if (!exps || o->n_expert == 0 || o->n_expert_used > o->n_expert || t->n_dims < 3 || t->ne[2] != o->n_expert)
        return elems;
    return elems / o->n_expert * o->n_expert_used;
}

/* Tensor counts and bytes per ggml type, biggest first. */
static void info_tensors(const gguf_file *f, pl_file_info *o)
{
    for (uint64_t i = 0; i < o->n_tensors; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        const dtype_traits *tr = dtype_get(t->type);
        char name[16];
        snprintf(name, sizeof name, "%s", tr ? tr->name : "unknown");
        uint64_t elems = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) elems *= t->ne[d]; /* the reader checked for overflow */
        o->weights_bytes += t->nbytes;
        o->weights_elements += elems;
        o->active_elements += info_active_elements(o, t, elems);
        int k = 0;
        while (k < o->n_types && strcmp(o->types[k].type, name) != 0) k++;
        if (k == o->n_types) {
            if (o->n_types == PL_MAX_TYPES) k = PL_MAX_TYPES - 1; /* cannot happen with ggml's types */
            else snprintf(o->types[o->n_types++].type, sizeof o->types[0].type, "%s", name);
        }
        o->types[k].count++;
        o->types[k].elements += elems;
        o->types[k].bytes += t->nbytes;
    }
    qsort(o->types, (size_t)o->n_types, sizeof o->types[0], info_type_cmp);
}

int pl_file_inspect(const char *path, pl_file_info *out)
{
    if (!path || !out) return err_set(PL_EINVAL, "pl_file_inspect: NULL argument");
    gguf_file *f;
    int rc = gguf_open_model(&f, path); /* a split model: all its shards */
    if (rc) return rc;
    pl_file_info *o = calloc(1, sizeof *o); /* ~2 KB: keep it off small stacks */
    if (!o) {
        gguf_close(f);
        return err_set(PL_ENOMEM, "%s: out of memory", path);
    }
    info_copy_str(o->path, sizeof o->path, path, strlen(path));
    o->gguf_version = gguf_version(f);
    for (uint32_t i = 0; i < gguf_shard_count(f); i++) o->file_bytes += gguf_file_size(gguf_shard(f, i));
    o->n_kv = gguf_meta_count(f);
    o->n_tensors = gguf_tensor_count(f);
    rc = info_get_str(f, "general.architecture", o->arch, sizeof o->arch);
    rc = rc ? rc : info_get_str(f, "general.name", o->name, sizeof o->name);
    if (!rc && o->arch[0]) rc = info_hparams(f, o);
    if (!rc && o->arch[0]) info_layers(f, o);
    rc = rc ? rc : info_tokenizer(f, o);
    if (!rc) info_tensors(f, o);
    if (!rc) *out = *o;
    free(o);
    gguf_close(f);
    return rc;
}
