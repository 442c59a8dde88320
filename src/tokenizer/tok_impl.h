/* tok_impl.h - the inside of the tokenizer module: the vocabulary's layout
 * and the helpers its files share. Only src/tokenizer's own files include
 * this (and white-box tests); the rest of the tree uses tokenizer.h.
 *
 * A loaded vocabulary is read-only, so any number of threads may tokenize
 * with it at once (every call keeps its scratch on its own).
 *
 *   text   "<unk>\0<s>\0</s>\0<0x00>\0...\0▁the\0..."   token texts, NUL-ended
 *   off[i] start of token i in text; len[i] its byte length (NULs allowed)
 *   map    string -> sid. sid < n_tokens is a token id (the last token of a
 *          given text wins, as in llama.cpp); sids >= n_tokens name the
 *          halves of BPE merges that are not tokens themselves.
 *   merges (sid_left << 32 | sid_right) -> rank (the first merge wins)
 *   piece  the decoded text of each token as llama.cpp renders it with
 *          special=true (▁ -> space, <0x41> -> 'A', Ġ -> space ...)
 */
#ifndef PL_TOKENIZER_TOK_IMPL_H
#define PL_TOKENIZER_TOK_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

/* Token attributes: llama.cpp's llama_token_attr bits. */
enum {
    TOK_ATTR_UNKNOWN = 1 << 0,
    TOK_ATTR_UNUSED = 1 << 1,
    TOK_ATTR_NORMAL = 1 << 2,
    TOK_ATTR_CONTROL = 1 << 3,
    TOK_ATTR_USER_DEFINED = 1 << 4,
    TOK_ATTR_BYTE = 1 << 5,
    TOK_ATTR_LSTRIP = 1 << 7,
    TOK_ATTR_RSTRIP = 1 << 8,
};

/* ------------------------------------------------------------ hash maps */

/* Open-addressing map from byte strings (not owned) to int32 values. */
typedef struct {
    const char *s;
    uint32_t len;
    int32_t val;  /* -1 marks an empty slot */
    uint64_t hash;
} tok_strmap_slot;

typedef struct {
    tok_strmap_slot *slots;
    size_t cap;   /* power of two */
    size_t count;
} tok_strmap;

uint64_t tok_hash_bytes(const char *s, size_t n);
int tok_strmap_init(tok_strmap *m, size_t expected);
void tok_strmap_free(tok_strmap *m);
/* Sets s -> val, replacing an existing value. s must outlive the map. */
int tok_strmap_put(tok_strmap *m, const char *s, size_t len, int32_t val);
/* The value of s or -1. */
int32_t tok_strmap_get(const tok_strmap *m, const char *s, size_t len);

/* Open-addressing map from uint64 keys to int32 values. */
typedef struct {
    uint64_t *keys;  /* UINT64_MAX marks an empty slot */
    int32_t *vals;
    size_t cap, count;
} tok_pairmap;

int tok_pairmap_init(tok_pairmap *m, size_t expected);
void tok_pairmap_free(tok_pairmap *m);
/* Inserts key -> val unless key is present (then keeps the old value). */
int tok_pairmap_add(tok_pairmap *m, uint64_t key, int32_t val);
int32_t tok_pairmap_get(const tok_pairmap *m, uint64_t key);

/* ----------------------------------------------------------- id vectors */

typedef struct {
    int32_t *v;
    size_t n, cap;
} tok_ids;

int tok_ids_push(tok_ids *ids, int32_t id);

/* A per-call cache of word -> ids: English repeats its words, so most
 * words of a long text are merged once. Keys point into the caller's text,
 * which outlives the cache; it stops growing at TOK_CACHE_MAX words. */
#define TOK_CACHE_MAX 65536
#define TOK_CACHE_MAX_WORD 64

typedef struct {
    tok_strmap map;     /* word -> index into spans */
    uint32_t *spans;    /* [2 * i] offset into ids, [2 * i + 1] count */
    tok_ids ids;
    size_t n, cap;
} tok_cache;

void tok_cache_free(tok_cache *c);
/* Appends the cached ids of word to out and returns 1, or returns 0. */
int tok_cache_get(const tok_cache *c, const char *word, size_t len, tok_ids *out);
/* Remembers that word gave ids[0..n) (a no-op for long words or a full
 * cache; failure to remember is not an error). */
void tok_cache_put(tok_cache *c, const char *word, size_t len, const int32_t *ids, size_t n);

/* ------------------------------------------------------ merge work queue */

/* A candidate merge of symbols left and right (adjacent when pushed) whose
 * joined text is size bytes. key orders the heap, smallest first: the high
 * half is the priority (SPM: score, higher first; BPE: rank, lower first),
 * the low half the left index, so ties go to the leftmost pair - exactly
 * the order of llama.cpp's priority queues, in one integer compare. */
typedef struct {
    uint64_t key;
    int32_t right;
    uint32_t size;
} tok_bigram;

static inline int32_t tok_bigram_left(tok_bigram b) { return (int32_t)(uint32_t)b.key; }

static inline uint64_t tok_key_bpe(int32_t rank, int32_t left)
{
    return (uint64_t)(uint32_t)rank << 32 | (uint32_t)left;
}

/* Higher score first: the float's bits made order-preserving, inverted.
 * -0 counts as +0 (llama.cpp compares the floats). */
static inline uint64_t tok_key_spm(float score, int32_t left)
{
    uint32_t u;
    if (score == 0.0f) score = 0.0f;
    memcpy(&u, &score, 4);
    u = (u & 0x80000000u) ? ~u : u | 0x80000000u;
    return (uint64_t)~u << 32 | (uint32_t)left;
}

typedef struct {
    tok_bigram *v;
    size_t n, cap;
} tok_heap;

int tok_heap_push(tok_heap *h, tok_bigram b);
tok_bigram tok_heap_pop(tok_heap *h); /* h->n > 0 */

/* A symbol of the merge loops: bytes [off, off+len) of the work buffer,
 * linked to its live neighbours; len 0 once merged into its left. */
typedef struct {
    int32_t prev, next;
    uint32_t off, len;
    int32_t sid;  /* BPE only: string id of its text or -1 */
} tok_symbol;

/* The merge loop both encoders share (SPM by score, BPE by rank): offers
 * every adjacent pair of sym[0..n) through pair(), then pops the best
 * candidate, skips it if stale (either side changed since it was pushed,
 * which the joined size tells: symbols only grow), joins right into left,
 * tells merged() (BPE refreshes the string id there; may be NULL) and
 * offers the two new neighbour pairs. pair() pushes a candidate onto heap
 * if the pair can merge (0) or fails (error code). The heap must be empty. */
typedef int (*tok_pair_fn)(void *ctx, int32_t left, int32_t right);
typedef void (*tok_merged_fn)(void *ctx, tok_symbol *left);
int tok_merge_all(tok_symbol *sym, size_t n, tok_heap *heap, tok_pair_fn pair, tok_merged_fn merged, void *ctx);

/* ---------------------------------------------------------------- UTF-8 */

/* Bytes of the UTF-8 sequence led by b, as llama.cpp counts them (1 for
 * continuation and invalid lead bytes). */
static inline size_t tok_utf8_len(uint8_t b)
{
    static const uint8_t lut[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lut[b >> 4];
}

size_t tok_utf8_encode(uint32_t cp, char out[4]);

/* llama.cpp's reading of the codepoint at s[0..n) (n >= 1): its value and
 * byte count in *adv, or -1 where llama.cpp fails (the caller then takes
 * one byte as U+FFFD). */
int32_t tok_utf8_decode(const uint8_t *s, size_t n, size_t *adv);

/* Length of the well-formed (RFC 3629) sequence at s[0..n), 0 if ill-formed
 * there, or -(k) if s[0..n) is an incomplete but so far valid prefix of k
 * bytes (n too short to decide). */
int tok_utf8_check(const uint8_t *s, size_t n);

/* Re-encodes text the way llama.cpp's unicode_cpts_from_utf8 reads it: each
 * decodable sequence (overlong forms and surrogates included) is written in
 * its shortest form, anything else becomes U+FFFD, byte by byte. canon gets
 * that text; regex (if not NULL) what the pre-tokenizer regexes must see:
 * the same text with non-ASCII spaces and surrogates replaced by
 * placeholders of the same length (see utf8.c), so that offsets agree.
 * Both are malloc'd, NUL-terminated, of length *n. */
int tok_utf8_canon(const char *text, size_t len, char **canon, char **regex, size_t *n);

/* Writes UTF-8 for src[0..n), replacing each maximal ill-formed subpart
 * by U+FFFD (incomplete tails too). dst must hold 3 * n bytes; with dst
 * NULL only counts. Returns the bytes written. */
size_t tok_utf8_sanitize(const char *src, size_t n, char *dst);

/* GPT-2's byte-level alphabet: the codepoint standing for byte b. */
uint32_t tok_byte_to_cp(uint8_t b);
/* The byte a codepoint stands for, or -1. */
int tok_cp_to_byte(uint32_t cp);

/* ---------------------------------------------------------- pre-tokenizer */

typedef struct tok_pretok tok_pretok;

/* Per-pre-tokenizer flags (llama.cpp's defaults for that name). */
typedef struct {
    bool clean_spaces;
    bool ignore_merges;
    bool add_bos;      /* default for add_bos_token */
    bool no_bos;       /* the model has no BOS (chatglm) */
} tok_pretok_flags;

/* Compiles the regexes of the pre-tokenizer named name (NULL: "default"). */
int tok_pretok_new(tok_pretok **out, const char *name, size_t name_len, tok_pretok_flags *flags);
void tok_pretok_free(tok_pretok *p);

/* A byte range of the text handed to tok_pretok_split. */
typedef struct {
    size_t off, len;
} tok_span;

typedef struct {
    tok_span *v;
    size_t n, cap;
} tok_spans;

/* Splits text[0..len) (valid UTF-8) into words; appends them to out. */
int tok_pretok_split(const tok_pretok *p, const char *text, size_t len, tok_spans *out);

/* ------------------------------------------------------------ vocabulary */

struct pl_vocab {
    tok_kind kind;
    int32_t n_tokens;
    char *text;          /* token texts, each NUL-terminated */
    uint32_t *off, *len; /* [n_tokens] */
    float *score;        /* [n_tokens] */
    uint16_t *attr;      /* [n_tokens] TOK_ATTR_* */

    tok_strmap map;      /* text -> sid (see the top) */
    char *extra;         /* texts of the sids >= n_tokens */
    int32_t n_sids;
    tok_pairmap merges;  /* BPE */
    tok_pretok *pre;     /* BPE */

    int32_t bos, eos, eot, eom, unk, pad, sep;  /* -1 if none */
    int32_t fim[6];      /* FIM pre, suf, mid, pad, rep, sep; -1 if none */
    bool add_bos, add_eos, add_space_prefix, clean_spaces, ignore_merges;
    bool spm_splittable; /* no token has ▁ after anything but ▁ */
    int32_t byte_tok[256]; /* SPM byte fallback ids, -1 if none */

    int32_t *special;    /* control/user-defined/unknown ids, longest text first */
    int32_t n_special;
    uint8_t *eog;        /* [n_tokens] 1 for end-of-generation tokens */

    char *piece;         /* decoded pieces, NUL-terminated */
    uint32_t *piece_off, *piece_len;
    size_t max_piece;    /* longest piece */
};

static inline const char *tok_text(const tok_vocab *v, int32_t id) { return v->text + v->off[id]; }

/* The token id of the exact text, or -1. */
static inline int32_t tok_lookup(const tok_vocab *v, const char *s, size_t n)
{
    int32_t sid = tok_strmap_get(&v->map, s, n);
    return sid < v->n_tokens ? sid : -1;
}

/* vocab_special.c: auto-detected EOG/EOT/FIM tokens, attribute fix-ups, the
 * special-token list and the piece cache. Run once at the end of loading. */
int tok_vocab_finish(tok_vocab *v, const char *model_name, size_t name_len, const char *pre, size_t pre_len);

/* spm.c / bpe.c: encode one fragment of raw text, appending ids. */
int tok_spm_encode(const tok_vocab *v, const char *text, size_t len, tok_ids *out);
int tok_bpe_encode(const tok_vocab *v, const char *text, size_t len, tok_ids *out);

/* detok.c: the piece of id as llama.cpp renders it (special: also control
 * and unknown tokens); *len gets its length. */
const char *tok_piece(const tok_vocab *v, int32_t id, bool special, size_t *len);
/* Builds the piece of id from its text (used once, for the cache). */
int tok_piece_build(const tok_vocab *v, int32_t id, char **out, size_t *len);

#endif
