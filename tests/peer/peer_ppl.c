/* peer_ppl.c - llama.cpp's perplexity of a token sequence, the oracle for
 * `pagellm perplexity` (tests/cli/test_perplexity.sh).
 *
 * It takes token ids rather than text, so that the two engines score the
 * very same tokens and only the forward pass is compared (the tokenizers are
 * tested on their own). The chunking and scoring rule is the one
 * cli/cmd_perplexity.c documents, which is llama-perplexity's:
 *
 *   - the ids (BOS included, as `pagellm tokenize` gives them) are cut into
 *     n_chunks = n_ids / n_ctx chunks of n_ctx ids; the tail is dropped;
 *   - each chunk is evaluated from an empty KV cache at positions
 *     0..n_ctx-1, its first id replaced by BOS when the vocabulary adds one;
 *   - with first = n_ctx / 2, the logits at positions first..n_ctx-2 score
 *     the ids at first+1..n_ctx-1: n_ctx - 1 - first tokens per chunk;
 *   - ppl = exp(mean nll); ppl_err = ppl * sqrt((E[nll^2] - E[nll]^2) / (n - 1)).
 *
 *   peer-ppl -m MODEL -ids-file F [-c N_CTX] [-chunks N] [-t T] [-ctk T] [-ctv T] [-nll OUT]
 *            [-rope-scaling none|linear|yarn] [-rope-scale F] [-rope-freq-base F]
 *            [-yarn-orig-ctx N] [-yarn-ext-factor F] [-yarn-attn-factor F]
 *            [-yarn-beta-fast F] [-yarn-beta-slow F]
 *
 * F holds the ids separated by spaces, commas, brackets or newlines ("-" =
 * stdin). -ctk/-ctv name the KV cache types (f32, f16, bf16, q8_0, q4_0;
 * default f16). -nll writes each scored token's nll, one per line, to find
 * where two engines part ways. The -rope-* and -yarn-* flags are llama.cpp's
 * context parameters as its own tools set them (-rope-scale F: a frequency
 * scale of 1 / F). Prints one JSON line:
 *   {"ppl":..,"ppl_err":..,"n_tokens":..,"n_chunks":..,"n_ctx":..,"ctk":..,"ctv":..}
 *
 * Built by tests/peer.sh against the headers and libraries that
 * ../shared/peer/build.sh unpacks.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *user)
{
    (void)level; (void)text; (void)user;
}

/* Reads every integer in the file (separators: anything not a digit or '-'). */
static int read_ids(const char *path, llama_token **out)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (!f) return -1;
    size_t cap = 4096, n = 0;
    llama_token *ids = malloc(cap * sizeof *ids);
    int c = 0;
    while (ids && c != EOF) {
        while ((c = fgetc(f)) != EOF && !isdigit(c) && c != '-') {}
        if (c == EOF) break;
        long v = 0, sign = 1;
        if (c == '-') { sign = -1; c = fgetc(f); }
        for (; c != EOF && isdigit(c); c = fgetc(f)) v = v * 10 + (c - '0');
        if (n == cap) {
            llama_token *nb = realloc(ids, 2 * cap * sizeof *ids);
            if (!nb) { free(ids); ids = NULL; break; }
            ids = nb, cap *= 2;
        }
        ids[n++] = (llama_token)(sign * v);
    }
    if (f != stdin) fclose(f);
    if (!ids) return -1;
    *out = ids;
    return (int)n;
}

static int parse_type(const char *s, enum ggml_type *t)
{
    static const struct { const char *name; enum ggml_type t; } types[] = {
        {"f32", GGML_TYPE_F32}, {"f16", GGML_TYPE_F16}, {"bf16", GGML_TYPE_BF16},
        {"q8_0", GGML_TYPE_Q8_0}, {"q4_0", GGML_TYPE_Q4_0},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(s, types[i].name)) { *t = types[i].t; return 0; }
    return -1;
}

/* nll of token tok under logits (n_vocab): log-sum-exp in double. */
static double nll_of(const float *logits, int n_vocab, llama_token tok)
{
    float mx = logits[0];
    for (int i = 1; i < n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    double s = 0;
    for (int i = 0; i < n_vocab; i++) s += exp((double)logits[i] - mx);
    return (double)mx + log(s) - logits[tok];
}

static int parse_rope_type(const char *s, enum llama_rope_scaling_type *t)
{
    if (!strcmp(s, "none")) *t = LLAMA_ROPE_SCALING_TYPE_NONE;
    else if (!strcmp(s, "linear")) *t = LLAMA_ROPE_SCALING_TYPE_LINEAR;
    else if (!strcmp(s, "yarn")) *t = LLAMA_ROPE_SCALING_TYPE_YARN;
    else return -1;
    return 0;
}

int main(int argc, char **argv)
{
    const char *model_path = NULL, *ids_path = NULL, *nll_path = NULL, *ctk = "f16", *ctv = "f16";
    int threads = 2, n_ctx = 512, max_chunks = -1;
    struct llama_context_params cp = llama_context_default_params();
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-rope-scaling")) {
            if (parse_rope_type(argv[i + 1], &cp.rope_scaling_type)) {
                fprintf(stderr, "peer-ppl: bad -rope-scaling %s\n", argv[i + 1]);
                return 2;
            }
            continue;
        }
        if (!strcmp(argv[i], "-rope-scale")) { cp.rope_freq_scale = 1.0f / strtof(argv[i + 1], NULL); continue; }
        if (!strcmp(argv[i], "-rope-freq-base")) { cp.rope_freq_base = strtof(argv[i + 1], NULL); continue; }
        if (!strcmp(argv[i], "-yarn-orig-ctx")) { cp.yarn_orig_ctx = (uint32_t)atoi(argv[i + 1]); continue; }
        if (!strcmp(argv[i], "-yarn-ext-factor")) { cp.yarn_ext_factor = strtof(argv[i + 1], NULL); continue; }
        if (!strcmp(argv[i], "-yarn-attn-factor")) { cp.yarn_attn_factor = strtof(argv[i + 1], NULL); continue; }
        if (!strcmp(argv[i], "-yarn-beta-fast")) { cp.yarn_beta_fast = strtof(argv[i + 1], NULL); continue; }
        if (!strcmp(argv[i], "-yarn-beta-slow")) { cp.yarn_beta_slow = strtof(argv[i + 1], NULL); continue; }
        if (!strcmp(argv[i], "-m")) model_path = argv[i + 1];
        else if (!strcmp(argv[i], "-ids-file")) ids_path = argv[i + 1];
        else if (!strcmp(argv[i], "-c")) n_ctx = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-chunks")) max_chunks = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-ctk")) ctk = argv[i + 1];
        else if (!strcmp(argv[i], "-ctv")) ctv = argv[i + 1];
        else if (!strcmp(argv[i], "-nll")) nll_path = argv[i + 1];
        else { fprintf(stderr, "peer-ppl: unknown flag %s\n", argv[i]); return 2; }
    }
    enum ggml_type tk, tv;
    if (!model_path || !ids_path || n_ctx < 4 || parse_type(ctk, &tk) || parse_type(ctv, &tv)) {
        fprintf(stderr, "usage: peer-ppl -m MODEL -ids-file F [-c N_CTX>=4] [-chunks N] [-t T] "
                        "[-ctk f32|f16|bf16|q8_0|q4_0] [-ctv T] [-nll OUT]\n");
        return 2;
    }
    llama_token *ids = NULL;
    int n_ids = read_ids(ids_path, &ids);
    if (n_ids < 0) { fprintf(stderr, "peer-ppl: cannot read %s\n", ids_path); return 1; }
    int n_chunks = n_ids / n_ctx;
    if (max_chunks > 0 && max_chunks < n_chunks) n_chunks = max_chunks;
    if (n_chunks < 1) { fprintf(stderr, "peer-ppl: %d ids, fewer than one chunk of %d\n", n_ids, n_ctx); return 1; }

    llama_log_set(quiet, NULL);
    ggml_backend_load_all_from_path(PEER_LIBDIR);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(model_path, mp);
    if (!model) { fprintf(stderr, "peer-ppl: cannot load %s\n", model_path); return 1; }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_batch = cp.n_ubatch = (uint32_t)n_ctx; /* one decode per chunk */
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.type_k = tk;
    cp.type_v = tv;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "peer-ppl: cannot create a context\n"); return 1; }
    FILE *nf = nll_path ? fopen(nll_path, "w") : NULL;
    if (nll_path && !nf) { fprintf(stderr, "peer-ppl: cannot write %s\n", nll_path); return 1; }

    const bool add_bos = llama_vocab_get_add_bos(vocab);
    const int first = n_ctx / 2;
    struct llama_batch b = llama_batch_init(n_ctx, 0, 1);
    double nll = 0, nll2 = 0;
    long count = 0;
    for (int c = 0; c < n_chunks; c++) {
        const llama_token *chunk = ids + (size_t)c * n_ctx;
        llama_memory_clear(llama_get_memory(ctx), true);
        b.n_tokens = n_ctx;
        for (int i = 0; i < n_ctx; i++) {
            b.token[i] = i == 0 && add_bos ? llama_vocab_bos(vocab) : chunk[i];
            b.pos[i] = i;
            b.n_seq_id[i] = 1;
            b.seq_id[i][0] = 0;
            b.logits[i] = i >= first && i < n_ctx - 1;
        }
        if (llama_decode(ctx, b)) { fprintf(stderr, "peer-ppl: decode failed in chunk %d\n", c); return 1; }
        for (int i = first; i < n_ctx - 1; i++) {
            double v = nll_of(llama_get_logits_ith(ctx, i), n_vocab, chunk[i + 1]);
            nll += v, nll2 += v * v, count++;
            if (nf) fprintf(nf, "%.9g\n", v);
        }
    }
    if (nf) fclose(nf);
    const double mean = nll / (double)count, var = nll2 / (double)count - mean * mean;
    const double ppl = exp(mean), err = count > 1 && var > 0 ? ppl * sqrt(var / (double)(count - 1)) : 0;
    printf("{\"ppl\":%.9g,\"ppl_err\":%.9g,\"n_tokens\":%ld,\"n_chunks\":%d,\"n_ctx\":%d,\"ctk\":\"%s\",\"ctv\":\"%s\"}\n",
           ppl, err, count, n_chunks, n_ctx, ctk, ctv);
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    free(ids);
    return 0;
}
