/* cmd_tokenize.c - `pagellm tokenize` and `pagellm detokenize`: a model's
 * tokenizer from the command line, through include/pagellm.h only.
 *
 *   pagellm tokenize -m MODEL [--no-bos] [--special] [--json] TEXT | -f FILE | -f -
 *     plain: the ids, space-separated, on one line
 *     --json: {"ids":[...],"pieces":[...]} with each token's stored piece
 *   pagellm detokenize -m MODEL IDS... | -
 *     IDS may be separate arguments or lists ("1 2 3", "1,2,3", "[1,2,3]");
 *     "-" reads them from stdin. Prints the text and a newline.
 *
 * Exit codes: 0 ok; 1 a file that cannot be read or a model that cannot be
 * loaded (the message names it); 2 usage errors, including a token id
 * outside the vocabulary (named).
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "pagellm.h"

static pl_vocab *load_vocab(const char *cmd, const char *path)
{
    pl_vocab *v = NULL;
    if (pl_vocab_load(&v, path) != 0) {
        cli_error(cmd, "%s", pl_last_error());
        return NULL;
    }
    return v;
}

/* Length of the well-formed UTF-8 sequence at s[0..n), 0 if none starts
 * there (RFC 3629: no overlong forms, surrogates or values past U+10FFFF). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0], lo = 0x80, hi = 0xBF;
    size_t k;
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0;
    if (c < 0xE0) k = 2;
    else if (c < 0xF0) k = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c < 0xF5) k = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return 0;
    if (n < k || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < k; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return k;
}

/* A JSON string of s[0..n) with each byte that is not part of well-formed
 * UTF-8 written as U+FFFD (jansson refuses invalid strings). */
static json_t *json_text(const char *s, size_t n)
{
    char *buf = malloc(3 * n + 1);
    if (!buf) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq((const unsigned char *)s + i, n - i);
        if (k) memcpy(buf + o, s + i, k), o += k, i += k;
        else memcpy(buf + o, "\xEF\xBF\xBD", 3), o += 3, i++;
    }
    json_t *j = json_stringn(buf, o);
    free(buf);
    return j;
}

static int print_json(const pl_vocab *v, const int32_t *ids, size_t n)
{
    json_t *root = json_object(), *jids = json_array(), *pieces = json_array();
    for (size_t i = 0; i < n; i++) {
        const char *p = pl_token_piece(v, ids[i]);
        json_array_append_new(jids, json_integer(ids[i]));
        json_array_append_new(pieces, json_text(p, strlen(p)));
    }
    json_object_set_new(root, "ids", jids);
    json_object_set_new(root, "pieces", pieces);
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!s) {
        cli_error("tokenize", "out of memory writing JSON");
        return 1;
    }
    printf("%s\n", s);
    free(s);
    return 0;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *file = NULL;
    bool no_bos = false, special = false, json = false;
    const cli_opt opts[] = {
        {"model", 'm', CLI_STR, &model, 0, 0, "GGUF", "model or vocabulary file (required)"},
        {"file", 'f', CLI_STR, &file, 0, 0, "FILE", "read the text from FILE ('-' = stdin) instead of TEXT"},
        {"no-bos", 0, CLI_FLAG, &no_bos, 0, 0, NULL, "do not add BOS (added when the model asks for it)"},
        {"special", 0, CLI_FLAG, &special, 0, 0, NULL, "turn control-token texts such as <s> into their ids"},
        {"json", 0, CLI_FLAG, &json, 0, 0, NULL, "print {\"ids\":[...],\"pieces\":[...]}"},
        {0},
    };
    const char *pos[1];
    int npos, rc = cli_parse("tokenize", "-m MODEL [--no-bos] [--special] [--json] (TEXT | -f FILE)", opts, argc,
                             argv, pos, 1, &npos);
    if (rc == CLI_HELP) return 0;
    if (rc != CLI_OK) return 2;
    if (!model) { cli_error("tokenize", "missing -m MODEL (see --help)"); return 2; }
    if ((npos == 1) == (file != NULL)) { cli_error("tokenize", "give exactly one of TEXT or -f FILE"); return 2; }
    uint64_t len = 0;
    char *text = NULL;
    if (file) {
        errno = 0;
        text = cli_read_file(file, &len);
        if (!text) {
            cli_error("tokenize", "cannot read %s: %s", strcmp(file, "-") ? file : "stdin",
                      errno ? strerror(errno) : "read error");
            return 1;
        }
    }
    pl_vocab *v = load_vocab("tokenize", model);
    if (!v) { free(text); return 1; }
    const char *src = text ? text : pos[0];
    int32_t *ids = NULL;
    size_t n = 0;
    rc = pl_tokenize(v, src, text ? (size_t)len : strlen(src), !no_bos && pl_vocab_add_bos(v), special, &ids, &n);
    if (rc) {
        cli_error("tokenize", "%s", pl_last_error());
        rc = 1;
    } else if (json) {
        rc = print_json(v, ids, n);
    } else {
        for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
    }
    pl_free(ids);
    pl_vocab_free(v);
    free(text);
    return rc;
}

/* Appends the ids in s ("12", "1 2", "1,2", "[1,2]") to *ids; 2 with a
 * message on anything else. */
static int parse_ids(const char *s, int32_t **ids, size_t *n, size_t *cap)
{
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '[' || *p == ']') p++;
        if (!*p) return 0;
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || (*end && !strchr(" ,\t\n\r[]", *end))) {
            int k = 0;
            while (p[k] && !strchr(" ,\t\n\r[]", p[k]) && k < 40) k++;
            cli_error("detokenize", "bad token id '%.*s'", k, p);
            return 2;
        }
        if (*n == *cap) {
            *cap = *cap ? *cap * 2 : 64;
            int32_t *nv = realloc(*ids, *cap * sizeof *nv);
            if (!nv) { cli_error("detokenize", "out of memory"); return 1; }
            *ids = nv;
        }
        (*ids)[(*n)++] = x < INT32_MIN ? INT32_MIN : x > INT32_MAX ? INT32_MAX : (int32_t)x;
        p = end;
    }
}

static int collect_ids(int npos, const char **pos, int32_t **ids, size_t *n)
{
    size_t cap = 0;
    for (int i = 0; i < npos; i++) {
        int rc;
        if (strcmp(pos[i], "-") == 0) {
            uint64_t len;
            char *s = cli_read_file("-", &len);
            if (!s) { cli_error("detokenize", "cannot read stdin"); return 1; }
            rc = parse_ids(s, ids, n, &cap);
            free(s);
        } else {
            rc = parse_ids(pos[i], ids, n, &cap);
        }
        if (rc) return rc;
    }
    return 0;
}

int cmd_detokenize(int argc, char **argv)
{
    const char *model = NULL;
    const cli_opt opts[] = {
        {"model", 'm', CLI_STR, &model, 0, 0, "GGUF", "model or vocabulary file (required)"},
        {0},
    };
    const char **pos = calloc((size_t)argc + 1, sizeof *pos);
    if (!pos) return 1;
    int npos, rc = cli_parse("detokenize", "-m MODEL IDS... | -", opts, argc, argv, pos, argc, &npos);
    if (rc != CLI_OK || !model || npos == 0) {
        if (rc == CLI_OK) cli_error("detokenize", model ? "give token ids (or - to read them from stdin)"
                                                        : "missing -m MODEL (see --help)");
        free(pos);
        return rc == CLI_HELP ? 0 : 2;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    rc = collect_ids(npos, pos, &ids, &n);
    free(pos);
    pl_vocab *v = rc ? NULL : load_vocab("detokenize", model);
    if (!rc && !v) rc = 1;
    for (size_t i = 0; !rc && i < n; i++) {
        if (ids[i] >= 0 && ids[i] < pl_vocab_size(v)) continue;
        cli_error("detokenize", "token id %d is outside the vocabulary of %d tokens", ids[i], pl_vocab_size(v));
        rc = 2;
    }
    char *text = NULL;
    size_t len = 0;
    if (!rc && pl_detokenize(v, ids, n, &text, &len) != 0) {
        cli_error("detokenize", "%s", pl_last_error());
        rc = 1;
    }
    if (!rc) {
        fwrite(text, 1, len, stdout);
        printf("\n");
    }
    pl_free(text);
    free(ids);
    pl_vocab_free(v);
    return rc;
}
