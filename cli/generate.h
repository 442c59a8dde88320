/* generate.h - the decode loop that run and chat share: sample, append,
 * detokenize as a stream, stop at EOS / max tokens / stop strings. */
#ifndef PL_CLI_GENERATE_H
#define PL_CLI_GENERATE_H

#include <stdio.h>

#include "pagellm.h"

typedef struct {
    int max_tokens;           /* stop after this many generated tokens */
    bool ignore_eos;          /* keep going past end-of-generation tokens */
    const char *const *stops; /* stop strings */
    int n_stops;
    FILE *stream;             /* text is written here as it is produced (NULL: not streamed) */
} gen_config;

typedef struct {
    int32_t *ids;      /* generated token ids (malloc'd) */
    int n_ids;
    char *text;        /* generated text, stop string excluded (malloc'd) */
    size_t text_len;
    double decode_s;   /* wall time of the decode steps */
    const char *stop_reason; /* "eos", "length", "stop" */
} gen_result;

/* Generates from seq, whose last appended token produced logits (n_vocab
 * floats, overwritten as the loop runs). Returns 0, a negative error
 * (message in pl_last_error()), or 1 when it printed the error itself. */
int generate(pl_ctx *c, const pl_model *m, int32_t seq, pl_sampler *s, float *logits, const gen_config *cfg,
             gen_result *out);
void gen_result_free(gen_result *r);
/* Appends n bytes to r->text (kept NUL-terminated; *cap is its capacity).
 * 0 or -1 (out of memory). */
int gen_result_add_text(gen_result *r, size_t *cap, const char *s, size_t n);

double now_seconds(void);

#endif
