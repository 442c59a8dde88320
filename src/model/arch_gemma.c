/* arch_gemma.c - gemma, gemma2, gemma3, phi3 settings and GeGLU; see
 * arch_gemma.h. */
#include "model/arch_gemma.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>

#include "base/err.h"
#include "tensor/half.h"

static int opt_f32(const gguf_file *f, const char *arch, const char *name, float *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, name);
    const int rc = gguf_get_f32(f, key, out);
    if (rc == PL_ENOTFOUND) return 0;
    if (rc) return err_prefix(rc, "%s", gguf_path(f));
    if (!isfinite(*out) || *out < 0) return err_set(PL_EFORMAT, "%s: %s: %g must be finite and >= 0", gguf_path(f), key, *out);
    return 0;
}

/* 1 if found, 0 if absent, < 0 on error */
static int opt_u32(const gguf_file *f, const char *arch, const char *name, uint32_t *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, name);
    const int rc = gguf_get_u32(f, key, out);
    if (rc == PL_ENOTFOUND) return 0;
    if (rc) return err_prefix(rc, "%s", gguf_path(f));
    return 1;
}

/* gemma2/gemma3's local layers: window and pattern */
static int local_layers(const gguf_file *f, model_config *c, uint32_t window, uint32_t pattern)
{
    const char *a = c->arch_name;
    int rc = opt_u32(f, a, "attention.sliding_window_pattern", &pattern); /* >= layers: all local */
    if (rc < 0) return rc;
    if (window == 0) return err_set(PL_EFORMAT, "%s: %s.attention.sliding_window: 0", gguf_path(f), a);
    c->local_window = window;
    c->local_pattern = pattern;
    return 0;
}

/* llama.cpp's f_attention_scale for gemma2/3: the 27B shape scales by
 * dim / heads (its query_pre_attn_scalar), the others by the head dim */
static float gemma_q_scale(const model_config *c, uint32_t layers_27b)
{
    return c->n_layers == layers_27b ? 1.0f / sqrtf((float)(c->dim / c->n_heads)) : 1.0f / sqrtf((float)c->head_dim);
}

int arch_gemma_config(const gguf_file *f, model_config *c)
{
    const char *a = c->arch_name;
    int rc = 0;
    if (c->arch == ARCH_PHI3) {
        c->q_scale = 1.0f / sqrtf((float)c->head_dim);
        c->sliding_window = 0;
        return 0;
    }
    if (c->arch != ARCH_GEMMA && c->arch != ARCH_GEMMA2 && c->arch != ARCH_GEMMA3) return 0;
    if (c->n_heads == 0 || c->head_dim == 0) return 0; /* config_check names it */
    const uint32_t window = c->sliding_window;
    c->sliding_window = 0;
    c->embd_scale = sqrtf((float)c->dim);
    c->gelu = true;
    c->q_scale = 1.0f / sqrtf((float)c->head_dim);
    if (c->arch == ARCH_GEMMA) return 0;
    c->post_norms = true;
    if (c->arch == ARCH_GEMMA2) {
        c->attn_softcap = 50.0f;
        c->final_softcap = 30.0f;
        rc = opt_f32(f, a, "attn_logit_softcapping", &c->attn_softcap);
        if (!rc) rc = opt_f32(f, a, "final_logit_softcapping", &c->final_softcap);
        uint32_t w2 = 4096; /* gemma2's default; a 0 in the file is refused, not defaulted */
        const int found = rc ? 0 : opt_u32(f, a, "attention.sliding_window", &w2);
        if (found < 0) rc = found;
        if (!rc) rc = local_layers(f, c, w2, 2);
        if (!rc) rc = opt_f32(f, a, "rope.freq_base_swa", &c->rope_base_local);
        if (!rc && !(c->rope_base_local > 0)) rc = err_set(PL_EFORMAT, "%s: %s.rope.freq_base_swa: 0", gguf_path(f), a);
        c->q_scale = gemma_q_scale(c, 46);
        return rc;
    }
    /* gemma3 */
    rc = opt_f32(f, a, "final_logit_softcapping", &c->final_softcap);
    if (!rc && window) {
        rc = local_layers(f, c, window, 6);
        c->rope_base_local = 10000.0f;
        c->rope_scale_local = 1.0f;
        if (!rc) rc = opt_f32(f, a, "rope.freq_base_swa", &c->rope_base_local);
        if (!rc && !(c->rope_base_local > 0)) rc = err_set(PL_EFORMAT, "%s: %s.rope.freq_base_swa: 0", gguf_path(f), a);
    }
    c->q_scale = gemma_q_scale(c, 62);
    return rc;
}

static uint16_t gelu_table[1 << 16];
static pthread_once_t gelu_once = PTHREAD_ONCE_INIT;

static void gelu_table_init(void)
{
    const float coef_a = 0.044715f, sqrt_2_over_pi = 0.79788456080286535587989211986876f;
    for (uint32_t i = 0; i < 1u << 16; i++) {
        const float x = f16_to_f32((uint16_t)i);
        gelu_table[i] = f32_to_f16(0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * (1.0f + coef_a * x * x))));
    }
}

void gemma_geglu(float *a, const float *b, int n)
{
    pthread_once(&gelu_once, gelu_table_init);
    for (int i = 0; i < n; i++) {
        const float x = a[i];
        if (x <= -10.0f) a[i] = 0.0f;
        else if (x >= 10.0f) a[i] = x * b[i];
        else a[i] = f16_to_f32(gelu_table[f32_to_f16(x)]) * b[i];
    }
}

void gemma_softcap(float *x, size_t n, float cap)
{
    const float inv = 1.0f / cap;
    for (size_t i = 0; i < n; i++) x[i] = tanhf(x[i] * inv) * cap;
}
