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
 * Refused for files whose scaling is more than these numbers: LongRoPE
 * (per-pair factor tensors chosen by the context: model_set_rope checks
 * the tensors) and deepseek2 (YaRN's factor is part of its attention
 * scale, set at load).
 */
#include <math.h>

#include "base/err.h"
#include "model/config.h"

int model_config_rope_override(model_config *c, const char *path, int type, float factor, float base,
                               uint32_t orig)
{
    if (type < -1 || type > ROPE_SCALING_YARN)
        return err_set(PL_EINVAL, "RoPE scaling type %d: none, linear or yarn", type);
    if (factor != 0 && !(isfinite(factor) && factor > 0))
        return err_set(PL_EINVAL, "RoPE scale %g: must be a finite number > 0", factor);
    if (base != 0 && !(isfinite(base) && base > 0))
        return err_set(PL_EINVAL, "RoPE frequency base %g: must be a finite number > 0", base);
    if (type == -1 && factor == 0 && base == 0 && orig == 0) return 0;
    if (c->rope_scaling.type == ROPE_SCALING_LONGROPE)
        return err_set(PL_EUNSUPPORTED, "%s: its LongRoPE scaling (factor tensors) cannot be replaced", path);
    if (c->mla.kv_lora_rank)
        return err_set(PL_EUNSUPPORTED, "%s: deepseek2's RoPE scaling is part of its attention scale: not replaceable",
                       path);
    rope_scaling rs = c->rope_scaling;
    if (type >= 0) rs.type = (rope_scaling_type)type;
    if (factor > 0) rs.factor = factor;
    if (orig) rs.ctx_orig = orig;
    if (rs.type == ROPE_SCALING_YARN && !(rs.factor > 1.0f))
        return err_set(PL_EINVAL, "%s: YaRN needs a RoPE scale > 1 (it has %g)", path, rs.factor);
    float scale = c->rope_scale; /* the file's, also from its older rope.scale_linear key */
    if (rs.type == ROPE_SCALING_NONE) scale = 1.0f;
    else if (factor > 0 || type >= 0) scale = rs.factor > 0 ? 1.0f / rs.factor : scale;
    const bool local_own = c->local_window != 0; /* else the "local" RoPE is a copy of the global one */
    c->rope_scaling = rs;
    c->rope_scale = scale;
    if (base > 0) c->rope_base = base;
    if (!local_own) c->rope_base_local = c->rope_base, c->rope_scale_local = c->rope_scale;
    return 0;
}
