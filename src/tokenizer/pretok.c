/* pretok.c - BPE pre-tokenizers: the regexes that cut text into words before
 * merges, one list per tokenizer.ggml.pre name, run with PCRE2 (UTF, JIT).
 *
 * The regexes are those of the models' tokenizer.json files as llama.cpp
 * spells them. Each regex of a list refines the pieces of the one before;
 * the text between two matches is a piece of its own (as llama.cpp's
 * unicode_regex_split does). llama.cpp runs gpt-2, llama3 and qwen2
 * through hand-written splitters and the rest through std::regex with
 * Unicode classes collapsed to one byte; both agree with a real regex
 * engine given the same character classes, which is what we give PCRE2:
 *
 *   \s  -> llama.cpp's whitespace set: \t\n\v\f\r, space, and the non-ASCII
 *          spaces U+0085, U+00A0, U+1680, U+2000-200A, U+2028, U+2029,
 *          U+202F, U+205F, U+3000. llama.cpp's engines see those as U+000B,
 *          so no literal in a class matches them (DeepSeek's class holds
 *          U+3000); tok_utf8_canon gives us placeholders for them (U+0080,
 *          U+E001) that only this class names.
 *   \S  -> the complement of that set;  \d -> [0-9] (ECMAScript's \d)
 *   $   -> end of the piece only (PCRE2_DOLLAR_ENDONLY, like ECMAScript)
 * \p{L}, \p{N}... come from PCRE2's Unicode tables (Unicode 14 in PCRE2
 * 10.42); llama.cpp's tables may differ for characters added since.
 */
#include "tokenizer/tok_impl.h"

#include "base/err.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- regexes */

#define RX_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RX_CONTRACT "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RX_LLAMA3 RX_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_QWEN2 RX_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_QWEN35 RX_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* llama.cpp writes "a letter that is not a-z" as ((?=[\p{L}])([^a-z])); the
 * class [^\P{L}a-z] matches the same characters without a group per
 * character, whose backtracking frames overflow PCRE2's JIT stack on long
 * words. (Same matches: checked on 200k random strings.) */
#define RX_UPPER_LOWER(tail) \
    "[^\\r\\n\\p{L}\\p{N}]?[^\\P{L}a-z]*[^\\P{L}A-Z]+" tail "|[^\\r\\n\\p{L}\\p{N}]?[^\\P{L}a-z]+[^\\P{L}A-Z]*" tail
#define RX_BLOOM " ?[^(\\s|.,!?…。，、।۔،)]+"
/* DeepSeek LLM's letters: Latin, Greek, Cyrillic... as listed in its tokenizer.json. */
#define RX_DEEPSEEK_LETTERS "A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃"

static const char *const rx_default[] = {"[\\p{P}\\$\\+<=>\\^~\\|]+", RX_GPT2, "\\p{N}+", "[0-9][0-9][0-9]", NULL};
static const char *const rx_gpt2[] = {RX_GPT2, NULL};
static const char *const rx_llama3[] = {RX_LLAMA3, NULL};
static const char *const rx_qwen2[] = {RX_QWEN2, NULL};
static const char *const rx_qwen35[] = {RX_QWEN35, NULL};
static const char *const rx_starcoder[] = {"\\p{N}", RX_GPT2, NULL};
static const char *const rx_falcon[] = {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RX_GPT2, "[0-9][0-9][0-9]", NULL};
static const char *const rx_deepseek_llm[] = {
    "[\r\n]", "\\s?[" RX_DEEPSEEK_LETTERS "]+", "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", "[一-龥ࠀ-一가-퟿]+", "\\p{N}+", NULL};
static const char *const rx_deepseek_coder[] = {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}", NULL};
static const char *const rx_deepseek3[] = {
    "\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const rx_bloom[] = {RX_BLOOM, NULL};
static const char *const rx_viking[] = {RX_BLOOM, "\\p{N}", NULL};
static const char *const rx_tekken[] = {
    RX_UPPER_LOWER("") "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", NULL};
static const char *const rx_gpt4o[] = {
    RX_UPPER_LOWER(RX_CONTRACT "?") "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", NULL};
static const char *const rx_chameleon[] = {
    "<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
    "[\\p{P}!-/:-@\\[-`{-~]", RX_GPT2, NULL};
static const char *const rx_bailing[] = {
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const rx_seed_coder[] = {
    RX_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", NULL};

/* A pre-tokenizer: the names that select it, its regexes and llama.cpp's
 * flags for those names (clean_spaces, ignore_merges, add_bos default,
 * no BOS at all). */
typedef struct {
    const char *names; /* '|'-separated */
    const char *const *rx;
    tok_pretok_flags flags;
} pretok_def;

#define CLEAN {true, false, false, false}
#define RAW {false, false, false, false}

static const pretok_def pretok_defs[] = {
    {"default", rx_default, CLEAN},
    {"gpt-2|phi-2|jina-es|jina-de|gigachat|jina-v2-es|jina-v2-de|a.x-4.0|mellum|modern-bert|jina-v1-en"
     "|jina-v2-code|roberta-bpe|exaone4|mpt|olmo|jais",
     rx_gpt2, CLEAN},
    {"trillion|granite-docling", rx_gpt2, RAW},
    {"llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2|jina-v5-nano", rx_llama3,
     {true, true, true, false}},
    {"dbrx|smaug-bpe", rx_llama3, CLEAN},
    {"glm4|chatglm-bpe", rx_llama3, {true, false, false, true}},
    {"qwen2|deepseek-r1-qwen|kormo|f2llmv2|hunyuan|grok-2|solar-open", rx_qwen2, RAW},
    {"stablelm2|megrez", rx_qwen2, CLEAN},
    {"qwen35", rx_qwen35, RAW},
    {"deepseek-llm", rx_deepseek_llm, RAW},
    {"deepseek-coder", rx_deepseek_coder, RAW},
    {"deepseek-v3|hunyuan-dense|joyai-llm", rx_deepseek3, RAW},
    {"falcon", rx_falcon, CLEAN},
    {"starcoder|refact|codeshell|exaone|minerva-7b|mellum2", rx_starcoder, CLEAN},
    {"command-r|smollm", rx_starcoder, RAW},
    {"bloom|gpt3-finnish", rx_bloom, CLEAN},
    {"poro-chat", rx_bloom, RAW},
    {"viking", rx_viking, RAW},
    {"tekken", rx_tekken, {false, true, true, false}},
    {"chameleon", rx_chameleon, {false, false, true, false}},
    {"gpt-4o|llama4|kanana2|talkie|minimax-m2", rx_gpt4o, RAW},
    {"bailingmoe|bailingmoe2|llada-moe", rx_bailing, RAW},
    {"seed-coder", rx_seed_coder, RAW},
};

static bool names_have(const char *names, const char *name, size_t n)
{
    for (const char *p = names; *p;) {
        const char *bar = strchr(p, '|');
        size_t k = bar ? (size_t)(bar - p) : strlen(p);
        if (k == n && memcmp(p, name, n) == 0) return true;
        if (!bar) break;
        p = bar + 1;
    }
    return false;
}

/* ------------------------------------------------ translation to PCRE2 */

/* ASCII spaces and the placeholders of the others (see the top). */
#define WS_CHARS "\\t\\n\\x{0b}\\f\\r \\x{80}\\x{e001}"

/* Rewrites \s, \S and \d of a llama.cpp regex into explicit classes (see
 * the top). *out is malloc'd. */
static int rx_translate(const char *rx, char **out)
{
    size_t n = strlen(rx), o = 0;
    char *buf = malloc(n * (sizeof WS_CHARS + 4) + 1);
    if (!buf) return err_set(PL_ENOMEM, "tokenizer: out of memory translating a regex");
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        char c = rx[i];
        if (c == '\\' && i + 1 < n) {
            char e = rx[++i];
            const char *rep = NULL;
            if (e == 's') rep = in_class ? WS_CHARS : "[" WS_CHARS "]";
            else if (e == 'S' && !in_class) rep = "[^" WS_CHARS "]";
            else if (e == 'd') rep = in_class ? "0-9" : "[0-9]";
            if (rep) {
                memcpy(buf + o, rep, strlen(rep));
                o += strlen(rep);
            } else {
                buf[o++] = c;
                buf[o++] = e;
            }
            continue;
        }
        if (c == '[' && !in_class) in_class = true;
        else if (c == ']' && in_class) in_class = false;
        buf[o++] = c;
    }
    buf[o] = '\0';
    *out = buf;
    return 0;
}

/* ------------------------------------------------------------- compile */

struct tok_pretok {
    size_t n_rx;
    pcre2_code **code;
};

void tok_pretok_free(tok_pretok *p)
{
    if (!p) return;
    for (size_t i = 0; i < p->n_rx; i++) pcre2_code_free(p->code[i]);
    free(p->code);
    free(p);
}

static int rx_compile(const char *rx, pcre2_code **out)
{
    char *pat = NULL;
    int rc = rx_translate(rx, &pat);
    if (rc) return rc;
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                     PCRE2_UTF | PCRE2_DOLLAR_ENDONLY, &ec, &eo, NULL);
    free(pat);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return err_set(PL_EFORMAT, "tokenizer: pre-tokenizer regex /%s/ at %zu: %s", rx, (size_t)eo, (char *)msg);
    }
    /* JIT is an optimisation: if it is unavailable, pcre2_match interprets. */
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    *out = code;
    return 0;
}

int tok_pretok_new(tok_pretok **out, const char *name, size_t name_len, tok_pretok_flags *flags)
{
    const pretok_def *def = NULL;
    if (!name || !name_len) name = "default", name_len = strlen(name);
    for (size_t i = 0; i < sizeof pretok_defs / sizeof pretok_defs[0] && !def; i++)
        if (names_have(pretok_defs[i].names, name, name_len)) def = &pretok_defs[i];
    if (!def)
        return err_set(PL_EUNSUPPORTED, "tokenizer.ggml.pre: pre-tokenizer '%.*s' is not supported", (int)name_len,
                       name);
    tok_pretok *p = calloc(1, sizeof *p);
    size_t n = 0;
    while (def->rx[n]) n++;
    if (p) p->code = calloc(n, sizeof *p->code);
    if (!p || !p->code) {
        tok_pretok_free(p);
        return err_set(PL_ENOMEM, "tokenizer: out of memory for the pre-tokenizer");
    }
    for (size_t i = 0; i < n; i++) {
        int rc = rx_compile(def->rx[i], &p->code[i]);
        if (rc) {
            tok_pretok_free(p);
            return rc;
        }
        p->n_rx++;
    }
    *flags = def->flags;
    *out = p;
    return 0;
}

/* --------------------------------------------------------------- split */

static int spans_push(tok_spans *s, size_t off, size_t len)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        tok_span *nv = realloc(s->v, cap * sizeof *nv);
        if (!nv) return err_set(PL_ENOMEM, "tokenizer: out of memory for %zu words", cap);
        s->v = nv;
        s->cap = cap;
    }
    s->v[s->n++] = (tok_span){off, len};
    return 0;
}

typedef struct {
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pcre2_jit_stack *js;
} rx_scratch;

/* Start offset of the character after the one at off. */
static size_t next_char(const char *s, size_t off, size_t len)
{
    size_t k = tok_utf8_len((uint8_t)s[off]);
    return off + k <= len ? off + k : len;
}

/* Cuts piece [off, off+len) of text by the matches of code, appending the
 * matches and the gaps between them to out (empty matches only cut). */
static int split_piece(pcre2_code *code, rx_scratch *sc, const char *text, size_t off, size_t len, tok_spans *out)
{
    PCRE2_SPTR subj = (PCRE2_SPTR)(text + off);
    size_t pos = 0, last = 0;
    uint32_t opts = 0;
    int rc = 0;
    while (!rc && pos <= len) {
        int m = pcre2_match(code, subj, len, pos, opts | PCRE2_NO_UTF_CHECK, sc->md, sc->mc);
        if (m == PCRE2_ERROR_NOMATCH) {
            if (!opts) break;
            /* no non-empty match at an empty match's end: step one char */
            if (pos >= len) break;
            pos = next_char((const char *)subj, pos, len);
            opts = 0;
            continue;
        }
        if (m < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(m, msg, sizeof msg);
            return err_set(PL_ERANGE, "tokenizer: pre-tokenizer regex failed on a %zu-byte piece: %s", len,
                           (char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(sc->md);
        size_t ms = ov[0], me = ov[1];
        if (ms > last) rc = spans_push(out, off + last, ms - last);
        if (!rc && me > ms) rc = spans_push(out, off + ms, me - ms);
        last = me > last ? me : last;
        pos = me;
        opts = me == ms ? PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED : 0;
    }
    if (!rc && last < len) rc = spans_push(out, off + last, len - last);
    return rc;
}

static int scratch_init(rx_scratch *sc)
{
    sc->md = pcre2_match_data_create(4, NULL);
    sc->mc = pcre2_match_context_create(NULL);
    /* Repeated groups (tekken, gpt-4o) keep a frame per repeat; long words
     * need more than JIT's default 32 KiB of stack. */
    sc->js = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, NULL);
    if (!sc->md || !sc->mc || !sc->js) return err_set(PL_ENOMEM, "tokenizer: out of memory for regex matching");
    pcre2_jit_stack_assign(sc->mc, NULL, sc->js);
    return 0;
}

static void scratch_free(rx_scratch *sc)
{
    pcre2_match_data_free(sc->md);
    pcre2_match_context_free(sc->mc);
    pcre2_jit_stack_free(sc->js);
}

int tok_pretok_split(const tok_pretok *p, const char *text, size_t len, tok_spans *out)
{
    if (len == 0) return 0;
    rx_scratch sc = {0};
    tok_spans a = {0}, b = {0};
    int rc = scratch_init(&sc);
    if (!rc) rc = spans_push(&a, 0, len);
    for (size_t r = 0; !rc && r < p->n_rx; r++) {
        b.n = 0;
        for (size_t i = 0; !rc && i < a.n; i++) rc = split_piece(p->code[r], &sc, text, a.v[i].off, a.v[i].len, &b);
        tok_spans t = a;
        a = b;
        b = t;
    }
    for (size_t i = 0; !rc && i < a.n; i++) rc = spans_push(out, a.v[i].off, a.v[i].len);
    free(a.v);
    free(b.v);
    scratch_free(&sc);
    return rc;
}
