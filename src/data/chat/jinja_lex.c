/*
 * The Jinja subset's lexer: @huggingface/jinja's lexer.ts in C. First the
 * preprocessing its Template constructor applies (drop one trailing newline;
 * lstrip_blocks: spaces and tabs at the start of a line before {% {# {-; 
 * trim_blocks: the newline after %} #} -}; remove {% generation %} and
 * {% endgeneration %}, honouring their - markers), each step the exact
 * regular-expression replacement of the reference, then the token loop with
 * its whitespace control ({%- -%} {{- -}} {#- -#}), string escapes, numbers
 * and operators. Every byte keeps the line it had in the original text, so
 * errors name the template's own lines.
 * Leaves out: building the tree (jinja_parse.c).
 */
#include "data/chat/jinja_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Text with the original line of each byte. */
typedef struct lx_text {
    char *p;
    int *line;
    size_t n, cap;
    bool oom;
} lx_text;

static void lx_push(lx_text *t, const char *s, const int *line, size_t n) {
    if (t->oom || n == 0) return;
    if (t->n + n > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->n + n) cap *= 2;
        char *p = realloc(t->p, cap + 1);
        int *l = p ? realloc(t->line, (cap + 1) * sizeof *l) : NULL;
        if (p) t->p = p;
        if (l) t->line = l;
        if (!p || !l) {
            t->oom = true;
            return;
        }
        t->cap = cap;
    }
    memcpy(t->p + t->n, s, n);
    memcpy(t->line + t->n, line, n * sizeof *line);
    t->n += n;
}

static void lx_free(lx_text *t) {
    free(t->p);
    free(t->line);
    *t = (lx_text){0};
}

/* A UTF-8 sequence's length from its first byte (valid UTF-8 assumed). */
static size_t lx_seq(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

/* lstrip_blocks: /^[ \t]*({[#%-])/gm -> "$1" */
static void lx_lstrip(lx_text *out, const lx_text *in) {
    bool line_start = true;
    for (size_t i = 0; i < in->n;) {
        if (line_start) {
            size_t k = i;
            while (k < in->n && (in->p[k] == ' ' || in->p[k] == '\t')) k++;
            if (k + 1 < in->n && in->p[k] == '{' && strchr("#%-", in->p[k + 1]) && in->p[k + 1]) i = k;
        }
        size_t len = lx_seq((unsigned char)in->p[i]), l;
        if (len > in->n - i) len = in->n - i;
        line_start = ju_line_end(ju_decode(in->p + i, in->n - i, &l));
        lx_push(out, in->p + i, in->line + i, len);
        i += len;
    }
}

/* trim_blocks: /([#%-]})\n/g -> "$1" */
static void lx_trim(lx_text *out, const lx_text *in) {
    size_t i = 0, from = 0;
    if (in->n == 0) return;
    while (i + 2 < in->n) {
        if ((in->p[i] == '#' || in->p[i] == '%' || in->p[i] == '-') && in->p[i + 1] == '}' && in->p[i + 2] == '\n') {
            lx_push(out, in->p + from, in->line + from, i + 2 - from);
            i += 3;
            from = i;
        } else {
            i++;
        }
    }
    lx_push(out, in->p + from, in->line + from, in->n - from);
}

/* The JavaScript whitespace run at s[i..n): its end. */
static size_t lx_space_run(const char *s, size_t n, size_t i) {
    size_t k;
    while (i < n && (k = ju_space(s + i, n - i)) > 0) i += k;
    return i;
}

/* Whether a {% generation %} / {% endgeneration %} tag starts at s[i]; its
 * end, lstrip and rstrip markers. /{%(-?)\s*(?:end)?generation\s*(-?)%}/ */
static bool lx_generation_tag(const char *s, size_t n, size_t i, size_t *end, bool *lstrip, bool *rstrip) {
    if (i + 2 > n || s[i] != '{' || s[i + 1] != '%') return false;
    i += 2;
    *lstrip = i < n && s[i] == '-';
    if (*lstrip) i++;
    i = lx_space_run(s, n, i);
    if (i + 3 <= n && memcmp(s + i, "end", 3) == 0 && !(i + 10 <= n && memcmp(s + i, "generation", 10) == 0)) i += 3;
    if (i + 10 > n || memcmp(s + i, "generation", 10) != 0) return false;
    i = lx_space_run(s, n, i + 10);
    *rstrip = i < n && s[i] == '-';
    if (*rstrip) i++;
    if (i + 2 > n || s[i] != '%' || s[i + 1] != '}') return false;
    *end = i + 2;
    return true;
}

/* /(\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/gs -> before and after
 * whitespace unless the tag's - markers strip them. */
static void lx_generation(lx_text *out, const lx_text *in) {
    const char *s = in->p;
    size_t n = in->n, i = 0, from = 0;
    if (n == 0) return;
    while (i < n) {
        size_t ws_end = lx_space_run(s, n, i), tag_end;
        bool ls, rs;
        if (lx_generation_tag(s, n, ws_end, &tag_end, &ls, &rs)) {
            size_t after_end = lx_space_run(s, n, tag_end);
            lx_push(out, s + from, in->line + from, i - from);
            if (!ls) lx_push(out, s + i, in->line + i, ws_end - i);
            if (!rs) lx_push(out, s + tag_end, in->line + tag_end, after_end - tag_end);
            i = from = after_end;
        } else if (ws_end > i) {
            i = ws_end; /* no tag after this run: no match starts inside it */
        } else {
            i += lx_seq((unsigned char)s[i]);
        }
    }
    lx_push(out, s + from, in->line + from, n - from);
}

/* ------------------------------------------------------------ tokens */

typedef struct lx {
    jarena *a;
    const char *name;
    const char *s;
    const int *line;
    size_t n, pos;
    jtok *t;
    size_t nt, cap;
    ct_status st;
    int curly; /* depth of { } inside an expression */
} lx;

static ct_status lx_fail(lx *x, size_t at, const char *fmt, ...) CT_PRINTF(3, 4);
static ct_status lx_fail(lx *x, size_t at, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line = x->n ? x->line[at < x->n ? at : x->n - 1] : 1;
    x->st = CT_ERR(CT_ERR_FORMAT, "%s:%d: %s", x->name, line, msg);
    return x->st;
}

static bool lx_add(lx *x, jtok_type type, const char *p, size_t len, size_t at) {
    if (x->nt == x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 256;
        jtok *t = realloc(x->t, cap * sizeof *t);
        if (!t) {
            x->st = CT_ERR(CT_ERR_OOM, "%s: out of memory tokenising the template", x->name);
            return false;
        }
        x->t = t;
        x->cap = cap;
    }
    int line = x->n ? x->line[at < x->n ? at : x->n - 1] : 1;
    x->t[x->nt++] = (jtok){(uint8_t)type, {p, len}, line};
    return true;
}

static int lx_last(const lx *x) { return x->nt ? x->t[x->nt - 1].type : -1; }

/* stripTrailingWhitespace: trimEnd the last text token, dropping it when empty. */
static void lx_strip_last_text(lx *x) {
    if (!x->nt || x->t[x->nt - 1].type != JT_TEXT) return;
    jtok *t = &x->t[x->nt - 1];
    t->v = ju_trim(t->v, false, true);
    if (t->v.n == 0) x->nt--;
}

static bool lx_digit(char c) { return c >= '0' && c <= '9'; }
static bool lx_word(char c) { return lx_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

/* consumeWhile(isInteger): digits; the reference throws at the end of input. */
static bool lx_digits(lx *x) {
    while (x->pos < x->n && lx_digit(x->s[x->pos])) {
        if (++x->pos >= x->n) {
            lx_fail(x, x->pos - 1, "unexpected end of the template in a number");
            return false;
        }
    }
    return true;
}

static int lx_hex(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A quoted string at x->pos (the quote): its unescaped text into the arena. */
static bool lx_string(lx *x) {
    char q = x->s[x->pos];
    size_t start = x->pos++;
    jbuf b = {.max = (size_t)-1};
    bool ok = true;
    for (;;) {
        if (x->pos >= x->n) {
            lx_fail(x, start, "unterminated string literal (the template ends inside it)");
            ok = false;
            break;
        }
        char c = x->s[x->pos];
        if (c == q) break;
        if (c != '\\') {
            jb_putc(&b, c);
            if (++x->pos >= x->n) continue;
            continue;
        }
        if (++x->pos >= x->n) {
            lx_fail(x, start, "unterminated string literal (the template ends inside it)");
            ok = false;
            break;
        }
        char e = x->s[x->pos++];
        if (e == 'x' || e == 'u') {
            size_t k = e == 'x' ? 2 : 4;
            uint32_t cp = 0;
            for (size_t i = 0; i < k; i++) {
                int h = x->pos + i < x->n ? lx_hex(x->s[x->pos + i]) : -1;
                if (h < 0) {
                    lx_fail(x, x->pos, "invalid hexadecimal escape \\%c in a string literal", e);
                    ok = false;
                    break;
                }
                cp = cp << 4 | (uint32_t)h;
            }
            if (!ok) break;
            x->pos += k;
            if (cp >= 0xD800 && cp <= 0xDBFF && x->pos + 6 <= x->n && x->s[x->pos] == '\\' && x->s[x->pos + 1] == 'u') {
                uint32_t lo = 0;
                int i;
                for (i = 0; i < 4 && lx_hex(x->s[x->pos + 2 + i]) >= 0; i++) lo = lo << 4 | (uint32_t)lx_hex(x->s[x->pos + 2 + i]);
                if (i == 4 && lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    x->pos += 6;
                }
            }
            if (cp >= 0xD800 && cp <= 0xDFFF) {
                lx_fail(x, x->pos, "a \\u escape gives a lone surrogate (U+%04X), which UTF-8 cannot hold", (unsigned)cp);
                ok = false;
                break;
            }
            ju_encode(&b, cp);
            continue;
        }
        const char *from = "ntrbfv'\"\\", *to = "\n\t\r\b\f\v'\"\\";
        const char *f = e ? strchr(from, e) : NULL;
        if (!f) {
            lx_fail(x, x->pos - 1, "unknown escape \\%c in a string literal", e);
            ok = false;
            break;
        }
        jb_putc(&b, to[f - from]);
    }
    if (ok && (b.oom || b.over)) {
        x->st = CT_ERR(CT_ERR_OOM, "%s: out of memory for a string literal", x->name);
        ok = false;
    }
    if (ok) {
        char *p = ja_strdup(x->a, b.p ? b.p : "", b.n);
        if (!p) {
            x->st = CT_ERR(CT_ERR_OOM, "%s: out of memory for a string literal", x->name);
            ok = false;
        } else {
            ok = lx_add(x, JT_STRING, p, b.n, start);
        }
    }
    jb_free(&b);
    x->pos++; /* the closing quote */
    return ok;
}

static const struct {
    const char *seq;
    jtok_type type;
} lx_table[] = {
    {"{%", JT_OPEN_STMT}, {"%}", JT_CLOSE_STMT}, {"{{", JT_OPEN_EXPR}, {"}}", JT_CLOSE_EXPR},
    {"(", JT_LPAREN}, {")", JT_RPAREN}, {"{", JT_LBRACE}, {"}", JT_RBRACE}, {"[", JT_LBRACKET},
    {"]", JT_RBRACKET}, {",", JT_COMMA}, {".", JT_DOT}, {":", JT_COLON}, {"|", JT_PIPE},
    {"<=", JT_CMP}, {">=", JT_CMP}, {"==", JT_CMP}, {"!=", JT_CMP}, {"<", JT_CMP}, {">", JT_CMP},
    {"+", JT_ADD}, {"-", JT_ADD}, {"~", JT_ADD}, {"**", JT_POW}, {"*", JT_MUL}, {"//", JT_MUL},
    {"/", JT_MUL}, {"%", JT_MUL}, {"=", JT_EQUALS},
};

static bool lx_starts(const lx *x, const char *seq) {
    size_t k = strlen(seq);
    return x->pos + k <= x->n && memcmp(x->s + x->pos, seq, k) == 0;
}

/* One step of the reference's main loop; false to stop (error or done). */
static bool lx_step(lx *x) {
    const char *s = x->s;
    int last = lx_last(x);
    if (last < 0 || last == JT_CLOSE_STMT || last == JT_CLOSE_EXPR || last == JT_COMMENT) {
        size_t i = x->pos;
        while (i < x->n && !(s[i] == '{' && i + 1 < x->n && (s[i + 1] == '%' || s[i + 1] == '{' || s[i + 1] == '#'))) i++;
        if (i > x->pos) {
            bool ok = lx_add(x, JT_TEXT, s + x->pos, i - x->pos, x->pos);
            x->pos = i;
            return ok;
        }
    }
    if (lx_starts(x, "{#")) {
        size_t start = x->pos;
        x->pos += 2;
        bool strip_before = x->pos < x->n && s[x->pos] == '-';
        if (strip_before) x->pos++;
        size_t from = x->pos;
        while (!(x->pos + 1 < x->n && s[x->pos] == '#' && s[x->pos + 1] == '}')) {
            if (x->pos + 2 >= x->n) {
                lx_fail(x, start, "{# comment is never closed (expected #})");
                return false;
            }
            x->pos++;
        }
        size_t to = x->pos;
        bool strip_after = to > from && s[to - 1] == '-';
        if (strip_after) to--;
        if (strip_before) lx_strip_last_text(x);
        if (!lx_add(x, JT_COMMENT, s + from, to - from, start)) return false;
        x->pos += 2;
        if (strip_after) x->pos = lx_space_run(s, x->n, x->pos);
        return true;
    }
    if (lx_starts(x, "{%-") || lx_starts(x, "{{-")) {
        lx_strip_last_text(x);
        bool stmt = s[x->pos + 1] == '%';
        if (!stmt) x->curly = 0;
        bool ok = lx_add(x, stmt ? JT_OPEN_STMT : JT_OPEN_EXPR, s + x->pos, 2, x->pos);
        x->pos += 3;
        return ok;
    }
    /* whitespace inside a tag; the reference throws when it runs to the end */
    size_t ws = lx_space_run(s, x->n, x->pos);
    if (ws > x->pos && ws >= x->n) {
        lx_fail(x, x->pos, "unexpected end of the template inside a {%% %%} or {{ }} tag");
        return false;
    }
    x->pos = ws;
    if (x->pos >= x->n) return true;
    if (lx_starts(x, "-%}") || lx_starts(x, "-}}")) {
        bool stmt = s[x->pos + 1] == '%';
        bool ok = lx_add(x, stmt ? JT_CLOSE_STMT : JT_CLOSE_EXPR, s + x->pos + 1, 2, x->pos);
        x->pos = lx_space_run(s, x->n, x->pos + 3);
        return ok;
    }
    char c = s[x->pos];
    if (c == '-' || c == '+') {
        if (last < 0 || last == JT_TEXT) {
            lx_fail(x, x->pos, "unexpected character '%c'", c);
            return false;
        }
        if (!(last == JT_IDENT || last == JT_NUMBER || last == JT_STRING || last == JT_RPAREN || last == JT_RBRACKET)) {
            size_t start = x->pos++;
            size_t d = x->pos;
            if (!lx_digits(x)) return false;
            if (x->pos > d && x->pos + 1 < x->n && s[x->pos] == '.' && lx_digit(s[x->pos + 1])) {
                x->pos++;
                if (!lx_digits(x)) return false;
            }
            return lx_add(x, x->pos > d ? JT_NUMBER : JT_UNARY, s + start, x->pos - start, start);
        }
    }
    for (size_t k = 0; k < sizeof lx_table / sizeof lx_table[0]; k++) {
        if (lx_table[k].type == JT_CLOSE_EXPR && x->curly > 0) continue;
        if (!lx_starts(x, lx_table[k].seq)) continue;
        size_t len = strlen(lx_table[k].seq);
        if (!lx_add(x, lx_table[k].type, s + x->pos, len, x->pos)) return false;
        if (lx_table[k].type == JT_OPEN_EXPR) x->curly = 0;
        else if (lx_table[k].type == JT_LBRACE) x->curly++;
        else if (lx_table[k].type == JT_RBRACE) x->curly--;
        x->pos += len;
        return true;
    }
    if (c == '\'' || c == '"') return lx_string(x);
    if (lx_digit(c)) {
        size_t start = x->pos;
        if (!lx_digits(x)) return false;
        if (lx_last(x) != JT_DOT && x->pos + 1 < x->n && s[x->pos] == '.' && lx_digit(s[x->pos + 1])) {
            x->pos++;
            if (!lx_digits(x)) return false;
        }
        return lx_add(x, JT_NUMBER, s + start, x->pos - start, start);
    }
    if (lx_word(c)) {
        size_t start = x->pos;
        while (x->pos < x->n && lx_word(s[x->pos])) {
            if (++x->pos >= x->n) {
                lx_fail(x, start, "unexpected end of the template after '%.*s'", (int)(x->pos - start), s + start);
                return false;
            }
        }
        return lx_add(x, JT_IDENT, s + start, x->pos - start, start);
    }
    size_t l = lx_seq((unsigned char)c);
    lx_fail(x, x->pos, "unexpected character '%.*s' in a tag", (int)(l <= x->n - x->pos ? l : 1), s + x->pos);
    return false;
}

ct_status jinja_lex(jarena *a, const char *name, const char *src, size_t len, jtok **toks, size_t *n) {
    *toks = NULL;
    *n = 0;
    lx_text t0 = {0}, t1 = {0}, t2 = {0}, t3 = {0};
    /* the original text, with its lines; one trailing newline dropped */
    if (len && src[len - 1] == '\n') len--;
    int *lines = malloc((len + 1) * sizeof *lines);
    if (!lines) return CT_ERR(CT_ERR_OOM, "%s: out of memory reading the template", name);
    int line = 1;
    for (size_t i = 0; i < len; i++) {
        lines[i] = line;
        if (src[i] == '\n') line++;
    }
    lx_push(&t0, src, lines, len);
    free(lines);
    lx_lstrip(&t1, &t0);
    lx_trim(&t2, &t1);
    lx_generation(&t3, &t2);
    ct_status st = CT_OK;
    if (t0.oom || t1.oom || t2.oom || t3.oom) st = CT_ERR(CT_ERR_OOM, "%s: out of memory reading the template", name);
    char *text = st ? NULL : ja_strdup(a, t3.p ? t3.p : "", t3.n);
    if (!st && !text) st = CT_ERR(CT_ERR_OOM, "%s: out of memory reading the template", name);
    lx x = {.a = a, .name = name, .s = text, .line = t3.line, .n = t3.n};
    while (!st && x.pos < x.n && !x.st) lx_step(&x);
    if (!st) st = x.st;
    if (!st) {
        *toks = ja_alloc(a, (x.nt + 1) * sizeof **toks);
        if (!*toks) st = CT_ERR(CT_ERR_OOM, "%s: out of memory tokenising the template", name);
        else if (x.nt) memcpy(*toks, x.t, x.nt * sizeof **toks);
        *n = x.nt;
    }
    free(x.t);
    lx_free(&t0);
    lx_free(&t1);
    lx_free(&t2);
    lx_free(&t3);
    return st;
}
