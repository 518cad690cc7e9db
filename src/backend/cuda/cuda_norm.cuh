/*
 * The row body of the CUDA LayerNorm and RMSNorm forwards, with or without
 * the residual add in front (res = a + b, then the norm of res): one block
 * per row, each thread holding its columns c = threadIdx.x + k * blockDim.x
 * (in dynamic shared memory when the row fits, else read back from global
 * memory, where this thread itself put them), every statistic in fp32.
 * LayerNorm takes the mean first and then the variance as a second pass over
 * the held values (no E[x^2] - E[x]^2 cancellation). The block sums run in a
 * fixed order, so runs are deterministic, and the fused and unfused entries
 * run this one body: the same values summed the same way, so fused equals
 * residual_forward then the norm bit for bit (the training backward's
 * recomputed norms match the forward's). Against ref's double statistics the
 * results differ by fp32 rounding only.
 *
 * The input gradients of both norms (norm_bwd_row) are the same kind of
 * body: a block per row, each thread's fp32 partials of the row means that
 * couple the row (mean(g), mean(g xhat)) combined by norm_block_sum in its
 * fixed order, no atomics, where they were double sums before (fp64 runs
 * at 1/32 to 1/64 of fp32 on most GPUs; PyTorch's CUDA norm backwards sum
 * in fp32 too). Against ref's double sums the results differ by fp32
 * rounding of the row's largest terms.
 *
 * Device code only, included by cuda_kernels.cu; like cuda_colsum.cuh it
 * runs under tests/gpu/cuda_emu.cpp on the CPU. Leaves out: vectorised
 * 128-bit loads and a warp per row for narrow rows.
 */
#ifndef CT_BACKEND_CUDA_NORM_CUH
#define CT_BACKEND_CUDA_NORM_CUH

#include <stddef.h>

#include "backend/cuda/cuda_store.cuh"

#define NORM_THREADS 256
/* a row is held in dynamic shared memory up to this size: C <= 12032. A
 * block may use 48 KiB without opting in, static and dynamic together, and
 * norm_row's own sh[32] (128 bytes) is static: a held row of the full 48 KiB
 * (C = 12288) would fail to launch. 1 KiB is left to the static part. */
#define NORM_HELD_MAX_BYTES (47 * 1024)
static_assert(NORM_HELD_MAX_BYTES + 32 * sizeof(float) <= 48 * 1024,
              "a held row and norm_row's static shared memory exceed 48 KiB");

/* The sum of x over the block (blockDim.x a multiple of 32, at most 1024),
 * in a fixed order; every thread gets it. sh: 32 floats of shared memory. */
__device__ inline float norm_block_sum(float x, float *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    __syncthreads(); /* sh may hold the previous sum's partials */
    if (lane == 0) sh[warp] = x;
    __syncthreads();
    float t = lane < nw ? sh[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    return t;
}

/* Row blockIdx.x of C columns. LN: LayerNorm (weight, bias; mean and rstd
 * written unless NULL), else RMSNorm (scale wofs + weight; rstd unless
 * NULL). ADD: x = a + b is written to res (which may alias a or b) and
 * normalised; else x = a (inp; an fp32 out may alias it). held: C floats of
 * shared memory for the row, or NULL to read it back from res or inp. Y:
 * the output's type, float or __nv_bfloat16 (the fp32 value rounded: the
 * same bits as rounding the fp32 output afterwards). */
template <bool LN, bool ADD, typename Y = float>
__device__ void norm_row(float *held, float *res, Y *out, float *mean, float *rstd,
                         const float *a, const float *b, const float *weight,
                         const float *bias, int C, float eps, float wofs) {
    __shared__ float sh[32];
    size_t n = blockIdx.x, o = n * (size_t)C;
    const float *x = ADD ? res + o : a + o; /* where the row is when not held */
    float *r = ADD ? res + o : NULL;
    Y *y = out + o;
    int t0 = threadIdx.x, dt = blockDim.x;
    /* pass 1: the row (made by the add), its sum or its sum of squares */
    float s = 0.0f;
    for (int c = t0; c < C; c += dt) {
        float v = ADD ? a[o + c] + b[o + c] : x[c];
        if (ADD) r[c] = v;
        if (held) held[c] = v;
        s += LN ? v : v * v;
    }
    s = norm_block_sum(s, sh);
    const float *h = held ? held : x; /* each thread reads back its own columns */
    float mu = 0.0f, rs;
    if (LN) {
        mu = s / (float)C;
        /* pass 2: the variance about the mean */
        float ss = 0.0f;
        for (int c = t0; c < C; c += dt) {
            float d = h[c] - mu;
            ss += d * d;
        }
        rs = 1.0f / sqrtf(norm_block_sum(ss, sh) / (float)C + eps);
    } else {
        rs = 1.0f / sqrtf(s / (float)C + eps);
    }
    /* pass 3: scale (and shift) */
    for (int c = t0; c < C; c += dt)
        store_out(y + c,
                 LN ? (h[c] - mu) * rs * weight[c] + bias[c] : h[c] * rs * (wofs + weight[c]));
    if (t0 == 0) {
        if (LN && mean) mean[n] = mu;
        if (rstd) rstd[n] = rs;
    }
}

/* Input gradient of row blockIdx.x of C columns, ADDED into dinp (the
 * caller zeroes it): with xhat = (x - mean) rstd and g = w dout,
 *   dinp += rstd (g - mean(g) - xhat mean(g xhat))      LN: LayerNorm,
 *   dinp += rstd (g - xhat mean(g xhat))                RMSNorm, mean unused,
 * w = weight (LayerNorm) or wofs + weight (RMSNorm). mean, rstd (N) as the
 * forward wrote them. dinp may not alias dout or inp. */
template <bool LN>
__device__ void norm_bwd_row(float *dinp, const float *dout, const float *inp,
                             const float *weight, const float *mean, const float *rstd, int C,
                             float wofs) {
    __shared__ float sh[32];
    size_t n = blockIdx.x, o = n * (size_t)C;
    const float *x = inp + o, *dy = dout + o;
    float *dx = dinp + o;
    int t0 = threadIdx.x, dt = blockDim.x;
    float mu = LN ? mean[n] : 0.0f, s = rstd[n];
    float gm = 0.0f, gxm = 0.0f;
    for (int c = t0; c < C; c += dt) {
        float g = (LN ? weight[c] : wofs + weight[c]) * dy[c];
        gm += g;
        gxm += g * ((x[c] - mu) * s);
    }
    if (LN) gm = norm_block_sum(gm, sh) / (float)C;
    gxm = norm_block_sum(gxm, sh) / (float)C;
    for (int c = t0; c < C; c += dt) {
        float g = (LN ? weight[c] : wofs + weight[c]) * dy[c];
        float xhat = (x[c] - mu) * s;
        dx[c] += s * (LN ? g - gm - xhat * gxm : g - xhat * gxm);
    }
}

#endif
