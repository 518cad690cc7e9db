/*
 * The CUDA backend's dense layers through cuBLAS. A row-major (R,K) matrix
 * is the column-major (K,R) one, its transpose, so every call is the
 * transposed product in column-major terms: out^T (OC,N) = W^T-view^T (OC,C)
 * x inp^T (C,N), and so on; no copies, the transposes are flags. fp32 runs in fp32 (cuBLAS's default math mode:
 * no TF32), for parity with PyTorch with TF32 off. Mixed precision (train.precision=bf16)
 * rounds the fp32 operand into a bf16 workspace and calls cublasGemmEx with
 * bf16 inputs, fp32 compute and fp32 output (tensor cores). The bias is fused
 * by pre-filling the output and beta = 1, as the cpu backend does; its
 * gradient is a column sum in double, one thread per column. Leaves out:
 * cuBLASLt epilogues (bias, GELU) and bf16 outputs, for the GPU performance
 * work.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_colsum.cuh"
#include "backend/cuda/cuda_common.cuh"

static cublasHandle_t handle(ct_backend *be) { return (cublasHandle_t)cuda_st(be)->cublas; }

static void blas_ok(ct_backend *be, cublasStatus_t s, const char *what) {
    if (s != CUBLAS_STATUS_SUCCESS) cuda_latch(be, 1000 + (int)s, what, "cuBLAS error");
    else cuda_launched(be, what);
}

__global__ void k_bias_rows(float *out, const float *bias, int N, int OC) {
    size_t n = (size_t)N * OC;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = bias[i % OC];
}
/* out (N,OC) = bias rows, or untouched; returns the beta to use. */
static float prefill_bias(ct_backend *be, float *out, const float *bias, int N, int OC) {
    if (!bias) return 0.0f;
    k_bias_rows<<<cuda_grid((size_t)N * OC, 256), 256, 0, cuda_stream(be)>>>(out, bias, N, OC);
    cuda_launched(be, "matmul bias");
    return 1.0f;
}

static void dbias_add(ct_backend *be, float *dbias, const float *dout, int N, int OC) {
    cuda_colsum(be, COLSUM_BIAS, dbias, NULL, dout, NULL, NULL, NULL, N, OC);
}

extern "C" void ct_matmul_forward_cuda(ct_backend *be, float *out, const float *inp,
                                       const float *weight, const float *bias, int N, int C,
                                       int OC) {
    if (N <= 0 || OC <= 0) return;
    float one = 1.0f, beta = prefill_bias(be, out, bias, N, OC);
    if (C <= 0) {
        if (!bias) cuda_ok(be, cudaMemsetAsync(out, 0, (size_t)N * OC * 4, cuda_stream(be)),
                           "matmul");
        return;
    }
    /* out^T (OC,N) = W^T-view: W row-major (OC,C) is column-major (C,OC) */
    blas_ok(be, cuda_blas(be)->sgemm(handle(be), CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, weight, C, inp,
                            C, &beta, out, OC),
            "matmul_forward");
}

extern "C" void ct_matmul_backward_cuda(ct_backend *be, float *dinp, float *dweight, float *dbias,
                                        const float *dout, const float *inp, const float *weight,
                                        int N, int C, int OC) {
    /* C == 0: no products, but dbias still sums dout's columns, as ref's does */
    if (N <= 0 || OC <= 0) return;
    float one = 1.0f;
    if (dinp && C > 0) /* dinp^T (C,N) += W-view (C,OC) x dout^T (OC,N) */
        blas_ok(be, cuda_blas(be)->sgemm(handle(be), CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, weight, C,
                                dout, OC, &one, dinp, C),
                "matmul_backward dinp");
    if (dweight && C > 0) /* dW^T (C,OC) += inp^T (C,N) x dout (N,OC) */
        blas_ok(be, cuda_blas(be)->sgemm(handle(be), CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, C, dout,
                                OC, &one, dweight, C),
                "matmul_backward dweight");
    if (dbias) dbias_add(be, dbias, dout, N, OC);
}

/* A bf16 copy of x (n) in the backend's workspace (grown when too small; the
 * step's shapes repeat, so it settles after the first step). */
static const uint16_t *bf16_operand(ct_backend *be, const float *x, size_t n) {
    cuda_state *s = cuda_st(be);
    if (!cuda_workspace(be, &s->ws, &s->ws_bytes, n * sizeof(uint16_t), "bf16 GEMM workspace"))
        return NULL;
    ct_f32_to_bf16_cuda(be, (uint16_t *)s->ws, x, n);
    return (const uint16_t *)s->ws;
}

static void gemm_bf16(ct_backend *be, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                      int k, const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                      float *Cm, int ldc, const char *what) {
    float one = 1.0f;
    blas_ok(be, cuda_blas(be)->gemm_ex(handle(be), ta, tb, m, n, k, &one, A, CUDA_R_16BF, lda, B,
                             CUDA_R_16BF, ldb, &beta, Cm, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT),
            what);
}

extern "C" void ct_matmul_forward_bf16_cuda(ct_backend *be, float *out, const float *inp,
                                            const uint16_t *weight16, const float *bias, int N,
                                            int C, int OC) {
    if (N <= 0 || OC <= 0) return;
    float beta = prefill_bias(be, out, bias, N, OC);
    if (C <= 0) {
        if (!bias) cuda_ok(be, cudaMemsetAsync(out, 0, (size_t)N * OC * 4, cuda_stream(be)),
                           "matmul");
        return;
    }
    const uint16_t *x16 = bf16_operand(be, inp, (size_t)N * C);
    if (!x16) return;
    gemm_bf16(be, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight16, C, x16, C, beta, out, OC,
              "matmul_forward_bf16");
}

extern "C" void ct_matmul_backward_bf16_cuda(ct_backend *be, float *dinp, float *dweight,
                                             float *dbias, const float *dout,
                                             const uint16_t *inp16, const uint16_t *weight16,
                                             int N, int C, int OC) {
    if (N <= 0 || OC <= 0) return; /* C == 0: dbias only, as ref */
    if ((dinp || dweight) && C > 0) {
        const uint16_t *d16 = bf16_operand(be, dout, (size_t)N * OC);
        if (!d16) return;
        if (dinp)
            gemm_bf16(be, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight16, C, d16, OC, 1.0f, dinp, C,
                      "matmul_backward_bf16 dinp");
        if (dweight)
            gemm_bf16(be, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp16, C, d16, OC, 1.0f, dweight,
                      C, "matmul_backward_bf16 dweight");
    }
    if (dbias) dbias_add(be, dbias, dout, N, OC);
}
