/*
 * ct_sgemm (backend/cpu/gemm.c), the one fp32 GEMM of the CPU kernels, on
 * each library the build has, against a plain double-precision loop: every
 * transpose pair, odd and degenerate-small shapes, padded leading dimensions,
 * alpha and beta (including beta = 0 over a C full of NaN, which must be
 * ignored as BLAS says). The same call twice gives the same bits (resume is
 * bit-exact only if the GEMM is deterministic), and calls made from inside an
 * OpenMP parallel region (as the attention kernel makes them) are right too.
 * The same cases on oneDNN's matmul-primitive path called directly (dense
 * operands: brgemm kernels; padded: gemm kernels). The primitive cache (one
 * primitive per shape, hits, LRU eviction) and the buffers it holds (scratchpad,
 * packed B, operand copies) against ct_gemm_workspace_bytes. The bf16 GEMMs (both operands bf16, or fp32 A
 * times bf16 B) on each library against the double-precision product of the
 * bf16-rounded inputs (close: only the fp32 summation order differs), against
 * the fp32 product (bf16 rounding: ~1e-2), and the scalar reference.
 * oneDNN's parts skip in a build without it. Also the run.gemm words.
 */
#include "ct_test.h"

#include <cblas.h>

#include "backend/cpu/gemm.h"
#include "core/dtype.h"

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

/* The fp32 paths: ct_sgemm on each library, and the primitive path itself. */
enum { P_BLAS, P_ONEDNN, P_PRIM, P_COUNT };
static const char *PATH[P_COUNT] = {"openblas", "onednn", "primitive"};

static void run_path(int path, bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
                     int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (path == P_PRIM) {
        bool ran = ct_gemm_primitive(CT_GEMM_F32, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        CHECK_MSG(ran, "primitive %dx%dx%d ld %d %d %d: oneDNN refused it", M, N, K, lda, ldb, ldc);
        return;
    }
    ct_sgemm(path == P_ONEDNN ? CT_GEMM_ONEDNN : CT_GEMM_OPENBLAS, ta, tb, M, N, K, alpha, A, lda,
             B, ldb, beta, C, ldc);
}

/* One case on one path; returns the max relative error. */
static double one_case(int path, bool ta, bool tb, int M, int N, int K, int pad,
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
    run_path(path, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    run_path(path, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C2, ldc);
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
    CHECK_MSG(same, "%s %c%c %dx%dx%d: two identical calls differ", PATH[path], ta ? 'T' : 'N',
              tb ? 'T' : 'N', M, N, K);
    CHECK_MSG(pad_kept, "%s: wrote into the row padding", PATH[path]);
    free(A);
    free(B);
    free(C);
    free(W);
    free(C2);
    return err / scale;
}

/* Rounds x to bf16 in place; the bit patterns into h. */
static void round_bf16(float *x, uint16_t *h, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h[i] = ct_f32_to_bf16(x[i]);
        x[i] = ct_bf16_to_f32(h[i]);
    }
}

/* max |X - W| / max |W| over C's M x N (inf when X has a non-finite element) */
static double rel_err(const float *X, const float *W, int M, int N, int ldc) {
    double err = 0, scale = 1e-30;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            size_t x = (size_t)i * ldc + j;
            double d = fabs((double)X[x] - W[x]);
            err = isfinite(X[x]) ? (d > err ? d : err) : INFINITY;
            scale = fabs(W[x]) > scale ? fabs(W[x]) : scale;
        }
    return err / scale;
}

/* The bf16 paths: both operands bf16 or fp32 A, on each library. */
enum { B_BF16_BLAS, B_BF16_ONEDNN, B_MIX_BLAS, B_MIX_ONEDNN, B_COUNT };
static const char *BPATH[B_COUNT] = {"bf16 openblas", "bf16 onednn", "f32xbf16 openblas",
                                     "f32xbf16 onednn"};

/* One bf16 case: worst errors against the bf16-rounded truth (*exact), the
 * fp32 truth (*loose), and the reference's own against the rounded truth. */
static void bf16_case(int path, bool ta, bool tb, int M, int N, int K, int pad, float alpha,
                      float beta, double *exact, double *loose, double *ref) {
    int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    int lda = ac + pad, ldb = bc + pad, ldc = N + pad;
    size_t na = (size_t)ar * lda, nb = (size_t)br * ldb, nc = (size_t)M * ldc;
    float *A = malloc(na * 4), *Ar = malloc(na * 4), *B = malloc(nb * 4), *Br = malloc(nb * 4);
    uint16_t *Ah = malloc(na * 2), *Bh = malloc(nb * 2);
    float *C = malloc(nc * 4), *C2 = malloc(nc * 4), *R = malloc(nc * 4), *W = malloc(nc * 4),
          *W32 = malloc(nc * 4);
    for (size_t i = 0; i < na; i++) A[i] = Ar[i] = frnd();
    for (size_t i = 0; i < nb; i++) B[i] = Br[i] = frnd();
    round_bf16(Ar, Ah, na);
    round_bf16(Br, Bh, nb);
    for (size_t i = 0; i < nc; i++) C[i] = beta == 0.0f ? NAN : frnd();
    memcpy(C2, C, nc * 4);
    memcpy(R, C, nc * 4);
    memcpy(W, C, nc * 4);
    memcpy(W32, C, nc * 4);
    ref_gemm(ta, tb, M, N, K, alpha, Ar, lda, Br, ldb, beta, W, ldc);
    ref_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, W32, ldc);
    ct_gemm_bf16_ref(ta, tb, M, N, K, alpha, Ah, lda, Bh, ldb, beta, R, ldc);
    ct_gemm_lib lib = path == B_BF16_ONEDNN || path == B_MIX_ONEDNN ? CT_GEMM_ONEDNN : CT_GEMM_OPENBLAS;
    for (int rep = 0; rep < 2; rep++) {
        float *X = rep ? C2 : C;
        if (path == B_BF16_BLAS || path == B_BF16_ONEDNN)
            ct_gemm_bf16(lib, ta, tb, M, N, K, alpha, Ah, lda, Bh, ldb, beta, X, ldc);
        else /* A unrounded: the call rounds it */
            ct_gemm_f32_bf16(lib, ta, tb, M, N, K, alpha, A, lda, Bh, ldb, beta, X, ldc);
    }
    CHECK_MSG(!memcmp(C, C2, nc * 4), "%s %c%c %dx%dx%d: two identical calls differ", BPATH[path],
              ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K);
    bool pad_kept = true;
    for (int i = 0; i < M; i++)
        for (int j = N; j < ldc; j++)
            pad_kept &= beta == 0.0f ? isnan(C[(size_t)i * ldc + j])
                                     : C[(size_t)i * ldc + j] == W[(size_t)i * ldc + j];
    CHECK_MSG(pad_kept, "%s: wrote into the row padding", BPATH[path]);
    *exact = rel_err(C, W, M, N, ldc);
    *loose = rel_err(C, W32, M, N, ldc);
    *ref = rel_err(R, W, M, N, ldc);
    free(A), free(Ar), free(B), free(Br), free(Ah), free(Bh);
    free(C), free(C2), free(R), free(W), free(W32);
}

static const int SHAPES[][3] = {{1, 1, 1},    {1, 17, 3},     {5, 1, 9},      {37, 53, 19},
                                {3, 3, 129},  {64, 128, 64},  {129, 17, 1},   {256, 300, 129},
                                {3, 768, 2304}};
#define NSHAPES (sizeof SHAPES / sizeof *SHAPES)
static const float ALPHAS[4] = {1.0f, 0.5f, -2.0f, 1.0f}, BETAS[4] = {0.0f, 1.0f, -0.25f, 1.0f};
static const int PADS[4] = {0, 0, 3, 1}; /* variant v: alpha, beta, row padding */

/* Every fp32 path: shapes x transposes x variants, then calls from inside a
 * parallel region. */
static void test_f32(bool prim) {
    for (int path = 0; path < P_COUNT; path++) {
        if ((path != P_BLAS && !ct_gemm_have_onednn()) || (path == P_PRIM && !prim)) continue;
        double worst = 0;
        for (size_t s = 0; s < NSHAPES; s++)
            for (int t = 0; t < 4; t++)
                for (int v = 0; v < 4; v++) {
                    double e = one_case(path, t & 1, t & 2, SHAPES[s][0], SHAPES[s][1],
                                        SHAPES[s][2], PADS[v], ALPHAS[v], BETAS[v]);
                    worst = e > worst ? e : worst;
                    CHECK_MSG(e < 1e-5, "%s t=%d %dx%dx%d v=%d: error %.3g", PATH[path], t,
                              SHAPES[s][0], SHAPES[s][1], SHAPES[s][2], v, e);
                }
        printf("%s: worst relative error %.3g\n", PATH[path], worst);
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
            run_path(path, false, true, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N);
            ref_gemm(false, true, M, N, K, 1.0f, A, K, B, K, 0.0f, W, N);
            for (int x = 0; x < M * N; x++) bad += fabsf(C[x] - W[x]) > 1e-4f;
        }
        CHECK_MSG(bad == 0, "%s: %d wrong elements from inside a parallel region", PATH[path], bad);
    }
}

/* Every bf16 path the build has (the OpenBLAS ones always). */
static void test_bf16(bool prim) {
    for (int path = 0; path < B_COUNT; path++) {
        bool dnnl = path == B_BF16_ONEDNN || path == B_MIX_ONEDNN;
        if (dnnl && !prim) continue;
        double w_exact = 0, w_loose = 0, w_ref = 0;
        for (size_t s = 0; s < NSHAPES; s++)
            for (int t = 0; t < 4; t++)
                for (int v = 0; v < 4; v++) {
                    double ex, lo, re;
                    bf16_case(path, t & 1, t & 2, SHAPES[s][0], SHAPES[s][1], SHAPES[s][2],
                              PADS[v], ALPHAS[v], BETAS[v], &ex, &lo, &re);
                    CHECK_MSG(ex < 1e-5 && lo < 2e-2 && re < 1e-5,
                              "%s t=%d %dx%dx%d v=%d: error %.3g (fp32 %.3g, ref %.3g)",
                              BPATH[path], t, SHAPES[s][0], SHAPES[s][1], SHAPES[s][2], v, ex, lo, re);
                    w_exact = ex > w_exact ? ex : w_exact;
                    w_loose = lo > w_loose ? lo : w_loose;
                    w_ref = re > w_ref ? re : w_ref;
                }
        printf("%s: worst relative error %.3g against the bf16-rounded product, %.3g against "
               "fp32 (reference %.3g)\n", BPATH[path], w_exact, w_loose, w_ref);
        /* from inside a parallel region */
        int bad = 0;
#ifdef CT_USE_OPENMP
#pragma omp parallel for reduction(+ : bad)
#endif
        for (int i = 0; i < 8; i++) {
            int M = 16 + i, N = 24, K = 32;
            uint16_t Ah[40 * 32], Bh[24 * 32];
            float A[40 * 32], C[40 * 24], W[40 * 24];
            for (int x = 0; x < M * K; x++) A[x] = ct_bf16_to_f32(Ah[x] = ct_f32_to_bf16((float)((x * 7 + i) % 13) / 13.0f));
            for (int x = 0; x < N * K; x++) Bh[x] = ct_f32_to_bf16((float)((x * 5 + i) % 11) / 11.0f);
            memset(C, 0, sizeof C);
            memset(W, 0, sizeof W);
            ct_gemm_lib lib = dnnl ? CT_GEMM_ONEDNN : CT_GEMM_OPENBLAS;
            if (path == B_BF16_BLAS || path == B_BF16_ONEDNN)
                ct_gemm_bf16(lib, false, true, M, N, K, 1.0f, Ah, K, Bh, K, 0.0f, C, N);
            else
                ct_gemm_f32_bf16(lib, false, true, M, N, K, 1.0f, A, K, Bh, K, 0.0f, C, N);
            ct_gemm_bf16_ref(false, true, M, N, K, 1.0f, Ah, K, Bh, K, 0.0f, W, N);
            for (int x = 0; x < M * N; x++) bad += fabsf(C[x] - W[x]) > 1e-4f;
        }
        CHECK_MSG(bad == 0, "%s: %d wrong elements from inside a parallel region", BPATH[path], bad);
    }
}

/* ct_gemm_f32_bf16_out16 on each library: every element the bf16 rounding of
 * an fp32 sum of the rounded operands' products (within one bf16 step of the
 * reference's rounding, which sums in another order, and equal to it for
 * nearly all), the row padding never written, two calls the same bits; M
 * beyond CT_GEMM_OUT16_ROWS so OpenBLAS's blocks of rows are crossed. */
static void test_out16(bool prim) {
    static const int shapes[][3] = {{1, 1, 1},    {5, 17, 3},  {37, 53, 19},
                                    {130, 50, 33}, {64, 300, 129}, {200, 96, 768}};
    for (int lib = 0; lib < 2; lib++) {
        if (lib == CT_GEMM_ONEDNN && !prim) continue;
        size_t total = 0, exact = 0, outside = 0, pads = 0, differ = 0;
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int t = 0; t < 4; t++)
                for (int pad = 0; pad <= 3; pad += 3) {
                    int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                    bool ta = t & 1, tb = t & 2;
                    int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
                    int lda = ac + pad, ldb = bc + pad, ldc = N + pad;
                    size_t na = (size_t)ar * lda, nb = (size_t)br * ldb, nc = (size_t)M * ldc;
                    float *A = malloc(na * 4), *Ar = malloc(na * 4), *Br = malloc(nb * 4),
                          *W = malloc(nc * 4);
                    uint16_t *Ah = malloc(na * 2), *Bh = malloc(nb * 2), *C = malloc(nc * 2),
                             *C2 = malloc(nc * 2);
                    for (size_t i = 0; i < na; i++) A[i] = Ar[i] = frnd();
                    for (size_t i = 0; i < nb; i++) Br[i] = frnd();
                    round_bf16(Ar, Ah, na);
                    round_bf16(Br, Bh, nb);
                    for (size_t i = 0; i < nc; i++) C[i] = C2[i] = 0x7fa5; /* a NaN */
                    ref_gemm(ta, tb, M, N, K, 1.0f, Ar, lda, Br, ldb, 0.0f, W, ldc);
                    /* the sums of |products|: what another fp32 order may move a sum by */
                    float *Aa = malloc(na * 4), *Ba = malloc(nb * 4), *S = malloc(nc * 4);
                    for (size_t i = 0; i < na; i++) Aa[i] = fabsf(Ar[i]);
                    for (size_t i = 0; i < nb; i++) Ba[i] = fabsf(Br[i]);
                    ref_gemm(ta, tb, M, N, K, 1.0f, Aa, lda, Ba, ldb, 0.0f, S, ldc);
                    ct_gemm_f32_bf16_out16((ct_gemm_lib)lib, ta, tb, M, N, K, A, lda, Bh, ldb, C,
                                           ldc);
                    ct_gemm_f32_bf16_out16((ct_gemm_lib)lib, ta, tb, M, N, K, A, lda, Bh, ldb, C2,
                                           ldc);
                    differ += memcmp(C, C2, nc * 2) != 0;
                    for (int i = 0; i < M; i++) {
                        for (int j = 0; j < N; j++) {
                            float w = W[(size_t)i * ldc + j];
                            uint16_t g = C[(size_t)i * ldc + j], r = ct_f32_to_bf16(w);
                            /* one bf16 step of w (2^-7 of its power of two), and
                             * 2K fp32 roundings of the sum of |products| */
                            float step = ldexpf(1.0f, ilogbf(w == 0.0f ? 1e-30f : w) - 7) +
                                         2.0f * K * 0x1p-24f * S[(size_t)i * ldc + j];
                            total++;
                            exact += g == r;
                            outside += !(fabsf(ct_bf16_to_f32(g) - w) <= step);
                        }
                        for (int j = N; j < ldc; j++) pads += C[(size_t)i * ldc + j] != 0x7fa5;
                    }
                    free(A), free(Ar), free(Br), free(W), free(Ah), free(Bh), free(C), free(C2);
                    free(Aa), free(Ba), free(S);
                }
        printf("out16 %s: %zu of %zu the reference's rounding\n",
               ct_gemm_lib_name((ct_gemm_lib)lib), exact, total);
        CHECK_MSG(outside == 0 && pads == 0 && differ == 0,
                  "out16 %s: %zu beyond a bf16 step, %zu pads written, %zu cases not repeatable",
                  ct_gemm_lib_name((ct_gemm_lib)lib), outside, pads, differ);
        CHECK_MSG(exact * 100 >= total * 99, "out16 %s: only %zu of %zu rounded as the reference",
                  ct_gemm_lib_name((ct_gemm_lib)lib), exact, total);
    }
}

/* ct_gemm_colsums' documented order, plainly: per column, fp32 sums over
 * blocks of 64 rows, the blocks added in double; columns past the last
 * multiple of 16 in double throughout. */
static void colsums_plain(float *dbias, const float *G, int N, int OC) {
    int ov = OC / 16 * 16;
    for (int o = 0; o < OC; o++) {
        double acc = 0.0;
        for (int n0 = 0; n0 < N; n0 += 64) {
            float blk = 0.0f;
            for (int n = n0; n < N && n < n0 + 64; n++) {
                if (o < ov)
                    blk += G[(size_t)n * OC + o];
                else
                    acc += G[(size_t)n * OC + o];
            }
            acc += blk;
        }
        dbias[o] += (float)acc;
    }
}

/* ct_gemm_colsums against the plain sums bit for bit, with and without the
 * rounding (which must equal ct_f32_to_bf16 on every element, NaN included),
 * on 1 and 2 threads, at widths that split into windows, vectors and a
 * tail. */
static void test_colsums(void) {
    const int shapes[][2] = {{1, 1}, {65, 16}, {130, 37}, {200, 300}, {129, 768 + 5}, {3, 1030}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int N = shapes[s][0], OC = shapes[s][1];
        size_t n = (size_t)N * OC;
        float *G = malloc(n * sizeof *G), *db = malloc(OC * 4), *want = malloc(OC * 4);
        uint16_t *g16 = malloc(n * 2);
        for (size_t i = 0; i < n; i++) G[i] = frnd() * (i % 7 == 0 ? 1e4f : 1.0f);
        if (n > 40) G[40] = NAN, G[n - 1] = -INFINITY;
        for (int o = 0; o < OC; o++) want[o] = 0.5f * (float)o;
        colsums_plain(want, G, N, OC);
        for (int th = 1; th <= 2; th++) {
#ifdef CT_USE_OPENMP
            omp_set_num_threads(th);
#endif
            for (int r = 0; r < 2; r++) {
                for (int o = 0; o < OC; o++) db[o] = 0.5f * (float)o;
                memset(g16, 0xa5, n * 2);
                ct_gemm_colsums(db, r ? g16 : NULL, G, N, OC);
                CHECK_MSG(!memcmp(db, want, OC * 4), "colsums N=%d OC=%d threads %d%s: differ",
                          N, OC, th, r ? " rounding" : "");
                size_t bad = 0;
                for (size_t i = 0; r && i < n; i++) bad += g16[i] != ct_f32_to_bf16(G[i]);
                CHECK_MSG(bad == 0, "colsums N=%d OC=%d: %zu roundings differ", N, OC, bad);
            }
        }
#ifdef CT_USE_OPENMP
        omp_set_num_threads(omp_get_num_procs());
#endif
        free(G), free(db), free(want), free(g16);
    }
}

/* ct_gemm_bwd_f32_bf16 (one rounding of G for both products) against the two
 * ct_gemm_f32_bf16 calls it stands for, bit for bit, on each library, and its
 * dbias against ct_gemm_colsums; with one output NULL the others still
 * right, nothing written through the NULL. */
static void test_bwd_pair(bool prim) {
    const int shapes[][3] = {{37, 20, 52}, {64, 48, 96}, {5, 3, 7}};
    for (int lib = 0; lib < 2; lib++) {
        if (lib == CT_GEMM_ONEDNN && !prim) continue;
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            int N = shapes[s][0], C = shapes[s][1], OC = shapes[s][2];
            size_t ng = (size_t)N * OC, nw = (size_t)OC * C, nx = (size_t)N * C;
            float *G = malloc(ng * sizeof *G), *di = malloc(nx * 4), *dw = malloc(nw * 4);
            float *wi = malloc(nx * 4), *ww = malloc(nw * 4);
            uint16_t *W16 = malloc(nw * 2), *X16 = malloc(nx * 2);
            for (size_t i = 0; i < ng; i++) G[i] = (float)((i * 37) % 101) / 50.0f - 1.0f + 1e-3f;
            for (size_t i = 0; i < nw; i++) W16[i] = ct_f32_to_bf16((float)((i * 13) % 29) / 29.0f - 0.5f);
            for (size_t i = 0; i < nx; i++) X16[i] = ct_f32_to_bf16((float)((i * 7) % 31) / 31.0f - 0.5f);
            float *db = malloc(OC * 4), *wb = malloc(OC * 4);
            for (int part = 0; part < 4; part++) { /* both, dinp only, dweight only; no dbias */
                for (size_t i = 0; i < nx; i++) di[i] = wi[i] = 0.25f;
                for (size_t i = 0; i < nw; i++) dw[i] = ww[i] = -0.5f;
                for (int o = 0; o < OC; o++) db[o] = wb[o] = 0.125f;
                ct_gemm_bwd_f32_bf16((ct_gemm_lib)lib, N, C, OC, G, W16, X16, part != 2 ? di : NULL,
                                     part != 1 ? dw : NULL, part != 3 ? db : NULL);
                if (part != 3) colsums_plain(wb, G, N, OC);
                CHECK_MSG(!memcmp(db, wb, OC * 4), "bwd pair, N=%d C=%d OC=%d part %d: dbias",
                          N, C, OC, part);
                if (part != 2)
                    ct_gemm_f32_bf16((ct_gemm_lib)lib, false, false, N, C, OC, 1.0f, G, OC, W16, C,
                                     1.0f, wi, C);
                if (part != 1)
                    ct_gemm_f32_bf16((ct_gemm_lib)lib, true, false, OC, C, N, 1.0f, G, OC, X16, C,
                                     1.0f, ww, C);
                CHECK_MSG(!memcmp(di, wi, nx * 4) && !memcmp(dw, ww, nw * 4),
                          "bwd pair, %s, N=%d C=%d OC=%d part %d: differs from two calls",
                          lib == CT_GEMM_ONEDNN ? "onednn" : "openblas", N, C, OC, part);
            }
            free(G), free(di), free(dw), free(wi), free(ww), free(W16), free(X16), free(db), free(wb);
        }
    }
}

/* The primitive cache: one primitive per shape, hits, LRU eviction. */
static void test_cache(void) {
    enum { M = 33, N = 20, K = 47 };
    float A[M * K], B[K * N], C[M * N];
    for (int i = 0; i < M * K; i++) A[i] = frnd();
    for (int i = 0; i < K * N; i++) B[i] = frnd();
    ct_gemm_stats st;
    ct_gemm_release();
    ct_gemm_stats_get(&st);
    CHECK(st.primitives == 0 && st.created == 0 && st.hits == 0 && st.scratch_bytes == 0);
    for (int rep = 0; rep < 3; rep++)
        CHECK(ct_gemm_primitive(CT_GEMM_F32, false, true, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N));
    ct_gemm_stats_get(&st);
    CHECK_MSG(st.created == 1 && st.hits == 2 && st.primitives == 1,
              "same shape 3 times: %llu created, %llu hits", (unsigned long long)st.created,
              (unsigned long long)st.hits);
    /* alpha, beta, a transpose or a leading dimension make another primitive */
    CHECK(ct_gemm_primitive(CT_GEMM_F32, false, true, M, N, K, 0.5f, A, K, B, K, 0.0f, C, N));
    CHECK(ct_gemm_primitive(CT_GEMM_F32, false, true, M, N, K, 1.0f, A, K, B, K, 1.0f, C, N));
    CHECK(ct_gemm_primitive(CT_GEMM_F32, false, false, M, K, K, 1.0f, A, K, B, K, 0.0f, C, K));
    CHECK(ct_gemm_primitive(CT_GEMM_F32, false, true, M, N, K - 1, 1.0f, A, K, B, K, 0.0f, C, N));
    CHECK(ct_gemm_primitive(CT_GEMM_F32, false, true, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N));
    ct_gemm_stats_get(&st);
    CHECK_MSG(st.created == 5 && st.hits == 3 && st.primitives == 5 && st.evicted == 0,
              "%llu created, %llu hits, %d cached", (unsigned long long)st.created,
              (unsigned long long)st.hits, st.primitives);
    CHECK(st.buffers == 1); /* top-level calls share one buffer set */
    /* more shapes than the cache holds: the least recently used go */
    for (int m = 1; m <= 130; m++)
        ct_gemm_primitive(CT_GEMM_F32, false, true, m, 1, 1, 1.0f, A, 1, B, 1, 0.0f, C, 1);
    ct_gemm_stats_get(&st);
    CHECK_MSG(st.evicted >= 7 && st.primitives == 128, "%llu evicted, %d cached",
              (unsigned long long)st.evicted, st.primitives);
    ct_gemm_release();
}

/* What the layer holds after running shapes equals what
 * ct_gemm_workspace_bytes announced for them. */
static void test_workspace(bool prim) {
    static const int shapes[][5] = {{256, 2304, 768, 0, 1}, {256, 768, 2304, 0, 0},
                                    {2304, 768, 256, 1, 0}, {17, 3, 129, 1, 1}};
    for (int lib = 0; lib < 2; lib++) {
        if (lib == CT_GEMM_ONEDNN && !prim) continue;
        for (int type = 0; type < CT_GEMM_TYPE_COUNT; type++)
            for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
                int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                bool ta = shapes[s][3], tb = shapes[s][4];
                size_t na = (size_t)M * K, nb = (size_t)K * N;
                float *A = calloc(na, 4), *B = calloc(nb, 4), *C = calloc((size_t)M * N, 4);
                uint16_t *Ah = calloc(na, 2), *Bh = calloc(nb, 2);
                int lda = ta ? M : K, ldb = tb ? K : N;
                ct_gemm_release();
                ct_gemm_workspace parts;
                size_t want = ct_gemm_workspace_bytes((ct_gemm_lib)lib, (ct_gemm_type)type, ta,
                                                      tb, M, N, K, &parts);
                CHECK(want == parts.scratch + parts.packed + parts.convert);
                for (int beta = 0; beta <= 1; beta++) {
                    if (type == CT_GEMM_F32_BF16_C16) { /* beta 0 only */
                        if (!beta)
                            ct_gemm_f32_bf16_out16((ct_gemm_lib)lib, ta, tb, M, N, K, A, lda, Bh,
                                                   ldb, (uint16_t *)C, N);
                    } else if (type == CT_GEMM_F32)
                        ct_sgemm((ct_gemm_lib)lib, ta, tb, M, N, K, 1.0f, A, lda, B, ldb,
                                 (float)beta, C, N);
                    else if (type == CT_GEMM_BF16)
                        ct_gemm_bf16((ct_gemm_lib)lib, ta, tb, M, N, K, 1.0f, Ah, lda, Bh, ldb,
                                     (float)beta, C, N);
                    else
                        ct_gemm_f32_bf16((ct_gemm_lib)lib, ta, tb, M, N, K, 1.0f, A, lda, Bh, ldb,
                                         (float)beta, C, N);
                }
                ct_gemm_stats st;
                ct_gemm_stats_get(&st);
                size_t held = st.scratch_bytes + st.convert_bytes + st.packed_bytes;
                CHECK(st.scratch_bytes == parts.scratch && st.packed_bytes == parts.packed &&
                      st.convert_bytes == parts.convert);
                CHECK_MSG(held == want && st.buffers <= 1,
                          "%s type %d %dx%dx%d: holds %zu bytes in %d sets, announced %zu",
                          ct_gemm_lib_name((ct_gemm_lib)lib), type, M, N, K, held, st.buffers, want);
                /* AVX-512: oneDNN's brgemm matmul (AVX2 runs its gemm kernels,
                 * which hold no workspace: the equality above covers them) */
                bool brgemm = ct_gemm_have_brgemm();
                if (brgemm && lib == CT_GEMM_ONEDNN && type == CT_GEMM_F32 && s == 0)
                    CHECK_MSG(want > 0, "a brgemm matmul of 256x2304x768 needs a scratchpad");
                /* a plain B is packed by brgemm: fp32's on AVX-512, bf16's where bf16 is
                 * native (an AVX-512 CPU without it runs bf16 on the gemm kernels) */
                bool packs = type == CT_GEMM_F32 ? brgemm : ct_gemm_have_bf16();
                /* the gemm kernels' own blocks are counted exactly where oneDNN runs
                 * them (not brgemm), and only for oneDNN */
                /* (bf16 outputs run oneDNN only where bf16 is native) */
                if (lib == CT_GEMM_ONEDNN && s < 3 &&
                    (type != CT_GEMM_F32_BF16_C16 || ct_gemm_have_bf16()))
                    CHECK_MSG((parts.driver > 0) == !packs, "type %d %dx%dx%d: driver %zu, "
                              "brgemm %d", type, M, N, K, parts.driver, packs);
                if (lib == CT_GEMM_OPENBLAS) CHECK(parts.driver == 0);
                if (packs && lib == CT_GEMM_ONEDNN && !tb && s < 3)
                    CHECK_MSG(st.packed_bytes >= nb * (type == CT_GEMM_F32 ? 4 : 2),
                              "type %d %dx%dx%d: B not packed", type, M, N, K);
                free(A), free(B), free(C), free(Ah), free(Bh);
            }
        /* a set of shapes, one after the other: each part grows to its maximum */
        ct_gemm_release();
        ct_gemm_workspace most = {0, 0, 0, 0};
        size_t nmax = 0;
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            ct_gemm_workspace p;
            ct_gemm_workspace_bytes((ct_gemm_lib)lib, CT_GEMM_F32_BF16, shapes[s][3], shapes[s][4],
                                    shapes[s][0], shapes[s][1], shapes[s][2], &p);
            most.scratch = p.scratch > most.scratch ? p.scratch : most.scratch;
            most.packed = p.packed > most.packed ? p.packed : most.packed;
            most.convert = p.convert > most.convert ? p.convert : most.convert;
            size_t n = (size_t)shapes[s][0] * shapes[s][2] + (size_t)shapes[s][2] * shapes[s][1];
            nmax = n > nmax ? n : nmax;
        }
        float *A = calloc(nmax, 4), *C = calloc(nmax * 4, 4);
        uint16_t *Bh = calloc(nmax, 2);
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int beta = 0; beta <= 1; beta++) {
                int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                bool ta = shapes[s][3], tb = shapes[s][4];
                ct_gemm_f32_bf16((ct_gemm_lib)lib, ta, tb, M, N, K, 1.0f, A, ta ? M : K, Bh,
                                 tb ? K : N, (float)beta, C, N);
            }
        ct_gemm_stats st;
        ct_gemm_stats_get(&st);
        CHECK_MSG(st.scratch_bytes == most.scratch && st.packed_bytes == most.packed &&
                      st.convert_bytes == most.convert,
                  "%s, shapes in turn: holds %zu + %zu + %zu, parts' maxima %zu + %zu + %zu",
                  ct_gemm_lib_name((ct_gemm_lib)lib), st.scratch_bytes, st.packed_bytes,
                  st.convert_bytes, most.scratch, most.packed, most.convert);
        free(A), free(C), free(Bh);
    }
    ct_gemm_release();
}

/* Which instructions the bf16 GEMMs get: the classification of oneDNN's
 * kernel names (every CPU's, checked here on any), the bf16 run's library,
 * and this machine's probe against oneDNN's own ISA detection. */
/* oneDNN 2.6's gemm-kernel blocks, worked by hand from gemm_info.cpp's
 * blocking and gemm_driver.cpp's padding, nocopy checks and threading. */
static void test_driver_bytes(void) {
    /* AVX2, 2 threads, a 1024-row head of 8192 over 128 channels (row-major
     * M 1024, N 8192, K 128; column-major m 8192, n 1024): copied, split 2D
     * into m halves of 4096 (n > 2 x 384, m >= 768): each thread packs 4104
     * (um 24) x 128 (k <= bk_traditional: all, at least 128) of A and
     * 128 x 384 (bn) of B, with two pages */
    CHECK(ct_gemm_driver_bytes(256, 4, false, true, 1024, 8192, 128, 2) ==
          2 * ((size_t)(4104 * 128 + 128 * 384) * 4 + 8192));
    /* 256 rows: 1/256 + 1/8192 >= 0.0038, the nocopy kernels copy nothing */
    CHECK(ct_gemm_driver_bytes(256, 4, false, true, 256, 8192, 128, 2) == 0);
    /* AVX2, m 50257 >= 1000 and n 4096 >= 4000: one shared copy of A, m_padd
     * (10008: bm capped) x 2 threads rows x k_padd 192 (k 768 >= 2 bk), and
     * each thread's B block of 192 x 384 */
    CHECK(ct_gemm_driver_bytes(256, 4, false, true, 4096, 50257, 768, 2) ==
          (size_t)(20016 * 192) * 4 + 4096 + 2 * ((size_t)(192 * 384) * 4 + 8192));
    /* AVX-512: the same head with n 1024 >= 2 x 96 shares A too (um 48, bk 384:
     * k 768 >= 2 bk, one 384 block) */
    CHECK(ct_gemm_driver_bytes(512, 4, false, true, 1024, 50257, 768, 2) ==
          (size_t)(19968 * 384) * 4 + 4096 + 2 * ((size_t)(384 * 384) * 4 + 8192));
    /* bf16 counts every thread whole, with the k-partition's copy of C */
    CHECK(ct_gemm_driver_bytes(512, 2, false, false, 256, 512, 4096, 2) ==
          2 * ((size_t)(528 * 768 + 768 * 256) * 2 + 8192 + (size_t)256 * 512 * 4));
    CHECK(ct_gemm_driver_bytes(256, 4, false, false, 0, 5, 5, 2) == 0);
}

static void test_bf16_path(bool prim) {
    CHECK(ct_gemm_bf16_path_classify("brg:avx512_core_amx", true) == CT_GEMM_BF16_AMX);
    CHECK(ct_gemm_bf16_path_classify("brg:avx512_core_bf16", true) == CT_GEMM_BF16_NATIVE);
    CHECK(ct_gemm_bf16_path_classify("gemm:jit", true) == CT_GEMM_BF16_NATIVE);
    CHECK(ct_gemm_bf16_path_classify("gemm:jit", false) == CT_GEMM_BF16_EMULATED);
    CHECK(ct_gemm_bf16_path_classify("ref:any", false) == CT_GEMM_BF16_EMULATED);
    CHECK(ct_gemm_bf16_path_classify("", true) == CT_GEMM_BF16_WIDENED);
    CHECK(ct_gemm_bf16_path_classify(NULL, false) == CT_GEMM_BF16_WIDENED);
    CHECK(ct_gemm_bf16_path_native(CT_GEMM_BF16_AMX) &&
          ct_gemm_bf16_path_native(CT_GEMM_BF16_NATIVE));
    CHECK(!ct_gemm_bf16_path_native(CT_GEMM_BF16_EMULATED) &&
          !ct_gemm_bf16_path_native(CT_GEMM_BF16_WIDENED));
    CHECK(!strcmp(ct_gemm_bf16_path_name(CT_GEMM_BF16_AMX), "amx") &&
          !strcmp(ct_gemm_bf16_path_name(CT_GEMM_BF16_WIDENED), "widened"));
    /* a bf16 run where bf16 is native runs oneDNN whatever run.gemm names;
     * elsewhere, and an fp32 run anywhere, the named library */
    CHECK(ct_gemm_lib_for_run(CT_GEMM_OPENBLAS, true, true) == CT_GEMM_ONEDNN);
    CHECK(ct_gemm_lib_for_run(CT_GEMM_OPENBLAS, true, false) == CT_GEMM_OPENBLAS);
    CHECK(ct_gemm_lib_for_run(CT_GEMM_OPENBLAS, false, true) == CT_GEMM_OPENBLAS);
    CHECK(ct_gemm_lib_for_run(CT_GEMM_ONEDNN, false, false) == CT_GEMM_ONEDNN);
    CHECK(ct_gemm_lib_of_run("openblas", true) ==
          (ct_gemm_have_bf16() ? CT_GEMM_ONEDNN : CT_GEMM_OPENBLAS));
    CHECK(ct_gemm_lib_of_run("mkl", true) == -1);
    /* OpenBLAS widens; oneDNN's probe says native exactly where oneDNN's ISA
     * has bf16, and widened only where it refused the primitive */
    char impl[64] = "x";
    CHECK(ct_gemm_bf16_path_of(CT_GEMM_OPENBLAS, impl, sizeof impl) == CT_GEMM_BF16_WIDENED &&
          impl[0] == 0);
    ct_gemm_bf16_path p = ct_gemm_bf16_path_of(CT_GEMM_ONEDNN, impl, sizeof impl);
    printf("bf16 GEMMs on oneDNN here: %s (%s)\n", ct_gemm_bf16_path_name(p), impl);
    if (!prim) {
        CHECK(p == CT_GEMM_BF16_WIDENED);
    } else {
        CHECK_MSG(ct_gemm_bf16_path_native(p) == ct_gemm_have_bf16(), "path %s, impl %s",
                  ct_gemm_bf16_path_name(p), impl);
        CHECK((p == CT_GEMM_BF16_WIDENED) == (impl[0] == 0));
    }
    char why[320];
    ct_gemm_bf16_path_describe(CT_GEMM_BF16_EMULATED, CT_GEMM_ONEDNN, "gemm:jit", why, sizeof why);
    CHECK(strstr(why, "emulated") && strstr(why, "gemm:jit") && strstr(why, "no speed-up"));
    ct_gemm_bf16_path_describe(CT_GEMM_BF16_WIDENED, CT_GEMM_OPENBLAS, "", why, sizeof why);
    CHECK(strstr(why, "widen") && strstr(why, "no speed-up"));
}

int main(void) {
    /* oneDNN 2.x builds have the primitive path; probe it once */
    float one = 1.0f, out = 0.0f;
    bool prim = ct_gemm_primitive(CT_GEMM_F32, false, false, 1, 1, 1, 1.0f, &one, 1, &one, 1,
                                  0.0f, &out, 1);
    CHECK(!prim || out == 1.0f);
    if (!prim)
        printf("oneDNN matmul primitives: %s, their checks skipped\n",
               ct_gemm_have_onednn() ? "not in this oneDNN version" : "not in this build");
    CHECK(!ct_gemm_have_bf16() || ct_gemm_have_onednn());
    printf("native bf16 GEMMs: %s\n", ct_gemm_have_bf16() ? "yes" : "no");
    test_f32(prim);
    test_bf16(prim);
    test_out16(prim);
    test_colsums();
    test_bwd_pair(prim);
    if (prim) {
        test_cache();
    }
    test_workspace(prim);
    test_bf16_path(prim);
    test_driver_bytes();
    /* the run.gemm words */
    CHECK(ct_gemm_lib_of("openblas") == CT_GEMM_OPENBLAS);
    /* auto: oneDNN exactly where OpenBLAS's kernels are narrower than the cores */
    CHECK(ct_gemm_blas_bits("SkylakeX") == 512 && ct_gemm_blas_bits("COOPERLAKE") == 512);
    CHECK(ct_gemm_blas_bits("Haswell") == 256 && ct_gemm_blas_bits("Zen") == 256 &&
          ct_gemm_blas_bits("Sandybridge") == 256);
    CHECK(ct_gemm_blas_bits("Prescott") == 128 && ct_gemm_blas_bits("Core2") == 128 &&
          ct_gemm_blas_bits("") == 128 && ct_gemm_blas_bits(NULL) == 128);
    int cb = ct_gemm_cpu_bits();
    CHECK(cb == 128 || cb == 256 || cb == 512);
    CHECK(ct_gemm_auto_pick(true, 128, 512) == CT_GEMM_ONEDNN);
    CHECK(ct_gemm_auto_pick(true, 256, 512) == CT_GEMM_ONEDNN);
    CHECK(ct_gemm_auto_pick(true, 256, 256) == CT_GEMM_OPENBLAS);
    CHECK(ct_gemm_auto_pick(true, 512, 512) == CT_GEMM_OPENBLAS);
    CHECK(ct_gemm_auto_pick(false, 128, 512) == CT_GEMM_OPENBLAS);
    CHECK(ct_gemm_lib_of("auto") ==
          (int)ct_gemm_auto_pick(ct_gemm_have_onednn(), ct_gemm_blas_bits(openblas_get_corename()),
                                 cb));
    CHECK(ct_gemm_lib_of("onednn") == (ct_gemm_have_onednn() ? CT_GEMM_ONEDNN : -1));
    CHECK(ct_gemm_lib_of("mkl") == -1);
    ct_gemm_release();
    return ct_test_result("test_gemm");
}
