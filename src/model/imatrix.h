/* imatrix.h - llama.cpp's importance matrices (llama-imatrix's output),
 * read for the quantizer: per weight matrix, the mean square of each input
 * column's activation over a calibration text, so that a quantizer can
 * spend its error where the activations are small.
 *
 * Both of llama.cpp's file formats:
 *   GGUF    a tensor "<name>.in_sum2" (f32, ne0 x n_mat: sums of squares,
 *           per expert for MoE matrices) and "<name>.counts" (f32, n_mat
 *           tokens seen); the value is sum / count (1 where count is 0);
 *   legacy  (.dat) i32 entries, then per entry i32 name length, the name,
 *           i32 ncall, i32 nval, nval f32 (already means x ncall); the value
 *           is that / ncall. Trailing chunk count and dataset name optional.
 * As llama-quantize does. Every value must be finite and >= 0; an error
 * names the file, the entry and the offset.
 */
#ifndef PL_MODEL_IMATRIX_H
#define PL_MODEL_IMATRIX_H

#include <stddef.h>
#include <stdint.h>

typedef struct imatrix imatrix;

int imatrix_load(imatrix **out, const char *path);
/* The same from memory (name is used in errors). */
int imatrix_load_mem(imatrix **out, const void *data, size_t size, const char *name);
void imatrix_free(imatrix *m);

/* Entries, and the n values of the entry for tensor name (ne0 x experts),
 * or NULL. */
size_t imatrix_count(const imatrix *m);
const float *imatrix_find(const imatrix *m, const char *name, uint64_t *n);
/* Entry i (< imatrix_count): its values, name and count. */
const float *imatrix_at(const imatrix *m, size_t i, const char **name, uint64_t *n);

#endif
