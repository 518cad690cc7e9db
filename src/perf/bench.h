/*
 * Benchmarks of the engine on its own shapes: the sustained GEMM peak and the
 * memory bandwidth (the two roofs), every kernel at a GPT-2 shape against its
 * roofline, the GEMM-only time of a training step (every sgemm the step makes,
 * nothing else), and end-to-end training steps split by layer type. Results
 * are plain structs; cli/cmd_bench.c prints them; src/perf/baseline.h saves
 * and compares kernel results. Leaves out: multi-process runs.
 */
#ifndef CT_PERF_BENCH_H
#define CT_PERF_BENCH_H

#include <stddef.h>

#include "ctrain/core.h"
#include "ctrain/model.h"
#include "perf/kprof.h"

/* Model FLOPs of one training step (forward + backward) at batch (B,T): 6 per
 * weight per token for every GEMM (the tied head included) plus causal
 * attention's 12*L*C*T(T+1)/2 per sequence. Both sides of a comparison use
 * this, so MFU figures are comparable. */
double ct_bench_step_flops(const ct_model_config *cfg, int B, int T);
/* The same for a LoRA run with adapter_numel trainable adapter elements: the
 * frozen base's GEMMs skip their weight gradient (4 FLOPs per weight per
 * token), the adapters do 6. adapter_numel 0 is ct_bench_step_flops. */
double ct_bench_step_flops_lora(const ct_model_config *cfg, int B, int T, size_t adapter_numel);

/* Sustained single-precision GEMM rate: the best of reps runs of an n x n x n
 * sgemm on all of ctx's threads. Writes GFLOP/s. CT_ERR_OOM. */
ct_status ct_bench_gemm_peak(ct_ctx *ctx, int n, int reps, double *gflops);
/* Register-only FMA loop on every thread: the boosted arithmetic ceiling of the
 * cores, in GFLOP/s. */
double ct_bench_fma_peak(ct_ctx *ctx);
/* ISA lanes x 2 FMA pipes x 2 FLOPs x threads x the nominal clock (the "cpu MHz"
 * of /proc/cpuinfo, written to *mhz when non-NULL; 0 when unknown), GFLOP/s.
 * Boosting cores run above it; ct_bench_fma_peak measures what they reach. */
double ct_bench_theoretical_gflops(int threads, double *mhz);
/* Streaming triad bandwidth (GB/s, 1e9 bytes) over three arrays of `mb` MiB each,
 * the best of reps. CT_ERR_OOM. */
ct_status ct_bench_membw(ct_ctx *ctx, size_t mb, int reps, double *gbps);

/* GEMM-only step: every sgemm of one GPT-2 training step at (B,T), in the
 * step's order with the step's shapes and transposes, on distinct weights per
 * layer. Runs it reps times; writes each run's seconds to times (reps) and the
 * step's GEMM FLOPs to *flops. CT_ERR_OOM, CT_ERR_ARG on a bad shape. */
ct_status ct_bench_gemm_step(ct_ctx *ctx, const ct_model_config *cfg, int B, int T, int reps,
                             double *times, double *flops);

#define CT_BENCH_MAX_REPEAT 32

/* One kernel measured at one shape. */
typedef struct ct_bench_item {
    char name[48];  /* "gemm.fc.bwd_weight", "attention.fwd", ... */
    char shape[48]; /* "M=256 N=3072 K=768", "N=256 C=768", ... */
    double seconds; /* median of the repetitions' medians, per call */
    int repeats;    /* repetitions of the timing (each the median of up to 20 calls) */
    double rep_s[CT_BENCH_MAX_REPEAT]; /* each repetition's median */
    double spread;  /* (max - min) / seconds over rep_s: the relative noise */
    double flops;   /* per call (0 for memory-bound kernels) */
    double bytes;   /* least memory traffic per call */
    double roof_s;  /* roofline time: max(flops / gemm peak, bytes / bandwidth) */
} ct_bench_item;

typedef void (*ct_bench_item_fn)(const ct_bench_item *item, void *user);

/* What the kernel suite measures and how. */
typedef struct ct_bench_kernel_opts {
    /* comma-separated name fragments: a kernel runs when its name contains any
     * of them; NULL or "" runs every kernel */
    const char *filter;
    int repeat; /* timings per kernel, 1..CT_BENCH_MAX_REPEAT (0 counts as 1) */
    /* test knob: the kernel named exactly slow_name is called slow_factor
     * times per timed call, so it measures about slow_factor times slower */
    const char *slow_name;
    int slow_factor;
} ct_bench_kernel_opts;

/* Runs every kernel of the context's table at the GPT-2 shapes of (cfg, B, T),
 * calling fn after each. peak_gflops and gbps are the roofs. opts may be NULL
 * (every kernel, one timing). Borrows everything. CT_ERR_OOM, CT_ERR_ARG. */
ct_status ct_bench_kernels(ct_ctx *ctx, const ct_model_config *cfg, int B, int T,
                           double peak_gflops, double gbps, const ct_bench_kernel_opts *opts,
                           ct_bench_item_fn fn, void *user);

/* End-to-end training steps on random tokens: zero grads, forward+backward,
 * AdamW. */
typedef struct ct_bench_step_opts {
    int B, T;
    int warmup, steps; /* steps <= CT_BENCH_MAX_STEPS */
    ct_model_opts model; /* recompute policy and activation storage */
    /* test knob of the regression gate: kernels of the kind named slow_kind
     * (a ct_kprof_name) run slow_factor times per call; NULL: off */
    const char *slow_kind;
    int slow_factor;
} ct_bench_step_opts;
#define CT_BENCH_MAX_STEPS 64

typedef struct ct_bench_step_result {
    int steps;
    double step_s[CT_BENCH_MAX_STEPS];
    float loss[CT_BENCH_MAX_STEPS];
    double median_s;
    double flops;             /* ct_bench_step_flops */
    ct_kprof_counts split;    /* per-kind seconds summed over the timed steps */
    double other_s;           /* timed time outside any kernel (zeroing, glue) */
    size_t peak_rss;          /* bytes, the process's high-water mark */
    size_t planned_bytes;     /* the model's memory plan (these opts) plus AdamW moments */
} ct_bench_step_result;

/* Runs the steps on ctx (whose kernel table is wrapped for the split).
 * CT_ERR_OOM, CT_ERR_ARG. */
ct_status ct_bench_step(ct_ctx *ctx, const ct_model_config *cfg, const ct_bench_step_opts *o,
                        ct_bench_step_result *out);

/* Peak resident set size of this process in bytes (getrusage). */
size_t ct_bench_peak_rss(void);
/* Median of n values (n >= 1); sorts a copy. */
double ct_bench_median(const double *v, int n);

#endif
