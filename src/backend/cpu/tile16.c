/*
 * Attention's bf16 tile products (tile.h): the operands' values come in
 * pairs along the product's inner dimension k, so one vdpbf16ps (AVX512_BF16)
 * adds two products to each of 16 fp32 lanes. A pair of A is one 32-bit
 * value (two adjacent bf16) broadcast to every lane; B is packed so that a
 * row of pairs holds, for each column, the two k-values side by side.
 * One register block is T16_MR = 6 rows of C by T16_NV = 4 vectors (64
 * columns): 24 accumulators, B's four vectors and one broadcast (29 of
 * AVX-512's 32 registers). Columns past N are masked lanes (the loads read
 * nothing there, the stores write nothing), so there is no padded copy.
 * Without AVX512_BF16 the same products run in plain C with the pair's two
 * products added in vdpbf16ps's order (odd k first); the hardware also
 * flushes subnormal inputs and outputs, which the plain code does not (a
 * difference at 1e-38, below what the kernels' checks see).
 * The packs round fp32 to bf16 (nearest even, NaN kept) as they copy, so no
 * separate conversion pass exists.
 */
#include "backend/cpu/tile.h"

#include <string.h>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512BF16__)
#include <immintrin.h>
#define T16_NATIVE 1
#endif


/* One pair (lo first) stored at p: two adjacent bf16. */
static inline void st32(uint16_t *p, uint32_t v) { memcpy(p, &v, sizeof v); }

#ifdef T16_NATIVE
/* The packs with AVX512_BF16's conversions (vcvtne2ps2bf16: nearest even,
 * NaN made quiet, as ct_t16_round; a subnormal reads as zero, as the
 * products read one anyway) on whole vectors, masked at a row's end. */

/* The lanes of n floats at p (at most 16) and zeros past them. */
static inline __m512 ld16(const float *p, int n) {
    return n >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
}
/* 32 floats (n of them, zeros after) as 32 bf16 in order. */
static inline __m512i cvt32(const float *p, int n) {
    __m512 lo = ld16(p, n), hi = n > 16 ? ld16(p + 16, n - 16) : _mm512_setzero_ps();
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}
static inline void st16x(uint16_t *d, __m512i v, int n) { /* n <= 32 bf16 */
    if (n >= 32)
        _mm512_storeu_si512(d, v);
    else
        _mm512_mask_storeu_epi16(d, (__mmask32)((1ull << n) - 1), v);
}

void ct_t16_rows(uint16_t *dst, const float *src, ptrdiff_t lds, int rows, int n, int npad) {
    for (int r = 0; r < rows; r++) {
        const float *s = src + r * lds;
        uint16_t *d = dst + (ptrdiff_t)r * npad;
        for (int j = 0; j < n; j += 32) st16x(d + j, cvt32(s + j, n - j), n - j);
        for (int j = n; j < npad; j++) d[j] = 0;
    }
}

void ct_t16_pairs(uint16_t *dst, const float *src, ptrdiff_t lds, int rows, int n) {
    for (int r = 0; r < rows; r += 2) {
        const float *s0 = src + r * lds, *s1 = s0 + lds;
        uint16_t *d = dst + (ptrdiff_t)r * n;
        bool two = r + 1 < rows;
        for (int j = 0; j < n; j += 16) {
            int m = n - j < 16 ? n - j : 16;
            __m512 b = two ? ld16(s1 + j, m) : _mm512_setzero_ps();
            st16x(d + 2 * j, ct_t16_zip(ld16(s0 + j, m), b), 2 * m);
        }
    }
}

/* 16 rows of 16 32-bit values transposed in registers (a[i] lane j ->
 * a[j] lane i): pairs, then quads, then 128-bit lanes. */
static inline void tr16(__m512i a[16]) {
    __m512i b[16], c[16];
    for (int k = 0; k < 8; k++) {
        b[2 * k] = _mm512_unpacklo_epi32(a[2 * k], a[2 * k + 1]);
        b[2 * k + 1] = _mm512_unpackhi_epi32(a[2 * k], a[2 * k + 1]);
    }
    for (int k = 0; k < 4; k++) { /* c[4k + m], lane L: column 4L + m, rows 4k..4k+3 */
        c[4 * k] = _mm512_unpacklo_epi64(b[4 * k], b[4 * k + 2]);
        c[4 * k + 1] = _mm512_unpackhi_epi64(b[4 * k], b[4 * k + 2]);
        c[4 * k + 2] = _mm512_unpacklo_epi64(b[4 * k + 1], b[4 * k + 3]);
        c[4 * k + 3] = _mm512_unpackhi_epi64(b[4 * k + 1], b[4 * k + 3]);
    }
    for (int m = 0; m < 4; m++) {
        __m512i e0 = _mm512_shuffle_i32x4(c[m], c[4 + m], 0x44);
        __m512i e1 = _mm512_shuffle_i32x4(c[m], c[4 + m], 0xee);
        __m512i e2 = _mm512_shuffle_i32x4(c[8 + m], c[12 + m], 0x44);
        __m512i e3 = _mm512_shuffle_i32x4(c[8 + m], c[12 + m], 0xee);
        a[m] = _mm512_shuffle_i32x4(e0, e2, 0x88);
        a[4 + m] = _mm512_shuffle_i32x4(e0, e2, 0xdd);
        a[8 + m] = _mm512_shuffle_i32x4(e1, e3, 0x88);
        a[12 + m] = _mm512_shuffle_i32x4(e1, e3, 0xdd);
    }
}

void ct_t16_cols(uint16_t *dst, const float *src, ptrdiff_t lds, int rows, int n) {
    int r0 = 0;
    /* 16 rows at a time: each row's next 16 pairs are one vector of 32-bit
     * values; transposed, each vector is one pair-row's 16 entries */
    for (; r0 + 16 <= rows; r0 += 16) {
        for (int k = 0; k < n; k += 32) {
            __m512i a[16];
            for (int r = 0; r < 16; r++) a[r] = cvt32(src + (r0 + r) * lds + k, n - k);
            tr16(a);
            int np = (n - k) / 2 < 16 ? (n - k) / 2 : 16;
            for (int p = 0; p < np; p++)
                _mm512_storeu_si512(dst + 2 * ((ptrdiff_t)(k / 2 + p) * rows + r0), a[p]);
        }
    }
    for (; r0 < rows; r0++) /* the last rows: converted alike, stored a pair at a time */
        for (int k = 0; k < n; k += 32) {
            uint32_t p[16];
            _mm512_storeu_si512(p, cvt32(src + r0 * lds + k, n - k));
            for (int q = 0; q < 16 && k + 2 * q < n; q++)
                st32(dst + 2 * ((ptrdiff_t)(k / 2 + q) * rows + r0), p[q]);
        }
}
#else
void ct_t16_rows(uint16_t *dst, const float *src, ptrdiff_t lds, int rows, int n, int npad) {
    for (int r = 0; r < rows; r++) {
        const float *s = src + r * lds;
        uint16_t *d = dst + (ptrdiff_t)r * npad;
        for (int j = 0; j < n; j++) d[j] = (uint16_t)ct_t16_round(s[j]);
        for (int j = n; j < npad; j++) d[j] = 0;
    }
}

void ct_t16_pairs(uint16_t *dst, const float *src, ptrdiff_t lds, int rows, int n) {
    for (int r = 0; r < rows; r += 2) {
        const float *s0 = src + r * lds;
        uint16_t *d = dst + (ptrdiff_t)r * n;
        if (r + 1 < rows) {
            const float *s1 = s0 + lds;
            for (int j = 0; j < n; j++)
                st32(d + 2 * j, ct_t16_round(s0[j]) | ct_t16_round(s1[j]) << 16);
        } else {
            for (int j = 0; j < n; j++) st32(d + 2 * j, ct_t16_round(s0[j]));
        }
    }
}

void ct_t16_cols(uint16_t *dst, const float *src, ptrdiff_t lds, int rows, int n) {
    // 8 rows at a time, so each pair-row's writes stay in one cache line
    for (int r0 = 0; r0 < rows; r0 += 8) {
        int rn = rows - r0 < 8 ? rows - r0 : 8;
        for (int k = 0; k < n; k += 2)
            for (int r = 0; r < rn; r++) {
                const float *s = src + (r0 + r) * lds + k;
                st32(dst + 2 * ((ptrdiff_t)(k / 2) * rows + r0 + r),
                     ct_t16_round(s[0]) | ct_t16_round(s[1]) << 16);
            }
    }
}

#endif

#ifdef T16_NATIVE
#define T16_MR 6
#define T16_NV 4

/* One block: rows [0, mr) of C against the T16_NV vectors whose lane masks
 * are mk (all-zero masks: columns past N). Always inlined with a constant
 * mr, so the accumulators live in registers. */
static inline __attribute__((always_inline)) void blk16(int mr, int K2, const uint16_t *A,
                                                        ptrdiff_t ars, ptrdiff_t acs,
                                                        const uint16_t *B, ptrdiff_t ldb,
                                                        const __mmask16 *mk, float alpha,
                                                        bool acc, float *C, ptrdiff_t ldc) {
    __m512 c[T16_MR][T16_NV];
#pragma GCC unroll 8
    for (int i = 0; i < T16_MR; i++)
#pragma GCC unroll 8
        for (int v = 0; v < T16_NV; v++) c[i][v] = _mm512_setzero_ps();
    for (int kp = 0; kp < K2; kp++) {
        const uint16_t *b = B + kp * ldb;
        __m512i bv[T16_NV];
#pragma GCC unroll 8
        for (int v = 0; v < T16_NV; v++) bv[v] = _mm512_maskz_loadu_epi32(mk[v], b + 32 * v);
#pragma GCC unroll 8
        for (int i = 0; i < T16_MR; i++) {
            if (i >= mr) break;
            uint32_t a;
            memcpy(&a, A + i * ars + kp * acs, sizeof a);
            __m512i av = _mm512_set1_epi32((int)a);
#pragma GCC unroll 8
            for (int v = 0; v < T16_NV; v++)
                c[i][v] = _mm512_dpbf16_ps(c[i][v], (__m512bh)av, (__m512bh)bv[v]);
        }
    }
    const __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
    for (int i = 0; i < T16_MR; i++) {
        if (i >= mr) break;
#pragma GCC unroll 8
        for (int v = 0; v < T16_NV; v++) {
            float *cp = C + i * ldc + 16 * v;
            __m512 r = acc ? _mm512_fmadd_ps(c[i][v], al, _mm512_maskz_loadu_ps(mk[v], cp))
                           : _mm512_mul_ps(c[i][v], al);
            _mm512_mask_storeu_ps(cp, mk[v], r);
        }
    }
}

void ct_tile16_gemm(int M, int N, int K2, const uint16_t *A, ptrdiff_t ars, ptrdiff_t acs,
                    const uint16_t *B, ptrdiff_t ldb, float alpha, bool acc, float *C,
                    ptrdiff_t ldc) {
    if (M <= 0 || N <= 0) return;
    for (int j = 0; j < N; j += 16 * T16_NV) {
        __mmask16 mk[T16_NV];
        for (int v = 0; v < T16_NV; v++) {
            int left = N - j - 16 * v;
            mk[v] = left >= 16 ? (__mmask16)0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
        }
        const uint16_t *b = B + 2 * j;
        float *c = C + j;
        int i = 0;
        for (; i + T16_MR <= M; i += T16_MR)
            blk16(T16_MR, K2, A + i * ars, ars, acs, b, ldb, mk, alpha, acc, c + i * ldc, ldc);
        const uint16_t *a = A + i * ars;
        c += i * ldc;
        switch (M - i) {
        case 5: blk16(5, K2, a, ars, acs, b, ldb, mk, alpha, acc, c, ldc); break;
        case 4: blk16(4, K2, a, ars, acs, b, ldb, mk, alpha, acc, c, ldc); break;
        case 3: blk16(3, K2, a, ars, acs, b, ldb, mk, alpha, acc, c, ldc); break;
        case 2: blk16(2, K2, a, ars, acs, b, ldb, mk, alpha, acc, c, ldc); break;
        case 1: blk16(1, K2, a, ars, acs, b, ldb, mk, alpha, acc, c, ldc); break;
        default: break;
        }
    }
}

bool ct_tile16_native(void) { return true; }
#else
static inline float w16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

void ct_tile16_gemm(int M, int N, int K2, const uint16_t *A, ptrdiff_t ars, ptrdiff_t acs,
                    const uint16_t *B, ptrdiff_t ldb, float alpha, bool acc, float *C,
                    ptrdiff_t ldc) {
    float row[512];
    for (int i = 0; i < M; i++) {
        for (int j0 = 0; j0 < N; j0 += 512) {
            int nj = N - j0 < 512 ? N - j0 : 512;
            for (int j = 0; j < nj; j++) row[j] = 0.0f;
            for (int kp = 0; kp < K2; kp++) {
                const uint16_t *a = A + i * ars + kp * acs;
                float a0 = w16(a[0]), a1 = w16(a[1]);
                const uint16_t *b = B + kp * ldb + 2 * j0;
                for (int j = 0; j < nj; j++) {
                    float t = row[j] + a1 * w16(b[2 * j + 1]);
                    row[j] = t + a0 * w16(b[2 * j]);
                }
            }
            float *c = C + i * ldc + j0;
            for (int j = 0; j < nj; j++) c[j] = acc ? c[j] + alpha * row[j] : alpha * row[j];
        }
    }
}

bool ct_tile16_native(void) { return false; }
#endif
