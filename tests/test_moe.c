/* test_moe.c - mixture-of-experts layers: the router against a plain
 * reference (softmax, top-k with ties, renormalisation), bad metadata and
 * tensors refused naming the key or tensor, and the grouped pass giving a
 * sequence the same logits alone as in a batch of several sequences.
 * Agreement with llama.cpp is tests/cli/test_moe.sh's. */
#include "test.h"

#include <stdint.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "model/moe.h"
#include "pagellm.h"
#include "rng.h"

#define BROKEN_GGUF_OUT "/tmp/pagellm-test-moe-broken.gguf"
#include "broken_gguf.h"

/* ------------------------------------------------------------ router */

/* The reference: softmax in double, then the experts sorted by
 * (probability descending, index ascending), the first k taken. */
static const double *g_ref_p;
static int by_prob_then_index(const void *a, const void *b)
{
    const int x = *(const int *)a, y = *(const int *)b;
    if (g_ref_p[x] != g_ref_p[y]) return g_ref_p[x] > g_ref_p[y] ? -1 : 1;
    return x - y;
}

static void ref_route(const float *logits, int n, int k, bool norm, double *p, int *sel, double *w)
{
    double mx = logits[0], sum = 0;
    for (int e = 1; e < n; e++) mx = logits[e] > mx ? logits[e] : mx;
    for (int e = 0; e < n; e++) sum += p[e] = exp((double)logits[e] - mx);
    for (int e = 0; e < n; e++) p[e] /= sum;
    int idx[MOE_EXPERTS_MAX];
    for (int e = 0; e < n; e++) idx[e] = e;
    g_ref_p = p;
    qsort(idx, (size_t)n, sizeof idx[0], by_prob_then_index);
    double s = 0;
    for (int j = 0; j < k; j++) s += p[sel[j] = idx[j]];
    for (int j = 0; j < k; j++) w[j] = norm ? p[sel[j]] / s : p[sel[j]];
}

TEST(route_matches_a_plain_reference)
{
    static const int shapes[][2] = {{8, 2}, {8, 4}, {60, 4}, {64, 8}, {128, 8}, {5, 5}, {3, 1}};
    rng_seed(42);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int n = shapes[s][0], k = shapes[s][1];
        for (int trial = 0; trial < 50; trial++) {
            for (int norm = 0; norm < 2; norm++) {
                float logits[MOE_EXPERTS_MAX], probs[MOE_EXPERTS_MAX], w[64];
                double rp[MOE_EXPERTS_MAX], rw[64];
                int32_t sel[64];
                int rsel[64];
                for (int e = 0; e < n; e++) logits[e] = probs[e] = 2.0f * rng_sym();
                moe_route(probs, n, k, norm, sel, w);
                ref_route(logits, n, k, norm, rp, rsel, rw);
                for (int e = 0; e < n; e++) CHECK_NEAR(probs[e], rp[e], 1e-6);
                for (int j = 0; j < k; j++) {
                    CHECK_MSG(sel[j] == rsel[j], "E %d k %d trial %d rank %d: expert %d, reference %d", n, k, trial, j,
                              sel[j], rsel[j]);
                    CHECK_NEAR(w[j], rw[j], 1e-6);
                }
                if (norm) {
                    double sum = 0;
                    for (int j = 0; j < k; j++) sum += w[j];
                    CHECK_NEAR(sum, 1.0, 1e-6);
                } else {
                    for (int j = 0; j < k; j++) CHECK(w[j] == probs[sel[j]]); /* the probabilities themselves */
                }
            }
        }
    }
}

TEST(route_ties_go_to_the_lower_expert)
{
    float p[8];
    int32_t sel[8];
    float w[8];
    for (int e = 0; e < 8; e++) p[e] = 0.5f; /* all equal: the first k */
    moe_route(p, 8, 3, true, sel, w);
    CHECK(sel[0] == 0 && sel[1] == 1 && sel[2] == 2);
    for (int j = 0; j < 3; j++) CHECK_NEAR(w[j], 1.0 / 3, 1e-7);
    const float l[6] = {1, 3, 3, 2, 3, 0}; /* three tied leaders, in index order */
    memcpy(p, l, sizeof l);
    moe_route(p, 6, 2, false, sel, w);
    CHECK(sel[0] == 1 && sel[1] == 2);
    CHECK(w[0] == w[1]);
    memcpy(p, l, sizeof l);
    moe_route(p, 6, 4, false, sel, w);
    CHECK(sel[0] == 1 && sel[1] == 2 && sel[2] == 4 && sel[3] == 3);
    CHECK(w[3] < w[2]);
    /* k = 1 renormalised: the one weight is exactly 1 */
    memcpy(p, l, sizeof l);
    moe_route(p, 6, 1, true, sel, w);
    CHECK(sel[0] == 1 && w[0] == 1.0f);
}

/* ------------------------------------------------- files for the tests */

static int synth(const char *arch, const char *type, const char *path)
{
    pl_synth_params sp = {.shape = "tiny", .seed = 3, .type = type, .out_path = path, .arch = arch};
    return pl_synth(&sp);
}

TEST(bad_expert_metadata_is_refused_naming_the_key)
{
    const char *q3 = "/tmp/pagellm-test-moe-q3.gguf", *mx = "/tmp/pagellm-test-moe-mx.gguf";
    CHECK(synth("qwen3moe", "f32", q3) == 0);
    CHECK(synth("mixtral", "f32", mx) == 0);
    breakage b = {.drop_key = "qwen3moe.expert_count"};
    CHECK_REFUSED(q3, b, PL_ERR_FORMAT, "qwen3moe.expert_count", "missing");
    b = (breakage){.set_key = "qwen3moe.expert_count", .set_value = 0};
    CHECK_REFUSED(q3, b, PL_ERR_FORMAT, "qwen3moe.expert_count", "0");
    b = (breakage){.set_key = "qwen3moe.expert_count", .set_value = 4096};
    CHECK_REFUSED(q3, b, PL_ERR_FORMAT, "qwen3moe.expert_count", "4096");
    b = (breakage){.drop_key = "qwen3moe.expert_used_count"};
    CHECK_REFUSED(q3, b, PL_ERR_FORMAT, "qwen3moe.expert_used_count", "missing");
    /* top-k larger than the experts there are */
    b = (breakage){.set_key = "qwen3moe.expert_used_count", .set_value = 9};
    CHECK_REFUSED(q3, b, PL_ERR_FORMAT, "qwen3moe.expert_used_count", "9 experts per token");
    b = (breakage){.set_key = "qwen3moe.expert_used_count", .set_value = 0};
    CHECK_REFUSED(q3, b, PL_ERR_FORMAT, "qwen3moe.expert_used_count", "0 experts per token");
    b = (breakage){.set_key = "llama.expert_used_count", .set_value = 12};
    CHECK_REFUSED(mx, b, PL_ERR_FORMAT, "llama.expert_used_count", "expert_count (8)");
    /* mixtral without expert_count is a dense llama: its dense FFN is missing */
    b = (breakage){.drop_key = "llama.expert_count"};
    CHECK_REFUSED(mx, b, PL_ERR_FORMAT, "blk.0.ffn_gate.weight", "missing");
    unlink(q3);
    unlink(mx);
}

TEST(bad_expert_tensors_are_refused_naming_the_tensor)
{
    const char *q2 = "/tmp/pagellm-test-moe-q2.gguf";
    CHECK(synth("qwen2moe", "q8_0", q2) == 0);
    breakage b = {.reshape_tensor = "blk.1.ffn_up_exps.weight"};
    CHECK_REFUSED(q2, b, PL_ERR_FORMAT, "blk.1.ffn_up_exps.weight", "shape [128, 128, 7, 1], expected [128, 128, 8]");
    b = (breakage){.reshape_tensor = "blk.3.ffn_down_exps.weight"};
    CHECK_REFUSED(q2, b, PL_ERR_FORMAT, "blk.3.ffn_down_exps.weight", "expected [128, 128, 8]");
    b = (breakage){.drop_tensor = "blk.2.ffn_gate_inp.weight"};
    CHECK_REFUSED(q2, b, PL_ERR_FORMAT, "blk.2.ffn_gate_inp.weight", "missing");
    b = (breakage){.drop_tensor = "blk.0.ffn_gate_exps.weight"};
    CHECK_REFUSED(q2, b, PL_ERR_FORMAT, "blk.0.ffn_gate_exps.weight", "missing");
    b = (breakage){.drop_tensor = "blk.3.ffn_gate_inp_shexp.weight"};
    CHECK_REFUSED(q2, b, PL_ERR_FORMAT, "blk.3.ffn_gate_inp_shexp.weight", "missing");
    /* a shared expert of another width than expert_shared_feed_forward_length */
    b = (breakage){.set_key = "qwen2moe.expert_shared_feed_forward_length", .set_value = 192};
    CHECK_REFUSED(q2, b, PL_ERR_FORMAT, "blk.0.ffn_gate_shexp.weight", "expected [128, 192]");
    unlink(q2);
}

/* ------------------------------------------------------ batch vs alone */

#define N_SEQS 8
#define MAX_PROMPT 40

static void prompt_of(int i, int32_t *ids, int *n)
{
    rng_seed(1000 + (uint64_t)i);
    *n = 6 + 4 * i; /* 6..34 tokens */
    for (int j = 0; j < *n; j++) ids[j] = 3 + (int32_t)(rng_u32() % 500);
}

static pl_ctx *ctx_open(pl_model *m, uint32_t max_seqs, uint32_t max_batch)
{
    pl_ctx_params cp;
    pl_ctx_params_default(&cp);
    cp.n_ctx = 128;
    cp.max_seqs = max_seqs;
    cp.max_batch = max_batch;
    cp.n_threads = 2;
    pl_ctx *c = NULL;
    return pl_ctx_new(&c, m, &cp) == 0 ? c : NULL;
}

/* n sequences prefilled one by one, then one decode step of all n together:
 * each one's logits must be bit for bit those of the sequence decoding
 * alone. Experts then get rows of several sequences in one matmul. */
static int batch_equals_alone(const char *arch, const char *type, int n, char *why, size_t wn)
{
    char path[128];
    snprintf(path, sizeof path, "/tmp/pagellm-test-moe-%s-%s.gguf", arch, type);
    pl_model *m = NULL;
    pl_ctx *cb = NULL, *ca = NULL;
    float *lb = NULL, *la = NULL;
    int rc = synth(arch, type, path) || pl_model_load(&m, path);
    uint32_t nv = rc ? 0 : pl_model_n_vocab(m);
    if (!rc) {
        lb = malloc(sizeof(float) * nv * N_SEQS);
        la = malloc(sizeof(float) * nv);
        cb = ctx_open(m, (uint32_t)n, 512);
        ca = ctx_open(m, 1, 512);
        rc = !lb || !la || !cb || !ca;
    }
    int32_t seqs[N_SEQS], next[N_SEQS], ids[MAX_PROMPT];
    for (int i = 0; i < n && !rc; i++) {
        int np;
        prompt_of(i, ids, &np);
        next[i] = 7 + 31 * i;
        rc = pl_seq_new(cb, &seqs[i]) || pl_seq_append(cb, seqs[i], ids, (size_t)np, NULL);
    }
    if (!rc) rc = pl_seq_step(cb, seqs, next, (size_t)n, lb);
    if (rc) snprintf(why, wn, "%s %s: setup: %s", arch, type, pl_last_error());
    for (int i = 0; i < n && !rc; i++) {
        int np;
        int32_t s;
        prompt_of(i, ids, &np);
        rc = pl_seq_new(ca, &s) || pl_seq_append(ca, s, ids, (size_t)np, NULL) || pl_seq_append(ca, s, &next[i], 1, la);
        if (rc) {
            snprintf(why, wn, "%s %s: alone: %s", arch, type, pl_last_error());
            break;
        }
        pl_seq_free(ca, s);
        uint32_t diff = 0;
        float worst = 0;
        for (uint32_t v = 0; v < nv; v++) {
            const float d = fabsf(la[v] - lb[(size_t)i * nv + v]);
            diff += la[v] != lb[(size_t)i * nv + v];
            worst = d > worst ? d : worst;
        }
        if (diff) {
            snprintf(why, wn, "%s %s: sequence %d of %d: %u of %u logits differ (max %g)", arch, type, i, n, diff, nv,
                     (double)worst);
            rc = 1;
        }
    }
    pl_ctx_free(cb);
    pl_ctx_free(ca);
    pl_model_free(m);
    free(lb);
    free(la);
    unlink(path);
    return rc;
}

TEST(batched_decode_gives_each_sequence_its_logits_alone)
{
    char why[512] = "";
    /* q8_0 experts are packed: any number of rows per expert is the same
     * bits; f32 experts take the 4-row decode path up to 4 sequences */
    CHECK_MSG(batch_equals_alone("mixtral", "q8_0", 8, why, sizeof why) == 0, "%s", why);
    CHECK_MSG(batch_equals_alone("qwen2moe", "q8_0", 8, why, sizeof why) == 0, "%s", why);
    CHECK_MSG(batch_equals_alone("qwen3moe", "q8_0", 8, why, sizeof why) == 0, "%s", why);
    CHECK_MSG(batch_equals_alone("qwen3moe", "f32", 4, why, sizeof why) == 0, "%s", why);
    CHECK_MSG(batch_equals_alone("qwen2moe", "f32", 3, why, sizeof why) == 0, "%s", why);
}

/* A prompt in one chunk (experts get many rows each) and in chunks of 3
 * give the same last logits. */
TEST(prefill_chunking_does_not_change_the_logits)
{
    const char *path = "/tmp/pagellm-test-moe-chunks.gguf";
    CHECK(synth("qwen2moe", "q8_0", path) == 0);
    pl_model *m = NULL;
    CHECK(pl_model_load(&m, path) == 0);
    const uint32_t nv = pl_model_n_vocab(m);
    float *a = malloc(sizeof(float) * nv), *b = malloc(sizeof(float) * nv);
    pl_ctx *c1 = ctx_open(m, 1, 512), *c3 = ctx_open(m, 1, 3);
    int32_t ids[MAX_PROMPT], s1, s3;
    int np;
    prompt_of(7, ids, &np);
    const int ok = a && b && c1 && c3 && pl_seq_new(c1, &s1) == 0 && pl_seq_new(c3, &s3) == 0
                   && pl_seq_append(c1, s1, ids, (size_t)np, a) == 0 && pl_seq_append(c3, s3, ids, (size_t)np, b) == 0;
    const int same = ok && memcmp(a, b, sizeof(float) * nv) == 0;
    pl_ctx_free(c1);
    pl_ctx_free(c3);
    pl_model_free(m);
    free(a);
    free(b);
    unlink(path);
    CHECK_MSG(ok, "%s", pl_last_error());
    CHECK(same);
}

int main(void)
{
    RUN(route_matches_a_plain_reference);
    RUN(route_ties_go_to_the_lower_expert);
    RUN(bad_expert_metadata_is_refused_naming_the_key);
    RUN(bad_expert_tensors_are_refused_naming_the_tensor);
    RUN(batched_decode_gives_each_sequence_its_logits_alone);
    RUN(prefill_chunking_does_not_change_the_logits);
    return test_summary();
}
