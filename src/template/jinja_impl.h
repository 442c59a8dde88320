/* jinja_impl.h - the inside of the Jinja interpreter: values, the arena they
 * live in, tokens and the syntax tree. Only src/template/ includes this.
 *
 * Everything one render allocates (tokens, nodes, values, strings, output)
 * comes from one arena that is freed whole at the end: values never need a
 * free of their own, and a failed render cannot leak. The arena, the output,
 * the evaluation steps and the nesting depth are each capped (jinja.h) so a
 * hostile template ends in a clear error, never in a hang or an OOM.
 *
 * Values follow Python's data model as jinja2 sees it: strings are UTF-8
 * (lengths and indices count code points), ints are 64-bit, lists and dicts
 * are shared by reference and keep insertion order.
 */
#ifndef PL_TEMPLATE_JINJA_IMPL_H
#define PL_TEMPLATE_JINJA_IMPL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "template/jinja.h"

/* ------------------------------------------------------------ arena */

typedef struct jarena_chunk {
    struct jarena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} jarena_chunk;

typedef struct jctx jctx;

/* ------------------------------------------------------------ values */

typedef enum {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT,
    JV_NS,    /* namespace(): a dict whose attributes may be assigned */
    JV_LOOP,  /* the `loop` variable of a for */
    JV_FUNC,  /* a builtin function or a bound method */
    JV_MACRO, /* a {% macro %} */
} jv_kind;

/* what a JV_LIST stands for in Python: a list, a tuple, or the generator
 * that map/select/reject/unique return (not JSON, no len()) */
enum { JV_LIST_PLAIN = 0, JV_LIST_TUPLE = 1, JV_LIST_GEN = 2 };

typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jfunc jfunc;
typedef struct jloop jloop;
typedef struct jmacro jmacro;

typedef struct {
    jv_kind k;
    size_t n;          /* JV_STR: bytes; JV_LIST: JV_LIST_PLAIN, _TUPLE or _GEN */
    union {
        bool b;
        int64_t i;
        double f;
        const char *s; /* JV_STR: UTF-8, n bytes; JV_UNDEF: the name, or NULL */
        jlist *l;
        jdict *d;
        jfunc *fn;
        jloop *loop;
        jmacro *m;
    };
} jv;

struct jlist {
    jv *v;
    size_t n, cap;
};

struct jdict {
    jv *keys, *vals;
    size_t n, cap;
};

struct jloop {
    size_t index0, length;
    jv prev, next;
    bool has_prev, has_next;
    jv items;     /* the list being walked (for loop.cycle) */
};

typedef jv (*jbuiltin_fn)(jctx *c, const jfunc *fn, const jv *args, size_t nargs, const char *const *kwnames,
                          const jv *kwvals, size_t nkw);

struct jfunc {
    const char *name;
    jbuiltin_fn fn;
    jv self; /* bound methods: the object */
};

/* ------------------------------------------------------------ tokens */

typedef enum {
    JT_EOF, JT_DATA, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END,
    JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP,
} jtok_kind;

typedef struct {
    jtok_kind k;
    const char *s; /* DATA/STRING: decoded text; NAME/OP: the text */
    size_t n;
    int64_t i;
    double f;
    int line;
} jtok;

/* ------------------------------------------------------------ syntax tree */

typedef enum {
    /* expressions */
    JN_CONST, JN_NAME, JN_LIST, JN_TUPLE, JN_DICT, JN_ATTR, JN_ITEM, JN_SLICE, JN_CALL, JN_FILTER, JN_TEST,
    JN_UNARY, JN_BINARY, JN_AND, JN_OR, JN_NOT, JN_COMPARE, JN_COND,
    /* statements */
    JN_BODY, JN_OUTPUT, JN_TEXT, JN_IF, JN_FOR, JN_SET, JN_SET_BLOCK, JN_MACRO, JN_CALL_BLOCK, JN_BREAK,
    JN_CONTINUE,
} jnode_kind;

typedef struct jnode jnode;
struct jnode {
    jnode_kind k;
    int line;
    const char *name; /* NAME, ATTR, FILTER, TEST, MACRO, SET target; BINARY/UNARY/COMPARE: operator(s) */
    jv value;         /* CONST */
    jnode **kids;     /* see the parser for each kind's layout */
    size_t nkids;
    const char **names; /* CALL/FILTER/TEST: keyword names of the kids at the tail; FOR: targets; MACRO: params */
    size_t nnames;
    size_t nkw;       /* CALL/FILTER/TEST: how many tail kids are keyword arguments */
    int flag;         /* TEST: negated; SET: attribute target; FOR: has if-filter; TEXT: none */
};

struct jmacro {
    jnode *def;
    struct jframe *closure;
};

/* ------------------------------------------------------------ context */

typedef struct jframe {
    struct jframe *parent;
    const char **names;
    jv *vals;
    size_t n, cap;
} jframe;

typedef struct {
    char *s;
    size_t n, cap;
} jbuf;

struct jctx {
    jarena_chunk *chunks;
    size_t arena_bytes;
    jinja_limits lim;
    jmp_buf fail;      /* every error longjmps here; the arena is freed after */
    char err[512];
    int err_code;
    uint64_t steps;
    int depth;
    jbuf *out;         /* where output goes now (macros and set blocks swap it) */
    jframe *globals;
    int loop_ctl;      /* 1 break, 2 continue pending */
    /* parser state */
    const jtok *toks;
    size_t ntok, pos;
};

/* ------------------------------------------------------------ functions */

void *jarena_alloc(jctx *c, size_t n);
char *jarena_strdup(jctx *c, const char *s, size_t n);
_Noreturn void jfail(jctx *c, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void jstep(jctx *c);

void jbuf_add(jctx *c, jbuf *b, const char *s, size_t n);
void jbuf_addc(jctx *c, jbuf *b, char ch);
void jbuf_addf(jctx *c, jbuf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static inline jv jv_undef(const char *name) { jv v = {.k = JV_UNDEF}; v.s = name; return v; }
static inline jv jv_none(void) { jv v = {.k = JV_NONE}; return v; }
static inline jv jv_bool(bool b) { jv v = {.k = JV_BOOL}; v.b = b; return v; }
static inline jv jv_int(int64_t i) { jv v = {.k = JV_INT}; v.i = i; return v; }
static inline jv jv_float(double f) { jv v = {.k = JV_FLOAT}; v.f = f; return v; }
jv jv_str(jctx *c, const char *s, size_t n); /* copies */
static inline jv jv_str_ref(const char *s, size_t n) { jv v = {.k = JV_STR, .n = n}; v.s = s; return v; }
jv jv_list_new(jctx *c, size_t cap);
jv jv_dict_new(jctx *c, size_t cap);
void jv_list_push(jctx *c, jv list, jv item);
void jv_dict_set(jctx *c, jv dict, jv key, jv val);
bool jv_dict_get(jv dict, const char *key, size_t n, jv *out);
bool jv_dict_get_v(jv dict, jv key, jv *out);
jv jv_func(jctx *c, const char *name, jbuiltin_fn fn, jv self);

const char *jv_type_name(jv v);
bool jv_truthy(jv v);
bool jv_equal(jv a, jv b);
int jv_compare(jctx *c, int line, jv a, jv b); /* <0, 0, >0; fails on types Python cannot order */
bool jv_is_number(jv v);
double jv_num(jv v);
void jv_to_str(jctx *c, jbuf *b, jv v);   /* str(v) as Python prints it */
void jv_to_repr(jctx *c, jbuf *b, jv v);  /* repr(v) */
jv jv_stringify(jctx *c, jv v);           /* str(v) as a string value */
void jv_to_json(jctx *c, int line, jbuf *b, jv v, int indent, int level, bool sort_keys);
void jfmt_float(char *buf, size_t size, double f); /* Python's repr of a float */
jv jv_from_json(jctx *c, const void *json_t_ptr, int depth);
size_t jutf8_len(const char *s, size_t n);
size_t jutf8_offset(const char *s, size_t n, size_t cp); /* byte offset of code point cp (clamped) */
jv jv_iterable_list(jctx *c, int line, jv v);  /* a list of what `for` walks (dict: keys, str: chars) */

/* lexer, parser, evaluator */
int jlex(jctx *c, const char *src, size_t n, jtok **toks, size_t *ntok);
jnode *jparse(jctx *c);
void jeval_body(jctx *c, jnode *body, jframe *f);
jv jeval(jctx *c, jnode *e, jframe *f);
jv jcall(jctx *c, int line, jv fn, const jv *args, size_t nargs, const char *const *kwn, const jv *kwv, size_t nkw);
jframe *jframe_new(jctx *c, jframe *parent);
void jframe_set(jctx *c, jframe *f, const char *name, jv v);
bool jframe_get(jframe *f, const char *name, jv *out);

/* builtins */
jv jattr(jctx *c, int line, jv obj, const char *name, size_t n);
jv jitem(jctx *c, int line, jv obj, jv key);
jv jfilter(jctx *c, int line, const char *name, jv v, const jv *args, size_t nargs, const char *const *kwn,
           const jv *kwv, size_t nkw);
bool jtest(jctx *c, int line, const char *name, jv v, const jv *args, size_t nargs);
bool jfilter_known(const char *name);
bool jtest_known(const char *name);
void jfail_raised(jctx *c, const char *msg, size_t n) __attribute__((noreturn));
void jglobals_install(jctx *c, jframe *g);

#endif
