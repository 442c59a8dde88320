/* test_grammar.c - the GBNF parser (valid and invalid grammars, error
 * positions), the pushdown matcher (accepted and rejected strings, UTF-8,
 * repetitions) and the token mask (equal to trying every token alone). */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "grammar/grammar.h"
#include "test.h"

static gm_grammar *parse(const char *text)
{
    gm_grammar *g = NULL;
    if (gm_parse(&g, text, strlen(text), NULL)) return NULL;
    return g;
}

/* 1 accepted, 0 rejected, <0 error */
static int match(const gm_grammar *g, const char *s) { return gm_match_string(g, s, strlen(s)); }

TEST(parses_literals_classes_and_groups)
{
    gm_grammar *g = parse("root ::= \"ab\" [0-9]+ (\"x\" | \"yz\")? # comment\n");
    CHECK(g);
    CHECK_EQ_INT(match(g, "ab1"), 1);
    CHECK_EQ_INT(match(g, "ab123yz"), 1);
    CHECK_EQ_INT(match(g, "ab9x"), 1);
    CHECK_EQ_INT(match(g, "ab"), 0);
    CHECK_EQ_INT(match(g, "ab1y"), 0);
    CHECK_EQ_INT(match(g, "ab1xx"), 0);
    CHECK_EQ_INT(match(g, "Ab1"), 0);
    gm_grammar_free(g);
}

TEST(rules_alternation_and_recursion)
{
    const char *gb =
        "root ::= expr\n"
        "expr ::= term (\"+\" term)*\n"
        "term ::= num | \"(\" expr \")\"\n"
        "num  ::= [1-9] [0-9]*\n";
    gm_grammar *g = parse(gb);
    CHECK(g);
    CHECK_EQ_INT(match(g, "1+23"), 1);
    CHECK_EQ_INT(match(g, "(1+(2+3))+4"), 1);
    CHECK_EQ_INT(match(g, "(1+2"), 0);
    CHECK_EQ_INT(match(g, "01"), 0);
    CHECK_EQ_INT(match(g, "1++2"), 0);
    gm_grammar_free(g);
}

TEST(bounded_repetitions)
{
    gm_grammar *g = parse("root ::= \"a\"{2,4} \"b\"{3} \"c\"{1,}\n");
    CHECK(g);
    CHECK_EQ_INT(match(g, "aabbbc"), 1);
    CHECK_EQ_INT(match(g, "aaaabbbccc"), 1);
    CHECK_EQ_INT(match(g, "abbbc"), 0);
    CHECK_EQ_INT(match(g, "aaaaabbbc"), 0);
    CHECK_EQ_INT(match(g, "aabbc"), 0);
    CHECK_EQ_INT(match(g, "aabbb"), 0);
    gm_grammar_free(g);
    g = parse("root ::= (\"ab\" | \"c\"){0,2}\n");
    CHECK(g);
    CHECK_EQ_INT(match(g, ""), 1);
    CHECK_EQ_INT(match(g, "abc"), 1);
    CHECK_EQ_INT(match(g, "cab"), 1);
    CHECK_EQ_INT(match(g, "ccc"), 0);
    gm_grammar_free(g);
}

TEST(negated_classes_escapes_and_utf8)
{
    gm_grammar *g = parse("root ::= [^a-z\\n] \"\\x41\\u00e9\\t\" . [α-ω]\n");
    CHECK(g);
    CHECK_EQ_INT(match(g, "XAé\t€β"), 1);
    CHECK_EQ_INT(match(g, "xAé\t€β"), 0);  /* x is in a-z */
    CHECK_EQ_INT(match(g, "\nAé\t€β"), 0);
    CHECK_EQ_INT(match(g, "XAé\t€b"), 0);  /* b is not Greek */
    CHECK_EQ_INT(match(g, "XAé\t\xff" "β"), 0); /* invalid UTF-8 */
    gm_grammar_free(g);
    g = parse("root ::= \"日本\" [語]\n");
    CHECK(g);
    CHECK_EQ_INT(match(g, "日本語"), 1);
    CHECK_EQ_INT(match(g, "日本"), 0);
    gm_grammar_free(g);
}

TEST(multiline_rules_and_nested_newlines)
{
    gm_grammar *g = parse("# leading comment\n\nroot ::= (\n  \"a\" |\n  \"b\"\n) item\nitem ::= \"c\"\n");
    CHECK(g);
    CHECK_EQ_INT(match(g, "ac"), 1);
    CHECK_EQ_INT(match(g, "bc"), 1);
    gm_grammar_free(g);
}

static void expect_error(const char *text, const char *want, int *ok)
{
    gm_grammar *g = NULL;
    int rc = gm_parse(&g, text, strlen(text), NULL);
    *ok = rc < 0 && !g && strstr(err_msg(), want) != NULL;
    if (!*ok) fprintf(stderr, "grammar %s: got rc %d, \"%s\", wanted \"%s\"\n", text, rc, err_msg(), want);
    gm_grammar_free(g);
}

TEST(errors_name_line_and_column)
{
    int ok;
    expect_error("root ::= \"abc\n", "line 1, column 10: unterminated string literal", &ok);
    CHECK(ok);
    expect_error("root ::= x\nx ::= [a-\n", "line 2, column 7: unterminated character class", &ok);
    CHECK(ok);
    expect_error("root ::= foo\n", "line 1, column 10: rule 'foo' is used but never defined", &ok);
    CHECK(ok);
    expect_error("root := \"a\"\n", "line 1, column 6: expected '::='", &ok);
    CHECK(ok);
    expect_error("root ::= \"a\" )\n", "line 1, column 14: unexpected character", &ok);
    CHECK(ok);
    expect_error("root ::= (\"a\"\n", "line 1, column 10: expected ')'", &ok);
    CHECK(ok);
    expect_error("root ::= \"a\"{3,2}\n", "n < m", &ok);
    CHECK(ok);
    expect_error("root ::= \"a\"{99999}\n", "above 10000", &ok);
    CHECK(ok);
    expect_error("root ::= \"\\q\"\n", "line 1, column 11: unknown escape", &ok);
    CHECK(ok);
    expect_error("root ::= [z-a]\n", "below its lower bound", &ok);
    CHECK(ok);
    expect_error("x ::= \"a\"\n", "no rule named 'root'", &ok);
    CHECK(ok);
    expect_error("root ::= \"a\"\nroot ::= \"b\"\n", "line 2, column 1: rule 'root' is already defined at line 1", &ok);
    CHECK(ok);
}

TEST(left_recursion_is_refused)
{
    int ok;
    expect_error("root ::= root \"a\" | \"b\"\n", "left-recursive", &ok);
    CHECK(ok);
    /* through a nullable prefix and another rule */
    expect_error("root ::= opt x\nopt ::= \"o\"?\nx ::= root \"a\" | \"b\"\n", "left-recursive", &ok);
    CHECK(ok);
    /* right recursion is fine */
    gm_grammar *g = parse("root ::= \"a\" root | \"b\"\n");
    CHECK(g);
    CHECK_EQ_INT(match(g, "aaab"), 1);
    gm_grammar_free(g);
}

TEST(long_repetition_keeps_stacks_flat)
{
    gm_grammar *g = parse("root ::= [a-z]* \"!\"\n");
    CHECK(g);
    char s[20002];
    memset(s, 'q', 20000);
    s[20000] = '!';
    s[20001] = 0;
    CHECK_EQ_INT(match(g, s), 1);
    gm_grammar_free(g);
}

/* --------------------------------------------------------------- mask */

static const char *vocab_pieces[] = {
    "{", "}", "\"", "a", "ab", "abc", "b", "1", "12", "123", " ", "\xce", "\xb1", "\xce\xb1", "é", ":",
    "\"a", "a\"", "{\"", "x", ",", "[", "]", "", "true", "tr", "ue", "\xe2\x82", "\xac", "\xff",
};
#define NV ((int32_t)(sizeof vocab_pieces / sizeof *vocab_pieces))

static gm_trie *small_trie(int32_t eog_id)
{
    size_t lens[NV + 1];
    bool eog[NV + 1];
    const char *pieces[NV + 1];
    for (int32_t i = 0; i < NV; i++) {
        pieces[i] = vocab_pieces[i];
        lens[i] = strlen(vocab_pieces[i]);
        eog[i] = false;
    }
    pieces[NV] = "";
    lens[NV] = 0;
    eog[NV] = true;
    (void)eog_id;
    gm_trie *t = NULL;
    return gm_trie_new(&t, pieces, lens, eog, NV + 1) ? NULL : t;
}

/* Empty pieces (control tokens) are never allowed. */
static int lens_ok(int32_t id) { return vocab_pieces[id][0] != 0; }

/* The mask of s must allow exactly the tokens whose bytes advance s. */
static int mask_agrees(const gm_grammar *g, const gm_trie *t, const gm_state *s, gm_work *w, gm_mask_cache *mc)
{
    uint64_t bits[2];
    int32_t n;
    if (gm_mask(g, t, s, w, mc, bits, &n)) return 0;
    int32_t count = 0;
    for (int32_t id = 0; id < NV; id++) {
        gm_state c;
        if (gm_state_copy(&c, s)) return 0;
        int acc = lens_ok(id) ? gm_state_advance(&c, g, w, vocab_pieces[id], strlen(vocab_pieces[id])) : 0;
        gm_state_free(&c);
        bool bit = (bits[id >> 6] >> (id & 63)) & 1;
        if (bit != (acc == 1)) {
            fprintf(stderr, "token %d (%s): mask %d, advance %d\n", id, vocab_pieces[id], bit, acc);
            return 0;
        }
        count += bit;
    }
    bool eog = (bits[NV >> 6] >> (NV & 63)) & 1;
    if (eog != gm_state_accepting(s)) return 0;
    return count + eog == n;
}

TEST(mask_equals_trying_each_token)
{
    gm_grammar *g = parse("root ::= \"{\" ( \"\\\"\" [a-zé€α]* \"\\\"\" \":\" \" \"? num )? \"}\"\nnum ::= [1-9] [0-9]{0,2} | \"true\"\n");
    CHECK(g);
    gm_trie *t = small_trie(NV);
    CHECK(t);
    gm_work *w = gm_work_new();
    gm_mask_cache *mc = gm_mask_cache_new();
    gm_state s;
    CHECK_EQ_INT(gm_state_init(&s, g, w), 0);
    /* walk a path token by token, checking the mask at every state */
    const int path[] = {18, 5, 11, 12, 27, 28, 14, 2, 15, 10, 8, 1};
    int ok = 1;
    for (size_t i = 0; ok && i < sizeof path / sizeof *path; i++) {
        ok = mask_agrees(g, t, &s, w, mc) && mask_agrees(g, t, &s, w, mc); /* second: from the cache */
        if (ok) ok = gm_state_advance(&s, g, w, vocab_pieces[path[i]], strlen(vocab_pieces[path[i]])) == 1;
        if (!ok) fprintf(stderr, "step %zu\n", i);
    }
    CHECK(ok);
    CHECK(gm_state_accepting(&s));
    CHECK(mask_agrees(g, t, &s, w, mc));
    gm_state_free(&s);
    gm_mask_cache_free(mc);
    gm_work_free(w);
    gm_trie_free(t);
    gm_grammar_free(g);
}

int main(void)
{
    RUN(parses_literals_classes_and_groups);
    RUN(rules_alternation_and_recursion);
    RUN(bounded_repetitions);
    RUN(negated_classes_escapes_and_utf8);
    RUN(multiline_rules_and_nested_newlines);
    RUN(errors_name_line_and_column);
    RUN(left_recursion_is_refused);
    RUN(long_repetition_keeps_stacks_flat);
    RUN(mask_equals_trying_each_token);
    return test_summary();
}
