/* cmd_template.c - `pagellm template`: render a Jinja chat template from the
 * command line, as the server renders chat requests.
 *
 *   pagellm template -t FILE [-c CONTEXT.json | -c -]
 *     renders FILE with the variables of the JSON object CONTEXT as given
 *   pagellm template -m MODEL [-t FILE] -c CONTEXT.json
 *     the model's own template (or FILE), with CONTEXT's messages, tools
 *     and add_generation_prompt, and bos_token/eos_token from the model
 * Prints the rendered text exactly (no newline added).
 * Exit codes: 0 ok; 1 the template fails (its message, e.g. what a
 * raise_exception said) or a file cannot be read; 2 usage errors.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "pagellm.h"

static int render_with_model(const char *model_path, const char *tpl, const char *ctx_text, char **out)
{
    pl_model *m = NULL;
    if (pl_model_load(&m, model_path) != 0) return -1;
    json_error_t je;
    json_t *ctx = json_loads(ctx_text ? ctx_text : "{}", 0, &je);
    int rc = -1;
    if (!ctx || !json_is_object(ctx)) {
        fprintf(stderr, "pagellm template: the context must be a JSON object (%s)\n", ctx ? "not an object" : je.text);
        json_decref(ctx);
        pl_model_free(m);
        return -2;
    }
    json_t *msgs = json_object_get(ctx, "messages"), *tools = json_object_get(ctx, "tools");
    bool add_gen = json_is_true(json_object_get(ctx, "add_generation_prompt"));
    char *mt = json_dumps(msgs ? msgs : json_array(), JSON_ENCODE_ANY);
    char *tt = tools ? json_dumps(tools, JSON_ENCODE_ANY) : NULL;
    json_object_del(ctx, "messages");
    json_object_del(ctx, "tools");
    json_object_del(ctx, "add_generation_prompt");
    char *et = json_dumps(ctx, 0);
    if (mt && et) rc = pl_chat_apply(m, tpl, mt, tt, add_gen, et, out);
    free(mt);
    free(tt);
    free(et);
    json_decref(ctx);
    pl_model_free(m);
    return rc;
}

int cmd_template(int argc, char **argv)
{
    const char *tpl_path = NULL, *ctx_path = NULL, *model_path = NULL;
    cli_opt opts[] = {
        {"template", 't', CLI_STR, &tpl_path, 0, 0, "FILE", "Jinja template file"},
        {"context", 'c', CLI_STR, &ctx_path, 0, 0, "FILE", "JSON object of variables (- = stdin)"},
        {"model", 'm', CLI_STR, &model_path, 0, 0, "GGUF", "use the model's chat template and bos/eos tokens"},
        {0},
    };
    int npos = 0;
    int r = cli_parse("template", "(-t FILE | -m MODEL) [-c CONTEXT.json]", opts, argc, argv, NULL,
                      0, &npos);
    if (r == CLI_HELP) return 0;
    if (r) return 2;
    if (!tpl_path && !model_path) {
        cli_error("template", "-t FILE or -m MODEL is required");
        return 2;
    }
    uint64_t n = 0;
    char *tpl = NULL, *ctx = NULL, *out = NULL;
    if (tpl_path && !(tpl = cli_read_file(tpl_path, &n))) {
        cli_error("template", "cannot read %s", tpl_path);
        return 1;
    }
    uint64_t cn = 0;
    if (ctx_path && !(ctx = cli_read_file(ctx_path, &cn))) {
        cli_error("template", "cannot read %s", ctx_path);
        free(tpl);
        return 1;
    }
    int rc = model_path ? render_with_model(model_path, tpl, ctx, &out) : pl_template_render(tpl, n, ctx, &out);
    free(tpl);
    free(ctx);
    if (rc == -2) return 2;
    if (rc) {
        cli_error("template", "%s", pl_last_error());
        return 1;
    }
    fwrite(out, 1, strlen(out), stdout);
    free(out);
    return 0;
}
