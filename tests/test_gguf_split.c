/* test_gguf_split.c - split models (llama.cpp's gguf-split files): the
 * writer's shard sets open as one model, zero-copy; hostile sets (a
 * missing shard, a wrong split.no, another split.count, a tensor twice, a
 * tensor missing, a first shard misnamed, a later shard named) are refused
 * with an error naming the shard and what is wrong.
 *
 * Scratch files live in a mkdtemp directory under /tmp, removed at the end.
 */
#include <stdint.h>
#include <unistd.h>

#include "base/err.h"
#include "gguf/gguf.h"
#include "tensor/dtype.h"
#include "test.h"

static char tmpdir[64];

static const char *tpath(const char *name)
{
    static char buf[4][256];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", tmpdir, name);
    return p;
}

/* Tensor idx's bytes: a pattern that tells tensors and positions apart. */
static uint8_t pattern(uint64_t idx, uint64_t j) { return (uint8_t)(idx * 37 + j * 11 + 1); }

static int fill_pattern(void *user, uint64_t idx, void *dst, uint64_t nbytes)
{
    (void)user;
    for (uint64_t j = 0; j < nbytes; j++) ((uint8_t *)dst)[j] = pattern(idx, j);
    return 0;
}

#define N_TS 7

/* A model of N_TS f32 tensors t0..t6 of different sizes. */
static gguf_writer *model_writer(void)
{
    gguf_writer *w = gguf_writer_new();
    if (!w || gguf_writer_set_str(w, "general.architecture", "llama") || gguf_writer_set_u32(w, "llama.block_count", 3)) {
        gguf_writer_free(w);
        return NULL;
    }
    for (int i = 0; i < N_TS; i++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        const uint64_t ne[2] = {8 * (uint64_t)(i + 1), 4};
        if (gguf_writer_add_tensor(w, name, DT_F32, 2, ne, NULL) < 0) {
            gguf_writer_free(w);
            return NULL;
        }
    }
    return w;
}

TEST(split_set_opens_as_one_model)
{
    gguf_writer *w = model_writer();
    CHECK(w);
    CHECK_MSG(gguf_writer_write_split(w, tpath("m"), 3, fill_pattern, NULL) == 0, "%s", err_msg());
    gguf_writer_free(w);
    gguf_file *f = NULL;
    CHECK_MSG(gguf_open_model(&f, tpath("m-00001-of-00003.gguf")) == 0, "%s", err_msg());
    CHECK_EQ_INT(gguf_tensor_count(f), N_TS);
    CHECK_EQ_INT(gguf_shard_count(f), 3);
    gguf_str arch;
    CHECK(gguf_get_str(f, "general.architecture", &arch) == 0 && gguf_str_eq(arch, "llama"));
    bool shard_used[3] = {false, false, false};
    for (int i = 0; i < N_TS; i++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        const gguf_tensor *t = gguf_tensor_find(f, name);
        CHECK_MSG(t && t->nbytes == 8 * (uint64_t)(i + 1) * 4 * 4, "%s", name);
        for (uint64_t j = 0; j < t->nbytes; j++)
            CHECK_MSG(((const uint8_t *)t->data)[j] == pattern((uint64_t)i, j), "%s byte %llu", name,
                      (unsigned long long)j);
        /* zero-copy: the data is in its own shard's mapping */
        const gguf_file *s = gguf_shard(f, t->shard);
        CHECK(s && (const uint8_t *)t->data == gguf_file_bytes(s) + gguf_data_offset(s) + t->offset);
        CHECK(gguf_tensor_file_offset(f, t) == gguf_data_offset(s) + t->offset);
        shard_used[t->shard] = true;
    }
    CHECK(shard_used[0] && shard_used[1] && shard_used[2]);
    gguf_close(f);
    /* a later shard alone is a plain GGUF with its split keys only */
    CHECK(gguf_open(&f, tpath("m-00002-of-00003.gguf")) == 0);
    uint32_t no = 9;
    CHECK(gguf_get_u32(f, "split.no", &no) == 0 && no == 1);
    CHECK(!gguf_meta_find(f, "general.architecture"));
    gguf_close(f);
    /* a plain file opens as gguf_open does */
    w = model_writer();
    CHECK(w && gguf_writer_write(w, tpath("plain.gguf"), fill_pattern, NULL) == 0);
    gguf_writer_free(w);
    CHECK(gguf_open_model(&f, tpath("plain.gguf")) == 0 && gguf_tensor_count(f) == N_TS && gguf_shard_count(f) == 1);
    gguf_close(f);
}

/* Writes one shard by hand: split keys as given, tensors named names[]. */
static int shard_write(const char *path, int no, int count, int total, const char *const *names, int n)
{
    gguf_writer *w = gguf_writer_new();
    int rc = w ? 0 : PL_ENOMEM;
    if (!rc && no == 0) rc = gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_value v = {.type = GGUF_TYPE_UINT16};
    v.v.u64 = (uint64_t)no;
    if (!rc && no >= 0) rc = gguf_writer_set_value(w, "split.no", &v);
    v.v.u64 = (uint64_t)count;
    if (!rc && count >= 0) rc = gguf_writer_set_value(w, "split.count", &v);
    if (!rc && total >= 0) rc = gguf_writer_set_i32(w, "split.tensors.count", total);
    for (int i = 0; !rc && i < n; i++) {
        const uint64_t ne[1] = {8};
        if (gguf_writer_add_tensor(w, names[i], DT_F32, 1, ne, NULL) < 0) rc = PL_EINVAL;
    }
    if (!rc) rc = gguf_writer_write(w, path, fill_pattern, NULL);
    gguf_writer_free(w);
    return rc;
}

/* Opening name must fail with PL_EFORMAT / PL_EIO and a text holding each
 * of the parts. */
static const char *refused(const char *name, const char *part1, const char *part2)
{
    static char why[600];
    gguf_file *f = NULL;
    int rc = gguf_open_model(&f, tpath(name));
    if (rc == 0) {
        gguf_close(f);
        return "opened";
    }
    const char *msg = err_msg();
    if ((part1 && !strstr(msg, part1)) || (part2 && !strstr(msg, part2))) {
        snprintf(why, sizeof why, "rc %d, message lacks '%s' / '%s': %s", rc, part1, part2 ? part2 : "", msg);
        return why;
    }
    return NULL;
}

TEST(hostile_split_sets_are_named)
{
    static const char *const a[] = {"a0", "a1"}, *const b[] = {"b0"}, *const c[] = {"c0", "c1"};
    const char *why;
    /* a good set of three: a0 a1 | b0 | c0 c1 */
    CHECK(shard_write(tpath("h-00001-of-00003.gguf"), 0, 3, 5, a, 2) == 0);
    CHECK(shard_write(tpath("h-00002-of-00003.gguf"), 1, 3, 5, b, 1) == 0);
    CHECK(shard_write(tpath("h-00003-of-00003.gguf"), 2, 3, 5, c, 2) == 0);
    gguf_file *f = NULL;
    CHECK_MSG(gguf_open_model(&f, tpath("h-00001-of-00003.gguf")) == 0 && gguf_tensor_count(f) == 5, "good set: %s",
              err_msg());
    gguf_close(f);
    /* the second shard named instead of the first */
    why = refused("h-00002-of-00003.gguf", "shard 2 of a 3-file split model", "-00001-of-00003.gguf");
    CHECK_MSG(!why, "later shard: %s", why);
    /* a missing shard */
    CHECK(rename(tpath("h-00003-of-00003.gguf"), tpath("h3.bak")) == 0);
    why = refused("h-00001-of-00003.gguf", "shard 3 of 3", "h-00003-of-00003.gguf: cannot open");
    CHECK_MSG(!why, "missing shard: %s", why);
    CHECK(rename(tpath("h3.bak"), tpath("h-00003-of-00003.gguf")) == 0);
    /* the third file says it is shard 2 (split.no 1) */
    CHECK(shard_write(tpath("h-00003-of-00003.gguf"), 1, 3, 5, c, 2) == 0);
    why = refused("h-00001-of-00003.gguf", "h-00003-of-00003.gguf: split.no = 1, expected 2", NULL);
    CHECK_MSG(!why, "wrong split.no: %s", why);
    /* the third file belongs to a set of four */
    CHECK(shard_write(tpath("h-00003-of-00003.gguf"), 2, 4, 5, c, 2) == 0);
    why = refused("h-00001-of-00003.gguf", "h-00003-of-00003.gguf: split.count = 4, but the first shard says 3", NULL);
    CHECK_MSG(!why, "other count: %s", why);
    /* a third file without split keys */
    CHECK(shard_write(tpath("h-00003-of-00003.gguf"), -1, -1, -1, c, 2) == 0);
    why = refused("h-00001-of-00003.gguf", "h-00003-of-00003.gguf: split shard without split.no", NULL);
    CHECK_MSG(!why, "no keys: %s", why);
    /* a tensor in two shards */
    static const char *const dup[] = {"c0", "a1"};
    CHECK(shard_write(tpath("h-00003-of-00003.gguf"), 2, 3, 5, dup, 2) == 0);
    why = refused("h-00001-of-00003.gguf", "h-00003-of-00003.gguf: tensor 'a1'", "is also in");
    CHECK_MSG(!why, "duplicate: %s", why);
    CHECK_MSG(strstr(err_msg(), "h-00001-of-00003.gguf"), "duplicate names the first holder: %s", err_msg());
    /* a tensor missing: the shards hold 4, the first says 5 */
    CHECK(shard_write(tpath("h-00003-of-00003.gguf"), 2, 3, 5, c, 1) == 0);
    why = refused("h-00001-of-00003.gguf", "split.tensors.count = 5, but the 3 shards hold 4 tensors", NULL);
    CHECK_MSG(!why, "missing tensor: %s", why);
    /* a first shard whose name does not follow the rule */
    CHECK(shard_write(tpath("renamed.gguf"), 0, 3, 5, a, 2) == 0);
    why = refused("renamed.gguf", "does not end in '-00001-of-00003.gguf'", NULL);
    CHECK_MSG(!why, "misnamed: %s", why);
    /* split.count 0 */
    CHECK(shard_write(tpath("z-00001-of-00001.gguf"), 0, 0, 2, a, 2) == 0);
    why = refused("z-00001-of-00001.gguf", "split.count = 0", NULL);
    CHECK_MSG(!why, "count 0: %s", why);
}

TEST(split_writer_refuses_bad_counts)
{
    gguf_writer *w = model_writer();
    CHECK(w);
    CHECK(gguf_writer_write_split(w, tpath("bad"), 0, fill_pattern, NULL) == PL_EINVAL);
    CHECK(gguf_writer_write_split(w, tpath("bad"), N_TS + 1, fill_pattern, NULL) == PL_EINVAL);
    CHECK_MSG(strstr(err_msg(), "cannot split 7 tensors into 8 shards"), "%s", err_msg());
    /* every tensor its own shard */
    CHECK(gguf_writer_write_split(w, tpath("each"), N_TS, fill_pattern, NULL) == 0);
    gguf_writer_free(w);
    gguf_file *f = NULL;
    CHECK_MSG(gguf_open_model(&f, tpath("each-00001-of-00007.gguf")) == 0, "%s", err_msg());
    CHECK_EQ_INT(gguf_shard_count(f), N_TS);
    for (uint32_t i = 1; i < N_TS; i++) CHECK_EQ_INT(gguf_tensor_count(gguf_shard(f, i)), 1);
    gguf_close(f);
    CHECK(access(tpath("bad-00001-of-00008.gguf"), F_OK) != 0);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/pagellm-split.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    RUN(split_set_opens_as_one_model);
    RUN(hostile_split_sets_are_named);
    RUN(split_writer_refuses_bad_counts);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("# could not remove %s\n", tmpdir);
    return test_summary();
}
