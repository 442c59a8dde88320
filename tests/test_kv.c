/* test_kv.c - the KV cache core: dtype bytes, pool, block tables, fork and
 * copy-on-write, the static baseline, accounting, kv_check, and a
 * randomized run of thousands of operations checked after every step
 * against a shadow copy of what every token row must hold. */
#include "test.h"

#include "base/err.h"
#include "kv/kv_check.h"
#include "kv/kv_dtype.h"
#include "pagellm.h"
#include "kv/kv_pool.h"
#include "kv/kv_seq.h"
#include "tensor/dtype.h"
#include "rng.h"

#include <stdint.h>

/* 2 layers, 2 KV heads of 4, blocks of 4 tokens, f32: rows of 32 bytes. */
static const kv_shape small = {2, 2, 4, 4, KV_F32, KV_KIND_KV};

/* ------------------------------------------------------------ helpers */

/* Fills pos's rows (every layer, K and V) with a pattern derived from v. */
static void row_fill(kv_seq *s, uint32_t pos, uint32_t v)
{
    for (uint32_t l = 0; l < s->pool->g.s.n_layers; l++)
        for (int p = 0; p < 2; p++) {
            uint8_t *r = kv_seq_row(s, l, (kv_plane)p, pos);
            for (uint64_t j = 0; j < s->pool->g.row_bytes[p]; j++)
                r[j] = (uint8_t)((v * 2654435761u) >> 24 ^ (uint32_t)(j * 7 + l * 13 + (uint32_t)p * 101));
        }
}

static bool row_holds(const kv_seq *s, uint32_t pos, uint32_t v)
{
    for (uint32_t l = 0; l < s->pool->g.s.n_layers; l++)
        for (int p = 0; p < 2; p++) {
            const uint8_t *r = kv_seq_row(s, l, (kv_plane)p, pos);
            for (uint64_t j = 0; j < s->pool->g.row_bytes[p]; j++)
                if (r[j] != (uint8_t)((v * 2654435761u) >> 24 ^ (uint32_t)(j * 7 + l * 13 + (uint32_t)p * 101)))
                    return false;
        }
    return true;
}

/* A copy of everything a failed operation must leave alone. */
typedef struct {
    kv_list free_list, lru;
    uint32_t n_used, n_blocks, n_tokens, table[256];
    kv_block blocks[256];
} snap;

static void snap_take(snap *sn, const kv_pool *p, const kv_seq *s)
{
    memset(sn, 0, sizeof *sn);
    sn->free_list = p->free_list;
    sn->lru = p->lru;
    sn->n_used = p->n_used;
    memcpy(sn->blocks, p->blocks, p->n_blocks * sizeof *p->blocks);
    if (s) {
        sn->n_blocks = s->n_blocks;
        sn->n_tokens = s->n_tokens;
        memcpy(sn->table, s->table, s->n_blocks * sizeof *s->table);
    }
}

static bool snap_same(const snap *a, const kv_pool *p, const kv_seq *s)
{
    snap b;
    snap_take(&b, p, s);
    return memcmp(a, &b, sizeof b) == 0;
}

/* ------------------------------------------------------------- dtypes */

/* The start of a sequence test: a pool of n_blocks blocks of `small`, and
 * s in it (kv_seq_init). Returns the first nonzero result. */
static int pool_and_seq(kv_pool *pool, uint32_t n_blocks, kv_seq *s, uint32_t max_ctx, kv_seq_mode mode)
{
    int rc = kv_pool_init(pool, &small, n_blocks);
    return rc ? rc : kv_seq_init(s, pool, max_ctx, mode);
}

/* The end of a two-sequence test: kv_check of the pool with a and b, then
 * both freed and kv_check of the pool with none, then the pool freed.
 * Returns the first nonzero kv_check result (0: both passed); frees
 * everything either way. */
static int free_two_checked(kv_pool *pool, kv_seq *a, kv_seq *b)
{
    kv_seq *all[] = {a, b};
    int rc = kv_check(pool, all, 2);
    kv_seq_free(a);
    kv_seq_free(b);
    if (rc == 0) rc = kv_check(pool, NULL, 0);
    kv_pool_free(pool);
    return rc;
}

TEST(dtype_bytes_per_token_llama70b)
{
    /* 80 layers, 8 KV heads, head dim 128, blocks of 16. */
    const double want[KV_DTYPE_COUNT] = {
        [KV_F32] = 655360, [KV_F16] = 327680, [KV_BF16] = 327680,
        [KV_Q8_0] = 80 * 2 * (1024 / 32 * 34), [KV_Q4_0] = 80 * 2 * (1024 / 32 * 18),
        [KV_FP8_E4M3] = 80 * 2 * (1024 + 8 * 4 / 16.0), [KV_FP8_E5M2] = 80 * 2 * 1024,
        /* KIVI per layer and block of 16: K = 1024 channels x (8 B of nibbles +
         * f16 scale + f16 min), V = 16 rows x 32 groups x 20 B (int2: 4 B, 12 B) */
        [KV_INT4] = 80 * (1024 * (8 + 4) + 16 * 32 * 20) / 16.0,
        [KV_INT2] = 80 * (1024 * (4 + 4) + 16 * 32 * 12) / 16.0,
    };
    for (int t = 0; t < KV_DTYPE_COUNT; t++)
        CHECK_MSG(kv_dtype_bytes_per_token((kv_dtype)t, 80, 8, 128, 16) == want[t], "%s: %.3f != %.3f",
                  kv_dtype_name((kv_dtype)t), kv_dtype_bytes_per_token((kv_dtype)t, 80, 8, 128, 16), want[t]);
    CHECK_EQ_INT(kv_dtype_bytes_per_token(KV_Q8_0, 80, 8, 128, 16), 174080);
    CHECK_EQ_INT(kv_dtype_bytes_per_token(KV_INT4, 80, 8, 128, 16), 112640);
    CHECK_EQ_INT(kv_dtype_bytes_per_token(KV_INT2, 80, 8, 128, 16), 71680);
    /* the f16 block being filled is per sequence, counted apart */
    CHECK_EQ_INT(kv_dtype_stage_bytes(KV_INT4, 80, 8, 128, 16), 80 * 2 * 16 * 1024 * 2);
    CHECK_EQ_INT(kv_dtype_stage_bytes(KV_Q4_0, 80, 8, 128, 16), 0);
}

TEST(dtype_plane_and_tail)
{
    /* fp8_e4m3: 16 rows of 1024 bytes + 8 heads x f32 scale. */
    CHECK_EQ_INT(kv_dtype_plane_bytes(KV_FP8_E4M3, KV_PLANE_K, 16, 8, 128), 16 * 1024 + 32);
    CHECK_EQ_INT(kv_dtype_plane_bytes(KV_FP8_E5M2, KV_PLANE_V, 16, 8, 128), 16 * 1024);
    CHECK_EQ_INT(kv_dtype_row_bytes(KV_Q4_0, KV_PLANE_K, 64), 36);
    CHECK_EQ_INT(kv_dtype_row_bytes(KV_Q4_0, KV_PLANE_K, 48), 0); /* does not fit */
    /* The e4m3 tail per token shrinks with bigger blocks: fractional at 3. */
    CHECK_NEAR(kv_dtype_bytes_per_token(KV_FP8_E4M3, 1, 1, 32, 3), 2 * (32 + 4 / 3.0), 1e-9);
    /* KIVI keys have no rows: columns of ceil(T x bits / 8) bytes + d, m */
    CHECK_EQ_INT(kv_dtype_row_bytes(KV_INT4, KV_PLANE_K, 1024), 0);
    CHECK_EQ_INT(kv_dtype_plane_bytes(KV_INT4, KV_PLANE_K, 16, 8, 128), 1024 * 12);
    CHECK_EQ_INT(kv_dtype_plane_bytes(KV_INT2, KV_PLANE_K, 3, 1, 32), 32 * (1 + 4));
    CHECK_EQ_INT(kv_dtype_row_bytes(KV_INT2, KV_PLANE_V, 64), 24);
    CHECK_NEAR(kv_dtype_bytes_per_token(KV_INT2, 1, 1, 32, 3), (32 * 5 + 3 * 12) / 3.0, 1e-9);
}

TEST(dtype_check_grouping)
{
    CHECK_EQ_INT(kv_dtype_check(KV_Q8_0, 4, 8), 0);
    CHECK_EQ_INT(kv_dtype_check(KV_Q4_0, 4, 6), PL_EINVAL);
    CHECK(strstr(err_msg(), "q4_0") && strstr(err_msg(), "24") && strstr(err_msg(), "32"));
    CHECK_EQ_INT(kv_dtype_check(KV_F16, 4, 6), 0);
    CHECK_EQ_INT(kv_dtype_check(KV_F16, 0, 6), PL_EINVAL);
}

/* The writer's and the view's rule: ggml row types per head (q8_0 needs
 * head_dim % 32 even where kv_dim % 32 == 0), the codec's kv_dim rule. */
TEST(dtype_check_heads)
{
    CHECK_EQ_INT(kv_dtype_head_type(KV_Q8_0), DT_Q8_0);
    CHECK_EQ_INT(kv_dtype_head_type(KV_F16), DT_F16);
    CHECK_EQ_INT(kv_dtype_head_type(KV_FP8_E5M2), DT_COUNT);
    CHECK_EQ_INT(kv_dtype_head_type(KV_INT4), DT_COUNT);
    CHECK_EQ_INT(kv_dtype_check_heads(KV_Q8_0, 4, 8), PL_EUNSUPPORTED);
    CHECK(strstr(err_msg(), "--kv-dtype q8_0") && strstr(err_msg(), "head dim 8"));
    CHECK(!kv_dtype_heads_ok(KV_Q8_0, 4, 8) && kv_dtype_heads_ok(KV_Q8_0, 1, 32));
    CHECK_EQ_INT(kv_dtype_check_heads(KV_Q4_0, 2, 64), 0);
    CHECK_EQ_INT(kv_dtype_check_heads(KV_F32, 3, 5), 0);
    CHECK_EQ_INT(kv_dtype_check_heads(KV_FP8_E4M3, 3, 5), 0);
    CHECK(kv_dtype_heads_ok(KV_FP8_E5M2, 3, 5));
    CHECK_EQ_INT(kv_dtype_check_heads(KV_INT4, 4, 8), 0); /* kv_dim 32 */
    CHECK_EQ_INT(kv_dtype_check_heads(KV_INT2, 3, 8), PL_EUNSUPPORTED);
    CHECK(strstr(err_msg(), "--kv-dtype kivi2") && strstr(err_msg(), "24"));
    CHECK(!kv_dtype_heads_ok(KV_INT2, 3, 8) && kv_dtype_heads_ok(KV_INT2, 4, 8));
}

TEST(dtype_names_round_trip)
{
    for (int t = 0; t < KV_DTYPE_COUNT; t++) {
        kv_dtype d = KV_DTYPE_COUNT;
        CHECK_EQ_INT(kv_dtype_from_name(kv_dtype_name((kv_dtype)t), &d), 0);
        CHECK_EQ_INT(d, t);
    }
    kv_dtype d = KV_F32;
    CHECK_EQ_INT(kv_dtype_from_name("Q8_0", &d), 0);
    CHECK_EQ_INT(d, KV_Q8_0);
    CHECK_EQ_INT(kv_dtype_from_name("fp8", &d), 0);
    CHECK_EQ_INT(d, KV_FP8_E4M3);
    CHECK_EQ_INT(kv_dtype_from_name("int4", &d), 0);
    CHECK_EQ_INT(d, KV_INT4);
    CHECK_EQ_INT(kv_dtype_from_name("INT2", &d), 0);
    CHECK_EQ_INT(d, KV_INT2);
    CHECK_STR(kv_dtype_name(KV_INT2), "kivi2");
    d = KV_F16;
    CHECK_EQ_INT(kv_dtype_from_name("q3", &d), PL_EINVAL);
    CHECK_EQ_INT(d, KV_F16);
    CHECK(strstr(err_msg(), "q3") != NULL);
}

TEST(public_kv_size_of)
{
    pl_kv_shape l70 = {80, 8, 128, 16};
    pl_kv_size sz = {0, 0, 0};
    CHECK_EQ_INT(pl_kv_size_of(&l70, PL_KV_BF16, &sz), 0);
    CHECK_EQ_INT(sz.stage_bytes, 0);
    CHECK_EQ_INT(sz.bytes_per_token, 327680);
    CHECK_EQ_INT(sz.bytes_per_block, 327680 * 16); /* as allocated: the planes, nothing added */
    CHECK_EQ_INT(pl_kv_size_of(&l70, PL_KV_FP8_E4M3, &sz), 0);
    CHECK_EQ_INT(sz.bytes_per_token, 80 * 2 * (1024 + 2));
    pl_kv_shape bad = {80, 1, 8, 16};
    CHECK_EQ_INT(pl_kv_size_of(&bad, PL_KV_Q8_0, &sz), PL_EINVAL);
    CHECK_EQ_INT(sz.bytes_per_token, 80 * 2 * (1024 + 2)); /* untouched */
    bad = (pl_kv_shape){80, 8, 128, 0};
    CHECK_EQ_INT(pl_kv_size_of(&bad, PL_KV_F16, &sz), PL_EINVAL);
    CHECK(strstr(pl_last_error(), "block_size") != NULL);
    pl_kv_dtype t;
    CHECK_EQ_INT(pl_kv_dtype_from_name("fp8_e5m2", &t), 0);
    CHECK_EQ_INT(t, PL_KV_FP8_E5M2);
    CHECK_STR(pl_kv_dtype_name(PL_KV_Q4_0), "q4_0");
    CHECK_EQ_INT(pl_kv_dtype_from_name("int4", &t), 0);
    CHECK_EQ_INT(t, PL_KV_INT4);
    CHECK_EQ_INT(pl_kv_size_of(&l70, PL_KV_INT2, &sz), 0);
    CHECK_EQ_INT(sz.bytes_per_token, 71680);
    CHECK_EQ_INT(sz.bytes_per_block, 71680 * 16); /* the planes, nothing added */
    /* KIVI's per-sequence f16 stage: layers x K,V x T x kv_dim x 2 B */
    CHECK_EQ_INT(sz.stage_bytes, 80 * 2 * 16 * 1024 * 2);
}

/* ------------------------------------------------------------ geometry */

TEST(geom_layout_and_padding)
{
    kv_geom g;
    CHECK_EQ_INT(kv_geom_init(&g, &small), 0);
    CHECK_EQ_INT(g.kv_dim, 8);
    CHECK_EQ_INT(g.row_bytes[0], 32);
    CHECK_EQ_INT(g.plane_bytes[1], 128);
    CHECK_EQ_INT(g.block_bytes, 2 * 2 * 128);
    CHECK_EQ_INT(g.block_bytes, g.block_bytes_exact);
    CHECK_EQ_INT(g.bytes_per_token, 2 * 2 * 8 * 4);
    /* q4_0, kv_dim 32, blocks of 1: an 18-byte plane is padded to 32. */
    kv_shape q = {3, 1, 32, 1, KV_Q4_0, KV_KIND_KV};
    CHECK_EQ_INT(kv_geom_init(&g, &q), 0);
    CHECK_EQ_INT(g.plane_bytes[0], 18);
    CHECK_EQ_INT(g.plane_stride[0], 32);
    CHECK_EQ_INT(g.block_bytes, 3 * 64);
    CHECK_EQ_INT(g.block_bytes_exact, 3 * 36);
    CHECK_EQ_INT(kv_geom_blocks_for_bytes(&g, 1000), 5);
    /* TinyLlama at f16: 22 layers of two 8 KiB planes, nothing added */
    kv_shape tl = {22, 4, 64, 16, KV_F16, KV_KIND_KV};
    CHECK_EQ_INT(kv_geom_init(&g, &tl), 0);
    CHECK_EQ_INT(g.block_bytes_exact, 22 * 2 * 16 * 256 * 2);
    CHECK_EQ_INT(g.block_bytes, g.block_bytes_exact);
    CHECK_EQ_INT(g.layer_stride, 16384);
}

TEST(geom_rejects_bad_shapes)
{
    kv_geom g;
    memset(&g, 0x5a, sizeof g);
    kv_geom before = g;
    kv_shape s = small;
    s.n_layers = 0;
    CHECK_EQ_INT(kv_geom_init(&g, &s), PL_EINVAL);
    CHECK(strstr(err_msg(), "n_layers") != NULL);
    s = small;
    s.block_size = 0;
    CHECK_EQ_INT(kv_geom_init(&g, &s), PL_EINVAL);
    s = small;
    s.dtype = KV_Q8_0; /* kv_dim 8 is not a multiple of 32 */
    CHECK_EQ_INT(kv_geom_init(&g, &s), PL_EINVAL);
    CHECK(memcmp(&g, &before, sizeof g) == 0);
    kv_pool pool;
    CHECK_EQ_INT(kv_pool_init(&pool, &s, 8), PL_EINVAL);
    CHECK_EQ_INT(kv_pool_init(&pool, &small, 0), PL_EINVAL);
}

/* ---------------------------------------------------------------- pool */

/* A pool of 2 MiB or more starts on a 2 MiB edge (mem_alloc_huge: the
 * kernel can back it with huge pages), zeroed; a smaller one on 64 B. */
TEST(large_pool_is_on_a_2_mib_edge_and_zeroed)
{
    kv_pool pool;
    const kv_shape big = {4, 2, 64, 16, KV_F16, KV_KIND_KV}; /* 32 KiB a block */
    CHECK_EQ_INT(kv_pool_init(&pool, &big, 100), 0);
    CHECK(pool.g.block_bytes * 100 >= ((uint64_t)2 << 20));
    CHECK((uintptr_t)pool.data % ((uintptr_t)2 << 20) == 0);
    uint64_t nonzero = 0;
    for (uint64_t i = 0; i < pool.g.block_bytes * 100; i++) nonzero += pool.data[i] != 0;
    CHECK(nonzero == 0);
    kv_pool_free(&pool);
    CHECK_EQ_INT(kv_pool_init(&pool, &small, 2), 0);
    CHECK((uintptr_t)pool.data % KV_POOL_ALIGN == 0);
    kv_pool_free(&pool);
}

TEST(pool_init_addresses)
{
    kv_pool pool;
    CHECK_EQ_INT(kv_pool_init(&pool, &small, 10), 0);
    CHECK_EQ_INT(kv_check(&pool, NULL, 0), 0);
    CHECK_EQ_INT(kv_pool_available(&pool), 10);
    CHECK((uintptr_t)pool.data % KV_POOL_ALIGN == 0);
    /* Every plane of every block is aligned, inside the pool, and the planes
     * tile the pool exactly in the drawn order: layer-major, a layer's K
     * planes in block id order one plane_stride[K] apart (kv_plane_step),
     * then its V planes likewise. */
    uint8_t *expect = pool.data;
    CHECK_EQ_INT(kv_plane_step(&pool, KV_PLANE_K), pool.g.plane_stride[KV_PLANE_K]);
    CHECK_EQ_INT(kv_plane_step(&pool, KV_PLANE_V), pool.g.plane_stride[KV_PLANE_V]);
    for (uint32_t l = 0; l < 2; l++)
        for (int p = 0; p < 2; p++)
            for (uint32_t b = 0; b < 10; b++) {
                CHECK(kv_block_plane(&pool, b, l, (kv_plane)p) == expect);
                CHECK((uintptr_t)expect % KV_PLANE_ALIGN == 0);
                CHECK(kv_block_tail(&pool, b, l, (kv_plane)p) == NULL);
                expect += pool.g.plane_stride[p];
            }
    CHECK(expect == pool.data + 10 * pool.g.block_bytes);
    CHECK_EQ_INT(kv_row_stride(&pool, KV_PLANE_K), 32);
    kv_pool_free(&pool);
}

/* A block is two pieces a layer (its K and V planes): copy, save and load
 * move exactly its layers' planes, in slot order (K then V), and touch no
 * other block. KIVI's K and V planes differ in size. */
static void check_block_moves(kv_dtype dt)
{
    kv_pool pool;
    const kv_shape sh = {3, 2, 32, 16, dt, KV_KIND_KV};
    CHECK_EQ_INT(kv_pool_init(&pool, &sh, 6), 0);
    const uint64_t all = pool.g.block_bytes * pool.n_blocks, ls = pool.g.layer_stride;
    const uint64_t ps[2] = {pool.g.plane_stride[KV_PLANE_K], pool.g.plane_stride[KV_PLANE_V]};
    CHECK_EQ_INT(pool.g.block_bytes, 3 * ls);
    for (uint64_t i = 0; i < all; i++) pool.data[i] = (uint8_t)((i * 2654435761u) >> 13); /* no short period */
    uint8_t *before = malloc(all), *saved = malloc(pool.g.block_bytes);
    CHECK(before && saved);
    memcpy(before, pool.data, all);
    kv_pool_copy_block(&pool, 4, 1);
    kv_block_save(&pool, 1, saved);
    for (uint32_t l = 0; l < 3; l++)
        for (int p = 0; p < 2; p++) {
            const uint8_t *src = kv_block_plane(&pool, 1, l, (kv_plane)p);
            CHECK(memcmp(kv_block_plane(&pool, 4, l, (kv_plane)p), src, ps[p]) == 0);
            CHECK(memcmp(saved + l * ls + (p ? ps[0] : 0), src, ps[p]) == 0);
        }
    uint64_t changed = 0;
    for (uint64_t i = 0; i < all; i++) changed += pool.data[i] != before[i];
    CHECK(changed > 0 && changed <= 3 * ls); /* block 4's planes only */
    for (uint32_t l = 0; l < 3; l++)
        for (int p = 0; p < 2; p++)
            for (uint32_t b = 0; b < 6; b++) {
                const uint8_t *at = kv_block_plane(&pool, b, l, (kv_plane)p);
                if (b != 4) CHECK(memcmp(at, before + (at - pool.data), ps[p]) == 0);
            }
    kv_block_load(&pool, 2, saved);
    uint8_t *again = malloc(pool.g.block_bytes);
    CHECK(again);
    kv_block_save(&pool, 2, again);
    CHECK(memcmp(again, saved, pool.g.block_bytes) == 0);
    for (uint32_t l = 0; l < 3; l++)
        for (int p = 0; p < 2; p++)
            CHECK(memcmp(kv_block_plane(&pool, 2, l, (kv_plane)p), kv_block_plane(&pool, 1, l, (kv_plane)p), ps[p]) == 0);
    free(again);
    free(saved);
    free(before);
    kv_pool_free(&pool);
}

TEST(block_copy_save_and_load_move_every_layer_and_nothing_else)
{
    check_block_moves(KV_F16);
    check_block_moves(KV_INT4); /* K and V planes of different sizes */
}

TEST(pool_fp8_tail_address)
{
    kv_shape s = {2, 8, 128, 16, KV_FP8_E4M3, KV_KIND_KV};
    kv_pool pool;
    CHECK_EQ_INT(kv_pool_init(&pool, &s, 2), 0);
    uint8_t *t = kv_block_tail(&pool, 1, 1, KV_PLANE_V);
    CHECK(t == kv_block_v(&pool, 1, 1) + 16 * 1024);
    CHECK((uintptr_t)t % 4 == 0);
    CHECK_EQ_INT(pool.g.plane_stride[1], 16 * 1024 + 32);
    kv_pool_free(&pool);
}

TEST(pool_kivi_planes)
{
    /* kivi4, 2 layers, 2 heads of 32, blocks of 16: K 64 x (8 + 4) = 768,
     * V 16 x 2 x 20 = 640; both already multiples of 16 */
    kv_shape s = {2, 2, 32, 16, KV_INT4, KV_KIND_KV};
    kv_pool pool;
    CHECK_EQ_INT(kv_pool_init(&pool, &s, 2), 0);
    CHECK_EQ_INT(pool.g.row_bytes[KV_PLANE_K], 0);
    CHECK_EQ_INT(pool.g.row_bytes[KV_PLANE_V], 40);
    CHECK_EQ_INT(pool.g.plane_bytes[KV_PLANE_K], 768);
    CHECK_EQ_INT(pool.g.plane_bytes[KV_PLANE_V], 640);
    CHECK_EQ_INT(pool.g.block_bytes, pool.g.block_bytes_exact);
    /* layer 1's arena: K of blocks 0 and 1 (768 each), then V of blocks 0 and 1 (640 each) */
    CHECK(kv_block_k(&pool, 1, 1) == pool.data + pool.layer_span + 768);
    CHECK(kv_block_v(&pool, 1, 1) == pool.data + pool.layer_span + 2 * 768 + 640);
    CHECK_EQ_INT(kv_plane_step(&pool, KV_PLANE_K), 768);
    CHECK_EQ_INT(kv_plane_step(&pool, KV_PLANE_V), 640);
    CHECK(kv_block_tail(&pool, 1, 1, KV_PLANE_V) == NULL);
    kv_pool_free(&pool);
}

TEST(pool_alloc_until_full)
{
    kv_pool pool;
    uint32_t ids[4], b;
    CHECK_EQ_INT(kv_pool_init(&pool, &small, 4), 0);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(kv_pool_alloc(&pool, &ids[i]), 0);
        CHECK_EQ_INT(ids[i], i); /* ascending on a fresh pool */
    }
    snap sn;
    snap_take(&sn, &pool, NULL);
    CHECK_EQ_INT(kv_pool_alloc(&pool, &b), PL_EFULL);
    CHECK(strstr(err_msg(), "full") != NULL);
    CHECK(snap_same(&sn, &pool, NULL));
    kv_pool_decref(&pool, 2);
    CHECK_EQ_INT(kv_pool_alloc(&pool, &b), 0);
    CHECK_EQ_INT(b, 2);
    for (int i = 0; i < 4; i++) kv_pool_decref(&pool, ids[i]);
    CHECK_EQ_INT(kv_check(&pool, NULL, 0), 0);
    CHECK_EQ_INT(pool.free_list.n, 4);
    kv_pool_free(&pool);
}

TEST(pool_acquire_from_middle_of_free_list)
{
    kv_pool pool;
    CHECK_EQ_INT(kv_pool_init(&pool, &small, 5), 0);
    kv_pool_acquire(&pool, 2);
    CHECK_EQ_INT(pool.blocks[2].state, KV_BLOCK_USED);
    CHECK_EQ_INT(pool.blocks[1].next, 3);
    CHECK_EQ_INT(pool.blocks[3].prev, 1);
    CHECK_EQ_INT(pool.free_list.n, 4);
    kv_pool_acquire(&pool, 2); /* USED: one more reference */
    CHECK_EQ_INT(pool.blocks[2].refcount, 2);
    kv_pool_acquire(&pool, 4); /* the tail */
    CHECK_EQ_INT(pool.free_list.tail, 3);
    kv_pool_decref(&pool, 2);
    kv_pool_decref(&pool, 2);
    kv_pool_decref(&pool, 4);
    CHECK_EQ_INT(kv_check(&pool, NULL, 0), 0);
    kv_pool_free(&pool);
}

TEST(pool_alloc_n_contiguous)
{
    kv_pool pool;
    uint32_t a[3], b, ids[8];
    CHECK_EQ_INT(kv_pool_init(&pool, &small, 8), 0);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(kv_pool_alloc(&pool, &a[i]), 0);
    kv_pool_decref(&pool, a[1]); /* hole at 1: free = 1, 3..7 */
    CHECK_EQ_INT(kv_pool_alloc_n(&pool, 4, ids), 0);
    for (int i = 0; i < 4; i++) CHECK_EQ_INT(ids[i], 3 + i);
    snap sn;
    snap_take(&sn, &pool, NULL);
    CHECK_EQ_INT(kv_pool_alloc_n(&pool, 3, ids), PL_EFULL);
    CHECK(snap_same(&sn, &pool, NULL));
    CHECK_EQ_INT(kv_pool_alloc_n(&pool, 2, ids), 0); /* no run of 2: any 2 */
    CHECK((ids[0] == 1 && ids[1] == 7) || (ids[0] == 7 && ids[1] == 1));
    CHECK_EQ_INT(kv_pool_alloc(&pool, &b), PL_EFULL);
    kv_pool_free(&pool);
}

/* Table entries that do not follow their neighbour's id. */
static uint32_t table_breaks(const kv_seq *s)
{
    uint32_t n = 0;
    for (uint32_t i = 1; i < s->n_blocks; i++) n += s->table[i] != s->table[i - 1] + 1;
    return n;
}

/* Two conversations decoding side by side each take a block every
 * block_size tokens. Taken from the free list's head, their tails
 * interleaved (a, b, a, b...); taken to follow their own last block, each
 * stays a run, which one layer's arena holds as one stream. */
TEST(pool_alloc_next_keeps_each_sequence_a_run)
{
    kv_pool pool;
    kv_seq a, b;
    CHECK_EQ_INT(pool_and_seq(&pool, 64, &a, 4096, KV_SEQ_PAGED), 0);
    CHECK_EQ_INT(kv_seq_init(&b, &pool, 4096, KV_SEQ_PAGED), 0);
    const uint32_t T = small.block_size;
    CHECK_EQ_INT(kv_seq_reserve(&a, 10 * T), 0); /* prompts, one after the other */
    CHECK_EQ_INT(kv_seq_reserve(&b, 10 * T), 0);
    CHECK_EQ_INT(a.table[0], 0);
    /* b's first block leaves the run after a's last block half to a */
    CHECK_EQ_INT(b.table[0], 10 + 54 / 2);
    for (int step = 0; step < 20 * (int)T; step++) {
        CHECK_EQ_INT(kv_seq_reserve(&a, 1), 0);
        CHECK_EQ_INT(kv_seq_reserve(&b, 1), 0);
    }
    INFO("after 20 blocks each: a %u..%u (%u breaks), b %u..%u (%u breaks)", a.table[0], a.table[a.n_blocks - 1],
         table_breaks(&a), b.table[0], b.table[b.n_blocks - 1], table_breaks(&b));
    CHECK_EQ_INT(table_breaks(&a), 0);
    /* 37..63 ran out: b went on in the middle of 28..36, whose first half
     * a (then at 27) still grew into */
    CHECK_EQ_INT(table_breaks(&b), 1);
    CHECK_EQ_INT(b.table[27], 28 + 9 / 2);
    CHECK_EQ_INT(free_two_checked(&pool, &a, &b), 0);
}

/* Where a block goes when its neighbour's successor is taken: the largest
 * run of FREE ids (found across the free bitmap's words), at its start
 * unless a USED block precedes it; with no FREE block, the LRU's head is
 * evicted as kv_pool_alloc does; with none at all, PL_EFULL. */
TEST(pool_alloc_next_picks_the_largest_free_run)
{
    kv_pool pool;
    uint32_t b;
    CHECK_EQ_INT(kv_pool_init(&pool, &small, 200), 0);
    kv_pool_acquire(&pool, 5);
    kv_pool_acquire(&pool, 70);
    kv_pool_acquire(&pool, 140);
    /* runs 0..4, 6..69 (64), 71..139 (69), 141..199 (59) */
    CHECK_EQ_INT(kv_pool_alloc_next(&pool, KV_NONE, &b), 0);
    CHECK_EQ_INT(b, 71 + 69 / 2);
    CHECK_EQ_INT(kv_pool_alloc_next(&pool, 140, &b), 0); /* 141 is free */
    CHECK_EQ_INT(b, 141);
    CHECK_EQ_INT(kv_pool_alloc_next(&pool, 69, &b), 0); /* 70 is taken: 6..69 is the largest now */
    CHECK_EQ_INT(b, 6 + 64 / 2);
    kv_pool_decref(&pool, 5); /* runs 0..37 (38), 142..199 (58, after 141) */
    CHECK_EQ_INT(kv_pool_alloc_next(&pool, 199, &b), 0); /* the pool's end: no successor */
    CHECK_EQ_INT(b, 142 + 58 / 2);
    CHECK_EQ_INT(kv_pool_alloc_next(&pool, KV_NONE, &b), 0); /* 0..37 is the largest, after no block */
    CHECK_EQ_INT(b, 0);
    for (uint32_t i = 0; i < 200; i++)
        if (pool.blocks[i].state == KV_BLOCK_FREE) kv_pool_acquire(&pool, i);
    /* no FREE block: one CACHED block is evicted to serve */
    kv_pool_set_hash(&pool, 199, (uint64_t[2]){1, 2}, KV_NONE);
    kv_pool_decref(&pool, 199);
    CHECK_EQ_INT(pool.blocks[199].state, KV_BLOCK_CACHED);
    CHECK_EQ_INT(kv_pool_alloc_next(&pool, 3, &b), 0);
    CHECK_EQ_INT(b, 199);
    CHECK(!(pool.blocks[199].flags & KV_BLOCK_HASHED));
    CHECK_EQ_INT(kv_pool_alloc_next(&pool, 3, &b), PL_EFULL);
    for (uint32_t i = 0; i < 200; i++) kv_pool_decref(&pool, i);
    CHECK_EQ_INT(kv_check(&pool, NULL, 0), 0);
    CHECK_EQ_INT(pool.free_list.n, 200);
    kv_pool_free(&pool);
}

/* What kv_pool_alloc_next(KV_NONE) must pick, by a plain scan of the
 * states: the largest FREE run's start, or its middle after a USED block;
 * -1 when no block is FREE. */
static int64_t plain_first_pick(const kv_pool *pool)
{
    uint32_t best = 0, best_at = 0, run = 0;
    for (uint32_t b = 0; b <= pool->n_blocks; b++) {
        if (b < pool->n_blocks && pool->blocks[b].state == KV_BLOCK_FREE) {
            run++;
            continue;
        }
        if (run > best) best = run, best_at = b - run;
        run = 0;
    }
    if (best == 0) return -1;
    return best_at > 0 && pool->blocks[best_at - 1].state == KV_BLOCK_USED ? best_at + best / 2 : best_at;
}

/* The free bitmap's run walk against a plain scan, on a pool of 300 blocks
 * (words of 64 ids and a partial last word) churned at random; static
 * sequences' first fit (kv_pool_alloc_n) walks the same runs. */
TEST(pool_alloc_next_matches_a_plain_scan)
{
    kv_pool pool;
    uint32_t b, ids[8];
    CHECK_EQ_INT(kv_pool_init(&pool, &small, 300), 0);
    rng_seed(11);
    int checked = 0;
    for (int it = 0; it < 4000; it++) {
        uint32_t x = rng_u32() % 300;
        if (pool.blocks[x].state == KV_BLOCK_FREE) kv_pool_acquire(&pool, x);
        else kv_pool_decref(&pool, x);
        if (it % 7) continue;
        const int64_t want = plain_first_pick(&pool);
        if (want < 0) continue;
        CHECK_EQ_INT(kv_pool_alloc_next(&pool, KV_NONE, &b), 0);
        CHECK_EQ_INT(b, want);
        kv_pool_decref(&pool, b);
        if (kv_pool_alloc_n(&pool, 8, ids) == 0) { /* a run of 8 if there is one: ids ascending by one */
            bool run = true;
            for (int i = 1; i < 8; i++) run &= ids[i] == ids[i - 1] + 1;
            uint32_t len = 0, longest = 0;
            for (uint32_t i = 0; i < 300; i++) {
                len = pool.blocks[i].state == KV_BLOCK_FREE ? len + 1 : 0;
                if (len > longest) longest = len;
            }
            if (!run) CHECK_MSG(longest < 8, "a run of %u FREE ids was there", longest);
            for (int i = 0; i < 8; i++) kv_pool_decref(&pool, ids[i]);
        }
        checked++;
    }
    INFO("%d picks checked against the plain scan", checked);
    CHECK(checked > 400);
    for (uint32_t i = 0; i < 300; i++)
        if (pool.blocks[i].state == KV_BLOCK_USED) kv_pool_decref(&pool, i);
    CHECK_EQ_INT(kv_check(&pool, NULL, 0), 0);
    kv_pool_free(&pool);
}

static uint32_t evicted[16], n_evicted;
static void note_evict(void *user, uint32_t block, const uint64_t hash[2])
{
    (void)user;
    CHECK_EQ_INT(hash[0], 1000 + block); /* the key is still there when told */
    evicted[n_evicted++] = block;
}

TEST(pool_cached_lru_revive_evict)
{
    kv_pool pool;
    uint32_t b[4], x;
    CHECK_EQ_INT(kv_pool_init(&pool, &small, 4), 0);
    kv_pool_set_evict(&pool, note_evict, NULL);
    n_evicted = 0;
    for (int i = 0; i < 4; i++) CHECK_EQ_INT(kv_pool_alloc(&pool, &b[i]), 0);
    for (int i = 0; i < 3; i++) kv_pool_set_hash(&pool, b[i], (uint64_t[2]){1000 + b[i], 7}, KV_NONE);
    kv_pool_decref(&pool, b[2]);
    kv_pool_decref(&pool, b[0]);
    kv_pool_decref(&pool, b[1]);
    CHECK_EQ_INT(kv_check(&pool, NULL, 0), PL_EFORMAT); /* b[3] used, named by no table */
    CHECK(strstr(err_msg(), "leak") != NULL);
    kv_pool_decref(&pool, b[3]); /* not hashed: free */
    CHECK_EQ_INT(kv_check(&pool, NULL, 0), 0);
    CHECK_EQ_INT(pool.lru.n, 3);
    CHECK_EQ_INT(pool.free_list.n, 1);
    /* LRU order: 2, 0, 1. Revive 0 from the middle: data and key survive. */
    kv_pool_acquire(&pool, b[0]);
    CHECK_EQ_INT(pool.blocks[b[0]].state, KV_BLOCK_USED);
    CHECK_EQ_INT(pool.blocks[b[0]].hash[0], 1000 + b[0]);
    CHECK_EQ_INT(pool.lru.head, b[2]);
    CHECK_EQ_INT(pool.blocks[b[2]].next, b[1]);
    /* Free blocks go first, then the least recently used cached one. */
    CHECK_EQ_INT(kv_pool_alloc(&pool, &x), 0);
    CHECK_EQ_INT(x, b[3]);
    CHECK_EQ_INT(n_evicted, 0);
    CHECK_EQ_INT(kv_pool_alloc(&pool, &x), 0);
    CHECK_EQ_INT(x, b[2]);
    CHECK_EQ_INT(n_evicted, 1);
    CHECK_EQ_INT(evicted[0], b[2]);
    CHECK_EQ_INT(pool.blocks[x].flags & KV_BLOCK_HASHED, 0);
    kv_pool_free(&pool);
}

/* ----------------------------------------------------------- sequences */

TEST(seq_reserve_grows_by_blocks)
{
    kv_pool pool;
    kv_seq s;
    CHECK_EQ_INT(pool_and_seq(&pool, 8, &s, 30, KV_SEQ_PAGED), 0);
    CHECK_EQ_INT(s.cap, 8);
    CHECK_EQ_INT(s.n_blocks, 0);
    CHECK_EQ_INT(kv_seq_reserve(&s, 1), 0);
    CHECK_EQ_INT(s.n_blocks, 1);
    CHECK_EQ_INT(kv_seq_reserve(&s, 3), 0);
    CHECK_EQ_INT(s.n_blocks, 1);
    CHECK_EQ_INT(kv_seq_reserve(&s, 1), 0);
    CHECK_EQ_INT(s.n_blocks, 2);
    CHECK_EQ_INT(kv_seq_reserve(&s, 10), 0);
    CHECK_EQ_INT(s.n_tokens, 15);
    CHECK_EQ_INT(s.n_blocks, 4);
    CHECK_EQ_INT(kv_seq_block(&s, 14), s.table[3]);
    kv_seq *all[] = {&s};
    CHECK_EQ_INT(kv_check(&pool, all, 1), 0);
    CHECK_EQ_INT(kv_seq_bytes_held(&s), 4 * pool.g.block_bytes);
    snap sn;
    snap_take(&sn, &pool, &s);
    CHECK_EQ_INT(kv_seq_reserve(&s, 16), PL_ERANGE); /* 31 > max_ctx 30 */
    CHECK(snap_same(&sn, &pool, &s));
    kv_seq_free(&s);
    CHECK(s.table == NULL);
    CHECK_EQ_INT(kv_check(&pool, NULL, 0), 0);
    CHECK_EQ_INT(pool.free_list.n, 8);
    kv_pool_free(&pool);
}

TEST(seq_full_leaves_state_unchanged)
{
    kv_pool pool;
    kv_seq a, b;
    CHECK_EQ_INT(pool_and_seq(&pool, 3, &a, 100, KV_SEQ_PAGED), 0);
    CHECK_EQ_INT(kv_seq_init(&b, &pool, 100, KV_SEQ_PAGED), 0);
    CHECK_EQ_INT(kv_seq_reserve(&a, 6), 0); /* 2 blocks, 1 left */
    snap sn;
    snap_take(&sn, &pool, &b);
    CHECK_EQ_INT(kv_seq_reserve(&b, 5), PL_EFULL); /* needs 2 */
    CHECK(strstr(err_msg(), "full") != NULL);
    CHECK(snap_same(&sn, &pool, &b));
    CHECK_EQ_INT(kv_seq_append(&b, 5), PL_EFULL);
    CHECK(snap_same(&sn, &pool, &b));
    CHECK_EQ_INT(kv_seq_reserve(&b, 4), 0);
    CHECK_EQ_INT(free_two_checked(&pool, &a, &b), 0);
}

TEST(seq_fork_shares_blocks)
{
    kv_pool pool;
    kv_seq p, c;
    CHECK_EQ_INT(pool_and_seq(&pool, 8, &p, 64, KV_SEQ_PAGED), 0);
    CHECK_EQ_INT(kv_seq_reserve(&p, 10), 0);
    CHECK_EQ_INT(kv_seq_fork(&c, &p), 0);
    CHECK_EQ_INT(c.n_tokens, 10);
    CHECK_EQ_INT(c.n_blocks, 3);
    for (uint32_t i = 0; i < 3; i++) {
        CHECK_EQ_INT(c.table[i], p.table[i]);
        CHECK_EQ_INT(pool.blocks[p.table[i]].refcount, 2);
    }
    CHECK_EQ_INT(pool.n_used, 3);
    kv_seq *all[] = {&p, &c};
    CHECK_EQ_INT(kv_check(&pool, all, 2), 0);
    CHECK_EQ_INT(kv_check(&pool, all, 1), PL_EFORMAT); /* c's references missing */
    CHECK(strstr(err_msg(), "refcount 2") != NULL);
    kv_seq_free(&p);
    kv_seq *only_c[] = {&c};
    CHECK_EQ_INT(kv_check(&pool, only_c, 1), 0);
    CHECK_EQ_INT(pool.blocks[c.table[0]].refcount, 1);
    kv_seq_free(&c);
    CHECK_EQ_INT(pool.free_list.n, 8);
    kv_pool_free(&pool);
}

TEST(seq_cow_copies_data)
{
    kv_pool pool;
    kv_seq p, c;
    CHECK_EQ_INT(pool_and_seq(&pool, 8, &p, 64, KV_SEQ_PAGED), 0);
    CHECK_EQ_INT(kv_seq_append(&p, 6), 0); /* block 0 full, block 1 holds 2 */
    for (uint32_t i = 0; i < 6; i++) row_fill(&p, i, 100 + i);
    CHECK_EQ_INT(kv_seq_fork(&c, &p), 0);
    uint32_t shared = p.table[1];
    /* The child appends: the shared partly filled block is copied first. */
    CHECK_EQ_INT(kv_seq_append(&c, 1), 0);
    CHECK(c.table[1] != shared);
    CHECK_EQ_INT(c.table[0], p.table[0]); /* the full block stays shared */
    CHECK_EQ_INT(pool.blocks[shared].refcount, 1);
    row_fill(&c, 6, 999);
    row_fill(&c, 5, 555); /* overwrite a copied row too */
    for (uint32_t i = 0; i < 6; i++) CHECK_MSG(row_holds(&p, i, 100 + i), "parent row %u changed", i);
    CHECK(row_holds(&c, 4, 104)); /* copied, every layer, K and V */
    CHECK(row_holds(&c, 5, 555));
    CHECK(row_holds(&c, 6, 999));
    /* Writing into the shared full block copies it as well. */
    CHECK_EQ_INT(kv_seq_prepare_write(&c, 0), 0);
    CHECK(c.table[0] != p.table[0]);
    row_fill(&c, 0, 7);
    CHECK(row_holds(&p, 0, 100));
    CHECK(row_holds(&c, 1, 101));
    /* A private block is not copied again. */
    uint32_t mine = c.table[0];
    CHECK_EQ_INT(kv_seq_prepare_write(&c, 1), 0);
    CHECK_EQ_INT(c.table[0], mine);
    CHECK_EQ_INT(kv_seq_prepare_write(&c, 7), PL_ERANGE); /* not reserved */
    CHECK_EQ_INT(free_two_checked(&pool, &p, &c), 0);
}

TEST(seq_cow_full_leaves_state_unchanged)
{
    kv_pool pool;
    kv_seq p, c;
    CHECK_EQ_INT(pool_and_seq(&pool, 3, &p, 64, KV_SEQ_PAGED), 0);
    CHECK_EQ_INT(kv_seq_append(&p, 6), 0);
    CHECK_EQ_INT(kv_seq_fork(&c, &p), 0);
    /* 1 block left: appending 3 to c needs a copy of block 1 and a new block. */
    snap sn;
    snap_take(&sn, &pool, &c);
    CHECK_EQ_INT(kv_seq_append(&c, 3), PL_EFULL);
    CHECK(snap_same(&sn, &pool, &c));
    CHECK_EQ_INT(kv_seq_append(&c, 2), 0); /* the copy only */
    CHECK_EQ_INT(pool.free_list.n, 0);
    snap_take(&sn, &pool, &p);
    CHECK_EQ_INT(kv_seq_prepare_write(&p, 0), PL_EFULL); /* block 0 shared, no block */
    CHECK(snap_same(&sn, &pool, &p));
    kv_seq *all[] = {&p, &c};
    CHECK_EQ_INT(kv_check(&pool, all, 2), 0);
    kv_seq_free(&c);
    kv_seq_free(&p);
    kv_pool_free(&pool);
}

TEST(seq_truncate_returns_blocks)
{
    kv_pool pool;
    kv_seq s;
    CHECK_EQ_INT(pool_and_seq(&pool, 8, &s, 64, KV_SEQ_PAGED), 0);
    CHECK_EQ_INT(kv_seq_reserve(&s, 13), 0);
    kv_seq_truncate(&s, 5);
    CHECK_EQ_INT(s.n_blocks, 2);
    CHECK_EQ_INT(pool.n_used, 2);
    kv_seq_truncate(&s, 0);
    CHECK_EQ_INT(s.n_blocks, 0);
    kv_seq *all[] = {&s};
    CHECK_EQ_INT(kv_check(&pool, all, 1), 0);
    kv_seq_free(&s);
    kv_pool_free(&pool);
}

TEST(seq_push_block_prefix_hit)
{
    kv_pool pool;
    kv_seq a, b;
    CHECK_EQ_INT(pool_and_seq(&pool, 4, &a, 64, KV_SEQ_PAGED), 0);
    CHECK_EQ_INT(kv_seq_append(&a, 4), 0);
    for (uint32_t i = 0; i < 4; i++) row_fill(&a, i, 40 + i);
    uint32_t blk = a.table[0];
    kv_pool_set_hash(&pool, blk, (uint64_t[2]){1, 2}, KV_NONE);
    kv_seq_free(&a);
    CHECK_EQ_INT(pool.blocks[blk].state, KV_BLOCK_CACHED);
    CHECK_EQ_INT(kv_seq_init(&b, &pool, 64, KV_SEQ_PAGED), 0);
    CHECK_EQ_INT(kv_seq_push_block(&b, blk), 0);
    CHECK_EQ_INT(b.n_tokens, 4);
    CHECK(row_holds(&b, 3, 43));
    CHECK_EQ_INT(kv_seq_append(&b, 1), 0);
    CHECK_EQ_INT(kv_seq_push_block(&b, blk), PL_EINVAL); /* not at a boundary */
    /* Rewriting a private hashed block drops its key. */
    CHECK_EQ_INT(kv_seq_prepare_write(&b, 2), 0);
    CHECK_EQ_INT(pool.blocks[blk].flags & KV_BLOCK_HASHED, 0);
    kv_seq *all[] = {&b};
    CHECK_EQ_INT(kv_check(&pool, all, 1), 0);
    kv_seq_free(&b);
    CHECK_EQ_INT(pool.lru.n, 0);
    kv_pool_free(&pool);
}

/* -------------------------------------------------------- static mode */

TEST(static_reserves_up_front)
{
    kv_shape sh = small;
    sh.block_size = 16;
    kv_pool pool;
    kv_seq s[2], t;
    CHECK_EQ_INT(kv_pool_init(&pool, &sh, 40), 0);
    CHECK_EQ_INT(kv_seq_init(&s[0], &pool, 256, KV_SEQ_STATIC), 0);
    CHECK_EQ_INT(s[0].n_blocks, 16);
    CHECK_EQ_INT(s[0].n_tokens, 0);
    for (uint32_t i = 0; i < 16; i++) CHECK_EQ_INT(s[0].table[i], i); /* contiguous */
    CHECK_EQ_INT(kv_seq_init(&s[1], &pool, 250, KV_SEQ_STATIC), 0);
    CHECK_EQ_INT(s[1].table[0], 16);
    CHECK_EQ_INT(s[1].table[15], 31);
    /* Reserving tokens takes no blocks. */
    CHECK_EQ_INT(kv_seq_append(&s[0], 40), 0);
    CHECK_EQ_INT(pool.n_used, 32);
    snap sn;
    snap_take(&sn, &pool, NULL);
    CHECK_EQ_INT(kv_seq_init(&t, &pool, 256, KV_SEQ_STATIC), PL_EFULL);
    CHECK(snap_same(&sn, &pool, NULL));
    CHECK_EQ_INT(kv_seq_append(&s[1], 251), PL_ERANGE);
    kv_seq *all[] = {&s[0], &s[1]};
    CHECK_EQ_INT(kv_check(&pool, all, 2), 0);
    kv_seq_truncate(&s[0], 3);
    CHECK_EQ_INT(s[0].n_blocks, 16);
    CHECK_EQ_INT(kv_check(&pool, all, 2), 0);
    kv_seq_free(&s[0]);
    kv_seq_free(&s[1]);
    CHECK_EQ_INT(pool.free_list.n, 40);
    kv_pool_free(&pool);
}

TEST(static_fork_shares_filled_blocks)
{
    kv_pool pool;
    kv_seq p, c;
    CHECK_EQ_INT(pool_and_seq(&pool, 12, &p, 20, KV_SEQ_STATIC), 0); /* 5 blocks */
    CHECK_EQ_INT(kv_seq_append(&p, 6), 0);
    for (uint32_t i = 0; i < 6; i++) row_fill(&p, i, i);
    CHECK_EQ_INT(kv_seq_fork(&c, &p), 0);
    CHECK_EQ_INT(c.n_blocks, 5);
    CHECK_EQ_INT(c.table[1], p.table[1]); /* holds tokens: shared */
    CHECK(c.table[2] != p.table[2]);      /* empty: the child's own */
    CHECK_EQ_INT(pool.n_used, 8);
    CHECK_EQ_INT(kv_seq_append(&c, 1), 0); /* copy of block 1 */
    row_fill(&c, 6, 66);
    CHECK(row_holds(&c, 5, 5));
    CHECK(row_holds(&p, 5, 5));
    CHECK_EQ_INT(free_two_checked(&pool, &p, &c), 0);
}

TEST(static_rewrite_after_truncate_copies_every_shared_block)
{
    kv_pool pool;
    kv_seq p, c, filler;
    CHECK_EQ_INT(pool_and_seq(&pool, 8, &p, 12, KV_SEQ_STATIC), 0); /* 3 blocks */
    CHECK_EQ_INT(kv_seq_append(&p, 12), 0);
    for (uint32_t i = 0; i < 12; i++) row_fill(&p, i, 500 + i);
    CHECK_EQ_INT(kv_seq_fork(&c, &p), 0); /* shares all 3 */
    CHECK_EQ_INT(kv_seq_init(&filler, &pool, 12, KV_SEQ_STATIC), 0); /* 2 blocks left */
    kv_seq_truncate(&p, 2);
    /* Positions 2..11 fall in 3 shared blocks: 3 copies, only 2 blocks. */
    snap sn;
    snap_take(&sn, &pool, &p);
    CHECK_EQ_INT(kv_seq_append(&p, 10), PL_EFULL);
    CHECK(snap_same(&sn, &pool, &p));
    kv_seq_free(&filler);
    CHECK_EQ_INT(kv_seq_append(&p, 10), 0);
    for (uint32_t i = 2; i < 12; i++) row_fill(&p, i, 900 + i);
    for (uint32_t i = 0; i < 12; i++) CHECK_MSG(row_holds(&c, i, 500 + i), "child row %u changed", i);
    CHECK(row_holds(&p, 1, 501));
    kv_seq *all[] = {&p, &c};
    CHECK_EQ_INT(kv_check(&pool, all, 2), 0);
    kv_seq_free(&p);
    kv_seq_free(&c);
    kv_pool_free(&pool);
}

/* --------------------------------------------------------- accounting */

TEST(stats_paged_vs_static)
{
    kv_shape sh = small;
    sh.block_size = 16;
    kv_pool pool;
    kv_seq pg[4], st[4];
    kv_stats a, b;
    CHECK_EQ_INT(kv_pool_init(&pool, &sh, 100), 0);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(kv_seq_init(&pg[i], &pool, 256, KV_SEQ_PAGED), 0);
        CHECK_EQ_INT(kv_seq_append(&pg[i], 40), 0);
    }
    kv_seq *pp[] = {&pg[0], &pg[1], &pg[2], &pg[3]};
    kv_stats_get(&pool, pp, 4, &a);
    CHECK_EQ_INT(a.blocks_total, 100);
    CHECK_EQ_INT(a.blocks_used, 12);
    CHECK_EQ_INT(a.blocks_free, 88);
    CHECK_EQ_INT(a.tokens, 160);
    CHECK_EQ_INT(a.tokens_stored, 160);
    CHECK_EQ_INT(a.bytes_per_token, 128);
    CHECK_EQ_INT(a.bytes_allocated, 12 * 16 * 128);
    CHECK_EQ_INT(a.bytes_live, 160 * 128);
    CHECK_EQ_INT(a.bytes_wasted, 4 * 8 * 128); /* each tail holds 8 of 16 */
    CHECK_NEAR(a.utilisation, 160.0 / 192, 1e-12);
    for (int i = 0; i < 4; i++) kv_seq_free(&pg[i]);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(kv_seq_init(&st[i], &pool, 256, KV_SEQ_STATIC), 0);
        CHECK_EQ_INT(kv_seq_append(&st[i], 40), 0);
    }
    kv_seq *ss[] = {&st[0], &st[1], &st[2], &st[3]};
    kv_stats_get(&pool, ss, 4, &b);
    CHECK_EQ_INT(b.blocks_used, 64);
    CHECK_EQ_INT(b.bytes_allocated, 64 * 16 * 128);
    CHECK_NEAR(b.utilisation, 160.0 / 1024, 1e-12);
    CHECK_EQ_INT(b.bytes_allocated - a.bytes_allocated, 52 * 2048); /* what paging saves */
    for (int i = 0; i < 4; i++) kv_seq_free(&st[i]);
    kv_pool_free(&pool);
}

TEST(stats_count_shared_blocks_once)
{
    kv_pool pool;
    kv_seq p, c;
    kv_stats st;
    CHECK_EQ_INT(pool_and_seq(&pool, 8, &p, 64, KV_SEQ_PAGED), 0);
    CHECK_EQ_INT(kv_seq_append(&p, 6), 0);
    CHECK_EQ_INT(kv_seq_fork(&c, &p), 0);
    kv_seq_truncate(&c, 5);
    kv_seq *all[] = {&p, &c};
    kv_stats_get(&pool, all, 2, &st);
    CHECK_EQ_INT(st.blocks_held, 2);
    CHECK_EQ_INT(st.tokens, 11);
    CHECK_EQ_INT(st.tokens_stored, 6);
    CHECK_EQ_INT(st.bytes_wasted, 2 * pool.g.block_bytes / 4);
    kv_stats_get(&pool, NULL, 0, &st);
    CHECK_EQ_INT(st.blocks_held, 0);
    CHECK_NEAR(st.utilisation, 1.0, 0);
    kv_seq_free(&p);
    kv_seq_free(&c);
    kv_pool_free(&pool);
}

/* ------------------------------------------------------- kv_check bites */

TEST(check_detects_corruption)
{
    kv_pool pool;
    kv_seq s;
    CHECK_EQ_INT(pool_and_seq(&pool, 6, &s, 64, KV_SEQ_PAGED), 0);
    CHECK_EQ_INT(kv_seq_reserve(&s, 9), 0);
    kv_seq *all[] = {&s};
    CHECK_EQ_INT(kv_check(&pool, all, 1), 0);
    uint32_t b0 = s.table[0];
    pool.blocks[b0].refcount++;
    CHECK_EQ_INT(kv_check(&pool, all, 1), PL_EFORMAT);
    pool.blocks[b0].refcount--;
    uint32_t keep = s.table[1];
    s.table[1] = (uint32_t)pool.free_list.head; /* names a free block */
    CHECK_EQ_INT(kv_check(&pool, all, 1), PL_EFORMAT);
    CHECK(strstr(err_msg(), "state 0") != NULL);
    s.table[1] = keep;
    int32_t h = pool.free_list.head, second = pool.blocks[h].next;
    pool.blocks[second].prev = KV_NONE; /* broken back link */
    CHECK_EQ_INT(kv_check(&pool, all, 1), PL_EFORMAT);
    CHECK(strstr(err_msg(), "prev") != NULL);
    pool.blocks[second].prev = h;
    pool.free_list.n++;
    CHECK_EQ_INT(kv_check(&pool, all, 1), PL_EFORMAT);
    pool.free_list.n--;
    const uint32_t fb = (uint32_t)pool.free_list.head;
    pool.free_bits[fb / 64] &= ~(UINT64_C(1) << (fb % 64)); /* a free block's bit lost */
    CHECK_EQ_INT(kv_check(&pool, all, 1), PL_EFORMAT);
    CHECK(strstr(err_msg(), "free bit") != NULL);
    pool.free_bits[fb / 64] |= UINT64_C(1) << (fb % 64);
    pool.free_bits[b0 / 64] |= UINT64_C(1) << (b0 % 64); /* a used block's bit set */
    CHECK_EQ_INT(kv_check(&pool, all, 1), PL_EFORMAT);
    CHECK(strstr(err_msg(), "free bits for") != NULL);
    pool.free_bits[b0 / 64] &= ~(UINT64_C(1) << (b0 % 64));
    s.n_tokens = 13; /* more tokens than its blocks hold */
    CHECK_EQ_INT(kv_check(&pool, all, 1), PL_EFORMAT);
    s.n_tokens = 9;
    CHECK_EQ_INT(kv_check(&pool, all, 1), 0);
    kv_seq_free(&s);
    kv_pool_free(&pool);
}


/* ------------------------------------------------------- window drops */

TEST(seq_drop_range_compacts_and_copies_shared)
{
    kv_pool pool;
    kv_seq p, c;
    CHECK_EQ_INT(kv_pool_init(&pool, &small, 12), 0);
    kv_pool_set_evict(&pool, note_evict, NULL);
    n_evicted = 0;
    CHECK_EQ_INT(kv_seq_init(&p, &pool, 64, KV_SEQ_PAGED), 0);
    CHECK_EQ_INT(kv_seq_append(&p, 18), 0); /* 5 blocks of 4: the last holds 2 */
    for (uint32_t i = 0; i < 18; i++) row_fill(&p, i, 100 + i);
    uint32_t old[5];
    memcpy(old, p.table, sizeof old);
    kv_pool_set_hash(&pool, old[3], (uint64_t[2]){1000 + old[3], 0}, KV_NONE); /* keyed: must lose its key when it moves */
    kv_pool_set_hash(&pool, old[0], (uint64_t[2]){1000 + old[0], 0}, KV_NONE); /* a sink: keeps its key */
    CHECK_EQ_INT(kv_seq_fork(&c, &p), 0);
    CHECK_EQ_INT(kv_seq_drop_balance(&c, 1, 2), 2 - 0); /* blocks 3, 4 shared: 2 copies; 1, 2 shared: none freed */
    CHECK_EQ_INT(kv_seq_drop_range(&c, 1, 2), 0);
    CHECK_EQ_INT(c.n_tokens, 10);
    CHECK_EQ_INT(c.n_blocks, 3);
    CHECK_EQ_INT(c.table[0], old[0]);
    CHECK(c.table[1] != old[3] && c.table[2] != old[4]); /* private copies */
    CHECK(pool.blocks[old[0]].flags & KV_BLOCK_HASHED);
    CHECK(!(pool.blocks[c.table[1]].flags & KV_BLOCK_HASHED));
    for (uint32_t i = 0; i < 4; i++) CHECK(row_holds(&c, i, 100 + i));
    for (uint32_t i = 4; i < 10; i++) CHECK(row_holds(&c, i, 100 + 8 + i)); /* old positions 12..17 */
    /* the moved copies are private: rewriting them leaves the parent alone */
    for (uint32_t i = 4; i < 10; i++) row_fill(&c, i, 900 + i);
    for (uint32_t i = 0; i < 18; i++) CHECK(row_holds(&p, i, 100 + i));
    kv_seq *all[] = {&p, &c};
    CHECK_EQ_INT(kv_check(&pool, all, 2), 0);
    /* the parent alone: blocks 1, 2 are freed now (the child dropped them), 3, 4 are private */
    CHECK_EQ_INT(kv_seq_drop_balance(&p, 1, 2), -2);
    uint32_t before = kv_pool_available(&pool);
    CHECK_EQ_INT(kv_seq_drop_range(&p, 1, 2), 0);
    CHECK_EQ_INT(kv_pool_available(&pool), before + 2);
    CHECK_EQ_INT(p.table[1], old[3]); /* private already: not copied, but unkeyed */
    CHECK(!(pool.blocks[old[3]].flags & KV_BLOCK_HASHED));
    CHECK_EQ_INT(n_evicted, 1);
    CHECK_EQ_INT(kv_check(&pool, all, 2), 0);
    /* a range that takes the partly filled tail: n_tokens falls by what it held */
    CHECK_EQ_INT(kv_seq_drop_range(&p, 2, 1), 0);
    CHECK_EQ_INT(p.n_tokens, 8);
    CHECK_EQ_INT(p.n_blocks, 2);
    CHECK_EQ_INT(kv_seq_drop_range(&p, 2, 1), PL_EINVAL); /* holds no tokens */
    CHECK_EQ_INT(kv_seq_drop_range(&p, 0, 0), PL_EINVAL);
    CHECK_EQ_INT(kv_check(&pool, all, 2), 0);
    kv_seq_free(&p);
    kv_seq_free(&c);
    CHECK_EQ_INT(kv_check(&pool, NULL, 0), 0);
    CHECK_EQ_INT(pool.n_used, 0);
    kv_pool_free(&pool);
}

TEST(seq_drop_range_full_leaves_state_unchanged)
{
    kv_pool pool;
    kv_seq p, c;
    CHECK_EQ_INT(pool_and_seq(&pool, 4, &p, 64, KV_SEQ_PAGED), 0);
    CHECK_EQ_INT(kv_seq_append(&p, 16), 0); /* the whole pool */
    CHECK_EQ_INT(kv_seq_fork(&c, &p), 0);
    /* dropping block 1 moves 2 and 3, both shared: 2 copies, nothing freed, none free */
    snap sn;
    snap_take(&sn, &pool, &c);
    CHECK_EQ_INT(kv_seq_drop_range(&c, 1, 1), PL_EFULL);
    CHECK(snap_same(&sn, &pool, &c));
    kv_seq *all[] = {&p, &c};
    CHECK_EQ_INT(kv_check(&pool, all, 2), 0);
    /* once the parent is gone the same drop frees block 1 and copies nothing */
    kv_seq_free(&p);
    CHECK_EQ_INT(kv_seq_drop_range(&c, 1, 1), 0);
    CHECK_EQ_INT(c.n_tokens, 12);
    CHECK_EQ_INT(kv_check(&pool, all + 1, 1), 0);
    kv_seq_free(&c);
    kv_pool_free(&pool);
}

TEST(static_drop_range_keeps_blocks)
{
    kv_pool pool;
    kv_seq s;
    CHECK_EQ_INT(pool_and_seq(&pool, 8, &s, 24, KV_SEQ_STATIC), 0); /* 6 blocks */
    CHECK_EQ_INT(kv_seq_append(&s, 15), 0);
    for (uint32_t i = 0; i < 15; i++) row_fill(&s, i, 7 + i);
    uint32_t old[6];
    memcpy(old, s.table, sizeof old);
    CHECK_EQ_INT(kv_seq_drop_balance(&s, 1, 1), 0);
    CHECK_EQ_INT(kv_seq_drop_range(&s, 1, 1), 0);
    CHECK_EQ_INT(s.n_tokens, 11);
    CHECK_EQ_INT(s.n_blocks, 6);
    const uint32_t want[6] = {old[0], old[2], old[3], old[4], old[5], old[1]};
    for (int i = 0; i < 6; i++) CHECK_EQ_INT(s.table[i], want[i]);
    for (uint32_t i = 4; i < 11; i++) CHECK(row_holds(&s, i, 7 + 4 + i));
    kv_seq *all[] = {&s};
    CHECK_EQ_INT(kv_check(&pool, all, 1), 0);
    CHECK_EQ_INT(kv_seq_append(&s, 13), 0); /* back up to max_ctx through the rotated tail */
    CHECK_EQ_INT(kv_check(&pool, all, 1), 0);
    kv_seq_free(&s);
    CHECK_EQ_INT(pool.free_list.n, 8);
    kv_pool_free(&pool);
}

/* ------------------------------------------------------ randomized run */

#define R_SEQS 8
#define R_BLOCKS 48
#define R_MAXCTX 72

typedef struct {
    bool live;
    kv_seq s;
    uint32_t expect[R_MAXCTX]; /* the value row_fill wrote at each position */
} rseq;

typedef struct {
    bool valid;          /* the block carries key; sig is its content */
    uint64_t key;
    uint32_t sig[4];
} rcache;

static rseq R[R_SEQS];
static rcache RC[R_BLOCKS];
static unsigned long r_full, r_cow, r_evict, r_revive, r_fork, r_static, r_drop, r_drop_cow;

/* A draw in [0, n) from rng.h's xorshift64 state (its 64 bits mod n). */
static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

static void r_on_evict(void *user, uint32_t block, const uint64_t hash[2])
{
    (void)user;
    if (RC[block].valid && RC[block].key == hash[0]) r_evict++;
    RC[block].valid = false;
}

static int r_live(kv_seq **out)
{
    int n = 0;
    for (int i = 0; i < R_SEQS; i++)
        if (R[i].live) out[n++] = &R[i].s;
    return n;
}

static int r_pick(bool live)
{
    int start = (int)rnd(R_SEQS);
    for (int k = 0; k < R_SEQS; k++) {
        int i = (start + k) % R_SEQS;
        if (R[i].live == live) return i;
    }
    return -1;
}

/* Every live row holds what was written there: nothing leaked across
 * sequences through a shared block. */
static bool r_verify(void)
{
    for (int i = 0; i < R_SEQS; i++)
        for (uint32_t p = 0; R[i].live && p < R[i].s.n_tokens; p++)
            if (!row_holds(&R[i].s, p, R[i].expect[p])) return false;
    return true;
}

static uint32_t r_value(void) { return rnd(1u << 30) + 1; }

/* One operation; returns 0 or the status that the test must accept. */
static int r_step(kv_pool *pool)
{
    snap sn;
    int op = (int)rnd(110), i, rc = 0;
    if (op < 8 && (i = r_pick(false)) >= 0) { /* create */
        kv_seq_mode m = rnd(5) == 0 ? KV_SEQ_STATIC : KV_SEQ_PAGED;
        snap_take(&sn, pool, NULL);
        rc = kv_seq_init(&R[i].s, pool, 1 + rnd(R_MAXCTX), m);
        if (rc == PL_EFULL) { r_full++; return snap_same(&sn, pool, NULL) ? 0 : -100; }
        R[i].live = rc == 0;
        r_static += m == KV_SEQ_STATIC && rc == 0;
    } else if (op < 45 && (i = r_pick(true)) >= 0) { /* append and write */
        kv_seq *s = &R[i].s;
        uint32_t n = 1 + rnd(9), old = s->n_tokens, b0 = old < s->n_blocks * 4 ? s->table[old / 4] : 0;
        snap_take(&sn, pool, s);
        rc = kv_seq_append(s, n);
        if (rc) { r_full += rc == PL_EFULL; return snap_same(&sn, pool, s) ? 0 : -101; }
        r_cow += old % 4 != 0 && s->table[old / 4] != b0;
        for (uint32_t p = old; p < old + n; p++) row_fill(s, p, R[i].expect[p] = r_value());
    } else if (op < 60 && (i = r_pick(true)) >= 0 && R[i].s.n_tokens > 0) { /* rewrite */
        kv_seq *s = &R[i].s;
        uint32_t p = rnd(s->n_tokens), b0 = kv_seq_block(s, p);
        snap_take(&sn, pool, s);
        rc = kv_seq_prepare_write(s, p);
        if (rc) { r_full += rc == PL_EFULL; return snap_same(&sn, pool, s) ? 0 : -102; }
        r_cow += kv_seq_block(s, p) != b0;
        row_fill(s, p, R[i].expect[p] = r_value());
    } else if (op < 70 && (i = r_pick(true)) >= 0) { /* fork */
        int j = r_pick(false);
        if (j < 0) return 0;
        snap_take(&sn, pool, NULL);
        rc = kv_seq_fork(&R[j].s, &R[i].s);
        if (rc) { r_full += rc == PL_EFULL; return snap_same(&sn, pool, NULL) ? 0 : -103; }
        memcpy(R[j].expect, R[i].expect, sizeof R[j].expect);
        R[j].live = true;
        r_fork++;
    } else if (op < 80 && (i = r_pick(true)) >= 0) { /* free */
        kv_seq_free(&R[i].s);
        R[i].live = false;
    } else if (op < 85 && (i = r_pick(true)) >= 0) { /* truncate */
        kv_seq_truncate(&R[i].s, rnd(R[i].s.n_tokens + 1));
    } else if (op < 93 && (i = r_pick(true)) >= 0 && R[i].s.n_tokens >= 4) { /* hash a full block */
        kv_seq *s = &R[i].s;
        uint32_t k = rnd(s->n_tokens / 4), b = s->table[k];
        static uint64_t next_key = 1;
        if (pool->blocks[b].flags & KV_BLOCK_HASHED) return 0;
        RC[b] = (rcache){true, next_key, {0}};
        memcpy(RC[b].sig, &R[i].expect[k * 4], sizeof RC[b].sig);
        kv_pool_set_hash(pool, b, (uint64_t[2]){next_key++, 0}, KV_NONE);
    } else if (op < 100 && (i = r_pick(true)) >= 0) { /* prefix hit: push a keyed block */
        kv_seq *s = &R[i].s;
        uint32_t b = rnd(R_BLOCKS), at = s->n_tokens;
        if (!RC[b].valid || s->mode != KV_SEQ_PAGED || at % 4 || at + 4 > s->max_ctx) return 0;
        r_revive += pool->blocks[b].state == KV_BLOCK_CACHED;
        rc = kv_seq_push_block(s, b);
        if (rc) return rc;
        memcpy(&R[i].expect[at], RC[b].sig, sizeof RC[b].sig);
    } else if (op >= 100 && (i = r_pick(true)) >= 0 && R[i].s.n_tokens > 4) { /* window drop */
        kv_seq *s = &R[i].s;
        uint32_t held = (s->n_tokens + 3) / 4, first = rnd(held), n = 1 + rnd(held - first), shared = 0;
        for (uint32_t k = first + n; k < held; k++) shared += pool->blocks[s->table[k]].refcount > 1;
        snap_take(&sn, pool, s);
        rc = kv_seq_drop_range(s, first, n);
        if (rc) { r_full += rc == PL_EFULL; return rc == PL_EFULL && snap_same(&sn, pool, s) ? 0 : -104; }
        uint32_t end = (first + n) * 4 < sn.n_tokens ? (first + n) * 4 : sn.n_tokens, gone = end - first * 4;
        memmove(&R[i].expect[first * 4], &R[i].expect[end], (sn.n_tokens - end) * sizeof R[i].expect[0]);
        if (s->n_tokens != sn.n_tokens - gone) return -105;
        for (uint32_t p = 0; p < s->n_tokens; p++) /* compaction kept every row */
            if (!row_holds(s, p, R[i].expect[p])) return -106;
        /* the moved rows are rewritten, as a RoPE shift does: must be private */
        for (uint32_t p = first * 4; p < s->n_tokens; p++) row_fill(s, p, R[i].expect[p] = r_value());
        r_drop++;
        r_drop_cow += shared > 0;
    }
    return 0;
}

/* ------------------------------------------------- append cost, randomized */

static unsigned long c_checks, c_full, c_cow, c_static, c_range, c_front, c_neg;

/* n in 1..12 that fits max_ctx after `kept` tokens, or 0 if none does. */
static uint32_t c_count(const kv_seq *s, uint32_t kept)
{
    uint32_t room = s->max_ctx - kept;
    return room ? 1 + rnd(room < 12 ? room : 12) : 0;
}

/* One probe of a random live sequence: an append, or a window's drop
 * (kv_seq_drop_range or kv_seq_drop_front) and then an append. The cost
 * kv_seq says beforehand must be what the pool's available count loses,
 * and must exceed what was available exactly when the pair fails. */
static int c_probe(kv_pool *pool)
{
    int i = r_pick(true);
    if (i < 0) return 0;
    kv_seq *s = &R[i].s;
    uint32_t *x = R[i].expect, n = 0, kept = s->n_tokens;
    const uint32_t kind = rnd(3), held = (s->n_tokens + 3) / 4, avail = kv_pool_available(pool);
    int64_t cost;
    int rc = 0;
    if (kind == 0) {
        if (!(n = c_count(s, kept))) return 0;
        const uint32_t b = kept / 4;
        c_cow += b < s->n_blocks && (kept % 4 || s->mode == KV_SEQ_STATIC) && pool->blocks[s->table[b]].refcount > 1;
        cost = kv_seq_append_cost(s, n);
    } else if (kind == 1) {
        if (held == 0) return 0;
        const uint32_t first = rnd(held), k = 1 + rnd(held - first);
        const uint32_t end = (first + k) * 4 < kept ? (first + k) * 4 : kept;
        kept -= end - first * 4;
        n = c_count(s, kept);
        cost = kv_seq_drop_range_append_cost(s, first, k, n);
        rc = kv_seq_drop_range(s, first, k);
        if (!rc) memmove(&x[first * 4], &x[end], (s->n_tokens - first * 4) * sizeof *x);
        c_range++;
    } else {
        if (held == 0 || s->n_tokens < 4) return 0;
        const uint32_t k = 1 + rnd(s->n_tokens / 4);
        kept -= k * 4;
        n = c_count(s, kept);
        cost = kv_seq_drop_front_append_cost(s, k, n);
        rc = kv_seq_drop_front(s, k);
        if (!rc) memmove(x, &x[k * 4], kept * sizeof *x);
        c_front++;
    }
    if (!rc && n) rc = kv_seq_append(s, n);
    c_checks++;
    c_static += s->mode == KV_SEQ_STATIC;
    c_neg += cost < 0;
    if (rc == PL_EFULL) {
        c_full++;
        return cost > (int64_t)avail ? 0 : -200;
    }
    if (rc) return rc;
    if (s->n_tokens != kept + n) return -201;
    for (uint32_t p = kept; p < kept + n; p++) row_fill(s, p, x[p] = r_value());
    return (int64_t)avail - (int64_t)kv_pool_available(pool) == cost ? 0 : -202;
}

static void random_run(uint64_t seed, int steps, int (*probe)(kv_pool *))
{
    kv_pool pool;
    kv_seq *live[R_SEQS];
    rng_state = seed;
    memset(R, 0, sizeof R);
    memset(RC, 0, sizeof RC);
    CHECK_EQ_INT(kv_pool_init(&pool, &small, R_BLOCKS), 0);
    kv_pool_set_evict(&pool, r_on_evict, NULL);
    for (int step = 0; step < steps; step++) {
        int rc = r_step(&pool);
        CHECK_MSG(rc == 0, "seed %llu step %d: op status %d: %s", (unsigned long long)seed, step, rc, err_msg());
        rc = probe && rnd(2) ? probe(&pool) : 0;
        CHECK_MSG(rc == 0, "seed %llu step %d: probe status %d: %s", (unsigned long long)seed, step, rc, err_msg());
        int n = r_live(live);
        CHECK_MSG(kv_check(&pool, live, (size_t)n) == 0, "seed %llu step %d: %s", (unsigned long long)seed, step,
                  err_msg());
        CHECK_MSG(step % 25 || r_verify(), "seed %llu step %d: a row lost its value", (unsigned long long)seed, step);
    }
    CHECK(r_verify());
    for (int i = 0; i < R_SEQS; i++)
        if (R[i].live) kv_seq_free(&R[i].s);
    CHECK_EQ_INT(kv_check(&pool, NULL, 0), 0); /* nothing leaked */
    CHECK_EQ_INT(pool.n_used, 0);
    CHECK_EQ_INT(pool.free_list.n + pool.lru.n, R_BLOCKS);
    kv_pool_free(&pool);
}

TEST(randomized_ops_keep_invariants)
{
    r_full = r_cow = r_evict = r_revive = r_fork = r_static = r_drop = r_drop_cow = 0;
    for (uint64_t seed = 1; seed <= 4; seed++) {
        random_run(seed * 0x9E3779B97F4A7C15ull, 5000, NULL);
        if (test_failed_now) return;
    }
    /* The run must have gone through every hard path, or it proves little. */
    CHECK_MSG(r_full > 50 && r_cow > 50 && r_evict > 10 && r_revive > 10 && r_fork > 100 && r_static > 20 &&
                  r_drop > 100 && r_drop_cow > 20,
              "full %lu cow %lu evict %lu revive %lu fork %lu static %lu drop %lu drop_cow %lu", r_full, r_cow,
              r_evict, r_revive, r_fork, r_static, r_drop, r_drop_cow);
}

TEST(randomized_append_cost_matches_pool)
{
    c_checks = c_full = c_cow = c_static = c_range = c_front = c_neg = 0;
    for (uint64_t seed = 11; seed <= 14; seed++) {
        random_run(seed * 0x9E3779B97F4A7C15ull, 4000, c_probe);
        if (test_failed_now) return;
    }
    INFO("append cost: %lu probes, %lu full, %lu shared tails, %lu static, %lu drop_range, %lu drop_front, %lu "
         "negative", c_checks, c_full, c_cow, c_static, c_range, c_front, c_neg);
    CHECK_MSG(c_full > 50 && c_cow > 50 && c_static > 200 && c_range > 500 && c_front > 500 && c_neg > 50,
              "too few hard paths: full %lu cow %lu static %lu range %lu front %lu negative %lu", c_full, c_cow,
              c_static, c_range, c_front, c_neg);
}

int main(void)
{
    RUN(dtype_bytes_per_token_llama70b);
    RUN(dtype_plane_and_tail);
    RUN(dtype_check_grouping);
    RUN(dtype_check_heads);
    RUN(dtype_names_round_trip);
    RUN(public_kv_size_of);
    RUN(geom_layout_and_padding);
    RUN(geom_rejects_bad_shapes);
    RUN(large_pool_is_on_a_2_mib_edge_and_zeroed);
    RUN(pool_init_addresses);
    RUN(block_copy_save_and_load_move_every_layer_and_nothing_else);
    RUN(pool_fp8_tail_address);
    RUN(pool_kivi_planes);
    RUN(pool_alloc_until_full);
    RUN(pool_acquire_from_middle_of_free_list);
    RUN(pool_alloc_n_contiguous);
    RUN(pool_alloc_next_keeps_each_sequence_a_run);
    RUN(pool_alloc_next_picks_the_largest_free_run);
    RUN(pool_alloc_next_matches_a_plain_scan);
    RUN(pool_cached_lru_revive_evict);
    RUN(seq_reserve_grows_by_blocks);
    RUN(seq_full_leaves_state_unchanged);
    RUN(seq_fork_shares_blocks);
    RUN(seq_cow_copies_data);
    RUN(seq_cow_full_leaves_state_unchanged);
    RUN(seq_truncate_returns_blocks);
    RUN(seq_push_block_prefix_hit);
    RUN(static_reserves_up_front);
    RUN(static_fork_shares_filled_blocks);
    RUN(static_rewrite_after_truncate_copies_every_shared_block);
    RUN(stats_paged_vs_static);
    RUN(stats_count_shared_blocks_once);
    RUN(check_detects_corruption);
    RUN(seq_drop_range_compacts_and_copies_shared);
    RUN(seq_drop_range_full_leaves_state_unchanged);
    RUN(static_drop_range_keeps_blocks);
    RUN(randomized_ops_keep_invariants);
    RUN(randomized_append_cost_matches_pool);
    return test_summary();
}
