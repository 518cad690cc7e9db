/*
 * The CPU backend's single-precision GEMM: one call, two libraries. oneDNN's
 * sgemm (its JIT kernels pick AVX-512 or AVX2 themselves) when the build has
 * it, else OpenBLAS's cblas_sgemm; run.gemm chooses, and the choice is fixed
 * for a process, so a run and its resume use the same kernels (bit-exact).
 * Both run on the one OpenMP pool (oneDNN's Debian build uses the OpenMP
 * runtime; inside an OpenMP parallel region each call stays on its thread).
 * OpenBLAS is the default: oneDNN's sgemm packs operands into buffers it
 * allocates per call (up to a copy of the largest weight it multiplies, the
 * vocabulary head's), which the memory plan does not count yet; the matmul
 * primitive with a user scratchpad, whose size is known before the call,
 * would let the plan count it.
 * Leaves out: other precisions (bf16 comes with train.precision).
 */
#ifndef CT_CPU_GEMM_H
#define CT_CPU_GEMM_H

#include <stdbool.h>

typedef enum ct_gemm_lib {
    CT_GEMM_OPENBLAS = 0,
    CT_GEMM_ONEDNN = 1,
} ct_gemm_lib;

/* Row-major C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C, where
 * op transposes when ta / tb; lda, ldb, ldc are the row strides of A, B and
 * C as stored. M, N, K >= 1. */
void ct_sgemm(ct_gemm_lib lib, bool ta, bool tb, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* Whether this build has oneDNN. */
bool ct_gemm_have_onednn(void);
/* "openblas" | "onednn" */
const char *ct_gemm_lib_name(ct_gemm_lib lib);
/* The library run.gemm names: "auto" (oneDNN when built with it), "onednn",
 * "openblas"; -1 for another word or oneDNN asked of a build without it. */
int ct_gemm_lib_of(const char *name);

#endif
