/*
 * Benchmarks that run the library as a whole over perf/: the kernel suite
 * (every kernel of the context's backend at GPT-2 shapes, each against its
 * roofline) and end-to-end training steps (model + AdamW) split by kernel kind.
 *
 * The roofline of a kernel is the least time its work allows on this machine:
 *   max(FLOPs / the register FMA ceiling,
 *       bytes read / the read-stream rate at the kernel's footprint,
 *       bytes written / the write-stream rate at the kernel's footprint),
 * with the stream rates measured over a buffer of the kernel's footprint
 * (rounded down to a power of two), so a kernel whose data fits L1, L2 or L3
 * is held to that cache's bandwidth and a larger one to memory's. Each term is
 * a real bound (nothing computes faster than the FMA units, nothing moves its
 * bytes faster than a pure read or write stream), so roof / time reads as a
 * fraction of what the hardware allows, at most 100% up to timing noise; the
 * item names the binding term. The byte counts are the least traffic (each
 * operand once; += outputs read and written).
 * Results are plain structs; cli/cmd_bench.c prints them, baseline.h saves and
 * compares them, tune.c times its trials with ct_bench_step.
 */
#ifndef CT_TOOLS_BENCH_TOOLS_H
#define CT_TOOLS_BENCH_TOOLS_H

#include <stddef.h>

#include "ctrain/core.h"
#include "ctrain/model.h"
#include "perf/bench.h"
#include "perf/kprof.h"

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
    double bytes;   /* least memory traffic per call: read_bytes + write_bytes */
    double read_bytes, write_bytes;
    double footprint; /* bytes of distinct data the call touches (what must fit a cache) */
    double roof_s;  /* roofline time (see above); 0 when the suite ran without roofs */
    const char *bound; /* the binding term: "compute", "read" or "write" ("memory" on a
                        * device: read and write together); static */
    double bound_rate; /* its rate: GFLOP/s (compute) or GB/s */
    const char *level; /* where the footprint fits: "L1", "L2", "L3" or "memory" ("device":
                        * a device's memory); static */
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
    /* the bound of the 16-bit kernels (bf16 or fp16 operands: names with
     * "16"): a device's bf16 GEMM peak, a CPU's register bf16 dot-product
     * ceiling (AVX512_BF16); 0: fma_gflops for every kernel */
    double gemm16_gflops;
} ct_bench_kernel_opts;

/* Runs every kernel of the context's table at the GPT-2 shapes of (cfg, B, T),
 * calling fn after each. fma_gflops is the compute bound (ct_bench_fma_peak);
 * the stream rates are measured per footprint as the suite goes (the host's:
 * the CPU backend's buffers are host memory). On a queued backend (a GPU)
 * fma_gflops is the device's (its fp32 GEMM peak; opts->gemm16_gflops for the
 * 16-bit kernels) and the memory bound is its own copy rate (a device-to-device
 * copy's bytes read and written per second at the kernel's footprint), against
 * a kernel's bytes read and written together. fma_gflops <= 0: no roofline
 * (roof_s 0, no bandwidth measured; the regression gate). opts may be NULL
 * (every kernel, one timing). Borrows everything. CT_ERR_OOM, CT_ERR_ARG. */
ct_status ct_bench_kernels(ct_ctx *ctx, const ct_model_config *cfg, int B, int T,
                           double fma_gflops, const ct_bench_kernel_opts *opts,
                           ct_bench_item_fn fn, void *user);

/* End-to-end training steps on random tokens: zero grads, forward+backward,
 * AdamW. With LoRA adapters (lora.r > 0) the step is a LoRA run's: the base
 * frozen (bf16 under lora.base_bf16), AdamW over the adapters only. */
typedef struct ct_bench_step_opts {
    int B, T;
    int warmup, steps; /* steps <= CT_BENCH_MAX_STEPS */
    ct_model_opts model; /* recompute policy and activation storage */
    /* test knob of the regression gate: kernels of the kind named slow_kind
     * (a ct_kprof_name) run slow_factor times per call; NULL: off */
    const char *slow_kind;
    int slow_factor;
    ct_lora_opts lora; /* r == 0: the full model trains */
} ct_bench_step_opts;
#define CT_BENCH_MAX_STEPS 64

typedef struct ct_bench_step_result {
    int steps;
    double step_s[CT_BENCH_MAX_STEPS];
    float loss[CT_BENCH_MAX_STEPS];
    double median_s;
    double flops;             /* ct_bench_step_flops (_lora: the adapters') */
    ct_kprof_counts split;    /* per-kind seconds summed over the timed steps */
    double other_s;           /* timed time outside any kernel (zeroing, glue) */
    size_t peak_rss;          /* bytes, the high-water mark from the first step on (the
                               * process's where it cannot be started over) */
    size_t planned_bytes;     /* the model's memory plan (these opts, the adapters) plus
                               * AdamW moments */
    size_t trainable;         /* parameters AdamW updates: all, or the adapters' */
} ct_bench_step_result;

/* Runs the steps on ctx (whose backend is wrapped by the kernel profiler for the split).
 * CT_ERR_OOM, CT_ERR_ARG. */
ct_status ct_bench_step(ct_ctx *ctx, const ct_model_config *cfg, const ct_bench_step_opts *o,
                        ct_bench_step_result *out);

#endif
