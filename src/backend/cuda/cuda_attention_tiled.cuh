/*
 * The CUDA backend's tiled attention kernels (device code only, included by
 * cuda_attention.cu). They use nothing but CUDA's built-in variables, shared
 * memory, __syncthreads and float4, so tests/gpu/cuda_emu.cpp can run them on
 * the CPU, a thread per CUDA thread, and check their index and mask
 * arithmetic against a double reference where there is no GPU.
 */
#ifndef CT_BACKEND_CUDA_ATTENTION_TILED_CUH
#define CT_BACKEND_CUDA_ATTENTION_TILED_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ tiles
 * The tiled kernels: the same sums, with the key (forward, dq) or query (dk,
 * dv) rows of a tile staged in shared memory, so each is read from device
 * memory once per block instead of once per row, and read by all the
 * block's threads at once (a broadcast). A thread owns one row: its query
 * and output (forward), its query and dq (dq), or its key row's dk and dv,
 * in registers; no reduction crosses threads, so the order of every sum is
 * a row's own, fixed: deterministic, and no atomics. fp32 throughout (ref's
 * softmax statistics are doubles; the kernel tests hold these to ref within
 * their tolerance). Used for head sizes 32 and 64 without dropout (GPT-2,
 * TinyLlama); other shapes run the row kernels. CT_CUDA_ATTENTION=rows
 * forces the row kernels. */

#define TILE_ROWS 64 /* rows a block owns: threads per block */
#define TILE_KEYS 32 /* keys (forward, dq) or queries (dk, dv) staged at once */
#define DKV_ROWS 32  /* key rows a dk, dv block owns: its key and value rows sit in shared
                      * memory beside the staged queries (64 rows would pass the 48 KiB of
                      * static shared memory at head size 64) */

/* The first key of query row t (packed rows: its example's start). */
__device__ inline int attn_first_key(const int32_t *pos, int b, int T, int t) {
    return pos ? t - pos[(size_t)b * T + t] : 0;
}

/* The first key any query row of the tile at q0 sees: the least of its
 * rows' first keys (thread 0 reads them in order; the caller shares it). */
__device__ inline int tile_block_first_key(const int32_t *pos, int b, int T, int q0) {
    int k = T;
    for (int r = q0; r < q0 + TILE_ROWS && r < T; r++) {
        int f = attn_first_key(pos, b, T, r);
        k = f < k ? f : k;
    }
    return k;
}

/* Stages rows [r0, r0 + n) of an operand whose rows are W floats apart (src
 * at the head's first column; HS floats each) in dst[TILE_KEYS][HS]; rows
 * past n are zeros. */
template <int HS>
__device__ inline void tile_stage(float (*dst)[HS], const float *src, size_t W, int r0, int n) {
    for (int e = threadIdx.x; e < TILE_KEYS * HS / 4; e += blockDim.x) {
        int r = e / (HS / 4), c = (e % (HS / 4)) * 4;
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < n) x = *(const float4 *)(src + (size_t)(r0 + r) * W + c);
        *(float4 *)&dst[r][c] = x;
    }
}

/* Where a query-tile block (grid: query tile, h, b) and its thread's row i
 * are: the row's first key j0 (T past the last row), the batch's qkv rows,
 * and the key and value columns of h's KV head. */
struct tile_q {
    int h, b, q0, i, j0;
    bool row; /* i < T */
    size_t C, W;
    const float *qkv_b, *kb, *vb;
};
template <int HS>
__device__ inline tile_q tile_q_of(const float *qkv, const int32_t *pos, int T, int NH, int NKV) {
    tile_q t;
    t.h = blockIdx.y, t.b = blockIdx.z, t.q0 = blockIdx.x * TILE_ROWS;
    t.i = t.q0 + (int)threadIdx.x;
    t.row = t.i < T;
    t.j0 = t.row ? attn_first_key(pos, t.b, T, t.i) : T;
    t.C = (size_t)NH * HS, t.W = (size_t)(NH + 2 * NKV) * HS;
    t.qkv_b = qkv + (size_t)t.b * T * t.W;
    t.kb = t.qkv_b + t.C + (size_t)(t.h / (NH / NKV)) * HS;
    t.vb = t.kb + (size_t)NKV * HS;
    return t;
}

/* Forward: block (query tile, h, b); thread = query row i. */
template <int HS>
__global__ void __launch_bounds__(TILE_ROWS)
k_attn_fwd_tiled(float *out, float *lse, const float *qkv, const int32_t *pos, int T, int NH,
                 int NKV) {
    __shared__ __align__(16) float Ks[TILE_KEYS][HS], Vs[TILE_KEYS][HS];
    __shared__ int kmin_s;
    tile_q t = tile_q_of<HS>(qkv, pos, T, NH, NKV);
    int h = t.h, b = t.b, q0 = t.q0, i = t.i, j0 = t.j0;
    bool row = t.row;
    size_t C = t.C, W = t.W;
    const float *qkv_b = t.qkv_b, *kb = t.kb, *vb = t.vb;
    const float scale = 1.0f / sqrtf((float)HS);
    if (threadIdx.x == 0) kmin_s = tile_block_first_key(pos, b, T, q0);
    float q[HS], o[HS];
    if (row) {
        const float *qi = qkv_b + (size_t)i * W + (size_t)h * HS;
#pragma unroll
        for (int d = 0; d < HS; d += 4) {
            float4 x = *(const float4 *)(qi + d);
            q[d] = x.x * scale, q[d + 1] = x.y * scale, q[d + 2] = x.z * scale,
            q[d + 3] = x.w * scale;
        }
    }
#pragma unroll
    for (int d = 0; d < HS; d++) o[d] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    __syncthreads();
    int last = min(q0 + TILE_ROWS, T) - 1; /* the block's last query sees keys up to it */
    for (int k0 = (kmin_s / TILE_KEYS) * TILE_KEYS; k0 <= last; k0 += TILE_KEYS) {
        int n = min(TILE_KEYS, T - k0);
        __syncthreads(); /* the previous tile is read */
        tile_stage<HS>(Ks, kb, W, k0, n);
        tile_stage<HS>(Vs, vb, W, k0, n);
        __syncthreads();
        if (!row || k0 > i || k0 + TILE_KEYS <= j0) continue;
        float s[TILE_KEYS];
        float mt = -INFINITY;
#pragma unroll
        for (int jj = 0; jj < TILE_KEYS; jj++) {
            int j = k0 + jj;
            float acc = 0.0f;
#pragma unroll
            for (int d = 0; d < HS; d += 4) {
                float4 k4 = *(const float4 *)&Ks[jj][d];
                acc += q[d] * k4.x + q[d + 1] * k4.y + q[d + 2] * k4.z + q[d + 3] * k4.w;
            }
            s[jj] = j >= j0 && j <= i ? acc : -INFINITY;
            mt = fmaxf(mt, s[jj]);
        }
        float mn = fmaxf(m, mt); /* finite: key j0 or i is in a visited tile */
        float corr = expf(m - mn); /* 0 while m is -inf */
        l *= corr;
#pragma unroll
        for (int d = 0; d < HS; d++) o[d] *= corr;
#pragma unroll
        for (int jj = 0; jj < TILE_KEYS; jj++) {
            float p = expf(s[jj] - mn); /* 0 for a masked key */
            l += p;
#pragma unroll
            for (int d = 0; d < HS; d += 4) {
                float4 v4 = *(const float4 *)&Vs[jj][d];
                o[d] += p * v4.x, o[d + 1] += p * v4.y, o[d + 2] += p * v4.z,
                    o[d + 3] += p * v4.w;
            }
        }
        m = mn;
    }
    if (!row) return;
    float *oi = out + ((size_t)b * T + i) * C + (size_t)h * HS;
    float inv = 1.0f / l;
#pragma unroll
    for (int d = 0; d < HS; d += 4)
        *(float4 *)(oi + d) = make_float4(o[d] * inv, o[d + 1] * inv, o[d + 2] * inv,
                                          o[d + 3] * inv);
    lse[((size_t)b * NH + h) * T + i] = m + logf(l);
}

/* dq: block (query tile, h, b); thread = query row i, over the keys it saw
 * in order: ds_j = p_j (dO_i . v_j - D_i), dq_i += scale ds_j k_j. */
template <int HS>
__global__ void __launch_bounds__(TILE_ROWS)
k_attn_dq_tiled(float *dqkv, const float *dout, const float *qkv, const float *lse,
                const double *D, const int32_t *pos, int T, int NH, int NKV) {
    __shared__ __align__(16) float Ks[TILE_KEYS][HS], Vs[TILE_KEYS][HS];
    __shared__ float dO[TILE_ROWS][HS + 1]; /* a row per thread: + 1 spreads the banks */
    __shared__ int kmin_s;
    tile_q t = tile_q_of<HS>(qkv, pos, T, NH, NKV);
    int h = t.h, b = t.b, q0 = t.q0, i = t.i, j0 = t.j0;
    bool row = t.row;
    size_t C = t.C, W = t.W;
    const float *qkv_b = t.qkv_b, *kb = t.kb, *vb = t.vb;
    const float scale = 1.0f / sqrtf((float)HS);
    if (threadIdx.x == 0) kmin_s = tile_block_first_key(pos, b, T, q0);
    float q[HS], dq[HS];
    float lse_i = 0.0f, D_i = 0.0f;
    if (row) {
        const float *qi = qkv_b + (size_t)i * W + (size_t)h * HS;
        const float *doi = dout + ((size_t)b * T + i) * C + (size_t)h * HS;
#pragma unroll
        for (int d = 0; d < HS; d++) q[d] = qi[d] * scale;
        for (int d = 0; d < HS; d++) dO[threadIdx.x][d] = doi[d];
        size_t r = ((size_t)b * NH + h) * T + i;
        lse_i = lse[r];
        D_i = (float)D[r];
    }
#pragma unroll
    for (int d = 0; d < HS; d++) dq[d] = 0.0f;
    __syncthreads();
    int last = min(q0 + TILE_ROWS, T) - 1;
    for (int k0 = (kmin_s / TILE_KEYS) * TILE_KEYS; k0 <= last; k0 += TILE_KEYS) {
        int n = min(TILE_KEYS, T - k0);
        __syncthreads();
        tile_stage<HS>(Ks, kb, W, k0, n);
        tile_stage<HS>(Vs, vb, W, k0, n);
        __syncthreads();
        if (!row || k0 > i || k0 + TILE_KEYS <= j0) continue;
        for (int jj = 0; jj < TILE_KEYS; jj++) {
            int j = k0 + jj;
            if (j < j0 || j > i) continue;
            float s = 0.0f, dp = 0.0f;
#pragma unroll
            for (int d = 0; d < HS; d++) {
                s += q[d] * Ks[jj][d];
                dp += dO[threadIdx.x][d] * Vs[jj][d];
            }
            float ds = expf(s - lse_i) * (dp - D_i) * scale;
#pragma unroll
            for (int d = 0; d < HS; d++) dq[d] += ds * Ks[jj][d];
        }
    }
    if (!row) return;
    float *dqi = dqkv + (size_t)b * T * W + (size_t)i * W + (size_t)h * HS;
#pragma unroll
    for (int d = 0; d < HS; d++) dqi[d] += dq[d];
}

/* dk, dv: block (key tile, g, b); thread = key row j of KV head g, over the
 * query heads of its group in order, then the queries that saw it in order
 * (ref's order): dv_j += p dO_i, dk_j += scale ds q_i. */
template <int HS>
__global__ void __launch_bounds__(DKV_ROWS)
k_attn_dkv_tiled(float *dqkv, const float *dout, const float *qkv, const float *lse,
                 const double *D, const int32_t *pos, int T, int NH, int NKV) {
    __shared__ __align__(16) float Qs[TILE_KEYS][HS], dOs[TILE_KEYS][HS];
    __shared__ float Kr[DKV_ROWS][HS + 1], Vr[DKV_ROWS][HS + 1];
    __shared__ float lse_s[TILE_KEYS], D_s[TILE_KEYS];
    __shared__ int f_s[TILE_KEYS];
    int g = blockIdx.y, b = blockIdx.z, r0 = blockIdx.x * DKV_ROWS;
    int j = r0 + (int)threadIdx.x;
    bool row = j < T;
    int group = NH / NKV;
    size_t C = (size_t)NH * HS, W = (size_t)(NH + 2 * NKV) * HS, KC = (size_t)NKV * HS;
    size_t ko = C + (size_t)g * HS, vo = ko + KC;
    const float *qkv_b = qkv + (size_t)b * T * W;
    const float scale = 1.0f / sqrtf((float)HS);
    if (row)
        for (int d = 0; d < HS; d++) {
            Kr[threadIdx.x][d] = qkv_b[(size_t)j * W + ko + d];
            Vr[threadIdx.x][d] = qkv_b[(size_t)j * W + vo + d];
        }
    float dk[HS], dv[HS];
#pragma unroll
    for (int d = 0; d < HS; d++) dk[d] = dv[d] = 0.0f;
    /* the queries that see a key of this tile: i >= r0, up to the last one
     * whose example started at or before the tile's last key */
    for (int h = g * group; h < (g + 1) * group; h++) {
        const float *qb = qkv_b + (size_t)h * HS;
        const float *dob = dout + (size_t)b * T * C + (size_t)h * HS;
        for (int i0 = r0; i0 < T; i0 += TILE_KEYS) {
            int n = min(TILE_KEYS, T - i0);
            __syncthreads(); /* the previous tile is read (and Kr, Vr written) */
            tile_stage<HS>(Qs, qb, W, i0, n);
            tile_stage<HS>(dOs, dob, C, i0, n);
            if (threadIdx.x < TILE_KEYS) {
                int ii = i0 + (int)threadIdx.x;
                size_t r = ((size_t)b * NH + h) * T + ii;
                lse_s[threadIdx.x] = ii < T ? lse[r] : 0.0f;
                D_s[threadIdx.x] = ii < T ? (float)D[r] : 0.0f;
                f_s[threadIdx.x] = ii < T ? attn_first_key(pos, b, T, ii) : T;
            }
            __syncthreads();
            if (!row) continue; /* the mask decides, row by row */
            for (int ii = 0; ii < n; ii++) {
                int i = i0 + ii;
                if (i < j || f_s[ii] > j) continue;
                float s = 0.0f, dp = 0.0f;
#pragma unroll
                for (int d = 0; d < HS; d++) {
                    s += Qs[ii][d] * Kr[threadIdx.x][d];
                    dp += dOs[ii][d] * Vr[threadIdx.x][d];
                }
                float p = expf(s * scale - lse_s[ii]);
                float ds = p * (dp - D_s[ii]) * scale;
#pragma unroll
                for (int d = 0; d < HS; d++) {
                    dv[d] += p * dOs[ii][d];
                    dk[d] += ds * Qs[ii][d];
                }
            }
        }
    }
    if (!row) return;
    float *dj = dqkv + (size_t)b * T * W + (size_t)j * W;
#pragma unroll
    for (int d = 0; d < HS; d++) {
        dj[ko + d] += dk[d];
        dj[vo + d] += dv[d];
    }
}

#endif
