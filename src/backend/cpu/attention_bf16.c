/*
 * Precision bf16's attention (attention_forward_bf16 / _backward_bf16,
 * backend.h): attention.c's tiles and loop order, with every tile product on
 * bf16 operands and fp32 sums (tile16.c: vdpbf16ps on AVX512_BF16). q, k, v
 * and dout are rounded to bf16 as they are packed, once per head; the
 * probabilities are rounded where they multiply v (forward) or dout (dV),
 * and dS where it multiplies k or q. Scores, the online softmax, lse, D = dout
 * . out and the gradients' sums stay fp32: the numbers of the CUDA backend's
 * tensor-core kernels, at bf16's precision.
 * The operands each tile pair shares are packed once per head into the
 * thread's buffer (the backend keeps it between calls): forward, K as the
 * scores' right operand (ct_t16_cols) and V in row pairs (ct_t16_pairs),
 * 2 T HS bf16; backward, Q and dO both as rows (left operands of the scores
 * and dP) and as row pairs (right operands of dK and dV), 4 T HS bf16, with
 * D (T floats) and one key tile's K^T, V^T and K (3 HS x the key tile). The
 * tiles are the backend's att_bq x att_bk made even (pairs never straddle
 * two tiles); an odd T gets a zero row at the end of each pairs pack.
 * Dropout, head sizes above 256 or odd, and a buffer that cannot be had run
 * the fp32 kernels (attention.c) instead, as the entries' contract allows;
 * CT_CPU_ATTENTION=fp32 in the environment runs them for every call (numerics
 * checks of the GEMMs' bf16 semantics apart from attention's).
 * Work is split as in attention.c: by (batch, head) forward, by (batch, KV
 * head) backward, so the sums are deterministic.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/attention.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/tile.h"
#include "backend/cpu/vmath.h"

#define T16_HS_MAX 256

/* x made even (up), within max */
static int even_tile(int x, int max) {
    x += x & 1;
    return x > max ? max & ~1 : x;
}

/* Whether every pool thread has a buffer of n floats (allocated here when
 * not), so the heads never find theirs missing. */
static bool bufs_ready(ct_backend *be, size_t n) {
    int ok = 1;
#ifdef CT_USE_OPENMP
#pragma omp parallel reduction(&& : ok)
#endif
    ok = ct_backend_thread_buf(be, n) != NULL;
    return ok;
}

/* One (batch, head) of the forward (see attention.c's attention_head_fwd for
 * the arguments); buf holds (T + 1) HS floats: K as the scores' right
 * operand (T HS bf16), V in row pairs (T rounded up to even, times HS). */
static void head_fwd16(float *buf, float *out, float *lse, const float *q, const float *k,
                       const float *v, const int32_t *pos, int T, int HS, int ld, int C,
                       float scale, int BQ, int BK) {
    uint16_t *Kc = (uint16_t *)buf, *Vp = Kc + (size_t)T * HS;
    ct_t16_cols(Kc, k, ld, T, HS);   /* pair-row d/2: 2T, key j at 2j */
    ct_t16_pairs(Vp, v, ld, T, HS);  /* pair-row j/2: 2HS */
    float S[BQ * BK], O[BQ * HS], m[BQ], l[BQ];
    uint16_t Q16[BQ * HS], P16[BQ * BK];
    for (int r0 = 0; r0 < T; r0 += BQ) {
        int br = T - r0 < BQ ? T - r0 : BQ;
        int kend = r0 + br;
        int kbeg = seg_start(pos, r0) / BK * BK;
        for (int i = 0; i < br; i++) m[i] = -INFINITY, l[i] = 0.0f;
        memset(O, 0, (size_t)br * HS * sizeof(float));
        ct_t16_rows(Q16, q + (size_t)r0 * ld, ld, br, HS, HS);
        for (int c0 = kbeg; c0 < kend; c0 += BK) {
            int bc = kend - c0 < BK ? kend - c0 : BK, bcp = bc + (bc & 1);
            ct_tile16_gemm(br, bc, HS / 2, Q16, HS, 2, Kc + 2 * (size_t)c0, 2 * (ptrdiff_t)T,
                           scale, false, S, bc);
            for (int i = 0; i < br; i++) {
                float *s = S + (size_t)i * bc;
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
                m[i] = mnew;
                if (corr != 1.0f)
                    for (int d = 0; d < HS; d++) O[(size_t)i * HS + d] *= corr;
            }
            ct_t16_rows(P16, S, bc, br, bc, bcp);
            ct_tile16_gemm(br, HS, bcp / 2, P16, bcp, 2, Vp + (size_t)c0 * HS, 2 * (ptrdiff_t)HS,
                           1.0f, true, O, HS);
        }
        for (int i = 0; i < br; i++) {
            float inv = 1.0f / l[i];
            float *o = out + (size_t)(r0 + i) * C;
            for (int d = 0; d < HS; d++) o[d] = O[(size_t)i * HS + d] * inv;
            lse[r0 + i] = m[i] + logf(l[i]);
        }
    }
}

/* The backward's buffer, in floats: D (T), then Q and dO as rows and as row
 * pairs (4 Tp HS bf16), then one key tile's K^T, V^T and K (3 BK HS bf16). */
static size_t bwd_floats(int T, int HS, int BK) {
    size_t Tp = (size_t)T + (T & 1);
    return (size_t)T + (4 * Tp * HS + 3 * (size_t)BK * HS) / 2 + 1;
}

/* One (batch, head) of the backward (see attention.c's attention_head_bwd);
 * buf holds bwd_floats(T, HS, BK). */
static void head_bwd16(float *buf, float *dq, float *dk, float *dv, const float *q,
                       const float *k, const float *v, const float *o, const float *dout,
                       const float *lse, const int32_t *pos, int T, int HS, int ld, int C,
                       float scale, int BQ, int BK) {
    size_t Tp = (size_t)T + (T & 1);
    float *D = buf;
    uint16_t *Q16 = (uint16_t *)(buf + T), *Qp = Q16 + Tp * HS, *dO16 = Qp + Tp * HS,
             *dOp = dO16 + Tp * HS, *Kt = dOp + Tp * HS, *Vt = Kt + (size_t)BK * HS,
             *Kp = Vt + (size_t)BK * HS;
    for (int t = 0; t < T; t++) {
        const float *a = dout + (size_t)t * C, *b = o + (size_t)t * C;
        float acc = 0.0f;
        for (int d = 0; d < HS; d++) acc += a[d] * b[d];
        D[t] = acc;
    }
    ct_t16_rows(Q16, q, ld, T, HS, HS);
    ct_t16_pairs(Qp, q, ld, T, HS);
    ct_t16_rows(dO16, dout, C, T, HS, HS);
    ct_t16_pairs(dOp, dout, C, T, HS);
    float P[BQ * BK], dP[BQ * BK];
    uint16_t Pp[BQ * BK], dS16[BQ * BK], dSp[BQ * BK];
    for (int c0 = 0; c0 < T; c0 += BK) {
        int bc = T - c0 < BK ? T - c0 : BK, bcp = bc + (bc & 1);
        ct_t16_cols(Kt, k + (size_t)c0 * ld, ld, bc, HS); /* pair-row d/2: 2 bc */
        ct_t16_cols(Vt, v + (size_t)c0 * ld, ld, bc, HS);
        ct_t16_pairs(Kp, k + (size_t)c0 * ld, ld, bc, HS); /* pair-row j/2: 2 HS */
        for (int r0 = (c0 / BQ) * BQ; r0 < T; r0 += BQ) {
            if (seg_start(pos, r0) >= c0 + bc) break;
            int br = T - r0 < BQ ? T - r0 : BQ, brp = br + (br & 1);
            ct_tile16_gemm(br, bc, HS / 2, Q16 + (size_t)r0 * HS, HS, 2, Kt, 2 * (ptrdiff_t)bc,
                           scale, false, P, bc);
            for (int i = 0; i < br; i++) {
                float *p = P + (size_t)i * bc;
                int nv = visible(r0 + i, c0, bc), a = hidden(pos, r0 + i, c0, bc);
                if (nv < a) nv = a;
                v_exp_sub_sum(p + a, nv - a, lse[r0 + i]);
                memset(p, 0, (size_t)a * sizeof(float));
                memset(p + nv, 0, (size_t)(bc - nv) * sizeof(float));
            }
            /* dV += P^T dO: P's row pairs read transposed */
            ct_t16_pairs(Pp, P, bc, br, bc);
            ct_tile16_gemm(bc, HS, brp / 2, Pp, 2, 2 * (ptrdiff_t)bc, dOp + (size_t)r0 * HS,
                           2 * (ptrdiff_t)HS, 1.0f, true, dv + (size_t)c0 * ld, ld);
            /* dP = dO V^T; dS = P (dP - D) scale over it */
            ct_tile16_gemm(br, bc, HS / 2, dO16 + (size_t)r0 * HS, HS, 2, Vt, 2 * (ptrdiff_t)bc,
                           1.0f, false, dP, bc);
            for (int i = 0; i < br; i++) {
                float *p = P + (size_t)i * bc, *dp = dP + (size_t)i * bc;
                float Di = D[r0 + i];
                for (int j = 0; j < bc; j++) dp[j] = p[j] * (dp[j] - Di) * scale;
            }
            /* dQ += dS K; dK += dS^T Q */
            ct_t16_rows(dS16, dP, bc, br, bc, bcp);
            ct_t16_pairs(dSp, dP, bc, br, bc);
            ct_tile16_gemm(br, HS, bcp / 2, dS16, bcp, 2, Kp, 2 * (ptrdiff_t)HS, 1.0f, true,
                           dq + (size_t)r0 * ld, ld);
            ct_tile16_gemm(bc, HS, brp / 2, dSp, 2, 2 * (ptrdiff_t)bc, Qp + (size_t)r0 * HS,
                           2 * (ptrdiff_t)HS, 1.0f, true, dk + (size_t)c0 * ld, ld);
        }
    }
}

/* Whether the bf16 kernels take a call: no dropout, an even head size up to
 * T16_HS_MAX, not turned off by CT_CPU_ATTENTION=fp32 (read once). */
static bool takes(const ct_attn_dropout *drop, int HS) {
    static int off = -1;
    if (off < 0) {
        const char *e = getenv("CT_CPU_ATTENTION");
        off = e && !strcmp(e, "fp32");
    }
    return !off && !(drop && drop->p > 0.0f) && HS % 2 == 0 && HS <= T16_HS_MAX;
}

void ct_attention_forward_bf16_cpu(ct_backend *be, float *out, float *lse, const float *qkv,
                                   const int32_t *pos, const ct_attn_dropout *drop, int B, int T,
                                   int NH, int NKV, int HS) {
    int BQ = even_tile(be->att_bq, CT_ATT_BQ_MAX), BK = even_tile(be->att_bk, CT_ATT_BK_MAX);
    size_t nbuf = (size_t)(T + 1) * HS;
    if (!takes(drop, HS) || B <= 0 || T <= 0 || !bufs_ready(be, nbuf)) {
        ct_attention_forward_cpu(be, out, lse, qkv, pos, drop, B, T, NH, NKV, HS);
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
            head_fwd16(ct_backend_thread_buf(be, nbuf), out + (size_t)b * T * C + (size_t)h * HS,
                       lse + ((size_t)b * NH + h) * T, base + (size_t)h * HS, kb, kb + KC,
                       pos ? pos + (size_t)b * T : NULL, T, HS, ld, C, scale, BQ, BK);
        }
    }
}

void ct_attention_backward_bf16_cpu(ct_backend *be, float *dqkv, const float *dout,
                                    const float *qkv, const float *out, const float *lse,
                                    const int32_t *pos, const ct_attn_dropout *drop, int B,
                                    int T, int NH, int NKV, int HS) {
    int BQ = even_tile(be->att_bq, CT_ATT_BQ_MAX), BK = even_tile(be->att_bk, CT_ATT_BK_MAX);
    size_t nbuf = bwd_floats(T, HS, BK);
    if (!takes(drop, HS) || B <= 0 || T <= 0 || !bufs_ready(be, nbuf)) {
        ct_attention_backward_cpu(be, dqkv, dout, qkv, out, lse, pos, drop, B, T, NH, NKV, HS);
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
            float *buf = ct_backend_thread_buf(be, nbuf);
            for (int h = g * group; h < (g + 1) * group; h++) {
                size_t qoff = off + (size_t)h * HS;
                size_t ooff = (size_t)b * T * C + (size_t)h * HS;
                head_bwd16(buf, dqkv + qoff, dqkv + koff, dqkv + koff + KC, qkv + qoff,
                           qkv + koff, qkv + koff + KC, out + ooff, dout + ooff,
                           lse + ((size_t)b * NH + h) * T, pos ? pos + (size_t)b * T : NULL, T,
                           HS, ld, C, scale, BQ, BK);
            }
        }
    }
}
