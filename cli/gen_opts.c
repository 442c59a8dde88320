/* gen_opts.c - shared generation flags; see gen_opts.h. */
#include "gen_opts.h"

#include <stdio.h>
#include <string.h>

void gen_opts_default(gen_opts *o)
{
    pl_sampler_params sp;
    pl_sampler_params_default(&sp);
    memset(o, 0, sizeof *o);
    o->block_size = 16;
    o->batch = 512;
    o->max_seqs = 1;
    o->kv_layout = "paged";
    o->kv_dtype = "f16";
    o->swa = "auto";
    o->kv_groups = "on";
    o->temp = sp.temperature;
    o->top_k = sp.top_k;
    o->top_p = sp.top_p;
    o->min_p = sp.min_p;
    o->repeat_penalty = sp.repeat_penalty;
    o->repeat_last_n = sp.repeat_last_n;
    o->seed = 0;
    o->kv_sinks = -1; /* unset: 4 with --kv-window (StreamingLLM's), else none */
    o->yarn_ext_factor = -1; /* unset: 1 for yarn, else 0 */
}

void gen_opts_table(gen_opts *o, cli_opt *t, int *n)
{
    const cli_opt add[GEN_OPTS_N] = {
        {"model", 'm', CLI_STR, &o->model, 0, 0, "GGUF", "model file (required)"},
        {"ctx", 'c', CLI_INT, &o->ctx, 1, 1 << 20, "N", "max tokens per sequence (default min(train ctx, 4096); with --kv-window: sinks + window; with sliding-window attention: KV slots held, default window + block + min(batch, 512))"},
        {"kv-mem", 0, CLI_SIZE, &o->kv_mem, 1, 1e15, "BYTES", "KV pool size, e.g. 512M (default: enough for the context)"},
        {"block-size", 0, CLI_INT, &o->block_size, 1, 4096, "N", "tokens per KV block (default 16)"},
        {"kv-layout", 0, CLI_STR, &o->kv_layout, 0, 0, "L", "paged (default) | static (reserve the whole context per sequence)"},
        {"kv-dtype", 0, CLI_STR, &o->kv_dtype, 0, 0, "T", "KV element type: f16 (default), f32, bf16, q8_0, q4_0, fp8_e4m3 (fp8), fp8_e5m2, kivi4 (int4), kivi2 (int2); `pagellm kvcalc` shows their bytes"},
        {"kv-window", 0, CLI_INT, &o->kv_window, 1, 1 << 20, "W", "sliding window: keep the last W tokens (+ sinks), dropping whole blocks, and run past --ctx and the train context"},
        {"kv-sinks", 0, CLI_INT, &o->kv_sinks, 0, 1 << 20, "S", "with --kv-window: keep the first S tokens too, pinned in whole blocks (default 4, StreamingLLM's; 0 = window only)"},
        {"swa", 0, CLI_STR, &o->swa, 0, 0, "M", "sliding-window attention of models that declare one (Mistral: 4096): auto (default) = the model's window, each token attends to the last W positions and older KV blocks are freed, so runs go past --ctx; on = the same, an error without one; off = full attention (llama.cpp's choice for llama-arch models); not with --kv-window"},
        {"kv-groups", 0, CLI_STR, &o->kv_groups, 0, 0, "M", "layer groups for models with local sliding-window layers beside global ones (gemma2/3): on (default) = a block table per group, the local groups free their KV behind the window; off = one table for all layers"},
        {"no-kv-cache", 0, CLI_FLAG, &o->no_kv_cache, 0, 0, NULL, "recompute every earlier token at each step (O(n^2) baseline)"},
        {"threads", 't', CLI_INT, &o->threads, 1, 256, "N", "threads (default: one per core)"},
        {"batch", 'b', CLI_INT, &o->batch, 1, 65536, "N", "tokens per forward pass / prefill chunk (default 512)"},
        {"temp", 0, CLI_FLOAT, &o->temp, 0, 100, "T", "temperature; 0 = greedy (default 0.8)"},
        {"top-k", 0, CLI_INT, &o->top_k, 0, 1 << 30, "K", "top-k, 0 = off (default 40)"},
        {"top-p", 0, CLI_FLOAT, &o->top_p, 0, 1, "P", "top-p, 1 = off (default 0.95)"},
        {"min-p", 0, CLI_FLOAT, &o->min_p, 0, 1, "P", "min-p, 0 = off (default 0.05)"},
        {"repeat-penalty", 0, CLI_FLOAT, &o->repeat_penalty, 0.01, 100, "X", "repetition penalty, 1 = off (default 1)"},
        {"repeat-last-n", 0, CLI_INT, &o->repeat_last_n, 0, 1 << 20, "N", "tokens the penalty looks back (default 64)"},
        {"seed", 's', CLI_U64, &o->seed, 0, 0, "N", "sampling seed (default 0)"},
        {"rope-scaling", 0, CLI_STR, &o->rope_scaling, 0, 0, "T", "RoPE scaling instead of the file's, to run past the trained context: none | linear | yarn"},
        {"rope-scale", 0, CLI_FLOAT, &o->rope_scale, 1e-3, 1e6, "F", "RoPE context factor (positions / F) instead of the file's; yarn needs F > 1"},
        {"rope-freq-base", 0, CLI_FLOAT, &o->rope_freq_base, 1e-3, 1e12, "F", "RoPE frequency base instead of the file's (global layers)"},
        {"yarn-orig-ctx", 0, CLI_INT, &o->yarn_orig_ctx, 1, 1 << 24, "N", "YaRN's original context (default: the file's, else its train context)"},
        {"yarn-ext-factor", 0, CLI_FLOAT, &o->yarn_ext_factor, 0, 1, "F", "YaRN's extrapolation mix, 0..1 (default 1 with yarn, else 0; above 0 adds YaRN's ramp to any scaling)"},
        {"yarn-attn-factor", 0, CLI_FLOAT, &o->yarn_attn_factor, 1e-3, 1e3, "F", "RoPE cos/sin multiplier where no YaRN ramp is mixed in (default 1; a ramp sets its own, as llama.cpp)"},
        {"yarn-beta-fast", 0, CLI_FLOAT, &o->yarn_beta_fast, 1e-3, 1e4, "F", "YaRN's ramp: rotations over the original context below which a pair is interpolated (default 32)"},
        {"yarn-beta-slow", 0, CLI_FLOAT, &o->yarn_beta_slow, 1e-3, 1e4, "F", "YaRN's ramp: rotations above which a pair is extrapolated (default 1)"},
        {0},
    };
    for (int i = 0; i < GEN_OPTS_N && add[i].name; i++) t[(*n)++] = add[i];
}

int gen_opts_ctx_params(const char *cmd, const gen_opts *o, pl_ctx_params *cp)
{
    pl_ctx_params_default(cp);
    cp->n_ctx = (uint32_t)o->ctx;
    cp->kv_mem = o->kv_mem;
    cp->block_size = (uint32_t)o->block_size;
    cp->n_threads = o->threads;
    cp->max_batch = (uint32_t)o->batch;
    cp->max_seqs = (uint32_t)o->max_seqs;
    cp->no_kv_cache = o->no_kv_cache;
    cp->kv_window = (uint32_t)o->kv_window;
    cp->kv_sinks = o->kv_sinks >= 0 ? (uint32_t)o->kv_sinks : o->kv_window ? 4 : 0;
    if (o->kv_sinks > 0 && !o->kv_window) { cli_error(cmd, "--kv-sinks %d needs --kv-window W", o->kv_sinks); return 2; }
    if (strcmp(o->swa, "auto") == 0) cp->swa = PL_SWA_AUTO;
    else if (strcmp(o->swa, "on") == 0) cp->swa = PL_SWA_ON;
    else if (strcmp(o->swa, "off") == 0) cp->swa = PL_SWA_OFF;
    else { cli_error(cmd, "bad value '%s' for --swa (auto | on | off)", o->swa); return 2; }
    if (strcmp(o->kv_groups, "on") == 0) cp->kv_one_table = false;
    else if (strcmp(o->kv_groups, "off") == 0) cp->kv_one_table = true;
    else { cli_error(cmd, "bad value '%s' for --kv-groups (on | off)", o->kv_groups); return 2; }
    if (strcmp(o->kv_layout, "paged") == 0) cp->layout = PL_KV_PAGED;
    else if (strcmp(o->kv_layout, "static") == 0) cp->layout = PL_KV_STATIC;
    else { cli_error(cmd, "bad value '%s' for --kv-layout (paged | static)", o->kv_layout); return 2; }
    if (pl_kv_dtype_from_name(o->kv_dtype, &cp->kv_dtype) != 0) {
        cli_error(cmd, "bad value for --kv-dtype: %s", pl_last_error());
        return 2;
    }
    return 0;
}

int gen_opts_sampler_params(const gen_opts *o, pl_sampler_params *sp)
{
    *sp = (pl_sampler_params){.temperature = (float)o->temp, .top_k = o->top_k, .top_p = (float)o->top_p,
                              .min_p = (float)o->min_p, .repeat_penalty = (float)o->repeat_penalty,
                              .repeat_last_n = o->repeat_last_n, .seed = o->seed};
    return 0;
}

int gen_opts_load_model(const char *cmd, const gen_opts *o, pl_model **m)
{
    if (o->rope_scaling && strcmp(o->rope_scaling, "none") && strcmp(o->rope_scaling, "linear") &&
        strcmp(o->rope_scaling, "yarn")) {
        cli_error(cmd, "bad value '%s' for --rope-scaling (none | linear | yarn)", o->rope_scaling);
        return 2;
    }
    if (pl_model_load(m, o->model) != 0) {
        cli_error(cmd, "%s", pl_last_error());
        return 1;
    }
    const pl_rope_params rp = {.type = o->rope_scaling,
                               .factor = (float)o->rope_scale,
                               .freq_base = (float)o->rope_freq_base,
                               .orig_ctx = (uint32_t)o->yarn_orig_ctx,
                               .yarn_ext_set = o->yarn_ext_factor >= 0,
                               .yarn_ext_factor = o->yarn_ext_factor >= 0 ? (float)o->yarn_ext_factor : 0,
                               .yarn_attn_factor = (float)o->yarn_attn_factor,
                               .yarn_beta_fast = (float)o->yarn_beta_fast,
                               .yarn_beta_slow = (float)o->yarn_beta_slow};
    if (pl_model_set_rope(*m, &rp) != 0) {
        cli_error(cmd, "%s", pl_last_error());
        pl_model_free(*m);
        *m = NULL;
        return 1;
    }
    return 0;
}

void gen_opts_ctx_warn(const char *cmd, const pl_model *m, uint32_t n_ctx, bool kv_window)
{
    const uint32_t reach = pl_model_n_ctx_rope(m), train = pl_model_n_ctx_train(m);
    if (kv_window || !reach || n_ctx <= reach) return;
    char how[96];
    if (reach == train) /* not scaled: the factor that reaches n_ctx from the trained context */
        snprintf(how, sizeof how, "--rope-scaling yarn --rope-scale %u", (n_ctx + train - 1) / train);
    else
        snprintf(how, sizeof how, "a larger --rope-scale");
    fprintf(stderr,
            "pagellm %s: warning: a context of %u tokens is past the %u positions the model's RoPE was trained or "
            "scaled for: beyond them it extrapolates and the text degrades (%s stretches it: docs/models.md)\n",
            cmd, n_ctx, reach, how);
}

int gen_opts_open(const char *cmd, const gen_opts *o, pl_model **m, pl_ctx **c)
{
    pl_ctx_params cp;
    int rc = gen_opts_ctx_params(cmd, o, &cp);
    if (rc) return rc;
    if ((rc = gen_opts_load_model(cmd, o, m)) != 0) return rc;
    if (pl_ctx_new(c, *m, &cp) != 0) {
        cli_error(cmd, "%s", pl_last_error());
        pl_model_free(*m);
        *m = NULL;
        return 1;
    }
    gen_opts_ctx_warn(cmd, *m, pl_ctx_n_ctx(*c), pl_ctx_kv_window(*c) != 0);
    return 0;
}
