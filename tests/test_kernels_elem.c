/* test_kernels_elem.c - the elementwise kernels between the matrix products
 * (kern_elem_avx2.c and their references in kern_ref.c):
 *
 * - kern_rope_table + rope_apply equal kern_rope (the reference rope, which
 *   follows ggml's angles) bit for bit, in every variant, for llama and
 *   NeoX pairs, partial rotation (rope_dim < head_dim), odd pair counts
 *   (SIMD tails), freq_scale and freq_factors, and far positions;
 * - add_rmsnorm equals the add followed by the same variant's rmsnorm bit
 *   for bit (with and without a weight, y aliasing d, every length class
 *   around the vector width), and the SIMD variant is within rounding of
 *   the reference;
 * - the public entry points reach the chosen variant.
 */
#include "test.h"
#include "kern_variants.h"

#include <stdint.h>

#include "kernels/kern_impl.h"
#include "kernels/kernels.h"

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static float frand(void) /* uniform in [-2, 2) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / (1 << 24))) * 4.0f - 2.0f;
}

/* The variants to test: the reference first, then every SIMD variant this
 * CPU runs. */
static int variants(const kern_vtable **out)
{
    out[0] = &kern_vt_ref;
    return 1 + kern_simd_variants(out + 1);
}

/* The table of a variant is complete when it has the entry or inherits it
 * from the reference (kern_init overlays non-NULL entries). */
#define ENTRY(vt, f) ((vt)->f ? (vt)->f : kern_vt_ref.f)

TEST(rope_table_apply_equals_rope)
{
    const kern_vtable *vs[5];
    const int nv = variants(vs);
    static const struct { int hd, rd; } shapes[] = {
        {2, 2}, {4, 4}, {6, 4}, {10, 10}, {18, 18}, {24, 16}, {64, 64}, {64, 32}, {80, 80}, {96, 40}, {128, 128},
    };
    static const int positions[] = {0, 1, 7, 511, 4095, 30000};
    float ff[64];
    for (int i = 0; i < 64; i++) ff[i] = 1.0f + (float)i * 0.37f;
    float want[3 * 128], got[3 * 128], cs[128];
    int cases = 0;
    for (int v = 0; v < nv; v++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (size_t pi = 0; pi < sizeof positions / sizeof positions[0]; pi++)
                for (int var = 0; var < 8; var++) {
                    const int hd = shapes[si].hd, rd = shapes[si].rd, nh = 1 + var % 3, pos = positions[pi];
                    const bool neox = var & 1;
                    const float scale = var & 2 ? 0.25f : 1.0f, base = var & 4 ? 500000.0f : 10000.0f;
                    const float *f = var >= 4 ? ff : NULL;
                    for (int i = 0; i < nh * hd; i++) want[i] = got[i] = frand();
                    kern_vt_ref.rope(want, nh, hd, rd, pos, base, scale, neox, f);
                    kern_rope_table(cs, rd, pos, base, scale, f);
                    ENTRY(vs[v], rope_apply)(got, nh, hd, rd, neox, cs);
                    for (int i = 0; i < nh * hd; i++)
                        CHECK_MSG(memcmp(&got[i], &want[i], sizeof(float)) == 0,
                                  "%s hd %d rd %d heads %d pos %d neox %d var %d: [%d] %.9g vs rope %.9g",
                                  vs[v]->name, hd, rd, nh, pos, neox, var, i, got[i], want[i]);
                    cases++;
                }
    CHECK(cases == nv * 11 * 6 * 8);
}

TEST(rope_table_values)
{
    /* pos 0: every angle 0; pos 3, base 100, rope_dim 4: angles 3 and 0.3 */
    float cs[4];
    kern_rope_table(cs, 4, 0, 10000.0f, 1.0f, NULL);
    CHECK(cs[0] == 1.0f && cs[1] == 1.0f && cs[2] == 0.0f && cs[3] == 0.0f);
    kern_rope_table(cs, 4, 3, 100.0f, 1.0f, NULL);
    CHECK_NEAR(cs[0], cos(3.0), 1e-6);
    CHECK_NEAR(cs[1], cos(0.3), 1e-6);
    CHECK_NEAR(cs[2], sin(3.0), 1e-6);
    CHECK_NEAR(cs[3], sin(0.3), 1e-6);
}

TEST(add_rmsnorm_equals_add_then_rmsnorm)
{
    const kern_vtable *vs[5];
    const int nv = variants(vs);
    static const int ns[] = {1, 7, 8, 9, 15, 16, 17, 64, 100, 2048, 2051, 5632};
    enum { NMAX = 5632 };
    static float x0[NMAX], d0[NMAX], w[NMAX], xa[NMAX], ya[NMAX], xb[NMAX], db[NMAX], xr[NMAX], dr[NMAX];
    for (int v = 0; v < nv; v++)
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
            for (int with_w = 0; with_w < 2; with_w++) {
                const int n = ns[k];
                for (int i = 0; i < n; i++) {
                    x0[i] = frand();
                    d0[i] = frand() * 0.5f;
                    w[i] = 0.5f + frand() * 0.25f;
                }
                const float *wp = with_w ? w : NULL;
                /* unfused, this variant */
                memcpy(xa, x0, sizeof(float) * n);
                for (int i = 0; i < n; i++) xa[i] += d0[i];
                ENTRY(vs[v], rmsnorm)(ya, xa, wp, n, 1e-5f);
                /* fused, y aliasing d as the forward pass calls it */
                memcpy(xb, x0, sizeof(float) * n);
                memcpy(db, d0, sizeof(float) * n);
                ENTRY(vs[v], add_rmsnorm)(xb, db, db, wp, n, 1e-5f);
                CHECK_MSG(memcmp(xa, xb, sizeof(float) * n) == 0, "%s n %d: x differs", vs[v]->name, n);
                for (int i = 0; i < n; i++)
                    CHECK_MSG(memcmp(&ya[i], &db[i], sizeof(float)) == 0, "%s n %d w %d: y[%d] %.9g vs %.9g",
                              vs[v]->name, n, with_w, i, db[i], ya[i]);
                /* the reference's fused result: within rounding of the sum */
                memcpy(xr, x0, sizeof(float) * n);
                memcpy(dr, d0, sizeof(float) * n);
                kern_vt_ref.add_rmsnorm(xr, dr, dr, wp, n, 1e-5f);
                for (int i = 0; i < n; i++)
                    CHECK_MSG(fabsf(dr[i] - db[i]) <= 1e-6f * fabsf(dr[i]) + 1e-30f,
                              "%s vs ref n %d: y[%d] %.9g vs %.9g", vs[v]->name, n, i, db[i], dr[i]);
            }
}

TEST(add_rmsnorm_known_values)
{
    /* x = {1, 2} + {2, 2} = {3, 4}: mean square 12.5, y = x / sqrt(12.5 + eps) * w */
    float x[2] = {1, 2}, d[2] = {2, 2}, y[2];
    const float w[2] = {1.0f, 0.5f};
    kern_add_rmsnorm(x, d, y, w, 2, 0.0f);
    CHECK(x[0] == 3.0f && x[1] == 4.0f);
    CHECK_NEAR(y[0], 3.0 / sqrt(12.5), 1e-6);
    CHECK_NEAR(y[1], 4.0 / sqrt(12.5) * 0.5, 1e-6);
}

TEST(public_entries_use_the_chosen_variant)
{
    /* kern_init(1) forces the references; kern_init(0) the best variant:
     * both paths through the public entry points equal their table. */
    for (int force = 1; force >= 0; force--) {
        kern_init(force);
        const kern_vtable *vt = kern_active();
        float a[3 * 64], b[3 * 64], cs[64], xa[37], xb[37], da[37], db[37], ya[37], yb[37];
        for (int i = 0; i < 3 * 64; i++) a[i] = b[i] = frand();
        kern_rope_table(cs, 64, 123, 10000.0f, 1.0f, NULL);
        kern_rope_apply(a, 3, 64, 64, false, cs);
        vt->rope_apply(b, 3, 64, 64, false, cs);
        CHECK(memcmp(a, b, sizeof a) == 0);
        for (int i = 0; i < 37; i++) xa[i] = xb[i] = frand(), da[i] = db[i] = frand();
        kern_add_rmsnorm(xa, da, ya, NULL, 37, 1e-6f);
        vt->add_rmsnorm(xb, db, yb, NULL, 37, 1e-6f);
        CHECK(memcmp(ya, yb, sizeof ya) == 0 && memcmp(xa, xb, sizeof xa) == 0);
    }
}

int main(void)
{
    kern_init(0);
    printf("# kernel variant: %s\n", kern_variant());
    RUN(rope_table_apply_equals_rope);
    RUN(rope_table_values);
    RUN(add_rmsnorm_equals_add_then_rmsnorm);
    RUN(add_rmsnorm_known_values);
    RUN(public_entries_use_the_chosen_variant);
    return test_summary();
}
