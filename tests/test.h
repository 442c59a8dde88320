/* test.h - the tiny unit-test harness shared by tests/test_*.c.
 *
 * Each test is a function; RUN(fn) runs it and prints one line,
 * "PASS name" or "FAIL name: file:line: what". tests/run.sh counts those
 * lines over every binary and script. A binary that dies without printing
 * counts as a failure there. CHECK* return from the test on first failure.
 *
 *   TEST(parses_header) { CHECK(x == 1); CHECK_EQ_INT(a, b); }
 *   int main(void) { RUN(parses_header); return test_summary(); }
 */
#ifndef PL_TEST_H
#define PL_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failed_now, test_n_pass, test_n_fail;
static char test_why[1024];

#define TEST(name) static void name(void)

#define CHECK(c) do { if (!(c)) { \
    snprintf(test_why, sizeof test_why, "%s:%d: CHECK(%s)", __FILE__, __LINE__, #c); \
    test_failed_now = 1; return; } } while (0)

#define CHECK_MSG(c, ...) do { if (!(c)) { \
    int k_ = snprintf(test_why, sizeof test_why, "%s:%d: ", __FILE__, __LINE__); \
    snprintf(test_why + k_, sizeof test_why - (size_t)k_, __VA_ARGS__); \
    test_failed_now = 1; return; } } while (0)

#define CHECK_EQ_INT(a, b) do { long long a_ = (long long)(a), b_ = (long long)(b); \
    CHECK_MSG(a_ == b_, "%s == %s: %lld != %lld", #a, #b, a_, b_); } while (0)

#define CHECK_NEAR(a, b, tol) do { double a_ = (double)(a), b_ = (double)(b); \
    CHECK_MSG(fabs(a_ - b_) <= (tol), "%s ~ %s: %.9g vs %.9g (tol %g)", #a, #b, a_, b_, (double)(tol)); } while (0)

#define CHECK_STR(a, b) do { const char *a_ = (a), *b_ = (b); \
    CHECK_MSG(a_ && b_ && strcmp(a_, b_) == 0, "%s == %s: \"%s\" vs \"%s\"", #a, #b, \
              a_ ? a_ : "(null)", b_ ? b_ : "(null)"); } while (0)

#define RUN(fn) test_run(#fn, fn)

/* An informational line, shown by tests/run.sh (figures a test measured). */
#define INFO(...) do { printf("INFO "); printf(__VA_ARGS__); printf("\n"); fflush(stdout); } while (0)

static inline void test_run(const char *name, void (*fn)(void))
{
    test_failed_now = 0;
    test_why[0] = 0;
    fn();
    if (test_failed_now) { printf("FAIL %s: %s\n", name, test_why); test_n_fail++; }
    else { printf("PASS %s\n", name); test_n_pass++; }
    fflush(stdout);
}

/* Prints "SKIP name: why" (counted as neither). */
static inline void test_skip(const char *name, const char *why)
{
    printf("SKIP %s: %s\n", name, why);
    fflush(stdout);
}

static inline int test_summary(void) { return test_n_fail ? 1 : 0; }

/* Path of a file in ../shared/models relative to the repo root (tests run
 * from the repo root). */
#define SHARED_MODELS "../shared/models"

#endif
