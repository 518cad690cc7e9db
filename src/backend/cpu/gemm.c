/*
 * ct_sgemm (see gemm.h): the dispatch to oneDNN or OpenBLAS. dnnl_sgemm is
 * row-major with transposes as 'N'/'T' flags, like cblas_sgemm in row-major
 * order, so both take the caller's layout as it is.
 */
#include "backend/cpu/gemm.h"

#include <cblas.h>
#include <string.h>

#ifdef CT_HAVE_DNNL
#include <dnnl.h>
#endif

void ct_sgemm(ct_gemm_lib lib, bool ta, bool tb, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
#ifdef CT_HAVE_DNNL
    if (lib == CT_GEMM_ONEDNN &&
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C,
                   ldc) == dnnl_success)
        return;
    /* oneDNN refused the arguments (it checks them like BLAS): OpenBLAS
     * computes the same product, so the call still does its job */
#else
    (void)lib;
#endif
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M,
                N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

bool ct_gemm_have_onednn(void) {
#ifdef CT_HAVE_DNNL
    return true;
#else
    return false;
#endif
}

const char *ct_gemm_lib_name(ct_gemm_lib lib) {
    return lib == CT_GEMM_ONEDNN ? "onednn" : "openblas";
}

int ct_gemm_lib_of(const char *name) {
    if (!name || !strcmp(name, "auto") || !name[0])
        return ct_gemm_have_onednn() ? CT_GEMM_ONEDNN : CT_GEMM_OPENBLAS;
    if (!strcmp(name, "openblas")) return CT_GEMM_OPENBLAS;
    if (!strcmp(name, "onednn")) return ct_gemm_have_onednn() ? CT_GEMM_ONEDNN : -1;
    return -1;
}
