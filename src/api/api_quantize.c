/* api_quantize.c - pl_quantize: re-encode a GGUF model's weights to another
 * type (f32, f16, bf16, q8_0, q4_0, q4_k_m), as llama.cpp's llama-quantize.
 *
 * The input is mapped read-only; every metadata pair is copied, except that
 * general.file_type becomes llama.cpp's LLAMA_FTYPE of the chosen mix (so
 * that llama.cpp names it) and general.quantization_version is 2.
 * Tensors keep their order, names and shapes. Which tensors change, and to
 * what (the same rules as llama.cpp's llama_tensor_get_type, simplified):
 *
 *   - only weight matrices: >= 2 dims (ignoring trailing 1s, as ggml_n_dims
 *     does), name ending in "weight", not a norm ("_norm.weight"), not an
 *     MoE router (ffn_gate_inp), not a positional or token-type embedding,
 *     not integer-typed; everything else (norms, 1-D biases, rope tables)
 *     is copied byte for byte;
 *   - f32 / f16 / bf16 / q8_0 / q4_0: every weight matrix gets that type,
 *     except that for q4_0 the output projection (output.weight, or
 *     token_embd.weight when it doubles as the output) gets q6_K, as
 *     llama.cpp does for every quantized mix but q8_0;
 *   - q4_k_m (LLAMA_FTYPE_MOSTLY_Q4_K_M): q4_K everywhere, and q6_K for the
 *     output projection and for attn_v (attn_qkv, attn_kv_b) and ffn_down in
 *     the layers that llama.cpp's use_more_bits(i, n) picks: the first and
 *     last eighth of the n layers, and every third layer between:
 *         i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2
 *     (the layer i comes from the "blk.<i>." prefix, n = highest i + 1).
 *     llama.cpp's special cases for Falcon, 70B and 8-expert models are not
 *     reproduced.
 *   - fallback when a row length is not a multiple of the type's block:
 *     q4_K and q6_K -> q8_0 (llama.cpp picks q5_0 for q4_K, a type pagellm
 *     does not compute with; q8_0 keeps quality where llama.cpp keeps size,
 *     and such odd tensors are small), then q8_0 / q4_0 -> f16 (as
 *     llama.cpp). f32 / f16 / bf16 have no block, so never fall back.
 *   - a tensor already in its target type is copied, not re-quantized.
 *
 * Any input type that quant_dequant_row() reads can be re-encoded; others
 * fail before anything is written, naming the file and tensor. The output
 * is written through gguf_writer's fill callback, one tensor at a time, and
 * rows are converted in parallel on a thread pool, so memory stays bounded by
 * the largest output tensor (plus one row per thread) whatever the model's
 * size; converted source tensors are dropped from the resident set. The
 * writer writes to a temporary name and renames: a failure leaves no partial
 * file, and OUT may even be IN.
 */
#include "pagellm.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/err.h"
#include "base/mem.h"
#include "base/threadpool.h"
#include "gguf/gguf.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

/* llama.cpp's llama_ftype values (include/llama.h), stored in general.file_type. */
enum {
    FTYPE_ALL_F32 = 0,
    FTYPE_MOSTLY_F16 = 1,
    FTYPE_MOSTLY_Q4_0 = 2,
    FTYPE_MOSTLY_Q8_0 = 7,
    FTYPE_MOSTLY_Q4_K_M = 15,
    FTYPE_MOSTLY_BF16 = 32,
};

#define QUANT_VERSION 2 /* ggml's GGML_QNT_VERSION: the current block layouts */

typedef struct {
    const char *name;  /* as the user types it */
    uint32_t type;     /* the default tensor type of the mix */
    uint32_t ftype;
    bool k_mix;        /* q4_k_m's per-tensor choices */
} quant_mix;

static const quant_mix mixes[] = {
    {"f32", DT_F32, FTYPE_ALL_F32, false},
    {"f16", DT_F16, FTYPE_MOSTLY_F16, false},
    {"bf16", DT_BF16, FTYPE_MOSTLY_BF16, false},
    {"q8_0", DT_Q8_0, FTYPE_MOSTLY_Q8_0, false},
    {"q4_0", DT_Q4_0, FTYPE_MOSTLY_Q4_0, false},
    {"q4_k_m", DT_Q4_K, FTYPE_MOSTLY_Q4_K_M, true},
};

/* One output tensor. */
typedef struct {
    const gguf_tensor *src;
    char *name;         /* NUL-terminated copy of src->name */
    uint32_t type;      /* output type */
} qtensor;

typedef struct {
    const char *in_path;
    gguf_file *in;
    const quant_mix *mix;
    qtensor *ts;
    uint64_t n_ts;
    int n_layers;           /* highest blk.<i> + 1 */
    bool has_output;        /* output.weight exists (else token_embd is the output) */
    threadpool *tp;
    int n_threads;
    uint64_t max_row_elems; /* over tensors that are converted */
    uint64_t max_row_bytes;
    float *f_rows;          /* n_threads x max_row_elems */
    uint8_t *raw_rows;      /* n_threads x raw_stride: source rows, aligned copies */
    size_t raw_stride;
} qctx;

/* ------------------------------------------------------- type selection */

static bool name_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* Layer of a "blk.<i>.*" tensor, or -1. */
static int tensor_layer(const char *name)
{
    if (strncmp(name, "blk.", 4) != 0) return -1;
    const char *p = name + 4;
    long v = 0;
    if (*p < '0' || *p > '9') return -1;
    while (*p >= '0' && *p <= '9' && v < 1000000) v = v * 10 + (*p++ - '0');
    return *p == '.' ? (int)v : -1;
}

static bool type_is_integer(uint32_t t)
{
    return t == DT_I8 || t == DT_I16 || t == DT_I32 || t == DT_I64;
}

/* Dimensions as ggml_n_dims counts them: trailing 1s do not count, so a
 * [4096, 1] norm stored as 2-D is still a vector. */
static uint32_t tensor_rank(const gguf_tensor *t)
{
    uint32_t r = 1;
    for (uint32_t d = 1; d < GGUF_MAX_DIMS; d++)
        if (t->ne[d] > 1) r = d + 1;
    return r;
}

/* llama.cpp's tensor_allows_quantization, for the tensors llama-style
 * models have. */
static bool tensor_is_weight_matrix(const qtensor *t)
{
    const char *n = t->name;
    return tensor_rank(t->src) >= 2 && !type_is_integer(t->src->type) && name_ends_with(n, "weight")
           && !strstr(n, "_norm.weight") && !strstr(n, "ffn_gate_inp.weight")
           && strcmp(n, "position_embd.weight") != 0 && strcmp(n, "token_types.weight") != 0;
}

static bool use_more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* The type the mix wants for weight matrix t, before any fallback. */
static uint32_t tensor_type_wanted(const qctx *q, const qtensor *t)
{
    const quant_mix *mix = q->mix;
    const uint32_t base = mix->type;
    const bool quantized = dtype_get(base)->blck_size > 1;
    const bool is_output = strcmp(t->name, "output.weight") == 0
                           || (!q->has_output && strcmp(t->name, "token_embd.weight") == 0);
    if (is_output && quantized && base != DT_Q8_0)
        return t->src->ne[0] % QK_K == 0 ? DT_Q6_K : DT_Q8_0;
    if (!mix->k_mix) return base;
    const bool attn_v = strstr(t->name, "attn_v.weight") || strstr(t->name, "attn_qkv.weight")
                        || strstr(t->name, "attn_kv_b.weight");
    if (attn_v || strstr(t->name, "ffn_down")) {
        const int layer = tensor_layer(t->name);
        if (layer >= 0 && use_more_bits(layer, q->n_layers)) return DT_Q6_K;
    }
    return base;
}

/* Falls back to a type whose block divides the row length ne0. */
static uint32_t tensor_type_fallback(uint32_t type, uint64_t ne0)
{
    if ((type == DT_Q4_K || type == DT_Q6_K) && ne0 % QK_K != 0) type = DT_Q8_0;
    if ((type == DT_Q8_0 || type == DT_Q4_0) && ne0 % QK8_0 != 0) type = DT_F16;
    return type;
}

static int tensor_plan(qctx *q, qtensor *t)
{
    t->type = t->src->type;
    if (!tensor_is_weight_matrix(t)) return 0;
    t->type = tensor_type_fallback(tensor_type_wanted(q, t), t->src->ne[0]);
    if (t->type == t->src->type) return 0;
    if (!quant_supported(t->src->type)) {
        const dtype_traits *tr = dtype_get(t->src->type);
        return err_set(PL_EUNSUPPORTED,
                       "%s: tensor '%s': type %s cannot be re-encoded (pagellm reads f32, f16, bf16, q8_0, "
                       "q4_0, q4_K, q6_K)", q->in_path, t->name, tr ? tr->name : "?");
    }
    const uint64_t in_row = dtype_row_bytes(t->src->type, t->src->ne[0]);
    if (t->src->ne[0] > q->max_row_elems) q->max_row_elems = t->src->ne[0];
    if (in_row > q->max_row_bytes) q->max_row_bytes = in_row;
    return 0;
}

/* Copies names, finds the layer count and whether output.weight exists,
 * then picks every tensor's type. */
static int quantize_plan(qctx *q)
{
    q->n_ts = gguf_tensor_count(q->in);
    q->ts = mem_calloc(q->n_ts ? q->n_ts : 1, sizeof *q->ts);
    if (!q->ts) return PL_ENOMEM;
    for (uint64_t i = 0; i < q->n_ts; i++) {
        qtensor *t = &q->ts[i];
        t->src = gguf_tensor_at(q->in, i);
        t->name = strndup(t->src->name.ptr, (size_t)t->src->name.len);
        if (!t->name) return err_set(PL_ENOMEM, "%s: out of memory", q->in_path);
        const int layer = tensor_layer(t->name);
        if (layer + 1 > q->n_layers) q->n_layers = layer + 1;
        if (strcmp(t->name, "output.weight") == 0) q->has_output = true;
    }
    for (uint64_t i = 0; i < q->n_ts; i++) {
        int rc = tensor_plan(q, &q->ts[i]);
        if (rc) return rc;
    }
    return 0;
}

/* ------------------------------------------------------------- writing */

static int copy_metadata(qctx *q, gguf_writer *w)
{
    for (uint64_t i = 0; i < gguf_meta_count(q->in); i++) {
        const gguf_meta *kv = gguf_meta_at(q->in, i);
        char *key = strndup(kv->key.ptr, (size_t)kv->key.len);
        if (!key) return err_set(PL_ENOMEM, "%s: out of memory", q->in_path);
        int rc = gguf_writer_set_value(w, key, &kv->value);
        if (rc) err_prefix(rc, "%s: key '%s'", q->in_path, key);
        free(key);
        if (rc) return rc;
    }
    /* set after the copy: replaces the old values in place, or appends */
    int rc = gguf_writer_set_u32(w, "general.file_type", q->mix->ftype);
    if (!rc) rc = gguf_writer_set_u32(w, "general.quantization_version", QUANT_VERSION);
    return rc;
}

static int declare_tensors(qctx *q, gguf_writer *w)
{
    for (uint64_t i = 0; i < q->n_ts; i++) {
        const qtensor *t = &q->ts[i];
        /* unchanged tensors are written straight from the input mapping */
        const void *data = t->type == t->src->type ? t->src->data : NULL;
        int idx = gguf_writer_add_tensor(w, t->name, t->type, t->src->n_dims, t->src->ne, data);
        if (idx < 0) return err_prefix(idx, "%s", q->in_path);
        if ((uint64_t)idx != i) return err_set(PL_EINVAL, "%s: writer reordered tensors", q->in_path);
    }
    return 0;
}

/* One tensor's conversion, split by rows over the pool. */
typedef struct {
    qctx *q;
    const qtensor *t;
    uint8_t *dst;
    uint64_t rows, in_row, out_row;
} convert_job;

static void convert_rows(void *arg, int ith, int nth)
{
    const convert_job *j = arg;
    const qtensor *t = j->t;
    assert(nth <= j->q->n_threads);
    const int64_t n = (int64_t)t->src->ne[0];
    float *f = j->q->f_rows + (size_t)ith * j->q->max_row_elems;
    uint8_t *raw = j->q->raw_rows + (size_t)ith * j->q->raw_stride;
    const uint64_t r0 = j->rows * (uint64_t)ith / (uint64_t)nth;
    const uint64_t r1 = j->rows * (uint64_t)(ith + 1) / (uint64_t)nth;
    for (uint64_t r = r0; r < r1; r++) {
        /* the mapping only guarantees the file's alignment for the tensor
         * start; an aligned copy makes every row safe to read as its type */
        memcpy(raw, (const uint8_t *)t->src->data + r * j->in_row, (size_t)j->in_row);
        quant_dequant_row(t->src->type, raw, f, n);
        quant_quantize_row(t->type, f, j->dst + r * j->out_row, n);
    }
}

/* The source tensor is read once: drop its pages from our resident set, so
 * that converting a 4 GB f32 model does not end with 4 GB resident (clean
 * file pages, but still counted against us). The mapping is read-only and
 * MADV_DONTNEED on it only means "re-read from the file if touched again";
 * only whole pages inside the tensor are released, and nothing reads them
 * again (the writer takes only unchanged tensors from the mapping). */
static void source_pages_release(const gguf_tensor *t)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a = ((uintptr_t)t->data + page - 1) & ~(page - 1);
    const uintptr_t b = ((uintptr_t)t->data + (uintptr_t)t->nbytes) & ~(page - 1);
    if (page > 1 && b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

static int fill_tensor(void *user, uint64_t idx, void *dst, uint64_t nbytes)
{
    qctx *q = user;
    if (idx >= q->n_ts) return err_set(PL_EINVAL, "%s: fill of unknown tensor %llu", q->in_path,
                                       (unsigned long long)idx);
    const qtensor *t = &q->ts[idx];
    convert_job j = {q, t, dst, 1, dtype_row_bytes(t->src->type, t->src->ne[0]),
                     dtype_row_bytes(t->type, t->src->ne[0])};
    for (uint32_t d = 1; d < GGUF_MAX_DIMS; d++) j.rows *= t->src->ne[d];
    if (j.rows * j.out_row != nbytes || j.in_row > q->max_row_bytes || (uint64_t)t->src->ne[0] > q->max_row_elems)
        return err_set(PL_EINVAL, "%s: tensor '%s': %llu bytes expected, writer asks %llu", q->in_path, t->name,
                       (unsigned long long)(j.rows * j.out_row), (unsigned long long)nbytes);
    tp_run(q->tp, convert_rows, &j);
    source_pages_release(t->src);
    return 0;
}

/* Per-thread scratch rows and the pool, sized by the plan. */
static int scratch_alloc(qctx *q)
{
    if (q->max_row_elems == 0) return 0; /* nothing to convert */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    q->n_threads = cpus < 1 ? 1 : cpus > 64 ? 64 : (int)cpus;
    q->raw_stride = ((size_t)q->max_row_bytes + 63) & ~(size_t)63;
    q->f_rows = mem_alloc_aligned((size_t)q->n_threads * q->max_row_elems * sizeof(float), 64);
    q->raw_rows = mem_alloc_aligned((size_t)q->n_threads * q->raw_stride, 64);
    if (!q->f_rows || !q->raw_rows) return err_prefix(PL_ENOMEM, "%s: row scratch", q->in_path);
    if (q->n_threads > 1) {
        q->tp = tp_new(q->n_threads);
        if (!q->tp) return err_prefix(PL_ENOMEM, "%s: thread pool", q->in_path);
    }
    return 0;
}

static void qctx_free(qctx *q)
{
    for (uint64_t i = 0; q->ts && i < q->n_ts; i++) free(q->ts[i].name);
    free(q->ts);
    mem_free(q->f_rows);
    mem_free(q->raw_rows);
    tp_free(q->tp);
    gguf_close(q->in);
}

static const quant_mix *mix_find(const char *name)
{
    for (size_t i = 0; i < sizeof mixes / sizeof mixes[0]; i++)
        if (strcasecmp(mixes[i].name, name) == 0) return &mixes[i];
    return NULL;
}

int pl_quantize(const char *in_path, const char *out_path, const char *type)
{
    if (!in_path || !out_path || !type) return err_set(PL_EINVAL, "pl_quantize: NULL argument");
    const quant_mix *mix = mix_find(type);
    if (!mix)
        return err_set(PL_EINVAL, "unknown quantization type '%s' (expected f32, f16, bf16, q8_0, q4_0 or q4_k_m)",
                       type);
    qctx q = {.in_path = in_path, .mix = mix, .n_threads = 1};
    int rc = gguf_open(&q.in, in_path);
    if (rc) return rc;
    gguf_writer *w = NULL;
    rc = quantize_plan(&q);
    if (!rc) rc = scratch_alloc(&q);
    if (!rc && !(w = gguf_writer_new())) rc = PL_ENOMEM;
    if (!rc) rc = copy_metadata(&q, w);
    if (!rc) rc = declare_tensors(&q, w);
    if (!rc) rc = gguf_writer_write(w, out_path, fill_tensor, &q);
    gguf_writer_free(w);
    qctx_free(&q);
    return rc;
}
