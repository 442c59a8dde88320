/* gguf.h - read and write GGUF files (versions 2 and 3).
 *
 * Reading: the file is mmapped read-only and validated completely at open:
 * every length, count, offset and dimension is checked against the file size
 * and for overflow before use, so that no later accessor can read out of
 * bounds. After a successful open, the accessors below need no checks.
 * Any failure names the file, the byte offset and the field, e.g.
 *   "m.gguf: offset 24: tensor count 2^62 overflows the file (7331 bytes)".
 *
 * File layout (little-endian):
 *   magic "GGUF" | u32 version | u64 n_tensors | u64 n_meta       (v1 used u32 counts: refused)
 *   n_meta x { string key | u32 type | value }
 *   n_tensors x { string name | u32 n_dims | n_dims x u64 ne | u32 ggml type | u64 offset }
 *   padding to general.alignment (default 32)
 *   tensor data; each tensor's offset is relative to the data start and
 *   aligned to general.alignment
 *   string = u64 len | len bytes (not NUL-terminated)
 *   array  = u32 elem type | u64 n | n elements
 *
 * Strings returned here point into the mapping (gguf_str, not NUL-terminated)
 * and live as long as the gguf_file.
 */
#ifndef PL_GGUF_H
#define PL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
} gguf_type;

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32
/* Arrays nested deeper than this are refused at open (bounds the recursion
 * of the reader, the writer and every walker of gguf_value). */
#define GGUF_MAX_ARRAY_DEPTH 8

typedef struct {
    const char *ptr; /* into the mapping (or the writer's copy); not NUL-terminated */
    uint64_t len;
} gguf_str;

/* A metadata value. Scalars are decoded; arrays keep a pointer to their
 * packed little-endian elements, and string / nested arrays are indexed at
 * open time so that element i is O(1). */
typedef struct gguf_value {
    gguf_type type;
    union {
        uint64_t u64;  /* UINT8/16/32/64, BOOL (0/1) */
        int64_t i64;   /* INT8/16/32/64 */
        double f64;    /* FLOAT32/64 */
        gguf_str str;  /* STRING */
        struct {
            gguf_type elem;            /* element type */
            uint64_t n;                /* element count */
            const uint8_t *data;       /* packed scalar elements (unaligned) */
            const gguf_str *strs;      /* n strings when elem == STRING */
            const struct gguf_value *vals; /* n values when elem == ARRAY */
        } arr;
    } v;
} gguf_value;

typedef struct {
    gguf_str key;
    gguf_value value;
    uint64_t file_offset; /* where the key starts, for error messages */
} gguf_meta;

typedef struct {
    gguf_str name;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the row length (contiguous); unused dims are 1 */
    uint32_t type;              /* ggml type id (see tensor/dtype.h) */
    uint64_t offset;            /* relative to the data section */
    uint64_t nbytes;            /* exact data size */
    const void *data;           /* into the mapping */
    uint32_t shard;             /* 0: this file; i: the i-th joined shard (gguf_shard) */
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* Open, mmap and validate path. On failure *out is untouched and the error
 * text names path, the offset and the field. */
int gguf_open(gguf_file **out, const char *path);

/* The same over a caller-owned buffer (fuzzing, tests); name is used in
 * errors. The buffer must outlive the gguf_file. */
int gguf_open_mem(gguf_file **out, const void *data, size_t size, const char *name);

void gguf_close(gguf_file *f);

const char *gguf_path(const gguf_file *f);
uint32_t gguf_version(const gguf_file *f);
uint32_t gguf_alignment(const gguf_file *f);
uint64_t gguf_file_size(const gguf_file *f);
uint64_t gguf_data_offset(const gguf_file *f); /* absolute offset of the data section */
/* The file's bytes, gguf_file_size() of them (the mapping, or the caller's
 * buffer for gguf_open_mem): the header is [0, gguf_data_offset()). */
const uint8_t *gguf_file_bytes(const gguf_file *f);

uint64_t gguf_meta_count(const gguf_file *f);
const gguf_meta *gguf_meta_at(const gguf_file *f, uint64_t i);
const gguf_meta *gguf_meta_find(const gguf_file *f, const char *key); /* NULL if absent */

uint64_t gguf_tensor_count(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, uint64_t i);
const gguf_tensor *gguf_tensor_find(const gguf_file *f, const char *name); /* NULL if absent */

/* ------------------------------------------------------- split models */
/* A model split by llama.cpp's gguf-split is PREFIX-00001-of-0000N.gguf ...
 * PREFIX-0000N-of-0000N.gguf, each holding split.no (0-based), split.count
 * and split.tensors.count; the first holds the metadata. gguf_open_model
 * opens the first, finds the others by that rule, validates each (count,
 * index, no tensor twice, the total) and joins their tensors into the
 * first's directory: gguf_tensor_count/at/find then see the whole model,
 * each tensor's data still in its own shard's mapping (zero-copy). A file
 * without split.count (or with 1) opens as gguf_open does. */
int gguf_open_model(gguf_file **out, const char *path);

/* Adds shard's tensors to f's directory; on success f owns shard (closed
 * with f). Fails, changing nothing, if a name is already in f. */
int gguf_join_shard(gguf_file *f, gguf_file *shard);
uint32_t gguf_shard_count(const gguf_file *f);                 /* 1 + joined shards */
const gguf_file *gguf_shard(const gguf_file *f, uint32_t i);   /* 0: f itself */
/* The file that holds t's data, and the absolute offset there. */
const char *gguf_tensor_path(const gguf_file *f, const gguf_tensor *t);
uint64_t gguf_tensor_file_offset(const gguf_file *f, const gguf_tensor *t);

/* Typed lookups. Return 0 and set *out; PL_ENOTFOUND (error text set) if the
 * key is absent; PL_EFORMAT if the value has the wrong type or does not fit
 * (e.g. a negative INT32 asked as u32). Integer getters accept any integer
 * type whose value fits. */
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out);
int gguf_get_i32(const gguf_file *f, const char *key, int32_t *out);
int gguf_get_f32(const gguf_file *f, const char *key, float *out); /* FLOAT32/64 */
int gguf_get_bool(const gguf_file *f, const char *key, bool *out);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);
/* An ARRAY value; elem_type GGUF_TYPE_COUNT accepts any element type. */
int gguf_get_arr(const gguf_file *f, const char *key, gguf_type elem_type, const gguf_value **out);

/* Element i of a scalar array value (caller checks i < n and the type). */
float gguf_arr_f32(const gguf_value *arr, uint64_t i);   /* FLOAT32 */
int32_t gguf_arr_i32(const gguf_value *arr, uint64_t i); /* INT32 */
uint32_t gguf_arr_u32(const gguf_value *arr, uint64_t i);/* UINT32 */
uint8_t gguf_arr_u8(const gguf_value *arr, uint64_t i);  /* UINT8/INT8/BOOL */

/* Compare a gguf_str with a C string. */
bool gguf_str_eq(gguf_str s, const char *c);

const char *gguf_type_name(gguf_type t);

/* Bytes of one element of a scalar type; 0 for STRING, ARRAY and unknown. */
size_t gguf_type_size(gguf_type t);

/* ---------------------------------------------------------------- writer */

typedef struct gguf_writer gguf_writer;

/* Fills dst (nbytes) with tensor idx's data; returns 0 or a negative error. */
typedef int (*gguf_fill_fn)(void *user, uint64_t idx, void *dst, uint64_t nbytes);

gguf_writer *gguf_writer_new(void); /* NULL on ENOMEM, error text set */
void gguf_writer_free(gguf_writer *w);

/* Metadata, in insertion order; setting a key again replaces its value in
 * place. Strings and arrays are copied. */
int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
int gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v);
int gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
int gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
int gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
/* Array of n scalars of elem type (packed LE, element size of that type). */
int gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_type elem, const void *data, uint64_t n);
int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const gguf_str *strs, uint64_t n);
/* Deep copy of any value read from a gguf_file (nested arrays included). */
int gguf_writer_set_value(gguf_writer *w, const char *key, const gguf_value *v);

/* Declare a tensor. data may be NULL, in which case the fill callback given to
 * gguf_writer_write produces it; otherwise data (nbytes of the type's row
 * size x rows) must stay valid until the write. Returns the tensor's index. */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const uint64_t *ne, const void *data);

/* Writes the file (version 3, alignment from general.alignment if set, else 32)
 * to path; tensors declared with data NULL are produced by fill (one at a
 * time, so memory stays bounded by the largest tensor). Writes to a temporary
 * name and renames, so a failed write leaves no partial file. */
int gguf_writer_write(gguf_writer *w, const char *path, gguf_fill_fn fill, void *user);

/* Writes the same model as n_split shards PREFIX-0000i-of-0000N.gguf (as
 * llama.cpp's gguf-split): the tensors in order, cut into n_split runs of
 * about equal bytes (each at least one tensor); the first shard holds all
 * metadata, every shard split.no, split.count and split.tensors.count.
 * n_split must be 1..min(tensors, 99999). On failure no shard is left. */
int gguf_writer_write_split(gguf_writer *w, const char *prefix, uint32_t n_split, gguf_fill_fn fill, void *user);

#endif
