/* server_keys.h - the bearer keys of `pagellm serve`: --api-key,
 * --api-key-file (one key per line) and --metrics-key.
 *
 * A key is 1..256 bytes of visible ASCII (no space, no control byte): a
 * blank key would turn authentication off without a word, and a key with
 * spaces cannot be sent unchanged in "Authorization: Bearer KEY". A key file
 * holds one key per line; blank lines and lines starting with '#' are not
 * keys, and spaces around a key (and a CR before the newline) are dropped.
 *
 * Matching compares the presented key with every stored key in time that
 * depends only on the lengths, never on where the first byte differs.
 */
#ifndef PL_SERVER_KEYS_H
#define PL_SERVER_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#define SRV_KEY_MAX 256     /* bytes of one key */
#define SRV_KEYS_MAX 1024   /* keys in one set */

typedef struct {
    char **k;   /* [n] malloc'd keys */
    size_t n;
} srv_keys;

/* Adds key (what names its origin in the error, e.g. "--api-key").
 * 0, PL_ERR_INVAL (err says why) or PL_ERR_NOMEM; the set is unchanged on failure. */
int srv_keys_add(srv_keys *ks, const char *key, const char *what, char *err, size_t cap);
/* Adds every key of the file at path. PL_ERR_IO when it cannot be read,
 * PL_ERR_INVAL when a line is not a key or the file holds none, with err
 * naming the file (and line); the set is unchanged on failure.
 * *loose is set when group or others may read the file. */
int srv_keys_load(srv_keys *ks, const char *path, bool *loose, char *err, size_t cap);
/* True when the value of an Authorization header is "Bearer K" for a K in the set. */
bool srv_keys_match(const srv_keys *ks, const char *authorization);
void srv_keys_free(srv_keys *ks);

#endif
