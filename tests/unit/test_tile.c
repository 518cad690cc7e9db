/*
 * Attention's register-blocked tile products (backend/cpu/tile.c) against a
 * plain double-precision loop: every row count of the last register block
 * (M mod 6), column counts around the block width (whole blocks, the padded
 * tail, fewer columns than one block), K of 0, 1 and past the tail's 128-row
 * passes, A read row-major, transposed and with padded rows, padded B and C,
 * and accumulate on and off (off must ignore C's contents, NaN included).
 * The packing helpers exactly. And vmath.h's exp and softmax helpers, which
 * run at the target's own vector width: v16_exp and s_exp agree bit for bit
 * with each other and lie within 2 ulp-ish of expf; v_exp_sub_sum writes
 * exactly the values s_exp gives and returns their sum; v_max is exact; NaN
 * goes through exp and the clamps hold at both ends.
 */
#include "ct_test.h"

#include "backend/cpu/tile.h"
#include "backend/cpu/vmath.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* One case: C (M x N, ldc) = (acc ? C : 0) + A B with A transposed in
 * storage when ta (A stored K x M with row stride lda) or not (M x K). */
static void one(int M, int N, int K, bool ta, int lda, int ldb, int ldc, bool acc) {
    size_t na = (size_t)(ta ? K : M) * lda + 1, nb = (size_t)K * ldb + 1, nc = (size_t)M * ldc + 1;
    float *A = malloc(na * sizeof(float)), *B = malloc(nb * sizeof(float));
    float *C = malloc(nc * sizeof(float)), *C0 = malloc(nc * sizeof(float));
    for (size_t i = 0; i < na; i++) A[i] = frnd();
    for (size_t i = 0; i < nb; i++) B[i] = frnd();
    for (size_t i = 0; i < nc; i++) C0[i] = acc ? frnd() : NAN;
    memcpy(C, C0, nc * sizeof(float));
    ptrdiff_t ars = ta ? 1 : lda, acs = ta ? lda : 1;
    ct_tile_gemm(M, N, K, A, ars, acs, B, ldb, acc, C, ldc);
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < ldc; j++) {
            float got = C[(size_t)i * ldc + j];
            if (j >= N) { /* padding: untouched */
                float was = C0[(size_t)i * ldc + j];
                if (!(got == was || (isnan(got) && isnan(was)))) bad++;
                continue;
            }
            double s = acc ? C0[(size_t)i * ldc + j] : 0.0, mag = fabs(s);
            for (int k = 0; k < K; k++) {
                double p = (double)A[i * ars + k * acs] * B[(size_t)k * ldb + j];
                s += p;
                mag += fabs(p);
            }
            double err = fabs(got - s) / (mag + 1e-30);
            if (!(err <= 1e-6) && !(mag == 0 && got == 0)) bad++;
            if (err > worst) worst = err;
        }
    }
    CHECK_MSG(bad == 0, "M=%d N=%d K=%d ta=%d lda=%d ldb=%d ldc=%d acc=%d: %d wrong (worst %.3g)",
              M, N, K, ta, lda, ldb, ldc, acc, bad, worst);
    free(A);
    free(B);
    free(C);
    free(C0);
}

static void test_gemm(void) {
    const int Ms[] = {1, 2, 3, 4, 5, 6, 7, 11, 13, 64, 128};
    const int Ns[] = {1, 3, 8, 15, 16, 17, 31, 32, 33, 48, 64, 100, 128};
    const int Ks[] = {0, 1, 7, 64, 128, 129, 300};
    for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
        for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++)
            for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++) {
                int M = Ms[a], N = Ns[b], K = Ks[c];
                bool ta = (a + b + c) % 2, acc = (a + c) % 2;
                // tight and padded leading dimensions, alternating
                int pad = (a + b) % 3 == 0 ? 0 : 5;
                one(M, N, K, ta, (ta ? M : K) + pad, N + pad, N + (pad ? 3 : 0), acc);
            }
    // attention's own shapes: S = Q K^T (64 x 128 x 64), O += S V, dK += dS^T Q
    one(64, 128, 64, false, 2304, 128, 128, false);
    one(64, 64, 128, false, 128, 2304, 64, true);
    one(128, 64, 64, true, 128, 64, 2304, true);
    // M or N of 0 writes nothing
    float c = 7.0f, x = 1.0f;
    ct_tile_gemm(0, 4, 3, &x, 1, 1, &x, 1, false, &c, 1);
    ct_tile_gemm(4, 0, 3, &x, 1, 1, &x, 1, false, &c, 1);
    CHECK(c == 7.0f);
}

static void test_pack(void) {
    enum { N = 37, K = 21, LD = 50 };
    float B[N * LD], Bt[K * N], Bp[N * K];
    for (int i = 0; i < N * LD; i++) B[i] = frnd();
    ct_tile_pack_t(Bt, B, LD, N, K, 0.125f);
    ct_tile_pack_rows(Bp, B, LD, N, K);
    int bad = 0;
    for (int j = 0; j < N; j++)
        for (int k = 0; k < K; k++) {
            bad += Bt[k * N + j] != 0.125f * B[j * LD + k];
            bad += Bp[j * K + k] != B[j * LD + k];
        }
    CHECK_MSG(bad == 0, "packing: %d wrong", bad);
}

static void test_vmath(void) {
    enum { n = 1000 };
    float x[n], y[n], e[n];
    for (int i = 0; i < n; i++) x[i] = 30.0f * frnd();
    // v16_exp and s_exp: the same polynomial, lane for lane the same bits
    int diff = 0, far = 0;
    for (int i = 0; i + V16 <= n; i += V16) {
        v16_store(y + i, v16_exp(v16_load(x + i)));
        for (int l = 0; l < V16; l++) {
            float s = s_exp(x[i + l]);
            diff += memcmp(&s, &y[i + l], sizeof s) != 0;
            double ref = exp((double)x[i + l]);
            far += fabs(y[i + l] - ref) > 3e-7 * ref;
        }
    }
    CHECK_MSG(diff == 0, "v16_exp and s_exp differ in %d lanes", diff);
    CHECK_MSG(far == 0, "exp off by more than 3e-7 relative in %d lanes", far);
    // clamps and NaN
    CHECK(s_exp(-200.0f) > 0.0f && s_exp(-200.0f) < 1e-37f);
    CHECK(isfinite(s_exp(88.0f)) && s_exp(88.0f) > 1e38f);
    CHECK(isnan(s_exp(NAN)));
    CHECK(s_exp(0.0f) == 1.0f);
    // v_exp_sub_sum at lengths around the vector widths: values and sum
    const int lens[] = {1, 3, 4, 8, 15, 16, 17, 31, 32, 33, 100, 1000};
    for (size_t t = 0; t < sizeof lens / sizeof *lens; t++) {
        int len = lens[t];
        memcpy(e, x, sizeof x);
        float sub = 2.5f;
        float sum = v_exp_sub_sum(e, len, sub);
        int wrong = 0;
        double s = 0;
        for (int i = 0; i < len; i++) {
            float want = s_exp(x[i] - sub);
            wrong += memcmp(&want, &e[i], sizeof want) != 0;
            s += want;
        }
        wrong += memcmp(e + len, x + len, (size_t)(n - len) * sizeof(float)) != 0;
        CHECK_MSG(wrong == 0, "v_exp_sub_sum(n=%d): %d values wrong", len, wrong);
        CHECK_MSG(fabs(sum - s) <= 1e-6 * s, "v_exp_sub_sum(n=%d): sum %.9g, want %.9g", len,
                  sum, s);
        float m = x[0];
        for (int i = 1; i < len; i++) m = x[i] > m ? x[i] : m;
        CHECK_MSG(v_max(x, len) == m, "v_max(n=%d)", len);
    }
}

int main(void) {
    test_gemm();
    test_pack();
    test_vmath();
    return ct_test_result("test_tile");
}
