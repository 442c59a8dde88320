/* cmd_quantize.c - `pagellm quantize IN OUT TYPE`: re-encode a GGUF model's
 * weights under one of llama.cpp's presets (pl_quantize_types()) through
 * pl_quantize, then summarise the new file (sizes, tensors per type)
 * through pl_file_inspect. Which tensors get which type is described in
 * src/model/quant_mix.c and, briefly, by --help.
 *
 * Exit: 0 ok, 1 the input cannot be read or the output cannot be written
 * (the message carries pl_last_error()), 2 usage (missing arguments, unknown
 * type).
 */
#include "cli.h"
#include "commands.h"
#include "pagellm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define QUANTIZE "quantize"

static const char quantize_usage[] =
    "IN.gguf OUT.gguf TYPE [--split N] [--imatrix FILE]\n\n"
    "Re-encodes the weight matrices of IN under llama.cpp's preset TYPE and writes\n"
    "OUT (metadata copied, general.file_type set to llama.cpp's value for TYPE):\n"
    "  f32, f16, bf16                  plain float weights\n"
    "  q4_0 q4_1 q5_0 q5_1 q8_0        32-element blocks\n"
    "  q2_k q3_k_s q3_k_m q3_k_l q4_k_s q4_k_m q5_k_s q5_k_m q6_k\n"
    "                                  256-element k-quant mixes\n"
    "  iq4_nl iq4_xs tq1_0 tq2_0       non-linear and ternary formats\n"
    "  iq3_xxs iq3_xs iq3_s iq3_m iq2_xxs iq2_xs iq2_s iq2_m iq1_s iq1_m\n"
    "                                  lattice (codebook) mixes, 1.6-3.7 bits\n"
    "Each tensor gets the type llama.cpp's quantizer picks for it: the output\n"
    "projection in q6_K (q8_0 for q8_0), more bits for attn_v / ffn_down in the\n"
    "layers the _m / _l / _s mixes name, and for a row the block does not divide,\n"
    "llama.cpp's fallback (q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0, q2_K / q3_K ->\n"
    "q4_0, iq4_xs and the lattice types -> iq4_nl, then f16). Norms and other 1-D\n"
    "tensors are copied. --imatrix takes llama.cpp's importance matrix (llama-imatrix's\n"
    "output, GGUF or .dat): the lattice searches weigh their error by it, and the mix\n"
    "follows llama.cpp's rules for a file made with one. Without it the 1- and 2-bit\n"
    "lattice mixes lose more (llama.cpp refuses to write most of them then).";

static bool quantize_type_known(const char *t)
{
    for (const char *const *p = pl_quantize_types(); *p; p++)
        if (strcasecmp(*p, t) == 0) return true;
    return false;
}

/* "f32, f16, ..., tq2_0" for the usage error. */
static void quantize_types_list(char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = 0;
    for (const char *const *p = pl_quantize_types(); *p && n < cap; p++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", *p);
}

static const char *quantize_human(double bytes, char *buf, size_t cap)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) bytes /= 1024, u++;
    snprintf(buf, cap, u ? "%.2f %s" : "%.0f %s", bytes, unit[u]);
    return buf;
}

/* "wrote OUT (q4_k_m) in 1.2 s: 4.20 MiB -> 1.31 MiB; tensors: 12 q4_K, 3 q6_K, 11 f32"
 * in_bytes: the input's size, taken before (OUT may be IN); 0 if unknown. */
static void quantize_report(uint64_t in_bytes, const char *out, const char *type, double seconds)
{
    pl_file_info *b = calloc(1, sizeof *b);
    if (!b || pl_file_inspect(out, b) != 0) {
        printf("wrote %s (%s) in %.1f s\n", out, type, seconds);
        free(b);
        return;
    }
    char s1[32], s2[32];
    printf("wrote %s (%s) in %.1f s: %s -> %s; tensors:", out, type, seconds,
           in_bytes ? quantize_human((double)in_bytes, s1, sizeof s1) : "?",
           quantize_human((double)b->file_bytes, s2, sizeof s2));
    for (int i = 0; i < b->n_types; i++)
        printf("%s %llu %s", i ? "," : "", (unsigned long long)b->types[i].count, b->types[i].type);
    printf("\n");
    free(b);
}

/* The input's size in bytes, or 0 if it cannot be inspected (pl_quantize
 * will then say why). */
static uint64_t quantize_input_bytes(const char *in)
{
    pl_file_info *a = calloc(1, sizeof *a);
    uint64_t n = a && pl_file_inspect(in, a) == 0 ? a->file_bytes : 0;
    free(a);
    return n;
}

int cmd_quantize(int argc, char **argv)
{
    int split = 0;
    const char *imatrix = NULL;
    const cli_opt opts[] = {
        {"split", 0, CLI_INT, &split, 1, 99999, "N", "write N shards OUT-00001-of-0000N.gguf ... (llama.cpp's split files)"},
        {"imatrix", 0, CLI_STR, &imatrix, 0, 0, "FILE", "llama.cpp's importance matrix (GGUF or legacy .dat)"},
        {0},
    };
    const char *pos[3];
    int npos = 0;
    int rc = cli_parse(QUANTIZE, quantize_usage, opts, argc, argv, pos, 3, &npos);
    if (rc == CLI_HELP) return 0;
    if (rc != CLI_OK) return 2;
    if (npos < 3) {
        cli_error(QUANTIZE, "expected IN.gguf OUT.gguf TYPE (see --help)");
        return 2;
    }
    if (!quantize_type_known(pos[2])) {
        char list[512];
        quantize_types_list(list, sizeof list);
        cli_error(QUANTIZE, "unknown type '%s' (expected one of %s)", pos[2], list);
        return 2;
    }
    const uint64_t in_bytes = quantize_input_bytes(pos[0]);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const pl_quantize_params qp = {pos[0], pos[1], pos[2], split > 1 ? (uint32_t)split : 1, imatrix};
    if (pl_quantize_run(&qp) != 0) {
        cli_error(QUANTIZE, "%s", pl_last_error());
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    char first[4096];
    const size_t len = strlen(pos[1]);
    const int stem = (int)(len > 5 && strcmp(pos[1] + len - 5, ".gguf") == 0 ? len - 5 : len);
    snprintf(first, sizeof first, "%.*s-00001-of-%05d.gguf", stem, pos[1], split);
    quantize_report(in_bytes, split > 1 ? first : pos[1], pos[2],
                    (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
    return 0;
}
