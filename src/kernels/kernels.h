/*
 * The kernel table: every numeric op the models use, forward and backward, as
 * raw pointers and sizes. Models call kernels only through a ct_kernels table,
 * chosen once per context: `ref` (plain scalar C, the readable truth) and `cpu`
 * (OpenMP over rows, BLAS for GEMMs). A CUDA table can be added later without
 * touching models/.
 *
 * Dimension legend (used in every comment below):
 *   B  batch size            T  sequence length        N  rows = B*T
 *   C  channels (n_embd)     NH attention heads        HS head size = C/NH
 *   OC output channels       V  vocabulary size        n  element count
 *   NKV key/value heads (grouped-query attention: NH % NKV == 0, query head h
 *       reads KV head h / (NH/NKV))                    F  MLP hidden size
 * The fused qkv rows of grouped-query attention are (NH + 2*NKV)*HS wide: q at
 * [0, NH*HS), k at [NH*HS, (NH+NKV)*HS), v at [(NH+NKV)*HS, (NH+2*NKV)*HS);
 * with NKV == NH this is GPT-2's (3C) layout.
 * All tensors are row-major, fp32, contiguous. Weights are (OC, C) as in
 * torch.nn.Linear. Backward kernels ADD into gradient buffers (the caller
 * zeroes them), except where a comment says "writes".
 */
#ifndef CT_KERNELS_H
#define CT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

typedef struct ct_kernels {
    const char *name; /* "ref", "cpu" */

    /* out(B,T,C) = wte[inp[b,t]] + wpe[t]; inp (B,T); wte (V,C); wpe (maxT,C).
     * pos0 offsets the position (0 in training; the cache length in decoding).
     * wpe may be NULL: no learned positions (RoPE models), out = wte[inp]. */
    void (*encoder_forward)(float *out, const int32_t *inp, const float *wte, const float *wpe,
                            int B, int T, int C, int pos0);
    /* dwte(V,C) += scatter of dout rows; dwpe(maxT,C) += sum over b. dwpe may be NULL. */
    void (*encoder_backward)(float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                             int B, int T, int C);

    /* out(N,C) = (inp - mean) * rstd * weight + bias; writes mean(N), rstd(N)
     * (either may be NULL when not training). Biased variance, as torch. */
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C, float eps);
    /* dinp(N,C), dweight(C), dbias(C) += ...; uses the saved mean and rstd. */
    void (*layernorm_backward)(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int N, int C);

    /* out(N,OC) = inp(N,C) @ weight(OC,C)^T + bias(OC); bias may be NULL. Writes out. */
    void (*matmul_forward)(float *out, const float *inp, const float *weight, const float *bias,
                           int N, int C, int OC);
    /* dinp(N,C) += dout @ weight; dweight(OC,C) += dout^T @ inp; dbias(OC) += colsum(dout).
     * Any of dinp, dweight, dbias may be NULL to skip it. */
    void (*matmul_backward)(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int C, int OC);

    /* Causal multi-head self-attention without a T x T matrix in memory.
     * qkv (B,T,3C): q at [.., 0:C], k at [.., C:2C], v at [.., 2C:3C]; head h uses
     * columns h*HS..h*HS+HS-1 of each. Scale 1/sqrt(HS).
     * Writes out(B,T,C) and lse(B,NH,T), the log-sum-exp of each row's scaled scores. */
    void (*attention_forward)(float *out, float *lse, const float *qkv, int B, int T, int C,
                              int NH);
    /* dqkv(B,T,3C) += ...; recomputes probabilities from qkv and lse. out is the forward's. */
    void (*attention_backward)(float *dqkv, const float *dout, const float *qkv,
                               const float *out, const float *lse, int B, int T, int C, int NH);
    /* One query row against a cache (decoding): q(C); kcache, vcache (n, C) hold the
     * keys and values of positions 0..n-1 (the query's own position included).
     * Writes out(C). */
    void (*attention_decode)(float *out, const float *q, const float *kcache,
                             const float *vcache, int n, int C, int NH);

    /* Grouped-query attention: as attention_forward, on fused rows of
     * (NH + 2*NKV)*HS (see the legend); out (B,T,NH*HS), lse (B,NH,T).
     * attention_forward is this with NKV == NH. */
    void (*attention_gqa_forward)(float *out, float *lse, const float *qkv, int B, int T,
                                  int NH, int NKV, int HS);
    /* dqkv (B,T,(NH+2*NKV)*HS) += ...; the gradients of a KV head sum over the
     * query heads of its group in a fixed order (deterministic). */
    void (*attention_gqa_backward)(float *dqkv, const float *dout, const float *qkv,
                                   const float *out, const float *lse, int B, int T, int NH,
                                   int NKV, int HS);
    /* One query row q (NH*HS) against kcache, vcache (n, NKV*HS). Writes out (NH*HS). */
    void (*attention_gqa_decode)(float *out, const float *q, const float *kcache,
                                 const float *vcache, int n, int NH, int NKV, int HS);

    /* RMSNorm (LLaMA): out(N,C) = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) + eps),
     * statistics in fp32 or better; writes rstd(N) unless NULL. */
    void (*rmsnorm_forward)(float *out, float *rstd, const float *inp, const float *weight,
                            int N, int C, float eps);
    /* dinp(N,C), dweight(C) += ...; uses the saved rstd. */
    void (*rmsnorm_backward)(float *dinp, float *dweight, const float *dout, const float *inp,
                             const float *weight, const float *rstd, int N, int C);

    /* Rotary position embedding in Hugging Face's convention (rotate_half), IN
     * PLACE on the q and k heads of fused rows qkv (B,T,(NH+2*NKV)*HS); v is
     * untouched. Row t has position pos0 + t; within a head, the pair
     * (i, i + HS/2) turns by angle pos * theta^(-2i/HS), i < HS/2 (HS even). */
    void (*rope_forward)(float *qkv, int B, int T, int NH, int NKV, int HS, int pos0,
                         float theta);
    /* The transpose rotation, IN PLACE on dqkv (B,T,(NH+2*NKV)*HS): turns the
     * gradient of the rotated q and k into that of the unrotated ones (writes). */
    void (*rope_backward)(float *dqkv, int B, int T, int NH, int NKV, int HS, int pos0,
                          float theta);

    /* SwiGLU: inp (N,2F) holds gate at [0,F) and up at [F,2F) of each row;
     * writes out(N,F) = silu(gate) * up, silu(x) = x / (1 + exp(-x)). */
    void (*swiglu_forward)(float *out, const float *inp, int N, int F);
    /* dinp(N,2F) += ... given dout(N,F). */
    void (*swiglu_backward)(float *dinp, const float *inp, const float *dout, int N, int F);

    /* GELU, tanh form (HF "gelu_new"): writes out(n). */
    void (*gelu_forward)(float *out, const float *inp, size_t n);
    /* dinp(n) += gelu'(inp) * dout. */
    void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);

    /* out(n) = a + b. Writes out (may alias a or b). */
    void (*residual_forward)(float *out, const float *a, const float *b, size_t n);
    /* da(n) += dout; db(n) += dout. */
    void (*residual_backward)(float *da, float *db, const float *dout, size_t n);

    /* Softmax cross-entropy over logits(N,V) with targets(N) in [0,V).
     * Writes losses(N) = -log softmax(logits)[target]. If dlogits is non-NULL it
     * WRITES dlogits(N,V) = (softmax - onehot(target)) * dloss; dlogits may alias
     * logits. Targets < 0 are ignored (loss 0, zero gradient). */
    void (*crossentropy_forward)(float *losses, float *dlogits, const float *logits,
                                 const int32_t *targets, int N, int V, float dloss);

    /* Fused AdamW over n elements, torch.optim.AdamW semantics:
     *   p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     *   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
     * grad_scale multiplies g first (1 for none). t is the 1-based step. */
    void (*adamw_update)(float *params, const float *grads, float *m, float *v, size_t n,
                         float lr, float beta1, float beta2, float eps, float weight_decay,
                         float grad_scale, int64_t t);
    /* Sum of squares of x(n), accumulated in double. */
    double (*sumsq)(const float *x, size_t n);
} ct_kernels;

/* Tile sizes of the cpu table's attention: query rows (1..128) and keys
 * (1..256) per tile; 64 x 128 by default. Not thread-safe: set them before
 * training starts. Returns 0, or -1 (and changes nothing) when out of range. */
int ct_attention_set_tiles(int bq, int bk);
void ct_attention_get_tiles(int *bq, int *bk);

/* The tables. ct_kernels_cpu falls back to ref for shapes it does not handle. */
extern const ct_kernels ct_kernels_ref;
extern const ct_kernels ct_kernels_cpu;

#endif
