/*
 * Threaded token + position embedding. The forward is parallel over rows. The
 * backward is a scatter-add where two rows may share a token, so it is split
 * by channel blocks instead: each thread owns whole columns of dwte and dwpe
 * and walks the rows in order, which also keeps the sums identical to ref's.
 */
#include "backend/cpu/cpu.h"

#include <string.h>

/* Channels per backward work item: a cache line's worth of floats, so that
 * threads mostly write different lines. */
#define CT_ENCODER_BLOCK 16

/* out (B,T,C) = wte[inp[b,t]] + wpe[pos0 + p], p = pos[b,t] or t when pos is
 * NULL; inp, pos (B,T); wte (V,C); wpe (maxT,C) or NULL (no position embedding). */
void ct_encoder_forward_cpu(ct_backend *be, float *out, const int32_t *inp, const float *wte, const float *wpe,
                            const int32_t *pos, int B, int T, int C, int pos0) {
    (void)be;
    int N = B * T;
#ifdef CT_USE_OPENMP
#pragma omp parallel for
#endif
    for (int i = 0; i < N; i++) {
        int t = pos ? pos[i] : i % T;
        float *out_i = out + (size_t)i * C;
        const float *wte_ix = wte + (size_t)inp[i] * C;
        if (!wpe) { // no learned positions (RoPE models)
            for (int c = 0; c < C; c++) out_i[c] = wte_ix[c];
            continue;
        }
        const float *wpe_t = wpe + (size_t)(pos0 + t) * C;
        for (int c = 0; c < C; c++) out_i[c] = wte_ix[c] + wpe_t[c];
    }
}

/* The same on a bf16 table wte16 (V,C), each element widened exactly as read
 * (a bf16 word is the high half of its fp32). */
void ct_encoder_forward_wte16_cpu(ct_backend *be, float *out, const int32_t *inp,
                                  const uint16_t *wte16, const float *wpe, const int32_t *pos,
                                  int B, int T, int C, int pos0) {
    (void)be;
    int N = B * T;
#ifdef CT_USE_OPENMP
#pragma omp parallel for
#endif
    for (int i = 0; i < N; i++) {
        int t = pos ? pos[i] : i % T;
        float *out_i = out + (size_t)i * C;
        const uint16_t *row = wte16 + (size_t)inp[i] * C;
        const float *wpe_t = wpe ? wpe + (size_t)(pos0 + t) * C : NULL;
        for (int c = 0; c < C; c++) {
            uint32_t u = (uint32_t)row[c] << 16;
            float v;
            memcpy(&v, &u, sizeof v);
            out_i[c] = wpe_t ? v + wpe_t[c] : v;
        }
    }
}

/* dwte (V,C) += dout (B,T,C) scattered by inp (B,T); dwpe (maxT,C) row p +=
 * dout[b,t], p = pos[b,t] or t when pos is NULL (skipped when dwpe is NULL). */
void ct_encoder_backward_cpu(ct_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                             const int32_t *pos, int B, int T, int C) {
    (void)be;
    int N = B * T;
    int nblocks = (C + CT_ENCODER_BLOCK - 1) / CT_ENCODER_BLOCK;
#ifdef CT_USE_OPENMP
#pragma omp parallel for
#endif
    for (int blk = 0; blk < nblocks; blk++) {
        int c0 = blk * CT_ENCODER_BLOCK;
        int c1 = c0 + CT_ENCODER_BLOCK < C ? c0 + CT_ENCODER_BLOCK : C;
        for (int i = 0; i < N; i++) {
            const float *dout_i = dout + (size_t)i * C;
            float *dwte_ix = dwte + (size_t)inp[i] * C;
            for (int c = c0; c < c1; c++) dwte_ix[c] += dout_i[c];
            if (dwpe) {
                float *dwpe_t = dwpe + (size_t)(pos ? pos[i] : i % T) * C;
                for (int c = c0; c < c1; c++) dwpe_t[c] += dout_i[c];
            }
        }
    }
}
