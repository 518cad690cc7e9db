/*
 * ct_sgemm (backend/cpu/gemm.c), the one fp32 GEMM of the CPU kernels, on
 * each library the build has, against a plain double-precision loop: every
 * transpose pair, odd and degenerate-small shapes, padded leading dimensions,
 * alpha and beta (including beta = 0 over a C full of NaN, which must be
 * ignored as BLAS says). The same call twice gives the same bits (resume is
 * bit-exact only if the GEMM is deterministic), and calls made from inside an
 * OpenMP parallel region (as the attention kernel makes them) are right too.
 * Also the run.gemm words.
 */
#include "ct_test.h"

#include "backend/cpu/gemm.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef CT_USE_OPENMP
#include <omp.h>
#endif

static uint64_t rng = 88172645463325252ull;
static float frnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* C = alpha op(A) op(B) + beta C in double, row-major with leading dims. */
static void ref_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                double b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                acc += a * b;
            }
            double c = beta == 0.0f ? 0.0 : (double)beta * C[(size_t)i * ldc + j];
            C[(size_t)i * ldc + j] = (float)(alpha * acc + c);
        }
}

/* One case on one library; returns the max relative error. */
static double one_case(ct_gemm_lib lib, bool ta, bool tb, int M, int N, int K, int pad,
                       float alpha, float beta) {
    int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    int lda = ac + pad, ldb = bc + pad, ldc = N + pad;
    float *A = malloc(sizeof(float) * (size_t)ar * lda), *B = malloc(sizeof(float) * (size_t)br * ldb);
    float *C = malloc(sizeof(float) * (size_t)M * ldc), *W = malloc(sizeof(float) * (size_t)M * ldc);
    float *C2 = malloc(sizeof(float) * (size_t)M * ldc);
    for (size_t i = 0; i < (size_t)ar * lda; i++) A[i] = frnd();
    for (size_t i = 0; i < (size_t)br * ldb; i++) B[i] = frnd();
    for (size_t i = 0; i < (size_t)M * ldc; i++) C[i] = beta == 0.0f ? NAN : frnd();
    memcpy(W, C, sizeof(float) * (size_t)M * ldc);
    memcpy(C2, C, sizeof(float) * (size_t)M * ldc);
    ref_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, W, ldc);
    ct_sgemm(lib, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    ct_sgemm(lib, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C2, ldc);
    double err = 0, scale = 1e-30;
    bool same = true, pad_kept = true;
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            size_t x = (size_t)i * ldc + j;
            double d = fabs((double)C[x] - W[x]);
            err = isfinite(C[x]) ? (d > err ? d : err) : INFINITY;
            scale = fabs(W[x]) > scale ? fabs(W[x]) : scale;
            same &= memcmp(&C[x], &C2[x], sizeof(float)) == 0;
        }
        for (int j = N; j < ldc; j++) /* the padding between rows is not touched */
            pad_kept &= beta == 0.0f ? isnan(C[(size_t)i * ldc + j])
                                     : C[(size_t)i * ldc + j] == W[(size_t)i * ldc + j];
    }
    CHECK_MSG(same, "%s %c%c %dx%dx%d: two identical calls differ", ct_gemm_lib_name(lib),
              ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K);
    CHECK_MSG(pad_kept, "%s: wrote into the row padding", ct_gemm_lib_name(lib));
    free(A);
    free(B);
    free(C);
    free(W);
    free(C2);
    return err / scale;
}

int main(void) {
    static const int shapes[][3] = {{1, 1, 1}, {1, 17, 3}, {5, 1, 9}, {37, 53, 19},
                                    {64, 128, 64}, {256, 300, 129}, {3, 768, 2304}};
    int libs[2] = {CT_GEMM_OPENBLAS, CT_GEMM_ONEDNN}, nlib = ct_gemm_have_onednn() ? 2 : 1;
    for (int li = 0; li < nlib; li++) {
        ct_gemm_lib lib = (ct_gemm_lib)libs[li];
        double worst = 0;
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int t = 0; t < 4; t++)
                for (int v = 0; v < 3; v++) {
                    static const float alphas[3] = {1.0f, 0.5f, -2.0f}, betas[3] = {0.0f, 1.0f, -0.25f};
                    double e = one_case(lib, t & 1, t & 2, shapes[s][0], shapes[s][1],
                                        shapes[s][2], v == 2 ? 3 : 0, alphas[v], betas[v]);
                    worst = e > worst ? e : worst;
                    CHECK_MSG(e < 1e-5, "%s t=%d %dx%dx%d v=%d: error %.3g", ct_gemm_lib_name(lib),
                              t, shapes[s][0], shapes[s][1], shapes[s][2], v, e);
                }
        printf("%s: worst relative error %.3g\n", ct_gemm_lib_name(lib), worst);
        /* from inside a parallel region, as the attention tiles call it */
        int bad = 0;
#ifdef CT_USE_OPENMP
#pragma omp parallel for reduction(+ : bad)
#endif
        for (int i = 0; i < 8; i++) {
            int M = 16 + i, N = 24, K = 32;
            float A[40 * 32], B[24 * 32], C[40 * 24], W[40 * 24];
            for (int x = 0; x < M * K; x++) A[x] = (float)((x * 7 + i) % 13) / 13.0f;
            for (int x = 0; x < N * K; x++) B[x] = (float)((x * 5 + i) % 11) / 11.0f;
            memset(C, 0, sizeof C);
            memset(W, 0, sizeof W);
            ct_sgemm(lib, false, true, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N);
            ref_gemm(false, true, M, N, K, 1.0f, A, K, B, K, 0.0f, W, N);
            for (int x = 0; x < M * N; x++) bad += fabsf(C[x] - W[x]) > 1e-4f;
        }
        CHECK_MSG(bad == 0, "%s: %d wrong elements from inside a parallel region",
                  ct_gemm_lib_name(lib), bad);
    }
    /* the run.gemm words */
    CHECK(ct_gemm_lib_of("openblas") == CT_GEMM_OPENBLAS);
    CHECK(ct_gemm_lib_of("auto") == (ct_gemm_have_onednn() ? CT_GEMM_ONEDNN : CT_GEMM_OPENBLAS));
    CHECK(ct_gemm_lib_of("onednn") == (ct_gemm_have_onednn() ? CT_GEMM_ONEDNN : -1));
    CHECK(ct_gemm_lib_of("mkl") == -1);
    return ct_test_result("test_gemm");
}
