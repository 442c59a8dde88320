/* test_deepseek2.c - deepseek2: bad metadata and tensors refused naming the
 * key or tensor; its routing (sigmoid, selection bias, groups, scale)
 * against a plain reference; the latent KV kind (geometry, rows, block
 * copies, dtypes refused); and a sequence getting the same logits alone,
 * in a batched decode step and with a chunked prefill. Agreement with
 * llama.cpp is tests/cli/test_deepseek2.sh's. */
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "base/err.h"
#include "gguf/gguf.h"
#include "kv/kv_codec.h"
#include "kv/kv_latent.h"
#include "kv/kv_pool.h"
#include "kv/prefix_cache.h"
#include "model/config.h"
#include "model/moe.h"
#include "model/synth_deepseek2.h"
#include "pagellm.h"
#include "rng.h"

#define BROKEN_GGUF_OUT "/tmp/pagellm-test-ds2-broken.gguf"
#include "broken_gguf.h"

/* ------------------------------------------------- files for the tests */

static int synth(const char *type, const char *path)
{
    pl_synth_params sp = {.shape = "tiny", .seed = 5, .type = type, .out_path = path, .arch = "deepseek2"};
    return pl_synth(&sp);
}

TEST(bad_metadata_is_refused_naming_the_key)
{
    const char *p = "/tmp/pagellm-test-ds2-keys.gguf";
    CHECK(synth("f32", p) == 0);
    breakage b = {.drop_key = "deepseek2.attention.kv_lora_rank"};
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "deepseek2.attention.kv_lora_rank", "missing");
    b = (breakage){.set_key = "deepseek2.attention.kv_lora_rank", .set_value = 0};
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "deepseek2.attention.kv_lora_rank", "0 out of range");
    b = (breakage){.drop_key = "deepseek2.attention.q_lora_rank"};
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "deepseek2.attention.q_lora_rank", "missing");
    b = (breakage){.drop_key = "deepseek2.attention.key_length_mla"};
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "deepseek2.attention.key_length_mla", "legacy");
    b = (breakage){.set_key = "deepseek2.attention.key_length_mla", .set_value = 32};
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "deepseek2.attention.key_length_mla", "rope.dimension_count");
    b = (breakage){.set_key = "deepseek2.attention.key_length", .set_value = 64};
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "deepseek2.attention.key_length", "kv_lora_rank + rope.dimension_count = 96");
    b = (breakage){.set_key = "deepseek2.attention.head_count_kv", .set_value = 2};
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "deepseek2.attention.head_count_kv", "expected 1");
    b = (breakage){.drop_key = "deepseek2.expert_count"};
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "deepseek2.expert_count", "missing");
    b = (breakage){.set_key = "deepseek2.expert_used_count", .set_value = 9};
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "deepseek2.expert_used_count", "9 out of range 1..8");
    b = (breakage){.drop_key = "deepseek2.expert_shared_count"};
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "deepseek2.expert_shared_count", "missing");
    b = (breakage){.drop_key = "deepseek2.expert_feed_forward_length"};
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "deepseek2.expert_feed_forward_length", "missing");
    b = (breakage){.set_key = "deepseek2.expert_gating_func", .set_value = 3};
    CHECK_REFUSED(p, b, PL_ERR_UNSUPPORTED, "deepseek2.expert_gating_func", "3 not supported");
    b = (breakage){.set_key = "deepseek2.expert_group_count", .set_value = 3};
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "deepseek2.expert_group_count", "does not divide");
    b = (breakage){.set_key = "deepseek2.expert_group_used_count", .set_value = 4};
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "deepseek2.expert_group_used_count", "expected 1..");
    b = (breakage){.set_key = "deepseek2.leading_dense_block_count", .set_value = 5};
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "deepseek2.leading_dense_block_count", "more than block_count");
    b = (breakage){.set_key = "deepseek2.nextn_predict_layers", .set_value = 1};
    CHECK_REFUSED(p, b, PL_ERR_UNSUPPORTED, "deepseek2.nextn_predict_layers", "not supported");
    /* shared experts of another total width than the tensors' */
    b = (breakage){.set_key = "deepseek2.expert_shared_count", .set_value = 64};
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "blk.1.ffn_gate_shexp.weight", "expected [256, 8192]");
    b = (breakage){.drop_key = "deepseek2.rope.dimension_count"};
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "deepseek2.rope.dimension_count", "missing");
    unlink(p);
}

TEST(bad_tensors_are_refused_naming_the_tensor)
{
    const char *p = "/tmp/pagellm-test-ds2-tensors.gguf";
    CHECK(synth("q8_0", p) == 0);
    breakage b = {.reshape_tensor = "blk.1.attn_k_b.weight"};
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "blk.1.attn_k_b.weight", "expected [32, 64, 8]");
    b = (breakage){.drop_tensor = "blk.2.attn_kv_a_mqa.weight"};
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "blk.2.attn_kv_a_mqa.weight", "missing");
    b = (breakage){.drop_tensor = "blk.0.attn_q_a.weight"};
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "blk.0.attn_q_a.weight", "missing");
    b = (breakage){.drop_tensor = "blk.0.ffn_gate.weight"}; /* the leading dense layer */
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "blk.0.ffn_gate.weight", "missing");
    b = (breakage){.drop_tensor = "blk.3.ffn_up_shexp.weight"};
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "blk.3.ffn_up_shexp.weight", "missing");
    unlink(p);
    /* the legacy form (one attn_kv_b a layer, no key_length_mla) */
    pl_synth_params sp = {.shape = "tiny", .seed = 5, .type = "q8_0", .out_path = p, .arch = "deepseek2",
                          .legacy_kv_b = true};
    CHECK(pl_synth(&sp) == 0);
    pl_model *m = NULL;
    CHECK_EQ_INT(pl_model_load(&m, p), 0);
    pl_model_free(m);
    b = (breakage){.drop_tensor = "blk.1.attn_kv_b.weight"};
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "blk.1.attn_kv_b.weight", "missing");
    b = (breakage){.set_key = "deepseek2.attention.head_count_kv", .set_value = 1};
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "deepseek2.attention.key_length_mla", "legacy");
    b = (breakage){.drop_key = "deepseek2.attention.value_length"};
    CHECK_REFUSED(p, b, PL_ERR_FORMAT, "deepseek2.attention.value_length", "legacy");
    unlink(p);
}

/* The realistic V2-Lite shape's metadata (its 16B weights are not
 * written here) reads as DeepSeek-V2-Lite's config: no q_lora_rank key at
 * 27 layers, the 576-value latent row, kq_scale 1/sqrt(192). */
TEST(deepseek2_lite_metadata_reads_as_v2_lite)
{
    const char *p = "/tmp/pagellm-test-ds2-lite-meta.gguf";
    gguf_writer *w = gguf_writer_new();
    pl_synth_params sp = {.shape = "deepseek2-lite"};
    CHECK(w && gguf_writer_set_str(w, "general.architecture", "deepseek2") == 0);
    CHECK_EQ_INT(synth_deepseek2_meta(w, "deepseek2-lite", 102400, &sp), 0);
    CHECK_EQ_INT(gguf_writer_write(w, p, NULL, NULL), 0);
    gguf_writer_free(w);
    gguf_file *f;
    CHECK_EQ_INT(gguf_open(&f, p), 0);
    model_config c;
    const int rc = model_config_read(f, &c);
    gguf_close(f);
    unlink(p);
    CHECK_MSG(rc == 0, "%s", pl_last_error());
    CHECK(c.arch == ARCH_DEEPSEEK2 && c.n_layers == 27 && c.n_heads == 16 && c.n_kv_heads == 1);
    CHECK(c.head_dim == 576 && c.rope_dim == 64 && !c.rope_neox);
    CHECK(c.mla.q_lora_rank == 0 && c.mla.kv_lora_rank == 512 && c.mla.qk_nope == 128 && c.mla.v_head == 128);
    CHECK_NEAR(c.mla.kq_scale, 1.0 / sqrt(192.0), 1e-7);
    CHECK(c.moe.n_expert == 64 && c.moe.n_used == 6 && c.moe.ffn_exp == 1408 && c.moe.ffn_shexp == 2816);
    CHECK(c.moe.n_dense_lead == 1 && c.ffn_dim == 10944 && c.moe.gating == MOE_GATING_SOFTMAX && !c.moe.norm_topk);
    pl_kv_size sz;
    CHECK_EQ_INT(pl_kv_size_of_latent(27, 512, 64, 16, PL_KV_F16, &sz), 0);
    CHECK_NEAR(sz.bytes_per_token, 31104, 0); /* 27 x 576 x 2 */
}

/* ------------------------------------------------------------ router */

/* The reference in double: sigmoid, choice on p + bias among the experts
 * of the best groups (a group's score: its two best choice values), the
 * chosen weights renormalised and scaled. */
static void ref_route(const float *logits, const float *bias, int E, int k, int G, int Gu, double scale, int *sel,
                      double *w)
{
    double p[64], v[64], score[16];
    bool keep[16] = {false};
    for (int e = 0; e < E; e++) p[e] = 1.0 / (1.0 + exp(-(double)logits[e])), v[e] = p[e] + bias[e];
    const int per = E / G;
    for (int g = 0; g < G; g++) {
        double a = -INFINITY, b = -INFINITY;
        for (int e = g * per; e < (g + 1) * per; e++)
            if (v[e] > a) b = a, a = v[e];
            else if (v[e] > b) b = v[e];
        score[g] = a + b;
    }
    for (int i = 0; i < Gu; i++) {
        int best = -1;
        for (int g = 0; g < G; g++)
            if (!keep[g] && (best < 0 || score[g] > score[best])) best = g;
        keep[best] = true;
    }
    for (int e = 0; e < E; e++)
        if (!keep[e / per]) v[e] = -INFINITY;
    double sum = 0;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++) taken |= sel[i] == e;
            if (!taken && (best < 0 || v[e] > v[best])) best = e;
        }
        sel[j] = best;
        sum += p[best];
    }
    for (int j = 0; j < k; j++) w[j] = p[sel[j]] / sum * scale;
}

TEST(routing_matches_a_plain_reference)
{
    const int E = 16, k = 3;
    moe_config c = {.n_expert = (uint32_t)E, .n_used = (uint32_t)k, .norm_topk = true, .gating = MOE_GATING_SIGMOID,
                    .w_scale = 2.5f, .n_group = 4, .n_group_used = 2};
    rng_seed(77);
    for (int trial = 0; trial < 200; trial++) {
        float logits[16], probs[16], bias[16], scratch[16], w[3];
        int32_t sel[3];
        int rsel[3];
        double rw[3];
        for (int e = 0; e < E; e++) logits[e] = (float)(rng_u32() % 2001) / 250.0f - 4.0f, probs[e] = logits[e];
        for (int e = 0; e < E; e++) bias[e] = (float)(rng_u32() % 101) / 500.0f - 0.1f;
        moe_route_cfg(probs, &c, bias, scratch, sel, w);
        ref_route(logits, bias, E, k, 4, 2, 2.5, rsel, rw);
        for (int j = 0; j < k; j++) {
            CHECK_MSG(sel[j] == rsel[j], "trial %d rank %d: expert %d, reference %d", trial, j, sel[j], rsel[j]);
            CHECK_NEAR(w[j], rw[j], 1e-5);
        }
    }
    /* without groups, bias or scale, softmax gating is moe_route's */
    moe_config plain = {.n_expert = 8, .n_used = 2, .norm_topk = true};
    float a[8], b[8], wa[2], wb[2], scratch[8];
    int32_t sa[2], sb[2];
    for (int e = 0; e < 8; e++) a[e] = b[e] = (float)e * 0.37f - (float)(e % 3);
    moe_route(a, 8, 2, true, sa, wa);
    moe_route_cfg(b, &plain, NULL, scratch, sb, wb);
    CHECK(sa[0] == sb[0] && sa[1] == sb[1] && wa[0] == wb[0] && wa[1] == wb[1]);
}

/* ------------------------------------------------------- latent KV kind */

TEST(latent_kind_geometry_is_one_row_a_token_and_layer)
{
    kv_geom g;
    const kv_shape v3 = {61, 1, 512 + 64, 16, KV_BF16, KV_KIND_LATENT};
    CHECK_EQ_INT(kv_geom_init(&g, &v3), 0);
    CHECK_NEAR(g.bytes_per_token, 70272.0, 0); /* 61 x 576 x 2: DeepSeek-V3 at bf16 */
    CHECK_EQ_INT(g.plane_bytes[KV_PLANE_V], 0);
    CHECK_EQ_INT(g.plane_stride[KV_PLANE_V], 0);
    CHECK_EQ_INT(g.row_bytes[KV_PLANE_K], 1152);
    const kv_shape q8 = {27, 1, 576, 16, KV_Q8_0, KV_KIND_LATENT};
    CHECK_EQ_INT(kv_geom_init(&g, &q8), 0);
    CHECK_NEAR(g.bytes_per_token, 27.0 * 576 / 32 * 34, 0);
    pl_kv_size sz;
    CHECK_EQ_INT(pl_kv_size_of_latent(27, 512, 64, 16, PL_KV_F16, &sz), 0);
    CHECK_NEAR(sz.bytes_per_token, 27.0 * 576 * 2, 0);
    CHECK(sz.stage_bytes == 0);
    /* fp8_e4m3's stage: one f16 plane of a block a layer (no V plane) */
    CHECK_EQ_INT(pl_kv_size_of_latent(27, 512, 64, 16, PL_KV_FP8_E4M3, &sz), 0);
    CHECK(sz.stage_bytes == 27ull * 16 * 576 * 2);
    const kv_shape q4 = {2, 1, 96, 16, KV_Q4_0, KV_KIND_LATENT};
    CHECK_EQ_INT(kv_geom_init(&g, &q4), 0);
    CHECK_NEAR(g.bytes_per_token, 2.0 * 96 / 32 * 18, 0);
    /* fp8: a byte an element, e4m3 with one f32 scale a block and layer */
    const kv_shape e4 = {2, 1, 96, 16, KV_FP8_E4M3, KV_KIND_LATENT}, e5 = {2, 1, 96, 16, KV_FP8_E5M2, KV_KIND_LATENT};
    CHECK_EQ_INT(kv_geom_init(&g, &e4), 0);
    CHECK_NEAR(g.bytes_per_token, 2.0 * (96 * 16 + 4) / 16, 0);
    CHECK_EQ_INT(kv_geom_init(&g, &e5), 0);
    CHECK_NEAR(g.bytes_per_token, 2.0 * 96, 0);
    /* KIVI: b bits an element, and per block and layer an f16 scale and zero a channel */
    const kv_shape k4 = {2, 1, 96, 16, KV_INT4, KV_KIND_LATENT}, k2 = {2, 1, 96, 16, KV_INT2, KV_KIND_LATENT};
    CHECK_EQ_INT(kv_geom_init(&g, &k4), 0);
    CHECK_NEAR(g.bytes_per_token, 2.0 * (96 * 16 / 2 + 96 * 4) / 16, 0);
    CHECK_EQ_INT(kv_geom_init(&g, &k2), 0);
    CHECK_NEAR(g.bytes_per_token, 2.0 * (96 * 16 / 4 + 96 * 4) / 16, 0);
    CHECK_EQ_INT(pl_kv_size_of_latent(27, 512, 64, 16, PL_KV_INT4, &sz), 0);
    CHECK(sz.stage_bytes == 27ull * 16 * 576 * 2);
    /* what the kind cannot hold */
    const kv_shape kivi = {2, 1, 80, 16, KV_INT4, KV_KIND_LATENT};
    CHECK_EQ_INT(kv_geom_init(&g, &kivi), PL_EUNSUPPORTED);
    CHECK(strstr(pl_last_error(), "kivi4") && strstr(pl_last_error(), "multiple of 32"));
    const kv_shape odd4 = {2, 1, 80, 16, KV_Q4_0, KV_KIND_LATENT};
    CHECK_EQ_INT(kv_geom_init(&g, &odd4), PL_EUNSUPPORTED);
    const kv_shape odd = {2, 1, 80, 16, KV_Q8_0, KV_KIND_LATENT};
    CHECK_EQ_INT(kv_geom_init(&g, &odd), PL_EUNSUPPORTED);
    const kv_shape heads = {2, 2, 96, 16, KV_F16, KV_KIND_LATENT};
    CHECK_EQ_INT(kv_geom_init(&g, &heads), PL_EINVAL);
    /* the prefix cache keys the kind apart */
    const kv_shape kvk = {2, 1, 96, 16, KV_F16, KV_KIND_KV}, lat = {2, 1, 96, 16, KV_F16, KV_KIND_LATENT};
    uint64_t fp[2] = {1, 2}, s1[2], s2[2];
    prefix_salt_make(s1, fp, &kvk);
    prefix_salt_make(s2, fp, &lat);
    CHECK(s1[0] != s2[0] || s1[1] != s2[1]);
}

TEST(latent_rows_round_trip_and_move_with_their_block)
{
    const kv_dtype dts[] = {KV_F32, KV_F16, KV_BF16, KV_Q8_0, KV_Q4_0, KV_FP8_E5M2};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        const uint32_t L = 3, D = 96, T = 4, n = 10;
        const kv_shape s = {L, 1, D, T, dts[d], KV_KIND_LATENT};
        kv_pool pool;
        CHECK_EQ_INT(kv_pool_init(&pool, &s, 8), 0);
        uint32_t blocks[3];
        CHECK_EQ_INT(kv_pool_alloc_n(&pool, 3, blocks), 0);
        float rows[10 * 96], back[10 * 96];
        int32_t slot[10], seq[10];
        rng_seed(9 + d);
        for (uint32_t i = 0; i < n * D; i++) rows[i] = (float)(rng_u32() % 20001) / 10000.0f - 1.0f;
        for (uint32_t t = 0; t < n; t++) slot[t] = (int32_t)t, seq[t] = 0;
        const kv_batch_seq bs = {blocks, 3, NULL};
        const kv_batch b = {(int)n, slot, seq, &bs, 1};
        for (uint32_t l = 0; l < L; l++) kv_latent_store(&pool, &b, l, rows);
        const double tol = dts[d] == KV_F32    ? 0
                           : dts[d] == KV_F16  ? 1e-3
                           : dts[d] == KV_BF16 ? 8e-3
                           : dts[d] == KV_Q8_0 ? 1e-2
                           : dts[d] == KV_FP8_E5M2 ? 0.125 /* 2 mantissa bits: half a step of 1/4 below 1 */
                                               : 0.13; /* q4_0: a step of ~1/8 where the far sign clamps */
        for (uint32_t l = 0; l < L; l++) {
            kv_latent_read(&pool, blocks, l, n, back);
            for (uint32_t i = 0; i < n * D; i++) CHECK_NEAR(back[i], rows[i], tol);
        }
        /* copy-on-write copies a block whole: the copy reads the same rows */
        uint32_t cow;
        CHECK_EQ_INT(kv_pool_alloc(&pool, &cow), 0);
        kv_pool_copy_block(&pool, cow, blocks[1]);
        float a[4 * 96], c[4 * 96];
        const uint32_t t1[1] = {blocks[1]}, t2[1] = {cow};
        kv_latent_read(&pool, t1, 2, T, a);
        kv_latent_read(&pool, t2, 2, T, c);
        CHECK(memcmp(a, c, sizeof a) == 0);
        kv_pool_free(&pool);
    }
}

/* fp8_e4m3 (staged): n rows written as batches of `chunk` tokens through
 * kv_latent_stage_batch / _commit, as mla_attention does; tail0 and the
 * tail it hands attention checked on the way. */
static void e4m3_write(kv_pool *pool, kv_stage *st, const uint32_t *blocks, const float *rows, uint32_t n,
                       uint32_t chunk, uint16_t *tail)
{
    const uint32_t D = pool->g.s.head_dim, T = pool->g.s.block_size;
    int32_t slot[64], seq[64];
    int toks[64];
    for (uint32_t from = 0; from < n; from += chunk) {
        const uint32_t m = n - from < chunk ? n - from : chunk;
        for (uint32_t k = 0; k < m; k++) slot[k] = (int32_t)(from + k), seq[k] = 0, toks[k] = (int)k;
        const kv_batch_seq bs = {blocks, 3, st};
        const kv_batch b = {(int)m, slot, seq, &bs, 1};
        for (uint32_t l = 0; l < pool->g.s.n_layers; l++) {
            kv_latent_store(pool, &b, l, rows + (size_t)from * D); /* nothing for a staged dtype */
            const uint32_t tail0 = kv_latent_stage_batch(pool, &b, 0, l, rows + (size_t)from * D, toks, (int)m, tail);
            CHECK_EQ_INT(tail0, from / T * T);
            uint16_t h[96];
            for (uint32_t j = tail0; j < from + m; j++) { /* the tail: the f16 rows of positions tail0.. */
                kv_codec_f16_row(rows + (size_t)j * D, h, D);
                CHECK(memcmp(h, tail + (size_t)(j - tail0) * D, D * sizeof *h) == 0);
            }
            kv_latent_stage_commit(pool, &b, 0, l, tail, tail0, from + m);
        }
    }
}

/* Half a KIVI step of the block's channel c: the bound of a sealed
 * element's error (m is the minimum exactly, d rounds to f16). */
static double kivi_bound(const float *rows, uint32_t j0, uint32_t T, uint32_t D, uint32_t c, uint32_t bits)
{
    float mn = INFINITY, mx = -INFINITY;
    for (uint32_t t = j0; t < j0 + T; t++) mn = fminf(mn, rows[(size_t)t * D + c]), mx = fmaxf(mx, rows[(size_t)t * D + c]);
    return (mx - mn) / (double)((1u << bits) - 1) * 0.5 * 1.002 + fabs(mx) / 1024 + 1e-6;
}

/* A staged dtype (fp8_e4m3, kivi4, kivi2): the full blocks sealed, the
 * partly filled one in the stage, the sealed bytes the same however the
 * rows came in batches. */
static void staged_rows_seal_whole_blocks(kv_dtype dt)
{
    const uint32_t L = 2, D = 96, T = 4, n = 10;
    const kv_shape s = {L, 1, D, T, dt, KV_KIND_LATENT};
    float rows[10 * 96], back[8 * 96];
    rng_seed(77);
    for (uint32_t i = 0; i < n * D; i++) rows[i] = (float)(rng_u32() % 20001) / 5000.0f - 2.0f;
    uint16_t tail[(4 + 10) * 96];
    uint8_t *first = NULL;
    const uint32_t chunks[] = {10, 1, 3};
    for (size_t c = 0; c < 3; c++) {
        kv_pool pool;
        kv_stage st;
        CHECK_EQ_INT(kv_pool_init(&pool, &s, 4), 0);
        CHECK_EQ_INT(kv_stage_init(&st, &pool.g), 0);
        CHECK(st.rows != NULL && st.planes == 1 && st.bytes == (uint64_t)L * T * D * 2);
        uint32_t blocks[3];
        CHECK_EQ_INT(kv_pool_alloc_n(&pool, 3, blocks), 0);
        e4m3_write(&pool, &st, blocks, rows, n, chunks[c], tail);
        /* the two full blocks are sealed: e4m3 (3 mantissa bits) times a scale near amax / 448; KIVI
         * within half a step of each channel's range over its block */
        const uint32_t bits = dt == KV_INT4 ? 4 : dt == KV_INT2 ? 2 : 0;
        for (uint32_t l = 0; l < L; l++) {
            kv_latent_read(&pool, blocks, l, 8, back);
            for (uint32_t i = 0; i < 8 * D; i++)
                CHECK_NEAR(back[i], rows[i],
                           bits ? kivi_bound(rows, i / D / T * T, T, D, i % D, bits) : fabs(rows[i]) / 16 + 2.0 / 448 / 8);
            /* the partly filled block is the stage's: rows 8, 9 in f16 */
            uint16_t h[96];
            for (uint32_t j = 8; j < n; j++) {
                kv_codec_f16_row(rows + (size_t)j * D, h, D);
                CHECK(memcmp(h, kv_stage_plane(&st, l, KV_PLANE_K) + (size_t)(j - 8) * D, sizeof h) == 0);
            }
        }
        /* one batch, token by token or in threes: the same sealed bytes, scales included */
        const uint8_t *b0 = kv_block_k(&pool, blocks[0], 0);
        const size_t bytes = (size_t)pool.g.plane_bytes[0];
        if (!first) {
            first = malloc(2 * bytes);
            memcpy(first, b0, bytes);
            memcpy(first + bytes, kv_block_k(&pool, blocks[1], 1), bytes);
        } else {
            CHECK_MSG(memcmp(first, b0, bytes) == 0, "%s chunks of %u: block 0 differs", kv_dtype_name(dt), chunks[c]);
            CHECK_MSG(memcmp(first + bytes, kv_block_k(&pool, blocks[1], 1), bytes) == 0, "chunks of %u: block 1",
                      chunks[c]);
        }
        kv_stage_free(&st);
        kv_pool_free(&pool);
    }
    free(first);
}

TEST(e4m3_latent_rows_seal_whole_blocks_whatever_the_batches) { staged_rows_seal_whole_blocks(KV_FP8_E4M3); }
TEST(kivi_latent_rows_seal_whole_blocks_whatever_the_batches)
{
    staged_rows_seal_whole_blocks(KV_INT4);
    staged_rows_seal_whole_blocks(KV_INT2);
}

/* ------------------------------------------------------ batch vs alone */

#define N_SEQS 6
#define MAX_PROMPT 40

static void prompt_of(int i, int32_t *ids, int *n)
{
    rng_seed(2000 + (uint64_t)i);
    *n = 5 + 5 * i; /* 5..30 tokens: past one block */
    for (int j = 0; j < *n; j++) ids[j] = 3 + (int32_t)(rng_u32() % 500);
}

static pl_ctx *ctx_open(pl_model *m, uint32_t max_seqs, uint32_t max_batch, const char *kv_dtype)
{
    pl_ctx_params cp;
    pl_ctx_params_default(&cp);
    cp.n_ctx = 128;
    cp.max_seqs = max_seqs;
    cp.max_batch = max_batch;
    cp.n_threads = 2;
    if (kv_dtype) (void)pl_kv_dtype_from_name(kv_dtype, &cp.kv_dtype);
    pl_ctx *c = NULL;
    return pl_ctx_new(&c, m, &cp) == 0 ? c : NULL;
}

/* n sequences prefilled one by one, then one decode step of all n: each
 * one's logits bit for bit those of the sequence decoding alone; and a
 * prompt prefilled in chunks of 3 gives the logits of one chunk (packed
 * matrices only: f32 ones take another path above 4 rows). */
static int same_alone_batched_chunked(const char *type, const char *kvt, int n, char *why, size_t wn)
{
    char path[128];
    snprintf(path, sizeof path, "/tmp/pagellm-test-ds2-%s.gguf", type);
    pl_model *m = NULL;
    pl_ctx *cb = NULL, *ca = NULL, *c3 = NULL;
    float *lb = NULL, *la = NULL, *l3 = NULL;
    int rc = synth(type, path) || pl_model_load(&m, path);
    const uint32_t nv = rc ? 0 : pl_model_n_vocab(m);
    if (!rc) {
        lb = malloc(sizeof(float) * nv * N_SEQS);
        la = malloc(sizeof(float) * nv);
        l3 = malloc(sizeof(float) * nv);
        cb = ctx_open(m, (uint32_t)n, 512, kvt);
        ca = ctx_open(m, 1, 512, kvt);
        c3 = ctx_open(m, 1, 3, kvt);
        rc = !lb || !la || !l3 || !cb || !ca || !c3;
    }
    int32_t seqs[N_SEQS], next[N_SEQS], ids[MAX_PROMPT];
    for (int i = 0; i < n && !rc; i++) {
        int np;
        prompt_of(i, ids, &np);
        next[i] = 7 + 31 * i;
        rc = pl_seq_new(cb, &seqs[i]) || pl_seq_append(cb, seqs[i], ids, (size_t)np, NULL);
    }
    if (!rc) rc = pl_seq_step(cb, seqs, next, (size_t)n, lb);
    if (rc) snprintf(why, wn, "%s: setup: %s", type, pl_last_error());
    for (int i = 0; i < n && !rc; i++) {
        int np;
        int32_t s, s3;
        prompt_of(i, ids, &np);
        ids[np] = next[i];
        rc = pl_seq_new(ca, &s) || pl_seq_append(ca, s, ids, (size_t)np, NULL) || pl_seq_append(ca, s, &next[i], 1, la) ||
             pl_seq_new(c3, &s3) || pl_seq_append(c3, s3, ids, (size_t)np + 1, l3);
        if (rc) {
            snprintf(why, wn, "%s: alone: %s", type, pl_last_error());
            break;
        }
        pl_seq_free(ca, s);
        pl_seq_free(c3, s3);
        uint32_t diff = 0, diff3 = 0;
        const bool packed = strcmp(type, "f32") != 0;
        for (uint32_t v = 0; v < nv; v++) diff += la[v] != lb[(size_t)i * nv + v], diff3 += packed && la[v] != l3[v];
        if (diff || diff3) {
            snprintf(why, wn, "%s kv %s: sequence %d of %d: %u logits differ batched, %u chunked", type,
                     kvt ? kvt : "f16", i, n, diff, diff3);
            rc = 1;
        }
    }
    pl_ctx_free(cb);
    pl_ctx_free(ca);
    pl_ctx_free(c3);
    pl_model_free(m);
    free(lb);
    free(la);
    free(l3);
    unlink(path);
    return rc;
}

TEST(a_sequence_gets_its_logits_alone_batched_and_chunked)
{
    char why[512] = "";
    CHECK_MSG(same_alone_batched_chunked("q8_0", NULL, 6, why, sizeof why) == 0, "%s", why);
    CHECK_MSG(same_alone_batched_chunked("q8_0", "q8_0", 6, why, sizeof why) == 0, "%s", why);
    /* fp8: e5m2 rows; e4m3 staged (a sequence's own block from its f16 tail, sealed when full) */
    CHECK_MSG(same_alone_batched_chunked("q8_0", "fp8_e5m2", 6, why, sizeof why) == 0, "%s", why);
    CHECK_MSG(same_alone_batched_chunked("q8_0", "fp8_e4m3", 6, why, sizeof why) == 0, "%s", why);
    /* KIVI: staged the same way, sealed per channel */
    CHECK_MSG(same_alone_batched_chunked("q8_0", "kivi4", 6, why, sizeof why) == 0, "%s", why);
    CHECK_MSG(same_alone_batched_chunked("q8_0", "kivi2", 6, why, sizeof why) == 0, "%s", why);
    /* f32 matrices take the 4-row decode path up to 4 rows */
    CHECK_MSG(same_alone_batched_chunked("f32", "f32", 3, why, sizeof why) == 0, "%s", why);
}

/* --kv-window over latent rows: two sequences stepping together past the
 * window (sinks 4 in a block of 16, window 32: 48 rows held) get, step by
 * step, the logits each gets alone, for an unstaged and a staged dtype;
 * and the cache never holds more than its 3 blocks a sequence. */
static int window_same_alone_and_batched(const char *kvt, char *why, size_t wn)
{
    const char *path = "/tmp/pagellm-test-ds2-window.gguf";
    pl_model *m = NULL;
    pl_ctx *cb = NULL, *ca[2] = {NULL, NULL};
    int rc = synth("q8_0", path) || pl_model_load(&m, path);
    const uint32_t nv = rc ? 0 : pl_model_n_vocab(m);
    float *lb = rc ? NULL : malloc(sizeof(float) * nv * 2), *la = rc ? NULL : malloc(sizeof(float) * nv);
    pl_ctx_params cp;
    pl_ctx_params_default(&cp);
    cp.n_threads = 2;
    cp.kv_window = 32;
    cp.kv_sinks = 4;
    cp.max_seqs = 2;
    if (kvt) (void)pl_kv_dtype_from_name(kvt, &cp.kv_dtype);
    if (!rc) rc = !lb || !la || pl_ctx_new(&cb, m, &cp) || pl_ctx_new(&ca[0], m, &cp) || pl_ctx_new(&ca[1], m, &cp);
    int32_t sb[2], sa[2], ids[MAX_PROMPT], next[2];
    for (int i = 0; i < 2 && !rc; i++) {
        int np;
        prompt_of(i + 2, ids, &np); /* 15 and 20 tokens */
        rc = pl_seq_new(cb, &sb[i]) || pl_seq_append(cb, sb[i], ids, (size_t)np, NULL) || pl_seq_new(ca[i], &sa[i]) ||
             pl_seq_append(ca[i], sa[i], ids, (size_t)np, NULL);
        next[i] = 11 + 17 * i;
    }
    if (rc) snprintf(why, wn, "kv %s: setup: %s", kvt, pl_last_error());
    for (int step = 0; step < 90 && !rc; step++) { /* past 48 rows, drops every 16 tokens */
        rc = pl_seq_step(cb, sb, next, 2, lb);
        for (int i = 0; i < 2 && !rc; i++) {
            rc = pl_seq_append(ca[i], sa[i], &next[i], 1, la);
            uint32_t diff = 0, best = 0;
            for (uint32_t v = 0; !rc && v < nv; v++) {
                diff += la[v] != lb[(size_t)i * nv + v];
                if (la[v] > la[best]) best = v;
            }
            if (!rc && diff) {
                snprintf(why, wn, "kv %s: sequence %d step %d: %u logits differ batched", kvt, i, step, diff);
                rc = 1;
            }
            next[i] = (int32_t)best;
        }
        if (rc && !why[0]) snprintf(why, wn, "kv %s: step %d: %s", kvt, step, pl_last_error());
    }
    if (!rc) {
        pl_kv_stats st;
        pl_ctx_kv_stats(cb, &st);
        if (st.blocks_used > 2 * 3) snprintf(why, wn, "kv %s: %u blocks held", kvt, st.blocks_used), rc = 1;
    }
    pl_ctx_free(cb);
    pl_ctx_free(ca[0]);
    pl_ctx_free(ca[1]);
    pl_model_free(m);
    free(lb);
    free(la);
    unlink(path);
    return rc;
}

TEST(a_window_over_latent_rows_gives_the_same_logits_alone_and_batched)
{
    char why[512] = "";
    CHECK_MSG(window_same_alone_and_batched("q8_0", why, sizeof why) == 0, "%s", why);
    CHECK_MSG(window_same_alone_and_batched("kivi4", why, sizeof why) == 0, "%s", why);
}

int main(void)
{
    RUN(bad_metadata_is_refused_naming_the_key);
    RUN(bad_tensors_are_refused_naming_the_tensor);
    RUN(deepseek2_lite_metadata_reads_as_v2_lite);
    RUN(routing_matches_a_plain_reference);
    RUN(latent_kind_geometry_is_one_row_a_token_and_layer);
    RUN(latent_rows_round_trip_and_move_with_their_block);
    RUN(e4m3_latent_rows_seal_whole_blocks_whatever_the_batches);
    RUN(kivi_latent_rows_seal_whole_blocks_whatever_the_batches);
    RUN(a_sequence_gets_its_logits_alone_batched_and_chunked);
    RUN(a_window_over_latent_rows_gives_the_same_logits_alone_and_batched);
    return test_summary();
}
