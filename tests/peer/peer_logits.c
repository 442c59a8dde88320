/* peer_logits.c - llama.cpp's logits for a token sequence, for tests.
 *
 * When our greedy tokens and llama.cpp's part ways, the test must tell a
 * near-tie (both engines agree on the logits within a tolerance and the two
 * candidates are close) from a real bug. This tool evaluates a given id
 * sequence with llama.cpp (the same prebuilt library as peer-bench) and
 * writes the logits of its last position as raw little-endian float32.
 *
 *   peer-logits -m MODEL.gguf -ids 1,2,3 -o OUT.f32 [-t THREADS] [-split K]
 *
 * -split K evaluates the first K ids as one batch and the rest one at a
 * time, as generation does: comparing it with the default (one batch) shows
 * how much llama.cpp's own logits move between its batched and its
 * single-token kernels, which bounds the tolerance a comparison can ask.
 *
 * Built by tests/peer.sh against the headers and libraries that
 * ../shared/peer/build.sh unpacks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *user)
{
    (void)level; (void)text; (void)user;
}

static int parse_ids(const char *s, llama_token **out)
{
    int n = 1;
    for (const char *p = s; *p; p++) n += *p == ',';
    llama_token *ids = malloc(sizeof *ids * (size_t)n);
    int k = 0;
    for (char *end; *s; s = *end ? end + 1 : end) {
        ids[k++] = (llama_token)strtol(s, &end, 10);
        if (end == s) { free(ids); return -1; }
    }
    *out = ids;
    return k;
}

int main(int argc, char **argv)
{
    const char *model_path = NULL, *ids_s = NULL, *out_path = NULL;
    int threads = 2, split = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-m")) model_path = argv[i + 1];
        else if (!strcmp(argv[i], "-ids")) ids_s = argv[i + 1];
        else if (!strcmp(argv[i], "-o")) out_path = argv[i + 1];
        else if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-split")) split = atoi(argv[i + 1]);
    }
    if (!model_path || !ids_s || !out_path) {
        fprintf(stderr, "usage: peer-logits -m MODEL -ids 1,2,3 -o OUT.f32 [-t T]\n");
        return 2;
    }
    llama_token *ids;
    int n = parse_ids(ids_s, &ids);
    if (n <= 0) { fprintf(stderr, "bad -ids\n"); return 2; }
    llama_log_set(quiet, NULL);
    ggml_backend_load_all_from_path(PEER_LIBDIR);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(model_path, mp);
    if (!model) { fprintf(stderr, "cannot load %s\n", model_path); return 1; }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n + 64);
    cp.n_batch = cp.n_ubatch = (uint32_t)(n > 512 ? n : 512);
    cp.n_threads = cp.n_threads_batch = threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "cannot create context\n"); return 1; }
    struct llama_batch b = llama_batch_init(n, 0, 1);
    if (split <= 0 || split > n) split = n;
    for (int from = 0; from < n;) {
        int to = from == 0 ? split : from + 1;
        b.n_tokens = 0;
        for (int i = from; i < to; i++, b.n_tokens++) {
            b.token[b.n_tokens] = ids[i];
            b.pos[b.n_tokens] = i;
            b.n_seq_id[b.n_tokens] = 1;
            b.seq_id[b.n_tokens][0] = 0;
            b.logits[b.n_tokens] = i == to - 1;
        }
        if (llama_decode(ctx, b)) { fprintf(stderr, "decode failed\n"); return 1; }
        from = to;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    FILE *f = fopen(out_path, "wb");
    if (!f || fwrite(llama_get_logits_ith(ctx, -1), sizeof(float), (size_t)n_vocab, f) != (size_t)n_vocab) {
        fprintf(stderr, "cannot write %s\n", out_path);
        return 1;
    }
    fclose(f);
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    free(ids);
    return 0;
}
