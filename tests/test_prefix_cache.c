/* test_prefix_cache.c - the prefix cache (src/kv/prefix_cache.h): keys and
 * salts, full-block hits, the token-granular tail copy and the rows it
 * copies, the last token never served, verification against a planted
 * collision, LRU eviction order and pinning of a tail source, copy-on-write
 * and rewrites, deduplication, exact counters, recomputes after preemption not
 * counted as hits, and a randomized run of thousands of operations compared
 * after every step with a naive reference model (which prefixes are
 * cached, computed from the token prefixes each keyed block stands for),
 * with kv_check and prefix_check.
 *
 * Every token row written by the "model" here holds a pattern derived from
 * the whole token prefix up to it (a rolling hash), as real K/V would: a
 * row reused for another prefix shows up as a wrong pattern.
 */
#include "test.h"

#include "base/err.h"
#include "kv/kv_check.h"
#include "kv/kv_pool.h"
#include "kv/kv_seq.h"
#include "kv/prefix_cache.h"

#include <stdint.h>
#include <xxhash.h>

#define T 4          /* tokens per block in these tests */
#define MAXCTX 64    /* tokens per test sequence */

/* 2 layers, 2 KV heads of 4, blocks of 4 tokens, f32: rows of 32 bytes. */
static const kv_shape shape = {2, 2, 4, T, KV_F32, KV_KIND_KV};
static const uint64_t model_fp[2] = {0x1234, 0x5678};

/* ------------------------------------------------------------ helpers */

typedef struct {
    kv_pool pool;
    prefix_cache pc; /* must not move after prefix_init: tests keep fx on their stack */
} fx;

static int fx_init(fx *f, uint32_t n_blocks)
{
    int rc = kv_pool_init(&f->pool, &shape, n_blocks);
    return rc ? rc : prefix_init(&f->pc, &f->pool, model_fp);
}

static void fx_free(fx *f)
{
    prefix_free(&f->pc);
    kv_pool_free(&f->pool);
}

/* A test sequence: its KV, cursor, tokens and the value of each prefix. */
typedef struct {
    bool alive;
    kv_seq kv;
    prefix_cursor cur;
    uint32_t n;
    int32_t tok[MAXCTX];
    uint64_t val[MAXCTX]; /* val[p] = rolling hash of tok[0..p] */
} tseq;

static uint64_t val_next(uint64_t prev, int32_t tok)
{
    return (prev ^ (uint32_t)tok) * UINT64_C(0x100000001b3) + 0x9e3779b97f4a7c15u;
}

static void vals_of(const int32_t *tok, uint32_t n, uint64_t *val)
{
    uint64_t v = 0xcbf29ce484222325u;
    for (uint32_t p = 0; p < n; p++) val[p] = v = val_next(v, tok[p]);
}

static uint8_t row_byte(uint64_t v, uint64_t j, uint32_t l, int p)
{
    return (uint8_t)((v >> (j % 8 * 8)) ^ (j * 7) ^ (l * 13) ^ ((uint32_t)p * 101));
}

static void row_fill(kv_seq *s, uint32_t pos, uint64_t v)
{
    for (uint32_t l = 0; l < shape.n_layers; l++)
        for (int p = 0; p < 2; p++) {
            uint8_t *r = kv_seq_row(s, l, (kv_plane)p, pos);
            for (uint64_t j = 0; j < s->pool->g.row_bytes[p]; j++) r[j] = row_byte(v, j, l, p);
        }
}

static bool row_holds(const kv_seq *s, uint32_t pos, uint64_t v)
{
    for (uint32_t l = 0; l < shape.n_layers; l++)
        for (int p = 0; p < 2; p++) {
            const uint8_t *r = kv_seq_row(s, l, (kv_plane)p, pos);
            for (uint64_t j = 0; j < s->pool->g.row_bytes[p]; j++)
                if (r[j] != row_byte(v, j, l, p)) return false;
        }
    return true;
}

static bool ts_rows_ok(const tseq *s)
{
    for (uint32_t p = 0; p < s->n; p++)
        if (!row_holds(&s->kv, p, s->val[p])) return false;
    return true;
}

static int ts_new(fx *f, tseq *s)
{
    memset(s, 0, sizeof *s);
    int rc = kv_seq_init(&s->kv, &f->pool, MAXCTX, KV_SEQ_PAGED);
    prefix_cursor_init(&s->cur);
    s->alive = rc == 0;
    return rc;
}

static void ts_free(tseq *s)
{
    if (s->alive) kv_seq_free(&s->kv);
    s->alive = false;
    s->n = 0;
}

/* prefix_attach of tok[0, n) into the new empty s; s then knows the hit tokens. */
static int ts_attach(fx *f, tseq *s, const int32_t *tok, uint32_t n, bool recompute, uint32_t *hit)
{
    int rc = prefix_attach(&f->pc, &s->kv, tok, n, recompute, &s->cur, hit);
    if (rc) return rc;
    memcpy(s->tok, tok, *hit * sizeof *tok);
    s->n = *hit;
    vals_of(s->tok, s->n, s->val);
    return 0;
}

/* "Runs the model" on k more tokens: reserves, writes their rows. No
 * registering (the randomized test looks between the two). */
static int ts_append(tseq *s, const int32_t *tok, uint32_t k)
{
    int rc = kv_seq_append(&s->kv, k);
    if (rc) return rc;
    memcpy(s->tok + s->n, tok, k * sizeof *tok);
    uint64_t v = s->n ? s->val[s->n - 1] : 0xcbf29ce484222325u;
    for (uint32_t i = 0; i < k; i++, s->n++) {
        s->val[s->n] = v = val_next(v, s->tok[s->n]);
        row_fill(&s->kv, s->n, v);
    }
    return 0;
}

static uint32_t ts_register(fx *f, tseq *s) { return prefix_register(&f->pc, &s->kv, s->tok, &s->cur); }

/* ts_append then register: one forward step of the engine. */
static int ts_step(fx *f, tseq *s, const int32_t *tok, uint32_t k)
{
    int rc = ts_append(s, tok, k);
    if (!rc) ts_register(f, s);
    return rc;
}

/* The start of most tests: a fixture of n_blocks blocks and one sequence
 * in it stepped through tok[0..k); the first nonzero result. */
static int fx_with_seq(fx *f, uint32_t n_blocks, tseq *s, const int32_t *tok, uint32_t k)
{
    int rc = fx_init(f, n_blocks);
    if (!rc) rc = ts_new(f, s);
    return rc ? rc : ts_step(f, s, tok, k);
}

static bool keyed(const fx *f, uint32_t b) { return (f->pool.blocks[b].flags & KV_BLOCK_HASHED) != 0; }

static int check_all(fx *f, tseq *seqs, int n)
{
    kv_seq *live[16];
    size_t k = 0;
    for (int i = 0; i < n; i++)
        if (seqs[i].alive) live[k++] = &seqs[i].kv;
    int rc = kv_check(&f->pool, live, k);
    return rc ? rc : prefix_check(&f->pc);
}

static const int32_t A16[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

/* ------------------------------------------------------------ keys */

TEST(salt_names_model_dtype_and_block_size)
{
    uint64_t a[2], b[2];
    kv_shape s = shape;
    prefix_salt_make(a, model_fp, &s);
    prefix_salt_make(b, model_fp, &s);
    CHECK(a[0] == b[0] && a[1] == b[1]);
    const uint64_t other_fp[2] = {0x1234, 0x5679};
    prefix_salt_make(b, other_fp, &s);
    CHECK(a[0] != b[0] || a[1] != b[1]);
    s.dtype = KV_F16;
    prefix_salt_make(b, model_fp, &s);
    CHECK(a[0] != b[0] || a[1] != b[1]);
    s = shape;
    s.block_size = 8;
    prefix_salt_make(b, model_fp, &s);
    CHECK(a[0] != b[0] || a[1] != b[1]);
    /* The cache salts itself with the pool's shape. */
    fx f;
    CHECK_EQ_INT(fx_init(&f, 8), 0);
    CHECK(f.pc.salt[0] == a[0] && f.pc.salt[1] == a[1]);
    CHECK(f.pc.partial_ok);
    fx_free(&f);
}

TEST(key_is_xxh3_of_salt_parent_tokens)
{
    fx f;
    tseq s;
    CHECK_EQ_INT(fx_with_seq(&f, 8, &s, A16, 8), 0);
    /* Recompute block 0's and block 1's keys by hand (little endian). */
    uint8_t buf[32 + 4 * T];
    uint64_t parent[2] = {0, 0};
    for (int blk = 0; blk < 2; blk++) {
        for (int i = 0; i < 8; i++) {
            buf[i] = (uint8_t)(f.pc.salt[0] >> (8 * i));
            buf[8 + i] = (uint8_t)(f.pc.salt[1] >> (8 * i));
            buf[16 + i] = (uint8_t)(parent[0] >> (8 * i));
            buf[24 + i] = (uint8_t)(parent[1] >> (8 * i));
        }
        for (int t = 0; t < T; t++)
            for (int i = 0; i < 4; i++) buf[32 + 4 * t + i] = (uint8_t)((uint32_t)A16[blk * T + t] >> (8 * i));
        XXH128_hash_t h = XXH3_128bits(buf, sizeof buf);
        const kv_block *k = &f.pool.blocks[s.kv.table[blk]];
        CHECK(keyed(&f, s.kv.table[blk]));
        CHECK(k->hash[0] == h.low64 && k->hash[1] == h.high64);
        CHECK_EQ_INT(k->parent, KV_NONE);
        parent[0] = h.low64;
        parent[1] = h.high64;
    }
    CHECK(s.cur.n_blocks == 2 && s.cur.hash[0] == parent[0] && s.cur.hash[1] == parent[1]);
    CHECK_EQ_INT(prefix_check(&f.pc), 0);
    ts_free(&s);
    fx_free(&f);
}

/* ------------------------------------------------------------ lookups */

TEST(full_blocks_hit_and_last_token_is_never_served)
{
    fx f;
    tseq a, b;
    uint32_t hit = 99;
    CHECK_EQ_INT(fx_with_seq(&f, 16, &a, A16, 14), 0); /* 3 full blocks + 2 */
    CHECK_EQ_INT(f.pc.st.cached_blocks, 3);
    uint32_t blocks[3] = {a.kv.table[0], a.kv.table[1], a.kv.table[2]};
    ts_free(&a);
    CHECK_EQ_INT(f.pool.lru.n, 3);
    /* 14 tokens: 3 blocks (12 <= 13); the partly filled 4th was never keyed. */
    CHECK_EQ_INT(prefix_match_len(&f.pc, A16, 14), 12);
    CHECK_EQ_INT(ts_new(&f, &b), 0);
    CHECK_EQ_INT(ts_attach(&f, &b, A16, 14, false, &hit), 0);
    CHECK_EQ_INT(hit, 12);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(b.kv.table[i], blocks[i]); /* revived in place */
    CHECK(ts_rows_ok(&b));
    CHECK_EQ_INT(b.cur.n_blocks, 3);
    CHECK_EQ_INT(check_all(&f, &b, 1), 0);
    ts_free(&b);
    /* Exactly the 12 cached tokens: the 12th is computed, 11 are served
     * (two blocks and 3 rows copied from the third). */
    for (uint32_t n = 0; n <= 13; n++) {
        CHECK_EQ_INT(ts_new(&f, &b), 0);
        CHECK_EQ_INT(ts_attach(&f, &b, A16, n, false, &hit), 0);
        CHECK_EQ_INT(hit, n <= 1 ? 0 : n - 1);
        CHECK_EQ_INT(prefix_match_len(&f.pc, A16, n), hit);
        CHECK(ts_rows_ok(&b));
        CHECK_EQ_INT(check_all(&f, &b, 1), 0);
        ts_free(&b);
    }
    fx_free(&f);
}

TEST(multi_turn_reuses_freed_turns)
{
    fx f;
    tseq t1, t2;
    uint32_t hit;
    CHECK_EQ_INT(fx_init(&f, 32), 0);
    CHECK_EQ_INT(ts_new(&f, &t1), 0);
    CHECK_EQ_INT(ts_attach(&f, &t1, A16, 10, false, &hit), 0);
    CHECK_EQ_INT(hit, 0);
    CHECK_EQ_INT(ts_step(&f, &t1, A16, 10), 0);    /* turn 1's prompt */
    for (int i = 0; i < 7; i++) {                   /* its reply, one token per step */
        int32_t r = 100 + i;
        CHECK_EQ_INT(ts_step(&f, &t1, &r, 1), 0);
        CHECK_EQ_INT(f.pc.st.cached_blocks, t1.n / T);
    }
    int32_t turn2[32];
    memcpy(turn2, t1.tok, t1.n * sizeof *turn2);
    for (int i = 0; i < 5; i++) turn2[t1.n + i] = 200 + i;
    uint32_t n2 = t1.n + 5;
    ts_free(&t1); /* the process did not keep turn 1 live */
    CHECK_EQ_INT(ts_new(&f, &t2), 0);
    CHECK_EQ_INT(ts_attach(&f, &t2, turn2, n2, false, &hit), 0);
    CHECK_EQ_INT(hit, 16); /* 17 tokens of turn 1: 4 full blocks */
    CHECK(ts_rows_ok(&t2));
    CHECK_EQ_INT(ts_step(&f, &t2, turn2 + hit, n2 - hit), 0);
    CHECK_EQ_INT(check_all(&f, &t2, 1), 0);
    ts_free(&t2);
    fx_free(&f);
}

TEST(tail_copy_copies_the_right_rows)
{
    fx f;
    tseq a, b;
    uint32_t hit;
    CHECK_EQ_INT(fx_with_seq(&f, 16, &a, A16, 9), 0);
    uint32_t a1 = a.kv.table[1];
    /* Shares block 0 and 2 tokens of block 1 (5, 6), then differs. */
    const int32_t q[10] = {1, 2, 3, 4, 5, 6, 50, 51, 52, 53};
    CHECK_EQ_INT(prefix_match_len(&f.pc, q, 10), 6);
    CHECK_EQ_INT(ts_new(&f, &b), 0);
    CHECK_EQ_INT(ts_attach(&f, &b, q, 10, false, &hit), 0); /* a is still live: copy from a used block */
    CHECK_EQ_INT(hit, 6);
    CHECK_EQ_INT(b.kv.n_blocks, 2);
    CHECK_EQ_INT(b.kv.table[0], a.kv.table[0]);
    CHECK(b.kv.table[1] != a1);
    CHECK(!keyed(&f, b.kv.table[1]));
    CHECK_EQ_INT(f.pc.st.partial_hits, 1);
    CHECK_EQ_INT(f.pc.st.partial_tokens, 2);
    /* Rows 4 and 5 came from a's block 1 and stand for the same prefix. */
    CHECK(ts_rows_ok(&b));
    CHECK(b.val[5] == a.val[5] && b.val[4] == a.val[4]);
    /* b writes its own tokens after the match; a's block is untouched. */
    CHECK_EQ_INT(ts_step(&f, &b, q + 6, 4), 0);
    CHECK(ts_rows_ok(&a) && ts_rows_ok(&b));
    CHECK(keyed(&f, a1));
    tseq both[2] = {a, b};
    CHECK_EQ_INT(check_all(&f, both, 2), 0);
    /* A tail match from a CACHED source leaves it cached. */
    ts_free(&a);
    ts_free(&b);
    CHECK_EQ_INT(ts_new(&f, &b), 0);
    const int32_t q2[8] = {1, 2, 3, 4, 5, 6, 7, 99};
    CHECK_EQ_INT(ts_attach(&f, &b, q2, 8, false, &hit), 0);
    CHECK_EQ_INT(hit, 7);
    CHECK(ts_rows_ok(&b));
    CHECK(keyed(&f, a1) && f.pool.blocks[a1].state == KV_BLOCK_CACHED);
    CHECK_EQ_INT(f.pool.lru.tail, (int32_t)a1); /* touched: most recent */
    CHECK_EQ_INT(check_all(&f, &b, 1), 0);
    ts_free(&b);
    fx_free(&f);
}

TEST(tail_copy_picks_the_longest_child)
{
    fx f;
    tseq s[4];
    uint32_t hit;
    CHECK_EQ_INT(fx_init(&f, 32), 0);
    const int32_t p[3][8] = {{1, 2, 3, 4, 5, 6, 0, 0}, {1, 2, 3, 4, 5, 6, 7, 0}, {1, 2, 3, 4, 5, 0, 0, 0}};
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(ts_new(&f, &s[i]), 0);
        CHECK_EQ_INT(ts_step(&f, &s[i], p[i], 8), 0);
    }
    CHECK_EQ_INT(f.pc.st.cached_blocks, 4); /* block 0 once, three children */
    CHECK_EQ_INT(f.pc.st.deduped, 2);
    CHECK(s[1].kv.table[0] == s[0].kv.table[0] && s[2].kv.table[0] == s[0].kv.table[0]);
    const int32_t q[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    CHECK_EQ_INT(ts_new(&f, &s[3]), 0);
    CHECK_EQ_INT(ts_attach(&f, &s[3], q, 9, false, &hit), 0);
    CHECK_EQ_INT(hit, 7);
    CHECK(ts_rows_ok(&s[3]));
    CHECK_EQ_INT(check_all(&f, s, 4), 0);
    for (int i = 0; i < 4; i++) ts_free(&s[i]);
    fx_free(&f);
}

TEST(tail_copy_skipped_without_a_block)
{
    fx f;
    tseq a, hold, b;
    uint32_t hit;
    CHECK_EQ_INT(fx_with_seq(&f, 3, &a, A16, 8), 0); /* blocks 0, 1 */
    ts_free(&a);                                /* LRU: 1, 0 */
    CHECK_EQ_INT(ts_new(&f, &hold), 0);
    const int32_t x = 77;
    CHECK_EQ_INT(ts_step(&f, &hold, &x, 1), 0); /* takes the free block 2 */
    /* Block 0 is revived; the source, block 1, is the only other block: a
     * copy would need a third. The full-block hit stands alone. */
    CHECK_EQ_INT(ts_new(&f, &b), 0);
    CHECK_EQ_INT(ts_attach(&f, &b, A16, 8, false, &hit), 0);
    CHECK_EQ_INT(hit, 4);
    CHECK_EQ_INT(f.pc.st.partial_hits, 0);
    CHECK_EQ_INT(f.pc.st.evictions, 0);
    tseq both[2] = {hold, b};
    CHECK_EQ_INT(check_all(&f, both, 2), 0);
    ts_free(&b);
    ts_free(&hold);
    fx_free(&f);
}

TEST(tail_source_is_pinned_while_copied)
{
    fx f;
    tseq a, c, d, b;
    uint32_t hit;
    CHECK_EQ_INT(fx_with_seq(&f, 4, &a, A16, 8), 0); /* blocks 0, 1 */
    CHECK_EQ_INT(ts_new(&f, &c), 0);
    const int32_t cc[4] = {9, 9, 9, 9};
    CHECK_EQ_INT(ts_step(&f, &c, cc, 4), 0); /* block 3: the middle of the free 2..3 after a's 1 */
    CHECK_EQ_INT(c.kv.table[0], 3);
    ts_free(&a);
    ts_free(&c); /* LRU: 1, 0, 3 */
    CHECK_EQ_INT(ts_new(&f, &d), 0);
    CHECK_EQ_INT(ts_step(&f, &d, cc, 2), 0); /* block 2 */
    CHECK_EQ_INT(f.pool.lru.head, 1);
    /* Hit block 0, then copy 3 rows of block 1, the LRU head: the copy's
     * block must evict block 3, not the source. */
    CHECK_EQ_INT(ts_new(&f, &b), 0);
    CHECK_EQ_INT(ts_attach(&f, &b, A16, 8, false, &hit), 0);
    CHECK_EQ_INT(hit, 7);
    CHECK_EQ_INT(b.kv.table[1], 3);
    CHECK(ts_rows_ok(&b));
    CHECK_EQ_INT(f.pc.st.evictions, 1);
    CHECK(keyed(&f, 1) && !keyed(&f, 3));
    CHECK_EQ_INT(prefix_match_len(&f.pc, cc, 5), 0);
    tseq both[2] = {d, b};
    CHECK_EQ_INT(check_all(&f, both, 2), 0);
    ts_free(&b);
    ts_free(&d);
    fx_free(&f);
}

/* ------------------------------------------------------------ verification */

/* Hashes only salt, parent and the first token: keys collide whenever two
 * blocks share a parent and a first token. */
static void weak_hash(uint64_t out[2], const void *data, size_t len)
{
    (void)len;
    XXH128_hash_t h = XXH3_128bits(data, 32 + 4);
    out[0] = h.low64;
    out[1] = h.high64;
}

TEST(verification_rejects_a_hash_collision)
{
    fx f;
    tseq a, b, c;
    uint32_t hit;
    CHECK_EQ_INT(fx_init(&f, 16), 0);
    f.pc.hash = weak_hash;
    CHECK_EQ_INT(ts_new(&f, &a), 0);
    CHECK_EQ_INT(ts_step(&f, &a, A16, 5), 0);
    /* b's first block has a's key but other tokens: not keyed twice, and
     * not deduplicated onto a's block either. */
    const int32_t q[5] = {1, 9, 9, 9, 5};
    CHECK_EQ_INT(ts_new(&f, &b), 0);
    CHECK_EQ_INT(ts_step(&f, &b, q, 5), 0);
    CHECK_EQ_INT(f.pc.st.collisions, 1);
    CHECK_EQ_INT(f.pc.st.deduped, 0);
    CHECK(b.kv.table[0] != a.kv.table[0]);
    CHECK_EQ_INT(f.pc.st.cached_blocks, 1);
    CHECK(!keyed(&f, b.kv.table[0]));
    /* A lookup of b's tokens finds a's block by key, sees other tokens:
     * no full hit; the tail match reuses only the one true row. */
    CHECK_EQ_INT(ts_new(&f, &c), 0);
    CHECK_EQ_INT(ts_attach(&f, &c, q, 5, false, &hit), 0);
    CHECK_EQ_INT(hit, 1);
    CHECK_EQ_INT(f.pc.st.collisions, 2);
    CHECK_EQ_INT(f.pc.st.block_hits, 0);
    CHECK(ts_rows_ok(&c));
    tseq all[3] = {a, b, c};
    CHECK_EQ_INT(check_all(&f, all, 3), 0);
    ts_free(&a);
    ts_free(&b);
    ts_free(&c);
    fx_free(&f);
}

TEST(verification_rejects_planted_tokens_and_check_sees_them)
{
    fx f;
    tseq a, b;
    uint32_t hit;
    CHECK_EQ_INT(fx_with_seq(&f, 16, &a, A16, 9), 0);
    ts_free(&a);
    /* Forge: block 1 keeps the key of A16[4..8) but claims other tokens. */
    uint32_t b1 = 1;
    CHECK(keyed(&f, b1));
    f.pc.tok[b1 * T + 3] = 42;
    CHECK_EQ_INT(prefix_check(&f.pc), PL_EFORMAT);
    CHECK(strstr(err_msg(), "recompute") != NULL);
    CHECK_EQ_INT(ts_new(&f, &b), 0);
    CHECK_EQ_INT(ts_attach(&f, &b, A16, 9, false, &hit), 0);
    CHECK_EQ_INT(f.pc.st.collisions, 1);
    CHECK_EQ_INT(hit, 7); /* block 0, then 3 rows whose stored tokens still match */
    CHECK(ts_rows_ok(&b));
    f.pc.tok[b1 * T + 3] = 8;
    CHECK_EQ_INT(check_all(&f, &b, 1), 0);
    ts_free(&b);
    fx_free(&f);
}

TEST(check_detects_index_corruption)
{
    fx f;
    tseq a;
    CHECK_EQ_INT(fx_with_seq(&f, 16, &a, A16, 8), 0);
    CHECK_EQ_INT(prefix_check(&f.pc), 0);
    /* A keyed block missing from the table. */
    uint32_t slot = 0;
    while (f.pc.keys[slot] != (int32_t)a.kv.table[1]) slot++;
    f.pc.keys[slot] = KV_NONE;
    CHECK_EQ_INT(prefix_check(&f.pc), PL_EFORMAT);
    f.pc.keys[slot] = (int32_t)a.kv.table[1];
    CHECK_EQ_INT(prefix_check(&f.pc), 0);
    /* A broken kids link. */
    f.pc.sib_prev[a.kv.table[1]] = 5;
    CHECK_EQ_INT(prefix_check(&f.pc), PL_EFORMAT);
    f.pc.sib_prev[a.kv.table[1]] = KV_NONE;
    /* A wrong count. */
    f.pc.st.cached_blocks++;
    CHECK_EQ_INT(prefix_check(&f.pc), PL_EFORMAT);
    f.pc.st.cached_blocks--;
    CHECK_EQ_INT(prefix_check(&f.pc), 0);
    ts_free(&a);
    fx_free(&f);
}

/* ------------------------------------------------------------ eviction */

TEST(lru_evicts_least_recent_chain_tail_first)
{
    fx f;
    tseq x, y, z, y2;
    uint32_t hit;
    const int32_t xs[8] = {1, 2, 3, 4, 5, 6, 7, 8}, ys[8] = {11, 12, 13, 14, 15, 16, 17, 18};
    CHECK_EQ_INT(fx_with_seq(&f, 8, &x, xs, 8), 0); /* blocks 0, 1 */
    CHECK_EQ_INT(ts_new(&f, &y), 0);
    CHECK_EQ_INT(ts_step(&f, &y, ys, 8), 0); /* blocks 2, 3 */
    ts_free(&x);
    ts_free(&y); /* LRU: 1, 0, 3, 2 (a chain's tail is older than its head) */
    CHECK_EQ_INT(prefix_match_len(&f.pc, xs, 8), 7);
    int32_t zs[16];
    for (int i = 0; i < 16; i++) zs[i] = 30 + i;
    CHECK_EQ_INT(ts_new(&f, &z), 0);
    CHECK_EQ_INT(ts_step(&f, &z, zs, 16), 0); /* the 4 free blocks */
    CHECK_EQ_INT(f.pc.st.evictions, 0);
    const int32_t more = 5;
    CHECK_EQ_INT(ts_step(&f, &z, &more, 1), 0); /* evicts block 1: x's tail */
    CHECK_EQ_INT(f.pc.st.evictions, 1);
    CHECK(!keyed(&f, 1) && keyed(&f, 0));
    CHECK_EQ_INT(prefix_match_len(&f.pc, xs, 8), 4);
    CHECK_EQ_INT(prefix_match_len(&f.pc, ys, 8), 7);
    CHECK_EQ_INT(check_all(&f, &z, 1), 0);
    /* y's head is revived by a hit; the tail copy from block 3 evicts the
     * LRU head, block 0 (x's head), not y's blocks. */
    CHECK_EQ_INT(ts_new(&f, &y2), 0);
    CHECK_EQ_INT(ts_attach(&f, &y2, ys, 8, false, &hit), 0);
    CHECK_EQ_INT(hit, 7);
    CHECK_EQ_INT(f.pc.st.evictions, 2);
    CHECK(!keyed(&f, 0) && keyed(&f, 2) && keyed(&f, 3));
    CHECK_EQ_INT(y2.kv.table[1], 0);
    CHECK_EQ_INT(prefix_match_len(&f.pc, xs, 8), 0);
    CHECK(ts_rows_ok(&y2) && ts_rows_ok(&z));
    tseq both[2] = {z, y2};
    CHECK_EQ_INT(check_all(&f, both, 2), 0);
    ts_free(&y2);
    ts_free(&z);
    fx_free(&f);
}

/* ------------------------------------------------------------ writes */

TEST(cow_keeps_shared_key_rewrite_drops_private_key)
{
    fx f;
    tseq a, b;
    CHECK_EQ_INT(fx_with_seq(&f, 16, &a, A16, 6), 0);
    uint32_t a0 = a.kv.table[0];
    CHECK(keyed(&f, a0));
    /* b = fork of a, truncated into block 0 and rewritten: copy on write. */
    b = a;
    CHECK_EQ_INT(kv_seq_fork(&b.kv, &a.kv), 0);
    kv_seq_truncate(&b.kv, 2);
    b.n = 2;
    prefix_cursor_truncate(&f.pc, &b.cur, 2);
    CHECK_EQ_INT(b.cur.n_blocks, 0);
    const int32_t w[3] = {70, 71, 72};
    CHECK_EQ_INT(ts_step(&f, &b, w, 3), 0);
    CHECK(b.kv.table[0] != a0);
    CHECK(keyed(&f, a0)); /* shared: content unchanged, key kept */
    CHECK(keyed(&f, b.kv.table[0])); /* b's own block 0 filled and keyed */
    CHECK_EQ_INT(f.pc.st.invalidations, 0);
    CHECK(ts_rows_ok(&a) && ts_rows_ok(&b));
    tseq both[2] = {a, b};
    CHECK_EQ_INT(check_all(&f, both, 2), 0);
    CHECK_EQ_INT(prefix_match_len(&f.pc, A16, 5), 4);
    /* a alone holds block 0 now: rewriting it drops the key first. */
    kv_seq_truncate(&a.kv, 3);
    a.n = 3;
    prefix_cursor_truncate(&f.pc, &a.cur, 3);
    const int32_t w2 = 80;
    CHECK_EQ_INT(ts_step(&f, &a, &w2, 1), 0);
    CHECK_EQ_INT(a.kv.table[0], a0);
    CHECK_EQ_INT(f.pc.st.invalidations, 1);
    CHECK_EQ_INT(f.pc.st.evictions, 0);
    CHECK(keyed(&f, a0)); /* re-keyed under its new content */
    CHECK_EQ_INT(prefix_match_len(&f.pc, A16, 5), 3); /* only a tail match of 1, 2, 3 */
    const int32_t q[5] = {1, 2, 3, 80, 0};
    CHECK_EQ_INT(prefix_match_len(&f.pc, q, 5), 4);
    tseq both2[2] = {a, b};
    CHECK_EQ_INT(check_all(&f, both2, 2), 0);
    CHECK(ts_rows_ok(&a) && ts_rows_ok(&b));
    ts_free(&a);
    ts_free(&b);
    fx_free(&f);
}

TEST(duplicate_content_is_deduplicated)
{
    fx f;
    tseq a, b, c;
    uint32_t hit;
    CHECK_EQ_INT(fx_init(&f, 16), 0);
    CHECK_EQ_INT(ts_new(&f, &a), 0);
    CHECK_EQ_INT(ts_new(&f, &b), 0);
    CHECK_EQ_INT(ts_step(&f, &a, A16, 8), 0);
    CHECK_EQ_INT(ts_append(&b, A16, 6), 0); /* computed again, independently */
    uint32_t own0 = b.kv.table[0], own1 = b.kv.table[1];
    CHECK_EQ_INT(ts_register(&f, &b), 0);
    CHECK_EQ_INT(f.pc.st.deduped, 1);
    CHECK_EQ_INT(b.kv.table[0], a.kv.table[0]); /* b now shares a's block */
    CHECK_EQ_INT(b.kv.table[1], own1);
    CHECK_EQ_INT(f.pool.blocks[own0].state, KV_BLOCK_FREE); /* its copy went back */
    CHECK_EQ_INT(f.pool.blocks[a.kv.table[0]].refcount, 2);
    CHECK_EQ_INT(ts_append(&b, A16 + 6, 2), 0);
    CHECK_EQ_INT(ts_register(&f, &b), 0);
    CHECK_EQ_INT(f.pc.st.deduped, 2);
    CHECK_EQ_INT(f.pc.st.registered, 2);
    CHECK_EQ_INT(f.pc.st.cached_blocks, 2);
    CHECK_EQ_INT(b.cur.n_blocks, 2);
    CHECK(ts_rows_ok(&a) && ts_rows_ok(&b));
    tseq both[2] = {a, b};
    CHECK_EQ_INT(check_all(&f, both, 2), 0);
    /* a leaves: the prefix stays cached because b holds the blocks. */
    ts_free(&a);
    CHECK_EQ_INT(f.pool.lru.n, 0);
    CHECK_EQ_INT(prefix_match_len(&f.pc, A16, 9), 8);
    ts_free(&b);
    CHECK_EQ_INT(f.pool.lru.n, 2);
    CHECK_EQ_INT(ts_new(&f, &c), 0);
    CHECK_EQ_INT(ts_attach(&f, &c, A16, 9, false, &hit), 0);
    CHECK_EQ_INT(hit, 8);
    CHECK(ts_rows_ok(&c));
    CHECK_EQ_INT(check_all(&f, &c, 1), 0);
    ts_free(&c);
    fx_free(&f);
}

/* ------------------------------------------------------------ counters */

TEST(counters_exact_and_recompute_not_a_hit)
{
    fx f;
    tseq s[6];
    uint32_t hit;
    CHECK_EQ_INT(fx_init(&f, 32), 0);
    for (int i = 0; i < 6; i++) CHECK_EQ_INT(ts_new(&f, &s[i]), 0);
    CHECK_EQ_INT(ts_step(&f, &s[0], A16, 10), 0);
    prefix_stats st;
    prefix_stats_get(&f.pc, &st);
    CHECK_EQ_INT(st.registered, 2);
    CHECK_EQ_INT(st.cached_blocks, 2);
    CHECK_EQ_INT(st.lookups, 0);

    CHECK_EQ_INT(ts_attach(&f, &s[1], A16, 10, false, &hit), 0);
    CHECK_EQ_INT(hit, 8);
    const int32_t q[7] = {1, 2, 3, 4, 5, 6, 99};
    CHECK_EQ_INT(ts_attach(&f, &s[2], q, 7, false, &hit), 0);
    CHECK_EQ_INT(hit, 6);
    const int32_t r[2] = {77, 78};
    CHECK_EQ_INT(ts_attach(&f, &s[3], r, 2, false, &hit), 0);
    CHECK_EQ_INT(hit, 0);
    prefix_stats_get(&f.pc, &st);
    CHECK_EQ_INT(st.lookups, 3);
    CHECK_EQ_INT(st.lookups_hit, 2);
    CHECK_EQ_INT(st.query_tokens, 19);
    CHECK_EQ_INT(st.hit_tokens, 14);
    CHECK_EQ_INT(st.miss_tokens, 5);
    CHECK_EQ_INT(st.block_hits, 3);
    CHECK_EQ_INT(st.partial_hits, 1);
    CHECK_EQ_INT(st.partial_tokens, 2);

    /* A preempted request rebuilt: served from the cache, never a hit. */
    CHECK_EQ_INT(ts_attach(&f, &s[4], A16, 10, true, &hit), 0);
    CHECK_EQ_INT(hit, 8);
    prefix_stats st2;
    prefix_stats_get(&f.pc, &st2);
    CHECK_EQ_INT(st2.recompute_lookups, 1);
    CHECK_EQ_INT(st2.recompute_tokens, 10);
    CHECK_EQ_INT(st2.recompute_hit_tokens, 8);
    CHECK_EQ_INT(st2.lookups, st.lookups);
    CHECK_EQ_INT(st2.hit_tokens, st.hit_tokens);
    CHECK_EQ_INT(st2.query_tokens, st.query_tokens);
    CHECK_EQ_INT(st2.block_hits, st.block_hits);

    CHECK_EQ_INT(ts_step(&f, &s[1], A16 + 8, 2), 0); /* hits are not registered again */
    CHECK_EQ_INT(ts_step(&f, &s[5], A16, 8), 0);     /* computed again: deduplicated */
    prefix_stats_get(&f.pc, &st);
    CHECK_EQ_INT(st.registered, 2);
    CHECK_EQ_INT(st.deduped, 2);
    CHECK_EQ_INT(st.collisions, 0);
    CHECK_EQ_INT(st.evictions, 0);
    CHECK_EQ_INT(st.invalidations, 0);
    CHECK_EQ_INT(st.cached_blocks, 2);
    CHECK_EQ_INT(check_all(&f, s, 6), 0);
    for (int i = 0; i < 6; i++) ts_free(&s[i]);
    CHECK_EQ_INT(f.pool.lru.n, 2);
    fx_free(&f);
}

/* ------------------------------------------------------------ errors */

TEST(attach_and_init_errors_change_nothing)
{
    fx f;
    tseq a;
    uint32_t hit = 123;
    CHECK_EQ_INT(fx_with_seq(&f, 16, &a, A16, 9), 0);
    prefix_stats st = f.pc.st;
    CHECK_EQ_INT(prefix_attach(&f.pc, &a.kv, A16, 9, false, &a.cur, &hit), PL_EINVAL); /* not empty */
    CHECK(strstr(err_msg(), "empty") != NULL);
    kv_seq big;
    CHECK_EQ_INT(kv_seq_init(&big, &f.pool, 8, KV_SEQ_PAGED), 0);
    CHECK_EQ_INT(prefix_attach(&f.pc, &big, A16, 9, false, &a.cur, &hit), PL_ERANGE);
    kv_seq_free(&big);
    kv_seq st_seq;
    CHECK_EQ_INT(kv_seq_init(&st_seq, &f.pool, 8, KV_SEQ_STATIC), 0);
    CHECK_EQ_INT(prefix_attach(&f.pc, &st_seq, A16, 5, false, &a.cur, &hit), PL_EINVAL);
    kv_seq_free(&st_seq);
    CHECK_EQ_INT(hit, 123);
    CHECK(memcmp(&st, &f.pc.st, sizeof st) == 0);
    CHECK_EQ_INT(a.cur.n_blocks, 2);
    CHECK_EQ_INT(check_all(&f, &a, 1), 0);
    /* A second cache on the same pool is refused. */
    prefix_cache pc2;
    CHECK_EQ_INT(prefix_init(&pc2, &f.pool, model_fp), PL_EINVAL);
    ts_free(&a);
    fx_free(&f);
    /* A pool that still holds keyed blocks (its cache freed first) too. */
    CHECK_EQ_INT(fx_with_seq(&f, 4, &a, A16, 4), 0);
    ts_free(&a);
    prefix_free(&f.pc);
    CHECK(f.pool.on_evict == NULL);
    CHECK_EQ_INT(prefix_init(&pc2, &f.pool, model_fp), PL_EINVAL);
    CHECK(strstr(err_msg(), "keyed") != NULL);
    uint32_t b;
    for (int i = 0; i < 4; i++) CHECK_EQ_INT(kv_pool_alloc(&f.pool, &b), 0); /* evicts silently */
    kv_pool_free(&f.pool);
}

/* ------------------------------------------------------------ randomized */

#define RNB 48   /* pool blocks */
#define RNS 8    /* sequence slots */

typedef struct {
    fx f;
    tseq s[RNS];
    uint32_t sh_len[RNB];        /* tokens of the prefix a keyed block stands for; 0 = none known */
    int32_t sh[RNB][MAXCTX];
    int32_t base[4][48];         /* documents prompts share */
    uint64_t rng;
    prefix_stats exp;                /* counters the reference expects */
    uint64_t unkeys;             /* keys seen to disappear */
} world;

static uint32_t rnd(world *w, uint32_t n)
{
    w->rng ^= w->rng << 13;
    w->rng ^= w->rng >> 7;
    w->rng ^= w->rng << 17;
    return (uint32_t)(w->rng % n);
}

/* Forgets the prefixes of blocks that lost their key since the last look. */
static void ref_sweep(world *w)
{
    for (uint32_t b = 0; b < RNB; b++)
        if (!keyed(&w->f, b) && w->sh_len[b]) {
            w->sh_len[b] = 0;
            w->unkeys++;
        }
}

/* The keyed block standing for exactly tok[0, len), or -1. */
static int ref_find(const world *w, const int32_t *tok, uint32_t len)
{
    for (uint32_t b = 0; b < RNB; b++)
        if (w->sh_len[b] == len && keyed(&w->f, b) && !memcmp(w->sh[b], tok, len * sizeof *tok)) return (int)b;
    return -1;
}

/* After prefix_register of s: its keyed blocks stand for its prefixes (new
 * keys learnt, old ones must agree), and every full block's prefix is
 * cached by some block. Returns false on a disagreement. */
static bool ref_learn(world *w, const tseq *s)
{
    for (uint32_t i = 0; i < s->n / T; i++) {
        uint32_t b = s->kv.table[i], len = (i + 1) * T;
        if (keyed(&w->f, b)) {
            if (w->sh_len[b] == 0) {
                w->sh_len[b] = len;
                memcpy(w->sh[b], s->tok, len * sizeof *s->tok);
            } else if (w->sh_len[b] != len || memcmp(w->sh[b], s->tok, len * sizeof *s->tok)) {
                return false;
            }
        }
        if (ref_find(w, s->tok, len) < 0) return false;
    }
    return true;
}

typedef struct {
    uint32_t k, m;      /* full blocks, best tail match */
    uint32_t cached;    /* CACHED blocks among the k (revived by the attach) */
} ref_hit;

/* The naive reference: longest run of cached block prefixes, then the
 * longest common prefix with any cached block one block further. */
static ref_hit ref_expect(const world *w, const int32_t *q, uint32_t n)
{
    ref_hit r = {0, 0, 0};
    if (n <= 1) return r;
    const uint32_t limit = n - 1;
    for (;;) {
        if ((r.k + 1) * T > limit) break;
        int b = ref_find(w, q, (r.k + 1) * T);
        if (b < 0) break;
        r.cached += w->f.pool.blocks[b].state == KV_BLOCK_CACHED;
        r.k++;
    }
    uint32_t done = r.k * T, rem = limit - done < T ? limit - done : T;
    for (uint32_t b = 0; b < RNB && rem > 0; b++) {
        if (w->sh_len[b] != done + T || !keyed(&w->f, b) || memcmp(w->sh[b], q, done * sizeof *q)) continue;
        uint32_t j = 0;
        while (j < rem && w->sh[b][done + j] == q[done + j]) j++;
        if (j > r.m) r.m = j;
    }
    return r;
}

/* No two keyed blocks stand for the same prefix; every keyed block's
 * prefix is known. */
static bool ref_unique(const world *w)
{
    for (uint32_t b = 0; b < RNB; b++) {
        if (!keyed(&w->f, b)) continue;
        if (w->sh_len[b] == 0) return false;
        for (uint32_t c = b + 1; c < RNB; c++)
            if (keyed(&w->f, c) && w->sh_len[c] == w->sh_len[b] &&
                !memcmp(w->sh[b], w->sh[c], w->sh_len[b] * sizeof(int32_t)))
                return false;
    }
    return true;
}

static int free_slot(world *w)
{
    for (int i = 0; i < RNS; i++)
        if (!w->s[i].alive) return i;
    return -1;
}

static int live_slot(world *w)
{
    int k = 0, pick[RNS];
    for (int i = 0; i < RNS; i++)
        if (w->s[i].alive) pick[k++] = i;
    return k ? pick[rnd(w, (uint32_t)k)] : -1;
}

static uint32_t gen_prompt(world *w, int32_t *q)
{
    uint32_t n = rnd(w, 49), tail = rnd(w, 12);
    memcpy(q, w->base[rnd(w, 4)], n * sizeof *q);
    for (uint32_t i = 0; i < tail && n < MAXCTX; i++) q[n++] = (int32_t)rnd(w, 3);
    if (n == 0) q[n++] = 0;
    return n;
}

/* Runs prefix_register on s, learning what it keyed. */
static bool do_register(world *w, tseq *s)
{
    ref_sweep(w);
    w->exp.registered += ts_register(&w->f, s);
    return ref_learn(w, s);
}

/* A new sequence in slot i for prompt q: attach (checked against the
 * reference), then compute the rest; on a full pool it is dropped. */
static bool do_admit(world *w, int i, const int32_t *q, uint32_t n, bool recompute, const char **why)
{
    tseq *s = &w->s[i];
    ref_hit r = ref_expect(w, q, n);
    uint32_t avail = kv_pool_available(&w->f.pool) - r.cached, hit;
    if (ts_new(&w->f, s)) { *why = "seq init"; return false; }
    if (ts_attach(&w->f, s, q, n, recompute, &hit)) { *why = "attach failed"; return false; }
    uint32_t full = r.k * T, want = full + r.m;
    /* A tail copy needs one block, two if its source is CACHED. */
    bool ok = r.m == 0 ? hit == full : avail >= 2 ? hit == want : avail == 1 ? (hit == want || hit == full) : hit == full;
    if (!ok) { *why = "hit differs from the reference"; return false; }
    if (!ts_rows_ok(s)) { *why = "attached rows differ"; return false; }
    if (recompute) {
        w->exp.recompute_lookups++;
        w->exp.recompute_tokens += n;
        w->exp.recompute_hit_tokens += hit;
    } else {
        w->exp.lookups++;
        w->exp.lookups_hit += hit > 0;
        w->exp.query_tokens += n;
        w->exp.hit_tokens += hit;
        w->exp.miss_tokens += n - hit;
        w->exp.block_hits += r.k;
        w->exp.partial_hits += hit > full;
        w->exp.partial_tokens += hit - full;
    }
    if (ts_append(s, q + hit, n - hit)) {
        ts_free(s);
        return true;
    }
    if (!do_register(w, s)) { *why = "register disagrees with the reference"; return false; }
    return true;
}

static bool do_extend(world *w, tseq *s, const char **why)
{
    int32_t t[6];
    uint32_t k = 1 + rnd(w, 6);
    if (k > MAXCTX - s->n) k = MAXCTX - s->n;
    if (k == 0) return true;
    for (uint32_t i = 0; i < k; i++) t[i] = (int32_t)rnd(w, 3);
    if (ts_append(s, t, k)) return true; /* pool full: nothing changed */
    if (!do_register(w, s)) { *why = "register disagrees with the reference"; return false; }
    return true;
}

static bool rand_op(world *w, const char **why)
{
    int32_t q[MAXCTX];
    int i = live_slot(w), j = free_slot(w);
    switch (rnd(w, 8)) {
    case 0: case 1: /* a new request */
        if (j < 0) return true;
        return do_admit(w, j, q, gen_prompt(w, q), false, why);
    case 2: /* decode / more prompt */
        return i < 0 || do_extend(w, &w->s[i], why);
    case 3: /* n > 1 samples of one prompt */
        if (i < 0 || j < 0) return true;
        w->s[j] = w->s[i];
        if (kv_seq_fork(&w->s[j].kv, &w->s[i].kv)) w->s[j].alive = false;
        return true;
    case 4: /* a request ends */
        if (i >= 0) ts_free(&w->s[i]);
        return true;
    case 5: { /* truncate (chat edit, rejected draft), then write anew */
        if (i < 0) return true;
        tseq *s = &w->s[i];
        uint32_t n = rnd(w, s->n + 1);
        kv_seq_truncate(&s->kv, n);
        s->n = n;
        prefix_cursor_truncate(&w->f.pc, &s->cur, n);
        return do_extend(w, s, why);
    }
    case 6: /* preempted, later rebuilt from the cache */
        if (i < 0 || w->s[i].n == 0) return true;
        memcpy(q, w->s[i].tok, w->s[i].n * sizeof *q);
        {
            uint32_t n = w->s[i].n;
            ts_free(&w->s[i]);
            return do_admit(w, i, q, n, true, why);
        }
    default: /* the next chat turn, the previous one freed */
        if (i < 0) return true;
        {
            uint32_t n = w->s[i].n, k = 1 + rnd(w, 8);
            memcpy(q, w->s[i].tok, n * sizeof *q);
            while (k-- > 0 && n < MAXCTX) q[n++] = (int32_t)rnd(w, 3);
            ts_free(&w->s[i]);
            return do_admit(w, i, q, n, false, why);
        }
    }
}

static bool stats_match(const world *w)
{
    const prefix_stats *a = &w->f.pc.st, *e = &w->exp;
    return a->lookups == e->lookups && a->lookups_hit == e->lookups_hit && a->query_tokens == e->query_tokens &&
           a->hit_tokens == e->hit_tokens && a->miss_tokens == e->miss_tokens && a->block_hits == e->block_hits &&
           a->partial_hits == e->partial_hits && a->partial_tokens == e->partial_tokens &&
           a->recompute_lookups == e->recompute_lookups && a->recompute_tokens == e->recompute_tokens &&
           a->recompute_hit_tokens == e->recompute_hit_tokens && a->registered == e->registered &&
           a->collisions == 0 && a->evictions + a->invalidations == w->unkeys;
}

TEST(randomized_against_reference)
{
    static world w; /* big: keep it off the stack */
    memset(&w, 0, sizeof w);
    w.rng = 0x9e3779b97f4a7c15u;
    CHECK_EQ_INT(fx_init(&w.f, RNB), 0);
    for (int d = 0; d < 4; d++)
        for (int t = 0; t < 48; t++) w.base[d][t] = (int32_t)rnd(&w, d < 2 ? 2 : 5);
    uint64_t hits = 0, partial = 0;
    for (int op = 0; op < 20000; op++) {
        const char *why = "";
        CHECK_MSG(rand_op(&w, &why), "op %d: %s", op, why);
        ref_sweep(&w);
        CHECK_MSG(check_all(&w.f, w.s, RNS) == 0, "op %d: %s", op, err_msg());
        CHECK_MSG(ref_unique(&w), "op %d: two keyed blocks stand for one prefix, or one is unknown", op);
        for (int i = 0; i < RNS; i++) {
            const tseq *s = &w.s[i];
            CHECK_MSG(!s->alive || ts_rows_ok(s), "op %d: seq %d holds a wrong row", op, i);
            /* Every block a live sequence registered (or hit) is findable. */
            for (uint32_t b = 0; s->alive && b < s->cur.n_blocks; b++)
                CHECK_MSG(keyed(&w.f, s->kv.table[b]), "op %d: seq %d block %u lost its key", op, i, b);
        }
        CHECK_MSG(stats_match(&w), "op %d: counters differ from the reference", op);
    }
    hits = w.f.pc.st.hit_tokens;
    partial = w.f.pc.st.partial_tokens;
    INFO("prefix cache random: %llu lookups, %llu/%llu tokens hit (%llu by tail copies), %llu recompute "
         "tokens served, %llu evictions, %llu invalidations, %llu deduplicated",
         (unsigned long long)w.f.pc.st.lookups, (unsigned long long)hits,
         (unsigned long long)w.f.pc.st.query_tokens, (unsigned long long)partial,
         (unsigned long long)w.f.pc.st.recompute_hit_tokens, (unsigned long long)w.f.pc.st.evictions,
         (unsigned long long)w.f.pc.st.invalidations, (unsigned long long)w.f.pc.st.deduped);
    /* The workload really exercised what it is meant to. */
    CHECK(hits > 0 && partial > 0 && w.f.pc.st.evictions > 0 && w.f.pc.st.invalidations > 0 &&
          w.f.pc.st.deduped > 0 && w.f.pc.st.recompute_hit_tokens > 0);
    for (int i = 0; i < RNS; i++) ts_free(&w.s[i]);
    CHECK_EQ_INT(kv_check(&w.f.pool, NULL, 0), 0);
    CHECK_EQ_INT(prefix_check(&w.f.pc), 0);
    CHECK_EQ_INT(w.f.pool.n_used, 0);
    fx_free(&w.f);
}

int main(void)
{
    RUN(salt_names_model_dtype_and_block_size);
    RUN(key_is_xxh3_of_salt_parent_tokens);
    RUN(full_blocks_hit_and_last_token_is_never_served);
    RUN(multi_turn_reuses_freed_turns);
    RUN(tail_copy_copies_the_right_rows);
    RUN(tail_copy_picks_the_longest_child);
    RUN(tail_copy_skipped_without_a_block);
    RUN(tail_source_is_pinned_while_copied);
    RUN(verification_rejects_a_hash_collision);
    RUN(verification_rejects_planted_tokens_and_check_sees_them);
    RUN(check_detects_index_corruption);
    RUN(lru_evicts_least_recent_chain_tail_first);
    RUN(cow_keeps_shared_key_rewrite_drops_private_key);
    RUN(duplicate_content_is_deduplicated);
    RUN(counters_exact_and_recompute_not_a_hit);
    RUN(attach_and_init_errors_change_nothing);
    RUN(randomized_against_reference);
    return test_summary();
}
