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

/* The rows' elementwise steps, fused with their rounding to bf16 so that no
 * fp32 tile is written only to be packed: at the target's own width (vnf,
 * vmath.h), the tails in scalar code with the same exp (s_exp). */

/* Each lane's bf16 (nearest even, NaN made quiet) by vn_bf16_daz, which may
 * read a denormal as zero: the rows rounded here are exps (normal or 0) and
 * dS, whose denormals are below anything the products keep. */
static inline vnh r16h(vnf x) { return vn_bf16_daz(x); }
#if VN == 16 && defined(__AVX512BW__) && defined(__AVX512BF16__)
/* Two rows' bf16, interleaved: lane k holds x0[k] in its low half, x1[k] in
 * its high half. */
static inline vnu r16pair(vnf x0, vnf x1) { return (vnu)ct_t16_zip((__m512)x0, (__m512)x1); }
#else
static inline vnu r16pair(vnf x0, vnf x1) { return vn_bf16_bits(x0) | vn_bf16_bits(x1) << 16; }
#endif

/* exp(x - sub) on the lanes j0 .. j0+VN-1 inside the window [a, e), exactly
 * 0 on the others (a chunk wholly inside needs no mask) */
static inline vnf exp_window(vnf x, vnf sub, int j0, int a, int e) {
    static const int32_t lane[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    vnf ex = vn_exp_nonpos(x - sub); /* <= 0 inside the window; outside, discarded */
    if (j0 >= a && j0 + VN <= e) return ex;
    vni idx;
    memcpy(&idx, lane, sizeof idx);
    idx += j0;
    return vn_select((idx >= a) & (idx < e), ex, vn_set1(0.0f));
}

/* One forward row: out16[j] = bf16(exp(s[j] - sub)) for j in [a, e), 0 for
 * the rest of [0, npad); returns the sum of the fp32 exps. */
static float exp_row16(const float *s, int n, int a, int e, float sub, uint16_t *out16,
                       int npad) {
    vnf acc = vn_set1(0.0f);
    const vnf vs = vn_set1(sub);
    int j = 0;
    for (; j + VN <= n; j += VN) {
        vnf x;
        memcpy(&x, s + j, sizeof x);
        vnf ex = exp_window(x, vs, j, a, e);
        acc += ex;
        vnh h = r16h(ex);
        memcpy(out16 + j, &h, sizeof h);
    }
    float sum = vn_hsum(acc);
    for (; j < n; j++) {
        float ex = j >= a && j < e ? s_exp(s[j] - sub) : 0.0f;
        sum += ex;
        out16[j] = (uint16_t)ct_t16_round(ex);
    }
    for (; j < npad; j++) out16[j] = 0;
    return sum;
}

/* Two backward rows (p1 NULL: one, its partner zero): p = exp(p - lse) on
 * each row's window [a, e), exactly 0 elsewhere, in place; and their row
 * pair, interleaved, into pp (2n bf16). */
static void exp_pair16(float *p0, float *p1, int n, int a0, int e0, int a1, int e1, float l0,
                       float l1, uint16_t *pp) {
    const vnf v0 = vn_set1(l0), v1 = vn_set1(l1), z = vn_set1(0.0f);
    int j = 0;
    for (; j + VN <= n; j += VN) {
        vnf x0, x1 = z;
        memcpy(&x0, p0 + j, sizeof x0);
        x0 = exp_window(x0, v0, j, a0, e0);
        memcpy(p0 + j, &x0, sizeof x0);
        if (p1) {
            memcpy(&x1, p1 + j, sizeof x1);
            x1 = exp_window(x1, v1, j, a1, e1);
            memcpy(p1 + j, &x1, sizeof x1);
        }
        vnu w = r16pair(x0, x1);
        memcpy(pp + 2 * j, &w, sizeof w);
    }
    for (; j < n; j++) {
        float x0 = j >= a0 && j < e0 ? s_exp(p0[j] - l0) : 0.0f, x1 = 0.0f;
        p0[j] = x0;
        if (p1) p1[j] = x1 = j >= a1 && j < e1 ? s_exp(p1[j] - l1) : 0.0f;
        uint32_t w = ct_t16_round(x0) | ct_t16_round(x1) << 16;
        memcpy(pp + 2 * j, &w, sizeof w);
    }
}

/* Two backward rows' dS = p (dp - D) scale (p1 NULL: one row, its partner
 * zero), rounded, as rows (d0, d1: npad bf16 each, zero past n; d1 unused
 * without p1) and as their interleaved row pair (pp: 2n bf16). */
static void ds_pair16(const float *p0, const float *p1, const float *dp0, const float *dp1,
                      int n, int npad, float D0, float D1, float scale, uint16_t *d0,
                      uint16_t *d1, uint16_t *pp) {
    const vnf vd0 = vn_set1(D0), vd1 = vn_set1(D1), vsc = vn_set1(scale);
    int j = 0;
    for (; j + VN <= n; j += VN) {
        vnf a, b;
        memcpy(&a, p0 + j, sizeof a);
        memcpy(&b, dp0 + j, sizeof b);
        vnf s0 = a * (b - vd0) * vsc, s1 = vn_set1(0.0f);
        vnh h = r16h(s0);
        memcpy(d0 + j, &h, sizeof h);
        if (p1) {
            memcpy(&a, p1 + j, sizeof a);
            memcpy(&b, dp1 + j, sizeof b);
            s1 = a * (b - vd1) * vsc;
            h = r16h(s1);
            memcpy(d1 + j, &h, sizeof h);
        }
        vnu w = r16pair(s0, s1);
        memcpy(pp + 2 * j, &w, sizeof w);
    }
    for (; j < n; j++) {
        uint32_t r0 = ct_t16_round(p0[j] * (dp0[j] - D0) * scale), r1 = 0;
        d0[j] = (uint16_t)r0;
        if (p1) d1[j] = (uint16_t)(r1 = ct_t16_round(p1[j] * (dp1[j] - D1) * scale));
        uint32_t w = r0 | r1 << 16;
        memcpy(pp + 2 * j, &w, sizeof w);
    }
    for (; j < npad; j++) {
        d0[j] = 0;
        if (p1) d1[j] = 0;
    }
}

/* x made even (up), within max */
static int even_tile(int x, int max) {
    x += x & 1;
    return x > max ? max & ~1 : x;
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
                uint16_t *p16 = P16 + (size_t)i * bcp;
                int nv = visible(r0 + i, c0, bc), a = hidden(pos, r0 + i, c0, bc);
                if (nv <= a) {
                    memset(p16, 0, (size_t)bcp * sizeof *p16);
                    continue;
                }
                float mx = v_max(s + a, nv - a);
                float mnew = mx > m[i] ? mx : m[i];
                float corr = m[i] == -INFINITY ? 0.0f : s_exp(m[i] - mnew);
                l[i] = l[i] * corr + exp_row16(s, bc, a, nv, mnew, p16, bcp);
                m[i] = mnew;
                if (corr != 1.0f)
                    for (int d = 0; d < HS; d++) O[(size_t)i * HS + d] *= corr;
            }
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
    for (int t = 0; t < T; t++) D[t] = attention_dot(dout + (size_t)t * C, o + (size_t)t * C, HS);
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
            for (int i = 0; i < br; i += 2) {
                float *p = P + (size_t)i * bc, *p1 = i + 1 < br ? p + bc : NULL;
                int e0 = visible(r0 + i, c0, bc), a0 = hidden(pos, r0 + i, c0, bc);
                int e1 = p1 ? visible(r0 + i + 1, c0, bc) : 0;
                int a1 = p1 ? hidden(pos, r0 + i + 1, c0, bc) : 0;
                exp_pair16(p, p1, bc, a0, e0, a1, e1, lse[r0 + i], p1 ? lse[r0 + i + 1] : 0.0f,
                           Pp + (size_t)i * bc);
            }
            /* dV += P^T dO: P's row pairs read transposed */
            ct_tile16_gemm(bc, HS, brp / 2, Pp, 2, 2 * (ptrdiff_t)bc, dOp + (size_t)r0 * HS,
                           2 * (ptrdiff_t)HS, 1.0f, true, dv + (size_t)c0 * ld, ld);
            /* dP = dO V^T */
            ct_tile16_gemm(br, bc, HS / 2, dO16 + (size_t)r0 * HS, HS, 2, Vt, 2 * (ptrdiff_t)bc,
                           1.0f, false, dP, bc);
            /* dS = P (dP - D) scale, rounded as rows (dQ) and row pairs (dK) */
            for (int i = 0; i < br; i += 2) {
                const float *p = P + (size_t)i * bc, *dp = dP + (size_t)i * bc;
                bool two = i + 1 < br;
                ds_pair16(p, two ? p + bc : NULL, dp, dp + bc, bc, bcp, D[r0 + i],
                          two ? D[r0 + i + 1] : 0.0f, scale, dS16 + (size_t)i * bcp,
                          dS16 + (size_t)(i + 1) * bcp, dSp + (size_t)i * bc);
            }
            /* dQ += dS K; dK += dS^T Q, dS's row pairs read transposed */
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
    if (!takes(drop, HS) || B <= 0 || T <= 0 || !ct_backend_thread_bufs_ready(be, nbuf)) {
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
    if (!takes(drop, HS) || B <= 0 || T <= 0 || !ct_backend_thread_bufs_ready(be, nbuf)) {
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
