/* gguf_value.c - typed lookups of GGUF metadata and array element access.
 *
 * Works only through the public accessors of gguf_read.c. The getters convert
 * between integer widths only when the value fits, so a caller asking for a
 * u32 never sees a silently wrapped negative or 64-bit value; every refusal
 * names the file, the key's offset and the key.
 *
 * Array elements are packed little-endian and unaligned in the file; they are
 * assembled byte by byte (which compilers turn into one load on x86/ARM).
 */
#include "gguf/gguf.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"

static const char *const type_names[GGUF_TYPE_COUNT] = {
    [GGUF_TYPE_UINT8] = "UINT8",     [GGUF_TYPE_INT8] = "INT8",       [GGUF_TYPE_UINT16] = "UINT16",
    [GGUF_TYPE_INT16] = "INT16",     [GGUF_TYPE_UINT32] = "UINT32",   [GGUF_TYPE_INT32] = "INT32",
    [GGUF_TYPE_FLOAT32] = "FLOAT32", [GGUF_TYPE_BOOL] = "BOOL",       [GGUF_TYPE_STRING] = "STRING",
    [GGUF_TYPE_ARRAY] = "ARRAY",     [GGUF_TYPE_UINT64] = "UINT64",   [GGUF_TYPE_INT64] = "INT64",
    [GGUF_TYPE_FLOAT64] = "FLOAT64",
};

const char *gguf_type_name(gguf_type t)
{
    return (unsigned)t < GGUF_TYPE_COUNT ? type_names[t] : "UNKNOWN";
}

bool gguf_str_eq(gguf_str s, const char *c)
{
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}

/* ------------------------------------------------------------- lookups */

static int meta_get(const gguf_file *f, const char *key, const gguf_meta **out)
{
    const gguf_meta *kv = gguf_meta_find(f, key);
    if (!kv) return err_set(PL_ENOTFOUND, "%s: key '%s' not found", gguf_path(f), key ? key : "(null)");
    *out = kv;
    return 0;
}

static int meta_bad(const gguf_file *f, const gguf_meta *kv, const char *key, const char *why)
{
    return err_set(PL_EFORMAT, "%s: offset %" PRIu64 ": key '%s': type %s, %s", gguf_path(f), kv->file_offset, key,
                   gguf_type_name(kv->value.type), why);
}

static bool type_unsigned(gguf_type t)
{
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 || t == GGUF_TYPE_UINT64;
}

static bool type_signed(gguf_type t)
{
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 || t == GGUF_TYPE_INT64;
}

/* An integer value of key within [lo, hi] (lo <= 0 <= hi); hi as u64 so
 * that u64 keys work. Signed values go through *is, unsigned through *us. */
static int meta_int(const gguf_file *f, const char *key, int64_t lo, uint64_t hi, int64_t *is, uint64_t *us,
                  const char *want)
{
    const gguf_meta *kv = NULL;
    int rc = meta_get(f, key, &kv);
    if (rc) return rc;
    gguf_type t = kv->value.type;
    char why[96];
    if (type_unsigned(t)) {
        uint64_t v = kv->value.v.u64;
        if (v <= hi) {
            *us = v;
            *is = v <= INT64_MAX ? (int64_t)v : 0;
            return 0;
        }
        snprintf(why, sizeof why, "value %" PRIu64 " does not fit in %s", v, want);
        return meta_bad(f, kv, key, why);
    }
    if (type_signed(t)) {
        int64_t v = kv->value.v.i64;
        if (v >= lo && (v < 0 || (uint64_t)v <= hi)) {
            *is = v;
            *us = (uint64_t)v;
            return 0;
        }
        snprintf(why, sizeof why, "value %" PRId64 " does not fit in %s", v, want);
        return meta_bad(f, kv, key, why);
    }
    snprintf(why, sizeof why, "expected an integer (%s)", want);
    return meta_bad(f, kv, key, why);
}

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out)
{
    int64_t s;
    uint64_t u;
    int rc = meta_int(f, key, 0, UINT32_MAX, &s, &u, "u32");
    if (!rc) *out = (uint32_t)u;
    return rc;
}

int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out)
{
    int64_t s;
    uint64_t u;
    int rc = meta_int(f, key, 0, UINT64_MAX, &s, &u, "u64");
    if (!rc) *out = u;
    return rc;
}

int gguf_get_i32(const gguf_file *f, const char *key, int32_t *out)
{
    int64_t s;
    uint64_t u;
    int rc = meta_int(f, key, INT32_MIN, INT32_MAX, &s, &u, "i32");
    if (!rc) *out = (int32_t)s;
    return rc;
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out)
{
    const gguf_meta *kv = NULL;
    int rc = meta_get(f, key, &kv);
    if (rc) return rc;
    if (kv->value.type != GGUF_TYPE_FLOAT32 && kv->value.type != GGUF_TYPE_FLOAT64)
        return meta_bad(f, kv, key, "expected FLOAT32 or FLOAT64");
    double d = kv->value.v.f64;
    if (isfinite(d) && !isfinite((float)d)) return meta_bad(f, kv, key, "value does not fit in f32");
    *out = (float)d;
    return 0;
}

int gguf_get_bool(const gguf_file *f, const char *key, bool *out)
{
    const gguf_meta *kv = NULL;
    int rc = meta_get(f, key, &kv);
    if (rc) return rc;
    if (kv->value.type != GGUF_TYPE_BOOL) return meta_bad(f, kv, key, "expected BOOL");
    *out = kv->value.v.u64 != 0;
    return 0;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out)
{
    const gguf_meta *kv = NULL;
    int rc = meta_get(f, key, &kv);
    if (rc) return rc;
    if (kv->value.type != GGUF_TYPE_STRING) return meta_bad(f, kv, key, "expected STRING");
    *out = kv->value.v.str;
    return 0;
}

int gguf_get_arr(const gguf_file *f, const char *key, gguf_type elem_type, const gguf_value **out)
{
    const gguf_meta *kv = NULL;
    int rc = meta_get(f, key, &kv);
    if (rc) return rc;
    if (kv->value.type != GGUF_TYPE_ARRAY) return meta_bad(f, kv, key, "expected ARRAY");
    if (elem_type != GGUF_TYPE_COUNT && kv->value.v.arr.elem != elem_type) {
        char why[96];
        snprintf(why, sizeof why, "array of %s, expected an array of %s", gguf_type_name(kv->value.v.arr.elem),
                 gguf_type_name(elem_type));
        return meta_bad(f, kv, key, why);
    }
    *out = &kv->value;
    return 0;
}

/* ------------------------------------------------------------- elements */

static uint32_t ld32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

float gguf_arr_f32(const gguf_value *arr, uint64_t i)
{
    uint32_t u = ld32(arr->v.arr.data + 4 * i);
    float x;
    memcpy(&x, &u, 4);
    return x;
}

int32_t gguf_arr_i32(const gguf_value *arr, uint64_t i) { return (int32_t)ld32(arr->v.arr.data + 4 * i); }
uint32_t gguf_arr_u32(const gguf_value *arr, uint64_t i) { return ld32(arr->v.arr.data + 4 * i); }
uint8_t gguf_arr_u8(const gguf_value *arr, uint64_t i) { return arr->v.arr.data[i]; }
