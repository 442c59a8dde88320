// peer_quantize_iq: llama.cpp's quantizer (llama_model_quantize) for the
// lattice i-quants, which ../shared/peer/peer-quantize does not offer.
// llama.cpp wants an importance matrix for the 1- and 2-bit ones; this
// passes a uniform one (every column weighs 1), so the files are what
// llama-quantize would write from an imatrix that knows nothing.
// usage: peer-quantize-iq IN.gguf OUT.gguf TYPE
//   TYPE: iq2_xxs iq2_xs iq2_s iq2_m iq3_xxs iq3_xs iq3_s iq3_m iq1_s iq1_m
#include "gguf.h"
#include "llama.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct { const char *name; enum llama_ftype ftype; } types[] = {
    {"iq2_xxs", LLAMA_FTYPE_MOSTLY_IQ2_XXS}, {"iq2_xs", LLAMA_FTYPE_MOSTLY_IQ2_XS},
    {"iq2_s", LLAMA_FTYPE_MOSTLY_IQ2_S},     {"iq2_m", LLAMA_FTYPE_MOSTLY_IQ2_M},
    {"iq3_xxs", LLAMA_FTYPE_MOSTLY_IQ3_XXS}, {"iq3_xs", LLAMA_FTYPE_MOSTLY_IQ3_XS},
    {"iq3_s", LLAMA_FTYPE_MOSTLY_IQ3_S},     {"iq3_m", LLAMA_FTYPE_MOSTLY_IQ3_M},
    {"iq1_s", LLAMA_FTYPE_MOSTLY_IQ1_S},     {"iq1_m", LLAMA_FTYPE_MOSTLY_IQ1_M},
};

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)level; (void)text; (void)user;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: peer-quantize-iq IN.gguf OUT.gguf TYPE\n");
        return 2;
    }
    int found = -1;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(argv[3], types[i].name)) found = (int)i;
    if (found < 0) { fprintf(stderr, "unknown type %s\n", argv[3]); return 2; }
    struct gguf_init_params gp = {true, NULL};
    struct gguf_context *g = gguf_init_from_file(argv[1], gp);
    if (!g) { fprintf(stderr, "%s: not a GGUF file\n", argv[1]); return 1; }
    const int64_t nt = gguf_get_n_tensors(g);
    struct llama_model_imatrix_data *im = calloc((size_t)nt + 1, sizeof *im);
    int64_t max_cols = 1;
    for (int64_t i = 0; i < nt; i++) {
        const int64_t *ne = gguf_get_tensor_ne(g, i);
        if (ne[0] * ne[2] > max_cols) max_cols = ne[0] * ne[2];
    }
    float *ones = malloc((size_t)max_cols * sizeof *ones);
    for (int64_t c = 0; c < max_cols; c++) ones[c] = 1.0f;
    for (int64_t i = 0; i < nt; i++) {
        const int64_t *ne = gguf_get_tensor_ne(g, i);
        im[i] = (struct llama_model_imatrix_data){gguf_get_tensor_name(g, i), ones, (size_t)(ne[0] * ne[2])};
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    llama_model_quantize_params p = llama_model_quantize_default_params();
    p.ftype = types[found].ftype;
    p.nthread = 2;
    p.imatrix = im;
    int rc = llama_model_quantize(argv[1], argv[2], &p);
    if (rc) fprintf(stderr, "quantize %s -> %s (%s) failed\n", argv[1], argv[2], argv[3]);
    llama_backend_free();
    gguf_free(g);
    free(ones);
    free(im);
    return rc ? 1 : 0;
}
