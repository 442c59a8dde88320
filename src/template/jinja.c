/* jinja.c - one render: lex, parse and evaluate a template inside an arena,
 * turning every failure (a syntax error, a runtime error, raise_exception,
 * a limit) into an error status with its text. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "template/jinja_impl.h"

jinja_limits jinja_limits_default(void)
{
    jinja_limits l = {.max_memory = 64u << 20, .max_output = 8u << 20, .max_steps = 20000000, .max_depth = 100};
    return l;
}

static void arena_free(jctx *c)
{
    for (jarena_chunk *k = c->chunks, *n; k; k = n) {
        n = k->next;
        free(k);
    }
    c->chunks = NULL;
}

int jinja_render(const char *tpl, size_t n, const void *context_json, const jinja_limits *lim, char **out)
{
    jctx *c = calloc(1, sizeof *c);
    if (!c) return err_set(PL_ENOMEM, "template: out of memory");
    c->lim = lim ? *lim : jinja_limits_default();
    if (setjmp(c->fail)) {
        int code = c->err_code ? c->err_code : PL_EINVAL;
        err_set(code, "%s", c->err);
        arena_free(c);
        free(c);
        return code;
    }
    jtok *toks;
    size_t ntok;
    jlex(c, tpl, n, &toks, &ntok);
    c->toks = toks;
    c->ntok = ntok;
    jnode *root = jparse(c);
    c->depth = 0;
    jframe *g = jframe_new(c, NULL);
    jglobals_install(c, g);
    const json_t *ctx = context_json;
    if (ctx && !json_is_object(ctx)) jfail(c, 0, "the context must be a JSON object");
    if (ctx) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)ctx, k, v) jframe_set(c, g, jarena_strdup(c, k, strlen(k)), jv_from_json(c, v, 0));
    }
    c->globals = g;
    jframe *top = jframe_new(c, g);
    jbuf o = {0};
    jbuf_add(c, &o, "", 0);
    c->out = &o;
    jeval_body(c, root, top);
    char *s = malloc(o.n + 1);
    if (!s) jfail(c, 0, "out of memory");
    memcpy(s, o.s, o.n + 1);
    arena_free(c);
    free(c);
    *out = s;
    return 0;
}
