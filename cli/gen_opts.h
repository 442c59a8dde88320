/* gen_opts.h - the flags that run, chat (and serve) share: model, KV cache,
 * threads and sampling, with their parsing into pagellm.h's parameter
 * structs. One table so that every command spells and checks them alike. */
#ifndef PL_CLI_GEN_OPTS_H
#define PL_CLI_GEN_OPTS_H

#include "cli.h"
#include "pagellm.h"

typedef struct {
    const char *model;
    int ctx, block_size, threads, batch, max_seqs;
    int kv_window, kv_sinks; /* kv_sinks -1: unset (4 with a window) */
    uint64_t kv_mem;
    const char *kv_layout, *kv_dtype;
    const char *swa; /* auto | on | off */
    const char *kv_groups; /* on | off */
    bool no_kv_cache;
    double temp, top_p, min_p, repeat_penalty;
    int top_k, repeat_last_n;
    uint64_t seed;
    const char *rope_scaling; /* NULL: the file's */
    double rope_scale, rope_freq_base; /* 0: the file's */
    int yarn_orig_ctx;        /* 0: the file's */
    double yarn_ext_factor;   /* < 0: unset (1 for yarn, else 0) */
    double yarn_attn_factor, yarn_beta_fast, yarn_beta_slow; /* 0: llama.cpp's defaults */
} gen_opts;

void gen_opts_default(gen_opts *o);

/* Appends the shared flag descriptions to opts (which must have room for
 * GEN_OPTS_N more entries) starting at *n. */
#define GEN_OPTS_N 29
void gen_opts_table(gen_opts *o, cli_opt *opts, int *n);

/* Turns the parsed flags into parameters; prints the problem and returns 2
 * on a bad value. */
int gen_opts_ctx_params(const char *cmd, const gen_opts *o, pl_ctx_params *cp);
int gen_opts_sampler_params(const gen_opts *o, pl_sampler_params *sp);

/* Loads the model with the --rope-* flags applied; prints the problem and
 * returns 1 (2 for a bad flag value). */
int gen_opts_load_model(const char *cmd, const gen_opts *o, pl_model **m);

/* A warning on stderr when sequences of n_ctx tokens run past the
 * positions the model's RoPE was made for (pl_model_n_ctx_rope), with the
 * flags that would stretch it. Not with a KV window, whose positions stay
 * within it. */
void gen_opts_ctx_warn(const char *cmd, const pl_model *m, uint32_t n_ctx, bool kv_window);

/* Loads the model and makes a context; prints the problem and returns 1. */
int gen_opts_open(const char *cmd, const gen_opts *o, pl_model **m, pl_ctx **c);

#endif
