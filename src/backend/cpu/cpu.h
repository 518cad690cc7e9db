/*
 * The cpu kernels: OpenMP over rows (or heads, or elements) and CBLAS for the
 * GEMMs. Every function has the shapes and semantics of its ct_backend_i entry and
 * its ref twin in backend/ref; awkward shapes fall back to ref. OpenMP pragmas
 * are compiled only under CT_USE_OPENMP; without it everything runs serially.
 * Internal to src/backend; never installed.
 */
#ifndef CT_KERNELS_CPU_H
#define CT_KERNELS_CPU_H

#include "backend/backend.h"

void ct_encoder_forward_cpu(ct_backend *be, float *out, const int32_t *inp, const float *wte, const float *wpe,
                            const int32_t *pos, int B, int T, int C, int pos0);
void ct_encoder_forward_wte16_cpu(ct_backend *be, float *out, const int32_t *inp,
                                  const uint16_t *wte16, const float *wpe, const int32_t *pos,
                                  int B, int T, int C, int pos0);
void ct_encoder_backward_cpu(ct_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                             const int32_t *pos, int B, int T, int C);

void ct_layernorm_forward_cpu(ct_backend *be, float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C, float eps);
void ct_residual_layernorm_forward_cpu(ct_backend *be, float *res, float *out, float *mean,
                                       float *rstd, const float *a, const float *b,
                                       const float *weight, const float *bias, int N, int C,
                                       float eps);
void ct_layernorm_backward_cpu(ct_backend *be, float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int N, int C);

void ct_matmul_forward_cpu(ct_backend *be, float *out, const float *inp, const float *weight, const float *bias,
                           int N, int C, int OC);
void ct_matmul_backward_cpu(ct_backend *be, float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int C, int OC);
void ct_matmul_forward_bf16_cpu(ct_backend *be, float *out, const float *inp,
                               const uint16_t *weight16, const float *bias, int N, int C, int OC);
void ct_matmul_forward_bf16_in16_cpu(ct_backend *be, float *out, const uint16_t *inp16,
                                     const uint16_t *weight16, const float *bias, int N, int C,
                                     int OC);
void ct_matmul_backward_bf16_cpu(ct_backend *be, float *dinp, float *dweight, float *dbias,
                                const float *dout, const uint16_t *inp16,
                                const uint16_t *weight16, int N, int C, int OC);
/* the bf16 head (backend.h) */
void ct_matmul_forward_bf16_out16_cpu(ct_backend *be, uint16_t *out16, int ld, const float *inp,
                                      const uint16_t *weight16, int N, int C, int OC);
void ct_matmul_backward_bf16_dout16_cpu(ct_backend *be, float *dinp, float *dweight,
                                        const uint16_t *dout16, int ld, const uint16_t *inp16,
                                        const uint16_t *weight16, int N, int C, int OC);
int ct_head16_ld_cpu(ct_backend *be, int V);

/* out16.c: precision bf16's bf16-output producers */
void ct_layernorm_forward_out16_cpu(ct_backend *be, float *res, uint16_t *out16, float *mean,
                                    float *rstd, const float *a, const float *b,
                                    const float *weight, const float *bias, int N, int C,
                                    float eps);
void ct_rmsnorm_forward_out16_cpu(ct_backend *be, float *res, uint16_t *out16, float *rstd,
                                  const float *a, const float *b, const float *weight, int N,
                                  int C, float eps, float wofs);
void ct_mlp_act_forward_out16_cpu(ct_backend *be, uint16_t *out16, const float *inp, int N,
                                  int F, int act);

void ct_attention_forward_cpu(ct_backend *be, float *out, float *lse, const float *qkv,
                              const int32_t *pos, const ct_attn_dropout *drop, int B, int T,
                              int NH, int NKV, int HS);
void ct_attention_backward_cpu(ct_backend *be, float *dqkv, const float *dout, const float *qkv,
                               const float *out, const float *lse, const int32_t *pos,
                               const ct_attn_dropout *drop, int B, int T, int NH, int NKV,
                               int HS);
void ct_attention_forward_bf16_cpu(ct_backend *be, float *out, float *lse, const float *qkv,
                                   const int32_t *pos, const ct_attn_dropout *drop, int B, int T,
                                   int NH, int NKV, int HS);
void ct_attention_backward_bf16_cpu(ct_backend *be, float *dqkv, const float *dout,
                                    const float *qkv, const float *out, const float *lse,
                                    const int32_t *pos, const ct_attn_dropout *drop, int B,
                                    int T, int NH, int NKV, int HS);
void ct_attention_decode_cpu(ct_backend *be, float *out, const float *q, const float *kcache,
                                 const float *vcache, int n, int NH, int NKV, int HS);

void ct_rmsnorm_forward_cpu(ct_backend *be, float *out, float *rstd, const float *inp, const float *weight,
                            int N, int C, float eps, float wofs);
void ct_residual_rmsnorm_forward_cpu(ct_backend *be, float *res, float *out, float *rstd,
                                     const float *a, const float *b, const float *weight, int N,
                                     int C, float eps, float wofs);
void ct_rmsnorm_backward_cpu(ct_backend *be, float *dinp, float *dweight, const float *dout, const float *inp,
                             const float *weight, const float *rstd, int N, int C, float wofs);
void ct_rope_forward_cpu(ct_backend *be, float *qkv, const int32_t *pos, int B, int T, int NH, int NKV,
                         int HS, int pos0, const float *inv_freq);
void ct_rope_backward_cpu(ct_backend *be, float *dqkv, const int32_t *pos, int B, int T, int NH,
                          int NKV, int HS, int pos0, const float *inv_freq);
void ct_qknorm_forward_cpu(ct_backend *be, float *out, float *rstd, const float *inp,
                           const float *wq, const float *wk, int N, int NH, int NKV, int HS,
                           float eps, float wofs);
void ct_qknorm_backward_cpu(ct_backend *be, float *dinp, float *dwq, float *dwk,
                            const float *dout, const float *inp, const float *wq,
                            const float *wk, const float *rstd, int N, int NH, int NKV, int HS,
                            float wofs);
void ct_swiglu_forward_cpu(ct_backend *be, float *out, const float *inp, int N, int F);
void ct_swiglu_backward_cpu(ct_backend *be, float *dinp, const float *inp, const float *dout, int N, int F);

void ct_geglu_forward_cpu(ct_backend *be, float *out, const float *inp, int N, int F);
void ct_geglu_backward_cpu(ct_backend *be, float *dinp, const float *inp, const float *dout, int N,
                           int F);
void ct_gelu_forward_cpu(ct_backend *be, float *out, const float *inp, size_t n);
void ct_gelu_backward_cpu(ct_backend *be, float *dinp, const float *inp, const float *dout, size_t n);
void ct_residual_forward_cpu(ct_backend *be, float *out, const float *a, const float *b, size_t n);
void ct_residual_backward_cpu(ct_backend *be, float *da, float *db, const float *dout, size_t n);
void ct_dropout_forward_cpu(ct_backend *be, float *out, const float *inp, size_t n, float p,
                            uint64_t key, uint64_t offset);
void ct_dropout_backward_cpu(ct_backend *be, float *dinp, const float *dout, size_t n, float p,
                             uint64_t key, uint64_t offset);

void ct_crossentropy_forward_cpu(ct_backend *be, float *losses, float *dlogits, const float *logits,
                                 const int32_t *targets, int N, int V, float dloss);
void ct_crossentropy_forward_bf16_cpu(ct_backend *be, float *losses, uint16_t *dlogits16,
                                      const uint16_t *logits16, int ld, const int32_t *targets,
                                      int N, int V, float dloss);

void ct_adamw_update_cpu(ct_backend *be, float *params, const float *grads, float *m, float *v, size_t n,
                         float lr, float beta1, float beta2, float eps, float weight_decay,
                         float grad_scale, int64_t t);
void ct_adamw_update16_cpu(ct_backend *be, float *params, uint16_t *params16, const float *grads,
                           float *m, float *v, size_t n, float lr, float beta1, float beta2,
                           float eps, float weight_decay, float grad_scale, int64_t t);
double ct_sumsq_cpu(ct_backend *be, const float *x, size_t n);

#endif
