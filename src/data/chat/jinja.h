/*
 * A Jinja subset for chat templates: the `chat_template` of a Hugging Face
 * tokenizer_config.json rendered byte for byte as the npm package
 * @huggingface/jinja (the Jinja transformers.js uses) renders it, with its
 * settings (trim_blocks and lstrip_blocks on, one trailing newline dropped,
 * {% generation %} tags removed) and its JavaScript value semantics (loose
 * `==`, `true`/`false` printed in lower case, numbers printed as JavaScript
 * prints them, string lengths in UTF-16 units).
 *
 * The subset: text, {{ }}, {% %}, {# #} and the - whitespace controls;
 * if/elif/else, for (with `if`, `else`, loop.index/index0/revindex/revindex0/
 * first/last/length/previtem/nextitem), set (names, tuples, namespace
 * attributes), break and continue; string, number, list, tuple and dict
 * literals, attribute, item and slice access, calls, filters, tests, not/and/
 * or, in/not in, comparisons, + - ~ * / // % **, `a if b else c`; the functions
 * raise_exception, namespace and range; the string methods strip, lstrip,
 * rstrip, upper, lower, title, capitalize, startswith, endswith, split,
 * replace, the dict methods get, items, keys, values; the filters listed in
 * jinja_parse.c (trim, length, tojson, join, default, first, last, ...); the
 * tests defined, undefined, none, string, number, ... Anything else (macros,
 * call and filter blocks, {% set %}...{% endset %}, other filters, tests and
 * functions, * and ** argument unpacking) is refused when the template is
 * parsed, naming the construct, the template's name and the line.
 * Leaves out: upper/lower/title/capitalize of letters outside ASCII (left as
 * they are), tojson(sort_keys=true) and strftime_now (refused).
 */
#ifndef CT_JINJA_H
#define CT_JINJA_H

#include "ctrain/core.h"

#include <stddef.h>
#include <stdint.h>

struct cJSON;

/* Limits against hostile templates. Each one exceeded is an error that says
 * which limit and by what. */
typedef struct ct_jinja_limits {
    int depth_max;         /* nesting of blocks and expressions (parse) and of values (render) */
    size_t output_max;     /* bytes of rendered text */
    size_t memory_max;     /* bytes of values one render may allocate */
    int64_t steps_max;     /* loop iterations plus range() items, per render */
    size_t source_max;     /* bytes of template text */
} ct_jinja_limits;
/* depth 200, output 16 MiB, memory 256 MiB, 10,000,000 steps, source 1 MiB. */
ct_jinja_limits ct_jinja_limits_default(void);

typedef struct ct_jinja ct_jinja; /* a parsed template; read-only, shareable across threads */

/* Parse template text src[0..len) (UTF-8; need not be NUL-terminated). `name`
 * (copied) names the template in every error message, as "NAME:LINE: ...".
 * lim may be NULL (the defaults). Returns owned *out; release with
 * ct_jinja_free. Errors: CT_ERR_FORMAT for a syntax error or a construct
 * outside the subset (naming it: "unsupported filter 'map'", "unknown
 * statement {% foo %}", "{% if %} opened on line 3 is never closed", "the
 * template nests more than 200 levels deep"), invalid UTF-8, or a template
 * over lim->source_max; CT_ERR_OOM. */
ct_status ct_jinja_parse(ct_jinja **out, const char *src, size_t len, const char *name,
                         const ct_jinja_limits *lim);
void ct_jinja_free(ct_jinja *t); /* NULL is fine */
const char *ct_jinja_name(const ct_jinja *t);

/* Render t with the variables of JSON object vars (borrowed; NULL: none):
 * each member becomes a template variable, converted as JavaScript's
 * JSON.parse would give it to @huggingface/jinja (whole numbers are integers,
 * object keys that are array indices come first). Returns the text owned
 * through *text (NUL-terminated; release with free) and its length in *len.
 * Thread-safe (each render has its own state).
 * Errors: CT_ERR_ARG "NAME:LINE: raise_exception: MSG" when the template
 * raises, or "NAME:LINE: ..." for an evaluation error (a type error, an
 * unknown attribute call, an undefined operand); CT_ERR_FORMAT for strings in
 * vars that are not valid UTF-8; CT_ERR_OOM when the output, memory or step
 * limit is exceeded (naming it) or memory runs out. */
ct_status ct_jinja_render(const ct_jinja *t, const struct cJSON *vars, char **text, size_t *len);

#endif
