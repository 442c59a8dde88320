/* bpe.c - byte-level BPE encoding, as llama.cpp's llm_tokenizer_bpe does it.
 *
 *   text -> llama.cpp's reading of its UTF-8 (tok_utf8_canon)
 *        -> words (the pre-tokenizer regexes)
 *        -> each word's bytes spelled in GPT-2's byte alphabet
 *        -> merges: the adjacent pair with the lowest merge rank first
 *           (ties: leftmost), until no pair has a rank
 *        -> each symbol's token; a symbol that is no token falls back to
 *           the one-byte tokens of its bytes, and bytes without one are
 *           dropped (llama.cpp does the same).
 *
 * Symbols carry the string id of their text (tok_impl.h), so a pair's rank
 * is one integer-keyed lookup and a merge one string lookup of bytes that
 * are already contiguous in the word buffer. A heap entry is stale when
 * either symbol changed, which its size tells. Vocabularies whose
 * pre-tokenizer sets ignore_merges (llama3) take a whole word that is a
 * token as is.
 */
#include "tokenizer/tok_impl.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const tok_vocab *v;
    char *buf;           /* the word in the byte alphabet */
    size_t buf_cap;
    tok_symbol *sym;
    size_t n, cap;
    tok_heap heap;
    tok_cache cache;
} bpe_work;

static int32_t sid_of(const bpe_work *w, uint32_t off, uint32_t len)
{
    return tok_strmap_get(&w->v->map, w->buf + off, len);
}

static int try_pair(void *ctx, int32_t l, int32_t r)
{
    bpe_work *w = ctx;
    if (l < 0 || r < 0 || w->sym[l].sid < 0 || w->sym[r].sid < 0) return 0;
    uint64_t key = (uint64_t)(uint32_t)w->sym[l].sid << 32 | (uint32_t)w->sym[r].sid;
    int32_t rank = tok_pairmap_get(&w->v->merges, key);
    if (rank < 0) return 0;
    return tok_heap_push(&w->heap, (tok_bigram){tok_key_bpe(rank, l), r, w->sym[l].len + w->sym[r].len});
}

/* A merged symbol's text changed: look up its string id again. */
static void refresh_sid(void *ctx, tok_symbol *l)
{
    bpe_work *w = ctx;
    l->sid = sid_of(w, l->off, l->len);
}

static int merge_all(bpe_work *w) { return tok_merge_all(w->sym, w->n, &w->heap, try_pair, refresh_sid, w); }

static int emit_symbols(bpe_work *w, tok_ids *out)
{
    const tok_vocab *v = w->v;
    int rc = 0;
    for (int32_t i = 0; !rc && i >= 0; i = w->sym[i].next) {
        const tok_symbol *s = &w->sym[i];
        if (s->sid >= 0 && s->sid < v->n_tokens) {
            rc = tok_ids_push(out, s->sid);
            continue;
        }
        for (uint32_t j = 0; !rc && j < s->len; j++) {
            int32_t id = tok_lookup(v, w->buf + s->off + j, 1);
            if (id >= 0) rc = tok_ids_push(out, id);
        }
    }
    return rc;
}

/* Spells word[0..n) in the byte alphabet into w->buf and cuts it into
 * one-character symbols. */
static int load_word(bpe_work *w, const char *word, size_t n)
{
    if (n * 2 > w->buf_cap || n > w->cap) {
        free(w->buf);
        free(w->sym);
        w->buf_cap = n * 2 + 16;
        w->cap = n + 16;
        w->buf = malloc(w->buf_cap);
        w->sym = malloc(w->cap * sizeof *w->sym);
        if (!w->buf || !w->sym) return err_set(PL_ENOMEM, "tokenizer: out of memory for a %zu-byte word", n);
    }
    uint32_t o = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t k = (uint32_t)tok_utf8_encode(tok_byte_to_cp((uint8_t)word[i]), w->buf + o);
        int32_t s = (int32_t)i;
        w->sym[i] = (tok_symbol){s - 1, s + 1 < (int32_t)n ? s + 1 : -1, o, k, -1};
        w->sym[i].sid = sid_of(w, o, k);
        o += k;
    }
    w->n = n;
    return 0;
}

static int encode_word(bpe_work *w, const char *word, size_t n, tok_ids *out)
{
    if (!n) return 0;
    int rc = tok_cache_get(&w->cache, word, n, out);
    if (rc) return rc < 0 ? PL_ENOMEM : 0;
    size_t first = out->n;
    rc = load_word(w, word, n);
    if (rc) return rc;
    uint32_t total = w->sym[n - 1].off + w->sym[n - 1].len;
    int32_t whole = w->v->ignore_merges ? tok_lookup(w->v, w->buf, total) : -1;
    if (whole >= 0) {
        rc = tok_ids_push(out, whole);
    } else {
        w->heap.n = 0;
        rc = merge_all(w);
        if (!rc) rc = emit_symbols(w, out);
    }
    if (!rc) tok_cache_put(&w->cache, word, n, out->v + first, out->n - first);
    return rc;
}

int tok_bpe_encode(const tok_vocab *v, const char *text, size_t len, tok_ids *out)
{
    char *canon = NULL, *rx = NULL;
    size_t n = 0;
    tok_spans words = {0};
    bpe_work w = {.v = v};
    if (len > INT32_MAX / 3) return err_set(PL_ERANGE, "tokenizer: a text of %zu bytes is too long", len);
    int rc = tok_utf8_canon(text, len, &canon, &rx, &n);
    if (!rc) rc = tok_pretok_split(v->pre, rx, n, &words);
    for (size_t i = 0; !rc && i < words.n; i++) rc = encode_word(&w, canon + words.v[i].off, words.v[i].len, out);
    free(canon);
    free(rx);
    free(words.v);
    free(w.buf);
    free(w.sym);
    free(w.heap.v);
    tok_cache_free(&w.cache);
    return rc;
}
