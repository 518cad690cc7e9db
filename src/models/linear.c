/*
 * The linear layers of a block: the base GEMM (fp32 weights, or a bf16 base
 * widened by the weight store) followed by the layer's LoRA adapters, so the
 * block code (model_train.c, decode.c) and the adapters meet in one place.
 * Under precision bf16 (fp16) the base GEMM runs on bf16 (fp16) inputs
 * (autocast): the weight's 16-bit copy (or the bf16 base as it is), the input
 * rounded by the backend, and for the weight gradient the input's 16-bit copy
 * (acts.inp16); an input the model keeps in 16 bits (acts.in16) is both
 * GEMMs' operand as it is. The fused GEMM + GELU entries are bf16/fp32
 * only: under fp16 c_fc runs the GEMM, then the GELU.
 * The adapters' own small GEMMs stay fp32.
 * GPT-2's c_fc may run with its GELU in one backend call (model_linear_gelu_fwd)
 * when no adapter sits between them.
 * Leaves out: the vocabulary head (fused with the loss in model_train.c).
 */
#include "models/model_impl.h"

linear_shape model_linear_shape(const ct_model *m, int l, int lin) {
    const ct_model_config *c = &m->cfg;
    const layer_idx *w = &m->layers[l];
    int C = c->n_embd;
    switch (lin) {
    case LIN_QKV: return (linear_shape){w->qkv_w, w->qkv_b, C, model_qkv_width(c)};
    case LIN_PROJ: return (linear_shape){w->proj_w, w->proj_b, model_q_width(c), C};
    case LIN_FC: return (linear_shape){w->fc_w, w->fc_b, C, model_fc_width(c)};
    default: return (linear_shape){w->fcproj_w, w->fcproj_b, c->n_ffn, C};
    }
}

void model_linear_fwd(ct_model *m, int l, int lin, float *out, const float *x,
                      const uint16_t *x16, int N) {
    linear_shape s = model_linear_shape(m, l, lin);
    const ct_backend_i *k = m->be->i;
    if (x16 && model_bf16(m) && k->matmul_forward_bf16_in16)
        k->matmul_forward_bf16_in16(m->be, out, x16, model_w16(m, s.w), model_p(m, s.b), N, s.in,
                                    s.out);
    else if (model_half(m))
        model_mm16_fwd(m, out, x, model_w16(m, s.w), model_p(m, s.b), N, s.in, s.out);
    else
        m->be->i->matmul_forward(m->be, out, x, model_p(m, s.w), model_p(m, s.b), N, s.in, s.out);
    model_lora_forward(m, l, lin, out, s.out, x, N);
}

bool model_linear_gelu_fwd(ct_model *m, int l, float *pre, float *out, const float *x,
                           const uint16_t *x16, int N) {
    const ct_backend_i *k = m->be->i;
    bool bf16 = model_bf16(m);
    if (m->opts.precision == CT_PREC_FP16) return false; /* no fused fp16 entry */
    if (bf16 ? !k->matmul_gelu_forward_bf16 : !k->matmul_gelu_forward) return false;
    /* an adapter adds to pre before the GELU: the GEMM alone, then it */
    if (model_lora_on(m, LIN_FC)) return false;
    /* a kept bf16 input goes to a GEMM that reads it (x may be unwritten) */
    if (bf16 && x16 && k->matmul_forward_bf16_in16 && !k->matmul_gelu_forward_bf16_in16)
        return false;
    linear_shape s = model_linear_shape(m, l, LIN_FC);
    if (bf16 && x16 && k->matmul_gelu_forward_bf16_in16)
        k->matmul_gelu_forward_bf16_in16(m->be, pre, out, x16, model_w16(m, s.w), model_p(m, s.b),
                                         N, s.in, s.out);
    else if (bf16)
        k->matmul_gelu_forward_bf16(m->be, pre, out, x, model_w16(m, s.w), model_p(m, s.b), N,
                                    s.in, s.out);
    else
        k->matmul_gelu_forward(m->be, pre, out, x, model_p(m, s.w), model_p(m, s.b), N, s.in,
                               s.out);
    return true;
}

bool model_linear_bwd_reads_x(ct_model *m, int l, int lin) {
    return model_g(m, model_linear_shape(m, l, lin).w) != NULL || model_lora_on(m, lin);
}

void model_linear_bwd(ct_model *m, int l, int lin, float *dx, const float *dout, const float *x,
                      const uint16_t *x16, int N) {
    linear_shape s = model_linear_shape(m, l, lin);
    if (model_half(m)) {
        float *dw = model_g(m, s.w);
        if (!dw) {
            x16 = NULL;
        } else if (!x16) { /* autocast keeps the 16-bit x for the weight gradient */
            model_to16(m, m->acts.inp16, x, (size_t)N * s.in);
            x16 = m->acts.inp16;
        }
        model_mm16_bwd(m, dx, dw, model_g(m, s.b), dout, x16, model_w16(m, s.w), N, s.in, s.out);
    } else {
        m->be->i->matmul_backward(m->be, dx, model_g(m, s.w), model_g(m, s.b), dout, x,
                                  model_p(m, s.w), N, s.in, s.out);
    }
    model_lora_backward(m, l, lin, dx, dout, s.out, x, N);
}
