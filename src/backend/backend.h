/*
 * The backend seam: everything models/ and train/ do to tensor memory goes
 * through one table of functions, ct_backend_i, filled in once per backend:
 *   ref  plain scalar C, the readable truth (kernels in backend/ref);
 *   cpu  OpenMP over rows, BLAS for GEMMs (backend/cpu), ref on odd shapes;
 *   sim  ref's kernels over "device" memory the host cannot dereference
 *        (backend/sim): a test backend that proves nothing above the seam
 *        touches a tensor behind the backend's back.
 *   cuda an NVIDIA GPU (backend/cuda; cuBLAS for the GEMMs), when built.
 * In the spirit of ggml's
 * ggml_backend_i and llm.c's launchers, every entry takes the backend itself
 * first (its threads, tiles, streams and library handles live behind it);
 * entries are enqueued in order on the backend's one stream, and synchronize
 * returns the first late error as a status. Results that land in host memory
 * (sum, sumsq, nonfinite, download) wait for the work before them.
 *
 * Memory: "device" buffers hold tensors (parameters, gradients, moments,
 * activations, token ids); only the backend's entries read or write them.
 * "host" buffers are staging memory (pinned on a GPU) for the edges that need
 * the host: loading and saving weights, checkpoints, initialisation, hashing,
 * MPI. On ref and cpu both kinds are ordinary host memory (host_visible).
 *
 * Dimension legend (used in every comment below):
 *   B  batch size            T  sequence length        N  rows = B*T
 *   C  channels (n_embd)     NH attention heads        HS head size
 *   OC output channels       V  vocabulary size        n  element count
 *   NKV key/value heads (grouped-query attention: NH % NKV == 0, query head h
 *       reads KV head h / (NH/NKV))                    F  MLP hidden size
 * The fused qkv rows of attention are (NH + 2*NKV)*HS wide: q at [0, NH*HS),
 * k at [NH*HS, (NH+NKV)*HS), v at [(NH+NKV)*HS, (NH+2*NKV)*HS); with NKV == NH
 * this is GPT-2's (3C) layout.
 * All tensors are row-major, fp32, contiguous. Weights are (OC, C) as in
 * torch.nn.Linear. Backward kernels ADD into gradient buffers (the caller
 * zeroes them with memset), except where a comment says "writes".
 */
#ifndef CT_BACKEND_H
#define CT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctrain/core.h"

typedef struct ct_backend ct_backend;

/* A point on the backend's stream, for timing work that may run
 * asynchronously. t is the host clock at record (seconds, ct_time_s) on
 * synchronous backends; handle is the backend's own event otherwise. */
typedef struct ct_event {
    double t;
    void *handle;
} ct_event;

/* Dropout of attention probabilities (attention_forward, _backward): the
 * probability of query i of row b, head h, for key j is dropped when
 * ct_dropout_keep(key, (((row0 + b) * NH + h) * T + i) * T + j, p) is false,
 * so the mask of a global batch row does not depend on how the rows are
 * split into micro-batches or ranks (row0: the global index of the batch's
 * first row). */
typedef struct ct_attn_dropout {
    float p;      /* drop probability, 0 <= p < 1 */
    uint64_t key; /* the mask's key */
    int64_t row0; /* global index of row 0 */
} ct_attn_dropout;

typedef struct ct_backend_i {
    const char *name; /* "ref", "cpu", "sim", ... */

    /* ------------------------------------------------------------ memory */
    /* A zero-filled device buffer of bytes, resident (no page faults later),
     * counted under tag in the context's statistics. NULL and ct_last_error
     * on failure. Release with buf_free (NULL is fine). */
    void *(*buf_alloc)(ct_backend *be, size_t bytes, ct_tag tag);
    void (*buf_free)(ct_backend *be, void *p);
    /* A zero-filled host staging buffer (pinned where that speeds copies). */
    void *(*host_alloc)(ct_backend *be, size_t bytes, ct_tag tag);
    void (*host_free)(ct_backend *be, void *p);
    /* dst(bytes) = value, on the device. */
    void (*memset)(ct_backend *be, void *dst, int value, size_t bytes);
    /* host -> device, device -> host (waits), device -> device. */
    void (*upload)(ct_backend *be, void *dst, const void *src, size_t bytes);
    void (*download)(ct_backend *be, void *dst, const void *src, size_t bytes);
    void (*copy)(ct_backend *be, void *dst, const void *src, size_t bytes);
    /* dst(n) = bf16(src) rounded to nearest even, NaN kept quiet; and back. */
    void (*f32_to_bf16)(ct_backend *be, uint16_t *dst, const float *src, size_t n);
    void (*bf16_to_f32)(ct_backend *be, float *dst, const uint16_t *src, size_t n);
    /* dst(n) = IEEE half (fp16) of src, nearest even: subnormals kept, beyond
     * 65504 (from 65520 on) inf, NaN kept a quiet NaN (ct_f32_to_f16).
     * Optional (train.precision = fp16 only): NULL on backends without the
     * fp16 GEMMs below. */
    void (*f32_to_f16)(ct_backend *be, uint16_t *dst, const float *src, size_t n);
    /* y[r*ldy + c] (+)= a * x[r*ldx + c] for r < rows, c < cols: adds when
     * accumulate, else writes. A strided scale-add (LoRA's column slices). */
    void (*scale_add)(ct_backend *be, float *y, int ldy, const float *x, int ldx, int rows,
                      int cols, float a, bool accumulate);
    /* x(n) = value; x(n) *= a. */
    void (*fill)(ct_backend *be, float *x, float value, size_t n);
    void (*scale)(ct_backend *be, float *x, float a, size_t n);
    /* Reductions to the host (they wait): the sum and the sum of squares of
     * x(n), accumulated in double in a fixed order; the count of non-finite
     * elements. */
    double (*sum)(ct_backend *be, const float *x, size_t n);
    double (*sumsq)(ct_backend *be, const float *x, size_t n);
    size_t (*nonfinite)(ct_backend *be, const float *x, size_t n);
    /* dst[0] (device memory, one double) += the sum of x(n), or of its
     * squares when squares: the value sum / sumsq return, bit for bit, but
     * left on the device without waiting, so a step can read its loss and
     * gradient norm together once (ct_model_step_read). NULL on backends
     * whose device memory is host memory (ct_be_reduce_add then adds the
     * host reduction). */
    void (*reduce_add)(ct_backend *be, double *dst, const float *x, size_t n, bool squares);
    /* Inverted dropout with a counter-based mask: element i has the index
     * offset + i and is kept when ct_dropout_keep(key, offset + i, p); forward
     * writes out(n) = keep ? inp * 1/(1-p) : 0 (out may alias inp: in place,
     * which applied to a gradient is also the backward of an in-place
     * dropout); backward ADDS dinp(n) += keep ? dout * 1/(1-p) : 0. The mask
     * is drawn again from the key, never stored; the offset lets a buffer
     * that holds part of a larger tensor (a micro-batch of a global batch)
     * draw that tensor's mask. */
    void (*dropout_forward)(ct_backend *be, float *out, const float *inp, size_t n, float p,
                            uint64_t key, uint64_t offset);
    void (*dropout_backward)(ct_backend *be, float *dinp, const float *dout, size_t n, float p,
                             uint64_t key, uint64_t offset);

    /* ----------------------------------------------------- stream, timing */
    /* Wait for all enqueued work; a late device error comes back here. */
    ct_status (*synchronize)(ct_backend *be);
    /* Record an event at the current point of the stream. */
    void (*event_record)(ct_backend *be, ct_event *ev);
    /* Seconds from a to b (waits for b). */
    double (*event_elapsed)(ct_backend *be, const ct_event *a, const ct_event *b);

    /* ----------------------------------------------------------- kernels */
    /* Positions (pos): a device array (B,T) of each token's position inside its
     * example, for rows that pack several examples (pos[b,0] = 0; each later
     * pos[b,t] is 0, a new example, or pos[b,t-1] + 1; ct_model_set_positions
     * checks this, and kernels may rely on it). NULL means 0..T-1 in every
     * row, bit for bit as without the argument. The kernels below that take it
     * use it for the learned positions, the RoPE angle and the attention mask
     * (token t sees keys [t - pos[b,t], t]). */

    /* out(B,T,C) = wte[inp[b,t]] + wpe[pos0 + p], p = pos[b,t] or t when pos is
     * NULL; inp, pos (B,T); wte (V,C); wpe (maxT,C).
     * pos0 offsets the position (0 in training; the cache length in decoding).
     * wpe may be NULL: no learned positions (RoPE models), out = wte[inp]. */
    void (*encoder_forward)(ct_backend *be, float *out, const int32_t *inp, const float *wte,
                            const float *wpe, const int32_t *pos, int B, int T, int C, int pos0);
    /* The same on a bf16 token table wte16 (V,C) (a frozen LoRA base stored
     * in bf16): each row read is widened exactly, so out equals
     * encoder_forward on the widened table, which is never made. */
    void (*encoder_forward_wte16)(ct_backend *be, float *out, const int32_t *inp,
                                  const uint16_t *wte16, const float *wpe, const int32_t *pos,
                                  int B, int T, int C, int pos0);
    /* dwte(V,C) += scatter of dout rows; dwpe(maxT,C) row p (pos[b,t], or t when
     * pos is NULL) += dout[b,t]. dwpe may be NULL. */
    void (*encoder_backward)(ct_backend *be, float *dwte, float *dwpe, const float *dout,
                             const int32_t *inp, const int32_t *pos, int B, int T, int C);

    /* out(N,C) = (inp - mean) * rstd * weight + bias; writes mean(N), rstd(N)
     * (either may be NULL when not training). Biased variance, as torch. */
    void (*layernorm_forward)(ct_backend *be, float *out, float *mean, float *rstd,
                              const float *inp, const float *weight, const float *bias, int N,
                              int C, float eps);
    /* dinp(N,C), dweight(C), dbias(C) += ...; uses the saved mean and rstd. */
    void (*layernorm_backward)(ct_backend *be, float *dinp, float *dweight, float *dbias,
                               const float *dout, const float *inp, const float *weight,
                               const float *mean, const float *rstd, int N, int C);

    /* out(N,OC) = inp(N,C) @ weight(OC,C)^T + bias(OC); bias may be NULL. Writes out. */
    void (*matmul_forward)(ct_backend *be, float *out, const float *inp, const float *weight,
                           const float *bias, int N, int C, int OC);
    /* dinp(N,C) += dout @ weight; dweight(OC,C) += dout^T @ inp; dbias(OC) += colsum(dout).
     * Any of dinp, dweight, dbias may be NULL to skip it. */
    void (*matmul_backward)(ct_backend *be, float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight, int N,
                            int C, int OC);

    /* Mixed precision (train.precision = bf16, torch.autocast's semantics for
     * a linear layer): the same products with every GEMM input rounded to
     * bf16 (nearest even), the products exact, sums in fp32 (any order:
     * the backends differ by the accumulation order only), outputs fp32.
     * weight16 (OC,C) is a bf16 copy of the fp32 master weight (the model
     * refreshes it after each update, never per call).
     * out(N,OC) = bf16(inp)(N,C) @ weight16^T + bias(OC) (bias fp32, added to
     * the fp32 sum; may be NULL). Writes out. */
    void (*matmul_forward_bf16)(ct_backend *be, float *out, const float *inp,
                                const uint16_t *weight16, const float *bias, int N, int C,
                                int OC);
    /* dinp(N,C) += bf16(dout) @ weight16; dweight(OC,C) += bf16(dout)^T @ inp16,
     * where inp16 (N,C) is the bf16 copy of the forward's input (the caller
     * rounds it, f32_to_bf16: what autocast saves for the backward); dbias(OC)
     * += column sums of the fp32 dout. Any of dinp, dweight, dbias may be NULL
     * to skip it; inp16 may be NULL when dweight is. */
    void (*matmul_backward_bf16)(ct_backend *be, float *dinp, float *dweight, float *dbias,
                                 const float *dout, const uint16_t *inp16,
                                 const uint16_t *weight16, int N, int C, int OC);

    /* Mixed precision with IEEE half inputs (train.precision = fp16, for GPUs
     * without bf16: torch.autocast's fp16): matmul_forward_bf16 and
     * matmul_backward_bf16's semantics with every GEMM input rounded to fp16
     * (nearest even; beyond 65504 inf, subnormals kept) instead of bf16:
     * weight16 and inp16 hold fp16 bits (f32_to_f16), inp and dout are
     * rounded as they are read; the products of two fp16 values are exact in
     * fp32, sums in fp32, outputs fp32, bias and dbias fp32. An inf or NaN
     * input makes the sums it enters non-finite (the loss scaler's overflow).
     * Optional: NULL where the backend has none (cpu); the model then refuses
     * precision fp16 (ct_model_set_opts). */
    void (*matmul_forward_f16)(ct_backend *be, float *out, const float *inp,
                               const uint16_t *weight16, const float *bias, int N, int C,
                               int OC);
    void (*matmul_backward_f16)(ct_backend *be, float *dinp, float *dweight, float *dbias,
                                const float *dout, const uint16_t *inp16,
                                const uint16_t *weight16, int N, int C, int OC);

    /* The vocabulary head under train.precision = bf16 with bf16 logits, as
     * torch.autocast has them (the head's linear outputs bf16; the loss reads
     * it in fp32), so the largest activation of the step moves half the bytes.
     * Rows of the 16-bit logits and their gradient are ld (>= OC) elements
     * apart (ct_backend_head16_ld: on the GPU V padded to a multiple of
     * CT_VOCAB_PAD so that every row starts aligned for the tensor cores);
     * columns OC..ld-1 are never read or written. Optional, all three or none:
     * without them, or where head16_ld says 0, the model keeps fp32 logits
     * (matmul_forward_bf16 and crossentropy_forward).
     * out16(N,ld) = bf16(bf16(inp)(N,C) @ weight16(OC,C)^T): the fp32 sum
     * rounded to bf16, nearest even. */
    void (*matmul_forward_bf16_out16)(ct_backend *be, uint16_t *out16, int ld, const float *inp,
                                      const uint16_t *weight16, int N, int C, int OC);
    /* crossentropy_forward's semantics over bf16 logits16(N,ld), columns
     * [0,V) read as fp32 (the sums in fp32 or wider): losses(N) fp32; unless
     * dlogits16 is NULL, WRITES dlogits16(N,ld) columns [0,V) = bf16((softmax -
     * onehot(target)) * dloss), nearest even; dlogits16 may alias logits16. */
    void (*crossentropy_forward_bf16)(ct_backend *be, float *losses, uint16_t *dlogits16,
                                      const uint16_t *logits16, int ld, const int32_t *targets,
                                      int N, int V, float dloss);
    /* matmul_backward_bf16 with its gradient already bf16: dinp(N,C) += dout16
     * (N,OC; rows ld apart) @ weight16; dweight(OC,C) += dout16^T @ inp16 (bf16
     * products exact, sums fp32, outputs fp32). No bias. Either of dinp,
     * dweight may be NULL to skip it; inp16 may be NULL when dweight is. */
    void (*matmul_backward_bf16_dout16)(ct_backend *be, float *dinp, float *dweight,
                                        const uint16_t *dout16, int ld, const uint16_t *inp16,
                                        const uint16_t *weight16, int N, int C, int OC);
    /* Optional, with the three above: the row length ld of the bf16 head's
     * logits for a vocabulary of V (>= V), or 0 when the model is to keep
     * fp32 logits on this backend as it is set now (cpu: a bf16 matmul that
     * is not oneDNN's native one would be slower, see cpu/matmul.c). NULL: V
     * rounded up to CT_VOCAB_PAD. Read through ct_backend_head16_ld. */
    int (*head16_ld)(ct_backend *be, int V);

    /* A linear layer and GELU in one call (GPT-2's c_fc): pre(N,OC) = inp(N,C)
     * @ weight(OC,C)^T + bias(OC) (bias may be NULL), out(N,OC) = GELU of pre,
     * tanh form as gelu_forward; writes both (pre != out). The _bf16 twin takes
     * weight16 and rounds inp as matmul_forward_bf16. The results are those of
     * matmul_forward (_bf16) then gelu_forward up to the order of the sums and
     * the rounding of tanh. May be NULL: the caller then makes those two calls
     * (backend/cuda: cuBLASLt's GELU_AUX_BIAS epilogue). */
    void (*matmul_gelu_forward)(ct_backend *be, float *pre, float *out, const float *inp,
                                const float *weight, const float *bias, int N, int C, int OC);
    void (*matmul_gelu_forward_bf16)(ct_backend *be, float *pre, float *out, const float *inp,
                                     const uint16_t *weight16, const float *bias, int N, int C,
                                     int OC);
    /* matmul_forward_bf16 and matmul_gelu_forward_bf16 with the input bf16
     * already: inp16(N,C) is the GEMM's operand as it is (the bits
     * matmul_forward_bf16 would round inp to), so a value the model keeps in
     * bf16 for the backward feeds the forward too, with no conversion pass.
     * The results are the fp32-input twins' on the widened inp16. Optional,
     * each on its own: NULL where the backend's bf16 GEMM reads fp32 inputs
     * (cpu); the model then passes the fp32 value. */
    void (*matmul_forward_bf16_in16)(ct_backend *be, float *out, const uint16_t *inp16,
                                     const uint16_t *weight16, const float *bias, int N, int C,
                                     int OC);
    void (*matmul_gelu_forward_bf16_in16)(ct_backend *be, float *pre, float *out,
                                          const uint16_t *inp16, const uint16_t *weight16,
                                          const float *bias, int N, int C, int OC);
    /* The norm forwards with a bf16 output (the GEMM operand the model
     * keeps, so no fp32 output and no rounding pass): with b, res(N,C) = a
     * + b and out16(N,C) = the norm of res, residual_layernorm_forward's /
     * residual_rmsnorm_forward's; without b (NULL), out16 = the norm of a,
     * layernorm_forward's / rmsnorm_forward's, res unused (may be NULL).
     * out16 holds those entries' fp32 outputs rounded to bf16 (nearest
     * even), bit for bit; mean and rstd as there. Optional, both or
     * neither, and only where the _in16 GEMM forwards are (NULL on cpu). */
    void (*layernorm_forward_out16)(ct_backend *be, float *res, uint16_t *out16, float *mean,
                                    float *rstd, const float *a, const float *b,
                                    const float *weight, const float *bias, int N, int C,
                                    float eps);
    void (*rmsnorm_forward_out16)(ct_backend *be, float *res, uint16_t *out16, float *rstd,
                                  const float *a, const float *b, const float *weight, int N,
                                  int C, float eps, float wofs);
    /* The MLP activations with a bf16 output (the GEMM operand the model
     * keeps): out16(N,F) = the fp32 output of gelu_forward (act
     * CT_ACT16_GELU; inp N x F, n = N F), swiglu_forward (CT_ACT16_SWIGLU)
     * or geglu_forward (CT_ACT16_GEGLU; inp N x 2F) rounded to bf16
     * (nearest even), bit for bit. Optional, as the norms' _out16 entries. */
    void (*mlp_act_forward_out16)(ct_backend *be, uint16_t *out16, const float *inp, int N,
                                  int F, int act);

    /* Causal self-attention without a T x T matrix in memory, on fused rows
     * qkv (B,T,(NH+2*NKV)*HS) (see the legend); scale 1/sqrt(HS). Writes
     * out (B,T,NH*HS) and lse (B,NH,T), the log-sum-exp of each row's scaled
     * scores. Plain multi-head attention is NKV == NH. With pos (B,T) (see
     * above) query t sees only keys [t - pos[b,t], t] of its row: packed
     * examples do not see each other; NULL: keys [0, t].
     * drop (NULL, or p == 0: none, bit for bit as without it): dropout of the
     * probabilities after the softmax, as HF's attn_dropout: with P the
     * softmax and M = mask / (1-p) (ct_attn_drop_mult), out = (P o M) V; lse
     * stays the undropped softmax's. */
    void (*attention_forward)(ct_backend *be, float *out, float *lse, const float *qkv,
                              const int32_t *pos, const ct_attn_dropout *drop, int B, int T,
                              int NH, int NKV, int HS);
    /* dqkv (B,T,(NH+2*NKV)*HS) += ...; recomputes probabilities from qkv and
     * lse (out is the forward's). The gradients of a KV head sum over the
     * query heads of its group in a fixed order (deterministic). With drop
     * (the forward's): dV += (P o M)^T dO, dP = (dO V^T) o M, D = rowsum(dO o
     * out), dS = P o (dP - D) scale. */
    void (*attention_backward)(ct_backend *be, float *dqkv, const float *dout,
                               const float *qkv, const float *out, const float *lse,
                               const int32_t *pos, const ct_attn_dropout *drop, int B, int T,
                               int NH, int NKV, int HS);
    /* Attention under train.precision = bf16 (torch.autocast's attention on
     * bf16 q, k, v): the semantics of attention_forward / _backward with q, k,
     * v and dout rounded to bf16 (nearest even), the probabilities rounded to
     * bf16 where they multiply v or dout, and dS where it multiplies k or q;
     * scores, softmax, lse and every sum in fp32. An approximation of the fp32
     * entries at bf16's precision (about 3 significant digits), so fp32 runs
     * never call it. May be NULL (the caller then calls attention_forward /
     * _backward); an implementation may run its fp32 kernels for shapes its
     * fast path does not take (backend/cuda: dropout, head sizes other than
     * 64 and 128). Deterministic, as the fp32 entries. */
    void (*attention_forward_bf16)(ct_backend *be, float *out, float *lse, const float *qkv,
                                   const int32_t *pos, const ct_attn_dropout *drop, int B,
                                   int T, int NH, int NKV, int HS);
    void (*attention_backward_bf16)(ct_backend *be, float *dqkv, const float *dout,
                                    const float *qkv, const float *out, const float *lse,
                                    const int32_t *pos, const ct_attn_dropout *drop, int B,
                                    int T, int NH, int NKV, int HS);
    /* One query row q (NH*HS) against kcache, vcache (n, NKV*HS) holding the
     * keys and values of positions 0..n-1 (the query's own included).
     * Writes out (NH*HS). */
    void (*attention_decode)(ct_backend *be, float *out, const float *q, const float *kcache,
                             const float *vcache, int n, int NH, int NKV, int HS);

    /* RMSNorm (LLaMA): out(N,C) = inp * rstd * (wofs + weight), rstd = 1/sqrt(mean(inp^2)
     * + eps), statistics in fp32 or better; writes rstd(N) unless NULL. wofs is 0, or 1
     * for Gemma's norms, whose stored weight is the scale's offset from 1 (the sum is
     * the fp32 one Gemma's own forward forms). */
    void (*rmsnorm_forward)(ct_backend *be, float *out, float *rstd, const float *inp,
                            const float *weight, int N, int C, float eps, float wofs);
    /* dinp(N,C), dweight(C) += ...; uses the saved rstd (the weight's gradient is the
     * same with or without wofs). */
    void (*rmsnorm_backward)(ct_backend *be, float *dinp, float *dweight, const float *dout,
                             const float *inp, const float *weight, const float *rstd, int N,
                             int C, float wofs);

    /* Rotary position embedding in Hugging Face's convention (rotate_half), IN
     * PLACE on the q and k heads of fused rows qkv (B,T,(NH+2*NKV)*HS); v is
     * untouched. Row (b,t) has position pos0 + pos[b,t] (pos0 + t when pos is
     * NULL); within a head, the pair (i, i + HS/2) turns by the fp32 angle
     * position * inv_freq[i], i < HS/2 (HS even); inv_freq (HS/2) is device
     * memory (the model's ct_model_rope_inv_freq: any RoPE scaling is in it). */
    void (*rope_forward)(ct_backend *be, float *qkv, const int32_t *pos, int B, int T, int NH,
                         int NKV, int HS, int pos0, const float *inv_freq);
    /* The transpose rotation, IN PLACE on dqkv (B,T,(NH+2*NKV)*HS): turns the
     * gradient of the rotated q and k into that of the unrotated ones (writes). */
    void (*rope_backward)(ct_backend *be, float *dqkv, const int32_t *pos, int B, int T, int NH,
                          int NKV, int HS, int pos0, const float *inv_freq);

    /* Per-head RMSNorm of q and k (Qwen3's q_norm, k_norm): rows inp and out
     * (N,(NH+2*NKV)*HS); each of the NH q heads of a row is normalised over
     * its HS values, rstd = 1/sqrt(mean(x^2) + eps), and scaled by wq (HS),
     * each of the NKV k heads likewise by wk (HS); the v heads are copied.
     * Writes out and, unless NULL, rstd (N,NH+NKV): a row's q heads, then
     * its k heads. out != inp. wofs as RMSNorm's (Gemma: 1). */
    void (*qknorm_forward)(ct_backend *be, float *out, float *rstd, const float *inp,
                           const float *wq, const float *wk, int N, int NH, int NKV, int HS,
                           float eps, float wofs);
    /* Its gradient: WRITES dinp (N,(NH+2*NKV)*HS), the q and k heads' input
     * gradients (RMSNorm's, from the forward's inp and rstd) and the v heads'
     * dout copied; dinp may be dout (in place). dwq, dwk (HS) += the weight
     * gradients summed over all rows and heads, in a fixed order. */
    void (*qknorm_backward)(ct_backend *be, float *dinp, float *dwq, float *dwk,
                            const float *dout, const float *inp, const float *wq,
                            const float *wk, const float *rstd, int N, int NH, int NKV, int HS,
                            float wofs);

    /* SwiGLU: inp (N,2F) holds gate at [0,F) and up at [F,2F) of each row;
     * writes out(N,F) = silu(gate) * up, silu(x) = x / (1 + exp(-x)). */
    void (*swiglu_forward)(ct_backend *be, float *out, const float *inp, int N, int F);
    /* dinp(N,2F) += ... given dout(N,F). */
    void (*swiglu_backward)(ct_backend *be, float *dinp, const float *inp, const float *dout,
                            int N, int F);

    /* GeGLU (Gemma): inp (N,2F) holds gate at [0,F) and up at [F,2F) of each row;
     * writes out(N,F) = gelu_tanh(gate) * up (HF gelu_pytorch_tanh). */
    void (*geglu_forward)(ct_backend *be, float *out, const float *inp, int N, int F);
    /* dinp(N,2F) += ... given dout(N,F). */
    void (*geglu_backward)(ct_backend *be, float *dinp, const float *inp, const float *dout,
                           int N, int F);

    /* GELU, tanh form (HF "gelu_new"): writes out(n). */
    void (*gelu_forward)(ct_backend *be, float *out, const float *inp, size_t n);
    /* dinp(n) += gelu'(inp) * dout. */
    void (*gelu_backward)(ct_backend *be, float *dinp, const float *inp, const float *dout,
                          size_t n);

    /* out(n) = a + b. Writes out (may alias a or b). */
    void (*residual_forward)(ct_backend *be, float *out, const float *a, const float *b,
                             size_t n);
    /* da(n) += dout; db(n) += dout. */
    void (*residual_backward)(ct_backend *be, float *da, float *db, const float *dout, size_t n);

    /* A residual add and the LayerNorm after it in one pass over each row:
     * writes res(N,C) = a + b (res may alias a or b), then out(N,C) =
     * LayerNorm(res) exactly as layernorm_forward defines it, mean(N) and
     * rstd(N) unless NULL. out overlaps none of res, a, b. Equal to the two
     * entries called one after the other (residual_forward, layernorm_forward)
     * up to the backend's fp32 rounding; bit for bit on ref, cpu and cuda. */
    void (*residual_layernorm_forward)(ct_backend *be, float *res, float *out, float *mean,
                                       float *rstd, const float *a, const float *b,
                                       const float *weight, const float *bias, int N, int C,
                                       float eps);
    /* The same with RMSNorm: res(N,C) = a + b, out(N,C) = RMSNorm(res) as
     * rmsnorm_forward defines it (wofs likewise); rstd(N) unless NULL. */
    void (*residual_rmsnorm_forward)(ct_backend *be, float *res, float *out, float *rstd,
                                     const float *a, const float *b, const float *weight, int N,
                                     int C, float eps, float wofs);

    /* Softmax cross-entropy over logits(N,V) with targets(N) in [0,V).
     * Writes losses(N) = -log softmax(logits)[target]. If dlogits is non-NULL it
     * WRITES dlogits(N,V) = (softmax - onehot(target)) * dloss; dlogits may alias
     * logits. Targets < 0 are ignored (loss 0, zero gradient). */
    void (*crossentropy_forward)(ct_backend *be, float *losses, float *dlogits,
                                 const float *logits, const int32_t *targets, int N, int V,
                                 float dloss);

    /* Fused AdamW over n elements, torch.optim.AdamW semantics:
     *   p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     *   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
     * grad_scale multiplies g first (1 for none). t is the 1-based step. */
    void (*adamw_update)(ct_backend *be, float *params, const float *grads, float *m, float *v,
                         size_t n, float lr, float beta1, float beta2, float eps,
                         float weight_decay, float grad_scale, int64_t t);
    /* Optional (NULL: adamw_update, then the model rounds its copies in a
     * pass of its own): adamw_update, and params16[i] = bf16(params[i]) of
     * each new value (nearest even, NaN quiet: f32_to_bf16's bits) in the
     * same pass, for precision bf16's weight copies. */
    void (*adamw_update16)(ct_backend *be, float *params, uint16_t *params16, const float *grads,
                           float *m, float *v, size_t n, float lr, float beta1, float beta2,
                           float eps, float weight_decay, float grad_scale, int64_t t);
} ct_backend_i;

/* mlp_act_forward_out16's activations. */
enum { CT_ACT16_GELU = 0, CT_ACT16_SWIGLU = 1, CT_ACT16_GEGLU = 2 };

/* The bf16 head pads the vocabulary of its logits rows to a multiple of this
 * (GPT-2: 50257 -> 50304), 256 bytes of bf16 (matmul_forward_bf16_out16). */
#define CT_VOCAB_PAD 128

/* Attention tiles of the cpu backend: query rows (1..CT_ATT_BQ_MAX) and keys
 * (1..CT_ATT_BK_MAX) per tile. */
#define CT_ATT_BQ_MAX 128
#define CT_ATT_BK_MAX 256

/* A backend: its table and its state. Owned by the context that made it
 * (ct_ctx_backend); wrappers (the kernel profiler) own theirs. */
struct ct_backend {
    const ct_backend_i *i;
    ct_ctx *ctx;       /* borrowed: the allocation counters */
    bool host_visible; /* device buffers are host memory (ref, cpu) */
    bool queued;       /* entries return once their work is queued, before it is
                        * done (cuda; sim as if it were): a timing waits for it */
    int n_threads;     /* cpu: OpenMP threads of the kernels and BLAS */
    int att_bq, att_bk; /* cpu: attention tile sizes (64 x 128 by default) */
    int gemm;           /* cpu: the GEMM library, a ct_gemm_lib (backend/cpu/gemm.h) */
    void *state;       /* the implementation's own (streams, handles, the wrapped backend) */
    /* Stalls: the times the host waited for device work it had enqueued and
     * not yet waited for (a reduction to the host, a download, synchronize,
     * the elapsed time of an event not yet reached). Counted by the
     * asynchronous backends (cuda, and sim as if it were one); 0 on ref and
     * cpu, where every entry completes before it returns. The trainer reports
     * a step's count (host_waits): 1 is the ideal, the step's one read. */
    int64_t stalls;
    struct ct_thread_buf *tbuf; /* n_threads per-thread buffers (ct_backend_thread_buf) */
};

/* The registered backends, by kind. ct_backend_init fills *be (caller-owned)
 * for kind (CT_BACKEND_CPU, _REF, _SIM) with n_threads threads; the cpu kind
 * sizes and pins the OpenMP pool and BLAS (pin: bind thread i to the i-th
 * allowed CPU). CT_ERR_ARG for an unknown kind. ct_backend_free releases
 * what init acquired (not be itself). */
ct_status ct_backend_init(ct_backend *be, ct_ctx *ctx, ct_backend_kind kind, int n_threads,
                          bool pin);
/* The same for device `device` of a kind that has several (CT_BACKEND_CUDA:
 * cuda:N; CT_ERR_ARG "no CUDA device: <the driver's reason>" when there is
 * none, or when the build has no CUDA backend). */
ct_status ct_backend_init_device(ct_backend *be, ct_ctx *ctx, ct_backend_kind kind, int device,
                                 int n_threads, bool pin);
void ct_backend_free(ct_backend *be);
extern const ct_backend_i ct_backend_ref_i;
extern const ct_backend_i ct_backend_cpu_i;
extern const ct_backend_i ct_backend_sim_i;
extern const ct_backend_i ct_backend_cuda_i; /* with CT_USE_CUDA only */

/* The calling pool thread's buffer of at least n floats, kept between calls
 * (grown when too small; freed by ct_backend_free), so that kernels whose
 * scratch depends on the shape alone allocate in the first step and never
 * after. NULL when it cannot be had (no memory, a thread outside the pool, a
 * backend not made by ct_backend_init): the caller then works without it.
 * Each thread owns its buffer, so calls from a parallel region are safe. */
float *ct_backend_thread_buf(ct_backend *be, size_t n);
/* Whether every pool thread has its buffer of at least n floats (each
 * allocated here when not), so that a kernel splitting work across the pool
 * never finds one missing: false sends the caller to its fallback. */
bool ct_backend_thread_bufs_ready(ct_backend *be, size_t n);

/* The row length of the bf16 head's logits on be for a vocabulary of V
 * (head16_ld, or V rounded up to CT_VOCAB_PAD), or 0 when be has no bf16 head
 * or would not use it now: the model then keeps fp32 logits. */
int ct_backend_head16_ld(ct_backend *be, int V);

/* Set the cpu attention tiles; -1 (and nothing changed) when out of range. */
int ct_backend_set_tiles(ct_backend *be, int bq, int bk);
/* Set the cpu GEMM library (run.gemm: auto | onednn | openblas); -1 (and
 * nothing changed) for another word or oneDNN in a build without it. */
int ct_backend_set_gemm(ct_backend *be, const char *name);

/* The mask functions below run on the host and, compiled by nvcc, on the GPU
 * too (backend/cuda): one definition, so a mask drawn there equals this one. */
#ifdef __CUDACC__
#define CT_HOSTDEV __host__ __device__
#else
#define CT_HOSTDEV
#endif

/* The dropout mask of element index i under key: a counter-based hash (the
 * splitmix64 finalizer of key ^ i), shared by every implementation, whose top
 * 24 bits u (a uniform in [0, 1) in steps of 2^-24) keep the element when
 * u >= p. ct_dropout_threshold turns p into the integer form of that test:
 * keep when (hash >> 40) >= threshold (the same decision, as p * 2^24 is
 * exact in float). */
CT_HOSTDEV static inline uint32_t ct_dropout_threshold(float p) {
    if (!(p > 0.0f)) return 0;
    float s = p * 16777216.0f; /* exact: a power-of-two scale */
    uint32_t t = (uint32_t)s;
    return (float)t < s ? t + 1 : t; /* ceil */
}
CT_HOSTDEV static inline bool ct_dropout_keep_t(uint64_t key, uint64_t i, uint32_t threshold) {
    uint64_t x = key ^ i;
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return (uint32_t)(x >> 40) >= threshold;
}
CT_HOSTDEV static inline bool ct_dropout_keep(uint64_t key, uint64_t i, float p) {
    return ct_dropout_keep_t(key, i, ct_dropout_threshold(p));
}
/* The multiplier dropout applies to element i: 1/(1-p) when kept, else 0
 * (1 when p == 0, so a product with it changes no bit). */
CT_HOSTDEV static inline float ct_dropout_mult(uint64_t key, uint64_t i, float p) {
    return ct_dropout_keep(key, i, p) ? 1.0f / (1.0f - p) : 0.0f;
}
/* The multiplier of attention probability (b, h, i, j) under d (see
 * ct_attn_dropout); 1 when d is NULL or d->p == 0. */
CT_HOSTDEV static inline float ct_attn_drop_mult(const ct_attn_dropout *d, int b, int h, int i, int j,
                                      int NH, int T) {
    if (!d || !(d->p > 0.0f)) return 1.0f;
    uint64_t idx = (((uint64_t)(d->row0 + b) * (uint64_t)NH + (uint64_t)h) * (uint64_t)T +
                    (uint64_t)i) * (uint64_t)T + (uint64_t)j;
    return ct_dropout_mult(d->key, idx, d->p);
}

/* Staged transfers through a bounded host buffer (the edges): copy n bytes
 * at device src to host dst, or host src to device dst. On host-visible
 * backends these are plain copies. */
static inline void ct_be_download(ct_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes) be->i->download(be, dst, src, bytes);
}
static inline void ct_be_upload(ct_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes) be->i->upload(be, dst, src, bytes);
}

/* dst[0] += sum of x(n) (of squares when squares), on the device: the
 * backend's reduce_add, or on a host-visible backend its host reduction. */
static inline void ct_be_reduce_add(ct_backend *be, double *dst, const float *x, size_t n,
                                    bool squares) {
    if (be->i->reduce_add) {
        be->i->reduce_add(be, dst, x, n, squares);
        return;
    }
    CT_ASSERT(be->host_visible);
    if (n) *dst += squares ? be->i->sumsq(be, x, n) : be->i->sum(be, x, n);
}

#endif
