/* test_threadpool.c - the persistent thread pool: every (ith, nth) runs
 * exactly once per tp_run, results are visible to the caller afterwards, the
 * sleep/wake paths (idle workers, a slow worker) neither lose a run nor
 * deadlock, the degenerate pools (NULL, n = 1) run on the caller, and
 * tp_runs counts the calls (with the cost of an empty run as INFO). */
#include "test.h"

#include "base/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#define MAXT 8

typedef struct {
    _Atomic int hits[MAXT];   /* times each ith ran */
    _Atomic int bad_nth;      /* runs that saw the wrong nth */
    int nth_expected;
    int run;                  /* written by the caller between runs */
    int data[MAXT];           /* written by each thread, read by the caller */
    pthread_t self[MAXT];     /* which thread ran each ith */
    int slow_ith;             /* this ith sleeps in the job (-1: none) */
} counts;

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static void count_job(void *arg, int ith, int nth)
{
    counts *c = arg;
    if (nth != c->nth_expected || ith < 0 || ith >= nth || ith >= MAXT) {
        atomic_fetch_add(&c->bad_nth, 1);
        return;
    }
    atomic_fetch_add(&c->hits[ith], 1);
    c->data[ith] = c->run * 16 + ith;
    c->self[ith] = pthread_self();
    if (ith == c->slow_ith) sleep_us(300);
}

/* Runs the pool `runs` times and checks each run's bookkeeping; pause_every
 * > 0 sleeps the caller between some runs so that the workers go to sleep. */
static int run_many(threadpool *tp, int n, int runs, int pause_every, int slow_ith, char *why, size_t wn)
{
    counts c = {0};
    c.nth_expected = n;
    c.slow_ith = slow_ith;
    for (int r = 0; r < runs; r++) {
        c.run = r;
        tp_run(tp, count_job, &c);
        if (atomic_load(&c.bad_nth)) return snprintf(why, wn, "run %d: wrong nth/ith", r), 0;
        for (int i = 0; i < n; i++) {
            if (atomic_load(&c.hits[i]) != r + 1)
                return snprintf(why, wn, "run %d: ith %d ran %d times", r, i, atomic_load(&c.hits[i])), 0;
            if (c.data[i] != r * 16 + i) return snprintf(why, wn, "run %d: ith %d result not visible", r, i), 0;
        }
        if (!pthread_equal(c.self[0], pthread_self())) return snprintf(why, wn, "ith 0 not on the caller"), 0;
        for (int i = 1; i < n; i++)
            for (int k = 0; k < i; k++)
                if (pthread_equal(c.self[i], c.self[k])) return snprintf(why, wn, "ith %d and %d share a thread", i, k), 0;
        if (pause_every && r % pause_every == 0) sleep_us(200);
    }
    return 1;
}

TEST(null_pool_runs_on_caller)
{
    char why[128] = "";
    CHECK_EQ_INT(tp_size(NULL), 1);
    CHECK_MSG(run_many(NULL, 1, 10, 0, -1, why, sizeof why), "%s", why);
}

TEST(single_thread_pool_runs_on_caller)
{
    char why[128] = "";
    threadpool *tp = tp_new(1);
    CHECK(tp);
    CHECK_EQ_INT(tp_size(tp), 1);
    int ok = run_many(tp, 1, 100, 0, -1, why, sizeof why);
    tp_free(tp);
    CHECK_MSG(ok, "%s", why);
}

TEST(rejects_zero_threads)
{
    CHECK(tp_new(0) == NULL);
    CHECK(tp_new(-3) == NULL);
}

TEST(every_index_once_back_to_back)
{
    static const int sizes[] = {2, 3, 4};
    static const int runs[] = {20000, 5000, 2000};
    for (int k = 0; k < 3; k++) {
        char why[128] = "";
        threadpool *tp = tp_new(sizes[k]);
        CHECK(tp);
        CHECK_EQ_INT(tp_size(tp), sizes[k]);
        int ok = run_many(tp, sizes[k], runs[k], 0, -1, why, sizeof why);
        tp_free(tp);
        CHECK_MSG(ok, "n=%d: %s", sizes[k], why);
    }
}

TEST(workers_wake_from_sleep)
{
    /* The caller pauses longer than the spin budget, so workers block on
     * the futex and must be woken by the next tp_run. */
    char why[128] = "";
    threadpool *tp = tp_new(3);
    CHECK(tp);
    int ok = run_many(tp, 3, 300, 1, -1, why, sizeof why);
    tp_free(tp);
    CHECK_MSG(ok, "%s", why);
}

TEST(caller_wakes_after_slow_worker)
{
    /* A slow worker makes the caller give up spinning and sleep on done. */
    char why[128] = "";
    threadpool *tp = tp_new(2);
    CHECK(tp);
    int ok = run_many(tp, 2, 300, 7, 1, why, sizeof why);
    tp_free(tp);
    CHECK_MSG(ok, "%s", why);
}

TEST(create_and_free_many)
{
    for (int i = 0; i < 200; i++) {
        char why[128] = "";
        threadpool *tp = tp_new(1 + i % 4);
        CHECK(tp);
        int ok = run_many(tp, 1 + i % 4, 3, 0, -1, why, sizeof why);
        tp_free(tp);
        CHECK_MSG(ok, "pool %d: %s", i, why);
    }
    /* An idle pool (workers asleep) must also shut down. */
    threadpool *tp = tp_new(4);
    CHECK(tp);
    sleep_us(2000);
    tp_free(tp);
}

static void sum_job(void *arg, int ith, int nth)
{
    long *parts = arg;
    long s = 0;
    for (long i = ith; i < 100000; i += nth) s += i;
    parts[ith] = s;
}

TEST(split_sum_matches)
{
    threadpool *tp = tp_new(4);
    CHECK(tp);
    long parts[4] = {0};
    tp_run(tp, sum_job, parts);
    tp_free(tp);
    CHECK_EQ_INT(parts[0] + parts[1] + parts[2] + parts[3], 100000L * 99999 / 2);
}

static void empty_job(void *arg, int ith, int nth) { (void)arg, (void)ith, (void)nth; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* tp_runs counts every call (what the forward profile reports per token).
 * Prints, without asserting (the machine is shared), the fixed cost of one
 * empty run on 2 threads: the decode step pays it ~8 times per layer. */
TEST(runs_counted_and_empty_run_cost)
{
    CHECK_EQ_INT(tp_runs(NULL), 0);
    threadpool *tp = tp_new(2);
    CHECK(tp);
    CHECK_EQ_INT(tp_runs(tp), 0);
    enum { BATCH = 2000, REPS = 9 };
    double per[REPS];
    for (int r = 0; r < REPS; r++) {
        const double t0 = now_s();
        for (int i = 0; i < BATCH; i++) tp_run(tp, empty_job, NULL);
        per[r] = (now_s() - t0) / BATCH;
    }
    const unsigned long long runs = tp_runs(tp);
    tp_free(tp);
    CHECK_EQ_INT(runs, (unsigned long long)BATCH * REPS);
    qsort(per, REPS, sizeof per[0], cmp_double);
    INFO("empty tp_run on 2 threads, back to back: median %.2f us, min %.2f us (batches of %d)", per[REPS / 2] * 1e6,
         per[0] * 1e6, BATCH);
}

int main(void)
{
    RUN(null_pool_runs_on_caller);
    RUN(single_thread_pool_runs_on_caller);
    RUN(rejects_zero_threads);
    RUN(every_index_once_back_to_back);
    RUN(workers_wake_from_sleep);
    RUN(caller_wakes_after_slow_worker);
    RUN(create_and_free_many);
    RUN(split_sum_matches);
    RUN(runs_counted_and_empty_run_cost);
    return test_summary();
}
