/*
 * Helpers of the CUDA sources: the stream, launch checks, grid sizes, warp
 * and block reductions (the dropout masks are backend.h's own functions,
 * compiled for the device too). Internal to src/backend/cuda.
 */
#ifndef CT_BACKEND_CUDA_COMMON_CUH
#define CT_BACKEND_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_int.h"
#include "backend/cuda/cuda_reduce.cuh"

/* cuBLAS's entry points, found with dlsym when the backend starts: linking
 * libcublas (and libcublasLt) would make every ctrain process, CPU runs
 * included, map and relocate them (about 200 MB of resident memory and 0.15 s
 * at each start), so they load only for run.device=cuda. */
typedef struct cublas_fns {
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
    cublasStatus_t (*set_workspace)(cublasHandle_t, void *, size_t);
    cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const float *, const float *, int, const float *, int, const float *,
                            float *, int);
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                              const void *, const void *, cudaDataType, int, const void *,
                              cudaDataType, int, const void *, void *, cudaDataType, int,
                              cublasComputeType_t, cublasGemmAlgo_t);
} cublas_fns;

static inline const cublas_fns *cuda_blas(ct_backend *be) {
    return (const cublas_fns *)cuda_st(be)->cublas_fns;
}

/* dlopen a CUDA library by base name ("libcublas"), so (so_size) naming the
 * soname tried first; NULL when none loads (cuda_core.cu). */
void *cuda_lib_open(const char *base, char *so, size_t so_size);

/* cuBLASLt (cuda_lt.cu). cuda_lt_load at init: leaves s->lt NULL (one info
 * line, unless CT_CUDA_GEMM=cublas asked for it) when the library cannot be
 * had; cuda_lt_release undoes it. */
void cuda_lt_load(cuda_state *s);
void cuda_lt_release(cuda_state *s);
/* The configurations cuda_matmul.cu checks once each (cuda_state.lt_ok). */
enum { CUDA_LT_BIAS = 0, CUDA_LT_BIAS_BF16 = 1, CUDA_LT_GELU = 2, CUDA_LT_GELU_BF16 = 3 };
/* Enqueue out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias through one Lt
 * GEMM, fp32 compute and fp32 out; bf16: weight and inp are bf16 (else fp32)
 * (bias not NULL), through the bias epilogue; gelu: out = gelu(that) and
 * pre (N,OC) = that (OC a multiple of 8; else pre is unused). The status of
 * the step that refused (nothing enqueued then), or CUBLAS_STATUS_SUCCESS. */
cublasStatus_t cuda_lt_gemm(ct_backend *be, bool bf16, bool gelu, float *out, float *pre,
                            const void *weight, const void *inp, const float *bias, int N, int C,
                            int OC);

static inline cudaStream_t cuda_stream(ct_backend *be) {
    return (cudaStream_t)cuda_st(be)->stream;
}

/* Wait for the stream, counting a stall (be->stalls) when work was left. */
static inline cudaError_t cuda_wait(ct_backend *be) {
    cudaStream_t st = cuda_stream(be);
    if (cudaStreamQuery(st) == cudaErrorNotReady) be->stalls++;
    return cudaStreamSynchronize(st);
}

/* After a launch (or a cuBLAS call): latch a launch error under the
 * kernel's name, and under CT_CUDA_SYNC=1 its fault too (cuda_check.h). */
static inline void cuda_launched(ct_backend *be, const char *kernel) {
    cuda_check_after(cuda_st(be), kernel);
}
/* A runtime call's result: latched when it failed. Returns whether it worked. */
static inline bool cuda_ok(ct_backend *be, cudaError_t e, const char *what) {
    if (e == cudaSuccess) return true;
    cuda_latch(be, (int)e, what, cudaGetErrorString(e));
    return false;
}

/* A device workspace *buf of at least bytes (*have: its size now), replaced
 * by a larger one when too small, once the stream's work that may still read
 * the old one is done; false (latched under what) when it cannot be. The
 * step's shapes repeat, so each settles in the first step. */
static inline bool cuda_workspace(ct_backend *be, void **buf, size_t *have, size_t bytes,
                                  const char *what) {
    if (bytes <= *have) return true;
    cuda_wait(be);
    if (*buf) cudaFree(*buf);
    *buf = NULL;
    *have = 0;
    if (!cuda_ok(be, cudaMalloc(buf, bytes), what)) return false;
    *have = bytes;
    cuda_mem_sample(be);
    return true;
}

/* Blocks of `block` threads for a grid-stride loop over n items. */
static inline unsigned cuda_grid(size_t n, int block) {
    size_t g = (n + (size_t)block - 1) / (size_t)block;
    if (g < 1) g = 1;
    if (g > 65536) g = 65536;
    return (unsigned)g;
}

/* out0[c] (and out1[c]) += the column sums of N rows, kind a COLSUM_* of
 * cuda_colsum.cuh (the terms and their order are there); mean and rstd as
 * that kind reads them, else NULL. Launched on the stream (cuda_kernels.cu). */
void cuda_colsum(ct_backend *be, int kind, float *out0, float *out1, const float *dout,
                 const float *inp, const float *mean, const float *rstd, int N, int C);
/* out0[c] += the column sums of dout (N, C), as cuda_colsum's COLSUM_BIAS
 * (the same bits), and copy16 (N, C) = dout rounded to bf16, in one read. */
void cuda_colsum_bias_copy16(ct_backend *be, float *out0, uint16_t *copy16, const float *dout,
                             int N, int C);

/* n bf16 values of the backend's workspace, grown when too small (NULL,
 * latched, when it cannot grow): the mixed-precision GEMMs' operand copies,
 * and the bf16 attention's copies of q, k, v and dout (cuda_matmul.cu). */
uint16_t *cuda_bf16_workspace(ct_backend *be, size_t n);

/* CT_CUDA_ATTENTION, read once: unset (or another word) CUDA_ATT_AUTO;
 * "rows" the row kernels in every run; "fp32" the fp32 kernels (tiled where
 * they apply) in bf16 runs too, as in fp32 ones; "wmma" bf16 runs on the
 * WMMA flash kernels instead of the mma.sync ones; "mma1" the mma.sync ones
 * with one m16 tile a warp at head size 64 too (cuda_attention.cu,
 * cuda_flash.cu). */
enum { CUDA_ATT_AUTO = 0, CUDA_ATT_ROWS = 1, CUDA_ATT_FP32 = 2, CUDA_ATT_WMMA = 3, CUDA_ATT_MMA1 = 4 };
int cuda_attention_mode(void);
/* The attention backward's D (B,NH,T) = rowsum(dout o out) in double, in the
 * backend's attention workspace (enqueued on the stream); NULL (latched) when
 * the workspace cannot be had (cuda_attention.cu). */
const double *cuda_attention_D(ct_backend *be, const float *dout, const float *out, int B,
                               int T, int NH, int HS);

#endif
