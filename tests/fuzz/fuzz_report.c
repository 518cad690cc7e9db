/*
 * Fuzz the run report's readers (ct_report_load, src/tools/report_data.c) and
 * its renderer: the input is a run directory's metrics.jsonl, then (after the
 * first NUL byte) hw.json, then (after the second) config.yaml; a part that
 * is absent is a file that is absent.
 * Oracles: a failed load names the run directory; a loaded run renders; the
 * page holds only the markup the renderer writes: every tag is one of its
 * own (a tag of any other name came from the files unescaped).
 */
#include "fuzz.h"

#include "tools/report.h"

#include <ctype.h>

/* Tags the renderer writes (src/tools/report_html.c, report_svg.c). */
static const char *const allowed[] = {
    "!doctype", "html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "h4",
    "p", "table", "thead", "tbody", "tr", "th", "td", "pre", "code", "svg", "g", "text", "line",
    "path", "rect", "circle", "div", "span", "section", "ul", "li", "small", "b", "a",
    "details", "summary", "em", "strong", "polyline", "tspan", "defs", "br", NULL};

static void check_markup(const char *html, size_t len) {
    for (size_t i = 0; i < len; i++) {
        if (html[i] != '<') continue;
        size_t j = i + 1;
        if (j < len && html[j] == '/') j++;
        char name[16];
        size_t k = 0;
        while (j < len && k + 1 < sizeof name &&
               (isalnum((unsigned char)html[j]) || (k == 0 && html[j] == '!'))) {
            name[k++] = (char)tolower((unsigned char)html[j]);
            j++;
        }
        name[k] = '\0';
        if (!k) fuzz_fail("a bare '<' in the page at byte %zu: %.60s", i, html + i);
        bool ok = false;
        for (int a = 0; allowed[a] && !ok; a++) ok = !strcmp(name, allowed[a]);
        if (!ok) fuzz_fail("the page holds a <%s> tag at byte %zu: %.80s", name, i, html + i);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = fuzz_dir("report");
    const char *names[3] = {"metrics.jsonl", "hw.json", "config.yaml"};
    fuzz_part parts[3];
    int n = fuzz_split(data, size, parts, 3);
    char p[FUZZ_PATH_MAX];
    for (int i = 0; i < 3; i++) {
        fuzz_join(p, dir, names[i]);
        if (i < n) fuzz_write(p, parts[i].p, parts[i].n);
        else unlink(p);
    }
    ct_report_data *d = NULL;
    ct_error_clear();
    ct_status st = ct_report_load(&d, dir);
    fuzz_check_error(st, "ct_report_load", dir);
    if (st) return 0;
    char *html = NULL;
    size_t len = 0;
    ct_error_clear();
    st = ct_report_render(d, 16, &html, &len);
    if (st && st != CT_ERR_OOM) fuzz_fail("ct_report_render failed: %s", ct_last_error());
    if (!st) {
        if (strlen(html) != len) fuzz_fail("rendered page: length %zu, strlen %zu", len, strlen(html));
        check_markup(html, len);
        free(html);
    }
    ct_report_free(d);
    return 0;
}
