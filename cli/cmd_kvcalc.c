/* cmd_kvcalc.c - `pagellm kvcalc`: KV cache memory from bare dimensions.
 *
 *   bytes_per_token = 2 (K, V) x layers x kv_heads x head_dim x bytes/elem
 *                     (+ a block's scales shared by its tokens: fp8_e4m3)
 *   latent kind (MLA, --kv-lora-rank R --rope-dim D): one row a token and
 *   layer, bytes_per_token = layers x (R + D) x bytes/elem
 *   layer groups (--local-layers N --window W): the global layers keep
 *   every token, each local group at most the blocks of its window
 *   (pl_kv_size_of_groups); beside the one-table figures
 *   total_bytes     = bytes_per_token x ctx x batch        (the formula)
 *   allocated_bytes = ceil(ctx / block) x bytes_per_block x batch
 *                     (what a paged pool really holds: whole blocks)
 *
 * The arithmetic is pl_kv_size_of's, the same the engine's pool uses. Flags
 * are checked by cli_parse (0 and negative values refused, naming the flag);
 * a dtype whose grouping does not fit the shape is a usage error too.
 * Exit: 0 ok, 1 the numbers overflow 64 bits, 2 usage.
 */
#include "cli.h"
#include "commands.h"
#include "pagellm.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define KVCALC "kvcalc"

typedef struct {
    int layers, kv_heads, head_dim, heads, block;
    int kv_lora_rank, rope_dim; /* the latent kind when kv_lora_rank > 0 */
    int local_layers, window;   /* layer groups when local_layers > 0 */
    uint64_t ctx, batch;
    const char *dtype_name;
    bool json;
    pl_kv_dtype dtype;
    pl_kv_size size;
} kvcalc_args;

typedef struct {
    uint64_t total, allocated, blocks_per_seq, tail_waste;
    double mha_bytes_per_token; /* 0 without --heads */
    pl_kv_groups_size groups;   /* groups 0 without --local-layers */
} kvcalc_result;

/* An integer when exact, else a real (fp8_e4m3 scales shared by a block). */
static json_t *kvcalc_json_num(double x)
{
    if (x == floor(x) && fabs(x) < 9007199254740992.0) return json_integer((json_int_t)x);
    return json_real(x);
}

/* --kv-lora-rank R --rope-dim D: the latent kind, no K/V heads. */
static int kvcalc_parse_latent(kvcalc_args *a)
{
    const char *missing = !a->layers ? "--layers" : !a->kv_lora_rank ? "--kv-lora-rank" : !a->rope_dim ? "--rope-dim" : NULL;
    if (missing) { cli_error(KVCALC, "%s is required with the latent kind (see --help)", missing); return CLI_USAGE; }
    const char *other = a->kv_heads ? "--kv-heads" : a->head_dim ? "--head-dim" : a->heads ? "--heads" : NULL;
    if (other) {
        cli_error(KVCALC, "%s describes K/V heads; the latent kind (--kv-lora-rank) has one row a token", other);
        return CLI_USAGE;
    }
    if (pl_kv_dtype_from_name(a->dtype_name, &a->dtype) != 0) {
        cli_error(KVCALC, "--dtype: %s", pl_last_error());
        return CLI_USAGE;
    }
    if (pl_kv_size_of_latent((uint32_t)a->layers, (uint32_t)a->kv_lora_rank, (uint32_t)a->rope_dim, (uint32_t)a->block,
                             a->dtype, &a->size) != 0) {
        cli_error(KVCALC, "cannot size this shape with --dtype %s: %s", a->dtype_name, pl_last_error());
        return CLI_USAGE;
    }
    return CLI_OK;
}

static int kvcalc_parse(int argc, char **argv, kvcalc_args *a)
{
    const cli_opt opts[] = {
        {"layers", 0, CLI_INT, &a->layers, 1, 1000000, "L", "transformer layers (required)"},
        {"kv-heads", 0, CLI_INT, &a->kv_heads, 1, 1000000, "H", "KV heads per layer (required)"},
        {"head-dim", 0, CLI_INT, &a->head_dim, 1, 1000000, "D", "dimension of one head (required)"},
        {"dtype", 0, CLI_STR, &a->dtype_name, 0, 0, "T",
         "KV dtype: f32, f16, bf16, q8_0, q4_0, fp8_e4m3, fp8_e5m2 (default f16)"},
        {"ctx", 0, CLI_SIZE, &a->ctx, 1, 1e12, "S", "tokens per sequence, K suffix = 1024 (default 4096)"},
        {"batch", 0, CLI_U64, &a->batch, 1, 1e9, "B", "sequences (default 1)"},
        {"block-size", 0, CLI_INT, &a->block, 1, 1000000, "B", "tokens per KV block (default 16)"},
        {"heads", 0, CLI_INT, &a->heads, 1, 1000000, "N", "query heads, for the GQA-vs-MHA line"},
        {"kv-lora-rank", 0, CLI_INT, &a->kv_lora_rank, 1, 1000000, "R",
         "the latent (MLA) kind instead of K/V heads: kv_lora_rank values a token and layer (with --rope-dim)"},
        {"rope-dim", 0, CLI_INT, &a->rope_dim, 1, 1000000, "D", "with --kv-lora-rank: the shared RoPE key's dims"},
        {"local-layers", 0, CLI_INT, &a->local_layers, 1, 1000000, "N",
         "layer groups (gemma2/3): N of the layers attend over the last --window positions only"},
        {"window", 0, CLI_INT, &a->window, 2, 1 << 24, "W", "with --local-layers: the local layers' window"},
        {"json", 0, CLI_FLAG, &a->json, 0, 0, NULL, "print JSON"},
        {0},
    };
    const char *pos[1];
    int npos = 0;
    int rc = cli_parse(KVCALC, "--layers L (--kv-heads H --head-dim D | --kv-lora-rank R --rope-dim D) [--dtype T] "
                       "[--local-layers N --window W] [--ctx S] [--batch B] [--json]", opts, argc, argv, pos, 0, &npos);
    if (rc != CLI_OK) return rc;
    if ((a->local_layers > 0) != (a->window > 0) || a->local_layers >= (a->layers ? a->layers : 1)) {
        cli_error(KVCALC, "--local-layers N and --window W go together, N below --layers (some layers global)");
        return CLI_USAGE;
    }
    if (a->local_layers && (a->kv_lora_rank || a->rope_dim)) {
        cli_error(KVCALC, "--local-layers: layer groups are for K/V heads, not the latent kind");
        return CLI_USAGE;
    }
    if (a->kv_lora_rank || a->rope_dim) return kvcalc_parse_latent(a);
    const char *missing = !a->layers ? "--layers" : !a->kv_heads ? "--kv-heads" : !a->head_dim ? "--head-dim" : NULL;
    if (missing) { cli_error(KVCALC, "%s is required (see --help)", missing); return CLI_USAGE; }
    if (pl_kv_dtype_from_name(a->dtype_name, &a->dtype) != 0) {
        cli_error(KVCALC, "--dtype: %s", pl_last_error());
        return CLI_USAGE;
    }
    if (a->heads && a->heads % a->kv_heads != 0) {
        cli_error(KVCALC, "--heads %d must be a multiple of --kv-heads %d", a->heads, a->kv_heads);
        return CLI_USAGE;
    }
    pl_kv_shape shape = {(uint32_t)a->layers, (uint32_t)a->kv_heads, (uint32_t)a->head_dim, (uint32_t)a->block};
    if (pl_kv_size_of(&shape, a->dtype, &a->size) != 0) {
        cli_error(KVCALC, "cannot size this shape with --dtype %s: %s", a->dtype_name, pl_last_error());
        return CLI_USAGE;
    }
    return CLI_OK;
}

/* total = bytes_per_token x ctx x batch, exactly when the per-token bytes
 * are whole (always, except fp8_e4m3 with odd block shares). */
static int kvcalc_compute(const kvcalc_args *a, kvcalc_result *r)
{
    double bpt = a->size.bytes_per_token;
    uint64_t tokens, whole = (uint64_t)bpt, per_seq;
    if (__builtin_mul_overflow(a->ctx, a->batch, &tokens)) return -1;
    if ((double)whole == bpt) {
        if (__builtin_mul_overflow(whole, tokens, &r->total)) return -1;
    } else {
        long double t = (long double)bpt * tokens;
        if (t >= 1.8e19L) return -1;
        r->total = (uint64_t)llroundl(t);
    }
    r->blocks_per_seq = (a->ctx + (uint64_t)a->block - 1) / (uint64_t)a->block;
    if (__builtin_mul_overflow(r->blocks_per_seq, a->size.bytes_per_block, &per_seq) ||
        __builtin_mul_overflow(per_seq, a->batch, &r->allocated))
        return -1;
    r->tail_waste = r->allocated >= r->total ? r->allocated - r->total : 0;
    r->mha_bytes_per_token = 0;
    if (a->heads) {
        pl_kv_shape mha = {(uint32_t)a->layers, (uint32_t)a->heads, (uint32_t)a->head_dim, (uint32_t)a->block};
        pl_kv_size s;
        if (pl_kv_size_of(&mha, a->dtype, &s) == 0) r->mha_bytes_per_token = s.bytes_per_token;
    }
    memset(&r->groups, 0, sizeof r->groups);
    if (a->local_layers) { /* per sequence, times the batch below */
        pl_kv_shape sh = {(uint32_t)a->layers, (uint32_t)a->kv_heads, (uint32_t)a->head_dim, (uint32_t)a->block};
        if (pl_kv_size_of_groups(&sh, (uint32_t)a->local_layers, (uint32_t)a->window, a->dtype, a->ctx, &r->groups) ||
            __builtin_mul_overflow(r->groups.global_bytes, a->batch, &r->groups.global_bytes) ||
            __builtin_mul_overflow(r->groups.local_bytes, a->batch, &r->groups.local_bytes))
            return -1;
    }
    return 0;
}

static void kvcalc_print_json(const kvcalc_args *a, const kvcalc_result *r)
{
    json_t *o = json_object();
    json_object_set_new(o, "layers", json_integer(a->layers));
    json_object_set_new(o, "kind", json_string(a->kv_lora_rank ? "latent" : "kv"));
    if (a->kv_lora_rank) {
        json_object_set_new(o, "kv_lora_rank", json_integer(a->kv_lora_rank));
        json_object_set_new(o, "rope_dim", json_integer(a->rope_dim));
    } else {
        json_object_set_new(o, "kv_heads", json_integer(a->kv_heads));
        json_object_set_new(o, "head_dim", json_integer(a->head_dim));
    }
    json_object_set_new(o, "dtype", json_string(pl_kv_dtype_name(a->dtype)));
    json_object_set_new(o, "block_size", json_integer(a->block));
    json_object_set_new(o, "ctx", json_integer((json_int_t)a->ctx));
    json_object_set_new(o, "batch", json_integer((json_int_t)a->batch));
    json_object_set_new(o, "bytes_per_token", kvcalc_json_num(a->size.bytes_per_token));
    json_object_set_new(o, "bytes_per_block", json_integer((json_int_t)a->size.bytes_per_block));
    json_object_set_new(o, "blocks_per_seq", json_integer((json_int_t)r->blocks_per_seq));
    json_object_set_new(o, "total_bytes", json_integer((json_int_t)r->total));
    json_object_set_new(o, "allocated_bytes", json_integer((json_int_t)r->allocated));
    json_object_set_new(o, "tail_waste_bytes", json_integer((json_int_t)r->tail_waste));
    json_object_set_new(o, "stage_bytes_per_seq", json_integer((json_int_t)a->size.stage_bytes));
    if (a->heads) {
        json_object_set_new(o, "heads", json_integer(a->heads));
        json_object_set_new(o, "gqa_ratio", json_integer(a->heads / a->kv_heads));
        json_object_set_new(o, "mha_bytes_per_token", kvcalc_json_num(r->mha_bytes_per_token));
        json_object_set_new(o, "gqa_saved_bytes_per_token",
                            kvcalc_json_num(r->mha_bytes_per_token - a->size.bytes_per_token));
    }
    if (a->local_layers) {
        const pl_kv_groups_size *g = &r->groups;
        json_object_set_new(o, "layer_groups",
                            json_pack("{s:i, s:i, s:i, s:i, s:I, s:I, s:I, s:I}", "local_layers", a->local_layers,
                                      "window", a->window, "groups", (int)g->groups, "slots", (int)g->slots,
                                      "bytes_per_block", (json_int_t)g->bytes_per_block, "global_bytes",
                                      (json_int_t)g->global_bytes, "local_bytes", (json_int_t)g->local_bytes,
                                      "total_bytes", (json_int_t)(g->global_bytes + g->local_bytes)));
    }
    json_dumpf(o, stdout, JSON_INDENT(2));
    fputc('\n', stdout);
    json_decref(o);
}

static void kvcalc_print_text(const kvcalc_args *a, const kvcalc_result *r)
{
    char h[32];
    double bpt = a->size.bytes_per_token;
    if (a->kv_lora_rank)
        printf("KV cache (latent, MLA): %d layers x (kv_lora_rank %d + rope dims %d), no V, %s, blocks of %d tokens\n",
               a->layers, a->kv_lora_rank, a->rope_dim, pl_kv_dtype_name(a->dtype), a->block);
    else
        printf("KV cache: %d layers x %d KV heads x head dim %d, %s, blocks of %d tokens\n", a->layers, a->kv_heads,
               a->head_dim, pl_kv_dtype_name(a->dtype), a->block);
    printf("  bytes per token   %.10g (%s)\n", bpt, cli_human_bytes(bpt, h, sizeof h));
    printf("  bytes per block   %llu (%s)\n", (unsigned long long)a->size.bytes_per_block,
           cli_human_bytes((double)a->size.bytes_per_block, h, sizeof h));
    printf("  total bytes       %llu (%s) for ctx %llu tokens x batch %llu\n", (unsigned long long)r->total,
           cli_human_bytes((double)r->total, h, sizeof h), (unsigned long long)a->ctx, (unsigned long long)a->batch);
    printf("  allocated bytes   %llu (%s) in %llu blocks per sequence; %llu bytes in unfilled block tails and block pad\n",
           (unsigned long long)r->allocated, cli_human_bytes((double)r->allocated, h, sizeof h),
           (unsigned long long)r->blocks_per_seq, (unsigned long long)r->tail_waste);
    if (a->size.stage_bytes) /* KIVI, fp8_e4m3: the f16 block being filled, per sequence, outside the pool */
        printf("  stage bytes       %llu (%s) per sequence: the f16 block being filled, besides the blocks\n",
               (unsigned long long)a->size.stage_bytes, cli_human_bytes((double)a->size.stage_bytes, h, sizeof h));
    if (r->groups.groups) {
        const pl_kv_groups_size *g = &r->groups;
        char h2[32], h3[32], h4[32];
        printf("  layer groups      %u of %u layers local (window %d) in %u groups of %u layers a block: global %s "
               "(every token) + local %s (their windows) = %s allocated, against %s in one table\n",
               a->local_layers, a->layers, a->window, g->groups, g->slots, cli_human_bytes((double)g->global_bytes, h, sizeof h),
               cli_human_bytes((double)g->local_bytes, h2, sizeof h2),
               cli_human_bytes((double)(g->global_bytes + g->local_bytes), h3, sizeof h3),
               cli_human_bytes((double)r->allocated, h4, sizeof h4));
    } else if (a->local_layers) {
        printf("  layer groups      none for this shape (too many local groups for the global layers): one table\n");
    }
    if (a->heads) {
        double saved = r->mha_bytes_per_token - bpt;
        printf("  GQA: %d query heads share %d KV heads (%dx): MHA would need %.10g bytes per token;"
               " GQA saves %.10g (%s, %.1f%%)\n",
               a->heads, a->kv_heads, a->heads / a->kv_heads, r->mha_bytes_per_token, saved,
               cli_human_bytes(saved, h, sizeof h), 100.0 * saved / r->mha_bytes_per_token);
    }
}

int cmd_kvcalc(int argc, char **argv)
{
    kvcalc_args a = {.block = 16, .ctx = 4096, .batch = 1, .dtype_name = "f16"};
    kvcalc_result r;
    int rc = kvcalc_parse(argc, argv, &a);
    if (rc == CLI_HELP) return 0;
    if (rc != CLI_OK) return 2;
    if (kvcalc_compute(&a, &r) != 0) {
        cli_error(KVCALC, "the totals overflow 64 bits (--ctx %llu x --batch %llu)", (unsigned long long)a.ctx,
                  (unsigned long long)a.batch);
        return 1;
    }
    if (a.json) kvcalc_print_json(&a, &r);
    else kvcalc_print_text(&a, &r);
    return 0;
}
