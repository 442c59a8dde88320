/* jinja.h - a Jinja interpreter for chat templates.
 *
 * Renders the subset of Jinja that models' chat templates use, the way
 * transformers' apply_chat_template does: jinja2's immutable sandbox with
 * trim_blocks and lstrip_blocks, the loopcontrols extension (break,
 * continue), raise_exception, strftime_now, and a tojson that keeps
 * non-ASCII text and key order. The context is a JSON object whose members
 * become the template's variables (messages, tools, add_generation_prompt,
 * bos_token, ...).
 *
 * Every render runs under limits (below) so that a hostile template fails
 * with a clear error instead of hanging or exhausting memory.
 */
#ifndef PL_TEMPLATE_JINJA_H
#define PL_TEMPLATE_JINJA_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t max_memory;  /* bytes the render may allocate (tokens, tree, values, output) */
    size_t max_output;  /* bytes of rendered text */
    uint64_t max_steps; /* evaluation steps (expressions, statements, loop turns) */
    int max_depth;      /* nesting of the template's syntax and of macro calls */
} jinja_limits;

/* The limits a server uses: 64 MiB, 8 MiB of text, 20M steps, depth 100. */
jinja_limits jinja_limits_default(void);

/* Renders tpl (n bytes) with the JSON object context_json (a jansson json_t*,
 * or NULL for no variables). *out is malloc'd, NUL-terminated. On failure
 * returns a negative PL_E* code and the error text (err_msg) names the
 * template line; a template's raise_exception(msg) fails with PL_EINVAL and
 * the text "template raised: msg". */
int jinja_render(const char *tpl, size_t n, const void *context_json, const jinja_limits *lim, char **out);

#endif
