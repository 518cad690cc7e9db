/*
 * The CUDA backend's tiled attention kernels (src/backend/cuda/
 * cuda_attention_tiled.cuh) and its column sums (cuda_colsum.cuh) run on the
 * CPU: each CUDA thread of a block is a
 * POSIX thread, __shared__ arrays are the kernel's statics (one block runs at
 * a time), __syncthreads is a barrier. That checks what can go wrong without
 * a GPU in sight — the index arithmetic, the causal and packed-row masks, the
 * tile loops and their ragged ends, the barriers' placement (a thread that
 * skips one deadlocks here) — against a double-precision reference of the
 * forward (out, lse) and backward (dq, dk, dv, accumulated onto what dqkv
 * held), for GQA and MHA, head sizes 32 and 64, packed rows. It does not check
 * what only a GPU shows (timing, memory coalescing, launch limits): the gpu_*
 * tests do that on one. The column sums (a bias's, LayerNorm's and RMSNorm's
 * parameter gradients) are checked against one double sum over the rows, as
 * ref sums them, for row counts around the chunk count.
 *
 * usage: cuda_emu   (exit 0: every check passed)
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

/* ------------------------------------------------------------ the CUDA shim */
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct float4 {
    float x, y, z, w;
};
static inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
static thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;
static pthread_barrier_t g_bar;
static inline void __syncthreads() { pthread_barrier_wait(&g_bar); }
using std::max;
using std::min;
#define __global__
#define __device__
#define __launch_bounds__(n)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

#include "backend/cuda/cuda_attention_tiled.cuh"
#include "backend/cuda/cuda_colsum.cuh"

/* Runs kernel over grid x block, one block at a time, a thread per CUDA thread. */
template <typename F> static void launch(dim3 grid, unsigned block, F kernel) {
    gridDim = grid;
    blockDim = dim3(block);
    pthread_barrier_init(&g_bar, NULL, block);
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                std::vector<pthread_t> th(block);
                struct arg {
                    F *k;
                    dim3 b;
                    unsigned t;
                };
                std::vector<arg> args(block);
                for (unsigned t = 0; t < block; t++) {
                    args[t] = {&kernel, dim3(x, y, z), t};
                    pthread_create(&th[t], NULL,
                                   [](void *p) -> void * {
                                       arg *a = (arg *)p;
                                       blockIdx = a->b;
                                       threadIdx = dim3(a->t);
                                       (*a->k)();
                                       return NULL;
                                   },
                                   &args[t]);
                }
                for (unsigned t = 0; t < block; t++) pthread_join(th[t], NULL);
            }
    pthread_barrier_destroy(&g_bar);
}

/* ------------------------------------------------------------ the reference */
static int fails = 0;
static double rng_state = 0.5;
static float frand() { /* deterministic, in [-1, 1) */
    rng_state = fmod(rng_state * 9301.0 + 49297.0, 233280.0);
    return (float)(rng_state / 116640.0 - 1.0);
}

struct shape {
    int B, T, NH, NKV, HS;
    std::vector<int> lens; /* packed example lengths (cycled), empty: none */
};

/* pos[b*T + t]: t's position in its example. */
static std::vector<int32_t> positions(const shape &s) {
    std::vector<int32_t> pos((size_t)s.B * s.T);
    size_t k = 0;
    for (int b = 0; b < s.B; b++) {
        int p = 0, len = s.lens[k++ % s.lens.size()];
        for (int t = 0; t < s.T; t++) {
            if (p == len) p = 0, len = s.lens[k++ % s.lens.size()];
            pos[(size_t)b * s.T + t] = p++;
        }
    }
    return pos;
}

/* Forward and backward in double: out, lse, and dqkv = dL/dqkv for L = sum(out * R). */
static void reference(const shape &s, const float *qkv, const int32_t *pos, const float *R,
                      std::vector<double> &out, std::vector<double> &lse,
                      std::vector<double> &dqkv) {
    int B = s.B, T = s.T, NH = s.NH, NKV = s.NKV, HS = s.HS;
    size_t C = (size_t)NH * HS, W = (size_t)(NH + 2 * NKV) * HS, KC = (size_t)NKV * HS;
    double scale = 1.0 / sqrt((double)HS);
    out.assign((size_t)B * T * C, 0.0);
    lse.assign((size_t)B * NH * T, 0.0);
    dqkv.assign((size_t)B * T * W, 0.0);
    std::vector<double> p(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int g = h / (NH / NKV);
            for (int i = 0; i < T; i++) {
                int j0 = pos ? i - pos[(size_t)b * T + i] : 0;
                const float *q = qkv + ((size_t)b * T + i) * W + (size_t)h * HS;
                double m = -INFINITY;
                for (int j = j0; j <= i; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * W + C + (size_t)g * HS;
                    double d = 0;
                    for (int e = 0; e < HS; e++) d += (double)q[e] * k[e];
                    p[j] = d * scale;
                    m = std::max(m, p[j]);
                }
                double l = 0;
                for (int j = j0; j <= i; j++) l += (p[j] = exp(p[j] - m));
                for (int j = j0; j <= i; j++) p[j] /= l;
                lse[((size_t)b * NH + h) * T + i] = m + log(l);
                double *o = &out[((size_t)b * T + i) * C + (size_t)h * HS];
                const float *r = R + ((size_t)b * T + i) * C + (size_t)h * HS;
                double D = 0;
                for (int j = j0; j <= i; j++) {
                    const float *v = qkv + ((size_t)b * T + j) * W + C + KC + (size_t)g * HS;
                    for (int e = 0; e < HS; e++) o[e] += p[j] * v[e];
                }
                for (int e = 0; e < HS; e++) D += o[e] * r[e];
                for (int j = j0; j <= i; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * W + C + (size_t)g * HS;
                    const float *v = k + KC;
                    double *dk = &dqkv[((size_t)b * T + j) * W + C + (size_t)g * HS];
                    double *dv = dk + KC;
                    double *dq = &dqkv[((size_t)b * T + i) * W + (size_t)h * HS];
                    double dp = 0;
                    for (int e = 0; e < HS; e++) dp += (double)r[e] * v[e];
                    double ds = p[j] * (dp - D) * scale;
                    for (int e = 0; e < HS; e++) {
                        dv[e] += p[j] * r[e];
                        dk[e] += ds * q[e];
                        dq[e] += ds * k[e];
                    }
                }
            }
        }
}

/* max |got - want| / max |want| */
static double err(const float *got, const std::vector<double> &want, double pre = 0.0) {
    double e = 0, m = 0;
    for (size_t k = 0; k < want.size(); k++) {
        double g = (double)got[k] - pre;
        if (!(fabs(g - want[k]) <= e)) e = isnan(g) ? INFINITY : fabs(g - want[k]);
        m = std::max(m, fabs(want[k]));
    }
    return e / (m > 0 ? m : 1);
}

template <int HS> static void check(const shape &s) {
    int B = s.B, T = s.T, NH = s.NH, NKV = s.NKV;
    size_t C = (size_t)NH * HS, W = (size_t)(NH + 2 * NKV) * HS;
    std::vector<float> qkv((size_t)B * T * W), R((size_t)B * T * C);
    for (auto &x : qkv) x = 2.0f * frand();
    for (auto &x : R) x = frand();
    std::vector<int32_t> pos;
    if (!s.lens.empty()) pos = positions(s);
    const int32_t *pp = pos.empty() ? NULL : pos.data();
    std::vector<double> out_d, lse_d, dqkv_d;
    reference(s, qkv.data(), pp, R.data(), out_d, lse_d, dqkv_d);

    std::vector<float> out((size_t)B * T * C, NAN), lse((size_t)B * NH * T, NAN);
    float *o = out.data(), *ls = lse.data();
    const float *x = qkv.data();
    launch(dim3((T + TILE_ROWS - 1) / TILE_ROWS, NH, B), TILE_ROWS,
           [=]() { k_attn_fwd_tiled<HS>(o, ls, x, pp, T, NH, NKV); });
    /* the backward reads the forward's outputs, as the backend does; D from them */
    std::vector<double> D((size_t)B * NH * T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                double d = 0;
                for (int e = 0; e < HS; e++) {
                    size_t k = ((size_t)b * T + i) * C + (size_t)h * HS + e;
                    d += (double)R[k] * out[k];
                }
                D[((size_t)b * NH + h) * T + i] = d;
            }
    const float pre = 0.25f; /* dqkv accumulates onto what it held */
    std::vector<float> dqkv((size_t)B * T * W, pre);
    float *dx = dqkv.data();
    const float *r = R.data();
    const double *dd = D.data();
    launch(dim3((T + TILE_ROWS - 1) / TILE_ROWS, NH, B), TILE_ROWS,
           [=]() { k_attn_dq_tiled<HS>(dx, r, x, ls, dd, pp, T, NH, NKV); });
    launch(dim3((T + DKV_ROWS - 1) / DKV_ROWS, NKV, B), DKV_ROWS,
           [=]() { k_attn_dkv_tiled<HS>(dx, r, x, ls, dd, pp, T, NH, NKV); });

    double e_out = err(out.data(), out_d), e_lse = err(lse.data(), lse_d);
    double e_dq = err(dqkv.data(), dqkv_d, pre);
    bool ok = e_out < 2e-6 && e_lse < 2e-6 && e_dq < 2e-5;
    printf("%s B=%d T=%d NH=%d NKV=%d HS=%d%s: out %.2g, lse %.2g, dqkv %.2g\n",
           ok ? "ok  " : "FAIL", B, T, NH, NKV, HS, pp ? " packed" : "", e_out, e_lse, e_dq);
    fails += !ok;
}

/* The two-pass column sums of one kind against ref's terms summed in double. */
static void check_colsum(int kind, int N, int C) {
    std::vector<float> dout((size_t)N * C), inp((size_t)N * C), mean(N), rstd(N);
    for (auto &x : dout) x = frand();
    for (auto &x : inp) x = 3.0f * frand();
    for (auto &x : mean) x = frand();
    for (auto &x : rstd) x = 1.5f + frand();
    std::vector<double> w0(C, 0.0), w1(C, 0.0);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)n * C + c;
            if (kind == COLSUM_BIAS) {
                w0[c] += dout[i];
            } else if (kind == COLSUM_LAYERNORM) {
                w0[c] += (inp[i] - (double)mean[n]) * rstd[n] * dout[i];
                w1[c] += dout[i];
            } else {
                w0[c] += (double)inp[i] * rstd[n] * dout[i];
            }
        }
    int chunks = colsum_chunks(N);
    std::vector<double> p0((size_t)chunks * C, NAN), p1((size_t)chunks * C, NAN);
    const float pre = 0.5f;
    std::vector<float> o0(C, pre), o1(C, pre);
    double *a = p0.data(), *b = p1.data();
    const float *d = dout.data(), *x = inp.data(), *m = mean.data(), *r = rstd.data();
    float *q0 = o0.data(), *q1 = o1.data();
    dim3 grid((C + COLSUM_THREADS - 1) / COLSUM_THREADS, chunks);
    if (kind == COLSUM_BIAS)
        launch(grid, COLSUM_THREADS, [=]() {
            k_colsum_part<COLSUM_BIAS>(a, NULL, d, NULL, NULL, NULL, N, C, chunks); });
    else if (kind == COLSUM_LAYERNORM)
        launch(grid, COLSUM_THREADS, [=]() {
            k_colsum_part<COLSUM_LAYERNORM>(a, b, d, x, m, r, N, C, chunks); });
    else
        launch(grid, COLSUM_THREADS, [=]() {
            k_colsum_part<COLSUM_RMSNORM>(a, NULL, d, x, NULL, r, N, C, chunks); });
    bool two = kind == COLSUM_LAYERNORM;
    launch(dim3(grid.x), COLSUM_THREADS,
           [=]() { k_colsum_add(q0, two ? q1 : NULL, a, b, C, chunks); });
    double e = err(o0.data(), w0, pre), e1 = two ? err(o1.data(), w1, pre) : 0.0;
    bool untouched = two || std::all_of(o1.begin(), o1.end(), [=](float v) { return v == pre; });
    bool ok = e < 1e-6 && e1 < 1e-6 && untouched;
    printf("%s column sums kind %d N=%d C=%d (%d chunks): %.2g %.2g\n", ok ? "ok  " : "FAIL", kind,
           N, C, chunks, e, e1);
    fails += !ok;
}

int main(void) {
    check<64>({2, 150, 4, 2, 64, {}});                // GQA, ragged last tiles
    check<64>({1, 64, 2, 2, 64, {}});                 // exactly one query tile
    check<32>({1, 97, 4, 1, 32, {}});                 // multi-query
    check<64>({2, 130, 2, 2, 64, {1, 40, 3, 70, 17}}); // packed: key tiles skipped, length 1
    check<32>({3, 70, 4, 2, 32, {3, 1, 17, 1, 1, 9, 30}});
    check<32>({1, 5, 1, 1, 32, {}});                  // fewer rows than a tile
    const int rows[] = {1, 5, 63, 64, 65, 1000};
    for (int kind = 0; kind < 3; kind++)
        for (int n : rows) check_colsum(kind, n, n == 1000 ? 130 : 7);
    check_colsum(COLSUM_LAYERNORM, 300, 1);
    printf("%d failure(s)\n", fails);
    return fails ? 1 : 0;
}
