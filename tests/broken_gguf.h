/* broken_gguf.h - a GGUF copied with one change (a key dropped or set, a
 * tensor dropped or one slice short along its third dimension), and the
 * check that loading such a file is refused naming what is wrong. For the
 * model-family tests; define BROKEN_GGUF_OUT (the scratch path) before
 * including it. */
#ifndef PL_TESTS_BROKEN_GGUF_H
#define PL_TESTS_BROKEN_GGUF_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "pagellm.h"
#include "test.h"

/* set_key is written with set_value whether or not the file has it. */
typedef struct {
    const char *drop_key, *set_key;
    uint32_t set_value;
    const char *drop_tensor, *reshape_tensor;
} breakage;

static int write_broken(const char *in, const breakage *b, const char *out)
{
    gguf_file *f;
    if (gguf_open(&f, in) != 0) return -1;
    gguf_writer *w = gguf_writer_new();
    int rc = 0;
    bool set = false;
    for (uint64_t i = 0; i < gguf_meta_count(f) && !rc; i++) {
        const gguf_meta *kv = gguf_meta_at(f, i);
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
        if (b->drop_key && strcmp(key, b->drop_key) == 0) continue;
        if (b->set_key && strcmp(key, b->set_key) == 0) rc = gguf_writer_set_u32(w, key, b->set_value), set = true;
        else rc = gguf_writer_set_value(w, key, &kv->value);
    }
    if (!rc && b->set_key && !set) rc = gguf_writer_set_u32(w, b->set_key, b->set_value);
    for (uint64_t i = 0; i < gguf_tensor_count(f) && !rc; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        if (b->drop_tensor && strcmp(name, b->drop_tensor) == 0) continue;
        uint64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (b->reshape_tensor && strcmp(name, b->reshape_tensor) == 0) ne[2] -= 1; /* one slice short */
        rc = gguf_writer_add_tensor(w, name, t->type, t->n_dims, ne, t->data) < 0;
    }
    if (!rc) rc = gguf_writer_write(w, out, NULL, NULL);
    gguf_writer_free(w);
    gguf_close(f);
    return rc;
}

/* Loading out fails with code, the error naming each of the words. */
#define CHECK_REFUSED(in, brk, code, word1, word2) do { \
    const char *out_ = BROKEN_GGUF_OUT; \
    pl_model *m_ = NULL; \
    CHECK(write_broken(in, &(brk), out_) == 0); \
    const int rc_ = pl_model_load(&m_, out_); \
    unlink(out_); \
    CHECK_MSG(rc_ == (code) && m_ == NULL, "rc %d: %s", rc_, pl_last_error()); \
    CHECK_MSG(strstr(pl_last_error(), word1) && strstr(pl_last_error(), word2), "%s", pl_last_error()); \
} while (0)

#endif
