/* bench_grammar_mask.c - the cost of a grammar's token mask per sampled
 * token, at a large vocabulary, against a decode step.
 *
 *   bench_grammar_mask VOCAB N_VOCAB [MODEL [STEPS]]
 *
 * VOCAB is a GGUF with a tokenizer (e.g. ggml-vocab-gpt-2.gguf). Its
 * tokens' output bytes are extended to N_VOCAB tokens (e.g. 128000) by
 * joining pairs of existing tokens, deterministically - the way BPE
 * vocabularies grow - so the trie has the size and shape of a 128k
 * vocabulary. The workload: a JSON schema's grammar and a document valid
 * under it, tokenized with VOCAB; for every token of the document the
 * mask of the current state is computed cold (no cache: the worst case)
 * and as the engine runs it (per-request cache), then the state advances.
 *
 * Prints the trie's size, the cold mask's median / p90 / max and the
 * engine-path mean in microseconds per token, and, with MODEL, the median
 * of STEPS (default 8) single-token decode steps of that model and the
 * mask / step ratios (the target: under 10% at 128k tokens against a
 * 1B-shape model, e.g. `pagellm synth --shape llama3.2-1b --type q4_0`).
 * White-box (src/grammar), like the tests; one thread.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "micro.h"
#include "pagellm.h"
#include "tokenizer/tokenizer.h"

static const char *PROG = "bench_grammar_mask";
static const char *USAGE = "VOCAB N_VOCAB [MODEL [STEPS]]";

static const char *SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},\"name\":{\"type\":\"string\"},"
    "\"email\":{\"type\":\"string\",\"pattern\":\"^[a-z.]+@[a-z]+\\\\.[a-z]{2,3}$\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":8},"
    "\"score\":{\"type\":\"number\"},\"active\":{\"type\":\"boolean\"},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},\"city\":{\"type\":\"string\"},"
    "\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},\"required\":[\"city\"]}},"
    "\"required\":[\"id\",\"name\",\"active\"],\"additionalProperties\":false}";

static const char *DOC =
    "{\"id\": 4211, \"name\": \"Ada Lovelace, first programmer of the Analytical Engine\", "
    "\"email\": \"ada.lovelace@example.org\", \"tags\": [\"math\", \"poetry\", \"engines\", \"notes on Menabrea\"], "
    "\"score\": 97.25, \"active\": true, \"address\": {\"street\": \"12 St James's Square\", \"city\": \"London\", "
    "\"zip\": \"10001\"}}";

typedef struct {
    char **bytes;
    size_t *lens;
    bool *eog;
    int32_t n;
} vocab_bytes;

/* The vocabulary's output bytes, extended to n tokens by joining pairs. */
static int extend_vocab(const pl_vocab *v, int32_t n, vocab_bytes *out)
{
    const int32_t nv = pl_vocab_size(v);
    if (n < nv) n = nv;
    out->bytes = calloc((size_t)n, sizeof *out->bytes);
    out->lens = calloc((size_t)n, sizeof *out->lens);
    out->eog = calloc((size_t)n, sizeof *out->eog);
    if (!out->bytes || !out->lens || !out->eog) return -1;
    int32_t k = 0;
    for (; k < nv; k++) {
        size_t l;
        const char *p = tok_vocab_output_bytes(v, k, &l);
        out->bytes[k] = malloc(l + 1);
        if (!out->bytes[k]) return -1;
        memcpy(out->bytes[k], p, l);
        out->lens[k] = l;
        out->eog[k] = pl_vocab_is_eog(v, k);
    }
    uint64_t s = 0x243F6A8885A308D3ull;
    while (k < n) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        int32_t a = (int32_t)(s % (uint64_t)nv), b = (int32_t)((s >> 32) % (uint64_t)nv);
        size_t la = out->lens[a], lb = out->lens[b];
        if (!la || !lb || la + lb > 24) continue;
        out->bytes[k] = malloc(la + lb + 1);
        if (!out->bytes[k]) return -1;
        memcpy(out->bytes[k], out->bytes[a], la);
        memcpy(out->bytes[k] + la, out->bytes[b], lb);
        out->lens[k] = la + lb;
        k++;
    }
    out->n = n;
    return 0;
}

static double decode_step_ms(const char *path, int steps)
{
    pl_model *m = NULL;
    pl_ctx *c = NULL;
    int32_t seq;
    if (pl_model_load(&m, path)) { fprintf(stderr, "%s: MODEL: %s\n", PROG, pl_last_error()); return -1; }
    pl_ctx_params cp;
    pl_ctx_params_default(&cp);
    cp.n_ctx = 256;
    cp.n_threads = 1;
    double *t = calloc((size_t)steps, sizeof *t), med = -1;
    float *logits = malloc(pl_model_n_vocab(m) * sizeof *logits);
    if (t && logits && !pl_ctx_new(&c, m, &cp) && !pl_seq_new(c, &seq)) {
        int32_t tok = 1;
        pl_seq_append(c, seq, &tok, 1, logits); /* warm-up */
        for (int i = 0; i < steps; i++) {
            double t0 = micro_cpu_s();
            if (pl_seq_append(c, seq, &tok, 1, logits)) break;
            t[i] = (micro_cpu_s() - t0) * 1e3;
        }
        micro_doubles_sort(t, steps);
        med = t[steps / 2];
    } else fprintf(stderr, "%s: MODEL: %s\n", PROG, pl_last_error());
    free(t);
    free(logits);
    pl_ctx_free(c);
    pl_model_free(m);
    return med;
}

int main(int argc, char **argv)
{
    static const char *const names[] = {"VOCAB", "N_VOCAB", "MODEL", "STEPS"};
    int a = micro_args_count(PROG, USAGE, argc, argv, names, 2, 4);
    if (a) return a > 0 ? 0 : 2;
    int n_vocab, steps = 8;
    if (micro_arg_int(PROG, "N_VOCAB", argv[2], 1, 1 << 20, &n_vocab)) return 2;
    if (argc > 4 && micro_arg_int(PROG, "STEPS", argv[4], 1, 1000, &steps)) return 2;
    pl_vocab *v = NULL;
    if (pl_vocab_load(&v, argv[1])) { fprintf(stderr, "%s: VOCAB: %s\n", PROG, pl_last_error()); return 2; }
    vocab_bytes vb = {0};
    gm_trie *trie = NULL;
    char *gbnf = NULL;
    gm_grammar *g = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (extend_vocab(v, n_vocab, &vb) || gm_trie_new(&trie, (const char *const *)vb.bytes, vb.lens, vb.eog, vb.n) ||
        gm_schema_to_gbnf(SCHEMA, strlen(SCHEMA), "root", &gbnf) || gm_parse(&g, gbnf, strlen(gbnf), "root") ||
        pl_tokenize(v, DOC, strlen(DOC), false, false, &ids, &n_ids)) {
        fprintf(stderr, "%s: setup: %s\n", PROG, pl_last_error());
        return 1;
    }
    gm_work *w = gm_work_new();
    gm_mask_cache *cache = gm_mask_cache_new();
    uint64_t *bits = malloc(((size_t)vb.n + 63) / 64 * sizeof *bits);
    double *cold = calloc(n_ids, sizeof *cold), warm = 0;
    gm_state s, s2;
    if (!w || !cache || !bits || !cold || gm_state_init(&s, g, w) || gm_state_copy(&s2, &s)) return 1;
    size_t allowed_sum = 0;
    for (size_t i = 0; i < n_ids; i++) {
        int32_t na;
        double t0 = micro_cpu_s();
        if (gm_mask(g, trie, &s, w, NULL, bits, &na)) { fprintf(stderr, "%s: mask: %s\n", PROG, pl_last_error()); return 1; }
        cold[i] = (micro_cpu_s() - t0) * 1e6;
        allowed_sum += (size_t)na;
        if (!((bits[ids[i] >> 6] >> (ids[i] & 63)) & 1)) {
            fprintf(stderr, "%s: token %zu (%d) of the document is masked out\n", PROG, i, ids[i]);
            return 1;
        }
        t0 = micro_cpu_s();
        gm_mask(g, trie, &s2, w, cache, bits, &na);
        warm += (micro_cpu_s() - t0) * 1e6;
        if (gm_state_advance(&s, g, w, vb.bytes[ids[i]], vb.lens[ids[i]]) != 1 ||
            gm_state_advance(&s2, g, w, vb.bytes[ids[i]], vb.lens[ids[i]]) != 1) {
            fprintf(stderr, "%s: the document does not match its grammar at token %zu\n", PROG, i);
            return 1;
        }
    }
    if (!gm_state_accepting(&s)) { fprintf(stderr, "%s: the document is incomplete\n", PROG); return 1; }
    double sum = 0;
    for (size_t i = 0; i < n_ids; i++) sum += cold[i];
    micro_doubles_sort(cold, (int)n_ids);
    const double med = cold[n_ids / 2], p90 = cold[n_ids * 9 / 10], mx = cold[n_ids - 1];
    printf("grammar mask: %d tokens, %zu document tokens, %.0f allowed on average\n", vb.n, n_ids,
           (double)allowed_sum / (double)n_ids);
    printf("  cold (no cache): median %.1f us, p90 %.1f us, max %.1f us, mean %.1f us per token\n", med, p90, mx,
           sum / (double)n_ids);
    printf("  engine path (cache): mean %.1f us per token\n", warm / (double)n_ids);
    if (argc > 3) {
        double step = decode_step_ms(argv[3], steps);
        if (step < 0) return 1;
        printf("  decode step of %s: median %.2f ms (1 thread); mask / step: cold mean %.1f%%, cold p90 %.1f%%, "
               "engine path %.1f%%\n", argv[3], step, sum / (double)n_ids / 10 / step, p90 / 10 / step,
               warm / (double)n_ids / 10 / step);
    }
    gm_state_free(&s);
    gm_state_free(&s2);
    free(cold);
    free(bits);
    free(ids);
    gm_mask_cache_free(cache);
    gm_work_free(w);
    gm_grammar_free(g);
    free(gbnf);
    gm_trie_free(trie);
    for (int32_t i = 0; i < vb.n; i++) free(vb.bytes[i]);
    free(vb.bytes);
    free(vb.lens);
    free(vb.eog);
    pl_vocab_free(v);
    return 0;
}
