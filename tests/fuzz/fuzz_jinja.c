/*
 * Fuzz the Jinja subset of chat templates (src/data/chat/jinja*.c): the input is a
 * template's text [NUL a JSON object of variables], parsed with
 * ct_jinja_parse under tight limits and rendered with those variables (or a
 * fixed conversation when there are none or they do not parse).
 * Oracles: a template that fails names "fuzz.jinja" and the status it
 * returned; a render that succeeds is valid UTF-8 within output_max, and a
 * second render of the same template gives the same text (no state leaks
 * between renders). The limits keep a hostile template (deep nesting, huge
 * loops, doubling strings, nested values) from running long or large; one that
 * still does is a finding of libFuzzer's -timeout or -malloc_limit_mb.
 */
#include "fuzz.h"
#include "ctrain/data.h"
#include "data/chat/jinja.h"

#include <cJSON.h>

static const char *CONV = "{\"messages\": [{\"role\": \"system\", \"content\": \"Be nice.\"},"
                          "{\"role\": \"user\", \"content\": \"Hi {{ x }}\"},"
                          "{\"role\": \"assistant\", \"content\": \" Hello! \"}],"
                          "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_part parts[2];
    int n = fuzz_split(data, size, parts, 2);
    ct_jinja_limits lim = ct_jinja_limits_default();
    lim.depth_max = 64;
    lim.output_max = 1 << 16;
    lim.memory_max = 8 << 20;
    lim.steps_max = 20000;
    lim.source_max = 1 << 16;
    ct_jinja *t = NULL;
    ct_error_clear();
    ct_status st = ct_jinja_parse(&t, (const char *)parts[0].p, parts[0].n, "fuzz.jinja", &lim);
    fuzz_check_error(st, "ct_jinja_parse", "fuzz.jinja");
    if (st) return 0;
    cJSON *vars = n > 1 ? cJSON_ParseWithLength((const char *)parts[1].p, parts[1].n) : NULL;
    if (!cJSON_IsObject(vars)) {
        cJSON_Delete(vars);
        vars = cJSON_Parse(CONV);
    }
    char *a = NULL, *b = NULL;
    size_t an = 0, bn = 0;
    ct_error_clear();
    st = ct_jinja_render(t, vars, &a, &an);
    fuzz_check_error(st, "ct_jinja_render", "fuzz.jinja");
    if (!st) {
        if (an > lim.output_max) fuzz_fail("a render of %zu bytes passed output_max %zu", an, lim.output_max);
        if (ct_utf8_valid_prefix(a, an) != an) fuzz_fail("a render is not valid UTF-8");
        if (ct_jinja_render(t, vars, &b, &bn) != CT_OK || bn != an || memcmp(a, b, an) != 0)
            fuzz_fail("two renders of one template with the same variables differ");
    }
    free(a);
    free(b);
    cJSON_Delete(vars);
    ct_jinja_free(t);
    return 0;
}
