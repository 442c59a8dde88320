/* fuzz_cli.c - libFuzzer target for the flag parser every `pagellm`
 * command uses (cli/cli.c: cli_parse over a table of every flag kind).
 *
 * Input: the argument vector, its strings separated by NUL bytes (at most
 * 32; argv[0] is the command name).
 *
 * Properties (a broken one aborts, which libFuzzer reports as a crash):
 *   - cli_parse returns CLI_OK, CLI_HELP or CLI_USAGE;
 *   - after CLI_OK every bounded number is inside its range, a size is the
 *     value its text names (K, M, G in powers of 1024), a repeatable flag
 *     holds at most CLI_STRS_MAX values and the positional count is at most
 *     the maximum; strings point into argv;
 *   - no undefined behaviour (UBSan: a float cast out of range, overflow).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define MAX_ARGS 32

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_cli: broken property: %s\n", what);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1);
    memcpy(buf, data, size);
    buf[size] = 0;
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    argv[argc++] = "fuzz";
    for (char *p = buf; p <= buf + size && argc < MAX_ARGS; p += strlen(p) + 1) argv[argc++] = p;
    argv[argc] = NULL;

    bool flag = false;
    int n_int = 7, n_any = 7;
    uint64_t u64 = 3, size_b = 5, size_any = 5;
    double f = 0.5;
    const char *str = NULL;
    cli_strs strs = {0};
    cli_opt opts[] = {
        {"flag", 'f', CLI_FLAG, &flag, 0, 0, NULL, "a flag"},
        {"ctx", 'c', CLI_INT, &n_int, 1, 1 << 20, "N", "a bounded int"},
        {"threads", 't', CLI_INT, &n_any, -4, 4096, "N", "a signed int"},
        {"seed", 's', CLI_U64, &u64, 0, 0, "N", "an unbounded u64"},
        {"kv-mem", 0, CLI_SIZE, &size_b, 1, 1e15, "BYTES", "a bounded size"},
        {"max-body", 0, CLI_SIZE, &size_any, 0, 0, "BYTES", "an unbounded size"},
        {"temp", 0, CLI_FLOAT, &f, 0, 2, "T", "a bounded float"},
        {"model", 'm', CLI_STR, &str, 0, 0, "F", "a string"},
        {"stop", 0, CLI_STRS, &strs, 0, 0, "S", "a repeatable string"},
        {0},
    };
    const char *pos[4];
    int npos = -1;
    int rc = cli_parse("fuzz", "[flags] [ARGS]", opts, argc, argv, pos, 4, &npos);
    if (rc != CLI_OK && rc != CLI_HELP && rc != CLI_USAGE) fail("an unknown return code");
    if (rc == CLI_OK) {
        if (n_int < 1 || n_int > (1 << 20)) fail("--ctx outside its range");
        if (n_any < -4 || n_any > 4096) fail("--threads outside its range");
        if (size_b < 1 || size_b > (uint64_t)1e15) fail("--kv-mem outside its range");
        if (!(f >= 0 && f <= 2)) fail("--temp outside its range");
        if (strs.n < 0 || strs.n > CLI_STRS_MAX) fail("--stop count");
        if (npos < 0 || npos > 4) fail("positional count");
        for (int i = 0; i < npos; i++)
            if (pos[i] < buf || pos[i] > buf + size) fail("a positional argument outside argv");
        if (str && (str < buf || str > buf + size)) fail("--model outside argv");
    }
    free(buf);
    return 0;
}
