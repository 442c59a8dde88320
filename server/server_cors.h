/* server_cors.h - Cross-Origin Resource Sharing for `pagellm serve`: which
 * browser origins may read the answers (--cors-origin), and the OPTIONS
 * preflight.
 *
 * Policy (docs/security.md):
 * - no --cors-origin: every answer carries Access-Control-Allow-Origin: *;
 * - --cors-origin A,B (or repeated): an answer to a request whose Origin is
 *   in the list carries that origin (and Vary: Origin); other origins get
 *   no CORS header, so a browser withholds the answer from their scripts;
 * - a preflight (OPTIONS with Access-Control-Request-Method) needs no API
 *   key: 204 with Allow-Methods, Allow-Headers (Authorization,
 *   Content-Type and the headers the browser asks for, when they are
 *   header names) and Max-Age; from an origin not allowed, 403.
 * CORS only tells browsers what they may show; the API key still guards
 * every /v1 route.
 */
#ifndef PL_SERVER_CORS_H
#define PL_SERVER_CORS_H

#include <stdbool.h>
#include <stddef.h>

#define SRV_CORS_MAX 32       /* origins in the list */
#define SRV_CORS_MAX_AGE "600" /* seconds a browser may cache a preflight */

typedef struct {
    bool any;                 /* "*" (the default) */
    char *origin[SRV_CORS_MAX];
    int n;
} srv_cors;

/* Adds the comma-separated origins of spec ("*", or scheme://host[:port]
 * each). 0, or -1 with err naming the bad entry. */
int srv_cors_add(srv_cors *c, const char *spec, char *err, size_t cap);
void srv_cors_free(srv_cors *c);

/* The Access-Control-Allow-Origin value for a request with this Origin
 * header (NULL if none): "*", the origin itself, or NULL (no header). */
const char *srv_cors_allow(const srv_cors *c, const char *origin);

/* Access-Control-Allow-Headers for a preflight that asked for req (may be
 * NULL): Authorization, Content-Type, then req if it is a list of header
 * names. Writes at most cap bytes, NUL-terminated. */
void srv_cors_allow_headers(const char *req, char *out, size_t cap);

#endif
