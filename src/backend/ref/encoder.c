/*
 * Reference token + position embedding (GPT-2's wte and wpe lookups), forward
 * and backward, as plain loops in the order of the math.
 * Leaves out: range checks on token ids (a bad id is the caller's bug) and
 * threading (see cpu/encoder.c).
 */
#include "backend/ref/ref.h"
#include "core/dtype.h"

/* out (B,T,C) = wte[inp[b,t]] + wpe[pos0 + p], p = pos[b,t] (the token's
 * place in its packed example) or t when pos is NULL.
 * inp, pos (B,T) token ids in [0,V), positions; the table wte (V,C) fp32, or
 * wte16 (V,C) bf16 with each element widened exactly (ct_bf16_to_f32) as it
 * is read; wpe (maxT,C) with pos0 + T <= maxT, or NULL for no position
 * embedding (out = wte[inp]).
 * Ref: torch.nn.Embedding; llm.c train_gpt2.c encoder_forward; HF GPT-2's
 * position_ids. */
static void encoder_rows(float *out, const int32_t *inp, const float *wte, const uint16_t *wte16,
                         const float *wpe, const int32_t *pos, int B, int T, int C, int pos0) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            size_t bt = (size_t)b * T + t, row = (size_t)inp[bt] * C;
            float *out_bt = out + bt * C;
            // no learned positions (RoPE models): no wpe
            const float *wpe_t = wpe ? wpe + (size_t)(pos0 + (pos ? pos[bt] : t)) * C : NULL;
            for (int c = 0; c < C; c++) {
                float v = wte16 ? ct_bf16_to_f32(wte16[row + c]) : wte[row + c];
                out_bt[c] = wpe_t ? v + wpe_t[c] : v;
            }
        }
    }
}

void ct_encoder_forward_ref(ct_backend *be, float *out, const int32_t *inp, const float *wte, const float *wpe,
                            const int32_t *pos, int B, int T, int C, int pos0) {
    (void)be;
    encoder_rows(out, inp, wte, NULL, wpe, pos, B, T, C, pos0);
}

void ct_encoder_forward_wte16_ref(ct_backend *be, float *out, const int32_t *inp,
                                  const uint16_t *wte16, const float *wpe, const int32_t *pos,
                                  int B, int T, int C, int pos0) {
    (void)be;
    encoder_rows(out, inp, NULL, wte16, wpe, pos, B, T, C, pos0);
}

/* dwte (V,C) += dout rows scattered by token id; dwpe (maxT,C) row p +=
 * dout[b,t], p = pos[b,t] or t when pos is NULL (rows in (b,t) order), skipped
 * when dwpe is NULL (e.g. positions from RoPE).
 * dout (B,T,C); inp, pos (B,T). Ref: llm.c train_gpt2.c encoder_backward. */
void ct_encoder_backward_ref(ct_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                             const int32_t *pos, int B, int T, int C) {
    (void)be;
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const float *dout_bt = dout + ((size_t)b * T + t) * C;
            float *dwte_ix = dwte + (size_t)inp[(size_t)b * T + t] * C;
            for (int c = 0; c < C; c++) dwte_ix[c] += dout_bt[c];
            if (dwpe) {
                int p = pos ? pos[(size_t)b * T + t] : t;
                float *dwpe_t = dwpe + (size_t)p * C;
                for (int c = 0; c < C; c++) dwpe_t[c] += dout_bt[c];
            }
        }
    }
}
