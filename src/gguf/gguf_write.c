/* gguf_write.c - build and write a GGUF v3 file.
 *
 * The writer holds deep copies of all metadata (so callers may free theirs)
 * and, for tensors, either a borrowed pointer or nothing (then the fill
 * callback produces the bytes at write time, one tensor at a time, into one
 * reused buffer: memory stays bounded by the largest such tensor).
 *
 * Invariants:
 *   - metas[] is in insertion order; keys are unique (setting again replaces
 *     the value in place); every stored value is valid (types known, scalar
 *     values within their type's range, nesting <= GGUF_MAX_ARRAY_DEPTH);
 *   - tensors[] is in declaration order, names unique and < 64 bytes (ggml's
 *     limit, so that llama.cpp loads the file), geometry checked on add;
 *   - a value owns its memory: STRING ptr, scalar array data, string array
 *     strs (one block: the gguf_str table followed by all the bytes), nested
 *     array vals (each element owning its own).
 *
 * Output, as ggml writes it: header | metas | tensor infos | zero pad to the
 * alignment | each tensor's data followed by zero pad to the alignment (the
 * last one too). A file without tensors ends right after the metadata. The file is written under a temporary name in the same
 * directory and renamed into place only when complete.
 */
#include "gguf/gguf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/mem.h"
#include "tensor/dtype.h"

#define WRITER_MAX_NAME 64 /* ggml's GGML_MAX_NAME, NUL included */

typedef struct {
    char *key;
    gguf_value val;
} wmeta;

typedef struct {
    char *name;
    uint32_t type, n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    uint64_t nbytes;
    uint64_t offset;   /* assigned by gguf_writer_write */
    const void *data;  /* borrowed, or NULL: produced by fill */
} wtensor;

struct gguf_writer {
    wmeta *metas;          /* [n_meta], capacity cap_meta */
    uint64_t n_meta, cap_meta;
    wtensor *ts;       /* [n_ts], capacity cap_ts */
    uint64_t n_ts, cap_ts;
};

/* ------------------------------------------------------------- values */

static void value_free(gguf_value *v)
{
    if (v->type == GGUF_TYPE_STRING) {
        free((void *)v->v.str.ptr);
    } else if (v->type == GGUF_TYPE_ARRAY) {
        if (v->v.arr.elem == GGUF_TYPE_ARRAY && v->v.arr.vals) {
            for (uint64_t i = 0; i < v->v.arr.n; i++) value_free((gguf_value *)&v->v.arr.vals[i]);
            free((void *)v->v.arr.vals);
        } else if (v->v.arr.elem == GGUF_TYPE_STRING) {
            free((void *)v->v.arr.strs);
        } else {
            free((void *)v->v.arr.data);
        }
    }
    memset(v, 0, sizeof *v);
}

static int str_dup(gguf_str *dst, const char *s, uint64_t n)
{
    if (n && !s) return err_set(PL_EINVAL, "gguf writer: string of %" PRIu64 " bytes with a NULL pointer", n);
    char *p = n < SIZE_MAX ? malloc((size_t)n + 1) : NULL;
    if (!p) return err_set(PL_ENOMEM, "gguf writer: out of memory for a %" PRIu64 "-byte string", n);
    if (n) memcpy(p, s, (size_t)n);
    p[n] = 0;
    dst->ptr = p;
    dst->len = n;
    return 0;
}

/* One block: n gguf_str followed by their bytes. */
static int strs_dup(gguf_value *dst, const gguf_str *strs, uint64_t n)
{
    uint64_t total = 0, head;
    if (n && !strs) return err_set(PL_EINVAL, "gguf writer: string array of %" PRIu64 " with NULL strings", n);
    for (uint64_t i = 0; i < n; i++) {
        if (strs[i].len && !strs[i].ptr) return err_set(PL_EINVAL, "gguf writer: string %" PRIu64 " is NULL", i);
        if (!add_u64(total, strs[i].len, &total)) return err_set(PL_ERANGE, "gguf writer: string array too large");
    }
    if (!mul_u64(n, sizeof(gguf_str), &head) || !add_u64(head, total, &total) || total >= SIZE_MAX)
        return err_set(PL_ERANGE, "gguf writer: string array too large");
    gguf_str *t = malloc(total ? (size_t)total : 1);
    if (!t) return err_set(PL_ENOMEM, "gguf writer: out of memory for a %" PRIu64 "-string array", n);
    char *bytes = (char *)(t + n);
    for (uint64_t i = 0; i < n; i++) {
        if (strs[i].len) memcpy(bytes, strs[i].ptr, (size_t)strs[i].len);
        t[i] = (gguf_str){bytes, strs[i].len};
        bytes += strs[i].len;
    }
    dst->v.arr.strs = t;
    return 0;
}

static int scalars_dup(gguf_value *dst, gguf_type elem, const void *data, uint64_t n)
{
    uint64_t bytes;
    if (n && !data) return err_set(PL_EINVAL, "gguf writer: array of %" PRIu64 " with NULL data", n);
    if (!mul_u64(n, gguf_type_size(elem), &bytes) || bytes >= SIZE_MAX)
        return err_set(PL_ERANGE, "gguf writer: array of %" PRIu64 " %s too large", n, gguf_type_name(elem));
    uint8_t *p = malloc(bytes ? (size_t)bytes : 1);
    if (!p) return err_set(PL_ENOMEM, "gguf writer: out of memory for %" PRIu64 " bytes", bytes);
    if (bytes) memcpy(p, data, (size_t)bytes);
    if (elem == GGUF_TYPE_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (p[i] > 1) {
                unsigned bad = p[i];
                free(p);
                return err_set(PL_ERANGE, "gguf writer: bool element %" PRIu64 " is %u, not 0 or 1", i, bad);
            }
    dst->v.arr.data = p;
    return 0;
}

/* A scalar's value must fit its type, since only its low bytes are written. */
static int scalar_check(const gguf_value *v)
{
    static const uint64_t umax[GGUF_TYPE_COUNT] = {
        [GGUF_TYPE_UINT8] = UINT8_MAX, [GGUF_TYPE_UINT16] = UINT16_MAX, [GGUF_TYPE_UINT32] = UINT32_MAX,
        [GGUF_TYPE_UINT64] = UINT64_MAX, [GGUF_TYPE_BOOL] = 1};
    static const int64_t smax[GGUF_TYPE_COUNT] = {
        [GGUF_TYPE_INT8] = INT8_MAX, [GGUF_TYPE_INT16] = INT16_MAX, [GGUF_TYPE_INT32] = INT32_MAX,
        [GGUF_TYPE_INT64] = INT64_MAX};
    gguf_type t = v->type;
    if (umax[t] && v->v.u64 > umax[t])
        return err_set(PL_ERANGE, "gguf writer: %s value %" PRIu64 " out of range", gguf_type_name(t), v->v.u64);
    if (smax[t] && (v->v.i64 > smax[t] || v->v.i64 < -smax[t] - 1))
        return err_set(PL_ERANGE, "gguf writer: %s value %" PRId64 " out of range", gguf_type_name(t), v->v.i64);
    return 0;
}

/* Deep copy of src into dst (zeroed on failure). depth = enclosing arrays. */
static int value_copy(gguf_value *dst, const gguf_value *src, int depth)
{
    memset(dst, 0, sizeof *dst);
    if ((unsigned)src->type >= GGUF_TYPE_COUNT)
        return err_set(PL_EINVAL, "gguf writer: value type %d is not a GGUF type", (int)src->type);
    if (src->type == GGUF_TYPE_STRING) {
        dst->type = GGUF_TYPE_STRING;
        return str_dup(&dst->v.str, src->v.str.ptr, src->v.str.len);
    }
    if (src->type != GGUF_TYPE_ARRAY) {
        *dst = *src;
        return scalar_check(src);
    }
    gguf_type elem = src->v.arr.elem;
    uint64_t n = src->v.arr.n;
    if ((unsigned)elem >= GGUF_TYPE_COUNT)
        return err_set(PL_EINVAL, "gguf writer: array element type %d is not a GGUF type", (int)elem);
    dst->type = GGUF_TYPE_ARRAY;
    dst->v.arr.elem = elem;
    dst->v.arr.n = n;
    if (elem == GGUF_TYPE_STRING) return strs_dup(dst, src->v.arr.strs, n);
    if (elem != GGUF_TYPE_ARRAY) return scalars_dup(dst, elem, src->v.arr.data, n);
    if (depth + 1 >= GGUF_MAX_ARRAY_DEPTH)
        return err_set(PL_EINVAL, "gguf writer: arrays nested deeper than %d levels", GGUF_MAX_ARRAY_DEPTH);
    if (n && !src->v.arr.vals) return err_set(PL_EINVAL, "gguf writer: nested array with NULL values");
    gguf_value *vals = n < SIZE_MAX / sizeof *vals ? calloc(n ? (size_t)n : 1, sizeof *vals) : NULL;
    if (!vals) return err_set(PL_ENOMEM, "gguf writer: out of memory for %" PRIu64 " nested arrays", n);
    dst->v.arr.vals = vals;
    for (uint64_t i = 0; i < n; i++) {
        int rc = src->v.arr.vals[i].type == GGUF_TYPE_ARRAY
                     ? value_copy(&vals[i], &src->v.arr.vals[i], depth + 1)
                     : err_set(PL_EINVAL, "gguf writer: element %" PRIu64 " of an array of arrays is a %s", i,
                               gguf_type_name(src->v.arr.vals[i].type));
        if (rc) {
            dst->v.arr.n = i + 1; /* free what was copied (element i is zeroed) */
            value_free(dst);
            return rc;
        }
    }
    return 0;
}

/* ------------------------------------------------------------- metadata */

gguf_writer *gguf_writer_new(void)
{
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w) err_set(PL_ENOMEM, "gguf writer: out of memory");
    return w;
}

void gguf_writer_free(gguf_writer *w)
{
    if (!w) return;
    for (uint64_t i = 0; i < w->n_meta; i++) {
        free(w->metas[i].key);
        value_free(&w->metas[i].val);
    }
    for (uint64_t i = 0; i < w->n_ts; i++) free(w->ts[i].name);
    free(w->metas);
    free(w->ts);
    free(w);
}

/* Grows an array of elem-sized items to hold one more. */
static int grow(void **arr, uint64_t *cap, uint64_t n, size_t elem)
{
    if (n < *cap) return 0;
    uint64_t c = *cap ? *cap * 2 : 16;
    void *p = c < SIZE_MAX / elem ? realloc(*arr, (size_t)c * elem) : NULL;
    if (!p) return err_set(PL_ENOMEM, "gguf writer: out of memory");
    *arr = p;
    *cap = c;
    return 0;
}

/* Stores the owned value v under key (taking it over; freed on failure). */
static int meta_put(gguf_writer *w, const char *key, gguf_value *v)
{
    int rc = 0;
    if (!w || !key || !key[0]) rc = err_set(PL_EINVAL, "gguf writer: NULL writer or empty key");
    for (uint64_t i = 0; !rc && i < w->n_meta; i++)
        if (strcmp(w->metas[i].key, key) == 0) {
            value_free(&w->metas[i].val);
            w->metas[i].val = *v;
            return 0;
        }
    char *k = rc ? NULL : strdup(key);
    if (!rc && !k) rc = err_set(PL_ENOMEM, "gguf writer: out of memory");
    if (!rc) rc = grow((void **)&w->metas, &w->cap_meta, w->n_meta, sizeof *w->metas);
    if (rc) {
        free(k);
        value_free(v);
        return err_prefix(rc, "key '%s'", key ? key : "(null)");
    }
    w->metas[w->n_meta++] = (wmeta){k, *v};
    return 0;
}

static int set_scalar(gguf_writer *w, const char *key, gguf_type t, uint64_t u, int64_t i, double d)
{
    gguf_value v = {.type = t};
    if (t == GGUF_TYPE_INT32) v.v.i64 = i;
    else if (t == GGUF_TYPE_FLOAT32) v.v.f64 = d;
    else v.v.u64 = u;
    return meta_put(w, key, &v);
}

int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v) { return set_scalar(w, key, GGUF_TYPE_UINT32, v, 0, 0); }
int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v) { return set_scalar(w, key, GGUF_TYPE_INT32, 0, v, 0); }
int gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v) { return set_scalar(w, key, GGUF_TYPE_UINT64, v, 0, 0); }
int gguf_writer_set_f32(gguf_writer *w, const char *key, float v) { return set_scalar(w, key, GGUF_TYPE_FLOAT32, 0, 0, v); }
int gguf_writer_set_bool(gguf_writer *w, const char *key, bool v) { return set_scalar(w, key, GGUF_TYPE_BOOL, v, 0, 0); }

int gguf_writer_set_str(gguf_writer *w, const char *key, const char *s)
{
    gguf_value v = {.type = GGUF_TYPE_STRING};
    if (!s) return err_set(PL_EINVAL, "gguf writer: key '%s': NULL string", key ? key : "(null)");
    int rc = str_dup(&v.v.str, s, strlen(s));
    return rc ? rc : meta_put(w, key, &v);
}

int gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_type elem, const void *data, uint64_t n)
{
    if (gguf_type_size(elem) == 0)
        return err_set(PL_EINVAL, "gguf writer: key '%s': %s is not a scalar element type (use set_arr_str or "
                       "set_value)", key ? key : "(null)", gguf_type_name(elem));
    gguf_value v = {.type = GGUF_TYPE_ARRAY, .v.arr = {.elem = elem, .n = n}};
    int rc = scalars_dup(&v, elem, data, n);
    return rc ? rc : meta_put(w, key, &v);
}

int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const gguf_str *strs, uint64_t n)
{
    gguf_value v = {.type = GGUF_TYPE_ARRAY, .v.arr = {.elem = GGUF_TYPE_STRING, .n = n}};
    int rc = strs_dup(&v, strs, n);
    return rc ? rc : meta_put(w, key, &v);
}

int gguf_writer_set_value(gguf_writer *w, const char *key, const gguf_value *src)
{
    gguf_value v;
    if (!src) return err_set(PL_EINVAL, "gguf writer: key '%s': NULL value", key ? key : "(null)");
    int rc = value_copy(&v, src, 0);
    if (rc) {
        value_free(&v);
        return err_prefix(rc, "key '%s'", key ? key : "(null)");
    }
    return meta_put(w, key, &v);
}

/* ------------------------------------------------------------- tensors */

static int tensor_check(const gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                        const uint64_t *ne, uint64_t *nbytes)
{
    if (!name || !name[0] || strlen(name) >= WRITER_MAX_NAME)
        return err_set(PL_EINVAL, "tensor name empty or longer than %d bytes", WRITER_MAX_NAME - 1);
    for (uint64_t i = 0; i < w->n_ts; i++)
        if (strcmp(w->ts[i].name, name) == 0) return err_set(PL_EINVAL, "duplicate tensor name");
    const dtype_traits *tr = dtype_get(type);
    if (!tr) return err_set(PL_EINVAL, "type %" PRIu32 " is not a known ggml type", type);
    if (n_dims == 0 || n_dims > GGUF_MAX_DIMS || !ne)
        return err_set(PL_EINVAL, "n_dims %" PRIu32 " is not in 1..%d", n_dims, GGUF_MAX_DIMS);
    uint64_t elems = 1, rows = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] == 0 || !mul_u64(elems, ne[d], &elems) || elems > INT64_MAX)
            return err_set(PL_EINVAL, "ne[%" PRIu32 "] = %" PRIu64 " is 0 or overflows", d, ne[d]);
        if (d) rows *= ne[d];
    }
    if (ne[0] % tr->blck_size)
        return err_set(PL_EINVAL, "row length %" PRIu64 " is not a multiple of the %s block size %" PRIu32, ne[0],
                       tr->name, tr->blck_size);
    if (!mul_u64(ne[0] / tr->blck_size * tr->type_size, rows, nbytes) || *nbytes > INT64_MAX)
        return err_set(PL_EINVAL, "byte size overflows");
    return 0;
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
                           const void *data)
{
    uint64_t nbytes = 0;
    if (!w) return err_set(PL_EINVAL, "gguf writer: NULL writer");
    int rc = tensor_check(w, name, type, n_dims, ne, &nbytes);
    if (!rc && w->n_ts >= INT32_MAX) rc = err_set(PL_ERANGE, "too many tensors");
    if (!rc) rc = grow((void **)&w->ts, &w->cap_ts, w->n_ts, sizeof *w->ts);
    char *copy = rc ? NULL : strdup(name);
    if (!rc && !copy) rc = err_set(PL_ENOMEM, "out of memory");
    if (rc) return err_prefix(rc, "gguf writer: tensor '%s'", name ? name : "(null)");
    wtensor *t = &w->ts[w->n_ts];
    *t = (wtensor){.name = copy, .type = type, .n_dims = n_dims, .nbytes = nbytes, .data = data};
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    return (int)w->n_ts++;
}

/* ------------------------------------------------------------- output */

/* A FILE with a byte count and a sticky error (errno of the first failure). */
typedef struct {
    FILE *fp;
    uint64_t pos;
    int err;
} out_file;

static void put(out_file *o, const void *p, size_t n)
{
    if (o->err || n == 0) return;
    if (fwrite(p, 1, n, o->fp) != n) o->err = errno ? errno : EIO;
    o->pos += n;
}

static void put_u32(out_file *o, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(o, b, 4);
}

static void put_u64(out_file *o, uint64_t v)
{
    put_u32(o, (uint32_t)v);
    put_u32(o, (uint32_t)(v >> 32));
}

static void put_str(out_file *o, const char *s, uint64_t n)
{
    put_u64(o, n);
    put(o, s, (size_t)n);
}

static void put_pad(out_file *o, uint32_t align)
{
    static const uint8_t zeros[256];
    uint64_t n = (align - o->pos % align) % align;
    for (; n > 0; n -= n < sizeof zeros ? n : sizeof zeros) put(o, zeros, n < sizeof zeros ? (size_t)n : sizeof zeros);
}

static void put_scalar(out_file *o, const gguf_value *v)
{
    size_t n = gguf_type_size(v->type);
    uint64_t bits = v->v.u64; /* integers: two's complement low bytes */
    if (v->type == GGUF_TYPE_FLOAT32) {
        float x = (float)v->v.f64;
        uint32_t u;
        memcpy(&u, &x, 4);
        bits = u;
    } else if (v->type == GGUF_TYPE_FLOAT64) {
        memcpy(&bits, &v->v.f64, 8);
    }
    uint8_t b[8];
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)(bits >> (8 * i));
    put(o, b, n);
}

/* The array body (elem type, count, elements); the KV's type tag is not here. */
static void put_array(out_file *o, const gguf_value *v)
{
    put_u32(o, (uint32_t)v->v.arr.elem);
    put_u64(o, v->v.arr.n);
    if (v->v.arr.elem == GGUF_TYPE_STRING)
        for (uint64_t i = 0; i < v->v.arr.n; i++) put_str(o, v->v.arr.strs[i].ptr, v->v.arr.strs[i].len);
    else if (v->v.arr.elem == GGUF_TYPE_ARRAY)
        for (uint64_t i = 0; i < v->v.arr.n; i++) put_array(o, &v->v.arr.vals[i]);
    else
        put(o, v->v.arr.data, (size_t)(v->v.arr.n * gguf_type_size(v->v.arr.elem)));
}

static void put_value(out_file *o, const gguf_value *v)
{
    put_u32(o, (uint32_t)v->type);
    if (v->type == GGUF_TYPE_STRING) put_str(o, v->v.str.ptr, v->v.str.len);
    else if (v->type == GGUF_TYPE_ARRAY) put_array(o, v);
    else put_scalar(o, v);
}

static void put_meta(out_file *o, const gguf_writer *w)
{
    put(o, "GGUF", 4);
    put_u32(o, 3);
    put_u64(o, w->n_ts);
    put_u64(o, w->n_meta);
    for (uint64_t i = 0; i < w->n_meta; i++) {
        put_str(o, w->metas[i].key, strlen(w->metas[i].key));
        put_value(o, &w->metas[i].val);
    }
    for (uint64_t i = 0; i < w->n_ts; i++) {
        const wtensor *t = &w->ts[i];
        put_str(o, t->name, strlen(t->name));
        put_u32(o, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(o, t->ne[d]);
        put_u32(o, t->type);
        put_u64(o, t->offset);
    }
}

/* The alignment to use (general.alignment if set), and each tensor's offset;
 * the size of the largest tensor that fill must produce into *fill_max. */
static int writer_layout(gguf_writer *w, const char *path, bool have_fill, uint32_t *align, uint64_t *fill_max)
{
    *align = GGUF_DEFAULT_ALIGNMENT;
    *fill_max = 0;
    for (uint64_t i = 0; i < w->n_meta; i++) {
        if (strcmp(w->metas[i].key, "general.alignment") != 0) continue;
        const gguf_value *v = &w->metas[i].val;
        if (v->type != GGUF_TYPE_UINT32 || v->v.u64 == 0 || (v->v.u64 & (v->v.u64 - 1)))
            return err_set(PL_EINVAL, "%s: general.alignment must be a UINT32 nonzero power of two", path);
        *align = (uint32_t)v->v.u64;
    }
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_ts; i++) {
        wtensor *t = &w->ts[i];
        if (!t->data && !have_fill)
            return err_set(PL_EINVAL, "%s: tensor '%s' has no data and no fill callback was given", path, t->name);
        if (!t->data && t->nbytes > *fill_max) *fill_max = t->nbytes;
        t->offset = off;
        uint64_t padded = t->nbytes + (*align - t->nbytes % *align) % *align;
        if (!add_u64(off, padded, &off)) return err_set(PL_ERANGE, "%s: data section size overflows", path);
    }
    if (*fill_max >= SIZE_MAX) return err_set(PL_ERANGE, "%s: tensor too large", path);
    return 0;
}

static int put_tensors(out_file *o, const gguf_writer *w, uint32_t align, gguf_fill_fn fill, void *user,
                       void *buf, const char *path)
{
    for (uint64_t i = 0; i < w->n_ts && !o->err; i++) {
        const wtensor *t = &w->ts[i];
        const void *src = t->data;
        if (!src) {
            int rc = fill(user, i, buf, t->nbytes);
            if (rc) return err_prefix(rc < 0 ? rc : PL_EIO, "%s: tensor '%s': fill", path, t->name);
            src = buf;
        }
        put(o, src, (size_t)t->nbytes);
        put_pad(o, align);
    }
    return 0;
}

/* Writes everything into the open temporary file o. */
static int write_body(out_file *o, gguf_writer *w, uint32_t align, uint64_t fill_max, gguf_fill_fn fill,
                      void *user, const char *path)
{
    void *buf = fill_max ? malloc((size_t)fill_max) : NULL;
    if (fill_max && !buf) return err_set(PL_ENOMEM, "%s: out of memory for a %" PRIu64 "-byte tensor", path, fill_max);
    put_meta(o, w);
    if (w->n_ts) put_pad(o, align); /* ggml's metadata-only files (vocabs) end unpadded */
    int rc = put_tensors(o, w, align, fill, user, buf, path);
    free(buf);
    if (rc) return rc;
    if (!o->err && fflush(o->fp) != 0) o->err = errno;
    if (!o->err && fsync(fileno(o->fp)) != 0) o->err = errno;
    if (o->err) return err_set(PL_EIO, "%s: write failed at byte %" PRIu64 ": %s", path, o->pos, strerror(o->err));
    return 0;
}

int gguf_writer_write(gguf_writer *w, const char *path, gguf_fill_fn fill, void *user)
{
    uint32_t align;
    uint64_t fill_max;
    if (!w || !path) return err_set(PL_EINVAL, "gguf_writer_write: NULL writer or path");
    int rc = writer_layout(w, path, fill != NULL, &align, &fill_max);
    if (rc) return rc;
    size_t n = strlen(path) + 16;
    char *tmp = malloc(n);
    if (!tmp) return err_set(PL_ENOMEM, "%s: out of memory", path);
    snprintf(tmp, n, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    out_file o = {.fp = fd >= 0 ? fdopen(fd, "wb") : NULL};
    if (!o.fp) {
        rc = err_set(PL_EIO, "%s: cannot create %s: %s", path, tmp, strerror(errno));
        if (fd >= 0) close(fd), unlink(tmp);
        free(tmp);
        return rc;
    }
    fchmod(fd, 0644); /* mkstemp makes 0600; a model file is meant to be shared */
    rc = write_body(&o, w, align, fill_max, fill, user, path);
    if (fclose(o.fp) != 0 && !rc) rc = err_set(PL_EIO, "%s: close failed: %s", path, strerror(errno));
    if (!rc && rename(tmp, path) != 0) rc = err_set(PL_EIO, "%s: rename from %s failed: %s", path, tmp, strerror(errno));
    if (rc) unlink(tmp);
    free(tmp);
    return rc;
}

/* ------------------------------------------------------------- split */

/* fill for shard writers: their tensor j is the whole model's base + j. */
typedef struct {
    gguf_fill_fn fill;
    void *user;
    uint64_t base;
} shard_fill;

static int shard_fill_fn(void *user, uint64_t idx, void *dst, uint64_t nbytes)
{
    const shard_fill *s = user;
    return s->fill(s->user, s->base + idx, dst, nbytes);
}

/* The writer of shard i holding tensors [t0, t1). */
static int shard_writer(const gguf_writer *w, uint32_t i, uint32_t n_split, uint64_t t0, uint64_t t1,
                        gguf_writer **out)
{
    gguf_writer *s = gguf_writer_new();
    int rc = s ? 0 : PL_ENOMEM;
    for (uint64_t k = 0; !rc && i == 0 && k < w->n_meta; k++) {
        if (strncmp(w->metas[k].key, "split.", 6) == 0) continue; /* set below */
        rc = gguf_writer_set_value(s, w->metas[k].key, &w->metas[k].val);
    }
    for (uint64_t k = 0; !rc && i > 0 && k < w->n_meta; k++) /* the data layout must match */
        if (strcmp(w->metas[k].key, "general.alignment") == 0) rc = gguf_writer_set_value(s, w->metas[k].key, &w->metas[k].val);
    if (!rc) rc = set_scalar(s, "split.no", GGUF_TYPE_UINT16, i, 0, 0);
    if (!rc) rc = set_scalar(s, "split.count", GGUF_TYPE_UINT16, n_split, 0, 0);
    if (!rc) rc = gguf_writer_set_i32(s, "split.tensors.count", (int32_t)w->n_ts);
    for (uint64_t k = t0; !rc && k < t1; k++) {
        const wtensor *t = &w->ts[k];
        int idx = gguf_writer_add_tensor(s, t->name, t->type, t->n_dims, t->ne, t->data);
        if (idx < 0) rc = idx;
    }
    if (rc) gguf_writer_free(s);
    else *out = s;
    return rc;
}

int gguf_writer_write_split(gguf_writer *w, const char *prefix, uint32_t n_split, gguf_fill_fn fill, void *user)
{
    if (!w || !prefix) return err_set(PL_EINVAL, "gguf_writer_write_split: NULL writer or prefix");
    if (n_split == 0 || n_split > 99999 || n_split > w->n_ts || w->n_ts > INT32_MAX)
        return err_set(PL_EINVAL, "%s: cannot split %" PRIu64 " tensors into %u shards", prefix, w->n_ts, n_split);
    uint64_t total = 0, done = 0, t0 = 0;
    for (uint64_t k = 0; k < w->n_ts; k++) total += w->ts[k].nbytes;
    const size_t cap = strlen(prefix) + 32;
    char *path = malloc(cap);
    if (!path) return err_set(PL_ENOMEM, "%s: out of memory", prefix);
    int rc = 0;
    uint32_t written = 0;
    for (uint32_t i = 0; !rc && i < n_split; i++) {
        /* shard i ends where the bytes pass (i + 1) / n of the total, leaving
         * at least one tensor for each later shard */
        uint64_t t1 = t0 + 1;
        done += w->ts[t0].nbytes;
        while (t1 < w->n_ts - (n_split - 1 - i) && (i + 1 == n_split || done + w->ts[t1].nbytes <= total / n_split * (i + 1)))
            done += w->ts[t1++].nbytes;
        gguf_writer *s = NULL;
        rc = shard_writer(w, i, n_split, t0, t1, &s);
        shard_fill sf = {fill, user, t0};
        snprintf(path, cap, "%s-%05u-of-%05u.gguf", prefix, i + 1, n_split);
        if (!rc) rc = gguf_writer_write(s, path, fill ? shard_fill_fn : NULL, &sf);
        gguf_writer_free(s);
        if (!rc) written++;
        t0 = t1;
    }
    for (uint32_t i = 0; rc && i < written; i++) { /* no partial set */
        snprintf(path, cap, "%s-%05u-of-%05u.gguf", prefix, i + 1, n_split);
        unlink(path);
    }
    free(path);
    return rc;
}
