/* generate.c - the shared decode loop; see generate.h. */
#include "generate.h"
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int gen_result_add_text(gen_result *r, size_t *cap, const char *s, size_t n)
{
    if (r->text_len + n + 1 > *cap) {
        size_t nc = (r->text_len + n + 1) * 2;
        char *t = realloc(r->text, nc);
        if (!t) return -1;
        r->text = t;
        *cap = nc;
    }
    memcpy(r->text + r->text_len, s, n);
    r->text_len += n;
    r->text[r->text_len] = 0;
    return 0;
}

/* Sends newly complete text through the stop matcher to the stream and the result. */
static bool emit(pl_stop *st, const gen_config *cfg, gen_result *r, size_t *cap, const char *piece, size_t n,
                 char *buf)
{
    bool stopped = false;
    size_t k = pl_stop_feed(st, piece, n, buf, &stopped);
    if (k) {
        gen_result_add_text(r, cap, buf, k);
        if (cfg->stream) { fwrite(buf, 1, k, cfg->stream); fflush(cfg->stream); }
    }
    return stopped;
}

int generate(pl_ctx *c, const pl_model *m, int32_t seq, pl_sampler *s, float *logits, const gen_config *cfg,
             gen_result *out)
{
    const pl_vocab *v = pl_model_vocab(m);
    gen_result r = {0};
    size_t cap = 0;
    r.ids = calloc((size_t)cfg->max_tokens + 1, sizeof *r.ids);
    pl_detok *d = pl_detok_new(v);
    pl_stop *st = pl_stop_new(cfg->stops, (size_t)cfg->n_stops);
    char piece[1024], buf[4096];
    int rc = 0;
    if (!r.ids) {
        cli_error("generate", "out of memory for %d token ids", cfg->max_tokens);
        rc = 1; /* said here: not the library's error */
    } else if (!d || !st) {
        rc = -3;
    }
    r.stop_reason = "length";
    double t0 = now_seconds();
    while (!rc && r.n_ids < cfg->max_tokens) {
        int32_t id = pl_sampler_sample(s, logits, pl_seq_tokens(c, seq), pl_seq_len(c, seq));
        if (!cfg->ignore_eos && pl_vocab_is_eog(v, id)) { r.stop_reason = "eos"; break; }
        r.ids[r.n_ids++] = id;
        int n = pl_detok_push(d, id, piece, sizeof piece);
        if (n > 0 && emit(st, cfg, &r, &cap, piece, (size_t)n, buf)) { r.stop_reason = "stop"; break; }
        if (r.n_ids == cfg->max_tokens) break;
        /* a window drops old blocks instead: only max_tokens ends it */
        if (!pl_ctx_unbounded(c) && pl_seq_len(c, seq) >= pl_ctx_n_ctx(c)) { r.stop_reason = "length"; break; }
        rc = pl_seq_append(c, seq, &id, 1, logits);
    }
    r.decode_s = now_seconds() - t0;
    if (!rc && strcmp(r.stop_reason, "stop") != 0) {
        int n = pl_detok_flush(d, piece, sizeof piece);
        bool stopped = n > 0 && emit(st, cfg, &r, &cap, piece, (size_t)n, buf);
        if (stopped) r.stop_reason = "stop";
        size_t k = pl_stop_flush(st, buf);
        if (k) {
            gen_result_add_text(&r, &cap, buf, k);
            if (cfg->stream) fwrite(buf, 1, k, cfg->stream);
        }
    }
    if (!r.text) r.text = calloc(1, 1);
    pl_detok_free(d);
    pl_stop_free(st);
    if (rc) { gen_result_free(&r); return rc; }
    *out = r;
    return 0;
}

void gen_result_free(gen_result *r)
{
    free(r->ids);
    free(r->text);
    memset(r, 0, sizeof *r);
}
