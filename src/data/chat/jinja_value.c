/*
 * The Jinja subset's values with @huggingface/jinja's JavaScript semantics:
 * the arena and buffers they live in, UTF-8/UTF-16 and JavaScript whitespace
 * helpers, JavaScript number printing (String(x), toFixed(1) for floats),
 * truthiness, == (abstract equality) and === on the values' payloads, the
 * text {{ v }} prints, String(v.value) for + and ~, tojson (JSON.stringify
 * with Python json.dumps' separators and indentation, as the reference does),
 * and the conversion of a JSON document into values (JSON.parse: whole
 * numbers become integers, array-index keys come first).
 * Leaves out: evaluation (jinja_eval.c) and the built-ins (jinja_builtin.c).
 */
#include "data/chat/jinja_impl.h"
#include "ctrain/data.h"

#include <cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ arena, buffers */

#define JA_CHUNK (64u << 10)

void *ja_alloc(jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n > a->max || a->total > a->max - n) return NULL;
    if (!a->head || a->head->cap - a->head->used < n) {
        size_t cap = n > JA_CHUNK ? n : JA_CHUNK;
        jchunk *c = malloc(sizeof(jchunk) + 16 + cap);
        if (!c) return NULL;
        c->cap = cap;
        c->used = 0;
        c->next = a->head;
        a->head = c;
    }
    /* data starts 16-aligned after the header */
    uintptr_t base = ((uintptr_t)(a->head + 1) + 15) & ~(uintptr_t)15;
    void *p = (char *)base + a->head->used;
    a->head->used += n;
    a->total += n;
    memset(p, 0, n);
    return p;
}

void ja_free(jarena *a) {
    for (jchunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
    a->total = 0;
}

char *ja_strdup(jarena *a, const char *s, size_t n) {
    char *p = ja_alloc(a, n + 1);
    if (p && n) memcpy(p, s, n);
    return p;
}

void jb_put(jbuf *b, const char *s, size_t n) {
    if (b->over || b->oom || n == 0) return;
    if (n > b->max || b->n > b->max - n) {
        b->over = true;
        return;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void jb_putc(jbuf *b, char c) { jb_put(b, &c, 1); }
void jb_puts(jbuf *b, const char *s) { jb_put(b, s, strlen(s)); }

void jb_free(jbuf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* ------------------------------------------------------------ text */

uint32_t ju_decode(const char *s, size_t n, size_t *len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t k = u[0] < 0x80 ? 1 : u[0] < 0xE0 ? 2 : u[0] < 0xF0 ? 3 : 4;
    if (k > n) k = n;
    *len = k;
    if (k == 1) return u[0];
    uint32_t cp = u[0] & (0x7Fu >> k);
    for (size_t i = 1; i < k; i++) cp = cp << 6 | (u[i] & 0x3Fu);
    return cp;
}

void ju_encode(jbuf *b, uint32_t cp) {
    char s[4];
    size_t n;
    if (cp < 0x80) {
        s[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        s[0] = (char)(0xC0 | cp >> 6);
        s[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        s[0] = (char)(0xE0 | cp >> 12);
        s[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        s[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        s[0] = (char)(0xF0 | cp >> 18);
        s[1] = (char)(0x80 | (cp >> 12 & 0x3F));
        s[2] = (char)(0x80 | (cp >> 6 & 0x3F));
        s[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    jb_put(b, s, n);
}

static bool ju_is_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
}

size_t ju_space(const char *s, size_t n) {
    if (n == 0) return 0;
    unsigned char c = (unsigned char)s[0];
    if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || c == 0x20;
    if (c != 0xC2 && c != 0xE1 && c != 0xE2 && c != 0xE3 && c != 0xEF) return 0;
    size_t len;
    uint32_t cp = ju_decode(s, n, &len);
    return ju_is_space(cp) ? len : 0;
}

bool ju_line_end(uint32_t cp) { return cp == '\n' || cp == '\r' || cp == 0x2028 || cp == 0x2029; }

jstr ju_trim(jstr s, bool left, bool right) {
    size_t k;
    if (left)
        while (s.n && (k = ju_space(s.p, s.n)) > 0) {
            s.p += k;
            s.n -= k;
        }
    if (right)
        while (s.n) {
            /* the last character: step back over continuation bytes */
            size_t i = s.n - 1;
            while (i > 0 && ((unsigned char)s.p[i] & 0xC0) == 0x80) i--;
            if (ju_space(s.p + i, s.n - i) != s.n - i) break;
            s.n = i;
        }
    return s;
}

size_t ju_utf16_len(jstr s) {
    size_t n = 0;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.p[i];
        if ((c & 0xC0) != 0x80) n += c >= 0xF0 ? 2 : 1;
    }
    return n;
}

const char *ju_num(double d, char *buf) {
    if (isnan(d)) return strcpy(buf, "NaN");
    if (isinf(d)) return strcpy(buf, d > 0 ? "Infinity" : "-Infinity");
    if (d == 0) return strcpy(buf, "0");
    char e[40], digits[24];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, d);
        if (strtod(e, NULL) == d) break;
    }
    /* e = [-]D[.DDD]e[+-]XX */
    const char *q = e;
    bool neg = *q == '-';
    if (neg) q++;
    int k = 0;
    for (; *q && *q != 'e'; q++)
        if (*q != '.') digits[k++] = *q;
    while (k > 1 && digits[k - 1] == '0') k--;
    digits[k] = '\0';
    int n = atoi(q + 1) + 1; /* the decimal point sits after n digits */
    char *o = buf;
    if (neg) *o++ = '-';
    if (k <= n && n <= 21) {
        memcpy(o, digits, (size_t)k);
        o += k;
        for (int i = k; i < n; i++) *o++ = '0';
    } else if (0 < n && n <= 21) {
        memcpy(o, digits, (size_t)n);
        o += n;
        *o++ = '.';
        memcpy(o, digits + n, (size_t)(k - n));
        o += k - n;
    } else if (-6 < n && n <= 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -n; i++) *o++ = '0';
        memcpy(o, digits, (size_t)k);
        o += k;
    } else {
        *o++ = digits[0];
        if (k > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)(k - 1));
            o += k - 1;
        }
        o += sprintf(o, "e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
    }
    *o = '\0';
    return buf;
}

/* FloatValue.toString: -0.0, toFixed(1) for whole numbers, else String(x). */
static const char *ju_float(double d, char *buf) {
    if (d == 0 && signbit(d)) return strcpy(buf, "-0.0");
    if (isfinite(d) && floor(d) == d && fabs(d) < 1e21) {
        snprintf(buf, 32, "%.1f", d);
        return buf;
    }
    return ju_num(d, buf);
}

/* ------------------------------------------------------------ errors, values */

jv *jerr(jctx *c, int line, ct_status code, const char *fmt, ...) {
    if (c->st) return NULL;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->st = CT_ERR(code, "%s:%d: %s", c->t->name, line, msg);
    return NULL;
}

void *jalloc(jctx *c, int line, size_t n) {
    void *p = ja_alloc(&c->a, n);
    if (!p) {
        if (c->a.total + n > c->a.max || n > c->a.max)
            jerr(c, line, CT_ERR_OOM, "the render needs more than %zu bytes of memory (memory_max)", c->a.max);
        else
            jerr(c, line, CT_ERR_OOM, "out of memory");
    }
    return p;
}

jv *jv_new(jctx *c, int line, jv_kind kind) {
    jv *v = jalloc(c, line, sizeof *v);
    if (v) v->kind = (uint8_t)kind;
    return v;
}

jv *jv_num(jctx *c, int line, jv_kind kind, double d) {
    jv *v = jv_new(c, line, kind);
    if (v) v->u.d = d;
    return v;
}

jv *jv_bool(jctx *c, bool b) { return b ? c->yes : c->no; }

jv *jv_str(jctx *c, int line, const char *p, size_t n) {
    jv *v = jv_new(c, line, JV_STR);
    if (v) v->u.s = (jstr){p ? p : "", n};
    return v;
}

jv *jv_str_copy(jctx *c, int line, const char *p, size_t n) {
    char *q = jalloc(c, line, n + 1);
    if (!q) return NULL;
    if (n) memcpy(q, p, n);
    return jv_str(c, line, q, n);
}

jv *jv_list(jctx *c, int line, size_t n) {
    jv *v = jv_new(c, line, JV_LIST);
    if (!v) return NULL;
    if (n > (SIZE_MAX / sizeof(jv *)) / 2) return jerr(c, line, CT_ERR_OOM, "a list of %zu items is too large", n);
    v->u.l.it = jalloc(c, line, (n ? n : 1) * sizeof(jv *));
    if (!v->u.l.it) return NULL;
    for (size_t i = 0; i < n; i++) v->u.l.it[i] = c->undef;
    v->u.l.n = n;
    return v;
}

jv *jv_map(jctx *c, int line, jv_kind kind) {
    jv *v = jv_new(c, line, kind);
    if (!v) return NULL;
    v->u.m = jalloc(c, line, sizeof *v->u.m);
    return v->u.m ? v : NULL;
}

jv *jmap_get(const jmap *m, jstr key) {
    for (size_t i = 0; i < m->n; i++)
        if (m->k[i].n == key.n && memcmp(m->k[i].p, key.p, key.n) == 0) return m->v[i];
    return NULL;
}

bool jmap_set(jctx *c, int line, jmap *m, jstr key, jv *val) {
    for (size_t i = 0; i < m->n; i++)
        if (m->k[i].n == key.n && memcmp(m->k[i].p, key.p, key.n) == 0) {
            m->v[i] = val;
            return true;
        }
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 8;
        jstr *k = jalloc(c, line, cap * sizeof *k);
        jv **v = jalloc(c, line, cap * sizeof *v);
        if (!k || !v) return false;
        if (m->n) {
            memcpy(k, m->k, m->n * sizeof *k);
            memcpy(v, m->v, m->n * sizeof *v);
        }
        m->k = k;
        m->v = v;
        m->cap = cap;
    }
    m->k[m->n] = key;
    m->v[m->n++] = val;
    return true;
}

const char *jv_kind_name(const jv *v) {
    static const char *const names[JV_COUNT] = {"UndefinedValue", "NullValue", "BooleanValue", "IntegerValue",
                                                "FloatValue", "StringValue", "ArrayValue", "ObjectValue",
                                                "NamespaceValue", "FunctionValue", "KeywordArgumentsValue"};
    if (v->kind == JV_LIST && v->tuple) return "TupleValue";
    return v->kind < JV_COUNT ? names[v->kind] : "?";
}

/* ------------------------------------------------------------ truth, equality */

bool jv_truthy(const jv *v) {
    switch (v->kind) {
    case JV_BOOL: return v->u.b;
    case JV_INT:
    case JV_FLOAT: return v->u.d != 0 && !isnan(v->u.d);
    case JV_STR: return v->u.s.n > 0;
    case JV_LIST: return v->u.l.n > 0;
    case JV_MAP:
    case JV_KWARGS: return v->u.m->n > 0;
    case JV_NS:
    case JV_FUNC: return true;
    default: return false;
    }
}

/* A JavaScript primitive: what ToPrimitive gives for the payload. */
typedef enum jp_type { JP_UNDEF, JP_NULL, JP_BOOL, JP_NUM, JP_STR, JP_OBJ } jp_type;

static jp_type jp_of(const jv *v) {
    switch (v->kind) {
    case JV_UNDEF: return JP_UNDEF;
    case JV_NULL: return JP_NULL;
    case JV_BOOL: return JP_BOOL;
    case JV_INT:
    case JV_FLOAT: return JP_NUM;
    case JV_STR: return JP_STR;
    default: return JP_OBJ;
    }
}

/* JavaScript's StringToNumber. */
static double jp_str_num(jstr s) {
    s = ju_trim(s, true, true);
    if (s.n == 0) return 0;
    char buf[64];
    if (s.n >= sizeof buf) {
        /* long numerals: only plain digits can still be numbers */
        for (size_t i = 0; i < s.n; i++)
            if (!(s.p[i] >= '0' && s.p[i] <= '9') && s.p[i] != '.' && s.p[i] != 'e' && s.p[i] != 'E' && s.p[i] != '+' &&
                s.p[i] != '-')
                return NAN;
        char *t = malloc(s.n + 1);
        if (!t) return NAN;
        memcpy(t, s.p, s.n);
        t[s.n] = '\0';
        char *end;
        double d = strtod(t, &end);
        bool ok = *end == '\0';
        free(t);
        return ok ? d : NAN;
    }
    memcpy(buf, s.p, s.n);
    buf[s.n] = '\0';
    const char *p = buf;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X' || p[1] == 'o' || p[1] == 'O' || p[1] == 'b' || p[1] == 'B')) {
        int base = (p[1] | 32) == 'x' ? 16 : (p[1] | 32) == 'o' ? 8 : 2;
        if (!p[2]) return NAN;
        double d = 0;
        for (p += 2; *p; p++) {
            int v = *p >= '0' && *p <= '9' ? *p - '0' : (*p | 32) >= 'a' && (*p | 32) <= 'f' ? (*p | 32) - 'a' + 10 : 99;
            if (v >= base) return NAN;
            d = d * base + v;
        }
        return d;
    }
    const char *q = p;
    if (*q == '+' || *q == '-') q++;
    if (strcmp(q, "Infinity") == 0) return p[0] == '-' ? -INFINITY : INFINITY;
    /* StrDecimalLiteral: digits [. digits] | . digits, then an optional exponent */
    size_t digits = 0;
    while (*q >= '0' && *q <= '9') q++, digits++;
    if (*q == '.') {
        q++;
        while (*q >= '0' && *q <= '9') q++, digits++;
    }
    if (!digits) return NAN;
    if (*q == 'e' || *q == 'E') {
        q++;
        if (*q == '+' || *q == '-') q++;
        if (!(*q >= '0' && *q <= '9')) return NAN;
        while (*q >= '0' && *q <= '9') q++;
    }
    if (*q) return NAN;
    return strtod(p, NULL);
}

static bool jp_obj_eq(const jv *x, const jv *y) {
    if (x == y) return true;
    if (x->kind != y->kind) return false;
    switch (x->kind) {
    case JV_MAP:
    case JV_NS:
    case JV_KWARGS: return x->u.m == y->u.m;
    case JV_FUNC: return x->u.f.id == y->u.f.id && x->u.f.self == y->u.f.self;
    default: return false;
    }
}

bool jv_strict_eq(const jv *x, const jv *y) {
    jp_type a = jp_of(x), b = jp_of(y);
    if (a != b) return false;
    switch (a) {
    case JP_UNDEF:
    case JP_NULL: return true;
    case JP_BOOL: return x->u.b == y->u.b;
    case JP_NUM: return x->u.d == y->u.d;
    case JP_STR: return x->u.s.n == y->u.s.n && memcmp(x->u.s.p, y->u.s.p, x->u.s.n) == 0;
    default: return jp_obj_eq(x, y);
    }
}

/* ToPrimitive of an object payload, as a string value. */
static jv *jp_prim(jctx *c, const jv *v) {
    if (v->kind == JV_LIST) {
        jbuf b = {.max = c->a.max};
        if (!jv_raw(c, 0, &b, v)) {
            jb_free(&b);
            return NULL;
        }
        return jv_from_buf(c, 0, &b);
    }
    return jv_str(c, 0, "[object Map]", 12);
}

static bool jp_loose(jctx *c, const jv *x, const jv *y, int depth) {
    jp_type a = jp_of(x), b = jp_of(y);
    if (a == b) return jv_strict_eq(x, y);
    if ((a == JP_UNDEF || a == JP_NULL) && (b == JP_UNDEF || b == JP_NULL)) return true;
    if (a == JP_UNDEF || a == JP_NULL || b == JP_UNDEF || b == JP_NULL || depth > 4) return false;
    if (a == JP_NUM && b == JP_STR) return x->u.d == jp_str_num(y->u.s);
    if (a == JP_STR && b == JP_NUM) return jp_str_num(x->u.s) == y->u.d;
    jv nx = {.kind = JV_INT};
    if (a == JP_BOOL) {
        nx.u.d = x->u.b;
        return jp_loose(c, &nx, y, depth + 1);
    }
    if (b == JP_BOOL) {
        nx.u.d = y->u.b;
        return jp_loose(c, x, &nx, depth + 1);
    }
    if (b == JP_OBJ && y->kind != JV_FUNC) {
        const jv *p = jp_prim(c, y);
        return p && jp_loose(c, x, p, depth + 1);
    }
    if (a == JP_OBJ && x->kind != JV_FUNC) {
        const jv *p = jp_prim(c, x);
        return p && jp_loose(c, p, y, depth + 1);
    }
    return false;
}

bool jv_loose_eq(jctx *c, const jv *x, const jv *y) { return jp_loose(c, x, y, 0); }

/* ------------------------------------------------------------ text forms */

static bool jv_too_deep(jctx *c, int line, int depth) {
    if (depth <= c->t->lim.depth_max) return false;
    jerr(c, line, CT_ERR_ARG, "a value nests more than %d levels deep (depth_max)", c->t->lim.depth_max);
    return true;
}

bool jv_raw(jctx *c, int line, jbuf *b, const jv *v) {
    char num[40];
    switch (v->kind) {
    case JV_UNDEF: jb_puts(b, "undefined"); return true;
    case JV_NULL: jb_puts(b, "null"); return true;
    case JV_BOOL: jb_puts(b, v->u.b ? "true" : "false"); return true;
    case JV_INT:
    case JV_FLOAT: jb_puts(b, ju_num(v->u.d, num)); return true;
    case JV_STR: jb_put(b, v->u.s.p, v->u.s.n); return true;
    case JV_LIST:
        for (size_t i = 0; i < v->u.l.n; i++) {
            if (i) jb_putc(b, ',');
            if (!jv_print(c, line, b, v->u.l.it[i], 1)) return false;
        }
        return true;
    case JV_FUNC: jerr(c, line, CT_ERR_ARG, "a function cannot be turned into text"); return false;
    default: jb_puts(b, "[object Map]"); return true;
    }
}

bool jv_print(jctx *c, int line, jbuf *b, const jv *v, int depth) {
    char num[40];
    if (jv_too_deep(c, line, depth)) return false;
    switch (v->kind) {
    case JV_FLOAT: jb_puts(b, ju_float(v->u.d, num)); return true;
    case JV_LIST:
    case JV_MAP:
    case JV_NS:
    case JV_KWARGS: {
        jjson_opts o = {.indent = -1, .undefined_as_null = false};
        return jv_json(c, line, b, v, &o, depth);
    }
    default: return jv_raw(c, line, b, v);
    }
}

/* JSON.stringify of a string, optionally with non-ASCII escaped per UTF-16
 * code unit (the reference's /[\x7f-\uffff]/g). */
static void jv_json_str(jbuf *b, jstr s, bool ascii) {
    jb_putc(b, '"');
    size_t from = 0;
    for (size_t i = 0; i < s.n;) {
        unsigned char ch = (unsigned char)s.p[i];
        const char *esc = NULL;
        char tmp[16];
        size_t len = 1;
        if (ch == '"') esc = "\\\"";
        else if (ch == '\\') esc = "\\\\";
        else if (ch == '\b') esc = "\\b";
        else if (ch == '\f') esc = "\\f";
        else if (ch == '\n') esc = "\\n";
        else if (ch == '\r') esc = "\\r";
        else if (ch == '\t') esc = "\\t";
        else if (ch < 0x20) {
            snprintf(tmp, sizeof tmp, "\\u%04x", ch);
            esc = tmp;
        } else if (ascii && ch >= 0x7F) {
            uint32_t cp = ju_decode(s.p + i, s.n - i, &len);
            if (cp < 0x10000) {
                snprintf(tmp, sizeof tmp, "\\u%04x", (unsigned)cp);
            } else {
                cp -= 0x10000;
                snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", (unsigned)(0xD800 + (cp >> 10)),
                         (unsigned)(0xDC00 + (cp & 0x3FF)));
            }
            esc = tmp;
        }
        if (esc) {
            jb_put(b, s.p + from, i - from);
            jb_puts(b, esc);
            i += len;
            from = i;
        } else {
            i++;
        }
    }
    jb_put(b, s.p + from, s.n - from);
    jb_putc(b, '"');
}

static void jv_json_pad(jbuf *b, const jjson_opts *o, int depth) {
    jb_putc(b, '\n');
    for (int i = 0; i < depth * o->indent; i++) jb_putc(b, ' ');
}

bool jv_json(jctx *c, int line, jbuf *b, const jv *v, const jjson_opts *o, int depth) {
    char num[40];
    if (jv_too_deep(c, line, depth)) return false;
    bool ind = o->indent > 0;
    jstr item = o->item_sep.p ? o->item_sep : ind ? (jstr){",", 1} : (jstr){", ", 2};
    jstr key = o->key_sep.p ? o->key_sep : (jstr){": ", 2};
    switch (v->kind) {
    case JV_NULL: jb_puts(b, "null"); return true;
    case JV_UNDEF: jb_puts(b, o->undefined_as_null ? "null" : "undefined"); return true;
    case JV_BOOL: jb_puts(b, v->u.b ? "true" : "false"); return true;
    case JV_INT:
    case JV_FLOAT: jb_puts(b, isfinite(v->u.d) ? ju_num(v->u.d, num) : "null"); return true;
    case JV_STR: jv_json_str(b, v->u.s, o->ensure_ascii); return true;
    case JV_LIST:
        if (v->tuple) break;
        jb_putc(b, '[');
        for (size_t i = 0; i < v->u.l.n; i++) {
            if (i) jb_put(b, item.p, item.n);
            if (ind) jv_json_pad(b, o, depth + 1);
            if (!jv_json(c, line, b, v->u.l.it[i], o, depth + 1)) return false;
        }
        if (ind && v->u.l.n) jv_json_pad(b, o, depth);
        jb_putc(b, ']');
        return true;
    case JV_MAP:
    case JV_NS: {
        const jmap *m = v->u.m;
        jb_putc(b, '{');
        for (size_t i = 0; i < m->n; i++) {
            if (i) jb_put(b, item.p, item.n);
            if (ind) jv_json_pad(b, o, depth + 1);
            jv_json_str(b, m->k[i], o->ensure_ascii);
            jb_put(b, key.p, key.n);
            if (!jv_json(c, line, b, m->v[i], o, depth + 1)) return false;
        }
        if (ind && m->n) jv_json_pad(b, o, depth);
        jb_putc(b, '}');
        return true;
    }
    default: break;
    }
    jerr(c, line, CT_ERR_ARG, "cannot convert a %s to JSON", jv_kind_name(v));
    return false;
}

jv *jv_from_buf(jctx *c, int line, jbuf *b) {
    jv *v = NULL;
    if (b->over) jerr(c, line, CT_ERR_OOM, "a string would exceed %zu bytes (memory_max)", b->max);
    else if (b->oom) jerr(c, line, CT_ERR_OOM, "out of memory");
    else v = jv_str_copy(c, line, b->p, b->n);
    jb_free(b);
    return v;
}

/* ------------------------------------------------------------ from JSON */

/* A key that is a JavaScript array index ("0", "17", below 2^32 - 1). */
static bool jv_index_key(jstr k, double *val) {
    if (k.n == 0 || k.n > 10 || (k.n > 1 && k.p[0] == '0')) return false;
    double d = 0;
    for (size_t i = 0; i < k.n; i++) {
        if (k.p[i] < '0' || k.p[i] > '9') return false;
        d = d * 10 + (k.p[i] - '0');
    }
    *val = d;
    return d < 4294967295.0;
}

static bool jv_utf8_ok(jctx *c, const char *s) {
    size_t n = strlen(s);
    if (ct_utf8_valid_prefix(s, n) == n) return true;
    jerr(c, 0, CT_ERR_FORMAT, "a string given to the template is not valid UTF-8");
    return false;
}

jv *jv_from_json(jctx *c, const cJSON *j, int depth) {
    if (depth > c->t->lim.depth_max)
        return jerr(c, 0, CT_ERR_ARG, "a variable nests more than %d levels deep (depth_max)", c->t->lim.depth_max);
    if (cJSON_IsNull(j)) return c->null;
    if (cJSON_IsTrue(j)) return c->yes;
    if (cJSON_IsFalse(j)) return c->no;
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        return jv_num(c, 0, isfinite(d) && floor(d) == d ? JV_INT : JV_FLOAT, d);
    }
    if (cJSON_IsString(j)) {
        if (!jv_utf8_ok(c, j->valuestring)) return NULL;
        return jv_str(c, 0, j->valuestring, strlen(j->valuestring));
    }
    if (cJSON_IsArray(j)) {
        jv *l = jv_list(c, 0, (size_t)cJSON_GetArraySize(j));
        size_t i = 0;
        for (const cJSON *e = j->child; l && e; e = e->next)
            if (!(l->u.l.it[i++] = jv_from_json(c, e, depth + 1))) return NULL;
        return l;
    }
    if (cJSON_IsObject(j)) {
        jv *m = jv_map(c, 0, JV_MAP);
        for (const cJSON *e = j->child; m && e; e = e->next) {
            if (!jv_utf8_ok(c, e->string)) return NULL;
            jv *v = jv_from_json(c, e, depth + 1);
            if (!v || !jmap_set(c, 0, m->u.m, (jstr){e->string, strlen(e->string)}, v)) return NULL;
        }
        if (!m) return NULL;
        /* array-index keys first, in increasing order (insertion sort: small maps) */
        jmap *mp = m->u.m;
        size_t n_idx = 0;
        for (size_t i = 0; i < mp->n; i++) {
            double di, dj;
            if (!jv_index_key(mp->k[i], &di)) continue;
            jstr k = mp->k[i];
            jv *v = mp->v[i];
            size_t at = n_idx;
            while (at > 0 && jv_index_key(mp->k[at - 1], &dj) && dj > di) at--;
            memmove(mp->k + at + 1, mp->k + at, (i - at) * sizeof *mp->k);
            memmove(mp->v + at + 1, mp->v + at, (i - at) * sizeof *mp->v);
            mp->k[at] = k;
            mp->v[at] = v;
            n_idx++;
        }
        return m;
    }
    return jerr(c, 0, CT_ERR_ARG, "a variable holds a JSON value of an unknown kind");
}
