/* server_keys.c - bearer keys: checks, key files, constant-time matching;
 * see server_keys.h. */
#include "server_keys.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "pagellm.h"

static int key_check(const char *key, size_t n, const char *what, char *err, size_t cap)
{
    if (n == 0) {
        snprintf(err, cap, "%s is empty: a blank key would turn authentication off", what);
        return PL_ERR_INVAL;
    }
    if (n > SRV_KEY_MAX) {
        snprintf(err, cap, "%s is longer than %d bytes", what, SRV_KEY_MAX);
        return PL_ERR_INVAL;
    }
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)key[i] <= ' ' || (unsigned char)key[i] >= 0x7f) {
            snprintf(err, cap, "%s holds a space, a control byte or a non-ASCII byte at byte %zu (a key is visible ASCII)", what, i);
            return PL_ERR_INVAL;
        }
    return 0;
}

static int keys_push(srv_keys *ks, const char *key, size_t n, const char *what, char *err, size_t cap)
{
    int rc = key_check(key, n, what, err, cap);
    if (rc) return rc;
    if (ks->n >= SRV_KEYS_MAX) {
        snprintf(err, cap, "%s: more than %d keys", what, SRV_KEYS_MAX);
        return PL_ERR_INVAL;
    }
    char **k = realloc(ks->k, (ks->n + 1) * sizeof *k);
    if (!k) return PL_ERR_NOMEM;
    ks->k = k;
    if (!(k[ks->n] = strndup(key, n))) return PL_ERR_NOMEM;
    ks->n++;
    return 0;
}

int srv_keys_add(srv_keys *ks, const char *key, const char *what, char *err, size_t cap)
{
    return keys_push(ks, key, strlen(key), what, err, cap);
}

/* Adds the keys of the open file f; on failure the keys added so far are
 * taken back by the caller (n0). */
static int keys_read(srv_keys *ks, FILE *f, const char *path, char *err, size_t cap)
{
    char line[SRV_KEY_MAX + 64], what[512];
    int lineno = 0, rc = 0, added = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        lineno++;
        size_t n = strlen(line);
        if (n == sizeof line - 1 && line[n - 1] != '\n') {
            snprintf(err, cap, "%s line %d: longer than a key may be (%d bytes)", path, lineno, SRV_KEY_MAX);
            return PL_ERR_INVAL;
        }
        char *s = line;
        while (*s == ' ' || *s == '\t') s++;
        n = strlen(s);
        while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
        if (n == 0 || *s == '#') continue;
        snprintf(what, sizeof what, "the key on %s line %d", path, lineno);
        if (!(rc = keys_push(ks, s, n, what, err, cap))) added++;
    }
    if (!rc && ferror(f)) {
        snprintf(err, cap, "cannot read %s: %s", path, strerror(errno));
        return PL_ERR_IO;
    }
    if (!rc && !added) {
        snprintf(err, cap, "%s holds no key (one key per line; '#' starts a comment line)", path);
        return PL_ERR_INVAL;
    }
    return rc;
}

int srv_keys_load(srv_keys *ks, const char *path, bool *loose, char *err, size_t cap)
{
    FILE *f = fopen(path, "r");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        snprintf(err, cap, "cannot open %s: %s", path, strerror(errno));
        if (f) fclose(f);
        return PL_ERR_IO;
    }
    *loose = (st.st_mode & (S_IRGRP | S_IROTH)) != 0;
    size_t n0 = ks->n;
    int rc = keys_read(ks, f, path, err, cap);
    fclose(f);
    if (rc)
        while (ks->n > n0) free(ks->k[--ks->n]);
    return rc;
}

bool srv_keys_match(const srv_keys *ks, const char *h)
{
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return false;
    h += 7;
    while (*h == ' ') h++;
    size_t m = strnlen(h, SRV_KEY_MAX + 1);
    while (m && h[m - 1] == ' ') m--;
    unsigned any = 0;
    for (size_t j = 0; j < ks->n; j++) {
        const char *key = ks->k[j];
        size_t n = strlen(key);
        unsigned diff = (unsigned)(n != m);
        for (size_t i = 0; i < n; i++) diff |= (unsigned char)key[i] ^ (unsigned char)(i < m ? h[i] : 0);
        any |= diff == 0;
    }
    return any != 0;
}

void srv_keys_free(srv_keys *ks)
{
    for (size_t i = 0; i < ks->n; i++) free(ks->k[i]);
    free(ks->k);
    ks->k = NULL;
    ks->n = 0;
}
