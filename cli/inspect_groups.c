/* inspect_groups.c - the layer-groups section of `pagellm inspect`; see
 * inspect_groups.h. At f16: the global group keeps every token of the
 * context, each local group at most the blocks its window spans
 * (ceil((W - 1) / T) + 1 of them) plus the one being filled; the local
 * groups' padding slots (kv/kv_groups.h) are left out of the formula. */
#include "inspect_groups.h"

#include <stdio.h>

#include "cli.h"

typedef struct {
    uint32_t ctx, window_tokens;
    double global_bpt, local_bpt, one_bpt;
    double global_bytes, local_bytes, one_bytes;
} groups_fig;

static bool groups_compute(const pl_file_info *in, int block, groups_fig *f)
{
    const uint32_t n_local = in->local_layers, n_global = in->n_layers - in->local_layers, T = (uint32_t)block;
    if (!in->local_window || !n_local || !n_global || in->kv_lora_rank || !T) return false;
    pl_kv_shape g = {n_global, in->n_kv_heads, in->head_dim, T}, l = g, one = g;
    l.n_layers = n_local;
    one.n_layers = in->n_layers;
    pl_kv_size sg, sl, so;
    if (pl_kv_size_of(&g, PL_KV_F16, &sg) || pl_kv_size_of(&l, PL_KV_F16, &sl) || pl_kv_size_of(&one, PL_KV_F16, &so))
        return false;
    f->ctx = in->ctx_train ? in->ctx_train : 4096;
    f->window_tokens = ((in->local_window - 1 + T - 1) / T + 2) * T;
    if (f->window_tokens > f->ctx) f->window_tokens = f->ctx;
    f->global_bpt = sg.bytes_per_token, f->local_bpt = sl.bytes_per_token, f->one_bpt = so.bytes_per_token;
    f->global_bytes = f->global_bpt * f->ctx;
    f->local_bytes = f->local_bpt * f->window_tokens;
    f->one_bytes = f->one_bpt * f->ctx;
    return true;
}

void inspect_groups_print(const pl_file_info *in, int block)
{
    groups_fig f;
    char a[32], b[32], c[32], d[32];
    if (!groups_compute(in, block, &f)) return;
    printf("\nLayer groups (KV kind; f16, blocks of %d): %u global layers keep every token, %u local layers the last %u\n",
           block, in->n_layers - in->local_layers, in->local_layers, in->local_window);
    printf("  one sequence at context %u: global %s + local %s (at most %u tokens) = %s; one table %s (%.1f%% saved)\n",
           f.ctx, cli_human_bytes(f.global_bytes, a, sizeof a), cli_human_bytes(f.local_bytes, b, sizeof b),
           f.window_tokens, cli_human_bytes(f.global_bytes + f.local_bytes, c, sizeof c),
           cli_human_bytes(f.one_bytes, d, sizeof d), 100.0 * (1.0 - (f.global_bytes + f.local_bytes) / f.one_bytes));
}

json_t *inspect_groups_json(const pl_file_info *in, int block)
{
    groups_fig f;
    if (!groups_compute(in, block, &f)) return NULL;
    return json_pack("{s:i, s:i, s:i, s:f, s:f, s:i, s:f, s:f, s:f}", "global_layers",
                     (int)(in->n_layers - in->local_layers), "local_layers", (int)in->local_layers, "window",
                     (int)in->local_window, "global_bytes_per_token", f.global_bpt, "local_bytes_per_token", f.local_bpt,
                     "ctx", (int)f.ctx, "global_bytes", f.global_bytes, "local_bytes", f.local_bytes,
                     "one_table_bytes", f.one_bytes);
}
