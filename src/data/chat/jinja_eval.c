/*
 * The Jinja subset's interpreter: @huggingface/jinja's Interpreter (runtime.ts)
 * in C, over the tree jinja_parse.c builds. Statements write straight into
 * the output buffer; a {% continue %} or {% break %} drops what its iteration
 * wrote, as the reference (which throws away the iteration's partial string)
 * does. Scopes follow the reference: a {% for %} gets one scope for all its
 * iterations (so a {% set %} in the body is seen by later iterations but not
 * after the loop), {% if %} none. Binary operators follow its evaluation
 * order and type rules exactly (numbers are JavaScript doubles, integers
 * among them; == is JavaScript's loose equality).
 * Also the entry points ct_jinja_parse, ct_jinja_free and ct_jinja_render.
 * Leaves out: the filters, tests and functions (jinja_builtin.c).
 */
#include "data/chat/jinja_impl.h"
#include "ctrain/data.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum ev_flow { EV_OK = 0, EV_BREAK, EV_CONTINUE, EV_ERR } ev_flow;

static ev_flow ev_block(jctx *c, jenv *env, jnode *const *body, size_t n);

/* ------------------------------------------------------------ scopes */

static jenv *ev_env(jctx *c, int line, jenv *parent) {
    jenv *e = jalloc(c, line, sizeof *e);
    if (e) e->parent = parent;
    return e;
}

static jv *ev_lookup(jctx *c, const jenv *env, jstr name) {
    for (; env; env = env->parent) {
        jv *v = jmap_get(&env->vars, name);
        if (v) return v;
    }
    return c->undef;
}

/* ------------------------------------------------------------ output */

static bool ev_out_check(jctx *c, int line) {
    if (c->out.over) jerr(c, line, CT_ERR_OOM, "the rendered text is longer than %zu bytes (output_max)", c->out.max);
    else if (c->out.oom) jerr(c, line, CT_ERR_OOM, "out of memory for the rendered text");
    return !c->out.over && !c->out.oom;
}

static bool ev_step(jctx *c, int line, int64_t k) {
    c->steps += k;
    if (c->steps <= c->t->lim.steps_max) return true;
    jerr(c, line, CT_ERR_OOM, "the render takes more than %lld loop iterations (steps_max)",
         (long long)c->t->lim.steps_max);
    return false;
}

/* ------------------------------------------------------------ binary operators */

static bool ev_numeric_like(const jv *v) { return v->kind == JV_INT || v->kind == JV_FLOAT || v->kind == JV_BOOL; }
static double ev_numval(const jv *v) { return v->kind == JV_BOOL ? (double)v->u.b : v->u.d; }

static const char *const ev_op_names[JB_COUNT] = {"or", "and", "==", "!=", "<", ">", "<=", ">=", "in",
                                                   "not in", "+", "-", "~", "*", "/", "//", "%", "**"};

static jv *ev_concat(jctx *c, int line, const jv *x, const jv *y) {
    jbuf b = {.max = c->a.max};
    if (!jv_raw(c, line, &b, x) || !jv_raw(c, line, &b, y)) {
        jb_free(&b);
        return NULL;
    }
    return jv_from_buf(c, line, &b);
}

static bool ev_contains(jstr hay, jstr needle) {
    if (needle.n == 0) return true;
    if (needle.n > hay.n) return false;
    for (size_t i = 0; i + needle.n <= hay.n; i++)
        if (memcmp(hay.p + i, needle.p, needle.n) == 0) return true;
    return false;
}

/* The source of a variable or an access into one ("message['content']"),
 * appended to buf[*o..cap); false when n is anything else or it does not fit. */
static bool ev_expr_text(const jnode *n, char *buf, size_t cap, size_t *o, int depth) {
    if (depth > 8) return false;
    int k = -1;
    if (n->kind == JN_NAME) {
        k = snprintf(buf + *o, cap - *o, "%.*s", (int)n->s.n, n->s.p);
    } else if (n->kind == JN_MEMBER && ev_expr_text(n->a, buf, cap, o, depth + 1)) {
        const jnode *b = n->b;
        if (b->kind == JN_INT) k = snprintf(buf + *o, cap - *o, "[%.0f]", b->num);
        else if (n->flag && b->kind == JN_STR) k = snprintf(buf + *o, cap - *o, "['%.*s']", (int)b->s.n, b->s.p);
        else if (!n->flag && b->kind == JN_NAME) k = snprintf(buf + *o, cap - *o, ".%.*s", (int)b->s.n, b->s.p);
    }
    if (k < 0 || (size_t)k >= cap - *o) return false;
    *o += (size_t)k;
    return true;
}

const char *jinja_undefined_name(const jnode *n, char *buf, size_t cap) {
    size_t o = 0;
    char expr[160];
    buf[0] = '\0';
    if (n && ev_expr_text(n, expr, sizeof expr, &o, 0)) snprintf(buf, cap, ": '%s' is undefined", expr);
    return buf;
}

static jv *ev_binary(jctx *c, jenv *env, const jnode *n) {
    int line = n->line;
    jv *x = jinja_eval(c, env, n->a);
    if (!x) return NULL;
    if (n->op == JB_AND) return jv_truthy(x) ? jinja_eval(c, env, n->b) : x;
    if (n->op == JB_OR) return jv_truthy(x) ? x : jinja_eval(c, env, n->b);
    jv *y = jinja_eval(c, env, n->b);
    if (!y) return NULL;
    jbinop op = (jbinop)n->op;
    if (op == JB_EQ) return jv_bool(c, jv_loose_eq(c, x, y));
    if (op == JB_NE) return jv_bool(c, !jv_loose_eq(c, x, y));
    if (c->st) return NULL;
    if (x->kind == JV_UNDEF || y->kind == JV_UNDEF) {
        if (y->kind == JV_UNDEF && (op == JB_IN || op == JB_NOTIN)) return jv_bool(c, op == JB_NOTIN);
        char what[200];
        jinja_undefined_name(x->kind == JV_UNDEF ? n->a : n->b, what, sizeof what);
        return jerr(c, line, CT_ERR_ARG, "cannot apply '%s' to an undefined value%s (%s %s %s)", ev_op_names[op],
                    what, jv_kind_name(x), ev_op_names[op], jv_kind_name(y));
    }
    if (x->kind == JV_NULL || y->kind == JV_NULL)
        return jerr(c, line, CT_ERR_ARG, "cannot apply '%s' to none (%s %s %s)", ev_op_names[op], jv_kind_name(x),
                    ev_op_names[op], jv_kind_name(y));
    if (op == JB_CONCAT) return ev_concat(c, line, x, y);
    if (op == JB_POW && ev_numeric_like(x) && ev_numeric_like(y)) {
        double a = ev_numval(x), b = ev_numval(y);
        if (a == 0 && b < 0) return jerr(c, line, CT_ERR_ARG, "0.0 cannot be raised to a negative power");
        double r = pow(a, b);
        if (!isfinite(r)) return jerr(c, line, CT_ERR_ARG, "exponentiation result is not a finite real number");
        return jv_num(c, line, x->kind == JV_FLOAT || y->kind == JV_FLOAT || b < 0 ? JV_FLOAT : JV_INT, r);
    }
    bool xn = x->kind == JV_INT || x->kind == JV_FLOAT, yn = y->kind == JV_INT || y->kind == JV_FLOAT;
    if (xn && yn) {
        double a = x->u.d, b = y->u.d;
        jv_kind k = x->kind == JV_FLOAT || y->kind == JV_FLOAT ? JV_FLOAT : JV_INT;
        switch (op) {
        case JB_ADD: return jv_num(c, line, k, a + b);
        case JB_SUB: return jv_num(c, line, k, a - b);
        case JB_MUL: return jv_num(c, line, k, a * b);
        case JB_DIV: return jv_num(c, line, JV_FLOAT, a / b);
        case JB_FLOORDIV: return jv_num(c, line, k, floor(a / b));
        case JB_MOD: return jv_num(c, line, k, fmod(a, b));
        case JB_LT: return jv_bool(c, a < b);
        case JB_GT: return jv_bool(c, a > b);
        case JB_GE: return jv_bool(c, a >= b);
        case JB_LE: return jv_bool(c, a <= b);
        default: break;
        }
    } else if (x->kind == JV_LIST && y->kind == JV_LIST) {
        if (op == JB_ADD) {
            jv *l = jv_list(c, line, x->u.l.n + y->u.l.n);
            if (!l) return NULL;
            if (x->u.l.n) memcpy(l->u.l.it, x->u.l.it, x->u.l.n * sizeof(jv *));
            if (y->u.l.n) memcpy(l->u.l.it + x->u.l.n, y->u.l.it, y->u.l.n * sizeof(jv *));
            return l;
        }
    } else if (y->kind == JV_LIST && (op == JB_IN || op == JB_NOTIN)) {
        bool member = false;
        for (size_t i = 0; i < y->u.l.n && !member; i++) member = jv_strict_eq(y->u.l.it[i], x);
        return jv_bool(c, member == (op == JB_IN));
    }
    if ((x->kind == JV_STR || y->kind == JV_STR) && op == JB_ADD) return ev_concat(c, line, x, y);
    if (x->kind == JV_STR && y->kind == JV_STR && (op == JB_IN || op == JB_NOTIN))
        return jv_bool(c, ev_contains(y->u.s, x->u.s) == (op == JB_IN));
    if (x->kind == JV_STR && (y->kind == JV_MAP || y->kind == JV_KWARGS) && (op == JB_IN || op == JB_NOTIN))
        return jv_bool(c, (jmap_get(y->u.m, x->u.s) != NULL) == (op == JB_IN));
    return jerr(c, line, CT_ERR_ARG, "unknown operator '%s' between %s and %s", ev_op_names[op], jv_kind_name(x),
                jv_kind_name(y));
}

/* ------------------------------------------------------------ members and slices */

/* utils.ts slice(): Python slicing over n items; the chosen indices into idx
 * (room for n), their count returned. */
static size_t ev_slice_idx(jctx *c, int line, size_t len, const jv *a, const jv *b, const jv *s, size_t *idx) {
    double n = (double)len, step = s->kind == JV_INT ? s->u.d : 1;
    double dir = step > 0 ? 1 : step < 0 ? -1 : 0;
    double start, stop;
    if (dir >= 0) {
        start = a->kind == JV_INT ? a->u.d : 0;
        start = start < 0 ? fmax(n + start, 0) : fmin(start, n);
        stop = b->kind == JV_INT ? b->u.d : n;
        stop = stop < 0 ? fmax(n + stop, 0) : fmin(stop, n);
    } else {
        start = a->kind == JV_INT ? a->u.d : n - 1;
        start = start < 0 ? fmax(n + start, -1) : fmin(start, n - 1);
        stop = b->kind == JV_INT ? b->u.d : -1;
        stop = stop < -1 ? fmax(n + stop, -1) : fmin(stop, n - 1);
    }
    size_t k = 0;
    (void)c;
    (void)line;
    for (double i = start; dir * i < dir * stop && k < len; i += step) idx[k++] = (size_t)i;
    return k;
}

static jv *ev_slice(jctx *c, jenv *env, const jv *obj, const jnode *sl) {
    int line = sl->line;
    if (obj->kind != JV_LIST && obj->kind != JV_STR)
        return jerr(c, line, CT_ERR_ARG, "only a list or a string can be sliced, not a %s", jv_kind_name(obj));
    jv *part[3];
    const jnode *nodes[3] = {sl->a, sl->b, sl->c};
    static const char *const what[3] = {"start", "stop", "step"};
    for (int i = 0; i < 3; i++) {
        part[i] = nodes[i] ? jinja_eval(c, env, nodes[i]) : c->undef;
        if (!part[i]) return NULL;
        if (part[i]->kind != JV_INT && part[i]->kind != JV_UNDEF)
            return jerr(c, line, CT_ERR_ARG, "a slice's %s must be an integer, not a %s", what[i], jv_kind_name(part[i]));
    }
    if (obj->kind == JV_LIST) {
        size_t *idx = jalloc(c, line, (obj->u.l.n + 1) * sizeof *idx);
        if (!idx) return NULL;
        size_t k = ev_slice_idx(c, line, obj->u.l.n, part[0], part[1], part[2], idx);
        jv *l = jv_list(c, line, k);
        for (size_t i = 0; l && i < k; i++) l->u.l.it[i] = obj->u.l.it[idx[i]];
        return l;
    }
    /* a string slices by code points (Array.from) */
    jstr s = obj->u.s;
    size_t n_cp = 0;
    for (size_t i = 0; i < s.n; i++) n_cp += ((unsigned char)s.p[i] & 0xC0) != 0x80;
    size_t *off = jalloc(c, line, (n_cp + 1) * sizeof *off), *idx = jalloc(c, line, (n_cp + 1) * sizeof *idx);
    if (!off || !idx) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < s.n; i++)
        if (((unsigned char)s.p[i] & 0xC0) != 0x80) off[k++] = i;
    off[n_cp] = s.n;
    k = ev_slice_idx(c, line, n_cp, part[0], part[1], part[2], idx);
    jbuf b = {.max = c->a.max};
    for (size_t i = 0; i < k; i++) jb_put(&b, s.p + off[idx[i]], off[idx[i] + 1] - off[idx[i]]);
    return jv_from_buf(c, line, &b);
}

/* The UTF-16 unit i of s (negative from the end) as a string; a lone
 * surrogate half comes back as U+FFFD. */
static jv *ev_str_at(jctx *c, int line, jstr s, double i) {
    double len = (double)ju_utf16_len(s);
    if (i < 0) i += len;
    if (i < 0 || i >= len) return c->undef;
    size_t unit = 0;
    for (size_t k = 0; k < s.n;) {
        size_t l;
        uint32_t cp = ju_decode(s.p + k, s.n - k, &l);
        size_t units = cp >= 0x10000 ? 2 : 1;
        if ((double)(unit + units) > i) {
            if (units == 2) return jv_str(c, line, "\xEF\xBF\xBD", 3);
            return jv_str(c, line, s.p + k, l);
        }
        unit += units;
        k += l;
    }
    return c->undef;
}

static jv *ev_func(jctx *c, int line, jfunc id, jv *self) {
    jv *f = jv_new(c, line, JV_FUNC);
    if (f) {
        f->u.f.id = id;
        f->u.f.self = self;
    }
    return f;
}

/* A built-in of a value (StringValue, ArrayValue and ObjectValue builtins). */
static jv *ev_builtin(jctx *c, int line, jv *obj, jstr name) {
    int id = jinja_lookup(jinja_func_names, JFN_COUNT, name);
    if (obj->kind == JV_STR) {
        if (name.n == 6 && memcmp(name.p, "length", 6) == 0)
            return jv_num(c, line, JV_INT, (double)ju_utf16_len(obj->u.s));
        if (id >= JFN_UPPER && id <= JFN_REPLACE) return ev_func(c, line, (jfunc)id, obj);
    } else if (obj->kind == JV_LIST) {
        if (name.n == 6 && memcmp(name.p, "length", 6) == 0) return jv_num(c, line, JV_INT, (double)obj->u.l.n);
    } else if (obj->kind == JV_MAP || obj->kind == JV_KWARGS) {
        if (id >= JFN_GET && id <= JFN_VALUES) return ev_func(c, line, (jfunc)id, obj);
    }
    return c->undef;
}

static jv *ev_member(jctx *c, jenv *env, const jnode *n) {
    int line = n->line;
    jv *obj = jinja_eval(c, env, n->a);
    if (!obj) return NULL;
    jv *prop;
    if (n->flag) {
        if (n->b->kind == JN_SLICE) return ev_slice(c, env, obj, n->b);
        prop = jinja_eval(c, env, n->b);
        if (!prop) return NULL;
    } else if (n->b->kind == JN_INT) {
        prop = jv_num(c, line, JV_INT, n->b->num);
    } else {
        prop = jv_str(c, line, n->b->s.p, n->b->s.n);
    }
    if (!prop) return NULL;
    if (obj->kind == JV_MAP || obj->kind == JV_NS || obj->kind == JV_KWARGS) {
        if (prop->kind != JV_STR)
            return jerr(c, line, CT_ERR_ARG, "a dict's keys are strings; cannot look up a %s", jv_kind_name(prop));
        jv *v = jmap_get(obj->u.m, prop->u.s);
        if (v) return v;
        return obj->kind == JV_NS ? c->undef : ev_builtin(c, line, obj, prop->u.s);
    }
    if (obj->kind == JV_LIST || obj->kind == JV_STR) {
        if (prop->kind == JV_INT) {
            if (obj->kind == JV_STR) return ev_str_at(c, line, obj->u.s, prop->u.d);
            double i = prop->u.d < 0 ? prop->u.d + (double)obj->u.l.n : prop->u.d;
            return i >= 0 && i < (double)obj->u.l.n ? obj->u.l.it[(size_t)i] : c->undef;
        }
        if (prop->kind == JV_STR) return ev_builtin(c, line, obj, prop->u.s);
        return jerr(c, line, CT_ERR_ARG, "a %s is indexed by an integer or a name, not a %s", jv_kind_name(obj),
                    jv_kind_name(prop));
    }
    if (prop->kind != JV_STR || obj->kind == JV_UNDEF) {
        char what[200];
        jinja_undefined_name(obj->kind == JV_UNDEF ? n->a : NULL, what, sizeof what);
        if (prop->kind != JV_STR)
            return jerr(c, line, CT_ERR_ARG, "cannot index a %s with a %s%s", jv_kind_name(obj), jv_kind_name(prop),
                        what);
        /* as the reference: an attribute of an undefined value is undefined */
    }
    return c->undef;
}

/* ------------------------------------------------------------ calls */

static jv *ev_call(jctx *c, jenv *env, const jnode *n) {
    int line = n->line;
    jv **args = jalloc(c, line, (n->nv + 1) * sizeof *args);
    if (!args) return NULL;
    size_t na = 0;
    jmap kw = {0};
    for (size_t i = 0; i < n->nv; i++)
        if (n->v[i]->kind != JN_KWARG && !(args[na++] = jinja_eval(c, env, n->v[i]))) return NULL;
    for (size_t i = 0; i < n->nv; i++) {
        if (n->v[i]->kind != JN_KWARG) continue;
        if (jmap_get(&kw, n->v[i]->s))
            return jerr(c, line, CT_ERR_ARG, "got multiple values for keyword argument '%.*s'", (int)n->v[i]->s.n,
                        n->v[i]->s.p);
        jv *v = jinja_eval(c, env, n->v[i]->a);
        if (!v || !jmap_set(c, line, &kw, n->v[i]->s, v)) return NULL;
    }
    jv *fn = jinja_eval(c, env, n->a);
    if (!fn) return NULL;
    if (fn->kind != JV_FUNC) {
        char what[200];
        jinja_undefined_name(fn->kind == JV_UNDEF ? n->a : NULL, what, sizeof what);
        return jerr(c, line, CT_ERR_ARG, "cannot call a %s: it is not a function%s", jv_kind_name(fn), what);
    }
    return jinja_call(c, line, fn, args, na, &kw);
}

/* ------------------------------------------------------------ expressions */

jv *jinja_eval(jctx *c, jenv *env, const jnode *n) {
    if (c->st) return NULL;
    int line = n->line;
    switch (n->kind) {
    case JN_STR: return jv_str(c, line, n->s.p, n->s.n);
    case JN_INT: return jv_num(c, line, JV_INT, n->num);
    case JN_FLOAT: return jv_num(c, line, JV_FLOAT, n->num);
    case JN_NAME: return ev_lookup(c, env, n->s);
    case JN_LIST:
    case JN_TUPLE: {
        jv *l = jv_list(c, line, n->nv);
        if (!l) return NULL;
        l->tuple = n->kind == JN_TUPLE;
        for (size_t i = 0; i < n->nv; i++)
            if (!(l->u.l.it[i] = jinja_eval(c, env, n->v[i]))) return NULL;
        return l;
    }
    case JN_DICT: {
        jv *m = jv_map(c, line, JV_MAP);
        for (size_t i = 0; m && i < n->nv; i++) {
            jv *k = jinja_eval(c, env, n->v[i]);
            if (!k) return NULL;
            if (k->kind != JV_STR)
                return jerr(c, line, CT_ERR_ARG, "a dict's keys must be strings, not a %s", jv_kind_name(k));
            jv *v = jinja_eval(c, env, n->w[i]);
            if (!v || !jmap_set(c, line, m->u.m, k->u.s, v)) return NULL;
        }
        return m;
    }
    case JN_MEMBER: return ev_member(c, env, n);
    case JN_CALL: return ev_call(c, env, n);
    case JN_FILTER: {
        jv *operand = jinja_eval(c, env, n->a);
        return operand ? jinja_filter(c, env, n, operand) : NULL;
    }
    case JN_TEST: {
        jv *operand = jinja_eval(c, env, n->a);
        return operand ? jinja_test(c, n, operand) : NULL;
    }
    case JN_UNARY: {
        jv *x = jinja_eval(c, env, n->a);
        if (!x) return NULL;
        if (n->op == '!') return jv_bool(c, !jv_truthy(x));
        if (!ev_numeric_like(x))
            return jerr(c, line, CT_ERR_ARG, "unary '%c' applies to numbers, not a %s", n->op, jv_kind_name(x));
        double d = (n->op == '-' ? -1 : 1) * ev_numval(x);
        return jv_num(c, line, x->kind == JV_FLOAT ? JV_FLOAT : JV_INT, d);
    }
    case JN_BINARY: return ev_binary(c, env, n);
    case JN_TERNARY: {
        jv *cond = jinja_eval(c, env, n->a);
        if (!cond) return NULL;
        return jinja_eval(c, env, jv_truthy(cond) ? n->b : n->c);
    }
    case JN_SELECT: {
        jv *cond = jinja_eval(c, env, n->b);
        if (!cond) return NULL;
        return jv_truthy(cond) ? jinja_eval(c, env, n->a) : c->undef;
    }
    case JN_SLICE: return jerr(c, line, CT_ERR_ARG, "a slice outside '[]'");
    default: return jerr(c, line, CT_ERR_ARG, "a statement where an expression was expected");
    }
}

/* ------------------------------------------------------------ statements */

/* Assign value to target (a name or a tuple of names) in env. */
static bool ev_assign(jctx *c, jenv *env, const jnode *target, jv *value, bool for_loop) {
    int line = target->line;
    if (target->kind == JN_NAME) return jmap_set(c, line, &env->vars, target->s, value);
    /* a tuple of names */
    if (value->kind != JV_LIST || (for_loop && value->tuple)) {
        jerr(c, line, CT_ERR_ARG, "cannot unpack a %s into %zu names", jv_kind_name(value), target->nv);
        return false;
    }
    if (value->u.l.n != target->nv) {
        jerr(c, line, CT_ERR_ARG, "too %s items to unpack (%zu names, %zu items)",
             target->nv > value->u.l.n ? "few" : "many", target->nv, value->u.l.n);
        return false;
    }
    for (size_t i = 0; i < target->nv; i++)
        if (!jmap_set(c, line, &env->vars, target->v[i]->s, value->u.l.it[i])) return false;
    return true;
}

static ev_flow ev_set(jctx *c, jenv *env, const jnode *n) {
    jv *value = jinja_eval(c, env, n->b);
    if (!value) return EV_ERR;
    const jnode *t = n->a;
    if (t->kind == JN_MEMBER) {
        jv *obj = jinja_eval(c, env, t->a);
        if (!obj) return EV_ERR;
        if (obj->kind != JV_NS) {
            jerr(c, n->line, CT_ERR_ARG, "cannot set an attribute of a %s (only of a namespace())", jv_kind_name(obj));
            return EV_ERR;
        }
        return jmap_set(c, n->line, obj->u.m, t->b->s, value) ? EV_OK : EV_ERR;
    }
    return ev_assign(c, env, t, value, false) ? EV_OK : EV_ERR;
}

static jv *ev_loop_map(jctx *c, int line, jv **items, size_t n, size_t i) {
    static const char *const keys[] = {"index", "index0", "revindex", "revindex0", "first", "last", "length",
                                       "previtem", "nextitem"};
    jv *m = jv_map(c, line, JV_MAP);
    if (!m) return NULL;
    jv *vals[9] = {
        jv_num(c, line, JV_INT, (double)(i + 1)), jv_num(c, line, JV_INT, (double)i),
        jv_num(c, line, JV_INT, (double)(n - i)), jv_num(c, line, JV_INT, (double)(n - i - 1)),
        jv_bool(c, i == 0), jv_bool(c, i == n - 1), jv_num(c, line, JV_INT, (double)n),
        i > 0 ? items[i - 1] : c->undef, i + 1 < n ? items[i + 1] : c->undef};
    for (int k = 0; k < 9; k++)
        if (!vals[k] || !jmap_set(c, line, m->u.m, (jstr){keys[k], strlen(keys[k])}, vals[k])) return NULL;
    return m;
}

static ev_flow ev_for(jctx *c, jenv *env, const jnode *n) {
    int line = n->line;
    jenv *scope = ev_env(c, line, env);
    if (!scope) return EV_ERR;
    jv *it = jinja_eval(c, scope, n->b);
    if (!it) return EV_ERR;
    if (it->kind == JV_MAP || it->kind == JV_KWARGS) {
        jv *keys = jv_list(c, line, it->u.m->n);
        for (size_t i = 0; keys && i < it->u.m->n; i++)
            if (!(keys->u.l.it[i] = jv_str(c, line, it->u.m->k[i].p, it->u.m->k[i].n))) return EV_ERR;
        it = keys;
        if (!it) return EV_ERR;
    } else if (it->kind != JV_LIST) {
        jerr(c, line, CT_ERR_ARG, "{%% for %%} iterates over a list or a dict, not a %s", jv_kind_name(it));
        return EV_ERR;
    }
    /* the items that pass the loop's filter, each tested in a scope of its own */
    jv **items = jalloc(c, line, (it->u.l.n + 1) * sizeof *items);
    if (!items) return EV_ERR;
    size_t n_items = 0;
    for (size_t i = 0; i < it->u.l.n; i++) {
        if (!ev_step(c, line, 1)) return EV_ERR;
        jv *cur = it->u.l.it[i];
        if (n->a->kind == JN_TUPLE && (cur->kind != JV_LIST || cur->tuple || cur->u.l.n != n->a->nv)) {
            if (cur->kind != JV_LIST || cur->tuple)
                jerr(c, line, CT_ERR_ARG, "cannot unpack a %s into the loop's %zu names", jv_kind_name(cur), n->a->nv);
            else
                jerr(c, line, CT_ERR_ARG, "too %s items to unpack (%zu names, %zu items)",
                     n->a->nv > cur->u.l.n ? "few" : "many", n->a->nv, cur->u.l.n);
            return EV_ERR;
        }
        if (n->c) {
            jenv *ls = ev_env(c, line, scope);
            if (!ls || !ev_assign(c, ls, n->a, cur, true)) return EV_ERR;
            jv *keep = jinja_eval(c, ls, n->c);
            if (!keep) return EV_ERR;
            if (!jv_truthy(keep)) continue;
        }
        items[n_items++] = cur;
    }
    bool none = true;
    for (size_t i = 0; i < n_items; i++) {
        if (!ev_step(c, line, 1)) return EV_ERR;
        jv *loop = ev_loop_map(c, line, items, n_items, i);
        if (!loop || !jmap_set(c, line, &scope->vars, (jstr){"loop", 4}, loop)) return EV_ERR;
        if (!ev_assign(c, scope, n->a, items[i], true)) return EV_ERR;
        size_t mark = c->out.n;
        ev_flow f = ev_block(c, scope, n->v, n->nv);
        if (f == EV_ERR) return EV_ERR;
        if (f == EV_CONTINUE || f == EV_BREAK) {
            c->out.n = mark; /* the reference drops the iteration's partial output */
            if (c->out.p) c->out.p[mark] = '\0';
            if (f == EV_BREAK) break;
            continue;
        }
        none = false;
    }
    if (none) return ev_block(c, scope, n->w, n->nw);
    return EV_OK;
}

static ev_flow ev_stmt(jctx *c, jenv *env, const jnode *n) {
    switch (n->kind) {
    case JN_TEXT:
        jb_put(&c->out, n->s.p, n->s.n);
        return ev_out_check(c, n->line) ? EV_OK : EV_ERR;
    case JN_OUTPUT: {
        jv *v = jinja_eval(c, env, n->a);
        if (!v) return EV_ERR;
        if (v->kind != JV_UNDEF && v->kind != JV_NULL && !jv_print(c, n->line, &c->out, v, 0)) return EV_ERR;
        return ev_out_check(c, n->line) ? EV_OK : EV_ERR;
    }
    case JN_IF: {
        jv *v = jinja_eval(c, env, n->a);
        if (!v) return EV_ERR;
        return jv_truthy(v) ? ev_block(c, env, n->v, n->nv) : ev_block(c, env, n->w, n->nw);
    }
    case JN_FOR: return ev_for(c, env, n);
    case JN_SET: return ev_set(c, env, n);
    case JN_BREAK: return EV_BREAK;
    case JN_CONTINUE: return EV_CONTINUE;
    case JN_COMMENT: return EV_OK;
    default: {
        /* an expression statement (not produced by the parser, but harmless) */
        return jinja_eval(c, env, n) ? EV_OK : EV_ERR;
    }
    }
}

static ev_flow ev_block(jctx *c, jenv *env, jnode *const *body, size_t n) {
    for (size_t i = 0; i < n; i++) {
        ev_flow f = ev_stmt(c, env, body[i]);
        if (f != EV_OK) return f;
        if (c->st) return EV_ERR;
    }
    return EV_OK;
}

/* ------------------------------------------------------------ entry points */

ct_jinja_limits ct_jinja_limits_default(void) {
    return (ct_jinja_limits){.depth_max = 200,
                             .output_max = (size_t)16 << 20,
                             .memory_max = (size_t)256 << 20,
                             .steps_max = 10000000,
                             .source_max = (size_t)1 << 20};
}

ct_status ct_jinja_parse(ct_jinja **out, const char *src, size_t len, const char *name, const ct_jinja_limits *lim) {
    CT_ASSERT(out && (src || len == 0));
    *out = NULL;
    ct_jinja *t = calloc(1, sizeof *t);
    size_t nlen = strlen(name ? name : "template");
    if (t) t->name = malloc(nlen + 1);
    if (!t || !t->name) {
        free(t);
        return CT_ERR(CT_ERR_OOM, "out of memory for a template");
    }
    memcpy(t->name, name ? name : "template", nlen + 1);
    t->lim = lim ? *lim : ct_jinja_limits_default();
    t->arena.max = (size_t)-1;
    ct_status st = CT_OK;
    size_t bad = ct_utf8_valid_prefix(src, len);
    if (len > t->lim.source_max) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: the template is %zu bytes, more than %zu (source_max)", t->name, len,
                    t->lim.source_max);
    } else if (bad < len) {
        int line = 1;
        for (size_t i = 0; i < bad; i++) line += src[i] == '\n';
        st = CT_ERR(CT_ERR_FORMAT, "%s:%d: the template is not valid UTF-8 (byte offset %zu)", t->name, line, bad);
    }
    jtok *toks = NULL;
    size_t n = 0;
    if (!st) st = jinja_lex(&t->arena, t->name, src, len, &toks, &n);
    if (!st) st = jinja_parse_tokens(t, toks, n);
    if (st) {
        ct_jinja_free(t);
        return st;
    }
    *out = t;
    return CT_OK;
}

void ct_jinja_free(ct_jinja *t) {
    if (!t) return;
    ja_free(&t->arena);
    free(t->name);
    free(t);
}

const char *ct_jinja_name(const ct_jinja *t) { return t->name; }

/* The globals @huggingface/jinja's setupGlobals declares. */
static bool ev_globals(jctx *c, jenv *g) {
    struct {
        const char *name;
        jv *v;
    } vals[] = {{"false", c->no}, {"true", c->yes}, {"none", c->null}, {"True", c->yes},
                {"False", c->no}, {"None", c->null}};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
        if (!jmap_set(c, 0, &g->vars, (jstr){vals[i].name, strlen(vals[i].name)}, vals[i].v)) return false;
    static const jfunc fns[] = {JFN_NAMESPACE, JFN_RAISE, JFN_RANGE};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        jv *f = ev_func(c, 0, fns[i], NULL);
        const char *name = jinja_func_names[fns[i]];
        if (!f || !jmap_set(c, 0, &g->vars, (jstr){name, strlen(name)}, f)) return false;
    }
    return true;
}

ct_status ct_jinja_render(const ct_jinja *t, const cJSON *vars, char **text, size_t *len) {
    CT_ASSERT(t && text);
    *text = NULL;
    if (len) *len = 0;
    jctx c = {.t = t};
    c.a.max = t->lim.memory_max;
    c.out.max = t->lim.output_max;
    static const jv consts[4] = {{.kind = JV_UNDEF}, {.kind = JV_NULL}, {.kind = JV_BOOL, .u.b = true},
                                 {.kind = JV_BOOL, .u.b = false}};
    jv *k = jalloc(&c, 0, sizeof consts);
    jenv *g = k ? ev_env(&c, 0, NULL) : NULL;
    if (k) {
        memcpy(k, consts, sizeof consts);
        c.undef = &k[0];
        c.null = &k[1];
        c.yes = &k[2];
        c.no = &k[3];
    }
    if (g && ev_globals(&c, g) && vars) {
        if (!cJSON_IsObject(vars)) {
            jerr(&c, 0, CT_ERR_ARG, "the render's variables are not a JSON object");
        } else {
            for (const cJSON *e = vars->child; e && !c.st; e = e->next) {
                jv *v = jv_from_json(&c, e, 1);
                if (v) jmap_set(&c, 0, &g->vars, (jstr){e->string, strlen(e->string)}, v);
            }
        }
    }
    if (!c.st && g) ev_block(&c, g, t->body, t->n_body);
    ct_status st = c.st;
    if (!st && !g) st = CT_ERR(CT_ERR_OOM, "%s: out of memory rendering", t->name);
    if (!st && !c.out.p) {
        c.out.p = malloc(1);
        if (!c.out.p) st = CT_ERR(CT_ERR_OOM, "%s: out of memory rendering", t->name);
        else c.out.p[0] = '\0';
    }
    ja_free(&c.a);
    if (st) {
        jb_free(&c.out);
        return st;
    }
    *text = c.out.p;
    if (len) *len = c.out.n;
    return CT_OK;
}
