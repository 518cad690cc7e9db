/*
 * The benchmark regression gate: a kernel-suite or training-step result
 * saved as a baseline JSON file (format "ctrain-bench-baseline", version 1)
 * and a later run compared with it row by row. A baseline names the host it
 * was measured on, which benchmark it holds ("kernels": one row per kernel;
 * "step": end-to-end rows, the whole step and its split by kernel type), the
 * run's settings (preset, B, T, threads, kernel table, step options) and, per
 * row, the median seconds and the noise: the relative spread (max - min) /
 * median of the repetitions' medians. Comparisons refuse a baseline from
 * another host, of another benchmark or with other settings. Files written
 * before step baselines existed have no "bench" key and read as kernels.
 * Leaves out: history of many baselines, a proper hardware signature
 * (bench_host_signature in baseline.c is the one place to swap it in).
 */
#ifndef CT_TOOLS_BASELINE_H
#define CT_TOOLS_BASELINE_H

#include "ctrain/core.h"
#include "tools/bench_tools.h"

#define CT_BASELINE_FORMAT "ctrain-bench-baseline"
#define CT_BASELINE_VERSION 1
#define CT_BASELINE_MAX_KERNELS 64
/* a kernel regressed when now > base * (1 + CT_BASELINE_TOLERANCE + noise) */
#define CT_BASELINE_TOLERANCE 0.05

typedef struct ct_baseline_kernel {
    char name[48];
    char shape[48];
    double median_s; /* median of the repetitions' medians */
    double noise;    /* (max - min) / median_s over the repetitions */
    int repeats;
    double rep_s[CT_BENCH_MAX_REPEAT];
} ct_baseline_kernel;

typedef struct ct_baseline {
    char host[256]; /* bench_host_signature of the measuring machine */
    char bench[16]; /* "kernels" | "step" */
    char options[48]; /* the step's "recompute R, activations D"; "" for kernels */
    char preset[64];
    char table[16];
    int B, T, threads;
    int n;
    ct_baseline_kernel k[CT_BASELINE_MAX_KERNELS];
} ct_baseline;

/* Start a baseline of benchmark `bench` ("kernels" or "step") for these
 * settings on this host (no rows yet). Borrows the strings (copied); options
 * may be NULL. */
void ct_baseline_init(ct_baseline *b, const char *bench, const char *options, const char *preset,
                      const char *table, int B, int T, int threads);
/* Append one measured kernel. CT_ERR_ARG when the baseline is full. */
ct_status ct_baseline_add(ct_baseline *b, const ct_bench_item *it);
/* Write b to path as JSON, atomically. CT_ERR_IO, CT_ERR_OOM. */
ct_status ct_baseline_save(const ct_baseline *b, const char *path);
/* Read path into *b. CT_ERR_IO (missing, unreadable), CT_ERR_FORMAT (not
 * JSON, another format or version, a missing or bad field; the message names
 * path and the field). */
ct_status ct_baseline_load(ct_baseline *b, const char *path);
/* Whether base (read from path) may be compared with now: the same host
 * signature, benchmark and options, and the same preset, B, T, threads and table. CT_ERR_ARG naming
 * path and what differs otherwise. */
ct_status ct_baseline_check(const ct_baseline *base, const ct_baseline *now, const char *path);

typedef enum ct_baseline_verdict {
    CT_BASELINE_OK = 0,
    CT_BASELINE_REGRESSED,
    CT_BASELINE_NEW, /* measured now, absent from the baseline */
} ct_baseline_verdict;

typedef struct ct_baseline_row {
    const char *name; /* borrowed from now */
    double base_s, now_s;
    double change;    /* now_s / base_s - 1 */
    double noise;     /* the larger of the two runs' noise */
    double limit;     /* allowed change: CT_BASELINE_TOLERANCE + noise */
    ct_baseline_verdict verdict;
} ct_baseline_row;

/* One row per kernel of now (rows holds now->n). Returns how many regressed. */
int ct_baseline_compare(const ct_baseline *base, const ct_baseline *now, ct_baseline_row *rows);

#endif
