/*
 * The CUDA q/k norms (Qwen3's and Gemma 3's per-head RMSNorm of the q and k
 * heads of the fused qkv rows): a warp per head for the forward and the
 * input gradient, each lane holding the columns c = lane + 32 k, the row
 * statistics (sum of squares; the backward's mean of g * xhat) in fp32,
 * summed across the warp by a butterfly of shuffles in a fixed order, as
 * the plain norms' (cuda_norm.cuh): deterministic, no atomics. fp64 runs at
 * 1/64 of fp32 on consumer and many datacenter GPUs; PyTorch's norms sum in
 * fp32 too. Against ref's double statistics the results differ by fp32
 * rounding only. The weight gradients are column sums over every row and
 * head, in double partials (rows in chunks, then the chunks in order, as
 * cuda_colsum.cuh does for the plain norms): they are memory-bound (3 flops a
 * loaded pair), so double costs nothing there, and it keeps them ref's sum
 * to double rounding.
 *
 * Device code only, included by cuda_kernels.cu; it runs under
 * tests/gpu/cuda_emu.cpp on the CPU. Leaves out: vectorised loads, several
 * heads per warp for HS < 32.
 */
#ifndef CT_BACKEND_CUDA_QKNORM_CUH
#define CT_BACKEND_CUDA_QKNORM_CUH

#include <stddef.h>

#define QK_WARPS 4 /* heads per block: a warp each; blockDim.x = 32 * QK_WARPS */

/* The sum of x over the warp, in a fixed order; every lane gets it. */
__device__ inline float qk_warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* Forward: head g = n * (NH + NKV) + h of row n (q heads h < NH, then k
 * heads), its HS values at n * W + h * HS, W = (NH + 2 NKV) HS:
 * out = x * rstd * (wofs + w), rstd = 1 / sqrt(mean(x^2) + eps), w = wq or
 * wk (HS); rstd (N, NH + NKV) written unless NULL. Grid
 * ceil(N (NH + NKV) / QK_WARPS) blocks. */
static __global__ void k_qknorm_fwd(float *out, float *rstd, const float *inp, const float *wq,
                                    const float *wk, int N, int NH, int NKV, int HS, float eps,
                                    float wofs) {
    int heads = NH + NKV, lane = threadIdx.x & 31;
    size_t g = (size_t)blockIdx.x * QK_WARPS + (threadIdx.x >> 5);
    if (g >= (size_t)N * heads) return; /* a whole warp leaves together */
    size_t n = g / heads;
    int h = (int)(g % heads);
    size_t off = n * (size_t)(NH + 2 * NKV) * HS + (size_t)h * HS;
    const float *x = inp + off, *w = h < NH ? wq : wk;
    float ss = 0.0f;
    for (int c = lane; c < HS; c += 32) ss += x[c] * x[c];
    float s = 1.0f / sqrtf(qk_warp_sum(ss) / (float)HS + eps);
    for (int c = lane; c < HS; c += 32) out[off + c] = x[c] * s * (wofs + w[c]);
    if (lane == 0 && rstd) rstd[g] = s;
}

/* The v heads of N rows copied from inp to out: a grid-stride loop over the
 * N * NKV * HS values. */
static __global__ void k_qknorm_copy_v(float *out, const float *inp, int N, int NH, int NKV,
                                       int HS) {
    size_t KC = (size_t)NKV * HS, n = (size_t)N * KC, W = (size_t)(NH + 2 * NKV) * HS;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        size_t i = (k / KC) * W + (size_t)(NH + NKV) * HS + k % KC;
        out[i] = inp[i];
    }
}

/* Weight gradients, pass 1: grid (ceil(HS / blockDim.x), chunks); thread c
 * sums column c of its chunk's rows, q heads into pq and k heads into pk
 * (chunks, HS), x * rstd * dout in double, rows then heads in order (ref's
 * terms and order). Pass 2 is cuda_colsum.cuh's k_colsum_add. */
static __global__ void k_qknorm_wgrad_part(double *pq, double *pk, const float *dout,
                                           const float *inp, const float *rstd, int N, int NH,
                                           int NKV, int HS, int chunks) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y, heads = NH + NKV;
    if (c >= HS) return;
    int rows = (N + chunks - 1) / chunks;
    int n0 = k * rows, n1 = n0 + rows < N ? n0 + rows : N;
    size_t W = (size_t)(NH + 2 * NKV) * HS;
    double a = 0.0, b = 0.0;
    for (int n = n0; n < n1; n++) {
        for (int h = 0; h < heads; h++) {
            size_t i = (size_t)n * W + (size_t)h * HS + c;
            double t = (double)inp[i] * rstd[(size_t)n * heads + h] * dout[i];
            if (h < NH)
                a += t;
            else
                b += t;
        }
    }
    pq[(size_t)k * HS + c] = a;
    pk[(size_t)k * HS + c] = b;
}

/* Input gradient, a warp per q or k head (as the forward): with
 * xhat = x * rstd and gw = (wofs + w) * dout,
 *   dinp = rstd * (gw - xhat * mean(gw * xhat)),
 * WRITTEN (not added); dinp may be dout: each lane reads its dy[c] before it
 * writes dx[c], and only its own columns. */
static __global__ void k_qknorm_bwd(float *dinp, const float *dout, const float *inp,
                                    const float *wq, const float *wk, const float *rstd, int N,
                                    int NH, int NKV, int HS, float wofs) {
    int heads = NH + NKV, lane = threadIdx.x & 31;
    size_t g = (size_t)blockIdx.x * QK_WARPS + (threadIdx.x >> 5);
    if (g >= (size_t)N * heads) return;
    size_t n = g / heads;
    int h = (int)(g % heads);
    size_t off = n * (size_t)(NH + 2 * NKV) * HS + (size_t)h * HS;
    const float *x = inp + off, *dy = dout + off, *w = h < NH ? wq : wk;
    float s = rstd[g], gxm = 0.0f;
    for (int c = lane; c < HS; c += 32) gxm += (wofs + w[c]) * dy[c] * (x[c] * s);
    gxm = qk_warp_sum(gxm) / (float)HS;
    for (int c = lane; c < HS; c += 32) {
        float xhat = x[c] * s;
        dinp[off + c] = s * ((wofs + w[c]) * dy[c] - xhat * gxm);
    }
}

#endif
