/*
 * What the trainer measures with: the model FLOPs of a step (MFU's numerator),
 * the roofs (sustained GEMM peak, FMA ceiling, bf16 dot-product ceiling,
 * nominal peak, memory bandwidth),
 * the GEMM-only time of a training step (every sgemm the step makes, nothing
 * else), the median and the peak RSS. Results are plain numbers; cli/cmd_bench.c
 * and cli/cmd_hw.c print them. The benchmarks that run the library as a whole
 * (the kernel suite, end-to-end steps) are in src/tools/bench_tools.h.
 * Leaves out: multi-process runs.
 */
#ifndef CT_PERF_BENCH_H
#define CT_PERF_BENCH_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/device.h"
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

/* What one GEMM peak measurement saw. */
typedef struct ct_bench_gemm_info {
    double gflops;       /* the peak: the better of long_gflops and short_gflops */
    double long_gflops;  /* the best n x n x n run */
    double short_gflops; /* the best of the short (n/2)^3 runs */
    int runs;            /* timed runs, long and short */
    double seconds;      /* wall time of the measurement, warm-up included */
    double others_cpus;  /* other processes' CPU use on this process's CPUs meanwhile
                          * (ct_hwinfo_cpu_others); -1 unknown */
} ct_bench_gemm_info;

/* Sustained single-precision GEMM rate on all of ctx's threads: the best of
 * reps runs of an n x n x n sgemm, and of short (n/2)^3 runs repeated for
 * about as long again (at least 4): on a busy machine a neighbour leaves short
 * quiet windows that a long run never sees, and a rate the library reached is
 * a rate it can reach. The measurement itself can still read low when the
 * machine stays busy throughout; info->others_cpus says how busy it was.
 * Writes GFLOP/s (and *info). CT_ERR_OOM. */
ct_status ct_bench_gemm_peak_info(ct_ctx *ctx, int n, int reps, ct_bench_gemm_info *info);
/* The same, writing the peak only; logs a warning (naming alerts.gemm_peak_gflops)
 * when other processes used more than CT_HW_BUSY_CPUS of this process's CPUs
 * during the measurement, since the figure may then read low. */
ct_status ct_bench_gemm_peak(ct_ctx *ctx, int n, int reps, double *gflops);
/* ct_bench_gemm_peak_info with bf16 A and B (ct_gemm_bf16: exact products,
 * fp32 accumulation and output) on ctx's GEMM library: oneDNN's bf16 matmul
 * (native on AVX512_BF16 or AMX, emulated elsewhere: ct_gemm_have_bf16), or
 * OpenBLAS on fp32 copies. Same measurement and errors. */
ct_status ct_bench_gemm_bf16_peak_info(ct_ctx *ctx, int n, int reps, ct_bench_gemm_info *info);
/* ct_bench_gemm_peak_info (bf16: ct_bench_gemm_bf16_peak_info) on GEMM
 * library lib (a ct_gemm_lib), whatever ctx's run.gemm: both libraries'
 * peaks side by side. */
ct_status ct_bench_gemm_peak_lib(ct_ctx *ctx, int lib, bool bf16, int n, int reps,
                                 ct_bench_gemm_info *info);
/* Register-only FMA loop on every thread: the boosted arithmetic ceiling of the
 * cores, in GFLOP/s; the best of short runs (at least 3, about 0.1 s in all),
 * so a busy moment lowers it less. No real code computes faster: it is the
 * compute bound of the kernel suite's roofline. */
double ct_bench_fma_peak(ct_ctx *ctx);
/* Whether this CPU runs vdpbf16ps (AVX512_BF16, detected at run time with
 * cpuid, whatever the build's -march). */
bool ct_bench_have_bf16_dot(void);
/* Register-only bf16 dot-product loop (vdpbf16ps: 16 lanes x 2 bf16 products
 * summed into fp32, 64 FLOPs, on 24 independent accumulators) on every
 * thread, measured as ct_bench_fma_peak: the bf16 compute ceiling, in
 * GFLOP/s. 0 when the CPU lacks AVX512_BF16 (ct_bench_have_bf16_dot). On
 * Intel cores without AMX one vdpbf16ps issues per cycle, the multiply-adds
 * of two fp32 FMAs, so it reads about ct_bench_fma_peak: bf16 GEMMs have no
 * compute advantage there, only half the bytes. */
double ct_bench_bf16_peak(ct_ctx *ctx);
/* ISA lanes x 2 FMA pipes x 2 FLOPs x threads x the clock, GFLOP/s. The clock
 * is measured (a chain of dependent adds, one per cycle, best of 12 runs of
 * ~5 ms: the boosted clock one core runs at), else the "cpu MHz" of
 * /proc/cpuinfo (often the nominal clock, under what boosting cores reach);
 * written to *mhz when non-NULL, 0 when unknown. */
double ct_bench_theoretical_gflops(int threads, double *mhz);
/* Streaming triad bandwidth (GB/s, 1e9 bytes) over three arrays of `mb` MiB each,
 * the best of reps. CT_ERR_OOM. */
ct_status ct_bench_membw(ct_ctx *ctx, size_t mb, int reps, double *gbps);
/* The best read and write streaming rates (GB/s, 1e9 bytes of the buffer per
 * second) over one buffer of `bytes` bytes, split between ctx's threads: read
 * sums the buffer, write fills it. A small buffer stays in the cache it fits
 * (each timing repeats passes over it, inside one parallel region, for about
 * 4 MiB), so the figures are that cache's bandwidth; a large one measures
 * memory. Repeats each timing for at least min_s in all (3 times at least) and
 * keeps the best. Read-only and write-only streams are each the fastest way to
 * move their bytes, so bytes read / read rate and bytes written / write rate
 * are both lower bounds on a kernel's time at that footprint. CT_ERR_OOM. */
ct_status ct_bench_stream_bw(ct_ctx *ctx, size_t bytes, double min_s, double *read_gbps,
                             double *write_gbps);

/* Whether this library was built optimized and without sanitizers. The
 * roofs' own loops (the FMA ceiling, the stream probes) are compiled code, so
 * an -O0 or sanitized build measures them far below the hardware while the
 * BLAS it calls stays fast: its roofline figures are then no bounds. */
bool ct_bench_build_optimized(void);

/* GEMM-only step: every GEMM of one GPT-2 training step at (B,T), in the
 * step's order with the step's shapes and transposes, on distinct weights per
 * layer: sgemm, or under CT_PREC_BF16 the mixed-precision GEMMs the step
 * runs then (fp32 activations and gradients times bf16 weights, and the
 * input's bf16 copy for the weight gradient). Runs it reps times; writes each
 * run's seconds to times (reps) and the step's GEMM FLOPs to *flops.
 * CT_ERR_OOM, CT_ERR_ARG on a bad shape. */
ct_status ct_bench_gemm_step(ct_ctx *ctx, const ct_model_config *cfg, int B, int T,
                             ct_precision prec, int reps, double *times, double *flops);

/* A GPU's figures (src/perf/gpupeak.c). */
typedef struct ct_gpu_peaks {
    ct_device_info info;     /* properties, memory, theoretical peaks */
    int gemm_n;              /* size of the measured GEMMs; 0: not measured */
    double fp32_gemm_gflops; /* cuBLAS sgemm, TF32 off (as the backend runs fp32) */
    double bf16_gemm_gflops; /* cuBLAS GemmEx, bf16 inputs, fp32 accumulation; 0: not
                              * measured (a GPU without bf16, compute capability < 8.0) */
} ct_gpu_peaks;
/* Starts CUDA device `device` (a context of its own, released before it
 * returns), reads its figures and, with measure, cuBLAS's fp32 and bf16 GEMM
 * peaks at n x n x n (the best of reps runs after a warm-up; no bf16 one on a
 * GPU of compute capability below 8.0, which has no bf16 GEMMs). CT_ERR_ARG
 * "no CUDA device: <the driver's reason>" without one; the backend's
 * errors. */
ct_status ct_bench_gpu_peaks(int device, bool measure, int n, int reps, ct_gpu_peaks *out);

/* Peak resident set size of this process in bytes: since the last
 * ct_bench_peak_rss_reset that took (Linux's VmHWM), else since the start
 * (getrusage). */
size_t ct_bench_peak_rss(void);
/* Starts the peak over (writes 5 to /proc/self/clear_refs, Linux 4.0+), so
 * that a setup's transient (a base initialised in fp32, then stored bf16)
 * does not stand for what the steps hold. False where it cannot. */
bool ct_bench_peak_rss_reset(void);
/* Median of n values (n >= 1); sorts a copy. */
double ct_bench_median(const double *v, int n);

#endif
