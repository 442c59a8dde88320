/* gguf_read.c - open, validate and index a GGUF file (v2 and v3).
 *
 * The whole file is checked at open, front to back, by one cursor (parser)
 * that never reads a byte before proving it lies inside the buffer. After a
 * successful open every gguf_meta / gguf_tensor / gguf_value points only into
 * the buffer or into memory owned by the gguf_file, so accessors need no
 * checks.
 *
 * Invariants after open:
 *   - metas[0..n_meta) and tensors[0..n_tensors) are in file order;
 *   - keys and tensor names are non-empty, free of NUL bytes and unique, and
 *     meta_ix / tensor_ix find each of them in O(1);
 *   - string arrays have their gguf_str table, nested arrays their value
 *     table, built here (so element i is O(1)); scalar arrays point at their
 *     packed elements; nesting is at most GGUF_MAX_ARRAY_DEPTH;
 *   - every tensor's data [data_offset + offset, + nbytes) lies inside the
 *     file, is aligned, and overlaps no other tensor.
 *
 * Memory: every count read from the file is bounded by the bytes that remain
 * before anything is allocated, so a tiny file cannot ask for a huge table:
 * the tables total at most a small multiple of the file size. All tables are
 * chunks on one list owned by the gguf_file; gguf_close frees the list, which
 * is also how every error path cleans up.
 *
 *   buffer: | header 24 | kv ... | tensor infos ... | pad | data ........ |
 *           0          24                              data_offset      size
 */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/mem.h"
#include "tensor/dtype.h"

#define HEADER_BYTES 24
/* Smallest encodings, used to bound counts by the bytes that remain:
 * kv = key len 8 + key >= 1 + type 4 + value >= 1;
 * tensor info = name len 8 + name >= 1 + n_dims 4 + ne 8 + type 4 + offset 8;
 * nested array element = elem type 4 + count 8. */
#define MIN_KV_BYTES 14
#define MIN_TENSOR_BYTES 33
#define MIN_ARRAY_BYTES 12
#define MIN_STRING_BYTES 8

/* One allocation owned by a gguf_file; the payload follows the header. */
typedef struct chunk {
    struct chunk *next;
    max_align_t payload[];
} chunk;

/* Open-addressing hash index from a name to its position (slot = pos + 1,
 * 0 = empty); capacity is a power of two >= 2 x entries. */
typedef struct {
    uint64_t *slot;
    uint64_t mask;
} name_index;

struct gguf_file {
    char *path;
    const uint8_t *base;  /* [size] bytes: the mapping or the caller's buffer */
    uint64_t size;
    void *map;            /* non-NULL when we own an mmap of map_len bytes */
    size_t map_len;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    uint64_t n_meta, n_tensors;
    gguf_meta *metas;          /* [n_meta] */
    gguf_tensor *tensors;  /* [n_tensors] */
    name_index meta_ix, tensor_ix;
    chunk *chunks;
    gguf_file **shards;   /* [n_shards] joined shards 2..N of a split model (owned) */
    uint32_t n_shards;
};

/* The cursor. ctx names the item being parsed ("kv[3] 'general.name'") and
 * idx[0..nidx) the array element path inside it, both only for errors. */
typedef struct {
    gguf_file *f;
    const uint8_t *buf;
    uint64_t size, pos;
    const char *path;
    char ctx[192];
    uint64_t idx[GGUF_MAX_ARRAY_DEPTH];
    int nidx;
} parser;

/* ------------------------------------------------------------- helpers */

static uint16_t ld16(const uint8_t *b) { return (uint16_t)(b[0] | b[1] << 8); }
static uint32_t ld32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static uint64_t ld64(const uint8_t *b) { return (uint64_t)ld32(b) | (uint64_t)ld32(b + 4) << 32; }

static void *file_alloc(gguf_file *f, uint64_t n, size_t size)
{
    uint64_t bytes;
    if (!mul_u64(n, size, &bytes) || bytes > SIZE_MAX - sizeof(chunk)) {
        err_set(PL_ENOMEM, "out of memory: %" PRIu64 " x %zu bytes", n, size);
        return NULL;
    }
    chunk *c = malloc(sizeof(chunk) + (size_t)bytes);
    if (!c) {
        err_set(PL_ENOMEM, "out of memory allocating %" PRIu64 " bytes", bytes);
        return NULL;
    }
    c->next = f->chunks;
    f->chunks = c;
    return c->payload;
}

/* FNV-1a: short keys, no need for more. */
static uint64_t name_hash(const char *s, uint64_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h;
}

static gguf_str name_at(const gguf_file *f, const name_index *ix, uint64_t i)
{
    return ix == &f->meta_ix ? f->metas[i].key : f->tensors[i].name;
}

static int index_init(gguf_file *f, name_index *ix, uint64_t n)
{
    uint64_t cap = 8;
    while (cap < 2 * n) cap *= 2; /* n is bounded by the file size: no overflow */
    ix->slot = file_alloc(f, cap, sizeof *ix->slot);
    if (!ix->slot) return PL_ENOMEM;
    memset(ix->slot, 0, (size_t)cap * sizeof *ix->slot);
    ix->mask = cap - 1;
    return 0;
}

/* Position of name in ix, or UINT64_MAX. */
static uint64_t index_find(const gguf_file *f, const name_index *ix, const char *s, uint64_t n)
{
    if (!ix->slot) return UINT64_MAX;
    for (uint64_t h = name_hash(s, n) & ix->mask;; h = (h + 1) & ix->mask) {
        uint64_t v = ix->slot[h];
        if (v == 0) return UINT64_MAX;
        gguf_str k = name_at(f, ix, v - 1);
        if (k.len == n && memcmp(k.ptr, s, n) == 0) return v - 1;
    }
}

/* Adds entry i (its name already stored); returns the position of an earlier
 * entry with the same name, or UINT64_MAX if i is new. */
static uint64_t index_add(const gguf_file *f, name_index *ix, uint64_t i)
{
    gguf_str k = name_at(f, ix, i);
    uint64_t h = name_hash(k.ptr, k.len) & ix->mask;
    for (; ix->slot[h]; h = (h + 1) & ix->mask) {
        gguf_str o = name_at(f, ix, ix->slot[h] - 1);
        if (o.len == k.len && memcmp(o.ptr, k.ptr, k.len) == 0) return ix->slot[h] - 1;
    }
    ix->slot[h] = i + 1;
    return UINT64_MAX;
}

/* ------------------------------------------------------------- errors */

/* "PATH: offset N: CTX[i][j] FIELD: problem" - what starts with the field. */
static int perr(const parser *p, uint64_t off, const char *what, ...)
    __attribute__((format(printf, 3, 4)));
static int perr(const parser *p, uint64_t off, const char *what, ...)
{
    char msg[512], path[96] = "";
    size_t k = 0;
    for (int d = 0; d < p->nidx && k < sizeof path - 24; d++)
        k += (size_t)snprintf(path + k, sizeof path - k, "[%" PRIu64 "]", p->idx[d]);
    va_list ap;
    va_start(ap, what);
    vsnprintf(msg, sizeof msg, what, ap);
    va_end(ap);
    return err_set(PL_EFORMAT, "%s: offset %" PRIu64 ": %s%s%s%s", p->path, off, p->ctx, path,
                   p->ctx[0] ? " " : "", msg);
}

/* Sets ctx to "LABEL[i] 'name'" with the name shortened and made printable. */
static void parser_set_ctx(parser *p, const char *label, uint64_t i, const gguf_str *name)
{
    int k = snprintf(p->ctx, sizeof p->ctx, "%s[%" PRIu64 "]", label, i);
    if (!name || k < 0) return;
    char shown[72];
    uint64_t n = name->len < 64 ? name->len : 64, j;
    for (j = 0; j < n; j++) {
        unsigned char c = (unsigned char)name->ptr[j];
        shown[j] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    shown[j] = 0;
    snprintf(p->ctx + k, sizeof p->ctx - (size_t)k, " '%s%s'", shown, name->len > 64 ? "..." : "");
}

/* ------------------------------------------------------------- primitives */

static int need(parser *p, uint64_t n, const char *field)
{
    if (p->size - p->pos >= n) return 0;
    return perr(p, p->pos, "%s: truncated: %" PRIu64 " bytes needed, %" PRIu64 " left in the file",
                field, n, p->size - p->pos);
}

static int rd_u32(parser *p, uint32_t *v, const char *field)
{
    int rc = need(p, 4, field);
    if (rc) return rc;
    *v = ld32(p->buf + p->pos);
    p->pos += 4;
    return 0;
}

static int rd_u64(parser *p, uint64_t *v, const char *field)
{
    int rc = need(p, 8, field);
    if (rc) return rc;
    *v = ld64(p->buf + p->pos);
    p->pos += 8;
    return 0;
}

static int rd_str(parser *p, gguf_str *s, const char *field)
{
    uint64_t off = p->pos, len;
    int rc = rd_u64(p, &len, field);
    if (rc) return rc;
    if (len > p->size - p->pos)
        return perr(p, off, "%s: length %" PRIu64 " runs past the end of the file (%" PRIu64 " bytes left)",
                    field, len, p->size - p->pos);
    s->ptr = (const char *)p->buf + p->pos;
    s->len = len;
    p->pos += len;
    return 0;
}

/* A key or tensor name: non-empty, no NUL (lookups take C strings). */
static int rd_name(parser *p, gguf_str *s, const char *field)
{
    uint64_t off = p->pos;
    int rc = rd_str(p, s, field);
    if (rc) return rc;
    if (s->len == 0) return perr(p, off, "%s: empty", field);
    if (memchr(s->ptr, 0, s->len)) return perr(p, off, "%s: contains a NUL byte", field);
    return 0;
}

/* ------------------------------------------------------------- values */

size_t gguf_type_size(gguf_type t)
{
    static const uint8_t size[GGUF_TYPE_COUNT] = {
        [GGUF_TYPE_UINT8] = 1, [GGUF_TYPE_INT8] = 1, [GGUF_TYPE_UINT16] = 2,
        [GGUF_TYPE_INT16] = 2, [GGUF_TYPE_UINT32] = 4, [GGUF_TYPE_INT32] = 4,
        [GGUF_TYPE_FLOAT32] = 4, [GGUF_TYPE_BOOL] = 1, [GGUF_TYPE_UINT64] = 8,
        [GGUF_TYPE_INT64] = 8, [GGUF_TYPE_FLOAT64] = 8,
    };
    return (unsigned)t < GGUF_TYPE_COUNT ? size[t] : 0;
}

static int parse_scalar(parser *p, gguf_type t, gguf_value *out)
{
    uint64_t off = p->pos;
    int rc = need(p, gguf_type_size(t), "value");
    if (rc) return rc;
    const uint8_t *b = p->buf + p->pos;
    p->pos += gguf_type_size(t);
    out->type = t;
    switch (t) {
    case GGUF_TYPE_UINT8: out->v.u64 = b[0]; break;
    case GGUF_TYPE_INT8: out->v.i64 = (int8_t)b[0]; break;
    case GGUF_TYPE_UINT16: out->v.u64 = ld16(b); break;
    case GGUF_TYPE_INT16: out->v.i64 = (int16_t)ld16(b); break;
    case GGUF_TYPE_UINT32: out->v.u64 = ld32(b); break;
    case GGUF_TYPE_INT32: out->v.i64 = (int32_t)ld32(b); break;
    case GGUF_TYPE_UINT64: out->v.u64 = ld64(b); break;
    case GGUF_TYPE_INT64: out->v.i64 = (int64_t)ld64(b); break;
    case GGUF_TYPE_FLOAT32: {
        uint32_t u = ld32(b);
        float x;
        memcpy(&x, &u, 4);
        out->v.f64 = x;
        break;
    }
    case GGUF_TYPE_FLOAT64: {
        uint64_t u = ld64(b);
        memcpy(&out->v.f64, &u, 8);
        break;
    }
    case GGUF_TYPE_BOOL:
        if (b[0] > 1) return perr(p, off, "bool value: %u is not 0 or 1", b[0]);
        out->v.u64 = b[0];
        break;
    default: return perr(p, off, "value: type %d is not a scalar", (int)t); /* unreachable */
    }
    return 0;
}

static int parse_array(parser *p, gguf_value *out, int depth);

/* The elements of a string array: one gguf_str each, so access is O(1). */
static int parse_str_elems(parser *p, gguf_value *out, uint64_t count_off, int depth)
{
    uint64_t n = out->v.arr.n;
    if (n > (p->size - p->pos) / MIN_STRING_BYTES)
        return perr(p, count_off, "array count: %" PRIu64 " strings cannot fit in the %" PRIu64 " bytes left",
                    n, p->size - p->pos);
    gguf_str *s = file_alloc(p->f, n, sizeof *s);
    if (!s) return PL_ENOMEM;
    out->v.arr.strs = s;
    p->nidx = depth + 1;
    for (uint64_t i = 0; i < n; i++) {
        p->idx[depth] = i;
        int rc = rd_str(p, &s[i], "string length");
        if (rc) return rc;
    }
    p->nidx = depth;
    return 0;
}

static int parse_arr_elems(parser *p, gguf_value *out, uint64_t count_off, int depth)
{
    uint64_t n = out->v.arr.n;
    if (depth + 1 >= GGUF_MAX_ARRAY_DEPTH)
        return perr(p, count_off - 4, "array nesting: deeper than %d levels", GGUF_MAX_ARRAY_DEPTH);
    if (n > (p->size - p->pos) / MIN_ARRAY_BYTES)
        return perr(p, count_off, "array count: %" PRIu64 " arrays cannot fit in the %" PRIu64 " bytes left",
                    n, p->size - p->pos);
    gguf_value *v = file_alloc(p->f, n, sizeof *v);
    if (!v) return PL_ENOMEM;
    out->v.arr.vals = v;
    p->nidx = depth + 1;
    for (uint64_t i = 0; i < n; i++) {
        p->idx[depth] = i;
        int rc = parse_array(p, &v[i], depth + 1);
        if (rc) return rc;
    }
    p->nidx = depth;
    return 0;
}

static int parse_scalar_elems(parser *p, gguf_value *out, uint64_t count_off)
{
    uint64_t n = out->v.arr.n;
    size_t sz = gguf_type_size(out->v.arr.elem);
    if (n > (p->size - p->pos) / sz)
        return perr(p, count_off, "array count: %" PRIu64 " x %zu-byte %s elements cannot fit in the %" PRIu64
                    " bytes left", n, sz, gguf_type_name(out->v.arr.elem), p->size - p->pos);
    if (out->v.arr.elem == GGUF_TYPE_BOOL) {
        const uint8_t *b = p->buf + p->pos;
        for (uint64_t i = 0; i < n; i++)
            if (b[i] > 1) return perr(p, p->pos + i, "bool element %" PRIu64 ": %u is not 0 or 1", i, b[i]);
    }
    p->pos += n * sz;
    return 0;
}

/* array = u32 elem type | u64 n | n elements; depth = enclosing arrays. */
static int parse_array(parser *p, gguf_value *out, int depth)
{
    uint64_t off = p->pos, count_off, n;
    uint32_t et;
    int rc = rd_u32(p, &et, "array element type");
    if (rc) return rc;
    if (et >= GGUF_TYPE_COUNT) return perr(p, off, "array element type: %" PRIu32 " is not a GGUF type", et);
    count_off = p->pos;
    if ((rc = rd_u64(p, &n, "array count"))) return rc;
    memset(out, 0, sizeof *out);
    out->type = GGUF_TYPE_ARRAY;
    out->v.arr.elem = (gguf_type)et;
    out->v.arr.n = n;
    out->v.arr.data = p->buf + p->pos;
    if (et == GGUF_TYPE_STRING) return parse_str_elems(p, out, count_off, depth);
    if (et == GGUF_TYPE_ARRAY) return parse_arr_elems(p, out, count_off, depth);
    return parse_scalar_elems(p, out, count_off);
}

static int parse_value(parser *p, gguf_type t, gguf_value *out)
{
    if (t == GGUF_TYPE_ARRAY) return parse_array(p, out, 0);
    if (t == GGUF_TYPE_STRING) {
        out->type = t;
        return rd_str(p, &out->v.str, "string length");
    }
    return parse_scalar(p, t, out);
}

/* ------------------------------------------------------------- sections */

static int parse_header(parser *p, uint64_t *n_tensors, uint64_t *n_meta)
{
    gguf_file *f = p->f;
    if (p->size < 4) return perr(p, 0, "magic: the file has %" PRIu64 " bytes, too short for a GGUF header", p->size);
    if (memcmp(p->buf, "GGUF", 4) != 0)
        return perr(p, 0, "magic: bytes %02x %02x %02x %02x are not \"GGUF\"", p->buf[0], p->buf[1], p->buf[2],
                    p->buf[3]);
    p->pos = 4;
    int rc = rd_u32(p, &f->version, "version");
    if (rc) return rc;
    uint32_t v = f->version, sw = __builtin_bswap32(v);
    if (v == 1) return perr(p, 4, "version: 1 is not supported (v1 used 32-bit counts; reconvert the file)");
    if (v != 2 && v != 3) {
        if (sw >= 1 && sw <= 3)
            return perr(p, 4, "version: %" PRIu32 " is version %" PRIu32 " byte-swapped (a big-endian file?); only "
                        "little-endian v2 and v3 are supported", v, sw);
        return perr(p, 4, "version: %" PRIu32 " is not supported (only 2 and 3)", v);
    }
    if ((rc = rd_u64(p, n_tensors, "tensor count")) || (rc = rd_u64(p, n_meta, "kv count"))) return rc;
    uint64_t left = p->size - p->pos;
    if (*n_tensors > left / MIN_TENSOR_BYTES)
        return perr(p, 8, "tensor count: %" PRIu64 " tensors cannot fit in the %" PRIu64 " bytes left", *n_tensors,
                    left);
    if (*n_meta > left / MIN_KV_BYTES)
        return perr(p, 16, "kv count: %" PRIu64 " pairs cannot fit in the %" PRIu64 " bytes left", *n_meta, left);
    return 0;
}

static int parse_meta(parser *p, uint64_t i)
{
    gguf_file *f = p->f;
    gguf_meta *kv = &f->metas[i];
    parser_set_ctx(p, "kv", i, NULL);
    kv->file_offset = p->pos;
    int rc = rd_name(p, &kv->key, "key");
    if (rc) return rc;
    parser_set_ctx(p, "kv", i, &kv->key);
    f->n_meta = i + 1; /* the index reads metas[0..n_meta) */
    uint64_t dup = index_add(f, &f->meta_ix, i);
    if (dup != UINT64_MAX)
        return perr(p, kv->file_offset, "key: duplicate of kv[%" PRIu64 "] (offset %" PRIu64 ")", dup,
                    f->metas[dup].file_offset);
    uint64_t toff = p->pos;
    uint32_t t;
    if ((rc = rd_u32(p, &t, "type"))) return rc;
    if (t >= GGUF_TYPE_COUNT) return perr(p, toff, "type: %" PRIu32 " is not a GGUF type", t);
    return parse_value(p, (gguf_type)t, &kv->value);
}

static int parse_alignment(parser *p)
{
    gguf_file *f = p->f;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    uint64_t i = index_find(f, &f->meta_ix, "general.alignment", strlen("general.alignment"));
    if (i == UINT64_MAX) return 0;
    const gguf_meta *kv = &f->metas[i];
    parser_set_ctx(p, "kv", i, &kv->key);
    if (kv->value.type != GGUF_TYPE_UINT32)
        return perr(p, kv->file_offset, "value: type %s, general.alignment must be UINT32",
                    gguf_type_name(kv->value.type));
    uint64_t a = kv->value.v.u64;
    if (a == 0 || (a & (a - 1)) != 0)
        return perr(p, kv->file_offset, "value: alignment %" PRIu64 " is not a nonzero power of two", a);
    f->alignment = (uint32_t)a;
    return 0;
}

/* ne[] and type of tensor t are read; checks the geometry, sets nbytes. */
static int tensor_geometry(parser *p, gguf_tensor *t, uint64_t ne_off, uint64_t type_off)
{
    const dtype_traits *tr = dtype_get(t->type);
    if (!tr) return perr(p, type_off, "type: %" PRIu32 " is not a known ggml type", t->type);
    if (t->ne[0] % tr->blck_size != 0)
        return perr(p, ne_off, "ne[0]: row length %" PRIu64 " is not a multiple of the %s block size %" PRIu32,
                    t->ne[0], tr->name, tr->blck_size);
    uint64_t elems = 1, rows = 1, bytes;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++)
        if (!mul_u64(elems, t->ne[d], &elems) || elems > INT64_MAX)
            return perr(p, ne_off, "ne: element count overflows (ne[%" PRIu32 "] = %" PRIu64 ")", d, t->ne[d]);
    for (uint32_t d = 1; d < GGUF_MAX_DIMS; d++) rows *= t->ne[d]; /* <= elems: no overflow */
    if (!mul_u64(t->ne[0] / tr->blck_size * tr->type_size, rows, &bytes))
        return perr(p, ne_off, "ne: byte size overflows");
    t->nbytes = bytes;
    return 0;
}

static int parse_tensor_info(parser *p, uint64_t i, uint64_t *offset_pos)
{
    static const char *const ne_field[GGUF_MAX_DIMS] = {"ne[0]", "ne[1]", "ne[2]", "ne[3]"};
    gguf_file *f = p->f;
    gguf_tensor *t = &f->tensors[i];
    memset(t, 0, sizeof *t);
    parser_set_ctx(p, "tensor", i, NULL);
    uint64_t name_off = p->pos, ne_off, type_off;
    int rc = rd_name(p, &t->name, "name");
    if (rc) return rc;
    parser_set_ctx(p, "tensor", i, &t->name);
    f->n_tensors = i + 1;
    uint64_t dup = index_add(f, &f->tensor_ix, i);
    if (dup != UINT64_MAX) return perr(p, name_off, "name: duplicate of tensor[%" PRIu64 "]", dup);
    uint64_t nd_off = p->pos;
    if ((rc = rd_u32(p, &t->n_dims, "n_dims"))) return rc;
    if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)
        return perr(p, nd_off, "n_dims: %" PRIu32 " is not in 1..%d", t->n_dims, GGUF_MAX_DIMS);
    ne_off = p->pos;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if (d >= t->n_dims) continue;
        uint64_t off = p->pos;
        if ((rc = rd_u64(p, &t->ne[d], ne_field[d]))) return rc;
        if (t->ne[d] == 0) return perr(p, off, "%s: 0 (every dimension must be at least 1)", ne_field[d]);
    }
    type_off = p->pos;
    if ((rc = rd_u32(p, &t->type, "type"))) return rc;
    if ((rc = tensor_geometry(p, t, ne_off, type_off))) return rc;
    *offset_pos = p->pos;
    if ((rc = rd_u64(p, &t->offset, "offset"))) return rc;
    if (t->offset % f->alignment != 0)
        return perr(p, *offset_pos, "offset: %" PRIu64 " is not a multiple of the alignment %" PRIu32, t->offset,
                    f->alignment);
    return 0;
}

typedef struct {
    uint64_t begin, end, i;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Every tensor's data inside the file, and no two overlapping. */
static int check_tensor_data(parser *p, const uint64_t *offset_pos)
{
    gguf_file *f = p->f;
    uint64_t room = f->data_offset <= f->size ? f->size - f->data_offset : 0;
    span *s = file_alloc(f, f->n_tensors, sizeof *s);
    if (!s) return PL_ENOMEM;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        parser_set_ctx(p, "tensor", i, &t->name);
        if (f->data_offset > f->size || t->offset > room || t->nbytes > room - t->offset)
            return perr(p, offset_pos[i], "offset: data at %" PRIu64 " + %" PRIu64 " bytes runs past the end of the "
                        "file (%" PRIu64 " bytes, data section at %" PRIu64 ")", t->offset, t->nbytes, f->size,
                        f->data_offset);
        t->data = f->base + f->data_offset + t->offset;
        s[i] = (span){t->offset, t->offset + t->nbytes, i};
    }
    if (f->n_tensors > 1) qsort(s, (size_t)f->n_tensors, sizeof *s, span_cmp);
    for (uint64_t k = 1; k < f->n_tensors; k++) {
        if (s[k].begin >= s[k - 1].end) continue;
        uint64_t a = s[k].i > s[k - 1].i ? s[k].i : s[k - 1].i, b = s[k].i ^ s[k - 1].i ^ a;
        parser_set_ctx(p, "tensor", a, &f->tensors[a].name);
        return perr(p, offset_pos[a], "offset: data [%" PRIu64 ", %" PRIu64 ") overlaps tensor[%" PRIu64 "] [%" PRIu64
                    ", %" PRIu64 ")", f->tensors[a].offset, f->tensors[a].offset + f->tensors[a].nbytes, b,
                    f->tensors[b].offset, f->tensors[b].offset + f->tensors[b].nbytes);
    }
    return 0;
}

static int parse_tensors(parser *p, uint64_t n)
{
    gguf_file *f = p->f;
    uint64_t *offset_pos = file_alloc(f, n, sizeof *offset_pos);
    f->tensors = file_alloc(f, n, sizeof *f->tensors);
    if (!offset_pos || !f->tensors || index_init(f, &f->tensor_ix, n)) return PL_ENOMEM;
    for (uint64_t i = 0; i < n; i++) {
        int rc = parse_tensor_info(p, i, &offset_pos[i]);
        if (rc) return rc;
    }
    p->ctx[0] = 0;
    uint64_t a = f->alignment, pad = (a - p->pos % a) % a;
    f->data_offset = p->pos + pad; /* pos <= size and a <= 2^31: no overflow */
    return check_tensor_data(p, offset_pos);
}

static int parse_file(parser *p)
{
    gguf_file *f = p->f;
    uint64_t n_tensors, n_meta;
    int rc = parse_header(p, &n_tensors, &n_meta);
    if (rc) return rc;
    f->metas = file_alloc(f, n_meta, sizeof *f->metas);
    if (!f->metas || index_init(f, &f->meta_ix, n_meta)) return PL_ENOMEM;
    for (uint64_t i = 0; i < n_meta; i++)
        if ((rc = parse_meta(p, i))) return rc;
    if ((rc = parse_alignment(p))) return rc;
    return parse_tensors(p, n_tensors);
}

/* ------------------------------------------------------------- open/close */

/* Parses [data, size) into a new gguf_file that takes over map (if any). */
static int open_buffer(gguf_file **out, const void *data, size_t size, const char *name, void *map,
                       size_t map_len)
{
    gguf_file *f = calloc(1, sizeof *f);
    char *path = strdup(name);
    if (!f || !path) {
        free(f);
        free(path);
        if (map) munmap(map, map_len);
        return err_set(PL_ENOMEM, "%s: out of memory", name);
    }
    f->path = path;
    f->base = data;
    f->size = size;
    f->map = map;
    f->map_len = map_len;
    parser p = {.f = f, .buf = data, .size = size, .path = f->path};
    int rc = parse_file(&p);
    if (rc) {
        if (rc == PL_ENOMEM) err_prefix(rc, "%s: offset %" PRIu64, name, p.pos);
        gguf_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

int gguf_open_mem(gguf_file **out, const void *data, size_t size, const char *name)
{
    static const uint8_t empty[1];
    if (!out || (!data && size) || !name) return err_set(PL_EINVAL, "gguf_open_mem: bad arguments");
    return open_buffer(out, data ? data : empty, size, name, NULL, 0);
}

int gguf_open(gguf_file **out, const char *path)
{
    static const uint8_t empty[1];
    if (!out || !path) return err_set(PL_EINVAL, "gguf_open: bad arguments");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_set(PL_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return err_set(PL_EIO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(PL_EIO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return err_set(PL_EIO, "%s: too large to map", path);
    }
    size_t size = (size_t)st.st_size;
    void *map = NULL;
    if (size > 0) { /* mmap of 0 bytes fails; an empty file gets the header error */
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            return err_set(PL_EIO, "%s: mmap of %zu bytes failed: %s", path, size, strerror(e));
        }
    }
    close(fd); /* the mapping keeps the file */
    return open_buffer(out, map ? map : empty, size, path, map, size);
}

void gguf_close(gguf_file *f)
{
    if (!f) return;
    for (uint32_t i = 0; i < f->n_shards; i++) gguf_close(f->shards[i]);
    free(f->shards);
    for (chunk *c = f->chunks, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    if (f->map) munmap(f->map, f->map_len);
    free(f->path);
    free(f);
}

/* ------------------------------------------------------------- accessors */

const char *gguf_path(const gguf_file *f) { return f->path; }
uint32_t gguf_version(const gguf_file *f) { return f->version; }
uint32_t gguf_alignment(const gguf_file *f) { return f->alignment; }
uint64_t gguf_file_size(const gguf_file *f) { return f->size; }
uint64_t gguf_data_offset(const gguf_file *f) { return f->data_offset; }
const uint8_t *gguf_file_bytes(const gguf_file *f) { return f->base; }
uint64_t gguf_meta_count(const gguf_file *f) { return f->n_meta; }
uint64_t gguf_tensor_count(const gguf_file *f) { return f->n_tensors; }

const gguf_meta *gguf_meta_at(const gguf_file *f, uint64_t i) { return i < f->n_meta ? &f->metas[i] : NULL; }

const gguf_tensor *gguf_tensor_at(const gguf_file *f, uint64_t i)
{
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const gguf_meta *gguf_meta_find(const gguf_file *f, const char *key)
{
    if (!key) return NULL;
    uint64_t i = index_find(f, &f->meta_ix, key, strlen(key));
    return i == UINT64_MAX ? NULL : &f->metas[i];
}

const gguf_tensor *gguf_tensor_find(const gguf_file *f, const char *name)
{
    if (!name) return NULL;
    uint64_t i = index_find(f, &f->tensor_ix, name, strlen(name));
    return i == UINT64_MAX ? NULL : &f->tensors[i];
}

/* ------------------------------------------------------------- shards */

/* The directory grows into a new table (chunks are never reallocated),
 * then the name index is rebuilt over all tensors; a name already present
 * fails the join and leaves f as it was. */
int gguf_join_shard(gguf_file *f, gguf_file *shard)
{
    if (f->n_shards >= UINT16_MAX || shard->n_shards)
        return err_set(PL_EINVAL, "%s: cannot join %s as a shard", f->path, shard->path);
    const uint64_t n = f->n_tensors + shard->n_tensors;
    gguf_tensor *ts = file_alloc(f, n ? n : 1, sizeof *ts);
    gguf_file **sh = realloc(f->shards, (f->n_shards + 1) * sizeof *sh);
    if (!ts || !sh) return err_set(PL_ENOMEM, "%s: out of memory joining %s", f->path, shard->path);
    f->shards = sh;
    if (f->n_tensors) memcpy(ts, f->tensors, (size_t)f->n_tensors * sizeof *ts);
    for (uint64_t i = 0; i < shard->n_tensors; i++) {
        ts[f->n_tensors + i] = shard->tensors[i];
        ts[f->n_tensors + i].shard = f->n_shards + 1;
    }
    gguf_tensor *old_ts = f->tensors;
    const name_index old_ix = f->tensor_ix;
    f->tensors = ts;
    if (index_init(f, &f->tensor_ix, n) != 0) {
        f->tensors = old_ts;
        f->tensor_ix = old_ix;
        return err_set(PL_ENOMEM, "%s: out of memory joining %s", f->path, shard->path);
    }
    for (uint64_t i = 0; i < n; i++) {
        const uint64_t dup = index_add(f, &f->tensor_ix, i);
        if (dup == UINT64_MAX) continue;
        const gguf_tensor *t = &ts[i];
        int rc = err_set(PL_EFORMAT, "%s: tensor '%.*s' (offset %" PRIu64 ") is also in %s", shard->path,
                         (int)(t->name.len > 64 ? 64 : t->name.len), t->name.ptr,
                         shard->data_offset + t->offset, gguf_tensor_path(f, &ts[dup]));
        f->tensors = old_ts;
        f->tensor_ix = old_ix;
        return rc;
    }
    f->n_tensors = n;
    f->shards[f->n_shards++] = shard;
    return 0;
}

uint32_t gguf_shard_count(const gguf_file *f) { return 1 + f->n_shards; }

const gguf_file *gguf_shard(const gguf_file *f, uint32_t i)
{
    return i == 0 ? f : i <= f->n_shards ? f->shards[i - 1] : NULL;
}

const char *gguf_tensor_path(const gguf_file *f, const gguf_tensor *t)
{
    const gguf_file *s = gguf_shard(f, t->shard);
    return s ? s->path : f->path;
}

uint64_t gguf_tensor_file_offset(const gguf_file *f, const gguf_tensor *t)
{
    const gguf_file *s = gguf_shard(f, t->shard);
    return (s ? s->data_offset : f->data_offset) + t->offset;
}
