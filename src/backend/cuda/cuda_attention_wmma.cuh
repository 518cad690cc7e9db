/*
 * The CUDA backend's tensor-core flash attention (device code only, included
 * by cuda_flash.cu after <mma.h>, <cuda_bf16.h> and
 * cuda_attention_tiled.cuh; tests/gpu/cuda_emu.cpp runs it on the CPU): FlashAttention-2's loop order on bf16 tiles
 * through WMMA (nvcuda::wmma, 16 x 16 x 16, fp32 accumulators), head sizes 64
 * and 128, grouped-query, packed rows, causal tiles skipped, the log-sum-exp
 * saved for the backward. It is the attention_forward_bf16 / _backward_bf16
 * entries' fast path (train.precision = bf16); fp32 runs never reach it.
 *
 * Numerics (an approximation of the fp32 attention, as autocast's attention on
 * bf16 q, k, v is): q, k, v and dout rounded to bf16 (nearest even) as their
 * tiles are staged; scores, softmax, lse, D and every accumulation in fp32;
 * the probabilities P rounded to bf16 before they multiply v or dout, dS
 * before it multiplies k or q.
 *
 * Deterministic, without atomics: the backward is two kernels, dq (a block
 * per query tile, over its key tiles in order) and dk, dv (a block per key
 * tile of a KV head, over the query heads of its group in order, then their
 * query tiles in order); each output element has one owner that adds it once.
 * The cost is recomputing P in both (seven tile products instead of five).
 *
 * WMMA leaves the fragments' element layout unspecified, so nothing here
 * assumes one: element-wise work on an accumulator reads each element's row
 * and column from two "map" fragments loaded from a matrix of row (column)
 * indices (a loaded accumulator has the layout mma_sync's results have), and
 * row reductions (the softmax's max and sum) go through shared memory. That
 * is what lets tests/gpu/cuda_emu.cpp run these kernels on the CPU with its
 * own (scrambled) layout. Leaves out: dropout (the entries run the exact
 * kernels then), cp.async double buffering, raw mma.sync register layouts.
 */
#ifndef CT_BACKEND_CUDA_ATTENTION_WMMA_CUH
#define CT_BACKEND_CUDA_ATTENTION_WMMA_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define FA_WARPS 4
#define FA_THREADS (32 * FA_WARPS)
#define FA_BQ 64 /* query rows of a forward or dq block: 16 per warp */
#define FA_BK 64 /* keys per tile (forward, dq); key rows of a dk, dv block */
/* Query rows staged at once by a dk, dv block: 32 at head size 128 keeps its
 * shared memory near 66 KiB (two blocks per SM on an A100). */
#define FA_DKV_BQ(HS) ((HS) == 128 ? 32 : 64)
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

typedef __nv_bfloat16 fa_bf16;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __nv_bfloat16,
                               nvcuda::wmma::row_major>
    fa_a;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __nv_bfloat16,
                               nvcuda::wmma::row_major>
    fa_b_row;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __nv_bfloat16,
                               nvcuda::wmma::col_major>
    fa_b_col;
typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> fa_acc;

/* Shared-memory carving: each region starts 128 bytes after a multiple of 128
 * (load_matrix_sync wants 32-byte aligned tiles; every row stride below is a
 * multiple of 16 bytes and every tile starts at a row multiple of 16). */
__host__ __device__ constexpr size_t fa_round(size_t n) { return (n + 127) / 128 * 128; }
/* bf16 tile of r rows, HS + 8 elements apart (the + 8 spreads the banks) */
__host__ __device__ constexpr size_t fa_tile_bytes(int r, int HS) {
    return fa_round((size_t)r * (HS + 8) * 2);
}
__host__ __device__ constexpr size_t fa_max(size_t a, size_t b) { return a > b ? a : b; }
#define FA_XS_BYTES ((size_t)FA_WARPS * 256 * 4) /* a 16 x 16 float scratch per warp */

/* forward: Q tile | S (fp32 scores, after Q is in registers), K, V, P, two row arrays */
__host__ __device__ constexpr size_t fa_fwd_qs_bytes(int HS) {
    return fa_max(fa_tile_bytes(FA_BQ, HS), fa_round((size_t)FA_BQ * (FA_BK + 4) * 4));
}
__host__ __device__ constexpr size_t fa_fwd_smem(int HS) {
    return fa_fwd_qs_bytes(HS) + 2 * fa_tile_bytes(FA_BK, HS) +
           fa_round((size_t)FA_BQ * (FA_BK + 8) * 2) + fa_round((size_t)FA_BQ * 8);
}
/* dq: Q, dO, K, V tiles, dS (bf16), the warps' scratch, lse, D, first keys */
__host__ __device__ constexpr size_t fa_dq_smem(int HS) {
    return 2 * fa_tile_bytes(FA_BQ, HS) + 2 * fa_tile_bytes(FA_BK, HS) +
           fa_round((size_t)FA_BQ * (FA_BK + 8) * 2) + FA_XS_BYTES + fa_round((size_t)FA_BQ * 12);
}
/* dk, dv: K, V tiles, Q, dO tiles, P^T and dS^T (bf16), scratch, lse, D, first keys */
__host__ __device__ constexpr size_t fa_dkv_smem(int HS) {
    return 2 * fa_tile_bytes(FA_BK, HS) + 2 * fa_tile_bytes(FA_DKV_BQ(HS), HS) +
           2 * fa_round((size_t)FA_BK * (FA_DKV_BQ(HS) + 8) * 2) + FA_XS_BYTES +
           fa_round((size_t)FA_DKV_BQ(HS) * 12);
}

/* Stages rows [r0, r0 + n) of an fp32 operand whose rows are W floats apart
 * (src at the head's first column, HS floats each) as bf16 in dst[R][HS + 8];
 * rows past n are zeros (a ragged last tile multiplies nothing). */
template <int HS, int R>
__device__ inline void fa_stage(fa_bf16 *dst, const float *src, size_t W, int r0, int n) {
    for (int e = threadIdx.x; e < R * HS / 4; e += blockDim.x) {
        int r = e / (HS / 4), c = (e % (HS / 4)) * 4;
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < n) x = *(const float4 *)(src + (size_t)(r0 + r) * W + c);
        __nv_bfloat162 *d = (__nv_bfloat162 *)(dst + r * (HS + 8) + c);
        d[0] = __floats2bfloat162_rn(x.x, x.y);
        d[1] = __floats2bfloat162_rn(x.z, x.w);
    }
}

/* The backward's values of query rows [i0, i0 + R) of head h, one a thread
 * below R: lse in log2 units, D as a float and the row's first key (0, 0
 * and T past the last row). */
template <int R>
__device__ inline void fa_row_values(float *lse_s, float *D_s, int *first_s, const float *lse,
                                     const double *D, const int32_t *pos, int b, int h, int NH,
                                     int T, int i0) {
    if (threadIdx.x < R) {
        int i = i0 + (int)threadIdx.x;
        size_t rr = ((size_t)b * NH + h) * T + i;
        lse_s[threadIdx.x] = i < T ? lse[rr] * FA_LOG2E : 0.0f;
        D_s[threadIdx.x] = i < T ? (float)D[rr] : 0.0f;
        first_s[threadIdx.x] = i < T ? attn_first_key(pos, b, T, i) : T;
    }
}

/* map: an accumulator fragment whose every element holds its own row (by_row)
 * or column within the 16 x 16 tile, through xs, the warp's 16 x 16 scratch. */
__device__ inline void fa_index_map(fa_acc &map, float *xs, bool by_row) {
    int lane = threadIdx.x & 31;
    __syncwarp(); /* xs may still be read */
    for (int e = lane; e < 256; e += 32) xs[e] = (float)(by_row ? e / 16 : e % 16);
    __syncwarp();
    nvcuda::wmma::load_matrix_sync(map, xs, 16, nvcuda::wmma::mem_row_major);
}

/* dst (16 x 16 of a bf16 matrix, ld elements apart) = bf16(f), through xs. */
__device__ inline void fa_store_bf16(fa_bf16 *dst, int ld, const fa_acc &f, float *xs) {
    int lane = threadIdx.x & 31;
    __syncwarp(); /* xs may still be read */
    nvcuda::wmma::store_matrix_sync(xs, f, 16, nvcuda::wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 256; e += 32) dst[(e / 16) * ld + e % 16] = __float2bfloat16_rn(xs[e]);
}

/* dst rows r0.. (ld floats apart, up to row `rows`) += f (16 x 16), through xs. */
__device__ inline void fa_add_rows(float *dst, size_t ld, int rows, const fa_acc &f, float *xs) {
    int lane = threadIdx.x & 31;
    __syncwarp();
    nvcuda::wmma::store_matrix_sync(xs, f, 16, nvcuda::wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 256; e += 32)
        if (e / 16 < rows) dst[(size_t)(e / 16) * ld + e % 16] += xs[e];
}

/* ---------------------------------------------------------------- forward
 * Block (query tile, h, b), four warps of 16 query rows. Per key tile
 * (from the block's first key to its last row, staged by the block): each
 * warp forms S = Q K^T (16 x 64) on tensor cores, stores it, two lanes per
 * row take the online softmax (max, rescale, P = exp2(S*scale*log2e - m),
 * row sum) and write P as bf16, then O = O*corr + P V in the accumulators.
 * A warp skips tiles its rows do not see; the block skips the tiles none
 * of them does. Writes out (B,T,NH*HS) and lse (B,NH,T). */
template <int HS>
__device__ void fa_fwd_body(unsigned char *smem, float *out, float *lse, const float *qkv,
                            const int32_t *pos, int T, int NH, int NKV) {
    using namespace nvcuda;
    constexpr int LDH = HS + 8, LDS = FA_BK + 4, LDP = FA_BK + 8, ND = HS / 16, NK = FA_BK / 16;
    fa_bf16 *Qs = (fa_bf16 *)smem;
    float *Ss = (float *)smem; /* the same bytes, once Q is in registers */
    fa_bf16 *Ks = (fa_bf16 *)(smem + fa_fwd_qs_bytes(HS));
    fa_bf16 *Vs = (fa_bf16 *)((unsigned char *)Ks + fa_tile_bytes(FA_BK, HS));
    fa_bf16 *Ps = (fa_bf16 *)((unsigned char *)Vs + fa_tile_bytes(FA_BK, HS));
    float *corr_s = (float *)((unsigned char *)Ps + fa_round((size_t)FA_BQ * LDP * 2));
    int *first_s = (int *)(corr_s + FA_BQ);

    int h = blockIdx.y, b = blockIdx.z, q0 = blockIdx.x * FA_BQ;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    size_t C = (size_t)NH * HS, W = (size_t)(NH + 2 * NKV) * HS;
    const float *qkv_b = qkv + (size_t)b * T * W;
    const float *kb = qkv_b + C + (size_t)(h / (NH / NKV)) * HS, *vb = kb + (size_t)NKV * HS;

    fa_stage<HS, FA_BQ>(Qs, qkv_b + (size_t)h * HS, W, q0, min(FA_BQ, T - q0));
    if (threadIdx.x < FA_BQ) {
        int i = q0 + (int)threadIdx.x;
        first_s[threadIdx.x] = i < T ? attn_first_key(pos, b, T, i) : T;
    }
    __syncthreads();
    fa_a qf[ND];
#pragma unroll
    for (int kk = 0; kk < ND; kk++) wmma::load_matrix_sync(qf[kk], Qs + warp * 16 * LDH + kk * 16, LDH);
    int kmin = T, wfirst = T; /* the block's and the warp's first key */
    for (int r = 0; r < FA_BQ; r++) kmin = min(kmin, first_s[r]);
    for (int r = 0; r < 16; r++) wfirst = min(wfirst, first_s[warp * 16 + r]);
    int wr0 = q0 + warp * 16, wlast = min(wr0 + 15, T - 1);
    /* this lane's row (two lanes a row, 32 keys each) */
    int r = lane >> 1, half = lane & 1, i = wr0 + r, j0 = first_s[warp * 16 + r];
    __syncthreads(); /* every warp holds its Q: S may overwrite the tile */
    float *Sw = Ss + warp * 16 * LDS;
    fa_acc rows;
    fa_index_map(rows, Sw, true);
    fa_acc o[ND];
#pragma unroll
    for (int d = 0; d < ND; d++) wmma::fill_fragment(o[d], 0.0f);
    float m = -INFINITY, l = 0.0f; /* the row's running max (log2 units) and sum */
    const float sl2 = FA_LOG2E / sqrtf((float)HS);
    int last = min(q0 + FA_BQ, T) - 1;
    for (int k0 = (kmin / FA_BK) * FA_BK; k0 <= last; k0 += FA_BK) {
        __syncthreads(); /* the previous tile is read */
        fa_stage<HS, FA_BK>(Ks, kb, W, k0, min(FA_BK, T - k0));
        fa_stage<HS, FA_BK>(Vs, vb, W, k0, min(FA_BK, T - k0));
        __syncthreads();
        if (wr0 >= T || k0 > wlast || k0 + FA_BK <= wfirst) continue; /* warp-uniform */
        fa_acc s[NK];
#pragma unroll
        for (int n = 0; n < NK; n++) wmma::fill_fragment(s[n], 0.0f);
#pragma unroll
        for (int kk = 0; kk < ND; kk++)
#pragma unroll
            for (int n = 0; n < NK; n++) {
                fa_b_col kf; /* K^T: Ks holds K row-major, that is K^T column-major */
                wmma::load_matrix_sync(kf, Ks + n * 16 * LDH + kk * 16, LDH);
                wmma::mma_sync(s[n], qf[kk], kf, s[n]);
            }
        __syncwarp(); /* Sw's earlier readers are done */
#pragma unroll
        for (int n = 0; n < NK; n++)
            wmma::store_matrix_sync(Sw + n * 16, s[n], LDS, wmma::mem_row_major);
        __syncwarp();
        /* online softmax of row r over keys k0 + half*32 .. + 31 */
        const float *srow = Sw + r * LDS + half * 32;
        float x[32], mt = -INFINITY;
#pragma unroll
        for (int jj = 0; jj < 32; jj++) {
            int j = k0 + half * 32 + jj;
            x[jj] = j >= j0 && j <= i ? srow[jj] * sl2 : -INFINITY;
            mt = fmaxf(mt, x[jj]);
        }
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        float mn = fmaxf(m, mt);
        bool none = mn == -INFINITY; /* nothing seen yet (or a row past T) */
        float corr = none ? 1.0f : exp2f(m - mn), ls = 0.0f;
        fa_bf16 *prow = Ps + (warp * 16 + r) * LDP + half * 32;
#pragma unroll
        for (int jj = 0; jj < 32; jj++) {
            float p = none ? 0.0f : exp2f(x[jj] - mn);
            ls += p;
            prow[jj] = __float2bfloat16_rn(p);
        }
        ls += __shfl_xor_sync(0xffffffffu, ls, 1);
        l = l * corr + ls;
        m = mn;
        if (!half) corr_s[warp * 16 + r] = corr;
        __syncwarp();
#pragma unroll
        for (int d = 0; d < ND; d++)
            for (int e = 0; e < o[d].num_elements; e++)
                o[d].x[e] *= corr_s[warp * 16 + (int)rows.x[e]];
        fa_a pf[NK];
#pragma unroll
        for (int kk = 0; kk < NK; kk++)
            wmma::load_matrix_sync(pf[kk], Ps + warp * 16 * LDP + kk * 16, LDP);
#pragma unroll
        for (int d = 0; d < ND; d++)
#pragma unroll
            for (int kk = 0; kk < NK; kk++) {
                fa_b_row vf;
                wmma::load_matrix_sync(vf, Vs + kk * 16 * LDH + d * 16, LDH);
                wmma::mma_sync(o[d], pf[kk], vf, o[d]);
            }
    }
    /* out = O / l; lse = (m + log2 l) ln 2 */
    __syncwarp(); /* corr_s is read */
    if (!half) {
        corr_s[warp * 16 + r] = l > 0.0f ? 1.0f / l : 0.0f;
        if (i < T) lse[((size_t)b * NH + h) * T + i] = (m + log2f(l)) * FA_LN2;
    }
    __syncwarp();
#pragma unroll
    for (int d = 0; d < ND; d++)
        for (int e = 0; e < o[d].num_elements; e++) o[d].x[e] *= corr_s[warp * 16 + (int)rows.x[e]];
    /* through Sw, NK column tiles at a time, rows past T left out */
    float *ob = out + (size_t)b * T * C + (size_t)h * HS;
#pragma unroll
    for (int d0 = 0; d0 < ND; d0 += NK) {
        __syncwarp();
#pragma unroll
        for (int n = 0; n < NK; n++)
            wmma::store_matrix_sync(Sw + n * 16, o[d0 + n], LDS, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 16 * FA_BK; e += 32) {
            int rr = e / FA_BK, c = e % FA_BK;
            if (wr0 + rr < T) ob[(size_t)(wr0 + rr) * C + d0 * 16 + c] = Sw[rr * LDS + c];
        }
    }
}

/* ---------------------------------------------------------------- dq
 * Block (query tile, h, b), four warps of 16 query rows, over the key tiles
 * the block sees in order: S = Q K^T and dP = dO V^T on tensor cores, then on
 * the fragments P = exp2(S*scale*log2e - lse*log2e) (masked) and dS = P (dP -
 * D) scale, dS to bf16 through the warp's scratch, dq += dS K. Adds dq into
 * dqkv's q columns once, at the end. D (B,NH,T): rowsum(dout o out). */
template <int HS>
__device__ void fa_dq_body(unsigned char *smem, float *dqkv, const float *dout, const float *qkv,
                           const float *lse, const double *D, const int32_t *pos, int T, int NH,
                           int NKV) {
    using namespace nvcuda;
    constexpr int LDH = HS + 8, LDP = FA_BK + 8, ND = HS / 16, NK = FA_BK / 16;
    fa_bf16 *Qs = (fa_bf16 *)smem;
    fa_bf16 *dOs = (fa_bf16 *)((unsigned char *)Qs + fa_tile_bytes(FA_BQ, HS));
    fa_bf16 *Ks = (fa_bf16 *)((unsigned char *)dOs + fa_tile_bytes(FA_BQ, HS));
    fa_bf16 *Vs = (fa_bf16 *)((unsigned char *)Ks + fa_tile_bytes(FA_BK, HS));
    fa_bf16 *dSs = (fa_bf16 *)((unsigned char *)Vs + fa_tile_bytes(FA_BK, HS));
    float *xs = (float *)((unsigned char *)dSs + fa_round((size_t)FA_BQ * LDP * 2));
    float *lse_s = xs + FA_WARPS * 256, *D_s = lse_s + FA_BQ;
    int *first_s = (int *)(D_s + FA_BQ);

    int h = blockIdx.y, b = blockIdx.z, q0 = blockIdx.x * FA_BQ;
    int warp = threadIdx.x >> 5;
    size_t C = (size_t)NH * HS, W = (size_t)(NH + 2 * NKV) * HS;
    const float *qkv_b = qkv + (size_t)b * T * W;
    const float *kb = qkv_b + C + (size_t)(h / (NH / NKV)) * HS, *vb = kb + (size_t)NKV * HS;
    int nq = min(FA_BQ, T - q0);
    fa_stage<HS, FA_BQ>(Qs, qkv_b + (size_t)h * HS, W, q0, nq);
    fa_stage<HS, FA_BQ>(dOs, dout + (size_t)b * T * C + (size_t)h * HS, C, q0, nq);
    fa_row_values<FA_BQ>(lse_s, D_s, first_s, lse, D, pos, b, h, NH, T, q0);
    __syncthreads();
    float *xw = xs + warp * 256;
    fa_acc rows, cols;
    fa_index_map(rows, xw, true);
    fa_index_map(cols, xw, false);
    int kmin = T, wfirst = T;
    for (int r = 0; r < FA_BQ; r++) kmin = min(kmin, first_s[r]);
    for (int r = 0; r < 16; r++) wfirst = min(wfirst, first_s[warp * 16 + r]);
    int wr0 = q0 + warp * 16, wlast = min(wr0 + 15, T - 1);
    fa_acc dq[ND];
#pragma unroll
    for (int d = 0; d < ND; d++) wmma::fill_fragment(dq[d], 0.0f);
    const float scale = 1.0f / sqrtf((float)HS), sl2 = scale * FA_LOG2E;
    int last = min(q0 + FA_BQ, T) - 1;
    for (int k0 = (kmin / FA_BK) * FA_BK; k0 <= last; k0 += FA_BK) {
        __syncthreads();
        fa_stage<HS, FA_BK>(Ks, kb, W, k0, min(FA_BK, T - k0));
        fa_stage<HS, FA_BK>(Vs, vb, W, k0, min(FA_BK, T - k0));
        __syncthreads();
        if (wr0 >= T || k0 > wlast || k0 + FA_BK <= wfirst) continue;
        fa_acc s[NK], dp[NK];
#pragma unroll
        for (int n = 0; n < NK; n++) {
            wmma::fill_fragment(s[n], 0.0f);
            wmma::fill_fragment(dp[n], 0.0f);
        }
#pragma unroll
        for (int kk = 0; kk < ND; kk++) {
            fa_a qa, da;
            wmma::load_matrix_sync(qa, Qs + warp * 16 * LDH + kk * 16, LDH);
            wmma::load_matrix_sync(da, dOs + warp * 16 * LDH + kk * 16, LDH);
#pragma unroll
            for (int n = 0; n < NK; n++) {
                fa_b_col kf, vf;
                wmma::load_matrix_sync(kf, Ks + n * 16 * LDH + kk * 16, LDH);
                wmma::mma_sync(s[n], qa, kf, s[n]);
                wmma::load_matrix_sync(vf, Vs + n * 16 * LDH + kk * 16, LDH);
                wmma::mma_sync(dp[n], da, vf, dp[n]);
            }
        }
        /* dS on the fragments: element (query row, key column) */
#pragma unroll
        for (int n = 0; n < NK; n++)
            for (int e = 0; e < s[n].num_elements; e++) {
                int qi = warp * 16 + (int)rows.x[e], i = q0 + qi;
                int j = k0 + n * 16 + (int)cols.x[e];
                float p = i < T && j <= i && j >= first_s[qi]
                              ? exp2f(s[n].x[e] * sl2 - lse_s[qi])
                              : 0.0f;
                s[n].x[e] = p * (dp[n].x[e] - D_s[qi]) * scale;
            }
#pragma unroll
        for (int n = 0; n < NK; n++) fa_store_bf16(dSs + warp * 16 * LDP + n * 16, LDP, s[n], xw);
        __syncwarp();
#pragma unroll
        for (int kk = 0; kk < NK; kk++) {
            fa_a sa;
            wmma::load_matrix_sync(sa, dSs + warp * 16 * LDP + kk * 16, LDP);
#pragma unroll
            for (int d = 0; d < ND; d++) {
                fa_b_row kf;
                wmma::load_matrix_sync(kf, Ks + kk * 16 * LDH + d * 16, LDH);
                wmma::mma_sync(dq[d], sa, kf, dq[d]);
            }
        }
    }
    if (wr0 >= T) return;
    float *dqb = dqkv + ((size_t)b * T + wr0) * W + (size_t)h * HS;
#pragma unroll
    for (int d = 0; d < ND; d++) fa_add_rows(dqb + d * 16, W, T - wr0, dq[d], xw);
}

/* ---------------------------------------------------------------- dk, dv
 * Block (key tile, g, b), four warps of 16 key rows of KV head g; over the
 * query heads of g's group in order, then the query tiles that see the
 * block's keys in order: S^T = K Q^T and dP^T = V dO^T on tensor cores, P^T
 * and dS^T on the fragments (as in dq), both to bf16, then dv += P^T dO and
 * dk += dS^T Q. Adds dk, dv into dqkv's k and v columns once, at the end.
 * Packed rows: a query's first key never decreases along a row (pos counts
 * positions within examples in order), so the first query tile whose first
 * row starts after the block's last key ends the walk. */
template <int HS>
__device__ void fa_dkv_body(unsigned char *smem, float *dqkv, const float *dout, const float *qkv,
                            const float *lse, const double *D, const int32_t *pos, int T, int NH,
                            int NKV) {
    using namespace nvcuda;
    constexpr int BQ = FA_DKV_BQ(HS), LDH = HS + 8, LDP = BQ + 8, ND = HS / 16, NQ = BQ / 16;
    fa_bf16 *Ks = (fa_bf16 *)smem;
    fa_bf16 *Vs = (fa_bf16 *)((unsigned char *)Ks + fa_tile_bytes(FA_BK, HS));
    fa_bf16 *Qs = (fa_bf16 *)((unsigned char *)Vs + fa_tile_bytes(FA_BK, HS));
    fa_bf16 *dOs = (fa_bf16 *)((unsigned char *)Qs + fa_tile_bytes(BQ, HS));
    fa_bf16 *Pt = (fa_bf16 *)((unsigned char *)dOs + fa_tile_bytes(BQ, HS));
    fa_bf16 *dSt = (fa_bf16 *)((unsigned char *)Pt + fa_round((size_t)FA_BK * LDP * 2));
    float *xs = (float *)((unsigned char *)dSt + fa_round((size_t)FA_BK * LDP * 2));
    float *lse_s = xs + FA_WARPS * 256, *D_s = lse_s + BQ;
    int *first_s = (int *)(D_s + BQ);

    int g = blockIdx.y, b = blockIdx.z, k0 = blockIdx.x * FA_BK;
    int warp = threadIdx.x >> 5, group = NH / NKV;
    size_t C = (size_t)NH * HS, W = (size_t)(NH + 2 * NKV) * HS, KC = (size_t)NKV * HS;
    const float *qkv_b = qkv + (size_t)b * T * W;
    size_t ko = C + (size_t)g * HS, vo = ko + KC;
    fa_stage<HS, FA_BK>(Ks, qkv_b + ko, W, k0, min(FA_BK, T - k0));
    fa_stage<HS, FA_BK>(Vs, qkv_b + vo, W, k0, min(FA_BK, T - k0));
    float *xw = xs + warp * 256;
    fa_acc rows, cols;
    fa_index_map(rows, xw, true);
    fa_index_map(cols, xw, false);
    int wk0 = k0 + warp * 16, klast = min(k0 + FA_BK, T) - 1;
    fa_acc dk[ND], dv[ND];
#pragma unroll
    for (int d = 0; d < ND; d++) {
        wmma::fill_fragment(dk[d], 0.0f);
        wmma::fill_fragment(dv[d], 0.0f);
    }
    const float scale = 1.0f / sqrtf((float)HS), sl2 = scale * FA_LOG2E;
    for (int h = g * group; h < (g + 1) * group; h++) {
        const float *qb = qkv_b + (size_t)h * HS, *dob = dout + (size_t)b * T * C + (size_t)h * HS;
        for (int i0 = (k0 / BQ) * BQ; i0 < T; i0 += BQ) {
            if (attn_first_key(pos, b, T, i0) > klast) break; /* block-uniform */
            int nq = min(BQ, T - i0);
            __syncthreads(); /* the previous tile is read (and K, V staged) */
            fa_stage<HS, BQ>(Qs, qb, W, i0, nq);
            fa_stage<HS, BQ>(dOs, dob, C, i0, nq);
            fa_row_values<BQ>(lse_s, D_s, first_s, lse, D, pos, b, h, NH, T, i0);
            __syncthreads();
            int qfirst = T; /* the tile's least first key */
            for (int q = 0; q < BQ; q++) qfirst = min(qfirst, first_s[q]);
            if (wk0 >= T || wk0 > i0 + nq - 1 || qfirst > wk0 + 15) continue; /* warp-uniform */
            fa_acc st[NQ], dpt[NQ];
#pragma unroll
            for (int n = 0; n < NQ; n++) {
                wmma::fill_fragment(st[n], 0.0f);
                wmma::fill_fragment(dpt[n], 0.0f);
            }
#pragma unroll
            for (int kk = 0; kk < ND; kk++) {
                fa_a ka, va;
                wmma::load_matrix_sync(ka, Ks + warp * 16 * LDH + kk * 16, LDH);
                wmma::load_matrix_sync(va, Vs + warp * 16 * LDH + kk * 16, LDH);
#pragma unroll
                for (int n = 0; n < NQ; n++) {
                    fa_b_col qf, of;
                    wmma::load_matrix_sync(qf, Qs + n * 16 * LDH + kk * 16, LDH);
                    wmma::mma_sync(st[n], ka, qf, st[n]);
                    wmma::load_matrix_sync(of, dOs + n * 16 * LDH + kk * 16, LDH);
                    wmma::mma_sync(dpt[n], va, of, dpt[n]);
                }
            }
            /* P^T and dS^T on the fragments: element (key row, query column) */
#pragma unroll
            for (int n = 0; n < NQ; n++)
                for (int e = 0; e < st[n].num_elements; e++) {
                    int j = wk0 + (int)rows.x[e], qi = n * 16 + (int)cols.x[e], i = i0 + qi;
                    float p = i < T && j <= i && j >= first_s[qi]
                                  ? exp2f(st[n].x[e] * sl2 - lse_s[qi])
                                  : 0.0f;
                    dpt[n].x[e] = p * (dpt[n].x[e] - D_s[qi]) * scale;
                    st[n].x[e] = p;
                }
#pragma unroll
            for (int n = 0; n < NQ; n++) {
                fa_store_bf16(Pt + warp * 16 * LDP + n * 16, LDP, st[n], xw);
                fa_store_bf16(dSt + warp * 16 * LDP + n * 16, LDP, dpt[n], xw);
            }
            __syncwarp();
#pragma unroll
            for (int kk = 0; kk < NQ; kk++) {
                fa_a pa, sa;
                wmma::load_matrix_sync(pa, Pt + warp * 16 * LDP + kk * 16, LDP);
                wmma::load_matrix_sync(sa, dSt + warp * 16 * LDP + kk * 16, LDP);
#pragma unroll
                for (int d = 0; d < ND; d++) {
                    fa_b_row of, qf;
                    wmma::load_matrix_sync(of, dOs + kk * 16 * LDH + d * 16, LDH);
                    wmma::mma_sync(dv[d], pa, of, dv[d]);
                    wmma::load_matrix_sync(qf, Qs + kk * 16 * LDH + d * 16, LDH);
                    wmma::mma_sync(dk[d], sa, qf, dk[d]);
                }
            }
        }
    }
    if (wk0 >= T) return;
    float *dj = dqkv + ((size_t)b * T + wk0) * W;
#pragma unroll
    for (int d = 0; d < ND; d++) {
        fa_add_rows(dj + ko + d * 16, W, T - wk0, dk[d], xw);
        fa_add_rows(dj + vo + d * 16, W, T - wk0, dv[d], xw);
    }
}

#endif
