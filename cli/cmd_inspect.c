/* cmd_inspect.c - `pagellm inspect MODEL`: what a GGUF holds and what its
 * KV cache costs.
 *
 * Prints the architecture and hyper-parameters, the tensors by type, the
 * weight bytes, then the memory question: KV bytes per token for every KV
 * dtype (n/a with the reason when its grouping does not fit the model's KV
 * row), a table over contexts 2K..128K x batch 1, 8, 32, and what GQA saves
 * against MHA. All KV arithmetic is pl_kv_size_of's (the pool's own).
 * Exit: 0 ok, 1 the file is missing or not a valid GGUF, 2 usage.
 */
#include "cli.h"
#include "inspect_groups.h"
#include "commands.h"
#include "pagellm.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INSPECT "inspect"

static const uint64_t inspect_ctx[] = {2048, 8192, 32768, 131072};
static const uint64_t inspect_batch[] = {1, 8, 32};
#define N_CTX (sizeof inspect_ctx / sizeof inspect_ctx[0])
#define N_BATCH (sizeof inspect_batch / sizeof inspect_batch[0])

/* KV cost of one dtype for this model. */
typedef struct {
    bool ok;
    char why[200];     /* when !ok */
    pl_kv_size size;
} inspect_kv;

typedef struct {
    pl_file_info info;
    int block;
    inspect_kv kv[PL_KV_DTYPE_COUNT];
    inspect_kv mha;    /* f16 with n_kv_heads = n_heads */
} inspect_report;

static json_t *inspect_json_num(double x)
{
    if (x == floor(x) && fabs(x) < 9007199254740992.0) return json_integer((json_int_t)x);
    return json_real(x);
}

/* An f32 from the file as the short decimal it was written as (1e-05,
 * not 9.9999997473787516e-06). */
static json_t *inspect_json_f32(float x)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%.7g", (double)x);
    return json_real(strtod(buf, NULL));
}

static json_t *inspect_json_str(const char *s)
{
    json_t *j = json_string(s);
    return j ? j : json_string("?"); /* not UTF-8 */
}

static void inspect_kv_size(const pl_file_info *in, uint32_t kv_heads, int block, pl_kv_dtype t, inspect_kv *out)
{
    pl_kv_shape shape = {in->n_layers, kv_heads, in->head_dim, (uint32_t)block};
    memset(out, 0, sizeof *out);
    if (!in->arch[0]) {
        snprintf(out->why, sizeof out->why, "no general.architecture: the file has no model shape");
    } else if (in->kv_lora_rank ? pl_kv_size_of_latent(in->n_layers, in->kv_lora_rank, in->rope_dim, (uint32_t)block, t,
                                                       &out->size) == 0
                                : pl_kv_size_of(&shape, t, &out->size) == 0) {
        out->ok = true;
    } else {
        snprintf(out->why, sizeof out->why, "%s", pl_last_error());
    }
}

static void inspect_compute(inspect_report *r)
{
    for (int t = 0; t < PL_KV_DTYPE_COUNT; t++)
        inspect_kv_size(&r->info, r->info.n_kv_heads, r->block, (pl_kv_dtype)t, &r->kv[t]);
    if (!r->info.kv_lora_rank) inspect_kv_size(&r->info, r->info.n_heads, r->block, PL_KV_F16, &r->mha);
}

/* ---------------------------------------------------------------- text */

/* The positions past which RoPE extrapolates (the file's scaling
 * included where pagellm reads the model), 0 when unknown. */
static uint32_t inspect_reach(const pl_file_info *in) { return in->ctx_rope ? in->ctx_rope : in->ctx_train; }

/* Bits per weight of bytes over elements (0 for none): a format's storage
 * cost with its scales, e.g. q4_K 4.5, q5_0 5.5, q6_K 6.5625. */
static double inspect_bpw(unsigned long long bytes, unsigned long long elements)
{
    return elements ? 8.0 * (double)bytes / (double)elements : 0.0;
}

static void inspect_print_model(const pl_file_info *in)
{
    char h[32];
    printf("%s: GGUF v%u, %llu bytes, %llu metadata keys, %llu tensors\n", in->path, in->gguf_version,
           (unsigned long long)in->file_bytes, (unsigned long long)in->n_kv, (unsigned long long)in->n_tensors);
    printf("  architecture   %s%s%s%s\n", in->arch[0] ? in->arch : "(none)", in->name[0] ? " (" : "", in->name,
           in->name[0] ? ")" : "");
    printf("  layers %u  dim %u  heads %u  kv heads %u  head dim %u  ffn %u\n", in->n_layers, in->dim, in->n_heads,
           in->n_kv_heads, in->head_dim, in->ffn_dim);
    printf("  vocab %u  context %u  rope dims %u  rope base %g  norm eps %g  tokenizer %s\n", in->vocab_size,
           in->ctx_train, in->rope_dim, (double)in->rope_base, (double)in->norm_eps,
           in->tokenizer[0] ? in->tokenizer : "(none)");
    if (!strcmp(in->rope_scaling, "longrope"))
        printf("  rope scaling   longrope (factor tensors: short up to an original context of %u, long past it)\n",
               in->rope_orig_ctx);
    else if (in->rope_factor > 0)
        printf("  rope scaling   %s x%g from an original context of %u: made for %u positions\n", in->rope_scaling,
               (double)in->rope_factor, in->rope_orig_ctx, in->ctx_rope);
    if (in->sliding_window)
        printf("  sliding window %u: applied by default (each token attends to the last %u positions, KV blocks "
               "before them freed; --swa off for full attention, as llama.cpp does for llama-arch models)\n",
               in->sliding_window, in->sliding_window);
    else if (in->local_window)
        printf("  local layers   %u of %u attend over the last %u positions (layer groups: their KV is freed behind "
               "the window; --kv-groups off keeps every layer's)\n",
               in->local_layers, in->n_layers, in->local_window);
    else
        printf("  sliding window none (full causal attention)\n");
    if (in->n_expert)
        printf("  experts %u, %u per token: %llu of %llu weights active per token (%.1f%%)\n", in->n_expert,
               in->n_expert_used, (unsigned long long)in->active_elements, (unsigned long long)in->weights_elements,
               in->weights_elements ? 100.0 * (double)in->active_elements / (double)in->weights_elements : 0.0);
    printf("\nweights: %llu bytes (%s), %llu elements, %.3f bits per weight\n", (unsigned long long)in->weights_bytes,
           cli_human_bytes((double)in->weights_bytes, h, sizeof h), (unsigned long long)in->weights_elements,
           inspect_bpw(in->weights_bytes, in->weights_elements));
    printf("  %-8s %8s %14s %14s %8s\n", "type", "tensors", "elements", "bytes", "bpw");
    for (int i = 0; i < in->n_types; i++)
        printf("  %-8s %8llu %14llu %14llu %8.3f\n", in->types[i].type, (unsigned long long)in->types[i].count,
               (unsigned long long)in->types[i].elements, (unsigned long long)in->types[i].bytes,
               inspect_bpw(in->types[i].bytes, in->types[i].elements));
}

static void inspect_print_kv(const inspect_report *r)
{
    char h[32];
    if (r->info.kv_lora_rank)
        printf("\nKV cache per token (latent kind, MLA) = %u layers x (kv_lora_rank %u + rope dims %u) x bytes/elem, "
               "no V (blocks of %d tokens):\n", r->info.n_layers, r->info.kv_lora_rank, r->info.rope_dim, r->block);
    else
        printf("\nKV cache per token = 2 x %u layers x %u KV heads x head dim %u x bytes/elem (blocks of %d tokens):\n",
               r->info.n_layers, r->info.n_kv_heads, r->info.head_dim, r->block);
    for (int t = 0; t < PL_KV_DTYPE_COUNT; t++) {
        const inspect_kv *k = &r->kv[t];
        if (k->ok)
            printf("  %-9s %12.10g bytes  (%s)\n", pl_kv_dtype_name((pl_kv_dtype)t), k->size.bytes_per_token,
                   cli_human_bytes(k->size.bytes_per_token, h, sizeof h));
        else
            printf("  %-9s %12s        (%s)\n", pl_kv_dtype_name((pl_kv_dtype)t), "n/a", k->why);
    }
}

static void inspect_print_table(const inspect_report *r)
{
    static const pl_kv_dtype shown[] = {PL_KV_F16, PL_KV_Q8_0, PL_KV_Q4_0};
    char h[32];
    printf("\nKV bytes for context x batch (the formula; ctx is a multiple of the block, so no tail):\n");
    printf("  %-6s %6s", "dtype", "ctx");
    for (size_t b = 0; b < N_BATCH; b++) {
        snprintf(h, sizeof h, "batch %llu", (unsigned long long)inspect_batch[b]);
        printf("  %16s", h);
    }
    printf("\n");
    for (size_t d = 0; d < sizeof shown / sizeof shown[0]; d++) {
        const inspect_kv *k = &r->kv[shown[d]];
        if (!k->ok) continue;
        for (size_t c = 0; c < N_CTX; c++) {
            printf("  %-6s %5lluK", pl_kv_dtype_name(shown[d]), (unsigned long long)inspect_ctx[c] / 1024);
            for (size_t b = 0; b < N_BATCH; b++)
                printf("  %16s", cli_human_bytes(k->size.bytes_per_token * (double)inspect_ctx[c] * (double)inspect_batch[b],
                                               h, sizeof h));
            const uint32_t reach = inspect_reach(&r->info);
            printf("%s\n", !reach || inspect_ctx[c] <= reach ? ""
                            : reach > r->info.ctx_train ? "  (beyond the scaled context)"
                                                        : "  (beyond trained context)");
        }
    }
}

static void inspect_print_gqa(const inspect_report *r)
{
    const pl_file_info *in = &r->info;
    char h[32];
    if (!r->kv[PL_KV_F16].ok || !r->mha.ok || in->n_kv_heads == 0) return;
    double gqa = r->kv[PL_KV_F16].size.bytes_per_token, mha = r->mha.size.bytes_per_token;
    if (in->n_kv_heads == in->n_heads) {
        printf("\nMHA: every one of the %u query heads has its own KV head (no GQA saving)\n", in->n_heads);
        return;
    }
    printf("\nGQA: %u query heads share %u KV heads (%.4gx): MHA would need %.10g bytes per token at f16;"
           " GQA saves %.10g (%s, %.1f%%)\n",
           in->n_heads, in->n_kv_heads, (double)in->n_heads / in->n_kv_heads, mha, mha - gqa,
           cli_human_bytes(mha - gqa, h, sizeof h), 100.0 * (mha - gqa) / mha);
}

/* ---------------------------------------------------------------- JSON */

static json_t *inspect_json_model(const pl_file_info *in)
{
    json_t *o = json_object();
    json_object_set_new(o, "path", inspect_json_str(in->path));
    json_object_set_new(o, "gguf_version", json_integer(in->gguf_version));
    json_object_set_new(o, "file_bytes", json_integer((json_int_t)in->file_bytes));
    json_object_set_new(o, "n_kv", json_integer((json_int_t)in->n_kv));
    json_object_set_new(o, "n_tensors", json_integer((json_int_t)in->n_tensors));
    json_object_set_new(o, "arch", inspect_json_str(in->arch));
    json_object_set_new(o, "name", inspect_json_str(in->name));
    json_object_set_new(o, "n_layers", json_integer(in->n_layers));
    json_object_set_new(o, "dim", json_integer(in->dim));
    json_object_set_new(o, "n_heads", json_integer(in->n_heads));
    json_object_set_new(o, "n_kv_heads", json_integer(in->n_kv_heads));
    json_object_set_new(o, "head_dim", json_integer(in->head_dim));
    json_object_set_new(o, "ffn_dim", json_integer(in->ffn_dim));
    json_object_set_new(o, "vocab_size", json_integer(in->vocab_size));
    json_object_set_new(o, "ctx_train", json_integer(in->ctx_train));
    json_object_set_new(o, "sliding_window", json_integer(in->sliding_window));
    json_object_set_new(o, "n_expert", json_integer(in->n_expert));
    json_object_set_new(o, "n_expert_used", json_integer(in->n_expert_used));
    json_object_set_new(o, "active_elements", json_integer((json_int_t)in->active_elements));
    json_object_set_new(o, "local_window", json_integer(in->local_window));
    json_object_set_new(o, "local_layers", json_integer(in->local_layers));
    json_object_set_new(o, "rope_dim", json_integer(in->rope_dim));
    json_object_set_new(o, "rope_base", inspect_json_f32(in->rope_base));
    json_object_set_new(o, "rope_scaling", inspect_json_str(in->rope_scaling));
    json_object_set_new(o, "rope_factor", inspect_json_f32(in->rope_factor));
    json_object_set_new(o, "rope_orig_ctx", json_integer(in->rope_orig_ctx));
    json_object_set_new(o, "ctx_rope", json_integer(in->ctx_rope));
    json_object_set_new(o, "norm_eps", inspect_json_f32(in->norm_eps));
    json_object_set_new(o, "tokenizer", inspect_json_str(in->tokenizer));
    json_object_set_new(o, "weights_bytes", json_integer((json_int_t)in->weights_bytes));
    json_object_set_new(o, "weights_elements", json_integer((json_int_t)in->weights_elements));
    json_object_set_new(o, "weights_bpw", json_real(inspect_bpw(in->weights_bytes, in->weights_elements)));
    json_t *types = json_array();
    for (int i = 0; i < in->n_types; i++)
        json_array_append_new(types, json_pack("{s:s, s:I, s:I, s:I, s:f}", "type", in->types[i].type, "count",
                                               (json_int_t)in->types[i].count, "elements",
                                               (json_int_t)in->types[i].elements, "bytes",
                                               (json_int_t)in->types[i].bytes, "bpw",
                                               inspect_bpw(in->types[i].bytes, in->types[i].elements)));
    json_object_set_new(o, "types", types);
    return o;
}

static void inspect_json_kv(const inspect_report *r, json_t *o)
{
    json_t *per_tok = json_object(), *per_blk = json_object(), *na = json_object(), *table = json_array();
    for (int t = 0; t < PL_KV_DTYPE_COUNT; t++) {
        const inspect_kv *k = &r->kv[t];
        const char *name = pl_kv_dtype_name((pl_kv_dtype)t);
        json_object_set_new(per_tok, name, k->ok ? inspect_json_num(k->size.bytes_per_token) : json_null());
        json_object_set_new(per_blk, name, k->ok ? json_integer((json_int_t)k->size.bytes_per_block) : json_null());
        if (!k->ok) json_object_set_new(na, name, inspect_json_str(k->why));
        for (size_t c = 0; k->ok && c < N_CTX; c++)
            for (size_t b = 0; b < N_BATCH; b++)
                json_array_append_new(table, json_pack("{s:s, s:I, s:I, s:o}", "dtype", name, "ctx",
                                                       (json_int_t)inspect_ctx[c], "batch", (json_int_t)inspect_batch[b],
                                                       "bytes", inspect_json_num(round(k->size.bytes_per_token *
                                                                    (double)inspect_ctx[c] * (double)inspect_batch[b]))));
    }
    json_object_set_new(o, "block_size", json_integer(r->block));
    json_object_set_new(o, "kv_kind", json_string(r->info.kv_lora_rank ? "latent" : "kv"));
    if (r->info.kv_lora_rank) json_object_set_new(o, "kv_lora_rank", json_integer(r->info.kv_lora_rank));
    json_object_set_new(o, "bytes_per_token", r->kv[PL_KV_F16].ok ? inspect_json_num(r->kv[PL_KV_F16].size.bytes_per_token)
                                                                   : json_null());
    json_object_set_new(o, "kv_bytes_per_token", per_tok);
    json_object_set_new(o, "kv_bytes_per_block", per_blk);
    json_object_set_new(o, "kv_unavailable", na);
    json_object_set_new(o, "kv_table", table);
    if (r->kv[PL_KV_F16].ok && r->mha.ok) {
        double gqa = r->kv[PL_KV_F16].size.bytes_per_token, mha = r->mha.size.bytes_per_token;
        json_object_set_new(o, "gqa", json_pack("{s:f, s:o, s:o}", "ratio", (double)r->info.n_heads / r->info.n_kv_heads,
                                                "mha_bytes_per_token", inspect_json_num(mha), "saved_bytes_per_token",
                                                inspect_json_num(mha - gqa)));
    }
}

/* --tensors: one line (or JSON object) per tensor, in file order. */
static int inspect_tensors(const char *path, json_t *o)
{
    pl_tensor_info *ts = NULL;
    uint64_t n = 0;
    if (pl_file_tensors(path, &ts, &n) != 0) {
        cli_error(INSPECT, "%s", pl_last_error());
        return 1;
    }
    json_t *arr = o ? json_array() : NULL;
    if (!o) printf("\ntensors:\n  %-40s %-8s %-24s %12s\n", "name", "type", "shape", "bytes");
    for (uint64_t i = 0; i < n; i++) {
        const pl_tensor_info *t = &ts[i];
        if (o) {
            json_t *ne = json_array();
            for (uint32_t d = 0; d < t->n_dims && d < 4; d++) json_array_append_new(ne, json_integer((json_int_t)t->ne[d]));
            json_array_append_new(arr, json_pack("{s:o, s:s, s:o, s:I, s:I, s:i}", "name", inspect_json_str(t->name), "type",
                                                 t->type, "ne", ne, "offset", (json_int_t)t->offset, "bytes",
                                                 (json_int_t)t->bytes, "shard", (int)t->shard));
            continue;
        }
        char shape[64];
        int k = 0;
        for (uint32_t d = 0; d < t->n_dims && d < 4; d++)
            k += snprintf(shape + k, sizeof shape - (size_t)k, "%s%llu", d ? " x " : "", (unsigned long long)t->ne[d]);
        printf("  %-40s %-8s %-24s %12llu\n", t->name, t->type, shape, (unsigned long long)t->bytes);
    }
    if (o) json_object_set_new(o, "tensors", arr);
    free(ts);
    return 0;
}

int cmd_inspect(int argc, char **argv)
{
    static inspect_report r; /* the file info is a few KB; the command runs once */
    bool json = false, tensors = false;
    int block = 16;
    const cli_opt opts[] = {
        {"json", 0, CLI_FLAG, &json, 0, 0, NULL, "print JSON"},
        {"tensors", 0, CLI_FLAG, &tensors, 0, 0, NULL, "also list every tensor: name, type, shape, bytes"},
        {"block-size", 0, CLI_INT, &block, 1, 1000000, "B", "tokens per KV block (default 16)"},
        {0},
    };
    const char *pos[1];
    int npos = 0, rc = cli_parse(INSPECT, "MODEL.gguf [--json] [--tensors] [--block-size B]", opts, argc, argv, pos, 1, &npos);
    if (rc == CLI_HELP) return 0;
    if (rc != CLI_OK) return 2;
    if (npos != 1) { cli_error(INSPECT, "a MODEL.gguf path is required (see --help)"); return 2; }
    memset(&r, 0, sizeof r);
    r.block = block;
    if (pl_file_inspect(pos[0], &r.info) != 0) {
        cli_error(INSPECT, "%s", pl_last_error());
        return 1;
    }
    inspect_compute(&r);
    if (json) {
        json_t *o = inspect_json_model(&r.info);
        inspect_json_kv(&r, o);
        json_t *groups = inspect_groups_json(&r.info, r.block);
        if (groups) json_object_set_new(o, "layer_groups", groups);
        if (tensors && inspect_tensors(pos[0], o) != 0) { json_decref(o); return 1; }
        json_dumpf(o, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(12));
        fputc('\n', stdout);
        json_decref(o);
        return 0;
    }
    inspect_print_model(&r.info);
    inspect_print_kv(&r);
    inspect_print_table(&r);
    inspect_print_gqa(&r);
    inspect_groups_print(&r.info, r.block);
    return tensors ? inspect_tensors(pos[0], NULL) : 0;
}
