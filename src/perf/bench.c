/*
 * What the trainer measures with: the FLOP model, the roofs (GEMM peak, FMA
 * ceiling, nominal peak, bandwidth), the GEMM-only step, the median and the
 * peak RSS. See bench.h.
 */
#include "perf/bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <cblas.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#ifdef CT_USE_OPENMP
#include <omp.h>
#endif

#include "backend/ctx.h"

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

size_t ct_bench_peak_rss(void) {
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

/* Weights of the model's GEMMs: fused qkv (keys and values are n_kv_head
 * heads wide under grouped-query attention), the output projection, the MLP
 * (two matrices for GELU, three for SwiGLU's gate, up and down) and the head. */
static double gemm_weights(const ct_model_config *c) {
    double C = c->n_embd, F = c->n_ffn, V = c->vocab_size;
    double kv = c->n_head > 0 ? C * (c->n_kv_head > 0 ? c->n_kv_head : c->n_head) / c->n_head : C;
    double mlp = (c->mlp == CT_MLP_SWIGLU ? 3.0 : 2.0) * C * F;
    return c->n_layer * (C * (C + 2 * kv) + C * C + mlp) + V * C;
}

static double attention_flops(const ct_model_config *c, int B, int T) {
    return 12.0 * c->n_layer * c->n_embd * ((double)T * (T + 1) / 2.0) * B;
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

ct_status ct_bench_gemm_peak(ct_ctx *ctx, int n, int reps, double *gflops) {
    (void)ctx;
    size_t nn = (size_t)n * n;
    float *a = bench_alloc(nn), *b = bench_alloc(nn), *c = bench_alloc(nn);
    if (!a || !b || !c) {
        free(a), free(b), free(c);
        return CT_ERR(CT_ERR_OOM, "out of memory for a %d x %d GEMM benchmark", n, n);
    }
    bench_fill(a, nn, 1), bench_fill(b, nn, 2), bench_fill(c, nn, 3);
    double t[64];
    if (reps > 64) reps = 64;
    if (reps < 1) reps = 1;
    for (int r = -1; r < reps; r++) {
        double t0 = ct_time_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c,
                    n);
        if (r >= 0) t[r] = ct_time_s() - t0;
    }
    // the best run: a ceiling is what the library can reach, not what a busy moment allows
    double best = t[0];
    for (int r = 1; r < reps; r++) best = t[r] < best ? t[r] : best;
    *gflops = 2.0 * n * (double)n * n / best / 1e9;
    free(a), free(b), free(c);
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

double ct_bench_fma_peak(ct_ctx *ctx) {
    int nt = ct_ctx_threads(ctx);
    volatile float fma_sink; /* keeps the loops' result alive */
    long iters = 20 * 1000 * 1000;
    double best = 0;
    for (int r = 0; r < 3; r++) {
        float sum = 0;
        double t0 = ct_time_s();
#ifdef CT_USE_OPENMP
#pragma omp parallel num_threads(nt) reduction(+ : sum)
#endif
        sum += fma_loop(iters);
        double dt = ct_time_s() - t0;
        fma_sink = sum;
        double flops = 2.0 * FMA_LANES * 12 * (double)iters * nt;
        if (flops / dt > best) best = flops / dt;
    }
    (void)fma_sink;
    return best / 1e9;
}

double ct_bench_theoretical_gflops(int threads, double *mhz_out) {
    double mhz = 0;
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

/* ------------------------------------------------------- GEMM-only step */

/* The sgemms of one linear layer exactly as backend/cpu/matmul.c issues them:
 * forward out(N,OC) = in(N,C) W(OC,C)^T, backward dinp += dout W and
 * dW += dout^T in. */
static void linear_fwd(float *out, const float *in, const float *w, int N, int C, int OC) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, in, C, w, C, 1.0f, out,
                OC);
}
static void linear_bwd(float *dinp, float *dw, const float *dout, const float *in,
                       const float *w, int N, int C, int OC) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C, 1.0f,
                dinp, C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, in, C, 1.0f, dw,
                C);
}

ct_status ct_bench_gemm_step(ct_ctx *ctx, const ct_model_config *cfg, int B, int T, int reps,
                             double *times, double *flops) {
    (void)ctx;
    ct_status st = ct_model_config_validate(cfg);
    if (st) return st;
    if (B < 1 || T < 1 || T > cfg->n_ctx)
        return CT_ERR(CT_ERR_ARG, "batch B=%d T=%d is invalid for n_ctx %d", B, T, cfg->n_ctx);
    int L = cfg->n_layer, C = cfg->n_embd, F = cfg->n_ffn, V = cfg->vocab_size, N = B * T;
    int rows = ct_model_head_chunk_rows(cfg, N);
    /* the model's own linears: fused qkv (grouped KV heads are narrower), the
     * output projection, the MLP's up (gate and up fused for SwiGLU) and down */
    int QKV = C + 2 * (C / cfg->n_head) * cfg->n_kv_head;
    int UP = cfg->mlp == CT_MLP_SWIGLU ? 2 * F : F;
    size_t o_proj = (size_t)QKV * C, o_fc = o_proj + (size_t)C * C, o_fp = o_fc + (size_t)UP * C;
    size_t per_layer = o_fp + (size_t)F * C;
    size_t nw = per_layer * L + (size_t)V * C;
    int widest = UP > QKV ? UP : QKV;
    size_t big = (size_t)N * (size_t)(widest > C ? widest : C);
    float *w = malloc(nw * sizeof(float)), *dw = malloc(nw * sizeof(float));
    float *x = malloc(big * sizeof(float)), *y = malloc(big * sizeof(float));
    float *dx = malloc(big * sizeof(float));
    float *logits = malloc((size_t)rows * V * sizeof(float));
    if (!w || !dw || !x || !y || !dx || !logits) {
        free(w), free(dw), free(x), free(y), free(dx), free(logits);
        return CT_ERR(CT_ERR_OOM, "out of memory for the GEMM-only step (%.1f GB)",
                      (2.0 * nw + 3.0 * big + (double)rows * V) * 4 / 1e9);
    }
    memset(w, 0, nw * sizeof(float));
    memset(dw, 0, nw * sizeof(float));
    for (size_t i = 0; i < nw; i += 97) w[i] = 0.01f;
    memset(x, 0, big * sizeof(float));
    memset(y, 0, big * sizeof(float));
    memset(dx, 0, big * sizeof(float));
    memset(logits, 0, (size_t)rows * V * sizeof(float));
    const float *head = w + per_layer * L;
    float *dhead = dw + per_layer * L;
    for (int r = -1; r < reps; r++) {
        double t0 = ct_time_s();
        for (int l = 0; l < L; l++) {
            const float *wl = w + per_layer * l;
            linear_fwd(y, x, wl, N, C, QKV);
            linear_fwd(y, x, wl + o_proj, N, C, C);
            linear_fwd(y, x, wl + o_fc, N, C, UP);
            linear_fwd(y, x, wl + o_fp, N, F, C);
        }
        for (int r0 = 0; r0 < N; r0 += rows) {
            int n = N - r0 < rows ? N - r0 : rows;
            linear_fwd(logits, x + (size_t)r0 * C, head, n, C, V);
            linear_bwd(dx + (size_t)r0 * C, dhead, logits, x + (size_t)r0 * C, head, n, C, V);
        }
        for (int l = L - 1; l >= 0; l--) {
            const float *wl = w + per_layer * l;
            float *dwl = dw + per_layer * l;
            linear_bwd(dx, dwl + o_fp, y, x, wl + o_fp, N, F, C);
            linear_bwd(dx, dwl + o_fc, y, x, wl + o_fc, N, C, UP);
            linear_bwd(dx, dwl + o_proj, y, x, wl + o_proj, N, C, C);
            linear_bwd(dx, dwl, y, x, wl, N, C, QKV);
        }
        if (r >= 0) times[r] = ct_time_s() - t0;
    }
    double per_layer_flops = 6.0 * N * (double)per_layer;
    *flops = L * per_layer_flops + 6.0 * N * (double)V * C;
    free(w), free(dw), free(x), free(y), free(dx), free(logits);
    return CT_OK;
}
