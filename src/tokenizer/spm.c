/* spm.c - SentencePiece (BPE-by-score) encoding, as llama.cpp's
 * llm_tokenizer_spm does it.
 *
 * The text (spaces already turned into ▁) is cut into symbols of one UTF-8
 * character each (by lead byte, as llama.cpp counts, so invalid bytes make
 * short or odd symbols). Every adjacent pair whose joined text is a token
 * goes on a heap ordered by that token's score (ties: leftmost first); the
 * best pair is merged and its new neighbours are offered, until the heap is
 * empty. A heap entry is stale once either symbol changed, which the joined
 * size tells (symbols only grow). Each final symbol is its token, or its
 * bytes as byte tokens (<0xXX>).
 *
 * Chunking: when no token of the vocabulary holds a ▁ after something other
 * than ▁ (v->spm_splittable), no merge can cross the start of a "▁word"
 * whose previous symbol does not end in ▁, so such chunks are merged one
 * by one with the same result and a small heap. This keeps a 1 MB prompt at
 * O(n log w) instead of one giant heap.
 */
#include "tokenizer/tok_impl.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const tok_vocab *v;
    const char *buf;
    tok_symbol *sym;
    size_t n, cap;
    tok_heap heap;
    tok_cache cache;
} spm_work;

static const char SP[3] = {'\xE2', '\x96', '\x81'};

static int try_pair(void *ctx, int32_t l, int32_t r)
{
    spm_work *w = ctx;
    if (l < 0 || r < 0) return 0;
    uint32_t size = w->sym[l].len + w->sym[r].len;
    int32_t id = tok_lookup(w->v, w->buf + w->sym[l].off, size);
    if (id < 0) return 0;
    return tok_heap_push(&w->heap, (tok_bigram){tok_key_spm(w->v->score[id], l), r, size});
}

static int merge_all(spm_work *w) { return tok_merge_all(w->sym, w->n, &w->heap, try_pair, NULL, w); }

/* Each final symbol as its token, or byte by byte. */
static int emit_symbols(spm_work *w, tok_ids *out)
{
    const tok_vocab *v = w->v;
    int rc = 0;
    for (int32_t i = 0; !rc && i >= 0; i = w->sym[i].next) {
        const char *s = w->buf + w->sym[i].off;
        uint32_t len = w->sym[i].len;
        int32_t id = tok_lookup(v, s, len);
        if (id >= 0) {
            rc = tok_ids_push(out, id);
            continue;
        }
        for (uint32_t j = 0; !rc && j < len; j++) {
            int32_t b = v->byte_tok[(uint8_t)s[j]];
            if (b < 0) b = v->unk;
            if (b >= 0) rc = tok_ids_push(out, b);
        }
    }
    return rc;
}

static int run_chunk(spm_work *w, tok_ids *out)
{
    if (!w->n) return 0;
    const char *chunk = w->buf + w->sym[0].off;
    size_t len = w->sym[w->n - 1].off + w->sym[w->n - 1].len - w->sym[0].off, first = out->n;
    int rc = tok_cache_get(&w->cache, chunk, len, out);
    if (rc) {
        w->n = 0;
        return rc < 0 ? PL_ENOMEM : 0;
    }
    w->sym[w->n - 1].next = -1;
    w->heap.n = 0;
    rc = merge_all(w);
    if (!rc) rc = emit_symbols(w, out);
    if (!rc) tok_cache_put(&w->cache, chunk, len, out->v + first, out->n - first);
    w->n = 0;
    return rc;
}

static int add_symbol(spm_work *w, uint32_t off, uint32_t len)
{
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        tok_symbol *ns = realloc(w->sym, cap * sizeof *ns);
        if (!ns) return err_set(PL_ENOMEM, "tokenizer: out of memory for %zu symbols", cap);
        w->sym = ns;
        w->cap = cap;
    }
    int32_t i = (int32_t)w->n++;
    w->sym[i] = (tok_symbol){i - 1, i + 1, off, len, -1};
    return 0;
}

/* A chunk may start at a ▁ symbol whose predecessor does not end in ▁. */
static bool cut_before(const spm_work *w, const char *s, uint32_t len)
{
    if (!w->v->spm_splittable || !w->n || len != 3 || memcmp(s, SP, 3) != 0) return false;
    const tok_symbol *p = &w->sym[w->n - 1];
    return p->len < 3 || memcmp(w->buf + p->off + p->len - 3, SP, 3) != 0;
}

int tok_spm_encode(const tok_vocab *v, const char *text, size_t len, tok_ids *out)
{
    if (len > INT32_MAX) return err_set(PL_ERANGE, "tokenizer: a text of %zu bytes is too long", len);
    spm_work w = {.v = v, .buf = text};
    int rc = 0;
    size_t off = 0;
    while (!rc && off < len) {
        size_t k = tok_utf8_len((uint8_t)text[off]);
        if (k > len - off) k = len - off;
        if (cut_before(&w, text + off, (uint32_t)k)) rc = run_chunk(&w, out);
        if (!rc) rc = add_symbol(&w, (uint32_t)off, (uint32_t)k);
        off += k;
    }
    if (!rc) rc = run_chunk(&w, out);
    free(w.sym);
    free(w.heap.v);
    tok_cache_free(&w.cache);
    return rc;
}
