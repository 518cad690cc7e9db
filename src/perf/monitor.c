/*
 * The training monitor: derived figures, alert levels and their
 * de-duplicated reports, and the process's memory counters. See monitor.h.
 */
#include "perf/monitor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "io/fileio.h"
#include "perf/bench.h"

static const char *const kind_names[CT_ALERT_KIND_COUNT] = {"memory", "throughput", "loss",
                                                             "data_wait"};
static const char *const level_names[CT_ALERT_LEVEL_COUNT] = {"ok", "warning", "critical"};

const char *ct_alert_kind_str(ct_alert_kind k) {
    return (unsigned)k < CT_ALERT_KIND_COUNT ? kind_names[k] : "?";
}

const char *ct_alert_level_str(ct_alert_level l) {
    return (unsigned)l < CT_ALERT_LEVEL_COUNT ? level_names[l] : "?";
}

void ct_monitor_params_for_run(ct_monitor_params *out, const ct_config *cfg,
                               const ct_model_config *mc, int B, int T, int64_t accum,
                               size_t lora_numel, double gemm_peak_gflops, double theory_gflops,
                               size_t mem_limit, size_t plan_bytes) {
    memset(out, 0, sizeof *out);
    out->step_flops = ct_bench_step_flops_lora(mc, B, T, lora_numel) * (double)accum;
    out->step_tokens = (double)B * T * (double)accum;
    out->gemm_peak_gflops = gemm_peak_gflops;
    out->theory_gflops = theory_gflops;
    out->mem_limit_bytes = (double)mem_limit;
    out->plan_bytes = (double)plan_bytes;
    const double flops_per_token = out->step_flops / out->step_tokens;
    bool measured = !(cfg->alerts.gemm_peak_gflops > 0);
    if (measured && gemm_peak_gflops > 0 && theory_gflops > 0 &&
        gemm_peak_gflops < CT_MONITOR_PEAK_MIN_SHARE * theory_gflops) {
        out->peak_set_aside = gemm_peak_gflops;
        out->gemm_peak_gflops = theory_gflops;
    }
    if (cfg->alerts.expected_tokens_per_s > 0)
        out->expected_tokens_per_s = cfg->alerts.expected_tokens_per_s;
    else if (gemm_peak_gflops > 0 && flops_per_token > 0 && out->peak_set_aside <= 0)
        out->expected_tokens_per_s = cfg->alerts.expected_mfu * gemm_peak_gflops * 1e9 /
                                     flops_per_token;
    out->warning[CT_ALERT_MEMORY] = cfg->alerts.memory_warning;
    out->critical[CT_ALERT_MEMORY] = cfg->alerts.memory_critical;
    out->warning[CT_ALERT_THROUGHPUT] = cfg->alerts.throughput_warning;
    out->critical[CT_ALERT_THROUGHPUT] = cfg->alerts.throughput_critical;
    out->warning[CT_ALERT_LOSS] = cfg->alerts.loss_warning;
    out->critical[CT_ALERT_LOSS] = cfg->alerts.loss_critical;
    if (cfg->alerts.loss_warning <= 0 && cfg->alerts.loss_critical <= 0 && mc->vocab_size > 1) {
        /* a fresh model starts near ln(V) (uniform guessing); well above it
         * the run is diverging */
        double uniform = log((double)mc->vocab_size);
        out->warning[CT_ALERT_LOSS] = 1.25 * uniform;
        out->critical[CT_ALERT_LOSS] = 2.0 * uniform;
    }
    out->warning[CT_ALERT_DATA_WAIT] = cfg->alerts.data_wait_warning;
    out->critical[CT_ALERT_DATA_WAIT] = cfg->alerts.data_wait_critical;
    out->data_wait_min_s = cfg->alerts.data_wait_min_ms * 1e-3;
    out->warmup_steps = cfg->alerts.warmup_steps;
    out->repeat_every = cfg->alerts.repeat_every;
}

void ct_monitor_init(ct_monitor *m, const ct_monitor_params *p) {
    memset(m, 0, sizeof *m);
    m->p = *p;
    m->peak_measured = p->peak_set_aside > 0 ? p->peak_set_aside : p->gemm_peak_gflops;
    if (p->peak_set_aside > 0)
        ct_log(CT_LOG_WARN, "the GEMM peak measured at start-up, %.1f GFLOP/s, is %.1f%% of "
               "the theoretical %.1f GFLOP/s of these cores: the machine was busy, so MFU "
               "counts against the theoretical peak and no throughput is expected from it (set "
               "alerts.gemm_peak_gflops to `ctrain bench peak` on a quiet machine, or "
               "alerts.expected_tokens_per_s)", p->peak_set_aside,
               100.0 * p->peak_set_aside / p->theory_gflops, p->theory_gflops);
}

static double ratio(double num, double den) { return den > 0 ? num / den : NAN; }

void ct_monitor_figures_of(const ct_monitor_params *p, const ct_monitor_sample *s,
                           ct_monitor_figures *out) {
    out->tokens_per_s = ratio(p->step_tokens, s->step_s);
    out->gflops = ratio(p->step_flops / 1e9, s->step_s);
    out->mfu = ratio(out->gflops, p->gemm_peak_gflops);
    out->mfu_theory = ratio(out->gflops, p->theory_gflops);
    out->value[CT_ALERT_MEMORY] =
        ratio((double)(p->device_memory ? s->device_bytes : s->rss_bytes), p->mem_limit_bytes);
    out->value[CT_ALERT_THROUGHPUT] = ratio(out->tokens_per_s, p->expected_tokens_per_s);
    out->value[CT_ALERT_LOSS] = s->loss;
    out->value[CT_ALERT_DATA_WAIT] = ratio(s->data_s, s->step_s);
}

/* The level value v reaches under the thresholds of kind k (below: lower is
 * worse). A non-finite loss is critical whatever the thresholds say, as long
 * as the kind has any level on. */
static ct_alert_level judge(const ct_monitor_params *p, ct_alert_kind k, double v,
                            double *threshold) {
    double w = p->warning[k], c = p->critical[k];
    bool below = k == CT_ALERT_THROUGHPUT;
    *threshold = NAN;
    if (k == CT_ALERT_LOSS && !isfinite(v) && (w > 0 || c > 0)) {
        *threshold = c > 0 ? c : w;
        return c > 0 ? CT_ALERT_CRITICAL : CT_ALERT_WARNING;
    }
    if (!isfinite(v)) return CT_ALERT_OK;
    if (c > 0 && (below ? v < c : v > c)) {
        *threshold = c;
        return CT_ALERT_CRITICAL;
    }
    if (w > 0 && (below ? v < w : v > w)) {
        *threshold = w;
        return CT_ALERT_WARNING;
    }
    return CT_ALERT_OK;
}

/* "1.5 GiB", "950 MiB", "12 KiB" */
static void fmt_bytes(char *buf, size_t cap, double b) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024.0 && u < 4) {
        b /= 1024.0;
        u++;
    }
    snprintf(buf, cap, b < 10 && u ? "%.1f %s" : "%.0f %s", b, units[u]);
}

/* The report's message, and its value and threshold in absolute units
 * (bytes, tokens/s, loss, milliseconds) from the fractions v and thr that
 * the levels were judged on. */
static void describe(const ct_monitor *m, const ct_monitor_sample *s, double tps, double v,
                     double thr, ct_alert *a) {
    const ct_monitor_params *p = &m->p;
    const char *lv = a->level == CT_ALERT_CRITICAL ? "critical" : "warning";
    char x[32], y[32];
    switch (a->kind) {
    case CT_ALERT_MEMORY:
        a->value = (double)(p->device_memory ? s->device_bytes : s->rss_bytes);
        a->threshold = thr * p->mem_limit_bytes;
        fmt_bytes(x, sizeof x, a->value);
        fmt_bytes(y, sizeof y, p->mem_limit_bytes);
        snprintf(a->message, sizeof a->message, "%s %s is %.3g%% of run.memory_limit %s "
                 "(%s above %.3g%%)", p->device_memory ? "device memory" : "RSS", x, 100 * v, y,
                 lv, 100 * thr);
        break;
    case CT_ALERT_THROUGHPUT:
        a->value = tps;
        a->threshold = thr * p->expected_tokens_per_s;
        snprintf(a->message, sizeof a->message, "%.0f tokens/s (median of the last %d steps) is "
                 "%.3g%% of the expected %.0f (%s below %.3g%%)", tps, m->n_tps, 100 * v,
                 p->expected_tokens_per_s, lv, 100 * thr);
        break;
    case CT_ALERT_LOSS:
        a->value = v;
        a->threshold = thr;
        snprintf(a->message, sizeof a->message, "loss %.4g %s the ceiling %.4g (%s)", v,
                 isfinite(v) ? "is above" : "is not finite, against", thr, lv);
        break;
    case CT_ALERT_DATA_WAIT:
        a->value = s->data_s * 1e3;
        a->threshold = thr * s->step_s * 1e3;
        snprintf(a->message, sizeof a->message, "waited %.3g ms for data, %.3g%% of the "
                 "%.3g ms step (%s above %.3g%%)", a->value, 100 * v, s->step_s * 1e3, lv,
                 100 * thr);
        break;
    default: snprintf(a->message, sizeof a->message, "?"); break;
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Adds this step's tokens/s to the window; returns the window's median. */
static double tps_median(ct_monitor *m, double tps) {
    m->tps[(m->samples - m->p.warmup_steps - 1) % CT_MONITOR_WINDOW] = tps;
    if (m->n_tps < CT_MONITOR_WINDOW) m->n_tps++;
    double v[CT_MONITOR_WINDOW];
    memcpy(v, m->tps, (size_t)m->n_tps * sizeof *v);
    qsort(v, (size_t)m->n_tps, sizeof *v, cmp_double);
    int n = m->n_tps;
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int ct_monitor_update(ct_monitor *m, const ct_monitor_sample *s, ct_monitor_figures *fig,
                      ct_alert *events) {
    ct_monitor_figures_of(&m->p, s, fig);
    if (m->p.gemm_peak_gflops > 0 && fig->gflops > m->p.gemm_peak_gflops) {
        /* a step cannot beat GEMMs alone: the peak in use is wrong (measured
         * in a busy moment, or set too low). Its own GFLOP/s would read 100%;
         * the theoretical peak is a real bound, else MFU is unknown */
        double was = m->p.gemm_peak_gflops, theory = m->p.theory_gflops;
        bool first = !m->peak_raised_at;
        m->p.gemm_peak_gflops = theory > fig->gflops ? theory : 0;
        if (m->p.gemm_peak_gflops > 0)
            ct_log(CT_LOG_WARN, "step %lld reached %.1f GFLOP/s, above the GEMM peak of %.1f "
                   "GFLOP/s %s (the machine was busy when it was measured): MFU now counts "
                   "against the theoretical peak of %.1f GFLOP/s (set alerts.gemm_peak_gflops "
                   "to `ctrain bench peak` on a quiet machine)", (long long)s->step,
                   fig->gflops, was, first ? "measured at the start" : "in use", theory);
        else
            ct_log(CT_LOG_WARN, "step %lld reached %.1f GFLOP/s, above the GEMM peak of %.1f "
                   "GFLOP/s %s%s: MFU is n/a from now on (set alerts.gemm_peak_gflops to "
                   "`ctrain bench peak` on a quiet machine)", (long long)s->step, fig->gflops,
                   was, first ? "measured at the start" : "in use",
                   theory > 0 ? " and the theoretical peak" : " and no theoretical peak is known");
        m->peak_raised_at = s->step;
        ct_monitor_figures_of(&m->p, s, fig);
    }
    m->samples++;
    double tps_judged = fig->tokens_per_s;
    if (m->samples > m->p.warmup_steps && isfinite(fig->tokens_per_s)) {
        tps_judged = tps_median(m, fig->tokens_per_s);
        fig->value[CT_ALERT_THROUGHPUT] = ratio(tps_judged, m->p.expected_tokens_per_s);
    }
    int n = 0;
    for (int k = 0; k < CT_ALERT_KIND_COUNT; k++) {
        double v = fig->value[k], thr = NAN;
        bool timed = k == CT_ALERT_THROUGHPUT || k == CT_ALERT_DATA_WAIT;
        ct_alert_level lv = CT_ALERT_OK;
        bool short_wait = k == CT_ALERT_DATA_WAIT && s->data_s < m->p.data_wait_min_s;
        if ((!timed || m->samples > m->p.warmup_steps) && !short_wait)
            lv = judge(&m->p, (ct_alert_kind)k, v, &thr);
        ct_alert_level was = m->level[k];
        bool due = lv != was || (lv != CT_ALERT_OK && m->p.repeat_every > 0 &&
                                 s->step - m->reported_at[k] >= m->p.repeat_every);
        if (!due) continue;
        ct_alert *a = &events[n++];
        memset(a, 0, sizeof *a);
        a->step = s->step;
        a->kind = (ct_alert_kind)k;
        a->level = lv;
        if (lv == CT_ALERT_OK) {
            a->cleared = true;
            a->value = v;
            a->threshold = m->last[k].threshold;
            snprintf(a->message, sizeof a->message, "%s back to normal (%s since step %lld)",
                     kind_names[k], level_names[was], (long long)m->entered_at[k]);
        } else {
            a->repeat = lv == was;
            describe(m, s, tps_judged, v, thr, a);
            if (lv != was) m->entered_at[k] = s->step;
            m->last[k] = *a;
        }
        m->level[k] = lv;
        m->reported_at[k] = s->step;
    }
    return n;
}

const ct_alert *ct_monitor_active(const ct_monitor *m) {
    const ct_alert *best = NULL;
    int64_t best_at = -1;
    ct_alert_level best_lv = CT_ALERT_OK;
    for (int k = 0; k < CT_ALERT_KIND_COUNT; k++) {
        ct_alert_level lv = m->level[k];
        if (lv == CT_ALERT_OK) continue;
        if (lv > best_lv || (lv == best_lv && m->entered_at[k] >= best_at)) {
            best = &m->last[k];
            best_lv = lv;
            best_at = m->entered_at[k];
        }
    }
    return best;
}

/* "Key:   1234 kB" in text: the number in bytes; false when absent. */
static bool status_kb(const char *text, const char *key, size_t *out) {
    size_t klen = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, key, klen) != 0 || p[klen] != ':') continue;
        char *end;
        unsigned long long v = strtoull(p + klen + 1, &end, 10);
        if (end == p + klen + 1) return false;
        while (*end == ' ' || *end == '\t') end++;
        if (strncmp(end, "kB", 2) != 0) return false;
        *out = (size_t)v * 1024;
        return true;
    }
    return false;
}

ct_status ct_monitor_parse_status(const char *text, size_t *rss, size_t *peak) {
    if (!status_kb(text, "VmRSS", rss) || !status_kb(text, "VmHWM", peak))
        return CT_ERR(CT_ERR_FORMAT, "/proc/self/status: expected 'VmRSS: N kB' and "
                      "'VmHWM: N kB' lines");
    return CT_OK;
}

ct_status ct_monitor_read_process(size_t *rss, size_t *peak, int64_t *major_faults) {
    struct rusage ru;
    bool have_ru = getrusage(RUSAGE_SELF, &ru) == 0;
    *major_faults = have_ru ? (int64_t)ru.ru_majflt : 0;
    char *text = NULL;
    size_t len = 0;
    ct_status st = ct_file_read_all("/proc/self/status", &text, &len);
    if (!st) st = ct_monitor_parse_status(text, rss, peak);
    free(text);
    if (!st) return CT_OK;
    if (!have_ru) return st;
    ct_error_clear();
    *rss = *peak = (size_t)ru.ru_maxrss * 1024; /* no current figure: the peak stands in */
    return CT_OK;
}
