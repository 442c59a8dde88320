/* bench_common.c - RNG, order statistics, synthetic prompts and child
 * processes for the bench subcommands; see bench_common.h. */
#include "bench_common.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

uint64_t bench_rng_next(bench_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint32_t bench_rng_range(bench_rng *r, uint32_t lo, uint32_t hi)
{
    uint64_t span = (uint64_t)hi - lo + 1;
    return lo + (uint32_t)(bench_rng_next(r) % span); /* bias < span / 2^64: irrelevant here */
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_percentile(double *v, size_t n, double p)
{
    if (n == 0) return 0;
    qsort(v, n, sizeof *v, cmp_double);
    if (p <= 0) return v[0];
    if (p >= 1) return v[n - 1];
    double at = p * (double)(n - 1);
    size_t i = (size_t)floor(at);
    double f = at - (double)i;
    return i + 1 < n ? v[i] * (1 - f) + v[i + 1] * f : v[i];
}

double bench_median(double *v, size_t n) { return bench_percentile(v, n, 0.5); }

void bench_synthetic_prompt(int32_t n_vocab, int32_t bos, int32_t *ids, int n)
{
    const int32_t span = n_vocab - 100 < 1000 ? n_vocab - 100 : 1000;
    for (int i = 0; i < n; i++) {
        if (i == 0 && bos >= 0) ids[i] = bos;
        else if (span > 0) ids[i] = 100 + i % span;
        else ids[i] = i % n_vocab;
    }
}

int bench_parse_ints(const char *s, int *out, int cap, int *n)
{
    *n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1 << 20 || *n >= cap || (*end && *end != ',')) return -1;
        out[(*n)++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return 0;
}

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ----------------------------------------------------------- children */

int bench_child_spawn(bench_child *c, char *const argv[], int capture)
{
    int p[2];
    c->pid = -1;
    c->fd = -1;
    if (pipe2(p, O_CLOEXEC) != 0) {
        fprintf(stderr, "pagellm bench: pipe: %s\n", strerror(errno));
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "pagellm bench: fork: %s\n", strerror(errno));
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        /* child: only async-signal-safe calls until exec */
        int null = open("/dev/null", O_RDWR);
        dup2(p[1], capture == 1 ? 1 : 2);
        if (null >= 0) dup2(null, capture == 1 ? 2 : 1);
        if (null >= 0) dup2(null, 0);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL); /* the server blocks what it wants itself */
        execv(argv[0], argv);
        _exit(127);
    }
    close(p[1]);
    c->pid = pid;
    c->fd = p[0];
    return 0;
}

/* Waits for fd to be readable until deadline: 1 readable, 0 timeout. */
static int wait_readable(int fd, double deadline)
{
    for (;;) {
        double left = deadline - bench_now();
        if (left <= 0) return 0;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int r = poll(&pf, 1, (int)(left * 1000) + 1);
        if (r > 0) return 1;
        if (r < 0 && errno != EINTR) return -1;
    }
}

int bench_child_readline(bench_child *c, char *line, size_t cap, double deadline)
{
    size_t n = 0;
    for (;;) {
        if (wait_readable(c->fd, deadline) <= 0) return -1;
        char ch;
        ssize_t r = read(c->fd, &ch, 1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) {
            line[n] = 0;
            return n ? 1 : 0;
        }
        if (ch == '\n') {
            line[n] = 0;
            return 1;
        }
        if (n + 1 < cap) line[n++] = ch;
    }
}

char *bench_child_read_all(bench_child *c, double deadline)
{
    size_t len = 0, cap = 4096;
    char *s = malloc(cap);
    while (s) {
        if (wait_readable(c->fd, deadline) <= 0) break;
        if (len + 1024 > cap) {
            char *t = realloc(s, cap *= 2);
            if (!t) break;
            s = t;
        }
        ssize_t r = read(c->fd, s + len, cap - len - 1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) break;
        if (r == 0) {
            s[len] = 0;
            return s;
        }
        len += (size_t)r;
    }
    free(s);
    return NULL;
}

int bench_child_wait(bench_child *c, double deadline) { return bench_child_wait_rusage(c, deadline, NULL); }

int bench_child_wait_rusage(bench_child *c, double deadline, struct rusage *ru)
{
    int st = -1;
    while (c->pid > 0) {
        pid_t r = wait4(c->pid, &st, WNOHANG, ru);
        if (r == c->pid || (r < 0 && errno != EINTR)) {
            c->pid = -1;
            break;
        }
        if (bench_now() >= deadline) return -1;
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    return st;
}

int bench_child_stop(bench_child *c, double grace_s)
{
    if (c->pid <= 0) return -1;
    kill(c->pid, SIGTERM);
    int st = bench_child_wait(c, bench_now() + grace_s);
    if (c->pid > 0) {
        kill(c->pid, SIGKILL);
        st = bench_child_wait(c, bench_now() + 10);
    }
    return st;
}
