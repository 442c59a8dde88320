/* synth_vocab.c - built-in byte-level vocabulary; see synth_vocab.h. */
#include "model/synth_vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"

#define SYNTH_BOS 256
#define SYNTH_EOS 257
#define SYNTH_FIRST_WORD 258

/* GPT-2's byte-to-unicode map: printable Latin-1 bytes map to themselves,
 * the others to U+0100 + k in byte order. Writes the UTF-8 of byte b. */
static int byte_to_utf8(int b, char *out)
{
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    int cp = b;
    if (!printable) {
        int k = 0;
        for (int c = 0; c < b; c++)
            if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))) k++;
        cp = 256 + k;
    }
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* The i-th word token (i >= 0): enumerate lengths 2, 3, 4, ...; within a
 * length, words "aa".."zz..", each first without and then with the
 * 'Ġ' (space) prefix. Writes the spelling and the merge "left right". */
static void word_at(uint64_t i, char *tok, char *merge)
{
    if (i < 26) { /* "Ġa".."Ġz": the spaced single letters longer words build on */
        snprintf(tok, 32, "\xC4\xA0%c", (char)('a' + i));
        snprintf(merge, 48, "\xC4\xA0 %c", (char)('a' + i));
        return;
    }
    i -= 26;
    uint64_t len = 2, count = 26 * 26;
    while (i >= 2 * count) { i -= 2 * count; len++; count *= 26; }
    int spaced = (int)(i % 2);
    uint64_t k = i / 2;
    char letters[16];
    for (int p = (int)len - 1; p >= 0; p--) { letters[p] = (char)('a' + k % 26); k /= 26; }
    letters[len] = '\0';
    const char *sp = spaced ? "\xC4\xA0" : ""; /* U+0120 'Ġ' */
    snprintf(tok, 32, "%s%s", sp, letters);
    /* left = all but the last letter (a single letter when len == 2) */
    snprintf(merge, 48, "%s%.*s %c", sp, (int)len - 1, letters, letters[len - 1]);
}

int synth_vocab_write(gguf_writer *w, uint32_t n)
{
    if (n < SYNTH_FIRST_WORD + 1) return err_set(PL_EINVAL, "vocab size %u < %d", n, SYNTH_FIRST_WORD + 1);
    uint32_t n_words = n - SYNTH_FIRST_WORD;
    char *text = malloc((size_t)n * 32 + (size_t)n_words * 48);
    gguf_str *toks = mem_calloc(n, sizeof *toks);
    gguf_str *merges = mem_calloc(n_words, sizeof *merges);
    float *scores = mem_calloc(n, sizeof *scores);
    int32_t *types = mem_calloc(n, sizeof *types);
    int rc = PL_ENOMEM;
    if (!text || !toks || !merges || !scores || !types) goto out;
    char *p = text;
    for (uint32_t i = 0; i < n; i++) {
        char merge[48];
        types[i] = 1;
        if (i < 256) {
            toks[i].len = (uint64_t)byte_to_utf8((int)i, p);
        } else if (i == SYNTH_BOS || i == SYNTH_EOS) {
            toks[i].len = (uint64_t)sprintf(p, i == SYNTH_BOS ? "<|bos|>" : "<|eos|>");
            types[i] = 3;
        } else {
            word_at(i - SYNTH_FIRST_WORD, p, merge);
            toks[i].len = strlen(p);
            char *m = text + (size_t)n * 32 + (size_t)(i - SYNTH_FIRST_WORD) * 48;
            strcpy(m, merge);
            merges[i - SYNTH_FIRST_WORD] = (gguf_str){m, strlen(m)};
        }
        toks[i].ptr = p;
        p += 32;
        scores[i] = -(float)i;
    }
    rc = gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    if (!rc) rc = gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2");
    if (!rc) rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, n);
    if (!rc) rc = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, n);
    if (!rc) rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, n_words);
    if (!rc) rc = gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", SYNTH_BOS);
    if (!rc) rc = gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", SYNTH_EOS);
    if (!rc) rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
out:
    free(text);
    free(toks);
    free(merges);
    free(scores);
    free(types);
    return rc;
}
