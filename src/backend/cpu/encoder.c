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
 * NULL; inp, pos (B,T); the table wte (V,C) fp32, or wte16 (V,C) bf16 with
 * each element widened exactly as read (a bf16 word is the high half of its
 * fp32); wpe (maxT,C) or NULL (no position embedding). */
static void encoder_rows(float *out, const int32_t *inp, const float *wte, const uint16_t *wte16,
                         const float *wpe, const int32_t *pos, int B, int T, int C, int pos0) {
    int N = B * T;
#ifdef CT_USE_OPENMP
#pragma omp parallel for
#endif
    for (int i = 0; i < N; i++) {
        int t = pos ? pos[i] : i % T;
        float *out_i = out + (size_t)i * C;
        size_t row = (size_t)inp[i] * C;
        const float *wpe_t = wpe ? wpe + (size_t)(pos0 + t) * C : NULL;
        for (int c = 0; c < C; c++) {
            float v;
            if (wte16) {
                uint32_t u = (uint32_t)wte16[row + c] << 16;
                memcpy(&v, &u, sizeof v);
            } else {
                v = wte[row + c];
            }
            out_i[c] = wpe_t ? v + wpe_t[c] : v; /* no learned positions: RoPE models */
        }
    }
}

void ct_encoder_forward_cpu(ct_backend *be, float *out, const int32_t *inp, const float *wte, const float *wpe,
                            const int32_t *pos, int B, int T, int C, int pos0) {
    (void)be;
    encoder_rows(out, inp, wte, NULL, wpe, pos, B, T, C, pos0);
}

void ct_encoder_forward_wte16_cpu(ct_backend *be, float *out, const int32_t *inp,
                                  const uint16_t *wte16, const float *wpe, const int32_t *pos,
                                  int B, int T, int C, int pos0) {
    (void)be;
    encoder_rows(out, inp, NULL, wte16, wpe, pos, B, T, C, pos0);
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
