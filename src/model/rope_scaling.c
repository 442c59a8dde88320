/* rope_scaling.c - RoPE scaling keys and tables; see rope_scaling.h. */
#include "model/rope_scaling.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"

static int key_f32(const gguf_file *f, const char *arch, const char *name, float *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, name);
    const int rc = gguf_get_f32(f, key, out);
    if (rc == PL_ENOTFOUND) return 0;
    if (rc) return err_prefix(rc, "%s", gguf_path(f));
    if (!isfinite(*out) || *out < 0)
        return err_set(PL_EFORMAT, "%s: %s: %g must be finite and >= 0", gguf_path(f), key, *out);
    return 0;
}

int rope_scaling_read(const gguf_file *f, const char *arch, uint32_t ctx_train, rope_scaling *out)
{
    rope_scaling rs = {.type = ROPE_SCALING_LINEAR, .attn_factor = 1.0f, .ctx_orig = ctx_train};
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    gguf_str st;
    int rc = gguf_get_str(f, key, &st);
    if (rc == 0) {
        static const struct { const char *name; rope_scaling_type t; } types[] = {
            {"none", ROPE_SCALING_NONE}, {"linear", ROPE_SCALING_LINEAR},
            {"yarn", ROPE_SCALING_YARN}, {"longrope", ROPE_SCALING_LONGROPE},
        };
        size_t i = 0;
        while (i < sizeof types / sizeof types[0] && !gguf_str_eq(st, types[i].name)) i++;
        if (i == sizeof types / sizeof types[0])
            return err_set(PL_EUNSUPPORTED, "%s: %s: unknown RoPE scaling type '%.*s' (none, linear, yarn, longrope)",
                           gguf_path(f), key, (int)(st.len > 32 ? 32 : st.len), st.ptr);
        rs.type = types[i].t;
    } else if (rc != PL_ENOTFOUND) {
        return err_prefix(rc, "%s", gguf_path(f));
    }
    rc = key_f32(f, arch, "rope.scaling.factor", &rs.factor);
    if (!rc) rc = key_f32(f, arch, "rope.scaling.attn_factor", &rs.attn_factor);
    if (rc) return rc;
    snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", arch);
    rc = gguf_get_u32(f, key, &rs.ctx_orig);
    if (rc && rc != PL_ENOTFOUND) return err_prefix(rc, "%s", gguf_path(f));
    if (rs.ctx_orig == 0) return err_set(PL_EFORMAT, "%s: %s: 0", gguf_path(f), key);
    if (rs.type == ROPE_SCALING_YARN && !(rs.factor > 1.0f))
        return err_set(PL_EFORMAT, "%s: %s.rope.scaling.factor: YaRN needs a factor > 1 (found %g)", gguf_path(f), arch,
                       rs.factor);
    *out = rs;
    return 0;
}

/* ggml_rope_yarn_corr_dim: the dim whose wavelength fits n_rot turns in
 * the original context. */
static float corr_dim(uint32_t n_dims, uint32_t ctx_orig, float n_rot, float base)
{
    return (float)n_dims * logf((float)ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * logf(base));
}

rope_spec rope_spec_make(const rope_scaling *rs, uint32_t rope_dim, float base, float freq_scale, float model_scale,
                         const float *ff)
{
    rope_spec r = {rope_dim, base, freq_scale, 0.0f, 1.0f, {0, 0}, ff};
    const float ext = rs->ext_set ? rs->ext_factor : rs->type == ROPE_SCALING_YARN ? 1.0f : 0.0f;
    if (ext != 0.0f) {
        /* llama_context: attn_factor = mscale(factor) / (1 + 0.1 ln
         * factor), which ggml's rope multiplies back (the caller's
         * yarn_attn is overwritten, as there) */
        r.ext_factor = ext;
        const float factor = 1.0f / model_scale;
        const float m = factor <= 1.0f ? 1.0f : 0.1f * logf(factor) + 1.0f;
        r.mscale = m * (1.0f / (1.0f + 0.1f * logf(factor)));
        const float fast = rs->beta_fast > 0 ? rs->beta_fast : ROPE_BETA_FAST;
        const float slow = rs->beta_slow > 0 ? rs->beta_slow : ROPE_BETA_SLOW;
        const float start = floorf(corr_dim(rope_dim, rs->ctx_orig, fast, base));
        const float end = ceilf(corr_dim(rope_dim, rs->ctx_orig, slow, base));
        r.corr[0] = start > 0 ? start : 0;
        r.corr[1] = end < (float)(rope_dim - 1) ? end : (float)(rope_dim - 1);
    } else if (rs->yarn_attn > 0) {
        r.mscale = rs->yarn_attn;
    }
    r.mscale *= rs->attn_factor;
    return r;
}

bool rope_spec_plain(const rope_spec *r) { return r->ext_factor == 0.0f && r->mscale == 1.0f; }

void rope_spec_table(const rope_spec *r, float *cs, int pos)
{
    const int half = (int)r->rope_dim / 2;
    const float theta_scale = powf(r->base, -2.0f / (float)r->rope_dim);
    float theta = (float)pos;
    for (int i = 0; i < half; i++) {
        const float ff = r->ff ? r->ff[i] : 1.0f;
        const float extrap = theta / ff, interp = r->freq_scale * extrap;
        float th = interp, m = r->mscale;
        if (r->ext_factor != 0.0f) {
            const float d = r->corr[1] - r->corr[0];
            const float y = ((float)i - r->corr[0]) / (d > 0.001f ? d : 0.001f); /* i0 / 2 = i */
            const float ramp = (1 - (y < 0 ? 0 : y > 1 ? 1 : y)) * r->ext_factor;
            th = interp * (1 - ramp) + extrap * ramp;
            m *= 1.0f + 0.1f * logf(1.0f / r->freq_scale);
        }
        cs[i] = cosf(th) * m;
        cs[half + i] = sinf(th) * m;
        theta *= theta_scale;
    }
}
