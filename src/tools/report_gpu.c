/*
 * The run report, part four: the GPU section of a run on a GPU, from the
 * NVML readings its "device" lines hold (src/perf/gpu_watch.c, written by the
 * trainer every few seconds): a summary (median utilisation, the share of
 * readings below the gpu_util alert's 90%, peak memory, power, temperature,
 * the gpu_util alerts) and plots of utilisation, memory and power against
 * the step. A figure the board did not report (null) is skipped: each line
 * joins the readings that have it, and no null is drawn or counted as 0.
 * A CPU run (no device line) gets nothing, not even a heading.
 * Leaves out: the clocks as plots (the summary names the median SM clock)
 * and the temperature as a plot (its maximum is in the summary).
 */
#include "tools/report_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf/gpu_watch.h"

#define G_BLUE "#1f77b4"
#define G_GREEN "#2ca02c"
#define G_RED "#d62728"
#define G_GREY "#7f7f7f"
#define G_WARN "#e69f00"
#define G_CRIT "#d62728"

static int gpu_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of the finite values of key k over d's readings; NaN when none
 * (or no memory for the sort). */
static double gpu_median(const ct_report_data *d, ct_report_gpu_key k) {
    double *t = malloc((d->n_gpu ? d->n_gpu : 1) * sizeof *t);
    if (!t) return NAN;
    size_t n = 0;
    for (size_t i = 0; i < d->n_gpu; i++)
        if (isfinite(d->gpu[i].v[k])) t[n++] = d->gpu[i].v[k];
    double m = NAN;
    if (n) {
        qsort(t, n, sizeof *t, gpu_cmp_double);
        m = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    }
    free(t);
    return m;
}

/* Largest finite value of key k (NaN when none); its step in *at. */
static double gpu_max(const ct_report_data *d, ct_report_gpu_key k, int64_t *at) {
    double m = NAN;
    for (size_t i = 0; i < d->n_gpu; i++) {
        double v = d->gpu[i].v[k];
        if (isfinite(v) && !(v <= m)) {
            m = v;
            if (at) *at = d->gpu[i].step;
        }
    }
    return m;
}

void ct_report_gpu_summary(const ct_report_data *d, ct_report_gpu_stats *out) {
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < d->n_gpu; i++) {
        double u = d->gpu[i].v[CT_REPORT_GPU_UTIL];
        if (!isfinite(u)) continue;
        out->n_util++;
        out->n_util_low += u < CT_GPU_UTIL_THRESHOLD_PCT;
    }
    out->util_median = gpu_median(d, CT_REPORT_GPU_UTIL);
    out->mem_peak_mib = gpu_max(d, CT_REPORT_GPU_MEM_USED_MIB, &out->mem_peak_step);
    out->mem_total_mib = gpu_max(d, CT_REPORT_GPU_MEM_TOTAL_MIB, NULL);
    out->power_median_w = gpu_median(d, CT_REPORT_GPU_POWER_W);
    out->power_max_w = gpu_max(d, CT_REPORT_GPU_POWER_W, NULL);
    out->temp_max_c = gpu_max(d, CT_REPORT_GPU_TEMP_C, NULL);
    out->sm_clock_median_mhz = gpu_median(d, CT_REPORT_GPU_SM_CLOCK_MHZ);
    for (size_t i = 0; i < d->n_alerts; i++)
        out->n_util_alerts += !strcmp(d->alerts[i].kind, "gpu_util");
}

static void gpu_summary_table(ct_strbuf *b, const ct_report_data *d, const ct_report_gpu_stats *g) {
    char v[320], a[64], c[64];
    ct_strbuf_printf(b, "<table class=\"summary gpu\">\n");
    snprintf(v, sizeof v, "%zu (steps %lld to %lld)", d->n_gpu, (long long)d->gpu[0].step,
             (long long)d->gpu[d->n_gpu - 1].step);
    report_html_row(b, "GPU readings", v);
    if (g->n_util) {
        report_fmt_num(a, sizeof a, g->util_median);
        snprintf(v, sizeof v, "%s%%", a);
        report_html_row(b, "median utilisation", v);
        snprintf(v, sizeof v, "%.1f%% (%zu of %zu readings)",
                 100.0 * (double)g->n_util_low / (double)g->n_util, g->n_util_low, g->n_util);
        report_html_row(b, "readings below 90% utilisation", v);
    } else {
        report_html_row(b, "median utilisation", "not reported by this GPU");
    }
    if (isfinite(g->mem_peak_mib)) {
        report_fmt_num(a, sizeof a, g->mem_peak_mib / 1024);
        int n = snprintf(v, sizeof v, "%s GiB", a);
        if (isfinite(g->mem_total_mib) && g->mem_total_mib > 0) {
            report_fmt_num(c, sizeof c, g->mem_total_mib / 1024);
            n += snprintf(v + n, sizeof v - (size_t)n, " of %s GiB (%.0f%%)", c,
                          100 * g->mem_peak_mib / g->mem_total_mib);
        }
        snprintf(v + n, sizeof v - (size_t)n, " at step %lld (every process's, as NVML counts it)",
                 (long long)g->mem_peak_step);
        report_html_row(b, "peak GPU memory used", v);
    } else {
        report_html_row(b, "peak GPU memory used", "not reported by this GPU");
    }
    if (isfinite(g->power_median_w)) {
        report_fmt_num(a, sizeof a, g->power_median_w);
        report_fmt_num(c, sizeof c, g->power_max_w);
        snprintf(v, sizeof v, "median %s W, max %s W", a, c);
        report_html_row(b, "board power", v);
    } else {
        report_html_row(b, "board power", "not reported by this GPU");
    }
    if (isfinite(g->temp_max_c)) {
        report_fmt_num(a, sizeof a, g->temp_max_c);
        snprintf(v, sizeof v, "%s \xc2\xb0" "C", a);
        report_html_row(b, "max temperature", v);
    } else {
        report_html_row(b, "max temperature", "not reported by this GPU");
    }
    if (isfinite(g->sm_clock_median_mhz)) {
        report_fmt_num(a, sizeof a, g->sm_clock_median_mhz);
        snprintf(v, sizeof v, "%s MHz", a);
        report_html_row(b, "median SM clock", v);
    }
    if (g->n_util_alerts)
        snprintf(v, sizeof v, "%zu (utilisation below 90%% for a minute or more: the loader or "
                 "the host starving the GPU)", g->n_util_alerts);
    else
        snprintf(v, sizeof v, "none");
    report_html_row(b, "gpu_util alerts", v);
    ct_strbuf_append(b, "</table>\n", 9);
}

/* The readings of key k that are finite, as x (step) and y arrays (owned;
 * free both). *n 0 when none; false when out of memory. */
static bool gpu_series(const ct_report_data *d, ct_report_gpu_key k, double **x, double **y,
                       size_t *n) {
    *n = 0;
    *x = malloc((d->n_gpu ? d->n_gpu : 1) * sizeof **x);
    *y = malloc((d->n_gpu ? d->n_gpu : 1) * sizeof **y);
    if (!*x || !*y) return false;
    for (size_t i = 0; i < d->n_gpu; i++) {
        if (!isfinite(d->gpu[i].v[k])) continue;
        (*x)[*n] = (double)d->gpu[i].step;
        (*y)[(*n)++] = d->gpu[i].v[k];
    }
    return true;
}

void report_gpu_section(ct_strbuf *b, const ct_report_data *d, const report_marker *mk,
                        size_t max_points) {
    if (!d->has_device) return;
    ct_strbuf_printf(b, "<h2>GPU</h2>\n");
    if (!d->n_gpu) {
        report_html_note(b, "This run used a GPU, but its metrics hold no GPU reading: the NVML "
                            "watch was off (no libnvidia-ml.so.1, or the driver did not know "
                            "the device; the run's log says why).");
        return;
    }
    ct_report_gpu_stats g;
    ct_report_gpu_summary(d, &g);
    gpu_summary_table(b, d, &g);

    enum { NK = 5 };
    static const ct_report_gpu_key keys[NK] = {CT_REPORT_GPU_UTIL, CT_REPORT_GPU_MEM_UTIL,
                                               CT_REPORT_GPU_MEM_USED_MIB,
                                               CT_REPORT_GPU_MEM_TOTAL_MIB, CT_REPORT_GPU_POWER_W};
    double *x[NK] = {0}, *y[NK] = {0};
    size_t n[NK] = {0};
    report_marker *gm = malloc((d->n_alerts ? d->n_alerts : 1) * sizeof *gm);
    /* the alert's threshold at every reading (a line of a few points would be
     * drawn with dots) */
    double *thr_x = malloc(d->n_gpu * sizeof *thr_x), *thr_y = malloc(d->n_gpu * sizeof *thr_y);
    bool ok = gm && thr_x && thr_y;
    for (int i = 0; i < NK && ok; i++) ok = gpu_series(d, keys[i], &x[i], &y[i], &n[i]);
    if (!ok) {
        b->oom = true;
        goto done;
    }
    size_t nm = 0;
    bool warn = false, crit = false;
    for (size_t i = 0; i < d->n_alerts; i++) {
        if (strcmp(d->alerts[i].kind, "gpu_util")) continue;
        gm[nm++] = mk[i];
        if (!strcmp(d->alerts[i].level, "critical")) crit = true;
        else warn = true;
    }
    report_legend_extra ex[2];
    int nex = 0;
    if (warn) ex[nex++] = (report_legend_extra){"warning", G_WARN, false};
    if (crit) ex[nex++] = (report_legend_extra){"critical", G_CRIT, false};

    /* utilisation, with the alert's threshold across the run */
    report_html_title(b, "GPU utilisation");
    if (n[0] || n[1]) {
        report_series s[3];
        int ns = 0;
        if (n[0])
            s[ns++] = (report_series){.label = "GPU busy (gpu_util)", .color = G_BLUE, .x = x[0],
                                      .y = y[0], .n = n[0]};
        if (n[1])
            s[ns++] = (report_series){.label = "memory busy (gpu_mem_util)", .color = G_GREEN,
                                      .x = x[1], .y = y[1], .n = n[1]};
        for (size_t i = 0; i < d->n_gpu; i++) {
            thr_x[i] = (double)d->gpu[i].step;
            thr_y[i] = CT_GPU_UTIL_THRESHOLD_PCT;
        }
        s[ns++] = (report_series){.label = "alert threshold", .color = G_GREY, .x = thr_x,
                                  .y = thr_y, .n = d->n_gpu, .style = REPORT_STYLE_DASHED};
        report_plot p = {.ylabel = "utilisation (%)", .y_from_zero = true, .s = s, .ns = ns,
                         .m = gm, .nm = nm, .extra = ex, .nextra = nex, .max_points = max_points};
        report_svg_lines(b, &p);
    } else {
        report_html_note(b, "Not plotted: this GPU reported no utilisation (gpu_util, "
                            "gpu_mem_util are null).");
    }

    /* memory in use against the device's total */
    report_html_title(b, "GPU memory");
    if (n[2]) {
        double top = gpu_max(d, CT_REPORT_GPU_MEM_TOTAL_MIB, NULL);
        if (!(top >= g.mem_peak_mib)) top = g.mem_peak_mib;
        bool gib = top >= 1024;
        report_series s[2];
        int ns = 0;
        s[ns++] = (report_series){.label = "used (gpu_mem_used_mib)", .color = G_BLUE,
                                  .x = x[2], .y = y[2], .n = n[2],
                                  .scale = gib ? 1.0 / 1024 : 1};
        if (n[3])
            s[ns++] = (report_series){.label = "total", .color = G_RED, .x = x[3], .y = y[3],
                                      .n = n[3], .scale = gib ? 1.0 / 1024 : 1,
                                      .style = REPORT_STYLE_DASHED};
        report_plot p = {.ylabel = gib ? "GPU memory (GiB)" : "GPU memory (MiB)",
                         .y_from_zero = true, .s = s, .ns = ns, .max_points = max_points};
        report_svg_lines(b, &p);
    } else {
        report_html_note(b, "Not plotted: this GPU reported no memory in use (gpu_mem_used_mib "
                            "is null).");
    }

    /* power, when the board reports it */
    if (n[4]) {
        report_html_title(b, "GPU power");
        report_series s = {.label = "board power (gpu_power_w)", .color = G_RED, .x = x[4],
                           .y = y[4], .n = n[4]};
        report_plot p = {.ylabel = "power (W)", .y_from_zero = true, .s = &s, .ns = 1,
                         .max_points = max_points};
        report_svg_lines(b, &p);
    }
done:
    for (int i = 0; i < NK; i++) {
        free(x[i]);
        free(y[i]);
    }
    free(thr_x);
    free(thr_y);
    free(gm);
}
