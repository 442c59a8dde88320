/* gguf_split.c - opening a model split into shards by llama.cpp's
 * gguf-split (see gguf.h): PREFIX-00001-of-00003.gguf names the set.
 *
 * Every shard is an ordinary GGUF, validated by gguf_open; on top of that:
 *   - the named file must be shard 1 (split.no = 0) and its name must end
 *     in -00001-of-0000N.gguf with N = split.count (llama.cpp's rule);
 *   - shard i (1-based) must exist, hold split.no = i - 1 and the same
 *     split.count;
 *   - no tensor name may appear twice across shards, and the total must be
 *     split.tensors.count of the first shard.
 * Each error names the shard's path and what is wrong with it.
 */
#include "gguf/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

#define SPLIT_NO "split.no"
#define SPLIT_COUNT "split.count"
#define SPLIT_TENSORS "split.tensors.count"

/* split.no and split.count of f (u16 in llama.cpp's files; any integer
 * type that fits is accepted). */
static int split_keys(const gguf_file *f, uint32_t *no, uint32_t *count)
{
    uint64_t v;
    if (!gguf_meta_find(f, SPLIT_NO)) return err_set(PL_EFORMAT, "%s: split shard without %s", gguf_path(f), SPLIT_NO);
    int rc = gguf_get_u64(f, SPLIT_NO, &v);
    if (!rc && v > 65535) rc = err_set(PL_EFORMAT, "%s: %s = %llu, more than 65535", gguf_path(f), SPLIT_NO,
                                       (unsigned long long)v);
    if (rc) return rc;
    *no = (uint32_t)v;
    if (!gguf_meta_find(f, SPLIT_COUNT))
        return err_set(PL_EFORMAT, "%s: split shard without %s", gguf_path(f), SPLIT_COUNT);
    rc = gguf_get_u64(f, SPLIT_COUNT, &v);
    if (!rc && (v == 0 || v > 65535))
        rc = err_set(PL_EFORMAT, "%s: %s = %llu, not in 1..65535", gguf_path(f), SPLIT_COUNT, (unsigned long long)v);
    if (rc) return rc;
    *count = (uint32_t)v;
    return 0;
}

/* The PREFIX of a first shard's path, or an error naming the rule. */
static int split_prefix(const char *path, uint32_t count, char **prefix)
{
    char tail[40];
    snprintf(tail, sizeof tail, "-%05u-of-%05u.gguf", 1u, count);
    const size_t n = strlen(path), m = strlen(tail);
    if (n <= m || strcmp(path + n - m, tail) != 0)
        return err_set(PL_EFORMAT, "%s: first shard of a %u-file split model, but its name does not end in '%s' "
                       "(llama.cpp's naming, which finds the other shards)", path, count, tail);
    *prefix = strndup(path, n - m);
    return *prefix ? 0 : err_set(PL_ENOMEM, "%s: out of memory", path);
}

/* Opens shard i (0-based) of count and checks its keys. */
static int shard_open(const char *prefix, uint32_t i, uint32_t count, gguf_file **out)
{
    const size_t cap = strlen(prefix) + 32;
    char *path = malloc(cap);
    if (!path) return err_set(PL_ENOMEM, "out of memory");
    snprintf(path, cap, "%s-%05u-of-%05u.gguf", prefix, i + 1, count);
    gguf_file *s = NULL;
    int rc = gguf_open(&s, path);
    if (rc) err_prefix(rc, "split model %s-00001-of-%05u.gguf: shard %u of %u", prefix, count, i + 1, count);
    uint32_t no = 0, cnt = 0;
    if (!rc) rc = split_keys(s, &no, &cnt);
    if (!rc && cnt != count)
        rc = err_set(PL_EFORMAT, "%s: %s = %u, but the first shard says %u", path, SPLIT_COUNT, cnt, count);
    if (!rc && no != i)
        rc = err_set(PL_EFORMAT, "%s: %s = %u, expected %u for shard %u of %u", path, SPLIT_NO, no, i, i + 1, count);
    free(path);
    if (rc) gguf_close(s);
    else *out = s;
    return rc;
}

static int split_join(gguf_file *f, uint32_t count)
{
    char *prefix = NULL;
    int rc = split_prefix(gguf_path(f), count, &prefix);
    for (uint32_t i = 1; !rc && i < count; i++) {
        gguf_file *s = NULL;
        rc = shard_open(prefix, i, count, &s);
        if (!rc && (rc = gguf_join_shard(f, s)) != 0) gguf_close(s);
    }
    free(prefix);
    uint64_t want = 0;
    if (!rc && !gguf_meta_find(f, SPLIT_TENSORS))
        rc = err_set(PL_EFORMAT, "%s: split model without %s", gguf_path(f), SPLIT_TENSORS);
    if (!rc) rc = gguf_get_u64(f, SPLIT_TENSORS, &want);
    if (!rc && want != gguf_tensor_count(f))
        rc = err_set(PL_EFORMAT, "%s: %s = %llu, but the %u shards hold %llu tensors", gguf_path(f), SPLIT_TENSORS,
                     (unsigned long long)want, count, (unsigned long long)gguf_tensor_count(f));
    return rc;
}

int gguf_open_model(gguf_file **out, const char *path)
{
    gguf_file *f = NULL;
    int rc = gguf_open(&f, path);
    if (rc || !gguf_meta_find(f, SPLIT_COUNT)) {
        if (!rc) *out = f;
        return rc;
    }
    uint32_t no = 0, count = 0;
    rc = split_keys(f, &no, &count);
    if (!rc && no != 0)
        rc = err_set(PL_EFORMAT, "%s: shard %u of a %u-file split model; open the first shard (-00001-of-%05u.gguf)",
                     path, no + 1, count, count);
    if (!rc && count > 1) rc = split_join(f, count);
    if (rc) {
        gguf_close(f);
        return rc;
    }
    *out = f;
    return 0;
}
