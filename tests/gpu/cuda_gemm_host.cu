/*
 * The CUDA backend's GEMM entries (src/backend/cuda/cuda_matmul.cu) computed
 * on the CPU, without a GPU: every cuBLAS call they make goes to a stand-in
 * (the backend reaches cuBLAS through its table of entry points, cublas_fns)
 * that computes the column-major product it was asked for, types included
 * (fp32, bf16 and fp16 operands; fp32 or bf16 output; beta 0 never reads C),
 * and refuses what cuBLAS refuses (a leading dimension too small, mixed
 * operand types). The bf16 and fp16 operand conversions are core/dtype.c's
 * (the kernels that do them on a GPU are checked by the emulation and the
 * GPU tests). So every entry's transposes, sizes and leading dimensions are
 * held to ref's row-major definition, on shapes where no two of N, C and OC
 * agree (a swapped dimension or a missing transpose cannot pass) and with
 * the bf16 head's padded rows poisoned (nothing may touch them); and the
 * bf16 head's GEMMs meet the tensor cores' 16-byte rules on all but the
 * vocabulary's last OC % 8 rows.
 * Left out: bias (prefilled by a kernel), cuBLASLt (cuda_lt_plans), and the
 * column sums of dbias (the emulation runs them).
 *
 * usage: cuda_gemm_host   (exit 0: every check passed)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_matmul.cu" /* its static helpers and extern "C" entries */
extern "C" {
#include "backend/ref/ref.h"
#include "core/dtype.h"
}

/* ------------------------------------------------------------ stand-ins */

static int blas_errors;
static char blas_what[128];

/* What the entries call in the other CUDA sources: host versions. */
void cuda_latch(ct_backend *, int code, const char *what, const char *) {
    if (code >= 1000 && !blas_errors++) snprintf(blas_what, sizeof blas_what, "%s", what);
}
void cuda_mem_sample(ct_backend *) {}
void cuda_fault_inject(cuda_state *) {}
void ct_f32_to_bf16_cuda(ct_backend *, uint16_t *dst, const float *src, size_t n) {
    ct_f32_to_bf16_array(dst, src, n);
}
void ct_f32_to_f16_cuda(ct_backend *, uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = ct_f32_to_f16(src[i]);
}
void ct_gelu_forward_cuda(ct_backend *be, float *out, const float *inp, size_t n) {
    ct_gelu_forward_ref(be, out, inp, n);
}
void cuda_colsum(ct_backend *, int, float *, float *, const float *, const float *,
                 const float *, const float *, int, int) {}
void cuda_colsum_bias_copy16(ct_backend *, float *out0, uint16_t *copy16, const float *dout, int N,
                             int C) { /* the copy the GEMMs read, and the sums in double */
    for (int c = 0; c < C; c++) {
        double a = 0.0;
        for (int n = 0; n < N; n++) a += dout[(size_t)n * C + c];
        out0[c] += (float)a;
    }
    ct_f32_to_bf16_array(copy16, dout, (size_t)N * C);
}
cublasStatus_t cuda_lt_gemm(ct_backend *, bool, bool, float *, float *, const void *,
                            const void *, const float *, int, int, int) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

/* Element (i,j) of op(X), X column-major with leading dimension ld. */
static double at(const void *X, cudaDataType t, bool trans, int i, int j, int ld) {
    size_t k = trans ? (size_t)j + (size_t)i * ld : (size_t)i + (size_t)j * ld;
    if (t == CUDA_R_32F) return ((const float *)X)[k];
    uint16_t v = ((const uint16_t *)X)[k];
    return t == CUDA_R_16BF ? ct_bf16_to_f32(v) : ct_f16_to_f32(v);
}

static int calls;

/* The head's calls against cuBLAS's "Tensor Core Usage" rules (its fast
 * kernels want every operand's contiguous extent, leading dimension and
 * address a multiple of 16 bytes): the work (2 m n k) of the calls that meet
 * them and of those that do not, counted while `watch` is set. */
static bool watch;
static double work_aligned, work_unaligned;

static size_t type_bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }
static bool tc_aligned(bool tA, bool tB, int m, int n, int k, const void *A, cudaDataType at_,
                       int lda, const void *B, cudaDataType bt, int ldb, const void *Cm,
                       cudaDataType ct, int ldc) {
    size_t a = type_bytes(at_), b = type_bytes(bt), c = type_bytes(ct);
    return (size_t)(tA ? k : m) * a % 16 == 0 && (size_t)(tB ? n : k) * b % 16 == 0 &&
           (size_t)m * c % 16 == 0 && (size_t)lda * a % 16 == 0 && (size_t)ldb * b % 16 == 0 &&
           (size_t)ldc * c % 16 == 0 && (uintptr_t)A % 16 == 0 && (uintptr_t)B % 16 == 0 &&
           (uintptr_t)Cm % 16 == 0;
}

/* C (m,n) = alpha op(A) (m,k) op(B) (k,n) + beta C, column-major, sums in double. */
static cublasStatus_t fake_gemm_ex(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb,
                                   int m, int n, int k, const void *alpha, const void *A,
                                   cudaDataType at_, int lda, const void *B, cudaDataType bt,
                                   int ldb, const void *beta, void *Cm, cudaDataType ct, int ldc,
                                   cublasComputeType_t comp, cublasGemmAlgo_t) {
    calls++;
    bool tA = ta == CUBLAS_OP_T, tB = tb == CUBLAS_OP_T;
    if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
    /* the stored shapes: A (m,k) or (k,m), B (k,n) or (n,k), C (m,n) */
    if (lda < (tA ? k : m) || lda < 1 || ldb < (tB ? n : k) || ldb < 1 || ldc < m || ldc < 1)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (at_ != bt || comp != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (ct != CUDA_R_32F && !(ct == CUDA_R_16BF && at_ == CUDA_R_16BF))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (watch)
        (tc_aligned(tA, tB, m, n, k, A, at_, lda, B, bt, ldb, Cm, ct, ldc) ? work_aligned
                                                                           : work_unaligned) +=
            2.0 * m * n * k;
    float a = *(const float *)alpha, b = *(const float *)beta;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0.0;
            for (int l = 0; l < k; l++) s += at(A, at_, tA, i, l, lda) * at(B, bt, tB, l, j, ldb);
            size_t c = (size_t)i + (size_t)j * ldc;
            double prev = b == 0.0f ? 0.0 : at(Cm, ct, false, i, j, ldc); /* beta 0: unread */
            float v = (float)(a * s + b * prev);
            if (ct == CUDA_R_32F) ((float *)Cm)[c] = v;
            else ((uint16_t *)Cm)[c] = ct_f32_to_bf16(v);
        }
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t fake_sgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                 int m, int n, int k, const float *alpha, const float *A, int lda,
                                 const float *B, int ldb, const float *beta, float *Cm, int ldc) {
    return fake_gemm_ex(h, ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, beta,
                        Cm, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

/* ------------------------------------------------------------ the checks */

static int fails = 0;
#define CHECK_MSG(cond, ...)                                                  \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
            fails++;                                                          \
        }                                                                     \
    } while (0)

static uint32_t rng = 777u;
static float urand(float a) {
    rng = rng * 1664525u + 1013904223u;
    return a * ((float)(rng >> 8) / 8388608.0f - 1.0f);
}
static float *vec(size_t n, float a) {
    float *v = (float *)malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = urand(a);
    return v;
}
static uint16_t *to16(const float *x, size_t n, bool f16) {
    uint16_t *h = (uint16_t *)malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = f16 ? ct_f32_to_f16(x[i]) : ct_f32_to_bf16(x[i]);
    return h;
}
/* Largest |a - b| relative to the largest |b| (the sums' order differs);
 * infinite when a holds a NaN or inf that b does not (a pad read as data). */
static double err(const float *a, const float *b, size_t n) {
    double d = 0.0, s = 1e-30;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) && isfinite(b[i])) return INFINITY;
        d = fmax(d, fabs((double)a[i] - b[i]));
        s = fmax(s, fabs((double)b[i]));
    }
    return d / s;
}

#define TOL 1e-5

static void test_shape(ct_backend *be, int N, int C, int OC) {
    size_t NC = (size_t)N * C, OCC = (size_t)OC * C, NOC = (size_t)N * OC;
    float *x = vec(NC, 1.0f), *w = vec(OCC, 0.5f), *d = vec(NOC, 1.0f);
    float *out = vec(NOC, 9.0f), *want = vec(NOC, 9.0f);
    float *gi = vec(NC, 1.0f), *gw = vec(OCC, 1.0f);
    float *gi_w = (float *)malloc(NC * 4), *gw_w = (float *)malloc(OCC * 4);
    memcpy(gi_w, gi, NC * 4);
    memcpy(gw_w, gw, OCC * 4);
    char sh[64];
    snprintf(sh, sizeof sh, "N=%d C=%d OC=%d", N, C, OC);

    /* fp32 */
    ct_matmul_forward_cuda(be, out, x, w, NULL, N, C, OC);
    ct_matmul_forward_ref(be, want, x, w, NULL, N, C, OC);
    CHECK_MSG(err(out, want, NOC) < TOL, "%s matmul_forward: %.2e", sh, err(out, want, NOC));
    ct_matmul_backward_cuda(be, gi, gw, NULL, d, x, w, N, C, OC);
    ct_matmul_backward_ref(be, gi_w, gw_w, NULL, d, x, w, N, C, OC);
    CHECK_MSG(err(gi, gi_w, NC) < TOL && err(gw, gw_w, OCC) < TOL,
              "%s matmul_backward: dinp %.2e dweight %.2e", sh, err(gi, gi_w, NC),
              err(gw, gw_w, OCC));
    float *pre = vec(NOC, 9.0f), *pre_w = vec(NOC, 9.0f), *g = vec(NOC, 9.0f), *g_w = vec(NOC, 9.0f);
    ct_matmul_gelu_forward_cuda(be, pre, g, x, w, NULL, N, C, OC);
    ct_matmul_gelu_forward_ref(be, pre_w, g_w, x, w, NULL, N, C, OC);
    CHECK_MSG(err(pre, pre_w, NOC) < TOL && err(g, g_w, NOC) < TOL,
              "%s matmul_gelu_forward: %.2e %.2e", sh, err(pre, pre_w, NOC), err(g, g_w, NOC));

    /* bf16 and fp16 inputs (products exact, fp32 sums) */
    for (int f16 = 0; f16 < 2; f16++) {
        const char *ty = f16 ? "f16" : "bf16";
        uint16_t *w16 = to16(w, OCC, f16), *x16 = to16(x, NC, f16);
        if (f16) {
            ct_matmul_forward_f16_cuda(be, out, x, w16, NULL, N, C, OC);
            ct_matmul_forward_f16_ref(be, want, x, w16, NULL, N, C, OC);
        } else {
            ct_matmul_forward_bf16_cuda(be, out, x, w16, NULL, N, C, OC);
            ct_matmul_forward_bf16_ref(be, want, x, w16, NULL, N, C, OC);
        }
        CHECK_MSG(err(out, want, NOC) < TOL, "%s matmul_forward_%s: %.2e", sh, ty,
                  err(out, want, NOC));
        memcpy(gi, gi_w, NC * 4);
        memcpy(gw, gw_w, OCC * 4);
        if (f16) {
            ct_matmul_backward_f16_cuda(be, gi, gw, NULL, d, x16, w16, N, C, OC);
            ct_matmul_backward_f16_ref(be, gi_w, gw_w, NULL, d, x16, w16, N, C, OC);
        } else {
            ct_matmul_backward_bf16_cuda(be, gi, gw, NULL, d, x16, w16, N, C, OC);
            ct_matmul_backward_bf16_ref(be, gi_w, gw_w, NULL, d, x16, w16, N, C, OC);
        }
        CHECK_MSG(err(gi, gi_w, NC) < TOL && err(gw, gw_w, OCC) < TOL,
                  "%s matmul_backward_%s: dinp %.2e dweight %.2e", sh, ty, err(gi, gi_w, NC),
                  err(gw, gw_w, OCC));
        if (!f16) { /* with a bias: its sums and dout's bf16 copy made in one pass */
            float *db = vec(OC, 0.5f), *db_w = (float *)malloc(OC * sizeof(float));
            memcpy(db_w, db, OC * sizeof(float));
            memcpy(gi, gi_w, NC * 4);
            memcpy(gw, gw_w, OCC * 4);
            ct_matmul_backward_bf16_cuda(be, gi, gw, db, d, x16, w16, N, C, OC);
            ct_matmul_backward_bf16_ref(be, gi_w, gw_w, db_w, d, x16, w16, N, C, OC);
            CHECK_MSG(err(gi, gi_w, NC) < TOL && err(gw, gw_w, OCC) < TOL &&
                          err(db, db_w, OC) < TOL,
                      "%s matmul_backward_bf16 with a bias: dinp %.2e dweight %.2e dbias %.2e",
                      sh, err(gi, gi_w, NC), err(gw, gw_w, OCC), err(db, db_w, OC));
            free(db);
            free(db_w);
        }
        if (!f16) {
            ct_matmul_gelu_forward_bf16_cuda(be, pre, g, x, w16, NULL, N, C, OC);
            ct_matmul_gelu_forward_bf16_ref(be, pre_w, g_w, x, w16, NULL, N, C, OC);
            CHECK_MSG(err(pre, pre_w, NOC) < TOL && err(g, g_w, NOC) < TOL,
                      "%s matmul_gelu_forward_bf16: %.2e %.2e", sh, err(pre, pre_w, NOC),
                      err(g, g_w, NOC));
            /* the forwards on a kept bf16 input: x16 is the operand itself */
            ct_matmul_forward_bf16_in16_cuda(be, out, x16, w16, NULL, N, C, OC);
            ct_matmul_forward_bf16_in16_ref(be, want, x16, w16, NULL, N, C, OC);
            CHECK_MSG(err(out, want, NOC) < TOL, "%s matmul_forward_bf16_in16: %.2e", sh,
                      err(out, want, NOC));
            ct_matmul_gelu_forward_bf16_in16_cuda(be, pre, g, x16, w16, NULL, N, C, OC);
            ct_matmul_gelu_forward_bf16_in16_ref(be, pre_w, g_w, x16, w16, NULL, N, C, OC);
            CHECK_MSG(err(pre, pre_w, NOC) < TOL && err(g, g_w, NOC) < TOL,
                      "%s matmul_gelu_forward_bf16_in16: %.2e %.2e", sh, err(pre, pre_w, NOC),
                      err(g, g_w, NOC));
        }
        free(x16);
        free(w16);
    }

    /* the bf16 head: logits rows ld apart, pads poisoned */
    int ld = (OC + 127) / 128 * 128 + 128;
    size_t NL = (size_t)N * ld;
    uint16_t *w16 = to16(w, OCC, false), *x16 = to16(x, NC, false);
    uint16_t *o16 = (uint16_t *)malloc(NL * 2), *o16_w = (uint16_t *)malloc(NL * 2);
    for (size_t i = 0; i < NL; i++) o16[i] = o16_w[i] = 0x7fbd;
    work_aligned = work_unaligned = 0;
    watch = true;
    ct_matmul_forward_bf16_out16_cuda(be, o16, ld, x, w16, N, C, OC);
    watch = false;
    ct_matmul_forward_bf16_out16_ref(be, o16_w, ld, x, w16, N, C, OC);
    int off = 0;
    bool pads = true;
    for (int n = 0; n < N; n++)
        for (int i = 0; i < ld; i++) {
            uint16_t a = o16[(size_t)n * ld + i], b = o16_w[(size_t)n * ld + i];
            if (i >= OC) pads &= a == 0x7fbd;
            else off += abs((int)a - (int)b) > 1; /* a sum's order may flip its rounding */
        }
    CHECK_MSG(off == 0 && pads, "%s matmul_forward_bf16_out16 ld=%d: %d logits off by more than "
              "one bf16 ulp, pads %s", sh, ld, off, pads ? "kept" : "written");
    uint16_t *d16 = (uint16_t *)malloc(NL * 2);
    for (size_t i = 0; i < NL; i++) d16[i] = 0x7fbd; /* a NaN a GEMM reading the pad would spread */
    for (int n = 0; n < N; n++)
        for (int i = 0; i < OC; i++) d16[(size_t)n * ld + i] = ct_f32_to_bf16(d[(size_t)n * OC + i]);
    memcpy(gi, gi_w, NC * 4);
    memcpy(gw, gw_w, OCC * 4);
    watch = true;
    ct_matmul_backward_bf16_dout16_cuda(be, gi, gw, d16, ld, x16, w16, N, C, OC);
    watch = false;
    ct_matmul_backward_bf16_dout16_ref(be, gi_w, gw_w, d16, ld, x16, w16, N, C, OC);
    CHECK_MSG(err(gi, gi_w, NC) < TOL && err(gw, gw_w, OCC) < TOL,
              "%s matmul_backward_bf16_dout16 ld=%d: dinp %.2e dweight %.2e", sh, ld,
              err(gi, gi_w, NC), err(gw, gw_w, OCC));
    /* where C is a multiple of 8 (every real model's width), all of the head's
     * work but that of the vocabulary's last OC % 8 rows meets the rules */
    if (C % 8 == 0)
        CHECK_MSG(work_unaligned == 6.0 * N * C * (OC % 8) &&
                      work_aligned == 6.0 * N * C * (OC - OC % 8),
                  "%s the bf16 head's GEMMs: work %.0f on the tensor cores' alignment, %.0f "
                  "off it (want %.0f and %.0f)", sh, work_aligned, work_unaligned,
                  6.0 * N * C * (OC - OC % 8), 6.0 * N * C * (OC % 8));

    free(x); free(w); free(d); free(out); free(want); free(gi); free(gw); free(gi_w); free(gw_w);
    free(pre); free(pre_w); free(g); free(g_w); free(w16); free(x16); free(o16); free(o16_w);
    free(d16);
}

int main(void) {
    cublas_fns fns;
    memset(&fns, 0, sizeof fns);
    fns.sgemm = fake_sgemm;
    fns.gemm_ex = fake_gemm_ex;
    cuda_state *s = (cuda_state *)calloc(1, sizeof *s);
    s->cublas_fns = &fns;
    /* the operand workspace, host memory and large enough never to be regrown
     * (regrowing waits on the stream and calls cudaMalloc: a GPU's) */
    s->ws_bytes = (size_t)64 << 20;
    s->ws = malloc(s->ws_bytes);
    ct_backend be;
    memset(&be, 0, sizeof be);
    be.state = s;

    test_shape(&be, 5, 12, 7);
    test_shape(&be, 16, 33, 40);
    test_shape(&be, 3, 64, 97); /* a vocabulary-like odd OC */
    test_shape(&be, 4, 16, 5);  /* a vocabulary under 8 rows: the small call alone */
    CHECK_MSG(blas_errors == 0, "%d cuBLAS calls refused, the first: %s", blas_errors, blas_what);
    /* 18 per shape, and the bf16 head's three again for the rows past a
     * multiple of 8 where there are both (OC = 97) */
    CHECK_MSG(calls == 4 * 18 + 3, "%d cuBLAS calls made, not 18 per shape and 3 more", calls);
    fprintf(stderr, "cuda_gemm_host: %d cuBLAS calls, %d failures\n", calls, fails);
    free(s->ws);
    free(s);
    return fails ? 1 : 0;
}
