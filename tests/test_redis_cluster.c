/* test_redis_cluster.c - the Redis Cluster client (src/store/redis_cluster.c),
 * its reply reader (resp_reader.c) and the redis store_backend over it
 * (store_redis.c).
 *
 * Without PL_REDIS_PORTS (as tests/run.sh runs every binary): the parts
 * that need no Redis: key slots against values from `redis-cli cluster
 * keyslot`, seed parsing, key encoding, the reader over a socketpair, an
 * unreachable seed, and a fake node (a thread speaking RESP on loopback)
 * that answers with every kind of bad reply, garbage, endless redirections,
 * a password check and silence.
 *
 * With PL_REDIS_PORTS=P1,P2,P3, PL_REDIS_DIR and PL_REDIS_CTL (set by
 * tests/cli/test_redis_cluster.sh, which starts a 3-master cluster with
 * tests/redis/cluster.sh): batches against the real cluster, TTL, a slot
 * migrated mid-test (ASK then MOVED), a wrong-type value, a master hung
 * (SIGSTOP), a master killed and restarted, and requirepass.
 * PL_REDIS_HA_PORTS instead of PL_REDIS_PORTS: a cluster of 3 masters + 3
 * replicas, where a master dies and its replica takes over.
 * PL_REDIS_BENCH=MB: throughput figures (INFO) only.
 */
#include "test.h"
#include "rng.h"

#include "base/err.h"
#include "store/redis_cluster.h"
#include "store/resp_reader.h"
#include "store/store_redis.h"

#include <hiredis/hiredis.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ================================================================ offline */

TEST(key_slot_matches_redis)
{
    /* expected values: `redis-cli cluster keyslot KEY` */
    CHECK_EQ_INT(redis_cluster_key_slot("123456789", 9), 12739); /* CRC16 0x31C3 */
    CHECK_EQ_INT(redis_cluster_key_slot("foo", 3), 12182);
    CHECK_EQ_INT(redis_cluster_key_slot("bar", 3), 5061);
    CHECK_EQ_INT(redis_cluster_key_slot("{user1000}.following", 20), 3443);
    CHECK_EQ_INT(redis_cluster_key_slot("foo{}{bar}", 10), 8363); /* empty tag: the whole key */
    CHECK_EQ_INT(redis_cluster_key_slot("foo{{bar}}zap", 13), 4015); /* tag "{bar" */
    CHECK_EQ_INT(redis_cluster_key_slot("foo{bar}{zap}", 13), 5061); /* first tag only */
}

TEST(seed_strings_parse)
{
    char hosts[4][256];
    int ports[4];
    CHECK_EQ_INT(redis_cluster_parse_seeds("127.0.0.1:7000", hosts, ports, 4), 1);
    CHECK_STR(hosts[0], "127.0.0.1");
    CHECK_EQ_INT(ports[0], 7000);
    CHECK_EQ_INT(redis_cluster_parse_seeds("redis-a.local:1,b:65535,[::1]:7002", hosts, ports, 4), 3);
    CHECK_STR(hosts[0], "redis-a.local");
    CHECK_EQ_INT(ports[1], 65535);
    CHECK_STR(hosts[2], "::1");
    CHECK_EQ_INT(ports[2], 7002);
}

TEST(bad_seed_strings_refused)
{
    static const char *bad[] = {"", "host", "host:", ":7000", "host:0", "host:65536", "host:12x", "host:-1",
                                "a:1,,b:2", "a:1,", ",a:1", "a b:1", "::1:7000", "[::1]7000", "[::1]:",
                                "[]:7000", "host:7000 ", "host:123456"};
    char hosts[4][256];
    int ports[4];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err_clear();
        int rc = redis_cluster_parse_seeds(bad[i], hosts, ports, 4);
        CHECK_MSG(rc == PL_EINVAL, "\"%s\" accepted (%d)", bad[i], rc);
        CHECK_MSG(strstr(err_msg(), "HOST:PORT"), "\"%s\": unclear message: %s", bad[i], err_msg());
    }
    CHECK_EQ_INT(redis_cluster_parse_seeds("a:1,b:2,c:3", hosts, ports, 2), PL_EINVAL);
    char err[512] = "";
    CHECK(store_redis_open("localhost:70000", 60, err, sizeof err) == NULL);
    CHECK_MSG(strstr(err, "bad item \"localhost:70000\""), "message: %s", err);
    CHECK(store_redis_open("127.0.0.1:6379", -1, err, sizeof err) == NULL);
    CHECK_MSG(strstr(err, "negative"), "message: %s", err);
}

TEST(store_key_encoding)
{
    store_key k = {{0x0123456789abcdefull, 0xfedcba9876543210ull}};
    char s[STORE_REDIS_KEY_LEN + 1];
    store_redis_key(&k, s);
    s[STORE_REDIS_KEY_LEN] = 0;
    CHECK_STR(s, "plkv:0123456789abcdeffedcba9876543210");
}

TEST(unreachable_seed_refused)
{
    /* port 1 on loopback: nothing listens, the connect is refused at once */
    char err[512] = "";
    double t0 = now_s();
    store_backend *b = store_redis_open("127.0.0.1:1", 60, err, sizeof err);
    CHECK(b == NULL);
    CHECK_MSG(now_s() - t0 < 1.0, "took %.2f s", now_s() - t0);
    CHECK_MSG(strstr(err, "127.0.0.1:1") && strstr(err, "connect"), "message: %s", err);
}

/* resp_reader over one end of a socketpair; the test writes the other end
 * (a writer thread for streams larger than the socket buffer). */
typedef struct {
    int fd;
    const char *data;
    size_t len;
} feed_job;

static void *feed_main(void *arg)
{
    feed_job *j = arg;
    size_t off = 0;
    while (off < j->len) { /* small writes: replies arrive split anywhere */
        size_t k = j->len - off < 7001 ? j->len - off : 7001;
        ssize_t w = send(j->fd, j->data + off, k, MSG_NOSIGNAL);
        if (w <= 0) break;
        off += (size_t)w;
    }
    shutdown(j->fd, SHUT_WR);
    return NULL;
}

/* Reads replies from `stream` until one fails; fills kinds (max n) and
 * returns how many were read. *last_err gets the failure text. */
static int feed_read(const char *stream, size_t len, resp_reply *out, int n, char *last_err, size_t errlen)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return -1;
    struct timeval tv = {2, 0};
    setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    feed_job job = {sv[1], stream, len};
    pthread_t th;
    pthread_create(&th, NULL, feed_main, &job);
    resp_reader r = {0};
    resp_reader_init(&r);
    resp_reader_reset(&r, sv[0]);
    int k = 0;
    while (k < n && resp_read(&r, &out[k]) == 0) {
        if (out[k].kind != RESP_VALUE) out[k].text = NULL; /* points into r's buffer */
        k++;
    }
    snprintf(last_err, errlen, "%s", r.err);
    pthread_join(th, NULL);
    resp_reader_free(&r);
    close(sv[0]);
    close(sv[1]);
    return k;
}

TEST(resp_reader_replies_and_garbage)
{
    /* every kind, a value split across writes and past the 64 KiB buffer,
     * an empty value, nested arrays holding values */
    size_t big = 200000;
    char *stream = malloc(big + 512);
    CHECK(stream);
    size_t n = (size_t)sprintf(stream, "+OK\r\n-MOVED 1 h:1\r\n:42\r\n$-1\r\n*-1\r\n$0\r\n\r\n"
                                       "*2\r\n*1\r\n$3\r\nabc\r\n:7\r\n$%zu\r\n", big);
    for (size_t i = 0; i < big; i++) stream[n + i] = (char)(i * 131 + (i >> 9));
    n += big;
    memcpy(stream + n, "\r\n$3\r\na\0b\r\n", 11);
    n += 11;
    resp_reply out[16];
    char err[128];
    int k = feed_read(stream, n, out, 16, err, sizeof err);
    int ok_big = k > 7 && out[7].kind == RESP_VALUE && out[7].len == big;
    for (size_t i = 0; ok_big && i < big; i++) ok_big = out[7].value[i] == (uint8_t)(char)(i * 131 + (i >> 9));
    int ok_nul = k > 8 && out[8].kind == RESP_VALUE && out[8].len == 3 && !memcmp(out[8].value, "a\0b", 3);
    int kinds_ok = k == 9 && out[0].kind == RESP_STATUS && out[1].kind == RESP_ERROR && out[2].kind == RESP_INT &&
                   out[3].kind == RESP_NIL && out[4].kind == RESP_NIL && out[5].kind == RESP_VALUE &&
                   out[5].len == 0 && out[6].kind == RESP_ARRAY;
    for (int i = 0; i < k; i++)
        if (out[i].kind == RESP_VALUE) free(out[i].value);
    free(stream);
    CHECK_MSG(kinds_ok, "read %d replies (%s)", k, err);
    CHECK(ok_big);
    CHECK(ok_nul);
    CHECK_STR(err, "connection closed"); /* the 10th read meets the end */

    /* each of these breaks the stream after the good reply before it */
    static const struct {
        const char *s, *why;
    } bad[] = {
        {"+OK\r\n!x\r\n", "reply type"},
        {"+OK\r\n$5\r\nabc\r\n", "connection closed"},     /* value cut short */
        {"+OK\r\n$3\r\nabcXY", "not followed by CR LF"},
        {"+OK\r\n$99999999999\r\n", "value length"},         /* over 1 GiB */
        {"+OK\r\n$-2\r\n", "value length"},
        {"+OK\r\n$12x\r\n", "bad length"},
        {"+OK\r\n+no cr\n", "CR LF"},
        {"+OK\r\n\r\n", "empty line"},
        {"+OK\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", "nested"},
    };
    for (size_t b = 0; b < sizeof bad / sizeof *bad; b++) {
        k = feed_read(bad[b].s, strlen(bad[b].s), out, 16, err, sizeof err);
        for (int i = 0; i < k; i++)
            if (out[i].kind == RESP_VALUE) free(out[i].value);
        CHECK_MSG(k == 1 && strstr(err, bad[b].why), "case %zu: %d replies, error \"%s\"", b, k, err);
    }
    /* a line that never ends */
    char *longline = malloc(5000);
    CHECK(longline);
    memset(longline, 'x', 5000);
    longline[0] = '+';
    k = feed_read(longline, 5000, out, 16, err, sizeof err);
    free(longline);
    CHECK_MSG(k == 0 && strstr(err, "over 1024"), "%d replies, error \"%s\"", k, err);
}

/* ---------------------------------------------------- the fake node
 * One thread, one connection at a time. CLUSTER SLOTS gets a map of every
 * slot to the fake node itself (or garbage, in FAKE_BAD_SLOTS); GET's reply
 * depends on the key's first byte (see fake_get); SET gets an integer. In
 * FAKE_SILENT it never answers GET. */

enum { FAKE_BAD_SLOTS, FAKE_BAD_REPLIES, FAKE_SILENT, FAKE_AUTH };

typedef struct {
    int mode, port, lfd;
    int authed; /* FAKE_AUTH: this connection sent AUTH pagellm s3cret */
    atomic_int stop;
    pthread_t th;
} fake_node;

static void send_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w <= 0) return;
        s += w, n -= (size_t)w;
    }
}

static void fake_get(int fd, const fake_node *f, const char *key, size_t klen)
{
    char buf[128];
    switch (klen ? key[0] : 0) {
    case 'h': send_all(fd, "$3\r\nabc\r\n", 9); return;        /* a hit */
    case 'n': send_all(fd, "$-1\r\n", 5); return;              /* nil */
    case 'i': send_all(fd, ":42\r\n", 5); return;              /* integer */
    case 'a': send_all(fd, "*2\r\n:1\r\n:2\r\n", 12); return;  /* array */
    case 's': send_all(fd, "+OK\r\n", 5); return;              /* status */
    case 'e': send_all(fd, "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n", 68); return;
    case 'm': send_all(fd, "-MOVED x y\r\n", 12); return;      /* unparsable redirect */
    case 'M': /* a redirect to itself, forever */
        snprintf(buf, sizeof buf, "-MOVED 1 127.0.0.1:%d\r\n", f->port);
        send_all(fd, buf, strlen(buf));
        return;
    case 'x': send_all(fd, "!not resp\r\n", 11); return;       /* protocol error */
    case 'R': { /* a redirect to a new address each time, where nothing listens */
        static int next;
        snprintf(buf, sizeof buf, "-MOVED 7 127.0.0.1:%d\r\n", 61000 + next++ % 400);
        send_all(fd, buf, strlen(buf));
        return;
    }
    default: send_all(fd, "$-1\r\n", 5); return;
    }
}

/* Parses one RESP array of bulk strings at buf[0..n); returns bytes used
 * (0: incomplete), the argc and up to 3 args. */
static size_t resp_parse(const char *buf, size_t n, int *argc, const char **args, size_t *lens)
{
    const char *p = buf, *end = buf + n;
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl || *p != '*') return 0;
    int c = atoi(p + 1);
    p = nl + 1;
    for (int i = 0; i < c; i++) {
        nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl || *p != '$') return 0;
        size_t l = (size_t)atol(p + 1);
        p = nl + 1;
        if ((size_t)(end - p) < l + 2) return 0;
        if (i < 3) args[i] = p, lens[i] = l;
        p += l + 2;
    }
    *argc = c;
    return (size_t)(p - buf);
}

static void fake_serve(fake_node *f, int fd)
{
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    while (buf && !atomic_load(&f->stop)) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, 20) <= 0) continue;
        if (n == cap) break;
        ssize_t r = recv(fd, buf + n, cap - n, 0);
        if (r <= 0) break;
        n += (size_t)r;
        int argc;
        const char *a[3];
        size_t l[3], used;
        while ((used = resp_parse(buf, n, &argc, a, l)) > 0) {
            char reply[256];
            if (argc >= 1 && l[0] == 4 && !strncasecmp(a[0], "AUTH", 4)) {
                f->authed = argc == 3 && l[1] == 7 && !memcmp(a[1], "pagellm", 7) && l[2] == 6 &&
                            !memcmp(a[2], "s3cret", 6);
                if (f->authed) send_all(fd, "+OK\r\n", 5);
                else send_all(fd, "-WRONGPASS invalid username-password pair\r\n", 43);
            } else if (f->mode == FAKE_AUTH && !f->authed) {
                send_all(fd, "-NOAUTH Authentication required.\r\n", 34);
            } else if (argc >= 2 && l[0] == 7 && !strncasecmp(a[0], "CLUSTER", 7)) {
                if (f->mode == FAKE_BAD_SLOTS) send_all(fd, "*2\r\n:5\r\n$3\r\nabc\r\n", 18);
                else {
                    snprintf(reply, sizeof reply, "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n",
                             f->port);
                    send_all(fd, reply, strlen(reply));
                }
            } else if (argc == 2 && l[0] == 3 && !strncasecmp(a[0], "GET", 3)) {
                if (f->mode != FAKE_SILENT) fake_get(fd, f, a[1], l[1]);
            } else if (argc >= 3 && l[0] == 3 && !strncasecmp(a[0], "SET", 3)) {
                send_all(fd, ":1\r\n", 4);
            } else {
                send_all(fd, "-ERR unknown command\r\n", 22);
            }
            memmove(buf, buf + used, n - used);
            n -= used;
        }
    }
    free(buf);
    close(fd);
}

static void *fake_main(void *arg)
{
    fake_node *f = arg;
    while (!atomic_load(&f->stop)) {
        struct pollfd pf = {.fd = f->lfd, .events = POLLIN};
        if (poll(&pf, 1, 20) <= 0) continue;
        int fd = accept(f->lfd, NULL, NULL);
        f->authed = 0;
        int one = 1; /* as Redis does: no Nagle wait between replies */
        if (fd >= 0 && setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0) fake_serve(f, fd);
        else if (fd >= 0) close(fd);
    }
    return NULL;
}

static int fake_start(fake_node *f, int mode)
{
    memset(f, 0, sizeof *f);
    f->mode = mode;
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (f->lfd < 0 || bind(f->lfd, (struct sockaddr *)&a, sizeof a) || listen(f->lfd, 8) ||
        getsockname(f->lfd, (struct sockaddr *)&a, &al))
        return -1;
    f->port = ntohs(a.sin_port);
    return pthread_create(&f->th, NULL, fake_main, f) ? -1 : 0;
}

static void fake_stop(fake_node *f)
{
    atomic_store(&f->stop, 1);
    pthread_join(f->th, NULL);
    close(f->lfd);
}

TEST(fake_garbage_slot_map_refused)
{
    fake_node f;
    CHECK(fake_start(&f, FAKE_BAD_SLOTS) == 0);
    char seeds[64];
    snprintf(seeds, sizeof seeds, "127.0.0.1:%d", f.port);
    redis_cluster *rc = redis_cluster_open(seeds, NULL);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", err_msg());
    fake_stop(&f);
    CHECK(rc == NULL);
    CHECK_MSG(strstr(msg, "malformed"), "message: %.300s", msg);
}

TEST(fake_bad_replies_are_misses)
{
    fake_node f;
    CHECK(fake_start(&f, FAKE_BAD_REPLIES) == 0);
    char seeds[64];
    snprintf(seeds, sizeof seeds, "127.0.0.1:%d", f.port);
    redis_cluster *rc = redis_cluster_open(seeds, NULL);
    if (!rc) {
        fake_stop(&f);
        CHECK_MSG(0, "open: %s", err_msg());
    }
    /* h: hit, n: nil, then every bad shape; one batch, one pipeline */
    const char *keys[] = {"h1", "n1", "i1", "a1", "s1", "e1", "m1", "M1", "h2"};
    size_t n = sizeof keys / sizeof *keys, klens[16];
    for (size_t i = 0; i < n; i++) klens[i] = strlen(keys[i]);
    uint8_t *vals[16];
    size_t lens[16];
    int st = redis_cluster_get_many(rc, keys, klens, n, vals, lens);
    redis_cluster_stats s;
    redis_cluster_stats_get(rc, &s);
    int ok = vals[0] && lens[0] == 3 && !memcmp(vals[0], "abc", 3) && vals[8] && lens[8] == 3;
    int misses = 1;
    for (size_t i = 1; i < 8; i++) misses &= vals[i] == NULL && lens[i] == 0;
    for (size_t i = 0; i < n; i++) free(vals[i]);
    /* SET answered with an integer: dropped */
    const uint8_t *v[1] = {(const uint8_t *)"val"};
    size_t vl[1] = {3};
    int st_set = redis_cluster_set_many(rc, keys, klens, 1, v, vl, 1000);
    redis_cluster_stats s2;
    redis_cluster_stats_get(rc, &s2);
    /* a protocol error kills the connection: misses, then the node is in backoff */
    const char *xk[] = {"x1", "h3"};
    size_t xl[] = {2, 2};
    int st_x = redis_cluster_get_many(rc, xk, xl, 2, vals, lens);
    int x_miss = !vals[0] && !vals[1];
    free(vals[0]), free(vals[1]);
    redis_cluster_stats s3;
    redis_cluster_stats_get(rc, &s3);
    int st_after = redis_cluster_get_many(rc, xk + 1, xl + 1, 1, vals, lens); /* within the backoff: skipped */
    free(vals[0]);
    redis_cluster_stats s4;
    redis_cluster_stats_get(rc, &s4);
    redis_cluster_close(rc);
    fake_stop(&f);
    CHECK_EQ_INT(st, PL_EIO);
    CHECK(ok);
    CHECK(misses);
    CHECK_EQ_INT(s.hits, 2);
    CHECK_EQ_INT(s.misses, 7);
    CHECK_MSG(s.errors >= 6, "errors %llu", (unsigned long long)s.errors); /* i a s e m M (n is no error) */
    CHECK_MSG(s.redirects >= 3, "redirects %llu", (unsigned long long)s.redirects); /* M, round after round */
    CHECK_EQ_INT(st_set, PL_EIO);
    CHECK_EQ_INT(s2.sets_dropped, 1);
    CHECK_EQ_INT(st_x, PL_EIO);
    CHECK(x_miss);
    CHECK_EQ_INT(st_after, PL_EIO);
    CHECK_EQ_INT(s4.skipped_down - s3.skipped_down, 1);
    CHECK_EQ_INT(s4.connect_failures, s3.connect_failures);
}

/* 300 MOVED to 300 addresses: the client follows each one, keeps serving,
 * and forgets the nodes that left the map (the table never fills). */
TEST(fake_address_churn_stays_bounded)
{
    fake_node f;
    CHECK(fake_start(&f, FAKE_BAD_REPLIES) == 0);
    char seeds[64];
    snprintf(seeds, sizeof seeds, "127.0.0.1:%d", f.port);
    redis_cluster *rc = redis_cluster_open(seeds, NULL);
    if (!rc) {
        fake_stop(&f);
        CHECK_MSG(0, "open: %s", err_msg());
    }
    const char *keys[] = {"R", "h1"};
    size_t kl[] = {1, 2}, lens[2];
    uint8_t *vals[2];
    int hits = 0;
    unsigned most = 0;
    for (int i = 0; i < 300; i++) {
        redis_cluster_get_many(rc, keys, kl, 2, vals, lens);
        hits += vals[1] != NULL && vals[0] == NULL;
        free(vals[0]), free(vals[1]);
        unsigned nn = redis_cluster_node_count(rc);
        most = nn > most ? nn : most;
    }
    redis_cluster_stats s;
    redis_cluster_stats_get(rc, &s);
    redis_cluster_close(rc);
    fake_stop(&f);
    CHECK_EQ_INT(hits, 300);
    CHECK_EQ_INT(s.redirects, 300);
    CHECK_MSG(most <= REDIS_CLUSTER_MAX_NODES / 2 + 1, "%u nodes known at most", most);
}

/* A node that requires AUTH: refused without a password or with a wrong
 * one (the node's words in the message), served with the right one. */
TEST(fake_auth_required)
{
    fake_node f;
    CHECK(fake_start(&f, FAKE_AUTH) == 0);
    char seeds[64];
    snprintf(seeds, sizeof seeds, "127.0.0.1:%d", f.port);
    redis_cluster *none = redis_cluster_open(seeds, NULL);
    char msg_none[512], msg_wrong[512];
    snprintf(msg_none, sizeof msg_none, "%.500s", err_msg());
    redis_cluster_opts o = redis_cluster_default_opts();
    o.user = "pagellm";
    o.password = "wrong";
    redis_cluster *wrong = redis_cluster_open(seeds, &o);
    snprintf(msg_wrong, sizeof msg_wrong, "%.500s", err_msg());
    char pw[8] = "s3cret"; /* copied at open: changing it after must not matter */
    o.password = pw;
    redis_cluster *rc = redis_cluster_open(seeds, &o);
    memset(pw, 0, sizeof pw);
    int hit = 0;
    if (rc) {
        const char *k = "h1";
        size_t kl = 2, len;
        uint8_t *v;
        redis_cluster_get_many(rc, &k, &kl, 1, &v, &len);
        hit = v && len == 3;
        free(v);
    }
    redis_cluster_close(none);
    redis_cluster_close(wrong);
    redis_cluster_close(rc);
    fake_stop(&f);
    CHECK(none == NULL && wrong == NULL);
    CHECK_MSG(strstr(msg_none, "NOAUTH"), "message: %s", msg_none);
    CHECK_MSG(strstr(msg_wrong, "AUTH: WRONGPASS"), "message: %s", msg_wrong);
    CHECK(rc != NULL);
    CHECK(hit);
}

TEST(fake_silent_node_times_out)
{
    fake_node f;
    CHECK(fake_start(&f, FAKE_SILENT) == 0);
    char seeds[64];
    snprintf(seeds, sizeof seeds, "127.0.0.1:%d", f.port);
    redis_cluster_opts o = redis_cluster_default_opts();
    o.command_timeout_ms = 150;
    redis_cluster *rc = redis_cluster_open(seeds, &o);
    if (!rc) {
        fake_stop(&f);
        CHECK_MSG(0, "open: %s", err_msg());
    }
    const char *keys[] = {"h1", "h2", "h3"};
    size_t kl[] = {2, 2, 2}, lens[3];
    uint8_t *vals[3];
    double t0 = now_s();
    int st = redis_cluster_get_many(rc, keys, kl, 3, vals, lens);
    double t1 = now_s();
    int st2 = redis_cluster_get_many(rc, keys, kl, 3, vals, lens); /* in backoff: immediate */
    double t2 = now_s();
    redis_cluster_stats s;
    redis_cluster_stats_get(rc, &s);
    redis_cluster_close(rc);
    fake_stop(&f);
    CHECK_EQ_INT(st, PL_EIO);
    CHECK_EQ_INT(st2, PL_EIO);
    CHECK(!vals[0] && !vals[1] && !vals[2]);
    CHECK_MSG(t1 - t0 >= 0.1 && t1 - t0 < 1.0, "a silent node took %.3f s", t1 - t0);
    CHECK_MSG(t2 - t1 < 0.05, "a node in backoff took %.3f s", t2 - t1);
    CHECK_EQ_INT(s.misses, 6);
    CHECK_EQ_INT(s.skipped_down, 3);
}

/* ================================================================ cluster */

static char g_seed[64];         /* one node: the rest comes from the slot map */
/* Timeouts for the cluster tests: longer than the defaults, so that a
 * loaded test machine's scheduling stall is not taken for a dead node (the
 * tests about dead nodes need no timeout: a killed node refuses at once). */
static redis_cluster_opts g_opts;
static int g_ports[8], g_nports;
static const char *g_dir, *g_ctl;

static redisContext *admin(int port)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c && c->err) {
        redisFree(c);
        return NULL;
    }
    return c;
}

/* port of a "127.0.0.1:PORT" owner name */
static int owner_port(redis_cluster *rc, unsigned slot)
{
    const char *o = redis_cluster_slot_owner(rc, slot);
    const char *c = o ? strrchr(o, ':') : NULL;
    return c ? atoi(c + 1) : -1;
}

static int ctl(const char *verb, int port)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s '%s' %d", g_ctl, verb, g_dir, port);
    return system(cmd);
}

static store_key rand_key(void)
{
    store_key k;
    k.h[0] = ((uint64_t)rng_u32() << 32) | rng_u32();
    k.h[1] = ((uint64_t)rng_u32() << 32) | rng_u32();
    return k;
}

/* n values of len bytes each, random with NULs sprinkled in */
static uint8_t **rand_vals(size_t n, size_t len)
{
    uint8_t **v = calloc(n, sizeof *v);
    for (size_t i = 0; v && i < n; i++) {
        v[i] = malloc(len);
        if (!v[i]) return v;
        rng_bytes(v[i], len);
        for (size_t j = 0; j < len; j += 97) v[i][j] = 0;
    }
    return v;
}

static void free_vals(uint8_t **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

TEST(cluster_open_one_seed_maps_all_slots)
{
    redis_cluster *rc = redis_cluster_open(g_seed, &g_opts);
    CHECK_MSG(rc, "open %s: %s", g_seed, err_msg());
    unsigned covered = redis_cluster_slots_covered(rc);
    int seen[8] = {0};
    for (unsigned s = 0; s < REDIS_CLUSTER_SLOTS; s += 97)
        for (int i = 0; i < g_nports; i++) seen[i] |= owner_port(rc, s) == g_ports[i];
    redis_cluster_close(rc);
    CHECK_EQ_INT(covered, REDIS_CLUSTER_SLOTS);
    for (int i = 0; i < g_nports; i++) CHECK_MSG(seen[i], "no slot on port %d", g_ports[i]);
}

/* put_many then get_many of n random keys of len bytes; absent keys miss */
static void roundtrip(size_t n, size_t len, const char **why)
{
    static char whybuf[1024];
    *why = NULL;
    char err[512];
    store_backend *b = store_redis_open_opts(g_seed, 60, &g_opts, err, sizeof err);
    if (!b) {
        snprintf(whybuf, sizeof whybuf, "open: %.500s", err);
        *why = whybuf;
        return;
    }
    size_t n_all = n + n / 4; /* the last n/4 are never written */
    store_key *keys = malloc(n_all * sizeof *keys);
    uint8_t **vals = rand_vals(n, len);
    uint8_t **got = calloc(n_all, sizeof *got);
    size_t *lens = malloc(n * sizeof *lens), *glens = calloc(n_all, sizeof *glens);
    for (size_t i = 0; i < n_all; i++) keys[i] = rand_key();
    for (size_t i = 0; i < n; i++) lens[i] = len;
    double t0 = now_s();
    int st_put = b->put_many(b, keys, n, (const uint8_t *const *)vals, lens);
    double t1 = now_s();
    int st_get = b->get_many(b, keys, n_all, got, glens);
    double t2 = now_s();
    store_redis_stats s;
    store_redis_stats_get(b, &s);
    size_t bad = 0, hits = 0;
    for (size_t i = 0; i < n; i++) {
        hits += got[i] != NULL;
        bad += !got[i] || glens[i] != len || memcmp(got[i], vals[i], len) != 0;
    }
    size_t ghost = 0;
    for (size_t i = n; i < n_all; i++) ghost += got[i] != NULL || glens[i] != 0;
    /* the TTL reached Redis: PTTL of one key, asked of its master */
    long long pttl = -3;
    char name[STORE_REDIS_KEY_LEN];
    store_redis_key(&keys[0], name);
    redis_cluster *probe = redis_cluster_open(g_seed, &g_opts);
    redisContext *c = probe ? admin(owner_port(probe, redis_cluster_key_slot(name, sizeof name))) : NULL;
    redisReply *r = c ? redisCommand(c, "PTTL %b", name, sizeof name) : NULL;
    if (r && r->type == REDIS_REPLY_INTEGER) pttl = r->integer;
    if (r) freeReplyObject(r);
    if (c) redisFree(c);
    redis_cluster_close(probe);
    INFO("redis %zu x %zu KiB: put %.1f MB/s, get %.1f MB/s (one batch)", n, len >> 10,
         (double)(n * len) / 1e6 / (t1 - t0), (double)(n * len) / 1e6 / (t2 - t1));
    for (size_t i = 0; i < n_all; i++) free(got[i]);
    free(got), free(glens), free(lens), free(keys);
    free_vals(vals, n);
    b->close(b);
    if (st_put || st_get || bad || ghost || s.hits != hits || s.misses != n_all - n || s.errors ||
        s.bytes_written != n * len || s.bytes_read != n * len || pttl <= 55000 || pttl > 60000) {
        snprintf(whybuf, sizeof whybuf,
                 "put %d get %d, %zu bad of %zu, %zu ghosts, stats hits %llu misses %llu errors %llu, pttl %lld",
                 st_put, st_get, bad, n, ghost, (unsigned long long)s.hits, (unsigned long long)s.misses,
                 (unsigned long long)s.errors, pttl);
        *why = whybuf;
    }
}

TEST(cluster_batch_64k_values)
{
    const char *why;
    rng_seed(64);
    roundtrip(160, 64 << 10, &why);
    CHECK_MSG(!why, "%s", why);
}

TEST(cluster_batch_1m_values)
{
    const char *why;
    rng_seed(1024);
    roundtrip(12, 1 << 20, &why);
    CHECK_MSG(!why, "%s", why);
}

TEST(cluster_ttl_expires)
{
    redis_cluster *rc = redis_cluster_open(g_seed, &g_opts);
    CHECK_MSG(rc, "open: %s", err_msg());
    enum { N = 12 };
    char names[N][32];
    const char *keys[N];
    size_t kl[N], lens[N], vl[N];
    const uint8_t *v[N];
    uint8_t *got[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "ttl-test:%d", i);
        keys[i] = names[i], kl[i] = strlen(names[i]);
        v[i] = (const uint8_t *)"short-lived\0value", vl[i] = 17;
    }
    int st = redis_cluster_set_many(rc, keys, kl, N, v, vl, 800);
    redis_cluster_get_many(rc, keys, kl, N, got, lens);
    int before = 0;
    for (int i = 0; i < N; i++) before += got[i] && lens[i] == 17 && !memcmp(got[i], v[i], 17), free(got[i]);
    sleep_ms(1200);
    redis_cluster_get_many(rc, keys, kl, N, got, lens);
    int after = 0;
    for (int i = 0; i < N; i++) after += got[i] != NULL, free(got[i]);
    redis_cluster_close(rc);
    CHECK_EQ_INT(st, 0);
    CHECK_EQ_INT(before, N);
    CHECK_EQ_INT(after, 0);
}

TEST(cluster_wrong_type_is_an_error_miss)
{
    redis_cluster *rc = redis_cluster_open(g_seed, &g_opts);
    CHECK_MSG(rc, "open: %s", err_msg());
    const char *key = "wrongtype-test:list";
    size_t kl = strlen(key), len = 7;
    redisContext *c = admin(owner_port(rc, redis_cluster_key_slot(key, kl)));
    redisReply *r = c ? redisCommand(c, "RPUSH %s a b", key) : NULL;
    int pushed = r && r->type == REDIS_REPLY_INTEGER;
    if (r) freeReplyObject(r);
    if (c) redisFree(c);
    uint8_t *got = (uint8_t *)1;
    int st = redis_cluster_get_many(rc, &key, &kl, 1, &got, &len);
    redis_cluster_stats s;
    redis_cluster_stats_get(rc, &s);
    redis_cluster_close(rc);
    CHECK(pushed);
    CHECK_EQ_INT(st, PL_EIO);
    CHECK(got == NULL && len == 0);
    CHECK_EQ_INT(s.errors, 1);
    CHECK_EQ_INT(s.misses, 1);
}

static int node_id(int port, char id[64])
{
    redisContext *c = admin(port);
    redisReply *r = c ? redisCommand(c, "CLUSTER MYID") : NULL;
    int ok = r && r->type == REDIS_REPLY_STRING && r->len < 64;
    if (ok) memcpy(id, r->str, r->len + 1);
    if (r) freeReplyObject(r);
    if (c) redisFree(c);
    return ok ? 0 : -1;
}

/* Runs a command (printf-style) on port; returns 0 unless it errs. */
static int admin_cmd(int port, const char *fmt, ...)
{
    redisContext *c = admin(port);
    if (!c) return -1;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    int ok = r && r->type != REDIS_REPLY_ERROR;
    if (r && !ok) fprintf(stderr, "admin %d: %s\n", port, r->str);
    if (r) freeReplyObject(r);
    redisFree(c);
    return ok ? 0 : -1;
}

TEST(cluster_slot_migration_ask_then_moved)
{
    enum { N = 20 };
    redis_cluster *rc = redis_cluster_open(g_seed, &g_opts);
    CHECK_MSG(rc, "open: %s", err_msg());
    /* N keys in one slot through a hash tag; a different (random) tag per
     * run would also do, the slot is taken from the client's map */
    char names[N + 2][32];
    const char *keys[N + 2];
    size_t kl[N + 2], vl[N + 2], lens[N + 2];
    const uint8_t *v[N + 2];
    uint8_t *got[N + 2];
    for (int i = 0; i < N + 2; i++) {
        snprintf(names[i], sizeof names[i], "{migrate}:%d", i);
        keys[i] = names[i], kl[i] = strlen(names[i]);
        v[i] = (const uint8_t *)names[i], vl[i] = kl[i];
    }
    unsigned slot = redis_cluster_key_slot(keys[0], kl[0]);
    int src = owner_port(rc, slot), dst = -1;
    for (int i = 0; i < g_nports; i++)
        if (g_ports[i] != src) dst = g_ports[i];
    char src_id[64], dst_id[64];
    int ids = node_id(src, src_id) == 0 && node_id(dst, dst_id) == 0;
    int st0 = redis_cluster_set_many(rc, keys, kl, N, v, vl, 60000);
    /* half the keys move: the slot is MIGRATING on src, IMPORTING on dst */
    int mig = ids && !admin_cmd(dst, "CLUSTER SETSLOT %u IMPORTING %s", slot, src_id) &&
              !admin_cmd(src, "CLUSTER SETSLOT %u MIGRATING %s", slot, dst_id);
    for (int i = 0; mig && i < N / 2; i++)
        mig = !admin_cmd(src, "MIGRATE 127.0.0.1 %d %s 0 5000", dst, keys[i]);
    redis_cluster_stats s0, s1, s2;
    redis_cluster_stats_get(rc, &s0);
    /* key N is new: src answers ASK (absent there), SET goes to dst with ASKING */
    int st_ask_set = redis_cluster_set_many(rc, keys + N, kl + N, 1, v + N, vl + N, 60000);
    int st1 = redis_cluster_get_many(rc, keys, kl, N + 2, got, lens); /* key N+1: absent everywhere */
    int hits1 = 0;
    for (int i = 0; i < N + 1; i++) hits1 += got[i] && lens[i] == vl[i] && !memcmp(got[i], v[i], vl[i]);
    int miss1 = got[N + 1] == NULL;
    for (int i = 0; i < N + 2; i++) free(got[i]);
    redis_cluster_stats_get(rc, &s1);
    int owner_during = owner_port(rc, slot);
    /* the rest moves and the slot is given to dst: src answers MOVED */
    for (int i = N / 2; mig && i < N; i++) mig = !admin_cmd(src, "MIGRATE 127.0.0.1 %d %s 0 5000", dst, keys[i]);
    for (int i = 0; mig && i < g_nports; i++)
        mig = !admin_cmd(g_ports[i], "CLUSTER SETSLOT %u NODE %s", slot, dst_id);
    int st2 = redis_cluster_get_many(rc, keys, kl, N + 1, got, lens);
    int hits2 = 0;
    for (int i = 0; i < N + 1; i++) hits2 += got[i] && lens[i] == vl[i] && !memcmp(got[i], v[i], vl[i]), free(got[i]);
    redis_cluster_stats_get(rc, &s2);
    int owner_after = owner_port(rc, slot);
    redis_cluster_close(rc);
    CHECK(ids);
    CHECK(mig);
    CHECK_EQ_INT(st0, 0);
    CHECK_EQ_INT(st_ask_set, 0);
    CHECK_EQ_INT(st1, 0);
    CHECK_EQ_INT(hits1, N + 1);
    CHECK(miss1);
    /* ASK: the new key's SET, the N/2 moved keys and the absent key */
    CHECK_MSG(s1.redirects - s0.redirects >= N / 2 + 2, "ASK redirects %llu",
              (unsigned long long)(s1.redirects - s0.redirects));
    CHECK_EQ_INT(owner_during, src); /* ASK leaves the map alone */
    CHECK_EQ_INT(st2, 0);
    CHECK_EQ_INT(hits2, N + 1);
    CHECK_MSG(s2.redirects > s1.redirects, "no MOVED followed");
    CHECK_MSG(s2.slot_refreshes > s1.slot_refreshes, "no CLUSTER SLOTS after MOVED");
    CHECK_EQ_INT(owner_after, dst);
    CHECK_EQ_INT(s2.errors, 0);
}

TEST(cluster_master_killed_then_restarted)
{
    enum { N = 240, LEN = 16 << 10 };
    redis_cluster_opts o = g_opts;
    o.backoff_max_ms = 800; /* so that the restart is noticed within the test's time */
    char err[512];
    store_backend *b = store_redis_open_opts(g_seed, 60, &o, err, sizeof err);
    CHECK_MSG(b, "open: %s", err);
    redis_cluster *probe = redis_cluster_open(g_seed, &g_opts);
    if (!probe) {
        b->close(b);
        CHECK_MSG(0, "open: %s", err_msg());
    }
    rng_seed(7);
    store_key keys[N];
    size_t lens[N], glens[N];
    uint8_t *got[N];
    uint8_t **vals = rand_vals(N, LEN);
    int on_victim[N], n_victim = 0;
    /* the victim: a master that is not the seed */
    int victim = g_ports[g_nports - 1];
    for (int i = 0; i < N; i++) {
        keys[i] = rand_key();
        lens[i] = LEN;
        char name[STORE_REDIS_KEY_LEN];
        store_redis_key(&keys[i], name);
        on_victim[i] = owner_port(probe, redis_cluster_key_slot(name, sizeof name)) == victim;
        n_victim += on_victim[i];
    }
    redis_cluster_close(probe);
    int st_put = b->put_many(b, keys, N, (const uint8_t *const *)vals, lens);
    int killed = ctl("kill", victim) == 0;
    store_redis_stats s0, s1, s2;
    store_redis_stats_get(b, &s0);
    double worst = 0;
    int wrong = 0, batches = 0;
    double t_down = now_s();
    for (batches = 0; batches < 16;) { /* against a dead master, 20 ms apart */
        double t0 = now_s();
        b->get_many(b, keys, N, got, glens);
        b->put_many(b, keys, N, (const uint8_t *const *)vals, lens);
        double dt = now_s() - t0;
        worst = dt > worst ? dt : worst;
        for (int i = 0; i < N; i++) {
            int hit = got[i] && glens[i] == LEN && !memcmp(got[i], vals[i], LEN);
            wrong += on_victim[i] ? got[i] != NULL : !hit;
            free(got[i]);
        }
        batches++;
        sleep_ms(20);
    }
    t_down = now_s() - t_down;
    store_redis_stats_get(b, &s1);
    /* back, empty (no persistence): new puts hit again after the backoff */
    int restarted = ctl("restart", victim) == 0;
    int back = 0;
    double t_back = now_s() + 15.0, worst2 = 0, t_restart = now_s();
    while (!back && now_s() < t_back) {
        double t0 = now_s();
        b->put_many(b, keys, N, (const uint8_t *const *)vals, lens);
        b->get_many(b, keys, N, got, glens);
        double dt = now_s() - t0;
        worst2 = dt > worst2 ? dt : worst2;
        back = 1;
        for (int i = 0; i < N; i++) {
            back &= got[i] && glens[i] == LEN && !memcmp(got[i], vals[i], LEN);
            free(got[i]);
        }
        if (!back) sleep_ms(50);
    }
    store_redis_stats_get(b, &s2);
    INFO("redis node down: %d batches in %.0f ms, worst %.0f ms; back after %.1f s (worst batch %.0f ms), %llu connect "
         "failures",
         batches, t_down * 1e3, worst * 1e3, now_s() - t_restart, worst2 * 1e3, (unsigned long long)s1.connect_failures);
    free_vals(vals, N);
    b->close(b);
    CHECK_EQ_INT(st_put, 0);
    CHECK(killed);
    CHECK_MSG(n_victim > N / 6 && n_victim < N / 2, "%d of %d keys on the victim", n_victim, N);
    CHECK_MSG(wrong == 0, "%d wrong outcomes over %d batches", wrong, batches);
    CHECK_MSG(worst < 1.0, "a batch took %.3f s with a master down", worst);
    /* backoff (100, 200, 400, 800 ms...): a few connect attempts, not one
     * per batch (3 or 4 in the ~0.5 s these batches take, on each of the
     * tier's two clients: gets and puts; half the batches per client
     * leaves room for a machine four times slower) */
    CHECK_MSG(s1.connect_failures <= (uint64_t)batches, "%llu connect attempts in %d batches over %.0f ms",
              (unsigned long long)s1.connect_failures, batches, t_down * 1e3);
    CHECK(s1.misses - s0.misses == (uint64_t)(n_victim * batches));
    CHECK(s1.dropped - s0.dropped == (uint64_t)(n_victim * batches));
    CHECK(s1.puts - s0.puts == (uint64_t)((N - n_victim) * batches));
    CHECK(restarted);
    CHECK_MSG(back, "the restarted master never served again");
    CHECK_MSG(worst2 < 1.0, "a batch took %.3f s while the master came back", worst2);
    CHECK(s2.reconnects >= 1);
}

/* A master hangs (SIGSTOP: its kernel still accepts connections and
 * queues commands, nothing answers): a batch waits one command timeout at
 * most, its keys miss and the others hit; within the backoff the next
 * batches do not wait at all; resumed, it serves again. */
TEST(cluster_master_hung_costs_one_timeout)
{
    enum { N = 90, LEN = 4 << 10 };
    char err[512];
    redis_cluster_opts o = g_opts;
    o.backoff_min_ms = 1000; /* the batches after the first surely fall within it */
    store_backend *b = store_redis_open_opts(g_seed, 60, &o, err, sizeof err);
    CHECK_MSG(b, "open: %s", err);
    redis_cluster *probe = redis_cluster_open(g_seed, &g_opts);
    if (!probe) {
        b->close(b);
        CHECK_MSG(0, "open: %s", err_msg());
    }
    rng_seed(5);
    store_key keys[N];
    size_t lens[N], glens[N];
    uint8_t *got[N];
    uint8_t **vals = rand_vals(N, LEN);
    int on_victim[N], n_victim = 0, victim = g_ports[1];
    for (int i = 0; i < N; i++) {
        keys[i] = rand_key();
        lens[i] = LEN;
        char name[STORE_REDIS_KEY_LEN];
        store_redis_key(&keys[i], name);
        on_victim[i] = owner_port(probe, redis_cluster_key_slot(name, sizeof name)) == victim;
        n_victim += on_victim[i];
    }
    redis_cluster_close(probe);
    int st_put = b->put_many(b, keys, N, (const uint8_t *const *)vals, lens);
    int paused = ctl("pause", victim) == 0;
    double t[3];
    int wrong = 0;
    for (int k = 0; k < 3; k++) {
        double t0 = now_s();
        b->get_many(b, keys, N, got, glens);
        t[k] = now_s() - t0;
        for (int i = 0; i < N; i++) {
            int hit = got[i] && glens[i] == LEN && !memcmp(got[i], vals[i], LEN);
            wrong += on_victim[i] ? got[i] != NULL : !hit;
            free(got[i]);
        }
    }
    int resumed = ctl("resume", victim) == 0;
    int back = 0;
    for (double t_end = now_s() + 5.0; !back && now_s() < t_end;) {
        b->get_many(b, keys, N, got, glens);
        back = 1;
        for (int i = 0; i < N; i++) back &= got[i] != NULL, free(got[i]);
        if (!back) sleep_ms(50);
    }
    INFO("redis node hung: batches of %.0f, %.0f, %.0f ms", t[0] * 1e3, t[1] * 1e3, t[2] * 1e3);
    free_vals(vals, N);
    b->close(b);
    CHECK_EQ_INT(st_put, 0);
    CHECK(paused && resumed);
    CHECK_MSG(n_victim > 0, "no key on the hung master");
    CHECK_EQ_INT(wrong, 0);
    CHECK_MSG(t[0] >= g_opts.command_timeout_ms * 1e-3 * 0.8 && t[0] < 1.0, "the first batch took %.3f s", t[0]);
    CHECK_MSG(t[1] < 0.05 && t[2] < 0.05, "batches within the backoff took %.3f, %.3f s", t[1], t[2]);
    CHECK_MSG(back, "the resumed master never served again");
}

/* Last of the cluster tests (the nodes then require a password): with
 * requirepass set on every node, a client without the password is refused
 * at open with Redis's NOAUTH, one with it works. */
TEST(cluster_requirepass)
{
    int set = 1;
    for (int i = 0; i < g_nports; i++) set &= admin_cmd(g_ports[i], "CONFIG SET requirepass %s", "pl test pw") == 0;
    redis_cluster *none = redis_cluster_open(g_seed, &g_opts);
    char msg[512];
    snprintf(msg, sizeof msg, "%.500s", err_msg());
    redis_cluster_opts o = g_opts;
    o.password = "pl test pw"; /* AUTH's argument is binary-safe: spaces are fine */
    char err[512];
    store_backend *b = store_redis_open_opts(g_seed, 60, &o, err, sizeof err);
    int ok = 0;
    if (b) {
        store_key k = {{42, 43}};
        const uint8_t *v = (const uint8_t *)"authenticated";
        size_t vl = 13, gl;
        uint8_t *got;
        b->put_many(b, &k, 1, &v, &vl);
        b->get_many(b, &k, 1, &got, &gl);
        ok = got && gl == 13 && !memcmp(got, v, 13);
        free(got);
        b->close(b);
    }
    redis_cluster_close(none);
    CHECK(set);
    CHECK(none == NULL);
    CHECK_MSG(strstr(msg, "NOAUTH"), "message: %s", msg);
    CHECK_MSG(b != NULL, "open with the password: %s", err);
    CHECK(ok);
}

/* The replication offset a node reports (master_repl_offset for a master,
 * slave_repl_offset for a replica), -1 if unknown. */
static long long repl_offset(int port, const char *field)
{
    redisContext *c = admin(port);
    redisReply *r = c ? redisCommand(c, "INFO replication") : NULL;
    long long off = -1;
    const char *f = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, field) : NULL;
    if (f) off = atoll(f + strlen(field) + 1);
    if (r) freeReplyObject(r);
    if (c) redisFree(c);
    return off;
}

/* The replica of master_port, from its INFO replication ("slave0:ip=..,port=P,"). */
static int replica_of(int master_port)
{
    redisContext *c = admin(master_port);
    redisReply *r = c ? redisCommand(c, "INFO replication") : NULL;
    int port = -1;
    const char *f = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "slave0:") : NULL;
    if (f && (f = strstr(f, "port="))) port = atoi(f + 5);
    if (r) freeReplyObject(r);
    if (c) redisFree(c);
    return port;
}

/* 3 masters + 3 replicas (PL_REDIS_HA_PORTS): a master dies, its replica
 * is promoted by the cluster, and the client finds it through CLUSTER
 * SLOTS from a live node: the dead master's keys hit again (replicated
 * before the kill), with no batch slower than 1 s meanwhile. */
TEST(cluster_replica_promoted_after_master_dies)
{
    enum { N = 120, LEN = 8 << 10 };
    char err[512];
    store_backend *b = store_redis_open_opts(g_seed, 60, &g_opts, err, sizeof err);
    CHECK_MSG(b, "open: %s", err);
    redis_cluster *probe = redis_cluster_open(g_seed, &g_opts);
    if (!probe) {
        b->close(b);
        CHECK_MSG(0, "open: %s", err_msg());
    }
    rng_seed(11);
    store_key keys[N];
    size_t lens[N], glens[N];
    uint8_t *got[N];
    uint8_t **vals = rand_vals(N, LEN);
    int on_victim[N], n_victim = 0, victim = -1;
    unsigned victim_slot = 0;
    for (int i = 0; i < N; i++) {
        keys[i] = rand_key();
        lens[i] = LEN;
        char name[STORE_REDIS_KEY_LEN];
        store_redis_key(&keys[i], name);
        unsigned slot = redis_cluster_key_slot(name, sizeof name);
        int owner = owner_port(probe, slot);
        if (victim < 0 && owner != g_ports[0]) victim = owner, victim_slot = slot;
        on_victim[i] = owner == victim;
        n_victim += on_victim[i];
    }
    redis_cluster_close(probe);
    int st_put = b->put_many(b, keys, N, (const uint8_t *const *)vals, lens);
    int replica = replica_of(victim);
    /* the replica has every write before the kill */
    int synced = 0;
    for (int t = 0; t < 100 && !synced; t++) {
        long long m = repl_offset(victim, "master_repl_offset"), r = repl_offset(replica, "slave_repl_offset");
        synced = m > 0 && m == r;
        if (!synced) sleep_ms(20);
    }
    int killed = ctl("kill", victim) == 0;
    double t_kill = now_s(), worst = 0;
    int back = 0, wrong = 0, batches = 0;
    while (!back && now_s() < t_kill + 20.0) {
        double t0 = now_s();
        b->get_many(b, keys, N, got, glens);
        double dt = now_s() - t0;
        worst = dt > worst ? dt : worst;
        back = 1;
        for (int i = 0; i < N; i++) {
            int hit = got[i] && glens[i] == LEN && !memcmp(got[i], vals[i], LEN);
            if (on_victim[i]) back &= hit;
            else wrong += !hit;
            if (got[i] && !hit) wrong++; /* a value that is not the one written */
            free(got[i]);
        }
        batches++;
        if (!back) sleep_ms(100);
    }
    double t_back = now_s() - t_kill;
    redis_cluster *after = redis_cluster_open(g_seed, &g_opts);
    int new_owner = after ? owner_port(after, victim_slot) : -1;
    redis_cluster_close(after);
    store_redis_stats s;
    store_redis_stats_get(b, &s);
    INFO("redis failover: the replica served the dead master's keys after %.1f s (%d batches, worst %.0f ms)",
         t_back, batches, worst * 1e3);
    free_vals(vals, N);
    b->close(b);
    CHECK_EQ_INT(st_put, 0);
    CHECK_MSG(replica > 0 && synced, "replica %d of %d not in sync", replica, victim);
    CHECK(killed);
    CHECK_MSG(n_victim > 0, "no key on the victim");
    CHECK_MSG(back, "the dead master's keys never hit again (%.1f s)", t_back);
    CHECK_EQ_INT(wrong, 0);
    CHECK_MSG(worst < 1.0, "a batch took %.3f s during the failover", worst);
    CHECK_EQ_INT(new_owner, replica);
}

/* Batch GET/SET throughput over the cluster: INFO lines only. total_mb
 * are moved each way, over a key set of at most 256 MiB (written once
 * before the clock starts, so that Redis's memory is already allocated and
 * stays bounded). */
static void bench_one(size_t len, size_t total_mb, size_t batch)
{
    char err[512];
    store_backend *b = store_redis_open(g_seed, 600, err, sizeof err);
    if (!b) {
        INFO("bench: %s", err);
        return;
    }
    size_t n = ((size_t)total_mb << 20) / len, nk = ((size_t)256 << 20) / len;
    if (nk < batch) nk = batch;
    nk -= nk % batch;
    if (n < nk) n = nk;
    n -= n % batch;
    store_key *keys = malloc(nk * sizeof *keys);
    uint8_t **vals = rand_vals(batch, len); /* every batch writes the same values */
    size_t *lens = malloc(batch * sizeof *lens), *glens = malloc(batch * sizeof *glens);
    uint8_t **got = malloc(batch * sizeof *got);
    for (size_t i = 0; i < nk; i++) keys[i] = rand_key();
    for (size_t i = 0; i < batch; i++) lens[i] = len;
    for (size_t i = 0; i < nk; i += batch) b->put_many(b, keys + i, batch, (const uint8_t *const *)vals, lens);
    double t0 = now_s();
    for (size_t i = 0; i < n; i += batch)
        b->put_many(b, keys + i % nk, batch, (const uint8_t *const *)vals, lens);
    double t1 = now_s();
    size_t hits = 0;
    for (size_t i = 0; i < n; i += batch) {
        b->get_many(b, keys + i % nk, batch, got, glens);
        for (size_t j = 0; j < batch; j++) hits += got[j] != NULL, free(got[j]);
    }
    double t2 = now_s();
    double gb = (double)(n * len) / 1e9;
    INFO("bench redis_cluster %zu KiB values, batches of %zu: SET %.2f GB/s, GET %.2f GB/s (%zu values, %zu hits)",
         len >> 10, batch, gb / (t1 - t0), gb / (t2 - t1), n, hits);
    free(keys), free(lens), free(glens), free(got);
    free_vals(vals, batch);
    b->close(b);
}

static int parse_ports(const char *s)
{
    g_nports = 0;
    while (*s && g_nports < 8) {
        g_ports[g_nports++] = atoi(s);
        const char *c = strchr(s, ',');
        if (!c) break;
        s = c + 1;
    }
    return g_nports;
}

int main(void)
{
    const char *ports = getenv("PL_REDIS_PORTS"), *ha = getenv("PL_REDIS_HA_PORTS");
    if (ha && *ha) ports = ha;
    if (!ports || !*ports) {
        RUN(key_slot_matches_redis);
        RUN(seed_strings_parse);
        RUN(bad_seed_strings_refused);
        RUN(store_key_encoding);
        RUN(resp_reader_replies_and_garbage);
        RUN(unreachable_seed_refused);
        RUN(fake_garbage_slot_map_refused);
        RUN(fake_bad_replies_are_misses);
        RUN(fake_address_churn_stays_bounded);
        RUN(fake_auth_required);
        RUN(fake_silent_node_times_out);
        return test_summary();
    }
    g_dir = getenv("PL_REDIS_DIR");
    g_ctl = getenv("PL_REDIS_CTL");
    if (parse_ports(ports) < 3 || !g_dir || !g_ctl) {
        printf("FAIL redis_cluster_env: PL_REDIS_PORTS (3 ports), PL_REDIS_DIR and PL_REDIS_CTL are needed\n");
        return 1;
    }
    snprintf(g_seed, sizeof g_seed, "127.0.0.1:%d", g_ports[0]);
    g_opts = redis_cluster_default_opts();
    g_opts.connect_timeout_ms = 500;
    g_opts.command_timeout_ms = 500;
    if (getenv("PL_REDIS_BENCH")) {
        size_t mb = (size_t)atoi(getenv("PL_REDIS_BENCH"));
        if (mb < 16) mb = 256;
        size_t batch = getenv("PL_REDIS_BENCH_BATCH") ? (size_t)atoi(getenv("PL_REDIS_BENCH_BATCH")) : 0;
        bench_one(64 << 10, mb, batch ? batch : 64);
        bench_one(1 << 20, mb, batch ? batch : 16);
        return 0;
    }
    if (ha && *ha) {
        RUN(cluster_replica_promoted_after_master_dies);
        return test_summary();
    }
    RUN(cluster_open_one_seed_maps_all_slots);
    RUN(cluster_batch_64k_values);
    RUN(cluster_batch_1m_values);
    RUN(cluster_ttl_expires);
    RUN(cluster_wrong_type_is_an_error_miss);
    RUN(cluster_slot_migration_ask_then_moved);
    RUN(cluster_master_hung_costs_one_timeout);
    RUN(cluster_master_killed_then_restarted);
    RUN(cluster_requirepass);
    return test_summary();
}
