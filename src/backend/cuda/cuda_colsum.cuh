/*
 * Column sums over N rows for the gradients of per-channel parameters (a
 * linear's bias, LayerNorm's and RMSNorm's weight and bias), in two passes
 * without atomics: pass 1 gives each of `chunks` consecutive row ranges a
 * block row, and each thread one column's double sum over its range; pass 2
 * adds the chunks' partials of a column in chunk order and adds the total, as
 * a float, to the gradient. The chunking depends on N alone, so every run
 * sums in the same order (deterministic, resume bit-exact). A thread per
 * column over all N rows (the first version) gave GPT-2's C = 768 six blocks
 * on a GPU of 132 multiprocessors, each walking 16384 rows; 64 chunks (the
 * second) 49152 threads of 256 rows each, a quarter of what an H100 holds at
 * once for a loop that waits on memory; now the chunks grow as C shrinks,
 * to about 2^18 threads (C = 768: 342 chunks of 48 rows).
 *
 * Device code only, included by cuda_kernels.cu and cuda_matmul.cu; like
 * cuda_attention_tiled.cuh it runs under tests/gpu/cuda_emu.cpp on the CPU.
 */
#ifndef CT_BACKEND_CUDA_COLSUM_CUH
#define CT_BACKEND_CUDA_COLSUM_CUH

#include <stddef.h>

#include "backend/cuda/cuda_store.cuh"
#include "backend/device.h"

#define COLSUM_THREADS 128

/* The row chunks of a column sum over N rows of C columns: about 2^18
 * threads in all, at least 64 chunks, at most N (the rule the memory plan
 * sizes the partials by, backend/device.h). */
static inline int colsum_chunks(int N, int C) { return ct_cuda_colsum_chunks(N, C); }

/* What a row adds to column c: dout (a bias), xhat * dout and dout
 * (LayerNorm's weight and bias), x * rstd * dout (RMSNorm's weight). The
 * terms are ref's, in double. */
enum { COLSUM_BIAS = 0, COLSUM_LAYERNORM = 1, COLSUM_RMSNORM = 2 };

/* Pass 1: grid (ceil(C / COLSUM_THREADS), chunks); part0 (and part1 for
 * LayerNorm's bias) (chunks, C). */
template <int KIND>
static __global__ void k_colsum_part(double *part0, double *part1, const float *dout, const float *inp,
                              const float *mean, const float *rstd, int N, int C, int chunks) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y;
    if (c >= C) return;
    int rows = (N + chunks - 1) / chunks;
    int n0 = k * rows, n1 = n0 + rows < N ? n0 + rows : N;
    double a = 0.0, b = 0.0;
    for (int n = n0; n < n1; n++) {
        size_t i = (size_t)n * C + c;
        if (KIND == COLSUM_BIAS) {
            a += dout[i];
        } else if (KIND == COLSUM_LAYERNORM) {
            double xhat = (inp[i] - (double)mean[n]) * rstd[n];
            a += xhat * dout[i];
            b += dout[i];
        } else {
            a += (double)inp[i] * rstd[n] * dout[i];
        }
    }
    part0[(size_t)k * C + c] = a;
    if (KIND == COLSUM_LAYERNORM) part1[(size_t)k * C + c] = b;
}

/* Pass 1 of a bias's column sum (COLSUM_BIAS's terms, order and partials)
 * that also writes the bf16 copy of every dout it reads into copy16 (N, C),
 * nearest even: the mixed-precision backward's GEMM operand, made in the same
 * read of dout as the bias gradient. */
static __global__ void k_colsum_bias_copy16(double *part0, __nv_bfloat16 *copy16,
                                            const float *dout, int N, int C, int chunks) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y;
    if (c >= C) return;
    int rows = (N + chunks - 1) / chunks;
    int n0 = k * rows, n1 = n0 + rows < N ? n0 + rows : N;
    double a = 0.0;
    for (int n = n0; n < n1; n++) {
        size_t i = (size_t)n * C + c;
        float v = dout[i];
        a += v;
        store_out(copy16 + i, v);
    }
    part0[(size_t)k * C + c] = a;
}

/* Pass 2: a thread per column; out1 and part1 may be NULL. */
static __global__ void k_colsum_add(float *out0, float *out1, const double *part0, const double *part1,
                             int C, int chunks) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double a = 0.0, b = 0.0;
    for (int k = 0; k < chunks; k++) {
        a += part0[(size_t)k * C + c];
        if (out1) b += part1[(size_t)k * C + c];
    }
    out0[c] += (float)a;
    if (out1) out1[c] += (float)b;
}

#endif
