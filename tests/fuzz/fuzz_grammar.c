/* fuzz_grammar.c - libFuzzer target for the GBNF parser and matcher.
 *
 * Input: GBNF text, then optionally a NUL byte and a subject string.
 * The text is parsed; if it compiles, the subject is matched against it,
 * and the token mask of the start state and of the state after the
 * subject's first half is computed over a small fixed vocabulary.
 *
 * Properties (a broken one aborts, which libFuzzer reports as a crash):
 *   - parsing never crashes, hangs or leaks, whatever the bytes;
 *   - a refused grammar leaves an error text starting with "grammar:";
 *   - the mask agrees with advancing each token alone (gm_state_advance):
 *     the trie walk and the plain matcher accept the same tokens;
 *   - matching errors are limit errors (too ambiguous, too deep), never
 *     anything else.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "grammar/grammar.h"

static const char *const pieces[] = {
    "a", "b", "ab", "{", "}", "\"", " ", "\n", "0", "12", "x", ",", ":", "[", "]", "true", "\xc3", "\xa9",
    "\xc3\xa9", "\xe2\x82\xac", "\xe2", "\x82", "\xac", "-", "abc", "\\", "null", "\xf0\x9f\x98\x80", "",
};
#define NP ((int32_t)(sizeof pieces / sizeof *pieces))

static void require(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "broken property: %s (%s)\n", what, err_msg());
        abort();
    }
}

static gm_trie *trie(void)
{
    static gm_trie *t;
    if (t) return t;
    size_t lens[NP + 1];
    bool eog[NP + 1];
    const char *p[NP + 1];
    for (int32_t i = 0; i < NP; i++) { p[i] = pieces[i]; lens[i] = strlen(pieces[i]); eog[i] = false; }
    p[NP] = "";
    lens[NP] = 0;
    eog[NP] = true;
    require(gm_trie_new(&t, p, lens, eog, NP + 1) == 0, "trie builds");
    return t;
}

static void check_mask(const gm_grammar *g, const gm_state *s, gm_work *w)
{
    uint64_t bits[1];
    int32_t n;
    int rc = gm_mask(g, trie(), s, w, NULL, bits, &n);
    if (rc) { require(strstr(err_msg(), "grammar:") != NULL, "mask errors are grammar errors"); return; }
    for (int32_t i = 0; i < NP; i++) {
        gm_state c;
        require(gm_state_copy(&c, s) == 0, "copy");
        int a = pieces[i][0] ? gm_state_advance(&c, g, w, pieces[i], strlen(pieces[i])) : 0;
        gm_state_free(&c);
        if (a < 0) return; /* a limit hit while advancing alone: no comparison */
        require(((bits[0] >> i) & 1) == (a == 1), "mask equals advancing each token");
    }
    require(((bits[0] >> NP) & 1) == gm_state_accepting(s), "EOG allowed exactly when complete");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    const char *nul = memchr(text, 0, size);
    size_t glen = nul ? (size_t)(nul - text) : size;
    gm_grammar *g = NULL;
    int rc = gm_parse(&g, text, glen, NULL);
    if (rc) {
        require(!g && strncmp(err_msg(), "grammar:", 8) == 0, "a refused grammar says so");
        return 0;
    }
    gm_work *w = gm_work_new();
    gm_state s;
    if (gm_state_init(&s, g, w) == 0) {
        check_mask(g, &s, w);
        if (nul) {
            const char *subj = nul + 1;
            size_t n = size - glen - 1;
            int a = gm_state_advance(&s, g, w, subj, n / 2);
            if (a == 1) check_mask(g, &s, w);
            (void)gm_match_string(g, subj, n);
        }
        gm_state_free(&s);
    }
    gm_work_free(w);
    gm_grammar_free(g);
    return 0;
}
