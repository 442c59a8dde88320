/* vocab.c - loading a vocabulary from the tokenizer.ggml.* keys of a GGUF.
 *
 * Every key is validated before use and every failure names the key (and
 * the file): a missing tokenizer.ggml.model or .tokens, arrays of the wrong
 * element type or shorter than the token list, special ids outside the
 * vocabulary, unsupported models or pre-tokenizers. Defaults follow
 * llama.cpp's llama_vocab::impl::load:
 *
 *   model  type  bos  eos  unk  add_bos  add_space_prefix  clean_spaces
 *   llama  SPM   1    2    0    true     true              false
 *   gpt2   BPE   11   11   -    per pre  false             per pre
 *
 * A default id outside the vocabulary means "none"; so does a key holding
 * -1 or 0xFFFFFFFF (what converters write for "none"); any other id outside
 * the vocabulary is an error (llama.cpp warns and keeps its default).
 * Token texts are copied, so the GGUF may be closed after.
 */
#include "tokenizer/tok_impl.h"

#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_MODEL "tokenizer.ggml.model"
#define KEY_PRE "tokenizer.ggml.pre"
#define KEY_TOKENS "tokenizer.ggml.tokens"
#define KEY_SCORES "tokenizer.ggml.scores"
#define KEY_TYPES "tokenizer.ggml.token_type"
#define KEY_MERGES "tokenizer.ggml.merges"

/* GGUF token types (tokenizer.ggml.token_type) -> attributes. */
static uint16_t attr_of_type(int32_t t)
{
    switch (t) {
    case 1: return TOK_ATTR_NORMAL;
    case 2: return TOK_ATTR_UNKNOWN;
    case 3: return TOK_ATTR_CONTROL;
    case 4: return TOK_ATTR_USER_DEFINED;
    case 5: return TOK_ATTR_UNUSED;
    case 6: return TOK_ATTR_BYTE;
    default: return 0; /* undefined */
    }
}

__attribute__((format(printf, 4, 5)))
static int key_err(const gguf_file *f, int code, const char *key, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(code, "%s: key '%s': %s", gguf_path(f), key, msg);
}

/* An optional array key: *out NULL if absent; an error if present with a
 * type other than an array of elem_a or elem_b, or shorter than n. */
static int optional_array(const gguf_file *f, const char *key, gguf_type elem_a, gguf_type elem_b, uint64_t n,
                          const gguf_value **out)
{
    *out = NULL;
    const gguf_meta *kv = gguf_meta_find(f, key);
    if (!kv) return 0;
    const gguf_value *val = &kv->value;
    if (val->type != GGUF_TYPE_ARRAY || (val->v.arr.elem != elem_a && val->v.arr.elem != elem_b))
        return key_err(f, PL_EFORMAT, key, "expected an array of %s, found %s%s%s", gguf_type_name(elem_a),
                       gguf_type_name(val->type), val->type == GGUF_TYPE_ARRAY ? " of " : "",
                       val->type == GGUF_TYPE_ARRAY ? gguf_type_name(val->v.arr.elem) : "");
    if (val->v.arr.n < n)
        return key_err(f, PL_EFORMAT, key, "%llu entries for %llu tokens", (unsigned long long)val->v.arr.n,
                       (unsigned long long)n);
    *out = val;
    return 0;
}

static int load_kind(const gguf_file *f, tok_vocab *v)
{
    gguf_str model;
    int rc = gguf_get_str(f, KEY_MODEL, &model);
    if (rc) return rc;
    if (gguf_str_eq(model, "llama")) v->kind = TOK_SPM;
    else if (gguf_str_eq(model, "gpt2")) v->kind = TOK_BPE;
    else
        return key_err(f, PL_EUNSUPPORTED, KEY_MODEL, "tokenizer '%.*s' is not supported (llama, gpt2)",
                       (int)(model.len > 64 ? 64 : model.len), model.ptr);
    return 0;
}

/* Copies the token texts ("[EMPTY_i]" for empty ones, as llama.cpp) into
 * one arena and indexes them; the last of equal texts wins the map. */
static int load_texts(const gguf_file *f, tok_vocab *v, const gguf_value *toks)
{
    uint64_t n = toks->v.arr.n, total = 0;
    for (uint64_t i = 0; i < n; i++) total += (toks->v.arr.strs[i].len ? toks->v.arr.strs[i].len : 24) + 1;
    if (total >= UINT32_MAX) return key_err(f, PL_ERANGE, KEY_TOKENS, "%llu bytes of text", (unsigned long long)total);
    v->text = malloc(total);
    if (!v->text) return err_set(PL_ENOMEM, "%s: out of memory for %llu bytes of tokens", gguf_path(f),
                                 (unsigned long long)total);
    int rc = tok_strmap_init(&v->map, (size_t)n);
    uint32_t o = 0;
    for (uint64_t i = 0; !rc && i < n; i++) {
        gguf_str s = toks->v.arr.strs[i];
        v->off[i] = o;
        if (s.len) {
            memcpy(v->text + o, s.ptr, s.len);
            v->len[i] = (uint32_t)s.len;
        } else {
            v->len[i] = (uint32_t)snprintf(v->text + o, 24, "[EMPTY_%llu]", (unsigned long long)i);
        }
        v->text[o + v->len[i]] = '\0';
        rc = tok_strmap_put(&v->map, v->text + o, v->len[i], (int32_t)i);
        o += v->len[i] + 1;
    }
    return rc;
}

static int load_tokens(const gguf_file *f, tok_vocab *v)
{
    const gguf_value *toks, *scores, *types;
    int rc = gguf_get_arr(f, KEY_TOKENS, GGUF_TYPE_STRING, &toks);
    if (rc) return rc;
    uint64_t n = toks->v.arr.n;
    if (n == 0) return key_err(f, PL_EFORMAT, KEY_TOKENS, "the token list is empty");
    if (n > INT32_MAX / 2) return key_err(f, PL_ERANGE, KEY_TOKENS, "%llu tokens", (unsigned long long)n);
    rc = optional_array(f, KEY_SCORES, GGUF_TYPE_FLOAT32, GGUF_TYPE_INT32, n, &scores);
    if (!rc) rc = optional_array(f, KEY_TYPES, GGUF_TYPE_INT32, GGUF_TYPE_INT32, n, &types);
    if (rc) return rc;
    v->n_tokens = v->n_sids = (int32_t)n;
    v->off = malloc(n * sizeof *v->off);
    v->len = malloc(n * sizeof *v->len);
    v->score = malloc(n * sizeof *v->score);
    v->attr = malloc(n * sizeof *v->attr);
    if (!v->off || !v->len || !v->score || !v->attr)
        return err_set(PL_ENOMEM, "%s: out of memory for %llu tokens", gguf_path(f), (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) {
        v->score[i] = !scores ? 0.0f
                      : scores->v.arr.elem == GGUF_TYPE_FLOAT32 ? gguf_arr_f32(scores, i)
                                                                : (float)gguf_arr_i32(scores, i);
        v->attr[i] = types ? attr_of_type(gguf_arr_i32(types, i)) : TOK_ATTR_NORMAL;
    }
    return load_texts(f, v, toks);
}

/* Splits a merge "left right" at the first space after its first byte
 * (llama.cpp's find(' ', 1)); false if there is none. */
static bool merge_split(gguf_str m, gguf_str *l, gguf_str *r)
{
    for (uint64_t i = 1; i < m.len; i++) {
        if (m.ptr[i] != ' ') continue;
        *l = (gguf_str){m.ptr, i};
        *r = (gguf_str){m.ptr + i + 1, m.len - i - 1};
        return true;
    }
    return false;
}

/* The string id of s, registering it (copied into v->extra at *used) if
 * it is no token. */
static int merge_sid(tok_vocab *v, gguf_str s, size_t *used, int32_t *sid)
{
    *sid = tok_strmap_get(&v->map, s.ptr, s.len);
    if (*sid >= 0) return 0;
    char *dst = v->extra + *used;
    memcpy(dst, s.ptr, s.len);
    *used += s.len;
    *sid = v->n_sids++;
    return tok_strmap_put(&v->map, dst, s.len, *sid);
}

static int load_merges(const gguf_file *f, tok_vocab *v)
{
    const gguf_value *arr;
    if (!gguf_meta_find(f, KEY_MERGES)) return key_err(f, PL_ENOTFOUND, KEY_MERGES, "missing (a gpt2 tokenizer needs it)");
    int rc = gguf_get_arr(f, KEY_MERGES, GGUF_TYPE_STRING, &arr);
    if (rc) return rc;
    uint64_t n = arr->v.arr.n, extra = 0;
    if (n > INT32_MAX / 2) return key_err(f, PL_ERANGE, KEY_MERGES, "%llu merges", (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) extra += arr->v.arr.strs[i].len;
    v->extra = malloc(extra + 1);
    if (!v->extra) return err_set(PL_ENOMEM, "%s: out of memory for the merges", gguf_path(f));
    rc = tok_pairmap_init(&v->merges, (size_t)n);
    size_t used = 0;
    for (uint64_t i = 0; !rc && i < n; i++) {
        gguf_str l, r;
        int32_t sl, sr;
        if (!merge_split(arr->v.arr.strs[i], &l, &r)) continue; /* never matches a pair */
        rc = merge_sid(v, l, &used, &sl);
        if (!rc) rc = merge_sid(v, r, &used, &sr);
        if (!rc) rc = tok_pairmap_add(&v->merges, (uint64_t)(uint32_t)sl << 32 | (uint32_t)sr, (int32_t)i);
    }
    return rc;
}

/* The integer value of key, of any integer type. */
static int id_value(const gguf_file *f, const char *key, int64_t *out)
{
    const gguf_meta *kv = gguf_meta_find(f, key);
    gguf_type t = kv->value.type;
    if (t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 || t == GGUF_TYPE_INT64) {
        *out = kv->value.v.i64;
        return 0;
    }
    if (t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 || t == GGUF_TYPE_UINT64) {
        *out = kv->value.v.u64 > INT64_MAX ? INT64_MAX : (int64_t)kv->value.v.u64;
        return 0;
    }
    return key_err(f, PL_EFORMAT, key, "expected an integer token id, found %s", gguf_type_name(t));
}

/* Reads an optional special-token id key into *id: -1 (or 0xFFFFFFFF)
 * means none, any other value must be a token of the vocabulary. */
static int load_id(const gguf_file *f, tok_vocab *v, const char *key, int32_t *id)
{
    if (*id >= v->n_tokens) *id = -1; /* a default the vocabulary cannot hold */
    if (!gguf_meta_find(f, key)) return 0;
    int64_t val = 0;
    int rc = id_value(f, key, &val);
    if (rc) return rc;
    if (val == -1 || val == UINT32_MAX) { /* converters write -1 for "none" */
        *id = -1;
        return 0;
    }
    uint64_t u = (uint64_t)val;
    if (val < 0 || u >= (uint64_t)v->n_tokens)
        return key_err(f, PL_ERANGE, key, "token id %lld is outside the vocabulary of %d tokens", (long long)val,
                       v->n_tokens);
    *id = (int32_t)u;
    return 0;
}

static int load_ids(const gguf_file *f, tok_vocab *v)
{
    /* the last three are the deprecated spellings of the FIM keys */
    static const char *const keys[] = {
        "tokenizer.ggml.bos_token_id",     "tokenizer.ggml.eos_token_id",     "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.eom_token_id",     "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.seperator_token_id",
        "tokenizer.ggml.padding_token_id", "tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id",
        "tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.fim_rep_token_id",
        "tokenizer.ggml.fim_sep_token_id", "tokenizer.ggml.prefix_token_id",  "tokenizer.ggml.suffix_token_id",
        "tokenizer.ggml.middle_token_id",
    };
    int32_t *ids[] = {&v->bos,    &v->eos,    &v->eot,    &v->eom,    &v->unk,    &v->sep,
                      &v->pad,    &v->fim[0], &v->fim[1], &v->fim[2], &v->fim[3], &v->fim[4],
                      &v->fim[5], &v->fim[0], &v->fim[1], &v->fim[2]};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        int rc = load_id(f, v, keys[i], ids[i]);
        if (rc) return rc;
    }
    return 0;
}

static int load_bool(const gguf_file *f, const char *key, bool *b)
{
    return gguf_meta_find(f, key) ? gguf_get_bool(f, key, b) : 0;
}

static int optional_str(const gguf_file *f, const char *key, gguf_str *s)
{
    *s = (gguf_str){NULL, 0};
    return gguf_meta_find(f, key) ? gguf_get_str(f, key, s) : 0;
}

/* Defaults by model and pre-tokenizer, then the file's flags. */
static int load_flags(const gguf_file *f, tok_vocab *v, gguf_str pre)
{
    v->eot = v->eom = v->sep = v->pad = -1;
    for (int i = 0; i < 6; i++) v->fim[i] = -1;
    if (v->kind == TOK_SPM) {
        v->bos = 1, v->eos = 2, v->unk = 0;
        v->add_bos = v->add_space_prefix = true;
    } else {
        tok_pretok_flags fl;
        int rc = tok_pretok_new(&v->pre, pre.ptr, pre.len, &fl);
        if (rc) return err_prefix(rc, "%s", gguf_path(f));
        v->bos = fl.no_bos ? -1 : 11, v->eos = 11, v->unk = -1;
        v->add_bos = fl.add_bos;
        v->clean_spaces = fl.clean_spaces;
        v->ignore_merges = fl.ignore_merges;
    }
    int rc = load_bool(f, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix);
    if (!rc) rc = load_ids(f, v);
    if (!rc) rc = load_bool(f, "tokenizer.ggml.add_bos_token", &v->add_bos);
    if (!rc) rc = load_bool(f, "tokenizer.ggml.add_eos_token", &v->add_eos);
    return rc;
}

/* SentencePiece byte fallback: <0xXX>, else the one-byte token. */
static void spm_bytes(tok_vocab *v)
{
    for (int b = 0; b < 256; b++) {
        char hex[8], one = (char)b;
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        int32_t id = tok_lookup(v, hex, 6);
        v->byte_tok[b] = id >= 0 ? id : tok_lookup(v, &one, 1);
    }
}

/* True if every ▁ inside a token follows another ▁: then no token can span
 * a cut between a non-▁ symbol and a ▁, and SPM may merge chunk by chunk. */
static bool spm_splittable(const tok_vocab *v)
{
    static const char sp[3] = {'\xE2', '\x96', '\x81'};
    for (int32_t id = 0; id < v->n_tokens; id++) {
        const char *t = tok_text(v, id);
        for (uint32_t k = 1; k + 3 <= v->len[id]; k++) {
            if (memcmp(t + k, sp, 3) != 0) continue;
            if (k < 3 || memcmp(t + k - 3, sp, 3) != 0) return false;
        }
    }
    return true;
}

void tok_vocab_free(tok_vocab *v)
{
    if (!v) return;
    free(v->text);
    free(v->off);
    free(v->len);
    free(v->score);
    free(v->attr);
    tok_strmap_free(&v->map);
    free(v->extra);
    tok_pairmap_free(&v->merges);
    tok_pretok_free(v->pre);
    free(v->special);
    free(v->eog);
    free(v->piece);
    free(v->piece_off);
    free(v->piece_len);
    free(v);
}

int tok_vocab_load(tok_vocab **out, const gguf_file *f)
{
    tok_vocab *v = calloc(1, sizeof *v);
    if (!v) return err_set(PL_ENOMEM, "%s: out of memory for a vocabulary", gguf_path(f));
    gguf_str pre, name;
    int rc = load_kind(f, v);
    if (!rc) rc = optional_str(f, KEY_PRE, &pre);
    /* only a hint for per-model strip flags: a malformed name is ignored */
    if (!rc && optional_str(f, "general.name", &name) != 0) name = (gguf_str){NULL, 0};
    if (!rc) rc = load_tokens(f, v);
    if (!rc && v->kind == TOK_BPE) rc = load_merges(f, v);
    if (!rc) rc = load_flags(f, v, pre);
    if (!rc) rc = tok_vocab_finish(v, name.ptr, name.len, pre.ptr, pre.len);
    if (!rc && v->kind == TOK_SPM) {
        spm_bytes(v);
        v->spm_splittable = spm_splittable(v);
    }
    if (rc) {
        tok_vocab_free(v);
        return rc;
    }
    *out = v;
    return 0;
}

int tok_vocab_load_path(tok_vocab **out, const char *path)
{
    gguf_file *f = NULL;
    int rc = gguf_open(&f, path);
    if (rc) return rc;
    rc = tok_vocab_load(out, f);
    gguf_close(f);
    return rc;
}

int32_t tok_vocab_size(const tok_vocab *v) { return v->n_tokens; }
tok_kind tok_vocab_kind(const tok_vocab *v) { return v->kind; }
int32_t tok_vocab_bos(const tok_vocab *v) { return v->bos; }
int32_t tok_vocab_eos(const tok_vocab *v) { return v->eos; }
bool tok_vocab_add_bos(const tok_vocab *v) { return v->add_bos; }

bool tok_vocab_is_eog(const tok_vocab *v, int32_t id)
{
    return id >= 0 && id < v->n_tokens && v->eog[id];
}

const char *tok_vocab_text(const tok_vocab *v, int32_t id)
{
    return id >= 0 && id < v->n_tokens ? tok_text(v, id) : "";
}
