/* imatrix.c - reading llama.cpp's importance matrices (imatrix.h). */
#include "model/imatrix.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "gguf/gguf.h"
#include "tensor/dtype.h"

#define IM_MAX_NAME 4096
#define IM_MAX_VALUES (1ull << 32) /* per entry: far above any model's ne0 x experts */

typedef struct {
    char *name;
    float *v;
    uint64_t n;
} im_entry;

struct imatrix {
    im_entry *e;
    size_t n, cap;
};

void imatrix_free(imatrix *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->n; i++) free(m->e[i].name), free(m->e[i].v);
    free(m->e);
    free(m);
}

size_t imatrix_count(const imatrix *m) { return m ? m->n : 0; }

const float *imatrix_find(const imatrix *m, const char *name, uint64_t *n)
{
    for (size_t i = 0; m && i < m->n; i++)
        if (strcmp(m->e[i].name, name) == 0) {
            *n = m->e[i].n;
            return m->e[i].v;
        }
    return NULL;
}

const float *imatrix_at(const imatrix *m, size_t i, const char **name, uint64_t *n)
{
    *name = m->e[i].name;
    *n = m->e[i].n;
    return m->e[i].v;
}

/* A new entry of n values (zeroed) in *out; PL_EFORMAT (a name twice or
 * holding a NUL) or PL_ENOMEM, error set. */
static int entry_add(imatrix *m, const char *path, const char *name, size_t name_len, uint64_t n, im_entry **out)
{
    /* a NUL inside would cut the name short, and two entries could then share it */
    const char *nul = memchr(name, 0, name_len);
    if (nul)
        return err_set(PL_EFORMAT, "%s: an entry's name holds a NUL byte (at %zu of %zu)", path, (size_t)(nul - name),
                       name_len);
    for (size_t i = 0; i < m->n; i++)
        if (strlen(m->e[i].name) == name_len && memcmp(m->e[i].name, name, name_len) == 0)
            return err_set(PL_EFORMAT, "%s: entry '%.*s' twice", path, (int)name_len, name);
    if (m->n == m->cap) {
        const size_t cap = m->cap ? 2 * m->cap : 64;
        im_entry *e = realloc(m->e, cap * sizeof *e);
        if (!e) return err_set(PL_ENOMEM, "%s: out of memory", path);
        m->e = e, m->cap = cap;
    }
    im_entry *e = &m->e[m->n];
    e->name = strndup(name, name_len);
    e->v = calloc(n ? n : 1, sizeof *e->v);
    e->n = n;
    if (!e->name || !e->v) {
        free(e->name), free(e->v);
        return err_set(PL_ENOMEM, "%s: out of memory for entry '%.*s'", path, (int)name_len, name);
    }
    m->n++;
    *out = e;
    return 0;
}

static int values_check(const char *path, const im_entry *e)
{
    for (uint64_t i = 0; i < e->n; i++)
        if (!isfinite(e->v[i]) || e->v[i] < 0)
            return err_set(PL_EFORMAT, "%s: entry '%s': value %llu is %g (must be finite and >= 0)", path, e->name,
                           (unsigned long long)i, e->v[i]);
    return 0;
}

static float f32_at(const void *base, uint64_t i)
{
    float v;
    memcpy(&v, (const uint8_t *)base + 4 * i, 4);
    return v;
}

static uint64_t elements(const gguf_tensor *t)
{
    uint64_t n = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) n *= t->ne[d];
    return n;
}

/* ------------------------------------------------------------ GGUF */

static bool ends_with(gguf_str s, const char *suffix, size_t *stem)
{
    const size_t k = strlen(suffix);
    if (s.len < k || memcmp(s.ptr + s.len - k, suffix, k) != 0) return false;
    *stem = (size_t)s.len - k;
    return true;
}

static int load_gguf(imatrix *m, const char *path, const void *data, size_t size)
{
    gguf_file *f;
    int rc = gguf_open_mem(&f, data, size, path);
    if (rc) return rc;
    char name[IM_MAX_NAME + 16];
    for (uint64_t i = 0; !rc && i < gguf_tensor_count(f); i++) {
        const gguf_tensor *s = gguf_tensor_at(f, i);
        size_t stem;
        if (!ends_with(s->name, ".in_sum2", &stem)) {
            if (!ends_with(s->name, ".counts", &stem))
                rc = err_set(PL_EFORMAT, "%s: tensor '%.*s' is neither <name>.in_sum2 nor <name>.counts", path,
                             (int)s->name.len, s->name.ptr);
            continue; /* counts are read with their sums */
        }
        if (stem > IM_MAX_NAME) { rc = err_set(PL_EFORMAT, "%s: tensor %llu: name too long", path, (unsigned long long)i); break; }
        snprintf(name, sizeof name, "%.*s.counts", (int)stem, s->name.ptr);
        const gguf_tensor *c = gguf_tensor_find(f, name);
        if (!c) { rc = err_set(PL_EFORMAT, "%s: '%.*s' has sums but no %s", path, (int)stem, s->name.ptr, name); break; }
        if (s->type != DT_F32 || c->type != DT_F32) {
            rc = err_set(PL_EFORMAT, "%s: '%.*s': sums and counts must be f32", path, (int)stem, s->name.ptr);
            break;
        }
        const uint64_t n = elements(s), n_mat = elements(c);
        if (n == 0 || n > IM_MAX_VALUES || n_mat == 0 || n % n_mat != 0) {
            rc = err_set(PL_EFORMAT, "%s: '%.*s': %llu sums are not a whole number of rows for %llu counts", path,
                         (int)stem, s->name.ptr, (unsigned long long)n, (unsigned long long)n_mat);
            break;
        }
        im_entry *e = NULL;
        if ((rc = entry_add(m, path, s->name.ptr, stem, n, &e))) break;
        const uint64_t ne0 = n / n_mat;
        for (uint64_t j = 0; j < n_mat; j++) {
            const float count = f32_at(c->data, j);
            if (!isfinite(count) || count < 0) {
                rc = err_set(PL_EFORMAT, "%s: '%s': count %llu is %g", path, e->name, (unsigned long long)j, count);
                break;
            }
            for (uint64_t k = 0; k < ne0; k++)
                e->v[j * ne0 + k] = count > 0 ? f32_at(s->data, j * ne0 + k) / count : 1.0f;
        }
        if (!rc) rc = values_check(path, e);
    }
    /* every counts tensor belongs to a sums tensor (checked above from the other side) */
    for (uint64_t i = 0; !rc && i < gguf_tensor_count(f); i++) {
        const gguf_tensor *c = gguf_tensor_at(f, i);
        size_t stem;
        if (!ends_with(c->name, ".counts", &stem)) continue;
        snprintf(name, sizeof name, "%.*s.in_sum2", (int)(stem < IM_MAX_NAME ? stem : IM_MAX_NAME), c->name.ptr);
        if (!gguf_tensor_find(f, name))
            rc = err_set(PL_EFORMAT, "%s: '%.*s' has counts but no sums", path, (int)stem, c->name.ptr);
    }
    if (!rc && m->n == 0) rc = err_set(PL_EFORMAT, "%s: no importance matrix entries", path);
    gguf_close(f);
    return rc;
}

/* ---------------------------------------------------------- legacy .dat */

typedef struct {
    const uint8_t *p;
    size_t n, at;
    const char *path;
} rd;

static int rd_i32(rd *r, const char *what, int32_t *v)
{
    if (r->n - r->at < 4) return err_set(PL_EFORMAT, "%s: offset %zu: the file ends in %s", r->path, r->at, what);
    memcpy(v, r->p + r->at, 4);
    r->at += 4;
    return 0;
}

static int load_legacy(imatrix *m, const char *path, const uint8_t *p, size_t size)
{
    rd r = {p, size, 0, path};
    int32_t n_entries = 0;
    int rc = rd_i32(&r, "the entry count", &n_entries);
    if (!rc && n_entries < 1) rc = err_set(PL_EFORMAT, "%s: %d entries", path, n_entries);
    for (int32_t i = 0; !rc && i < n_entries; i++) {
        int32_t len = 0, ncall = 0, nval = 0;
        const size_t at = r.at;
        if ((rc = rd_i32(&r, "a name length", &len))) break;
        if (len < 1 || len > IM_MAX_NAME || (size_t)len > r.n - r.at) {
            rc = err_set(PL_EFORMAT, "%s: offset %zu: entry %d: bad name length %d", path, at, i, len);
            break;
        }
        const char *name = (const char *)r.p + r.at;
        r.at += (size_t)len;
        if ((rc = rd_i32(&r, "a call count", &ncall)) || (rc = rd_i32(&r, "a value count", &nval))) break;
        if (nval < 1 || (size_t)nval > (r.n - r.at) / 4) {
            rc = err_set(PL_EFORMAT, "%s: offset %zu: entry '%.*s': %d values, the file has room for %zu", path,
                         r.at - 4, len, name, nval, (r.n - r.at) / 4);
            break;
        }
        im_entry *e = NULL;
        if ((rc = entry_add(m, path, name, (size_t)len, (uint64_t)nval, &e))) break;
        for (int32_t k = 0; k < nval; k++) {
            const float v = f32_at(r.p + r.at, (uint64_t)k);
            e->v[k] = ncall > 0 ? v / (float)ncall : v;
        }
        r.at += 4 * (size_t)nval;
        rc = values_check(path, e);
    }
    return rc; /* what follows (chunk count, dataset name) is not needed */
}

int imatrix_load_mem(imatrix **out, const void *data, size_t size, const char *name)
{
    imatrix *m = calloc(1, sizeof *m);
    int rc = m ? 0 : err_set(PL_ENOMEM, "%s: out of memory", name);
    if (!rc && size >= 4 && memcmp(data, "GGUF", 4) == 0) rc = load_gguf(m, name, data, size);
    else if (!rc) rc = load_legacy(m, name, data, size);
    if (rc) {
        imatrix_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

int imatrix_load(imatrix **out, const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return err_set(PL_EIO, "%s: cannot open the importance matrix", path);
    uint8_t *buf = NULL;
    const long size = fseek(fp, 0, SEEK_END) == 0 ? ftell(fp) : -1;
    int rc = 0;
    if (size < 0 || fseek(fp, 0, SEEK_SET) != 0) rc = err_set(PL_EIO, "%s: cannot read it", path);
    else if (!(buf = malloc(size ? (size_t)size : 1))) rc = err_set(PL_ENOMEM, "%s: out of memory", path);
    else if (fread(buf, 1, (size_t)size, fp) != (size_t)size) rc = err_set(PL_EIO, "%s: cannot read it", path);
    fclose(fp);
    if (!rc) rc = imatrix_load_mem(out, buf, (size_t)size, path);
    free(buf); /* the entries are copies */
    return rc;
}
