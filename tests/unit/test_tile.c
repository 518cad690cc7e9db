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
 * The bf16 tile products (tile16.c, vdpbf16ps where the build has
 * AVX512_BF16) the same way against a double loop over the bf16 values, with
 * A packed as rows or read transposed from row pairs, B packed from rows
 * (pairs) or from its transpose (cols), odd K (a zero pair member), alpha;
 * and the three packs bit for bit against core/dtype.c's rounding.
 */
#include "ct_test.h"

#include "backend/cpu/tile.h"
#include "backend/cpu/vmath.h"
#include "core/dtype.h"

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

static double w16(uint16_t h) { return ct_bf16_to_f32(h); }

/* One bf16 case: C (M x N, ldc) = alpha A B + (acc ? C : 0); A packed by
 * rows (ta false) or as row pairs of its transpose (ta); B packed as row
 * pairs of itself (bt false) or by ct_t16_cols from its transpose. */
static void one16(int M, int N, int K, bool ta, bool bt, int ldc, float alpha, bool acc) {
    int Kp = K + (K & 1), K2 = Kp / 2;
    size_t nc = (size_t)M * ldc + 1;
    float *Af = malloc(((size_t)M * K + 1) * sizeof(float));
    float *Bf = malloc(((size_t)K * N + 1) * sizeof(float));
    float *tmp = malloc(((size_t)(M > N ? M : N) * Kp + 1) * sizeof(float));
    uint16_t *A16 = malloc(((size_t)M * Kp + 1) * 2), *B16 = malloc(((size_t)Kp * N + 1) * 2);
    float *C = malloc(nc * sizeof(float)), *C0 = malloc(nc * sizeof(float));
    for (size_t i = 0; i < (size_t)M * K; i++) Af[i] = frnd();
    for (size_t i = 0; i < (size_t)K * N; i++) Bf[i] = frnd();
    ptrdiff_t ars, acs, ldb = 2 * (ptrdiff_t)N;
    if (!ta) {
        ct_t16_rows(A16, Af, K, M, K, Kp);
        ars = Kp, acs = 2;
    } else { /* A^T (K x M), its row pairs: A(i, kp) at 2i + kp 2M */
        for (int k = 0; k < K; k++)
            for (int i = 0; i < M; i++) tmp[(size_t)k * M + i] = Af[(size_t)i * K + k];
        ct_t16_pairs(A16, tmp, M, K, M);
        ars = 2, acs = 2 * (ptrdiff_t)M;
    }
    if (!bt) {
        ct_t16_pairs(B16, Bf, N, K, N);
    } else { /* B^T (N x Kp, zero-padded to an even K) packed by columns */
        for (int j = 0; j < N; j++)
            for (int k = 0; k < Kp; k++)
                tmp[(size_t)j * Kp + k] = k < K ? Bf[(size_t)k * N + j] : 0;
        ct_t16_cols(B16, tmp, Kp, N, Kp);
    }
    for (size_t i = 0; i < nc; i++) C0[i] = acc ? frnd() : NAN;
    memcpy(C, C0, nc * sizeof(float));
    ct_tile16_gemm(M, N, K2, A16, ars, acs, B16, ldb, alpha, acc, C, ldc);
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < ldc; j++) {
            float got = C[(size_t)i * ldc + j], was = C0[(size_t)i * ldc + j];
            if (j >= N) {
                bad += !(got == was || (isnan(got) && isnan(was)));
                continue;
            }
            double s = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double p = w16(ct_f32_to_bf16(Af[(size_t)i * K + k])) *
                           w16(ct_f32_to_bf16(Bf[(size_t)k * N + j]));
                s += p;
                mag += fabs(p);
            }
            s *= alpha, mag *= fabs(alpha);
            if (acc) s += was, mag += fabs(was);
            double err = fabs(got - s) / (mag + 1e-30);
            if (!(err <= 1e-6) && !(mag == 0 && got == 0)) bad++;
            if (err > worst) worst = err;
        }
    CHECK_MSG(bad == 0,
              "tile16 M=%d N=%d K=%d ta=%d bt=%d ldc=%d alpha=%g acc=%d: %d wrong (worst %.3g)",
              M, N, K, ta, bt, ldc, alpha, acc, bad, worst);
    free(Af), free(Bf), free(tmp), free(A16), free(B16), free(C), free(C0);
}

static void test_gemm16(void) {
    const int Ms[] = {1, 2, 5, 6, 7, 13, 64};
    const int Ns[] = {1, 15, 16, 17, 63, 64, 65, 128, 130};
    const int Ks[] = {1, 2, 7, 64, 129};
    for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
        for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++)
            for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++) {
                bool ta = (a + b) % 2, bt = (b + c) % 2 && Ks[c] % 2 == 0, acc = (a + c) % 2;
                int ldc = Ns[b] + ((a + c) % 3 ? 3 : 0);
                one16(Ms[a], Ns[b], Ks[c], ta, bt, ldc, c % 2 ? 0.125f : 1.0f, acc);
            }
    // attention's shapes: S = scale Q K^T (64 x 128 x 64), O += P V, dK += dS^T Q
    one16(64, 128, 64, false, true, 128, 0.125f, false);
    one16(64, 64, 128, false, false, 2304, 1.0f, true);
    one16(128, 64, 64, true, false, 2304, 1.0f, true);
    float c = 7.0f;
    uint16_t x[2] = {0x3f80, 0x3f80};
    ct_tile16_gemm(0, 4, 1, x, 2, 2, x, 2, 1.0f, false, &c, 1);
    ct_tile16_gemm(4, 0, 1, x, 2, 2, x, 2, 1.0f, false, &c, 1);
    CHECK(c == 7.0f);
}

/* The packs against ct_f32_to_bf16 element by element (NaN, inf and huge
 * values included), at shapes that take the vector paths' whole blocks
 * (16 rows, 32 columns) and their tails. A subnormal input packs to its
 * rounding in plain C and to a zero of its sign where the pack converts with
 * AVX512_BF16 (as vdpbf16ps reads it either way). */
static void test_pack16(void) {
    const int shapes[][3] = {{7, 10, 13}, {37, 70, 75}, {16, 64, 2304}, {33, 2, 5}, {2, 96, 96}};
    for (size_t t = 0; t < sizeof shapes / sizeof *shapes; t++) {
        int R = shapes[t][0], N = shapes[t][1], LD = shapes[t][2], NP = N + 2;
        float *S = malloc((size_t)R * LD * sizeof *S);
        for (int i = 0; i < R * LD; i++) S[i] = frnd() * (i % 5 == 0 ? 1e30f : 1.0f);
        S[3 % N] = NAN, S[LD + 1 % N] = INFINITY;
        S[(R - 1) * LD + N - 1] = -1e-39f; /* subnormal */
        uint16_t *rows = malloc((size_t)R * NP * 2), *pairs = malloc((size_t)(R + 1) * N * 2);
        uint16_t *cols = malloc((size_t)R * N * 2);
        ct_t16_rows(rows, S, LD, R, N, NP);
        ct_t16_pairs(pairs, S, LD, R, N);
        ct_t16_cols(cols, S, LD, R, N);
        int bad = 0;
        for (int r = 0; r < R; r++) {
            for (int j = 0; j < NP; j++) {
                float f = j < N ? S[r * LD + j] : 0.0f;
                uint16_t want = ct_f32_to_bf16(f);
                if (ct_tile16_native() && f != 0.0f && fabsf(f) < 1.1754944e-38f)
                    want = f < 0 ? 0x8000 : 0;
                bad += rows[r * NP + j] != want;
                if (j >= N) continue;
                bad += pairs[(r / 2) * 2 * N + 2 * j + (r & 1)] != want;
                bad += cols[(j / 2) * 2 * R + 2 * r + (j & 1)] != want;
            }
        }
        for (int j = 0; R % 2 && j < N; j++) /* odd R: the last pair's partner is zero */
            bad += pairs[(R / 2) * 2 * N + 2 * j + 1] != 0;
        CHECK_MSG(bad == 0, "bf16 packs R=%d N=%d: %d wrong", R, N, bad);
        free(S), free(rows), free(pairs), free(cols);
    }
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
    // vn_exp_nonpos: vn_exp's bits on x <= 0 (down past the clamp), NaN kept
    {
        int nd = 0, nv = 0;
        for (int i = 0; i < 2048; i += VN) {
            vnf v, a, b;
            for (int l = 0; l < VN; l++) v[l] = -0.05f * (float)(i + l);
            a = vn_exp(v), b = vn_exp_nonpos(v);
            nd += memcmp(&a, &b, sizeof a) != 0;
            nv++;
        }
        vnf q = vn_exp_nonpos(vn_set1(NAN));
        CHECK_MSG(nd == 0, "vn_exp_nonpos differs from vn_exp on x <= 0 in %d of %d vectors",
                  nd, nv);
        CHECK(isnan(q[0]) && isnan(q[VN - 1]));
    }
    // vn_hsum and vn_hmax: the lanes' sum (to rounding) and maximum
    {
        vnf v;
        double want = 0;
        float mx = -INFINITY;
        for (int l = 0; l < VN; l++) {
            v[l] = frnd() * 100.0f;
            want += v[l];
            mx = v[l] > mx ? v[l] : mx;
        }
        CHECK(fabs(vn_hsum(v) - want) <= 1e-5 * 100.0 * VN && vn_hmax(v) == mx);
    }
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
    test_gemm16();
    test_pack16();
    test_vmath();
    return ct_test_result("test_tile");
}
