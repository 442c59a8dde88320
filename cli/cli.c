/* cli.c - flag parsing; see cli.h. */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "pagellm %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static void print_help(const char *cmd, const char *usage, const cli_opt *opts)
{
    printf("usage: pagellm %s %s\n\noptions:\n", cmd, usage);
    for (const cli_opt *o = opts; o && o->name; o++) {
        char left[64];
        if (o->short_name)
            snprintf(left, sizeof left, "-%c, --%s %s", o->short_name, o->name,
                     o->kind == CLI_FLAG ? "" : o->metavar ? o->metavar : "X");
        else
            snprintf(left, sizeof left, "    --%s %s", o->name,
                     o->kind == CLI_FLAG ? "" : o->metavar ? o->metavar : "X");
        printf("  %-30s %s\n", left, o->help ? o->help : "");
    }
    printf("  %-30s %s\n", "-h, --help", "show this help");
}

static const cli_opt *find_opt(const cli_opt *opts, const char *arg, const char **inline_val)
{
    *inline_val = NULL;
    for (const cli_opt *o = opts; o && o->name; o++) {
        if (arg[1] != '-') {
            if (o->short_name && arg[1] == o->short_name && arg[2] == '\0') return o;
            continue;
        }
        size_t n = strlen(o->name);
        if (strncmp(arg + 2, o->name, n) != 0) continue;
        if (arg[2 + n] == '\0') return o;
        if (arg[2 + n] == '=') { *inline_val = arg + 3 + n; return o; }
    }
    return NULL;
}

static int in_range(const cli_opt *o, double v)
{
    if (o->min == 0 && o->max == 0) return 1;
    return v >= o->min && v <= o->max;
}

static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0)) return -1; /* !(>=): NaN too, whose cast below is undefined */
    double mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1024.0, end++;
    else if (*end == 'M' || *end == 'm') mul = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g') mul = 1024.0 * 1024 * 1024, end++;
    if (*end == 'i' || *end == 'B') end++;
    if (*end == 'B') end++;
    if (*end != '\0' || v * mul > 1.8e19) return -1;
    *out = (uint64_t)(v * mul);
    return 0;
}

static int set_value(const char *cmd, const cli_opt *o, const char *val)
{
    char *end;
    errno = 0;
    switch (o->kind) {
    case CLI_INT: {
        long v = strtol(val, &end, 10);
        if (end == val || *end || errno || !in_range(o, (double)v)) goto bad;
        *(int *)o->dst = (int)v;
        return 0;
    }
    case CLI_U64: {
        if (val[0] == '-') goto bad;
        unsigned long long v = strtoull(val, &end, 10);
        if (end == val || *end || errno || !in_range(o, (double)v)) goto bad;
        *(uint64_t *)o->dst = v;
        return 0;
    }
    case CLI_FLOAT: {
        double v = strtod(val, &end);
        if (end == val || *end || errno || v != v || !in_range(o, v)) goto bad;
        *(double *)o->dst = v;
        return 0;
    }
    case CLI_SIZE: {
        uint64_t v;
        if (parse_size(val, &v) != 0 || !in_range(o, (double)v)) goto bad;
        *(uint64_t *)o->dst = v;
        return 0;
    }
    case CLI_STR:
        *(const char **)o->dst = val;
        return 0;
    case CLI_STRS: {
        cli_strs *l = o->dst;
        if (l->n >= CLI_STRS_MAX) {
            cli_error(cmd, "--%s given more than %d times", o->name, CLI_STRS_MAX);
            return -1;
        }
        l->v[l->n++] = val;
        return 0;
    }
    case CLI_FLAG:
        break;
    }
bad:
    if (o->min == 0 && o->max == 0)
        cli_error(cmd, "bad value '%s' for --%s", val, o->name);
    else
        cli_error(cmd, "bad value '%s' for --%s (allowed: %g .. %g)", val, o->name, o->min, o->max);
    return -1;
}

int cli_parse(const char *cmd, const char *usage, const cli_opt *opts, int argc, char **argv,
              const char **pos, int max_pos, int *npos)
{
    int np = 0, only_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!only_pos && (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)) {
            print_help(cmd, usage, opts);
            return CLI_HELP;
        }
        if (!only_pos && strcmp(a, "--") == 0) { only_pos = 1; continue; }
        if (!only_pos && a[0] == '-' && a[1] != '\0' && !(a[1] >= '0' && a[1] <= '9')) {
            const char *inl;
            const cli_opt *o = find_opt(opts, a, &inl);
            if (!o) {
                cli_error(cmd, "unknown flag '%s' (see --help)", a);
                return CLI_USAGE;
            }
            if (o->kind == CLI_FLAG) {
                if (inl) { cli_error(cmd, "flag --%s takes no value", o->name); return CLI_USAGE; }
                *(bool *)o->dst = true;
                continue;
            }
            const char *val = inl;
            if (!val) {
                if (i + 1 >= argc) { cli_error(cmd, "flag --%s needs a value", o->name); return CLI_USAGE; }
                val = argv[++i];
            }
            if (set_value(cmd, o, val) != 0) return CLI_USAGE;
            continue;
        }
        if (np >= max_pos) {
            cli_error(cmd, "unexpected argument '%s' (see --help)", a);
            return CLI_USAGE;
        }
        pos[np++] = a;
    }
    *npos = np;
    return CLI_OK;
}

char *cli_read_file(const char *path, uint64_t *len)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (n < cap) break;
        char *nb = realloc(buf, cap * 2 + 1);
        if (!nb) { free(buf); buf = NULL; break; }
        buf = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    if (f != stdin) fclose(f);
    if (!buf || bad) { free(buf); return NULL; }
    buf[n] = '\0';
    *len = n;
    return buf;
}

const char *cli_human_bytes(double bytes, char *buf, size_t cap)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    while (bytes >= 1024 && u < 6) bytes /= 1024, u++;
    snprintf(buf, cap, u ? "%.2f %s" : "%.0f %s", bytes, unit[u]);
    return buf;
}
