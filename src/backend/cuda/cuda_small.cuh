/*
 * The CUDA backend's small kernels (launched by cuda_core.cu): the bf16
 * conversions (core/dtype.c's rounding), scale and fill, the sum and sum of squares in double partials of a fixed
 * grid, the non-finite count, dropout's masks and fused AdamW with ref's
 * float arithmetic (adamw_scalars_of forms its scalars on the host as
 * ref/adamw.c does). Device code only; it runs under tests/gpu/cuda_emu.cpp
 * on the CPU too, held to ref's kernels (AdamW bit for bit).
 */
#ifndef CT_BACKEND_CUDA_SMALL_CUH
#define CT_BACKEND_CUDA_SMALL_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h" /* the dropout masks */
#include "backend/cuda/cuda_reduce.cuh"

/* ------------------------------------------------- bf16, elementwise, reductions, dropout, AdamW */

/* fp32 -> bf16 bits, nearest even, NaN kept quiet: core/dtype.c's rounding. */
__device__ inline uint16_t f32_to_bf16_rne(float f) {
    uint32_t u = __float_as_uint(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x0040u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

/* Four values a thread-step (16 bytes read, 8 written) where n is a multiple
 * of 4 and src, dst start on 16- and 8-byte boundaries; else one by one.
 * The same bits either way. */
__global__ void k_f32_to_bf16(uint16_t *dst, const float *src, size_t n) {
    size_t t0 = blockIdx.x * (size_t)blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
    if (n % 4 == 0 && !((uintptr_t)src & 15) && !((uintptr_t)dst & 7)) {
        for (size_t i = t0; i < n / 4; i += step) {
            float4 x = ((const float4 *)src)[i];
            uint2 y;
            y.x = (uint32_t)f32_to_bf16_rne(x.x) | (uint32_t)f32_to_bf16_rne(x.y) << 16;
            y.y = (uint32_t)f32_to_bf16_rne(x.z) | (uint32_t)f32_to_bf16_rne(x.w) << 16;
            ((uint2 *)dst)[i] = y;
        }
        return;
    }
    for (size_t i = t0; i < n; i += step) dst[i] = f32_to_bf16_rne(src[i]);
}
__global__ void k_bf16_to_f32(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __uint_as_float((uint32_t)src[i] << 16);
}

__global__ void k_scale_add(float *y, int ldy, const float *x, int ldx, int rows, int cols,
                            float a, bool accumulate) {
    size_t n = (size_t)rows * cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / cols, c = i % cols;
        float v = a * x[r * ldx + c];
        if (accumulate) y[r * ldy + c] += v;
        else y[r * ldy + c] = v;
    }
}
__global__ void k_fill(float *x, float value, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = value;
}
__global__ void k_scale(float *x, float a, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] *= a;
}
/* partial[b] = sum over the b-th contiguous chunk of x (or of x^2), in
 * double, in a fixed order: thread i of the block sums its strided elements,
 * then the block tree. */
__global__ void k_sum_partials(double *partial, const float *x, size_t n, bool squares) {
    __shared__ double sh[32];
    size_t chunk = (n + gridDim.x - 1) / gridDim.x;
    size_t lo = blockIdx.x * chunk, hi = lo + chunk < n ? lo + chunk : n;
    double acc = 0.0;
    for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        double v = x[i];
        acc += squares ? v * v : v;
    }
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}
/* *dst += the nblocks partials in block order (the order reduce() adds them
 * on the host): a sum kept on the device for the step's one read. */
__global__ void k_sum_finish(double *dst, const double *partial, int nblocks) {
    double acc = 0.0;
    for (int b = 0; b < nblocks; b++) acc += partial[b];
    *dst += acc;
}
/* *count += the non-finite values of x (integer adds: any order). */
__global__ void k_nonfinite(unsigned long long *count, const float *x, size_t n) {
    unsigned long long bad = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        bad += !isfinite(x[i]);
    bad = warp_sum(bad);
    /* a count: the order of integer additions changes nothing */
    if ((threadIdx.x & 31) == 0 && bad) atomicAdd(count, bad);
}
/* Dropout with backend.h's counter-based masks: element offset + i of the
 * call's key is kept (scaled by inv) when its hash clears thr. */
__global__ void k_dropout_fwd(float *out, const float *inp, size_t n, float inv, uint32_t thr,
                              uint64_t key, uint64_t offset) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = ct_dropout_keep_t(key, offset + i, thr) ? inp[i] * inv : 0.0f;
}
__global__ void k_dropout_bwd(float *dinp, const float *dout, size_t n, float inv, uint32_t thr,
                              uint64_t key, uint64_t offset) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        if (ct_dropout_keep_t(key, offset + i, thr)) dinp[i] += dout[i] * inv;
}

/* AdamW's per-step scalars, formed in double and rounded to float once, as
 * ref/adamw.c forms them (torch passes Python floats into float ops). */
typedef struct adamw_scalars {
    float decay, one_minus_b1, one_minus_b2, step_size, bc2_sqrt;
} adamw_scalars;
static inline adamw_scalars adamw_scalars_of(float lr, float beta1, float beta2,
                                             float weight_decay, int64_t t) {
    double bc1 = 1.0 - pow((double)beta1, (double)t);
    double bc2 = 1.0 - pow((double)beta2, (double)t);
    adamw_scalars a;
    a.decay = (float)(1.0 - (double)lr * weight_decay);
    a.one_minus_b1 = (float)(1.0 - beta1);
    a.one_minus_b2 = (float)(1.0 - beta2);
    a.step_size = (float)(lr / bc1);
    a.bc2_sqrt = (float)sqrt(bc2);
    return a;
}

/* ref/adamw.c's float arithmetic element by element (no FMA contraction:
 * __fmul_rn and __fadd_rn keep each rounding where the C code has it). */
__global__ void k_adamw(float *params, const float *grads, float *m, float *v, size_t n,
                        float beta1, float beta2, float eps, float grad_scale, adamw_scalars a) {
    float decay = a.decay, one_minus_b1 = a.one_minus_b1, one_minus_b2 = a.one_minus_b2;
    float step_size = a.step_size, bc2_sqrt = a.bc2_sqrt;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float g = __fmul_rn(grads[i], grad_scale);
        float p = __fmul_rn(params[i], decay);
        float mi = __fadd_rn(__fmul_rn(m[i], beta1), __fmul_rn(one_minus_b1, g));
        float vi = __fadd_rn(__fmul_rn(v[i], beta2), __fmul_rn(__fmul_rn(one_minus_b2, g), g));
        float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
        params[i] = __fadd_rn(p, __fmul_rn(-step_size, __fdiv_rn(mi, denom)));
        m[i] = mi;
        v[i] = vi;
    }
}

#endif
