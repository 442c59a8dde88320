/* test_tokenizer.c - the tokenizer against llama.cpp's own test vectors, the
 * llama.cpp peer, round trips, streaming, bad input and bad files.
 *
 * Data: ../shared/models/vocab/ggml-vocab-{llama-spm,gpt-2}.gguf with their
 * .inp/.out pairs (llama.cpp's test-tokenizer-0 format: inputs separated by
 * "\n__ggml_vocab_test__\n", one line of ids per input, tokenized with
 * add_special = false, parse_special = false) and stories260K.gguf. Set
 * PAGELLM_VOCAB_DIR to a folder of more ggml-vocab-*.gguf{,.inp,.out}
 * triples (llama.cpp's models/ folder) to run those too.
 */
#include "test.h"

#include "base/err.h"
#include "gguf/gguf.h"
#include "pagellm.h"
#include "tokenizer/tok_impl.h"
#include "tokenizer/tokenizer.h"

#include <dirent.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#define VOCAB_DIR SHARED_MODELS "/vocab"
#define SPM_PATH VOCAB_DIR "/ggml-vocab-llama-spm.gguf"
#define GPT2_PATH VOCAB_DIR "/ggml-vocab-gpt-2.gguf"
#define STORIES_PATH SHARED_MODELS "/stories260K.gguf"

static tok_vocab *spm, *gpt2, *stories;

/* ------------------------------------------------------------ helpers */

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap + 1);
    for (size_t r; b && (r = fread(b + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap) {
            char *nb = realloc(b, cap * 2 + 1);
            if (!nb) { free(b); b = NULL; break; }
            b = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (b) b[n] = '\0', *len = n;
    return b;
}


/* Tokenizes and compares with want[0..nw); on mismatch writes both. */
static bool same_ids(const tok_vocab *v, const char *s, size_t len, bool bos, bool special, const int32_t *want,
                     size_t nw, char *why, size_t whylen)
{
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = tok_tokenize(v, s, len, bos, special, &ids, &n);
    bool ok = rc == 0 && n == nw && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
    if (!ok) {
        int o = snprintf(why, whylen, "rc %d, got", rc);
        for (size_t i = 0; i < n && o < (int)whylen - 16; i++) o += snprintf(why + o, whylen - (size_t)o, " %d", ids[i]);
        o += snprintf(why + o, whylen - (size_t)o, "; want");
        for (size_t i = 0; i < nw && o < (int)whylen - 16; i++) o += snprintf(why + o, whylen - (size_t)o, " %d", want[i]);
    }
    free(ids);
    return ok;
}

/* Runs every case of a .inp/.out pair; returns the number of failures and
 * describes the first in why ("" if the files are missing: *cases = 0). */
static int run_vectors(const tok_vocab *v, const char *gguf, int *cases, char *why, size_t whylen)
{
    char path[512];
    size_t ni = 0, no = 0;
    snprintf(path, sizeof path, "%s.inp", gguf);
    char *inp = read_all(path, &ni);
    snprintf(path, sizeof path, "%s.out", gguf);
    char *out = read_all(path, &no);
    int fails = 0;
    *cases = 0;
    why[0] = '\0';
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char *line = out;
    for (size_t pos = 0; inp && out && pos < ni;) {
        char *next = memmem(inp + pos, ni - pos, sep, sizeof sep - 1);
        size_t end = next ? (size_t)(next - inp) : ni;
        char *nl = line ? strchr(line, '\n') : NULL;
        if (!line || !*line) { fails++; snprintf(why, whylen, "more inputs than output lines"); break; }
        if (nl) *nl = '\0';
        int32_t want[4096];
        size_t nw = 0;
        for (char *p = line, *q; nw < 4096; p = q) {
            long x = strtol(p, &q, 10);
            if (q == p) break;
            want[nw++] = (int32_t)x;
        }
        char w[1024];
        if (!same_ids(v, inp + pos, end - pos, false, false, want, nw, w, sizeof w)) {
            if (!fails++) snprintf(why, whylen, "case %d \"%.*s\": %s", *cases, (int)(end - pos > 60 ? 60 : end - pos), inp + pos, w);
        }
        (*cases)++;
        line = nl ? nl + 1 : NULL;
        pos = next ? end + sizeof sep - 1 : ni;
    }
    free(inp);
    free(out);
    return fails;
}

static bool valid_utf8(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        int r = tok_utf8_check((const uint8_t *)s + i, n - i);
        if (r <= 0) return false;
        i += (size_t)r;
    }
    return true;
}

/* Detokenizes ids through the stream, one push at a time; every push must
 * be valid UTF-8. Returns the concatenation (malloc'd) or NULL. */
static char *stream_all(const tok_vocab *v, const int32_t *ids, size_t n, size_t *len)
{
    tok_detok *d = tok_detok_new(v);
    size_t cap = 64, o = 0;
    char *all = malloc(cap), piece[4096];
    bool ok = d && all;
    for (size_t i = 0; ok && i <= n; i++) {
        int k = i < n ? tok_detok_push(d, ids[i], piece, sizeof piece) : tok_detok_flush(d, piece, sizeof piece);
        ok = k >= 0 && valid_utf8(piece, (size_t)k) && strlen(piece) <= (size_t)k;
        if (ok && o + (size_t)k + 1 > cap) {
            cap = (o + (size_t)k + 1) * 2;
            char *na = realloc(all, cap);
            if (!na) ok = false;
            else all = na;
        }
        if (ok) memcpy(all + o, piece, (size_t)k), o += (size_t)k;
    }
    tok_detok_free(d);
    if (!ok) { free(all); return NULL; }
    all[o] = '\0';
    *len = o;
    return all;
}

/* ------------------------------------------------------------- loading */

TEST(loads_spm_vocab)
{
    CHECK_MSG(tok_vocab_load_path(&spm, SPM_PATH) == 0, "%s", err_msg());
    CHECK_EQ_INT(tok_vocab_size(spm), 32000);
    CHECK_EQ_INT(tok_vocab_kind(spm), TOK_SPM);
    CHECK_EQ_INT(tok_vocab_bos(spm), 1);
    CHECK_EQ_INT(tok_vocab_eos(spm), 2);
    CHECK(tok_vocab_add_bos(spm));
    CHECK(tok_vocab_is_eog(spm, 2));
    CHECK(!tok_vocab_is_eog(spm, 1));
    CHECK(spm->spm_splittable);
    CHECK_STR(tok_vocab_text(spm, 15043), "\xE2\x96\x81Hello");
    CHECK_STR(tok_vocab_text(spm, 13), "<0x0A>");
    CHECK_STR(tok_vocab_text(spm, 99999), "");
}

TEST(loads_gpt2_vocab)
{
    CHECK_MSG(tok_vocab_load_path(&gpt2, GPT2_PATH) == 0, "%s", err_msg());
    CHECK_EQ_INT(tok_vocab_size(gpt2), 50257);
    CHECK_EQ_INT(tok_vocab_kind(gpt2), TOK_BPE);
    CHECK_EQ_INT(tok_vocab_bos(gpt2), 50256);
    CHECK(tok_vocab_is_eog(gpt2, 50256));
    CHECK(!tok_vocab_add_bos(gpt2));
    CHECK_EQ_INT(gpt2->merges.count, 50000);
}

TEST(public_api_loads_and_reports)
{
    pl_vocab *v = NULL;
    CHECK(pl_vocab_load(&v, "no/such/file.gguf") != 0);
    CHECK(strstr(pl_last_error(), "no/such/file.gguf") != NULL);
    CHECK_MSG(pl_vocab_load(&v, SPM_PATH) == 0, "%s", pl_last_error());
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(pl_tokenize(v, "Hello world", 11, true, false, &ids, &n) == 0);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(ids[0], 1);
    CHECK_EQ_INT(ids[1], 15043);
    CHECK_STR(pl_token_piece(v, ids[2]), "\xE2\x96\x81world");
    char *text = NULL;
    size_t len = 0;
    CHECK(pl_detokenize(v, ids + 1, n - 1, &text, &len) == 0);
    CHECK_STR(text, "Hello world");
    pl_free(text);
    pl_free(ids);
    CHECK(pl_tokenize(v, NULL, 3, true, false, &ids, &n) == PL_EINVAL);
    pl_vocab_free(v);
}

/* ------------------------------------------------------- test vectors */

TEST(spm_matches_llama_cpp_vectors)
{
    char why[2048];
    int cases;
    int fails = run_vectors(spm, SPM_PATH, &cases, why, sizeof why);
    CHECK_MSG(cases >= 40, "only %d cases read from %s.inp/.out", cases, SPM_PATH);
    CHECK_MSG(fails == 0, "%d of %d failed; %.600s", fails, cases, why);
}

TEST(gpt2_matches_llama_cpp_vectors)
{
    char why[2048];
    int cases;
    int fails = run_vectors(gpt2, GPT2_PATH, &cases, why, sizeof why);
    CHECK_MSG(cases >= 40, "only %d cases read from %s.inp/.out", cases, GPT2_PATH);
    CHECK_MSG(fails == 0, "%d of %d failed; %.600s", fails, cases, why);
}

/* Every ggml-vocab-*.gguf with .inp/.out in $PAGELLM_VOCAB_DIR. */
static void extra_vectors(void)
{
    const char *dir = getenv("PAGELLM_VOCAB_DIR");
    if (!dir) { test_skip("extra_vocab_vectors", "PAGELLM_VOCAB_DIR not set"); return; }
    DIR *d = opendir(dir);
    if (!d) { test_skip("extra_vocab_vectors", "PAGELLM_VOCAB_DIR unreadable"); return; }
    for (struct dirent *e; (e = readdir(d));) {
        size_t k = strlen(e->d_name);
        if (k < 5 || strcmp(e->d_name + k - 5, ".gguf") != 0) continue;
        char path[1024], name[300], why[2048], probe[1100];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(name, sizeof name, "vectors_%s", e->d_name);
        snprintf(probe, sizeof probe, "%s.out", path);
        size_t plen;
        char *o = read_all(probe, &plen);
        free(o);
        if (!o || plen == 0) continue;
        tok_vocab *v = NULL;
        if (tok_vocab_load_path(&v, path) != 0) {
            printf("SKIP %s: %s\n", name, err_msg());
            continue;
        }
        int cases, fails = run_vectors(v, path, &cases, why, sizeof why);
        if (fails) { printf("FAIL %s: %d of %d failed; %s\n", name, fails, cases, why); test_n_fail++; }
        else { printf("PASS %s (%d cases)\n", name, cases); test_n_pass++; }
        tok_vocab_free(v);
    }
    closedir(d);
}

/* --------------------------------------------------- llama.cpp as peer */

/* The peer (../shared/peer/README.md): $PEER_DIR/peer-bench, as in lib.sh. */
static char peer_bin[512];

static bool find_peer(void)
{
    const char *dir = getenv("PEER_DIR");
    snprintf(peer_bin, sizeof peer_bin, "%s/peer-bench", dir ? dir : "/tmp/llamacpp-peer");
    return access(peer_bin, X_OK) == 0;
}

/* prompt_ids of peer-bench for prompt (BOS included). */
static int peer_ids(const char *prompt, int32_t *ids, int max)
{
    char cmd[4096], q[2048];
    size_t o = 0;
    for (const char *p = prompt; *p && o < sizeof q - 8; p++) {
        if (*p == '\'') { memcpy(q + o, "'\\''", 4); o += 4; }
        else q[o++] = *p;
    }
    q[o] = '\0';
    snprintf(cmd, sizeof cmd, "%s -m %s -p '%s' -ng 1 2>/dev/null", peer_bin, STORIES_PATH, q);
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    static char out[1 << 16];
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = '\0';
    pclose(f);
    char *p = strstr(out, "\"prompt_ids\":[");
    if (!p) return -1;
    p += strlen("\"prompt_ids\":[");
    int k = 0;
    while (*p && *p != ']' && k < max) {
        ids[k++] = (int32_t)strtol(p, &p, 10);
        if (*p == ',') p++;
    }
    return k;
}

TEST(stories_matches_peer)
{
    static const char *const prompts[] = {
        "Once upon a time",
        " Once upon a time",
        "  two leading spaces",
        "Lily and Tom went to the park.\nThey played!",
        "caf\xC3\xA9 na\xC3\xAFve \xE2\x80\x94 \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\xA6\x99",
        "tabs\tand  double  spaces   end ",
        "\xD0\xBD\xD0\xB5\xD1\x89\xD0\xBE \xCE\xB1\xCE\xB2\xCE\xB3 3.14159",
        "<s> text with </s> markers",
    };
    int32_t want[1024];
    for (size_t i = 0; i < sizeof prompts / sizeof prompts[0]; i++) {
        int nw = peer_ids(prompts[i], want, 1024);
        CHECK_MSG(nw > 0, "peer-bench gave no prompt_ids for \"%s\"", prompts[i]);
        char why[2048];
        CHECK_MSG(same_ids(stories, prompts[i], strlen(prompts[i]), tok_vocab_add_bos(stories), false, want,
                           (size_t)nw, why, sizeof why),
                  "\"%.100s\": %.600s", prompts[i], why);
    }
}

/* ------------------------------------------------------------ specials */

TEST(spm_special_tokens_only_when_asked)
{
    static const int32_t with[] = {1, 15043, 2};
    char why[1024];
    CHECK_MSG(same_ids(spm, "<s>Hello</s>", 12, false, true, with, 3, why, sizeof why), "%.600s", why);
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(tok_tokenize(spm, "<s>Hello</s>", 12, false, false, &ids, &n) == 0);
    for (size_t i = 0; i < n; i++) CHECK(ids[i] != 1 && ids[i] != 2);
    free(ids);
    static const int32_t bos_text[] = {1, 1, 15043};
    CHECK_MSG(same_ids(spm, "<s>Hello", 8, true, true, bos_text, 3, why, sizeof why), "%.600s", why);
}

TEST(gpt2_endoftext_only_when_asked)
{
    static const int32_t with[] = {15496, 50256, 6894};
    char why[1024];
    CHECK_MSG(same_ids(gpt2, "Hello<|endoftext|>world", 23, false, true, with, 3, why, sizeof why), "%.600s", why);
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(tok_tokenize(gpt2, "Hello<|endoftext|>world", 23, false, false, &ids, &n) == 0);
    CHECK(n > 3);
    for (size_t i = 0; i < n; i++) CHECK(ids[i] != 50256);
    free(ids);
}

/* Equal-priority merges go to the leftmost pair (ids from llama.cpp). */
TEST(merge_ties_go_leftmost)
{
    static const int32_t spm_aaaa[] = {29871, 263, 7340, 29874}, spm_hmmm[] = {298, 4317, 29885},
                         spm_a7[] = {263, 27137, 7340}, gpt_eee[] = {1453, 68}, gpt_z5[] = {3019, 3019, 89};
    char why[1024];
    CHECK_MSG(same_ids(spm, " aaaa", 5, false, false, spm_aaaa, 4, why, sizeof why), "%.600s", why);
    CHECK_MSG(same_ids(spm, "hmmm", 4, false, false, spm_hmmm, 3, why, sizeof why), "%.600s", why);
    CHECK_MSG(same_ids(spm, "aaaaaaa", 7, false, false, spm_a7, 3, why, sizeof why), "%.600s", why);
    CHECK_MSG(same_ids(gpt2, "eee", 3, false, false, gpt_eee, 2, why, sizeof why), "%.600s", why);
    CHECK_MSG(same_ids(gpt2, "zzzzz", 5, false, false, gpt_z5, 3, why, sizeof why), "%.600s", why);
}

/* U+0085 (NEL) is whitespace to llama.cpp's pre-tokenizer, though not to
 * PCRE2's \s; U+00A0 and U+3000 likewise (ids from llama.cpp). */
TEST(non_ascii_spaces_split_like_llama_cpp)
{
    static const int32_t nel[] = {87, 220, 126, 227, 88}, nbsp[] = {64, 220, 1849, 65}, ideo[] = {80, 220, 5099, 222, 81};
    char why[1024];
    CHECK_MSG(same_ids(gpt2, "x \xc2\x85y", 5, false, false, nel, 5, why, sizeof why), "%.600s", why);
    CHECK_MSG(same_ids(gpt2, "a \xc2\xa0" "b", 5, false, false, nbsp, 4, why, sizeof why), "%.600s", why);
    CHECK_MSG(same_ids(gpt2, "q \xe3\x80\x80r", 6, false, false, ideo, 5, why, sizeof why), "%.600s", why);
}

/* ---------------------------------------------------------- round trips */

/* Deterministic pseudo-random text from a pool of pieces in many scripts. */
static size_t random_text(uint64_t *seed, char *buf, size_t cap)
{
    static const char *const pool[] = {
        "the", " ", "  ", "\n", "\t", "Hello", "world", "3", "42", ".", ",", "!", "?", "'s", "'", "-", "(", ")",
        "\xC3\xA9", "\xC3\xBC", "\xD0\xBF\xD1\x80\xD0\xB8", "\xE4\xB8\x96", "\xE7\x95\x8C", "\xE2\x82\xAC",
        "\xF0\x9F\xA6\x99", "\xF0\x9F\x98\x80", "\xE1\x9E\x80", "\xD8\xB9\xD8\xB1", "\xE0\xA4\xB9\xE0\xA4\xBF",
        "x", "Q", "\xCC\x81", "\xE2\x80\x8B", "\xC2\xA0", "\r\n", "~", "_", "/", "\\", "\"", "#",
    };
    size_t n = 0, parts = 1 + (*seed >> 33) % 24;
    for (size_t i = 0; i < parts; i++) {
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        const char *p = pool[(*seed >> 33) % (sizeof pool / sizeof pool[0])];
        size_t k = strlen(p);
        if (n + k >= cap) break;
        memcpy(buf + n, p, k);
        n += k;
    }
    buf[n] = '\0';
    return n;
}

/* The text that clean_spaces would change: " ?", " !", " .", " ,", " '". */
static bool cleanup_free(const char *s, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if (s[i - 1] == ' ' && strchr("?!.,'", s[i])) return false;
    return true;
}

static void roundtrip(const tok_vocab *v, bool whole, int rounds)
{
    uint64_t seed = 12345;
    char buf[512];
    for (int r = 0; r < rounds; r++) {
        size_t n = random_text(&seed, buf, sizeof buf);
        int32_t *ids = NULL;
        size_t ni = 0, len = 0;
        CHECK_MSG(tok_tokenize(v, buf, n, false, false, &ids, &ni) == 0, "%s", err_msg());
        char *text = NULL;
        if (whole) CHECK(tok_detokenize(v, ids, ni, &text, &len) == 0);
        else text = stream_all(v, ids, ni, &len);
        free(ids);
        bool expect = whole && v->clean_spaces ? cleanup_free(buf, n) : true;
        bool same = text && len == n && memcmp(text, buf, n) == 0;
        free(text);
        if (expect) CHECK_MSG(same, "round %d: \"%s\" does not come back", r, buf);
    }
}

TEST(spm_roundtrip_valid_utf8) { roundtrip(spm, true, 400); }
TEST(gpt2_roundtrip_detokenize) { roundtrip(gpt2, true, 400); }
TEST(gpt2_roundtrip_stream) { roundtrip(gpt2, false, 400); }

TEST(roundtrip_odd_bytes)
{
    /* NUL and control bytes are ordinary characters in both vocabularies */
    static const char s[] = "a\0b\x01\x7f c";
    for (int k = 0; k < 2; k++) {
        const tok_vocab *v = k ? gpt2 : spm;
        int32_t *ids = NULL;
        size_t ni = 0, len = 0;
        char *text = NULL;
        CHECK(tok_tokenize(v, s, sizeof s - 1, false, false, &ids, &ni) == 0);
        CHECK(tok_detokenize(v, ids, ni, &text, &len) == 0);
        CHECK_EQ_INT(len, sizeof s - 1);
        CHECK(memcmp(text, s, len) == 0);
        free(ids);
        free(text);
    }
}

/* ------------------------------------------------------------ streaming */

TEST(stream_holds_split_characters)
{
    /* 🦙 is not in Llama's vocabulary: four byte tokens */
    int32_t *ids = NULL;
    size_t n = 0;
    const char *s = "a\xF0\x9F\xA6\x99\xE4\xB8\x96";
    CHECK(tok_tokenize(spm, s, strlen(s), false, false, &ids, &n) == 0);
    tok_detok *d = tok_detok_new(spm);
    char out[64];
    int lens[16] = {0};
    for (size_t i = 0; i < n && i < 16; i++) {
        lens[i] = tok_detok_push(d, ids[i], out, sizeof out);
        CHECK(lens[i] >= 0 && valid_utf8(out, (size_t)lens[i]));
    }
    CHECK_EQ_INT(tok_detok_flush(d, out, sizeof out), 0);
    tok_detok_free(d);
    /* ids: ▁a? then <0xF0> <0x9F> <0xA6> <0x99>: nothing until the 4th byte */
    size_t first_byte = 0;
    while (first_byte < n && ids[first_byte] != 243) first_byte++;
    CHECK(first_byte + 3 < n);
    CHECK_EQ_INT(lens[first_byte], 0);
    CHECK_EQ_INT(lens[first_byte + 1], 0);
    CHECK_EQ_INT(lens[first_byte + 2], 0);
    CHECK_EQ_INT(lens[first_byte + 3], 4);
    size_t len;
    char *all = stream_all(spm, ids, n, &len);
    CHECK(all != NULL);
    CHECK_STR(all, " a\xF0\x9F\xA6\x99\xE4\xB8\x96"); /* the stream keeps the leading space */
    free(all);
    free(ids);
}

TEST(stream_equals_detokenize_after_bos)
{
    uint64_t seed = 777;
    char buf[512];
    for (int r = 0; r < 200; r++) {
        size_t n = random_text(&seed, buf, sizeof buf);
        int32_t *ids = NULL;
        size_t ni = 0, l1 = 0, l2 = 0;
        char *whole = NULL;
        CHECK(tok_tokenize(spm, buf, n, true, false, &ids, &ni) == 0);
        CHECK(tok_detokenize(spm, ids, ni, &whole, &l1) == 0);
        char *streamed = stream_all(spm, ids, ni, &l2);
        bool same = streamed && l1 == l2 && memcmp(whole, streamed, l1) == 0;
        free(ids);
        free(whole);
        free(streamed);
        CHECK_MSG(same, "round %d \"%s\": stream and detokenize differ", r, buf);
    }
}

TEST(stream_replaces_broken_bytes)
{
    tok_detok *d = tok_detok_new(spm);
    char out[64];
    /* <0xE4> then <0x41>: E4 can never be completed by 'A' */
    CHECK_EQ_INT(tok_detok_push(d, 3 + 0xE4, out, sizeof out), 0);
    CHECK_EQ_INT(tok_detok_push(d, 3 + 0x41, out, sizeof out), 4);
    CHECK_STR(out, "\xEF\xBF\xBD" "A");
    /* a lone continuation byte right away */
    CHECK_EQ_INT(tok_detok_push(d, 3 + 0x80, out, sizeof out), 3);
    /* an incomplete tail at the end becomes U+FFFD on flush */
    CHECK_EQ_INT(tok_detok_push(d, 3 + 0xE4, out, sizeof out), 0);
    CHECK_EQ_INT(tok_detok_push(d, 3 + 0xB8, out, sizeof out), 0);
    CHECK_EQ_INT(tok_detok_flush(d, out, sizeof out), 3);
    CHECK_STR(out, "\xEF\xBF\xBD");
    /* control tokens print nothing */
    CHECK_EQ_INT(tok_detok_push(d, 1, out, sizeof out), 0);
    CHECK(tok_detok_push(d, 32000, out, sizeof out) == PL_ERANGE);
    tok_detok_free(d);
}

TEST(stream_small_buffer_keeps_state)
{
    tok_detok *d = tok_detok_new(spm);
    char out[4];
    CHECK_EQ_INT(tok_detok_push(d, 15043, out, sizeof out), PL_ERANGE); /* " Hello" needs 7 bytes */
    char big[16];
    CHECK_EQ_INT(tok_detok_push(d, 15043, big, sizeof big), 6);
    CHECK_STR(big, " Hello");
    CHECK_EQ_INT(tok_detok_flush(d, out, sizeof out), 0);
    tok_detok_free(d);
}

/* ----------------------------------------------------------- detokenize */

TEST(detokenize_follows_llama_cpp)
{
    char *t = NULL;
    size_t len;
    static const int32_t a[] = {15043, 3186};
    CHECK(tok_detokenize(spm, a, 2, &t, &len) == 0);
    CHECK_STR(t, "Hello world");
    free(t);
    static const int32_t b[] = {1, 15043, 3186, 2};
    CHECK(tok_detokenize(spm, b, 4, &t, &len) == 0);
    CHECK_STR(t, " Hello world"); /* llama.cpp keeps the space after BOS */
    free(t);
    /* gpt-2 cleans " ," and " 's" */
    int32_t *ids = NULL;
    size_t n;
    CHECK(tok_tokenize(gpt2, "Hi , it 's", 10, false, false, &ids, &n) == 0);
    CHECK(tok_detokenize(gpt2, ids, n, &t, &len) == 0);
    CHECK_STR(t, "Hi, it's");
    free(t);
    free(ids);
    static const int32_t bad[] = {5, 50257};
    CHECK(tok_detokenize(gpt2, bad, 2, &t, &len) == PL_ERANGE);
    CHECK(strstr(err_msg(), "50257") != NULL);
    CHECK(tok_detokenize(gpt2, NULL, 0, &t, &len) == 0);
    CHECK_EQ_INT(len, 0);
    free(t);
}

/* ------------------------------------------------------------ bad input */

TEST(invalid_utf8_is_deterministic)
{
    static const char s[] = "ok\xFF\xFE\xC3(\xE2\x82\xF0\x9F\x98 \xED\xA0\x80 end";
    for (int k = 0; k < 2; k++) {
        const tok_vocab *v = k ? gpt2 : spm;
        int32_t *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        CHECK(tok_tokenize(v, s, sizeof s - 1, true, false, &a, &na) == 0);
        CHECK(tok_tokenize(v, s, sizeof s - 1, true, false, &b, &nb) == 0);
        CHECK(na == nb && memcmp(a, b, na * sizeof *a) == 0);
        for (size_t i = 0; i < na; i++) CHECK(a[i] >= 0 && a[i] < tok_vocab_size(v));
        free(a);
        free(b);
    }
    /* BPE reads undecodable bytes as U+FFFD, as llama.cpp does */
    int32_t *ids = NULL;
    size_t n, len;
    char *t = NULL;
    CHECK(tok_tokenize(gpt2, "a\xFF", 2, false, false, &ids, &n) == 0);
    CHECK(tok_detokenize(gpt2, ids, n, &t, &len) == 0);
    CHECK_STR(t, "a\xEF\xBF\xBD");
    free(t);
    free(ids);
}

/* Tokenizing 1 MB must be far from quadratic: compared with 256 KB (4x the
 * text: about 4x the time when linear, 16x when quadratic). Measured in this
 * thread's CPU time, so that a loaded machine does not move the ratio; how
 * fast it is, is make bench's business, not a test's. */
static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void big_case(const tok_vocab *v, char fill, double *secs)
{
    size_t big = 1 << 20, small = 1 << 18;
    char *s = malloc(big + 1);
    const char *para = "The quick brown fox jumps over the lazy dog; it's 42 degrees.\n";
    for (size_t i = 0; i < big; i++) s[i] = fill ? fill : para[i % strlen(para)];
    double t0 = cpu_s();
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = tok_tokenize(v, s, small, false, false, &ids, &n);
    free(ids);
    double t1 = cpu_s();
    if (!rc) rc = tok_tokenize(v, s, big, false, false, &ids, &n);
    double t2 = cpu_s();
    free(ids);
    free(s);
    secs[0] = t1 - t0;
    secs[1] = t2 - t1;
    if (rc) secs[1] = -1;
}

#if defined(__SANITIZE_ADDRESS__)
#define SLOW 4.0 /* sanitizers cost about 3x */
#else
#define SLOW 1.0
#endif

TEST(one_megabyte_is_linear)
{
    static const char fills[] = {0, 'a', ' ', '\n'};
    for (int k = 0; k < 2; k++) {
        for (size_t f = 0; f < sizeof fills; f++) {
            double s[2];
            big_case(k ? gpt2 : spm, fills[f], s);
            if (getenv("TOK_TEST_VERBOSE"))
                printf("# %s fill %d: 256 KB %.3f s, 1 MB %.3f s\n", k ? "gpt2" : "spm", fills[f], s[0], s[1]);
            CHECK_MSG(s[1] >= 0, "%s fill %d: tokenize failed: %s", k ? "gpt2" : "spm", fills[f], err_msg());
            CHECK_MSG(s[1] < 9 * s[0] + 0.2 * SLOW, "%s fill %d: 1 MB %.3f s vs 256 KB %.3f s: not linear",
                      k ? "gpt2" : "spm", fills[f], s[1], s[0]);
        }
    }
}

/* SentencePiece merging chunk by chunk must give what one heap over the
 * whole text gives (the claim in spm.c). */
TEST(spm_chunks_equal_one_heap)
{
    CHECK(spm->spm_splittable);
    uint64_t seed = 99;
    char buf[512];
    for (int r = 0; r < 300; r++) {
        size_t n = random_text(&seed, buf, sizeof buf);
        int32_t *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        CHECK(tok_tokenize(spm, buf, n, false, false, &a, &na) == 0);
        spm->spm_splittable = false;
        int rc = tok_tokenize(spm, buf, n, false, false, &b, &nb);
        spm->spm_splittable = true;
        bool same = rc == 0 && na == nb && memcmp(a, b, na * sizeof *a) == 0;
        free(a);
        free(b);
        CHECK_MSG(same, "round %d \"%s\": chunked and whole merging differ", r, buf);
    }
}

TEST(empty_text)
{
    int32_t *ids = (int32_t *)1;
    size_t n = 7;
    CHECK(tok_tokenize(spm, "", 0, false, false, &ids, &n) == 0);
    CHECK_EQ_INT(n, 0);
    free(ids);
    CHECK(tok_tokenize(spm, "", 0, true, false, &ids, &n) == 0);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(ids[0], 1);
    free(ids);
}

/* ----------------------------------------------------------- bad files */

typedef struct {
    const char *what;
    const char *key_in_error;
    int code;
} bad_case;

/* Writes a small gpt2 vocabulary, damaged per k, and loads it. */
static int load_damaged(int k, char *path, size_t plen)
{
    snprintf(path, plen, "/tmp/pagellm-test-vocab-%d-%d.gguf", (int)getpid(), k);
    gguf_writer *w = gguf_writer_new();
    gguf_str toks[4] = {{"a", 1}, {"b", 1}, {"ab", 2}, {"<|e|>", 5}};
    gguf_str merges[1] = {{"a b", 3}};
    int32_t types[4] = {1, 1, 1, 3};
    float scores[3] = {0, 0, 0};
    int rc = gguf_writer_set_str(w, "tokenizer.ggml.model", k == 1 ? "bert" : "gpt2");
    if (k == 2) rc |= gguf_writer_set_str(w, "tokenizer.ggml.pre", "no-such-pre");
    if (k == 3) rc |= gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_TYPE_INT32, types, 4);
    else if (k != 4) rc |= gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    if (k == 5) rc |= gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, 3);
    rc |= gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, 4);
    if (k != 6) rc |= gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    rc |= gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", k == 7 ? 4 : 3);
    if (k == 8) rc |= gguf_writer_set_str(w, "tokenizer.ggml.add_bos_token", "yes");
    if (!rc) rc = gguf_writer_write(w, path, NULL, NULL);
    gguf_writer_free(w);
    if (rc) return 99;
    tok_vocab *v = NULL;
    rc = tok_vocab_load_path(&v, path);
    tok_vocab_free(v);
    remove(path);
    return rc;
}

TEST(bad_vocab_files_name_the_key)
{
    static const bad_case cases[] = {
        {"good", "", 0},
        {"model bert", "tokenizer.ggml.model", PL_EUNSUPPORTED},
        {"unknown pre", "tokenizer.ggml.pre", PL_EUNSUPPORTED},
        {"tokens not strings", "tokenizer.ggml.tokens", PL_EFORMAT},
        {"tokens missing", "tokenizer.ggml.tokens", PL_ENOTFOUND},
        {"scores too short", "tokenizer.ggml.scores", PL_EFORMAT},
        {"merges missing", "tokenizer.ggml.merges", PL_ENOTFOUND},
        {"eos out of range", "tokenizer.ggml.eos_token_id", PL_ERANGE},
        {"add_bos a string", "tokenizer.ggml.add_bos_token", PL_EFORMAT},
    };
    char path[256];
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        int rc = load_damaged(k, path, sizeof path);
        CHECK_MSG(rc == cases[k].code, "%s: rc %d, want %d (%s)", cases[k].what, rc, cases[k].code, err_msg());
        if (rc) CHECK_MSG(strstr(err_msg(), cases[k].key_in_error) != NULL, "%s: error \"%s\" does not name %s",
                          cases[k].what, err_msg(), cases[k].key_in_error);
    }
}

TEST(tiny_vocab_merges)
{
    char path[256];
    CHECK_EQ_INT(load_damaged(0, path, sizeof path), 0);
    /* the good file again, now kept */
    snprintf(path, sizeof path, "/tmp/pagellm-test-vocab-%d-keep.gguf", (int)getpid());
    gguf_writer *w = gguf_writer_new();
    gguf_str toks[4] = {{"a", 1}, {"b", 1}, {"ab", 2}, {"<|e|>", 5}};
    gguf_str merges[1] = {{"a b", 3}};
    int32_t types[4] = {1, 1, 1, 3};
    CHECK(gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2") == 0);
    CHECK(gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4) == 0);
    CHECK(gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, 4) == 0);
    CHECK(gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 1) == 0);
    CHECK(gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 3) == 0);
    CHECK(gguf_writer_write(w, path, NULL, NULL) == 0);
    gguf_writer_free(w);
    tok_vocab *v = NULL;
    CHECK_MSG(tok_vocab_load_path(&v, path) == 0, "%s", err_msg());
    remove(path);
    static const int32_t want[] = {2, 2, 0, 3, 1}; /* "ababa" is one word */
    char why[512];
    CHECK_MSG(same_ids(v, "ababa<|e|>b", 11, false, true, want, 5, why, sizeof why), "%.600s", why);
    CHECK(tok_vocab_is_eog(v, 3));
    CHECK_EQ_INT(tok_vocab_bos(v), -1); /* default 11 is outside 4 tokens */
    tok_vocab_free(v);
}

int main(void)
{
    RUN(loads_spm_vocab);
    RUN(loads_gpt2_vocab);
    if (!spm || !gpt2) {
        printf("FAIL tokenizer_data: cannot load the vocabularies in %s: %s\n", VOCAB_DIR, err_msg());
        return 1;
    }
    RUN(public_api_loads_and_reports);
    RUN(spm_matches_llama_cpp_vectors);
    RUN(gpt2_matches_llama_cpp_vectors);
    extra_vectors();
    if (tok_vocab_load_path(&stories, STORIES_PATH) != 0) test_skip("stories_matches_peer", err_msg());
    else if (!find_peer()) test_skip("stories_matches_peer", "no llama.cpp peer (../shared/peer/build.sh)");
    else RUN(stories_matches_peer);
    RUN(merge_ties_go_leftmost);
    RUN(non_ascii_spaces_split_like_llama_cpp);
    RUN(spm_special_tokens_only_when_asked);
    RUN(gpt2_endoftext_only_when_asked);
    RUN(spm_roundtrip_valid_utf8);
    RUN(gpt2_roundtrip_detokenize);
    RUN(gpt2_roundtrip_stream);
    RUN(roundtrip_odd_bytes);
    RUN(stream_holds_split_characters);
    RUN(stream_equals_detokenize_after_bos);
    RUN(stream_replaces_broken_bytes);
    RUN(stream_small_buffer_keeps_state);
    RUN(detokenize_follows_llama_cpp);
    RUN(invalid_utf8_is_deterministic);
    RUN(one_megabyte_is_linear);
    RUN(spm_chunks_equal_one_heap);
    RUN(empty_text);
    RUN(bad_vocab_files_name_the_key);
    RUN(tiny_vocab_merges);
    tok_vocab_free(spm);
    tok_vocab_free(gpt2);
    tok_vocab_free(stories);
    return test_summary();
}
