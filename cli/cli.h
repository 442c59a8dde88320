/* cli.h - flag parsing shared by every `pagellm` subcommand.
 *
 * A subcommand describes its flags in a table; cli_parse() fills the targets,
 * collects positional arguments, prints --help, and refuses unknown flags,
 * missing values and out-of-range values with a message naming the flag.
 * Exit-code contract for subcommands: 0 ok, 1 runtime failure, 2 usage error.
 */
#ifndef PL_CLI_CLI_H
#define PL_CLI_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    CLI_FLAG,   /* bool, no value */
    CLI_INT,    /* int, range [min, max] */
    CLI_U64,    /* uint64_t, range [min, max] */
    CLI_FLOAT,  /* double, range [min, max] */
    CLI_SIZE,   /* uint64_t bytes; accepts suffixes K, M, G (powers of 1024) */
    CLI_STR,    /* const char * (points into argv) */
    CLI_STRS,   /* cli_strs: a repeatable string flag */
} cli_kind;

#define CLI_STRS_MAX 16
typedef struct {
    const char *v[CLI_STRS_MAX];
    int n;
} cli_strs;

typedef struct {
    const char *name;   /* long name without dashes, e.g. "ctx" */
    char short_name;    /* 0 if none */
    cli_kind kind;
    void *dst;
    double min, max;    /* for numeric kinds; min == max == 0 means unbounded */
    const char *metavar;
    const char *help;
} cli_opt;

enum { CLI_OK = 0, CLI_HELP = 1, CLI_USAGE = 2 };

/* Parses argv[1..] (argv[0] is the subcommand name). Positional arguments
 * are stored in pos[0..*npos) (at most max_pos; more is a usage error).
 * Returns CLI_OK, CLI_HELP (help printed to stdout) or CLI_USAGE (error
 * printed to stderr as "pagellm CMD: ..."). */
int cli_parse(const char *cmd, const char *usage, const cli_opt *opts, int argc, char **argv,
              const char **pos, int max_pos, int *npos);

/* Prints "pagellm CMD: msg" to stderr. */
void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "15.62 GiB": bytes in powers of 1024, into buf; returns buf. */
const char *cli_human_bytes(double bytes, char *buf, size_t cap);

/* Reads a whole file ("-" = stdin) into a NUL-terminated malloc'd buffer. */
char *cli_read_file(const char *path, uint64_t *len);

#endif
