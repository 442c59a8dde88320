/* server_resp.c - where each relayed answer ends; see server_resp.h. A
 * byte-stream state machine: head and chunk framing lines are gathered in
 * r->line, body bytes are only counted. */
#include "server_resp.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

enum { R_IDLE = 0, R_STATUS, R_FIELDS, R_LENGTH, R_CHUNK_SIZE, R_CHUNK_DATA, R_CHUNK_END, R_TRAILER, R_TO_CLOSE };

void srv_resp_expect(srv_resp *r, bool head_method)
{
    memset(r, 0, offsetof(srv_resp, line));
    r->line_n = 0;
    r->st = R_STATUS;
    r->due = true;
    r->head_method = head_method;
}

bool srv_resp_close_ends(const srv_resp *r) { return r->st == R_TO_CLOSE; }

static bool parse_u64(const char *p, size_t n, int base, unsigned long long *out)
{
    unsigned long long x = 0;
    size_t i = 0;
    for (; i < n; i++) {
        int d;
        char c = p[i];
        if (c >= '0' && c <= '9') d = c - '0';
        else if (base == 16 && (c | 0x20) >= 'a' && (c | 0x20) <= 'f') d = (c | 0x20) - 'a' + 10;
        else break;
        if (x > (UINT64_MAX - (unsigned)d) / (unsigned)base) return false;
        x = x * (unsigned)base + (unsigned)d;
    }
    *out = x;
    return i > 0;
}

/* The status line: HTTP/1.x SSS [reason]. */
static bool status_line(srv_resp *r, const char *l, size_t n)
{
    if (n < 12 || memcmp(l, "HTTP/1.", 7) != 0 || l[8] != ' ') return false;
    for (int i = 9; i < 12; i++)
        if (l[i] < '0' || l[i] > '9') return false;
    r->status = (l[9] - '0') * 100 + (l[10] - '0') * 10 + (l[11] - '0');
    return r->status >= 100 && r->status != 101 && (n == 12 || l[12] == ' ');
}

static bool field(srv_resp *r, const char *l, size_t n)
{
    const char *colon = memchr(l, ':', n);
    if (!colon || colon == l) return false;
    size_t k = (size_t)(colon - l);
    const char *v = colon + 1;
    size_t vn = n - k - 1;
    while (vn && (*v == ' ' || *v == '\t')) v++, vn--;
    while (vn && (v[vn - 1] == ' ' || v[vn - 1] == '\t')) vn--;
    if (k == 14 && !strncasecmp(l, "Content-Length", 14)) {
        unsigned long long x;
        if (!parse_u64(v, vn, 10, &x) || (r->has_len && x != r->left)) return false;
        r->has_len = true;
        r->left = x;
    } else if (k == 17 && !strncasecmp(l, "Transfer-Encoding", 17)) {
        if (vn != 7 || strncasecmp(v, "chunked", 7)) return false;
        r->chunked = true;
    }
    return true;
}

/* The head ended: where the body (if any) ends. DONE when the answer is whole. */
static srv_resp_state head_end(srv_resp *r)
{
    if (r->status < 200) { /* interim: the final answer follows */
        r->st = R_STATUS;
        r->chunked = r->has_len = false;
        return SRV_RESP_MORE;
    }
    if (r->head_method || r->status == 204 || r->status == 304) return SRV_RESP_DONE;
    if (r->chunked) r->st = R_CHUNK_SIZE;
    else if (r->has_len) r->st = r->left ? R_LENGTH : R_IDLE;
    else r->st = R_TO_CLOSE;
    return r->st == R_IDLE ? SRV_RESP_DONE : SRV_RESP_MORE;
}

/* One whole line (without its line end) in the state r->st. */
static srv_resp_state line_done(srv_resp *r, const char *l, size_t n)
{
    switch (r->st) {
    case R_STATUS:
        if (!status_line(r, l, n)) return SRV_RESP_BAD;
        if (r->status >= 200) r->started = true;
        r->st = R_FIELDS;
        return SRV_RESP_MORE;
    case R_FIELDS:
        if (n == 0) return head_end(r);
        return field(r, l, n) ? SRV_RESP_MORE : SRV_RESP_BAD;
    case R_CHUNK_SIZE: {
        unsigned long long size;
        if (!parse_u64(l, n, 16, &size)) return SRV_RESP_BAD;
        r->left = size;
        r->st = size ? R_CHUNK_DATA : R_TRAILER;
        return SRV_RESP_MORE;
    }
    case R_CHUNK_END:
        if (n) return SRV_RESP_BAD;
        r->st = R_CHUNK_SIZE;
        return SRV_RESP_MORE;
    case R_TRAILER:
        if (n == 0) return SRV_RESP_DONE;
        return memchr(l, ':', n) ? SRV_RESP_MORE : SRV_RESP_BAD;
    default: return SRV_RESP_BAD;
    }
}

srv_resp_state srv_resp_feed(srv_resp *r, const char *b, size_t n, size_t *used)
{
    size_t pos = 0;
    while (pos < n) {
        if (!r->due) {
            *used = pos;
            return SRV_RESP_BAD;
        }
        if (r->st == R_TO_CLOSE) {
            pos = n;
            break;
        }
        if (r->st == R_LENGTH || r->st == R_CHUNK_DATA) {
            size_t take = n - pos < r->left ? n - pos : (size_t)r->left;
            pos += take;
            r->left -= take;
            if (r->left) continue;
            if (r->st == R_CHUNK_DATA) {
                r->st = R_CHUNK_END;
                continue;
            }
            r->due = false;
            r->st = R_IDLE;
            *used = pos;
            return SRV_RESP_DONE;
        }
        char c = b[pos++];
        if (c != '\n') {
            if (r->line_n == sizeof r->line) {
                *used = pos;
                return SRV_RESP_BAD;
            }
            r->line[r->line_n++] = c;
            continue;
        }
        size_t ln = r->line_n;
        if (ln && r->line[ln - 1] == '\r') ln--;
        r->line_n = 0;
        srv_resp_state st = line_done(r, r->line, ln);
        if (st == SRV_RESP_BAD || st == SRV_RESP_DONE) {
            if (st == SRV_RESP_DONE) r->due = false, r->st = R_IDLE;
            *used = pos;
            return st;
        }
    }
    *used = pos;
    return SRV_RESP_MORE;
}
