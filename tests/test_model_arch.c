/* test_model_arch.c - the gemma/phi3 settings and RoPE scaling read from
 * metadata (every bad key named), the scaled RoPE tables against their
 * definition, GeGLU's f16 table, and attention soft-capping in every
 * attention variant against its definition. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "gguf/gguf.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "model/arch_gemma.h"
#include "model/config.h"
#include "model/rope_scaling.h"
#include "tensor/half.h"
#include "test.h"

/* A metadata-only GGUF of a small model of arch with extra keys; its
 * config (rc and *c). extra: "key=type:value" items, type u32/f32/str. */
static int config_of(const char *arch, const char *const *extra, model_config *c)
{
    char path[] = "/tmp/pagellm-test-arch-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) return -1000;
    close(fd);
    gguf_writer *w = gguf_writer_new();
    char k[128];
#define K(n) (snprintf(k, sizeof k, "%s." n, arch), k)
    gguf_writer_set_str(w, "general.architecture", arch);
    gguf_writer_set_u32(w, K("block_count"), 4);
    gguf_writer_set_u32(w, K("embedding_length"), 64);
    gguf_writer_set_u32(w, K("attention.head_count"), 4);
    gguf_writer_set_u32(w, K("feed_forward_length"), 128);
    gguf_writer_set_u32(w, K("context_length"), 1024);
    gguf_writer_set_u32(w, K("vocab_size"), 300);
#undef K
    for (int i = 0; extra && extra[i]; i++) {
        char key[128], type[8], val[64];
        if (sscanf(extra[i], "%127[^=]=%7[^:]:%63s", key, type, val) != 3) abort();
        if (!strcmp(type, "u32")) gguf_writer_set_u32(w, key, (uint32_t)atol(val));
        else if (!strcmp(type, "f32")) gguf_writer_set_f32(w, key, strtof(val, NULL));
        else gguf_writer_set_str(w, key, val);
    }
    int rc = gguf_writer_write(w, path, NULL, NULL);
    gguf_writer_free(w);
    gguf_file *f = NULL;
    if (!rc) rc = gguf_open(&f, path);
    if (!rc) rc = model_config_read(f, c);
    gguf_close(f);
    unlink(path);
    return rc;
}

TEST(gemma2_defaults_as_llama_cpp)
{
    model_config c;
    CHECK_EQ_INT(config_of("gemma2", NULL, &c), 0);
    CHECK(c.arch == ARCH_GEMMA2 && c.rope_neox && c.gelu && c.post_norms);
    CHECK(c.attn_softcap == 50.0f && c.final_softcap == 30.0f);
    CHECK_EQ_INT(c.local_window, 4096);
    CHECK_EQ_INT(c.sliding_window, 0); /* a mask, not the runtime's block dropping */
    CHECK(model_config_layer_local(&c, 0) && !model_config_layer_local(&c, 1) && model_config_layer_local(&c, 2));
    CHECK(c.embd_scale == sqrtf(64.0f) && c.q_scale == 1.0f / sqrtf(16.0f));
}

TEST(gemma3_local_layers_and_rope)
{
    model_config c;
    const char *kv[] = {"gemma3.attention.sliding_window=u32:32", "gemma3.rope.freq_base=f32:1000000",
                        "gemma3.rope.scaling.type=str:linear", "gemma3.rope.scaling.factor=f32:8", NULL};
    CHECK_EQ_INT(config_of("gemma3", kv, &c), 0);
    CHECK_EQ_INT(c.local_window, 32);
    CHECK_EQ_INT(c.local_pattern, 6); /* 4 layers: all local */
    for (uint32_t l = 0; l < 4; l++) CHECK(model_config_layer_local(&c, l));
    CHECK(c.rope_base == 1000000.0f && c.rope_scale == 0.125f);
    CHECK(c.rope_base_local == 10000.0f && c.rope_scale_local == 1.0f);
    CHECK(c.attn_softcap == 0 && c.final_softcap == 0);
    /* no window: no local layers at all */
    CHECK_EQ_INT(config_of("gemma3", NULL, &c), 0);
    CHECK(!model_config_layer_local(&c, 0) && c.local_window == 0);
}

TEST(phi3_window_ignored_as_llama_cpp)
{
    model_config c;
    const char *kv[] = {"phi3.attention.sliding_window=u32:2047", NULL};
    CHECK_EQ_INT(config_of("phi3", kv, &c), 0);
    CHECK(c.arch == ARCH_PHI3 && c.sliding_window == 0 && c.local_window == 0 && c.rope_neox);
}

/* err_msg() names key after a failed config_of */
#define CHECK_REFUSED(arch, kv, key) do { model_config c_; int rc_ = config_of(arch, kv, &c_); \
    CHECK_MSG(rc_ != 0, "accepted"); CHECK_MSG(strstr(err_msg(), key) != NULL, "error '%s' does not name %s", err_msg(), key); } while (0)

TEST(bad_metadata_names_the_key)
{
    const char *unknown[] = {"llama.rope.scaling.type=str:ntk-aware", NULL};
    CHECK_REFUSED("llama", unknown, "llama.rope.scaling.type");
    const char *yarn1[] = {"qwen2.rope.scaling.type=str:yarn", "qwen2.rope.scaling.factor=f32:1", NULL};
    CHECK_REFUSED("qwen2", yarn1, "qwen2.rope.scaling.factor");
    const char *orig0[] = {"llama.rope.scaling.original_context_length=u32:0", NULL};
    CHECK_REFUSED("llama", orig0, "llama.rope.scaling.original_context_length");
    const char *negf[] = {"phi3.rope.scaling.attn_factor=f32:-1", NULL};
    CHECK_REFUSED("phi3", negf, "phi3.rope.scaling.attn_factor");
    const char *win0[] = {"gemma2.attention.sliding_window=u32:0", NULL};
    CHECK_REFUSED("gemma2", win0, "gemma2.attention.sliding_window");
    const char *cap[] = {"gemma2.attn_logit_softcapping=f32:-3", NULL};
    CHECK_REFUSED("gemma2", cap, "gemma2.attn_logit_softcapping");
    const char *pat[] = {"gemma3.attention.sliding_window=u32:8", "gemma3.attention.sliding_window_pattern=str:6", NULL};
    CHECK_REFUSED("gemma3", pat, "gemma3.attention.sliding_window_pattern");
    CHECK_REFUSED("gemma4", NULL, "general.architecture");
}

TEST(rope_scaling_type_none_never_scales)
{
    model_config c;
    const char *kv[] = {"llama.rope.scaling.type=str:none", "llama.rope.scaling.factor=f32:4", NULL};
    CHECK_EQ_INT(config_of("llama", kv, &c), 0);
    CHECK(c.rope_scale == 1.0f);
    const char *lin[] = {"llama.rope.scale_linear=f32:2", NULL}; /* the older key */
    CHECK_EQ_INT(config_of("llama", lin, &c), 0);
    CHECK(c.rope_scale == 0.5f);
}

/* The caller's RoPE scaling (--rope-*): llama.cpp's meanings; bad values
 * refused with the config untouched; local layers of their own keep theirs. */
TEST(rope_override_replaces_the_files_scaling)
{
    model_config c, o;
    const char *yarn[] = {"llama.rope.scaling.type=str:yarn", "llama.rope.scaling.factor=f32:4", NULL};
    CHECK_EQ_INT(config_of("llama", yarn, &c), 0);
    o = c;
    CHECK_EQ_INT(model_config_rope_override(&o, "f", &(rope_override){.type = ROPE_SCALING_NONE, .factor = 0, .base = 0, .orig = 0}), 0);
    CHECK(o.rope_scaling.type == ROPE_SCALING_NONE && o.rope_scale == 1.0f && o.rope_scale_local == 1.0f);
    o = c;
    CHECK_EQ_INT(model_config_rope_override(&o, "f", &(rope_override){.type = -1, .factor = 8, .base = 20000, .orig = 256}), 0); /* the file's type, another factor */
    CHECK(o.rope_scaling.type == ROPE_SCALING_YARN && o.rope_scaling.factor == 8 && o.rope_scale == 0.125f);
    CHECK(o.rope_base == 20000 && o.rope_base_local == 20000 && o.rope_scaling.ctx_orig == 256);
    o = c;
    CHECK_EQ_INT(model_config_rope_override(&o, "f", &(rope_override){.type = -1, .factor = 0, .base = 0, .orig = 0}), 0); /* nothing asked: nothing changes */
    CHECK(memcmp(&o, &c, sizeof o) == 0);

    model_config p;
    CHECK_EQ_INT(config_of("llama", NULL, &p), 0); /* no scaling in the file: linear by default */
    o = p;
    CHECK_EQ_INT(model_config_rope_override(&o, "f", &(rope_override){.type = -1, .factor = 2, .base = 0, .orig = 0}), 0);
    CHECK(o.rope_scaling.type == ROPE_SCALING_LINEAR && o.rope_scale == 0.5f);
    static const float bad[] = {-1.0f, NAN, INFINITY};
    for (int i = 0; i < 3; i++) {
        o = p;
        CHECK_EQ_INT(model_config_rope_override(&o, "f", &(rope_override){.type = -1, .factor = bad[i], .base = 0, .orig = 0}), PL_EINVAL);
        CHECK_EQ_INT(model_config_rope_override(&o, "f", &(rope_override){.type = -1, .factor = 0, .base = bad[i], .orig = 0}), PL_EINVAL);
        CHECK(memcmp(&o, &p, sizeof o) == 0);
    }
    CHECK_EQ_INT(model_config_rope_override(&o, "f", &(rope_override){.type = ROPE_SCALING_YARN, .factor = 0, .base = 0, .orig = 0}), PL_EINVAL); /* no factor */
    CHECK(strstr(err_msg(), "YaRN needs a RoPE scale > 1"));
    CHECK_EQ_INT(model_config_rope_override(&o, "f", &(rope_override){.type = ROPE_SCALING_LONGROPE, .factor = 2, .base = 0, .orig = 0}), PL_EINVAL);
    CHECK_EQ_INT(model_config_rope_override(&o, "f", &(rope_override){.type = 7, .factor = 2, .base = 0, .orig = 0}), PL_EINVAL);
    CHECK(memcmp(&o, &p, sizeof o) == 0);

    model_config g;
    const char *swa[] = {"gemma3.attention.sliding_window=u32:32", NULL}; /* local layers with a base of their own */
    CHECK_EQ_INT(config_of("gemma3", swa, &g), 0);
    CHECK(g.local_window == 32 && g.rope_base_local == 10000.0f);
    o = g;
    CHECK_EQ_INT(model_config_rope_override(&o, "f", &(rope_override){.type = ROPE_SCALING_LINEAR, .factor = 8, .base = 5e5f, .orig = 0}), 0);
    CHECK(o.rope_base == 5e5f && o.rope_scale == 0.125f);
    CHECK(o.rope_base_local == g.rope_base_local && o.rope_scale_local == g.rope_scale_local);
}

/* YaRN's knobs (--yarn-ext-factor, --yarn-attn-factor, --yarn-beta-*): as
 * llama_context resolves them. The spec of the global layers shows each. */
static rope_spec global_spec(const model_config *c)
{
    return rope_spec_make(&c->rope_scaling, c->rope_dim, c->rope_base, c->rope_scale, c->rope_scale, NULL);
}

TEST(rope_override_yarn_knobs)
{
    model_config c, o;
    const char *yarn[] = {"llama.rope.scaling.type=str:yarn", "llama.rope.scaling.factor=f32:4", NULL};
    CHECK_EQ_INT(config_of("llama", yarn, &c), 0);
    const rope_spec def = global_spec(&c);
    CHECK(def.ext_factor == 1.0f && !rope_spec_plain(&def));
    o = c; /* a mix of 0 leaves linear interpolation: plain RoPE at the yarn factor */
    CHECK_EQ_INT(model_config_rope_override(&o, "f", &(rope_override){.type = -1, .ext_set = true}), 0);
    rope_spec r = global_spec(&o);
    CHECK(rope_spec_plain(&r) && r.freq_scale == 0.25f);
    o = c;
    CHECK_EQ_INT(model_config_rope_override(&o, "f", &(rope_override){.type = -1, .ext_set = true, .ext_factor = 0.5f}), 0);
    r = global_spec(&o);
    CHECK(r.ext_factor == 0.5f && r.mscale == def.mscale && r.corr[0] == def.corr[0] && r.corr[1] == def.corr[1]);
    o = c; /* the corners: a lower fast beta starts the ramp later, a higher slow one ends it sooner */
    CHECK_EQ_INT(model_config_rope_override(&o, "f", &(rope_override){.type = -1, .beta_fast = 8, .beta_slow = 2}), 0);
    r = global_spec(&o);
    CHECK(r.corr[0] > def.corr[0] && r.corr[1] < def.corr[1] && r.corr[0] <= r.corr[1]);
    o = c; /* under a ramp the multiplier is YaRN's own: the caller's is overwritten (llama.cpp) */
    CHECK_EQ_INT(model_config_rope_override(&o, "f", &(rope_override){.type = -1, .yarn_attn = 2}), 0);
    r = global_spec(&o);
    CHECK(r.mscale == def.mscale);

    model_config p;
    CHECK_EQ_INT(config_of("llama", NULL, &p), 0);
    o = p; /* without a ramp it multiplies cos and sin */
    CHECK_EQ_INT(model_config_rope_override(&o, "f", &(rope_override){.type = -1, .factor = 2, .yarn_attn = 1.5f}), 0);
    r = global_spec(&o);
    CHECK(r.mscale == 1.5f && r.ext_factor == 0 && !rope_spec_plain(&r));
    o = p; /* a mix given to linear scaling adds YaRN's ramp and magnitude */
    CHECK_EQ_INT(model_config_rope_override(&o, "f", &(rope_override){.type = ROPE_SCALING_LINEAR, .factor = 4,
                                                                        .orig = 64, .ext_set = true, .ext_factor = 1}),
                 0);
    r = global_spec(&o);
    CHECK(r.ext_factor == 1.0f && r.mscale == def.mscale && r.corr[1] > 0);
    float cs[128];
    assert(o.rope_dim <= 128);
    rope_spec_table(&r, cs, 100);
    CHECK_NEAR(hypot(cs[0], cs[o.rope_dim / 2]), 0.1 * log(4.0) + 1.0, 1e-5);

    const rope_override bad[] = {
        {.type = -1, .ext_set = true, .ext_factor = 1.5f}, {.type = -1, .ext_set = true, .ext_factor = -0.1f},
        {.type = -1, .ext_set = true, .ext_factor = NAN},  {.type = -1, .yarn_attn = -1},
        {.type = -1, .yarn_attn = INFINITY},               {.type = -1, .beta_fast = NAN},
        {.type = -1, .beta_slow = -2},                     {.type = -1, .beta_fast = 0.5f}, /* below slow's 1 */
        {.type = -1, .beta_fast = 4, .beta_slow = 4},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        o = c;
        CHECK_EQ_INT(model_config_rope_override(&o, "f", &bad[i]), PL_EINVAL);
        CHECK(memcmp(&o, &c, sizeof o) == 0);
    }
    CHECK(strstr(err_msg(), "beta fast 4 must be above beta slow 4"));
}

/* The plain spec is kern_rope_table; YaRN follows its definition (ramp
 * between the correction dims, magnitude factor). */
TEST(rope_tables)
{
    const rope_scaling lin = {.type = ROPE_SCALING_LINEAR, .factor = 4.0f, .attn_factor = 1.0f, .ctx_orig = 256};
    rope_spec r = rope_spec_make(&lin, 32, 10000.0f, 0.25f, 0.25f, NULL);
    CHECK(rope_spec_plain(&r));
    float a[32], b[32];
    rope_spec_table(&r, a, 77);
    kern_rope_table(b, 32, 77, 10000.0f, 0.25f, NULL);
    CHECK(memcmp(a, b, sizeof a) == 0);
    const rope_scaling yarn = {.type = ROPE_SCALING_YARN, .factor = 4.0f, .attn_factor = 1.0f, .ctx_orig = 256};
    r = rope_spec_make(&yarn, 32, 10000.0f, 0.25f, 0.25f, NULL);
    CHECK(!rope_spec_plain(&r) && r.ext_factor == 1.0f);
    CHECK(r.corr[0] >= 0 && r.corr[0] <= r.corr[1] && r.corr[1] <= 31);
    rope_spec_table(&r, a, 77);
    /* overall magnitude: 0.1 ln(4) + 1 (llama.cpp's mscale) */
    const double m = 0.1 * log(4.0) + 1.0;
    for (int i = 0; i < 16; i++) CHECK_NEAR(hypot(a[i], a[16 + i]), m, 1e-5);
    /* pairs below the ramp rotate as unscaled RoPE, pairs above as linear */
    float un[32], li[32];
    kern_rope_table(un, 32, 77, 10000.0f, 1.0f, NULL);
    kern_rope_table(li, 32, 77, 10000.0f, 0.25f, NULL);
    const int lo = (int)r.corr[0], hi = (int)r.corr[1];
    CHECK(lo < 16);
    for (int i = 0; i < lo; i++) CHECK_NEAR(a[i] / m, un[i], 1e-5);
    for (int i = hi + 1; i < 16; i++) CHECK_NEAR(a[i] / m, li[i], 1e-5);
    /* LongRoPE: attn_factor multiplies, factors divide the angles */
    const rope_scaling lr = {.type = ROPE_SCALING_LINEAR, .factor = 0.0f, .attn_factor = 1.25f, .ctx_orig = 256};
    float ff[16];
    for (int i = 0; i < 16; i++) ff[i] = 1.0f + 0.1f * (float)i;
    r = rope_spec_make(&lr, 32, 10000.0f, 1.0f, 1.0f, ff);
    rope_spec_table(&r, a, 500);
    kern_rope_table(b, 32, 500, 10000.0f, 1.0f, ff);
    for (int i = 0; i < 32; i++) CHECK_NEAR(a[i], 1.25f * b[i], 1e-6);
}

TEST(geglu_uses_the_f16_table)
{
    float a[6] = {-12.0f, -1.0f, 0.0f, 0.3f, 2.5f, 11.0f}, b[6] = {2, 2, 2, 2, 2, 2}, x[6];
    memcpy(x, a, sizeof a);
    gemma_geglu(a, b, 6);
    CHECK(a[0] == 0.0f && a[5] == 22.0f);
    for (int i = 1; i < 5; i++) {
        const float xi = f16_to_f32(f32_to_f16(x[i]));
        const float g = 0.5f * xi * (1.0f + tanhf(0.79788456f * xi * (1.0f + 0.044715f * xi * xi)));
        CHECK(a[i] == f16_to_f32(f32_to_f16(g)) * 2.0f);
    }
    float l[3] = {0.0f, 30.0f, -1000.0f};
    gemma_softcap(l, 3, 30.0f);
    CHECK(l[0] == 0.0f && fabsf(l[1] - 30.0f * tanhf(1.0f)) < 1e-5f && l[2] >= -30.0f && l[2] < -29.9f);
}

/* Soft-capped attention over an f32 cache: every variant against the
 * scores' definition, computed here in double. */
TEST(attention_softcap_all_variants)
{
    enum { HD = 32, N = 40, BS = 16 };
    static float kv[2][3][BS][HD]; /* [K/V][block][slot][dim] */
    uint32_t blocks[3] = {0, 1, 2};
    float q[HD], out[HD];
    srand(7);
    for (size_t i = 0; i < sizeof kv / sizeof(float); i++) ((float *)kv)[i] = (float)rand() / RAND_MAX * 2 - 1;
    for (int i = 0; i < HD; i++) q[i] = ((float)rand() / RAND_MAX * 2 - 1) * 4;
    const float cap = 2.0f;
    double s[N], mx = -1e30, sum = 0, want[HD] = {0};
    for (int j = 0; j < N; j++) {
        double d = 0;
        for (int i = 0; i < HD; i++) d += (double)q[i] * kv[0][j / BS][j % BS][i];
        s[j] = cap * tanh(d / cap);
        mx = s[j] > mx ? s[j] : mx;
    }
    for (int j = 0; j < N; j++) sum += s[j] = exp(s[j] - mx);
    for (int j = 0; j < N; j++)
        for (int i = 0; i < HD; i++) want[i] += s[j] / sum * kv[1][j / BS][j % BS][i];
    attn_kv k = {.blocks = blocks, .k_base = (const uint8_t *)kv[0], .v_base = (const uint8_t *)kv[1],
                 .block_bytes = sizeof kv[0][0], .v_block_bytes = sizeof kv[1][0], .block_size = BS, .row_bytes = HD * 4, .head_bytes = HD * 4,
                 .kv_type = 0 /* DT_F32 */, .head_dim = HD, .softcap = cap};
    const size_t nscr = attn_scratch_floats(N, HD) + 64;
    float *scr = malloc(nscr * sizeof(float));
    attn_row row = {q, out, N, 0, 0};
    void (*variants[3])(const attn_kv *, const attn_row *, int, float, float *, size_t) = {
        attn_paged_ref, attn_avx2_available() ? attn_paged_avx2 : NULL, attn_avx512_available() ? attn_paged_avx512 : NULL};
    for (int v = 0; v < 3; v++) {
        if (!variants[v]) continue;
        variants[v](&k, &row, 1, 1.0f, scr, nscr);
        for (int i = 0; i < HD; i++) CHECK_MSG(fabs(out[i] - want[i]) < 1e-4, "variant %d dim %d: %g vs %g", v, i, out[i], want[i]);
    }
    /* and capping changes the result (the scores reach beyond the cap) */
    k.softcap = 0;
    attn_paged_ref(&k, &row, 1, 1.0f, scr, nscr);
    double diff = 0;
    for (int i = 0; i < HD; i++) diff += fabs(out[i] - want[i]);
    CHECK(diff > 1e-3);
    free(scr);
}

int main(void)
{
    kern_init(0);
    RUN(gemma2_defaults_as_llama_cpp);
    RUN(gemma3_local_layers_and_rope);
    RUN(phi3_window_ignored_as_llama_cpp);
    RUN(bad_metadata_names_the_key);
    RUN(rope_scaling_type_none_never_scales);
    RUN(rope_override_replaces_the_files_scaling);
    RUN(rope_override_yarn_knobs);
    RUN(rope_tables);
    RUN(geglu_uses_the_f16_table);
    RUN(attention_softcap_all_variants);
    return test_summary();
}
