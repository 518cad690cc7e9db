/*
 * The Jinja subset's parser: @huggingface/jinja's parser.ts in C (the same
 * precedence, from loosest: a if b else c, or, and, not, comparisons and
 * in / not in, + - ~, * / // %, **, is-tests, |filters, unary + -, calls,
 * attributes and items, literals), building the tree jinja_eval.c walks.
 * Where the reference would accept a construct the subset does not have, or
 * would crash (an unclosed block), the parse fails with CT_ERR_FORMAT naming
 * the construct, the template and the line. Nesting is capped at
 * lim.depth_max.
 * Leaves out: tokenising (jinja_lex.c), evaluation (jinja_eval.c).
 */
#include "data/chat/jinja_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const jinja_filter_names[JF_COUNT] = {
    "abs", "bool", "capitalize", "default", "first", "float", "indent", "int", "items", "join", "last",
    "length", "list", "lower", "replace", "reverse", "safe", "string", "title", "tojson", "trim", "upper"};
const char *const jinja_test_names[JTE_COUNT] = {
    "boolean", "callable", "defined", "even", "false", "integer", "iterable", "lower", "mapping",
    "none", "number", "odd", "sequence", "string", "true", "undefined", "upper"};
const char *const jinja_func_names[JFN_COUNT] = {
    "raise_exception", "namespace", "range", "upper", "lower", "strip", "title", "capitalize", "rstrip",
    "lstrip", "startswith", "endswith", "split", "replace", "get", "items", "keys", "values"};

int jinja_lookup(const char *const *table, int n, jstr name) {
    for (int i = 0; i < n; i++)
        if (strlen(table[i]) == name.n && memcmp(table[i], name.p, name.n) == 0) return i;
    return -1;
}

typedef struct ps {
    ct_jinja *t;
    const jtok *tok;
    size_t n, cur;
    int depth;
    int loops;     /* enclosing {% for %} bodies */
    ct_status st;
} ps;

static jnode *ps_fail(ps *p, int line, const char *fmt, ...) CT_PRINTF(3, 4);
static jnode *ps_fail(ps *p, int line, const char *fmt, ...) {
    if (p->st) return NULL;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->st = CT_ERR(CT_ERR_FORMAT, "%s:%d: %s", p->t->name, line, msg);
    return NULL;
}

/* The line of the current token (or of the last one at the end). */
static int ps_line(const ps *p) {
    if (p->cur < p->n) return p->tok[p->cur].line;
    return p->n ? p->tok[p->n - 1].line : 1;
}

static const char *ps_type_name(int type) {
    static const char *const names[JT_COUNT] = {
        "text", "a number", "a string", "a name", "'='", "'('", "')'", "'{%'", "'%}'", "'{{'", "'}}'",
        "'['", "']'", "'{'", "'}'", "','", "'.'", "':'", "'|'", "an operator", "an operator", "'**'",
        "a comparison", "a sign", "a comment"};
    return type >= 0 && type < JT_COUNT ? names[type] : "the end of the template";
}

static bool ps_is(const ps *p, jtok_type type) { return p->cur < p->n && p->tok[p->cur].type == type; }

static bool ps_is_name(const ps *p, size_t ahead, const char *name) {
    size_t i = p->cur + ahead;
    return i < p->n && p->tok[i].type == JT_IDENT && strlen(name) == p->tok[i].v.n &&
           memcmp(p->tok[i].v.p, name, p->tok[i].v.n) == 0;
}

/* {% NAME at the current position */
static bool ps_is_stmt(const ps *p, const char *name) { return ps_is(p, JT_OPEN_STMT) && ps_is_name(p, 1, name); }

static bool ps_expect(ps *p, jtok_type type, const char *what) {
    if (ps_is(p, type)) {
        p->cur++;
        return true;
    }
    int got = p->cur < p->n ? p->tok[p->cur].type : -1;
    if (got == JT_IDENT || got == JT_NUMBER || got == JT_STRING)
        ps_fail(p, ps_line(p), "expected %s %s, got %s '%.*s'", ps_type_name(type), what, ps_type_name(got),
                (int)(p->tok[p->cur].v.n > 40 ? 40 : p->tok[p->cur].v.n), p->tok[p->cur].v.p);
    else
        ps_fail(p, ps_line(p), "expected %s %s, got %s", ps_type_name(type), what, ps_type_name(got));
    return false;
}

static jnode *ps_node(ps *p, jnode_kind kind, int line) {
    jnode *n = ja_alloc(&p->t->arena, sizeof *n);
    if (!n) {
        if (!p->st) p->st = CT_ERR(CT_ERR_OOM, "%s: out of memory parsing the template", p->t->name);
        return NULL;
    }
    n->kind = (uint8_t)kind;
    n->line = line;
    return n;
}

/* A growable list of nodes, copied into the arena when done. */
typedef struct ps_list {
    jnode **v;
    size_t n, cap;
} ps_list;

static bool ps_push(ps *p, ps_list *l, jnode *n) {
    if (!n) return false;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        jnode **v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            if (!p->st) p->st = CT_ERR(CT_ERR_OOM, "%s: out of memory parsing the template", p->t->name);
            return false;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = n;
    return true;
}

static jnode **ps_done(ps *p, ps_list *l, size_t *n) {
    jnode **v = ja_alloc(&p->t->arena, (l->n ? l->n : 1) * sizeof *v);
    if (!v && !p->st) p->st = CT_ERR(CT_ERR_OOM, "%s: out of memory parsing the template", p->t->name);
    if (v && l->n) memcpy(v, l->v, l->n * sizeof *v);
    *n = v ? l->n : 0;
    free(l->v);
    *l = (ps_list){0};
    return v;
}

static bool ps_enter(ps *p) {
    if (++p->depth <= p->t->lim.depth_max) return true;
    ps_fail(p, ps_line(p), "the template nests more than %d levels deep (depth_max)", p->t->lim.depth_max);
    return false;
}

static jnode *ps_expr(ps *p);
static jnode *ps_any(ps *p);
static jnode *ps_primary(ps *p);

/* ------------------------------------------------------------ expressions */

/* Arguments of a call: expressions and NAME=value keyword arguments. */
static bool ps_args(ps *p, jnode *call) {
    if (!ps_expect(p, JT_LPAREN, "to open the arguments")) return false;
    ps_list args = {0};
    bool keyword = false;
    while (!p->st && !ps_is(p, JT_RPAREN)) {
        if (p->cur >= p->n) {
            ps_fail(p, ps_line(p), "the arguments opened by '(' are never closed (expected ')')");
            break;
        }
        if (ps_is(p, JT_POW) || (ps_is(p, JT_MUL) && p->tok[p->cur].v.n == 1 && p->tok[p->cur].v.p[0] == '*')) {
            ps_fail(p, ps_line(p), "unsupported: argument unpacking with * or **");
            break;
        }
        int line = ps_line(p);
        jnode *arg = ps_expr(p);
        if (!arg) break;
        if (ps_is(p, JT_EQUALS)) {
            p->cur++;
            if (arg->kind != JN_NAME) {
                ps_fail(p, line, "expected a name before '=' in a keyword argument");
                break;
            }
            jnode *kw = ps_node(p, JN_KWARG, line);
            if (!kw) break;
            kw->s = arg->s;
            kw->a = ps_expr(p);
            if (!kw->a) break;
            arg = kw;
            keyword = true;
        } else if (keyword) {
            ps_fail(p, line, "a positional argument follows a keyword argument");
            break;
        }
        if (!ps_push(p, &args, arg)) break;
        if (ps_is(p, JT_COMMA)) p->cur++;
    }
    call->v = ps_done(p, &args, &call->nv);
    return !p->st && ps_expect(p, JT_RPAREN, "to close the arguments");
}

/* Check a call's callee against the functions and methods of the subset. */
static bool ps_check_callee(ps *p, const jnode *callee, int line) {
    if (callee->kind == JN_NAME) {
        int id = jinja_lookup(jinja_func_names, JFN_COUNT, callee->s);
        if (id >= 0 && id <= JFN_RANGE) return true;
        ps_fail(p, line,
                "unsupported function '%.*s' (the functions of ctrain's Jinja subset: raise_exception, "
                "namespace, range)",
                (int)callee->s.n, callee->s.p);
        return false;
    }
    if (callee->kind == JN_MEMBER && !callee->flag && callee->b->kind == JN_NAME) {
        int id = jinja_lookup(jinja_func_names, JFN_COUNT, callee->b->s);
        if (id > JFN_RANGE) return true;
        ps_fail(p, line,
                "unsupported method '.%.*s()' (the methods of ctrain's Jinja subset: strings: strip, lstrip, "
                "rstrip, upper, lower, title, capitalize, startswith, endswith, split, replace; dicts: get, "
                "items, keys, values)",
                (int)callee->b->s.n, callee->b->s.p);
        return false;
    }
    ps_fail(p, line, "unsupported call: only the functions raise_exception, namespace, range and string or "
            "dict methods can be called");
    return false;
}

/* [start:stop:step] or [expr] after the '[' */
static jnode *ps_subscript(ps *p, int line) {
    jnode *parts[3] = {NULL, NULL, NULL};
    size_t k = 0;
    bool slice = false;
    while (!p->st && !ps_is(p, JT_RBRACKET)) {
        if (p->cur >= p->n) return ps_fail(p, line, "'[' is never closed (expected ']')");
        if (k >= 3) return ps_fail(p, line, "a slice takes at most 3 parts");
        if (ps_is(p, JT_COLON)) {
            k++;
            p->cur++;
            slice = true;
        } else {
            parts[k] = ps_expr(p);
            if (!parts[k]) return NULL;
            k++;
            if (ps_is(p, JT_COLON)) {
                p->cur++;
                slice = true;
            }
        }
    }
    if (p->st) return NULL;
    if (k == 0) return ps_fail(p, line, "expected an index or a slice inside '[]'");
    if (!slice) return parts[0];
    jnode *s = ps_node(p, JN_SLICE, line);
    if (s) {
        s->a = parts[0];
        s->b = parts[1];
        s->c = parts[2];
    }
    return s;
}

static jnode *ps_member(ps *p, jnode *obj) {
    while (obj && (ps_is(p, JT_DOT) || ps_is(p, JT_LBRACKET))) {
        int line = ps_line(p);
        bool computed = ps_is(p, JT_LBRACKET);
        p->cur++;
        jnode *m = ps_node(p, JN_MEMBER, line);
        if (!m) return NULL;
        m->a = obj;
        m->flag = computed;
        if (computed) {
            m->b = ps_subscript(p, line);
            if (!m->b || !ps_expect(p, JT_RBRACKET, "to close '['")) return NULL;
        } else {
            m->b = ps_primary(p);
            if (!m->b) return NULL;
            if (m->b->kind != JN_NAME && m->b->kind != JN_INT)
                return ps_fail(p, line, "expected a name or an integer after '.'");
        }
        obj = m;
    }
    return obj;
}

/* callee(args), then more attributes and calls */
static jnode *ps_call(ps *p, jnode *callee) {
    int line = ps_line(p);
    if (!ps_check_callee(p, callee, line)) return NULL;
    jnode *call = ps_node(p, JN_CALL, line);
    if (!call) return NULL;
    call->a = callee;
    if (!ps_args(p, call)) return NULL;
    jnode *e = ps_member(p, call);
    if (e && ps_is(p, JT_LPAREN)) e = ps_call(p, e);
    return e;
}

static jnode *ps_call_member(ps *p) {
    jnode *m = ps_member(p, ps_primary(p));
    if (m && ps_is(p, JT_LPAREN)) return ps_call(p, m);
    return m;
}

static jnode *ps_unary_sign(ps *p) {
    if ((ps_is(p, JT_UNARY) || ps_is(p, JT_ADD)) && p->tok[p->cur].v.n == 1 &&
        (p->tok[p->cur].v.p[0] == '-' || p->tok[p->cur].v.p[0] == '+')) {
        jnode *u = ps_node(p, JN_UNARY, ps_line(p));
        if (!u || !ps_enter(p)) return NULL;
        u->op = (uint8_t)p->tok[p->cur++].v.p[0];
        u->a = ps_unary_sign(p);
        p->depth--;
        return u->a ? u : NULL;
    }
    return ps_call_member(p);
}

static jnode *ps_filter(ps *p) {
    jnode *operand = ps_unary_sign(p);
    while (operand && ps_is(p, JT_PIPE)) {
        int line = ps_line(p);
        p->cur++;
        if (!ps_is(p, JT_IDENT)) return ps_fail(p, line, "expected a filter name after '|'");
        jstr name = p->tok[p->cur++].v;
        int id = jinja_lookup(jinja_filter_names, JF_COUNT, name);
        if (id < 0)
            return ps_fail(p, line,
                           "unsupported filter '%.*s' (the filters of ctrain's Jinja subset: abs, bool, capitalize, "
                           "default, first, float, indent, int, items, join, last, length, list, lower, replace, "
                           "reverse, safe, string, title, tojson, trim, upper)",
                           (int)name.n, name.p);
        jnode *f = ps_node(p, JN_FILTER, line);
        if (!f) return NULL;
        f->a = operand;
        f->s = name;
        f->op = (uint8_t)id;
        if (ps_is(p, JT_LPAREN)) {
            f->flag = true;
            if (!ps_args(p, f)) return NULL;
            if (ps_is(p, JT_DOT) || ps_is(p, JT_LBRACKET) || ps_is(p, JT_LPAREN))
                return ps_fail(p, line, "unsupported: an attribute, item or call right after a filter's arguments");
        }
        operand = f;
    }
    return operand;
}

static jnode *ps_test(ps *p) {
    jnode *operand = ps_filter(p);
    while (operand && ps_is_name(p, 0, "is")) {
        int line = ps_line(p);
        p->cur++;
        bool negate = ps_is_name(p, 0, "not");
        if (negate) p->cur++;
        if (!ps_is(p, JT_IDENT)) return ps_fail(p, line, "expected a test name after 'is'");
        jstr name = p->tok[p->cur++].v;
        int id = jinja_lookup(jinja_test_names, JTE_COUNT, name);
        if (id < 0 || ps_is(p, JT_LPAREN))
            return ps_fail(p, line,
                           "unsupported test 'is %.*s%s' (the tests of ctrain's Jinja subset, without arguments: "
                           "boolean, callable, defined, even, false, integer, iterable, lower, mapping, none, "
                           "number, odd, sequence, string, true, undefined, upper)",
                           (int)name.n, name.p, ps_is(p, JT_LPAREN) ? "(...)" : "");
        jnode *t = ps_node(p, JN_TEST, line);
        if (!t) return NULL;
        t->a = operand;
        t->s = name;
        t->op = (uint8_t)id;
        t->flag = negate;
        operand = t;
    }
    return operand;
}

static jnode *ps_binary(ps *p, int line, jbinop op, jnode *a, jnode *b) {
    if (!a || !b) return NULL;
    jnode *n = ps_node(p, JN_BINARY, line);
    if (n) {
        n->op = (uint8_t)op;
        n->a = a;
        n->b = b;
    }
    return n;
}

static jnode *ps_power(ps *p) {
    jnode *left = ps_test(p);
    while (left && ps_is(p, JT_POW)) {
        int line = ps_line(p);
        p->cur++;
        left = ps_binary(p, line, JB_POW, left, ps_test(p));
    }
    return left;
}

static jnode *ps_mul(ps *p) {
    jnode *left = ps_power(p);
    while (left && ps_is(p, JT_MUL)) {
        int line = ps_line(p);
        jstr o = p->tok[p->cur++].v;
        jbinop op = o.n == 2 ? JB_FLOORDIV : o.p[0] == '*' ? JB_MUL : o.p[0] == '/' ? JB_DIV : JB_MOD;
        left = ps_binary(p, line, op, left, ps_power(p));
    }
    return left;
}

static jnode *ps_add(ps *p) {
    jnode *left = ps_mul(p);
    while (left && ps_is(p, JT_ADD)) {
        int line = ps_line(p);
        char o = p->tok[p->cur++].v.p[0];
        left = ps_binary(p, line, o == '+' ? JB_ADD : o == '-' ? JB_SUB : JB_CONCAT, left, ps_mul(p));
    }
    return left;
}

static jnode *ps_compare(ps *p) {
    jnode *left = ps_add(p);
    while (left) {
        int line = ps_line(p);
        jbinop op;
        if (ps_is_name(p, 0, "not") && ps_is_name(p, 1, "in")) {
            op = JB_NOTIN;
            p->cur += 2;
        } else if (ps_is_name(p, 0, "in")) {
            op = JB_IN;
            p->cur++;
        } else if (ps_is(p, JT_CMP)) {
            jstr o = p->tok[p->cur++].v;
            op = o.n == 1 ? (o.p[0] == '<' ? JB_LT : JB_GT)
                 : o.p[0] == '<' ? JB_LE : o.p[0] == '>' ? JB_GE : o.p[0] == '=' ? JB_EQ : JB_NE;
        } else {
            break;
        }
        left = ps_binary(p, line, op, left, ps_add(p));
    }
    return left;
}

static jnode *ps_not(ps *p) {
    if (ps_is_name(p, 0, "not")) {
        jnode *u = ps_node(p, JN_UNARY, ps_line(p));
        if (!u || !ps_enter(p)) return NULL;
        p->cur++;
        u->op = '!';
        u->a = ps_not(p);
        p->depth--;
        return u->a ? u : NULL;
    }
    return ps_compare(p);
}

static jnode *ps_and(ps *p) {
    jnode *left = ps_not(p);
    while (left && ps_is_name(p, 0, "and")) {
        int line = ps_line(p);
        p->cur++;
        left = ps_binary(p, line, JB_AND, left, ps_not(p));
    }
    return left;
}

static jnode *ps_or(ps *p) {
    jnode *left = ps_and(p);
    while (left && ps_is_name(p, 0, "or")) {
        int line = ps_line(p);
        p->cur++;
        left = ps_binary(p, line, JB_OR, left, ps_and(p));
    }
    return left;
}

/* a if b else c, or a if b (undefined when b is false; a filter in a for) */
static jnode *ps_expr(ps *p) {
    if (!ps_enter(p)) return NULL;
    jnode *a = ps_or(p);
    if (a && ps_is_name(p, 0, "if")) {
        int line = ps_line(p);
        p->cur++;
        jnode *test = ps_or(p);
        if (!test) {
            a = NULL;
        } else if (ps_is_name(p, 0, "else")) {
            p->cur++;
            jnode *t = ps_node(p, JN_TERNARY, line);
            if (t) {
                t->a = test;
                t->b = a;
                t->c = ps_expr(p);
            }
            a = t && t->c ? t : NULL;
        } else {
            jnode *s = ps_node(p, JN_SELECT, line);
            if (s) {
                s->a = a;
                s->b = test;
            }
            a = s;
        }
    }
    p->depth--;
    return a;
}

/* expr or expr, expr, ... (a tuple); primary: names only (for targets) */
static jnode *ps_sequence(ps *p, bool primary) {
    int line = ps_line(p);
    jnode *first = primary ? ps_primary(p) : ps_expr(p);
    if (!first || !ps_is(p, JT_COMMA)) return first;
    ps_list items = {0};
    ps_push(p, &items, first);
    while (!p->st && ps_is(p, JT_COMMA)) {
        p->cur++;
        if (!ps_push(p, &items, primary ? ps_primary(p) : ps_expr(p))) break;
    }
    jnode *t = ps_node(p, JN_TUPLE, line);
    if (t) t->v = ps_done(p, &items, &t->nv);
    else free(items.v);
    return p->st ? NULL : t;
}

static jnode *ps_primary(ps *p) {
    if (p->cur >= p->n) return ps_fail(p, ps_line(p), "unexpected end of the template in an expression");
    if (!ps_enter(p)) return NULL;
    const jtok *k = &p->tok[p->cur++];
    jnode *n = NULL;
    switch (k->type) {
    case JT_NUMBER: {
        char buf[64];
        size_t len = k->v.n < sizeof buf ? k->v.n : sizeof buf - 1;
        memcpy(buf, k->v.p, len);
        buf[len] = '\0';
        n = ps_node(p, memchr(k->v.p, '.', k->v.n) ? JN_FLOAT : JN_INT, k->line);
        if (n) n->num = strtod(buf, NULL);
        break;
    }
    case JT_STRING: {
        /* adjacent string literals join */
        size_t total = k->v.n, j = p->cur;
        while (j < p->n && p->tok[j].type == JT_STRING) total += p->tok[j++].v.n;
        n = ps_node(p, JN_STR, k->line);
        if (!n) break;
        if (j == p->cur) {
            n->s = k->v;
            break;
        }
        char *s = ja_alloc(&p->t->arena, total + 1);
        if (!s) {
            if (!p->st) p->st = CT_ERR(CT_ERR_OOM, "%s: out of memory parsing the template", p->t->name);
            n = NULL;
            break;
        }
        size_t o = 0;
        memcpy(s, k->v.p, k->v.n);
        o += k->v.n;
        for (; p->cur < j; p->cur++) {
            memcpy(s + o, p->tok[p->cur].v.p, p->tok[p->cur].v.n);
            o += p->tok[p->cur].v.n;
        }
        n->s = (jstr){s, total};
        break;
    }
    case JT_IDENT:
        n = ps_node(p, JN_NAME, k->line);
        if (n) n->s = k->v;
        break;
    case JT_LPAREN:
        n = ps_sequence(p, false);
        if (n && !ps_expect(p, JT_RPAREN, "to close '('")) n = NULL;
        break;
    case JT_LBRACKET: {
        ps_list items = {0};
        while (!p->st && !ps_is(p, JT_RBRACKET)) {
            if (p->cur >= p->n) {
                ps_fail(p, k->line, "the list opened by '[' is never closed (expected ']')");
                break;
            }
            if (!ps_push(p, &items, ps_expr(p))) break;
            if (ps_is(p, JT_COMMA)) p->cur++;
        }
        n = p->st ? NULL : ps_node(p, JN_LIST, k->line);
        if (n) {
            n->v = ps_done(p, &items, &n->nv);
            p->cur++;
        } else {
            free(items.v);
        }
        break;
    }
    case JT_LBRACE: {
        ps_list keys = {0}, vals = {0};
        while (!p->st && !ps_is(p, JT_RBRACE)) {
            if (p->cur >= p->n) {
                ps_fail(p, k->line, "the dict opened by '{' is never closed (expected '}')");
                break;
            }
            if (!ps_push(p, &keys, ps_expr(p))) break;
            if (!ps_expect(p, JT_COLON, "between a key and its value in a dict")) break;
            if (!ps_push(p, &vals, ps_expr(p))) break;
            if (ps_is(p, JT_COMMA)) p->cur++;
        }
        n = p->st ? NULL : ps_node(p, JN_DICT, k->line);
        if (n) {
            n->v = ps_done(p, &keys, &n->nv);
            n->w = ps_done(p, &vals, &n->nw);
            p->cur++;
        } else {
            free(keys.v);
            free(vals.v);
        }
        break;
    }
    default:
        ps_fail(p, k->line, "unexpected %s in an expression", ps_type_name(k->type));
        break;
    }
    p->depth--;
    return n;
}

/* ------------------------------------------------------------ statements */

/* Statements until one of the names (or the end); what stopped it in *stop
 * (-1: the end of the template). */
static bool ps_block(ps *p, ps_list *body, const char *const *names, int n_names, int *stop) {
    *stop = -1;
    while (!p->st && p->cur < p->n) {
        for (int i = 0; i < n_names; i++)
            if (ps_is_stmt(p, names[i])) {
                *stop = i;
                return true;
            }
        if (!ps_push(p, body, ps_any(p))) return false;
    }
    return !p->st;
}

/* {% endNAME %} */
static bool ps_end(ps *p, const char *name) {
    p->cur += 2; /* {% and the name */
    return ps_expect(p, JT_CLOSE_STMT, name);
}

static jnode *ps_unclosed(ps *p, int line, const char *what, const char *end) {
    return ps_fail(p, line, "{%% %s %%} opened on line %d is never closed (expected {%% %s %%})", what, line, end);
}

static jnode *ps_if(ps *p, int line) {
    jnode *n = ps_node(p, JN_IF, line);
    if (!n) return NULL;
    n->a = ps_expr(p);
    if (!n->a || !ps_expect(p, JT_CLOSE_STMT, "to end the {% if %} tag")) return NULL;
    static const char *const stops[] = {"elif", "else", "endif"};
    ps_list body = {0}, alt = {0};
    int stop;
    bool ok = ps_block(p, &body, stops, 3, &stop);
    n->v = ps_done(p, &body, &n->nv);
    if (!ok) return NULL;
    if (stop < 0) return ps_unclosed(p, line, "if", "endif");
    if (stop == 0) {
        int eline = p->tok[p->cur].line;
        p->cur += 2;
        if (!ps_push(p, &alt, ps_if(p, eline))) {
            free(alt.v);
            return NULL;
        }
        n->w = ps_done(p, &alt, &n->nw);
        return n; /* the nested if consumed {% endif %} */
    }
    if (stop == 1) {
        p->cur += 2;
        if (!ps_expect(p, JT_CLOSE_STMT, "after else")) return NULL;
        static const char *const end[] = {"endif"};
        ok = ps_block(p, &alt, end, 1, &stop);
        n->w = ps_done(p, &alt, &n->nw);
        if (!ok) return NULL;
        if (stop < 0) return ps_unclosed(p, line, "if", "endif");
    }
    return ps_end(p, "to end the {% endif %} tag") ? n : NULL;
}

static jnode *ps_for(ps *p, int line) {
    jnode *n = ps_node(p, JN_FOR, line);
    if (!n) return NULL;
    n->a = ps_sequence(p, true);
    if (!n->a) return NULL;
    if (n->a->kind != JN_NAME && n->a->kind != JN_TUPLE) return ps_fail(p, line, "expected a name or names after 'for'");
    for (size_t i = 0; n->a->kind == JN_TUPLE && i < n->a->nv; i++)
        if (n->a->v[i]->kind != JN_NAME) return ps_fail(p, line, "expected names after 'for'");
    if (!ps_is_name(p, 0, "in")) return ps_fail(p, line, "expected 'in' after the loop variable of {%% for %%}");
    p->cur++;
    jnode *it = ps_expr(p);
    if (!it) return NULL;
    if (it->kind == JN_SELECT) {
        n->b = it->a;
        n->c = it->b;
    } else {
        n->b = it;
    }
    if (!ps_expect(p, JT_CLOSE_STMT, "to end the {% for %} tag")) return NULL;
    static const char *const stops[] = {"endfor", "else"};
    ps_list body = {0}, alt = {0};
    int stop;
    p->loops++;
    bool ok = ps_block(p, &body, stops, 2, &stop);
    p->loops--;
    n->v = ps_done(p, &body, &n->nv);
    if (!ok) return NULL;
    if (stop < 0) return ps_unclosed(p, line, "for", "endfor");
    if (stop == 1) {
        p->cur += 2;
        if (!ps_expect(p, JT_CLOSE_STMT, "after else")) return NULL;
        static const char *const end[] = {"endfor"};
        ok = ps_block(p, &alt, end, 1, &stop);
        n->w = ps_done(p, &alt, &n->nw);
        if (!ok) return NULL;
        if (stop < 0) return ps_unclosed(p, line, "for", "endfor");
    }
    return ps_end(p, "to end the {% endfor %} tag") ? n : NULL;
}

static jnode *ps_set(ps *p, int line) {
    jnode *n = ps_node(p, JN_SET, line);
    if (!n) return NULL;
    n->a = ps_sequence(p, false);
    if (!n->a) return NULL;
    if (!ps_is(p, JT_EQUALS)) {
        if (ps_is(p, JT_CLOSE_STMT))
            return ps_fail(p, line, "unsupported statement: a block {%% set %%}...{%% endset %%} (only {%% set x = ... %%})");
        return ps_fail(p, line, "expected '=' in {%% set %%}");
    }
    jnode *t = n->a;
    bool ok = t->kind == JN_NAME || (t->kind == JN_MEMBER && !t->flag && t->b->kind == JN_NAME);
    for (size_t i = 0; t->kind == JN_TUPLE && i < t->nv; i++) ok = t->v[i]->kind == JN_NAME;
    if (t->kind == JN_TUPLE) ok = ok && t->nv > 0;
    if (!ok) return ps_fail(p, line, "{%% set %%} assigns to a name, names, or a namespace attribute (ns.name)");
    p->cur++;
    n->b = ps_sequence(p, false);
    if (!n->b || !ps_expect(p, JT_CLOSE_STMT, "to end the {% set %} tag")) return NULL;
    return n;
}

static jnode *ps_statement(ps *p) {
    int line = ps_line(p);
    p->cur++; /* {% */
    if (!ps_is(p, JT_IDENT)) return ps_fail(p, line, "expected a statement name after {%%");
    jstr name = p->tok[p->cur++].v;
#define IS(s) (name.n == strlen(s) && memcmp(name.p, s, name.n) == 0)
    if (IS("if")) return ps_if(p, line);
    if (IS("for")) return ps_for(p, line);
    if (IS("set")) return ps_set(p, line);
    if (IS("break") || IS("continue")) {
        if (!p->loops) return ps_fail(p, line, "{%% %.*s %%} outside a {%% for %%} loop", (int)name.n, name.p);
        jnode *n = ps_node(p, IS("break") ? JN_BREAK : JN_CONTINUE, line);
        return n && ps_expect(p, JT_CLOSE_STMT, "to end the tag") ? n : NULL;
    }
    if (IS("macro") || IS("call") || IS("filter") || IS("include") || IS("import") || IS("from") || IS("extends") ||
        IS("block") || IS("raw") || IS("with") || IS("autoescape") || IS("do"))
        return ps_fail(p, line, "unsupported statement {%% %.*s %%} (ctrain's Jinja subset has if, for, set, break, continue)",
                       (int)name.n, name.p);
    if (IS("elif") || IS("else") || IS("endif") || IS("endfor") || IS("endset") || IS("endmacro"))
        return ps_fail(p, line, "unexpected {%% %.*s %%}: no block is open that it could end", (int)name.n, name.p);
#undef IS
    return ps_fail(p, line, "unknown statement {%% %.*s %%}", (int)name.n, name.p);
}

static jnode *ps_any(ps *p) {
    const jtok *k = &p->tok[p->cur];
    switch (k->type) {
    case JT_COMMENT:
        p->cur++;
        return ps_node(p, JN_COMMENT, k->line);
    case JT_TEXT: {
        jnode *n = ps_node(p, JN_TEXT, k->line);
        if (n) n->s = k->v;
        p->cur++;
        return n;
    }
    case JT_OPEN_STMT: {
        if (!ps_enter(p)) return NULL;
        jnode *n = ps_statement(p);
        p->depth--;
        return n;
    }
    case JT_OPEN_EXPR: {
        jnode *n = ps_node(p, JN_OUTPUT, k->line);
        p->cur++;
        if (!n || !(n->a = ps_expr(p))) return NULL;
        return ps_expect(p, JT_CLOSE_EXPR, "to end the {{ }} expression") ? n : NULL;
    }
    default:
        return ps_fail(p, k->line, "unexpected %s outside {{ }} and {%% %%}", ps_type_name(k->type));
    }
}

ct_status jinja_parse_tokens(ct_jinja *t, const jtok *toks, size_t n) {
    ps p = {.t = t, .tok = toks, .n = n};
    ps_list body = {0};
    while (!p.st && p.cur < p.n) ps_push(&p, &body, ps_any(&p));
    t->body = ps_done(&p, &body, &t->n_body);
    return p.st;
}
