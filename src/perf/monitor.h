/*
 * The training monitor: per optimizer step, a sample of raw measurements
 * (the time split into data wait, forward, backward, optimizer and
 * communication; RSS, peak RSS, ctrain's tracked memory, major page faults;
 * the loss) becomes derived figures (tokens/s, achieved model GFLOP/s, MFU
 * against the measured GEMM peak and against the theoretical peak) and is
 * judged against warning and critical thresholds (alerts.* keys) for four
 * kinds of alert: memory, throughput, loss and data wait.
 *
 * Throughput is judged on the median tokens/s of the last
 * CT_MONITOR_WINDOW steps after the warm-up (one slow step, e.g. a busy
 * neighbour, does not raise it; a lasting slowdown does within a few steps);
 * the other kinds on each step's own figure.
 *
 * MFU's denominator is the GEMM peak measured at start-up (or set in
 * alerts.gemm_peak_gflops). A peak measured while the machine was busy reads
 * low, and MFU against it reads high, up to ~100%: so a measured peak below
 * CT_MONITOR_PEAK_MIN_SHARE of the theoretical FMA peak is set aside at init
 * (MFU counts against the theoretical peak, with a warning), and when a step
 * beats the peak in use (a whole step cannot run faster than GEMMs alone) the
 * theoretical peak takes over, or MFU becomes n/a when the step beats that
 * too; each change is logged as a warning. MFU never reads 100% because the
 * peak was measured in a busy moment.
 *
 * Reporting is without hysteresis but de-duplicated: an alert is reported
 * when its kind enters a level (ok -> warning, warning -> critical, critical
 * -> warning), again every repeat_every steps while it stays at that level
 * (0: never again), and once as "cleared" when it falls back to ok. Steps
 * that stay at a level in between report nothing.
 *
 * Everything but ct_monitor_read_process is a pure function of its inputs,
 * so tests feed samples. Leaves out: writing the sinks (the trainer writes
 * metrics.jsonl, TensorBoard and the log from what ct_monitor_update
 * returns) and communication time, which stays 0 until data parallel runs
 * exist.
 */
#ifndef CT_PERF_MONITOR_H
#define CT_PERF_MONITOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctrain/config.h"
#include "ctrain/core.h"
#include "ctrain/model.h"

typedef enum ct_alert_kind {
    CT_ALERT_MEMORY = 0,     /* RSS / run.memory_limit above the threshold */
    CT_ALERT_THROUGHPUT = 1, /* tokens/s / expected tokens/s below the threshold */
    CT_ALERT_LOSS = 2,       /* the step's loss above the threshold (non-finite: critical) */
    CT_ALERT_DATA_WAIT = 3,  /* data wait / step time above the threshold */
    CT_ALERT_KIND_COUNT
} ct_alert_kind;

typedef enum ct_alert_level {
    CT_ALERT_OK = 0,
    CT_ALERT_WARNING = 1,
    CT_ALERT_CRITICAL = 2,
    CT_ALERT_LEVEL_COUNT
} ct_alert_level;

/* "memory" | "throughput" | "loss" | "data_wait"; "ok" | "warning" |
 * "critical" (the metrics.jsonl words). Static strings; "?" outside the enums. */
const char *ct_alert_kind_str(ct_alert_kind k);
const char *ct_alert_level_str(ct_alert_level l);

/* What the monitor judges against; plain data. A threshold of 0 turns that
 * level of that kind off. Thresholds are in the unit of the alerts.* keys:
 * memory as a fraction of the limit, throughput as a fraction of the expected
 * rate, loss as a loss, data wait as a share of the step. */
typedef struct ct_monitor_params {
    double step_flops;            /* model FLOPs of one optimizer step (all micro-batches) */
    double step_tokens;           /* tokens of one optimizer step */
    double gemm_peak_gflops;      /* MFU's denominator; <= 0: unknown (mfu is NaN) */
    double peak_set_aside;        /* > 0: the measured peak, implausibly low against
                                   * theory_gflops, that gemm_peak_gflops replaced */
    double theory_gflops;         /* mfu_theory's denominator; <= 0: unknown */
    double expected_tokens_per_s; /* <= 0: no throughput alerts */
    double mem_limit_bytes;       /* <= 0: no memory alerts */
    bool device_memory;           /* a device run: memory is judged on the sample's
                                   * device_bytes, run.memory_limit being the device's */
    double plan_bytes;            /* the memory plan's total (reported, not judged) */
    double warning[CT_ALERT_KIND_COUNT], critical[CT_ALERT_KIND_COUNT];
    double data_wait_min_s; /* a step's data wait below this is not judged (sub-millisecond
                             * waits of tiny steps are scheduling noise, not starvation) */
    int64_t warmup_steps; /* samples whose throughput and data wait are not judged */
    int64_t repeat_every; /* steps between repeats of a standing alert; 0: never */
} ct_monitor_params;

/* A measured GEMM peak below this share of the cores' theoretical FMA peak
 * is a busy moment's, not the library's: even SSE-only BLAS kernels on an
 * AVX-512 machine reach about a fifth of it at rest. */
#define CT_MONITOR_PEAK_MIN_SHARE 0.10

/* The parameters of a training run: thresholds from cfg->alerts (both loss
 * levels 0: 1.25 and 2 x ln(vocab_size)); step FLOPs from the model's shape
 * by ct_bench_step_flops_lora at (B, T) times accum (lora_numel: the adapter
 * elements of a LoRA run, 0 otherwise); the expected rate is
 * alerts.expected_tokens_per_s when set, else expected_mfu x gemm_peak /
 * (FLOPs per token), i.e. the rate at which a step would reach that share
 * of the measured GEMM peak (0 when the peak is unknown). A measured peak
 * (alerts.gemm_peak_gflops 0) below CT_MONITOR_PEAK_MIN_SHARE x theory_gflops
 * is set aside: gemm_peak_gflops becomes theory_gflops, peak_set_aside the
 * measured figure, and no rate is derived from it (0 unless set). Borrows cfg
 * and mc; fills *out. */
void ct_monitor_params_for_run(ct_monitor_params *out, const ct_config *cfg,
                               const ct_model_config *mc, int B, int T, int64_t accum,
                               size_t lora_numel, double gemm_peak_gflops, double theory_gflops,
                               size_t mem_limit, size_t plan_bytes);

/* One optimizer step's measurements. */
typedef struct ct_monitor_sample {
    int64_t step;
    double loss;
    double step_s;        /* wall time of the whole step */
    double data_s;        /* waiting for (and copying) batches */
    double fwd_s, bwd_s;  /* model forward (with the fused head) and backward */
    double opt_s;         /* zeroing gradients, grad norm, guard, clipping, AdamW */
    double comm_s;        /* gradient communication; 0 without data parallelism */
    size_t rss_bytes, rss_peak_bytes; /* resident set now and its high-water mark */
    size_t device_bytes;  /* a device run: the most device memory in use so far */
    size_t arena_bytes;   /* bytes ctrain's allocator holds */
    int64_t major_faults; /* major page faults during the step */
} ct_monitor_sample;

/* Figures derived from a sample. NaN where a denominator is unknown. */
typedef struct ct_monitor_figures {
    double tokens_per_s;
    double gflops;      /* achieved model GFLOP/s: step_flops / step_s */
    double mfu;         /* gflops / gemm_peak_gflops */
    double mfu_theory;  /* gflops / theory_gflops */
    double value[CT_ALERT_KIND_COUNT]; /* what each kind is judged on, in the unit of its
                                        * thresholds (NaN: cannot be judged); from
                                        * ct_monitor_figures_of, throughput is this
                                        * step's alone, from ct_monitor_update the
                                        * window's median after the warm-up */
} ct_monitor_figures;

/* One report: an alert entering or repeating a level, or clearing. */
typedef struct ct_alert {
    int64_t step;
    ct_alert_kind kind;
    ct_alert_level level; /* CT_ALERT_OK only when cleared */
    bool cleared;         /* the kind fell back to ok (level is then CT_ALERT_OK) */
    bool repeat;          /* the same level reported again after repeat_every steps */
    /* in absolute units, as metrics.jsonl's alert lines carry them: memory in
     * bytes (RSS; the threshold's fraction of run.memory_limit), throughput in
     * tokens/s, loss as the loss, data wait in milliseconds (the threshold is
     * its share of this step's time). For a clear: the judged fraction. */
    double value, threshold;
    char message[192];    /* one line, no newline */
} ct_alert;

#define CT_MONITOR_WINDOW 5

typedef struct ct_monitor {
    ct_monitor_params p;
    int64_t samples;                         /* samples seen */
    double tps[CT_MONITOR_WINDOW];           /* tokens/s of the last judged steps (a ring) */
    int n_tps;                               /* judged steps so far, up to the window */
    ct_alert_level level[CT_ALERT_KIND_COUNT];
    int64_t reported_at[CT_ALERT_KIND_COUNT]; /* step of the last report per kind */
    int64_t entered_at[CT_ALERT_KIND_COUNT];  /* step at which the level was entered */
    ct_alert last[CT_ALERT_KIND_COUNT];       /* the latest report of each standing alert */
    /* a whole step cannot run faster than GEMMs alone: when one does, the
     * peak was measured in a busy moment, and MFU's denominator becomes the
     * theoretical peak (0, MFU n/a, when the step beats that too) */
    double peak_measured;                     /* the peak given at init */
    int64_t peak_raised_at;                   /* last step that changed it; 0: never */
} ct_monitor;

/* Start with every kind at ok. Borrows p (copied). Logs a warning when
 * p->peak_set_aside > 0. m->p.gemm_peak_gflops becomes p->theory_gflops when
 * a step's achieved GFLOP/s beats it, and 0 (MFU n/a) when a step beats that
 * too or the theory is unknown; each change is logged as a warning. */
void ct_monitor_init(ct_monitor *m, const ct_monitor_params *p);

/* Figures of sample s under p. Borrows both; fills *out. */
void ct_monitor_figures_of(const ct_monitor_params *p, const ct_monitor_sample *s,
                           ct_monitor_figures *out);

/* Judge sample s: fills *fig, writes the reports due at this step to
 * events[0 .. return value) (at most CT_ALERT_KIND_COUNT, in kind order) and
 * updates the levels. Borrows s; events is caller-owned. */
int ct_monitor_update(ct_monitor *m, const ct_monitor_sample *s, ct_monitor_figures *fig,
                      ct_alert *events);

/* The alert to show on a one-line display: the standing alert of the highest
 * level, the most recently entered among equals; NULL when all are ok. The
 * pointer is into m (valid until the next update). */
const ct_alert *ct_monitor_active(const ct_monitor *m);

/* Resident set and its peak (VmRSS, VmHWM) from /proc/self/status text, in
 * bytes. Borrows text. CT_ERR_FORMAT when either line is missing. */
ct_status ct_monitor_parse_status(const char *text, size_t *rss, size_t *peak);

/* This process now: RSS and peak RSS (/proc/self/status; peak falls back to
 * getrusage's ru_maxrss), and the major page faults since it started
 * (getrusage). CT_ERR_IO when neither source can be read. */
ct_status ct_monitor_read_process(size_t *rss, size_t *peak, int64_t *major_faults);

#endif
