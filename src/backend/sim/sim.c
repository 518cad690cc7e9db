/*
 * The sim backend: ref's kernels over "device" memory that the host cannot
 * dereference. A device buffer is a counted host allocation handed out at an
 * address moved by SIM_OFFSET (2^62) into the non-canonical half of the x86-64
 * (and AArch64) address space, so any code above the seam that reads or
 * writes a tensor without going through the backend faults at once (ASan
 * reports it as a SEGV on an unknown address); a host pointer passed where a
 * device one belongs fails an assertion. Each entry translates its pointers
 * and calls ref. Uploads and downloads really copy. It exists for the tests:
 * the training suite runs on it (run.device=sim) to prove the seam is whole,
 * as a GPU's separate memory would, and it counts the stalls a GPU's host
 * would see (be->stalls: waits for work queued since the last wait), so a
 * step's pipeline is tested here. Given a capacity (debug.sim_device_memory)
 * its device memory is finite: an allocation past it fails as cudaMalloc's
 * would, and the most it held is kept, so the memory plan's device part and
 * batch_size=auto are tested against it. Leaves out: real asynchrony (every
 * entry completes before it returns) and speed.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ctx.h"
#include "backend/host/host.h"
#include "backend/ref/ref.h"
#include "backend/sim/sim.h"
#include "core/dtype.h"

#define SIM_OFFSET ((uintptr_t)1 << 62)

typedef struct sim_state {
    size_t cap;  /* bytes; 0: no limit */
    size_t used; /* bytes of live device buffers */
    size_t peak; /* their most */
    /* Stalls, counted as a GPU's would be (be->stalls): dirty when an entry
     * touched device memory since the last wait; gen counts the waits, and an
     * event remembers the gen it was recorded in. */
    bool dirty;
    uint64_t gen;
} sim_state;

/* device -> host address; NULL stays NULL */
static void *sim_addr(const void *p) {
    if (!p) return NULL;
    CT_ASSERT((uintptr_t)p >= SIM_OFFSET); /* a host pointer where a device one belongs */
    return (void *)((uintptr_t)p - SIM_OFFSET);
}
/* The address of a tensor an entry works on: on a GPU that work would be
 * queued, so the next wait waits for it. */
static void *sim_touch(ct_backend *be, const void *p) {
    sim_state *s = be->state;
    if (s) s->dirty = true;
    return sim_addr(p);
}
/* The host waits: a stall when work was queued since the last wait. */
static void sim_wait(ct_backend *be) {
    sim_state *s = be->state;
    if (!s) return;
    if (s->dirty) be->stalls++;
    s->dirty = false;
    s->gen++;
}
/* Every entry below has its backend in `be`. Waiting entries read with HW
 * (they end with sim_wait), the others with H, HF and HI. */
#define H(p) sim_touch(be, p)
#define HW(p) ((float *)sim_addr(p))
#define HF(p) ((float *)H(p))
#define HI(p) ((int32_t *)H(p))

ct_status ct_sim_init(ct_backend *be) {
    be->state = calloc(1, sizeof(sim_state));
    return be->state ? CT_OK : CT_ERR(CT_ERR_OOM, "out of memory for the sim backend's state");
}

void ct_sim_free(ct_backend *be) {
    free(be->state);
    be->state = NULL;
}

void ct_sim_set_capacity(ct_backend *be, size_t cap) {
    sim_state *s = be->state;
    if (s) s->cap = cap;
}

void ct_sim_memory(const ct_backend *be, size_t *cap, size_t *used, size_t *peak) {
    const sim_state *s = be->state;
    if (cap) *cap = s ? s->cap : 0;
    if (used) *used = s ? s->used : 0;
    if (peak) *peak = s ? s->peak : 0;
}

static void *sim_buf_alloc(ct_backend *be, size_t bytes, ct_tag tag) {
    sim_state *s = be->state;
    size_t n = bytes ? bytes : 1;
    if (s && s->cap && n > s->cap - s->used) {
        CT_ERR(CT_ERR_OOM, "out of device memory allocating %zu bytes for %s on sim (%zu of "
               "debug.sim_device_memory = %zu bytes in use)", bytes, ct_tag_str(tag), s->used,
               s->cap);
        return NULL;
    }
    uint8_t *p = ct_alloc(be->ctx, n, tag);
    if (!p) return NULL;
    if (s) {
        s->used += n;
        if (s->used > s->peak) s->peak = s->used;
    }
    return (void *)((uintptr_t)p + SIM_OFFSET);
}
static void sim_buf_free(ct_backend *be, void *p) {
    if (!p) return;
    sim_state *s = be->state;
    void *h = sim_addr(p);
    if (s) s->used -= ct_alloc_size(h);
    ct_free(be->ctx, h);
}
static void sim_memset(ct_backend *be, void *dst, int value, size_t bytes) {
    ct_host_memset(be, H(dst), value, bytes);
}
static void sim_upload(ct_backend *be, void *dst, const void *src, size_t bytes) {
    CT_ASSERT(!src || (uintptr_t)src < SIM_OFFSET);
    ct_host_copy(be, H(dst), src, bytes);
}
static void sim_download(ct_backend *be, void *dst, const void *src, size_t bytes) {
    CT_ASSERT(!dst || (uintptr_t)dst < SIM_OFFSET);
    ct_host_copy(be, dst, sim_addr(src), bytes);
    sim_wait(be);
}
static void sim_copy(ct_backend *be, void *dst, const void *src, size_t bytes) {
    ct_host_copy(be, H(dst), H(src), bytes);
}
static void sim_f32_to_bf16(ct_backend *be, uint16_t *dst, const float *src, size_t n) {
    ct_host_f32_to_bf16(be, H(dst), HF(src), n);
}
static void sim_bf16_to_f32(ct_backend *be, float *dst, const uint16_t *src, size_t n) {
    ct_host_bf16_to_f32(be, HF(dst), H(src), n);
}
static void sim_f32_to_f16(ct_backend *be, uint16_t *dst, const float *src, size_t n) {
    ct_host_f32_to_f16(be, H(dst), HF(src), n);
}
static void sim_scale_add(ct_backend *be, float *y, int ldy, const float *x, int ldx, int rows,
                          int cols, float a, bool accumulate) {
    ct_host_scale_add(be, HF(y), ldy, HF(x), ldx, rows, cols, a, accumulate);
}
static void sim_fill(ct_backend *be, float *x, float value, size_t n) {
    ct_host_fill(be, HF(x), value, n);
}
static void sim_scale(ct_backend *be, float *x, float a, size_t n) {
    ct_host_scale(be, HF(x), a, n);
}
static double sim_sum(ct_backend *be, const float *x, size_t n) {
    double r = ct_host_sum(be, HW(x), n);
    sim_wait(be);
    return r;
}
static double sim_sumsq(ct_backend *be, const float *x, size_t n) {
    double r = ct_sumsq_ref(be, HW(x), n);
    sim_wait(be);
    return r;
}
static size_t sim_nonfinite(ct_backend *be, const float *x, size_t n) {
    size_t r = ct_host_nonfinite(be, HW(x), n);
    sim_wait(be);
    return r;
}
/* The sum of ct_host_sum / ct_sumsq_ref, added on the "device": no wait. */
static void sim_reduce_add(ct_backend *be, double *dst, const float *x, size_t n, bool squares) {
    double *d = H(dst);
    if (n) *d += squares ? ct_sumsq_ref(be, HF(x), n) : ct_host_sum(be, HF(x), n);
}

/* ----------------------------------------------------- stream, timing */

static ct_status sim_synchronize(ct_backend *be) {
    sim_wait(be);
    return CT_OK;
}
static void sim_event_record(ct_backend *be, ct_event *ev) {
    const sim_state *s = be->state;
    ct_host_event_record(be, ev);
    ev->handle = (void *)(uintptr_t)((s ? s->gen : 0) + 1); /* its gen, never NULL */
}
/* Waits for b (a stall) unless a wait since b was recorded has passed it. */
static double sim_event_elapsed(ct_backend *be, const ct_event *a, const ct_event *b) {
    const sim_state *s = be->state;
    if (s && (uintptr_t)b->handle == s->gen + 1) sim_wait(be);
    return ct_host_event_elapsed(be, a, b);
}
static void sim_dropout_forward(ct_backend *be, float *out, const float *inp, size_t n, float p,
                                uint64_t key, uint64_t offset) {
    ct_host_dropout_forward(be, HF(out), HF(inp), n, p, key, offset);
}
static void sim_dropout_backward(ct_backend *be, float *dinp, const float *dout, size_t n,
                                 float p, uint64_t key, uint64_t offset) {
    ct_host_dropout_backward(be, HF(dinp), HF(dout), n, p, key, offset);
}

/* ------------------------------------------------------------- kernels */

static void sim_encoder_forward(ct_backend *be, float *out, const int32_t *inp, const float *wte,
                                const float *wpe, const int32_t *pos, int B, int T, int C,
                                int pos0) {
    ct_encoder_forward_ref(be, HF(out), HI(inp), HF(wte), HF(wpe), HI(pos), B, T, C, pos0);
}
static void sim_encoder_forward_wte16(ct_backend *be, float *out, const int32_t *inp,
                                      const uint16_t *wte16, const float *wpe,
                                      const int32_t *pos, int B, int T, int C, int pos0) {
    ct_encoder_forward_wte16_ref(be, HF(out), HI(inp), H(wte16), HF(wpe), HI(pos), B, T, C,
                                 pos0);
}
static void sim_encoder_backward(ct_backend *be, float *dwte, float *dwpe, const float *dout,
                                 const int32_t *inp, const int32_t *pos, int B, int T, int C) {
    ct_encoder_backward_ref(be, HF(dwte), HF(dwpe), HF(dout), HI(inp), HI(pos), B, T, C);
}
static void sim_layernorm_forward(ct_backend *be, float *out, float *mean, float *rstd,
                                  const float *inp, const float *weight, const float *bias, int N,
                                  int C, float eps) {
    ct_layernorm_forward_ref(be, HF(out), HF(mean), HF(rstd), HF(inp), HF(weight), HF(bias), N,
                             C, eps);
}
static void sim_layernorm_backward(ct_backend *be, float *dinp, float *dweight, float *dbias,
                                   const float *dout, const float *inp, const float *weight,
                                   const float *mean, const float *rstd, int N, int C) {
    ct_layernorm_backward_ref(be, HF(dinp), HF(dweight), HF(dbias), HF(dout), HF(inp),
                              HF(weight), HF(mean), HF(rstd), N, C);
}
static void sim_matmul_forward(ct_backend *be, float *out, const float *inp, const float *weight,
                               const float *bias, int N, int C, int OC) {
    ct_matmul_forward_ref(be, HF(out), HF(inp), HF(weight), HF(bias), N, C, OC);
}
static void sim_matmul_backward(ct_backend *be, float *dinp, float *dweight, float *dbias,
                                const float *dout, const float *inp, const float *weight, int N,
                                int C, int OC) {
    ct_matmul_backward_ref(be, HF(dinp), HF(dweight), HF(dbias), HF(dout), HF(inp), HF(weight),
                           N, C, OC);
}
static void sim_matmul_forward_bf16(ct_backend *be, float *out, const float *inp,
                                    const uint16_t *weight16, const float *bias, int N, int C,
                                    int OC) {
    ct_matmul_forward_bf16_ref(be, HF(out), HF(inp), H(weight16), HF(bias), N, C, OC);
}
static void sim_matmul_backward_bf16(ct_backend *be, float *dinp, float *dweight, float *dbias,
                                     const float *dout, const uint16_t *inp16,
                                     const uint16_t *weight16, int N, int C, int OC) {
    ct_matmul_backward_bf16_ref(be, HF(dinp), HF(dweight), HF(dbias), HF(dout), H(inp16),
                                H(weight16), N, C, OC);
}
static void sim_matmul_forward_bf16_out16(ct_backend *be, uint16_t *out16, int ld,
                                          const float *inp, const uint16_t *weight16, int N,
                                          int C, int OC) {
    ct_matmul_forward_bf16_out16_ref(be, H(out16), ld, HF(inp), H(weight16), N, C, OC);
}
static void sim_crossentropy_forward_bf16(ct_backend *be, float *losses, uint16_t *dlogits16,
                                          const uint16_t *logits16, int ld,
                                          const int32_t *targets, int N, int V, float dloss) {
    ct_crossentropy_forward_bf16_ref(be, HF(losses), H(dlogits16), H(logits16), ld, HI(targets),
                                     N, V, dloss);
}
static void sim_matmul_backward_bf16_dout16(ct_backend *be, float *dinp, float *dweight,
                                            const uint16_t *dout16, int ld,
                                            const uint16_t *inp16, const uint16_t *weight16,
                                            int N, int C, int OC) {
    ct_matmul_backward_bf16_dout16_ref(be, HF(dinp), HF(dweight), H(dout16), ld, H(inp16),
                                       H(weight16), N, C, OC);
}
static void sim_matmul_forward_f16(ct_backend *be, float *out, const float *inp,
                                   const uint16_t *weight16, const float *bias, int N, int C,
                                   int OC) {
    ct_matmul_forward_f16_ref(be, HF(out), HF(inp), H(weight16), HF(bias), N, C, OC);
}
static void sim_matmul_backward_f16(ct_backend *be, float *dinp, float *dweight, float *dbias,
                                    const float *dout, const uint16_t *inp16,
                                    const uint16_t *weight16, int N, int C, int OC) {
    ct_matmul_backward_f16_ref(be, HF(dinp), HF(dweight), HF(dbias), HF(dout), H(inp16),
                               H(weight16), N, C, OC);
}
static void sim_matmul_gelu_forward(ct_backend *be, float *pre, float *out, const float *inp,
                                    const float *weight, const float *bias, int N, int C,
                                    int OC) {
    ct_matmul_gelu_forward_ref(be, HF(pre), HF(out), HF(inp), HF(weight), HF(bias), N, C, OC);
}
static void sim_matmul_gelu_forward_bf16(ct_backend *be, float *pre, float *out,
                                         const float *inp, const uint16_t *weight16,
                                         const float *bias, int N, int C, int OC) {
    ct_matmul_gelu_forward_bf16_ref(be, HF(pre), HF(out), HF(inp), H(weight16), HF(bias), N, C,
                                    OC);
}
static void sim_matmul_forward_bf16_in16(ct_backend *be, float *out, const uint16_t *inp16,
                                         const uint16_t *weight16, const float *bias, int N,
                                         int C, int OC) {
    ct_matmul_forward_bf16_in16_ref(be, HF(out), H(inp16), H(weight16), HF(bias), N, C, OC);
}
static void sim_matmul_gelu_forward_bf16_in16(ct_backend *be, float *pre, float *out,
                                              const uint16_t *inp16, const uint16_t *weight16,
                                              const float *bias, int N, int C, int OC) {
    ct_matmul_gelu_forward_bf16_in16_ref(be, HF(pre), HF(out), H(inp16), H(weight16), HF(bias),
                                         N, C, OC);
}
static void sim_layernorm_forward_out16(ct_backend *be, float *res, uint16_t *out16, float *mean,
                                        float *rstd, const float *a, const float *b,
                                        const float *weight, const float *bias, int N, int C,
                                        float eps) {
    ct_layernorm_forward_out16_ref(be, HF(res), H(out16), HF(mean), HF(rstd), HF(a), HF(b),
                                   HF(weight), HF(bias), N, C, eps);
}
static void sim_rmsnorm_forward_out16(ct_backend *be, float *res, uint16_t *out16, float *rstd,
                                      const float *a, const float *b, const float *weight, int N,
                                      int C, float eps, float wofs) {
    ct_rmsnorm_forward_out16_ref(be, HF(res), H(out16), HF(rstd), HF(a), HF(b), HF(weight), N, C,
                                 eps, wofs);
}
static void sim_mlp_act_forward_out16(ct_backend *be, uint16_t *out16, const float *inp, int N,
                                      int F, int act) {
    ct_mlp_act_forward_out16_ref(be, H(out16), HF(inp), N, F, act);
}
static void sim_attention_forward(ct_backend *be, float *out, float *lse, const float *qkv,
                                  const int32_t *pos, const ct_attn_dropout *drop, int B, int T,
                                  int NH, int NKV, int HS) {
    ct_attention_forward_ref(be, HF(out), HF(lse), HF(qkv), HI(pos), drop, B, T, NH, NKV, HS);
}
static void sim_attention_backward(ct_backend *be, float *dqkv, const float *dout,
                                   const float *qkv, const float *out, const float *lse,
                                   const int32_t *pos, const ct_attn_dropout *drop, int B, int T,
                                   int NH, int NKV, int HS) {
    ct_attention_backward_ref(be, HF(dqkv), HF(dout), HF(qkv), HF(out), HF(lse), HI(pos), drop,
                              B, T, NH, NKV, HS);
}
static void sim_attention_decode(ct_backend *be, float *out, const float *q, const float *kcache,
                                 const float *vcache, int n, int NH, int NKV, int HS) {
    ct_attention_decode_ref(be, HF(out), HF(q), HF(kcache), HF(vcache), n, NH, NKV, HS);
}
static void sim_rmsnorm_forward(ct_backend *be, float *out, float *rstd, const float *inp,
                                const float *weight, int N, int C, float eps, float wofs) {
    ct_rmsnorm_forward_ref(be, HF(out), HF(rstd), HF(inp), HF(weight), N, C, eps, wofs);
}
static void sim_rmsnorm_backward(ct_backend *be, float *dinp, float *dweight, const float *dout,
                                 const float *inp, const float *weight, const float *rstd, int N,
                                 int C, float wofs) {
    ct_rmsnorm_backward_ref(be, HF(dinp), HF(dweight), HF(dout), HF(inp), HF(weight), HF(rstd),
                            N, C, wofs);
}
static void sim_rope_forward(ct_backend *be, float *qkv, const int32_t *pos, int B, int T, int NH,
                             int NKV, int HS, int pos0, const float *inv_freq) {
    ct_rope_forward_ref(be, HF(qkv), HI(pos), B, T, NH, NKV, HS, pos0, HF(inv_freq));
}
static void sim_rope_backward(ct_backend *be, float *dqkv, const int32_t *pos, int B, int T,
                              int NH, int NKV, int HS, int pos0, const float *inv_freq) {
    ct_rope_backward_ref(be, HF(dqkv), HI(pos), B, T, NH, NKV, HS, pos0, HF(inv_freq));
}
static void sim_qknorm_forward(ct_backend *be, float *out, float *rstd, const float *inp,
                               const float *wq, const float *wk, int N, int NH, int NKV, int HS,
                               float eps, float wofs) {
    ct_qknorm_forward_ref(be, HF(out), HF(rstd), HF(inp), HF(wq), HF(wk), N, NH, NKV, HS, eps,
                          wofs);
}
static void sim_qknorm_backward(ct_backend *be, float *dinp, float *dwq, float *dwk,
                                const float *dout, const float *inp, const float *wq,
                                const float *wk, const float *rstd, int N, int NH, int NKV,
                                int HS, float wofs) {
    ct_qknorm_backward_ref(be, HF(dinp), HF(dwq), HF(dwk), HF(dout), HF(inp), HF(wq), HF(wk),
                           HF(rstd), N, NH, NKV, HS, wofs);
}
static void sim_geglu_forward(ct_backend *be, float *out, const float *inp, int N, int F) {
    ct_geglu_forward_ref(be, HF(out), HF(inp), N, F);
}
static void sim_geglu_backward(ct_backend *be, float *dinp, const float *inp, const float *dout,
                               int N, int F) {
    ct_geglu_backward_ref(be, HF(dinp), HF(inp), HF(dout), N, F);
}
static void sim_swiglu_forward(ct_backend *be, float *out, const float *inp, int N, int F) {
    ct_swiglu_forward_ref(be, HF(out), HF(inp), N, F);
}
static void sim_swiglu_backward(ct_backend *be, float *dinp, const float *inp, const float *dout,
                                int N, int F) {
    ct_swiglu_backward_ref(be, HF(dinp), HF(inp), HF(dout), N, F);
}
static void sim_gelu_forward(ct_backend *be, float *out, const float *inp, size_t n) {
    ct_gelu_forward_ref(be, HF(out), HF(inp), n);
}
static void sim_gelu_backward(ct_backend *be, float *dinp, const float *inp, const float *dout,
                              size_t n) {
    ct_gelu_backward_ref(be, HF(dinp), HF(inp), HF(dout), n);
}
static void sim_residual_forward(ct_backend *be, float *out, const float *a, const float *b,
                                 size_t n) {
    ct_residual_forward_ref(be, HF(out), HF(a), HF(b), n);
}
static void sim_residual_backward(ct_backend *be, float *da, float *db, const float *dout,
                                  size_t n) {
    ct_residual_backward_ref(be, HF(da), HF(db), HF(dout), n);
}
static void sim_residual_layernorm_forward(ct_backend *be, float *res, float *out, float *mean,
                                           float *rstd, const float *a, const float *b,
                                           const float *weight, const float *bias, int N, int C,
                                           float eps) {
    ct_residual_layernorm_forward_ref(be, HF(res), HF(out), HF(mean), HF(rstd), HF(a), HF(b),
                                      HF(weight), HF(bias), N, C, eps);
}
static void sim_residual_rmsnorm_forward(ct_backend *be, float *res, float *out, float *rstd,
                                         const float *a, const float *b, const float *weight,
                                         int N, int C, float eps, float wofs) {
    ct_residual_rmsnorm_forward_ref(be, HF(res), HF(out), HF(rstd), HF(a), HF(b), HF(weight), N,
                                    C, eps, wofs);
}
static void sim_crossentropy_forward(ct_backend *be, float *losses, float *dlogits,
                                     const float *logits, const int32_t *targets, int N, int V,
                                     float dloss) {
    ct_crossentropy_forward_ref(be, HF(losses), HF(dlogits), HF(logits), HI(targets), N, V,
                                dloss);
}
static void sim_adamw_update(ct_backend *be, float *params, const float *grads, float *m,
                             float *v, size_t n, float lr, float beta1, float beta2, float eps,
                             float weight_decay, float grad_scale, int64_t t) {
    ct_adamw_update_ref(be, HF(params), HF(grads), HF(m), HF(v), n, lr, beta1, beta2, eps,
                        weight_decay, grad_scale, t);
}

const ct_backend_i ct_backend_sim_i = {
    .name = "sim",
    .buf_alloc = sim_buf_alloc,
    .buf_free = sim_buf_free,
    .host_alloc = ct_host_buf_alloc,
    .host_free = ct_host_buf_free,
    .memset = sim_memset,
    .upload = sim_upload,
    .download = sim_download,
    .copy = sim_copy,
    .f32_to_bf16 = sim_f32_to_bf16,
    .bf16_to_f32 = sim_bf16_to_f32,
    .f32_to_f16 = sim_f32_to_f16,
    .scale_add = sim_scale_add,
    .fill = sim_fill,
    .scale = sim_scale,
    .sum = sim_sum,
    .sumsq = sim_sumsq,
    .nonfinite = sim_nonfinite,
    .reduce_add = sim_reduce_add,
    .dropout_forward = sim_dropout_forward,
    .dropout_backward = sim_dropout_backward,
    .synchronize = sim_synchronize,
    .event_record = sim_event_record,
    .event_elapsed = sim_event_elapsed,
    .encoder_forward = sim_encoder_forward,
    .encoder_forward_wte16 = sim_encoder_forward_wte16,
    .encoder_backward = sim_encoder_backward,
    .layernorm_forward = sim_layernorm_forward,
    .layernorm_backward = sim_layernorm_backward,
    .matmul_forward = sim_matmul_forward,
    .matmul_backward = sim_matmul_backward,
    .matmul_forward_bf16 = sim_matmul_forward_bf16,
    .matmul_backward_bf16 = sim_matmul_backward_bf16,
    .matmul_forward_bf16_out16 = sim_matmul_forward_bf16_out16,
    .crossentropy_forward_bf16 = sim_crossentropy_forward_bf16,
    .matmul_backward_bf16_dout16 = sim_matmul_backward_bf16_dout16,
    .matmul_forward_f16 = sim_matmul_forward_f16,
    .matmul_backward_f16 = sim_matmul_backward_f16,
    .matmul_gelu_forward = sim_matmul_gelu_forward,
    .matmul_gelu_forward_bf16 = sim_matmul_gelu_forward_bf16,
    .matmul_forward_bf16_in16 = sim_matmul_forward_bf16_in16,
    .matmul_gelu_forward_bf16_in16 = sim_matmul_gelu_forward_bf16_in16,
    .layernorm_forward_out16 = sim_layernorm_forward_out16,
    .rmsnorm_forward_out16 = sim_rmsnorm_forward_out16,
    .mlp_act_forward_out16 = sim_mlp_act_forward_out16,
    .attention_forward = sim_attention_forward,
    .attention_backward = sim_attention_backward,
    .attention_decode = sim_attention_decode,
    .rmsnorm_forward = sim_rmsnorm_forward,
    .rmsnorm_backward = sim_rmsnorm_backward,
    .rope_forward = sim_rope_forward,
    .rope_backward = sim_rope_backward,
    .qknorm_forward = sim_qknorm_forward,
    .qknorm_backward = sim_qknorm_backward,
    .geglu_forward = sim_geglu_forward,
    .geglu_backward = sim_geglu_backward,
    .swiglu_forward = sim_swiglu_forward,
    .swiglu_backward = sim_swiglu_backward,
    .gelu_forward = sim_gelu_forward,
    .gelu_backward = sim_gelu_backward,
    .residual_forward = sim_residual_forward,
    .residual_backward = sim_residual_backward,
    .residual_layernorm_forward = sim_residual_layernorm_forward,
    .residual_rmsnorm_forward = sim_residual_rmsnorm_forward,
    .crossentropy_forward = sim_crossentropy_forward,
    .adamw_update = sim_adamw_update,
};
