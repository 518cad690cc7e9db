/*
 * Register-blocked products of attention's tiles (at most a few hundred rows
 * and columns, one thread): what a BLAS call spends on packing and dispatch is
 * as large as the product at these sizes, so attention calls these instead.
 * C (M x N, row stride ldc) = (acc ? C : 0) + A B, where A (M x K) is read as
 * A[i*ars + k*acs] (any two strides: a row-major tile, its transpose, strided
 * qkv rows) and B (K x N) is row-major with row stride ldb (qkv rows, or a
 * tile packed by ct_tile_pack_t). The block is TILE_MR rows by TILE_NR
 * columns held in registers over the whole K loop; A's values are broadcast,
 * B's rows loaded as vectors. Products are fused multiply-adds (tile.c is
 * compiled with -ffp-contract=fast), summed in k order. Internal to
 * src/backend/cpu.
 */
#ifndef CT_CPU_TILE_H
#define CT_CPU_TILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* C = (acc ? C : 0) + A B as above. M, N, K >= 0 (nothing is read or written
 * when M or N is 0; K = 0 leaves C, or zeroes it without acc). K <= 512. */
void ct_tile_gemm(int M, int N, int K, const float *A, ptrdiff_t ars, ptrdiff_t acs,
                  const float *B, ptrdiff_t ldb, bool acc, float *C, ptrdiff_t ldc);

/* Bt (K x N, row stride N) = alpha B^T, where B (N x K) has row stride ldb:
 * the row-major right operand of A B^T for ct_tile_gemm. */
void ct_tile_pack_t(float *Bt, const float *B, ptrdiff_t ldb, int N, int K, float alpha);

/* Bp (N x K, row stride K) = B (N x K, row stride ldb): rows made contiguous. */
void ct_tile_pack_rows(float *Bp, const float *B, ptrdiff_t ldb, int N, int K);

/*
 * The bf16 tile products (tile16.c) for precision bf16's attention: bf16
 * operands, exact products, fp32 sums. The inner dimension goes in pairs:
 * A's pair (i, kp), two adjacent bf16 holding A(i, 2kp) and A(i, 2kp+1), is at
 * A + i*ars + kp*acs (strides in bf16 elements: a row-major bf16 tile has ars
 * = its row length, acs = 2; a ct_t16_pairs pack read transposed has ars = 2,
 * acs = 2 x its width); B's pair-row kp, at B + kp*ldb, holds B(2kp, j) and
 * B(2kp+1, j) side by side for each column j (a ct_t16_pairs or ct_t16_cols
 * pack). An odd K is a zero pair member. C (M x N fp32, row stride ldc) =
 * alpha (A B) + (acc ? C : 0). vdpbf16ps where the target has AVX512_BF16
 * (ct_tile16_native), plain C elsewhere.
 */
void ct_tile16_gemm(int M, int N, int K2, const uint16_t *A, ptrdiff_t ars, ptrdiff_t acs,
                    const uint16_t *B, ptrdiff_t ldb, float alpha, bool acc, float *C,
                    ptrdiff_t ldc);
bool ct_tile16_native(void);

/* fp32 -> bf16 bits, nearest even, NaN made quiet: core/dtype.c's rounding,
 * inline so that the packing and row loops vectorise it. */
static inline uint32_t ct_t16_round(float f) {
    uint32_t u;
    __builtin_memcpy(&u, &f, sizeof u);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x0040u;
    return (u & 0x7fffffffu) > 0x7f800000u ? nan : rounded;
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512BF16__)
#include <immintrin.h>
/* Two vectors of 16 floats as 16 bf16 pairs, a[j] in the low half of lane j
 * and b[j] in its high half: one vcvtne2ps2bf16 (ct_t16_round's bits, a
 * subnormal read as zero) and one vpermw. */
static inline __m512i ct_t16_zip(__m512 a, __m512 b) {
    static const uint16_t zip[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                     8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    __m512i idx;
    __builtin_memcpy(&idx, zip, sizeof idx);
    return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(b, a));
}
#endif

/* Packs, rounding fp32 to bf16 (nearest even; with AVX512_BF16 a subnormal
 * packs as a zero of its sign, as vdpbf16ps reads it anyway) as they copy;
 * src is rows x n with row stride lds.
 * rows: dst (rows x npad, row-major) = src, columns [n, npad) zero: a tile
 *   read as A along its rows (pairs of columns).
 * pairs: dst pair-row r/2 holds rows r and r+1 interleaved (2n bf16 each; an
 *   odd last row's partner is 0): B whose k is src's row, or A read
 *   transposed (A(j, kp) = the pair of rows 2kp, 2kp+1 at column j).
 * cols: dst pair-row k/2 holds, for each row r, src(r, k) and src(r, k+1)
 *   side by side (2 rows bf16 each; n even): B = src^T, k running along
 *   src's rows. */
void ct_t16_rows(uint16_t *dst, const float *src, ptrdiff_t lds, int rows, int n, int npad);
void ct_t16_pairs(uint16_t *dst, const float *src, ptrdiff_t lds, int rows, int n);
void ct_t16_cols(uint16_t *dst, const float *src, ptrdiff_t lds, int rows, int n);

#endif
