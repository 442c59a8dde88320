/* api_quantize.c - pl_quantize: re-encode a GGUF model's weights under one
 * of llama.cpp's presets (f32, f16, bf16, q8_0, q4_0 ... q4_k_m, iq4_xs,
 * the lattice iq1_s ... iq3_m), as llama.cpp's llama-quantize.
 *
 * The input is mapped read-only; every metadata pair is copied, except that
 * general.file_type becomes llama.cpp's LLAMA_FTYPE of the preset (so that
 * llama.cpp names it) and general.quantization_version is 2. Tensors keep
 * their order, names and shapes; which tensor gets which type is
 * src/model/quant_mix.c's (llama.cpp's per-tensor rules and fallbacks). A
 * tensor already in its target type is copied, not re-quantized.
 *
 * Any input type that quant_dequant_row() reads can be re-encoded; others
 * fail before anything is written, naming the file and tensor. The output
 * is written through gguf_writer's fill callback, one tensor at a time, and
 * rows are converted in parallel on a thread pool, so memory stays bounded by
 * the largest output tensor (plus one row per thread) whatever the model's
 * size; converted source tensors are dropped from the resident set. The
 * writer writes to a temporary name and renames: a failure leaves no partial
 * file, and OUT may even be IN. The input may be a split model (all its
 * shards are read; split.* keys are not copied), and the output may be
 * split too (pl_quantize_split).
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
#include "model/imatrix.h"
#include "model/quant_mix.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

#define QUANT_VERSION 2 /* ggml's GGML_QNT_VERSION: the current block layouts */

/* One output tensor. */
typedef struct {
    const gguf_tensor *src;
    char *name;         /* NUL-terminated copy of src->name */
    uint32_t type;      /* output type */
    const float *im;    /* its importance matrix rows (ne0 x experts), or NULL */
} qtensor;

typedef struct {
    const char *in_path;
    gguf_file *in;
    const quant_preset *mix;
    const imatrix *im;      /* NULL: none */
    const char *im_path;
    qtensor *ts;
    uint64_t n_ts;
    threadpool *tp;
    int n_threads;
    uint64_t max_row_elems; /* over tensors that are converted */
    uint64_t max_row_bytes;
    float *f_rows;          /* n_threads x max_row_elems */
    uint8_t *raw_rows;      /* n_threads x raw_stride: source rows, aligned copies */
    size_t raw_stride;
} qctx;

/* ------------------------------------------------------- type selection */

/* A metadata u32 "<arch>.<key>", or 0 if absent or not an integer. */
static uint32_t arch_u32(const gguf_file *f, const char *arch, const char *key)
{
    char full[160];
    uint32_t v = 0;
    snprintf(full, sizeof full, "%s.%s", arch, key);
    if (gguf_get_u32(f, full, &v) != 0) v = 0;
    return v;
}

/* The hyper-parameters the mix rules read (0 where absent). */
static void model_info(const qctx *q, char *arch, size_t cap, quant_model *m)
{
    gguf_str s = {0};
    arch[0] = 0;
    if (gguf_get_str(q->in, "general.architecture", &s) == 0 && s.len < cap) {
        memcpy(arch, s.ptr, (size_t)s.len);
        arch[s.len] = 0;
    }
    err_clear(); /* absent keys are not errors here */
    m->arch = arch;
    m->n_layer = arch_u32(q->in, arch, "block_count");
    m->n_head = arch_u32(q->in, arch, "attention.head_count");
    m->n_head_kv = arch_u32(q->in, arch, "attention.head_count_kv");
    m->n_expert = arch_u32(q->in, arch, "expert_count");
    err_clear();
}

/* Rows of the tensors that change type must be readable here. */
static int tensor_check(qctx *q, qtensor *t)
{
    if (t->type == t->src->type) return 0;
    if (!quant_supported(t->src->type) || !quant_can_quantize(t->type)) {
        const dtype_traits *a = dtype_get(t->src->type), *b = dtype_get(t->type);
        return err_set(PL_EUNSUPPORTED, "%s: tensor '%s': type %s cannot be re-encoded as %s", q->in_path,
                       t->name, a ? a->name : "?", b ? b->name : "?");
    }
    if (q->im) { /* as llama.cpp: absent is allowed, a wrong size is not (but for the embeddings) */
        uint64_t n = 0;
        const float *v = imatrix_find(q->im, t->name, &n);
        if (v && n == t->src->ne[0] * t->src->ne[2]) t->im = v;
        else if (v && strcmp(t->name, "token_embd.weight") != 0)
            return err_set(PL_EINVAL, "%s: entry '%s' has %llu values, the tensor wants %llu (row %llu x %llu experts)",
                           q->im_path, t->name, (unsigned long long)n,
                           (unsigned long long)(t->src->ne[0] * t->src->ne[2]), (unsigned long long)t->src->ne[0],
                           (unsigned long long)t->src->ne[2]);
    }
    const uint64_t in_row = dtype_row_bytes(t->src->type, t->src->ne[0]);
    if (t->src->ne[0] > q->max_row_elems) q->max_row_elems = t->src->ne[0];
    if (in_row > q->max_row_bytes) q->max_row_bytes = in_row;
    return 0;
}

/* Copies names, asks quant_mix for every tensor's type, checks that the
 * changed ones can be converted. */
static int quantize_plan(qctx *q)
{
    q->n_ts = gguf_tensor_count(q->in);
    q->ts = mem_calloc(q->n_ts ? q->n_ts : 1, sizeof *q->ts);
    quant_mix_tensor *mt = mem_calloc(q->n_ts ? q->n_ts : 1, sizeof *mt);
    uint32_t *types = mem_calloc(q->n_ts ? q->n_ts : 1, sizeof *types);
    int rc = q->ts && mt && types ? 0 : PL_ENOMEM;
    uint32_t max_layer = 0;
    for (uint64_t i = 0; !rc && i < q->n_ts; i++) {
        qtensor *t = &q->ts[i];
        t->src = gguf_tensor_at(q->in, i);
        t->name = strndup(t->src->name.ptr, (size_t)t->src->name.len);
        if (!t->name) { rc = err_set(PL_ENOMEM, "%s: out of memory", q->in_path); break; }
        mt[i] = (quant_mix_tensor){t->name, t->src->type, t->src->n_dims, {0}};
        for (uint32_t d = 0; d < 4; d++) mt[i].ne[d] = d < GGUF_MAX_DIMS ? t->src->ne[d] : 1;
        unsigned layer;
        if (sscanf(t->name, "blk.%u.", &layer) == 1 && layer < 100000 && layer + 1 > max_layer) max_layer = layer + 1;
    }
    char arch[64];
    quant_model m;
    if (!rc) {
        model_info(q, arch, sizeof arch, &m);
        m.has_imatrix = q->im != NULL;
        if (m.n_layer == 0) m.n_layer = max_layer;
        rc = quant_mix_types(q->mix, &m, mt, (size_t)q->n_ts, types);
        if (rc) err_prefix(rc, "%s", q->in_path);
    }
    for (uint64_t i = 0; !rc && i < q->n_ts; i++) {
        q->ts[i].type = types[i];
        rc = tensor_check(q, &q->ts[i]);
    }
    free(mt);
    free(types);
    return rc;
}

/* ------------------------------------------------------------- writing */

static int copy_metadata(qctx *q, gguf_writer *w)
{
    for (uint64_t i = 0; i < gguf_meta_count(q->in); i++) {
        const gguf_meta *kv = gguf_meta_at(q->in, i);
        if (kv->key.len > 6 && memcmp(kv->key.ptr, "split.", 6) == 0) continue; /* one file out */
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
    const uint64_t rows_per_expert = t->src->ne[1];
    for (uint64_t r = r0; r < r1; r++) {
        /* the mapping only guarantees the file's alignment for the tensor
         * start; an aligned copy makes every row safe to read as its type */
        memcpy(raw, (const uint8_t *)t->src->data + r * j->in_row, (size_t)j->in_row);
        quant_dequant_row(t->src->type, raw, f, n);
        const float *qw = t->im ? t->im + (r / rows_per_expert) * (uint64_t)n : NULL;
        quant_quantize_row_w(t->type, f, j->dst + r * j->out_row, n, qw);
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

const char *const *pl_quantize_types(void)
{
    return quant_preset_names();
}

int pl_quantize(const char *in_path, const char *out_path, const char *type)
{
    return pl_quantize_split(in_path, out_path, type, 1);
}

/* OUT.gguf's prefix for shards OUT-0000i-of-0000N.gguf. */
static int quantize_write_split(gguf_writer *w, const char *out, uint32_t n, qctx *q)
{
    const size_t len = strlen(out);
    char *prefix = strndup(out, len > 5 && strcmp(out + len - 5, ".gguf") == 0 ? len - 5 : len);
    if (!prefix) return err_set(PL_ENOMEM, "%s: out of memory", out);
    int rc = gguf_writer_write_split(w, prefix, n, fill_tensor, q);
    free(prefix);
    return rc;
}

int pl_quantize_split(const char *in_path, const char *out_path, const char *type, uint32_t n_split)
{
    const pl_quantize_params p = {in_path, out_path, type, n_split, NULL};
    return pl_quantize_run(&p);
}

int pl_quantize_run(const pl_quantize_params *p)
{
    if (!p || !p->in_path || !p->out_path || !p->type) return err_set(PL_EINVAL, "pl_quantize: NULL argument");
    const char *in_path = p->in_path, *out_path = p->out_path;
    const uint32_t n_split = p->n_split;
    const quant_preset *mix = quant_preset_find(p->type);
    if (!mix) return err_set(PL_EINVAL, "unknown quantization type '%s' (see pl_quantize_types())", p->type);
    imatrix *im = NULL;
    if (p->imatrix) {
        int rc = imatrix_load(&im, p->imatrix);
        if (rc) return rc;
    }
    qctx q = {.in_path = in_path, .mix = mix, .im = im, .im_path = p->imatrix, .n_threads = 1};
    int rc = gguf_open_model(&q.in, in_path);
    if (rc) {
        imatrix_free(im);
        return rc;
    }
    gguf_writer *w = NULL;
    rc = quantize_plan(&q);
    if (!rc) rc = scratch_alloc(&q);
    if (!rc && !(w = gguf_writer_new())) rc = PL_ENOMEM;
    if (!rc) rc = copy_metadata(&q, w);
    if (!rc) rc = declare_tensors(&q, w);
    if (!rc && n_split > 1) rc = quantize_write_split(w, out_path, n_split, &q);
    else if (!rc) rc = gguf_writer_write(w, out_path, fill_tensor, &q);
    gguf_writer_free(w);
    qctx_free(&q);
    imatrix_free(im);
    return rc;
}
