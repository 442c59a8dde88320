/* tokenize.c - text to ids: special tokens first, then SPM or BPE on the
 * text between them, with BOS/EOS around (llama.cpp's llama_vocab::
 * impl::tokenize and tokenizer_st_partition).
 *
 * Partition: the special tokens are taken one by one, longest text first;
 * each cuts every still-raw fragment at all its occurrences, left to right.
 * Control and unknown tokens take part only with parse_special; user-defined
 * ones always (as in Hugging Face tokenizers). A token with the LSTRIP
 * (RSTRIP) attribute also swallows the ASCII whitespace before (after) it.
 *
 *   "a<s>b</s>"  ->  [raw "a"] [tok 1] [raw "b"] [tok 2]
 *
 * SentencePiece then prefixes a space to each raw fragment that follows a
 * special token or starts the text (add_space_prefix) and writes spaces as
 * ▁. Cost: one pass over the text to see which special tokens can occur at
 * all (by first byte, then memmem), so plain text costs nothing here.
 */
#include "tokenizer/tok_impl.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t off, len;
    int32_t tok;  /* -1: raw text [off, off+len) */
} frag;

typedef struct {
    frag *v;
    size_t n, cap;
} frags;

static int frags_push(frags *f, size_t off, size_t len, int32_t tok)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        frag *nv = realloc(f->v, cap * sizeof *nv);
        if (!nv) return err_set(PL_ENOMEM, "tokenizer: out of memory for %zu fragments", cap);
        f->v = nv;
        f->cap = cap;
    }
    f->v[f->n++] = (frag){off, len, tok};
    return 0;
}

static bool ascii_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* Cuts raw fragment f of text at every occurrence of special token id. */
static int cut_fragment(const tok_vocab *v, const char *text, frag f, int32_t id, frags *out)
{
    const char *t = tok_text(v, id);
    size_t tl = v->len[id], off = f.off, end = f.off + f.len;
    uint16_t a = v->attr[id];
    int rc = 0;
    while (!rc && off < end) {
        const char *p = memmem(text + off, end - off, t, tl);
        if (!p) return frags_push(out, off, end - off, -1);
        size_t m = (size_t)(p - text), left = m - off;
        if (a & TOK_ATTR_LSTRIP)
            while (left > 0 && ascii_space(text[off + left - 1])) left--;
        if (left) rc = frags_push(out, off, left, -1);
        if (!rc) rc = frags_push(out, 0, 0, id);
        off = m + tl;
        if (a & TOK_ATTR_RSTRIP)
            while (off < end && ascii_space(text[off])) off++;
    }
    return rc;
}

static bool special_applies(const tok_vocab *v, int32_t id, bool parse_special)
{
    return parse_special || !(v->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN));
}

static int partition(const tok_vocab *v, const char *text, size_t len, bool parse_special, frags *cur)
{
    bool first[256] = {false}, seen[256] = {false};
    for (int32_t i = 0; i < v->n_special; i++)
        if (special_applies(v, v->special[i], parse_special)) first[(uint8_t)tok_text(v, v->special[i])[0]] = true;
    for (size_t i = 0; i < len; i++) seen[(uint8_t)text[i]] = true;
    int rc = frags_push(cur, 0, len, -1);
    frags next = {0};
    for (int32_t i = 0; !rc && i < v->n_special; i++) {
        int32_t id = v->special[i];
        const char *t = tok_text(v, id);
        if (!special_applies(v, id, parse_special) || !first[(uint8_t)t[0]] || !seen[(uint8_t)t[0]]) continue;
        if (!memmem(text, len, t, v->len[id])) continue;
        next.n = 0;
        for (size_t j = 0; !rc && j < cur->n; j++)
            rc = cur->v[j].tok >= 0 ? frags_push(&next, 0, 0, cur->v[j].tok) : cut_fragment(v, text, cur->v[j], id, &next);
        frags tmp = *cur;
        *cur = next;
        next = tmp;
    }
    free(next.v);
    return rc;
}

/* SentencePiece on one raw fragment: optional leading space, spaces as ▁. */
static int spm_fragment(const tok_vocab *v, const char *s, size_t len, bool prefix, tok_ids *out)
{
    char *buf = malloc(len * 3 + 4);
    if (!buf) return err_set(PL_ENOMEM, "tokenizer: out of memory for %zu bytes of text", len);
    size_t o = 0;
    if (prefix) memcpy(buf, "\xE2\x96\x81", 3), o = 3;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ') memcpy(buf + o, "\xE2\x96\x81", 3), o += 3;
        else buf[o++] = s[i];
    }
    int rc = tok_spm_encode(v, buf, o, out);
    free(buf);
    return rc;
}

static int encode_fragments(const tok_vocab *v, const char *text, const frags *fr, tok_ids *out)
{
    bool prev_special = true; /* the start of the text counts as one */
    int rc = 0;
    for (size_t i = 0; !rc && i < fr->n; i++) {
        const frag *f = &fr->v[i];
        if (f->tok >= 0) {
            rc = tok_ids_push(out, f->tok);
            prev_special = true;
        } else if (v->kind == TOK_SPM) {
            rc = spm_fragment(v, text + f->off, f->len, v->add_space_prefix && prev_special, out);
            prev_special = false;
        } else {
            rc = tok_bpe_encode(v, text + f->off, f->len, out);
        }
    }
    return rc;
}

int tok_tokenize(const tok_vocab *v, const char *text, size_t len, bool add_bos, bool parse_special,
                 int32_t **ids, size_t *n)
{
    if (!text && len) return err_set(PL_EINVAL, "tokenize: text is NULL");
    tok_ids out = {0};
    frags fr = {0};
    int rc = 0;
    if (add_bos && v->bos >= 0) rc = tok_ids_push(&out, v->bos);
    if (!rc && len) rc = partition(v, text, len, parse_special, &fr);
    if (!rc) rc = encode_fragments(v, text, &fr, &out);
    if (!rc && add_bos && v->add_eos && v->eos >= 0) rc = tok_ids_push(&out, v->eos);
    free(fr.v);
    if (rc) {
        free(out.v);
        return rc;
    }
    *ids = out.v;
    *n = out.n;
    return 0;
}
