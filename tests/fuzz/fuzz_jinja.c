/* fuzz_jinja.c - libFuzzer target for the Jinja interpreter: any bytes as a
 * template, rendered with a conversation holding tools, tool calls and
 * non-ASCII text, under small limits.
 *
 * Properties (a broken one aborts, which libFuzzer reports as a crash):
 *   - a render ends: it succeeds, or fails with an error text that names
 *     the problem (never an empty message);
 *   - the output never exceeds max_output;
 *   - no crash, no leak, no hang: deep nesting, recursive macros, huge
 *     loops and huge strings end at a limit (-timeout and -malloc_limit_mb
 *     in run.sh catch a limit that does not hold).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "template/jinja.h"

static json_t *ctx;

static const char *const CONTEXT =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    "{\"role\": \"user\", \"content\": \"Weather in \\u6771\\u4eac? \\ud83e\\udd99\"},"
    "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\","
    "\"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\", \"n\": 1.5}}}]},"
    "{\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"rain\"}],"
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\":"
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}],"
    "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ctx) {
        ctx = json_loads(CONTEXT, 0, NULL);
        if (!ctx) abort();
    }
    jinja_limits lim = {.max_memory = 8u << 20, .max_output = 256u << 10, .max_steps = 200000, .max_depth = 64};
    char *out = NULL;
    int rc = jinja_render((const char *)data, size, ctx, &lim, &out);
    if (rc == 0) {
        if (!out || strlen(out) > lim.max_output) abort();
        free(out);
    } else if (!err_msg()[0]) {
        fprintf(stderr, "fuzz_jinja: a failed render without an error text\n");
        abort();
    }
    return 0;
}
