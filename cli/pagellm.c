/* pagellm.c - the `pagellm` binary: dispatches to a subcommand. */
#include "commands.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} command;

static const command commands[] = {
    {"run", cmd_run, "generate text from a prompt"},
    {"chat", cmd_chat, "interactive multi-turn chat that keeps its KV cache between turns"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server: completions, chat, SSE streaming, /metrics"},
    {"bench", cmd_bench, "benchmarks: gen, cache, kv-memory (paged vs static), prefix (TTFT), serve (vs llama.cpp)"},
    {"perplexity", cmd_perplexity, "perplexity of a text in chunks (llama-perplexity's rule); KL divergence between runs"},
    {"inspect", cmd_inspect, "describe a GGUF model and its KV memory per token"},
    {"kvcalc", cmd_kvcalc, "KV cache memory from bare dimensions"},
    {"synth", cmd_synth, "write a synthetic llama GGUF of a named shape"},
    {"quantize", cmd_quantize, "re-encode a GGUF's weights (f16, bf16, q8_0, q4_0, q4_k_m)"},
    {"tokenize", cmd_tokenize, "text to token ids with a model's tokenizer"},
    {"detokenize", cmd_detokenize, "token ids to text"},
    {"template", cmd_template, "render a Jinja chat template (a file's or a model's) with JSON variables"},
    {NULL, NULL, NULL},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: pagellm COMMAND [options]   (pagellm COMMAND --help)\n\ncommands:\n");
    for (const command *c = commands; c->name; c++) fprintf(out, "  %-12s %s\n", c->name, c->summary);
}

int main(int argc, char **argv)
{
    if (argc < 2) { usage(stderr); return 2; }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (const command *c = commands; c->name; c++)
        if (strcmp(argv[1], c->name) == 0) return c->fn(argc - 1, argv + 1);
    fprintf(stderr, "pagellm: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
