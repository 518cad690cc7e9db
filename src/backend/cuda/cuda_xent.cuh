/*
 * The softmax cross-entropy of the CUDA backend (crossentropy_forward), one
 * block of XENT_THREADS per row of logits: an online softmax (each thread
 * keeps the largest logit it has seen and the sum of exp(x - that largest),
 * rescaling the sum when the largest grows, as FlashAttention keeps a row), so
 * the log-sum-exp takes one pass over the row, then one pass writes the
 * gradient: two reads and a write of each row where the first version (a max
 * pass, a sum pass in double, the gradient pass) read it three times. fp32
 * throughout, as PyTorch's kernel on fp32 logits; the block combines its
 * threads' partials in a fixed order (deterministic, resume bit-exact).
 * The bf16 head's twin (crossentropy_forward_bf16) is the same body over bf16
 * logits in rows ld apart, widened to fp32 as they are read, its gradient
 * rounded to bf16 (nearest even) as it is written: fp32 math as above. Its
 * rows are read and written 16 bytes (8 logits) at a time where they start on
 * a 16-byte boundary (the head's padded rows do), the last V % 8 one by one;
 * each thread then takes runs of 8 consecutive logits, a fixed order too.
 * Leaves out: vectorised fp32 rows (V apart: 50257 floats is not a whole
 * number of 16-byte words).
 *
 * Device code only, included by cuda_kernels.cu; like cuda_colsum.cuh it runs
 * under tests/gpu/cuda_emu.cpp on the CPU (warp shuffles of floats only; the
 * emulation brings its own __nv_bfloat16).
 */
#ifndef CT_BACKEND_CUDA_XENT_CUH
#define CT_BACKEND_CUDA_XENT_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#ifdef __CUDACC__
#include <cuda_bf16.h>
#endif

#define XENT_THREADS 512

/* Adds logit x to a thread's running (largest m, sum s of exp(. - m)). */
__device__ inline void xent_push(float *m, float *s, float x) {
    if (x > *m) {
        *s = *s * expf(*m - x) + 1.0f; /* m = -inf at first: the old sum is 0 */
        *m = x;
    } else if (*m > -INFINITY) {
        *s += expf(x - *m); /* a NaN logit makes the sum NaN, as it should */
    }
}

/* The largest of v over the block (blockDim.x a multiple of 32), every thread
 * gets it; sh holds 32 floats. */
__device__ inline float xent_block_max(float v, float *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads(); /* sh may hold an earlier call's values */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* The sum of v over the block in a fixed order, every thread gets it. */
__device__ inline float xent_block_sum(float v, float *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The row's elements as fp32, and a gradient written back in the row's own
 * type: fp32 as it is, bf16 (the bf16 head) widened exactly and rounded to
 * nearest even. */
__device__ inline float xent_ld(const float *p) { return *p; }
__device__ inline float xent_ld(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ inline void xent_st(float *p, float v) { *p = v; }
__device__ inline void xent_st(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* Logits i8*8 .. i8*8+7 of a 16-byte aligned bf16 row, in one load; the
 * store rounds 8 floats into one 16-byte word. */
__device__ inline void xent_ld8(const __nv_bfloat16 *x, int i8, float *v) {
    uint4 u = ((const uint4 *)x)[i8];
    __nv_bfloat16 h[8];
    memcpy(h, &u, sizeof u);
    for (int k = 0; k < 8; k++) v[k] = __bfloat162float(h[k]);
}
__device__ inline void xent_st8(__nv_bfloat16 *x, int i8, const float *v) {
    __nv_bfloat16 h[8];
    for (int k = 0; k < 8; k++) h[k] = __float2bfloat16_rn(v[k]);
    uint4 u;
    memcpy(&u, h, sizeof u);
    ((uint4 *)x)[i8] = u;
}
/* Whether a row (and the gradient's) is read 8 logits at a time: bf16, both
 * on 16-byte boundaries. */
template <typename T>
__device__ inline bool xent_vec(const T *x, const T *dx) {
    return sizeof(T) == 2 && !((uintptr_t)x & 15) && !((uintptr_t)dx & 15);
}

/* Row blockIdx.x of logits (N, rows ld apart, V read): losses[n] = lse -
 * x[target]; with dlogits, dlogits[n] = (softmax - onehot(target)) * dloss
 * (may alias logits), columns V..ld-1 neither read nor written. A target
 * < 0: loss 0 and a zero gradient row. The math is fp32 whatever T is. */
template <typename T>
__device__ inline void xent_row(float *losses, T *dlogits, const T *logits, size_t ld,
                                const int32_t *targets, int V, float dloss) {
    __shared__ float sh[32];
    __shared__ float xt;
    size_t n = blockIdx.x;
    const T *x = logits + n * ld;
    T *dx = dlogits ? dlogits + n * ld : NULL;
    int32_t target = targets[n];
    if (target < 0) {
        if (threadIdx.x == 0) losses[n] = 0.0f;
        if (dx)
            for (int i = threadIdx.x; i < V; i += blockDim.x) xent_st(dx + i, 0.0f);
        return;
    }
    float m = -INFINITY, s = 0.0f;
    bool vec = xent_vec(x, dx);
    int V8 = vec ? V / 8 * 8 : 0; /* logits read 8 at a time; then one by one */
    if constexpr (sizeof(T) == 2) {
        for (int i8 = threadIdx.x; i8 < V8 / 8; i8 += blockDim.x) {
            float v[8];
            xent_ld8(x, i8, v);
            for (int k = 0; k < 8; k++) xent_push(&m, &s, v[k]);
        }
    }
    for (int i = V8 + threadIdx.x; i < V; i += blockDim.x) xent_push(&m, &s, xent_ld(x + i));
    float mx = xent_block_max(m, sh);
    /* each thread's sum brought to the row's largest logit, then summed */
    float lse = mx + logf(xent_block_sum(m > -INFINITY ? s * expf(m - mx) : 0.0f, sh));
    if (threadIdx.x == 0) xt = xent_ld(x + target);
    __syncthreads(); /* x[target] is read before any dx is written */
    if (threadIdx.x == 0) losses[n] = lse - xt;
    if (!dx) return;
    if constexpr (sizeof(T) == 2) {
        for (int i8 = threadIdx.x; i8 < V8 / 8; i8 += blockDim.x) {
            float v[8];
            xent_ld8(x, i8, v);
            for (int k = 0; k < 8; k++)
                v[k] = (expf(v[k] - lse) - (i8 * 8 + k == target ? 1.0f : 0.0f)) * dloss;
            xent_st8(dx, i8, v);
        }
    }
    for (int i = V8 + threadIdx.x; i < V; i += blockDim.x) {
        float p = expf(xent_ld(x + i) - lse);
        xent_st(dx + i, (p - (i == target ? 1.0f : 0.0f)) * dloss);
    }
}

/* fp32 logits (N,V) (crossentropy_forward). */
__global__ void k_crossentropy(float *losses, float *dlogits, const float *logits,
                               const int32_t *targets, int V, float dloss) {
    xent_row(losses, dlogits, logits, (size_t)V, targets, V, dloss);
}

/* bf16 logits16 (N, rows ld apart) and their bf16 gradient
 * (crossentropy_forward_bf16, the bf16 head). */
__global__ void k_crossentropy_bf16(float *losses, __nv_bfloat16 *dlogits16,
                                    const __nv_bfloat16 *logits16, int ld,
                                    const int32_t *targets, int V, float dloss) {
    xent_row(losses, dlogits16, logits16, (size_t)ld, targets, V, dloss);
}

#endif
