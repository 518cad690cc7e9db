/*
 * Pre-tokenisation regexes: a pattern written for JavaScript's RegExp with
 * the u flag (GPT-2's, a tokenizer.json's Split Regex as transformers.js runs
 * it) rewritten into PCRE2 syntax with the same meaning, then compiled (UTF,
 * JIT when available). PCRE2 and JavaScript disagree on what \s, \d, \w, \b,
 * ".", "$" and the Unicode properties match (PCRE2's \s has U+0085 and
 * U+180E, JavaScript's has U+FEFF; \d and \w are ASCII in JavaScript; the two
 * may be built on different Unicode versions), so every class is spelled out
 * as explicit code point ranges from the tables node's regexes give
 * (tokenizer_unicode.h). A case-insensitive group (?i:...) is rewritten the
 * way transformers.js rewrites Llama 3's: each ASCII letter becomes [xX].
 * Leaves out (refused, naming the pattern and offset): Unicode properties
 * other than the general categories of the tables (scripts, binary
 * properties), case-insensitive groups holding non-ASCII text, inline flags
 * (?i) (?m) (?s), and what PCRE2 itself refuses (unbounded lookbehind).
 */
#include "data/tokenizer/tokenizer_impl.h"
#include "data/tokenizer/tokenizer_unicode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RX_COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define RX_MAX_CP 0x10FFFFu

/* ------------------------------------------------------- output text */

typedef struct rx_buf {
    char *p;
    size_t n, cap;
    bool oom;
} rx_buf;

static void rx_put(rx_buf *b, const char *s, size_t k) {
    if (b->oom) return;
    if (b->n + k + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->n + k + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, k);
    b->n += k;
    b->p[b->n] = '\0';
}

static void rx_puts(rx_buf *b, const char *s) { rx_put(b, s, strlen(s)); }

/* ------------------------------------------------------- code point sets */

typedef struct rx_set {
    uint32_t (*r)[2];
    size_t n, cap;
    bool oom;
} rx_set;

static void set_add(rx_set *s, uint32_t lo, uint32_t hi) {
    if (s->oom || lo > hi) return;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        void *q = realloc(s->r, cap * sizeof *s->r);
        if (!q) {
            s->oom = true;
            return;
        }
        s->r = q;
        s->cap = cap;
    }
    s->r[s->n][0] = lo;
    s->r[s->n][1] = hi;
    s->n++;
}

static void set_add_table(rx_set *s, const uint32_t (*t)[2], size_t n, bool complement) {
    if (!complement) {
        for (size_t i = 0; i < n; i++) set_add(s, t[i][0], t[i][1]);
        return;
    }
    uint32_t next = 0; /* tables are sorted and disjoint */
    for (size_t i = 0; i < n; i++) {
        if (t[i][0] > next) set_add(s, next, t[i][0] - 1);
        next = t[i][1] + 1;
    }
    if (next <= RX_MAX_CP) set_add(s, next, RX_MAX_CP);
}

static int set_cmp(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

/* Sort, merge overlapping and adjacent ranges, and drop the surrogates
 * (which UTF-8 text cannot hold and PCRE2 refuses in a UTF pattern). */
static void set_normalise(rx_set *s) {
    if (s->oom || s->n == 0) return;
    qsort(s->r, s->n, sizeof *s->r, set_cmp);
    size_t k = 0;
    for (size_t i = 1; i < s->n; i++) {
        if (s->r[i][0] <= s->r[k][1] + 1) {
            if (s->r[i][1] > s->r[k][1]) s->r[k][1] = s->r[i][1];
        } else {
            s->r[++k][0] = s->r[i][0];
            s->r[k][1] = s->r[i][1];
        }
    }
    s->n = k + 1;
    for (size_t i = 0; i < s->n; i++) {
        uint32_t lo = s->r[i][0], hi = s->r[i][1];
        if (hi < 0xD800 || lo > 0xDFFF) continue;
        if (lo < 0xD800 && hi > 0xDFFF) {
            s->r[i][1] = 0xD7FF;
            set_add(s, 0xE000, hi);
        } else if (lo < 0xD800) {
            s->r[i][1] = 0xD7FF;
        } else if (hi > 0xDFFF) {
            s->r[i][0] = 0xE000;
        } else {
            s->r[i][0] = 1; /* wholly surrogates: emptied below */
            s->r[i][1] = 0;
        }
    }
    k = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->r[i][0] <= s->r[i][1]) {
            s->r[k][0] = s->r[i][0];
            s->r[k++][1] = s->r[i][1];
        }
    s->n = k;
    qsort(s->r, s->n, sizeof *s->r, set_cmp);
}

/* The set as a PCRE2 class (negated: its complement). */
static void set_emit(rx_buf *b, rx_set *s, bool negate) {
    set_normalise(s);
    if (s->oom) {
        b->oom = true;
        return;
    }
    if (s->n == 0) {
        rx_puts(b, negate ? "[\\x{0}-\\x{D7FF}\\x{E000}-\\x{10FFFF}]" : "(?!)");
        return;
    }
    rx_puts(b, negate ? "[^" : "[");
    for (size_t i = 0; i < s->n; i++) {
        char item[40];
        if (s->r[i][0] == s->r[i][1]) snprintf(item, sizeof item, "\\x{%X}", (unsigned)s->r[i][0]);
        else snprintf(item, sizeof item, "\\x{%X}-\\x{%X}", (unsigned)s->r[i][0], (unsigned)s->r[i][1]);
        rx_puts(b, item);
    }
    rx_puts(b, "]");
}

/* ------------------------------------------------------- the translator */

typedef struct rx_prop {
    const char *name;
    const uint32_t (*t)[2];
    size_t n;
} rx_prop;

#define RX_PROP(name, table) {name, table, RX_COUNT(table)}
static const rx_prop rx_props[] = {
    RX_PROP("L", tok_js_letter),         RX_PROP("Letter", tok_js_letter),
    RX_PROP("N", tok_js_number),         RX_PROP("Number", tok_js_number),
    RX_PROP("Lu", tok_js_gc_Lu),         RX_PROP("Uppercase_Letter", tok_js_gc_Lu),
    RX_PROP("Ll", tok_js_gc_Ll),         RX_PROP("Lowercase_Letter", tok_js_gc_Ll),
    RX_PROP("Lt", tok_js_gc_Lt),         RX_PROP("Titlecase_Letter", tok_js_gc_Lt),
    RX_PROP("Lm", tok_js_gc_Lm),         RX_PROP("Modifier_Letter", tok_js_gc_Lm),
    RX_PROP("Lo", tok_js_gc_Lo),         RX_PROP("Other_Letter", tok_js_gc_Lo),
    RX_PROP("M", tok_js_gc_M),           RX_PROP("Mark", tok_js_gc_M),
    RX_PROP("Combining_Mark", tok_js_gc_M), RX_PROP("Nd", tok_js_gc_Nd),
    RX_PROP("Decimal_Number", tok_js_gc_Nd), RX_PROP("digit", tok_js_gc_Nd),
    RX_PROP("P", tok_js_gc_P),           RX_PROP("Punctuation", tok_js_gc_P),
    RX_PROP("punct", tok_js_gc_P),       RX_PROP("S", tok_js_gc_S),
    RX_PROP("Symbol", tok_js_gc_S),      RX_PROP("Z", tok_js_gc_Z),
    RX_PROP("Separator", tok_js_gc_Z),
};

typedef struct rx_tr {
    const char *s; /* the JavaScript pattern */
    size_t n, i;   /* its length, the read position */
    rx_buf out;
    const char *why; /* set on an error, with at */
    size_t at;
    char why_buf[160];
} rx_tr;

static bool rx_fail(rx_tr *x, size_t at, const char *why) {
    if (!x->why) {
        x->why = why;
        x->at = at;
    }
    return false;
}

/* Decode the UTF-8 character at x->i (the pattern is checked to be valid). */
static uint32_t rx_char(rx_tr *x) {
    const uint8_t *u = (const uint8_t *)x->s + x->i;
    size_t k = tok_utf8_seq(u, x->n - x->i);
    uint32_t cp = k == 1 ? u[0] : u[0] & (0x7Fu >> k);
    for (size_t j = 1; j < k; j++) cp = cp << 6 | (u[j] & 0x3Fu);
    x->i += k;
    return cp;
}

static int rx_hex(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* k hex digits at x->i, or -1. */
static long rx_hexn(rx_tr *x, int k) {
    if (x->n - x->i < (size_t)k) return -1;
    long v = 0;
    for (int j = 0; j < k; j++) {
        int d = rx_hex(x->s[x->i + (size_t)j]);
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    x->i += (size_t)k;
    return v;
}

/* \uHHHH (a surrogate pair of two such is one character), \u{H...}: the code
 * point, or -1. x->i is just past the 'u'. */
static long rx_unicode_escape(rx_tr *x) {
    if (x->i < x->n && x->s[x->i] == '{') {
        size_t j = x->i + 1;
        long v = 0;
        while (j < x->n && rx_hex(x->s[j]) >= 0 && v <= (long)RX_MAX_CP) v = v * 16 + rx_hex(x->s[j++]);
        if (j == x->i + 1 || j >= x->n || x->s[j] != '}' || v > (long)RX_MAX_CP) return -1;
        x->i = j + 1;
        return v;
    }
    long v = rx_hexn(x, 4);
    if (v >= 0xD800 && v <= 0xDBFF && x->n - x->i >= 6 && x->s[x->i] == '\\' && x->s[x->i + 1] == 'u') {
        size_t save = x->i;
        x->i += 2;
        long lo = rx_hexn(x, 4);
        if (lo >= 0xDC00 && lo <= 0xDFFF) return 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
        x->i = save;
    }
    return v;
}

/* The escape at x->i (just past the backslash) as a set: a class escape
 * (\s \S \d \D \w \W \p{..} \P{..}) adds its code points to set and returns
 * true; a single-character escape returns false with *cp set. In a class,
 * \b is a backspace. Errors return false with x->why set. */
static bool rx_escape_set(rx_tr *x, rx_set *set, uint32_t *cp, bool in_class) {
    size_t at = x->i - 1;
    if (x->i >= x->n) return rx_fail(x, at, "a backslash ends the pattern");
    char c = x->s[x->i++];
    static const uint32_t digit[][2] = {{'0', '9'}};
    static const uint32_t word[][2] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    *cp = UINT32_MAX;
    switch (c) {
    case 's': case 'S':
        set_add_table(set, tok_js_space, RX_COUNT(tok_js_space), c == 'S');
        return true;
    case 'd': case 'D':
        set_add_table(set, digit, 1, c == 'D');
        return true;
    case 'w': case 'W':
        set_add_table(set, word, 4, c == 'W');
        return true;
    case 'p': case 'P': {
        if (x->i >= x->n || x->s[x->i] != '{') return rx_fail(x, at, "\\p without {Property}");
        const char *name = x->s + x->i + 1, *end = memchr(name, '}', x->n - x->i - 1);
        if (!end) return rx_fail(x, at, "\\p{ without a closing }");
        size_t len = (size_t)(end - name);
        x->i = (size_t)(end - x->s) + 1;
        for (const char *pre = "gc=\0General_Category=\0"; *pre; pre += strlen(pre) + 1)
            if (len > strlen(pre) && !memcmp(name, pre, strlen(pre))) {
                len -= strlen(pre);
                name += strlen(pre);
                break;
            }
        for (size_t k = 0; k < RX_COUNT(rx_props); k++)
            if (strlen(rx_props[k].name) == len && !memcmp(rx_props[k].name, name, len)) {
                set_add_table(set, rx_props[k].t, rx_props[k].n, c == 'P');
                return true;
            }
        snprintf(x->why_buf, sizeof x->why_buf,
                 "Unicode property \\%c{%.*s} is not supported (supported: the general categories L, Lu, Ll, "
                 "Lt, Lm, Lo, M, N, Nd, P, S, Z)", c, (int)(len > 40 ? 40 : len), name);
        return rx_fail(x, at, x->why_buf);
    }
    case 'n': *cp = '\n'; return false;
    case 'r': *cp = '\r'; return false;
    case 't': *cp = '\t'; return false;
    case 'f': *cp = '\f'; return false;
    case 'v': *cp = '\v'; return false;
    case '0':
        if (x->i < x->n && x->s[x->i] >= '0' && x->s[x->i] <= '9')
            return rx_fail(x, at, "an octal escape (\\0 followed by a digit)");
        *cp = 0;
        return false;
    case 'b':
        if (in_class) {
            *cp = '\b';
            return false;
        }
        break;
    case 'c':
        if (x->i < x->n && ((x->s[x->i] >= 'a' && x->s[x->i] <= 'z') || (x->s[x->i] >= 'A' && x->s[x->i] <= 'Z'))) {
            *cp = (uint32_t)(x->s[x->i++] % 32);
            return false;
        }
        return rx_fail(x, at, "\\c without a letter");
    case 'x': {
        long v = rx_hexn(x, 2);
        if (v < 0) return rx_fail(x, at, "\\x without two hex digits");
        *cp = (uint32_t)v;
        return false;
    }
    case 'u': {
        long v = rx_unicode_escape(x);
        if (v < 0) return rx_fail(x, at, "\\u without four hex digits or {code point}");
        if (v >= 0xD800 && v <= 0xDFFF) return rx_fail(x, at, "a lone surrogate \\u escape");
        *cp = (uint32_t)v;
        return false;
    }
    default:
        break;
    }
    if ((unsigned char)c < 0x80 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) {
        *cp = (uint32_t)(unsigned char)c; /* an escaped punctuation character is itself */
        return false;
    }
    x->i--; /* the caller decides (\b \B \1 \k at the top level) */
    *cp = UINT32_MAX - 1;
    return false;
}

/* Whether any code point of [lo, hi] is a letter (\p{L}). */
static bool rx_any_letter(uint32_t lo, uint32_t hi) {
    size_t a = 0, b = RX_COUNT(tok_js_letter);
    while (a < b) { /* the first letter range ending at or after lo */
        size_t m = (a + b) / 2;
        if (tok_js_letter[m][1] < lo) a = m + 1;
        else b = m;
    }
    return a < RX_COUNT(tok_js_letter) && tok_js_letter[a][0] <= hi;
}

/* In a case-insensitive group: ASCII letters in set get their other case, as
 * transformers.js rewrites (?i:...) into [xX] classes; a letter beyond ASCII
 * is refused (its case-insensitive match would be a guess). */
static bool rx_fold_ascii(rx_tr *x, rx_set *set, size_t at) {
    size_t n = set->n;
    for (size_t i = 0; i < n; i++) {
        uint32_t lo = set->r[i][0], hi = set->r[i][1];
        if (hi > 0x7F && rx_any_letter(lo > 0x80 ? lo : 0x80, hi))
            return rx_fail(x, at, "a case-insensitive group (?i:...) holding a letter beyond ASCII");
        uint32_t a = lo > 'a' ? lo : 'a', z = hi < 'z' ? hi : 'z';
        if (a <= z) set_add(set, a - 32, z - 32);
        a = lo > 'A' ? lo : 'A';
        z = hi < 'Z' ? hi : 'Z';
        if (a <= z) set_add(set, a + 32, z + 32);
    }
    return true;
}

/* A class [...] at x->i (just past '['), emitted as explicit ranges. */
static bool rx_class(rx_tr *x, bool ci) {
    size_t at = x->i - 1;
    bool negate = x->i < x->n && x->s[x->i] == '^';
    if (negate) x->i++;
    rx_set set = {0};
    uint32_t prev = UINT32_MAX; /* the last single character, for a range */
    bool ok = true;
    for (;;) {
        if (x->i >= x->n) {
            ok = rx_fail(x, at, "a class [ without its ]");
            break;
        }
        char c = x->s[x->i];
        if (c == ']') {
            x->i++;
            break;
        }
        uint32_t cp;
        if (c == '\\') {
            x->i++;
            if (rx_escape_set(x, &set, &cp, true)) {
                prev = UINT32_MAX;
                continue;
            }
            if (x->why) {
                ok = false;
                break;
            }
            if (cp == UINT32_MAX - 1) {
                ok = rx_fail(x, x->i - 1, "an escape that is not valid in a class");
                break;
            }
        } else if (c == '-' && prev != UINT32_MAX && x->i + 1 < x->n && x->s[x->i + 1] != ']') {
            /* a range prev-hi */
            x->i++;
            uint32_t hi;
            if (x->s[x->i] == '\\') {
                x->i++;
                rx_set dummy = {0};
                bool cls = rx_escape_set(x, &dummy, &hi, true);
                free(dummy.r);
                if (cls || x->why || hi == UINT32_MAX - 1) {
                    ok = rx_fail(x, x->i - 1, "a class escape at the end of a range");
                    break;
                }
            } else {
                hi = rx_char(x);
            }
            if (hi < prev) {
                ok = rx_fail(x, x->i - 1, "a range out of order in a class");
                break;
            }
            set_add(&set, prev, hi);
            prev = UINT32_MAX;
            continue;
        } else {
            cp = rx_char(x);
        }
        set_add(&set, cp, cp);
        prev = cp;
    }
    if (ok && ci) ok = rx_fold_ascii(x, &set, at);
    if (ok) set_emit(&x->out, &set, negate);
    free(set.r);
    return ok;
}

/* Emit one literal character (in a case-insensitive group, a letter as [xX]). */
static bool rx_literal(rx_tr *x, uint32_t cp, size_t at, bool ci) {
    char tmp[32]; /* room for two \x{...} of any 32-bit value */
    if (ci && ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z'))) {
        snprintf(tmp, sizeof tmp, "[\\x{%X}\\x{%X}]", (unsigned)(cp | 32), (unsigned)(cp & ~32u));
        rx_puts(&x->out, tmp);
        return true;
    }
    if (ci && cp > 0x7F && rx_any_letter(cp, cp))
        return rx_fail(x, at, "a case-insensitive group (?i:...) holding a letter beyond ASCII");
    snprintf(tmp, sizeof tmp, "\\x{%X}", (unsigned)cp);
    rx_puts(&x->out, tmp);
    return true;
}

#define RX_WORD "[0-9A-Z_a-z]"
#define RX_MAX_DEPTH 256

static bool rx_translate(rx_tr *x) {
    bool ci_stack[RX_MAX_DEPTH];
    int depth = 0;
    bool ci = false;
    while (x->i < x->n && !x->why) {
        size_t at = x->i;
        char c = x->s[x->i];
        switch (c) {
        case '\\': {
            x->i++;
            rx_set set = {0};
            uint32_t cp;
            if (rx_escape_set(x, &set, &cp, false)) {
                if (ci && !rx_fold_ascii(x, &set, at)) {
                    free(set.r);
                    return false;
                }
                set_emit(&x->out, &set, false);
                free(set.r);
                break;
            }
            free(set.r);
            if (x->why) return false;
            if (cp != UINT32_MAX - 1) {
                if (!rx_literal(x, cp, at, ci)) return false;
                break;
            }
            char e = x->s[x->i++];
            if (e == 'b') {
                rx_puts(&x->out, "(?:(?<=" RX_WORD ")(?!" RX_WORD ")|(?<!" RX_WORD ")(?=" RX_WORD "))");
            } else if (e == 'B') {
                rx_puts(&x->out, "(?:(?<=" RX_WORD ")(?=" RX_WORD ")|(?<!" RX_WORD ")(?!" RX_WORD "))");
            } else if (e >= '1' && e <= '9') {
                rx_put(&x->out, x->s + at, 2); /* a backreference */
                while (x->i < x->n && x->s[x->i] >= '0' && x->s[x->i] <= '9') rx_put(&x->out, x->s + x->i++, 1);
            } else if (e == 'k' && x->i < x->n && x->s[x->i] == '<') {
                const char *end = memchr(x->s + x->i, '>', x->n - x->i);
                if (!end) return rx_fail(x, at, "\\k< without its >");
                rx_put(&x->out, x->s + at, (size_t)(end - (x->s + at)) + 1);
                x->i = (size_t)(end - x->s) + 1;
            } else {
                return rx_fail(x, at, "an escape JavaScript's u flag does not allow");
            }
            break;
        }
        case '[':
            x->i++;
            if (!rx_class(x, ci)) return false;
            break;
        case '.':
            x->i++;
            rx_puts(&x->out, "[^\\n\\r\\x{2028}\\x{2029}]"); /* JavaScript's "." without the s flag */
            break;
        case '$':
            x->i++;
            rx_puts(&x->out, "\\z"); /* the end of the text, never before a final newline */
            break;
        case '(': {
            if (depth == RX_MAX_DEPTH) return rx_fail(x, at, "groups nested too deeply");
            ci_stack[depth++] = ci;
            const char *g = x->s + x->i;
            size_t left = x->n - x->i;
            if (left >= 2 && g[1] != '?') {
                x->i++;
                rx_puts(&x->out, "(");
            } else if (left >= 4 && !memcmp(g, "(?i:", 4)) {
                x->i += 4;
                ci = true;
                rx_puts(&x->out, "(?:");
            } else if ((left >= 3 && (!memcmp(g, "(?:", 3) || !memcmp(g, "(?=", 3) || !memcmp(g, "(?!", 3))) ||
                       (left >= 4 && (!memcmp(g, "(?<=", 4) || !memcmp(g, "(?<!", 4)))) {
                size_t k = g[2] == '<' ? 4 : 3;
                rx_put(&x->out, g, k);
                x->i += k;
            } else if (left >= 3 && !memcmp(g, "(?<", 3)) {
                const char *end = memchr(g, '>', left);
                if (!end) return rx_fail(x, at, "a named group (?< without its >");
                rx_put(&x->out, g, (size_t)(end - g) + 1);
                x->i += (size_t)(end - g) + 1;
            } else if (left >= 2 && g[1] == '?') {
                return rx_fail(x, at, "a group kind JavaScript does not have (inline flags such as (?i) or (?s:)");
            } else {
                x->i++;
                rx_puts(&x->out, "(");
            }
            break;
        }
        case ')':
            x->i++;
            if (depth == 0) return rx_fail(x, at, "a ) without its (");
            ci = ci_stack[--depth];
            rx_puts(&x->out, ")");
            break;
        case '{': {
            /* a quantifier {n}, {n,} or {n,m}: the same in both */
            size_t j = x->i + 1, digits = 0, commas = 0;
            while (j < x->n && ((x->s[j] >= '0' && x->s[j] <= '9') || x->s[j] == ',')) {
                digits += x->s[j] != ',';
                commas += x->s[j] == ',';
                j++;
            }
            if (j >= x->n || x->s[j] != '}' || !digits || commas > 1 || x->s[x->i + 1] == ',')
                return rx_fail(x, at, "a { that is not a quantifier {n}, {n,} or {n,m}");
            rx_put(&x->out, x->s + x->i, j + 1 - x->i);
            x->i = j + 1;
            break;
        }
        case '}':
            return rx_fail(x, at, "a } without its {");
        case '^': case '|': case '*': case '+': case '?':
            /* the same meaning in both (^ is the start of the text without the m flag) */
            x->i++;
            rx_put(&x->out, &c, 1);
            break;
        default: {
            uint32_t cp = rx_char(x);
            if (!rx_literal(x, cp, at, ci)) return false;
        }
        }
    }
    if (!x->why && depth) return rx_fail(x, x->n, "a ( without its )");
    return !x->why;
}

ct_status tok_regex_compile(pcre2_code **re, bool *jit, const char *src, size_t n, const char *where) {
    *re = NULL;
    *jit = false;
    if (ct_utf8_valid_prefix(src, n) != n)
        return CT_ERR(CT_ERR_FORMAT, "%s: the pattern is not valid UTF-8", where);
    rx_tr x = {.s = src, .n = n};
    if (!rx_translate(&x)) {
        free(x.out.p);
        if (x.out.oom) return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory translating the pattern of %s", where);
        ct_status st = CT_ERR(CT_ERR_FORMAT, "%s: pattern %.*s%s: %s at offset %zu", where, n > 120 ? 120 : (int)n,
                              src, n > 120 ? "..." : "", x.why, x.at);
        ct_error_hint("ctrain runs the pattern as transformers.js does (a JavaScript regex with the u flag)");
        return st;
    }
    if (x.out.oom || !x.out.p) {
        free(x.out.p);
        if (!x.out.oom && n == 0) return CT_ERR(CT_ERR_FORMAT, "%s: the pattern is empty", where);
        return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory translating the pattern of %s", where);
    }
    int err;
    PCRE2_SIZE at;
    *re = pcre2_compile((PCRE2_SPTR)x.out.p, x.out.n, PCRE2_UTF | PCRE2_UCP, &err, &at, NULL);
    free(x.out.p);
    if (!*re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        ct_status st = CT_ERR(CT_ERR_FORMAT, "%s: pattern %.*s%s: PCRE2 refused it: %s", where, n > 120 ? 120 : (int)n,
                              src, n > 120 ? "..." : "", (const char *)msg);
        ct_error_hint("ctrain needs PCRE2 built with Unicode support (Debian's libpcre2-8 has it); PCRE2 10.42 "
                      "allows only bounded lookbehind");
        return st;
    }
    /* JIT when the platform has it; the interpreter gives the same matches */
    *jit = pcre2_jit_compile(*re, PCRE2_JIT_COMPLETE) == 0;
    return CT_OK;
}

size_t tok_js_space_len(const uint8_t *p, size_t n) {
    size_t k = tok_utf8_seq(p, n);
    if (!k) return 0;
    uint32_t cp = k == 1 ? p[0] : p[0] & (0x7Fu >> k);
    for (size_t j = 1; j < k; j++) cp = cp << 6 | (p[j] & 0x3Fu);
    for (size_t i = 0; i < RX_COUNT(tok_js_space); i++)
        if (cp >= tok_js_space[i][0] && cp <= tok_js_space[i][1]) return k;
    return 0;
}
