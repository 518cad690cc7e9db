/*
 * The trace recorder (see trace.h): a growable array of spans, written in the
 * Trace Event Format. Names are escaped as JSON strings.
 */
#include "core/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct span {
    char name[48];
    const char *cat;
    int tid;
    double t0, t1;
    long long step;
} span;

struct ct_trace {
    span *s;
    size_t n, cap, dropped;
};

ct_status ct_trace_init(ct_trace **out) {
    *out = calloc(1, sizeof **out);
    return *out ? CT_OK : CT_ERR(CT_ERR_OOM, "out of memory for the trace recorder");
}

void ct_trace_free(ct_trace *tr) {
    if (!tr) return;
    free(tr->s);
    free(tr);
}

void ct_trace_span(ct_trace *tr, const char *name, const char *cat, int tid, double t0,
                   double t1, long long step) {
    if (!tr) return;
    if (tr->n == tr->cap) {
        size_t cap = tr->cap ? 2 * tr->cap : 1024;
        span *s = realloc(tr->s, cap * sizeof *s);
        if (!s) {
            tr->dropped++;
            return;
        }
        tr->s = s;
        tr->cap = cap;
    }
    span *p = &tr->s[tr->n++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->cat = cat;
    p->tid = tid;
    p->t0 = t0;
    p->t1 = t1 < t0 ? t0 : t1;
    p->step = step;
}

size_t ct_trace_count(const ct_trace *tr) { return tr ? tr->n : 0; }
size_t ct_trace_dropped(const ct_trace *tr) { return tr ? tr->dropped : 0; }

static void json_string(ct_strbuf *b, const char *s) {
    ct_strbuf_append(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            ct_strbuf_printf(b, "\\%c", c);
        else if (c < 0x20)
            ct_strbuf_printf(b, "\\u%04x", c);
        else
            ct_strbuf_append(b, s, 1);
    }
    ct_strbuf_append(b, "\"", 1);
}

void ct_trace_to_json(const ct_trace *tr, ct_strbuf *out) {
    double origin = 0;
    for (size_t i = 0; tr && i < tr->n; i++)
        if (i == 0 || tr->s[i].t0 < origin) origin = tr->s[i].t0;
    ct_strbuf_printf(out, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n"
                          "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,"
                          "\"args\":{\"name\":\"ctrain\"}},\n"
                          "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,"
                          "\"args\":{\"name\":\"trainer\"}},\n"
                          "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,"
                          "\"args\":{\"name\":\"data\"}}",
                     CT_TRACE_TID_MAIN, CT_TRACE_TID_MAIN, CT_TRACE_TID_DATA);
    bool device = false; /* the device's track is named where it has spans */
    for (size_t i = 0; tr && i < tr->n && !device; i++) device = tr->s[i].tid == CT_TRACE_TID_DEVICE;
    if (device)
        ct_strbuf_printf(out, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,"
                              "\"args\":{\"name\":\"device\"}}", CT_TRACE_TID_DEVICE);
    for (size_t i = 0; tr && i < tr->n; i++) {
        const span *p = &tr->s[i];
        ct_strbuf_append(out, ",\n{\"name\":", 10);
        json_string(out, p->name);
        ct_strbuf_printf(out, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,"
                              "\"dur\":%.3f",
                         p->cat, p->tid, (p->t0 - origin) * 1e6, (p->t1 - p->t0) * 1e6);
        if (p->step >= 0) ct_strbuf_printf(out, ",\"args\":{\"step\":%lld}", p->step);
        ct_strbuf_append(out, "}", 1);
    }
    ct_strbuf_append(out, "\n]}\n", 4);
}
