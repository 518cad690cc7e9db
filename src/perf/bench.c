/*
 * What the trainer measures with: the FLOP model, the roofs (GEMM peak, FMA
 * ceiling, nominal peak, bandwidth), the GEMM-only step, the median and the
 * peak RSS. See bench.h.
 */
#include "perf/bench.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h> /* also for the bf16 probe, compiled with its own target */
#endif
#ifdef CT_USE_OPENMP
#include <omp.h>
#endif

#include "backend/backend.h"
#include "backend/cpu/gemm.h"
#include "backend/ctx.h"
#include "core/dtype.h"
#include "perf/hwinfo.h"

/* ------------------------------------------------------------- helpers */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double ct_bench_median(const double *v, int n) {
    double tmp[256];
    if (n > 256) n = 256;
    memcpy(tmp, v, (size_t)n * sizeof *v);
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
    return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

static bool g_rss_reset; /* the high-water mark was started over */

bool ct_bench_peak_rss_reset(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return false;
    bool ok = fputs("5", f) >= 0;
    ok = fclose(f) == 0 && ok;
    g_rss_reset |= ok;
    return ok;
}

size_t ct_bench_peak_rss(void) {
    if (g_rss_reset) { /* VmHWM, which the reset started over (ru_maxrss keeps the old peak) */
        FILE *f = fopen("/proc/self/status", "r");
        char line[256];
        size_t kb = 0;
        bool found = false;
        while (f && !found && fgets(line, sizeof line, f))
            found = sscanf(line, "VmHWM: %zu kB", &kb) == 1;
        if (f) fclose(f);
        if (found) return kb * 1024;
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (size_t)ru.ru_maxrss * 1024;
}

static float *bench_alloc(size_t nfloats) {
    void *p = NULL;
    size_t bytes = (nfloats ? nfloats : 1) * sizeof(float);
    bytes = (bytes + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, bytes) != 0) return NULL;
    return p;
}

/* Small values of both signs, filled in parallel (also first-touches the pages
 * on the threads that will use them). */
static void bench_fill(float *x, size_t n, uint32_t seed) {
#ifdef CT_USE_OPENMP
#pragma omp parallel for
#endif
    for (size_t i = 0; i < n; i++) {
        uint32_t h = (uint32_t)i * 2654435761u + seed * 40503u;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        x[i] = ((float)(h & 0xffff) / 65536.0f - 0.5f) * 0.1f;
    }
}

/* Weights of the model's GEMMs: fused qkv (q is n_head heads of the head
 * size, keys and values n_kv_head heads), the output projection, the MLP (two
 * matrices for GELU, three for SwiGLU's gate, up and down) and the head. */
static double gemm_weights(const ct_model_config *c) {
    double C = c->n_embd, F = c->n_ffn, V = c->vocab_size, HS = ct_model_head_dim(c);
    double q = c->n_head * HS, kv = (c->n_kv_head > 0 ? c->n_kv_head : c->n_head) * HS;
    double mlp = (c->mlp != CT_MLP_GELU ? 3.0 : 2.0) * C * F;
    return c->n_layer * (C * (q + 2 * kv) + q * C + mlp) + V * C;
}

/* q k^T and P v over the causal half, forward and backward (6 matmul FLOPs
 * per multiply-add pair, 2 matmuls): 12 L (NH HS) T(T+1)/2 B. */
static double attention_flops(const ct_model_config *c, int B, int T) {
    double q = (double)c->n_head * ct_model_head_dim(c);
    return 12.0 * c->n_layer * q * ((double)T * (T + 1) / 2.0) * B;
}

double ct_bench_step_flops(const ct_model_config *c, int B, int T) {
    return 6.0 * (double)B * T * gemm_weights(c) + attention_flops(c, B, T);
}

double ct_bench_step_flops_lora(const ct_model_config *c, int B, int T, size_t adapter_numel) {
    if (!adapter_numel) return ct_bench_step_flops(c, B, T);
    double N = (double)B * T;
    /* a frozen weight does its forward and its input gradient (2 + 2 per
     * token), never its weight gradient; the adapters do all three */
    return 4.0 * N * gemm_weights(c) + 6.0 * N * (double)adapter_numel + attention_flops(c, B, T);
}

/* ----------------------------------------------------------------- roofs */

/* The GEMM library the context's kernels use (run.gemm). */
static ct_gemm_lib bench_lib(ct_ctx *ctx) {
    ct_backend *be = ctx ? ct_ctx_base_backend(ctx) : NULL;
    return be ? (ct_gemm_lib)be->gemm : (ct_gemm_lib)ct_gemm_lib_of("auto");
}

/* The operands of a peak measurement: fp32 a, b, c, and for the bf16 GEMM
 * bf16 copies of a and b. */
typedef struct peak_bufs {
    float *a, *b, *c;
    uint16_t *ah, *bh; /* NULL for fp32 */
} peak_bufs;

/* Seconds of one n x n x n GEMM (fp32, or bf16 inputs when bf16) on the
 * leading corners of the buffers. */
static double gemm_once(ct_gemm_lib lib, bool bf16, int n, const peak_bufs *p) {
    double t0 = ct_time_s();
    if (bf16)
        ct_gemm_bf16(lib, false, true, n, n, n, 1.0f, p->ah, n, p->bh, n, 0.0f, p->c, n);
    else
        ct_sgemm(lib, false, true, n, n, n, 1.0f, p->a, n, p->b, n, 0.0f, p->c, n);
    return ct_time_s() - t0;
}

/* ct_bench_gemm_peak_info on lib, fp32 or bf16 inputs. */
static ct_status gemm_peak_run(ct_gemm_lib lib, bool bf16, int n, int reps,
                               ct_bench_gemm_info *info) {
    memset(info, 0, sizeof *info);
    info->others_cpus = -1;
    size_t nn = (size_t)n * n;
    peak_bufs p = {bench_alloc(nn), bench_alloc(nn), bench_alloc(nn), NULL, NULL};
    bool ok = p.a && p.b && p.c;
    if (ok && bf16) {
        p.ah = malloc(nn * sizeof *p.ah);
        p.bh = malloc(nn * sizeof *p.bh);
        ok = p.ah && p.bh;
    }
    if (!ok) {
        free(p.a), free(p.b), free(p.c), free(p.ah), free(p.bh);
        return CT_ERR(CT_ERR_OOM, "out of memory for a %d x %d GEMM benchmark", n, n);
    }
    bench_fill(p.a, nn, 1), bench_fill(p.b, nn, 2), bench_fill(p.c, nn, 3);
    if (bf16) {
        ct_f32_to_bf16_array(p.ah, p.a, nn);
        ct_f32_to_bf16_array(p.bh, p.b, nn);
    }
    if (reps > 64) reps = 64;
    if (reps < 1) reps = 1;
    ct_hw_cpu_sample s0, s1;
    ct_hwinfo_cpu_sample(&s0);
    double t0 = ct_time_s();
    /* the long runs, after one warm-up: the best one, since a ceiling is what
     * the library can reach, not what a busy moment allows */
    (void)gemm_once(lib, bf16, n, &p);
    double best = 0, spent = 0;
    for (int r = 0; r < reps; r++) {
        double dt = gemm_once(lib, bf16, n, &p);
        spent += dt;
        best = r == 0 || dt < best ? dt : best;
    }
    info->long_gflops = 2.0 * n * (double)n * n / best / 1e9;
    /* short runs for about as long again: each is 1/8 of a long one, so a
     * neighbour's pauses (scheduler slices of a few ms) hold whole runs */
    int m = n / 2 < 64 ? 64 : n / 2;
    double sbest = 0, sspent = 0;
    int sruns = 0;
    if (m < n) {
        for (; sruns < 256 && (sruns < 4 || sspent < spent); sruns++) {
            double dt = gemm_once(lib, bf16, m, &p); /* the leading m x m corner of each */
            sspent += dt;
            sbest = sruns == 0 || dt < sbest ? dt : sbest;
        }
        info->short_gflops = 2.0 * m * (double)m * m / sbest / 1e9;
    }
    info->seconds = ct_time_s() - t0;
    ct_hwinfo_cpu_sample(&s1);
    info->others_cpus = ct_hwinfo_cpu_others(&s0, &s1);
    info->runs = reps + sruns;
    info->gflops = info->long_gflops > info->short_gflops ? info->long_gflops : info->short_gflops;
    free(p.a), free(p.b), free(p.c), free(p.ah), free(p.bh);
    return CT_OK;
}

ct_status ct_bench_gemm_peak_info(ct_ctx *ctx, int n, int reps, ct_bench_gemm_info *info) {
    return gemm_peak_run(bench_lib(ctx), false, n, reps, info);
}

ct_status ct_bench_gemm_bf16_peak_info(ct_ctx *ctx, int n, int reps, ct_bench_gemm_info *info) {
    return gemm_peak_run(bench_lib(ctx), true, n, reps, info);
}

ct_status ct_bench_gemm_peak_lib(ct_ctx *ctx, int lib, bool bf16, int n, int reps,
                                 ct_bench_gemm_info *info) {
    (void)ctx; /* the pool's threads are the process's */
    return gemm_peak_run((ct_gemm_lib)lib, bf16, n, reps, info);
}

ct_status ct_bench_gemm_peak(ct_ctx *ctx, int n, int reps, double *gflops) {
    ct_bench_gemm_info info;
    ct_status st = ct_bench_gemm_peak_info(ctx, n, reps, &info);
    if (st) return st;
    *gflops = info.gflops;
    if (info.others_cpus >= CT_HW_BUSY_CPUS)
        ct_log(CT_LOG_WARN, "GEMM peak %.1f GFLOP/s was measured while other processes used "
               "%.2f of this process's CPUs: it may read low (and MFU high); for a figure of "
               "the machine at rest run `ctrain bench peak` when it is quiet and set "
               "alerts.gemm_peak_gflops", info.gflops, info.others_cpus);
    return CT_OK;
}

/* Register-only multiply-adds: 12 independent chains hide the FMA latency.
 * Returns the accumulators' sum, which the caller keeps so the loop stays. */
#if defined(__AVX512F__)
#define FMA_LANES 16
static float fma_loop(long iters) {
    __m512 acc[12], mul = _mm512_set1_ps(0.999999f), add = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) acc[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < 12; i++) acc[i] = _mm512_fmadd_ps(acc[i], mul, add);
    float s = 0;
    for (int i = 0; i < 12; i++) s += _mm512_reduce_add_ps(acc[i]);
    return s;
}
#elif defined(__AVX2__) && defined(__FMA__)
#define FMA_LANES 8
static float fma_loop(long iters) {
    __m256 acc[12], mul = _mm256_set1_ps(0.999999f), add = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) acc[i] = _mm256_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < 12; i++) acc[i] = _mm256_fmadd_ps(acc[i], mul, add);
    float lanes[8], s = 0;
    for (int i = 0; i < 12; i++) {
        _mm256_storeu_ps(lanes, acc[i]);
        for (int j = 0; j < 8; j++) s += lanes[j];
    }
    return s;
}
#else
#define FMA_LANES 1
static float fma_loop(long iters) {
    float acc[12];
    for (int i = 0; i < 12; i++) acc[i] = (float)i;
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < 12; i++) acc[i] = fmaf(acc[i], 0.999999f, 1e-7f);
    float s = 0;
    for (int i = 0; i < 12; i++) s += acc[i];
    return s;
}
#endif

/* The best GFLOP/s of loop (flops_per_iter FLOPs per iteration) on all of
 * ctx's threads: short runs (a few ms each) until 0.1 s; the best one caught
 * the cores free, a busy moment lowers only some. */
static double register_peak(ct_ctx *ctx, float (*loop)(long), double flops_per_iter) {
    int nt = ct_ctx_threads(ctx);
    volatile float sink; /* keeps the loops' result alive */
    long iters = 2 * 1000 * 1000;
    double best = 0, start = ct_time_s();
    for (int r = 0; r < 200 && (r < 3 || ct_time_s() - start < 0.1); r++) {
        float sum = 0;
        double t0 = ct_time_s();
#ifdef CT_USE_OPENMP
#pragma omp parallel num_threads(nt) reduction(+ : sum)
#endif
        sum += loop(iters);
        double dt = ct_time_s() - t0;
        sink = sum;
        double flops = flops_per_iter * (double)iters * nt;
        if (flops / dt > best) best = flops / dt;
    }
    (void)sink;
    return best / 1e9;
}

double ct_bench_fma_peak(ct_ctx *ctx) {
    return register_peak(ctx, fma_loop, 2.0 * FMA_LANES * 12);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define BF16_CHAINS 24
/* Register-only bf16 dot products: vdpbf16ps adds the products of 16 pairs
 * of bf16 (32 multiply-adds, 64 FLOPs) into 16 fp32 lanes. Its latency is
 * long (12 chains reach half the rate on Intel cores), so 24 independent
 * accumulators. Compiled for AVX512_BF16 whatever the build's -march: call it
 * only where the CPU has it (bench_have_bf16). */
__attribute__((target("avx512f,avx512bf16"))) static float bf16_loop(long iters) {
    __m512 acc[BF16_CHAINS];
    /* bf16 0.0039 in every half: each step adds 2 x 1.5e-5 per lane, far from
     * overflow over the run, and never subnormal */
    __m512bh x = (__m512bh)_mm512_set1_epi16(0x3b80), y = (__m512bh)_mm512_set1_epi16(0x3b80);
    for (int i = 0; i < BF16_CHAINS; i++) acc[i] = _mm512_set1_ps((float)i);
    /* unrolled, so the accumulators live in registers (rolled, gcc 12 keeps
     * them in memory: a store and a load on every chain) */
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 24
        for (int i = 0; i < BF16_CHAINS; i++) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
    }
    float s = 0;
    for (int i = 0; i < BF16_CHAINS; i++) s += _mm512_reduce_add_ps(acc[i]);
    return s;
}

static bool bench_have_bf16(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
}
#endif

bool ct_bench_have_bf16_dot(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    return bench_have_bf16();
#else
    return false;
#endif
}

double ct_bench_bf16_peak(ct_ctx *ctx) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (bench_have_bf16()) return register_peak(ctx, bf16_loop, 64.0 * BF16_CHAINS);
#else
    (void)ctx;
#endif
    return 0;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The clock this core runs at now, in MHz: 32 dependent register-register
 * adds per iteration retire one per cycle on x86 cores (an add of an
 * immediate would not do: Golden Cove folds those at rename), and the loop's
 * own counter runs beside them, so cycles = 32 x iterations. Best of twelve
 * ~5 ms runs, since a preempted run only reads low. 0 when it fails. */
static double measured_mhz(void) {
    double best = 0;
    for (int r = 0; r < 12; r++) {
        long iters = 500000;
        uint64_t x = 0, one = 1;
        double t0 = ct_time_s();
        for (long i = 0; i < iters; i++) {
            __asm__ volatile(
                "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
                "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
                "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
                "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
                "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
                "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
                "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
                "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0"
                : "+r"(x)
                : "r"(one));
        }
        double dt = ct_time_s() - t0;
        if (x == (uint64_t)iters * 32 && dt > 0 && 32.0 * iters / dt / 1e6 > best)
            best = 32.0 * (double)iters / dt / 1e6;
    }
    return best;
}
#else
static double measured_mhz(void) { return 0; }
#endif

double ct_bench_theoretical_gflops(int threads, double *mhz_out) {
    /* the clock the cores run at (boost included), measured; /proc/cpuinfo's
     * "cpu MHz" is often the nominal or an idle clock, and on VMs the host's
     * base clock, which put the "theoretical" peak under the measured one */
    double mhz = measured_mhz();
    if (mhz > 0) {
        if (mhz_out) *mhz_out = mhz;
        goto have_mhz;
    }
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "cpu MHz", 7)) {
                const char *colon = strchr(line, ':');
                if (colon) mhz = atof(colon + 1);
                break;
            }
        fclose(f);
    }
    if (mhz_out) *mhz_out = mhz;
have_mhz:;
    int lanes = 1;
#if defined(__x86_64__) || defined(__i386__)
    if (__builtin_cpu_supports("avx512f")) lanes = 16;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) lanes = 8;
    else lanes = 4; /* SSE: multiply and add, no FMA; counted as one 4-lane FMA pipe */
#endif
    // two FMA pipes per core (Haswell and Zen 2 onward), two FLOPs per FMA
    return threads * (double)lanes * 2.0 * 2.0 * mhz / 1e3;
}

ct_status ct_bench_membw(ct_ctx *ctx, size_t mb, int reps, double *gbps) {
    (void)ctx;
    size_t n = mb * (1u << 20) / sizeof(float);
    float *a = bench_alloc(n), *b = bench_alloc(n), *c = bench_alloc(n);
    if (!a || !b || !c) {
        free(a), free(b), free(c);
        return CT_ERR(CT_ERR_OOM, "out of memory for a %zu MiB bandwidth benchmark", 3 * mb);
    }
    bench_fill(a, n, 1), bench_fill(b, n, 2), bench_fill(c, n, 3);
    double t[64];
    if (reps > 64) reps = 64;
    if (reps < 1) reps = 1;
    for (int r = -1; r < reps; r++) {
        double t0 = ct_time_s();
#ifdef CT_USE_OPENMP
#pragma omp parallel for simd
#endif
        for (size_t i = 0; i < n; i++) a[i] = b[i] + 0.5f * c[i];
        if (r >= 0) t[r] = ct_time_s() - t0;
    }
    double best = t[0];
    for (int r = 1; r < reps; r++) best = t[r] < best ? t[r] : best;
    *gbps = 3.0 * n * sizeof(float) / best / 1e9;
    free(a), free(b), free(c);
    return CT_OK;
}

/* floats summed per block: 128 partial sums keep 8 AVX-512 (16 AVX2) adds in
 * flight, enough to hide the add latency at two loads per cycle */
#define STREAM_BLOCK 128

/* passes x (read: sum n floats; write: fill them) by every thread over its
 * share of x, inside one parallel region. Returns the sum (a read's result,
 * kept by the caller so the loads stay). */
static float stream_passes(float *x, size_t n, int passes, int nt, bool write) {
    float total = 0;
    size_t blocks = n / STREAM_BLOCK;
#ifdef CT_USE_OPENMP
#pragma omp parallel num_threads(nt) reduction(+ : total)
#endif
    {
        int t = 0, T = 1;
#ifdef CT_USE_OPENMP
        t = omp_get_thread_num();
        T = omp_get_num_threads();
#else
        (void)nt;
#endif
        size_t lo = blocks * (size_t)t / (size_t)T * STREAM_BLOCK;
        size_t hi = blocks * (size_t)(t + 1) / (size_t)T * STREAM_BLOCK;
        float acc[STREAM_BLOCK] = {0};
        for (int p = 0; p < passes; p++) {
            if (write) {
                float v = (float)p;
                for (size_t i = lo; i < hi; i++) x[i] = v;
            } else {
                for (size_t i = lo; i < hi; i += STREAM_BLOCK)
                    for (int j = 0; j < STREAM_BLOCK; j++) acc[j] += x[i + j];
            }
        }
        for (int j = 0; j < STREAM_BLOCK; j++) total += acc[j];
    }
    return total;
}

/* The best GB/s of reading or writing x (n floats), passes per timing. */
static double stream_best(float *x, size_t n, int passes, int nt, bool write, double min_s) {
    volatile float sink; /* keeps the reads */
    double best = 0, start = ct_time_s();
    sink = stream_passes(x, n, 1, nt, write); /* warm: the pages and the cache */
    for (int r = 0; r < 64 && (r < 3 || ct_time_s() - start < min_s); r++) {
        double t0 = ct_time_s();
        sink = stream_passes(x, n, passes, nt, write);
        double dt = ct_time_s() - t0;
        double gbps = dt > 0 ? (double)n * sizeof(float) * passes / dt / 1e9 : 0;
        best = gbps > best ? gbps : best;
    }
    (void)sink;
    return best;
}

ct_status ct_bench_stream_bw(ct_ctx *ctx, size_t bytes, double min_s, double *read_gbps,
                             double *write_gbps) {
    int nt = ct_ctx_threads(ctx);
    /* a whole block per thread at least */
    size_t n = bytes / sizeof(float) / STREAM_BLOCK * STREAM_BLOCK;
    size_t least = (size_t)STREAM_BLOCK * (nt > 0 ? (size_t)nt : 1);
    if (n < least) n = least;
    float *x = bench_alloc(n);
    if (!x) return CT_ERR(CT_ERR_OOM, "out of memory for a %zu-byte bandwidth benchmark", bytes);
    bench_fill(x, n, 4);
    /* a timing covers about 4 MiB, so a cache-sized buffer is not timed by
     * the parallel region's start-up */
    size_t per = n * sizeof(float);
    int passes = per >= ((size_t)4 << 20) ? 1 : (int)(((size_t)4 << 20) / per);
    if (passes > 4096) passes = 4096;
    *read_gbps = stream_best(x, n, passes, nt, false, min_s);
    *write_gbps = stream_best(x, n, passes, nt, true, min_s);
    free(x);
    return CT_OK;
}

bool ct_bench_build_optimized(void) {
#if !defined(__OPTIMIZE__) || defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return false;
#else
    return true;
#endif
}

/* ------------------------------------------------------- GEMM-only step */

/* The GEMMs of one linear layer exactly as backend/cpu/matmul.c issues them:
 * forward out(N,OC) = in(N,C) W(OC,C)^T, backward dinp += dout W and
 * dW += dout^T in; with bf16 weights (w16, and in16 the input's copy) the
 * mixed-precision twins. */
typedef struct gemm_ops {
    ct_gemm_lib lib;
    bool bf16;
} gemm_ops;
static void linear_fwd(const gemm_ops *g, float *out, const float *in, const float *w,
                       const uint16_t *w16, int N, int C, int OC) {
    if (g->bf16)
        ct_gemm_f32_bf16(g->lib, false, true, N, OC, C, 1.0f, in, C, w16, C, 1.0f, out, OC);
    else
        ct_sgemm(g->lib, false, true, N, OC, C, 1.0f, in, C, w, C, 1.0f, out, OC);
}
static void linear_bwd(const gemm_ops *g, float *dinp, float *dw, const float *dout,
                       const float *in, const uint16_t *in16, const float *w,
                       const uint16_t *w16, int N, int C, int OC) {
    if (g->bf16) {
        ct_gemm_f32_bf16(g->lib, false, false, N, C, OC, 1.0f, dout, OC, w16, C, 1.0f, dinp, C);
        ct_gemm_f32_bf16(g->lib, true, false, OC, C, N, 1.0f, dout, OC, in16, C, 1.0f, dw, C);
    } else {
        ct_sgemm(g->lib, false, false, N, C, OC, 1.0f, dout, OC, w, C, 1.0f, dinp, C);
        ct_sgemm(g->lib, true, false, OC, C, N, 1.0f, dout, OC, in, C, 1.0f, dw, C);
    }
}

ct_status ct_bench_gemm_step(ct_ctx *ctx, const ct_model_config *cfg, int B, int T,
                             ct_precision prec, int reps, double *times, double *flops) {
    gemm_ops g = {bench_lib(ctx), prec == CT_PREC_BF16};
    ct_status st = ct_model_config_validate(cfg);
    if (st) return st;
    if (B < 1 || T < 1 || T > cfg->n_ctx)
        return CT_ERR(CT_ERR_ARG, "batch B=%d T=%d is invalid for n_ctx %d", B, T, cfg->n_ctx);
    int L = cfg->n_layer, C = cfg->n_embd, F = cfg->n_ffn, V = cfg->vocab_size, N = B * T;
    int rows = ct_model_head_chunk_rows(cfg, N);
    /* the model's own linears: fused qkv (grouped KV heads are narrower), the
     * output projection, the MLP's up (gate and up fused for SwiGLU) and down */
    int HS = ct_model_head_dim(cfg), NQ = cfg->n_head * HS;
    int QKV = NQ + 2 * HS * cfg->n_kv_head;
    int UP = cfg->mlp != CT_MLP_GELU ? 2 * F : F;
    size_t o_proj = (size_t)QKV * C, o_fc = o_proj + (size_t)NQ * C, o_fp = o_fc + (size_t)UP * C;
    size_t per_layer = o_fp + (size_t)F * C;
    size_t nw = per_layer * L + (size_t)V * C;
    int widest = UP > QKV ? UP : QKV;
    size_t big = (size_t)N * (size_t)(widest > C ? widest : C);
    float *w = malloc(nw * sizeof(float)), *dw = malloc(nw * sizeof(float));
    float *x = malloc(big * sizeof(float)), *y = malloc(big * sizeof(float));
    float *dx = malloc(big * sizeof(float));
    float *logits = malloc((size_t)rows * V * sizeof(float));
    /* bf16: the weights' copies and the inputs' (zero bits are bf16 zeros) */
    uint16_t *w16 = g.bf16 ? calloc(nw, sizeof *w16) : NULL;
    uint16_t *x16 = g.bf16 ? calloc(big, sizeof *x16) : NULL;
    if (!w || !dw || !x || !y || !dx || !logits || (g.bf16 && (!w16 || !x16))) {
        free(w), free(dw), free(x), free(y), free(dx), free(logits), free(w16), free(x16);
        return CT_ERR(CT_ERR_OOM, "out of memory for the GEMM-only step (%.1f GB)",
                      (2.0 * nw + 3.0 * big + (double)rows * V) * 4 / 1e9);
    }
    memset(w, 0, nw * sizeof(float));
    memset(dw, 0, nw * sizeof(float));
    for (size_t i = 0; i < nw; i += 97) w[i] = 0.01f;
    if (w16) ct_f32_to_bf16_array(w16, w, nw);
    memset(x, 0, big * sizeof(float));
    memset(y, 0, big * sizeof(float));
    memset(dx, 0, big * sizeof(float));
    memset(logits, 0, (size_t)rows * V * sizeof(float));
    const float *head = w + per_layer * L;
    const uint16_t *head16 = w16 ? w16 + per_layer * L : NULL;
    float *dhead = dw + per_layer * L;
    for (int r = -1; r < reps; r++) {
        double t0 = ct_time_s();
        for (int l = 0; l < L; l++) {
            const float *wl = w + per_layer * l;
            const uint16_t *hl = w16 ? w16 + per_layer * l : NULL;
            linear_fwd(&g, y, x, wl, hl, N, C, QKV);
            linear_fwd(&g, y, x, wl + o_proj, hl ? hl + o_proj : NULL, N, NQ, C);
            linear_fwd(&g, y, x, wl + o_fc, hl ? hl + o_fc : NULL, N, C, UP);
            linear_fwd(&g, y, x, wl + o_fp, hl ? hl + o_fp : NULL, N, F, C);
        }
        for (int r0 = 0; r0 < N; r0 += rows) {
            int n = N - r0 < rows ? N - r0 : rows;
            const float *xr = x + (size_t)r0 * C;
            const uint16_t *xr16 = x16 ? x16 + (size_t)r0 * C : NULL;
            linear_fwd(&g, logits, xr, head, head16, n, C, V);
            linear_bwd(&g, dx + (size_t)r0 * C, dhead, logits, xr, xr16, head, head16, n, C, V);
        }
        for (int l = L - 1; l >= 0; l--) {
            const float *wl = w + per_layer * l;
            const uint16_t *hl = w16 ? w16 + per_layer * l : NULL;
            float *dwl = dw + per_layer * l;
            linear_bwd(&g, dx, dwl + o_fp, y, x, x16, wl + o_fp, hl ? hl + o_fp : NULL, N, F, C);
            linear_bwd(&g, dx, dwl + o_fc, y, x, x16, wl + o_fc, hl ? hl + o_fc : NULL, N, C, UP);
            linear_bwd(&g, dx, dwl + o_proj, y, x, x16, wl + o_proj, hl ? hl + o_proj : NULL, N,
                       NQ, C);
            linear_bwd(&g, dx, dwl, y, x, x16, wl, hl, N, C, QKV);
        }
        if (r >= 0) times[r] = ct_time_s() - t0;
    }
    double per_layer_flops = 6.0 * N * (double)per_layer;
    *flops = L * per_layer_flops + 6.0 * N * (double)V * C;
    free(w), free(dw), free(x), free(y), free(dx), free(logits), free(w16), free(x16);
    return CT_OK;
}
