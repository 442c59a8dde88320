/* run_engine.c - `pagellm run` with KV tiers: one request through an
 * in-process engine (one sequence), because the tiers (src/store, behind
 * pl_engine_params) live in the engine, not in a bare context. The engine
 * looks the prompt's full blocks up in the tiers before its prefill and
 * writes them behind; pl_engine_free writes what is still queued, so the
 * next run with the same --kv-disk DIR finds them. The report says how
 * many prompt tokens were served from the cache, and from the tiers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "run.h"

/* The engine's parameters: run's context flags, one sequence, the tiers;
 * no gathering of requests (there is only this one). */
static int run_engine_params(const run_opts *o, pl_engine_params *ep)
{
    pl_engine_params_default(ep);
    if (gen_opts_ctx_params("run", &o->g, &ep->ctx)) return 2;
    ep->ctx.max_seqs = 1;
    ep->max_batch_tokens = (uint32_t)o->g.batch;
    ep->max_queue = 1;
    ep->gather_us = 0;
    tier_opts_engine_params(&o->tiers, ep);
    return 0;
}

/* Reads the request's events into r, streaming text unless --json; the
 * DONE event's counts go to *done. 0, or 1 with the reason printed. */
static int run_engine_read(const run_opts *o, pl_request *req, double t0, double *t_first, gen_result *r,
                           pl_event *done)
{
    pl_event ev;
    size_t cap = 0;
    double t_last = t0;
    int k;
    while ((k = pl_request_next(req, &ev, -1)) == 1) {
        if (ev.kind == PL_EV_ERROR) { cli_error("run", "%s", ev.message); return 1; }
        if (ev.kind == PL_EV_TOKEN) {
            t_last = now_seconds();
            if (r->n_ids == 0) *t_first = t_last;
            if (r->n_ids < o->n_predict) r->ids[r->n_ids++] = ev.token;
        }
        if (ev.text_len && (ev.kind == PL_EV_TOKEN || ev.kind == PL_EV_DONE)) {
            if (gen_result_add_text(r, &cap, ev.text, ev.text_len)) { cli_error("run", "out of memory for the text"); return 1; }
            if (!o->json) { fwrite(ev.text, 1, ev.text_len, stdout); fflush(stdout); }
        }
        if (ev.kind == PL_EV_DONE) *done = ev;
    }
    if (k < 0) { cli_error("run", "reading the request: %s", pl_last_error()); return 1; }
    r->decode_s = r->n_ids ? t_last - *t_first : 0;
    r->stop_reason = done->finish_reason ? done->finish_reason : "length";
    if (!r->text) r->text = calloc(1, 1);
    return r->text ? 0 : 1;
}

/* The report's KV lines: the pool after the request (its blocks stay
 * cached for the next prompt) and what each tier did. */
static void run_engine_report(const pl_engine_metrics *m, size_t n_ids, const pl_event *done)
{
    fprintf(stderr, "cached    %u of %zu prompt tokens from the prefix cache, %llu of them loaded from the KV tiers\n",
            done->cached_tokens, n_ids, (unsigned long long)m->tier_hit_tokens);
    fprintf(stderr, "kv blocks %u used, %u cached / %u total (block %u tokens, %llu bytes) after the request\n",
            m->kv.blocks_used, m->kv.blocks_cached, m->kv.blocks_total, m->kv.block_size,
            (unsigned long long)m->kv.block_bytes);
    for (uint32_t i = 0; i < m->n_tiers; i++)
        fprintf(stderr, "kv tier   %s: %llu blocks found, %llu missed, %llu rejected, %llu handed to it to write\n",
                m->tiers[i].name, (unsigned long long)m->tiers[i].hits, (unsigned long long)m->tiers[i].misses,
                (unsigned long long)m->tiers[i].rejected, (unsigned long long)m->tiers[i].writes);
}

int run_engine(const run_opts *o, pl_model *m, const int32_t *ids, size_t n_ids)
{
    pl_engine_params ep;
    if (run_engine_params(o, &ep)) return 2;
    pl_engine *e;
    if (pl_engine_new(&e, m, &ep) != 0) { cli_error("run", "%s", pl_last_error()); return 1; }
    if (ep.ctx.n_ctx) gen_opts_ctx_warn("run", m, ep.ctx.n_ctx, ep.ctx.kv_window != 0); /* 0: within the trained one */
    pl_request_params rp = {0};
    rp.prompt = ids;
    rp.n_prompt = n_ids;
    rp.max_tokens = o->n_predict;
    rp.n = 1;
    gen_opts_sampler_params(&o->g, &rp.sampling);
    rp.stops = o->stops.v;
    rp.n_stops = (size_t)o->stops.n;
    rp.ignore_eos = o->ignore_eos;
    rp.top_logprobs = -1;
    gen_result r = {0};
    r.ids = calloc((size_t)o->n_predict, sizeof *r.ids);
    pl_event done = {0};
    pl_request *req = NULL;
    const double t0 = now_seconds();
    double t_first = t0;
    int rc = r.ids ? 0 : 1;
    if (!r.ids) cli_error("run", "out of memory for %d token ids", o->n_predict);
    int st;
    if (!rc && (st = pl_engine_submit(e, &rp, &req)) != 0) {
        cli_error("run", "%s", pl_last_error());
        rc = st == PL_ERR_RANGE || st == PL_ERR_INVAL ? 2 : 1; /* the prompt or a flag, as the context path says */
    }
    if (!rc) rc = run_engine_read(o, req, t0, &t_first, &r, &done);
    pl_request_free(req);
    pl_engine_metrics em;
    pl_engine_metrics_get(e, &em);
    pl_engine_free(e); /* writes what the tiers still have queued */
    if (!rc) {
        if (o->json) {
            json_t *j = run_json_base(ids, n_ids, t_first - t0, &r);
            json_object_set_new(j, "cached_tokens", json_integer(done.cached_tokens));
            json_object_set_new(j, "tier_tokens", json_integer((json_int_t)em.tier_hit_tokens));
            run_json_print(j);
        } else {
            run_print_head((int)n_ids, t_first - t0, &r);
            run_engine_report(&em, n_ids, &done);
        }
    }
    gen_result_free(&r);
    return rc;
}
