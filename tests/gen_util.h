/* gen_util.h - helpers for tests that generate with pagellm and compare with
 * the llama.cpp peer (tests/peer.sh builds it under /tmp/llamacpp-peer).
 * Header-only: each test binary includes it once. */
#ifndef PL_TESTS_GEN_UTIL_H
#define PL_TESTS_GEN_UTIL_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pagellm.h"

#define PEER_DIR_DEFAULT "/tmp/llamacpp-peer"

static const char *peer_dir(void)
{
    const char *d = getenv("PEER_DIR");
    return d ? d : PEER_DIR_DEFAULT;
}

static int peer_available(void)
{
    char p[512];
    snprintf(p, sizeof p, "%s/peer-bench", peer_dir());
    return access(p, X_OK) == 0;
}

typedef struct {
    int32_t ids[4096];
    int n;
} id_list;

static void json_ids(json_t *arr, id_list *out)
{
    out->n = 0;
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) if (out->n < 4096) out->ids[out->n++] = (int32_t)json_integer_value(v);
}

/* Runs peer-bench greedy; fills prompt and gen ids. 0 on success. */
static int peer_greedy(const char *model, const char *prompt, int n_gen, id_list *pids, id_list *gids)
{
    char cmd[4096];
    char *q = cmd + snprintf(cmd, sizeof cmd, "%s/peer-bench -m '%s' -ng %d -t 2 -p '", peer_dir(), model, n_gen);
    for (const char *s = prompt; *s && q < cmd + sizeof cmd - 16; s++) {
        if (*s == '\'') { memcpy(q, "'\\''", 4); q += 4; }
        else *q++ = *s;
    }
    strcpy(q, "' 2>/dev/null");
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    if (pclose(f) != 0) return -1;
    json_t *o = json_loads(buf, 0, NULL);
    if (!o) return -1;
    json_ids(json_object_get(o, "prompt_ids"), pids);
    json_ids(json_object_get(o, "gen_ids"), gids);
    json_decref(o);
    return 0;
}

/* llama.cpp's logits after the sequence ids[0..n) (n_vocab floats, malloc'd). */
static float *peer_logits(const char *model, const int32_t *ids, int n, int n_vocab)
{
    size_t cap = (size_t)n * 8 + 512;
    char *cmd = malloc(cap + 1024), out[64];
    snprintf(out, sizeof out, "/tmp/pagellm-peer-logits-%d.f32", (int)getpid());
    char *q = cmd + snprintf(cmd, cap + 1024, "%s/peer-logits -m '%s' -o %s -ids ", peer_dir(), model, out);
    for (int i = 0; i < n; i++) q += sprintf(q, i ? ",%d" : "%d", ids[i]);
    strcpy(q, " 2>/dev/null");
    int rc = system(cmd);
    free(cmd);
    if (rc != 0) return NULL;
    float *l = malloc(sizeof(float) * (size_t)n_vocab);
    FILE *f = fopen(out, "rb");
    if (!f || fread(l, sizeof(float), (size_t)n_vocab, f) != (size_t)n_vocab) { free(l); l = NULL; }
    if (f) fclose(f);
    unlink(out);
    return l;
}

/* Greedy generation with pagellm from prompt ids; logits of every step are
 * kept in steps[n_gen][n_vocab] when steps is not NULL. */
static int our_greedy(pl_model *m, const pl_ctx_params *cp, const int32_t *prompt, int n_prompt, int n_gen,
                      id_list *gen, float *steps)
{
    pl_ctx *c = NULL;
    int32_t seq;
    const uint32_t nv = pl_model_n_vocab(m);
    float *logits = malloc(sizeof(float) * nv);
    int rc = pl_ctx_new(&c, m, cp);
    if (!rc) rc = pl_seq_new(c, &seq);
    if (!rc) rc = pl_seq_append(c, seq, prompt, (size_t)n_prompt, logits);
    gen->n = 0;
    for (int i = 0; !rc && i < n_gen; i++) {
        int32_t best = 0;
        for (uint32_t v = 1; v < nv; v++)
            if (logits[v] > logits[best]) best = (int32_t)v;
        if (steps) memcpy(steps + (size_t)i * nv, logits, sizeof(float) * nv);
        gen->ids[gen->n++] = best;
        if (i + 1 < n_gen) rc = pl_seq_append(c, seq, &best, 1, logits);
    }
    pl_ctx_free(c);
    free(logits);
    return rc;
}

static int ids_equal(const id_list *a, const id_list *b)
{
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++)
        if (a->ids[i] != b->ids[i]) return 0;
    return 1;
}

static int first_difference(const id_list *a, const id_list *b)
{
    int i = 0;
    while (i < a->n && i < b->n && a->ids[i] == b->ids[i]) i++;
    return i;
}

static int file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && st.st_size > 0;
}

#endif
