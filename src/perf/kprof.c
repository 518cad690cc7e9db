/*
 * The profiling kernel table: each entry times its call to the wrapped table.
 * See kprof.h.
 */
#include "perf/kprof.h"

#include <string.h>

#include "ctrain/core.h"

static const ct_kernels *base_k;
static ct_kprof_counts counts;
static int slow_kind = -1, slow_factor = 1;

#define TIMED(kind, call)                                           \
    do {                                                            \
        double t0_ = ct_time_s();                                   \
        int n_ = (int)(kind) == slow_kind ? slow_factor : 1;         \
        for (int r_ = 0; r_ < n_; r_++) call;                       \
        counts.seconds[kind] += ct_time_s() - t0_;                  \
        counts.calls[kind]++;                                       \
    } while (0)

static void p_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe,
                              int B, int T, int C, int pos0) {
    TIMED(CT_KP_ENCODER, base_k->encoder_forward(out, inp, wte, wpe, B, T, C, pos0));
}
static void p_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                               int B, int T, int C) {
    TIMED(CT_KP_ENCODER, base_k->encoder_backward(dwte, dwpe, dout, inp, B, T, C));
}
static void p_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                const float *weight, const float *bias, int N, int C, float eps) {
    TIMED(CT_KP_NORM_FWD, base_k->layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps));
}
static void p_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const float *weight, const float *mean,
                                 const float *rstd, int N, int C) {
    TIMED(CT_KP_NORM_BWD, base_k->layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean,
                                                     rstd, N, C));
}
static void p_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                             int N, int C, int OC) {
    TIMED(CT_KP_MATMUL_FWD, base_k->matmul_forward(out, inp, weight, bias, N, C, OC));
}
static void p_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                              const float *inp, const float *weight, int N, int C, int OC) {
    TIMED(CT_KP_MATMUL_BWD,
          base_k->matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC));
}
static void p_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                                int NH) {
    TIMED(CT_KP_ATTN_FWD, base_k->attention_forward(out, lse, qkv, B, T, C, NH));
}
static void p_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                 const float *out, const float *lse, int B, int T, int C, int NH) {
    TIMED(CT_KP_ATTN_BWD, base_k->attention_backward(dqkv, dout, qkv, out, lse, B, T, C, NH));
}
static void p_attention_decode(float *out, const float *q, const float *kcache,
                               const float *vcache, int n, int C, int NH) {
    TIMED(CT_KP_OTHER, base_k->attention_decode(out, q, kcache, vcache, n, C, NH));
}
static void p_attention_gqa_forward(float *out, float *lse, const float *qkv, int B, int T,
                                    int NH, int NKV, int HS) {
    TIMED(CT_KP_ATTN_FWD, base_k->attention_gqa_forward(out, lse, qkv, B, T, NH, NKV, HS));
}
static void p_attention_gqa_backward(float *dqkv, const float *dout, const float *qkv,
                                     const float *out, const float *lse, int B, int T, int NH,
                                     int NKV, int HS) {
    TIMED(CT_KP_ATTN_BWD,
          base_k->attention_gqa_backward(dqkv, dout, qkv, out, lse, B, T, NH, NKV, HS));
}
static void p_attention_gqa_decode(float *out, const float *q, const float *kcache,
                                   const float *vcache, int n, int NH, int NKV, int HS) {
    TIMED(CT_KP_OTHER, base_k->attention_gqa_decode(out, q, kcache, vcache, n, NH, NKV, HS));
}
static void p_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight,
                              int N, int C, float eps) {
    TIMED(CT_KP_NORM_FWD, base_k->rmsnorm_forward(out, rstd, inp, weight, N, C, eps));
}
static void p_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                               const float *weight, const float *rstd, int N, int C) {
    TIMED(CT_KP_NORM_BWD, base_k->rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C));
}
static void p_rope_forward(float *qkv, int B, int T, int NH, int NKV, int HS, int pos0,
                           float theta) {
    TIMED(CT_KP_ROPE, base_k->rope_forward(qkv, B, T, NH, NKV, HS, pos0, theta));
}
static void p_rope_backward(float *dqkv, int B, int T, int NH, int NKV, int HS, int pos0,
                            float theta) {
    TIMED(CT_KP_ROPE, base_k->rope_backward(dqkv, B, T, NH, NKV, HS, pos0, theta));
}
static void p_swiglu_forward(float *out, const float *inp, int N, int F) {
    TIMED(CT_KP_ACT_FWD, base_k->swiglu_forward(out, inp, N, F));
}
static void p_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F) {
    TIMED(CT_KP_ACT_BWD, base_k->swiglu_backward(dinp, inp, dout, N, F));
}
static void p_gelu_forward(float *out, const float *inp, size_t n) {
    TIMED(CT_KP_ACT_FWD, base_k->gelu_forward(out, inp, n));
}
static void p_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    TIMED(CT_KP_ACT_BWD, base_k->gelu_backward(dinp, inp, dout, n));
}
static void p_residual_forward(float *out, const float *a, const float *b, size_t n) {
    TIMED(CT_KP_RESIDUAL, base_k->residual_forward(out, a, b, n));
}
static void p_residual_backward(float *da, float *db, const float *dout, size_t n) {
    TIMED(CT_KP_RESIDUAL, base_k->residual_backward(da, db, dout, n));
}
static void p_crossentropy_forward(float *losses, float *dlogits, const float *logits,
                                   const int32_t *targets, int N, int V, float dloss) {
    TIMED(CT_KP_XENT, base_k->crossentropy_forward(losses, dlogits, logits, targets, N, V, dloss));
}
static void p_adamw_update(float *params, const float *grads, float *m, float *v, size_t n,
                           float lr, float beta1, float beta2, float eps, float weight_decay,
                           float grad_scale, int64_t t) {
    TIMED(CT_KP_ADAMW, base_k->adamw_update(params, grads, m, v, n, lr, beta1, beta2, eps,
                                            weight_decay, grad_scale, t));
}
static double p_sumsq(const float *x, size_t n) {
    double r = 0;
    TIMED(CT_KP_OTHER, r = base_k->sumsq(x, n));
    return r;
}

static const ct_kernels prof_table = {
    .name = "profiled",
    .encoder_forward = p_encoder_forward,
    .encoder_backward = p_encoder_backward,
    .layernorm_forward = p_layernorm_forward,
    .layernorm_backward = p_layernorm_backward,
    .matmul_forward = p_matmul_forward,
    .matmul_backward = p_matmul_backward,
    .attention_forward = p_attention_forward,
    .attention_backward = p_attention_backward,
    .attention_decode = p_attention_decode,
    .attention_gqa_forward = p_attention_gqa_forward,
    .attention_gqa_backward = p_attention_gqa_backward,
    .attention_gqa_decode = p_attention_gqa_decode,
    .rmsnorm_forward = p_rmsnorm_forward,
    .rmsnorm_backward = p_rmsnorm_backward,
    .rope_forward = p_rope_forward,
    .rope_backward = p_rope_backward,
    .swiglu_forward = p_swiglu_forward,
    .swiglu_backward = p_swiglu_backward,
    .gelu_forward = p_gelu_forward,
    .gelu_backward = p_gelu_backward,
    .residual_forward = p_residual_forward,
    .residual_backward = p_residual_backward,
    .crossentropy_forward = p_crossentropy_forward,
    .adamw_update = p_adamw_update,
    .sumsq = p_sumsq,
};

const ct_kernels *ct_kprof_wrap(const ct_kernels *base) {
    base_k = base;
    slow_kind = -1, slow_factor = 1;
    memset(&counts, 0, sizeof counts);
    return &prof_table;
}

void ct_kprof_read(ct_kprof_counts *out, int reset) {
    *out = counts;
    if (reset) memset(&counts, 0, sizeof counts);
}

const char *ct_kprof_name(ct_kprof_kind k) {
    static const char *names[CT_KP_COUNT] = {
        "matmul_fwd", "matmul_bwd", "attention_fwd", "attention_bwd", "norm_fwd",
        "norm_bwd",   "act_fwd",    "act_bwd",       "residual",      "encoder",
        "rope",       "crossentropy", "adamw",     "other"};
    return (k >= 0 && k < CT_KP_COUNT) ? names[k] : "?";
}

int ct_kprof_kind_of(const char *name) {
    for (int k = 0; k < CT_KP_COUNT; k++)
        if (name && !strcmp(name, ct_kprof_name((ct_kprof_kind)k))) return k;
    return -1;
}

void ct_kprof_set_slow(int kind, int factor) {
    slow_kind = factor > 1 ? kind : -1;
    slow_factor = factor > 1 ? factor : 1;
}
