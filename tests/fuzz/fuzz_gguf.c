/* fuzz_gguf.c - libFuzzer target for the GGUF reader (and, for the inputs it
 * accepts, the writer).
 *
 * Each input is opened with gguf_open_mem over libFuzzer's exact-size buffer
 * (so ASan flags any byte read past it). A refusal must be PL_EFORMAT with an
 * "offset N:" message. An accepted file is walked completely (every KV, every
 * array element, first and last byte of every tensor, every lookup), then
 * rewritten through the writer and reopened: the copy must hold the same KVs
 * and tensors; with two tensors or more it is also written as a two-shard
 * split set and opened as one model (gguf_open_model), which must hold the
 * same. The model config is read from it too (model_config_read): a
 * refusal must say what, an accepted config must hold its invariants and
 * give finite RoPE tables. Any broken property aborts, which libFuzzer
 * reports as a crash.
 *
 * Built with -DFUZZ_SEEDGEN instead, this file is a plain program that writes
 * a seed corpus: small writer-made files covering every value type, nested
 * arrays, custom alignment and several tensor types, plus a metadata-only
 * copy of each GGUF named on the command line.
 *
 *   tests/fuzz/run.sh SECONDS   builds both and runs the fuzzer
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/rope_scaling.h"
#include "tensor/dtype.h"

/* ------------------------------------------------------------ checks */

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_gguf: broken property: %s (%s)\n", what, err_msg());
    abort();
}

static unsigned walk_value(const gguf_value *v, int depth)
{
    unsigned sum = 0;
    if (depth >= GGUF_MAX_ARRAY_DEPTH) fail("nesting deeper than the limit");
    if (v->type == GGUF_TYPE_STRING) {
        for (uint64_t i = 0; i < v->v.str.len; i++) sum += (uint8_t)v->v.str.ptr[i];
        return sum;
    }
    if (v->type != GGUF_TYPE_ARRAY) return (unsigned)v->v.u64;
    size_t sz = gguf_type_size(v->v.arr.elem);
    for (uint64_t i = 0; i < v->v.arr.n; i++) {
        if (v->v.arr.elem == GGUF_TYPE_STRING) {
            gguf_value s = {.type = GGUF_TYPE_STRING, .v.str = v->v.arr.strs[i]};
            sum += walk_value(&s, depth);
        } else if (v->v.arr.elem == GGUF_TYPE_ARRAY) {
            if (v->v.arr.vals[i].type != GGUF_TYPE_ARRAY) fail("element of an array of arrays is not an array");
            sum += walk_value(&v->v.arr.vals[i], depth + 1);
        } else {
            if (sz == 0) fail("scalar array of a non-scalar type");
            sum += v->v.arr.data[i * sz] + v->v.arr.data[i * sz + sz - 1];
        }
    }
    return sum;
}

static void cstr(char *dst, size_t n, gguf_str s)
{
    size_t k = s.len < n - 1 ? (size_t)s.len : n - 1;
    memcpy(dst, s.ptr, k);
    dst[k] = 0;
}

static unsigned walk_file(const gguf_file *f, const uint8_t *lo, const uint8_t *hi)
{
    unsigned sum = 0;
    char name[1024];
    for (uint64_t i = 0; i < gguf_meta_count(f); i++) {
        const gguf_meta *kv = gguf_meta_at(f, i);
        sum += walk_value(&kv->value, 0);
        cstr(name, sizeof name, kv->key);
        if (kv->key.len < sizeof name && gguf_meta_find(f, name) != kv) fail("gguf_meta_find misses a key");
    }
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        const uint8_t *d = t->data;
        if (t->nbytes == 0 || d < lo || d + t->nbytes > hi) fail("tensor data outside the buffer");
        if (t->offset % gguf_alignment(f) != 0) fail("unaligned tensor");
        if (dtype_row_bytes(t->type, t->ne[0]) == 0) fail("bad row length accepted");
        sum += d[0] + d[t->nbytes - 1];
        cstr(name, sizeof name, t->name);
        if (t->name.len < sizeof name && gguf_tensor_find(f, name) != t) fail("gguf_tensor_find misses a tensor");
    }
    return sum;
}

/* Same KVs (deep) and tensors (bytes) in the same order. */
static bool value_same(const gguf_value *a, const gguf_value *b)
{
    if (a->type != b->type) return false;
    if (a->type == GGUF_TYPE_STRING)
        return a->v.str.len == b->v.str.len && !memcmp(a->v.str.ptr, b->v.str.ptr, a->v.str.len);
    if (a->type == GGUF_TYPE_FLOAT32 || a->type == GGUF_TYPE_FLOAT64) return !memcmp(&a->v.f64, &b->v.f64, 8);
    if (a->type != GGUF_TYPE_ARRAY) return a->v.u64 == b->v.u64;
    if (a->v.arr.elem != b->v.arr.elem || a->v.arr.n != b->v.arr.n) return false;
    for (uint64_t i = 0; i < a->v.arr.n; i++) {
        if (a->v.arr.elem == GGUF_TYPE_STRING) {
            gguf_value x = {.type = GGUF_TYPE_STRING, .v.str = a->v.arr.strs[i]};
            gguf_value y = {.type = GGUF_TYPE_STRING, .v.str = b->v.arr.strs[i]};
            if (!value_same(&x, &y)) return false;
        } else if (a->v.arr.elem == GGUF_TYPE_ARRAY && !value_same(&a->v.arr.vals[i], &b->v.arr.vals[i])) {
            return false;
        }
    }
    size_t sz = gguf_type_size(a->v.arr.elem);
    return !sz || !a->v.arr.n || !memcmp(a->v.arr.data, b->v.arr.data, (size_t)a->v.arr.n * sz);
}

static void check_same(const gguf_file *a, const gguf_file *b)
{
    if (gguf_meta_count(a) != gguf_meta_count(b) || gguf_tensor_count(a) != gguf_tensor_count(b)) fail("counts differ");
    for (uint64_t i = 0; i < gguf_meta_count(a); i++) {
        const gguf_meta *x = gguf_meta_at(a, i), *y = gguf_meta_at(b, i);
        if (x->key.len != y->key.len || memcmp(x->key.ptr, y->key.ptr, x->key.len)) fail("key differs");
        if (!value_same(&x->value, &y->value)) fail("value differs");
    }
    for (uint64_t i = 0; i < gguf_tensor_count(a); i++) {
        const gguf_tensor *x = gguf_tensor_at(a, i), *y = gguf_tensor_at(b, i);
        if (x->type != y->type || x->nbytes != y->nbytes || memcmp(x->ne, y->ne, sizeof x->ne) ||
            memcmp(x->data, y->data, x->nbytes))
            fail("tensor differs");
    }
}

/* Writes w as two shards next to path and opens them as one model: every
 * tensor of f (by name, same bytes) and every key of f but split.* are
 * there. */
static void split_round_trip(const gguf_file *f, gguf_writer *w, const char *path)
{
    char prefix[96], first[128], name[1024];
    snprintf(prefix, sizeof prefix, "%s-split", path);
    snprintf(first, sizeof first, "%s-00001-of-00002.gguf", prefix);
    if (gguf_writer_write_split(w, prefix, 2, NULL, NULL) != 0) fail("split write failed");
    gguf_file *g = NULL;
    if (gguf_open_model(&g, first) != 0) fail("the reader refused the writer's split set");
    if (gguf_tensor_count(g) != gguf_tensor_count(f)) fail("split: tensor count differs");
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *x = gguf_tensor_at(f, i);
        cstr(name, sizeof name, x->name);
        const gguf_tensor *y = gguf_tensor_find(g, name);
        if (!y || x->type != y->type || x->nbytes != y->nbytes || memcmp(x->data, y->data, x->nbytes))
            fail("split: tensor differs");
    }
    for (uint64_t i = 0; i < gguf_meta_count(f); i++) {
        const gguf_meta *kv = gguf_meta_at(f, i);
        if (kv->key.len >= sizeof name) continue;
        cstr(name, sizeof name, kv->key);
        if (strncmp(name, "split.", 6) == 0) continue;
        const gguf_meta *o = gguf_meta_find(g, name);
        if (!o || !value_same(&kv->value, &o->value)) fail("split: key differs");
    }
    gguf_close(g);
    unlink(first);
    snprintf(first, sizeof first, "%s-00002-of-00002.gguf", prefix);
    unlink(first);
}

/* Rewrites an accepted file and checks the copy. The writer refuses what
 * llama.cpp would (tensor names of 64+ bytes): then there is nothing to do. */
static void round_trip(const gguf_file *f, const char *path)
{
    gguf_writer *w = gguf_writer_new();
    char name[1024];
    int rc = w ? 0 : PL_ENOMEM;
    for (uint64_t i = 0; !rc && i < gguf_meta_count(f); i++) {
        const gguf_meta *kv = gguf_meta_at(f, i);
        if (kv->key.len >= sizeof name) rc = 1;
        cstr(name, sizeof name, kv->key);
        if (!rc) rc = gguf_writer_set_value(w, name, &kv->value);
        if (rc < 0) fail("the writer refused a value the reader accepted");
    }
    for (uint64_t i = 0; !rc && i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (t->name.len >= 64) rc = 1;
        cstr(name, sizeof name, t->name);
        if (!rc && gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data) != (int)i)
            fail("the writer refused a tensor the reader accepted");
    }
    if (!rc && gguf_writer_write(w, path, NULL, NULL) != 0) fail("write failed");
    if (!rc && gguf_tensor_count(f) >= 2) split_round_trip(f, w, path);
    gguf_writer_free(w);
    if (rc) return;
    gguf_file *g = NULL;
    if (gguf_open(&g, path) != 0) fail("the reader refused the writer's copy");
    check_same(f, g);
    gguf_close(g);
    unlink(path);
}

/* The config of an accepted file: refused with a message, or consistent. */
static void check_config(const gguf_file *f)
{
    model_config c;
    if (model_config_read(f, &c) != 0) {
        if (!err_msg()[0]) fail("config refused without a message");
        return;
    }
    if (c.n_heads % c.n_kv_heads || c.rope_dim > c.head_dim || c.rope_dim % 2 || !(c.rope_base > 0) ||
        !(c.rope_scale > 0) || !(c.rope_base_local > 0) || !(c.rope_scale_local > 0) || c.attn_softcap < 0 ||
        c.final_softcap < 0 || (c.local_window == 0 && model_config_layer_local(&c, 0)))
        fail("accepted config breaks an invariant");
    float cs[1024];
    const rope_spec specs[2] = {
        rope_spec_make(&c.rope_scaling, c.rope_dim, c.rope_base, c.rope_scale, c.rope_scale, NULL),
        rope_spec_make(&c.rope_scaling, c.rope_dim, c.rope_base_local, c.rope_scale_local, c.rope_scale, NULL)};
    for (int k = 0; k < 2; k++) {
        rope_spec_table(&specs[k], cs, 4095);
        for (uint32_t i = 0; i < c.rope_dim; i++)
            if (!isfinite(cs[i])) fail("accepted config gives a RoPE table that is not finite");
    }
}

#ifndef FUZZ_SEEDGEN

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[64];
    if (!path[0])
        snprintf(path, sizeof path, "%s/fuzz-gguf-%d.gguf", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp",
                 (int)getpid());
    gguf_file *f = NULL;
    int rc = gguf_open_mem(&f, data, size, "fuzz");
    if (rc != 0) {
        if (rc != PL_EFORMAT || f != NULL || strncmp(err_msg(), "fuzz: offset ", 13) != 0) fail("bad refusal");
        return 0;
    }
    volatile unsigned sink = walk_file(f, data, data + size);
    (void)sink;
    check_config(f);
    round_trip(f, path);
    gguf_close(f);
    return 0;
}

#else /* FUZZ_SEEDGEN */

static int seed_all_types(const char *dir)
{
    static const uint8_t u8s[3] = {0, 7, 255};
    static const int64_t i64s[2] = {-1, 42};
    static const double f64s[2] = {3.25, -1e300};
    static const uint8_t bools[2] = {1, 0};
    static const gguf_str strs[3] = {{"a", 1}, {"", 0}, {"\xe2\x96\x81x", 4}};
    static const int32_t ints[2] = {1, -2};
    static float fdata[64];
    gguf_value inner = {.type = GGUF_TYPE_ARRAY, .v.arr = {.elem = GGUF_TYPE_INT32, .n = 2, .data = (const uint8_t *)ints}};
    gguf_value nested = {.type = GGUF_TYPE_ARRAY, .v.arr = {.elem = GGUF_TYPE_ARRAY, .n = 1, .vals = &inner}};
    gguf_value i8 = {.type = GGUF_TYPE_INT8, .v.i64 = -3}, u16 = {.type = GGUF_TYPE_UINT16, .v.u64 = 9};
    uint64_t ne_f32[2] = {8, 8}, ne_q[1] = {32}, ne_k[1] = {256};
    static uint8_t q4[18], q4k[144];
    char path[512];
    gguf_writer *w = gguf_writer_new();
    int rc = !w;
    if (!rc) rc = gguf_writer_set_u32(w, "general.alignment", 64);
    if (!rc) rc = gguf_writer_set_str(w, "general.architecture", "llama");
    if (!rc) rc = gguf_writer_set_i32(w, "i32", -1);
    if (!rc) rc = gguf_writer_set_u64(w, "u64", 1ull << 40);
    if (!rc) rc = gguf_writer_set_f32(w, "f32", 0.5f);
    if (!rc) rc = gguf_writer_set_bool(w, "bool", true);
    if (!rc) rc = gguf_writer_set_value(w, "i8", &i8);
    if (!rc) rc = gguf_writer_set_value(w, "u16", &u16);
    if (!rc) rc = gguf_writer_set_arr(w, "a.u8", GGUF_TYPE_UINT8, u8s, 3);
    if (!rc) rc = gguf_writer_set_arr(w, "a.i64", GGUF_TYPE_INT64, i64s, 2);
    if (!rc) rc = gguf_writer_set_arr(w, "a.f64", GGUF_TYPE_FLOAT64, f64s, 2);
    if (!rc) rc = gguf_writer_set_arr(w, "a.bool", GGUF_TYPE_BOOL, bools, 2);
    if (!rc) rc = gguf_writer_set_arr_str(w, "a.str", strs, 3);
    if (!rc) rc = gguf_writer_set_value(w, "a.nested", &nested);
    if (!rc && gguf_writer_add_tensor(w, "f32", DT_F32, 2, ne_f32, fdata) < 0) rc = 1;
    if (!rc && gguf_writer_add_tensor(w, "q4_0", DT_Q4_0, 1, ne_q, q4) < 0) rc = 1;
    if (!rc && gguf_writer_add_tensor(w, "q4_K", DT_Q4_K, 1, ne_k, q4k) < 0) rc = 1;
    snprintf(path, sizeof path, "%s/seed-all-types.gguf", dir);
    if (!rc) rc = gguf_writer_write(w, path, NULL, NULL);
    gguf_writer_free(w);
    return rc;
}

/* The metadata of src with no tensors (its data would make a huge seed). */
static int seed_meta_of(const char *dir, const char *src)
{
    gguf_file *f = NULL;
    char path[512], key[1024];
    if (gguf_open(&f, src) != 0) return 1;
    gguf_writer *w = gguf_writer_new();
    int rc = !w;
    for (uint64_t i = 0; !rc && i < gguf_meta_count(f); i++) {
        const gguf_value *v = &gguf_meta_at(f, i)->value;
        cstr(key, sizeof key, gguf_meta_at(f, i)->key);
        /* keep arrays short: the fuzzer mutates structure, not volume */
        gguf_value cut = *v;
        if (cut.type == GGUF_TYPE_ARRAY && cut.v.arr.n > 16) cut.v.arr.n = 16;
        rc = gguf_writer_set_value(w, key, &cut);
    }
    const char *base = strrchr(src, '/') ? strrchr(src, '/') + 1 : src;
    snprintf(path, sizeof path, "%s/seed-meta-%s", dir, base);
    if (!rc) rc = gguf_writer_write(w, path, NULL, NULL);
    gguf_writer_free(w);
    gguf_close(f);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s OUTDIR [model.gguf...]\n", argv[0]);
        return 2;
    }
    if (seed_all_types(argv[1]) != 0) {
        fprintf(stderr, "seedgen: %s\n", err_msg());
        return 1;
    }
    for (int i = 2; i < argc; i++)
        if (seed_meta_of(argv[1], argv[i]) != 0) fprintf(stderr, "seedgen: %s: %s\n", argv[i], err_msg());
    return 0;
}

#endif
