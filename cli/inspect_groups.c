/* inspect_groups.c - the layer-groups section of `pagellm inspect`; see
 * inspect_groups.h. The figures are pl_kv_size_of_groups' at f16, for one
 * sequence at the train context (4096 if the file names none). */
#include "inspect_groups.h"

#include <stdio.h>

#include "cli.h"

static bool groups_compute(const pl_file_info *in, int block, uint32_t *ctx, pl_kv_groups_size *f)
{
    if (!in->local_window || in->kv_lora_rank || block <= 0) return false;
    pl_kv_shape shape = {in->n_layers, in->n_kv_heads, in->head_dim, (uint32_t)block};
    *ctx = in->ctx_train ? in->ctx_train : 4096;
    return pl_kv_size_of_groups(&shape, in->local_layers, in->local_window, PL_KV_F16, *ctx, f) == 0 && f->groups;
}

void inspect_groups_print(const pl_file_info *in, int block)
{
    pl_kv_groups_size f;
    uint32_t ctx;
    char a[32], b[32], c[32], d[32];
    if (!groups_compute(in, block, &ctx, &f)) return;
    const double both = (double)(f.global_bytes + f.local_bytes);
    printf("\nLayer groups (KV kind; f16, blocks of %d): %u global layers keep every token, %u local layers the "
           "last %u, in %u groups of %u layers a block\n",
           block, in->n_layers - in->local_layers, in->local_layers, in->local_window, f.groups, f.slots);
    printf("  one sequence at context %u: global %s + local %s = %s; one table %s (%.1f%% saved)\n", ctx,
           cli_human_bytes((double)f.global_bytes, a, sizeof a), cli_human_bytes((double)f.local_bytes, b, sizeof b),
           cli_human_bytes(both, c, sizeof c), cli_human_bytes((double)f.one_table_bytes, d, sizeof d),
           100.0 * (1.0 - both / (double)f.one_table_bytes));
}

json_t *inspect_groups_json(const pl_file_info *in, int block)
{
    pl_kv_groups_size f;
    uint32_t ctx;
    if (!groups_compute(in, block, &ctx, &f)) return NULL;
    return json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:I, s:I, s:I}", "global_layers",
                     (int)(in->n_layers - in->local_layers), "local_layers", (int)in->local_layers, "window",
                     (int)in->local_window, "groups", (int)f.groups, "slots", (int)f.slots, "ctx", (int)ctx,
                     "global_bytes", (json_int_t)f.global_bytes, "local_bytes", (json_int_t)f.local_bytes,
                     "one_table_bytes", (json_int_t)f.one_table_bytes);
}
