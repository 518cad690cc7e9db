/*
 * The Jinja subset's built-ins, each as @huggingface/jinja defines it
 * (runtime.ts applyFilter, Environment.TESTS, the StringValue and
 * ObjectValue builtins, setupGlobals and utils.ts): the filters abs, bool,
 * capitalize, default, first, float, indent, int, items, join, last, length,
 * list, lower, replace, reverse, safe, string, title, tojson, trim, upper; the
 * tests; the functions raise_exception, namespace and range; the string
 * methods strip, lstrip, rstrip, upper, lower, title, capitalize, startswith,
 * endswith, split, replace; the dict methods get, items, keys, values.
 * Strings keep JavaScript's semantics: trim and strip remove JavaScript
 * whitespace, lengths count UTF-16 units, split and replace follow utils.ts.
 * Leaves out: case mapping of letters outside ASCII (upper, lower, title,
 * capitalize leave them as they are), tojson(sort_keys=true) (refused: the
 * reference orders keys by locale collation).
 */
#include "data/chat/jinja_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ arguments */

typedef struct bargs {
    jv **a;     /* positional */
    size_t n;
    jmap kw;    /* keyword */
} bargs;

static bool b_eval_args(jctx *c, jenv *env, const jnode *n, bargs *out) {
    *out = (bargs){0};
    out->a = jalloc(c, n->line, (n->nv + 1) * sizeof *out->a);
    if (!out->a) return false;
    for (size_t i = 0; i < n->nv; i++)
        if (n->v[i]->kind != JN_KWARG && !(out->a[out->n++] = jinja_eval(c, env, n->v[i]))) return false;
    for (size_t i = 0; i < n->nv; i++) {
        if (n->v[i]->kind != JN_KWARG) continue;
        jv *v = jinja_eval(c, env, n->v[i]->a);
        if (!v || !jmap_set(c, n->line, &out->kw, n->v[i]->s, v)) return false;
    }
    return true;
}

/* args[i] ?? kwargs[name] ?? NULL */
static jv *b_arg(const bargs *b, size_t i, const char *name) {
    if (i < b->n) return b->a[i];
    return name ? jmap_get(&b->kw, (jstr){name, strlen(name)}) : NULL;
}

/* JavaScript truthiness of a payload (!!x.value): objects are true. */
static bool b_payload_truthy(const jv *v) {
    switch (v->kind) {
    case JV_LIST:
    case JV_MAP:
    case JV_NS:
    case JV_KWARGS:
    case JV_FUNC: return true;
    default: return jv_truthy(v);
    }
}

/* ------------------------------------------------------------ strings */

static jv *b_case(jctx *c, int line, jstr s, bool upper) {
    char *p = jalloc(c, line, s.n + 1);
    if (!p) return NULL;
    for (size_t i = 0; i < s.n; i++) {
        char ch = s.p[i];
        if (upper && ch >= 'a' && ch <= 'z') ch = (char)(ch - 32);
        if (!upper && ch >= 'A' && ch <= 'Z') ch = (char)(ch + 32);
        p[i] = ch;
    }
    return jv_str(c, line, p, s.n);
}

static bool b_is_lower(jstr s) {
    for (size_t i = 0; i < s.n; i++)
        if (s.p[i] >= 'A' && s.p[i] <= 'Z') return false;
    return true;
}

static bool b_is_upper(jstr s) {
    for (size_t i = 0; i < s.n; i++)
        if (s.p[i] >= 'a' && s.p[i] <= 'z') return false;
    return true;
}

static bool b_word(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
}

/* titleCase: value.replace(/\b\w/g, c => c.toUpperCase()) */
static jv *b_title(jctx *c, int line, jstr s) {
    char *p = jalloc(c, line, s.n + 1);
    if (!p) return NULL;
    for (size_t i = 0; i < s.n; i++) {
        char ch = s.p[i];
        if (b_word(ch) && (i == 0 || !b_word(s.p[i - 1])) && ch >= 'a' && ch <= 'z') ch = (char)(ch - 32);
        p[i] = ch;
    }
    return jv_str(c, line, p, s.n);
}

static jv *b_capitalize(jctx *c, int line, jstr s) {
    char *p = jalloc(c, line, s.n + 1);
    if (!p) return NULL;
    if (s.n) memcpy(p, s.p, s.n);
    if (s.n && p[0] >= 'a' && p[0] <= 'z') p[0] = (char)(p[0] - 32);
    return jv_str(c, line, p, s.n);
}

static jv *b_trim(jctx *c, int line, jstr s, bool left, bool right) {
    jstr t = ju_trim(s, left, right);
    return jv_str(c, line, t.p, t.n);
}

static bool b_starts(jstr s, jstr pre) { return pre.n <= s.n && memcmp(s.p, pre.p, pre.n) == 0; }
static bool b_ends(jstr s, jstr suf) { return suf.n <= s.n && memcmp(s.p + s.n - suf.n, suf.p, suf.n) == 0; }

/* JavaScript's parseInt(s, 10) and parseFloat(s): NaN when no number starts s. */
static double b_parse_num(jstr s, bool integer) {
    s = ju_trim(s, true, false);
    size_t i = 0;
    if (i < s.n && (s.p[i] == '+' || s.p[i] == '-')) i++;
    if (!integer && s.n - i >= 8 && memcmp(s.p + i, "Infinity", 8) == 0)
        return s.p[0] == '-' ? -INFINITY : INFINITY;
    size_t digits = 0, end = i;
    while (end < s.n && s.p[end] >= '0' && s.p[end] <= '9') end++, digits++;
    if (!integer) {
        if (end < s.n && s.p[end] == '.') {
            size_t f = end + 1;
            while (f < s.n && s.p[f] >= '0' && s.p[f] <= '9') f++, digits++;
            if (digits) end = f;
        }
        if (digits && end < s.n && (s.p[end] == 'e' || s.p[end] == 'E')) {
            size_t e = end + 1;
            if (e < s.n && (s.p[e] == '+' || s.p[e] == '-')) e++;
            size_t ed = e;
            while (e < s.n && s.p[e] >= '0' && s.p[e] <= '9') e++;
            if (e > ed) end = e;
        }
    }
    if (!digits) return NAN;
    char *t = malloc(end + 1);
    if (!t) return NAN;
    memcpy(t, s.p, end);
    t[end] = '\0';
    double d = strtod(t, NULL);
    free(t);
    return d;
}

/* Python's str.split as utils/runtime.ts implement it. */
static jv *b_split(jctx *c, int line, jstr s, jv **a, size_t n) {
    jv *sep = n > 0 ? a[0] : c->null, *maxv = n > 1 ? a[1] : NULL;
    if (sep->kind != JV_STR && sep->kind != JV_NULL)
        return jerr(c, line, CT_ERR_ARG, "split(): the separator must be a string or none");
    if (maxv && maxv->kind != JV_INT) return jerr(c, line, CT_ERR_ARG, "split(): maxsplit must be an integer");
    double max = maxv ? maxv->u.d : -1;
    jv **parts = jalloc(c, line, (s.n + 2) * sizeof *parts);
    if (!parts) return NULL;
    size_t k = 0;
    if (sep->kind == JV_NULL) {
        jstr t = ju_trim(s, true, false);
        size_t i = 0;
        while (i < t.n) {
            size_t sp;
            while (i < t.n && (sp = ju_space(t.p + i, t.n - i)) > 0) i += sp;
            if (i >= t.n) break;
            size_t j = i;
            while (j < t.n && ju_space(t.p + j, t.n - j) == 0) j++;
            if (max != -1 && (double)k >= max) {
                parts[k++] = jv_str(c, line, t.p + i, t.n - i);
                break;
            }
            parts[k++] = jv_str(c, line, t.p + i, j - i);
            i = j;
        }
    } else {
        jstr d = sep->u.s;
        if (d.n == 0) return jerr(c, line, CT_ERR_ARG, "split(): empty separator");
        size_t from = 0;
        for (size_t i = 0; i + d.n <= s.n;) {
            if (memcmp(s.p + i, d.p, d.n) == 0) {
                parts[k++] = jv_str(c, line, s.p + from, i - from);
                i += d.n;
                from = i;
            } else {
                i++;
            }
        }
        parts[k++] = jv_str(c, line, s.p + from, s.n - from);
        /* result.push(result.splice(maxsplit).join(sep)): the tail joined back */
        if (max != -1 && (double)k > max) {
            double at = max < 0 ? fmax((double)k + max, 0) : max;
            size_t a0 = (size_t)at;
            if (!parts[a0]) return NULL;
            const char *tail = parts[a0]->u.s.p;
            parts[a0] = jv_str(c, line, tail, (size_t)(s.p + s.n - tail));
            k = a0 + 1;
        }
    }
    jv *l = jv_list(c, line, k);
    for (size_t i = 0; l && i < k; i++)
        if (!(l->u.l.it[i] = parts[i])) return NULL;
    return l;
}

/* utils.ts replace(): count null or negative is all; an empty `old` matches
 * at every code point boundary. */
static jv *b_replace(jctx *c, int line, jstr s, jv **a, size_t n) {
    if (n < 2) return jerr(c, line, CT_ERR_ARG, "replace() takes at least two arguments");
    if (a[0]->kind != JV_STR || a[1]->kind != JV_STR)
        return jerr(c, line, CT_ERR_ARG, "replace(): its arguments must be strings");
    jv *count = c->null;
    if (n > 2) {
        if (a[2]->kind == JV_KWARGS) {
            count = jmap_get(a[2]->u.m, (jstr){"count", 5});
            if (!count) count = c->null;
        } else {
            count = a[2];
        }
    }
    if (count->kind != JV_INT && count->kind != JV_NULL)
        return jerr(c, line, CT_ERR_ARG, "replace(): count must be an integer or none");
    if (count->kind == JV_INT && count->u.d == 0) return jv_str(c, line, s.p, s.n);
    double left = count->kind == JV_NULL || count->u.d < 0 ? INFINITY : count->u.d;
    jstr old = a[0]->u.s, neu = a[1]->u.s;
    jbuf b = {.max = c->a.max};
    size_t i = 0;
    if (old.n == 0) {
        for (;;) {
            if (left > 0) {
                jb_put(&b, neu.p, neu.n);
                left--;
            }
            if (i >= s.n) break;
            size_t l;
            ju_decode(s.p + i, s.n - i, &l);
            jb_put(&b, s.p + i, l);
            i += l;
        }
    } else {
        size_t from = 0;
        while (i + old.n <= s.n && left > 0) {
            if (memcmp(s.p + i, old.p, old.n) == 0) {
                jb_put(&b, s.p + from, i - from);
                jb_put(&b, neu.p, neu.n);
                i += old.n;
                from = i;
                left--;
            } else {
                i++;
            }
        }
        jb_put(&b, s.p + from, s.n - from);
    }
    return jv_from_buf(c, line, &b);
}

static jv *b_indent(jctx *c, int line, jstr s, size_t width, bool first, bool blank) {
    jbuf b = {.max = c->a.max};
    size_t start = 0, idx = 0;
    for (;;) {
        const char *nl = memchr(s.p + start, '\n', s.n - start);
        size_t end = nl ? (size_t)(nl - s.p) : s.n;
        if (idx) jb_putc(&b, '\n');
        if (!((!first && idx == 0) || (!blank && end == start)))
            for (size_t k = 0; k < width; k++) jb_putc(&b, ' ');
        jb_put(&b, s.p + start, end - start);
        if (!nl) break;
        start = end + 1;
        idx++;
    }
    return jv_from_buf(c, line, &b);
}

/* JavaScript's join of payloads: null and undefined give "". */
static jv *b_join(jctx *c, int line, const jv *list, jstr sep) {
    jbuf b = {.max = c->a.max};
    for (size_t i = 0; i < list->u.l.n; i++) {
        if (i) jb_put(&b, sep.p, sep.n);
        const jv *x = list->u.l.it[i];
        if (x->kind != JV_UNDEF && x->kind != JV_NULL && !jv_raw(c, line, &b, x)) {
            jb_free(&b);
            return NULL;
        }
    }
    return jv_from_buf(c, line, &b);
}

static jv *b_join_chars(jctx *c, int line, jstr s, jstr sep) {
    jbuf b = {.max = c->a.max};
    for (size_t i = 0; i < s.n;) {
        size_t l;
        ju_decode(s.p + i, s.n - i, &l);
        if (i) jb_put(&b, sep.p, sep.n);
        jb_put(&b, s.p + i, l);
        i += l;
    }
    return jv_from_buf(c, line, &b);
}

/* ------------------------------------------------------------ dicts */

static jv *b_pair(jctx *c, int line, jstr k, jv *v) {
    jv *p = jv_list(c, line, 2);
    if (!p || !(p->u.l.it[0] = jv_str(c, line, k.p, k.n))) return NULL;
    p->u.l.it[1] = v;
    return p;
}

static jv *b_dict_list(jctx *c, int line, const jmap *m, jfunc what) {
    jv *l = jv_list(c, line, m->n);
    for (size_t i = 0; l && i < m->n; i++) {
        jv *x = what == JFN_ITEMS ? b_pair(c, line, m->k[i], m->v[i])
                : what == JFN_KEYS ? jv_str(c, line, m->k[i].p, m->k[i].n)
                                   : m->v[i];
        if (!(l->u.l.it[i] = x)) return NULL;
    }
    return l;
}

/* ------------------------------------------------------------ functions */

static jv *b_namespace(jctx *c, int line, jv **a, size_t n, jmap *kw) {
    if (n > 1) return jerr(c, line, CT_ERR_ARG, "namespace() takes at most 1 positional argument, got %zu", n);
    jv *ns = jv_map(c, line, JV_NS);
    if (!ns) return NULL;
    if (n == 1) {
        jv *src = a[0];
        if (src->kind == JV_MAP || src->kind == JV_KWARGS) {
            for (size_t i = 0; i < src->u.m->n; i++)
                if (!jmap_set(c, line, ns->u.m, src->u.m->k[i], src->u.m->v[i])) return NULL;
        } else if (src->kind == JV_LIST) {
            for (size_t i = 0; i < src->u.l.n; i++) {
                jv *pair = src->u.l.it[i];
                jv *k = NULL, *v = NULL;
                if (pair->kind == JV_LIST && pair->u.l.n == 2) {
                    k = pair->u.l.it[0];
                    v = pair->u.l.it[1];
                } else if (pair->kind == JV_STR) {
                    /* a two-character string is a pair of characters */
                    size_t l0, l1;
                    jstr s = pair->u.s;
                    if (s.n) {
                        ju_decode(s.p, s.n, &l0);
                        if (l0 < s.n) {
                            ju_decode(s.p + l0, s.n - l0, &l1);
                            if (l0 + l1 == s.n) {
                                k = jv_str(c, line, s.p, l0);
                                v = jv_str(c, line, s.p + l0, l1);
                            }
                        }
                    }
                }
                if (!k || !v)
                    return c->st ? NULL : jerr(c, line, CT_ERR_ARG, "namespace() expects a dict or a list of [key, value] pairs");
                if (k->kind != JV_STR) return jerr(c, line, CT_ERR_ARG, "namespace() keys must be strings");
                if (!jmap_set(c, line, ns->u.m, k->u.s, v)) return NULL;
            }
        } else {
            return jerr(c, line, CT_ERR_ARG, "namespace(): a %s is not iterable", jv_kind_name(src));
        }
    }
    for (size_t i = 0; i < kw->n; i++)
        if (!jmap_set(c, line, ns->u.m, kw->k[i], kw->v[i])) return NULL;
    return ns;
}

static jv *b_range(jctx *c, int line, jv **a, size_t n) {
    if (n < 1 || n > 3) return jerr(c, line, CT_ERR_ARG, "range() takes 1 to 3 numbers, got %zu arguments", n);
    for (size_t i = 0; i < n; i++)
        if (a[i]->kind != JV_INT && a[i]->kind != JV_FLOAT)
            return jerr(c, line, CT_ERR_ARG, "range() takes numbers, not a %s", jv_kind_name(a[i]));
    double start = a[0]->u.d, stop = n > 1 ? a[1]->u.d : 0, step = n > 2 ? a[2]->u.d : 1;
    if (n == 1) {
        stop = start;
        start = 0;
    }
    if (step == 0) return jerr(c, line, CT_ERR_ARG, "range() step must not be zero");
    double count = ceil((stop - start) / step);
    if (!(count > 0)) count = 0;
    int64_t budget = c->t->lim.steps_max - c->steps;
    if (count > (double)budget + 1)
        return jerr(c, line, CT_ERR_OOM, "range() of %.0f items would take the render past %lld steps (steps_max)",
                    count, (long long)c->t->lim.steps_max);
    size_t cap = (size_t)count + 2, k = 0;
    jv **it = jalloc(c, line, cap * sizeof *it);
    if (!it) return NULL;
    for (double i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (k >= cap) break;
        if (!(it[k++] = jv_num(c, line, floor(i) == i && isfinite(i) ? JV_INT : JV_FLOAT, i))) return NULL;
    }
    c->steps += (int64_t)k;
    jv *l = jv_new(c, line, JV_LIST);
    if (l) {
        l->u.l.it = it;
        l->u.l.n = k;
    }
    return l;
}

static jv *b_prefix_test(jctx *c, int line, jstr s, jv **a, size_t n, bool start) {
    const char *name = start ? "startswith" : "endswith";
    if (n == 0) return jerr(c, line, CT_ERR_ARG, "%s() takes at least one argument", name);
    if (a[0]->kind == JV_STR) return jv_bool(c, start ? b_starts(s, a[0]->u.s) : b_ends(s, a[0]->u.s));
    if (a[0]->kind == JV_LIST) {
        for (size_t i = 0; i < a[0]->u.l.n; i++) {
            jv *x = a[0]->u.l.it[i];
            if (x->kind != JV_STR) return jerr(c, line, CT_ERR_ARG, "%s(): the tuple's elements must be strings", name);
            if (start ? b_starts(s, x->u.s) : b_ends(s, x->u.s)) return c->yes;
        }
        return c->no;
    }
    return jerr(c, line, CT_ERR_ARG, "%s() takes a string or a tuple of strings", name);
}

jv *jinja_call(jctx *c, int line, jv *fn, jv **args, size_t na, jmap *kw) {
    jfunc id = (jfunc)fn->u.f.id;
    jv *self = fn->u.f.self;
    if (id == JFN_NAMESPACE) return b_namespace(c, line, args, na, kw);
    /* the others get keyword arguments as one trailing value, as the reference passes them */
    jv **a = args;
    size_t n = na;
    if (kw->n) {
        jv *k = jv_new(c, line, JV_KWARGS);
        a = jalloc(c, line, (na + 1) * sizeof *a);
        if (!k || !a) return NULL;
        k->u.m = kw;
        if (na) memcpy(a, args, na * sizeof *a);
        a[n++] = k;
    }
    switch (id) {
    case JFN_RAISE: {
        jbuf b = {.max = 4096};
        if (n && !jv_raw(c, line, &b, a[0])) {
            jb_free(&b);
            return NULL;
        }
        jerr(c, line, CT_ERR_ARG, "raise_exception: %.*s", (int)b.n, b.p ? b.p : "");
        jb_free(&b);
        return NULL;
    }
    case JFN_RANGE: return b_range(c, line, a, n);
    case JFN_UPPER: return b_case(c, line, self->u.s, true);
    case JFN_LOWER: return b_case(c, line, self->u.s, false);
    case JFN_STRIP: return b_trim(c, line, self->u.s, true, true);
    case JFN_LSTRIP: return b_trim(c, line, self->u.s, true, false);
    case JFN_RSTRIP: return b_trim(c, line, self->u.s, false, true);
    case JFN_TITLE: return b_title(c, line, self->u.s);
    case JFN_CAPITALIZE: return b_capitalize(c, line, self->u.s);
    case JFN_STARTSWITH: return b_prefix_test(c, line, self->u.s, a, n, true);
    case JFN_ENDSWITH: return b_prefix_test(c, line, self->u.s, a, n, false);
    case JFN_SPLIT: return b_split(c, line, self->u.s, a, n);
    case JFN_REPLACE: return b_replace(c, line, self->u.s, a, n);
    case JFN_GET: {
        if (n == 0 || a[0]->kind != JV_STR)
            return jerr(c, line, CT_ERR_ARG, "get(): the key must be a string");
        jv *v = jmap_get(self->u.m, a[0]->u.s);
        return v ? v : n > 1 ? a[1] : c->null;
    }
    case JFN_ITEMS:
    case JFN_KEYS:
    case JFN_VALUES: return b_dict_list(c, line, self->u.m, id);
    default: return jerr(c, line, CT_ERR_ARG, "unknown function");
    }
}

/* ------------------------------------------------------------ tests */

jv *jinja_test(jctx *c, const jnode *n, jv *v) {
    bool r = false;
    switch ((jtest)n->op) {
    case JTE_BOOLEAN: r = v->kind == JV_BOOL; break;
    case JTE_CALLABLE: r = v->kind == JV_FUNC; break;
    case JTE_DEFINED: r = v->kind != JV_UNDEF; break;
    case JTE_UNDEFINED: r = v->kind == JV_UNDEF; break;
    case JTE_ODD:
    case JTE_EVEN:
        if (v->kind != JV_INT)
            return jerr(c, n->line, CT_ERR_ARG, "'is %s' applies to integers, not a %s", n->op == JTE_ODD ? "odd" : "even",
                        jv_kind_name(v));
        r = (fmod(v->u.d, 2) != 0) == (n->op == JTE_ODD);
        break;
    case JTE_FALSE: r = v->kind == JV_BOOL && !v->u.b; break;
    case JTE_TRUE: r = v->kind == JV_BOOL && v->u.b; break;
    case JTE_NONE: r = v->kind == JV_NULL; break;
    case JTE_STRING: r = v->kind == JV_STR; break;
    case JTE_NUMBER: r = v->kind == JV_INT || v->kind == JV_FLOAT; break;
    case JTE_INTEGER: r = v->kind == JV_INT; break;
    case JTE_ITERABLE: r = (v->kind == JV_LIST && !v->tuple) || v->kind == JV_STR; break;
    case JTE_MAPPING: r = v->kind == JV_MAP || v->kind == JV_KWARGS; break;
    case JTE_SEQUENCE: r = v->kind == JV_LIST || v->kind == JV_MAP || v->kind == JV_KWARGS || v->kind == JV_STR; break;
    case JTE_LOWER: r = v->kind == JV_STR && b_is_lower(v->u.s); break;
    case JTE_UPPER: r = v->kind == JV_STR && b_is_upper(v->u.s); break;
    default: return jerr(c, n->line, CT_ERR_ARG, "unknown test");
    }
    return jv_bool(c, r != n->flag);
}

/* ------------------------------------------------------------ filters */

static jv *b_filter_fail(jctx *c, const jnode *n, const jv *v) {
    char what[200];
    jinja_undefined_name(v->kind == JV_UNDEF ? n->a : NULL, what, sizeof what);
    return jerr(c, n->line, CT_ERR_ARG, "the filter '%.*s%s' does not apply to a %s%s", (int)n->s.n, n->s.p,
                n->flag ? "(...)" : "", jv_kind_name(v), what);
}

static jv *b_tojson(jctx *c, const jnode *n, jv *v, const bargs *b) {
    jjson_opts o = {.indent = -1, .undefined_as_null = true};
    if (b) {
        jv *indent = jmap_get(&b->kw, (jstr){"indent", 6});
        jv *ascii = jmap_get(&b->kw, (jstr){"ensure_ascii", 12});
        jv *sort = jmap_get(&b->kw, (jstr){"sort_keys", 9});
        jv *seps = jmap_get(&b->kw, (jstr){"separators", 10});
        if (indent && indent->kind != JV_INT && indent->kind != JV_NULL)
            return jerr(c, n->line, CT_ERR_ARG, "tojson(): indent must be an integer");
        if (indent && indent->kind == JV_INT) {
            if (indent->u.d < 0 || indent->u.d > 64)
                return jerr(c, n->line, CT_ERR_ARG, "tojson(): indent %.0f is out of range (0..64)", indent->u.d);
            o.indent = (int)indent->u.d;
        }
        if (ascii && ascii->kind != JV_BOOL) return jerr(c, n->line, CT_ERR_ARG, "tojson(): ensure_ascii must be a boolean");
        o.ensure_ascii = ascii && ascii->u.b;
        if (sort && sort->kind != JV_BOOL) return jerr(c, n->line, CT_ERR_ARG, "tojson(): sort_keys must be a boolean");
        if (sort && sort->u.b)
            return jerr(c, n->line, CT_ERR_ARG,
                        "unsupported: tojson(sort_keys=true) (the reference orders keys by locale collation)");
        if (seps && seps->kind == JV_LIST) {
            if (seps->u.l.n != 2 || seps->u.l.it[0]->kind != JV_STR || seps->u.l.it[1]->kind != JV_STR)
                return jerr(c, n->line, CT_ERR_ARG, "tojson(): separators must be a tuple of two strings");
            o.item_sep = seps->u.l.it[0]->u.s;
            o.key_sep = seps->u.l.it[1]->u.s;
        } else if (seps && seps->kind != JV_NULL) {
            return jerr(c, n->line, CT_ERR_ARG, "tojson(): separators must be a tuple of two strings");
        }
    }
    jbuf out = {.max = c->a.max};
    if (!jv_json(c, n->line, &out, v, &o, 0)) {
        jb_free(&out);
        return NULL;
    }
    return jv_from_buf(c, n->line, &out);
}

/* The filter without parentheses. */
static jv *b_filter_plain(jctx *c, const jnode *n, jv *v) {
    int line = n->line;
    jfilter f = (jfilter)n->op;
    if (f == JF_SAFE) return v;
    if (f == JF_TOJSON) return b_tojson(c, n, v, NULL);
    if (v->kind == JV_LIST) {
        size_t len = v->u.l.n;
        switch (f) {
        case JF_LIST: return v;
        case JF_FIRST:
        case JF_LAST:
            if (!len) return jerr(c, line, CT_ERR_ARG, "'%s' of an empty list", f == JF_FIRST ? "first" : "last");
            return v->u.l.it[f == JF_FIRST ? 0 : len - 1];
        case JF_LENGTH: return jv_num(c, line, JV_INT, (double)len);
        case JF_REVERSE: {
            jv *r = jv_list(c, line, len);
            for (size_t i = 0; r && i < len; i++) r->u.l.it[i] = v->u.l.it[len - 1 - i];
            return r;
        }
        case JF_JOIN: return b_join(c, line, v, (jstr){"", 0});
        case JF_STRING: {
            jjson_opts o = {.indent = -1, .undefined_as_null = false};
            jbuf b = {.max = c->a.max};
            if (!jv_json(c, line, &b, v, &o, 0)) {
                jb_free(&b);
                return NULL;
            }
            return jv_from_buf(c, line, &b);
        }
        default: break;
        }
    } else if (v->kind == JV_STR) {
        jstr s = v->u.s;
        switch (f) {
        case JF_LENGTH: return jv_num(c, line, JV_INT, (double)ju_utf16_len(s));
        case JF_UPPER: return b_case(c, line, s, true);
        case JF_LOWER: return b_case(c, line, s, false);
        case JF_TITLE: return b_title(c, line, s);
        case JF_CAPITALIZE: return b_capitalize(c, line, s);
        case JF_TRIM: return b_trim(c, line, s, true, true);
        case JF_INDENT: return b_indent(c, line, s, 4, false, false);
        case JF_JOIN:
        case JF_STRING: return v;
        case JF_INT: {
            double d = b_parse_num(s, true);
            return jv_num(c, line, JV_INT, isnan(d) ? 0 : d);
        }
        case JF_FLOAT: {
            double d = b_parse_num(s, false);
            return jv_num(c, line, JV_FLOAT, isnan(d) ? 0 : d);
        }
        default: break;
        }
    } else if (v->kind == JV_INT || v->kind == JV_FLOAT) {
        switch (f) {
        case JF_ABS: return jv_num(c, line, (jv_kind)v->kind, fabs(v->u.d));
        case JF_INT: return jv_num(c, line, JV_INT, floor(v->u.d));
        case JF_FLOAT: return jv_num(c, line, JV_FLOAT, v->u.d);
        case JF_STRING: {
            jbuf b = {.max = c->a.max};
            if (!jv_print(c, line, &b, v, 0)) {
                jb_free(&b);
                return NULL;
            }
            return jv_from_buf(c, line, &b);
        }
        default: break;
        }
    } else if (v->kind == JV_MAP || v->kind == JV_KWARGS) {
        if (f == JF_ITEMS) return b_dict_list(c, line, v->u.m, JFN_ITEMS);
        if (f == JF_LENGTH) return jv_num(c, line, JV_INT, (double)v->u.m->n);
    } else if (v->kind == JV_BOOL) {
        switch (f) {
        case JF_BOOL: return v;
        case JF_INT: return jv_num(c, line, JV_INT, v->u.b);
        case JF_FLOAT: return jv_num(c, line, JV_FLOAT, v->u.b);
        case JF_STRING: return jv_str(c, line, v->u.b ? "true" : "false", v->u.b ? 4 : 5);
        default: break;
        }
    }
    return b_filter_fail(c, n, v);
}

/* The filter with parentheses. */
static jv *b_filter_call(jctx *c, jenv *env, const jnode *n, jv *v) {
    int line = n->line;
    jfilter f = (jfilter)n->op;
    bargs b;
    if (!b_eval_args(c, env, n, &b)) return NULL;
    if (f == JF_TOJSON) return b_tojson(c, n, v, &b);
    if (f == JF_JOIN) {
        if (v->kind != JV_STR && v->kind != JV_LIST) return b_filter_fail(c, n, v);
        jv *sep = b_arg(&b, 0, "separator");
        if (sep && sep->kind != JV_STR) return jerr(c, line, CT_ERR_ARG, "join(): the separator must be a string");
        jstr s = sep ? sep->u.s : (jstr){"", 0};
        return v->kind == JV_STR ? b_join_chars(c, line, v->u.s, s) : b_join(c, line, v, s);
    }
    if (f == JF_INT || f == JF_FLOAT) {
        jv *dflt = b_arg(&b, 0, "default");
        if (v->kind == JV_STR) {
            double d = b_parse_num(v->u.s, f == JF_INT);
            if (isnan(d)) return dflt ? dflt : jv_num(c, line, f == JF_INT ? JV_INT : JV_FLOAT, 0);
            return jv_num(c, line, f == JF_INT ? JV_INT : JV_FLOAT, d);
        }
        if (v->kind == JV_INT || v->kind == JV_FLOAT) return v;
        if (v->kind == JV_BOOL) return jv_num(c, line, f == JF_INT ? JV_INT : JV_FLOAT, v->u.b);
        return b_filter_fail(c, n, v);
    }
    if (f == JF_DEFAULT) {
        jv *dflt = b.n > 0 ? b.a[0] : NULL;
        jv *boolean = b_arg(&b, 1, "boolean");
        if (!dflt && !(dflt = jv_str(c, line, "", 0))) return NULL;
        if (boolean && boolean->kind != JV_BOOL) return jerr(c, line, CT_ERR_ARG, "default(): boolean must be true or false");
        if (v->kind == JV_UNDEF || (boolean && boolean->u.b && !jv_truthy(v))) return dflt;
        return v;
    }
    if (v->kind == JV_STR && f == JF_INDENT) {
        jv *width = b_arg(&b, 0, "width"), *first = b_arg(&b, 1, "first"), *blank = b_arg(&b, 2, "blank");
        if (width && width->kind != JV_INT) return jerr(c, line, CT_ERR_ARG, "indent(): width must be an integer");
        double w = width ? width->u.d : 4;
        if (w < 0 || w > 1024) return jerr(c, line, CT_ERR_ARG, "indent(): width %.0f is out of range (0..1024)", w);
        return b_indent(c, line, v->u.s, (size_t)w, first && b_payload_truthy(first), blank && b_payload_truthy(blank));
    }
    if (v->kind == JV_STR && f == JF_REPLACE) {
        jv **a = jalloc(c, line, (b.n + 1) * sizeof *a);
        if (!a) return NULL;
        if (b.n) memcpy(a, b.a, b.n * sizeof *a);
        jv *k = jv_new(c, line, JV_KWARGS);
        if (!k) return NULL;
        k->u.m = &b.kw;
        a[b.n] = k;
        return b_replace(c, line, v->u.s, a, b.n + 1);
    }
    if ((v->kind == JV_MAP || v->kind == JV_KWARGS) && f == JF_ITEMS) return b_dict_list(c, line, v->u.m, JFN_ITEMS);
    return b_filter_fail(c, n, v);
}

jv *jinja_filter(jctx *c, jenv *env, const jnode *n, jv *operand) {
    return n->flag ? b_filter_call(c, env, n, operand) : b_filter_plain(c, n, operand);
}
