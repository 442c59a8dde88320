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

/* Error codes returned by every function below (0 is success). */
enum {
    PL_ERR_INVAL = -1,       /* bad argument or value from outside */
    PL_ERR_IO = -2,          /* a file could not be opened, read or written */
    PL_ERR_NOMEM = -3,
    PL_ERR_FORMAT = -4,      /* malformed file or data */
    PL_ERR_RANGE = -5,       /* a value out of its allowed range (e.g. past the context) */
    PL_ERR_NOTFOUND = -6,
    PL_ERR_UNSUPPORTED = -7, /* well-formed but not supported */
    PL_ERR_FULL = -8,        /* KV pool or queue exhausted */
};

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
    PL_KV_INT4,      /* "kivi4" (alias "int4"): KIVI 4 bit, keys per channel over each block,
                        values per token in groups of 32, f16 scale+min per group; the block
                        being filled stays in f16 in a per-sequence staging block */
    PL_KV_INT2,      /* "kivi2" (alias "int2"): the same at 2 bits */
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
    uint64_t bytes_per_block; /* one block as allocated (block_size tokens, all layers, K and V; each
                                 plane padded to 16 bytes) */
    uint64_t stage_bytes;     /* per sequence, outside the blocks: KIVI's and fp8_e4m3's f16 staging block
                                 (layers x 2 x block_size x kv_dim x 2 B); 0 for other dtypes */
} pl_kv_size;

/* Bytes of KV per token and per block for shape and dtype. Fails (PL_EINVAL)
 * if a dimension is 0 or the dtype's grouping does not divide the KV row. */
int pl_kv_size_of(const pl_kv_shape *shape, pl_kv_dtype dt, pl_kv_size *out);

/* The same for the latent KV kind of multi-head latent attention
 * (deepseek2): one row of kv_lora_rank + rope_dim values a token and
 * layer, no separate V: bytes per token = n_layers x (kv_lora_rank +
 * rope_dim) x bytes per element. The dtype must be f32, f16, bf16 or q8_0
 * (q8_0: the row a multiple of 32); else PL_EUNSUPPORTED. */
int pl_kv_size_of_latent(uint32_t n_layers, uint32_t kv_lora_rank, uint32_t rope_dim, uint32_t block_size,
                         pl_kv_dtype dt, pl_kv_size *out);

/* Layer groups (gemma2/3): local_layers of shape's n_layers attend over the
 * last `window` positions only. One sequence of ctx tokens holds, in blocks
 * of the global layers' count: the global group's ceil(ctx / block) blocks,
 * and per local group (the local layers cut into groups of that count, the
 * last padded) at most ceil((window - 1) / block) + 1 blocks, against
 * ceil(ctx / block) blocks of all layers in one table. groups = 0 when the
 * shape has no layer groups (no local or no global layer, window < 2, too
 * many groups); the one-table figure is filled then too. */
typedef struct {
    uint32_t groups;          /* the global group + the local ones; 0: none */
    uint32_t slots;           /* layers one block holds */
    uint64_t bytes_per_block; /* one block of `slots` layers */
    uint64_t global_bytes;    /* the global group's blocks for ctx tokens */
    uint64_t local_bytes;     /* the local groups' blocks at most */
    uint64_t one_table_bytes; /* one table of all layers for ctx tokens */
} pl_kv_groups_size;
int pl_kv_size_of_groups(const pl_kv_shape *shape, uint32_t local_layers, uint32_t window, pl_kv_dtype dt,
                         uint64_t ctx, pl_kv_groups_size *out);

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
    uint32_t sliding_window; /* <arch>.attention.sliding_window (0 if none): applied by default
                                (pl_ctx_params.swa) */
    char tokenizer[32];      /* tokenizer.ggml.model */
    uint64_t weights_bytes;  /* sum of tensor data */
    uint64_t weights_elements;
    int n_types;
    pl_type_summary types[PL_MAX_TYPES];
    /* mixture of experts (0 when dense): <arch>.expert_count, expert_used_count */
    uint32_t n_expert, n_expert_used;
    uint64_t active_elements; /* weights a token's pass uses: all but the unchosen experts' share of the
                                 *_exps tensors (= weights_elements for a dense model) */
    uint32_t local_window;   /* gemma2/3: the window of their local layers (a mask; all layers
                                keep their KV), 0 if none; sliding_window is then 0 */
    uint32_t local_layers;   /* how many of the n_layers are local */
    uint32_t kv_lora_rank;   /* deepseek2 (MLA): the latent KV kind, n_layers x (kv_lora_rank + rope_dim)
                                values a token (pl_kv_size_of_latent); 0 for K/V heads */
    /* RoPE scaling as the file's rope.scaling.* keys give it ("" and 0 where
     * pagellm cannot run the architecture) */
    char rope_scaling[12];   /* "none", "linear", "yarn" or "longrope" */
    float rope_factor;       /* context factor (0: none) */
    uint32_t rope_orig_ctx;  /* the original context it stretches */
    uint32_t ctx_rope;       /* positions RoPE was trained or scaled for (pl_model_n_ctx_rope's) */
} pl_file_info;

/* Reads and validates a GGUF file and summarises it. */
int pl_file_inspect(const char *path, pl_file_info *out);

typedef struct {
    char name[128];         /* tensor name (truncated, control characters as '?') */
    char type[16];          /* ggml type name */
    uint32_t n_dims;
    uint64_t ne[4];         /* ne[0] = row length; unused dims are 1 */
    uint64_t offset;        /* absolute file offset of the data (in its shard) */
    uint64_t bytes;
    uint32_t shard;         /* 0, or the 0-based shard holding it in a split model */
} pl_tensor_info;

/* The tensors of a GGUF file in file order; *out is the caller's to free(). */
int pl_file_tensors(const char *path, pl_tensor_info **out, uint64_t *n);

/* ------------------------------------------------------ model generation */

typedef struct {
    const char *shape;      /* "tiny", "tiny256", "110m", "tinyllama-1.1b", "llama3.2-1b", "qwen3moe-3b" */
    uint64_t seed;
    const char *vocab_path; /* a GGUF with a tokenizer, or NULL for the built-in byte vocab */
    const char *type;       /* weight type name: "f32" (default), "f16", "q8_0", ... */
    const char *out_path;
    const char *arch;       /* "llama" (default; NULL: qwen3moe for the qwen3moe-3b shape), "qwen2" (q/k/v
                               biases), "qwen3" (q/k norms), "gemma", "gemma2", "gemma3", "phi3"; mixture
                               of experts: "mixtral", "qwen2moe", "qwen3moe" */
    uint32_t sliding_window; /* written as <arch>.attention.sliding_window if > 0 (Mistral's key;
                                gemma2/3: their local layers' window, default 32) */
    const char *rope_scaling; /* NULL, "linear", "yarn" (rope.scaling.type and factor) or
                                 "longrope" (phi3: factor tensors, attn_factor) */
    float rope_factor;        /* linear/yarn factor (default 4) */
    uint32_t rope_orig_ctx;   /* rope.scaling.original_context_length (default context / 4) */
    bool legacy_kv_b;         /* deepseek2: the legacy unsplit form (one attn_kv_b a layer, MHA
                                 metadata without key_length_mla), as older converters wrote it */
} pl_synth_params;

/* Writes a deterministic synthetic llama-family GGUF. */
int pl_synth(const pl_synth_params *p);
/* The same model as n_split shards OUT-00001-of-0000N.gguf ... (llama.cpp's
 * gguf-split naming; out_path's ".gguf" is dropped for the prefix). */
int pl_synth_split(const pl_synth_params *p, uint32_t n_split);
/* Names of the built-in shapes, NULL-terminated. */
const char *const *pl_synth_shapes(void);

/* Re-encodes in_path's weights under the preset type ("f16", "q8_0",
 * "q4_k_m", "iq4_xs": see pl_quantize_types()) with llama.cpp's per-tensor
 * mix; 1-D tensors (norms) keep their type. Metadata is copied. */
int pl_quantize(const char *in_path, const char *out_path, const char *type);
/* The same, written as n_split shards OUT-00001-of-0000N.gguf ... (llama.cpp's
 * gguf-split naming; out_path's ".gguf" is dropped for the prefix). */
int pl_quantize_split(const char *in_path, const char *out_path, const char *type, uint32_t n_split);
/* The same with every option: n_split 0 or 1 writes one file; imatrix is
 * llama.cpp's importance matrix file (llama-imatrix's GGUF or legacy .dat),
 * or NULL. With one, its mean square activation per input column weighs
 * the lattice searches' error (iq1_s ... iq3_m), and the mix takes
 * llama.cpp's rules for a file made with one. */
typedef struct {
    const char *in_path, *out_path, *type;
    uint32_t n_split;
    const char *imatrix;
} pl_quantize_params;
int pl_quantize_run(const pl_quantize_params *p);
/* The presets pl_quantize knows, NULL-terminated. */
const char *const *pl_quantize_types(void);

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

/* ------------------------------------------------------------- generation */

typedef struct pl_model pl_model;

/* Maps and validates a GGUF model (weights stay in the file, in their stored
 * type) and loads its tokenizer. Errors name the file, key or tensor. */
int pl_model_load(pl_model **out, const char *path);
void pl_model_free(pl_model *m);
/* RoPE scaling of the caller's choosing in place of the file's, to run a
 * model past the context it was trained on (llama.cpp's --rope-scaling,
 * --rope-scale, --rope-freq-base, --yarn-orig-ctx, --yarn-ext-factor,
 * --yarn-attn-factor, --yarn-beta-fast, --yarn-beta-slow mean the same).
 * Zero / NULL / false fields keep the file's (or llama.cpp's default). */
typedef struct {
    const char *type;   /* "none" (never scale), "linear", "yarn" (needs factor > 1) */
    float factor;       /* context factor: positions are divided by it */
    float freq_base;    /* the global layers' frequency base (sliding-window layers keep theirs) */
    uint32_t orig_ctx;  /* YaRN's original context (the file's, else its training context) */
    bool yarn_ext_set;      /* yarn_ext_factor given (default: 1 for yarn, 0 otherwise) */
    float yarn_ext_factor;  /* YaRN's ramp mix in 0..1; with another type it adds the ramp */
    float yarn_attn_factor; /* cos/sin multiplier when no ramp is mixed in (a ramp sets its own) */
    float yarn_beta_fast;   /* the ramp's corners in rotations over the original context: */
    float yarn_beta_slow;   /*   default 32 and 1; fast must be above slow */
} pl_rope_params;
/* Before any context is made from m. PL_ERR_INVAL for a bad value,
 * PL_ERR_UNSUPPORTED for files whose scaling is more than these numbers
 * (LongRoPE's factor tensors, deepseek2). */
int pl_model_set_rope(pl_model *m, const pl_rope_params *p);
const pl_vocab *pl_model_vocab(const pl_model *m);
uint32_t pl_model_n_vocab(const pl_model *m);
uint32_t pl_model_n_ctx_train(const pl_model *m);
/* The positions the model's RoPE was trained or scaled for: its trained
 * context, or the original context times a linear / YaRN factor when that
 * is more (pl_model_set_rope's included). Past it RoPE extrapolates. */
uint32_t pl_model_n_ctx_rope(const pl_model *m);
/* <arch>.attention.sliding_window of the file (0 if none). Applied by
 * default (pl_ctx_params.swa): see there. */
uint32_t pl_model_sliding_window(const pl_model *m);
/* tokenizer.chat_template, NUL-terminated copy owned by the model, or NULL. */
const char *pl_model_chat_template(const pl_model *m);
/* The width of the model's hidden state (<arch>.embedding_length): the
 * length of its embeddings. */
uint32_t pl_model_n_embd(const pl_model *m);
/* How embeddings pool the tokens' hidden states: <arch>.pooling_type as
 * llama.cpp numbers it; absent or "none" (0) gives mean. */
typedef enum { PL_POOL_MEAN = 1, PL_POOL_CLS = 2, PL_POOL_LAST = 3, PL_POOL_RANK = 4 } pl_pooling;
pl_pooling pl_model_pooling(const pl_model *m);
/* Bytes of weights one decode step reads: every layer's tensors (of a
 * mixture-of-experts layer the router, the shared expert and the k experts
 * a token chooses, of average size), the final norm and the output matrix,
 * in their stored types (the token embedding lends one row per token and
 * is not counted, unless it doubles as the output). Divided into memory
 * bandwidth: the decode speed limit. */
uint64_t pl_model_decode_bytes(const pl_model *m);
/* The same for a step of n_tokens decode tokens of different sequences: of
 * a mixture-of-experts layer, the experts such a step is expected to read
 * if each token's k of E experts were chosen at random, E x (1 - (1 -
 * k/E)^n) (k for one token). A dense model's weights are read once per
 * step whatever n. */
uint64_t pl_model_step_bytes(const pl_model *m, uint32_t n_tokens);

typedef enum {
    PL_KV_PAGED = 0,  /* blocks taken as a sequence grows (the engine's way) */
    PL_KV_STATIC = 1, /* each sequence reserves n_ctx tokens up front (baseline) */
} pl_kv_layout;

typedef struct {
    uint32_t n_ctx;       /* max tokens per sequence; 0 = min(train context, 4096) */
    uint32_t max_seqs;    /* sequences alive at once (1) */
    uint64_t kv_mem;      /* KV pool bytes; 0 = room for max_seqs x n_ctx tokens */
    uint32_t block_size;  /* tokens per KV block (16) */
    pl_kv_dtype kv_dtype; /* (f16) */
    pl_kv_layout layout;  /* (paged) */
    bool no_kv_cache;     /* recompute all earlier tokens at every step: the O(n^2) baseline */
    uint32_t max_batch;   /* tokens per forward pass; prompts are chunked by it (512) */
    int n_threads;        /* 0 = one per core */
    /* Sliding window with attention sinks (StreamingLLM): 0 = off. A
     * sequence keeps its first kv_sinks tokens, rounded up to whole KV
     * blocks and pinned, plus at most the last kv_window tokens; when an
     * append would pass that, whole blocks after the sinks are dropped and
     * the kept keys re-rotated to their new, compacted positions, so a
     * sequence can run past n_ctx and the model's train context. Needs
     * kv_window >= 2 x block_size and sinks + window <= n_ctx (n_ctx 0 =
     * exactly sinks + window); not with no_kv_cache or KIVI dtypes. */
    uint32_t kv_window;
    uint32_t kv_sinks;
    /* Sliding-window attention (SWA) for models that declare a window W
     * (<arch>.attention.sliding_window, e.g. Mistral 7B v0.1: 4096): the
     * token at absolute position p attends exactly to positions
     * p - W + 1..p (HF transformers' / vLLM's semantics), positions stay
     * absolute (no re-rotation), and the KV blocks that lie wholly before
     * the window of every later token are freed, so a sequence holds about
     * W + one block of KV and runs past n_ctx and the train context.
     * PL_SWA_AUTO (0, default): on when the model declares W; PL_SWA_ON:
     * the same, but an error for a model without W; PL_SWA_OFF: full causal
     * attention (what llama.cpp does for llama-arch models). With SWA on,
     * n_ctx is the KV slots one sequence holds at most: 0 = W + block_size
     * + min(max_batch, 512); if n_ctx <= W the window never binds and
     * sequences stop at n_ctx; otherwise n_ctx >= W + block_size. Not with
     * kv_window (use PL_SWA_OFF for that). swa_keep_blocks (for tests and
     * diagnosis): apply the mask but free nothing (sequences stop at n_ctx). */
    int swa;
    bool swa_keep_blocks;
    /* Models with local sliding-window layers beside global ones (gemma2,
     * gemma3) keep a block table per layer group, and the local groups
     * free their blocks behind the window (docs/kv-cache.md, layer
     * groups), with the paged layout, a KV cache, no kv_window and a dtype
     * other than fp8_e4m3 / kivi. kv_one_table: one table for all layers
     * instead (the baseline the groups are measured against). */
    bool kv_one_table;
} pl_ctx_params;

enum { PL_SWA_AUTO = 0, PL_SWA_ON = 1, PL_SWA_OFF = 2 };

void pl_ctx_params_default(pl_ctx_params *p);

/* A context: the KV block pool, the sequences that live in it, and scratch
 * for the forward pass. Single-threaded: one caller at a time. */
typedef struct pl_ctx pl_ctx;
int pl_ctx_new(pl_ctx **out, pl_model *m, const pl_ctx_params *p);
void pl_ctx_free(pl_ctx *c);
uint32_t pl_ctx_n_ctx(const pl_ctx *c);
/* The window of pl_ctx_params.kv_window (0: none; sequences stop at n_ctx). */
uint32_t pl_ctx_kv_window(const pl_ctx *c);
/* The sliding-window attention in force (pl_ctx_params.swa): the model's W,
 * or 0 when it does not apply (off, no W, or n_ctx <= W). */
uint32_t pl_ctx_swa(const pl_ctx *c);
/* Whether sequences run past n_ctx (a kv_window, or SWA that frees blocks);
 * pl_seq_n_dropped then counts the tokens no longer held. */
bool pl_ctx_unbounded(const pl_ctx *c);

/* A new empty sequence; PL_ERR_FULL if max_seqs are alive or (static) the
 * pool cannot reserve it. */
int pl_seq_new(pl_ctx *c, int32_t *seq);
void pl_seq_free(pl_ctx *c, int32_t seq);
uint32_t pl_seq_len(const pl_ctx *c, int32_t seq);
/* The sequence's tokens so far (valid until the next call on c). */
const int32_t *pl_seq_tokens(const pl_ctx *c, int32_t seq);
/* Appends n tokens, runs them through the model in chunks of max_batch and,
 * if logits is not NULL, writes the last token's n_vocab logits there.
 * Fails (nothing appended) if a token id is out of range or the sequence
 * would pass n_ctx (PL_ERR_RANGE) or the pool is exhausted (PL_ERR_FULL). */
int pl_seq_append(pl_ctx *c, int32_t seq, const int32_t *tokens, size_t n, float *logits);
/* Like pl_seq_append, but logits gets one row of n_vocab floats for EVERY
 * appended token (n x n_vocab floats): what perplexity needs. Does not take
 * prefix-cache hits (every position is computed). */
int pl_seq_append_all(pl_ctx *c, int32_t seq, const int32_t *tokens, size_t n, float *logits);
/* One decode step of n sequences together: appends tokens[i] to seqs[i]
 * (distinct live sequences) in ONE forward pass, so the weights are read
 * once for all of them, and writes each one's n_vocab logits to
 * logits + i * n_vocab (if logits is not NULL). n <= max_seqs and
 * <= max_batch. All or nothing: on failure no sequence changes. */
int pl_seq_step(pl_ctx *c, const int32_t *seqs, const int32_t *tokens, size_t n, float *logits);
/* Keeps the first n tokens and forgets the rest (n <= length). */
int pl_seq_truncate(pl_ctx *c, int32_t seq, uint32_t n);
/* With a window (pl_ctx_params.kv_window, or SWA freeing blocks): the
 * tokens dropped from the sequence so far (for SWA: from its front, so the
 * next token's position is pl_seq_len + this); pl_seq_len and pl_seq_tokens count and list only the
 * kept ones. With a window, an append longer than the window is run in
 * pieces, and a failure part-way leaves the pieces already run. */
uint64_t pl_seq_n_dropped(const pl_ctx *c, int32_t seq);

#define PL_KV_GROUPS_MAX 16 /* layer groups at most, the global one included */

typedef struct {
    uint32_t block_size;
    uint32_t blocks_total, blocks_used, blocks_cached, blocks_free;
    double bytes_per_token;   /* by the formula, for the context's KV dtype (layer groups: of a block's layers) */
    uint64_t block_bytes;     /* one block as allocated */
    uint64_t pool_bytes;      /* the whole pool */
    uint64_t tokens;          /* live tokens over all sequences */
    uint64_t bytes_allocated; /* blocks held by sequences x block bytes */
    uint64_t bytes_live;      /* live tokens x bytes per token */
    uint64_t bytes_wasted;    /* allocated - live: unfilled block tails */
    double utilisation;       /* live / allocated */
    uint64_t stage_bytes_per_seq; /* KIVI, fp8_e4m3: each live sequence's f16 staging block (pl_kv_size) */
    uint64_t stage_bytes;     /* ... times the live sequences (not in the pool) */
    /* Layer groups (pl_ctx_params.kv_one_table): their count (0: one table)
     * and the bytes of the blocks the sequences hold in the global group
     * and in the local groups; bytes_allocated is their sum. */
    uint32_t layer_groups;
    uint64_t global_bytes, local_bytes;
    /* ... and each group's distinct blocks held ([0] the global group;
     * bytes = blocks x block_bytes); zeros past layer_groups. */
    uint32_t group_blocks[PL_KV_GROUPS_MAX];
} pl_kv_stats;

void pl_ctx_kv_stats(pl_ctx *c, pl_kv_stats *out);
/* Bytes of KV blocks sequence seq holds (every layer group's). */
uint64_t pl_seq_kv_bytes(const pl_ctx *c, int32_t seq);

/* --------------------------------------------------------------- sampling */

typedef struct {
    float temperature;     /* <= 0: greedy (argmax) */
    int32_t top_k;         /* <= 0: off */
    float top_p;           /* >= 1: off */
    float min_p;           /* <= 0: off */
    float repeat_penalty;  /* 1: off */
    int32_t repeat_last_n; /* tokens of history the penalty looks at */
    uint64_t seed;
    /* OpenAI's penalties over the GENERATED tokens (history past n_prompt,
     * pl_sampler_sample_gen; all of the history for pl_sampler_sample):
     * logit[j] -= count[j] * frequency_penalty + (count[j] > 0) * presence_penalty.
     * -2..2; 0: off. */
    float presence_penalty;
    float frequency_penalty;
    /* Added to the logits before anything else (copied by pl_sampler_new):
     * -100..100; -100 bans the token. Ids must be below n_vocab. */
    const struct pl_logit_bias *logit_bias;
    size_t n_logit_bias;
} pl_sampler_params;

typedef struct pl_logit_bias {
    int32_t token;
    float bias;
} pl_logit_bias;

/* llama.cpp's defaults: temp 0.8, top_k 40, top_p 0.95, min_p 0.05, no penalty. */
void pl_sampler_params_default(pl_sampler_params *p);

typedef struct pl_sampler pl_sampler;
/* Checks ranges (PL_ERR_INVAL naming the parameter). */
int pl_sampler_new(pl_sampler **out, const pl_sampler_params *p, int32_t n_vocab);
void pl_sampler_free(pl_sampler *s);
/* Picks a token from logits (n_vocab; not modified); history feeds the
 * repetition penalty. Deterministic for a given seed and call sequence. */
int32_t pl_sampler_sample(pl_sampler *s, const float *logits, const int32_t *history, size_t n_history);
/* The same, with history[0..n_prompt) the prompt (the repetition penalty
 * sees it, presence/frequency penalties do not) and the ids ban[0..n_ban)
 * never picked (min_tokens: end-of-generation ids); if every token is
 * banned or biased away, the best banned one is returned. */
int32_t pl_sampler_sample_gen(pl_sampler *s, const float *logits, const int32_t *history, size_t n_history,
                              size_t n_prompt, const int32_t *ban, size_t n_ban);

/* ---------------------------------------------------- structured output */

/* Grammar-constrained sampling (docs/grammar.md): a request may carry a
 * grammar in GBNF (llama.cpp's dialect); at every step only tokens whose
 * bytes continue some parse are sampled, and end-of-generation only once
 * the root rule is complete, so the output always matches. */

/* Checks GBNF text: 0, or PL_ERR_INVAL with "grammar: line L, column C:
 * ..." in pl_last_error() (also undefined rules and left recursion). root
 * names the start rule (NULL: "root"). */
int pl_grammar_check(const char *gbnf, size_t len, const char *root);
/* A JSON schema (text) -> GBNF with start rule "root" matching exactly the
 * documents valid under it (the subset of docs/grammar.md); what cannot be
 * compiled is PL_ERR_INVAL naming the schema path ("$.properties.age:
 * 'minimum' is not supported"). *gbnf malloc'd (pl_free). */
int pl_json_schema_to_gbnf(const char *schema, size_t len, char **gbnf);

/* A forced tool call: prefix, then {"name": "<name>", "arguments": <a
 * JSON value valid under parameters>} for one of the n functions, then
 * suffix. prefix/suffix are the wire format's markers (e.g.
 * "<tool_call>\n" and "</tool_call>" for Hermes/Qwen; NULL or "" for
 * none). For tool_choice "required" (all tools) or a named function (one). */
typedef struct {
    const char *name;       /* 1-64 of [A-Za-z0-9_.-] */
    const char *parameters; /* JSON schema text; NULL: any object */
} pl_tool_fn;
int pl_tool_call_gbnf(const pl_tool_fn *fns, size_t n, const char *prefix, const char *suffix, char **gbnf);

/* Stop strings: feed generated text, get back the part that is safe to show
 * (text that might still become a stop string is held back). */
typedef struct pl_stop pl_stop;
pl_stop *pl_stop_new(const char *const *stops, size_t n);
void pl_stop_free(pl_stop *s);
/* Appends text; writes the bytes now safe to emit to out (NUL-terminated,
 * out must hold len + the longest stop + 1). Returns the number of bytes
 * written; *stopped is set when a stop string has appeared (the text before
 * it is emitted, the stop string itself is not). */
size_t pl_stop_feed(pl_stop *s, const char *text, size_t len, char *out, bool *stopped);
/* Emits what is held back (at the end of generation). */
size_t pl_stop_flush(pl_stop *s, char *out);

/* -------------------------------------------------------------- chat */

typedef struct {
    const char *role;    /* "system", "user", "assistant" */
    const char *content;
} pl_chat_msg;

/* Renders messages with the model's chat template (llama2, llama3, chatml,
 * mistral, zephyr, phi3, gemma, detected from tokenizer.chat_template) or a
 * plain fallback; add_assistant opens the assistant's turn. *out is
 * malloc'd. *name (optional) gets the template family used. */
int pl_chat_render(const pl_model *m, const pl_chat_msg *msgs, size_t n, bool add_assistant, char **out,
                   const char **name);

/* ------------------------------------------------------------ templates */

/* Renders a Jinja template as transformers' apply_chat_template does:
 * jinja2's immutable sandbox with trim_blocks and lstrip_blocks, break and
 * continue, raise_exception, strftime_now, and a tojson that keeps
 * non-ASCII text and key order. context_json is a JSON object whose members
 * become the template's variables (NULL: none). Runs under fixed limits
 * (memory, output size, steps, nesting). *out is malloc'd. A template's
 * raise_exception(msg) fails with the text "template raised: msg". */
int pl_template_render(const char *tpl, size_t tpl_len, const char *context_json, char **out);

/* A GGUF's named chat template: NULL = tokenizer.chat_template, "tool_use"
 * = tokenizer.chat_template.tool_use. NULL when the file has none. */
const char *pl_model_chat_template_named(const pl_model *m, const char *name);

/* Renders chat messages (OpenAI's messages array, as JSON text) with a Jinja
 * chat template: tpl if given, else the model's tool_use variant when
 * tools_json (a JSON array, or NULL) is given and the file has one, else
 * tokenizer.chat_template. The context holds messages, tools (when given),
 * add_generation_prompt, bos_token and eos_token from the vocabulary, and
 * the members of extra_json (a JSON object or NULL, e.g. enable_thinking).
 * When the vocabulary adds BOS itself, a leading bos_token the template
 * wrote is dropped (one BOS, as the model was trained). A model without
 * any template falls back to pl_chat_render (text contents only). *out is
 * malloc'd. 0, PL_ERR_NOMEM, or another error with the template's message in
 * pl_last_error(). */
int pl_chat_apply(const pl_model *m, const char *tpl, const char *messages_json, const char *tools_json,
                  bool add_generation_prompt, const char *extra_json, char **out);

/* ---------------------------------------------------------------- engine */

/* The engine: one thread owns the model's context (KV pool, sequences,
 * scheduler); callers on any thread submit requests and read their events.
 * Every step is one batched forward pass over all running sequences:
 * decodes first, then prefill chunks fill the rest of the token budget
 * (continuous batching). When the KV pool runs dry the newest running
 * sequence is preempted and recomputed later (mostly prefix-cache hits). */
typedef struct {
    pl_ctx_params ctx;          /* pool size, block size, KV dtype, threads, n_ctx;
                                 * ctx.max_seqs caps the running sequences (--max-seqs) */
    uint32_t max_batch_tokens;  /* token budget of one step (512) */
    uint32_t max_queue;         /* waiting requests beyond which submit fails with PL_ERR_FULL (256) */
    bool prefix_order;          /* waiting queue: longest cached prefix first (else FCFS) */
    bool prefix_cache;          /* reuse cached prompt blocks across requests (true) */
    uint32_t gather_us;         /* an idle engine that gets a request waits until no other has come
                                 * for this long (at most 4x this after the first, and not once the
                                 * queue fills max_seqs) before its first step, so that requests sent
                                 * together prefill in one step (5000; 0 = start at once) */
    /* KV tiers below the RAM prefix cache (docs/kv-tiers.md): full prompt
     * blocks are written behind to each, and a prompt that misses in RAM
     * asks them (disk first) before its prefill; every block read is
     * verified, so a lost or corrupt entry costs a recompute. They need the
     * paged layout with the prefix cache. */
    const char *kv_disk;        /* a directory of its own (NULL: no disk tier); one process at a time */
    uint64_t kv_disk_max;       /* its size limit in bytes, LRU beyond (0: 10 GiB) */
    const char *kv_redis;       /* "HOST:PORT[,HOST:PORT...]" of a Redis Cluster (NULL: none) */
    uint32_t kv_redis_ttl;      /* seconds an entry lives in Redis (0: no expiry) */
    uint32_t kv_tier_timeout_ms;/* a lookup's deadline, after which the keys not yet found are misses (0: 50) */
    /* Disaggregated prefill (docs/kv-tiers.md): PL_ROLE_PREFILL fills and
     * publishes prompts' blocks to the tiers and generates at most one
     * token per completion (max_tokens is capped at 1, finish_reason
     * "length"); a request ends once its blocks are written to the tiers
     * (at most 5 s later); PL_ROLE_DECODE serves whole requests, taking the prompts'
     * blocks from the tiers. Both need a tier. PL_ROLE_MIXED (0): both. */
    int role;
} pl_engine_params;

enum { PL_ROLE_MIXED = 0, PL_ROLE_PREFILL = 1, PL_ROLE_DECODE = 2 };

void pl_engine_params_default(pl_engine_params *p);

typedef struct pl_engine pl_engine;

/* Starts the engine thread. The model must outlive the engine. */
int pl_engine_new(pl_engine **out, pl_model *m, const pl_engine_params *p);
/* Stops taking requests; running and waiting ones finish ("drain"), then
 * the thread exits. Thread-safe; returns at once. */
void pl_engine_shutdown(pl_engine *e);
/* Cancels whatever is left, joins the thread, frees everything. Requests
 * still held by callers get a final event and must still be freed. */
void pl_engine_free(pl_engine *e);

#define PL_MAX_TOP_LOGPROBS 20
#define PL_MAX_STOP_LEN 256

typedef struct {
    const int32_t *prompt;      /* token ids, BOS included if wanted (copied) */
    size_t n_prompt;
    int32_t max_tokens;         /* >= 1 */
    int32_t n;                  /* completions of this prompt, sharing its KV blocks (1..16) */
    pl_sampler_params sampling; /* completion i uses seed + i */
    const char *const *stops;   /* stop strings (copied), each < PL_MAX_STOP_LEN bytes */
    size_t n_stops;
    bool ignore_eos;
    int32_t top_logprobs;       /* -1: no logprobs; 0..PL_MAX_TOP_LOGPROBS: the chosen token's
                                 * logprob and this many alternatives */
    const char *grammar;        /* GBNF constraining every completion (compiled at submit; a bad
                                 * one is PL_ERR_INVAL with its line:column), NULL: none. With a
                                 * grammar, logprobs are those of the masked distribution. */
    int32_t min_tokens;         /* 0..max_tokens: until this many tokens are generated, end-of-generation
                                 * and stop_token_ids cannot be sampled and stop strings are not looked for */
    const int32_t *stop_token_ids; /* sampling one ends the completion ("stop"; not emitted), copied */
    size_t n_stop_token_ids;    /* <= PL_MAX_STOP_TOKEN_IDS */
    bool embed;                 /* an embedding, not a generation: the prompt (n 1, <= the context) is run
                                 * without prefix-cache hits, its final hidden states (after the output
                                 * norm, before the LM head) pooled as pl_model_pooling says and
                                 * L2-normalised; one DONE event (finish_reason "stop", completion_tokens
                                 * 0), then pl_request_embedding; sampling fields are ignored */
    bool prompt_logprobs;       /* before its first token, each completion gets one PL_EV_PROMPT event per
                                 * prompt token: its logprob given the tokens before it (NAN for the
                                 * first) and max(top_logprobs, 0) alternatives; the prompt is run without
                                 * prefix-cache hits, in chunks of at most PL_PROMPT_LOGPROBS_CHUNK tokens */
} pl_request_params;

#define PL_PROMPT_LOGPROBS_CHUNK 64

#define PL_MAX_STOP_TOKEN_IDS 64

typedef enum {
    PL_EV_TOKEN = 0, /* a generated token (text may be empty while UTF-8 or a stop string is pending) */
    PL_EV_DONE,      /* completion `index` finished; finish_reason and usage are set */
    PL_EV_ERROR,     /* the request failed; message holds why; no more events */
    PL_EV_PROMPT,    /* prompt_logprobs: prompt token `token` (in order) with logprob and top_* */
} pl_event_kind;

typedef struct {
    pl_event_kind kind;
    int32_t index;                 /* which completion (0..n-1) */
    int32_t token;                 /* TOKEN */
    char text[2 * PL_MAX_STOP_LEN + 64]; /* TOKEN/DONE: text now safe to show, NUL-terminated */
    size_t text_len;
    float logprob;                 /* TOKEN, when asked */
    int32_t n_top;
    int32_t top_ids[PL_MAX_TOP_LOGPROBS];
    float top_logprobs[PL_MAX_TOP_LOGPROBS];
    const char *finish_reason;     /* DONE: "stop", "length", "cancelled" */
    uint32_t prompt_tokens;        /* DONE */
    uint32_t cached_tokens;        /* DONE: prompt tokens served from the prefix cache */
    uint32_t completion_tokens;    /* DONE: tokens of this completion */
    char message[256];             /* ERROR */
} pl_event;

typedef struct pl_request pl_request;

/* Queues a request. PL_ERR_INVAL / PL_ERR_RANGE for bad parameters (a prompt
 * that cannot fit the context...), PL_ERR_FULL when the waiting queue is
 * full, PL_ERR_UNSUPPORTED after shutdown. Thread-safe. */
int pl_engine_submit(pl_engine *e, const pl_request_params *p, pl_request **out);
/* Waits up to timeout_ms (-1: forever) for the request's next event:
 * 1 = *ev filled, 0 = timed out, 2 = finished (every completion is DONE, or
 * an ERROR was delivered). Thread-safe with respect to the engine. */
int pl_request_next(pl_request *r, pl_event *ev, int timeout_ms);
/* Cancels: its blocks are freed at the engine's next step. Idempotent. */
void pl_request_cancel(pl_request *r);
/* Cancels if needed and releases the handle. */
void pl_request_free(pl_request *r);
/* The engine-wide id of the request (>= 1, increasing with submission), as
 * the owners in pl_engine_kv_json name it. */
uint64_t pl_request_id(const pl_request *r);
/* An embed request's vector after its DONE event: copies pl_model_n_embd
 * floats to out (cap >= that). PL_ERR_INVAL if r is not an embed request,
 * not done, or cap is short. */
int pl_request_embedding(pl_request *r, float *out, size_t cap);

#define PL_HIST_BUCKETS 16

typedef struct {
    double le[PL_HIST_BUCKETS];    /* upper bounds in seconds (the last is +Inf) */
    uint64_t count[PL_HIST_BUCKETS]; /* cumulative counts, Prometheus style */
    double sum;
    uint64_t n;
} pl_histogram;

#define PL_MAX_TIERS 4

/* One KV tier's counters since start. */
typedef struct {
    char name[16];                 /* "disk", "redis" */
    uint64_t hits;                 /* blocks found and verified */
    uint64_t misses;               /* blocks asked and absent */
    uint64_t rejected;             /* blocks found that failed verification (corrupt, stale, colliding) */
    uint64_t bytes_read, bytes_written;
    uint64_t writes;               /* blocks handed to the tier */
    uint64_t errors;               /* batches the tier reported an error for */
    uint64_t dropped_writes;       /* writes dropped because the staging buffer was full */
    pl_histogram get_latency, put_latency; /* seconds per batch */
} pl_tier_metrics;

typedef struct {
    pl_kv_stats kv;
    uint32_t running, waiting;
    uint64_t requests_total, requests_finished, requests_cancelled;
    uint64_t preemptions;
    uint64_t prefill_cuts;         /* prompt chunks cut short so that a step with decodes in it costs no
                                      more than the token budget at depth 0 (docs/long-context.md) */
    double key_cost_prompt;        /* what a key costs a prompt token, a decode, in depth-0 prompt tokens: */
    double key_cost_decode;        /* learned from the steps' times, never below the model's (long-context.md) */
    double key_cost_model;         /* from the model's shape (where learning starts); 0: none */
    uint64_t prefix_query_tokens, prefix_hit_tokens; /* prompt tokens looked up / served from cache */
    uint64_t prompt_tokens, generated_tokens;
    uint64_t steps;
    /* Over every step since start (the snapshot after each step, as the
     * fields above), so that no poller has to catch each one: */
    uint32_t running_peak;         /* the most sequences running after a step */
    double kv_utilisation_at_peak; /* kv.utilisation after the first step with running_peak */
    uint64_t running_steps;        /* running sequences summed over the steps (mean: / steps) */
    uint64_t kv_live_byte_steps;   /* kv.bytes_live summed over the steps */
    uint64_t kv_allocated_byte_steps; /* kv.bytes_allocated summed over the steps (their ratio: the
                                         utilisation averaged over steps) */
    pl_histogram ttft, itl, e2e;   /* time to first token, inter-token latency, end-to-end */
    uint64_t tier_hit_tokens;      /* of prefix_hit_tokens: loaded from the KV tiers */
    uint32_t n_tiers;
    pl_tier_metrics tiers[PL_MAX_TIERS]; /* in lookup order: disk, redis */
    /* The Redis Cluster client's own counters (all 0 without --kv-redis). */
    bool has_redis;                /* a Redis tier is configured */
    uint64_t redis_redirects;      /* MOVED + ASK replies followed */
    uint64_t redis_reconnects;     /* connections again to a node that had failed */
    uint64_t redis_connect_failures; /* connect attempts that failed (each starts a backoff) */
    uint64_t redis_errors;         /* bad replies, I/O errors, timeouts, failed connects */
} pl_engine_metrics;

/* A consistent snapshot (taken after the newest step). Thread-safe. */
void pl_engine_metrics_get(pl_engine *e, pl_engine_metrics *out);
/* The block pool as JSON: every block's state, refcount, owners, cached
 * flag (GET /v1/kv). malloc'd; thread-safe. */
char *pl_engine_kv_json(pl_engine *e);
/* The same with flags: PL_KV_JSON_COMPACT gives the blocks as strings of
 * one letter per block ("block_states": f free, u used, c cached;
 * "block_keyed": 1 if it holds a prefix-cache key) and "block_refcounts",
 * about 4 bytes a block instead of about 70; owners follow from
 * "sequences" (GET /v1/kv?compact=1). The engine thread only copies the
 * state; the JSON is built on the caller's thread. PL_ERR_INVAL for
 * unknown flags. */
enum { PL_KV_JSON_COMPACT = 1 };
char *pl_engine_kv_json_ex(pl_engine *e, unsigned flags);

#ifdef __cplusplus
}
#endif
#endif
