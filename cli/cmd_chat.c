/* cmd_chat.c - `pagellm chat`: an interactive multi-turn loop that keeps the
 * conversation's KV cache between turns.
 *
 * Each user line is one turn. The whole conversation is rendered with the
 * model's chat template and tokenized; the tokens the sequence already holds
 * are kept up to the first difference and only the rest is prefilled. So a
 * turn costs its new tokens, and the report on stderr says how many were
 * reused and how many were computed. Reads a pipe as well as a terminal.
 * With --json each turn is one JSON line on stdout instead (the rendered
 * prompt, the answer and the counts), for scripts and tests.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "gen_opts.h"
#include "generate.h"

#define CHAT_MAX_MSGS 1024

typedef struct {
    pl_chat_msg msgs[CHAT_MAX_MSGS];
    size_t n;
} chat_log;

static int chat_log_add(chat_log *l, const char *role, const char *content, size_t len)
{
    if (l->n >= CHAT_MAX_MSGS) return -1;
    char *c = strndup(content, len);
    if (!c) return -1;
    l->msgs[l->n++] = (pl_chat_msg){role, c};
    return 0;
}

static void chat_log_free(chat_log *l)
{
    for (size_t i = 0; i < l->n; i++) free((char *)l->msgs[i].content);
    l->n = 0;
}

/* Brings seq to ids: keeps the common prefix, prefills the rest; logits of
 * the last token go to logits. Returns the number of tokens reused. */
static int sync_seq(pl_ctx *c, int32_t seq, const int32_t *ids, size_t n, float *logits, size_t *reused)
{
    const int32_t *have = pl_seq_tokens(c, seq);
    /* after a window drop the kept tokens are no longer a prefix of ids
     * (the prefix cache still serves the blocks cached before the drop) */
    size_t k = 0, len = pl_seq_n_dropped(c, seq) ? 0 : pl_seq_len(c, seq);
    while (k < len && k < n && have[k] == ids[k]) k++;
    if (k == n) k--; /* the last token is always computed: its logits start the answer */
    if (pl_seq_truncate(c, seq, (uint32_t)k) != 0) return -1;
    *reused = k;
    return pl_seq_append(c, seq, ids + k, n - k, logits);
}

static const char *const plain_stops[] = {"\n\nUser:", "\nUser:"};

static void turn_json(int turn, const char *prompt, const gen_result *r, size_t n_ids, size_t reused,
                      double t_prefill, const char *tpl)
{
    json_t *o = json_pack("{s:i, s:s, s:s, s:s%, s:I, s:I, s:I, s:i, s:f, s:f, s:s}", "turn", turn, "template", tpl,
                          "prompt", prompt, "text", r->text, r->text_len, "prompt_tokens", (json_int_t)n_ids,
                          "reused_tokens", (json_int_t)reused, "prefilled_tokens", (json_int_t)(n_ids - reused),
                          "generated_tokens", r->n_ids, "prefill_s", t_prefill, "decode_s", r->decode_s,
                          "stop_reason", r->stop_reason);
    char *txt = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    puts(txt);
    fflush(stdout);
    free(txt);
    json_decref(o);
}

/* The model's Jinja template when it has one, else the built-in families. */
static int chat_prompt(const pl_model *m, const chat_log *log, char **prompt, const char **tpl)
{
    if (!pl_model_chat_template(m)) return pl_chat_render(m, log->msgs, log->n, true, prompt, tpl);
    json_t *a = json_array();
    for (size_t i = 0; a && i < log->n; i++) {
        json_t *msg = json_pack("{s:s, s:s}", "role", log->msgs[i].role, "content", log->msgs[i].content);
        if (!msg) { /* jansson takes only valid UTF-8 */
            fprintf(stderr, "pagellm chat: turn %zu is not valid UTF-8\n", i + 1);
            json_decref(a);
            return -1;
        }
        json_array_append_new(a, msg);
    }
    char *text = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    int rc = text ? pl_chat_apply(m, NULL, text, NULL, true, NULL, prompt) : -1;
    free(text);
    *tpl = "jinja";
    return rc;
}

static int chat_turn(pl_ctx *c, pl_model *m, int32_t seq, pl_sampler *s, float *logits, chat_log *log,
                     int n_predict, int turn, bool json)
{
    char *prompt;
    const char *tpl;
    size_t n_ids = 0, reused = 0;
    int32_t *ids = NULL;
    const pl_vocab *v = pl_model_vocab(m);
    if (chat_prompt(m, log, &prompt, &tpl) != 0) return -1;
    int rc = pl_tokenize(v, prompt, strlen(prompt), pl_vocab_add_bos(v), true, &ids, &n_ids);
    if (rc) { pl_free(prompt); return rc; }
    if (!pl_ctx_unbounded(c) && n_ids + (size_t)n_predict > pl_ctx_n_ctx(c)) {
        pl_free(ids);
        fprintf(stderr, "pagellm chat: the conversation (%zu tokens + %d to generate) no longer fits the context of %u tokens\n",
                n_ids, n_predict, pl_ctx_n_ctx(c));
        pl_free(prompt);
        return 1;
    }
    double t0 = now_seconds();
    rc = sync_seq(c, seq, ids, n_ids, logits, &reused);
    double t_prefill = now_seconds() - t0;
    pl_free(ids);
    if (rc) { pl_free(prompt); return rc; }
    bool plain = strcmp(tpl, "plain") == 0;
    gen_config gc = {n_predict, false, plain ? plain_stops : NULL, plain ? 2 : 0, json ? NULL : stdout};
    gen_result r;
    rc = generate(c, m, seq, s, logits, &gc, &r);
    if (rc) { pl_free(prompt); return rc; }
    if (json) {
        turn_json(turn, prompt, &r, n_ids, reused, t_prefill, tpl);
    } else {
        fputc('\n', stdout);
        fflush(stdout);
    }
    pl_free(prompt);
    const char *text = r.text;
    while (*text == ' ') text++;
    rc = chat_log_add(log, "assistant", text, strlen(text));
    pl_kv_stats st;
    pl_ctx_kv_stats(c, &st);
    size_t computed = n_ids - reused;
    fprintf(stderr, "[turn %d] prompt %zu tokens: %zu reused from the KV cache, %zu prefilled (%.1f tok/s); "
            "generated %d (%.1f tok/s, %s); kv blocks %u/%u, %llu bytes held\n",
            turn, n_ids, reused, computed, computed / (t_prefill > 0 ? t_prefill : 1e-9), r.n_ids,
            (r.n_ids > 1 ? r.n_ids - 1 : 0) / (r.decode_s > 0 ? r.decode_s : 1e-9), r.stop_reason, st.blocks_used,
            st.blocks_total, (unsigned long long)pl_seq_kv_bytes(c, seq));
    gen_result_free(&r);
    return rc;
}

int cmd_chat(int argc, char **argv)
{
    gen_opts g;
    gen_opts_default(&g);
    const char *system = NULL;
    int n_predict = 256;
    bool json = false;
    cli_opt opts[GEN_OPTS_N + 4]; /* + system, n-predict, json and the end mark */
    int n = 0;
    gen_opts_table(&g, opts, &n);
    opts[n++] = (cli_opt){"system", 0, CLI_STR, &system, 0, 0, "TEXT", "system message"};
    opts[n++] = (cli_opt){"n-predict", 'n', CLI_INT, &n_predict, 1, 1 << 20, "N", "tokens per answer at most (default 256)"};
    opts[n++] = (cli_opt){"json", 0, CLI_FLAG, &json, 0, 0, NULL, "one JSON line per turn (prompt, text, token counts)"};
    opts[n] = (cli_opt){0};
    const char *pos[1];
    int np, rc = cli_parse("chat", "-m MODEL [options]   (one user turn per input line; EOF or /exit ends)", opts,
                           argc, argv, pos, 0, &np);
    if (rc == CLI_HELP) return 0;
    if (rc != CLI_OK) return 2;
    if (!g.model) { cli_error("chat", "missing -m MODEL"); return 2; }
    pl_model *m = NULL;
    pl_ctx *c = NULL;
    pl_sampler *s = NULL;
    pl_sampler_params sp;
    int32_t seq = -1;
    rc = gen_opts_open("chat", &g, &m, &c);
    if (rc) return rc;
    gen_opts_sampler_params(&g, &sp);
    float *logits = malloc(sizeof(float) * pl_model_n_vocab(m));
    static chat_log log;
    if (!logits || pl_sampler_new(&s, &sp, (int32_t)pl_model_n_vocab(m)) != 0 || pl_seq_new(c, &seq) != 0) {
        cli_error("chat", "%s", pl_last_error());
        rc = 1;
    }
    if (!rc && system) chat_log_add(&log, "system", system, strlen(system));
    const bool tty = isatty(0);
    char *line = NULL;
    size_t cap = 0;
    for (int turn = 1; !rc; turn++) {
        if (tty && !json) { fputs("> ", stdout); fflush(stdout); }
        ssize_t len = getline(&line, &cap, stdin);
        if (len < 0) break;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (strcmp(line, "/exit") == 0) break;
        if (len == 0) { turn--; continue; }
        if (chat_log_add(&log, "user", line, (size_t)len) != 0) { cli_error("chat", "conversation too long"); rc = 1; break; }
        int trc = chat_turn(c, m, seq, s, logits, &log, n_predict, turn, json);
        if (trc < 0) { cli_error("chat", "%s", pl_last_error()); rc = 1; }
        else if (trc > 0) rc = 1;
    }
    free(line);
    chat_log_free(&log);
    free(logits);
    pl_sampler_free(s);
    pl_ctx_free(c);
    pl_model_free(m);
    return rc;
}
