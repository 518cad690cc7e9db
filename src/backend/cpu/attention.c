/*
 * Threaded causal attention, flash-style: for each (batch, head), query rows
 * go in tiles of ATT_BQ and keys in tiles of ATT_BK (the backend's att_bq x
 * att_bk, 64 x 128 unless ct_backend_set_tiles says otherwise); a tile's scores
 * S = scale Q K^T and its products with V come from the register-blocked
 * tile products of tile.c on operands packed per tile (Q and dO of the query
 * tile, scale K^T, V^T and K of the key tile: the qkv rows are strided), and
 * the softmax is online (running max and sum per row, earlier output rescaled
 * when the max grows). No T x T matrix exists: each thread holds one tile,
 * its gradient and its packed operands on its stack (~100 KiB at GPT-2's
 * HS = 64 and the default tiles; ~1.3 MiB at the largest tiles and HS = 256);
 * the operands every tile pair shares are packed once per head into the
 * thread's buffer, which the backend keeps between calls (forward: K^T and V,
 * 2 T HS floats; backward: Q, dO and D = dO . O). Tiles
 * entirely above the diagonal are skipped; the diagonal tile masks its upper
 * part to exact zeros. The backward recomputes each tile's probabilities from
 * the saved log-sum-exp (FlashAttention-2's loop order: key tile outer, so a
 * thread owns its head's dK, dV and dQ). Work is split by (batch, head), so
 * threads never share an output element (grouped-query attention: by (batch,
 * KV head), the group's query heads in order).
 * Measured on GPT-2 124M shapes (B=4, 2 threads, `ctrain bench kernels --seq T
 * --filter attention`): the row-at-a-time version before it, one dot product per
 * (query, key) pair, ran at 7-13 GFLOP/s at T=256; tiles through sgemm calls
 * at 65-70 (T=256) and ~105 (T=1024) on a Zen 5 (200 GFLOP/s sgemm peak).
 * On a Zen 3 (AVX2, ~190 GFLOP/s FMA ceiling) at T=1024: sgemm tiles 80 ms
 * forward, 196 ms backward; tile.c's products 81 and 163 ms (the exp at the
 * native vector width in both); packing a head's operands once, not per
 * tile pair, then took forward 86 -> 74 ms and backward 179 -> 159 ms (medians
 * of 5 alternating runs). Tiles of 64 x 256 or 128 x 256 were slower in
 * backward.
 * Packed rows (positions pos, several examples per row): query t sees keys
 * [s(t), t], s(t) = t - pos[t] its example's start. s is nondecreasing in t,
 * so a query tile's earliest start is its first row's: key tiles that end
 * before it are skipped whole (forward: the key loop starts at the tile that
 * holds s(r0); backward: a key tile's query loop stops at the first query tile
 * whose s(r0) lies past the key tile). Inside a tile each row's visible keys
 * are one window [a, e), the rest masked to exact zeros, as on the diagonal.
 * The tile grid stays where it is, so without positions nothing changes.
 * Dropout of the probabilities (drop, HF's attn_dropout in training): the
 * forward multiplies each tile's exponentials by their mask values (0 or
 * 1/(1-p)) after the row sum took them, so out = (P o M) V / l and lse is the
 * undropped softmax's; the backward draws the same mask from the same index
 * (ct_attn_dropout) and forms dP = (dO V^T) o M and dV += (P o M)^T dO in one
 * pass over the tile. The mask is a hash of the element's global index, one
 * per visible (query, key) pair, never stored. Without drop (or p == 0) the
 * code path is the one before dropout existed, bit for bit.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/attention.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/tile.h"
#include "backend/cpu/vmath.h"
#include "backend/ref/ref.h"

#define ATT_BQ_MAX CT_ATT_BQ_MAX /* query rows per tile, at most */
#define ATT_BK_MAX CT_ATT_BK_MAX /* keys per tile, at most */
#define ATT_HS_MAX 256 /* larger heads go to ref */

/* Dropout of one (batch, head): the mask key, the global index of its
 * element (0, 0) (element (i, j) is base + i*T + j), the integer threshold
 * (ct_dropout_threshold) and the kept elements' scale 1/(1-p). */
typedef struct att_drop {
    uint64_t key, base;
    uint32_t thr;
    float inv;
} att_drop;

/* Dropout of (batch b, head h) under d, or false (nothing dropped) when d is
 * NULL or its p is 0. */
static bool att_drop_of(att_drop *out, const ct_attn_dropout *d, int b, int h, int NH, int T) {
    if (!d || !(d->p > 0.0f)) return false;
    out->key = d->key;
    out->base = ((uint64_t)(d->row0 + b) * (uint64_t)NH + (uint64_t)h) * (uint64_t)T * (uint64_t)T;
    out->thr = ct_dropout_threshold(d->p);
    out->inv = 1.0f / (1.0f - d->p);
    return true;
}

/* x[j] *= mask of element idx0 + j (1/(1-p) or 0), j < n: the same decision
 * as ct_dropout_keep_t, written so the compiler vectorises the hash. */
static inline void drop_mul(float *x, int n, const att_drop *d, uint64_t idx0) {
    uint64_t key = d->key;
    uint32_t thr = d->thr;
    float inv = d->inv;
#ifdef CT_USE_OPENMP
#pragma omp simd
#endif
    for (int j = 0; j < n; j++) {
        uint64_t z = key ^ (idx0 + (uint64_t)j);
        z ^= z >> 30;
        z *= 0xBF58476D1CE4E5B9ull;
        z ^= z >> 27;
        z *= 0x94D049BB133111EBull;
        z ^= z >> 31;
        x[j] = (uint32_t)(z >> 40) >= thr ? x[j] * inv : 0.0f;
    }
}

/* The dropout backward of one tile row over its visible keys [a, nv): with
 * p the probabilities (undropped) and dp = dO V^T, writes dp = p o (dp o M -
 * Di) scale (dS) and p = p o M (for dV). */
static inline void drop_bwd_row(float *p, float *dp, int a, int nv, float Di, float scale,
                                const att_drop *d, uint64_t idx0) {
    uint64_t key = d->key;
    uint32_t thr = d->thr;
    float inv = d->inv;
#ifdef CT_USE_OPENMP
#pragma omp simd
#endif
    for (int j = a; j < nv; j++) {
        uint64_t z = key ^ (idx0 + (uint64_t)j);
        z ^= z >> 30;
        z *= 0xBF58476D1CE4E5B9ull;
        z ^= z >> 27;
        z *= 0x94D049BB133111EBull;
        z ^= z >> 31;
        float mk = (uint32_t)(z >> 40) >= thr ? inv : 0.0f;
        dp[j] = p[j] * (dp[j] * mk - Di) * scale;
        p[j] *= mk;
    }
}

/* One (batch, head) of the forward: q, k, v point at the head's first row
 * (row stride ld); out at its first output row (stride C); lse (T); pos the
 * batch row's positions (T) or NULL; drop its dropout or NULL. */
static void attention_head_fwd(ct_backend *be, float *out, float *lse, const float *q,
                               const float *k, const float *v, const int32_t *pos,
                               const att_drop *drop, int T, int HS, int ld, int C, float scale,
                               int ATT_BQ, int ATT_BK) {
    float S[ATT_BQ_MAX * ATT_BK_MAX];
    float O[ATT_BQ_MAX * ATT_HS_MAX];
    /* the tile's operands, packed: its queries, scale K^T and V of the key
     * tile (strided qkv rows, 9 KiB apart in GPT-2, cost a TLB entry each).
     * Every query tile reads the same key tiles, so with more than one query
     * tile the whole head's K^T (tile by tile, each HS x its width) and V are
     * packed once, in the thread's buffer (KVall, kept by the backend: no
     * allocation after the first step); without it, per pair into Kt, Vp. */
    float Qp[ATT_BQ * HS], Kt[HS * ATT_BK], Vp[ATT_BK * HS];
    float m[ATT_BQ_MAX], l[ATT_BQ_MAX];
    float *KVall = T > ATT_BQ ? ct_backend_thread_buf(be, (size_t)2 * T * HS) : NULL;
    if (KVall)
        for (int c0 = 0; c0 < T; c0 += ATT_BK) {
            int bw = T - c0 < ATT_BK ? T - c0 : ATT_BK;
            ct_tile_pack_t(KVall + (size_t)c0 * HS, k + (size_t)c0 * ld, ld, bw, HS, scale);
            ct_tile_pack_rows(KVall + (size_t)(T + c0) * HS, v + (size_t)c0 * ld, ld, bw, HS);
        }
    for (int r0 = 0; r0 < T; r0 += ATT_BQ) {
        int br = T - r0 < ATT_BQ ? T - r0 : ATT_BQ;
        int kend = r0 + br; /* keys 0..kend-1 are visible to some row of the tile */
        /* key tiles that end before the tile's earliest example start are skipped */
        int kbeg = seg_start(pos, r0) / ATT_BK * ATT_BK;
        for (int i = 0; i < br; i++) m[i] = -INFINITY, l[i] = 0.0f;
        memset(O, 0, (size_t)br * HS * sizeof(float));
        ct_tile_pack_rows(Qp, q + (size_t)r0 * ld, ld, br, HS);
        for (int c0 = kbeg; c0 < kend; c0 += ATT_BK) {
            int bc = kend - c0 < ATT_BK ? kend - c0 : ATT_BK;
            const float *kt = Kt, *vp = Vp;
            int ldkt = bc; /* row stride of the packed K^T: its tile's width */
            if (KVall) {
                kt = KVall + (size_t)c0 * HS, vp = KVall + (size_t)(T + c0) * HS;
                ldkt = T - c0 < ATT_BK ? T - c0 : ATT_BK;
            } else {
                ct_tile_pack_t(Kt, k + (size_t)c0 * ld, ld, bc, HS, scale);
                ct_tile_pack_rows(Vp, v + (size_t)c0 * ld, ld, bc, HS);
            }
            ct_tile_gemm(br, bc, HS, Qp, HS, 1, kt, ldkt, false, S, bc);
            for (int i = 0; i < br; i++) {
                float *s = S + (size_t)i * bc;
                // row i sees the tile's keys [a, nv): a window
                int nv = visible(r0 + i, c0, bc), a = hidden(pos, r0 + i, c0, bc);
                if (nv <= a) {
                    memset(s, 0, (size_t)bc * sizeof(float));
                    continue;
                }
                float mx = v_max(s + a, nv - a);
                float mnew = mx > m[i] ? mx : m[i];
                float corr = m[i] == -INFINITY ? 0.0f : s_exp(m[i] - mnew);
                l[i] = l[i] * corr + v_exp_sub_sum(s + a, nv - a, mnew);
                memset(s, 0, (size_t)a * sizeof(float));
                memset(s + nv, 0, (size_t)(bc - nv) * sizeof(float));
                // dropout after the sum: l normalises the undropped softmax
                if (drop)
                    drop_mul(s + a, nv - a, drop, drop->base + (uint64_t)(r0 + i) * T + c0 + a);
                m[i] = mnew;
                if (corr != 1.0f)
                    for (int d = 0; d < HS; d++) O[(size_t)i * HS + d] *= corr;
            }
            ct_tile_gemm(br, HS, bc, S, bc, 1, vp, HS, true, O, HS);
        }
        for (int i = 0; i < br; i++) {
            float inv = 1.0f / l[i];
            float *o = out + (size_t)(r0 + i) * C;
            for (int d = 0; d < HS; d++) o[d] = O[(size_t)i * HS + d] * inv;
            lse[r0 + i] = m[i] + logf(l[i]);
        }
    }
}

/* One (batch, head) of the backward. q, k, v, dq, dk, dv point at the head's
 * first row (row stride ld); o and dout at the head's first row (stride C);
 * pos the batch row's positions (T) or NULL; drop the forward's dropout or
 * NULL. */
static void attention_head_bwd(ct_backend *be, float *dq, float *dk, float *dv, const float *q,
                               const float *k, const float *v, const float *o,
                               const float *dout, const float *lse, const int32_t *pos,
                               const att_drop *drop, int T, int HS, int ld, int C, float scale,
                               int ATT_BQ, int ATT_BK) {
    float P[ATT_BQ_MAX * ATT_BK_MAX], dP[ATT_BQ_MAX * ATT_BK_MAX];
    /* What each query row brings to every key tile, once per head when there
     * is more than one key tile (per tile, the strided rows were re-read
     * T / ATT_BK times; D alone took 38% of the backward's own time): D =
     * dout . out (the softmax Jacobian's row term) and Q and dO packed, in the
     * thread's buffer (Dall, then Qall and dOall), as T may be large. With one
     * key tile, or when no memory is had, per tile into D, Qp and dOp. */
    float D[ATT_BQ_MAX], Qp[ATT_BQ * HS], dOp[ATT_BQ * HS];
    float *Dall = T > ATT_BK ? ct_backend_thread_buf(be, (size_t)T * (1 + 2 * (size_t)HS)) : NULL;
    float *Qall = Dall ? Dall + T : NULL, *dOall = Dall ? Dall + T + (size_t)T * HS : NULL;
    if (Dall) {
        for (int t = 0; t < T; t++)
            Dall[t] = attention_dot(dout + (size_t)t * C, o + (size_t)t * C, HS);
        ct_tile_pack_rows(Qall, q, ld, T, HS);
        ct_tile_pack_rows(dOall, dout, C, T, HS);
    }
    /* the key tile's scale K^T, V^T and K, packed (see the forward) */
    float Kt[HS * ATT_BK], Vt[HS * ATT_BK], Kp[ATT_BK * HS];
    for (int c0 = 0; c0 < T; c0 += ATT_BK) {
        int bc = T - c0 < ATT_BK ? T - c0 : ATT_BK;
        ct_tile_pack_t(Kt, k + (size_t)c0 * ld, ld, bc, HS, scale);
        ct_tile_pack_t(Vt, v + (size_t)c0 * ld, ld, bc, HS, 1.0f);
        ct_tile_pack_rows(Kp, k + (size_t)c0 * ld, ld, bc, HS);
        // query tiles that see at least one key of this tile: rows >= c0, and
        // (packed) up to the first tile whose earliest example starts past it
        for (int r0 = (c0 / ATT_BQ) * ATT_BQ; r0 < T; r0 += ATT_BQ) {
            if (seg_start(pos, r0) >= c0 + bc) break;
            int br = T - r0 < ATT_BQ ? T - r0 : ATT_BQ;
            const float *dor = dout + (size_t)r0 * C, *qp = Qp, *dop = dOp;
            if (Dall) {
                qp = Qall + (size_t)r0 * HS, dop = dOall + (size_t)r0 * HS;
            } else {
                ct_tile_pack_rows(Qp, q + (size_t)r0 * ld, ld, br, HS);
                ct_tile_pack_rows(dOp, dor, C, br, HS);
            }
            ct_tile_gemm(br, bc, HS, qp, HS, 1, Kt, bc, false, P, bc);
            for (int i = 0; i < br; i++) {
                float *p = P + (size_t)i * bc;
                int nv = visible(r0 + i, c0, bc), a = hidden(pos, r0 + i, c0, bc);
                if (nv < a) nv = a; /* nothing visible: the whole row is masked */
                v_exp_sub_sum(p + a, nv - a, lse[r0 + i]);
                memset(p, 0, (size_t)a * sizeof(float));
                memset(p + nv, 0, (size_t)(bc - nv) * sizeof(float));
                D[i] = Dall ? Dall[r0 + i]
                            : attention_dot(dor + (size_t)i * C, o + (size_t)(r0 + i) * C, HS);
            }
            if (drop) {
                // dP = (dO V^T) o M; dS = P (dP - D) scale over dP; P o M for dV
                ct_tile_gemm(br, bc, HS, dop, HS, 1, Vt, bc, false, dP, bc);
                for (int i = 0; i < br; i++) {
                    float *p = P + (size_t)i * bc, *dp = dP + (size_t)i * bc;
                    int nv = visible(r0 + i, c0, bc), a = hidden(pos, r0 + i, c0, bc);
                    if (nv < a) nv = a;
                    // masked entries have P = 0: their dS is 0 as it stands
                    for (int j = 0; j < a; j++) dp[j] = 0.0f;
                    for (int j = nv; j < bc; j++) dp[j] = 0.0f;
                    drop_bwd_row(p, dp, a, nv, D[i], scale, drop,
                                 drop->base + (uint64_t)(r0 + i) * T + c0);
                }
                ct_tile_gemm(bc, HS, br, P, 1, bc, dop, HS, true, dv + (size_t)c0 * ld, ld);
            } else {
                // dV += P^T dO; dP = dO V^T
                ct_tile_gemm(bc, HS, br, P, 1, bc, dop, HS, true, dv + (size_t)c0 * ld, ld);
                ct_tile_gemm(br, bc, HS, dop, HS, 1, Vt, bc, false, dP, bc);
                // dS = P (dP - D) scale, written over dP (masked entries have P = 0)
                for (int i = 0; i < br; i++) {
                    float *p = P + (size_t)i * bc, *dp = dP + (size_t)i * bc;
                    float Di = D[i];
                    for (int j = 0; j < bc; j++) dp[j] = p[j] * (dp[j] - Di) * scale;
                }
            }
            // dQ += dS K; dK += dS^T Q
            ct_tile_gemm(br, HS, bc, dP, bc, 1, Kp, HS, true, dq + (size_t)r0 * ld, ld);
            ct_tile_gemm(bc, HS, br, dP, 1, bc, qp, HS, true, dk + (size_t)c0 * ld, ld);
        }
    }
}

/* One query row q (HS) against n >= 1 keys and values whose rows lie kv_stride
 * floats apart (decoding): writes out (HS). */
static void attention_row(float *out, const float *q, const float *k, const float *v,
                          size_t kv_stride, int n, int HS, float scale) {
    // key 0 seeds the running max, so no -inf arithmetic is needed
    float m = scale * attention_dot(q, k, HS);
    float l = 1.0f;
    for (int d = 0; d < HS; d++) out[d] = v[d];
    for (int j = 1; j < n; j++) {
        const float *kj = k + j * kv_stride;
        const float *vj = v + j * kv_stride;
        float s = scale * attention_dot(q, kj, HS);
        if (s > m) {
            // new max: rescale what was summed against the old one
            float corr = expf(m - s);
            l *= corr;
            for (int d = 0; d < HS; d++) out[d] *= corr;
            m = s;
        }
        float p = expf(s - m);
        l += p;
        for (int d = 0; d < HS; d++) out[d] += p * vj[d];
    }
    float inv_l = 1.0f / l;
    for (int d = 0; d < HS; d++) out[d] *= inv_l;
}

/* out (B,T,NH*HS), lse (B,NH,T) = causal attention of qkv (B,T,(NH+2*NKV)*HS),
 * scale 1/sqrt(HS); query head h reads KV head h / (NH/NKV); pos (B,T) or
 * NULL: query t sees keys [t - pos[b,t], t]; drop: dropout of the
 * probabilities (NULL: none). */
void ct_attention_forward_cpu(ct_backend *be, float *out, float *lse, const float *qkv,
                              const int32_t *pos, const ct_attn_dropout *drop, int B, int T,
                              int NH, int NKV, int HS) {
    if (HS > ATT_HS_MAX) {
        ct_attention_forward_ref(be, out, lse, qkv, pos, drop, B, T, NH, NKV, HS);
        return;
    }
    float scale = (float)(1.0 / sqrt((double)HS));
    int C = NH * HS, KC = NKV * HS, ld = C + 2 * KC, group = NH / NKV;
#ifdef CT_USE_OPENMP
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
#endif
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *base = qkv + (size_t)b * T * ld;
            const float *kb = base + C + (size_t)(h / group) * HS;
            att_drop d;
            bool dropping = att_drop_of(&d, drop, b, h, NH, T);
            attention_head_fwd(be, out + (size_t)b * T * C + (size_t)h * HS,
                               lse + ((size_t)b * NH + h) * T, base + (size_t)h * HS, kb, kb + KC,
                               pos ? pos + (size_t)b * T : NULL, dropping ? &d : NULL, T, HS, ld,
                               C, scale, be->att_bq, be->att_bk);
        }
    }
}


/* dqkv (B,T,(NH+2*NKV)*HS) += attention gradient from dout (B,T,NH*HS), qkv,
 * the forward's out (B,T,NH*HS) and lse (B,NH,T). Work is split by (batch, KV
 * head): one thread owns a KV head's dK and dV and runs the query heads of its
 * group in order, so the sums are deterministic. */
void ct_attention_backward_cpu(ct_backend *be, float *dqkv, const float *dout, const float *qkv,
                               const float *out, const float *lse, const int32_t *pos,
                               const ct_attn_dropout *drop, int B, int T, int NH, int NKV,
                               int HS) {
    if (HS > ATT_HS_MAX) {
        ct_attention_backward_ref(be, dqkv, dout, qkv, out, lse, pos, drop, B, T, NH, NKV, HS);
        return;
    }
    float scale = (float)(1.0 / sqrt((double)HS));
    int C = NH * HS, KC = NKV * HS, ld = C + 2 * KC, group = NH / NKV;
#ifdef CT_USE_OPENMP
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
#endif
    for (int b = 0; b < B; b++) {
        for (int g = 0; g < NKV; g++) {
            size_t off = (size_t)b * T * ld;
            size_t koff = off + C + (size_t)g * HS;
            for (int h = g * group; h < (g + 1) * group; h++) {
                size_t qoff = off + (size_t)h * HS;
                size_t ooff = (size_t)b * T * C + (size_t)h * HS;
                att_drop d;
                bool dropping = att_drop_of(&d, drop, b, h, NH, T);
                attention_head_bwd(be, dqkv + qoff, dqkv + koff, dqkv + koff + KC, qkv + qoff,
                                   qkv + koff, qkv + koff + KC, out + ooff, dout + ooff,
                                   lse + ((size_t)b * NH + h) * T,
                                   pos ? pos + (size_t)b * T : NULL, dropping ? &d : NULL, T, HS,
                                   ld, C, scale, be->att_bq, be->att_bk);
            }
        }
    }
}


/* out (NH*HS) = attention of q (NH*HS) over kcache, vcache (n, NKV*HS), all
 * visible; heads in parallel. */
void ct_attention_decode_cpu(ct_backend *be, float *out, const float *q, const float *kcache,
                                 const float *vcache, int n, int NH, int NKV, int HS) {
    (void)be;
    float scale = (float)(1.0 / sqrt((double)HS));
    int group = NH / NKV;
#ifdef CT_USE_OPENMP
#pragma omp parallel for
#endif
    for (int h = 0; h < NH; h++) {
        size_t g = (size_t)(h / group) * HS;
        attention_row(out + (size_t)h * HS, q + (size_t)h * HS, kcache + g, vcache + g,
                      (size_t)NKV * HS, n, HS, scale);
    }
}

