/* server_web.h - the web page at GET / (chat with the model, watch the KV
 * cache): its files, embedded into the binary at build time from
 * server/web/ (scripts/embed_web.sh), and their HTTP answers.
 *
 *   GET /            index.html
 *   GET /web/NAME    the page's scripts and styles
 *
 * The page itself is public (it holds no data); what it reads - /v1/kv,
 * /metrics, /v1/chat/completions - asks for the API key as before, which
 * the page sends as a Bearer token. docs/web.md describes the page.
 */
#ifndef PL_SERVER_WEB_H
#define PL_SERVER_WEB_H

#include <stddef.h>

typedef struct {
    const char *path;          /* "/" or "/web/NAME" */
    const char *ctype;         /* Content-Type */
    const unsigned char *data; /* len bytes (plus a NUL not counted) */
    size_t len;
} srv_web_asset;

extern const srv_web_asset srv_web_assets[]; /* build/gen/server_web_assets.c */
extern const unsigned srv_web_n_assets;

/* The asset served at url (exact match, no query string), or NULL. */
const srv_web_asset *srv_web_find(const char *url);

struct MHD_Response;
/* A response for a, with its type and the headers that keep the page to its
 * own origin (Content-Security-Policy) and fresh (no-cache); NULL on
 * failure. */
struct MHD_Response *srv_web_response(const srv_web_asset *a);

#endif
