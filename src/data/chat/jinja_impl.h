/*
 * Inside the Jinja subset (data/chat/jinja.h): the tokens jinja_lex.c makes, the
 * syntax tree jinja_parse.c builds, the values jinja_value.c and
 * jinja_eval.c compute with, and the arena both allocate from. Each piece
 * mirrors the matching part of @huggingface/jinja (lexer.ts, parser.ts,
 * runtime.ts), whose behaviour is the definition.
 * Never installed; nothing outside src/data/chat/jinja*.c, chat_template.c (for
 * the JavaScript whitespace helpers) and the tests includes it.
 */
#ifndef CT_JINJA_IMPL_H
#define CT_JINJA_IMPL_H

#include "data/chat/jinja.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct jstr {
    const char *p;
    size_t n; /* bytes */
} jstr;

/* ------------------------------------------------------------ arena */

/* Bump allocator over malloc'd chunks, counting every byte against max. */
typedef struct jchunk {
    struct jchunk *next;
    size_t used, cap; /* bytes of the data after the header */
} jchunk;
typedef struct jarena {
    jchunk *head;
    size_t total; /* bytes allocated so far */
    size_t max;   /* bytes allowed */
} jarena;
/* n bytes, 16-byte aligned, zero-filled; NULL when over max or out of memory
 * (no error set: the caller names the limit). */
void *ja_alloc(jarena *a, size_t n);
void ja_free(jarena *a);
/* A copy of s[0..n) plus a NUL, or NULL. */
char *ja_strdup(jarena *a, const char *s, size_t n);

/* A growable malloc'd byte buffer with a size limit. */
typedef struct jbuf {
    char *p;
    size_t n, cap;
    size_t max;   /* bytes allowed */
    bool over;    /* max would have been exceeded */
    bool oom;     /* realloc failed */
} jbuf;
void jb_put(jbuf *b, const char *s, size_t n);
void jb_putc(jbuf *b, char c);
void jb_puts(jbuf *b, const char *s);
void jb_free(jbuf *b);

/* ------------------------------------------------------------ text helpers */

/* Code point of the UTF-8 sequence at s[0..n) (valid UTF-8 assumed), its
 * length in *len. */
uint32_t ju_decode(const char *s, size_t n, size_t *len);
/* Append the UTF-8 of cp. */
void ju_encode(jbuf *b, uint32_t cp);
/* Bytes of the JavaScript whitespace character (\s: tab, LF, VT, FF, CR,
 * space, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F,
 * U+3000, U+FEFF) at s[0..n), or 0. */
size_t ju_space(const char *s, size_t n);
/* Whether cp ends a line for a JavaScript ^ in multiline mode. */
bool ju_line_end(uint32_t cp);
/* s without JavaScript whitespace at the left and/or right. */
jstr ju_trim(jstr s, bool left, bool right);
/* Length of s in UTF-16 code units, as JavaScript's .length counts. */
size_t ju_utf16_len(jstr s);
/* JavaScript's String(number): shortest round-trip digits, exponent form
 * outside 1e-7..1e21. buf has room for 32 bytes. */
const char *ju_num(double d, char *buf);

/* ------------------------------------------------------------ tokens */

typedef enum jtok_type {
    JT_TEXT = 0,
    JT_NUMBER = 1,
    JT_STRING = 2,
    JT_IDENT = 3,
    JT_EQUALS = 4,    /* = */
    JT_LPAREN = 5,
    JT_RPAREN = 6,
    JT_OPEN_STMT = 7, /* {% */
    JT_CLOSE_STMT = 8,
    JT_OPEN_EXPR = 9, /* {{ */
    JT_CLOSE_EXPR = 10,
    JT_LBRACKET = 11,
    JT_RBRACKET = 12,
    JT_LBRACE = 13,
    JT_RBRACE = 14,
    JT_COMMA = 15,
    JT_DOT = 16,
    JT_COLON = 17,
    JT_PIPE = 18,
    JT_ADD = 19,      /* + - ~ */
    JT_MUL = 20,      /* * / // % */
    JT_POW = 21,      /* ** */
    JT_CMP = 22,      /* < > <= >= == != */
    JT_UNARY = 23,    /* a lone + or - before an operand */
    JT_COMMENT = 24,
    JT_COUNT
} jtok_type;

typedef struct jtok {
    uint8_t type; /* jtok_type */
    jstr v;       /* the text (string literals: unescaped) */
    int line;     /* line of the template it starts on (1-based) */
} jtok;

/* Preprocess and tokenise src as @huggingface/jinja's lexer does (trim_blocks
 * and lstrip_blocks on). Tokens and their strings live in a (the template's
 * arena); *toks is an array there. Errors: CT_ERR_FORMAT "NAME:LINE: ..." for
 * what the lexer refuses (an unterminated string or comment, a bad escape, an
 * unexpected character), CT_ERR_OOM. */
ct_status jinja_lex(jarena *a, const char *name, const char *src, size_t len, jtok **toks, size_t *n);

/* ------------------------------------------------------------ syntax tree */

typedef enum jnode_kind {
    /* statements */
    JN_TEXT = 0,     /* s */
    JN_OUTPUT = 1,   /* {{ a }} */
    JN_IF = 2,       /* if a: v else w */
    JN_FOR = 3,      /* for a in b [if c]: v else w */
    JN_SET = 4,      /* set a = b */
    JN_BREAK = 5,
    JN_CONTINUE = 6,
    JN_COMMENT = 7,
    /* expressions */
    JN_STR = 8,      /* s */
    JN_INT = 9,      /* num */
    JN_FLOAT = 10,   /* num */
    JN_NAME = 11,    /* s */
    JN_LIST = 12,    /* v */
    JN_TUPLE = 13,   /* v */
    JN_DICT = 14,    /* keys v, values w */
    JN_MEMBER = 15,  /* a.b (flag: a[b]); b may be a JN_SLICE */
    JN_SLICE = 16,   /* a:b:c, each may be NULL */
    JN_CALL = 17,    /* a(v) */
    JN_KWARG = 18,   /* s = a */
    JN_FILTER = 19,  /* a | s(v) (flag: with parentheses); op: jfilter */
    JN_TEST = 20,    /* a is [not (flag)] s; op: jtest */
    JN_UNARY = 21,   /* op ('!' not, '-', '+') a */
    JN_BINARY = 22,  /* a op b; op: jbinop */
    JN_TERNARY = 23, /* b if a else c */
    JN_SELECT = 24,  /* a if b (no else) */
    JN_COUNT
} jnode_kind;

typedef enum jbinop {
    JB_OR = 0, JB_AND, JB_EQ, JB_NE, JB_LT, JB_GT, JB_LE, JB_GE, JB_IN, JB_NOTIN,
    JB_ADD, JB_SUB, JB_CONCAT, JB_MUL, JB_DIV, JB_FLOORDIV, JB_MOD, JB_POW, JB_COUNT
} jbinop;

typedef struct jnode jnode;
struct jnode {
    uint8_t kind;  /* jnode_kind */
    uint8_t op;
    bool flag;
    int line;
    jstr s;
    double num;
    jnode *a, *b, *c;
    jnode **v, **w;
    size_t nv, nw;
};

/* The filters, tests, functions and methods of the subset (name tables in
 * jinja_parse.c, behaviour in jinja_eval.c). */
typedef enum jfilter {
    JF_ABS = 0, JF_BOOL, JF_CAPITALIZE, JF_DEFAULT, JF_FIRST, JF_FLOAT, JF_INDENT, JF_INT, JF_ITEMS,
    JF_JOIN, JF_LAST, JF_LENGTH, JF_LIST, JF_LOWER, JF_REPLACE, JF_REVERSE, JF_SAFE, JF_STRING,
    JF_TITLE, JF_TOJSON, JF_TRIM, JF_UPPER, JF_COUNT
} jfilter;
typedef enum jtest {
    JTE_BOOLEAN = 0, JTE_CALLABLE, JTE_DEFINED, JTE_EVEN, JTE_FALSE, JTE_INTEGER, JTE_ITERABLE,
    JTE_LOWER, JTE_MAPPING, JTE_NONE, JTE_NUMBER, JTE_ODD, JTE_SEQUENCE, JTE_STRING, JTE_TRUE,
    JTE_UNDEFINED, JTE_UPPER, JTE_COUNT
} jtest;
typedef enum jfunc {
    /* globals */
    JFN_RAISE = 0, JFN_NAMESPACE, JFN_RANGE,
    /* string methods */
    JFN_UPPER, JFN_LOWER, JFN_STRIP, JFN_TITLE, JFN_CAPITALIZE, JFN_RSTRIP, JFN_LSTRIP,
    JFN_STARTSWITH, JFN_ENDSWITH, JFN_SPLIT, JFN_REPLACE,
    /* dict methods */
    JFN_GET, JFN_ITEMS, JFN_KEYS, JFN_VALUES, JFN_COUNT
} jfunc;
extern const char *const jinja_filter_names[JF_COUNT];
extern const char *const jinja_test_names[JTE_COUNT];
extern const char *const jinja_func_names[JFN_COUNT];
/* Index of name in table[0..n), or -1. */
int jinja_lookup(const char *const *table, int n, jstr name);

struct ct_jinja {
    char *name;           /* owned */
    ct_jinja_limits lim;
    jarena arena;         /* tokens, tree and their strings */
    jnode **body;
    size_t n_body;
};

/* Parse tokens into t->body (jinja_parse.c). */
ct_status jinja_parse_tokens(ct_jinja *t, const jtok *toks, size_t n);

/* ------------------------------------------------------------ values */

typedef enum jv_kind {
    JV_UNDEF = 0, JV_NULL, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_MAP, JV_NS, JV_FUNC,
    JV_KWARGS, JV_COUNT
} jv_kind;

typedef struct jv jv;
typedef struct jmap {
    jstr *k;
    jv **v;
    size_t n, cap;
} jmap;
struct jv {
    uint8_t kind;  /* jv_kind */
    bool tuple;    /* JV_LIST made by a tuple literal */
    union {
        bool b;
        double d;                               /* JV_INT and JV_FLOAT: JavaScript numbers */
        jstr s;
        struct { jv **it; size_t n; } l;
        jmap *m;                                /* JV_MAP, JV_NS, JV_KWARGS */
        struct { int id; jv *self; } f;         /* a jfunc, bound to self for methods */
    } u;
};

/* A render in progress. */
typedef struct jenv {
    struct jenv *parent;
    jmap vars;
} jenv;
typedef struct jctx {
    const ct_jinja *t;
    jarena a;        /* values of this render */
    jbuf out;        /* the rendered text */
    int64_t steps;
    ct_status st;    /* first error (CT_OK while none) */
    jv *undef, *null, *yes, *no;
} jctx;

/* Record an error "NAME:LINE: message" (the first one wins); returns NULL so
 * value-returning code can `return jerr(...)`. */
jv *jerr(jctx *c, int line, ct_status code, const char *fmt, ...) CT_PRINTF(4, 5);
/* An allocation of the render failed or passed memory_max: records the error. */
void *jalloc(jctx *c, int line, size_t n);

jv *jv_new(jctx *c, int line, jv_kind kind);
jv *jv_num(jctx *c, int line, jv_kind kind, double d);
jv *jv_bool(jctx *c, bool b);
jv *jv_str(jctx *c, int line, const char *p, size_t n);         /* borrows p */
jv *jv_str_copy(jctx *c, int line, const char *p, size_t n);    /* copies p */
jv *jv_list(jctx *c, int line, size_t n);                       /* n undefined items */
jv *jv_map(jctx *c, int line, jv_kind kind);
/* Set key -> val (replacing an existing key in place); false on OOM (error set). */
bool jmap_set(jctx *c, int line, jmap *m, jstr key, jv *val);
jv *jmap_get(const jmap *m, jstr key); /* NULL when absent */

/* JavaScript truthiness as @huggingface/jinja's __bool__ defines it. */
bool jv_truthy(const jv *v);
/* JavaScript's == and === on the values' payloads (lists, dicts, namespaces
 * and functions compare by identity). */
bool jv_loose_eq(jctx *c, const jv *x, const jv *y);
bool jv_strict_eq(const jv *x, const jv *y);
/* Append the text {{ v }} prints (RuntimeValue.toString). false on error. */
bool jv_print(jctx *c, int line, jbuf *b, const jv *v, int depth);
/* Append String(v.value) as JavaScript's + and ~ use it. false on error. */
bool jv_raw(jctx *c, int line, jbuf *b, const jv *v);
/* tojson: indent < 0 for none; seps NULL for the defaults. */
typedef struct jjson_opts {
    int indent;
    bool ensure_ascii;
    bool undefined_as_null;
    jstr item_sep, key_sep; /* p == NULL: defaults */
} jjson_opts;
bool jv_json(jctx *c, int line, jbuf *b, const jv *v, const jjson_opts *o, int depth);
/* The value a JSON document gives (as JSON.parse + convertToRuntimeValues). */
jv *jv_from_json(jctx *c, const struct cJSON *j, int depth);
/* A string value made from a finished jbuf (checks its flags; frees it). */
jv *jv_from_buf(jctx *c, int line, jbuf *b);
const char *jv_kind_name(const jv *v); /* "StringValue", ... as the reference names them */

/* Evaluate (jinja_eval.c). */
jv *jinja_eval(jctx *c, jenv *env, const jnode *n);
/* ": 'NAME' is undefined" for an expression that names what it reads (a
 * variable, a.b, a['b'], a[0]) into buf[cap], else ""; for errors on an
 * undefined value. Returns buf. */
const char *jinja_undefined_name(const jnode *n, char *buf, size_t cap);
/* Built-ins (jinja_builtin.c): filter, test, call of a function value. */
jv *jinja_filter(jctx *c, jenv *env, const jnode *n, jv *operand);
jv *jinja_test(jctx *c, const jnode *n, jv *operand);
jv *jinja_call(jctx *c, int line, jv *fn, jv **args, size_t nargs, jmap *kwargs);

#endif
