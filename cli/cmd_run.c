/* cmd_run.c - `pagellm run`: generate from a prompt, streaming text to
 * stdout and a report (tokens, speed, KV blocks and bytes) to stderr, or one
 * JSON object with --json. With a KV tier (--kv-disk, --kv-redis) the
 * generation goes through an engine instead (run_engine.c), so that a later
 * run finds the prompt's blocks there. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "run.h"

static json_t *kv_json(pl_ctx *c, int32_t seq)
{
    pl_kv_stats st;
    pl_ctx_kv_stats(c, &st);
    return json_pack("{s:i, s:I, s:I, s:I, s:f, s:I, s:I, s:I, s:I, s:f, s:I, s:i, s:I, s:I}",
                     "block_size", (int)st.block_size, "blocks_total", (json_int_t)st.blocks_total,
                     "blocks_used", (json_int_t)st.blocks_used, "blocks_free", (json_int_t)st.blocks_free,
                     "bytes_per_token", st.bytes_per_token, "bytes_used", (json_int_t)st.bytes_allocated,
                     "bytes_live", (json_int_t)st.bytes_live, "bytes_wasted", (json_int_t)st.bytes_wasted,
                     "tokens", (json_int_t)st.tokens, "utilisation", st.utilisation,
                     "seq_bytes", (json_int_t)pl_seq_kv_bytes(c, seq), "layer_groups", (int)st.layer_groups,
                     "global_bytes", (json_int_t)st.global_bytes, "local_bytes", (json_int_t)st.local_bytes);
}

void run_print_head(int n_prompt, double t_prefill, const gen_result *r)
{
    int steps = r->n_ids > 1 ? r->n_ids - 1 : 0;
    fprintf(stderr, "\n\n--- pagellm run\n");
    fprintf(stderr, "prompt    %d tokens, %.1f tok/s prefill\n", n_prompt, n_prompt / (t_prefill > 0 ? t_prefill : 1e-9));
    fprintf(stderr, "generated %d tokens, %.1f tok/s decode (stop: %s)\n", r->n_ids,
            steps / (r->decode_s > 0 ? r->decode_s : 1e-9), r->stop_reason);
}

static void print_report(pl_ctx *c, int n_prompt, double t_prefill, const gen_result *r)
{
    pl_kv_stats st;
    pl_ctx_kv_stats(c, &st);
    run_print_head(n_prompt, t_prefill, r);
    fprintf(stderr, "kv blocks %u used / %u total (block %u tokens, %llu bytes)\n", st.blocks_used, st.blocks_total,
            st.block_size, (unsigned long long)st.block_bytes);
    fprintf(stderr, "kv bytes  %llu held for %llu tokens; formula %.1f B/token x %llu = %llu live, %llu wasted in block tails and pad (%.1f%% used)\n",
            (unsigned long long)st.bytes_allocated, (unsigned long long)st.tokens, st.bytes_per_token,
            (unsigned long long)st.tokens, (unsigned long long)st.bytes_live, (unsigned long long)st.bytes_wasted,
            100.0 * st.utilisation);
    if (st.layer_groups) /* the formula above is per block slot: a block holds one group's layers */
        fprintf(stderr, "kv groups %u: %llu bytes in the global group (every token), %llu in the local groups (their window)\n",
                st.layer_groups, (unsigned long long)st.global_bytes, (unsigned long long)st.local_bytes);
}

json_t *run_json_base(const int32_t *prompt, size_t n_prompt, double t_prefill, const gen_result *r)
{
    json_t *pi = json_array(), *gi = json_array();
    for (size_t i = 0; i < n_prompt; i++) json_array_append_new(pi, json_integer(prompt[i]));
    for (int i = 0; i < r->n_ids; i++) json_array_append_new(gi, json_integer(r->ids[i]));
    int steps = r->n_ids > 1 ? r->n_ids - 1 : 0;
    return json_pack("{s:o, s:o, s:s%, s:f, s:f, s:s}", "prompt_ids", pi, "gen_ids", gi, "text", r->text, r->text_len,
                     "prefill_tok_s", n_prompt / (t_prefill > 0 ? t_prefill : 1e-9), "decode_tok_s",
                     steps / (r->decode_s > 0 ? r->decode_s : 1e-9), "stop_reason", r->stop_reason);
}

void run_json_print(json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (s) puts(s);
    free(s);
    json_decref(o);
}

static void print_json(pl_ctx *c, int32_t seq, const int32_t *prompt, size_t n_prompt, double t_prefill,
                       const gen_result *r)
{
    json_t *o = run_json_base(prompt, n_prompt, t_prefill, r);
    json_object_set_new(o, "kv", kv_json(c, seq));
    run_json_print(o);
}

static int run_parse(int argc, char **argv, run_opts *o)
{
    gen_opts_default(&o->g);
    o->n_predict = 128;
    const cli_opt mine[] = {
        {"prompt", 'p', CLI_STR, &o->prompt, 0, 0, "TEXT", "the prompt"},
        {"file", 'f', CLI_STR, &o->prompt_file, 0, 0, "FILE", "read the prompt from FILE (- = stdin)"},
        {"n-predict", 'n', CLI_INT, &o->n_predict, 1, 1 << 20, "N", "tokens to generate at most (default 128)"},
        {"stop", 0, CLI_STRS, &o->stops, 0, 0, "TEXT", "stop when TEXT appears (repeatable)"},
        {"ignore-eos", 0, CLI_FLAG, &o->ignore_eos, 0, 0, NULL, "keep generating past end-of-generation tokens"},
        {"no-bos", 0, CLI_FLAG, &o->no_bos, 0, 0, NULL, "do not add the BOS token"},
        {"special", 0, CLI_FLAG, &o->special, 0, 0, NULL, "parse special tokens (<s>, <|im_start|>...) in the prompt"},
        {"json", 0, CLI_FLAG, &o->json, 0, 0, NULL, "print one JSON object instead of streaming text"},
        {0},
    };
    cli_opt opts[GEN_OPTS_N + sizeof mine / sizeof mine[0] + TIER_OPTS_N]; /* mine ends with {0}: the end mark's room */
    int n = 0;
    gen_opts_table(&o->g, opts, &n);
    for (const cli_opt *x = mine; x->name; x++) opts[n++] = *x;
    tier_opts_table(&o->tiers, opts, &n);
    opts[n] = (cli_opt){0};
    const char *pos[1];
    int np, rc = cli_parse("run", "-m MODEL -p PROMPT [options]", opts, argc, argv, pos, 0, &np);
    if (rc == CLI_HELP) return -1;
    if (rc != CLI_OK) return 2;
    if (!o->g.model) { cli_error("run", "missing -m MODEL"); return 2; }
    if (!o->prompt == !o->prompt_file) { cli_error("run", "give exactly one of -p PROMPT or -f FILE"); return 2; }
    return tier_opts_check("run", &o->tiers, &o->g, false);
}

/* The prompt's token ids (malloc'd into *ids); 0, or the exit status with
 * the reason printed. */
static int run_tokenize(const run_opts *o, const pl_model *m, const char *prompt, size_t plen, int32_t **ids,
                        size_t *n_ids)
{
    const pl_vocab *v = pl_model_vocab(m);
    if (pl_tokenize(v, prompt, plen, !o->no_bos && pl_vocab_add_bos(v), o->special, ids, n_ids) != 0) {
        cli_error("run", "cannot tokenize the prompt: %s", pl_last_error());
        return 1;
    }
    if (*n_ids == 0) { cli_error("run", "the prompt is empty (no tokens)"); free(*ids); *ids = NULL; return 2; }
    return 0;
}

static int run_generate(const run_opts *o, pl_model *m, pl_ctx *c, const int32_t *ids, size_t n_ids)
{
    int32_t seq = -1;
    pl_sampler *s = NULL;
    pl_sampler_params sp;
    gen_opts_sampler_params(&o->g, &sp);
    if (!pl_ctx_unbounded(c) && n_ids >= pl_ctx_n_ctx(c)) {
        cli_error("run", "prompt of %zu tokens does not fit the context of %u tokens (--ctx)", n_ids, pl_ctx_n_ctx(c));
        return 2;
    }
    float *logits = malloc(sizeof(float) * pl_model_n_vocab(m));
    if (!logits) {
        cli_error("run", "out of memory for the logits");
        return 1;
    }
    int rc = pl_sampler_new(&s, &sp, (int32_t)pl_model_n_vocab(m));
    if (!rc) rc = pl_seq_new(c, &seq);
    double t0 = now_seconds(), t_prefill = 0;
    if (!rc) rc = pl_seq_append(c, seq, ids, n_ids, logits);
    t_prefill = now_seconds() - t0;
    gen_result r;
    gen_config gc = {o->n_predict, o->ignore_eos, o->stops.v, o->stops.n, o->json ? NULL : stdout};
    if (!rc) rc = generate(c, m, seq, s, logits, &gc, &r);
    if (!rc) {
        if (o->json) print_json(c, seq, ids, n_ids, t_prefill, &r);
        else print_report(c, (int)n_ids, t_prefill, &r);
        gen_result_free(&r);
    } else if (rc < 0) { /* > 0: generate said why */
        cli_error("run", "%s", pl_last_error());
    }
    pl_sampler_free(s);
    free(logits);
    return rc ? 1 : 0;
}

int cmd_run(int argc, char **argv)
{
    run_opts o;
    memset(&o, 0, sizeof o);
    int rc = run_parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    uint64_t plen = 0;
    char *from_file = NULL;
    if (o.prompt_file) {
        from_file = cli_read_file(o.prompt_file, &plen);
        if (!from_file) { cli_error("run", "cannot read prompt file '%s'", o.prompt_file); return 1; }
    } else {
        plen = strlen(o.prompt);
    }
    pl_model *m = NULL;
    pl_ctx *c = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (tier_opts_any(&o.tiers)) { /* the engine makes its own context */
        rc = gen_opts_load_model("run", &o.g, &m);
    } else {
        rc = gen_opts_open("run", &o.g, &m, &c);
    }
    if (!rc) rc = run_tokenize(&o, m, from_file ? from_file : o.prompt, (size_t)plen, &ids, &n_ids);
    if (!rc) rc = c ? run_generate(&o, m, c, ids, n_ids) : run_engine(&o, m, ids, n_ids);
    free(ids);
    pl_ctx_free(c);
    pl_model_free(m);
    free(from_file);
    return rc;
}
