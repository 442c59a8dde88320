/* fuzz_imatrix.c - libFuzzer target for the importance matrix reader
 * (src/model/imatrix.c): arbitrary bytes as an imatrix file, GGUF or
 * llama.cpp's legacy .dat.
 *
 * Properties (a broken one aborts, which libFuzzer reports as a crash):
 *   - imatrix_load_mem never reads out of bounds or leaks (ASan), whatever
 *     the bytes, and on failure leaves *out untouched;
 *   - a matrix it accepts has entries that imatrix_find returns by name,
 *     each with n > 0 values, every one finite and >= 0.
 * With FUZZ_SEEDGEN it is instead a program that writes seed files (a
 * legacy .dat of two entries) to the directory given as argv[1]; the GGUF
 * side starts from the gguf target's seeds.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/imatrix.h"

#ifdef FUZZ_SEEDGEN
static void put(FILE *f, const void *p, size_t n) { fwrite(p, 1, n, f); }

int main(int argc, char **argv)
{
    if (argc < 2) return 2;
    char path[4096];
    snprintf(path, sizeof path, "%s/seed-legacy.dat", argv[1]);
    FILE *f = fopen(path, "wb");
    if (!f) return 1;
    const int32_t two = 2, ncall = 3, n = 8;
    put(f, &two, 4);
    const char *names[2] = {"blk.0.attn_q.weight", "blk.0.ffn_down.weight"};
    for (int e = 0; e < 2; e++) {
        const int32_t len = (int32_t)strlen(names[e]);
        put(f, &len, 4), put(f, names[e], (size_t)len), put(f, &ncall, 4), put(f, &n, 4);
        for (int i = 0; i < n; i++) {
            const float v = (float)(i + e);
            put(f, &v, 4);
        }
    }
    const int32_t chunks = 10, dl = 4;
    put(f, &chunks, 4), put(f, &dl, 4), put(f, "text", 4);
    return fclose(f) == 0 ? 0 : 1;
}
#else
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    imatrix *m = (imatrix *)(uintptr_t)1; /* must stay as it is on failure */
    if (imatrix_load_mem(&m, data, size, "fuzz") != 0) {
        if (m != (imatrix *)(uintptr_t)1) abort();
        return 0;
    }
    if (imatrix_count(m) == 0) abort();
    for (size_t i = 0; i < imatrix_count(m); i++) {
        const char *name;
        uint64_t n, k;
        const float *v = imatrix_at(m, i, &name, &n);
        if (!v || n == 0 || imatrix_find(m, name, &k) != v || k != n) abort();
        for (uint64_t j = 0; j < n; j++)
            if (!isfinite(v[j]) || v[j] < 0) abort();
    }
    imatrix_free(m);
    return 0;
}
#endif
