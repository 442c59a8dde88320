/* cmd_perplexity.c - `pagellm perplexity`: how well a model (with a given KV
 * cache dtype) predicts a text, in the manner of llama.cpp's
 * llama-perplexity, and how far one run's next-token distributions are from
 * another's (KL divergence), so that every KV dtype has a quality figure
 * beside its memory figure.
 *
 *   pagellm perplexity -m MODEL -f TEXT [--ctx N] [--kv-dtype T] [--chunks N]
 *                      [--save-logits F [--save-top-k K]] [--kl-base F] [--json]
 *
 * Chunking and scoring (llama-perplexity's rule, so figures compare):
 *   - TEXT is tokenized whole, BOS first when the vocabulary adds one, no
 *     special-token parsing: ids[0..n).
 *   - The ids are cut into n_chunks = n / n_ctx chunks of n_ctx ids
 *     (--ctx; default 512, or the model's train context if smaller); the
 *     tail that does not fill a chunk is not used. --chunks caps n_chunks.
 *   - Each chunk is evaluated from a fresh, empty sequence at positions
 *     0..n_ctx-1, its first id replaced by BOS (when the vocabulary adds
 *     one), so every chunk starts as a document does.
 *   - With first = n_ctx / 2 (integer division), the logits at positions
 *     first..n_ctx-2 score the ids at first+1..n_ctx-1: n_ctx - 1 - first
 *     tokens per chunk, each predicted from at least first tokens of
 *     context. The first half of a chunk only builds context.
 *   - nll_i = logsumexp(logits) - logits[target] (in double);
 *     ppl = exp(mean nll); ppl_err = ppl * sqrt((E[nll^2] - E[nll]^2) / (N - 1)),
 *     the standard error of the mean carried through exp, as llama.cpp's.
 *   Differences from llama-perplexity: one chunk suffices (llama.cpp asks
 *   for 2 x n_ctx tokens); chunks are evaluated one at a time; the last id
 *   of a chunk is never run through the model (its logits score nothing).
 *
 * --stream (StreamingLLM's evaluation, for --kv-window): the whole text is
 * fed through ONE sequence, BOS first, and every token from the second on
 * is scored by the logits of the one before it (logits at position i score
 * ids[i+1]); --chunks N caps the stream at N x 512 tokens. With --kv-window
 * W [--kv-sinks S] the sequence keeps S (whole blocks) + W tokens and runs
 * past --ctx and the train context; without a window the whole stream must
 * fit --ctx (default: the stream's length), which shows full attention past
 * the train context. The report adds the perplexity of each segment of
 * --segment tokens (default: the train context) along the stream. Not with
 * --save-logits / --kl-base.
 *
 * --save-logits F writes the log-probabilities of every scored position
 * (full distributions by default; --save-top-k K keeps the K most likely
 * tokens plus the log of the rest's mass, for vocabularies where full rows
 * would be huge: full rows cost 4 x n_vocab bytes per scored token).
 * --kl-base F evaluates the tokens stored in F (with -f, the text must
 * tokenize to them) and reports, per scored position, KL(base || this run)
 * = sum_i p_i (log p_i - log q_i): its mean with standard error, median,
 * 99th percentile and maximum; the share of positions whose most likely
 * token agrees ("same top"); and the base run's perplexity. With a top-K
 * base, the tokens outside the base's top K are merged into one "rest"
 * outcome on both sides, which gives a lower bound of the KL (merging
 * outcomes never increases it), exact when the rest's mass is negligible.
 * Log-probs are rounded to f32 the same way when saved and when compared,
 * so a run compared with its own file gives KL exactly 0.
 *
 * Log-prob file (ours, not llama.cpp's uint16 --kl-divergence-base format),
 * little-endian:
 *
 *   header, 256 bytes (unused bytes 0)
 *     0   char[8]  magic "PLLOGPRB"
 *     8   u32      version (1)
 *    12   u32      n_vocab            logits per position
 *    16   u32      n_ctx              chunk length
 *    20   u32      first              first scored logits position (n_ctx / 2)
 *    24   u32      n_chunks
 *    28   u32      top_k              0 = full rows
 *    32   u32      flags              bit 0: chunks start with BOS
 *    36   u32      n_layers, dim, n_heads, n_kv_heads, head_dim, ffn_dim (to 60)
 *    60   u64      n_records          n_chunks x (n_ctx - 1 - first)
 *    68   u64      vocab_hash         FNV-1a 64 of every token piece, BOS, EOS
 *    76   u64      weights_bytes      informational
 *    84   char[32] architecture;  116 char[64] model file name;  180 char[16] KV dtype
 *   tokens: i32[n_chunks x n_ctx]     the ids evaluated (before BOS replacement)
 *   records, one per scored position, chunk by chunk:
 *     i32 argmax | f32 log-prob of the target | full: f32 logp[n_vocab]
 *                                              | top-K: f32 log(rest mass), K x (i32 id, f32 logp), descending
 *
 * --kl-base refuses (exit 1, naming what differs) a file that is not ours,
 * truncated, from another vocabulary (size or pieces), another architecture
 * or shape (layers, dims, heads), another --ctx, or other tokens. The
 * weight types may differ: comparing a quantized model with its f16 source
 * is what KL is for.
 *
 * Exit codes: 0 ok; 1 runtime failure (an unreadable, empty or too short
 * text, a model that does not load, a KV dtype the model cannot hold, a
 * mismatched or corrupt --kl-base file, a --save-logits file that cannot be
 * written), each named; 2 usage errors.
 */
#include <assert.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "gen_opts.h"
#include "generate.h"

#define CMD "perplexity"
#define DEFAULT_CTX 512u

/* ------------------------------------------------------------------ flags */

typedef struct {
    gen_opts g;
    const char *text_path, *save_path, *base_path;
    int top_k, max_chunks, segment;
    bool json, stream;
} ppl_opts;

/* The shared flags that make sense here, taken from gen_opts' table so that
 * they are spelled and checked alike; --ctx gets its own help. */
static int ppl_parse(int argc, char **argv, ppl_opts *o)
{
    static const char *const shared[] = {"model",           "kv-dtype",         "threads",        "batch",
                                         "block-size",      "kv-layout",        "kv-window",      "kv-sinks",
                                         "swa",             "rope-scaling",     "rope-scale",     "rope-freq-base",
                                         "yarn-orig-ctx",   "yarn-ext-factor",  "yarn-attn-factor", "yarn-beta-fast",
                                         "yarn-beta-slow",  NULL};
    gen_opts_default(&o->g);
    cli_opt all[GEN_OPTS_N + 1], opts[40];
    int n_all = 0, n = 0;
    gen_opts_table(&o->g, all, &n_all);
    for (const char *const *s = shared; *s; s++)
        for (int i = 0; i < n_all; i++)
            if (strcmp(all[i].name, *s) == 0) opts[n++] = all[i];
    const cli_opt mine[] = {
        {"file", 'f', CLI_STR, &o->text_path, 0, 0, "TEXT", "the text to score (- = stdin)"},
        {"ctx", 'c', CLI_INT, &o->g.ctx, 4, 1 << 20, "N", "chunk length in tokens (default 512, or the train context if smaller)"},
        {"chunks", 0, CLI_INT, &o->max_chunks, 1, 1 << 30, "N", "score at most N chunks (default: all)"},
        {"save-logits", 0, CLI_STR, &o->save_path, 0, 0, "F", "write the scored positions' log-probs to F"},
        {"save-top-k", 0, CLI_INT, &o->top_k, 1, 1 << 24, "K", "with --save-logits: keep the K most likely tokens + the rest's mass"},
        {"kl-base", 0, CLI_STR, &o->base_path, 0, 0, "F", "KL divergence against the run that saved F (its tokens unless -f)"},
        {"json", 0, CLI_FLAG, &o->json, 0, 0, NULL, "print one JSON object"},
        {"stream", 0, CLI_FLAG, &o->stream, 0, 0, NULL, "score every token of the text fed through one sequence (with --kv-window: past the context)"},
        {"segment", 0, CLI_INT, &o->segment, 1, 1 << 24, "N", "with --stream: also report the perplexity of every N tokens (default: train context)"},
        {0},
    };
    for (const cli_opt *x = mine; x->name; x++) opts[n++] = *x;
    assert(n < (int)(sizeof opts / sizeof opts[0]));
    opts[n] = (cli_opt){0};
    const char *pos[1];
    int np, rc = cli_parse(CMD, "-m MODEL -f TEXT [options]", opts, argc, argv, pos, 0, &np);
    if (rc == CLI_HELP) return -1;
    if (rc != CLI_OK) return 2;
    if (!o->g.model) { cli_error(CMD, "missing -m MODEL"); return 2; }
    if (!o->text_path && !o->base_path) { cli_error(CMD, "missing -f TEXT (or --kl-base F, whose tokens are used)"); return 2; }
    if (o->top_k && !o->save_path) { cli_error(CMD, "--save-top-k needs --save-logits F"); return 2; }
    if (o->stream && (o->save_path || o->base_path)) {
        cli_error(CMD, "--stream does not combine with --save-logits / --kl-base");
        return 2;
    }
    if (o->stream && !o->text_path) { cli_error(CMD, "--stream needs -f TEXT"); return 2; }
    if (o->segment && !o->stream) { cli_error(CMD, "--segment needs --stream"); return 2; }
    if (o->g.kv_window && !o->stream) {
        cli_error(CMD, "--kv-window needs --stream (chunks are scored from fresh sequences of --ctx tokens)");
        return 2;
    }
    if (o->save_path && o->base_path && strcmp(o->save_path, o->base_path) == 0) {
        cli_error(CMD, "--save-logits and --kl-base name the same file '%s'", o->save_path);
        return 2;
    }
    return 0;
}

/* -------------------------------------------------------- log-prob file */

#define LP_MAGIC "PLLOGPRB"
#define LP_VERSION 1u
#define LP_HEADER_BYTES 256
#define LP_FLAG_BOS 1u

typedef struct {
    uint32_t n_vocab, n_ctx, first, n_chunks, top_k, flags;
    uint32_t n_layers, dim, n_heads, n_kv_heads, head_dim, ffn_dim;
    uint64_t n_records, vocab_hash, weights_bytes;
    char arch[32], model[64], kv_dtype[16];
} lp_header;

static void put32(uint8_t *b, size_t *at, uint32_t v)
{
    for (int i = 0; i < 4; i++) b[(*at)++] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *b, size_t *at, uint64_t v)
{
    for (int i = 0; i < 8; i++) b[(*at)++] = (uint8_t)(v >> (8 * i));
}
static void putf(uint8_t *b, size_t *at, float f)
{
    uint32_t v;
    memcpy(&v, &f, 4);
    put32(b, at, v);
}
static void putstr(uint8_t *b, size_t *at, const char *s, size_t n)
{
    memset(b + *at, 0, n);
    size_t k = strlen(s);
    memcpy(b + *at, s, k < n - 1 ? k : n - 1);
    *at += n;
}
static uint32_t get32(const uint8_t *b, size_t *at)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)b[(*at)++] << (8 * i);
    return v;
}
static uint64_t get64(const uint8_t *b, size_t *at)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)b[(*at)++] << (8 * i);
    return v;
}
static float getf(const uint8_t *b, size_t *at)
{
    uint32_t v = get32(b, at);
    float f;
    memcpy(&f, &v, 4);
    return f;
}
static void getstr(const uint8_t *b, size_t *at, char *s, size_t n)
{
    memcpy(s, b + *at, n);
    s[n - 1] = '\0';
    *at += n;
}

static void lp_header_encode(const lp_header *h, uint8_t out[LP_HEADER_BYTES])
{
    size_t at = 0;
    memset(out, 0, LP_HEADER_BYTES);
    memcpy(out, LP_MAGIC, 8);
    at = 8;
    const uint32_t u[] = {LP_VERSION, h->n_vocab, h->n_ctx, h->first, h->n_chunks, h->top_k, h->flags,
                          h->n_layers, h->dim, h->n_heads, h->n_kv_heads, h->head_dim, h->ffn_dim};
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) put32(out, &at, u[i]);
    put64(out, &at, h->n_records);
    put64(out, &at, h->vocab_hash);
    put64(out, &at, h->weights_bytes);
    putstr(out, &at, h->arch, sizeof h->arch);
    putstr(out, &at, h->model, sizeof h->model);
    putstr(out, &at, h->kv_dtype, sizeof h->kv_dtype);
}

/* Decodes and checks the header's own consistency; names path on failure. */
static int lp_header_decode(const uint8_t in[LP_HEADER_BYTES], const char *path, lp_header *h)
{
    if (memcmp(in, LP_MAGIC, 8) != 0) {
        cli_error(CMD, "%s is not a log-prob file written by `pagellm perplexity --save-logits`", path);
        return 1;
    }
    size_t at = 8;
    uint32_t version = get32(in, &at);
    if (version != LP_VERSION) {
        cli_error(CMD, "%s: log-prob file version %u, this pagellm reads version %u", path, version, LP_VERSION);
        return 1;
    }
    uint32_t *u[] = {&h->n_vocab, &h->n_ctx, &h->first, &h->n_chunks, &h->top_k, &h->flags,
                     &h->n_layers, &h->dim, &h->n_heads, &h->n_kv_heads, &h->head_dim, &h->ffn_dim};
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) *u[i] = get32(in, &at);
    h->n_records = get64(in, &at);
    h->vocab_hash = get64(in, &at);
    h->weights_bytes = get64(in, &at);
    getstr(in, &at, h->arch, sizeof h->arch);
    getstr(in, &at, h->model, sizeof h->model);
    getstr(in, &at, h->kv_dtype, sizeof h->kv_dtype);
    if (h->n_vocab == 0 || h->n_ctx < 4 || h->n_ctx > (1u << 20) || h->first != h->n_ctx / 2 || h->n_chunks == 0 ||
        h->n_chunks > (1u << 30) / h->n_ctx || h->top_k >= h->n_vocab ||
        h->n_records != (uint64_t)h->n_chunks * (h->n_ctx - 1 - h->first)) {
        cli_error(CMD, "%s: corrupt header (n_vocab %u, n_ctx %u, first %u, n_chunks %u, top_k %u, records %llu)", path,
                  h->n_vocab, h->n_ctx, h->first, h->n_chunks, h->top_k, (unsigned long long)h->n_records);
        return 1;
    }
    return 0;
}

static size_t lp_record_bytes(uint32_t top_k, uint32_t n_vocab)
{
    return 8 + (top_k ? 4 + 8 * (size_t)top_k : 4 * (size_t)n_vocab);
}

static uint64_t lp_file_bytes(const lp_header *h)
{
    return LP_HEADER_BYTES + 4ull * h->n_chunks * h->n_ctx + h->n_records * lp_record_bytes(h->top_k, h->n_vocab);
}

/* FNV-1a 64 over every token piece (NUL-separated), BOS and EOS: two runs
 * whose vocabularies hash alike give their log-probs the same meaning. */
static uint64_t vocab_hash(const pl_vocab *v)
{
    uint64_t h = 0xcbf29ce484222325ull;
    const uint64_t prime = 0x100000001b3ull;
    for (int32_t id = 0; id < pl_vocab_size(v); id++) {
        for (const unsigned char *p = (const unsigned char *)pl_token_piece(v, id); *p; p++) h = (h ^ *p) * prime;
        h = (h ^ 0xffu) * prime;
    }
    const int32_t special[2] = {pl_vocab_bos(v), pl_vocab_eos(v)};
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++) h = (h ^ ((uint32_t)special[i] >> (8 * k) & 0xffu)) * prime;
    return h;
}

/* The header fields that describe this model and run. */
static int describe_run(const char *model_path, const pl_model *m, const char *kv_dtype, lp_header *h)
{
    pl_file_info *fi = calloc(1, sizeof *fi);
    if (!fi || pl_file_inspect(model_path, fi) != 0) {
        cli_error(CMD, "%s", fi ? pl_last_error() : "out of memory");
        free(fi);
        return 1;
    }
    memset(h, 0, sizeof *h);
    h->n_vocab = pl_model_n_vocab(m);
    h->n_layers = fi->n_layers, h->dim = fi->dim, h->n_heads = fi->n_heads;
    h->n_kv_heads = fi->n_kv_heads, h->head_dim = fi->head_dim, h->ffn_dim = fi->ffn_dim;
    h->vocab_hash = vocab_hash(pl_model_vocab(m));
    h->weights_bytes = fi->weights_bytes;
    snprintf(h->arch, sizeof h->arch, "%s", fi->arch);
    const char *slash = strrchr(model_path, '/');
    snprintf(h->model, sizeof h->model, "%s", slash ? slash + 1 : model_path);
    snprintf(h->kv_dtype, sizeof h->kv_dtype, "%s", kv_dtype);
    free(fi);
    return 0;
}

static void shape_text(const lp_header *h, char *s, size_t n)
{
    snprintf(s, n, "%s with %u layers, dim %u, %u heads, %u KV heads, head dim %u, ffn %u", h->arch, h->n_layers,
             h->dim, h->n_heads, h->n_kv_heads, h->head_dim, h->ffn_dim);
}

/* Refuses a base file made for another vocabulary or model shape. */
static int lp_check_model(const lp_header *base, const lp_header *me, const char *path)
{
    if (base->n_vocab != me->n_vocab) {
        cli_error(CMD, "%s: written for a vocabulary of %u tokens; this model has %u", path, base->n_vocab, me->n_vocab);
        return 1;
    }
    if (base->vocab_hash != me->vocab_hash) {
        cli_error(CMD, "%s: written with another tokenizer (vocabulary fingerprint %016llx; this model's %016llx)",
                  path, (unsigned long long)base->vocab_hash, (unsigned long long)me->vocab_hash);
        return 1;
    }
    char a[200], b[200];
    shape_text(base, a, sizeof a);
    shape_text(me, b, sizeof b);
    if (strcmp(a, b) != 0) {
        cli_error(CMD, "%s: written for %s (%s); this model is %s. --kl-base compares runs of one model "
                  "(its weight types may differ)", path, base->model, a, b);
        return 1;
    }
    return 0;
}

/* One scored position of a log-prob file, decoded. */
typedef struct {
    int32_t argmax;
    float target_lp;
    float log_rest;    /* top-K: log of the mass outside the K */
    float *lp;         /* full: [n_vocab]; top-K: [K] */
    int32_t *ids;      /* top-K: [K], descending by lp */
} lp_record;

typedef struct {
    FILE *f;
    const char *path;
    lp_header h;
    int32_t *tokens;   /* [n_chunks x n_ctx] */
    uint8_t *buf;      /* one encoded record */
    lp_record rec;
} lp_reader;

static void lp_reader_close(lp_reader *r)
{
    if (r->f) fclose(r->f);
    free(r->tokens);
    free(r->buf);
    free(r->rec.lp);
    free(r->rec.ids);
    memset(r, 0, sizeof *r);
}

/* Opens a base file, checks it against this model (me) and its size, and
 * reads its tokens. */
static int lp_reader_open(lp_reader *r, const char *path, const lp_header *me)
{
    memset(r, 0, sizeof *r);
    r->path = path;
    uint8_t hb[LP_HEADER_BYTES];
    r->f = fopen(path, "rb");
    if (!r->f) { cli_error(CMD, "cannot read --kl-base file '%s'", path); return 1; }
    if (fread(hb, 1, sizeof hb, r->f) != sizeof hb) {
        cli_error(CMD, "%s is not a log-prob file written by `pagellm perplexity --save-logits` (too short)", path);
        return 1;
    }
    int rc = lp_header_decode(hb, path, &r->h);
    if (!rc) rc = lp_check_model(&r->h, me, path);
    if (rc) return rc;
    long size = -1;
    if (fseek(r->f, 0, SEEK_END) == 0) size = ftell(r->f);
    if (size < 0 || (uint64_t)size != lp_file_bytes(&r->h) || fseek(r->f, LP_HEADER_BYTES, SEEK_SET) != 0) {
        cli_error(CMD, "%s: truncated or corrupt: %ld bytes, the header promises %llu", path, size,
                  (unsigned long long)lp_file_bytes(&r->h));
        return 1;
    }
    const size_t n_tok = (size_t)r->h.n_chunks * r->h.n_ctx, k = r->h.top_k;
    r->tokens = malloc(4 * n_tok);
    r->buf = malloc(lp_record_bytes(r->h.top_k, r->h.n_vocab));
    r->rec.lp = malloc(4 * (k ? k : r->h.n_vocab));
    r->rec.ids = malloc(4 * (k ? k : 1));
    uint8_t *tb = malloc(4 * n_tok);
    if (!r->tokens || !r->buf || !r->rec.lp || !r->rec.ids || !tb) {
        free(tb);
        cli_error(CMD, "out of memory reading %s", path);
        return 1;
    }
    rc = fread(tb, 4, n_tok, r->f) == n_tok ? 0 : 1;
    size_t at = 0;
    for (size_t i = 0; !rc && i < n_tok; i++) {
        r->tokens[i] = (int32_t)get32(tb, &at);
        if (r->tokens[i] < 0 || (uint32_t)r->tokens[i] >= r->h.n_vocab) rc = 1;
    }
    free(tb);
    if (rc) cli_error(CMD, "%s: corrupt token ids", path);
    return rc;
}

/* Reads the next record; mark (n_vocab zeros) catches repeated ids. */
static int lp_reader_next(lp_reader *r)
{
    const size_t nb = lp_record_bytes(r->h.top_k, r->h.n_vocab);
    if (fread(r->buf, 1, nb, r->f) != nb) {
        cli_error(CMD, "%s: cannot read a log-prob record", r->path);
        return 1;
    }
    size_t at = 0;
    lp_record *x = &r->rec;
    x->argmax = (int32_t)get32(r->buf, &at);
    x->target_lp = getf(r->buf, &at);
    int bad = x->argmax < 0 || (uint32_t)x->argmax >= r->h.n_vocab;
    if (r->h.top_k == 0) {
        for (uint32_t i = 0; i < r->h.n_vocab; i++) x->lp[i] = getf(r->buf, &at);
    } else {
        x->log_rest = getf(r->buf, &at);
        for (uint32_t k = 0; k < r->h.top_k; k++) {
            x->ids[k] = (int32_t)get32(r->buf, &at);
            x->lp[k] = getf(r->buf, &at);
            bad |= x->ids[k] < 0 || (uint32_t)x->ids[k] >= r->h.n_vocab;
        }
    }
    if (bad) cli_error(CMD, "%s: corrupt log-prob record (token id out of range)", r->path);
    return bad;
}

/* ------------------------------------------------------------- the maths */

/* log-sum-exp of a row in double, and its first largest entry. */
static double row_lse(const float *l, uint32_t n, int32_t *argmax)
{
    uint32_t am = 0;
    for (uint32_t i = 1; i < n; i++)
        if (l[i] > l[am]) am = i;
    double s = 0;
    for (uint32_t i = 0; i < n; i++) s += exp((double)l[i] - l[am]);
    *argmax = (int32_t)am;
    return (double)l[am] + log(s);
}

/* The log-prob as saved: rounded to f32, the same way on both sides of a
 * comparison so that a run against its own file gives exactly 0. */
static inline float lp_of(const float *l, double lse, uint32_t i) { return (float)((double)l[i] - lse); }

/* The mass outside the marked ids, and its log as saved. */
static float log_rest_mass(const float *l, double lse, uint32_t n, const uint8_t *mark)
{
    double s = 0;
    for (uint32_t i = 0; i < n; i++)
        if (!mark[i]) s += exp((double)l[i] - lse);
    return (float)log(s);
}

/* ids[0..k) = the k largest entries of l, descending (ties: lower id first).
 * A min-heap of k keeps the selection O(n log k). */
static bool heap_less(const float *l, int32_t a, int32_t b) { return l[a] < l[b] || (l[a] == l[b] && a > b); }

static void heap_down(const float *l, int32_t *h, uint32_t n, uint32_t i)
{
    for (;;) {
        uint32_t c = 2 * i + 1, m = i;
        if (c < n && heap_less(l, h[c], h[m])) m = c;
        if (c + 1 < n && heap_less(l, h[c + 1], h[m])) m = c + 1;
        if (m == i) return;
        int32_t t = h[i];
        h[i] = h[m], h[m] = t, i = m;
    }
}

static void top_k_ids(const float *l, uint32_t n, uint32_t k, int32_t *ids)
{
    for (uint32_t i = 0; i < k; i++) ids[i] = (int32_t)i;
    for (uint32_t i = k / 2; i-- > 0;) heap_down(l, ids, k, i);
    for (uint32_t i = k; i < n; i++)
        if (heap_less(l, ids[0], (int32_t)i)) ids[0] = (int32_t)i, heap_down(l, ids, k, 0);
    for (uint32_t m = k; m > 1; m--) { /* heap sort: the smallest goes to the back */
        int32_t t = ids[0];
        ids[0] = ids[m - 1], ids[m - 1] = t;
        heap_down(l, ids, m - 1, 0);
    }
}

/* KL(base || this) at one position; mark is n zeros, left as found. */
static double kl_at(const lp_reader *b, const float *l, double lse, uint32_t n, uint8_t *mark)
{
    const lp_record *x = &b->rec;
    double kl = 0;
    if (b->h.top_k == 0) {
        for (uint32_t i = 0; i < n; i++) {
            double p = exp((double)x->lp[i]);
            if (p > 0) kl += p * ((double)x->lp[i] - lp_of(l, lse, i));
        }
        return kl;
    }
    for (uint32_t k = 0; k < b->h.top_k; k++) {
        uint32_t id = (uint32_t)x->ids[k];
        kl += exp((double)x->lp[k]) * ((double)x->lp[k] - lp_of(l, lse, id));
        mark[id] = 1;
    }
    double p_rest = exp((double)x->log_rest);
    if (p_rest > 0) kl += p_rest * ((double)x->log_rest - log_rest_mass(l, lse, n, mark));
    for (uint32_t k = 0; k < b->h.top_k; k++) mark[x->ids[k]] = 0;
    return kl;
}

/* Sums for a mean and its standard error. */
typedef struct {
    double s, s2;
    uint64_t n;
} msum;

static void msum_add(msum *m, double v) { m->s += v, m->s2 += v * v, m->n++; }
static double msum_mean(const msum *m) { return m->n ? m->s / (double)m->n : 0; }
static double msum_err(const msum *m)
{
    if (m->n < 2) return 0;
    double mu = msum_mean(m), var = m->s2 / (double)m->n - mu * mu;
    return var > 0 ? sqrt(var / (double)(m->n - 1)) : 0;
}

typedef struct {
    msum nll;                       /* this run */
    msum nll_base, nll_diff, kl;    /* --kl-base */
    double kl_max;
    uint64_t same_top;
    float *kls;                     /* [n_records] for the median and percentiles */
} ppl_acc;

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Linear interpolation between order statistics (llama.cpp's way). */
static double percentile(const float *v, size_t n, double f)
{
    double p = f * (double)(n - 1);
    size_t i = (size_t)p;
    if (i + 1 >= n) return v[n - 1];
    return (1 - (p - (double)i)) * v[i] + (p - (double)i) * v[i + 1];
}

/* ------------------------------------------------------------------- run */

typedef struct {
    const ppl_opts *o;
    pl_model *m;
    pl_ctx *c;
    lp_header me;         /* this run, as a file would describe it */
    int32_t *ids;         /* the tokens evaluated: [n_chunks x n_ctx] at least */
    size_t n_ids;
    uint32_t n_vocab, n_ctx, first, n_chunks;
    bool bos;             /* replace each chunk's first id with BOS */
    lp_reader base;
    bool have_base;
    FILE *save;           /* open while records are written */
    bool saved;           /* the file was written and closed */
    uint8_t *rec;         /* one encoded record to save */
    int32_t *top;         /* [top_k] */
    uint8_t *mark;        /* [n_vocab] zeros */
    ppl_acc acc;
    double seconds;
} ppl_run;

static int save_record(ppl_run *r, const float *l, double lse, int32_t argmax, int32_t target)
{
    const uint32_t n = r->n_vocab, k = r->me.top_k;
    size_t at = 0;
    put32(r->rec, &at, (uint32_t)argmax);
    putf(r->rec, &at, lp_of(l, lse, (uint32_t)target));
    if (k == 0) {
        for (uint32_t i = 0; i < n; i++) putf(r->rec, &at, lp_of(l, lse, i));
    } else {
        top_k_ids(l, n, k, r->top);
        for (uint32_t j = 0; j < k; j++) r->mark[r->top[j]] = 1;
        putf(r->rec, &at, log_rest_mass(l, lse, n, r->mark));
        for (uint32_t j = 0; j < k; j++) {
            r->mark[r->top[j]] = 0;
            put32(r->rec, &at, (uint32_t)r->top[j]);
            putf(r->rec, &at, lp_of(l, lse, (uint32_t)r->top[j]));
        }
    }
    if (fwrite(r->rec, 1, at, r->save) != at) {
        cli_error(CMD, "cannot write --save-logits file '%s'", r->o->save_path);
        return 1;
    }
    return 0;
}

/* Scores positions first..n_ctx-2 of one chunk from their logits. */
static int score_chunk(ppl_run *r, const int32_t *chunk, const float *logits)
{
    const uint32_t n = r->n_vocab;
    for (uint32_t p = r->first; p + 1 < r->n_ctx; p++) {
        const float *l = logits + (size_t)(p - r->first) * n;
        const int32_t target = chunk[p + 1];
        int32_t argmax;
        const double lse = row_lse(l, n, &argmax), nll = lse - l[target];
        msum_add(&r->acc.nll, nll);
        if (r->save && save_record(r, l, lse, argmax, target)) return 1;
        if (!r->have_base) continue;
        if (lp_reader_next(&r->base)) return 1;
        /* both nlls from f32-rounded log-probs, so that a self-comparison is exact */
        const double kl = kl_at(&r->base, l, lse, n, r->mark), nll_b = -(double)r->base.rec.target_lp;
        const double nll_r = -(double)lp_of(l, lse, (uint32_t)target);
        r->acc.kls[r->acc.kl.n] = (float)kl;
        msum_add(&r->acc.kl, kl);
        msum_add(&r->acc.nll_base, nll_b);
        msum_add(&r->acc.nll_diff, nll_r - nll_b);
        r->acc.kl_max = kl > r->acc.kl_max ? kl : r->acc.kl_max;
        r->acc.same_top += argmax == r->base.rec.argmax;
    }
    return 0;
}

/* Evaluates every chunk from a fresh sequence: the first half without
 * logits (context only), then the scored positions with a row each. */
static int run_chunks(ppl_run *r)
{
    const size_t n_rows = r->n_ctx - 1 - r->first;
    float *logits = malloc(sizeof(float) * n_rows * r->n_vocab);
    int32_t *chunk = malloc(sizeof(int32_t) * r->n_ctx);
    if (!logits || !chunk) {
        free(logits), free(chunk);
        cli_error(CMD, "out of memory for %zu x %u logits", n_rows, r->n_vocab);
        return 1;
    }
    int rc = 0;
    double t0 = now_seconds();
    for (uint32_t i = 0; i < r->n_chunks && !rc; i++) {
        memcpy(chunk, r->ids + (size_t)i * r->n_ctx, sizeof(int32_t) * r->n_ctx);
        if (r->bos) chunk[0] = pl_vocab_bos(pl_model_vocab(r->m));
        int32_t seq = -1;
        int e = pl_seq_new(r->c, &seq);
        if (!e) e = pl_seq_append(r->c, seq, chunk, r->first, NULL);
        if (!e) e = pl_seq_append_all(r->c, seq, chunk + r->first, n_rows, logits);
        if (seq >= 0) pl_seq_free(r->c, seq);
        if (e) { cli_error(CMD, "chunk %u: %s", i + 1, pl_last_error()); rc = 1; break; }
        /* the original ids are the targets: only position 0 was replaced */
        rc = score_chunk(r, r->ids + (size_t)i * r->n_ctx, logits);
        if (!r->o->json) fprintf(stderr, "[%u]%.4f,", i + 1, exp(msum_mean(&r->acc.nll)));
    }
    if (!r->o->json) fputc('\n', stderr);
    r->seconds = now_seconds() - t0;
    free(logits);
    free(chunk);
    return rc;
}

static int open_save(ppl_run *r)
{
    lp_header h = r->me;
    h.n_ctx = r->n_ctx, h.first = r->first, h.n_chunks = r->n_chunks;
    h.flags = r->bos ? LP_FLAG_BOS : 0;
    h.n_records = (uint64_t)r->n_chunks * (r->n_ctx - 1 - r->first);
    r->me = h;
    r->save = fopen(r->o->save_path, "wb");
    if (!r->save) { cli_error(CMD, "cannot write --save-logits file '%s'", r->o->save_path); return 1; }
    uint8_t hb[LP_HEADER_BYTES];
    lp_header_encode(&h, hb);
    const size_t n_tok = (size_t)r->n_chunks * r->n_ctx;
    uint8_t *tb = malloc(4 * n_tok);
    r->rec = malloc(lp_record_bytes(h.top_k, h.n_vocab));
    r->top = malloc(4 * (h.top_k ? h.top_k : 1));
    int rc = !tb || !r->rec || !r->top;
    size_t at = 0;
    for (size_t i = 0; !rc && i < n_tok; i++) put32(tb, &at, (uint32_t)r->ids[i]);
    if (!rc) rc = fwrite(hb, 1, sizeof hb, r->save) != sizeof hb || fwrite(tb, 1, at, r->save) != at;
    free(tb);
    if (rc) cli_error(CMD, "cannot write --save-logits file '%s'", r->o->save_path);
    return rc;
}

/* The tokens to evaluate: the text's, checked against the base file's when
 * there is one, else the base file's. Fixes n_ctx and n_chunks. */
static int choose_tokens(ppl_run *r, const char *text, size_t len)
{
    const ppl_opts *o = r->o;
    const pl_vocab *v = pl_model_vocab(r->m);
    if (text && pl_tokenize(v, text, len, pl_vocab_add_bos(v), false, &r->ids, &r->n_ids) != 0) {
        cli_error(CMD, "%s: %s", o->text_path, pl_last_error());
        return 1;
    }
    uint32_t train = pl_model_n_ctx_train(r->m);
    r->n_ctx = o->g.ctx ? (uint32_t)o->g.ctx : train && train < DEFAULT_CTX ? train : DEFAULT_CTX;
    if (r->n_ctx < 4) { /* only a model that claims a train context under 4 gets here */
        cli_error(CMD, "the model's train context is %u tokens; give --ctx 4 or more", train);
        return 1;
    }
    if (r->have_base) {
        const lp_header *b = &r->base.h;
        if (o->g.ctx && (uint32_t)o->g.ctx != b->n_ctx) {
            cli_error(CMD, "%s was written with --ctx %u; this run asks --ctx %d (leave --ctx out to take the file's)",
                      o->base_path, b->n_ctx, o->g.ctx);
            return 1;
        }
        r->n_ctx = b->n_ctx;
        const size_t nb = (size_t)b->n_chunks * b->n_ctx;
        if (!text) {
            r->ids = malloc(4 * nb);
            if (!r->ids) { cli_error(CMD, "out of memory"); return 1; }
            memcpy(r->ids, r->base.tokens, 4 * nb);
            r->n_ids = nb;
        } else {
            size_t n = r->n_ids < nb ? r->n_ids : nb, i = 0;
            while (i < n && r->ids[i] == r->base.tokens[i]) i++;
            if (i < n) {
                cli_error(CMD, "%s: the text's tokens differ from those of %s at token index %zu (id %d there, %d here): "
                          "not the same text", o->text_path, o->base_path, i, r->base.tokens[i], r->ids[i]);
                return 1;
            }
        }
    }
    const char *src = text ? o->text_path : o->base_path;
    if (r->n_ids == 0) { cli_error(CMD, "%s: the text is empty (no tokens)", src); return 1; }
    r->first = r->n_ctx / 2;
    r->n_chunks = (uint32_t)(r->n_ids / r->n_ctx);
    if (r->n_chunks == 0) {
        cli_error(CMD, "%s: the text has %zu tokens, fewer than one chunk of --ctx %u tokens", src, r->n_ids, r->n_ctx);
        return 1;
    }
    if (o->max_chunks && (uint32_t)o->max_chunks < r->n_chunks) r->n_chunks = (uint32_t)o->max_chunks;
    if (r->have_base && r->n_chunks > r->base.h.n_chunks) r->n_chunks = r->base.h.n_chunks;
    if (train && r->n_ctx > train)
        fprintf(stderr, "pagellm %s: warning: --ctx %u is beyond the model's train context of %u\n", CMD, r->n_ctx, train);
    return 0;
}

/* ---------------------------------------------------------------- output */

static json_t *jreal(double x) { return isfinite(x) ? json_real(x) : json_null(); }

/* The figures of a finished run, for either printer. */
typedef struct {
    double bytes_per_token, ppl, ppl_err, tok_s;
    /* --kl-base */
    double ppl_b, ppl_b_err, ratio, ratio_err, kl, kl_err, kl_med, kl_p99, same, same_err;
} ppl_summary;

static ppl_summary summarize(const ppl_run *r)
{
    const ppl_acc *a = &r->acc;
    pl_kv_stats st;
    pl_ctx_kv_stats(r->c, &st);
    ppl_summary x = {0};
    x.bytes_per_token = st.bytes_per_token;
    x.ppl = exp(msum_mean(&a->nll)), x.ppl_err = x.ppl * msum_err(&a->nll);
    x.tok_s = r->seconds > 0 ? (double)r->n_chunks * (r->n_ctx - 1) / r->seconds : 0;
    if (!r->have_base) return x;
    const uint64_t n = a->kl.n;
    x.ppl_b = exp(msum_mean(&a->nll_base)), x.ppl_b_err = x.ppl_b * msum_err(&a->nll_base);
    x.ratio = msum_mean(&a->nll_diff), x.ratio_err = msum_err(&a->nll_diff);
    x.kl = msum_mean(&a->kl), x.kl_err = msum_err(&a->kl);
    x.kl_med = percentile(a->kls, n, 0.5), x.kl_p99 = percentile(a->kls, n, 0.99);
    x.same = (double)a->same_top / (double)n;
    x.same_err = n > 1 ? sqrt(x.same * (1 - x.same) / (double)(n - 1)) : 0;
    return x;
}

static void print_json(const ppl_run *r, const ppl_summary *x)
{
    json_t *j = json_pack("{s:o, s:o, s:f, s:I, s:I, s:I, s:I, s:I, s:s, s:f, s:s, s:f, s:f}", "ppl", jreal(x->ppl),
                          "ppl_err", jreal(x->ppl_err), "nll_mean", msum_mean(&r->acc.nll), "n_tokens",
                          (json_int_t)r->acc.nll.n, "n_text_tokens", (json_int_t)r->n_ids, "n_chunks",
                          (json_int_t)r->n_chunks, "n_ctx", (json_int_t)r->n_ctx, "scored_from", (json_int_t)r->first,
                          "kv_dtype", r->me.kv_dtype, "bytes_per_token", x->bytes_per_token, "model", r->me.model,
                          "seconds", r->seconds, "tok_s", x->tok_s);
    if (r->saved) {
        json_object_set_new(j, "saved", json_string(r->o->save_path));
        json_object_set_new(j, "saved_bytes", json_integer((json_int_t)lp_file_bytes(&r->me)));
        json_object_set_new(j, "saved_top_k", json_integer(r->me.top_k));
    }
    if (r->have_base) {
        json_t *k = json_pack("{s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:b}", "kl_base",
                              r->o->base_path, "base_model", r->base.h.model, "base_kv_dtype", r->base.h.kv_dtype,
                              "ppl_base", jreal(x->ppl_b), "ppl_base_err", jreal(x->ppl_b_err), "ln_ppl_ratio",
                              jreal(x->ratio), "ln_ppl_ratio_err", jreal(x->ratio_err), "kl_mean", jreal(x->kl),
                              "kl_err", jreal(x->kl_err), "kl_median", jreal(x->kl_med), "kl_p99", jreal(x->kl_p99),
                              "kl_max", jreal(r->acc.kl_max), "same_top_pct", jreal(100 * x->same),
                              "same_top_err_pct", jreal(100 * x->same_err), "kl_exact", r->base.h.top_k == 0);
        json_object_update(j, k);
        json_decref(k);
    }
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(10));
    puts(s);
    free(s);
    json_decref(j);
}

static void print_text(const ppl_run *r, const ppl_summary *x)
{
    printf("perplexity %.4f +/- %.4f  (%llu tokens scored: %u chunks of %u, positions %u..%u predict the next)\n",
           x->ppl, x->ppl_err, (unsigned long long)r->acc.nll.n, r->n_chunks, r->n_ctx, r->first, r->n_ctx - 2);
    printf("kv cache   %s, %.1f B/token\n", r->me.kv_dtype, x->bytes_per_token);
    printf("speed      %.2f s, %.1f tok/s\n", r->seconds, x->tok_s);
    if (r->saved)
        printf("saved      %s: %llu positions, %s (%llu bytes)\n", r->o->save_path,
               (unsigned long long)r->me.n_records, r->me.top_k ? "top-K + rest" : "full distributions",
               (unsigned long long)lp_file_bytes(&r->me));
    if (!r->have_base) return;
    printf("base       %s (%s, kv %s): ppl %.4f +/- %.4f, ln(ppl/base) %.6f +/- %.6f\n", r->o->base_path,
           r->base.h.model, r->base.h.kv_dtype, x->ppl_b, x->ppl_b_err, x->ratio, x->ratio_err);
    printf("kl         mean %.6g +/- %.2g, median %.6g, 99%% %.6g, max %.6g%s\n", x->kl, x->kl_err, x->kl_med,
           x->kl_p99, r->acc.kl_max, r->base.h.top_k ? " (lower bound: top-K base)" : "");
    printf("same top   %.3f +/- %.3f %%\n", 100 * x->same, 100 * x->same_err);
}


/* ---------------------------------------------------------------- stream */

#define STREAM_SLICE 512u /* tokens per pl_seq_append_all call (logit rows held at once) */

typedef struct {
    uint32_t n;          /* tokens of the stream */
    uint32_t segment;    /* tokens per reported segment */
    msum *seg;           /* [ceil(n / segment)] nll of the targets in each segment */
    uint32_t n_seg;
    uint64_t dropped;
} stream_run;

/* Feeds ids[0, n-1) through one sequence and scores ids[1, n). */
static int stream_eval(ppl_run *r, stream_run *st)
{
    float *logits = malloc(sizeof(float) * STREAM_SLICE * r->n_vocab);
    if (!logits) { cli_error(CMD, "out of memory for %u x %u logits", STREAM_SLICE, r->n_vocab); return 1; }
    int32_t seq = -1;
    int rc = pl_seq_new(r->c, &seq) ? 1 : 0;
    double t0 = now_seconds();
    for (uint32_t at = 0; !rc && at + 1 < st->n;) {
        const uint32_t k = st->n - 1 - at < STREAM_SLICE ? st->n - 1 - at : STREAM_SLICE;
        if (pl_seq_append_all(r->c, seq, r->ids + at, k, logits) != 0) { rc = 1; break; }
        for (uint32_t j = 0; j < k; j++) {
            const float *l = logits + (size_t)j * r->n_vocab;
            const uint32_t p = at + j + 1; /* the target's position */
            int32_t argmax;
            const double nll = row_lse(l, r->n_vocab, &argmax) - l[r->ids[p]];
            msum_add(&r->acc.nll, nll);
            msum_add(&st->seg[p / st->segment], nll);
        }
        at += k;
        if (!r->o->json) fprintf(stderr, "[%u]%.4f,", at, exp(msum_mean(&r->acc.nll)));
    }
    if (!r->o->json) fputc('\n', stderr);
    r->seconds = now_seconds() - t0;
    if (rc) cli_error(CMD, "stream: %s", pl_last_error());
    st->dropped = seq >= 0 ? pl_seq_n_dropped(r->c, seq) : 0;
    if (seq >= 0) pl_seq_free(r->c, seq);
    free(logits);
    return rc;
}

static void stream_print(const ppl_run *r, const stream_run *st, const pl_ctx_params *cp)
{
    const msum *a = &r->acc.nll;
    const double ppl = exp(msum_mean(a)), err = ppl * msum_err(a), tok_s = r->seconds > 0 ? a->n / r->seconds : 0;
    const uint32_t sinks_eff = (cp->kv_sinks + cp->block_size - 1) / cp->block_size * cp->block_size;
    if (r->o->json) {
        json_t *segs = json_array();
        for (uint32_t i = 0; i < st->n_seg; i++)
            json_array_append_new(segs, json_pack("{s:I, s:I, s:I, s:o}", "from", (json_int_t)i * st->segment,
                                                  "to", (json_int_t)((i + 1) * st->segment < st->n ? (i + 1) * st->segment : st->n),
                                                  "n", (json_int_t)st->seg[i].n, "ppl",
                                                  jreal(exp(msum_mean(&st->seg[i])))));
        json_t *j = json_pack("{s:s, s:o, s:o, s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:s, s:f, s:f, s:o}",
                              "mode", "stream", "ppl", jreal(ppl), "ppl_err", jreal(err), "nll_mean", msum_mean(a),
                              "n_tokens", (json_int_t)a->n, "n_text_tokens", (json_int_t)r->n_ids, "n_ctx",
                              (json_int_t)cp->n_ctx, "swa", (json_int_t)pl_ctx_swa(r->c), "kv_window", (json_int_t)cp->kv_window, "kv_sinks",
                              (json_int_t)cp->kv_sinks, "kv_sinks_effective", (json_int_t)sinks_eff, "block_size",
                              (json_int_t)cp->block_size, "n_dropped", (json_int_t)st->dropped, "kv_dtype",
                              r->me.kv_dtype, "model", r->me.model, "seconds", r->seconds, "tok_s", tok_s,
                              "segments", segs);
        char *txt = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(10));
        puts(txt);
        free(txt);
        json_decref(j);
        return;
    }
    printf("perplexity %.4f +/- %.4f  (stream: %llu tokens scored in one sequence", ppl, err, (unsigned long long)a->n);
    if (cp->kv_window)
        printf(", window %u + sinks %u (%u in whole blocks of %u), %llu tokens dropped)\n", cp->kv_window,
               cp->kv_sinks, sinks_eff, cp->block_size, (unsigned long long)st->dropped);
    else if (pl_ctx_swa(r->c))
        printf(", sliding-window attention over the last %u positions, %llu tokens dropped)\n", pl_ctx_swa(r->c),
               (unsigned long long)st->dropped);
    else
        printf(", full attention over up to %u positions)\n", st->n);
    printf("segments  ");
    for (uint32_t i = 0; i < st->n_seg; i++) printf(" [%u,%u) %.4f", i * st->segment,
                                                     (i + 1) * st->segment < st->n ? (i + 1) * st->segment : st->n,
                                                     exp(msum_mean(&st->seg[i])));
    printf("\nkv cache   %s\nspeed      %.2f s, %.1f tok/s\n", r->me.kv_dtype, r->seconds, tok_s);
}

/* --stream: the whole text through one sequence (see the top). */
static int stream_main(ppl_run *r, const char *text, size_t len, pl_ctx_params cp)
{
    const ppl_opts *o = r->o;
    const pl_vocab *v = pl_model_vocab(r->m);
    if (pl_tokenize(v, text, len, pl_vocab_add_bos(v), false, &r->ids, &r->n_ids) != 0) {
        cli_error(CMD, "%s: %s", o->text_path, pl_last_error());
        return 1;
    }
    stream_run st = {0};
    uint64_t n = r->n_ids;
    if (o->max_chunks && (uint64_t)o->max_chunks * DEFAULT_CTX < n) n = (uint64_t)o->max_chunks * DEFAULT_CTX;
    if (n < 2 || n > (1u << 30)) {
        cli_error(CMD, "%s: the text has %zu tokens; --stream needs 2 .. 2^30", o->text_path, r->n_ids);
        return 1;
    }
    st.n = (uint32_t)n;
    const uint32_t train = pl_model_n_ctx_train(r->m);
    /* sliding-window attention runs any length through its window, like --kv-window */
    const bool swa = pl_model_sliding_window(r->m) && cp.swa != PL_SWA_OFF;
    if (!cp.kv_window && !swa) {
        if (o->g.ctx && (uint32_t)o->g.ctx < st.n - 1) {
            cli_error(CMD, "the stream of %u tokens does not fit --ctx %d: give --kv-window W (and --kv-sinks S), or "
                      "a larger --ctx", st.n, o->g.ctx);
            return 1;
        }
        cp.n_ctx = o->g.ctx ? (uint32_t)o->g.ctx : st.n - 1;
        if (train && st.n - 1 > train)
            fprintf(stderr, "pagellm %s: warning: full attention over %u positions, beyond the model's train context "
                    "of %u\n", CMD, st.n - 1, train);
    }
    cp.max_seqs = 1;
    if (pl_ctx_new(&r->c, r->m, &cp) != 0) { cli_error(CMD, "%s", pl_last_error()); return 1; }
    st.segment = o->segment ? (uint32_t)o->segment : train ? train : DEFAULT_CTX;
    st.n_seg = (st.n + st.segment - 1) / st.segment;
    st.seg = calloc(st.n_seg, sizeof *st.seg);
    if (!st.seg) { cli_error(CMD, "out of memory"); return 1; }
    int rc = stream_eval(r, &st);
    if (!rc && !isfinite(exp(msum_mean(&r->acc.nll)))) {
        cli_error(CMD, "the perplexity is not finite (mean nll %g)", msum_mean(&r->acc.nll));
        rc = 1;
    }
    if (!rc) {
        pl_ctx_params got = cp;
        got.n_ctx = pl_ctx_n_ctx(r->c);
        stream_print(r, &st, &got);
    }
    free(st.seg);
    return rc;
}

/* ------------------------------------------------------------------ main */

static int ppl_main(ppl_run *r, const char *text, size_t len)
{
    const ppl_opts *o = r->o;
    pl_ctx_params cp;
    int rc = gen_opts_ctx_params(CMD, &o->g, &cp);
    if (rc) return rc;
    if ((rc = gen_opts_load_model(CMD, &o->g, &r->m)) != 0) return rc;
    r->n_vocab = pl_model_n_vocab(r->m);
    rc = describe_run(o->g.model, r->m, pl_kv_dtype_name(cp.kv_dtype), &r->me);
    r->me.top_k = o->top_k > 0 && (uint32_t)o->top_k < r->n_vocab ? (uint32_t)o->top_k : 0;
    if (!rc && o->stream) return stream_main(r, text, len, cp);
    if (!rc && o->base_path) {
        rc = lp_reader_open(&r->base, o->base_path, &r->me);
        r->have_base = true;
    }
    if (!rc) rc = choose_tokens(r, text, len);
    if (rc) return rc;
    const pl_vocab *v = pl_model_vocab(r->m);
    r->bos = pl_vocab_add_bos(v) && pl_vocab_bos(v) >= 0;
    if (r->have_base && r->bos != ((r->base.h.flags & LP_FLAG_BOS) != 0)) {
        cli_error(CMD, "%s: written %s BOS at chunk starts; this run %s", o->base_path,
                  r->bos ? "without" : "with", r->bos ? "adds it" : "does not");
        return 1;
    }
    cp.n_ctx = r->n_ctx;
    cp.max_seqs = 1;
    if (pl_ctx_new(&r->c, r->m, &cp) != 0) { cli_error(CMD, "%s", pl_last_error()); return 1; }
    r->mark = calloc(r->n_vocab, 1);
    r->acc.kls = malloc(sizeof(float) * ((size_t)r->n_chunks * (r->n_ctx - 1 - r->first) + 1));
    if (!r->mark || !r->acc.kls) { cli_error(CMD, "out of memory"); return 1; }
    if (o->save_path && open_save(r)) return 1;
    rc = run_chunks(r);
    if (rc) return rc; /* the caller removes the partial file */
    if (r->save) {
        int bad = fclose(r->save) != 0;
        r->save = NULL;
        if (bad) {
            unlink(o->save_path);
            cli_error(CMD, "cannot write --save-logits file '%s'", o->save_path);
            return 1;
        }
        r->saved = true;
    }
    if (!isfinite(exp(msum_mean(&r->acc.nll)))) {
        cli_error(CMD, "the perplexity is not finite (mean nll %g): the model's logits overflow", msum_mean(&r->acc.nll));
        return 1;
    }
    if (r->have_base) qsort(r->acc.kls, r->acc.kl.n, sizeof(float), cmp_float);
    const ppl_summary x = summarize(r);
    if (o->json) print_json(r, &x);
    else print_text(r, &x);
    return 0;
}

int cmd_perplexity(int argc, char **argv)
{
    ppl_opts o;
    memset(&o, 0, sizeof o);
    int rc = ppl_parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    char *text = NULL;
    uint64_t len = 0;
    if (o.text_path) {
        text = cli_read_file(o.text_path, &len);
        if (!text) { cli_error(CMD, "cannot read text file '%s'", o.text_path); return 1; }
        if (len == 0) { cli_error(CMD, "text file '%s' is empty", o.text_path); free(text); return 1; }
    }
    ppl_run r;
    memset(&r, 0, sizeof r);
    r.o = &o;
    rc = ppl_main(&r, text, (size_t)len);
    if (r.save) { /* failed half-way: leave no file that looks complete */
        fclose(r.save);
        unlink(o.save_path);
    }
    lp_reader_close(&r.base);
    free(r.rec);
    free(r.top);
    free(r.mark);
    free(r.acc.kls);
    pl_free(r.ids);
    pl_ctx_free(r.c);
    pl_model_free(r.m);
    free(text);
    return rc;
}
