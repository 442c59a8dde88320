/* cmd_synth.c - `pagellm synth`: write a synthetic llama GGUF. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "commands.h"
#include "pagellm.h"

int cmd_synth(int argc, char **argv)
{
    const char *shape = "tiny", *out = NULL, *vocab = NULL, *type = "f32", *arch = NULL;
    uint64_t seed = 1;
    int swa = 0, split = 0, rope_orig = 0;
    const char *rope_scaling = NULL;
    double rope_factor = 0;
    bool list = false, legacy_kv_b = false;
    const cli_opt opts[] = {
        {"shape", 's', CLI_STR, &shape, 0, 0, "NAME", "tiny | tiny256 | 110m | tinyllama-1.1b | llama3.2-1b | qwen3moe-3b (default tiny)"},
        {"seed", 0, CLI_U64, &seed, 0, 0, "N", "random seed (default 1)"},
        {"vocab", 0, CLI_STR, &vocab, 0, 0, "GGUF", "take the tokenizer from this GGUF (default: built-in byte-level BPE)"},
        {"type", 't', CLI_STR, &type, 0, 0, "TYPE", "weight type: f32 (default), f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs, tq1_0, tq2_0, iq3_s, iq3_xxs, iq2_s, iq2_xs, iq2_xxs, iq1_s, iq1_m"},
        {"output", 'o', CLI_STR, &out, 0, 0, "PATH", "output GGUF file (required)"},
        {"arch", 0, CLI_STR, &arch, 0, 0, "A", "llama (default; qwen3moe for the qwen3moe-3b shape), qwen2 (q/k/v biases), qwen3 (q/k norms), gemma, gemma2, gemma3, phi3, mixtral, qwen2moe, qwen3moe (experts), deepseek2 (latent attention; shapes tiny, tiny-v2, mla-bench, deepseek2-lite)"},
        {"sliding-window", 0, CLI_INT, &swa, 1, 1 << 20, "W", "write <arch>.attention.sliding_window = W (Mistral's key; default: none)"},
        {"split", 0, CLI_INT, &split, 1, 99999, "N", "write N shards OUT-00001-of-0000N.gguf ... (llama.cpp's split files)"},
        {"rope-scaling", 0, CLI_STR, &rope_scaling, 0, 0, "TYPE", "write RoPE scaling: linear | yarn (type and factor), longrope (phi3: factor tensors)"},
        {"rope-factor", 0, CLI_FLOAT, &rope_factor, 1, 1024, "F", "the linear/yarn factor (default 4)"},
        {"rope-orig-ctx", 0, CLI_INT, &rope_orig, 1, 1 << 24, "N", "rope.scaling.original_context_length (default: context / 4)"},
        {"legacy-kv-b", 0, CLI_FLAG, &legacy_kv_b, 0, 0, NULL, "deepseek2: write the legacy unsplit attn_kv_b (older converters' files) instead of attn_k_b + attn_v_b"},
        {"list", 0, CLI_FLAG, &list, 0, 0, NULL, "list the shapes and exit"},
        {0},
    };
    const char *pos[1];
    int npos, rc = cli_parse("synth", "--shape NAME -o OUT.gguf [--seed N] [--vocab GGUF] [--type T]",
                             opts, argc, argv, pos, 0, &npos);
    if (rc == CLI_HELP) return 0;
    if (rc != CLI_OK) return 2;
    if (list) {
        for (const char *const *s = pl_synth_shapes(); *s; s++) printf("%s\n", *s);
        return 0;
    }
    int known = 0;
    for (const char *const *s = pl_synth_shapes(); *s; s++) known |= strcmp(*s, shape) == 0;
    if (!known) { cli_error("synth", "unknown --shape '%s' (see --list)", shape); return 2; }
    if (!out) { cli_error("synth", "missing -o OUT.gguf"); return 2; }
    static const char *const types[] = {"f32",  "f16",  "bf16", "q8_0",   "q4_0",   "q4_1",  "q5_0",  "q5_1",  "q2_K",
                                        "q3_K", "q4_K", "q5_K", "q6_K", "iq4_nl", "iq4_xs", "tq1_0", "tq2_0", "iq3_s",
                                        "iq3_xxs", "iq2_s", "iq2_xs", "iq2_xxs", "iq1_s", "iq1_m", NULL};
    int type_ok = 0;
    for (int i = 0; types[i]; i++) type_ok |= strcasecmp(types[i], type) == 0;
    if (!type_ok) { cli_error("synth", "bad value '%s' for --type (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs, tq1_0, tq2_0, iq3_s, iq3_xxs, iq2_s, iq2_xs, iq2_xxs, iq1_s, iq1_m)", type); return 2; }
    static const char *const archs[] = {"llama", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3",
                                        "mixtral", "qwen2moe", "qwen3moe", "deepseek2"};
    bool arch_ok = false;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) arch_ok |= !arch || strcmp(arch, archs[i]) == 0;
    if (!arch_ok) {
        cli_error("synth", "bad value '%s' for --arch (llama, qwen2, qwen3, gemma, gemma2, gemma3, phi3, mixtral, qwen2moe, qwen3moe, deepseek2)", arch);
        return 2;
    }
    if (rope_scaling && strcmp(rope_scaling, "linear") && strcmp(rope_scaling, "yarn") && strcmp(rope_scaling, "longrope")) {
        cli_error("synth", "bad value '%s' for --rope-scaling (linear, yarn, longrope)", rope_scaling);
        return 2;
    }
    if (legacy_kv_b && (!arch || strcmp(arch, "deepseek2"))) {
        cli_error("synth", "--legacy-kv-b is for --arch deepseek2");
        return 2;
    }
    pl_synth_params p = {shape, seed, vocab, type, out, arch, (uint32_t)swa, rope_scaling, (float)rope_factor,
                         (uint32_t)rope_orig, legacy_kv_b};
    if (pl_synth_split(&p, split > 1 ? (uint32_t)split : 1) != 0) {
        cli_error("synth", "%s", pl_last_error());
        return 1;
    }
    return 0;
}
