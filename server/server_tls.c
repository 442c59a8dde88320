/* server_tls.c - GnuTLS sessions for the relay; see server_tls.h. */
#include "server_tls.h"

#include <errno.h>
#include <gnutls/gnutls.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct srv_tls {
    gnutls_certificate_credentials_t cred;
};

struct srv_tls_conn {
    gnutls_session_t s;
    size_t send_pending; /* bytes of a send that said EAGAIN: GnuTLS must be called for them again */
};

int srv_tls_new(srv_tls **out, const char *cert_pem, const char *key_pem, char *err, size_t errlen)
{
    srv_tls *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = gnutls_global_init();
    if (rc >= 0) rc = gnutls_certificate_allocate_credentials(&t->cred);
    if (rc < 0) {
        snprintf(err, errlen, "%s", gnutls_strerror(rc));
        free(t);
        return -1;
    }
    gnutls_datum_t c = {(unsigned char *)cert_pem, (unsigned)strlen(cert_pem)};
    gnutls_datum_t k = {(unsigned char *)key_pem, (unsigned)strlen(key_pem)};
    rc = gnutls_certificate_set_x509_key_mem(t->cred, &c, &k, GNUTLS_X509_FMT_PEM);
    if (rc < 0) {
        snprintf(err, errlen, "%s", gnutls_strerror(rc));
        srv_tls_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void srv_tls_free(srv_tls *t)
{
    if (!t) return;
    if (t->cred) gnutls_certificate_free_credentials(t->cred);
    gnutls_global_deinit();
    free(t);
}

srv_tls_conn *srv_tls_accept(srv_tls *t, int fd)
{
    srv_tls_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    if (gnutls_init(&c->s, GNUTLS_SERVER | GNUTLS_NONBLOCK | GNUTLS_NO_SIGNAL) < 0) {
        free(c);
        return NULL;
    }
    if (gnutls_set_default_priority(c->s) < 0 || gnutls_credentials_set(c->s, GNUTLS_CRD_CERTIFICATE, t->cred) < 0) {
        srv_tls_close(c);
        return NULL;
    }
    gnutls_certificate_server_set_request(c->s, GNUTLS_CERT_IGNORE);
    gnutls_transport_set_int(c->s, fd);
    return c;
}

static bool retry(int rc) { return rc == GNUTLS_E_AGAIN || rc == GNUTLS_E_INTERRUPTED; }

int srv_tls_handshake(srv_tls_conn *c)
{
    int rc = gnutls_handshake(c->s);
    if (rc == GNUTLS_E_SUCCESS) return 1;
    if (retry(rc) || !gnutls_error_is_fatal(rc)) return 0;
    return -1;
}

ssize_t srv_tls_recv(srv_tls_conn *c, void *buf, size_t n)
{
    for (;;) {
        ssize_t r = gnutls_record_recv(c->s, buf, n);
        if (r >= 0) return r;
        if (r == GNUTLS_E_PREMATURE_TERMINATION) return 0; /* closed without close_notify: a close all the same */
        if (retry((int)r)) {
            errno = EAGAIN;
            return -1;
        }
        if (!gnutls_error_is_fatal((int)r)) continue; /* a warning alert, a renegotiation request: ignored */
        errno = EPIPE;
        return -1;
    }
}

ssize_t srv_tls_send(srv_tls_conn *c, const void *buf, size_t n)
{
    ssize_t r;
    if (c->send_pending) { /* GnuTLS holds those bytes already: finish them */
        r = gnutls_record_send(c->s, NULL, 0);
        if (r > 0) c->send_pending = 0;
    } else {
        r = gnutls_record_send(c->s, buf, n);
    }
    if (r >= 0) return r;
    if (retry((int)r)) {
        if (!c->send_pending) c->send_pending = n;
        errno = EAGAIN;
        return -1;
    }
    errno = EPIPE;
    return -1;
}

void srv_tls_bye(srv_tls_conn *c) { (void)gnutls_bye(c->s, GNUTLS_SHUT_WR); }

void srv_tls_close(srv_tls_conn *c)
{
    if (!c) return;
    gnutls_deinit(c->s);
    free(c);
}
