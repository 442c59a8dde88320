/* server_web.c - serves the embedded web page; see server_web.h. */
#include "server_web.h"

#include <microhttpd.h>
#include <string.h>

/* Scripts and styles only from this server, no inline script, no framing
 * by other sites: model text the page shows can never run as code. */
#define SRV_WEB_CSP                                                                                             \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "       \
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

const srv_web_asset *srv_web_find(const char *url)
{
    if (!url) return NULL;
    for (unsigned i = 0; i < srv_web_n_assets; i++)
        if (strcmp(url, srv_web_assets[i].path) == 0) return &srv_web_assets[i];
    return NULL;
}

struct MHD_Response *srv_web_response(const srv_web_asset *a)
{
    if (!a) return NULL;
    /* the bytes live in the binary: MHD neither copies nor frees them */
    struct MHD_Response *r = MHD_create_response_from_buffer(a->len, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!r) return NULL;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, a->ctype);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Content-Security-Policy", SRV_WEB_CSP);
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    return r;
}
