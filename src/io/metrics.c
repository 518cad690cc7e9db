/* metrics.jsonl writer (format in metrics.h). */
#include "io/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ct_metrics {
    FILE *f;
    char path[4096];
};

ct_status ct_metrics_open(ct_metrics **out, const char *run_dir, bool append) {
    *out = NULL;
    ct_metrics *m = calloc(1, sizeof *m);
    if (!m) return CT_ERR(CT_ERR_OOM, "out of memory for metrics");
    snprintf(m->path, sizeof m->path, "%s/metrics.jsonl", run_dir);
    m->f = fopen(m->path, append ? "ab" : "wb");
    if (!m->f) {
        ct_status st = CT_ERR(CT_ERR_IO, "%s: cannot open for writing: %s", m->path, strerror(errno));
        free(m);
        return st;
    }
    *out = m;
    return CT_OK;
}

void ct_metrics_close(ct_metrics *m) {
    if (!m) return;
    fclose(m->f);
    free(m);
}

/* ", key: v": integers (byte counts, steps) exactly, other values to 9
 * significant digits, non-finite ones as null. */
static void metrics_num(FILE *f, const char *key, double v) {
    if (!isfinite(v)) fprintf(f, ", \"%s\": null", key);
    else if (v == floor(v) && fabs(v) < 9007199254740992.0) fprintf(f, ", \"%s\": %.0f", key, v);
    else fprintf(f, ", \"%s\": %.9g", key, v);
}

ct_status ct_metrics_write(ct_metrics *m, int64_t step, const char *split, int n,
                           const char *const *keys, const double *vals) {
    fprintf(m->f, "{\"step\": %lld, \"split\": \"%s\"", (long long)step, split);
    for (int i = 0; i < n; i++) metrics_num(m->f, keys[i], vals[i]);
    fputs("}\n", m->f);
    if (fflush(m->f) != 0 || ferror(m->f))
        return CT_ERR(CT_ERR_IO, "%s: write failed: %s", m->path, strerror(errno));
    return CT_OK;
}


ct_status ct_metrics_write_alert(ct_metrics *m, int64_t step, const char *level,
                                 const char *kind, double value, double threshold,
                                 const char *message) {
    fprintf(m->f, "{\"step\": %lld, \"split\": \"alert\", \"level\": \"%s\", \"kind\": \"%s\"",
            (long long)step, level, kind);
    metrics_num(m->f, "value", value);
    metrics_num(m->f, "threshold", threshold);
    fputs(", \"message\": \"", m->f);
    for (const char *p = message; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\') fprintf(m->f, "\\%c", c);
        else if (c < 0x20) fprintf(m->f, "\\u%04x", c);
        else fputc(c, m->f);
    }
    fputs("\"}\n", m->f);
    if (fflush(m->f) != 0 || ferror(m->f))
        return CT_ERR(CT_ERR_IO, "%s: write failed: %s", m->path, strerror(errno));
    return CT_OK;
}
