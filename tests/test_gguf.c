/* test_gguf.c - GGUF reader and writer: real files, round trips through the
 * writer (and llama.cpp), and every way a file can be broken.
 *
 * Scratch files live in a mkdtemp directory under /tmp, removed at the end.
 * Crafted files are built byte by byte with the bb_* helpers below, so each
 * validation of the reader is hit by a file that breaks exactly one rule;
 * every refusal must be PL_EFORMAT with "offset N:" and the field named.
 */
#include <dirent.h>
#include <inttypes.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "gguf/gguf.h"
#include "tensor/dtype.h"
#include "test.h"

static char tmpdir[64];

/* This thread's CPU time: a loaded machine does not inflate it. */
static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void tmp_path(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", tmpdir, name); }

static uint8_t *read_all(const char *path, size_t *size)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    if (b && fread(b, 1, (size_t)n, fp) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(fp);
    *size = (size_t)n;
    return b;
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Number of entries in tmpdir whose name starts with prefix. */
static int dir_count(const char *prefix)
{
    DIR *d = opendir(tmpdir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
    if (d) closedir(d);
    return n;
}

/* ------------------------------------------------------------ walking */

static bool str_same(gguf_str a, gguf_str b) { return a.len == b.len && (!a.len || !memcmp(a.ptr, b.ptr, a.len)); }

static bool value_eq(const gguf_value *a, const gguf_value *b)
{
    if (a->type != b->type) return false;
    if (a->type == GGUF_TYPE_STRING) return str_same(a->v.str, b->v.str);
    if (a->type == GGUF_TYPE_FLOAT32 || a->type == GGUF_TYPE_FLOAT64)
        return memcmp(&a->v.f64, &b->v.f64, sizeof(double)) == 0;
    if (a->type != GGUF_TYPE_ARRAY) return a->v.u64 == b->v.u64;
    if (a->v.arr.elem != b->v.arr.elem || a->v.arr.n != b->v.arr.n) return false;
    for (uint64_t i = 0; i < a->v.arr.n; i++) {
        if (a->v.arr.elem == GGUF_TYPE_STRING && !str_same(a->v.arr.strs[i], b->v.arr.strs[i])) return false;
        if (a->v.arr.elem == GGUF_TYPE_ARRAY && !value_eq(&a->v.arr.vals[i], &b->v.arr.vals[i])) return false;
    }
    size_t sz = gguf_type_size(a->v.arr.elem);
    return !sz || !a->v.arr.n || memcmp(a->v.arr.data, b->v.arr.data, a->v.arr.n * sz) == 0;
}

/* Touches every byte a value points at (ASan checks the reads); returns a
 * checksum so the reads are not optimized out; -1 on an inconsistency. */
static long long walk_value(const gguf_value *v, int depth, const uint8_t *lo, const uint8_t *hi)
{
    long long sum = 0;
    if (depth >= GGUF_MAX_ARRAY_DEPTH) return -1;
    if (v->type == GGUF_TYPE_STRING) {
        if (v->v.str.len && ((const uint8_t *)v->v.str.ptr < lo || (const uint8_t *)v->v.str.ptr + v->v.str.len > hi))
            return -1;
        for (uint64_t i = 0; i < v->v.str.len; i++) sum += (uint8_t)v->v.str.ptr[i];
        return sum;
    }
    if (v->type != GGUF_TYPE_ARRAY) return (long long)(v->v.u64 & 0xff);
    for (uint64_t i = 0; i < v->v.arr.n; i++) {
        long long s = 0;
        if (v->v.arr.elem == GGUF_TYPE_STRING) {
            gguf_value e = {.type = GGUF_TYPE_STRING, .v.str = v->v.arr.strs[i]};
            s = walk_value(&e, depth, lo, hi);
        } else if (v->v.arr.elem == GGUF_TYPE_ARRAY) {
            s = v->v.arr.vals[i].type == GGUF_TYPE_ARRAY ? walk_value(&v->v.arr.vals[i], depth + 1, lo, hi) : -1;
        } else {
            size_t sz = gguf_type_size(v->v.arr.elem);
            if (v->v.arr.data + (i + 1) * sz > hi) return -1;
            s = v->v.arr.data[i * sz] + v->v.arr.data[i * sz + sz - 1];
        }
        if (s < 0) return -1;
        sum += s;
    }
    return sum;
}

/* Walks every KV and tensor of f (opened over [lo, hi)) and checks that the
 * lookups find what the iteration finds. Returns 0 if consistent. */
static int walk_file(const gguf_file *f, const uint8_t *lo, const uint8_t *hi)
{
    char name[256];
    for (uint64_t i = 0; i < gguf_meta_count(f); i++) {
        const gguf_meta *kv = gguf_meta_at(f, i);
        if (walk_value(&kv->value, 0, lo, hi) < 0) return 1;
        if (kv->key.len < sizeof name) {
            memcpy(name, kv->key.ptr, kv->key.len);
            name[kv->key.len] = 0;
            if (gguf_meta_find(f, name) != kv) return 2;
        }
    }
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        const uint8_t *d = t->data;
        if (d < lo || d + t->nbytes > hi || t->nbytes == 0) return 3;
        if (t->offset % gguf_alignment(f)) return 4;
        volatile uint8_t x = d[0] ^ d[t->nbytes - 1];
        (void)x;
        if (t->name.len < sizeof name) {
            memcpy(name, t->name.ptr, t->name.len);
            name[t->name.len] = 0;
            if (gguf_tensor_find(f, name) != t) return 5;
        }
    }
    return gguf_meta_at(f, gguf_meta_count(f)) == NULL && gguf_tensor_at(f, gguf_tensor_count(f)) == NULL ? 0 : 6;
}

/* ------------------------------------------------------------ real files */

TEST(stories260k_opens)
{
    gguf_file *f = NULL;
    int rc = gguf_open(&f, SHARED_MODELS "/stories260K.gguf");
    CHECK_MSG(rc == 0, "open: %s", err_msg());
    uint32_t u = 0;
    gguf_str s;
    const gguf_value *arr = NULL;
    const gguf_tensor *t = gguf_tensor_find(f, "token_embd.weight");
    int ok = gguf_version(f) == 3 && gguf_meta_count(f) == 19 && gguf_tensor_count(f) == 48 &&
             gguf_get_u32(f, "llama.context_length", &u) == 0 && u == 2048 &&
             gguf_get_u32(f, "llama.rope.dimension_count", &u) == 0 && u == 8 &&
             gguf_get_str(f, "general.architecture", &s) == 0 && gguf_str_eq(s, "llama") &&
             t && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 512 && t->type == DT_F32 && t->nbytes == 64 * 512 * 4 &&
             gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &arr) == 0 && arr->v.arr.n == 512 &&
             gguf_str_eq(arr->v.arr.strs[1], "<s>") && gguf_str_eq(arr->v.arr.strs[2], "</s>");
    /* the data of the last tensor ends exactly at EOF (README) */
    uint64_t end = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *x = gguf_tensor_at(f, i);
        if (x->offset + x->nbytes > end) end = x->offset + x->nbytes;
    }
    int walked = walk_file(f, (const uint8_t *)gguf_tensor_at(f, 0)->data - gguf_data_offset(f),
                           (const uint8_t *)gguf_tensor_at(f, 0)->data - gguf_data_offset(f) + gguf_file_size(f));
    float eps = 0;
    int eps_rc = gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps);
    uint64_t data_end = gguf_data_offset(f) + end, size = gguf_file_size(f);
    gguf_close(f);
    CHECK(ok);
    CHECK_EQ_INT(walked, 0);
    CHECK_EQ_INT(eps_rc, 0);
    CHECK_NEAR(eps, 1e-5, 1e-12);
    CHECK_EQ_INT(data_end, size);
}

static int check_vocab(const char *path, uint64_t n_tokens, uint64_t n_merges, double *ms)
{
    gguf_file *f = NULL;
    double t0 = now_ms();
    if (gguf_open(&f, path)) return 1;
    *ms = now_ms() - t0;
    const gguf_value *toks = NULL, *merges = NULL;
    int bad = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &toks) || toks->v.arr.n != n_tokens;
    if (n_merges)
        bad |= gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_TYPE_STRING, &merges) || merges->v.arr.n != n_merges;
    /* O(1) access to the last string, and it lies inside the file */
    if (!bad) bad |= toks->v.arr.strs[n_tokens - 1].len == 0;
    gguf_close(f);
    return bad ? 2 : 0;
}

TEST(vocab_files_open_in_linear_time)
{
    double ms_spm = 0, ms_gpt2 = 0;
    int rc = check_vocab(SHARED_MODELS "/vocab/ggml-vocab-llama-spm.gguf", 32000, 0, &ms_spm);
    CHECK_MSG(rc == 0, "llama-spm: rc %d: %s", rc, err_msg());
    rc = check_vocab(SHARED_MODELS "/vocab/ggml-vocab-gpt-2.gguf", 50257, 50000, &ms_gpt2);
    CHECK_MSG(rc == 0, "gpt-2: rc %d: %s", rc, err_msg());
    /* a second open is warm: the figure that matters */
    check_vocab(SHARED_MODELS "/vocab/ggml-vocab-gpt-2.gguf", 50257, 50000, &ms_gpt2);
    printf("# vocab open: llama-spm %.2f ms, gpt-2 %.2f ms\n", ms_spm, ms_gpt2);
    /* Not a speed goal (that is make bench's): a guard against an O(n^2)
     * index, which would take seconds of CPU on 50k strings. */
    CHECK_MSG(ms_gpt2 < 2000, "gpt-2 vocab took %.1f ms of CPU to open", ms_gpt2);
}

/* ------------------------------------------------------------ round trip */

/* Copies every KV and tensor of src into a writer (tensors by pointer). */
static int copy_to_writer(const gguf_file *src, gguf_writer *w)
{
    char key[512];
    for (uint64_t i = 0; i < gguf_meta_count(src); i++) {
        const gguf_meta *kv = gguf_meta_at(src, i);
        if (kv->key.len >= sizeof key) return PL_ERANGE;
        memcpy(key, kv->key.ptr, kv->key.len);
        key[kv->key.len] = 0;
        int rc = gguf_writer_set_value(w, key, &kv->value);
        if (rc) return rc;
    }
    for (uint64_t i = 0; i < gguf_tensor_count(src); i++) {
        const gguf_tensor *t = gguf_tensor_at(src, i);
        memcpy(key, t->name.ptr, t->name.len);
        key[t->name.len] = 0;
        int rc = gguf_writer_add_tensor(w, key, t->type, t->n_dims, t->ne, t->data);
        if (rc != (int)i) return rc < 0 ? rc : PL_EINVAL;
    }
    return 0;
}

/* 0 if a and b hold the same KVs (order, keys, values) and tensors. */
static int files_same(const gguf_file *a, const gguf_file *b)
{
    if (gguf_meta_count(a) != gguf_meta_count(b) || gguf_tensor_count(a) != gguf_tensor_count(b)) return 1;
    for (uint64_t i = 0; i < gguf_meta_count(a); i++) {
        const gguf_meta *x = gguf_meta_at(a, i), *y = gguf_meta_at(b, i);
        if (!str_same(x->key, y->key)) return 2;
        if (!value_eq(&x->value, &y->value)) return 3;
    }
    for (uint64_t i = 0; i < gguf_tensor_count(a); i++) {
        const gguf_tensor *x = gguf_tensor_at(a, i), *y = gguf_tensor_at(b, i);
        if (!str_same(x->name, y->name) || x->type != y->type || x->n_dims != y->n_dims) return 4;
        if (memcmp(x->ne, y->ne, sizeof x->ne) || x->nbytes != y->nbytes) return 5;
        if (memcmp(x->data, y->data, x->nbytes)) return 6;
    }
    return 0;
}

/* Rewrites orig to out through the writer; 0 if the copy holds the same KVs
 * and tensors; *identical says whether the bytes are the same too. */
static int rewrite(const char *orig, const char *out, int *identical)
{
    gguf_file *a = NULL, *b = NULL;
    if (gguf_open(&a, orig)) return -1;
    gguf_writer *w = gguf_writer_new();
    int rc = w ? copy_to_writer(a, w) : PL_ENOMEM;
    if (!rc) rc = gguf_writer_write(w, out, NULL, NULL);
    gguf_writer_free(w);
    if (!rc) rc = gguf_open(&b, out);
    int same = rc ? rc : files_same(a, b);
    gguf_close(a);
    gguf_close(b);
    size_t na = 0, nb = 0;
    uint8_t *ba = read_all(orig, &na), *bb = read_all(out, &nb);
    *identical = ba && bb && na == nb && memcmp(ba, bb, na) == 0;
    free(ba);
    free(bb);
    return same;
}

static char rewritten[512]; /* set by round_trip_stories260k, used by the peer test */

TEST(round_trip_stories260k)
{
    int identical = 0;
    tmp_path(rewritten, sizeof rewritten, "stories-rt.gguf");
    int rc = rewrite(SHARED_MODELS "/stories260K.gguf", rewritten, &identical);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err_msg());
    printf("# stories260K rewritten byte-identical: %s\n", identical ? "yes" : "no");
    CHECK_MSG(identical, "the rewritten file differs from the original");
}

TEST(round_trip_vocab_files)
{
    static const char *const names[2] = {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"};
    for (int i = 0; i < 2; i++) {
        char orig[256], out[256];
        int identical = 0;
        snprintf(orig, sizeof orig, SHARED_MODELS "/vocab/%s", names[i]);
        tmp_path(out, sizeof out, names[i]);
        int rc = rewrite(orig, out, &identical);
        CHECK_MSG(rc == 0, "%s: rc %d: %s", names[i], rc, err_msg());
        CHECK_MSG(identical, "%s: the rewritten file differs from the original", names[i]);
    }
}

/* The gen_ids of peer-bench on model, into out; 0 if found. */
static int peer_gen_ids(const char *peer, const char *model, char *out, size_t n)
{
    char cmd[1024], line[8192];
    snprintf(cmd, sizeof cmd, "%s -m '%s' -p 'Once upon a time' -ng 16 2>/dev/null", peer, model);
    FILE *p = popen(cmd, "r");
    if (!p) return 1;
    int found = 1;
    while (fgets(line, sizeof line, p)) {
        char *s = strstr(line, "\"gen_ids\":["), *e = s ? strchr(s, ']') : NULL;
        if (!e || (size_t)(e - s) >= n) continue;
        memcpy(out, s, (size_t)(e - s + 1));
        out[e - s + 1] = 0;
        found = 0;
    }
    int st = pclose(p);
    return found || st != 0;
}

TEST(llamacpp_loads_rewritten)
{
    const char *dir = getenv("PEER_DIR") ? getenv("PEER_DIR") : "/tmp/llamacpp-peer";
    char peer[512], g1[4096] = "", g2[4096] = "";
    snprintf(peer, sizeof peer, "%s/peer-bench", dir);
    if (access(peer, X_OK) != 0) {
        test_skip("llamacpp_loads_rewritten", "peer-bench absent (run tests/peer.sh)");
        return;
    }
    if (!rewritten[0] || !file_exists(rewritten)) {
        test_skip("llamacpp_loads_rewritten", "the round trip did not produce a file");
        return;
    }
    CHECK_MSG(peer_gen_ids(peer, SHARED_MODELS "/stories260K.gguf", g1, sizeof g1) == 0, "peer on the original");
    CHECK_MSG(peer_gen_ids(peer, rewritten, g2, sizeof g2) == 0, "peer failed on %s", rewritten);
    CHECK_MSG(strlen(g1) > 15, "no tokens generated: %.400s", g1);
    CHECK_MSG(strcmp(g1, g2) == 0, "original %.400s, rewritten %.400s", g1, g2);
}

/* ------------------------------------------------------------ writer */

/* Fill pattern for the writer tests: byte j of tensor idx. */
static uint8_t pattern(uint64_t idx, uint64_t j) { return (uint8_t)(idx * 31 + j * 7 + (j >> 8)); }

typedef struct {
    int calls;
    uint64_t last_idx;
    bool fail;
} fill_state;

static int fill_pattern(void *user, uint64_t idx, void *dst, uint64_t nbytes)
{
    fill_state *st = user;
    st->calls++;
    st->last_idx = idx;
    if (st->fail) return PL_EIO;
    for (uint64_t j = 0; j < nbytes; j++) ((uint8_t *)dst)[j] = pattern(idx, j);
    return 0;
}

/* Nested value [[1, -2, 3], ["x", ""], [[2.5]]] built from static parts. */
static const int32_t nest_ints[3] = {1, -2, 3};
static const gguf_str nest_strs[2] = {{"x", 1}, {"", 0}};
static const double nest_f64[1] = {2.5};

static gguf_value nested_value(gguf_value parts[4])
{
    parts[0] = (gguf_value){.type = GGUF_TYPE_ARRAY,
                            .v.arr = {.elem = GGUF_TYPE_INT32, .n = 3, .data = (const uint8_t *)nest_ints}};
    parts[1] = (gguf_value){.type = GGUF_TYPE_ARRAY, .v.arr = {.elem = GGUF_TYPE_STRING, .n = 2, .strs = nest_strs}};
    parts[3] = (gguf_value){.type = GGUF_TYPE_ARRAY,
                            .v.arr = {.elem = GGUF_TYPE_FLOAT64, .n = 1, .data = (const uint8_t *)nest_f64}};
    parts[2] = (gguf_value){.type = GGUF_TYPE_ARRAY, .v.arr = {.elem = GGUF_TYPE_ARRAY, .n = 1, .vals = &parts[3]}};
    return (gguf_value){.type = GGUF_TYPE_ARRAY, .v.arr = {.elem = GGUF_TYPE_ARRAY, .n = 3, .vals = parts}};
}

static float f32_data[15];

/* Builds the "all types" writer; returns NULL on failure. */
static gguf_writer *all_types_writer(void)
{
    static const uint8_t u8s[3] = {0, 7, 255};
    static const int8_t i8s[2] = {-128, 127};
    static const uint16_t u16s[2] = {1, 65535};
    static const int16_t i16s[2] = {-32768, 5};
    static const uint32_t u32s[2] = {0, 4000000000u};
    static const int32_t i32s[2] = {INT32_MIN, -1};
    static const float f32s[2] = {1.5f, -0.0f};
    static const uint8_t bools[3] = {1, 0, 1};
    static const uint64_t u64s[1] = {UINT64_MAX};
    static const int64_t i64s[2] = {INT64_MIN, 42};
    static const double f64s[2] = {3.25, -1e300};
    static const gguf_str strs[4] = {{"alpha", 5}, {"", 0}, {"with\0nul", 8}, {"\xe2\x96\x81x", 4}};
    gguf_value parts[4], nested = nested_value(parts);
    gguf_value i8 = {.type = GGUF_TYPE_INT8, .v.i64 = -5}, u16 = {.type = GGUF_TYPE_UINT16, .v.u64 = 65535};
    gguf_value i64 = {.type = GGUF_TYPE_INT64, .v.i64 = INT64_MIN}, f64 = {.type = GGUF_TYPE_FLOAT64, .v.f64 = 0.1};
    gguf_writer *w = gguf_writer_new();
    int rc = !w;
    if (!rc) rc = gguf_writer_set_u32(w, "general.alignment", 64);
    if (!rc) rc = gguf_writer_set_str(w, "general.name", "first"); /* replaced below, keeps its place */
    if (!rc) rc = gguf_writer_set_u32(w, "t.u32", 4000000000u);
    if (!rc) rc = gguf_writer_set_i32(w, "t.i32", -7);
    if (!rc) rc = gguf_writer_set_u64(w, "t.u64", UINT64_MAX - 1);
    if (!rc) rc = gguf_writer_set_f32(w, "t.f32", 0.125f);
    if (!rc) rc = gguf_writer_set_bool(w, "t.bool", true);
    if (!rc) rc = gguf_writer_set_str(w, "t.str.empty", "");
    if (!rc) rc = gguf_writer_set_value(w, "t.i8", &i8);
    if (!rc) rc = gguf_writer_set_value(w, "t.u16", &u16);
    if (!rc) rc = gguf_writer_set_value(w, "t.i64", &i64);
    if (!rc) rc = gguf_writer_set_value(w, "t.f64", &f64);
    if (!rc) rc = gguf_writer_set_arr(w, "a.u8", GGUF_TYPE_UINT8, u8s, 3);
    if (!rc) rc = gguf_writer_set_arr(w, "a.i8", GGUF_TYPE_INT8, i8s, 2);
    if (!rc) rc = gguf_writer_set_arr(w, "a.u16", GGUF_TYPE_UINT16, u16s, 2);
    if (!rc) rc = gguf_writer_set_arr(w, "a.i16", GGUF_TYPE_INT16, i16s, 2);
    if (!rc) rc = gguf_writer_set_arr(w, "a.u32", GGUF_TYPE_UINT32, u32s, 2);
    if (!rc) rc = gguf_writer_set_arr(w, "a.i32", GGUF_TYPE_INT32, i32s, 2);
    if (!rc) rc = gguf_writer_set_arr(w, "a.f32", GGUF_TYPE_FLOAT32, f32s, 2);
    if (!rc) rc = gguf_writer_set_arr(w, "a.bool", GGUF_TYPE_BOOL, bools, 3);
    if (!rc) rc = gguf_writer_set_arr(w, "a.u64", GGUF_TYPE_UINT64, u64s, 1);
    if (!rc) rc = gguf_writer_set_arr(w, "a.i64", GGUF_TYPE_INT64, i64s, 2);
    if (!rc) rc = gguf_writer_set_arr(w, "a.f64", GGUF_TYPE_FLOAT64, f64s, 2);
    if (!rc) rc = gguf_writer_set_arr(w, "a.empty", GGUF_TYPE_UINT32, NULL, 0);
    if (!rc) rc = gguf_writer_set_arr_str(w, "a.str", strs, 4);
    if (!rc) rc = gguf_writer_set_value(w, "a.nested", &nested);
    if (!rc) rc = gguf_writer_set_str(w, "general.name", "all types");
    for (int i = 0; i < 15; i++) f32_data[i] = (float)i * 0.5f - 3;
    uint64_t ne_f32[2] = {3, 5}, ne_q8[2] = {64, 3}, ne_f16[1] = {7}, ne_i32[4] = {2, 2, 2, 2};
    if (!rc && gguf_writer_add_tensor(w, "f32", DT_F32, 2, ne_f32, f32_data) != 0) rc = 1;
    if (!rc && gguf_writer_add_tensor(w, "q8_0.filled", DT_Q8_0, 2, ne_q8, NULL) != 1) rc = 1;
    if (!rc && gguf_writer_add_tensor(w, "f16.filled", DT_F16, 1, ne_f16, NULL) != 2) rc = 1;
    if (!rc && gguf_writer_add_tensor(w, "i32.4d.filled", DT_I32, 4, ne_i32, NULL) != 3) rc = 1;
    if (rc) {
        gguf_writer_free(w);
        return NULL;
    }
    return w;
}

static int check_scalars(const gguf_file *f)
{
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float f32;
    bool b;
    gguf_str s;
    const gguf_meta *kv;
    if (gguf_get_u32(f, "t.u32", &u32) || u32 != 4000000000u) return 1;
    if (gguf_get_i32(f, "t.i32", &i32) || i32 != -7) return 2;
    if (gguf_get_u64(f, "t.u64", &u64) || u64 != UINT64_MAX - 1) return 3;
    if (gguf_get_f32(f, "t.f32", &f32) || f32 != 0.125f) return 4;
    if (gguf_get_bool(f, "t.bool", &b) || !b) return 5;
    if (gguf_get_str(f, "t.str.empty", &s) || s.len != 0) return 6;
    if (gguf_get_str(f, "general.name", &s) || !gguf_str_eq(s, "all types")) return 7;
    if (gguf_get_i32(f, "t.i8", &i32) || i32 != -5) return 8;
    if (gguf_get_u32(f, "t.u16", &u32) || u32 != 65535) return 9;
    if (!(kv = gguf_meta_find(f, "t.i64")) || kv->value.type != GGUF_TYPE_INT64 || kv->value.v.i64 != INT64_MIN) return 10;
    if (!(kv = gguf_meta_find(f, "t.f64")) || kv->value.type != GGUF_TYPE_FLOAT64 || kv->value.v.f64 != 0.1) return 11;
    if (gguf_get_f32(f, "t.f64", &f32) || f32 != 0.1f) return 12;
    /* insertion order, with general.name replaced in place */
    if (!gguf_str_eq(gguf_meta_at(f, 0)->key, "general.alignment") || !gguf_str_eq(gguf_meta_at(f, 1)->key, "general.name"))
        return 13;
    return 0;
}

static int check_arrays(const gguf_file *f)
{
    const gguf_value *a;
    if (gguf_get_arr(f, "a.u8", GGUF_TYPE_UINT8, &a) || a->v.arr.n != 3 || gguf_arr_u8(a, 2) != 255) return 1;
    if (gguf_get_arr(f, "a.i8", GGUF_TYPE_INT8, &a) || (int8_t)gguf_arr_u8(a, 0) != -128) return 2;
    if (gguf_get_arr(f, "a.u16", GGUF_TYPE_UINT16, &a) || a->v.arr.data[2] != 0xff || a->v.arr.data[3] != 0xff) return 3;
    if (gguf_get_arr(f, "a.i16", GGUF_TYPE_INT16, &a) || a->v.arr.data[1] != 0x80) return 4;
    if (gguf_get_arr(f, "a.u32", GGUF_TYPE_UINT32, &a) || gguf_arr_u32(a, 1) != 4000000000u) return 5;
    if (gguf_get_arr(f, "a.i32", GGUF_TYPE_INT32, &a) || gguf_arr_i32(a, 0) != INT32_MIN || gguf_arr_i32(a, 1) != -1)
        return 6;
    if (gguf_get_arr(f, "a.f32", GGUF_TYPE_FLOAT32, &a) || gguf_arr_f32(a, 0) != 1.5f || !signbit(gguf_arr_f32(a, 1)))
        return 7;
    if (gguf_get_arr(f, "a.bool", GGUF_TYPE_BOOL, &a) || gguf_arr_u8(a, 0) != 1 || gguf_arr_u8(a, 1) != 0) return 8;
    if (gguf_get_arr(f, "a.u64", GGUF_TYPE_UINT64, &a) || memcmp(a->v.arr.data, "\xff\xff\xff\xff\xff\xff\xff\xff", 8))
        return 9;
    if (gguf_get_arr(f, "a.i64", GGUF_TYPE_INT64, &a) || a->v.arr.data[7] != 0x80 || a->v.arr.data[8] != 42) return 10;
    double d;
    if (gguf_get_arr(f, "a.f64", GGUF_TYPE_FLOAT64, &a) || (memcpy(&d, a->v.arr.data + 8, 8), d != -1e300)) return 11;
    if (gguf_get_arr(f, "a.empty", GGUF_TYPE_UINT32, &a) || a->v.arr.n != 0) return 12;
    if (gguf_get_arr(f, "a.str", GGUF_TYPE_STRING, &a) || a->v.arr.n != 4 || !gguf_str_eq(a->v.arr.strs[0], "alpha") ||
        a->v.arr.strs[1].len != 0 || a->v.arr.strs[2].len != 8 || memcmp(a->v.arr.strs[2].ptr, "with\0nul", 8))
        return 13;
    gguf_value parts[4], want = nested_value(parts);
    if (gguf_get_arr(f, "a.nested", GGUF_TYPE_ARRAY, &a) || !value_eq(a, &want)) return 14;
    return 0;
}

static int check_tensors(const gguf_file *f)
{
    if (gguf_alignment(f) != 64 || gguf_data_offset(f) % 64 || gguf_tensor_count(f) != 4) return 1;
    const gguf_tensor *t = gguf_tensor_find(f, "f32");
    if (!t || t->nbytes != 60 || memcmp(t->data, f32_data, 60) || t->ne[1] != 5 || t->ne[2] != 1) return 2;
    if (((uintptr_t)t->data - (uintptr_t)gguf_tensor_at(f, 0)->data) % 64) return 3;
    static const char *const names[3] = {"q8_0.filled", "f16.filled", "i32.4d.filled"};
    static const uint64_t sizes[3] = {2 * 3 * 34, 14, 64};
    for (int k = 0; k < 3; k++) {
        t = gguf_tensor_find(f, names[k]);
        if (!t || t->nbytes != sizes[k] || t->offset % 64) return 4;
        for (uint64_t j = 0; j < t->nbytes; j++)
            if (((const uint8_t *)t->data)[j] != pattern((uint64_t)k + 1, j)) return 5;
    }
    t = gguf_tensor_find(f, "i32.4d.filled");
    if (t->n_dims != 4 || t->ne[3] != 2 || t->type != DT_I32) return 6;
    return 0;
}

TEST(writer_all_types)
{
    char path[256];
    tmp_path(path, sizeof path, "all-types.gguf");
    gguf_writer *w = all_types_writer();
    CHECK_MSG(w, "building the writer: %s", err_msg());
    fill_state st = {0};
    int rc = gguf_writer_write(w, path, fill_pattern, &st);
    gguf_writer_free(w);
    CHECK_MSG(rc == 0, "write: %s", err_msg());
    CHECK_EQ_INT(st.calls, 3);
    CHECK_EQ_INT(st.last_idx, 3);
    gguf_file *f = NULL;
    CHECK_MSG(gguf_open(&f, path) == 0, "reopen: %s", err_msg());
    int s = check_scalars(f), a = check_arrays(f), t = check_tensors(f);
    uint64_t size = gguf_file_size(f), n_kv = gguf_meta_count(f);
    gguf_close(f);
    CHECK_EQ_INT(s, 0);
    CHECK_EQ_INT(a, 0);
    CHECK_EQ_INT(t, 0);
    CHECK_EQ_INT(n_kv, 26);
    CHECK_EQ_INT(size % 64, 0); /* the last tensor is padded too */
}

TEST(writer_refuses_bad_input)
{
    gguf_writer *w = gguf_writer_new();
    CHECK(w);
    uint64_t ne[4] = {32, 2, 1, 1}, ne0[2] = {4, 0}, ne33[1] = {33}, big[2] = {1ull << 32, 1ull << 32};
    char longname[80];
    memset(longname, 'n', 70);
    longname[70] = 0;
    int r[12];
    r[0] = gguf_writer_add_tensor(w, "", DT_F32, 1, ne, NULL);
    r[1] = gguf_writer_add_tensor(w, longname, DT_F32, 1, ne, NULL);
    r[2] = gguf_writer_add_tensor(w, "t", 4, 1, ne, NULL); /* Q4_2: removed from ggml */
    r[3] = gguf_writer_add_tensor(w, "t", DT_F32, 0, ne, NULL);
    r[4] = gguf_writer_add_tensor(w, "t", DT_F32, 5, ne, NULL);
    r[5] = gguf_writer_add_tensor(w, "t", DT_F32, 2, ne0, NULL);
    r[6] = gguf_writer_add_tensor(w, "t", DT_Q4_0, 1, ne33, NULL);
    r[7] = gguf_writer_add_tensor(w, "t", DT_F32, 2, big, NULL);
    int first = gguf_writer_add_tensor(w, "t", DT_Q4_0, 2, ne, NULL);
    r[8] = gguf_writer_add_tensor(w, "t", DT_F32, 1, ne, NULL); /* duplicate */
    gguf_value bad_bool = {.type = GGUF_TYPE_BOOL, .v.u64 = 2}, bad_i8 = {.type = GGUF_TYPE_INT8, .v.i64 = 300};
    r[9] = gguf_writer_set_value(w, "b", &bad_bool);
    r[10] = gguf_writer_set_value(w, "c", &bad_i8);
    r[11] = gguf_writer_set_arr(w, "d", GGUF_TYPE_STRING, NULL, 0);
    /* a chain of 9 nested arrays is one too deep */
    gguf_value chain[9];
    for (int i = 0; i < 9; i++)
        chain[i] = (gguf_value){.type = GGUF_TYPE_ARRAY,
                                .v.arr = {.elem = i < 8 ? GGUF_TYPE_ARRAY : GGUF_TYPE_UINT8, .n = i < 8, .vals = &chain[i + 1]}};
    int deep = gguf_writer_set_value(w, "deep", &chain[0]);
    int ok8 = gguf_writer_set_value(w, "deep8", &chain[1]);
    int second = gguf_writer_add_tensor(w, "u", DT_F32, 1, ne, NULL);
    char path[256];
    tmp_path(path, sizeof path, "refused.gguf");
    int no_fill = gguf_writer_write(w, path, NULL, NULL);
    gguf_writer_set_u64(w, "general.alignment", 64);
    fill_state st = {0};
    int bad_align = gguf_writer_write(w, path, fill_pattern, &st);
    gguf_writer_free(w);
    for (int i = 0; i < 12; i++) CHECK_MSG(r[i] < 0, "case %d accepted (%d)", i, r[i]);
    CHECK_EQ_INT(first, 0);
    CHECK_EQ_INT(second, 1);
    CHECK_EQ_INT(deep, PL_EINVAL);
    CHECK_EQ_INT(ok8, 0);
    CHECK_EQ_INT(no_fill, PL_EINVAL);
    CHECK_EQ_INT(bad_align, PL_EINVAL);
    CHECK(strstr(err_msg(), "general.alignment"));
    CHECK(!file_exists(path));
    CHECK_EQ_INT(dir_count("refused.gguf"), 0);
}

TEST(writer_failure_leaves_no_file)
{
    char path[256];
    tmp_path(path, sizeof path, "failed.gguf");
    gguf_writer *w = all_types_writer();
    CHECK(w);
    fill_state st = {.fail = true};
    int rc = gguf_writer_write(w, path, fill_pattern, &st);
    int rc_dir = gguf_writer_write(w, "/nonexistent-dir/x.gguf", fill_pattern, &st);
    gguf_writer_free(w);
    CHECK_EQ_INT(rc, PL_EIO);
    CHECK_MSG(strstr(err_msg(), "x.gguf"), "%s", err_msg());
    CHECK_EQ_INT(rc_dir, PL_EIO);
    CHECK(!file_exists(path));
    CHECK_EQ_INT(dir_count("failed.gguf"), 0); /* no temporary left behind */
}

TEST(getters_refuse_what_does_not_fit)
{
    char path[256];
    tmp_path(path, sizeof path, "getters.gguf");
    gguf_writer *w = all_types_writer();
    CHECK(w);
    fill_state st = {0};
    int rc = gguf_writer_write(w, path, fill_pattern, &st);
    gguf_writer_free(w);
    CHECK_MSG(rc == 0, "%s", err_msg());
    gguf_file *f = NULL;
    CHECK_MSG(gguf_open(&f, path) == 0, "%s", err_msg());
    uint32_t u32 = 99;
    int32_t i32;
    uint64_t u64;
    float f32;
    bool b;
    gguf_str s;
    const gguf_value *a;
    int r[10];
    r[0] = gguf_get_u32(f, "t.i32", &u32);        /* -7 */
    r[1] = gguf_get_u32(f, "t.u64", &u32);        /* too big */
    r[2] = gguf_get_i32(f, "t.u32", &i32);        /* 4e9 */
    r[3] = gguf_get_u64(f, "t.i8", &u64);         /* -5 */
    r[4] = gguf_get_u32(f, "a.u8", &u32);         /* array */
    r[5] = gguf_get_f32(f, "t.u32", &f32);
    r[6] = gguf_get_bool(f, "t.u32", &b);
    r[7] = gguf_get_str(f, "t.u32", &s);
    r[8] = gguf_get_arr(f, "a.u8", GGUF_TYPE_INT8, &a);
    r[9] = gguf_get_f32(f, "a.f64", &f32);
    int missing = gguf_get_u32(f, "no.such.key", &u32);
    char missing_msg[256];
    snprintf(missing_msg, sizeof missing_msg, "%s", err_msg());
    gguf_get_u32(f, "t.i32", &u32);
    char fit_msg[256];
    snprintf(fit_msg, sizeof fit_msg, "%s", err_msg());
    int any = gguf_get_arr(f, "a.u8", GGUF_TYPE_COUNT, &a);
    int nf = gguf_meta_find(f, "no.such.key") == NULL && gguf_tensor_find(f, "nope") == NULL;
    gguf_close(f);
    for (int i = 0; i < 10; i++) CHECK_MSG(r[i] == PL_EFORMAT, "case %d: %d", i, r[i]);
    CHECK_EQ_INT(u32, 99); /* untouched on failure */
    CHECK_EQ_INT(missing, PL_ENOTFOUND);
    CHECK_MSG(strstr(missing_msg, "no.such.key"), "%s", missing_msg);
    CHECK_MSG(strstr(fit_msg, "offset ") && strstr(fit_msg, "t.i32") && strstr(fit_msg, "-7"), "%s", fit_msg);
    CHECK_EQ_INT(any, 0);
    CHECK(nf);
}

TEST(open_reports_io_errors)
{
    gguf_file *f = (gguf_file *)&f; /* must stay untouched */
    gguf_file *const sentinel = f;
    int r1 = gguf_open(&f, "/nonexistent/model.gguf");
    CHECK_EQ_INT(r1, PL_EIO);
    CHECK(strstr(err_msg(), "/nonexistent/model.gguf"));
    CHECK_EQ_INT(gguf_open(&f, tmpdir), PL_EIO);
    char path[256];
    tmp_path(path, sizeof path, "empty.gguf");
    FILE *fp = fopen(path, "wb");
    CHECK(fp);
    fclose(fp);
    int r3 = gguf_open(&f, path);
    CHECK_EQ_INT(r3, PL_EFORMAT);
    CHECK_MSG(strstr(err_msg(), "offset 0: magic"), "%s", err_msg());
    CHECK(f == sentinel);
}

/* ------------------------------------------------------------ corruption */

/* A small writer-made file: KVs incl. arrays, 3 tensors; the last tensor
 * fills its aligned slot so that every proper prefix is broken. */
static uint8_t *small_file(size_t *size)
{
    static const gguf_str strs[3] = {{"a", 1}, {"bc", 2}, {"", 0}};
    static const float fl[4] = {1, 2, 3, 4};
    static uint8_t t0[128], t1[68], t2[32];
    for (size_t i = 0; i < sizeof t0; i++) t0[i] = (uint8_t)i;
    memset(t1, 0x3c, sizeof t1);
    memset(t2, 0x11, sizeof t2);
    gguf_value parts[4], nested = nested_value(parts);
    uint64_t ne0[2] = {8, 4}, ne1[2] = {32, 2}, ne2[1] = {16};
    gguf_writer *w = gguf_writer_new();
    int rc = !w;
    if (!rc) rc = gguf_writer_set_str(w, "general.architecture", "llama");
    if (!rc) rc = gguf_writer_set_u32(w, "llama.context_length", 128);
    if (!rc) rc = gguf_writer_set_bool(w, "b", false);
    if (!rc) rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, 3);
    if (!rc) rc = gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, fl, 4);
    if (!rc) rc = gguf_writer_set_value(w, "nested", &nested);
    if (!rc && gguf_writer_add_tensor(w, "t0", DT_F32, 2, ne0, t0) < 0) rc = 1;
    if (!rc && gguf_writer_add_tensor(w, "t1", DT_Q8_0, 2, ne1, t1) < 0) rc = 1;
    if (!rc && gguf_writer_add_tensor(w, "t2", DT_F16, 1, ne2, t2) < 0) rc = 1;
    char path[256];
    tmp_path(path, sizeof path, "small.gguf");
    if (!rc) rc = gguf_writer_write(w, path, NULL, NULL);
    gguf_writer_free(w);
    return rc ? NULL : read_all(path, size);
}

/* Opens a copy of b[0..n) in an exact-size heap buffer (so ASan sees any
 * overread). Returns 0 if it opened and walked cleanly, 1 if it was refused
 * cleanly, -1 if something is wrong (message in why). */
static int open_copy(const uint8_t *b, size_t n, char *why, size_t wn)
{
    uint8_t *c = malloc(n ? n : 1);
    if (n) memcpy(c, b, n);
    gguf_file *f = NULL;
    int rc = gguf_open_mem(&f, c, n, "mem.gguf"), res;
    if (rc == 0) {
        int walked = walk_file(f, c, c + n);
        gguf_close(f);
        res = walked ? -1 : 0;
        snprintf(why, wn, "walk failed: %d", walked);
    } else {
        const char *m = err_msg();
        res = rc == PL_EFORMAT && f == NULL && strncmp(m, "mem.gguf: offset ", 17) == 0 ? 1 : -1;
        snprintf(why, wn, "rc %d: %s", rc, m);
    }
    free(c);
    return res;
}

TEST(every_truncation_fails_cleanly)
{
    size_t n = 0;
    uint8_t *b = small_file(&n);
    CHECK_MSG(b, "small file: %s", err_msg());
    char why[512];
    int full = open_copy(b, n, why, sizeof why), bad = -1;
    for (size_t k = 0; k < n && bad < 0; k++)
        if (open_copy(b, k, why, sizeof why) != 1) bad = (int)k;
    free(b);
    CHECK_MSG(full == 0, "the full file: %s", why);
    CHECK_MSG(bad < 0, "prefix of %d bytes: %s", bad, why);
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

TEST(random_byte_flips_fail_cleanly)
{
    size_t n = 0;
    uint8_t *b = small_file(&n);
    CHECK_MSG(b, "small file: %s", err_msg());
    uint8_t *m = malloc(n);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    int opened = 0, refused = 0, bad = -1;
    char why[512];
    static const uint8_t special[6] = {0, 0xff, 0x80, 0x7f, 1, 0x40};
    for (int it = 0; it < 20000 && bad < 0; it++) {
        memcpy(m, b, n);
        int flips = 1 + (int)(rng_next(&seed) % 4);
        for (int k = 0; k < flips; k++) {
            uint64_t r = rng_next(&seed);
            size_t pos = (size_t)(r % n);
            /* mostly the metadata, where the structure is */
            if ((r >> 32) % 4 != 0) pos = (size_t)(r % (n / 2));
            m[pos] = (r >> 40) % 3 == 0 ? special[(r >> 48) % 6] : (uint8_t)(m[pos] ^ (1u << ((r >> 56) % 8)));
        }
        int res = open_copy(m, n, why, sizeof why);
        if (res == 0) opened++;
        else if (res == 1) refused++;
        else bad = it;
    }
    free(m);
    free(b);
    printf("# byte flips: %d opened, %d refused\n", opened, refused);
    CHECK_MSG(bad < 0, "iteration %d: %s", bad, why);
    CHECK(opened > 0 && refused > 0);
}

/* ------------------------------------------------------------ crafted */

typedef struct {
    uint8_t p[4096];
    size_t n;
} bb;

static void bb_put(bb *b, const void *d, size_t n)
{
    if (b->n + n <= sizeof b->p) memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void bb_u8(bb *b, uint8_t v) { bb_put(b, &v, 1); }
static void bb_u32(bb *b, uint32_t v) { bb_put(b, &v, 4); } /* the test host is little-endian */
static void bb_u64(bb *b, uint64_t v) { bb_put(b, &v, 8); }
static void bb_str(bb *b, const char *s)
{
    bb_u64(b, strlen(s));
    bb_put(b, s, strlen(s));
}
static void bb_pad(bb *b, size_t a)
{
    while (b->n % a) bb_u8(b, 0);
}
static void bb_header(bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    b->n = 0;
    bb_put(b, "GGUF", 4);
    bb_u32(b, version);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}
static void bb_tensor(bb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off)
{
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) bb_u64(b, ne[d]);
    bb_u32(b, type);
    bb_u64(b, off);
}
static void bb_kv_u32(bb *b, const char *key, uint32_t v)
{
    bb_str(b, key);
    bb_u32(b, GGUF_TYPE_UINT32);
    bb_u32(b, v);
}

/* A version 3 file with no tensors and one kv: its key and value type,
 * the value to follow. */
static void bb_one_kv(bb *b, const char *key, uint32_t type)
{
    bb_header(b, 3, 0, 1);
    bb_str(b, key);
    bb_u32(b, type);
}
/* The same with an array value of count elem_type elements, the elements
 * to follow. */
static void bb_one_array(bb *b, const char *key, uint32_t elem_type, uint64_t count)
{
    bb_one_kv(b, key, GGUF_TYPE_ARRAY);
    bb_u32(b, elem_type);
    bb_u64(b, count);
}

/* The file must be refused with PL_EFORMAT, "offset OFF:" and what in the text. */
static int expect_refused(const bb *b, uint64_t off, const char *what, char *why, size_t wn)
{
    char head[64];
    int res = open_copy(b->p, b->n, why, wn);
    if (res != 1) return 1;
    snprintf(head, sizeof head, "mem.gguf: offset %" PRIu64 ": ", off);
    return strncmp(why + 7, head, strlen(head)) != 0 || !strstr(why, what);
}

#define REFUSED(off, what) CHECK_MSG(expect_refused(&b, off, what, why, sizeof why) == 0, \
                                     "want offset %d and \"%s\", got: %s", (int)(off), what, why)
#define OPENS() CHECK_MSG(open_copy(b.p, b.n, why, sizeof why) == 0, "should open: %s", why)

TEST(crafted_header)
{
    static bb b;
    char why[512];
    b.n = 0;
    REFUSED(0, "magic: the file has 0 bytes");
    bb_header(&b, 3, 0, 0);
    b.p[3] = 'X';
    REFUSED(0, "magic: bytes 47 47 55 58");
    bb_header(&b, 1, 0, 0);
    REFUSED(4, "version: 1 is not supported");
    bb_header(&b, 4, 0, 0);
    REFUSED(4, "version: 4 is not supported");
    bb_header(&b, 0x03000000, 0, 0);
    REFUSED(4, "byte-swapped");
    bb_header(&b, 3, 0, 0);
    b.n = 12;
    REFUSED(8, "tensor count: truncated");
    bb_header(&b, 3, 0, 0);
    b.n = 20;
    REFUSED(16, "kv count: truncated");
    bb_header(&b, 3, 1ull << 62, 0);
    REFUSED(8, "tensor count: 4611686018427387904 tensors cannot fit");
    bb_header(&b, 3, 0, UINT64_MAX);
    REFUSED(16, "kv count: 18446744073709551615 pairs cannot fit");
    bb_header(&b, 3, 0, 0);
    OPENS();
    bb_header(&b, 2, 0, 0);
    OPENS();
}

TEST(crafted_kv)
{
    static bb b;
    char why[512];
    bb_header(&b, 3, 0, 1);
    bb_u64(&b, 1000);
    bb_put(&b, "abcdefghijklmnopqrstuvwxyz", 26);
    REFUSED(24, "kv[0] key: length 1000 runs past the end");
    bb_one_kv(&b, "", GGUF_TYPE_UINT16);
    bb_u32(&b, 0);
    REFUSED(24, "kv[0] key: empty");
    bb_header(&b, 3, 0, 1);
    bb_u64(&b, 3);
    bb_put(&b, "a\0b", 3);
    bb_u32(&b, GGUF_TYPE_UINT8);
    bb_u8(&b, 0);
    REFUSED(24, "kv[0] key: contains a NUL");
    bb_one_kv(&b, "k", 13);
    bb_u8(&b, 0);
    REFUSED(33, "kv[0] 'k' type: 13 is not a GGUF type");
    bb_one_kv(&b, "k", GGUF_TYPE_UINT64);
    bb_u32(&b, 0);
    REFUSED(37, "kv[0] 'k' value: truncated");
    bb_one_kv(&b, "k", GGUF_TYPE_BOOL);
    bb_u8(&b, 2);
    REFUSED(37, "bool value: 2 is not 0 or 1");
    bb_one_kv(&b, "k", GGUF_TYPE_STRING);
    bb_u64(&b, 1ull << 63);
    REFUSED(37, "kv[0] 'k' string length: length 9223372036854775808 runs past");
    bb_header(&b, 3, 0, 2);
    bb_kv_u32(&b, "dup", 1);
    bb_kv_u32(&b, "dup", 2);
    REFUSED(24 + 19, "kv[1] 'dup' key: duplicate of kv[0]");
}

TEST(crafted_arrays)
{
    static bb b;
    char why[512];
    bb_one_array(&b, "a", 77, 0);
    REFUSED(37, "kv[0] 'a' array element type: 77 is not a GGUF type");
    bb_one_array(&b, "a", GGUF_TYPE_UINT32, 1ull << 62);
    bb_u32(&b, 5);
    REFUSED(41, "array count: 4611686018427387904 x 4-byte UINT32 elements cannot fit");
    bb_one_array(&b, "a", GGUF_TYPE_STRING, 1000000);
    bb_str(&b, "x");
    REFUSED(41, "array count: 1000000 strings cannot fit");
    bb_one_array(&b, "a", GGUF_TYPE_STRING, 2);
    bb_str(&b, "x");
    bb_u64(&b, 500);
    bb_put(&b, "yy", 2);
    REFUSED(58, "kv[0] 'a'[1] string length: length 500 runs past");
    bb_one_array(&b, "a", GGUF_TYPE_BOOL, 3);
    bb_put(&b, "\1\0\3", 3);
    REFUSED(51, "bool element 2: 3 is not 0 or 1");
    bb_one_array(&b, "a", GGUF_TYPE_ARRAY, 1000);
    REFUSED(41, "array count: 1000 arrays cannot fit");
    /* GGUF_MAX_ARRAY_DEPTH levels open; one more is refused */
    for (int levels = GGUF_MAX_ARRAY_DEPTH; levels <= GGUF_MAX_ARRAY_DEPTH + 1; levels++) {
        bb_one_kv(&b, "a", GGUF_TYPE_ARRAY);
        for (int l = 0; l < levels - 1; l++) {
            bb_u32(&b, GGUF_TYPE_ARRAY);
            bb_u64(&b, 1);
        }
        bb_u32(&b, GGUF_TYPE_UINT8);
        bb_u64(&b, 1);
        bb_u8(&b, 9);
        if (levels == GGUF_MAX_ARRAY_DEPTH) OPENS();
        else REFUSED(37 + 12 * 7, "kv[0] 'a'[0][0][0][0][0][0][0] array nesting: deeper than 8");
    }
}

TEST(crafted_alignment)
{
    static bb b;
    char why[512];
    bb_one_kv(&b, "general.alignment", GGUF_TYPE_UINT64);
    bb_u64(&b, 64);
    REFUSED(24, "kv[0] 'general.alignment' value: type UINT64, general.alignment must be UINT32");
    bb_header(&b, 3, 0, 1);
    bb_kv_u32(&b, "general.alignment", 0);
    REFUSED(24, "alignment 0 is not a nonzero power of two");
    bb_header(&b, 3, 0, 1);
    bb_kv_u32(&b, "general.alignment", 48);
    REFUSED(24, "alignment 48 is not a nonzero power of two");
    /* alignment 16 is honoured: a tensor at offset 16 is fine */
    uint64_t ne[1] = {4};
    bb_header(&b, 3, 2, 1);
    bb_kv_u32(&b, "general.alignment", 16);
    bb_tensor(&b, "x", 1, ne, DT_F32, 0);
    bb_tensor(&b, "y", 1, ne, DT_F32, 16);
    bb_pad(&b, 16);
    for (int i = 0; i < 32; i++) bb_u8(&b, (uint8_t)i);
    OPENS();
}

/* One-tensor file with the given info, padded, with data_bytes of data. */
static void one_tensor(bb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off,
                       size_t data_bytes)
{
    bb_header(b, 3, 1, 0);
    bb_tensor(b, name, n_dims, ne, type, off);
    bb_pad(b, 32);
    for (size_t i = 0; i < data_bytes; i++) bb_u8(b, 0);
}

TEST(crafted_tensors)
{
    static bb b;
    char why[512];
    uint64_t ne[5] = {32, 2, 1, 1, 1}, ne0[2] = {32, 0}, huge[2] = {1ull << 32, 1ull << 32};
    uint64_t f64huge[2] = {1ull << 31, 1ull << 31}, ne33[1] = {33};
    one_tensor(&b, "t", 0, ne, DT_F32, 0, 256);
    REFUSED(33, "tensor[0] 't' n_dims: 0 is not in 1..4");
    one_tensor(&b, "t", 5, ne, DT_F32, 0, 256);
    REFUSED(33, "n_dims: 5 is not in 1..4");
    one_tensor(&b, "t", 2, ne0, DT_F32, 0, 256);
    REFUSED(45, "tensor[0] 't' ne[1]: 0 (every dimension must be at least 1)");
    one_tensor(&b, "t", 2, huge, DT_F32, 0, 256);
    REFUSED(37, "ne: element count overflows");
    one_tensor(&b, "t", 2, f64huge, DT_F64, 0, 256);
    REFUSED(37, "ne: byte size overflows");
    one_tensor(&b, "t", 2, ne, 4, 0, 256);
    REFUSED(53, "tensor[0] 't' type: 4 is not a known ggml type");
    one_tensor(&b, "t", 2, ne, 0xffffffffu, 0, 256);
    REFUSED(53, "type: 4294967295 is not a known ggml type");
    one_tensor(&b, "t", 1, ne33, DT_Q4_0, 0, 256);
    REFUSED(37, "ne[0]: row length 33 is not a multiple of the q4_0 block size 32");
    one_tensor(&b, "t", 2, ne, DT_F32, 16, 256);
    REFUSED(57, "tensor[0] 't' offset: 16 is not a multiple of the alignment 32");
    one_tensor(&b, "t", 2, ne, DT_F32, 0, 255);
    REFUSED(57, "offset: data at 0 + 256 bytes runs past the end of the file");
    one_tensor(&b, "t", 2, ne, DT_F32, 1ull << 63, 256);
    REFUSED(57, "runs past the end");
    one_tensor(&b, "", 2, ne, DT_F32, 0, 256);
    REFUSED(24, "tensor[0] name: empty");
    one_tensor(&b, "t", 2, ne, DT_F32, 0, 256);
    OPENS();
    one_tensor(&b, "t", 4, ne, DT_F32, 0, 256);
    b.n = 58;
    REFUSED(53, "tensor[0] 't' ne[2]: truncated");
}

/* A file of two 1-d F32 tensors (names, lengths, data offsets) followed by
 * data_bytes zero bytes of data. */
static void two_tensors(bb *b, const char *n0, uint64_t len0, uint64_t off0, const char *n1, uint64_t len1,
                        uint64_t off1, int data_bytes)
{
    uint64_t ne0[1] = {len0}, ne1[1] = {len1};
    bb_header(b, 3, 2, 0);
    bb_tensor(b, n0, 1, ne0, DT_F32, off0);
    bb_tensor(b, n1, 1, ne1, DT_F32, off1);
    bb_pad(b, 32);
    for (int i = 0; i < data_bytes; i++) bb_u8(b, 0);
}

TEST(crafted_tensor_pairs)
{
    static bb b;
    char why[512];
    /* x covers [0, 64), y starts at 32 */
    two_tensors(&b, "x", 16, 0, "y", 8, 32, 96);
    REFUSED(24 + 33 + 25, "tensor[1] 'y' offset: data [32, 64) overlaps tensor[0] [0, 64)");
    /* the same the other way round: the later tensor in the file is named */
    two_tensors(&b, "y", 8, 32, "x", 16, 0, 96);
    REFUSED(24 + 33 + 25, "tensor[1] 'x' offset: data [0, 64) overlaps tensor[0] [32, 64)");
    two_tensors(&b, "x", 8, 0, "x", 8, 32, 64);
    REFUSED(24 + 33, "tensor[1] 'x' name: duplicate of tensor[0]");
    /* out of order but disjoint is fine */
    two_tensors(&b, "x", 8, 32, "y", 8, 0, 64);
    OPENS();
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/pagellm-gguf.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    RUN(stories260k_opens);
    RUN(vocab_files_open_in_linear_time);
    RUN(round_trip_stories260k);
    RUN(round_trip_vocab_files);
    RUN(llamacpp_loads_rewritten);
    RUN(writer_all_types);
    RUN(writer_refuses_bad_input);
    RUN(writer_failure_leaves_no_file);
    RUN(getters_refuse_what_does_not_fit);
    RUN(open_reports_io_errors);
    RUN(every_truncation_fails_cleanly);
    RUN(random_byte_flips_fail_cleanly);
    RUN(crafted_header);
    RUN(crafted_kv);
    RUN(crafted_arrays);
    RUN(crafted_alignment);
    RUN(crafted_tensors);
    RUN(crafted_tensor_pairs);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("# could not remove %s\n", tmpdir);
    return test_summary();
}
