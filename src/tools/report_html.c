/*
 * The run report, part three: the HTML page. A summary table, the plots (each
 * left out with a note when the run did not record its keys), a GPU run's GPU
 * section (report_gpu.c), the alerts and rollbacks, the config text and the
 * hardware profile. Inline CSS only; a
 * Content-Security-Policy forbids every outside load and every script, so the
 * page is the same offline, and a stray reference shows as a console error.
 * The page is also well-formed XML, so tests can parse it with any XML reader.
 * Leaves out: anything a browser would need script for.
 */
#include "tools/report_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#define C_BLUE "#1f77b4"
#define C_ORANGE "#ff7f0e"
#define C_GREEN "#2ca02c"
#define C_RED "#d62728"
#define C_PURPLE "#7b3fbf"
#define C_GREY "#7f7f7f"
#define C_WARN "#e69f00"
#define C_BROWN "#8c564b"

static const char report_css[] =
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#222;"
    "margin:24px auto;max-width:940px;padding:0 12px;background:#fff}"
    "h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid "
    "#ddd;padding-bottom:3px}h3{font-size:14px;margin:18px 0 2px}"
    ".sub{color:#666;margin:0 0 12px}table{border-collapse:collapse;margin:4px 0}"
    "td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}"
    "th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}"
    ".note{color:#8a5a00;background:#fff8e6;border-left:3px solid #e69f00;padding:4px 8px;"
    "margin:4px 0}pre{background:#f7f7f7;border:1px solid #ddd;padding:8px;overflow:auto;"
    "font-size:12px;max-height:480px}.crit{color:#d62728;font-weight:600}.warn{color:#b07800}"
    "svg.plot{display:block;max-width:100%;height:auto}"
    "svg .frame{fill:#fcfcfc;stroke:#bbb}svg .grid{stroke:#e6e6e6}svg .tick{stroke:#999}"
    "svg text{font:11px system-ui,sans-serif;fill:#444}svg .yt{text-anchor:end}"
    "svg .xt,svg .xl,svg .yl{text-anchor:middle}svg .lg{fill:#222}";

typedef struct html_ctx {
    const ct_report_data *d;
    ct_strbuf *b;
    size_t maxp;
    double *x;                         /* [n_train] steps */
    double *col[CT_REPORT_KEY_COUNT];  /* [n_train] values, NULL when the key never appears */
    report_marker *mk;                 /* alerts, then rollbacks, then resumes */
    size_t n_alert_mk, n_rb_mk, n_mk;  /* ends of the alerts and of the rollbacks */
} html_ctx;

static void esc(ct_strbuf *b, const char *s) { ct_report_escape(b, s, strlen(s)); }

/* Whether the key has at least one finite value. */
static bool usable(const html_ctx *h, ct_report_key k) {
    if (!h->col[k]) return false;
    for (size_t i = 0; i < h->d->n_train; i++)
        if (isfinite(h->col[k][i])) return true;
    return false;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of the finite values of a column; NaN when none (or no memory). */
static double median(const html_ctx *h, ct_report_key k) {
    if (!h->col[k]) return NAN;
    double *t = malloc((h->d->n_train ? h->d->n_train : 1) * sizeof *t);
    if (!t) return NAN;
    size_t n = 0;
    for (size_t i = 0; i < h->d->n_train; i++)
        if (isfinite(h->col[k][i])) t[n++] = h->col[k][i];
    double m = NAN;
    if (n) {
        qsort(t, n, sizeof *t, cmp_double);
        m = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    }
    free(t);
    return m;
}

/* Largest finite value of a column (NaN when none); its step in *at. */
static double col_max(const html_ctx *h, ct_report_key k, int64_t *at) {
    double m = NAN;
    if (!h->col[k]) return m;
    for (size_t i = 0; i < h->d->n_train; i++) {
        double v = h->col[k][i];
        if (isfinite(v) && !(v <= m)) {
            m = v;
            if (at) *at = h->d->train[i].step;
        }
    }
    return m;
}

static double col_last(const html_ctx *h, ct_report_key k, int64_t *at) {
    if (!h->col[k]) return NAN;
    for (size_t i = h->d->n_train; i-- > 0;)
        if (isfinite(h->col[k][i])) {
            if (at) *at = h->d->train[i].step;
            return h->col[k][i];
        }
    return NAN;
}

static void fmt_bytes(char *buf, size_t cap, double v) {
    if (!isfinite(v)) snprintf(buf, cap, "n/a");
    else if (v >= 1024.0 * 1024 * 1024) snprintf(buf, cap, "%.2f GiB", v / (1024.0 * 1024 * 1024));
    else if (v >= 1024.0 * 1024) snprintf(buf, cap, "%.1f MiB", v / (1024.0 * 1024));
    else if (v >= 1024.0) snprintf(buf, cap, "%.1f KiB", v / 1024.0);
    else snprintf(buf, cap, "%.0f B", v);
}

static void fmt_count(char *buf, size_t cap, double v) {
    if (!isfinite(v)) snprintf(buf, cap, "n/a");
    else if (v >= 1e9) snprintf(buf, cap, "%.2f B", v / 1e9);
    else if (v >= 1e6) snprintf(buf, cap, "%.2f M", v / 1e6);
    else if (v >= 1e4) snprintf(buf, cap, "%.1f K", v / 1e3);
    else snprintf(buf, cap, "%.0f", v);
}

static void fmt_duration(char *buf, size_t cap, double s) {
    if (!isfinite(s)) snprintf(buf, cap, "n/a");
    else if (s < 60) snprintf(buf, cap, "%.1f s", s);
    else if (s < 3600) snprintf(buf, cap, "%dm %02ds", (int)(s / 60), (int)fmod(s, 60));
    else /* hours as a double: a hostile metrics file's times overflow an int */
        snprintf(buf, cap, "%.0fh %02dm %02ds", floor(s / 3600), (int)fmod(s / 60, 60),
                 (int)fmod(s, 60));
}

static void row(ct_strbuf *b, const char *key, const char *val) {
    ct_strbuf_append(b, "<tr><th>", 8);
    esc(b, key);
    ct_strbuf_append(b, "</th><td>", 9);
    esc(b, val);
    ct_strbuf_append(b, "</td></tr>\n", 11);
}

/* ----------------------------------------------------------------- summary */

/* What was trained: the starting model and LoRA's settings (config.yaml). */
static void setup_rows(html_ctx *h) {
    const ct_report_data *d = h->d;
    if (!d->has_setup) return;
    char v[3 * CT_PATH_MAX], a[64], c[64];
    row(h->b, "model", d->setup_model);
    if (!d->lora) {
        row(h->b, "LoRA", "off: every weight trained");
        return;
    }
    report_fmt_num(a, sizeof a, d->lora_alpha);
    if (d->lora_r > 0) report_fmt_num(c, sizeof c, d->lora_alpha / (double)d->lora_r);
    int n = snprintf(v, sizeof v, "r %lld, alpha %s", (long long)d->lora_r, a);
    if (d->lora_r > 0) n += snprintf(v + n, sizeof v - (size_t)n, " (scale alpha/r %s)", c);
    report_fmt_num(a, sizeof a, d->lora_dropout);
    n += snprintf(v + n, sizeof v - (size_t)n, ", dropout %s, targets %s, base weights %s", a,
                  d->lora_targets[0] ? d->lora_targets : "the default (q_proj,v_proj or c_attn)",
                  d->lora_base_dtype[0] ? d->lora_base_dtype : "fp32");
    if (d->lora_from[0]) snprintf(v + n, sizeof v - (size_t)n, "; from the adapter %s", d->lora_from);
    row(h->b, "LoRA", v);
}

static void summary(html_ctx *h) {
    const ct_report_data *d = h->d;
    ct_strbuf *b = h->b;
    char v[256], a[64], c[64];
    ct_strbuf_printf(b, "<h2>Summary</h2>\n<table class=\"summary\">\n");
    snprintf(v, sizeof v, "%zu (steps %lld to %lld)", d->n_train, (long long)d->train[0].step,
             (long long)d->train[d->n_train - 1].step);
    row(b, "steps recorded", v);
    setup_rows(h);
    double tokens = NAN, wall = NAN;
    if (h->col[CT_REPORT_KEY_TOKENS_PER_S] && h->col[CT_REPORT_KEY_STEP_MS]) {
        tokens = 0;
        for (size_t i = 0; i < d->n_train; i++) {
            double t = h->col[CT_REPORT_KEY_TOKENS_PER_S][i] * h->col[CT_REPORT_KEY_STEP_MS][i] / 1e3;
            if (isfinite(t)) tokens += round(t);
        }
    }
    if (h->col[CT_REPORT_KEY_STEP_MS]) {
        wall = 0;
        for (size_t i = 0; i < d->n_train; i++)
            if (isfinite(h->col[CT_REPORT_KEY_STEP_MS][i])) wall += h->col[CT_REPORT_KEY_STEP_MS][i];
        wall /= 1e3;
    }
    fmt_count(a, sizeof a, tokens);
    row(b, "tokens trained", isfinite(tokens) ? a : "not recorded");
    double epoch = col_last(h, CT_REPORT_KEY_EPOCH, NULL);
    if (isfinite(epoch)) {
        snprintf(v, sizeof v, "%.2f", epoch);
        row(b, "epochs (passes over the training data)", v);
    }
    if (usable(h, CT_REPORT_KEY_COUNTED_TOKENS)) {
        double counted = 0;
        for (size_t i = 0; i < d->n_train; i++) {
            double x = h->col[CT_REPORT_KEY_COUNTED_TOKENS][i];
            if (isfinite(x)) counted += x;
        }
        fmt_count(a, sizeof a, counted);
        snprintf(v, sizeof v, "%s (the completion and assistant tokens the loss counted)", a);
        row(b, "targets in the loss", v);
    }
    fmt_duration(a, sizeof a, wall);
    row(b, "training time (sum of step times)", isfinite(wall) ? a : "not recorded");
    int64_t s_last = 0, s_best = 0;
    double last = col_last(h, CT_REPORT_KEY_LOSS, &s_last), best = NAN;
    for (size_t i = 0; h->col[CT_REPORT_KEY_LOSS] && i < d->n_train; i++) {
        double x = h->col[CT_REPORT_KEY_LOSS][i];
        if (isfinite(x) && !(x >= best)) {
            best = x;
            s_best = d->train[i].step;
        }
    }
    report_fmt_num(a, sizeof a, last);
    report_fmt_num(c, sizeof c, best);
    snprintf(v, sizeof v, "final %s (step %lld), best %s (step %lld)", a, (long long)s_last, c,
             (long long)s_best);
    row(b, "train loss", isfinite(last) ? v : "no finite value");
    if (d->n_val) {
        double vl = NAN, vb = NAN;
        int64_t sl = 0, sb = 0;
        for (size_t i = 0; i < d->n_val; i++) {
            double x = d->val[i].loss;
            if (!isfinite(x)) continue;
            vl = x;
            sl = d->val[i].step;
            if (!(x >= vb)) {
                vb = x;
                sb = d->val[i].step;
            }
        }
        report_fmt_num(a, sizeof a, vl);
        report_fmt_num(c, sizeof c, vb);
        snprintf(v, sizeof v, "final %s (step %lld), best %s (step %lld), %zu evaluations", a,
                 (long long)sl, c, (long long)sb, d->n_val);
        row(b, "validation loss", isfinite(vl) ? v : "no finite value");
    } else {
        row(b, "validation loss", "no evaluations in this run");
    }
    report_fmt_num(a, sizeof a, median(h, CT_REPORT_KEY_TOKENS_PER_S));
    row(b, "median tokens/s", usable(h, CT_REPORT_KEY_TOKENS_PER_S) ? a : "not recorded");
    report_fmt_num(a, sizeof a, median(h, CT_REPORT_KEY_STEP_MS));
    snprintf(v, sizeof v, "%s ms", a);
    row(b, "median step time", usable(h, CT_REPORT_KEY_STEP_MS) ? v : "not recorded");
    if (usable(h, CT_REPORT_KEY_MFU) || usable(h, CT_REPORT_KEY_MFU_THEORY)) {
        double m1 = median(h, CT_REPORT_KEY_MFU), m2 = median(h, CT_REPORT_KEY_MFU_THEORY);
        if (isfinite(m1)) snprintf(a, sizeof a, "%.1f%% of the measured GEMM peak", 100 * m1);
        else snprintf(a, sizeof a, "no measured peak");
        if (isfinite(m2)) snprintf(c, sizeof c, "%.1f%% of the theoretical peak", 100 * m2);
        else snprintf(c, sizeof c, "no theoretical peak");
        snprintf(v, sizeof v, "%s; %s", a, c);
        row(b, "median MFU", v);
    } else {
        row(b, "median MFU", "not recorded (this run's metrics have no mfu)");
    }
    if (usable(h, CT_REPORT_KEY_GFLOPS)) {
        report_fmt_num(a, sizeof a, median(h, CT_REPORT_KEY_GFLOPS));
        snprintf(v, sizeof v, "%s GFLOP/s", a);
        row(b, "median achieved", v);
    }
    ct_report_key pk = usable(h, CT_REPORT_KEY_RSS_PEAK_BYTES) ? CT_REPORT_KEY_RSS_PEAK_BYTES
                                                               : CT_REPORT_KEY_RSS_BYTES;
    double peak = col_max(h, pk, NULL), lim = col_last(h, CT_REPORT_KEY_MEM_LIMIT_BYTES, NULL);
    if (isfinite(peak)) {
        fmt_bytes(a, sizeof a, peak);
        fmt_bytes(c, sizeof c, lim);
        if (isfinite(lim) && lim > 0)
            snprintf(v, sizeof v, "%s of the %s limit (%.0f%%)", a, c, 100 * peak / lim);
        else
            snprintf(v, sizeof v, "%s (no limit recorded)", a);
        row(b, "peak RSS", v);
    } else {
        row(b, "peak RSS", "not recorded");
    }
    if (usable(h, CT_REPORT_KEY_MEM_BYTES)) {
        fmt_bytes(a, sizeof a, col_max(h, CT_REPORT_KEY_MEM_BYTES, NULL));
        row(b, "peak tracked allocations (mem_bytes)", a);
    }
    if (usable(h, CT_REPORT_KEY_MAJOR_FAULTS)) {
        double f = 0;
        for (size_t i = 0; i < d->n_train; i++)
            if (isfinite(h->col[CT_REPORT_KEY_MAJOR_FAULTS][i])) f += h->col[CT_REPORT_KEY_MAJOR_FAULTS][i];
        snprintf(v, sizeof v, "%.0f", f);
        row(b, "major page faults", v);
    }
    size_t skipped = 0, crit = 0;
    for (size_t i = 0; h->col[CT_REPORT_KEY_SKIPPED] && i < d->n_train; i++)
        skipped += h->col[CT_REPORT_KEY_SKIPPED][i] > 0;
    for (size_t i = 0; i < d->n_alerts; i++) crit += !strcmp(d->alerts[i].level, "critical");
    snprintf(v, sizeof v, "%zu", skipped);
    row(b, "skipped steps", h->col[CT_REPORT_KEY_SKIPPED] ? v : "not recorded");
    snprintf(v, sizeof v, "%zu", d->n_rollbacks);
    row(b, "rollbacks", v);
    if (d->n_resumes) { /* where the run was interrupted and went on */
        size_t len = (size_t)snprintf(v, sizeof v, "%zu, after step", d->n_resumes);
        for (size_t i = 0; i < d->n_resumes && len + 24 < sizeof v; i++)
            len += (size_t)snprintf(v + len, sizeof v - len, "%s %lld", i ? "," : "",
                                    (long long)d->resumes[i].step);
        row(b, "resumes", v);
    }
    if (d->has_remote) { /* data read over the network */
        double r[8];
        for (int i = 0; i < 8; i++) r[i] = d->remote[i] + d->remote_last[i];
        snprintf(v, sizeof v, "%.1f MB in %.0f blocks over %.0f requests (%.0f retried, %.0f "
                 "failed, %.0f blocks failed their hash); %.0f blocks from the disk cache; "
                 "%.1f s waiting on the network",
                 r[CT_REPORT_REMOTE_BYTES] / 1e6, r[CT_REPORT_REMOTE_BLOCKS],
                 r[CT_REPORT_REMOTE_REQUESTS], r[CT_REPORT_REMOTE_RETRIES],
                 r[CT_REPORT_REMOTE_FAILURES], r[CT_REPORT_REMOTE_BAD_BLOCKS],
                 r[CT_REPORT_REMOTE_DISK_HITS], r[CT_REPORT_REMOTE_WAIT_MS] / 1e3);
        row(b, "remote data", v);
    }
    snprintf(v, sizeof v, "%zu (%zu critical)", d->n_alerts, crit);
    row(b, "alerts", v);
    if (d->n_replaced) {
        snprintf(v, sizeof v, "%lld lines were written again for the same step (a resume or a "
                 "rollback); the last one of each step is shown", (long long)d->n_replaced);
        row(b, "repeated steps", v);
    }
    if (d->torn_line) {
        snprintf(v, sizeof v, "line %lld could not be read (a crash mid-write) and was skipped",
                 (long long)d->torn_line);
        row(b, "last line", v);
    }
    ct_strbuf_append(b, "</table>\n", 9);
}

/* ------------------------------------------------------------------- plots */

static void note(ct_strbuf *b, const char *text) {
    ct_strbuf_append(b, "<p class=\"note\">", 16);
    esc(b, text);
    ct_strbuf_append(b, "</p>\n", 5);
}

static void fig_title(ct_strbuf *b, const char *t) {
    ct_strbuf_append(b, "<h3>", 4);
    esc(b, t);
    ct_strbuf_append(b, "</h3>\n", 6);
}

void report_html_note(ct_strbuf *b, const char *text) { note(b, text); }
void report_html_title(ct_strbuf *b, const char *title) { fig_title(b, title); }
void report_html_row(ct_strbuf *b, const char *key, const char *val) { row(b, key, val); }

/* The markers of alerts whose kind is one of kinds (NULL: any other kind),
 * and the rollbacks when with_rb. Copies into out (room for h->n_mk). */
static size_t pick_markers(const html_ctx *h, const char *const *kinds, bool with_rb,
                           report_marker *out, report_legend_extra *ex, int *nex) {
    /* gpu_util alerts go on the GPU section's utilisation plot when there is one */
    static const char *const known[] = {"memory", "throughput", "loss", "data_wait", NULL};
    static const char *const known_gpu[] = {"memory", "throughput", "loss", "data_wait",
                                            "gpu_util", NULL};
    size_t n = 0;
    bool warn = false, cr = false;
    for (size_t i = 0; i < h->n_alert_mk; i++) {
        const char *k = h->d->alerts[i].kind;
        bool hit = false;
        const char *const *other = h->d->n_gpu ? known_gpu : known;
        for (const char *const *p = kinds ? kinds : other; *p; p++) hit |= !strcmp(*p, k);
        if (kinds ? !hit : hit) continue;
        out[n++] = h->mk[i];
        if (!strcmp(h->d->alerts[i].level, "critical")) cr = true;
        else warn = true;
    }
    *nex = 0;
    if (warn) ex[(*nex)++] = (report_legend_extra){"warning", C_WARN, false};
    if (cr) ex[(*nex)++] = (report_legend_extra){"critical", C_RED, false};
    if (with_rb && h->n_rb_mk > h->n_alert_mk) {
        for (size_t i = h->n_alert_mk; i < h->n_rb_mk; i++) out[n++] = h->mk[i];
        ex[(*nex)++] = (report_legend_extra){"rollback", C_PURPLE, true};
    }
    if (with_rb && h->n_mk > h->n_rb_mk) {
        for (size_t i = h->n_rb_mk; i < h->n_mk; i++) out[n++] = h->mk[i];
        ex[(*nex)++] = (report_legend_extra){"resumed", C_BROWN, true};
    }
    return n;
}

/* One line plot of the given keys; the note names the missing keys. */
static void line_plot(html_ctx *h, const char *title, const char *ylabel, const ct_report_key *keys,
                      const char *const *labels, const char *const *colors, const report_style *styles,
                      int nk, double scale, bool from_zero, const char *const *alert_kinds,
                      bool with_other_alerts, bool with_rb) {
    fig_title(h->b, title);
    report_series s[8];
    int ns = 0;
    char missing[256] = "";
    for (int i = 0; i < nk && i < 8; i++) {
        if (!usable(h, keys[i])) {
            size_t l = strlen(missing);
            snprintf(missing + l, sizeof missing - l, "%s%s", l ? ", " : "", ct_report_key_name(keys[i]));
            continue;
        }
        s[ns++] = (report_series){.label = labels[i], .color = colors[i], .x = h->x,
                                  .y = h->col[keys[i]], .n = h->d->n_train, .scale = scale,
                                  .style = styles ? styles[i] : REPORT_STYLE_LINE};
    }
    char msg[400];
    if (!ns) {
        snprintf(msg, sizeof msg, "Not plotted: this run's metrics have no values for %s "
                 "(an older run, or not measured on this machine).", missing);
        note(h->b, msg);
        return;
    }
    report_marker *mk = malloc((h->n_mk ? h->n_mk : 1) * sizeof *mk);
    report_legend_extra ex[4];
    int nex = 0;
    size_t nm = 0;
    if (!mk) {
        h->b->oom = true;
        return;
    }
    if (alert_kinds) nm = pick_markers(h, alert_kinds, with_rb, mk, ex, &nex);
    if (with_other_alerts) {
        report_legend_extra ex2[4];
        int nex2 = 0;
        size_t k = pick_markers(h, NULL, false, mk + nm, ex2, &nex2);
        nm += k;
        for (int i = 0; i < nex2; i++) {
            bool dup = false;
            for (int j = 0; j < nex; j++) dup |= !strcmp(ex[j].label, ex2[i].label);
            if (!dup && nex < 4) ex[nex++] = ex2[i];
        }
    }
    report_plot p = {.ylabel = ylabel, .y_from_zero = from_zero, .s = s, .ns = ns, .m = mk,
                     .nm = nm, .extra = ex, .nextra = nex, .max_points = h->maxp};
    report_svg_lines(h->b, &p);
    free(mk);
    if (missing[0]) {
        snprintf(msg, sizeof msg, "Not in this run's metrics: %s.", missing);
        note(h->b, msg);
    }
}

static void step_split_plot(html_ctx *h) {
    static const ct_report_key k5[] = {CT_REPORT_KEY_T_DATA_MS, CT_REPORT_KEY_T_FWD_MS,
                                       CT_REPORT_KEY_T_BWD_MS, CT_REPORT_KEY_T_OPT_MS,
                                       CT_REPORT_KEY_T_COMM_MS};
    static const char *const l5[] = {"data", "forward", "backward", "optimizer", "comm"};
    static const char *const c5[] = {C_GREY, C_BLUE, C_ORANGE, C_GREEN, C_PURPLE};
    fig_title(h->b, "Step time split");
    const char *labels[5], *colors[5];
    const double *ys[5];
    int nl = 0;
    double *rest = NULL;
    for (int i = 0; i < 5; i++)
        if (usable(h, k5[i])) {
            labels[nl] = l5[i];
            colors[nl] = c5[i];
            ys[nl++] = h->col[k5[i]];
        }
    if (!nl && usable(h, CT_REPORT_KEY_STEP_MS) && usable(h, CT_REPORT_KEY_DATA_WAIT_MS)) {
        /* older runs: data wait against the rest of the step */
        rest = malloc(h->d->n_train * sizeof *rest);
        if (!rest) {
            h->b->oom = true;
            return;
        }
        for (size_t i = 0; i < h->d->n_train; i++)
            rest[i] = fmax(0.0, h->col[CT_REPORT_KEY_STEP_MS][i] -
                                    h->col[CT_REPORT_KEY_DATA_WAIT_MS][i]);
        labels[0] = "data wait";
        colors[0] = C_GREY;
        ys[0] = h->col[CT_REPORT_KEY_DATA_WAIT_MS];
        labels[1] = "rest of the step";
        colors[1] = C_BLUE;
        ys[1] = rest;
        nl = 2;
    }
    if (!nl) {
        note(h->b, "Not plotted: this run's metrics have no step-time split (t_data_ms, t_fwd_ms, "
                   "t_bwd_ms, t_opt_ms, t_comm_ms) and no step_ms with data_wait_ms.");
        return;
    }
    report_marker *mk = malloc((h->n_mk ? h->n_mk : 1) * sizeof *mk);
    if (!mk) {
        free(rest);
        h->b->oom = true;
        return;
    }
    report_legend_extra ex[4];
    int nex = 0;
    static const char *const kinds[] = {"data_wait", NULL};
    size_t nm = pick_markers(h, kinds, false, mk, ex, &nex);
    report_stack p = {.ylabel = "time per step (ms)", .labels = labels, .colors = colors, .y = ys,
                      .nl = nl, .x = h->x, .n = h->d->n_train, .m = mk, .nm = nm, .extra = ex,
                      .nextra = nex, .max_points = h->maxp / 2};
    report_svg_stack(h->b, &p);
    if (rest)
        note(h->b, "This run's metrics have no split by phase (t_fwd_ms, t_bwd_ms, ...): shown "
                   "is the data wait against the rest of the step.");
    free(mk);
    free(rest);
}

static void plots(html_ctx *h) {
    ct_strbuf *b = h->b;
    const ct_report_data *d = h->d;
    ct_strbuf_printf(b, "<h2>Plots</h2>\n");
    if (d->n_train > h->maxp)
        ct_strbuf_printf(b, "<p class=\"sub\">%zu steps, drawn as at most %zu points per "
                             "series (the smallest and largest value of each stretch of steps, "
                             "so spikes stay visible).</p>\n", d->n_train, h->maxp);
    /* loss: train line plus validation points */
    fig_title(b, "Loss");
    report_series s[2];
    int ns = 0;
    double *vx = NULL, *vy = NULL;
    if (usable(h, CT_REPORT_KEY_LOSS))
        s[ns++] = (report_series){.label = "train", .color = C_BLUE, .x = h->x,
                                  .y = h->col[CT_REPORT_KEY_LOSS], .n = d->n_train};
    if (d->n_val) {
        vx = malloc(d->n_val * sizeof *vx);
        vy = malloc(d->n_val * sizeof *vy);
        if (!vx || !vy) {
            b->oom = true;
        } else {
            for (size_t i = 0; i < d->n_val; i++) {
                vx[i] = (double)d->val[i].step;
                vy[i] = d->val[i].loss;
            }
            s[ns++] = (report_series){.label = "validation", .color = C_ORANGE, .x = vx, .y = vy,
                                      .n = d->n_val, .style = REPORT_STYLE_DOTS};
        }
    }
    report_marker *mk = malloc((h->n_mk ? h->n_mk : 1) * sizeof *mk);
    if (!ns || !mk) {
        note(b, "Not plotted: no finite loss in this run's metrics.");
    } else {
        report_legend_extra ex[4], ex2[4];
        int nex = 0, nex2 = 0;
        static const char *const kinds[] = {"loss", NULL};
        size_t nm = pick_markers(h, kinds, true, mk, ex, &nex);
        nm += pick_markers(h, NULL, false, mk + nm, ex2, &nex2);
        for (int i = 0; i < nex2; i++) {
            bool dup = false;
            for (int j = 0; j < nex; j++) dup |= !strcmp(ex[j].label, ex2[i].label);
            if (!dup && nex < 4) ex[nex++] = ex2[i];
        }
        report_plot p = {.ylabel = "loss", .s = s, .ns = ns, .m = mk, .nm = nm, .extra = ex,
                         .nextra = nex, .max_points = h->maxp};
        report_svg_lines(b, &p);
    }
    free(mk);
    free(vx);
    free(vy);

    static const ct_report_key klr[] = {CT_REPORT_KEY_LR};
    static const char *const llr[] = {"learning rate"}, *const clr[] = {C_GREEN};
    line_plot(h, "Learning rate", "lr", klr, llr, clr, NULL, 1, 1, false, NULL, false, false);

    static const ct_report_key kgn[] = {CT_REPORT_KEY_GRAD_NORM};
    static const char *const lgn[] = {"grad norm (before clipping)"}, *const cgn[] = {C_BROWN};
    static const char *const none[] = {NULL};
    line_plot(h, "Gradient norm", "global grad norm", kgn, lgn, cgn, NULL, 1, 1, false, none,
              false, true);

    static const ct_report_key ktp[] = {CT_REPORT_KEY_TOKENS_PER_S};
    static const char *const ltp[] = {"tokens/s"}, *const ctp[] = {C_BLUE};
    static const char *const thr[] = {"throughput", NULL};
    line_plot(h, "Throughput", "tokens/s", ktp, ltp, ctp, NULL, 1, 1, true, thr, false, false);

    static const ct_report_key kmfu[] = {CT_REPORT_KEY_MFU, CT_REPORT_KEY_MFU_THEORY};
    static const char *const lmfu[] = {"MFU (measured GEMM peak)", "MFU (theoretical peak)"};
    static const char *const cmfu[] = {C_RED, C_PURPLE};
    line_plot(h, "Model FLOPs utilisation", "MFU (%)", kmfu, lmfu, cmfu, NULL, 2, 100, true, thr,
              false, false);

    static const ct_report_key kmem[] = {CT_REPORT_KEY_RSS_BYTES,   CT_REPORT_KEY_RSS_PEAK_BYTES,
                                         CT_REPORT_KEY_ARENA_BYTES, CT_REPORT_KEY_PLAN_BYTES,
                                         CT_REPORT_KEY_MEM_BYTES,   CT_REPORT_KEY_MEM_LIMIT_BYTES};
    static const char *const lmem[] = {"RSS", "peak RSS", "arena", "plan", "tracked (mem_bytes)",
                                       "limit"};
    static const char *const cmem[] = {C_BLUE, C_ORANGE, C_GREEN, C_GREY, C_BROWN, C_RED};
    static const report_style smem[] = {REPORT_STYLE_LINE, REPORT_STYLE_LINE, REPORT_STYLE_LINE,
                                        REPORT_STYLE_DASHED, REPORT_STYLE_LINE, REPORT_STYLE_DASHED};
    double mx = 0;
    for (int i = 0; i < 5; i++) {
        double m = col_max(h, kmem[i], NULL);
        if (isfinite(m) && m > mx) mx = m;
    }
    /* a limit far above what the run used would flatten every other line:
     * then it is named in a note instead of drawn */
    double lim = col_max(h, CT_REPORT_KEY_MEM_LIMIT_BYTES, NULL);
    int nmem = 6;
    if (isfinite(lim) && mx > 0 && lim > 4 * mx) nmem = 5;
    else if (isfinite(lim) && lim > mx) mx = lim;
    double sc = 1.0 / (1024.0 * 1024 * 1024);
    const char *ul = "memory (GiB)";
    if (mx < 1024.0 * 1024 * 1024) {
        sc = 1.0 / (1024.0 * 1024);
        ul = "memory (MiB)";
    }
    if (mx < 1024.0 * 1024) {
        sc = 1.0 / 1024;
        ul = "memory (KiB)";
    }
    static const char *const memk[] = {"memory", NULL};
    line_plot(h, "Memory", ul, kmem, lmem, cmem, smem, nmem, sc, true, memk, false, false);
    if (nmem == 5) {
        char a[64], c[64];
        fmt_bytes(a, sizeof a, mx);
        fmt_bytes(c, sizeof c, lim);
        ct_strbuf_printf(h->b, "<p class=\"note\">run.memory_limit (%s) is off this plot's "
                             "scale: the highest line above reaches %s (%.1f%% of the limit).</p>\n",
                             c, a, 100.0 * mx / lim);
    }

    step_split_plot(h);
}

/* ------------------------------------------------------ alerts, rollbacks */

static void events(html_ctx *h) {
    const ct_report_data *d = h->d;
    ct_strbuf *b = h->b;
    char a[64], c[64];
    ct_strbuf_printf(b, "<h2>Alerts</h2>\n");
    if (!d->n_alerts) {
        ct_strbuf_printf(b, "<p>No alerts.</p>\n");
    } else {
        ct_strbuf_printf(b, "<table><tr><th>step</th><th>level</th><th>kind</th><th>value</th>"
                             "<th>threshold</th><th>message</th></tr>\n");
        for (size_t i = 0; i < d->n_alerts; i++) {
            const ct_report_alert *al = &d->alerts[i];
            if (!strcmp(al->kind, "memory")) { /* bytes */
                fmt_bytes(a, sizeof a, al->value);
                fmt_bytes(c, sizeof c, al->threshold);
            } else {
                report_fmt_num(a, sizeof a, al->value);
                report_fmt_num(c, sizeof c, al->threshold);
            }
            ct_strbuf_printf(b, "<tr><td class=\"n\">%lld</td><td class=\"%s\">",
                                 (long long)al->step, !strcmp(al->level, "critical") ? "crit" : "warn");
            esc(b, al->level);
            ct_strbuf_append(b, "</td><td>", 9);
            esc(b, al->kind);
            ct_strbuf_printf(b, "</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td>", a, c);
            esc(b, al->message);
            ct_strbuf_append(b, "</td></tr>\n", 11);
        }
        ct_strbuf_append(b, "</table>\n", 9);
    }
    ct_strbuf_printf(b, "<h2>Rollbacks</h2>\n");
    if (!d->n_rollbacks) {
        ct_strbuf_printf(b, "<p>No rollbacks.</p>\n");
        return;
    }
    ct_strbuf_printf(b, "<table><tr><th>at step</th><th>back to step</th><th>metrics line</th>"
                         "</tr>\n");
    for (size_t i = 0; i < d->n_rollbacks; i++) {
        const ct_report_rollback *r = &d->rollbacks[i];
        if (r->to >= 0) snprintf(a, sizeof a, "%lld", (long long)r->to);
        else snprintf(a, sizeof a, "not recorded");
        ct_strbuf_printf(b, "<tr><td class=\"n\">%lld</td><td class=\"n\">%s</td>"
                             "<td class=\"n\">%lld</td></tr>\n", (long long)r->step, a,
                             (long long)r->line);
    }
    ct_strbuf_append(b, "</table>\n", 9);
}

/* ------------------------------------------------------ config, hardware */

static void hw_rows(ct_strbuf *b, const cJSON *o, const char *prefix) {
    for (const cJSON *it = o ? o->child : NULL; it; it = it->next) {
        char key[256], v[256];
        snprintf(key, sizeof key, "%s%s%s", prefix, prefix[0] ? "." : "", it->string ? it->string : "?");
        if (cJSON_IsObject(it)) {
            hw_rows(b, it, key);
            continue;
        }
        if (cJSON_IsString(it)) {
            snprintf(v, sizeof v, "%s", it->valuestring[0] ? it->valuestring : "(empty)");
        } else if (cJSON_IsBool(it)) {
            snprintf(v, sizeof v, "%s", cJSON_IsTrue(it) ? "yes" : "no");
        } else if (cJSON_IsNumber(it)) {
            size_t kl = strlen(key);
            double x = it->valuedouble;
            if (x == floor(x) && fabs(x) < 1e15) snprintf(v, sizeof v, "%.0f", x);
            else report_fmt_num(v, sizeof v, x);
            if (kl > 6 && !strcmp(key + kl - 6, "_bytes") && it->valuedouble > 0) {
                char hb[64];
                fmt_bytes(hb, sizeof hb, it->valuedouble);
                size_t l = strlen(v);
                snprintf(v + l, sizeof v - l, " (%s)", hb);
            }
        } else if (cJSON_IsNull(it)) {
            snprintf(v, sizeof v, "unknown");
        } else {
            char *t = cJSON_PrintUnformatted(it);
            snprintf(v, sizeof v, "%s", t ? t : "?");
            free(t);
        }
        row(b, key, v);
    }
}

static void config_hw(html_ctx *h) {
    const ct_report_data *d = h->d;
    ct_strbuf *b = h->b;
    ct_strbuf_printf(b, "<h2>Configuration</h2>\n");
    if (d->config_text) {
        ct_strbuf_append(b, "<pre class=\"config\">", 20);
        ct_report_escape(b, d->config_text, d->config_len);
        ct_strbuf_append(b, "</pre>\n", 7);
    } else {
        note(b, "config.yaml: not recorded in this run directory.");
    }
    ct_strbuf_printf(b, "<h2>Hardware</h2>\n");
    if (!d->hw_text) {
        note(b, "hw.json: not recorded (runs before the hardware profile was saved with the run).");
        return;
    }
    const char *end = NULL;
    size_t len = strlen(d->hw_text);
    cJSON *o = cJSON_ParseWithLengthOpts(d->hw_text, len, &end, false);
    size_t at = o && end && end >= d->hw_text && end <= d->hw_text + len ? (size_t)(end - d->hw_text) : len;
    at += strspn(d->hw_text + at, " \t\r\n");
    if (!cJSON_IsObject(o) || at != len) {
        /* ct_report_load warned, naming the file, and emptied the text */
        note(b, "hw.json is damaged (not one JSON object); the hardware section is left out.");
    } else {
        ct_strbuf_append(b, "<table class=\"hw\">\n", 19);
        hw_rows(b, o, "");
        ct_strbuf_append(b, "</table>\n", 9);
    }
    cJSON_Delete(o);
}

/* ------------------------------------------------------------------ render */

static void markers_make(html_ctx *h) {
    const ct_report_data *d = h->d;
    for (size_t i = 0; i < d->n_alerts; i++) {
        const ct_report_alert *a = &d->alerts[i];
        report_marker *m = &h->mk[h->n_mk++];
        bool crit = !strcmp(a->level, "critical");
        *m = (report_marker){.x = (double)a->step, .color = crit ? C_RED : C_WARN};
        char v[64], t[64];
        report_fmt_num(v, sizeof v, a->value);
        report_fmt_num(t, sizeof t, a->threshold);
        snprintf(m->text, sizeof m->text, "step %lld: %s %s alert: %s (value %s, threshold %s)",
                 (long long)a->step, a->level, a->kind, a->message, v, t);
    }
    h->n_alert_mk = h->n_mk;
    for (size_t i = 0; i < d->n_rollbacks; i++) {
        const ct_report_rollback *r = &d->rollbacks[i];
        report_marker *m = &h->mk[h->n_mk++];
        *m = (report_marker){.x = (double)r->step, .color = C_PURPLE, .dashed = true};
        if (r->to >= 0)
            snprintf(m->text, sizeof m->text, "step %lld: rollback to step %lld", (long long)r->step,
                     (long long)r->to);
        else
            snprintf(m->text, sizeof m->text, "step %lld: rollback", (long long)r->step);
    }
    h->n_rb_mk = h->n_mk;
    for (size_t i = 0; i < d->n_resumes; i++) {
        const ct_report_resume *r = &d->resumes[i];
        report_marker *m = &h->mk[h->n_mk++];
        *m = (report_marker){.x = (double)r->step, .color = C_BROWN, .dashed = true};
        snprintf(m->text, sizeof m->text, "step %lld: the run stopped here and was resumed from "
                 "its checkpoint", (long long)r->step);
    }
}

ct_status ct_report_render(const ct_report_data *d, size_t max_points, char **html, size_t *len) {
    *html = NULL;
    *len = 0;
    CT_ASSERT(d && d->n_train > 0);
    ct_strbuf b = {0};
    html_ctx h = {.d = d, .b = &b, .maxp = max_points ? max_points : 1000};
    if (h.maxp < 8) h.maxp = 8;
    ct_status st = CT_OK;
    size_t nmk = d->n_alerts + d->n_rollbacks + d->n_resumes;
    h.x = malloc(d->n_train * sizeof *h.x);
    h.mk = malloc((nmk ? nmk : 1) * sizeof *h.mk);
    if (!h.x || !h.mk) goto oom;
    for (size_t i = 0; i < d->n_train; i++) h.x[i] = (double)d->train[i].step;
    for (int k = 0; k < CT_REPORT_KEY_COUNT; k++) {
        if (!d->has_key[k]) continue;
        if (!(h.col[k] = malloc(d->n_train * sizeof *h.col[k]))) goto oom;
        for (size_t i = 0; i < d->n_train; i++) h.col[k][i] = d->train[i].v[k];
    }
    markers_make(&h);
    ct_strbuf_printf(&b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n"
                         "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
                         "style-src 'unsafe-inline'\"/>\n<meta name=\"viewport\" "
                         "content=\"width=device-width, initial-scale=1\"/>\n<title>ctrain report: ");
    esc(&b, d->run_dir);
    ct_strbuf_printf(&b, "</title>\n<style>%s</style>\n</head>\n<body>\n<h1>Run report: ",
                         report_css);
    esc(&b, d->run_dir);
    ct_strbuf_printf(&b, "</h1>\n<p class=\"sub\">ctrain %s &#183; %lld lines of "
                         "metrics.jsonl &#183; %zu training steps, %zu evaluations, %zu alerts, "
                         "%zu rollbacks</p>\n", ct_version(), (long long)d->n_lines, d->n_train,
                         d->n_val, d->n_alerts, d->n_rollbacks);
    summary(&h);
    plots(&h);
    report_gpu_section(&b, d, h.mk, h.maxp);
    events(&h);
    config_hw(&h);
    ct_strbuf_printf(&b, "</body>\n</html>\n");
    if (b.oom) goto oom;
    *html = b.p;
    *len = b.len;
    b.p = NULL;
    goto done;
oom:
    st = CT_ERR(CT_ERR_OOM, "out of memory rendering the report of %s (%zu steps)", d->run_dir,
                d->n_train);
done:
    ct_strbuf_free(&b);
    free(h.x);
    free(h.mk);
    for (int k = 0; k < CT_REPORT_KEY_COUNT; k++) free(h.col[k]);
    return st;
}
