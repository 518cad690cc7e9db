/*
 * The embedding's forward and the residual adds of the CUDA backend
 * (launched by cuda_kernels.cu): grid-stride loops, one element a thread.
 * Device code only; it runs under tests/gpu/cuda_emu.cpp on the CPU too,
 * held to ref's kernels (positions given or not, an offset, no wpe).
 */
#ifndef CT_BACKEND_CUDA_ELEMENTWISE_CUH
#define CT_BACKEND_CUDA_ELEMENTWISE_CUH

#include <stddef.h>
#include <stdint.h>

/* An element of the token table: fp32, or bf16 widened exactly. */
__device__ inline float enc_w(const float *w, size_t i) { return w[i]; }
__device__ inline float enc_w(const uint16_t *w, size_t i) {
    return __uint_as_float((uint32_t)w[i] << 16);
}

/* out (B,T,C) = wte[inp] + wpe[pos0 + (pos ? pos : t)]; wpe may be NULL; wte
 * fp32 or bf16 (W = uint16_t: a bf16 LoRA base's table, rows widened as read). */
template <typename W>
__global__ void k_encoder_fwd(float *out, const int32_t *inp, const W *wte, const float *wpe,
                              const int32_t *pos, int B, int T, int C, int pos0) {
    size_t n = (size_t)B * T * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t bt = i / C;
        int c = (int)(i % C), t = (int)(bt % T);
        float v = enc_w(wte, (size_t)inp[bt] * C + c);
        if (wpe) {
            int p = pos ? pos[bt] : t;
            v = v + wpe[(size_t)(pos0 + p) * C + c];
        }
        out[i] = v;
    }
}

/* out = a + b; and its backward, da += dout, db += dout. */
__global__ void k_residual_fwd(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}
__global__ void k_residual_bwd(float *da, float *db, const float *dout, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float g = dout[i];
        da[i] += g;
        db[i] += g;
    }
}

#endif
