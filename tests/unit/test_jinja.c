/*
 * The Jinja subset (data/chat/jinja.h): each construct renders as @huggingface/jinja
 * renders it (tests/golden/test_chat_template.py checks the same byte for byte
 * against the reference on node; here the expectations are written out so the
 * unit suite runs without node), whitespace control and trim/lstrip_blocks,
 * JavaScript's value semantics, variables from JSON, and the errors: each
 * construct outside the subset named with the template and line, syntax
 * errors, raise_exception, and every limit (nesting depth at parse and in
 * values, output size, loop steps, memory, template size).
 */
#include "ct_test.h"
#include "data/chat/jinja.h"

#include <cJSON.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char *CONV = "{\"messages\": [{\"role\": \"system\", \"content\": \"Be nice.\"},"
                          "{\"role\": \"user\", \"content\": \"Hi  there\"},"
                          "{\"role\": \"assistant\", \"content\": \" Hello! \"},"
                          "{\"role\": \"user\", \"content\": \"Bye\"}],"
                          "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

/* Render src with the variables of JSON text vars (NULL: CONV) and limits lim
 * (NULL: defaults); the text (owned) or NULL with *st set. */
static char *render_lim(const char *src, const char *vars, const ct_jinja_limits *lim, ct_status *st) {
    ct_jinja *t = NULL;
    char *text = NULL;
    cJSON *v = cJSON_Parse(vars ? vars : CONV);
    *st = ct_jinja_parse(&t, src, strlen(src), "tpl.jinja", lim);
    if (!*st) *st = ct_jinja_render(t, v, &text, NULL);
    ct_jinja_free(t);
    cJSON_Delete(v);
    return text;
}

static char *render(const char *src, ct_status *st) { return render_lim(src, NULL, NULL, st); }

/* src renders to want. */
static void expect(const char *src, const char *want, int line) {
    ct_status st;
    char *got = render(src, &st);
    ct_test_checks++;
    if (st || !got || strcmp(got, want) != 0) {
        ct_test_failures++;
        fprintf(stderr, "test_jinja.c:%d: %s\n  got  \"%s\"%s%s\n  want \"%s\"\n", line, src, got ? got : "(null)",
                st ? "  error: " : "", st ? ct_last_error() : "", want);
    }
    free(got);
}
#define EXPECT(src, want) expect(src, want, __LINE__)

/* src fails with code and an error message holding each of the NULL-ended fragments. */
static void expect_err_lim(const char *src, const char *vars, const ct_jinja_limits *lim, ct_status code, int line,
                           ...) {
    ct_status st;
    char *got = render_lim(src, vars, lim, &st);
    const char *msg = ct_last_error();
    bool ok = !got && st == code;
    va_list ap;
    va_start(ap, line);
    for (const char *frag; (frag = va_arg(ap, const char *)) != NULL;)
        if (!strstr(msg, frag)) ok = false;
    va_end(ap);
    ct_test_checks++;
    if (!ok) {
        ct_test_failures++;
        fprintf(stderr, "test_jinja.c:%d: %.80s\n  status %s (want %s), message: %s\n", line, src, ct_status_str(st),
                ct_status_str(code), msg);
    }
    free(got);
}
#define EXPECT_ERR(src, code, ...) expect_err_lim(src, NULL, NULL, code, __LINE__, __VA_ARGS__, (const char *)NULL)

static void test_basics(void) {
    EXPECT("", "");
    EXPECT("plain text", "plain text");
    EXPECT("text\n", "text"); /* one trailing newline dropped */
    EXPECT("text\n\n", "text\n");
    EXPECT("{{ bos_token }}{{ messages[1]['content'] }}{{ messages[1].role }}", "<s>Hi  thereuser");
    EXPECT("{{ undefined_var }}|{{ none }}|{{ true }}|{{ False }}", "||true|false");
    EXPECT("{# a comment #}x{# another\nline #}", "x");
    EXPECT("{% if add_generation_prompt %}A{% elif x %}B{% else %}C{% endif %}", "A");
    EXPECT("{% if 0 %}A{% elif 1 %}B{% else %}C{% endif %}{% if 0 %}A{% elif 0 %}B{% else %}C{% endif %}", "BC");
    EXPECT("{% for m in messages %}{{ loop.index }}{{ m.role[0] }}{% if not loop.last %},{% endif %}{% endfor %}",
           "1s,2u,3a,4u");
    EXPECT("{% for m in messages %}{{ loop.index0 }}{{ loop.first }}{{ loop.length }}{% endfor %}",
           "0true41false42false43false4");
    EXPECT("{% for m in messages if m.role == 'user' %}{{ m.content }};{% else %}none{% endfor %}", "Hi  there;Bye;");
    EXPECT("{% for i in [] %}x{% else %}empty{% endfor %}", "empty");
    EXPECT("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }} {% endfor %}", "a=1 b=2 ");
    EXPECT("{% set x = 1 %}{% for i in range(3) %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}", "124|1");
    EXPECT("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}", "4");
    EXPECT("{% set a, b = 'x', 'y' %}{{ b }}{{ a }}", "yx");
    EXPECT("{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% if i == 3 %}{% break %}{% endif %}"
           "{% endfor %}",
           "02");
    /* the reference drops a broken iteration's output and takes the else when no iteration ended normally */
    EXPECT("{% for i in [1,2,3] %}{{ i }}{% break %}{% else %}F{% endfor %}", "F");
    EXPECT("{{ 'a' if 0 else 'b' }}{{ 'c' if 1 }}{{ 'd' if 0 }}", "bc");
    EXPECT("{{ messages[1:] | length }}{{ 'abcdef'[1:4] }}{{ 'abcdef'[::-1] }}{{ [1,2,3,4][-2:] }}", "3bcdfedcba[3, 4]");
    EXPECT("{{ 'h\xC3\xA9llo'[1:3] }}|{{ 'abc'[-1] }}|{{ [1,2,3].0 }}", "\xC3\xA9l|c|1");
    EXPECT("{{ 'a' 'b' }}{{ '\\u00e9\\x41\\n' }}{{ \"it's\" }}", "ab\xC3\xA9" "A\nit's");
    EXPECT("{{ {'a': {'b': 'c'}}.a.b }}{{ ([1] + [2]) | length }}", "c2");
}

static void test_whitespace(void) {
    /* trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before one */
    EXPECT("{% if true %}\nA\n{% endif %}\nB", "A\nB");
    EXPECT("  {% if true %}\n  A\n  {% endif %}\nB", "  A\nB");
    EXPECT("{{ 'x' }}\ny", "x\ny"); /* not after {{ }} */
    EXPECT("a  {%- if true -%}  b  {%- endif -%}  c", "abc");
    EXPECT("a \n {{- 'x' -}} \n b", "axb");
    EXPECT("a  {#- c -#}  b", "ab");
    EXPECT("{% for i in range(2) %}\n    {{ i }}\n{% endfor %}", "    0\n    1\n");
    EXPECT("{%- for i in range(2) -%}\n   [{{ i }}]  \n{%- endfor %}", "[0][1]");
    /* {% generation %} tags vanish, honouring their - markers */
    EXPECT("a {% generation %} b {% endgeneration %} c", "a  b  c");
    EXPECT("a {%- generation -%} b {%- endgeneration -%} c", "abc");
}

static void test_values(void) {
    /* numbers print as JavaScript prints them; floats keep ".0" when whole */
    EXPECT("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 6 / 2 }} {{ 2 ** -1 }} {{ 0.1 + 0.2 }} {{ 1 / 0 }}",
           "3 -4 -1 3.5 3.0 0.5 0.30000000000000004 Infinity");
    EXPECT("{{ 10 ** 21 }} {{ 10 ** -7 }} {{ 10 ** -6 }} {{ -0.0 }} {{ 0 * -1 }} {{ 5 % 0 }}",
           "1e+21 1e-7 0.000001 -0.0 0 NaN");
    /* + with a string concatenates String(x): floats lose ".0" there */
    EXPECT("{{ 'a' + 1 }} {{ 'n' + 2.0 }} {{ 1 ~ 2 }} {{ 'x' ~ true }} {{ [1, 'a'] ~ '!' }}", "a1 n2 12 xtrue 1,a!");
    /* == is JavaScript's loose equality */
    EXPECT("{{ '' == false }} {{ '1' == 1 }} {{ 0 == false }} {{ none == false }} {{ [] == false }} {{ '0x10' == 16 }}",
           "true true true false true true");
    EXPECT("{{ 1 in [1, 2] }} {{ '1' in [1] }} {{ 'a' in 'cat' }} {{ 'role' in messages[0] }} {{ 'x' in nope }}",
           "true false true true false");
    EXPECT("{{ [1, 'a', true, none, 1.5, 2.0] }} {{ {'a': 1} }} {{ [nope] }}", "[1, \"a\", true, null, 1.5, 2] {\"a\": 1} [undefined]");
    EXPECT("{{ messages[0] | tojson }}", "{\"role\": \"system\", \"content\": \"Be nice.\"}");
    EXPECT("{{ [1, {}] | tojson(indent=2) }}|{{ '\xC3\xA9\\x7f' | tojson(ensure_ascii=true) }}|{{ 'a\\x01\"' | tojson }}",
           "[\n  1,\n  {}\n]|\"\\u00e9\\u007f\"|\"a\\u0001\\\"\"");
    EXPECT("{{ '  a b  '.strip() }}|{{ 'hello world-x'.title() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|"
           "{{ 'abc'.replace('', '-') }}|{{ 'abc'.startswith(('x', 'a')) }}",
           "a b|Hello World-X|[\"a\", \"b\", \"\", \"c\"]|[\"a\", \"b\"]|-a-b-c-|true");
    EXPECT("{{ '\xF0\x9F\x98\x80' | length }}{{ '\xF0\x9F\x98\x80'.length }}", "22"); /* UTF-16 units */
    EXPECT("{{ ' x\xC2\xA0' | trim }}.", "x."); /* JavaScript whitespace */
    EXPECT("{{ [1, none, 'x', 2.0] | join('|') }}|{{ 'ab' | join('-') }}|{{ ' 12ab' | int }}|{{ 'x' | int(7) }}",
           "1||x|2|a-b|12|7");
    EXPECT("{{ nope | default('d') }}{{ '' | default('e') }}{{ '' | default('f', true) }}", "df"); /* '' is defined */
    EXPECT("{{ 'a\\nb\\n\\nc' | indent }}", "a\n    b\n\n    c");
    EXPECT("{{ none is none }}{{ 1.5 is integer }}{{ messages is iterable }}{{ x is defined }}{{ 3 is odd }}"
           "{{ 'a' is not string }}",
           "truefalsetruefalsetruefalse");
    EXPECT("{{ messages[0].get('nope', 'd') }}{{ messages[0].get('nope') }}{{ messages[0].keys() }}",
           "d[\"role\", \"content\"]");
    EXPECT("{{ range(3) }}{{ range(5, 0, -2) }}{{ range(0.5, 3) }}", "[0, 1, 2][5, 3, 1][0.5, 1.5, 2.5]");
    /* variables come as JSON.parse gives them: array-index keys first */
    ct_status st;
    char *t = render_lim("{{ d | tojson }}{{ n }}{{ f }}", "{\"d\": {\"b\": 1, \"2\": 2, \"a\": 3, \"1\": 4}, \"n\": 5.0, "
                         "\"f\": 0.5}", NULL, &st);
    CHECK_MSG(t && strcmp(t, "{\"1\": 4, \"2\": 2, \"b\": 1, \"a\": 3}50.5") == 0, "got %s", t ? t : ct_last_error());
    free(t);
}

static void test_errors(void) {
    /* constructs outside the subset: named, with the template and line */
    EXPECT_ERR("a\n{% foo %}", CT_ERR_FORMAT, "tpl.jinja:2:", "unknown statement {% foo %}");
    EXPECT_ERR("{% macro m() %}x{% endmacro %}", CT_ERR_FORMAT, "tpl.jinja:1:", "unsupported statement {% macro %}");
    EXPECT_ERR("{% filter upper %}x{% endfilter %}", CT_ERR_FORMAT, "unsupported statement {% filter %}");
    EXPECT_ERR("{% call m() %}x{% endcall %}", CT_ERR_FORMAT, "unsupported statement {% call %}");
    EXPECT_ERR("\n\n{{ messages | map(attribute='content') }}", CT_ERR_FORMAT, "tpl.jinja:3:", "unsupported filter 'map'");
    EXPECT_ERR("{{ x | sort }}", CT_ERR_FORMAT, "unsupported filter 'sort'");
    EXPECT_ERR("{{ x is divisibleby(3) }}", CT_ERR_FORMAT, "unsupported test 'is divisibleby(...)'");
    EXPECT_ERR("{{ x is sameas }}", CT_ERR_FORMAT, "unsupported test 'is sameas'");
    EXPECT_ERR("{{ strftime_now('%d') }}", CT_ERR_FORMAT, "unsupported function 'strftime_now'");
    EXPECT_ERR("{{ 'x'.format(1) }}", CT_ERR_FORMAT, "unsupported method '.format()'");
    EXPECT_ERR("{{ loop.cycle('a', 'b') }}", CT_ERR_FORMAT, "unsupported method '.cycle()'");
    EXPECT_ERR("{{ f(*args) }}", CT_ERR_FORMAT, "unsupported function 'f'");
    EXPECT_ERR("{{ range(*args) }}", CT_ERR_FORMAT, "argument unpacking");
    EXPECT_ERR("{% set x %}body{% endset %}", CT_ERR_FORMAT, "{% set %}...{% endset %}");
    /* syntax */
    EXPECT_ERR("x\n{% if a %}\nA", CT_ERR_FORMAT, "tpl.jinja:2:", "{% if %} opened on line 2 is never closed");
    EXPECT_ERR("{% for m in messages %}", CT_ERR_FORMAT, "{% for %} opened on line 1 is never closed");
    EXPECT_ERR("{% if a %}{% else %}", CT_ERR_FORMAT, "never closed");
    EXPECT_ERR("{% endif %}", CT_ERR_FORMAT, "unexpected {% endif %}");
    EXPECT_ERR("{% break %}", CT_ERR_FORMAT, "{% break %} outside a {% for %} loop");
    EXPECT_ERR("{{ 'abc }}", CT_ERR_FORMAT, "unterminated string");
    EXPECT_ERR("{# no end", CT_ERR_FORMAT, "comment is never closed");
    EXPECT_ERR("{{ a b }}", CT_ERR_FORMAT, "expected '}}'");
    EXPECT_ERR("{{ 'x\\q' }}", CT_ERR_FORMAT, "unknown escape \\q");
    EXPECT_ERR("{{ a ^ b }}", CT_ERR_FORMAT, "unexpected character '^'");
    EXPECT_ERR("{% set 1 = 2 %}", CT_ERR_FORMAT, "assigns to a name");
    EXPECT_ERR("ok\n\xFF", CT_ERR_FORMAT, "tpl.jinja:2:", "not valid UTF-8");
    /* evaluation */
    EXPECT_ERR("{% if messages[0].role == 'system' %}\n{{ raise_exception('System role not supported') }}{% endif %}",
               CT_ERR_ARG, "tpl.jinja:2:", "raise_exception: System role not supported");
    EXPECT_ERR("{{ 'x' + none }}", CT_ERR_ARG, "none");
    EXPECT_ERR("{{ nope + 1 }}", CT_ERR_ARG, "undefined");
    EXPECT_ERR("{{ 1 < 'a' }}", CT_ERR_ARG, "unknown operator '<'");
    EXPECT_ERR("{% for c in 'abc' %}{% endfor %}", CT_ERR_ARG, "not a StringValue");
    EXPECT_ERR("{{ messages[0].content.strip.upper() }}", CT_ERR_ARG, "not a function");
    EXPECT_ERR("{{ [] | first }}", CT_ERR_ARG, "empty list");
    EXPECT_ERR("{{ (1, 2) }}", CT_ERR_ARG, "TupleValue");
    EXPECT_ERR("{{ x | tojson(sort_keys=true) }}", CT_ERR_ARG, "sort_keys");
}

static void test_limits(void) {
    ct_jinja_limits lim = ct_jinja_limits_default();
    /* nesting at parse: parentheses, blocks */
    char deep[4000];
    size_t o = 0;
    o += (size_t)snprintf(deep + o, sizeof deep - o, "{{ ");
    for (int i = 0; i < 300; i++) deep[o++] = '(';
    deep[o++] = '1';
    for (int i = 0; i < 300; i++) deep[o++] = ')';
    snprintf(deep + o, sizeof deep - o, " }}");
    EXPECT_ERR(deep, CT_ERR_FORMAT, "nests more than 200 levels deep");
    o = 0;
    for (int i = 0; i < 250; i++) o += (size_t)snprintf(deep + o, sizeof deep - o, "{%% if 1 %%}");
    EXPECT_ERR(deep, CT_ERR_FORMAT, "nests more than 200 levels deep");
    o = 0;
    for (int i = 0; i < 300; i++) deep[o++] = '-';
    snprintf(deep + o, sizeof deep - o, "1");
    char tpl[4100];
    snprintf(tpl, sizeof tpl, "{{ %s }}", deep);
    EXPECT_ERR(tpl, CT_ERR_FORMAT, "nests more than 200 levels deep");
    /* nesting of values (no stack overflow printing them) */
    EXPECT_ERR("{% set ns = namespace(a=[]) %}{% for i in range(1000) %}{% set ns.a = [ns.a] %}{% endfor %}{{ ns.a }}",
               CT_ERR_ARG, "nests more than 200 levels deep");
    /* output size */
    lim.output_max = 1000;
    expect_err_lim("{% for i in range(100) %}0123456789ab{% endfor %}", NULL, &lim, CT_ERR_OOM, __LINE__,
                   "longer than 1000 bytes (output_max)", (const char *)NULL);
    /* loop steps: a huge range is refused before it is built; nested loops are counted */
    lim = ct_jinja_limits_default();
    EXPECT_ERR("{% for i in range(100000000000) %}{% endfor %}", CT_ERR_OOM, "steps_max");
    lim.steps_max = 100000;
    expect_err_lim("{% for a in range(1000) %}{% for b in range(1000) %}{% endfor %}{% endfor %}", NULL, &lim,
                   CT_ERR_OOM, __LINE__, "steps_max", (const char *)NULL);
    /* memory: a string doubling each iteration */
    lim = ct_jinja_limits_default();
    lim.memory_max = 1 << 20;
    expect_err_lim("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
                   NULL, &lim, CT_ERR_OOM, __LINE__, "memory_max", (const char *)NULL);
    /* template size */
    lim = ct_jinja_limits_default();
    lim.source_max = 10;
    expect_err_lim("0123456789abc", NULL, &lim, CT_ERR_FORMAT, __LINE__, "source_max", (const char *)NULL);
    /* a render after an error is independent: the template is reusable */
    ct_jinja *t = NULL;
    const char *src = "{{ raise_exception('boom') if fail else 'ok' }}";
    CHECK(ct_jinja_parse(&t, src, strlen(src), "reuse", NULL) == CT_OK);
    cJSON *yes = cJSON_Parse("{\"fail\": true}"), *no = cJSON_Parse("{\"fail\": false}");
    char *text = NULL;
    CHECK(ct_jinja_render(t, yes, &text, NULL) == CT_ERR_ARG && !text && strstr(ct_last_error(), "boom"));
    CHECK(ct_jinja_render(t, no, &text, NULL) == CT_OK && text && strcmp(text, "ok") == 0);
    free(text);
    cJSON_Delete(yes);
    cJSON_Delete(no);
    ct_jinja_free(t);
    ct_jinja_free(NULL);
}

int main(void) {
    test_basics();
    test_whitespace();
    test_values();
    test_errors();
    test_limits();
    return ct_test_result("test_jinja");
}
