/* peer_embed.c - llama.cpp's embedding of a token sequence, for tests.
 *
 * Evaluates the ids with a context in embedding mode (llama.cpp's
 * llama-embedding: the output-normed hidden states pooled per sequence)
 * with the pooling asked for, L2-normalises the vector as llama-embedding
 * does by default, and writes it as raw little-endian float32.
 *
 *   peer-embed -m MODEL.gguf -ids 1,2,3 -o OUT.f32 [-pool mean|last|cls] [-t THREADS]
 *
 * Built by tests/peer.sh against the headers and libraries that
 * ../shared/peer/build.sh unpacks.
 */
#include <math.h>
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
    const char *model_path = NULL, *ids_s = NULL, *out_path = NULL, *pool = "mean";
    int threads = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-m")) model_path = argv[i + 1];
        else if (!strcmp(argv[i], "-ids")) ids_s = argv[i + 1];
        else if (!strcmp(argv[i], "-o")) out_path = argv[i + 1];
        else if (!strcmp(argv[i], "-pool")) pool = argv[i + 1];
        else if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
    }
    if (!model_path || !ids_s || !out_path) {
        fprintf(stderr, "usage: peer-embed -m MODEL -ids 1,2,3 -o OUT.f32 [-pool mean|last|cls] [-t T]\n");
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
    cp.embeddings = true;
    cp.pooling_type = !strcmp(pool, "last") ? LLAMA_POOLING_TYPE_LAST
                      : !strcmp(pool, "cls") ? LLAMA_POOLING_TYPE_CLS : LLAMA_POOLING_TYPE_MEAN;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "cannot create context\n"); return 1; }
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = ids[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = n;
    if (llama_decode(ctx, b)) { fprintf(stderr, "decode failed\n"); return 1; }
    const float *e = llama_get_embeddings_seq(ctx, 0);
    const int dim = llama_model_n_embd(model);
    if (!e) { fprintf(stderr, "no pooled embedding\n"); return 1; }
    float *v = malloc(sizeof *v * (size_t)dim);
    double ss = 0;
    for (int i = 0; i < dim; i++) ss += (double)e[i] * e[i];
    for (int i = 0; i < dim; i++) v[i] = ss > 0 ? (float)(e[i] / sqrt(ss)) : 0.0f;
    FILE *f = fopen(out_path, "wb");
    if (!f || fwrite(v, sizeof(float), (size_t)dim, f) != (size_t)dim) {
        fprintf(stderr, "cannot write %s\n", out_path);
        return 1;
    }
    fclose(f);
    free(v);
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    free(ids);
    return 0;
}
