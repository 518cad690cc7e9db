/*
 * Scalar reference kernels: the readable truth every other table is tested
 * against. Declared here so that the ref table (table.c) and the cpu table's
 * fallbacks can name them. Internal to src/backend; never installed.
 * Shapes and semantics of each function are those of its ct_backend_i entry.
 */
#ifndef CT_KERNELS_REF_H
#define CT_KERNELS_REF_H

#include "backend/backend.h"

/* GELU tanh-form constants, as torch: sqrt(2/pi) and the cubic coefficient. */
#define CT_GELU_BETA 0.7978845608028654
#define CT_GELU_KAPPA 0.044715

void ct_encoder_forward_ref(ct_backend *be, float *out, const int32_t *inp, const float *wte, const float *wpe,
                            const int32_t *pos, int B, int T, int C, int pos0);
void ct_encoder_forward_wte16_ref(ct_backend *be, float *out, const int32_t *inp,
                                  const uint16_t *wte16, const float *wpe, const int32_t *pos,
                                  int B, int T, int C, int pos0);
void ct_encoder_backward_ref(ct_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                             const int32_t *pos, int B, int T, int C);

void ct_layernorm_forward_ref(ct_backend *be, float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C, float eps);
void ct_residual_layernorm_forward_ref(ct_backend *be, float *res, float *out, float *mean,
                                       float *rstd, const float *a, const float *b,
                                       const float *weight, const float *bias, int N, int C,
                                       float eps);
void ct_layernorm_backward_ref(ct_backend *be, float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int N, int C);

void ct_matmul_forward_ref(ct_backend *be, float *out, const float *inp, const float *weight, const float *bias,
                           int N, int C, int OC);
void ct_matmul_backward_ref(ct_backend *be, float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int C, int OC);
void ct_matmul_forward_bf16_ref(ct_backend *be, float *out, const float *inp,
                               const uint16_t *weight16, const float *bias, int N, int C, int OC);
void ct_matmul_backward_bf16_ref(ct_backend *be, float *dinp, float *dweight, float *dbias,
                                const float *dout, const uint16_t *inp16,
                                const uint16_t *weight16, int N, int C, int OC);
void ct_matmul_gelu_forward_ref(ct_backend *be, float *pre, float *out, const float *inp,
                                const float *weight, const float *bias, int N, int C, int OC);
void ct_matmul_forward_f16_ref(ct_backend *be, float *out, const float *inp,
                               const uint16_t *weight16, const float *bias, int N, int C, int OC);
void ct_matmul_backward_f16_ref(ct_backend *be, float *dinp, float *dweight, float *dbias,
                                const float *dout, const uint16_t *inp16,
                                const uint16_t *weight16, int N, int C, int OC);
void ct_matmul_forward_bf16_out16_ref(ct_backend *be, uint16_t *out16, int ld, const float *inp,
                                      const uint16_t *weight16, int N, int C, int OC);
void ct_matmul_backward_bf16_dout16_ref(ct_backend *be, float *dinp, float *dweight,
                                        const uint16_t *dout16, int ld, const uint16_t *inp16,
                                        const uint16_t *weight16, int N, int C, int OC);
void ct_crossentropy_forward_bf16_ref(ct_backend *be, float *losses, uint16_t *dlogits16,
                                      const uint16_t *logits16, int ld, const int32_t *targets,
                                      int N, int V, float dloss);
void ct_matmul_gelu_forward_bf16_ref(ct_backend *be, float *pre, float *out, const float *inp,
                                     const uint16_t *weight16, const float *bias, int N, int C,
                                     int OC);
void ct_matmul_forward_bf16_in16_ref(ct_backend *be, float *out, const uint16_t *inp16,
                                     const uint16_t *weight16, const float *bias, int N, int C,
                                     int OC);
void ct_matmul_gelu_forward_bf16_in16_ref(ct_backend *be, float *pre, float *out,
                                          const uint16_t *inp16, const uint16_t *weight16,
                                          const float *bias, int N, int C, int OC);
void ct_layernorm_forward_out16_ref(ct_backend *be, float *res, uint16_t *out16, float *mean,
                                    float *rstd, const float *a, const float *b,
                                    const float *weight, const float *bias, int N, int C,
                                    float eps);
void ct_rmsnorm_forward_out16_ref(ct_backend *be, float *res, uint16_t *out16, float *rstd,
                                  const float *a, const float *b, const float *weight, int N,
                                  int C, float eps, float wofs);
void ct_mlp_act_forward_out16_ref(ct_backend *be, uint16_t *out16, const float *inp, int N,
                                  int F, int act);
/* One SwiGLU output (swiglu_forward's expression; shared with the bf16 twin). */
float ct_silu_mul_ref(float gate, float up);


void ct_attention_forward_ref(ct_backend *be, float *out, float *lse, const float *qkv,
                              const int32_t *pos, const ct_attn_dropout *drop, int B, int T,
                              int NH, int NKV, int HS);
void ct_attention_backward_ref(ct_backend *be, float *dqkv, const float *dout, const float *qkv,
                               const float *out, const float *lse, const int32_t *pos,
                               const ct_attn_dropout *drop, int B, int T, int NH, int NKV,
                               int HS);
void ct_attention_decode_ref(ct_backend *be, float *out, const float *q, const float *kcache,
                                 const float *vcache, int n, int NH, int NKV, int HS);

void ct_rmsnorm_forward_ref(ct_backend *be, float *out, float *rstd, const float *inp, const float *weight,
                            int N, int C, float eps, float wofs);
void ct_residual_rmsnorm_forward_ref(ct_backend *be, float *res, float *out, float *rstd,
                                     const float *a, const float *b, const float *weight, int N,
                                     int C, float eps, float wofs);
void ct_rmsnorm_backward_ref(ct_backend *be, float *dinp, float *dweight, const float *dout, const float *inp,
                             const float *weight, const float *rstd, int N, int C, float wofs);
/* cos, sin (HS/2) of RoPE's angles at position pos for the inverse
 * frequencies inv_freq (HS/2, host memory) (shared by ref and cpu). */
void ct_rope_cos_sin(float *cosv, float *sinv, int pos, int HS, const float *inv_freq);
void ct_rope_forward_ref(ct_backend *be, float *qkv, const int32_t *pos, int B, int T, int NH, int NKV,
                         int HS, int pos0, const float *inv_freq);
void ct_rope_backward_ref(ct_backend *be, float *dqkv, const int32_t *pos, int B, int T, int NH,
                          int NKV, int HS, int pos0, const float *inv_freq);
void ct_qknorm_forward_ref(ct_backend *be, float *out, float *rstd, const float *inp,
                           const float *wq, const float *wk, int N, int NH, int NKV, int HS,
                           float eps, float wofs);
void ct_qknorm_backward_ref(ct_backend *be, float *dinp, float *dwq, float *dwk,
                            const float *dout, const float *inp, const float *wq,
                            const float *wk, const float *rstd, int N, int NH, int NKV, int HS,
                            float wofs);
void ct_swiglu_forward_ref(ct_backend *be, float *out, const float *inp, int N, int F);
void ct_swiglu_backward_ref(ct_backend *be, float *dinp, const float *inp, const float *dout, int N, int F);

void ct_geglu_forward_ref(ct_backend *be, float *out, const float *inp, int N, int F);
void ct_geglu_backward_ref(ct_backend *be, float *dinp, const float *inp, const float *dout, int N,
                           int F);
void ct_gelu_forward_ref(ct_backend *be, float *out, const float *inp, size_t n);
void ct_gelu_backward_ref(ct_backend *be, float *dinp, const float *inp, const float *dout, size_t n);
void ct_residual_forward_ref(ct_backend *be, float *out, const float *a, const float *b, size_t n);
void ct_residual_backward_ref(ct_backend *be, float *da, float *db, const float *dout, size_t n);

void ct_crossentropy_forward_ref(ct_backend *be, float *losses, float *dlogits, const float *logits,
                                 const int32_t *targets, int N, int V, float dloss);

void ct_adamw_update_ref(ct_backend *be, float *params, const float *grads, float *m, float *v, size_t n,
                         float lr, float beta1, float beta2, float eps, float weight_decay,
                         float grad_scale, int64_t t);
void ct_adamw_update16_ref(ct_backend *be, float *params, uint16_t *params16, const float *grads,
                           float *m, float *v, size_t n, float lr, float beta1, float beta2,
                           float eps, float weight_decay, float grad_scale, int64_t t);
double ct_sumsq_ref(ct_backend *be, const float *x, size_t n);

#endif
