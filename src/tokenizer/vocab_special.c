/* vocab_special.c - what llama.cpp works out about special tokens from
 * their texts, because converted GGUFs do not always say it:
 *
 * - EOT / EOM / FIM tokens found by text when no key names them; a token so
 *   found becomes a control token (it then renders as nothing and is only
 *   matched in text with parse_special);
 * - control tokens whose text contains "unused" are marked unused;
 * - the end-of-generation set: eos, eot, eom, FIM pad/rep/sep and tokens
 *   with well-known end texts, with llama.cpp's two exceptions (gpt-oss's
 *   <|end|>, gemma4's </s>);
 * - per-model strip flags (phi-3 right-strips spaces after its special
 *   tokens, jina/modern-bert masks left-strip);
 * - the special-token list that tokenization splits text on (control,
 *   user-defined and unknown tokens, longest text first) and the cache of
 *   decoded pieces.
 * The order of the steps is llama.cpp's, since later steps read the
 * attributes earlier ones set.
 */
#include "tokenizer/tok_impl.h"

#include "base/err.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static const char *const eot_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>",
    "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>", NULL};
static const char *const eom_texts[] = {"<|eom_id|>", NULL};
static const char *const fim_texts[6][9] = {
    {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>",
     "<|prefix|>", NULL},
    {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>",
     "<|suffix|>", NULL},
    {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>",
     "<|middle|>", NULL},
    {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL},
    {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL},
    {"<|file_sep|>", NULL},
};
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~[", NULL};

static bool text_is(const tok_vocab *v, int32_t id, const char *s)
{
    size_t n = strlen(s);
    return v->len[id] == n && memcmp(tok_text(v, id), s, n) == 0;
}

/* The id that owns its text in the map (llama.cpp walks token_to_id, where
 * a repeated text keeps only its last id). */
static bool owns_text(const tok_vocab *v, int32_t id)
{
    return tok_lookup(v, tok_text(v, id), v->len[id]) == id;
}

static int32_t find_text(const tok_vocab *v, const char *s) { return tok_lookup(v, s, strlen(s)); }

/* If *slot is unset, sets it to the token (the lowest id, where llama.cpp
 * takes whichever its hash map yields first) whose text is in list, and
 * makes that a control token. */
static void detect(tok_vocab *v, int32_t *slot, const char *const *list)
{
    if (*slot >= 0) return;
    for (; *list; list++) {
        int32_t id = find_text(v, *list);
        if (id >= 0 && (*slot < 0 || id < *slot)) *slot = id;
    }
    if (*slot >= 0) v->attr[*slot] |= TOK_ATTR_CONTROL;
}

static void mark_unused(tok_vocab *v)
{
    for (int32_t id = 0; id < v->n_tokens; id++) {
        if (!(v->attr[id] & TOK_ATTR_CONTROL) || !owns_text(v, id)) continue;
        /* strstr stops at a NUL inside the text, as llama.cpp's does */
        if (strstr(tok_text(v, id), "unused")) v->attr[id] |= TOK_ATTR_UNUSED;
    }
}

static void mark_eog(tok_vocab *v)
{
    for (int i = 3; i < 6; i++)
        if (v->fim[i] >= 0) v->eog[v->fim[i]] = 1;
    for (const char *const *t = eog_texts; *t; t++) {
        int32_t id = find_text(v, *t);
        if (id < 0) continue;
        v->eog[id] = 1;
        v->attr[id] |= TOK_ATTR_CONTROL;
    }
    /* gpt-oss: these are always rendered */
    static const char *const shown[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", NULL};
    for (const char *const *t = shown; *t; t++) {
        int32_t id = find_text(v, *t);
        if (id >= 0) v->attr[id] = TOK_ATTR_USER_DEFINED;
    }
    if (v->eos >= 0) v->eog[v->eos] = 1;
    if (v->eot >= 0) v->eog[v->eot] = 1;
    if (v->eom >= 0) v->eog[v->eom] = 1;
}

/* llama.cpp's two exceptions to the end-of-generation texts. */
static void eog_exceptions(tok_vocab *v)
{
    bool ret = false, call = false, flush = false, tool = false;
    int32_t end = -1, s = -1;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        if (!v->eog[id]) continue;
        if (text_is(v, id, "<|return|>")) ret = true;
        else if (text_is(v, id, "<|call|>") || text_is(v, id, "<|calls|>")) call = true;
        else if (text_is(v, id, "<|flush|>")) flush = true;
        else if (text_is(v, id, "<|end|>")) end = id;
        if (text_is(v, id, "<|tool_response>")) tool = true;
        else if (text_is(v, id, "</s>")) s = id;
    }
    if (end >= 0 && ((ret && call) || (call && flush))) {
        v->eog[end] = 0;
        v->attr[end] = TOK_ATTR_USER_DEFINED;
    }
    if (tool && s >= 0) {
        v->eog[s] = 0;
        v->attr[s] = TOK_ATTR_NORMAL;
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The special tokens, longest text first; ties keep id order (llama.cpp's
 * std::sort leaves ties unordered, which only matters for two equally long
 * special texts overlapping in the input). */
static int build_special(tok_vocab *v)
{
    size_t n = 0;
    for (int32_t id = 0; id < v->n_tokens; id++)
        if (v->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN)) n++;
    uint64_t *keys = malloc((n ? n : 1) * sizeof *keys);
    v->special = malloc((n ? n : 1) * sizeof *v->special);
    if (!keys || !v->special) {
        free(keys);
        return err_set(PL_ENOMEM, "tokenizer: out of memory for %zu special tokens", n);
    }
    size_t k = 0;
    for (int32_t id = 0; id < v->n_tokens; id++)
        if (v->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN))
            keys[k++] = (uint64_t)(UINT32_MAX - v->len[id]) << 32 | (uint32_t)id;
    qsort(keys, n, sizeof *keys, cmp_u64);
    for (size_t i = 0; i < n; i++) v->special[i] = (int32_t)(keys[i] & UINT32_MAX);
    v->n_special = (int32_t)n;
    free(keys);
    return 0;
}

static int build_pieces(tok_vocab *v)
{
    size_t n = (size_t)v->n_tokens, total = 0, cap = 0;
    v->piece_off = malloc(n * sizeof *v->piece_off);
    v->piece_len = malloc(n * sizeof *v->piece_len);
    if (!v->piece_off || !v->piece_len) return err_set(PL_ENOMEM, "tokenizer: out of memory for pieces");
    for (size_t id = 0; id < n; id++) {
        char *p = NULL;
        size_t len = 0;
        int rc = tok_piece_build(v, (int32_t)id, &p, &len);
        if (!rc && total + len + 1 > cap) {
            size_t nc = (total + len + 1) * 2;
            char *np = nc < UINT32_MAX ? realloc(v->piece, nc) : NULL;
            if (!np) rc = err_set(PL_ENOMEM, "tokenizer: out of memory for pieces");
            else v->piece = np, cap = nc;
        }
        if (rc) {
            free(p);
            return rc;
        }
        memcpy(v->piece + total, p, len);
        v->piece[total + len] = '\0';
        v->piece_off[id] = (uint32_t)total;
        v->piece_len[id] = (uint32_t)len;
        if (len > v->max_piece) v->max_piece = len;
        total += len + 1;
        free(p);
    }
    return 0;
}

static void set_attr(tok_vocab *v, const char *text, uint16_t bit, bool on)
{
    int32_t id = find_text(v, text);
    if (id < 0) return;
    if (on) v->attr[id] |= bit;
    else v->attr[id] &= (uint16_t)~bit;
}

static bool contains_ci(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; s && i + k <= n; i++) {
        size_t j = 0;
        while (j < k && tolower((unsigned char)s[i + j]) == needle[j]) j++;
        if (j == k) return true;
    }
    return false;
}

/* Strip flags llama.cpp sets by model name or pre-tokenizer. */
static void strip_flags(tok_vocab *v, const char *name, size_t name_len, const char *pre, size_t pre_len)
{
    if (contains_ci(pre, pre_len, "jina-v2-de") || contains_ci(pre, pre_len, "jina-v2-es") ||
        contains_ci(pre, pre_len, "jina-v2-code")) {
        set_attr(v, "<mask>", TOK_ATTR_LSTRIP, true);
    } else if (contains_ci(name, name_len, "phi-3") || contains_ci(name, name_len, "phi3")) {
        for (int32_t i = 0; i < v->n_special; i++) v->attr[v->special[i]] |= TOK_ATTR_RSTRIP;
        set_attr(v, "</s>", TOK_ATTR_RSTRIP, true);
        set_attr(v, "<unk>", TOK_ATTR_RSTRIP, false);
        set_attr(v, "<s>", TOK_ATTR_RSTRIP, false);
        set_attr(v, "<|endoftext|>", TOK_ATTR_RSTRIP, false);
    } else if (contains_ci(name, name_len, "modern-bert")) {
        set_attr(v, "[MASK]", TOK_ATTR_LSTRIP, true);
    }
}

int tok_vocab_finish(tok_vocab *v, const char *model_name, size_t name_len, const char *pre, size_t pre_len)
{
    detect(v, &v->eot, eot_texts);
    detect(v, &v->eom, eom_texts);
    for (int i = 0; i < 6; i++) detect(v, &v->fim[i], fim_texts[i]);
    mark_unused(v);
    v->eog = calloc((size_t)v->n_tokens, 1);
    if (!v->eog) return err_set(PL_ENOMEM, "tokenizer: out of memory");
    mark_eog(v);
    eog_exceptions(v);
    int rc = build_special(v);
    if (!rc) rc = build_pieces(v);
    if (!rc) strip_flags(v, model_name, name_len, pre, pre_len);
    return rc;
}
