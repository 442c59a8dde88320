/* run.h - `pagellm run`'s options and report, shared by its two ways of
 * generating: straight on a context (cmd_run.c), or through an in-process
 * engine when KV tiers are asked for (run_engine.c), since the tiers live
 * in the engine. */
#ifndef PL_CLI_RUN_H
#define PL_CLI_RUN_H

#include <jansson.h>

#include "gen_opts.h"
#include "generate.h"
#include "tier_opts.h"

typedef struct {
    gen_opts g;
    tier_opts tiers;
    const char *prompt, *prompt_file;
    int n_predict;
    bool json, ignore_eos, no_bos, special;
    cli_strs stops;
} run_opts;

/* The report's first lines (stderr): prompt and generated tokens, speeds. */
void run_print_head(int n_prompt, double t_prefill, const gen_result *r);
/* The --json object's common fields: prompt_ids, gen_ids, text,
 * prefill_tok_s, decode_tok_s, stop_reason (new reference). */
json_t *run_json_base(const int32_t *prompt, size_t n_prompt, double t_prefill, const gen_result *r);
/* Prints the JSON object on stdout and drops it. */
void run_json_print(json_t *o);

/* Generates from the prompt ids through an engine with o's KV tiers:
 * text to stdout as it comes (or JSON with --json), the report with the
 * prompt tokens served from the cache and the tiers to stderr. Returns the
 * exit status. */
int run_engine(const run_opts *o, pl_model *m, const int32_t *ids, size_t n_ids);

#endif
