/* redis_cluster.c - Redis Cluster client for batched GET/SET; see redis_cluster.h.
 *
 * A batch is a list of ops (one per key), each aimed at a node. A round
 * groups the pending ops by node (a counting sort) into lanes and works in
 * waves: each wave sends one chunk to every node, then reads their replies
 * (so that the nodes work in parallel), settling each op from its reply: a
 * value, a miss, or a redirection that re-aims it for the next round. A
 * chunk ends after RC_CHUNK_OPS ops or RC_CHUNK_BYTES of SET values, which
 * bounds the buffers.
 *
 * hiredis connects, sends GETs and runs CLUSTER SLOTS. The rest bypasses
 * it, because its buffers made large values slow:
 *   - SET chunks are written with writev next to the caller's values
 *     (hiredis would copy each value into its output buffer and, after
 *     every partial write, move the unwritten rest to the front: quadratic
 *     in the chunk; 1 MiB values were set at 0.06 GB/s that way);
 *   - batch replies are read by resp_reader.h, values straight from the
 *     socket into the caller's block.
 * hiredis's buffers and resp_reader's are all empty at a chunk's end (a
 * node sends nothing it was not asked for), so both may use one socket.
 */
#include "store/redis_cluster.h"

#include "base/err.h"
#include "store/resp_reader.h"

#include <hiredis/hiredis.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RC_CHUNK_OPS 512
#define RC_CHUNK_BYTES ((size_t)16 << 20)
/* Connections a slot-map refresh may open besides the ones already open:
 * bounds the time a refresh spends when most nodes are unreachable. */
#define RC_REFRESH_NEW_CONNECTS 2
/* While keys go unserved because their node is in backoff, the map is
 * reloaded this often from the live nodes: a replica promoted in the dead
 * master's place shows there, long before a capped backoff would expire. */
#define RC_REFRESH_WHILE_DOWN_MS 500

typedef struct {
    char host[256];
    int port;
    char name[272]; /* "host:port" */
    redisContext *c;
    resp_reader rd;      /* batch replies, read past hiredis on c's socket */
    int64_t next_try_ms; /* no connect attempt before this (backoff) */
    int backoff_ms;      /* the last wait; 0 while the node is healthy */
} rc_node;

/* The pieces of one SET chunk for writev: per op, ASKING, the head up to
 * the key, the key, the value's length line, the value, the tail. */
#define RC_IOV_PER_OP 6
#define RC_HEAD_MAX 96

typedef struct {
    struct iovec iov[RC_CHUNK_OPS * RC_IOV_PER_OP];
    char text[RC_CHUNK_OPS][3][RC_HEAD_MAX];
} rc_set_scratch;

/* One node's share of a round: its ops idx[0 .. m); [a, e) is the chunk
 * in flight, [0, a) is settled or re-aimed. */
typedef struct {
    int node;
    const size_t *idx;
    size_t m, a, e;
} rc_lane;

typedef struct {
    _Atomic uint64_t hits, misses, sets_ok, sets_dropped, errors, redirects, connects, reconnects,
        connect_failures, skipped_down, slot_refreshes, bytes_read, bytes_written;
} rc_counters;

struct redis_cluster {
    redis_cluster_opts o;
    char user[256], password[256]; /* o.user / o.password point here */
    rc_node nodes[REDIS_CLUSTER_MAX_NODES];
    int n_nodes, n_seeds; /* nodes[0 .. n_seeds) are the user's seeds */
    int16_t slot_node[REDIS_CLUSTER_SLOTS];
    int want_refresh; /* a node failed or redirected: reload the map */
    int64_t next_down_refresh_ms;
    char last_err[256];
    rc_counters k;
    rc_set_scratch set;
    rc_lane lanes[REDIS_CLUSTER_MAX_NODES];
};

#define COUNT(rc, field, v) atomic_fetch_add_explicit(&(rc)->k.field, (uint64_t)(v), memory_order_relaxed)

typedef enum { OP_GET, OP_SET } rc_kind;

typedef struct {
    int node;        /* target this round; -1 = settled */
    uint8_t asking;  /* an ASK redirection: send ASKING first */
} rc_op;

typedef struct {
    rc_kind kind;
    const char *const *keys;
    const size_t *klens;
    size_t n;
    const uint8_t *const *in;  /* SET values */
    const size_t *in_lens;
    uint8_t **out;             /* GET values */
    size_t *out_lens;
    char ttl[24];              /* PX argument, "" for none */
    rc_op *ops;
    int status;                /* PL_EIO once anything went wrong */
    int moved;                 /* node named by the last MOVED of this round, -1 if none */
} rc_batch;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct timeval ms_tv(int ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    return tv;
}

redis_cluster_opts redis_cluster_default_opts(void)
{
    return (redis_cluster_opts){
        .connect_timeout_ms = 150, .command_timeout_ms = 200, .backoff_min_ms = 100, .backoff_max_ms = 5000};
}

/* ------------------------------------------------------------- key slot */

static uint16_t crc16_xmodem(const char *p, size_t n)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < n; i++) {
        crc ^= (uint16_t)((uint8_t)p[i] << 8);
        for (int b = 0; b < 8; b++) crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned redis_cluster_key_slot(const char *key, size_t len)
{
    /* the first '{' and the first '}' after it; a tag only when non-empty */
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t rest = len - (size_t)(open - key) - 1;
        const char *close = memchr(open + 1, '}', rest);
        if (close && close > open + 1) return crc16_xmodem(open + 1, (size_t)(close - open - 1)) & 16383u;
    }
    return crc16_xmodem(key, len) & 16383u;
}

/* ---------------------------------------------------------------- seeds */

static int parse_port(const char *s, size_t n, int *port)
{
    if (n == 0 || n > 5) return -1;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < 1 || v > 65535) return -1;
    *port = v;
    return 0;
}

/* Splits one "host:port" / "[v6]:port" item of n bytes. */
static int parse_hostport(const char *s, size_t n, char *host, size_t host_size, int *port)
{
    const char *h = s, *colon;
    size_t hl;
    if (n > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (!close || close + 1 >= s + n || close[1] != ':') return -1;
        h = s + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = memchr(s, ':', n);
        if (!colon || memchr(colon + 1, ':', (size_t)(s + n - colon - 1))) return -1;
        hl = (size_t)(colon - s);
    }
    if (hl == 0 || hl >= host_size) return -1;
    for (size_t i = 0; i < hl; i++)
        if (h[i] <= ' ' || h[i] == ',' || h[i] == '[' || h[i] == ']' || (unsigned char)h[i] >= 0x7f) return -1;
    if (parse_port(colon + 1, (size_t)(s + n - colon - 1), port)) return -1;
    memcpy(host, h, hl);
    host[hl] = '\0';
    return 0;
}

int redis_cluster_parse_seeds(const char *hostports, char (*hosts)[256], int *ports, int max)
{
    if (!hostports || !*hostports)
        return err_set(PL_EINVAL, "Redis seeds: empty; expected HOST:PORT[,HOST:PORT...]");
    int count = 0;
    const char *p = hostports;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char host[256];
        int port;
        if (parse_hostport(p, n, host, sizeof host, &port))
            return err_set(PL_EINVAL,
                           "Redis seeds: bad item \"%.*s\" in \"%s\"; expected HOST:PORT (port 1-65535, "
                           "IPv6 as [ADDR]:PORT), items separated by commas",
                           (int)(n > 200 ? 200 : n), p, hostports);
        if (count >= max) return err_set(PL_EINVAL, "Redis seeds: more than %d in \"%s\"", max, hostports);
        memcpy(hosts[count], host, sizeof host);
        ports[count++] = port;
        if (!end) break;
        p = end + 1;
    }
    return count;
}

/* ---------------------------------------------------------------- nodes */

static int node_find_or_add(redis_cluster *rc, const char *host, size_t hl, int port)
{
    for (int i = 0; i < rc->n_nodes; i++)
        if (rc->nodes[i].port == port && strlen(rc->nodes[i].host) == hl && memcmp(rc->nodes[i].host, host, hl) == 0)
            return i;
    if (rc->n_nodes >= REDIS_CLUSTER_MAX_NODES || hl == 0 || hl >= sizeof rc->nodes[0].host) return -1;
    rc_node *nd = &rc->nodes[rc->n_nodes];
    memset(nd, 0, sizeof *nd);
    memcpy(nd->host, host, hl);
    nd->host[hl] = '\0';
    nd->port = port;
    char h[sizeof nd->host]; /* host may point into rc->nodes: format from a copy */
    memcpy(h, nd->host, hl + 1);
    snprintf(nd->name, sizeof nd->name, memchr(h, ':', hl) ? "[%s]:%d" : "%s:%d", h, port);
    return rc->n_nodes++;
}

/* Nodes that left the map (slots moved away, a master replaced) stay in
 * rc->nodes, so that an op in flight may still name them. Between batches,
 * once the table is half full, those that are neither seeds nor in the map
 * are dropped and the map renumbered: address churn over a long life (new
 * pod IPs) never fills the table. */
static void nodes_compact(redis_cluster *rc)
{
    if (rc->n_nodes < REDIS_CLUSTER_MAX_NODES / 2) return;
    uint8_t used[REDIS_CLUSTER_MAX_NODES] = {0};
    int16_t remap[REDIS_CLUSTER_MAX_NODES];
    for (int i = 0; i < rc->n_seeds; i++) used[i] = 1;
    for (int s = 0; s < REDIS_CLUSTER_SLOTS; s++)
        if (rc->slot_node[s] >= 0) used[rc->slot_node[s]] = 1;
    int k = 0;
    for (int i = 0; i < rc->n_nodes; i++) {
        if (!used[i]) {
            if (rc->nodes[i].c) redisFree(rc->nodes[i].c);
            resp_reader_free(&rc->nodes[i].rd);
            remap[i] = -1;
            continue;
        }
        if (k != i) rc->nodes[k] = rc->nodes[i];
        remap[i] = (int16_t)k++;
    }
    for (int s = 0; s < REDIS_CLUSTER_SLOTS; s++)
        if (rc->slot_node[s] >= 0) rc->slot_node[s] = remap[rc->slot_node[s]];
    rc->n_nodes = k;
}

/* Drops the node's connection and starts (or doubles) its backoff. */
static void node_failed(redis_cluster *rc, int i, const char *why)
{
    rc_node *nd = &rc->nodes[i];
    snprintf(rc->last_err, sizeof rc->last_err, "%s: %s", nd->name, why); /* why may live in nd->c */
    if (nd->c) redisFree(nd->c);
    nd->c = NULL;
    nd->backoff_ms = nd->backoff_ms ? nd->backoff_ms * 2 : rc->o.backoff_min_ms;
    if (nd->backoff_ms > rc->o.backoff_max_ms) nd->backoff_ms = rc->o.backoff_max_ms;
    nd->next_try_ms = now_ms() + nd->backoff_ms;
    rc->want_refresh = 1;
    COUNT(rc, errors, 1);
}

typedef enum { CONN_OK, CONN_BACKOFF, CONN_FAILED } rc_conn;

static rc_conn node_connect(redis_cluster *rc, int i)
{
    rc_node *nd = &rc->nodes[i];
    if (nd->c) return CONN_OK;
    if (now_ms() < nd->next_try_ms) return CONN_BACKOFF;
    redisContext *c = redisConnectWithTimeout(nd->host, nd->port, ms_tv(rc->o.connect_timeout_ms));
    if (!c || c->err || redisSetTimeout(c, ms_tv(rc->o.command_timeout_ms)) != REDIS_OK) {
        char why[160];
        snprintf(why, sizeof why, "connect: %s", c ? c->errstr : "out of memory");
        if (c) redisFree(c);
        COUNT(rc, connect_failures, 1);
        node_failed(rc, i, why);
        return CONN_FAILED;
    }
    if (rc->o.password) {
        redisReply *r = rc->o.user ? redisCommand(c, "AUTH %s %s", rc->o.user, rc->o.password)
                                   : redisCommand(c, "AUTH %s", rc->o.password);
        int ok = r && r->type == REDIS_REPLY_STATUS;
        char why[200];
        if (!ok)
            snprintf(why, sizeof why, "AUTH: %.160s",
                     !r ? c->errstr : r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        if (r) freeReplyObject(r);
        if (!ok) {
            redisFree(c);
            COUNT(rc, connect_failures, 1);
            node_failed(rc, i, why);
            return CONN_FAILED;
        }
    }
    if (resp_reader_init(&nd->rd)) {
        redisFree(c);
        node_failed(rc, i, "out of memory");
        return CONN_FAILED;
    }
    resp_reader_reset(&nd->rd, c->fd);
    nd->c = c;
    COUNT(rc, connects, 1);
    if (nd->backoff_ms) COUNT(rc, reconnects, 1);
    return CONN_OK;
}

/* A reply was read: the node is healthy again. */
static void node_ok(rc_node *nd)
{
    nd->backoff_ms = 0;
    nd->next_try_ms = 0;
}

/* ------------------------------------------------------------- slot map */

static int reply_is_int(const redisReply *r) { return r && r->type == REDIS_REPLY_INTEGER; }

/* Fills map from a CLUSTER SLOTS reply got from node `from`. Returns the
 * number of slots covered, or -1 when the reply is malformed. */
static int parse_slots(redis_cluster *rc, const redisReply *r, int from, int16_t *map)
{
    if (!r || r->type != REDIS_REPLY_ARRAY) return -1;
    int covered = 0;
    for (size_t e = 0; e < r->elements; e++) {
        const redisReply *it = r->element[e];
        if (!it || it->type != REDIS_REPLY_ARRAY || it->elements < 3) return -1;
        const redisReply *lo = it->element[0], *hi = it->element[1], *m = it->element[2];
        if (!reply_is_int(lo) || !reply_is_int(hi) || lo->integer < 0 || hi->integer < lo->integer ||
            hi->integer >= REDIS_CLUSTER_SLOTS)
            return -1;
        if (!m || m->type != REDIS_REPLY_ARRAY || m->elements < 2 || !reply_is_int(m->element[1]) ||
            m->element[1]->integer < 1 || m->element[1]->integer > 65535)
            return -1;
        const redisReply *h = m->element[0];
        const char *host;
        size_t hl;
        if (h && h->type == REDIS_REPLY_STRING && h->len > 0) {
            if (h->len == 1 && h->str[0] == '?') continue; /* endpoint unknown to the cluster */
            host = h->str;
            hl = h->len;
        } else if (!h || h->type == REDIS_REPLY_NIL || h->type == REDIS_REPLY_STRING) {
            host = rc->nodes[from].host; /* "the host this reply came from" */
            hl = strlen(host);
        } else {
            return -1;
        }
        int node = node_find_or_add(rc, host, hl, (int)m->element[1]->integer);
        if (node < 0) return -1;
        for (long long s = lo->integer; s <= hi->integer; s++) {
            if (map[s] < 0) covered++;
            map[s] = (int16_t)node;
        }
    }
    return covered;
}

/* Reloads the map from the first node that answers: `prefer` first (the
 * target of a MOVED knows its new slot before gossip reaches the others;
 * -1 for none), then open connections, then up to max_new connection
 * attempts. */
static int refresh_slots(redis_cluster *rc, int max_new, int prefer)
{
    rc->want_refresh = 0;
    int16_t *map = malloc(sizeof rc->slot_node);
    if (!map) return err_set(PL_ENOMEM, "Redis Cluster: slot map");
    int rc_status = PL_EIO;
    for (int pass = 0; pass < 3 && rc_status; pass++) {
        for (int i = 0; i < rc->n_nodes && rc_status; i++) {
            rc_node *nd = &rc->nodes[i];
            if ((pass == 0) != (i == prefer)) continue;
            if (pass == 1 && !nd->c) continue; /* pass 1: the open connections */
            if (nd->c && resp_reader_pending(&nd->rd)) {
                /* bytes no command asked for: the stream is out of step */
                node_failed(rc, i, "unexpected bytes after a batch's replies");
                continue;
            }
            if (pass == 2 && nd->c) continue;  /* pass 2: new ones (tried in pass 1) */
            if (pass != 1 && !nd->c) {
                if (max_new <= 0) continue;
                if (now_ms() < nd->next_try_ms) continue;
                max_new--;
                if (node_connect(rc, i) != CONN_OK) continue;
            }
            redisReply *r = redisCommand(nd->c, "CLUSTER SLOTS");
            if (!r) {
                node_failed(rc, i, nd->c->errstr[0] ? nd->c->errstr : "CLUSTER SLOTS: no reply");
                continue;
            }
            node_ok(nd);
            for (int s = 0; s < REDIS_CLUSTER_SLOTS; s++) map[s] = -1;
            int covered = parse_slots(rc, r, i, map);
            if (covered > 0) {
                memcpy(rc->slot_node, map, sizeof rc->slot_node);
                COUNT(rc, slot_refreshes, 1);
                rc_status = 0;
            } else {
                COUNT(rc, errors, 1);
                if (r->type == REDIS_REPLY_ERROR)
                    snprintf(rc->last_err, sizeof rc->last_err, "%s: CLUSTER SLOTS: %.*s", nd->name,
                             (int)(r->len > 160 ? 160 : r->len), r->str);
                else
                    snprintf(rc->last_err, sizeof rc->last_err, "%s: CLUSTER SLOTS: %s", nd->name,
                             covered == 0 ? "no slot is assigned" : "malformed reply");
            }
            freeReplyObject(r);
        }
    }
    free(map);
    return rc_status;
}

/* ----------------------------------------------------------------- open */

redis_cluster *redis_cluster_open(const char *hostports, const redis_cluster_opts *opts)
{
    char(*hosts)[256] = malloc(REDIS_CLUSTER_MAX_NODES * sizeof *hosts);
    int ports[REDIS_CLUSTER_MAX_NODES];
    if (!hosts) {
        err_set(PL_ENOMEM, "Redis Cluster: seeds");
        return NULL;
    }
    int n = redis_cluster_parse_seeds(hostports, hosts, ports, REDIS_CLUSTER_MAX_NODES);
    if (n < 0) {
        free(hosts);
        return NULL;
    }
    redis_cluster *rc = calloc(1, sizeof *rc);
    if (!rc) {
        free(hosts);
        err_set(PL_ENOMEM, "Redis Cluster: client");
        return NULL;
    }
    rc->o = opts ? *opts : redis_cluster_default_opts();
    if ((rc->o.user && strlen(rc->o.user) >= sizeof rc->user) ||
        (rc->o.password && strlen(rc->o.password) >= sizeof rc->password)) {
        free(rc);
        free(hosts);
        err_set(PL_EINVAL, "Redis Cluster: user or password longer than %zu bytes", sizeof rc->user - 1);
        return NULL;
    }
    if (rc->o.user) rc->o.user = strcpy(rc->user, rc->o.user);
    if (rc->o.password) rc->o.password = strcpy(rc->password, rc->o.password);
    if (rc->o.connect_timeout_ms < 1) rc->o.connect_timeout_ms = 1;
    if (rc->o.command_timeout_ms < 1) rc->o.command_timeout_ms = 1;
    if (rc->o.backoff_min_ms < 1) rc->o.backoff_min_ms = 1;
    if (rc->o.backoff_max_ms > 3600 * 1000) rc->o.backoff_max_ms = 3600 * 1000; /* doubling stays in an int */
    if (rc->o.backoff_max_ms < rc->o.backoff_min_ms) rc->o.backoff_max_ms = rc->o.backoff_min_ms;
    for (int s = 0; s < REDIS_CLUSTER_SLOTS; s++) rc->slot_node[s] = -1;
    for (int i = 0; i < n; i++) node_find_or_add(rc, hosts[i], strlen(hosts[i]), ports[i]);
    rc->n_seeds = rc->n_nodes;
    free(hosts);
    if (refresh_slots(rc, rc->n_seeds, -1)) {
        err_set(PL_EIO, "Redis Cluster %s: no seed gave a slot map (last: %s)", hostports,
                rc->last_err[0] ? rc->last_err : "no answer");
        redis_cluster_close(rc);
        return NULL;
    }
    return rc;
}

void redis_cluster_close(redis_cluster *rc)
{
    if (!rc) return;
    for (int i = 0; i < rc->n_nodes; i++)
        if (rc->nodes[i].c) redisFree(rc->nodes[i].c);
    for (int i = 0; i < rc->n_nodes; i++) resp_reader_free(&rc->nodes[i].rd);
    free(rc);
}

/* --------------------------------------------------------------- batches */

static void op_settle_miss(redis_cluster *rc, rc_batch *b, size_t i, int is_error)
{
    b->ops[i].node = -1;
    if (b->kind == OP_GET) COUNT(rc, misses, 1);
    else COUNT(rc, sets_dropped, 1);
    if (is_error) {
        COUNT(rc, errors, 1);
        b->status = PL_EIO;
    }
}

/* "MOVED 3999 127.0.0.1:6381" / "ASK ..." (an empty host: the node that
 * answered). Re-aims op i; returns 0, or -1 when the text does not parse. */
static int op_redirect(redis_cluster *rc, rc_batch *b, size_t i, int from, const char *txt, size_t len, int ask)
{
    size_t skip = ask ? 4 : 6;
    if (len <= skip) return -1;
    char buf[320];
    size_t n = len - skip < sizeof buf - 1 ? len - skip : sizeof buf - 1;
    memcpy(buf, txt + skip, n);
    buf[n] = '\0';
    char *sp = strchr(buf, ' ');
    if (!sp) return -1;
    *sp = '\0';
    char *endp;
    errno = 0;
    long slot = strtol(buf, &endp, 10);
    if (errno || *endp || endp == buf || slot < 0 || slot >= REDIS_CLUSTER_SLOTS) return -1;
    char *addr = sp + 1, *colon = strrchr(addr, ':');
    int port;
    if (!colon || parse_port(colon + 1, strlen(colon + 1), &port)) return -1;
    const char *host = addr;
    size_t hl = (size_t)(colon - addr);
    if (hl == 0) {
        host = rc->nodes[from].host;
        hl = strlen(host);
    }
    int node = node_find_or_add(rc, host, hl, port);
    if (node < 0) return -1;
    if (!ask) {
        rc->slot_node[slot] = (int16_t)node;
        b->moved = node;
    }
    b->ops[i].node = node;
    b->ops[i].asking = (uint8_t)ask;
    COUNT(rc, redirects, 1);
    return 0;
}

/* An error reply txt (len bytes, no '-') to op i from node `from`: a
 * redirection re-aims the op, anything else settles it as an error miss. */
static void op_error(redis_cluster *rc, rc_batch *b, size_t i, int from, const char *txt, size_t len)
{
    int moved = len > 6 && memcmp(txt, "MOVED ", 6) == 0;
    int ask = len > 4 && memcmp(txt, "ASK ", 4) == 0;
    if ((moved || ask) && op_redirect(rc, b, i, from, txt, len, ask) == 0) return;
    snprintf(rc->last_err, sizeof rc->last_err, "%s: %.*s", rc->nodes[from].name, (int)(len > 160 ? 160 : len),
             txt);
    op_settle_miss(rc, b, i, 1);
}

/* Reads the reply to ASKING; -1 when the connection is unusable. */
static int rd_asking(rc_node *nd)
{
    resp_reply r;
    if (resp_read(&nd->rd, &r)) return -1;
    if (r.kind == RESP_VALUE) free(r.value);
    return 0;
}

/* Reads the reply to GET op i from node `from` and settles (or re-aims)
 * the op; -1 when the connection is unusable (I/O, protocol error). */
static int rd_get(redis_cluster *rc, rc_batch *b, size_t i, int from)
{
    resp_reply r;
    if (resp_read(&rc->nodes[from].rd, &r)) return -1;
    switch (r.kind) {
    case RESP_VALUE:
        b->out[i] = r.value;
        b->out_lens[i] = r.len;
        b->ops[i].node = -1;
        COUNT(rc, hits, 1);
        COUNT(rc, bytes_read, r.len);
        return 0;
    case RESP_NIL: op_settle_miss(rc, b, i, 0); return 0;
    case RESP_ERROR: op_error(rc, b, i, from, r.text, r.len); return 0;
    default: op_settle_miss(rc, b, i, 1); return 0; /* a status, an integer, an array */
    }
}

/* Reads the reply to SET op i from node `from` and settles (or re-aims)
 * the op; -1 when the connection is unusable. */
static int rd_set(redis_cluster *rc, rc_batch *b, size_t i, int from)
{
    resp_reply r;
    if (resp_read(&rc->nodes[from].rd, &r)) return -1;
    if (r.kind == RESP_STATUS && r.len == 2 && memcmp(r.text, "OK", 2) == 0) {
        b->ops[i].node = -1;
        COUNT(rc, sets_ok, 1);
        COUNT(rc, bytes_written, b->in_lens[i]);
    } else if (r.kind == RESP_ERROR) {
        op_error(rc, b, i, from, r.text, r.len);
    } else {
        if (r.kind == RESP_VALUE) free(r.value);
        op_settle_miss(rc, b, i, 1);
    }
    return 0;
}

/* Appends [ASKING +] GET of op i to hiredis's output buffer. */
static int append_get(redisContext *c, const rc_batch *b, size_t i)
{
    if (b->ops[i].asking && redisAppendCommand(c, "ASKING") != REDIS_OK) return -1;
    const char *argv[2] = {"GET", b->keys[i]};
    size_t lens[2] = {3, b->klens[i]};
    return redisAppendCommandArgv(c, 2, argv, lens) == REDIS_OK ? 0 : -1;
}

/* Writes all of iov[0 .. cnt) (modified) to fd; -1 with errno on failure
 * (EAGAIN: the command timeout, set on the socket by hiredis). */
static int write_iov(int fd, struct iovec *iov, int cnt)
{
    while (cnt > 0) {
        ssize_t w = writev(fd, iov, cnt < IOV_MAX ? cnt : IOV_MAX);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        while (cnt > 0 && (size_t)w >= iov->iov_len) w -= (ssize_t)iov->iov_len, iov++, cnt--;
        if (cnt > 0) iov->iov_base = (char *)iov->iov_base + w, iov->iov_len -= (size_t)w;
    }
    return 0;
}

/* Sends the SET ops idx[0 .. m) (m <= RC_CHUNK_OPS) as one writev'd
 * pipeline; 0, or -1 with why filled. */
static int send_sets(redis_cluster *rc, const rc_batch *b, redisContext *c, const size_t *idx, size_t m, char *why,
                     size_t why_size)
{
    static char asking[] = "*1\r\n$6\r\nASKING\r\n";
    rc_set_scratch *sc = &rc->set;
    size_t tl = strlen(b->ttl);
    int n = 0;
    for (size_t j = 0; j < m; j++) {
        size_t i = idx[j];
        char(*t)[RC_HEAD_MAX] = sc->text[j];
        if (b->ops[i].asking) sc->iov[n++] = (struct iovec){asking, sizeof asking - 1};
        int l0 = snprintf(t[0], RC_HEAD_MAX, "*%d\r\n$3\r\nSET\r\n$%zu\r\n", tl ? 5 : 3, b->klens[i]);
        int l1 = snprintf(t[1], RC_HEAD_MAX, "\r\n$%zu\r\n", b->in_lens[i]);
        int l2 = tl ? snprintf(t[2], RC_HEAD_MAX, "\r\n$2\r\nPX\r\n$%zu\r\n%s\r\n", tl, b->ttl)
                    : snprintf(t[2], RC_HEAD_MAX, "\r\n");
        sc->iov[n++] = (struct iovec){t[0], (size_t)l0};
        sc->iov[n++] = (struct iovec){(void *)b->keys[i], b->klens[i]};
        sc->iov[n++] = (struct iovec){t[1], (size_t)l1};
        sc->iov[n++] = (struct iovec){(void *)b->in[i], b->in_lens[i]};
        sc->iov[n++] = (struct iovec){t[2], (size_t)l2};
    }
    if (write_iov(c->fd, sc->iov, n) == 0) return 0;
    snprintf(why, why_size, "write: %s", errno == EAGAIN ? "timeout" : strerror(errno));
    return -1;
}

/* Marks the node of lane l failed (why) and settles its unsettled ops. */
static void lane_fail(redis_cluster *rc, rc_batch *b, rc_lane *l, const char *why)
{
    char text[160];
    rc_node *nd = &rc->nodes[l->node];
    snprintf(text, sizeof text, "%s", why ? why : nd->c && nd->c->errstr[0] ? nd->c->errstr : "pipeline failed");
    node_failed(rc, l->node, text);
    for (size_t j = l->a; j < l->m; j++)
        if (b->ops[l->idx[j]].node == l->node) op_settle_miss(rc, b, l->idx[j], 0);
    b->status = PL_EIO;
    l->a = l->e = l->m;
}

/* Connects lane l's node, or settles its ops as misses; 1 if connected. */
static int lane_open(redis_cluster *rc, rc_batch *b, rc_lane *l)
{
    rc_conn st = node_connect(rc, l->node);
    if (st == CONN_OK) return 1;
    for (size_t j = 0; j < l->m; j++) op_settle_miss(rc, b, l->idx[j], 0);
    if (st == CONN_BACKOFF) {
        COUNT(rc, skipped_down, l->m);
        int64_t now = now_ms();
        if (now >= rc->next_down_refresh_ms) {
            rc->want_refresh = 1;
            rc->next_down_refresh_ms = now + RC_REFRESH_WHILE_DOWN_MS;
        }
    }
    b->status = PL_EIO;
    l->a = l->e = l->m;
    return 0;
}

/* Sends lane l's next chunk [a, e) without waiting for replies. */
static void lane_send(redis_cluster *rc, rc_batch *b, rc_lane *l)
{
    redisContext *c = rc->nodes[l->node].c;
    size_t e = l->a, bytes = 0;
    char why[160];
    if (b->kind == OP_SET) {
        while (e < l->m && e - l->a < RC_CHUNK_OPS && bytes < RC_CHUNK_BYTES) bytes += b->in_lens[l->idx[e++]];
        l->e = e;
        if (send_sets(rc, b, c, l->idx + l->a, e - l->a, why, sizeof why)) lane_fail(rc, b, l, why);
        return;
    }
    while (e < l->m && e - l->a < RC_CHUNK_OPS) {
        if (append_get(c, b, l->idx[e])) {
            lane_fail(rc, b, l, "out of memory");
            return;
        }
        e++;
    }
    l->e = e;
    int done = 0;
    while (!done)
        if (redisBufferWrite(c, &done) != REDIS_OK) {
            lane_fail(rc, b, l, NULL);
            return;
        }
}

/* Reads and settles the replies of lane l's chunk [a, e). */
static void lane_recv(redis_cluster *rc, rc_batch *b, rc_lane *l)
{
    rc_node *nd = &rc->nodes[l->node];
    for (size_t j = l->a; j < l->e; j++) {
        size_t i = l->idx[j];
        int asking = b->ops[i].asking;
        b->ops[i].asking = 0; /* an ASK in this reply sets it again */
        if ((asking && rd_asking(nd)) ||
            (b->kind == OP_GET ? rd_get(rc, b, i, l->node) : rd_set(rc, b, i, l->node))) {
            lane_fail(rc, b, l, nd->rd.err[0] ? nd->rd.err : NULL);
            return;
        }
        node_ok(nd);
    }
    l->a = l->e;
}

/* One round: every lane's ops in chunks, in waves: each wave sends one
 * chunk to every node, then reads their replies, so that the nodes work
 * in parallel. */
static void run_lanes(redis_cluster *rc, rc_batch *b, rc_lane *lanes, int n)
{
    int live = 0;
    for (int k = 0; k < n; k++) live += lane_open(rc, b, &lanes[k]);
    while (live) {
        for (int k = 0; k < n; k++)
            if (lanes[k].a < lanes[k].m) lane_send(rc, b, &lanes[k]);
        live = 0;
        for (int k = 0; k < n; k++) {
            if (lanes[k].a < lanes[k].e) lane_recv(rc, b, &lanes[k]);
            live += lanes[k].a < lanes[k].m;
        }
    }
}

/* Writing to a node that closed its end raises SIGPIPE, which kills a
 * process that does not ignore it. A batch blocks it in the calling thread
 * and discards one raised meanwhile, so that any program may use the
 * client. (A SIGPIPE already pending before the batch is left alone.) */
typedef struct {
    sigset_t old;
    int was_pending;
} rc_sigpipe;

static void sigpipe_hold(rc_sigpipe *s)
{
    sigset_t set, pending;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    sigpending(&pending);
    s->was_pending = sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &s->old);
}

static void sigpipe_release(const rc_sigpipe *s)
{
    sigset_t set, pending;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    sigpending(&pending);
    if (!s->was_pending && sigismember(&pending, SIGPIPE)) {
        struct timespec zero = {0, 0};
        sigtimedwait(&set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &s->old, NULL);
}

static int run_batch_held(redis_cluster *rc, rc_batch *b);

static int run_batch(redis_cluster *rc, rc_batch *b)
{
    if (b->n == 0) return 0;
    rc_sigpipe sp;
    sigpipe_hold(&sp);
    int st = run_batch_held(rc, b);
    sigpipe_release(&sp);
    return st;
}

static int run_batch_held(redis_cluster *rc, rc_batch *b)
{
    b->ops = malloc(b->n * sizeof *b->ops);
    size_t *order = malloc(b->n * sizeof *order);
    size_t *start = malloc((REDIS_CLUSTER_MAX_NODES + 1) * sizeof *start);
    if (!b->ops || !order || !start) {
        free(b->ops);
        free(order);
        free(start);
        for (size_t i = 0; i < b->n; i++) {
            if (b->kind == OP_GET) COUNT(rc, misses, 1);
            else COUNT(rc, sets_dropped, 1);
        }
        COUNT(rc, errors, 1);
        return err_set(PL_ENOMEM, "Redis Cluster: batch of %zu keys", b->n);
    }
    for (size_t i = 0; i < b->n; i++) {
        b->ops[i].node = rc->slot_node[redis_cluster_key_slot(b->keys[i], b->klens[i])];
        b->ops[i].asking = 0;
        if (b->ops[i].node < 0) op_settle_miss(rc, b, i, 1); /* slot served by nobody */
    }
    for (int round = 0; round < REDIS_CLUSTER_MAX_ROUNDS; round++) {
        /* counting sort of the pending ops by node */
        size_t pending = 0;
        memset(start, 0, (REDIS_CLUSTER_MAX_NODES + 1) * sizeof *start);
        for (size_t i = 0; i < b->n; i++)
            if (b->ops[i].node >= 0) start[b->ops[i].node + 1]++, pending++;
        if (!pending) break;
        for (int k = 0; k < REDIS_CLUSTER_MAX_NODES; k++) start[k + 1] += start[k];
        for (size_t i = 0; i < b->n; i++)
            if (b->ops[i].node >= 0) order[start[b->ops[i].node]++] = i;
        /* start[k] now ends node k's run; node k's run begins at start[k-1] */
        b->moved = -1;
        size_t from = 0;
        int n_nodes = rc->n_nodes, n_lanes = 0; /* redirections may add nodes: next round */
        for (int k = 0; k < n_nodes; k++) {
            if (start[k] > from)
                rc->lanes[n_lanes++] = (rc_lane){.node = k, .idx = order + from, .m = start[k] - from};
            from = start[k];
        }
        run_lanes(rc, b, rc->lanes, n_lanes);
        if (b->moved >= 0 || rc->want_refresh) refresh_slots(rc, RC_REFRESH_NEW_CONNECTS, b->moved);
    }
    for (size_t i = 0; i < b->n; i++)
        if (b->ops[i].node >= 0) op_settle_miss(rc, b, i, 1); /* redirected too often */
    nodes_compact(rc); /* no op names a node any more */
    free(b->ops);
    free(order);
    free(start);
    if (b->status) err_set(b->status, "Redis Cluster: %s", rc->last_err);
    return b->status;
}

int redis_cluster_get_many(redis_cluster *rc, const char *const *keys, const size_t *klens, size_t n,
                           uint8_t **vals, size_t *lens)
{
    for (size_t i = 0; i < n; i++) vals[i] = NULL, lens[i] = 0;
    rc_batch b = {.kind = OP_GET, .keys = keys, .klens = klens, .n = n, .out = vals, .out_lens = lens};
    return run_batch(rc, &b);
}

int redis_cluster_set_many(redis_cluster *rc, const char *const *keys, const size_t *klens, size_t n,
                           const uint8_t *const *vals, const size_t *lens, int64_t ttl_ms)
{
    rc_batch b = {.kind = OP_SET, .keys = keys, .klens = klens, .n = n, .in = vals, .in_lens = lens};
    if (ttl_ms > 0) snprintf(b.ttl, sizeof b.ttl, "%" PRId64, ttl_ms);
    return run_batch(rc, &b);
}

/* ----------------------------------------------------------- inspection */

void redis_cluster_stats_get(const redis_cluster *rc, redis_cluster_stats *out)
{
    redis_cluster *m = (redis_cluster *)rc; /* atomic loads need a non-const object */
#define LOAD(f) out->f = atomic_load_explicit(&m->k.f, memory_order_relaxed)
    LOAD(hits);
    LOAD(misses);
    LOAD(sets_ok);
    LOAD(sets_dropped);
    LOAD(errors);
    LOAD(redirects);
    LOAD(connects);
    LOAD(reconnects);
    LOAD(connect_failures);
    LOAD(skipped_down);
    LOAD(slot_refreshes);
    LOAD(bytes_read);
    LOAD(bytes_written);
#undef LOAD
}

const char *redis_cluster_slot_owner(const redis_cluster *rc, unsigned slot)
{
    if (slot >= REDIS_CLUSTER_SLOTS || rc->slot_node[slot] < 0) return NULL;
    return rc->nodes[rc->slot_node[slot]].name;
}

unsigned redis_cluster_node_count(const redis_cluster *rc) { return (unsigned)rc->n_nodes; }

unsigned redis_cluster_slots_covered(const redis_cluster *rc)
{
    unsigned n = 0;
    for (int s = 0; s < REDIS_CLUSTER_SLOTS; s++) n += rc->slot_node[s] >= 0;
    return n;
}
