/* threadpool.c - persistent workers with a spin-then-sleep handoff; see
 * threadpool.h.
 *
 * One run ("generation") goes:
 *
 *   caller                         worker k (1..n-1)
 *   job, arg, done = 0
 *   gen += 1  ------------------>  sees gen change (spinning, or woken from
 *   wake sleepers (if any)          a futex wait on gen)
 *   job(arg, 0, n)                 job(arg, k, n)
 *   wait for done == n-1  <------  done += 1 (the last one wakes the caller
 *                                   if it went to sleep)
 *
 * Invariants:
 * - The caller touches job/arg/done only while no run is in flight (after it
 *   saw done == n-1), so workers read them without locks: the release of
 *   the gen bump publishes them, the workers' done increments publish their
 *   results back to the caller.
 * - Every worker runs every generation exactly once: the caller never starts
 *   generation g+1 before all workers finished g, so gen moves by one.
 * - No lost wake-ups: a sleeper announces itself (n_sleeping, caller_sleeping)
 *   with a seq_cst RMW/store before it re-reads the word it waits on, and the
 *   waker changes the word (seq_cst) before it reads the announcement. At
 *   least one side sees the other; the futex re-checks the word in the kernel.
 *
 * Waiting spins with `pause` for up to TP_SPIN_NS, then sleeps on a Linux
 * futex. A decode step issues many small jobs back to back; spinning across
 * the gaps avoids a futex wake (several microseconds) per job, and the bound
 * keeps idle pools (or pools with more threads than CPUs) off the CPUs.
 */
#include "base/threadpool.h"

#include "base/err.h"
#include "base/mem.h"

#include <assert.h>
#include <limits.h>
#include <stdbool.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* How long a waiter spins before it sleeps. Long enough to cover the gap
 * between two kernels of one forward pass, short enough not to matter when
 * the pool goes idle. */
#ifndef TP_SPIN_NS
#define TP_SPIN_NS 50000
#endif

typedef struct {
    threadpool *tp;
    int ith;
} tp_worker;

struct threadpool {
    int n;                       /* threads including the caller */
    pthread_t *threads;          /* [n-1] workers */
    tp_worker *workers;          /* [n-1] their arguments */
    tp_job job;                  /* job of the current generation */
    void *arg;
    int quit;                    /* set with the final gen bump */
    unsigned long long runs;     /* tp_run calls (written by the one caller) */
    _Alignas(64) _Atomic uint32_t gen;  /* futex word the workers wait on */
    _Atomic int n_sleeping;      /* workers inside futex_wait on gen */
    _Alignas(64) _Atomic uint32_t done; /* workers finished this generation */
    _Atomic int caller_sleeping; /* the caller is (about to be) in futex_wait on done */
    _Atomic int busy;            /* a tp_run is in flight (catches nested or concurrent calls) */
};

static void tp_futex_wait(_Atomic uint32_t *word, uint32_t val)
{
    /* EINTR and EAGAIN just return; callers loop on the condition. */
    syscall(SYS_futex, (void *)word, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void tp_futex_wake(_Atomic uint32_t *word, int n)
{
    syscall(SYS_futex, (void *)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

static inline void tp_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int64_t tp_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Spins until (*word == val) == want_equal, for up to TP_SPIN_NS; returns
 * whether the condition holds. No sched_yield: on a loaded machine a yield
 * hands the core to another process for a whole time slice (measured: median
 * empty tp_run 65 us with yields vs 0.9 us without, at load 10 on 2 cores). */
static bool tp_spin(_Atomic uint32_t *word, uint32_t val, bool want_equal)
{
    int64_t t0 = 0;
    for (uint32_t i = 1;; i++) {
        if ((atomic_load_explicit(word, memory_order_acquire) == val) == want_equal) return true;
        tp_cpu_relax();
        if ((i & 63) == 0) { /* the clock is read rarely: it costs ~20 ns */
            int64_t t = tp_now_ns();
            if (t0 == 0) t0 = t;
            else if (t - t0 > TP_SPIN_NS) return false;
        }
    }
}

/* Worker side: returns the new generation once gen != seen. */
static uint32_t tp_wait_gen(threadpool *tp, uint32_t seen)
{
    while (!tp_spin(&tp->gen, seen, false)) {
        atomic_fetch_add(&tp->n_sleeping, 1);
        if (atomic_load(&tp->gen) == seen) tp_futex_wait(&tp->gen, seen);
        atomic_fetch_sub(&tp->n_sleeping, 1);
    }
    return atomic_load_explicit(&tp->gen, memory_order_acquire);
}

/* Caller side: returns once every worker finished the generation. */
static void tp_wait_done(threadpool *tp)
{
    const uint32_t all = (uint32_t)(tp->n - 1);
    while (!tp_spin(&tp->done, all, true)) {
        atomic_store(&tp->caller_sleeping, 1);
        uint32_t d = atomic_load(&tp->done);
        if (d != all) tp_futex_wait(&tp->done, d); /* the last worker wakes us */
        atomic_store(&tp->caller_sleeping, 0);
    }
}

static void *tp_worker_main(void *p)
{
    tp_worker *wk = p;
    threadpool *tp = wk->tp;
    uint32_t seen = 0;
    for (;;) {
        seen = tp_wait_gen(tp, seen);
        if (tp->quit) break;
        tp->job(tp->arg, wk->ith, tp->n);
        uint32_t d = atomic_fetch_add(&tp->done, 1) + 1;
        if (d == (uint32_t)(tp->n - 1) && atomic_load(&tp->caller_sleeping))
            tp_futex_wake(&tp->done, 1);
    }
    return NULL;
}

/* Publishes job/arg (or quit) as a new generation and wakes sleepers. */
static void tp_start_gen(threadpool *tp)
{
    atomic_store_explicit(&tp->done, 0, memory_order_relaxed);
    atomic_fetch_add(&tp->gen, 1);
    if (atomic_load(&tp->n_sleeping) > 0) tp_futex_wake(&tp->gen, INT_MAX);
}

static void tp_stop_workers(threadpool *tp, int n_started)
{
    tp->quit = 1;
    tp_start_gen(tp);
    for (int i = 0; i < n_started; i++) pthread_join(tp->threads[i], NULL);
}

threadpool *tp_new(int n_threads)
{
    if (n_threads < 1) {
        err_set(PL_EINVAL, "tp_new: n_threads %d < 1", n_threads);
        return NULL;
    }
    threadpool *tp = mem_alloc_aligned(sizeof *tp, 64);
    if (!tp) return NULL;
    tp->n = n_threads;
    int nw = n_threads - 1;
    tp->threads = mem_calloc((size_t)(nw ? nw : 1), sizeof *tp->threads);
    tp->workers = mem_calloc((size_t)(nw ? nw : 1), sizeof *tp->workers);
    if (!tp->threads || !tp->workers) {
        free(tp->threads);
        free(tp->workers);
        mem_free(tp);
        return NULL;
    }
    for (int i = 0; i < nw; i++) {
        tp->workers[i] = (tp_worker){tp, i + 1};
        int rc = pthread_create(&tp->threads[i], NULL, tp_worker_main, &tp->workers[i]);
        if (rc != 0) {
            tp_stop_workers(tp, i);
            free(tp->threads);
            free(tp->workers);
            mem_free(tp);
            err_set(PL_ENOMEM, "tp_new: cannot start worker %d of %d (error %d)", i + 1, nw, rc);
            return NULL;
        }
    }
    return tp;
}

void tp_free(threadpool *tp)
{
    if (!tp) return;
    tp_stop_workers(tp, tp->n - 1);
    free(tp->threads);
    free(tp->workers);
    mem_free(tp);
}

int tp_size(const threadpool *tp) { return tp ? tp->n : 1; }

unsigned long long tp_runs(const threadpool *tp) { return tp ? tp->runs : 0; }

void tp_run(threadpool *tp, tp_job job, void *arg)
{
    if (tp) tp->runs++;
    if (!tp || tp->n == 1) {
        job(arg, 0, 1);
        return;
    }
    int was_busy = atomic_exchange_explicit(&tp->busy, 1, memory_order_relaxed);
    assert(!was_busy && "tp_run: one caller at a time, no nesting");
    (void)was_busy;
    tp->job = job;
    tp->arg = arg;
    tp_start_gen(tp);
    job(arg, 0, tp->n);
    tp_wait_done(tp);
    atomic_store_explicit(&tp->busy, 0, memory_order_relaxed);
}
