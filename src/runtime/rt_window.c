/* rt_window.c - sequences that run past n_ctx by dropping KV blocks: a
 * sliding window with attention sinks (rt_params.kv_window / kv_sinks) and
 * sliding-window attention (rt_params.swa); the pieces an append runs in,
 * and the blocks the next append will take (for the engine's plan).
 *
 * Window with sinks: a sequence holds at most limit = sink_blocks x T +
 * kv_window tokens, where sink_blocks = ceil(kv_sinks / T) (sinks are
 * pinned in whole blocks). An append that would pass the limit first drops
 * the fewest whole blocks right after the sinks (kv_seq_drop_range),
 * re-rotates the keys of the blocks that moved down by the tokens dropped
 * (kv/kv_shift.h), and drops the same tokens from the history; new
 * tokens then continue at position = tokens kept, so the forward pass sees
 * ordinary positions. Appends longer than what fits run in pieces: up to
 * the limit, then one block (T tokens) per drop, so every token attends to
 * between limit - 2T + 1 and limit earlier tokens once the window is full.
 * A shifted sequence no longer publishes blocks to the prefix cache, nor
 * takes hits (its blocks are not at the positions their keys name); its
 * sink blocks keep the keys they had. n_dropped counts the tokens gone.
 *
 * Sliding-window attention (swa = the model's W in force, 0 if none): every
 * forward pass gets fwd_seq.window = W and pos0 = n_dropped, so the token
 * at cache slot j (absolute position pos0 + j) attends to slots > j - W and
 * is rotated at its absolute position. When blocks are freed (swa and not
 * swa_keep_blocks: "slides"), an append first drops from the FRONT of the
 * table the full blocks wholly before the window of its first new token
 * (kv_seq_drop_front, never the block of the last token held) and the same
 * history; nothing is rewritten, so the freed blocks keep their prefix keys
 * and the kept ones their content. Pieces are cut so that the kept tokens
 * plus the piece fit n_ctx slots (>= W + T, so at least 2 tokens a piece).
 * A sequence keeps publishing its full blocks to the prefix cache across
 * its drops (prefix_register_at: its cursor's chain runs from absolute
 * position 0, and every block is keyed after the step that fills it, before
 * any drop can take it); their K/V are those of absolute positions 0..
 * under the same window, so a later sequence of this context that hits
 * them (from position 0, at most n_ctx tokens, the rest streams through its
 * window) computes the same, up to the float noise of another chunking, as
 * any hit. SWA and kv_window exclude each other.
 *
 * Staged dtypes (rt_stage.c): a drop moves stage_end with the slots.
 */
#include "runtime/rt_impl.h"

#include <string.h>

#include "base/err.h"
#include "kv/kv_shift.h"

uint32_t rt_window_sink_blocks(const rt_params *p) { return (p->kv_sinks + p->block_size - 1) / p->block_size; }
uint32_t rt_window_limit(const rt_params *p) { return rt_window_sink_blocks(p) * p->block_size + p->kv_window; }

/* ------------------------------------------------------------------ SWA */

/* Front blocks of s that lie wholly before the window of its next token
 * (slot h = tokens held attends to slots > h - W), but never the block of
 * its last token (so slots stay aligned with blocks). */
static uint32_t swa_drop_blocks(const rt_ctx *c, const rt_seq *s)
{
    const uint32_t h = s->kv.n_tokens, t = c->p.block_size;
    if (h == 0 || h + 1 <= c->p.swa) return 0;
    const uint32_t k = (h + 1 - c->p.swa) / t, last = (h - 1) / t;
    return k < last ? k : last;
}

/* SWA's drop before an append of n tokens: frees the front blocks, moves the
 * history down; positions stay absolute (pos0 = n_dropped grows). PL_ERANGE
 * if the kept tokens and n do not fit n_ctx slots. */
static int swa_room(rt_ctx *c, rt_seq *s, uint32_t n)
{
    const uint32_t k = swa_drop_blocks(c, s), gone = k * c->p.block_size;
    if (s->kv.n_tokens - gone + (uint64_t)n > c->p.n_ctx)
        return err_set(PL_ERANGE, "sliding window: %u tokens at once do not fit the %u KV slots of a sequence "
                       "(%u kept for the window of %u)", n, c->p.n_ctx, s->kv.n_tokens - gone, c->p.swa);
    if (k == 0) return 0;
    int rc = kv_seq_drop_front(&s->kv, k);
    if (rc) return rc;
    s->stage_end = s->stage_end > gone ? s->stage_end - gone : 0; /* its block is kept: slots move down */
    memmove(s->tokens, s->tokens + gone, (size_t)(s->n_tokens - gone) * sizeof *s->tokens);
    s->n_tokens -= gone;
    s->n_dropped += gone;
    s->shifted = true;
    assert(s->n_tokens == s->kv.n_tokens);
    return 0;
}

/* ---------------------------------------------------- window with sinks */

/* Blocks to drop after the sinks so that n more tokens fit s's window
 * (0 if they fit already). */
static uint32_t win_drop_blocks(const rt_ctx *c, const rt_seq *s, uint32_t n)
{
    const uint32_t lim = rt_window_limit(&c->p), t = c->p.block_size;
    if (s->kv.n_tokens + n <= lim) return 0;
    return (s->kv.n_tokens + n - lim + t - 1) / t;
}

/* Re-rotates the keys of the blocks that moved down by `gone` positions
 * (now sb .. held - k - 1 of the table); a staged sequence's partly filled
 * block is in its stage, and so may be the last full one's rows. */
static void win_shift(rt_ctx *c, rt_seq *s, uint32_t sb, uint32_t end_block, uint32_t gone)
{
    const uint32_t t = c->p.block_size;
    for (uint32_t i = sb; i < end_block; i++) {
        const uint32_t rows = (i + 1) * t <= s->kv.n_tokens ? t : s->kv.n_tokens - i * t;
        if (!s->stage.rows || rows == t) kv_shift_block(&c->rope, &c->pool, s->kv.table[i], rows, gone, c->shift_scratch);
    }
}

int rt_win_room(rt_ctx *c, rt_seq *s, uint32_t n)
{
    if (c->p.swa) return swa_room(c, s, n);
    const uint32_t k = win_drop_blocks(c, s, n), t = c->p.block_size, sb = rt_window_sink_blocks(&c->p);
    if (k == 0) return 0;
    const uint32_t held = (s->kv.n_tokens + t - 1) / t;
    if (sb + k > held)
        return err_set(PL_ERANGE, "window: %u tokens at once do not fit a window of %u tokens after %u sink tokens",
                       n, c->p.kv_window, sb * t);
    const uint32_t from = sb * t, end = (sb + k) * t < s->kv.n_tokens ? (sb + k) * t : s->kv.n_tokens;
    const uint32_t gone = end - from;
    int rc = kv_seq_drop_range(&s->kv, sb, k);
    if (rc) return rc;
    win_shift(c, s, sb, held - k, gone);
    if (s->stage.rows && s->stage_end > from) {
        if (s->stage_end <= end) s->stage_end = from; /* its block was dropped */
        else {
            s->stage_end -= gone;
            kv_shift_stage(&c->rope, &c->pool, &s->stage, (s->stage_end - 1) % t + 1, gone, c->shift_scratch);
        }
    }
    memmove(s->tokens + from, s->tokens + end, (size_t)(s->n_tokens - end) * sizeof *s->tokens);
    s->n_tokens -= gone;
    s->n_dropped += gone;
    s->shifted = true;
    assert(s->n_tokens == s->kv.n_tokens);
    return 0;
}

/* ---------------------------------------------------------- both kinds */

uint32_t rt_win_max_piece(const rt_ctx *c, const rt_seq *s)
{
    if (c->p.swa) return c->p.n_ctx - (s->kv.n_tokens - swa_drop_blocks(c, s) * c->p.block_size);
    const uint32_t lim = rt_window_limit(&c->p);
    return s->n_tokens < lim ? lim - s->n_tokens : c->p.block_size;
}

/* With logits for the last token (all = false) or a row per token (all).
 * An empty, unshifted sequence first takes its cached prefix (not with
 * all: every position is computed then). */
int rt_win_append(rt_ctx *c, rt_seq *s, int32_t id, const int32_t *tokens, uint32_t n, float *logits, bool all)
{
    const size_t nv = c->m->cfg.n_vocab;
    uint32_t done = 0;
    if (s->n_tokens == 0 && c->prefix_ok && !all) {
        const uint32_t lim = c->p.swa ? c->p.n_ctx : rt_window_limit(&c->p);
        int hit = rt_seq_attach_prefix(c, id, tokens, n < lim ? n : lim, false);
        if (hit < 0) return hit;
        done = (uint32_t)hit;
    }
    while (done < n) {
        uint32_t piece = rt_win_max_piece(c, s);
        if (piece > n - done) piece = n - done;
        if (piece > c->p.max_batch) piece = c->p.max_batch;
        int rc = rt_win_room(c, s, piece);
        if (rc) return rc;
        memcpy(s->tokens + s->n_tokens, tokens + done, piece * sizeof *tokens);
        const bool last = done + piece == n;
        rt_run_item it = {.s = s, .from = s->n_tokens, .n = piece, .logits = all ? logits + (size_t)done * nv : last ? logits : NULL,
                          .all = all};
        rc = rt_run(c, &it, 1);
        if (rc) return rc; /* rt_run gave back the piece's KV slots */
        s->n_tokens += piece;
        rt_seq_publish(c, s);
        done += piece;
    }
    return 0;
}

uint32_t rt_seq_max_chunk(const rt_ctx *c, int32_t id)
{
    const rt_seq *s = rt_seq_get(c, id);
    if (!s) return 0;
    return rt_ctx_slides(c) ? rt_win_max_piece(c, s) : c->p.n_ctx - s->n_tokens;
}

/* ------------------------------------------------------------- counting */

/* rt_seq_append_cost with the window's drop; -1 when no drop is needed. */
static int64_t win_cost(const rt_ctx *c, const rt_seq *s, uint32_t n)
{
    if (!rt_ctx_slides(c)) return -1;
    int64_t need;
    if (c->p.swa) {
        const uint32_t k = swa_drop_blocks(c, s);
        if (k == 0) return -1;
        need = kv_seq_drop_front_append_cost(&s->kv, k, n);
    } else {
        const uint32_t k = win_drop_blocks(c, s, n), t = c->p.block_size, sb = rt_window_sink_blocks(&c->p);
        if (k == 0 || sb + k > (s->kv.n_tokens + t - 1) / t) return -1;
        need = kv_seq_drop_range_append_cost(&s->kv, sb, k, n);
    }
    return need > 0 ? need : 0;
}

uint32_t rt_seq_append_cost(const rt_ctx *c, int32_t id, uint32_t n)
{
    const rt_seq *s = rt_seq_get(c, id);
    if (!s) return 0;
    const int64_t w = win_cost(c, s, n);
    if (rt_groups_on(c)) { /* no window with groups: the local tables' drop and appends beside */
        const int64_t g = (int64_t)kv_seq_append_cost(&s->kv, n) + kv_glocal_append_cost(&c->kg, &s->lg, s->kv.n_tokens, n);
        return g > 0 ? (uint32_t)g : 0;
    }
    return w >= 0 ? (uint32_t)w : kv_seq_append_cost(&s->kv, n);
}
