/* rope_override.c - RoPE scaling chosen by the caller in place of the
 * file's (run / serve --rope-scaling, --rope-scale, --rope-freq-base,
 * --yarn-orig-ctx): how a model is stretched past the context it was
 * trained on. The meanings are llama.cpp's context parameters, so that a
 * command line carries over:
 *   type      none | linear | yarn; unset keeps the file's (absent in the
 *             file: linear, as llama.cpp). none never scales.
 *   factor    the context factor: positions are divided by it (linear,
 *             yarn); unset keeps the file's. YaRN needs one above 1.
 *   base      the global layers' frequency base (local sliding-window
 *             layers keep theirs, as llama.cpp's SWA layers do).
 *   orig      YaRN's original context (its correction dims).
 *   ext       YaRN's ramp mix (llama.cpp's --yarn-ext-factor): 1 for yarn
 *             and 0 otherwise unless given; any other scaling type with a
 *             mix gets YaRN's ramp too.
 *   yarn_attn the cos/sin multiplier where no ramp is mixed in (a mix sets
 *             its own from the factor, as llama.cpp does).
 *   beta_fast, beta_slow  the ramp's corners (32 and 1 unless given).
 * Refused for files whose scaling is more than these numbers: LongRoPE
 * (per-pair factor tensors chosen by the context: model_set_rope checks
 * the tensors) and deepseek2 (YaRN's factor is part of its attention
 * scale, set at load).
 */
#include <math.h>

#include "base/err.h"
#include "model/config.h"

static bool positive(float v) { return isfinite(v) && v > 0; }

bool rope_override_empty(const rope_override *o)
{
    return o->type == -1 && o->factor == 0 && o->base == 0 && o->orig == 0 && !o->ext_set && o->yarn_attn == 0 &&
           o->beta_fast == 0 && o->beta_slow == 0;
}

int model_config_rope_override(model_config *c, const char *path, const rope_override *o)
{
    if (o->type < -1 || o->type > ROPE_SCALING_YARN)
        return err_set(PL_EINVAL, "RoPE scaling type %d: none, linear or yarn", o->type);
    if (o->factor != 0 && !positive(o->factor))
        return err_set(PL_EINVAL, "RoPE scale %g: must be a finite number > 0", o->factor);
    if (o->base != 0 && !positive(o->base))
        return err_set(PL_EINVAL, "RoPE frequency base %g: must be a finite number > 0", o->base);
    if (o->ext_set && !(o->ext_factor >= 0 && o->ext_factor <= 1))
        return err_set(PL_EINVAL, "YaRN ext factor %g: must be in 0..1", o->ext_factor);
    if (o->yarn_attn != 0 && !positive(o->yarn_attn))
        return err_set(PL_EINVAL, "YaRN attention factor %g: must be a finite number > 0", o->yarn_attn);
    if ((o->beta_fast != 0 && !positive(o->beta_fast)) || (o->beta_slow != 0 && !positive(o->beta_slow)))
        return err_set(PL_EINVAL, "YaRN beta fast %g / slow %g: must be finite numbers > 0", o->beta_fast,
                       o->beta_slow);
    if (rope_override_empty(o)) return 0;
    if (c->rope_scaling.type == ROPE_SCALING_LONGROPE)
        return err_set(PL_EUNSUPPORTED, "%s: its LongRoPE scaling (factor tensors) cannot be replaced", path);
    if (c->mla.kv_lora_rank)
        return err_set(PL_EUNSUPPORTED, "%s: deepseek2's RoPE scaling is part of its attention scale: not replaceable",
                       path);
    rope_scaling rs = c->rope_scaling;
    if (o->type >= 0) rs.type = (rope_scaling_type)o->type;
    if (o->factor > 0) rs.factor = o->factor;
    if (o->orig) rs.ctx_orig = o->orig;
    if (o->ext_set) rs.ext_set = true, rs.ext_factor = o->ext_factor;
    if (o->yarn_attn > 0) rs.yarn_attn = o->yarn_attn;
    if (o->beta_fast > 0) rs.beta_fast = o->beta_fast;
    if (o->beta_slow > 0) rs.beta_slow = o->beta_slow;
    if (rs.type == ROPE_SCALING_YARN && !(rs.factor > 1.0f))
        return err_set(PL_EINVAL, "%s: YaRN needs a RoPE scale > 1 (it has %g)", path, rs.factor);
    const float fast = rs.beta_fast > 0 ? rs.beta_fast : ROPE_BETA_FAST;
    const float slow = rs.beta_slow > 0 ? rs.beta_slow : ROPE_BETA_SLOW;
    if (!(fast > slow)) /* the ramp runs from the fast corner down to the slow one */
        return err_set(PL_EINVAL, "YaRN beta fast %g must be above beta slow %g", fast, slow);
    float scale = c->rope_scale; /* the file's, also from its older rope.scale_linear key */
    if (rs.type == ROPE_SCALING_NONE) scale = 1.0f;
    else if (o->factor > 0 || o->type >= 0) scale = rs.factor > 0 ? 1.0f / rs.factor : scale;
    const bool local_own = c->local_window != 0; /* else the "local" RoPE is a copy of the global one */
    c->rope_scaling = rs;
    c->rope_scale = scale;
    if (o->base > 0) c->rope_base = o->base;
    if (!local_own) c->rope_base_local = c->rope_base, c->rope_scale_local = c->rope_scale;
    return 0;
}
