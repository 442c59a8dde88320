/* server_cors.c - the CORS origin list and preflight headers; see
 * server_cors.h for the policy. */
#include "server_cors.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* scheme://host[:port] with no path, query, user or white space, as
 * browsers send Origin (RFC 6454 serialization). */
static bool origin_ok(const char *s, size_t n)
{
    const char *sep = NULL;
    for (size_t i = 0; i + 2 < n; i++)
        if (s[i] == ':' && s[i + 1] == '/' && s[i + 2] == '/') { sep = s + i; break; }
    if (!sep || sep == s || sep + 3 == s + n) return false;
    for (const char *p = s; p < sep; p++)
        if (!isalnum((unsigned char)*p) && *p != '+' && *p != '-' && *p != '.') return false;
    for (const char *p = sep + 3; p < s + n; p++)
        if (!isalnum((unsigned char)*p) && !strchr("-._~:[]", *p)) return false;
    return true;
}

int srv_cors_add(srv_cors *c, const char *spec, char *err, size_t cap)
{
    for (const char *p = spec;;) {
        while (*p == ' ' || *p == '\t') p++;
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        while (n && (p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
        if (n == 1 && *p == '*') {
            c->any = true;
        } else if (!origin_ok(p, n)) {
            snprintf(err, cap, "--cors-origin: '%.*s' is not an origin (scheme://host[:port], or *)", (int)(n > 200 ? 200 : n), p);
            return -1;
        } else if (c->n == SRV_CORS_MAX) {
            snprintf(err, cap, "--cors-origin: more than %d origins", SRV_CORS_MAX);
            return -1;
        } else {
            if (!(c->origin[c->n] = strndup(p, n))) { snprintf(err, cap, "out of memory"); return -1; }
            c->n++;
        }
        if (!end) return 0;
        p = end + 1;
    }
}

void srv_cors_free(srv_cors *c)
{
    for (int i = 0; i < c->n; i++) free(c->origin[i]);
    memset(c, 0, sizeof *c);
}

const char *srv_cors_allow(const srv_cors *c, const char *origin)
{
    if (c->any || c->n == 0) return "*";
    if (!origin) return NULL;
    for (int i = 0; i < c->n; i++)
        if (strcasecmp(c->origin[i], origin) == 0) return origin;
    return NULL;
}

/* A comma list of header names (RFC 9110 tokens) of a sane length. */
static bool header_list_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 1024) return false;
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("!#$%&'*+-.^_`|~, ", *p)) return false;
    return true;
}

void srv_cors_allow_headers(const char *req, char *out, size_t cap)
{
    if (req && header_list_ok(req)) snprintf(out, cap, "Authorization, Content-Type, %s", req);
    else snprintf(out, cap, "Authorization, Content-Type");
}
