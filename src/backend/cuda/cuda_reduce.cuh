/*
 * Warp and block reductions of the CUDA kernels: shuffles in a fixed order,
 * so every sum is deterministic. Device code only, included by
 * cuda_common.cuh and cuda_small.cuh; it runs under tests/gpu/cuda_emu.cpp on
 * the CPU too (whose shuffles take floats, doubles and 64-bit integers).
 */
#ifndef CT_BACKEND_CUDA_REDUCE_CUH
#define CT_BACKEND_CUDA_REDUCE_CUH

#include <math.h>

template <typename T> __device__ inline T warp_sum(T x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ inline float warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
/* The sum of x over the block (blockDim.x a multiple of 32, at most 1024),
 * in a fixed order; every thread gets it. shared: 32 slots. */
template <typename T> __device__ inline T block_sum(T x, T *shared) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    x = warp_sum(x);
    __syncthreads(); /* shared may hold an earlier call's values */
    if (lane == 0) shared[warp] = x;
    __syncthreads();
    T t = lane < nw ? shared[lane] : (T)0;
    return warp_sum(t);
}
__device__ inline float block_max(float x, float *shared) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    x = warp_max(x);
    __syncthreads();
    if (lane == 0) shared[warp] = x;
    __syncthreads();
    float t = lane < nw ? shared[lane] : -INFINITY;
    return warp_max(t);
}

#endif
