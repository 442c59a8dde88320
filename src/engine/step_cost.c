/* step_cost.c - the key costs fit to the engine's steps; see step_cost.h. */
#include "engine/step_cost.h"

#include <math.h>
#include <string.h>

enum { N = STEP_COST_N, A = 0, B = 1, GD = 2, GP = 3 };

/* The prior's pull on the overhead a (in steps of this many depth-0
 * tokens), as a share of its pull on the key ratios: only enough to keep
 * the fit defined when the steps do not move a and b apart. */
#define STEP_COST_TOKENS_A 64.0
#define STEP_COST_RIDGE 0.01

void step_cost_init(step_cost *sc, double key_cost0)
{
    memset(sc, 0, sizeof *sc);
    sc->key_cost0 = key_cost0 > 0 && isfinite(key_cost0) ? key_cost0 : 0;
    sc->ratio_decode = sc->ratio_prompt = 1;
}

double step_cost_key_decode(const step_cost *sc) { return sc->key_cost0 * fmax(1, sc->ratio_decode); }
double step_cost_key_prompt(const step_cost *sc) { return sc->key_cost0 * fmax(1, sc->ratio_prompt); }

/* a += w u u^T */
static void add_outer(double a[N][N], const double u[N], double w)
{
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) a[i][j] += w * u[i] * u[j];
}

/* Solves a x = r (Gaussian elimination with partial pivoting; a and r are
 * overwritten); 0 when a is singular to working precision. */
static int solve(double a[N][N], double r[N], double x[N])
{
    int p[N];
    for (int i = 0; i < N; i++) p[i] = i;
    for (int k = 0; k < N; k++) {
        int best = k;
        for (int i = k + 1; i < N; i++)
            if (fabs(a[p[i]][k]) > fabs(a[p[best]][k])) best = i;
        const int t = p[k];
        p[k] = p[best];
        p[best] = t;
        const double piv = a[p[k]][k];
        if (!(fabs(piv) > 1e-300)) return 0;
        for (int i = k + 1; i < N; i++) {
            const double f = a[p[i]][k] / piv;
            for (int j = k; j < N; j++) a[p[i]][j] -= f * a[p[k]][j];
            r[p[i]] -= f * r[p[k]];
        }
    }
    for (int k = N - 1; k >= 0; k--) {
        double v = r[p[k]];
        for (int j = k + 1; j < N; j++) v -= a[p[k]][j] * x[j];
        x[k] = v / a[p[k]][k];
    }
    for (int k = 0; k < N; k++)
        if (!isfinite(x[k])) return 0;
    return 1;
}

static double held(double q)
{
    return !(q >= 1 / STEP_COST_RANGE) ? 1 / STEP_COST_RANGE : q > STEP_COST_RANGE ? STEP_COST_RANGE : q;
}

void step_cost_observe(step_cost *sc, const step_cost_obs *o)
{
    const double t = o->seconds;
    if (!(sc->key_cost0 > 0) || !(o->tokens > 0) || !(t > 0) || !isfinite(t) || !(o->decode_keys >= 0) ||
        !(o->prompt_keys >= 0))
        return;
    const double kd = o->decode_keys * sc->key_cost0, kp = o->prompt_keys * sc->key_cost0;
    /* errors relative to the larger of the time and the last fit's
     * prediction: no step weighs more than a miss by its whole time, a
     * neighbour's burst (t >> fit) as little as a change of dtype (t << fit) */
    const double raw[N] = {1, o->tokens, kd, kp};
    double pred = 0;
    for (int i = 0; i < N; i++) pred += sc->theta[i] * raw[i];
    const double by = pred > t ? pred : t, y = t / by;
    double x[N];
    for (int i = 0; i < N; i++) x[i] = raw[i] / by;
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < N; j++) sc->s[i][j] = STEP_COST_DECAY * sc->s[i][j] + x[i] * x[j];
        sc->r[i] = STEP_COST_DECAY * sc->r[i] + x[i] * y;
    }
    sc->steps++;
    /* the prior's scale: the last fit's b, or this step as the model counts it */
    const double b = sc->theta[B] > 0 ? sc->theta[B] : t / (o->tokens + kd + kp);
    double a[N][N], r[N], th[N] = {0};
    memcpy(a, sc->s, sizeof a);
    memcpy(r, sc->r, sizeof r);
    double u[N] = {0};
    u[B] = -1 / b, u[GD] = 1 / b; /* gd = b */
    add_outer(a, u, STEP_COST_PRIOR);
    u[GD] = 0, u[GP] = 1 / b; /* gp = b */
    add_outer(a, u, STEP_COST_PRIOR);
    memset(u, 0, sizeof u);
    u[A] = 1 / (b * STEP_COST_TOKENS_A); /* a = 0 */
    add_outer(a, u, STEP_COST_PRIOR * STEP_COST_RIDGE);
    if (!solve(a, r, th) || !(th[B] > 0)) return; /* the last ratios stay */
    memcpy(sc->theta, th, sizeof th);
    sc->ratio_decode = held(th[GD] / th[B]);
    sc->ratio_prompt = held(th[GP] / th[B]);
}
