/* threadpool.h - a persistent pool of worker threads for data-parallel
 * kernels. tp_run() hands the same job to every thread (the caller is thread
 * 0) and returns when all are done; jobs split work by (ith, nth). Workers
 * spin briefly, then sleep, between jobs, so that a decode step's many small
 * jobs do not pay a futex round-trip each. One caller at a time.
 */
#ifndef PL_BASE_THREADPOOL_H
#define PL_BASE_THREADPOOL_H

typedef struct threadpool threadpool;
typedef void (*tp_job)(void *arg, int ith, int nth);

/* n_threads >= 1 (1 = run everything on the caller). NULL on failure. */
threadpool *tp_new(int n_threads);
void tp_free(threadpool *tp);
int tp_size(const threadpool *tp);
/* Runs job(arg, i, n) for i in 0..n-1, one per thread; tp may be NULL (then n = 1). */
void tp_run(threadpool *tp, tp_job job, void *arg);
/* tp_run calls made on tp so far (0 for NULL): profiles count hand-offs. */
unsigned long long tp_runs(const threadpool *tp);

#endif
