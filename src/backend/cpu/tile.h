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

/* C = (acc ? C : 0) + A B as above. M, N, K >= 0 (nothing is read or written
 * when M or N is 0; K = 0 leaves C, or zeroes it without acc). K <= 512. */
void ct_tile_gemm(int M, int N, int K, const float *A, ptrdiff_t ars, ptrdiff_t acs,
                  const float *B, ptrdiff_t ldb, bool acc, float *C, ptrdiff_t ldc);

/* Bt (K x N, row stride N) = alpha B^T, where B (N x K) has row stride ldb:
 * the row-major right operand of A B^T for ct_tile_gemm. */
void ct_tile_pack_t(float *Bt, const float *B, ptrdiff_t ldb, int N, int K, float alpha);

/* Bp (N x K, row stride K) = B (N x K, row stride ldb): rows made contiguous. */
void ct_tile_pack_rows(float *Bp, const float *B, ptrdiff_t ldb, int N, int K);

#endif
