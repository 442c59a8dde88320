/* pagellm.h - the public API of pagellm: the only door for the CLI and the
 * server. Everything behind it (src/) may change; this may only grow.
 *
 * Conventions: functions that can fail return int (0 ok, negative error)
 * and leave outputs untouched on failure; pl_last_error() then holds a text
 * that says what and where (file, byte offset, field, parameter). Memory
 * returned through an out-pointer is released with pl_free() unless a
 * dedicated _free exists. Opaque types are not thread-safe unless stated.
 */
#ifndef PAGELLM_H
#define PAGELLM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The newest error text of the calling thread. */
const char *pl_last_error(void);
/* Frees memory handed out by this API. */
void pl_free(void *p);

/* ------------------------------------------------------------- KV sizing */

/* KV cache element types. Block-scaled types hold their scales inside each
 * KV block, so their bytes per token depend on the block size. */
typedef enum {
    PL_KV_F32 = 0,
    PL_KV_F16,
    PL_KV_BF16,
    PL_KV_Q8_0,      /* groups of 32 along a token's KV row: 32 x i8 + f16 scale */
    PL_KV_Q4_0,      /* groups of 32: 16 bytes of nibbles + f16 scale */
    PL_KV_FP8_E4M3,  /* 1 byte/elem + one f32 scale per (block, layer, K|V, KV head) */
    PL_KV_FP8_E5M2,  /* 1 byte/elem, no scale */
    PL_KV_DTYPE_COUNT
} pl_kv_dtype;

const char *pl_kv_dtype_name(pl_kv_dtype t);              /* "f16", "q8_0", "fp8_e4m3"... */
int pl_kv_dtype_from_name(const char *name, pl_kv_dtype *out);

typedef struct {
    uint32_t n_layers, n_kv_heads, head_dim;
    uint32_t block_size;  /* tokens per KV block (default 16) */
} pl_kv_shape;

typedef struct {
    double bytes_per_token;   /* exact for the formula; fractional for block scales */
    uint64_t bytes_per_block; /* one block (block_size tokens, all layers, K and V) */
} pl_kv_size;

/* Bytes of KV per token and per block for shape and dtype. Fails (PL_EINVAL)
 * if a dimension is 0 or the dtype's grouping does not divide the KV row. */
int pl_kv_size_of(const pl_kv_shape *shape, pl_kv_dtype dt, pl_kv_size *out);

/* ------------------------------------------------------- file inspection */

#define PL_MAX_TYPES 32
typedef struct {
    char type[16];          /* ggml type name */
    uint64_t count;         /* tensors of this type */
    uint64_t elements;
    uint64_t bytes;
} pl_type_summary;

typedef struct {
    char path[512];
    uint32_t gguf_version;
    uint64_t file_bytes, n_kv, n_tensors;
    char arch[32];           /* general.architecture ("" if absent) */
    char name[128];          /* general.name */
    /* hyper-parameters (0 where the metadata has none) */
    uint32_t n_layers, dim, n_heads, n_kv_heads, head_dim, ffn_dim, vocab_size, ctx_train;
    uint32_t rope_dim;
    float rope_base, norm_eps;
    char tokenizer[32];      /* tokenizer.ggml.model */
    uint64_t weights_bytes;  /* sum of tensor data */
    uint64_t weights_elements;
    int n_types;
    pl_type_summary types[PL_MAX_TYPES];
} pl_file_info;

/* Reads and validates a GGUF file and summarises it. */
int pl_file_inspect(const char *path, pl_file_info *out);

/* ------------------------------------------------------ model generation */

typedef struct {
    const char *shape;      /* "tiny", "110m", "tinyllama-1.1b", "llama3.2-1b" */
    uint64_t seed;
    const char *vocab_path; /* a GGUF with a tokenizer, or NULL for the built-in byte vocab */
    const char *type;       /* weight type name: "f32" (default), "f16", "q8_0", ... */
    const char *out_path;
} pl_synth_params;

/* Writes a deterministic synthetic llama GGUF. */
int pl_synth(const pl_synth_params *p);
/* Names of the built-in shapes, NULL-terminated. */
const char *const *pl_synth_shapes(void);

/* Re-encodes in_path's weights to type ("f16", "bf16", "q8_0", "q4_0",
 * "q4_k_m"); 1-D tensors (norms) stay f32. Metadata is copied. */
int pl_quantize(const char *in_path, const char *out_path, const char *type);

/* ------------------------------------------------------------- tokenizer */

typedef struct pl_vocab pl_vocab;

/* Loads the tokenizer of any GGUF holding tokenizer.ggml.* metadata. */
int pl_vocab_load(pl_vocab **out, const char *gguf_path);
void pl_vocab_free(pl_vocab *v);

int32_t pl_vocab_size(const pl_vocab *v);
int32_t pl_vocab_bos(const pl_vocab *v);   /* -1 if none */
int32_t pl_vocab_eos(const pl_vocab *v);   /* -1 if none */
bool pl_vocab_add_bos(const pl_vocab *v);  /* tokenizer.ggml.add_bos_token (default per model type) */
/* True for end-of-generation tokens (eos, eot, <|im_end|>...). */
bool pl_vocab_is_eog(const pl_vocab *v, int32_t id);

/* Text -> ids. add_bos prepends BOS when the vocabulary has one;
 * parse_special turns control-token texts (e.g. "<s>") into their ids.
 * *ids is malloc'd (pl_free). Invalid UTF-8 is documented in README.md. */
int pl_tokenize(const pl_vocab *v, const char *text, size_t len, bool add_bos, bool parse_special,
                int32_t **ids, size_t *n_ids);

/* The stored piece of a token (e.g. "▁the", "<0x0A>"), NUL-terminated. */
const char *pl_token_piece(const pl_vocab *v, int32_t id);

/* Ids -> text, as llama.cpp detokenizes (byte tokens decoded, leading space
 * of the first piece removed for SentencePiece). *text is malloc'd and
 * NUL-terminated. */
int pl_detokenize(const pl_vocab *v, const int32_t *ids, size_t n, char **text, size_t *len);

/* Streaming detokenizer: push one id at a time and get back only complete
 * UTF-8; an incomplete sequence is held until completed (or flushed). */
typedef struct pl_detok pl_detok;
pl_detok *pl_detok_new(const pl_vocab *v);
void pl_detok_free(pl_detok *d);
/* Appends the text now complete to out (size cap, NUL-terminated); returns
 * its length or a negative error. */
int pl_detok_push(pl_detok *d, int32_t id, char *out, size_t cap);
/* Emits whatever is held (an incomplete tail becomes U+FFFD). */
int pl_detok_flush(pl_detok *d, char *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
