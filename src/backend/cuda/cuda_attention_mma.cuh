/*
 * The CUDA backend's flash attention on mma.sync (device code only, included
 * by cuda_flash.cu after cuda_mma.cuh; tests/gpu/cuda_emu.cpp runs it on the
 * CPU with its own cuda_mma primitives): the WMMA kernels' algorithm
 * (cuda_attention_wmma.cuh: FlashAttention-2's loop order, 64-key tiles,
 * skipped tiles, packed rows, grouped-query, the same roundings to bf16 and
 * a deterministic two-kernel backward), with three changes:
 *   - the tile products' results stay in registers. PTX documents mma.sync's
 *     fragment layout (cuda_mma.cuh), so the softmax, the masks and the bf16
 *     rounding of P and dS work on the accumulators where they are: a row's
 *     max and sum are two shuffles among the four lanes holding it, and the C
 *     fragments of S become the A fragments of P V without a trip through
 *     shared memory. The WMMA kernels wrote S (and P, dS) to shared memory and
 *     back for each tile, and read their element positions from index
 *     fragments, since WMMA leaves its layout unspecified;
 *   - q, k, v and dout come in bf16 (the entries round them into the
 *     backend's workspace first, one pass each), so a tile is staged by
 *     asynchronous 16-byte copies, the next one while the block works on this
 *     one (two stages of shared memory), where the WMMA kernels load fp32,
 *     round and store, then wait;
 *   - the forward and dq take MT m16 tiles of query rows a warp (fm_bq(MT)
 *     rows a block): each K and V fragment loaded from shared memory serves
 *     MT tiles, so MT 2 halves that traffic a FLOP, at the registers' cost
 *     (cuda_flash.cu picks 2 at head size 64, 1 at 128).
 *
 * Numerics: as the WMMA kernels' (q, k, v and dout are rounded to bf16 the
 * same way, once), but a row's softmax sum adds each lane's partial sums at
 * the end (FlashAttention-2's order), so the two differ in the last bits.
 */
#ifndef CT_BACKEND_CUDA_ATTENTION_MMA_CUH
#define CT_BACKEND_CUDA_ATTENTION_MMA_CUH

#include "backend/cuda/cuda_attention_wmma.cuh" /* FA_* shapes, fa_tile_bytes, fa_row_values */

/* Query rows of a forward or dq block with MT m16 tiles a warp. */
__host__ __device__ constexpr int fm_bq(int MT) { return 16 * MT * FA_WARPS; }
/* forward: the Q tile, two stages of K and V tiles, the rows' first keys */
__host__ __device__ constexpr size_t fm_fwd_smem(int HS, int MT) {
    return fa_tile_bytes(fm_bq(MT), HS) + 4 * fa_tile_bytes(FA_BK, HS) +
           fa_round((size_t)fm_bq(MT) * 4);
}
/* dq: Q, dO tiles, two stages of K and V tiles, lse, D, first keys */
__host__ __device__ constexpr size_t fm_dq_smem(int HS, int MT) {
    return 2 * fa_tile_bytes(fm_bq(MT), HS) + 4 * fa_tile_bytes(FA_BK, HS) +
           fa_round((size_t)fm_bq(MT) * 12);
}
/* dk, dv: K, V tiles, two stages of Q and dO tiles with their lse, D and
 * first keys */
__host__ __device__ constexpr size_t fm_dkv_smem(int HS) {
    return 2 * fa_tile_bytes(FA_BK, HS) + 4 * fa_tile_bytes(FA_DKV_BQ(HS), HS) +
           2 * fa_round((size_t)FA_DKV_BQ(HS) * 12);
}

/* Starts copying rows [r0, r0 + n) of a bf16 operand whose rows are W
 * elements apart (src at the head's first column, HS each) into dst[R][HS +
 * 8], 16 bytes a copy; rows past n become zeros. */
template <int HS, int R>
__device__ inline void fm_stage(fa_bf16 *dst, const fa_bf16 *src, size_t W, int r0, int n) {
    for (int e = threadIdx.x; e < R * HS / 8; e += blockDim.x) {
        int r = e / (HS / 8), c = (e % (HS / 8)) * 8;
        bool ok = r < n;
        fa_cp16(dst + r * (HS + 8) + c, src + (size_t)(r0 + (ok ? r : 0)) * W + c, ok);
    }
}

/* Starts copying the K and V tiles of keys [k0, k0 + FA_BK) (kb, vb: the KV
 * head's first columns) into stage st of kv: K at 2 st tile bytes, V after. */
template <int HS>
__device__ inline void fm_stage_kv(unsigned char *kv, int st, const fa_bf16 *kb,
                                   const fa_bf16 *vb, size_t W, int k0, int T) {
    constexpr size_t KV = fa_tile_bytes(FA_BK, HS);
    fa_bf16 *K = (fa_bf16 *)(kv + st * 2 * KV);
    int n = min(FA_BK, T - k0);
    fm_stage<HS, FA_BK>(K, kb, W, k0, n);
    fm_stage<HS, FA_BK>(K + KV / 2, vb, W, k0, n);
}
/* One step of a walk over key tiles (the it-th, keys from k0; the walk ends
 * at key last): once the block is done with the other stage, starts copying
 * the next tile there, then waits until this tile (stage it & 1) is in for
 * the whole block. Returns its K tile; V follows, one tile on. */
template <int HS>
__device__ inline const fa_bf16 *fm_kv_next(unsigned char *kv, int it, const fa_bf16 *kb,
                                            const fa_bf16 *vb, size_t W, int k0, int last,
                                            int T) {
    __syncthreads(); /* the other stage's readers are done */
    if (k0 + FA_BK <= last) fm_stage_kv<HS>(kv, (it + 1) & 1, kb, vb, W, k0 + FA_BK, T);
    fa_cp_commit();
    fa_cp_wait<1>(); /* this thread's copies of this tile (and what came before) are in */
    __syncthreads(); /* and everyone's */
    return (const fa_bf16 *)(kv + (it & 1) * 2 * fa_tile_bytes(FA_BK, HS));
}

/* NT B fragments (n8 tiles) from rows [0, 8 NT) of the tile at p, which holds
 * B transposed (row n, column k), k columns [k0, k0 + 16). */
template <int NT>
__device__ inline void fm_load_bt(uint32_t (*b)[2], const fa_bf16 *p, int ld, int k0) {
#pragma unroll
    for (int j = 0; j < NT / 2; j++) {
        uint32_t r[4];
        fa_ldsm_bt(r, p + j * 16 * ld + k0, ld);
        b[2 * j][0] = r[0];
        b[2 * j][1] = r[1];
        b[2 * j + 1][0] = r[2];
        b[2 * j + 1][1] = r[3];
    }
}
/* NT B fragments from columns [0, 8 NT) of the tile at p holding B (row k,
 * column n), k rows [k0, k0 + 16). */
template <int NT>
__device__ inline void fm_load_bn(uint32_t (*b)[2], const fa_bf16 *p, int ld, int k0) {
#pragma unroll
    for (int j = 0; j < NT / 2; j++) {
        uint32_t r[4];
        fa_ldsm_bn(r, p + k0 * ld + j * 16, ld);
        b[2 * j][0] = r[0];
        b[2 * j][1] = r[1];
        b[2 * j + 1][0] = r[2];
        b[2 * j + 1][1] = r[3];
    }
}
/* The A fragment of the 16 x 16 block formed by C fragments c0 (columns
 * 0-7) and c1 (8-15), rounded to bf16 (cuda_mma.cuh's layouts). */
__device__ inline void fm_pack_a(uint32_t a[4], const float c0[4], const float c1[4]) {
    a[0] = fa_pack(c0[0], c0[1]);
    a[1] = fa_pack(c0[2], c0[3]);
    a[2] = fa_pack(c1[0], c1[1]);
    a[3] = fa_pack(c1[2], c1[3]);
}
template <int NT> __device__ inline void fm_zero(float (*c)[4]) {
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) c[n][e] = 0.0f;
}
/* s[mt] = A1 B1^T and dp[mt] = A2 B2^T over the head size, for MT m16 tiles:
 * A1, A2 the warp's first of MT x 16 rows of two tiles, B1, B2 the NT * 8
 * rows of two others (all row-major, HS + 8 apart). Each B fragment is
 * loaded once for the MT tiles. HELD (MT 1): A1's and A2's fragments are
 * h1[kk] and h2[kk] in registers, for each 16 columns kk, not loaded. */
template <int HS, int NT, int MT, bool HELD = false>
__device__ inline void fm_two_products(float (*s)[NT][4], float (*dp)[NT][4], const fa_bf16 *A1,
                                       const fa_bf16 *A2, const fa_bf16 *B1, const fa_bf16 *B2,
                                       const uint32_t (*h1)[4] = nullptr,
                                       const uint32_t (*h2)[4] = nullptr) {
    constexpr int LDH = HS + 8;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        fm_zero<NT>(s[mt]);
        fm_zero<NT>(dp[mt]);
    }
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++) {
        uint32_t a[MT][4], bf[NT][2];
        fm_load_bt<NT>(bf, B1, LDH, kk * 16);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            if (HELD) {
                fa_mma<NT>(s[mt], h1[kk], bf);
            } else {
                fa_ldsm_a(a[mt], A1 + mt * 16 * LDH + kk * 16, LDH);
                fa_mma<NT>(s[mt], a[mt], bf);
            }
        }
        fm_load_bt<NT>(bf, B2, LDH, kk * 16);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            if (HELD) {
                fa_mma<NT>(dp[mt], h2[kk], bf);
            } else {
                fa_ldsm_a(a[mt], A2 + mt * 16 * LDH + kk * 16, LDH);
                fa_mma<NT>(dp[mt], a[mt], bf);
            }
        }
    }
}

/* dst rows (ld floats apart; row g at dst0, g+8 at dst0 + 8 ld, each when
 * below n) += c, n8 tiles side by side: a lane adds its two columns. */
template <int NT>
__device__ inline void fm_add_rows(float *dst0, size_t ld, int n, const float (*c)[4]) {
    int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        if (g + 8 * h >= n) continue;
        float *d = dst0 + (size_t)(g + 8 * h) * ld + 2 * t;
#pragma unroll
        for (int j = 0; j < NT; j++) {
            float2 v = *(float2 *)(d + 8 * j);
            v.x += c[j][2 * h];
            v.y += c[j][2 * h + 1];
            *(float2 *)(d + 8 * j) = v;
        }
    }
}

/* ---------------------------------------------------------------- forward
 * Block (query tile of fm_bq(MT) rows, h, b), four warps of 16 MT query
 * rows each: MT m16 tiles a warp, which share each K and V fragment loaded
 * from shared memory (MT 2 halves that traffic a FLOP, at the registers'
 * cost). In tile mt, lane l holds rows g = l/4 and g+8, keys 2t, 2t+1 of
 * each n8 tile (t = l%4). Per key tile: S = Q K^T in registers, masked and
 * scaled, the online softmax's max over the row's quad, P = exp2(S - m)
 * (its sum kept per lane until the end), O = O corr + P V with P's bf16 A
 * fragments packed from S's accumulators. Writes out (B,T,NH*HS) and lse
 * (B,NH,T). */
template <int HS, int MT>
__device__ void fm_fwd_body(unsigned char *smem, float *out, float *lse, const fa_bf16 *qkv,
                            const int32_t *pos, int T, int NH, int NKV) {
    constexpr int LDH = HS + 8, ND = HS / 16, NKT = FA_BK / 8, NDT = HS / 8, BQ = fm_bq(MT);
    constexpr size_t KV = fa_tile_bytes(FA_BK, HS);
    fa_bf16 *Qs = (fa_bf16 *)smem;
    unsigned char *kv = smem + fa_tile_bytes(BQ, HS); /* stage s: K at 2 s KV, V after */
    int *first_s = (int *)(kv + 4 * KV);

    int h = blockIdx.y, b = blockIdx.z, q0 = blockIdx.x * BQ;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    size_t C = (size_t)NH * HS, W = (size_t)(NH + 2 * NKV) * HS;
    const fa_bf16 *qkv_b = qkv + (size_t)b * T * W;
    const fa_bf16 *kb = qkv_b + C + (size_t)(h / (NH / NKV)) * HS, *vb = kb + (size_t)NKV * HS;

    for (int r = threadIdx.x; r < BQ; r += blockDim.x) {
        int i = q0 + r;
        first_s[r] = i < T ? attn_first_key(pos, b, T, i) : T;
    }
    __syncthreads();
    int kmin = T, wfirst = T; /* the block's and the warp's first key */
    for (int r = 0; r < BQ; r++) kmin = min(kmin, first_s[r]);
    for (int r = 0; r < 16 * MT; r++) wfirst = min(wfirst, first_s[warp * 16 * MT + r]);
    int kstart = (kmin / FA_BK) * FA_BK, last = min(q0 + BQ, T) - 1;
    fm_stage<HS, BQ>(Qs, qkv_b + (size_t)h * HS, W, q0, min(BQ, T - q0));
    fm_stage_kv<HS>(kv, 0, kb, vb, W, kstart, T);
    fa_cp_commit();
    int wr0 = q0 + warp * 16 * MT, wlast = min(wr0 + 16 * MT - 1, T - 1);
    int ir[MT][2], jr[MT][2]; /* this lane's rows and their first keys */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int k = 0; k < 2; k++) {
            ir[mt][k] = wr0 + 16 * mt + g + 8 * k;
            jr[mt][k] = ir[mt][k] < T ? first_s[ir[mt][k] - q0] : T;
        }
    uint32_t qa[MT][ND][4];
    float o[MT][NDT][4], m[MT][2], l[MT][2]; /* m in log2 units; l per lane */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        fm_zero<NDT>(o[mt]);
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
    }
    const float sl2 = FA_LOG2E / sqrtf((float)HS);
    for (int k0 = kstart, it = 0; k0 <= last; k0 += FA_BK, it++) {
        const fa_bf16 *Ks = fm_kv_next<HS>(kv, it, kb, vb, W, k0, last, T), *Vs = Ks + KV / 2;
        if (it == 0) /* Q came with the first tile */
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int kk = 0; kk < ND; kk++)
                    fa_ldsm_a(qa[mt][kk], Qs + (warp * MT + mt) * 16 * LDH + kk * 16, LDH);
        if (wr0 >= T || k0 > wlast || k0 + FA_BK <= wfirst) continue; /* warp-uniform */
        float s[MT][NKT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) fm_zero<NKT>(s[mt]);
#pragma unroll
        for (int kk = 0; kk < ND; kk++) {
            uint32_t kf[NKT][2];
            fm_load_bt<NKT>(kf, Ks, LDH, kk * 16);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) fa_mma<NKT>(s[mt], qa[mt][kk], kf);
        }
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int n = 0; n < NKT; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int k = e >> 1, i = ir[mt][k], j = k0 + n * 8 + 2 * t + (e & 1);
                    float x = i < T && j >= jr[mt][k] && j <= i ? s[mt][n][e] * sl2 : -INFINITY;
                    s[mt][n][e] = x;
                    mx[k] = fmaxf(mx[k], x);
                }
            fa_quad_max(mx);
            float corr[2], ls[2] = {0.0f, 0.0f};
#pragma unroll
            for (int k = 0; k < 2; k++) {
                float mn = fmaxf(m[mt][k], mx[k]);
                corr[k] = mn == -INFINITY ? 1.0f : exp2f(m[mt][k] - mn); /* none seen yet: 1 */
                m[mt][k] = mn;
            }
#pragma unroll
            for (int n = 0; n < NKT; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int k = e >> 1;
                    float p = m[mt][k] == -INFINITY ? 0.0f : exp2f(s[mt][n][e] - m[mt][k]);
                    s[mt][n][e] = p;
                    ls[k] += p;
                }
#pragma unroll
            for (int k = 0; k < 2; k++) l[mt][k] = l[mt][k] * corr[k] + ls[k];
#pragma unroll
            for (int d = 0; d < NDT; d++) {
                o[mt][d][0] *= corr[0];
                o[mt][d][1] *= corr[0];
                o[mt][d][2] *= corr[1];
                o[mt][d][3] *= corr[1];
            }
        }
#pragma unroll
        for (int kc = 0; kc < NKT / 2; kc++) {
            uint32_t vf[NDT][2];
            fm_load_bn<NDT>(vf, Vs, LDH, kc * 16);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                uint32_t pa[4];
                fm_pack_a(pa, s[mt][2 * kc], s[mt][2 * kc + 1]);
                fa_mma<NDT>(o[mt], pa, vf);
            }
        }
    }
    /* out = O / l; lse = (m + log2 l) ln 2 */
    float *ob = out + (size_t)b * T * C + (size_t)h * HS;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        fa_quad_sum(l[mt]);
#pragma unroll
        for (int k = 0; k < 2; k++) {
            int i = ir[mt][k];
            if (i >= T) continue;
            float inv = l[mt][k] > 0.0f ? 1.0f / l[mt][k] : 0.0f;
            if (t == 0) lse[((size_t)b * NH + h) * T + i] = (m[mt][k] + log2f(l[mt][k])) * FA_LN2;
#pragma unroll
            for (int d = 0; d < NDT; d++)
                *(float2 *)(ob + (size_t)i * C + d * 8 + 2 * t) =
                    make_float2(o[mt][d][2 * k] * inv, o[mt][d][2 * k + 1] * inv);
        }
    }
}

/* ---------------------------------------------------------------- dq
 * Block (query tile of fm_bq(MT) rows, h, b), four warps of 16 MT query
 * rows (MT m16 tiles a warp, as the forward's), over the key tiles the block
 * sees in order: S = Q K^T and dP = dO V^T in registers, P = exp2(S scale
 * log2e - lse log2e) (masked), dS = P (dP - D) scale, then dq += dS K with
 * dS packed to bf16 A fragments. Adds dq into dqkv's q columns once, at the
 * end. D (B,NH,T): rowsum(dout o out). */
template <int HS, int MT>
__device__ void fm_dq_body(unsigned char *smem, float *dqkv, const fa_bf16 *dout,
                           const fa_bf16 *qkv, const float *lse, const double *D,
                           const int32_t *pos, int T, int NH, int NKV) {
    constexpr int LDH = HS + 8, NKT = FA_BK / 8, NDT = HS / 8, BQ = fm_bq(MT);
    constexpr size_t KV = fa_tile_bytes(FA_BK, HS);
    fa_bf16 *Qs = (fa_bf16 *)smem;
    fa_bf16 *dOs = (fa_bf16 *)((unsigned char *)Qs + fa_tile_bytes(BQ, HS));
    unsigned char *kv = (unsigned char *)dOs + fa_tile_bytes(BQ, HS); /* two K, V stages */
    float *lse_s = (float *)(kv + 4 * KV);
    float *D_s = lse_s + BQ;
    int *first_s = (int *)(D_s + BQ);

    int h = blockIdx.y, b = blockIdx.z, q0 = blockIdx.x * BQ;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    size_t C = (size_t)NH * HS, W = (size_t)(NH + 2 * NKV) * HS;
    const fa_bf16 *qkv_b = qkv + (size_t)b * T * W;
    const fa_bf16 *kb = qkv_b + C + (size_t)(h / (NH / NKV)) * HS, *vb = kb + (size_t)NKV * HS;
    int nq = min(BQ, T - q0);
    fa_row_values<BQ>(lse_s, D_s, first_s, lse, D, pos, b, h, NH, T, q0);
    __syncthreads();
    int kmin = T, wfirst = T;
    for (int r = 0; r < BQ; r++) kmin = min(kmin, first_s[r]);
    for (int r = 0; r < 16 * MT; r++) wfirst = min(wfirst, first_s[warp * 16 * MT + r]);
    int kstart = (kmin / FA_BK) * FA_BK, last = min(q0 + BQ, T) - 1;
    fm_stage<HS, BQ>(Qs, qkv_b + (size_t)h * HS, W, q0, nq);
    fm_stage<HS, BQ>(dOs, dout + (size_t)b * T * C + (size_t)h * HS, C, q0, nq);
    fm_stage_kv<HS>(kv, 0, kb, vb, W, kstart, T);
    fa_cp_commit();
    int wr0 = q0 + warp * 16 * MT, wlast = min(wr0 + 16 * MT - 1, T - 1);
    int ir[MT][2], jr[MT][2];
    float lr[MT][2], Dr[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int k = 0; k < 2; k++) {
            int qi = (warp * MT + mt) * 16 + g + 8 * k;
            ir[mt][k] = q0 + qi;
            jr[mt][k] = first_s[qi]; /* T past the last row */
            lr[mt][k] = lse_s[qi];
            Dr[mt][k] = D_s[qi];
        }
    float dq[MT][NDT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) fm_zero<NDT>(dq[mt]);
    const float scale = 1.0f / sqrtf((float)HS), sl2 = scale * FA_LOG2E;
    for (int k0 = kstart, it = 0; k0 <= last; k0 += FA_BK, it++) {
        const fa_bf16 *Ks = fm_kv_next<HS>(kv, it, kb, vb, W, k0, last, T), *Vs = Ks + KV / 2;
        if (wr0 >= T || k0 > wlast || k0 + FA_BK <= wfirst) continue;
        float s[MT][NKT][4], dp[MT][NKT][4];
        fm_two_products<HS, NKT, MT>(s, dp, Qs + warp * MT * 16 * LDH,
                                     dOs + warp * MT * 16 * LDH, Ks, Vs);
        /* dS: element (query row, key column) */
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int n = 0; n < NKT; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int k = e >> 1, i = ir[mt][k], j = k0 + n * 8 + 2 * t + (e & 1);
                    float p = i < T && j <= i && j >= jr[mt][k]
                                  ? exp2f(s[mt][n][e] * sl2 - lr[mt][k])
                                  : 0.0f;
                    s[mt][n][e] = p * (dp[mt][n][e] - Dr[mt][k]) * scale;
                }
#pragma unroll
        for (int kc = 0; kc < NKT / 2; kc++) {
            uint32_t kf[NDT][2];
            fm_load_bn<NDT>(kf, Ks, LDH, kc * 16);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                uint32_t sa[4];
                fm_pack_a(sa, s[mt][2 * kc], s[mt][2 * kc + 1]);
                fa_mma<NDT>(dq[mt], sa, kf);
            }
        }
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        int r0 = wr0 + 16 * mt;
        if (r0 < T)
            fm_add_rows<NDT>(dqkv + ((size_t)b * T + r0) * W + (size_t)h * HS, W, T - r0, dq[mt]);
    }
}

/* One query tile's share of a dk, dv block (fm_dkv_body), for the warp's 16
 * key rows: S^T = K Q^T and dP^T = V dO^T, P^T and dS^T on them, then dv +=
 * P^T dO and dk += dS^T Q. jr: the lane's key rows; i0: the tile's first
 * query row. HELD: the warp's K and V fragments are kva[0..HS/16) and
 * kva[HS/16..) in registers, not loaded for each tile. */
template <int HS, bool HELD>
__device__ inline void fm_dkv_tile(float (*dk)[4], float (*dv)[4], const fa_bf16 *Ks,
                                   const fa_bf16 *Vs, const fa_bf16 *Qs, const fa_bf16 *dOs,
                                   const float *lse_s, const float *D_s, const int *first_s,
                                   const int jr[2], int i0, int T, float sl2, float scale,
                                   const uint32_t (*kva)[4]) {
    constexpr int BQ = FA_DKV_BQ(HS), LDH = HS + 8, NQT = BQ / 8, NDT = HS / 8;
    int warp = threadIdx.x >> 5, t = threadIdx.x & 3;
    float st1[1][NQT][4], dpt1[1][NQT][4];
    fm_two_products<HS, NQT, 1, HELD>(st1, dpt1, Ks + warp * 16 * LDH, Vs + warp * 16 * LDH, Qs,
                                      dOs, kva, kva + HS / 16);
    float(*st)[4] = st1[0], (*dpt)[4] = dpt1[0];
    /* P^T and dS^T: element (key row, query column) */
#pragma unroll
    for (int n = 0; n < NQT; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int j = jr[e >> 1], qi = n * 8 + 2 * t + (e & 1), i = i0 + qi;
            float p = i < T && j <= i && j >= first_s[qi]
                          ? exp2f(st[n][e] * sl2 - lse_s[qi])
                          : 0.0f;
            dpt[n][e] = p * (dpt[n][e] - D_s[qi]) * scale;
            st[n][e] = p;
        }
#pragma unroll
    for (int kc = 0; kc < NQT / 2; kc++) {
        uint32_t pa[4], sa[4], bf[NDT][2];
        fm_pack_a(pa, st[2 * kc], st[2 * kc + 1]);
        fm_pack_a(sa, dpt[2 * kc], dpt[2 * kc + 1]);
        fm_load_bn<NDT>(bf, dOs, LDH, kc * 16);
        fa_mma<NDT>(dv, pa, bf);
        fm_load_bn<NDT>(bf, Qs, LDH, kc * 16);
        fa_mma<NDT>(dk, sa, bf);
    }
}

/* ---------------------------------------------------------------- dk, dv
 * Block (key tile, g, b), four warps of 16 key rows of KV head g; over the
 * query heads of g's group in order, then the query tiles that see the
 * block's keys in order: S^T = K Q^T and dP^T = V dO^T in registers, P^T
 * and dS^T on them (as in dq), then dv += P^T dO and dk += dS^T Q with both
 * packed to bf16 A fragments. Adds dk, dv into dqkv's k and v columns once,
 * at the end. A query's first key never decreases along a row, so the first
 * query tile whose first row starts after the block's last key ends the
 * walk. */
template <int HS>
__device__ void fm_dkv_body(unsigned char *smem, float *dqkv, const fa_bf16 *dout,
                            const fa_bf16 *qkv, const float *lse, const double *D,
                            const int32_t *pos, int T, int NH, int NKV) {
    constexpr int BQ = FA_DKV_BQ(HS), NDT = HS / 8;
    constexpr size_t QT = fa_tile_bytes(BQ, HS), RW = fa_round((size_t)BQ * 12);
    fa_bf16 *Ks = (fa_bf16 *)smem;
    fa_bf16 *Vs = (fa_bf16 *)((unsigned char *)Ks + fa_tile_bytes(FA_BK, HS));
    /* stage s: Q at 2 s QT, dO after; its lse, D and first keys at rows + s RW */
    unsigned char *qd = (unsigned char *)Vs + fa_tile_bytes(FA_BK, HS), *rows = qd + 4 * QT;

    int gk = blockIdx.y, b = blockIdx.z, k0 = blockIdx.x * FA_BK;
    int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, group = NH / NKV;
    size_t C = (size_t)NH * HS, W = (size_t)(NH + 2 * NKV) * HS, KC = (size_t)NKV * HS;
    const fa_bf16 *qkv_b = qkv + (size_t)b * T * W;
    size_t ko = C + (size_t)gk * HS, vo = ko + KC;
    int wk0 = k0 + warp * 16, klast = min(k0 + FA_BK, T) - 1;
    int istart = (k0 / BQ) * BQ, hend = (gk + 1) * group;
    /* starts copying query tile (hh, i0) into stage st, its rows' values too */
    auto load = [&](int st, int hh, int i0) {
        fa_bf16 *Qn = (fa_bf16 *)(qd + st * 2 * QT);
        float *ln = (float *)(rows + st * RW), *Dn = ln + BQ;
        int n = min(BQ, T - i0);
        fm_stage<HS, BQ>(Qn, qkv_b + (size_t)hh * HS, W, i0, n);
        fm_stage<HS, BQ>(Qn + QT / 2, dout + (size_t)b * T * C + (size_t)hh * HS, C, i0, n);
        fa_row_values<BQ>(ln, Dn, (int *)(Dn + BQ), lse, D, pos, b, hh, NH, T, i0);
    };
    fm_stage<HS, FA_BK>(Ks, qkv_b + ko, W, k0, min(FA_BK, T - k0));
    fm_stage<HS, FA_BK>(Vs, qkv_b + vo, W, k0, min(FA_BK, T - k0));
    /* the walk: the group's heads in order, each over the query tiles from
     * istart (whose first row sees the block's keys: its first key is at most
     * istart <= k0) until one starts after the block's last key */
    int h = gk * group, i0 = istart;
    load(0, h, i0);
    fa_cp_commit();
    int jr[2] = {wk0 + g, wk0 + g + 8}; /* this lane's key rows */
    float dk[NDT][4], dv[NDT][4];
    fm_zero<NDT>(dk);
    fm_zero<NDT>(dv);
    const float scale = 1.0f / sqrtf((float)HS), sl2 = scale * FA_LOG2E;
    /* at head size 64 the warp's K and V fragments stay in registers for the
     * walk (the block holds two blocks an SM either way: 2 x 16 registers) */
    constexpr bool HOLD = HS == 64;
    constexpr int LDH = HS + 8;
    uint32_t kva[HOLD ? HS / 8 : 1][4];
    for (int it = 0;; it++) {
        int hn = h, in = i0 + BQ; /* the next tile, block-uniform */
        if (in >= T || attn_first_key(pos, b, T, in) > klast) {
            hn = h + 1;
            in = istart;
        }
        bool more = hn < hend;
        __syncthreads(); /* the other stage's readers are done */
        if (more) load((it + 1) & 1, hn, in);
        fa_cp_commit();
        fa_cp_wait<1>();
        __syncthreads();
        if (HOLD && it == 0) /* K and V came with the first query tile */
#pragma unroll
            for (int kk = 0; kk < HS / 16; kk++) {
                fa_ldsm_a(kva[kk], Ks + warp * 16 * LDH + kk * 16, LDH);
                fa_ldsm_a(kva[HS / 16 + kk], Vs + warp * 16 * LDH + kk * 16, LDH);
            }
        const fa_bf16 *Qs = (const fa_bf16 *)(qd + (it & 1) * 2 * QT), *dOs = Qs + QT / 2;
        const float *lse_s = (const float *)(rows + (it & 1) * RW), *D_s = lse_s + BQ;
        const int *first_s = (const int *)(D_s + BQ);
        int nq = min(BQ, T - i0), qfirst = T; /* the tile's least first key */
        for (int q = 0; q < BQ; q++) qfirst = min(qfirst, first_s[q]);
        if (wk0 < T && wk0 <= i0 + nq - 1 && qfirst <= wk0 + 15) /* warp-uniform */
            fm_dkv_tile<HS, HOLD>(dk, dv, Ks, Vs, Qs, dOs, lse_s, D_s, first_s, jr, i0, T, sl2,
                                  scale, kva);
        h = hn;
        i0 = in;
        if (!more) break;
    }
    if (wk0 >= T) return;
    float *dj = dqkv + ((size_t)b * T + wk0) * W;
    fm_add_rows<NDT>(dj + ko, W, T - wk0, dk);
    fm_add_rows<NDT>(dj + vo, W, T - wk0, dv);
}

#endif
