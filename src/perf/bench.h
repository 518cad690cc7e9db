/*
 * What the trainer measures with: the model FLOPs of a step (MFU's numerator),
 * the roofs (sustained GEMM peak, FMA ceiling, nominal peak, memory bandwidth),
 * the GEMM-only time of a training step (every sgemm the step makes, nothing
 * else), the median and the peak RSS. Results are plain numbers; cli/cmd_bench.c
 * and cli/cmd_hw.c print them. The benchmarks that run the library as a whole
 * (the kernel suite, end-to-end steps) are in src/tools/bench_tools.h.
 * Leaves out: multi-process runs.
 */
#ifndef CT_PERF_BENCH_H
#define CT_PERF_BENCH_H

#include <stddef.h>

#include "ctrain/core.h"
#include "ctrain/model.h"

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

/* Peak resident set size of this process in bytes (getrusage). */
size_t ct_bench_peak_rss(void);
/* Median of n values (n >= 1); sorts a copy. */
double ct_bench_median(const double *v, int n);

#endif
