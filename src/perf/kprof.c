/*
 * The profiling backend: each kernel entry times its call on the wrapped
 * backend between two of that backend's events, counts it under its kind and,
 * while tracing, records it as a span. Memory, stream and timing entries
 * forward untimed; the reductions (sum, sumsq, nonfinite) count as "other"
 * (reduce_add, which stays on the device, forwards untimed). A call's two
 * events are kept and read at the next entry that waits for the device
 * (kp_flush), never right after the call. See kprof.h.
 */
#include "perf/kprof.h"

#include <stdlib.h>
#include <string.h>

#include "backend/ctx.h"
#include "core/trace.h"

/* A timed call whose elapsed time is not read yet: its kind, the entry's
 * name (a literal), its start and end events on the inner backend, and the
 * recorder that was active when it was queued (NULL: not traced). */
typedef struct kp_pending {
    int kind;
    const char *entry;
    ct_event a, b;
    ct_trace *tr;
} kp_pending;

/* The timed calls kept unread at most: 2 events each, well inside the cuda
 * backend's ring of events (CUDA_EVENTS, 4096) beside the model's own queued
 * ones (MODEL_QUEUED_EVENTS, 1024). When it is full, the kept ones are read. */
#define KP_PENDING_MAX 1024

struct ct_kprof {
    ct_backend be;        /* the wrapper handed out; be.state == this */
    ct_backend *inner;    /* borrowed: where every call runs */
    ct_backend_i table;   /* prof_i, less the optional entries inner lacks */
    ct_kprof_counts counts;
    int slow_kind;        /* -1: off */
    int slow_factor;      /* calls per timed call of slow_kind (>= 1) */
    kp_pending pending[KP_PENDING_MAX]; /* timed calls not read yet */
    int n_pending;
};

static ct_kprof *kp_of(ct_backend *be) { return (ct_kprof *)be->state; }

/* Reads the elapsed times of the kept calls: adds them to their kinds and
 * records the traced ones as spans. On a queued backend (a GPU) the spans go
 * on the device's track, placed by the device's own clock: the first kept
 * call's start event at the host time it was queued (the earliest it can have
 * run), every later event that many device seconds after it. On a
 * synchronous backend that is each call's own host time, on the host's track.
 * Waits only for work not done yet (none at a synchronizing entry). */
static void kp_flush(ct_kprof *kp) {
    ct_backend *in = kp->inner;
    if (!kp->n_pending) return;
    const ct_event *anchor = &kp->pending[0].a;
    int tid = in->queued ? CT_TRACE_TID_DEVICE : CT_TRACE_TID_MAIN;
    for (int i = 0; i < kp->n_pending; i++) {
        const kp_pending *p = &kp->pending[i];
        double dt = in->i->event_elapsed(in, &p->a, &p->b);
        kp->counts.seconds[p->kind] += dt;
        if (!p->tr) continue;
        double t0 = i ? anchor->t + in->i->event_elapsed(in, anchor, &p->a) : anchor->t;
        ct_trace_span(p->tr, p->entry, "kernel", tid, t0, t0 + dt, -1);
    }
    kp->n_pending = 0;
}

/* Keeps a timed call for the next read (the kept ones read first when full). */
static void kp_keep(ct_kprof *kp, const kp_pending *p) {
    if (kp->n_pending == KP_PENDING_MAX) kp_flush(kp);
    kp->pending[kp->n_pending++] = *p;
}

/* Starts the timing of a kernel call: the inner backend's event a (whose
 * host time t is the call's start on a synchronous backend, when it was
 * queued on another). Returns the profiler. */
static ct_kprof *kp_begin(ct_backend *be, ct_event *a) {
    ct_kprof *kp = kp_of(be);
    a->t = ct_time_s(); /* the span's start where the backend's event keeps no host time */
    a->handle = NULL;
    kp->inner->i->event_record(kp->inner, a);
    return kp;
}

/* Calls of one timed call of kind: the slow knob's factor, or 1. */
static int kp_reps(const ct_kprof *kp, ct_kprof_kind kind) {
    return (int)kind == kp->slow_kind ? kp->slow_factor : 1;
}

/* Ends the timing begun at a: counts the call under kind and keeps its events
 * for the next read (no wait for the device here), with the trace recorder
 * active now, so the span `entry` is recorded when the time is read. */
static void kp_end(ct_kprof *kp, ct_kprof_kind kind, const char *entry, const ct_event *a) {
    ct_backend *in = kp->inner;
    kp_pending p = {(int)kind, entry, *a, {0, NULL}, in->ctx ? ct_ctx_trace(in->ctx) : NULL};
    in->i->event_record(in, &p.b);
    kp->counts.calls[kind]++;
    kp_keep(kp, &p);
}

/* Times inner's `entry` under kind (the wrapper's parameter is `be`). */
#define TIMED(kind, entry, ...)                                          \
    do {                                                                 \
        ct_event a_;                                                     \
        ct_kprof *kp_ = kp_begin(be, &a_);                               \
        ct_backend *in_ = kp_->inner;                                    \
        for (int r_ = 0, n_ = kp_reps(kp_, kind); r_ < n_; r_++)         \
            in_->i->entry(in_, __VA_ARGS__);                             \
        kp_end(kp_, kind, #entry, &a_);                                  \
    } while (0)

/* The same for an entry that returns a value, stored in res. */
#define TIMED_RET(res, kind, entry, ...)                                 \
    do {                                                                 \
        ct_event a_;                                                     \
        ct_kprof *kp_ = kp_begin(be, &a_);                               \
        ct_backend *in_ = kp_->inner;                                    \
        for (int r_ = 0, n_ = kp_reps(kp_, kind); r_ < n_; r_++)         \
            res = in_->i->entry(in_, __VA_ARGS__);                       \
        kp_end(kp_, kind, #entry, &a_);                                  \
    } while (0)

/* The wrapped backend of the wrapper be (the untimed entries forward to it). */
#define INNER(be) (kp_of(be)->inner)

/* ------------------------------------------------------------ memory */

static void *p_buf_alloc(ct_backend *be, size_t bytes, ct_tag tag) {
    return INNER(be)->i->buf_alloc(INNER(be), bytes, tag);
}
/* The entries below that wait for the device (freeing, downloads, the
 * reductions, synchronize) read the kept times after it: nothing is left to
 * wait for then. */
static void p_buf_free(ct_backend *be, void *p) {
    INNER(be)->i->buf_free(INNER(be), p);
    kp_flush(kp_of(be));
}
static void *p_host_alloc(ct_backend *be, size_t bytes, ct_tag tag) {
    return INNER(be)->i->host_alloc(INNER(be), bytes, tag);
}
static void p_host_free(ct_backend *be, void *p) {
    INNER(be)->i->host_free(INNER(be), p);
    kp_flush(kp_of(be));
}
static void p_memset(ct_backend *be, void *dst, int value, size_t bytes) {
    INNER(be)->i->memset(INNER(be), dst, value, bytes);
}
static void p_upload(ct_backend *be, void *dst, const void *src, size_t bytes) {
    INNER(be)->i->upload(INNER(be), dst, src, bytes);
}
static void p_download(ct_backend *be, void *dst, const void *src, size_t bytes) {
    INNER(be)->i->download(INNER(be), dst, src, bytes);
    kp_flush(kp_of(be));
}
static void p_copy(ct_backend *be, void *dst, const void *src, size_t bytes) {
    INNER(be)->i->copy(INNER(be), dst, src, bytes);
}
static void p_f32_to_bf16(ct_backend *be, uint16_t *dst, const float *src, size_t n) {
    INNER(be)->i->f32_to_bf16(INNER(be), dst, src, n);
}
static void p_bf16_to_f32(ct_backend *be, float *dst, const uint16_t *src, size_t n) {
    INNER(be)->i->bf16_to_f32(INNER(be), dst, src, n);
}
static void p_f32_to_f16(ct_backend *be, uint16_t *dst, const float *src, size_t n) {
    INNER(be)->i->f32_to_f16(INNER(be), dst, src, n);
}
static void p_scale_add(ct_backend *be, float *y, int ldy, const float *x, int ldx, int rows,
                        int cols, float a, bool accumulate) {
    INNER(be)->i->scale_add(INNER(be), y, ldy, x, ldx, rows, cols, a, accumulate);
}
static void p_fill(ct_backend *be, float *x, float value, size_t n) {
    INNER(be)->i->fill(INNER(be), x, value, n);
}
static void p_scale(ct_backend *be, float *x, float a, size_t n) {
    INNER(be)->i->scale(INNER(be), x, a, n);
}
static double p_sum(ct_backend *be, const float *x, size_t n) {
    double r = 0;
    TIMED_RET(r, CT_KP_OTHER, sum, x, n);
    kp_flush(kp_of(be));
    return r;
}
static double p_sumsq(ct_backend *be, const float *x, size_t n) {
    double r = 0;
    TIMED_RET(r, CT_KP_OTHER, sumsq, x, n);
    kp_flush(kp_of(be));
    return r;
}
static size_t p_nonfinite(ct_backend *be, const float *x, size_t n) {
    size_t r = 0;
    TIMED_RET(r, CT_KP_OTHER, nonfinite, x, n);
    kp_flush(kp_of(be));
    return r;
}
/* Untimed: the slow knob's repeats would add it more than once. */
static void p_reduce_add(ct_backend *be, double *dst, const float *x, size_t n, bool squares) {
    ct_be_reduce_add(INNER(be), dst, x, n, squares);
}
static void p_dropout_forward(ct_backend *be, float *out, const float *inp, size_t n, float p,
                              uint64_t key, uint64_t offset) {
    INNER(be)->i->dropout_forward(INNER(be), out, inp, n, p, key, offset);
}
static void p_dropout_backward(ct_backend *be, float *dinp, const float *dout, size_t n, float p,
                               uint64_t key, uint64_t offset) {
    INNER(be)->i->dropout_backward(INNER(be), dinp, dout, n, p, key, offset);
}

/* ----------------------------------------------------- stream, timing */

static ct_status p_synchronize(ct_backend *be) {
    ct_status st = INNER(be)->i->synchronize(INNER(be));
    kp_flush(kp_of(be));
    return st;
}
static void p_event_record(ct_backend *be, ct_event *ev) {
    INNER(be)->i->event_record(INNER(be), ev);
}
static double p_event_elapsed(ct_backend *be, const ct_event *a, const ct_event *b) {
    return INNER(be)->i->event_elapsed(INNER(be), a, b);
}

/* ----------------------------------------------------------- kernels */

static void p_encoder_forward(ct_backend *be, float *out, const int32_t *inp, const float *wte,
                              const float *wpe, const int32_t *pos, int B, int T, int C, int pos0) {
    TIMED(CT_KP_ENCODER, encoder_forward, out, inp, wte, wpe, pos, B, T, C, pos0);
}
static void p_encoder_forward_wte16(ct_backend *be, float *out, const int32_t *inp,
                                    const uint16_t *wte16, const float *wpe, const int32_t *pos,
                                    int B, int T, int C, int pos0) {
    TIMED(CT_KP_ENCODER, encoder_forward_wte16, out, inp, wte16, wpe, pos, B, T, C, pos0);
}
static void p_encoder_backward(ct_backend *be, float *dwte, float *dwpe, const float *dout,
                               const int32_t *inp, const int32_t *pos, int B, int T, int C) {
    TIMED(CT_KP_ENCODER, encoder_backward, dwte, dwpe, dout, inp, pos, B, T, C);
}
static void p_layernorm_forward(ct_backend *be, float *out, float *mean, float *rstd,
                                const float *inp, const float *weight, const float *bias, int N,
                                int C, float eps) {
    TIMED(CT_KP_NORM_FWD, layernorm_forward, out, mean, rstd, inp, weight, bias, N, C, eps);
}
static void p_layernorm_backward(ct_backend *be, float *dinp, float *dweight, float *dbias,
                                 const float *dout, const float *inp, const float *weight,
                                 const float *mean, const float *rstd, int N, int C) {
    TIMED(CT_KP_NORM_BWD, layernorm_backward, dinp, dweight, dbias, dout, inp, weight, mean, rstd,
          N, C);
}
static void p_matmul_forward(ct_backend *be, float *out, const float *inp, const float *weight,
                             const float *bias, int N, int C, int OC) {
    TIMED(CT_KP_MATMUL_FWD, matmul_forward, out, inp, weight, bias, N, C, OC);
}
static void p_matmul_backward(ct_backend *be, float *dinp, float *dweight, float *dbias,
                              const float *dout, const float *inp, const float *weight, int N,
                              int C, int OC) {
    TIMED(CT_KP_MATMUL_BWD, matmul_backward, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}
static void p_matmul_forward_bf16(ct_backend *be, float *out, const float *inp,
                                  const uint16_t *weight16, const float *bias, int N, int C,
                                  int OC) {
    TIMED(CT_KP_MATMUL_FWD, matmul_forward_bf16, out, inp, weight16, bias, N, C, OC);
}
/* The bf16 head's entries, under the kinds of their fp32 twins. */
static void p_matmul_forward_bf16_out16(ct_backend *be, uint16_t *out16, int ld,
                                        const float *inp, const uint16_t *weight16, int N, int C,
                                        int OC) {
    TIMED(CT_KP_MATMUL_FWD, matmul_forward_bf16_out16, out16, ld, inp, weight16, N, C, OC);
}
static void p_crossentropy_forward_bf16(ct_backend *be, float *losses, uint16_t *dlogits16,
                                        const uint16_t *logits16, int ld, const int32_t *targets,
                                        int N, int V, float dloss) {
    TIMED(CT_KP_XENT, crossentropy_forward_bf16, losses, dlogits16, logits16, ld, targets, N, V,
          dloss);
}
static void p_matmul_backward_bf16_dout16(ct_backend *be, float *dinp, float *dweight,
                                          const uint16_t *dout16, int ld, const uint16_t *inp16,
                                          const uint16_t *weight16, int N, int C, int OC) {
    TIMED(CT_KP_MATMUL_BWD, matmul_backward_bf16_dout16, dinp, dweight, dout16, ld, inp16,
          weight16, N, C, OC);
}
/* the inner backend's layout (and whether it would use the head now) */
static int p_head16_ld(ct_backend *be, int V) { return ct_backend_head16_ld(INNER(be), V); }
static void p_matmul_forward_f16(ct_backend *be, float *out, const float *inp,
                                 const uint16_t *weight16, const float *bias, int N, int C,
                                 int OC) {
    TIMED(CT_KP_MATMUL_FWD, matmul_forward_f16, out, inp, weight16, bias, N, C, OC);
}
static void p_matmul_backward_f16(ct_backend *be, float *dinp, float *dweight, float *dbias,
                                  const float *dout, const uint16_t *inp16,
                                  const uint16_t *weight16, int N, int C, int OC) {
    TIMED(CT_KP_MATMUL_BWD, matmul_backward_f16, dinp, dweight, dbias, dout, inp16, weight16, N,
          C, OC);
}
/* The fused linear+GELU counts as a forward GEMM (the GEMM is most of it);
 * on a backend without it the wrapper makes the model's two calls, each
 * under its own kind, so the wrapper changes no result. */
static void p_matmul_gelu_forward(ct_backend *be, float *pre, float *out, const float *inp,
                                  const float *weight, const float *bias, int N, int C, int OC) {
    if (INNER(be)->i->matmul_gelu_forward) {
        TIMED(CT_KP_MATMUL_FWD, matmul_gelu_forward, pre, out, inp, weight, bias, N, C, OC);
    } else {
        TIMED(CT_KP_MATMUL_FWD, matmul_forward, pre, inp, weight, bias, N, C, OC);
        TIMED(CT_KP_ACT_FWD, gelu_forward, out, pre, (size_t)N * OC);
    }
}
static void p_matmul_gelu_forward_bf16(ct_backend *be, float *pre, float *out, const float *inp,
                                       const uint16_t *weight16, const float *bias, int N, int C,
                                       int OC) {
    if (INNER(be)->i->matmul_gelu_forward_bf16) {
        TIMED(CT_KP_MATMUL_FWD, matmul_gelu_forward_bf16, pre, out, inp, weight16, bias, N, C,
              OC);
    } else {
        TIMED(CT_KP_MATMUL_FWD, matmul_forward_bf16, pre, inp, weight16, bias, N, C, OC);
        TIMED(CT_KP_ACT_FWD, gelu_forward, out, pre, (size_t)N * OC);
    }
}
/* The forwards on an input kept in bf16: present only where the inner
 * backend has them (the table is NULLed otherwise, below). */
static void p_matmul_forward_bf16_in16(ct_backend *be, float *out, const uint16_t *inp16,
                                       const uint16_t *weight16, const float *bias, int N, int C,
                                       int OC) {
    TIMED(CT_KP_MATMUL_FWD, matmul_forward_bf16_in16, out, inp16, weight16, bias, N, C, OC);
}
static void p_matmul_gelu_forward_bf16_in16(ct_backend *be, float *pre, float *out,
                                            const uint16_t *inp16, const uint16_t *weight16,
                                            const float *bias, int N, int C, int OC) {
    TIMED(CT_KP_MATMUL_FWD, matmul_gelu_forward_bf16_in16, pre, out, inp16, weight16, bias, N, C,
          OC);
}
static void p_layernorm_forward_out16(ct_backend *be, float *res, uint16_t *out16, float *mean,
                                      float *rstd, const float *a, const float *b,
                                      const float *weight, const float *bias, int N, int C,
                                      float eps) {
    TIMED(CT_KP_NORM_FWD, layernorm_forward_out16, res, out16, mean, rstd, a, b, weight, bias, N,
          C, eps);
}
static void p_rmsnorm_forward_out16(ct_backend *be, float *res, uint16_t *out16, float *rstd,
                                    const float *a, const float *b, const float *weight, int N,
                                    int C, float eps, float wofs) {
    TIMED(CT_KP_NORM_FWD, rmsnorm_forward_out16, res, out16, rstd, a, b, weight, N, C, eps,
          wofs);
}
static void p_mlp_act_forward_out16(ct_backend *be, uint16_t *out16, const float *inp, int N,
                                    int F, int act) {
    TIMED(CT_KP_ACT_FWD, mlp_act_forward_out16, out16, inp, N, F, act);
}
static void p_matmul_backward_bf16(ct_backend *be, float *dinp, float *dweight, float *dbias,
                                   const float *dout, const uint16_t *inp16,
                                   const uint16_t *weight16, int N, int C, int OC) {
    TIMED(CT_KP_MATMUL_BWD, matmul_backward_bf16, dinp, dweight, dbias, dout, inp16, weight16, N,
          C, OC);
}
static void p_attention_forward(ct_backend *be, float *out, float *lse, const float *qkv,
                                const int32_t *pos, const ct_attn_dropout *drop, int B, int T,
                                int NH, int NKV, int HS) {
    TIMED(CT_KP_ATTN_FWD, attention_forward, out, lse, qkv, pos, drop, B, T, NH, NKV, HS);
}
static void p_attention_backward(ct_backend *be, float *dqkv, const float *dout, const float *qkv,
                                 const float *out, const float *lse, const int32_t *pos,
                                 const ct_attn_dropout *drop, int B, int T, int NH, int NKV,
                                 int HS) {
    TIMED(CT_KP_ATTN_BWD, attention_backward, dqkv, dout, qkv, out, lse, pos, drop, B, T, NH, NKV,
          HS);
}
/* precision bf16's attention: the inner backend's, or its fp32 entries where
 * it has none (what a caller of the inner backend would run) */
static void p_attention_forward_bf16(ct_backend *be, float *out, float *lse, const float *qkv,
                                     const int32_t *pos, const ct_attn_dropout *drop, int B,
                                     int T, int NH, int NKV, int HS) {
    if (INNER(be)->i->attention_forward_bf16) {
        TIMED(CT_KP_ATTN_FWD, attention_forward_bf16, out, lse, qkv, pos, drop, B, T, NH, NKV,
              HS);
    } else {
        TIMED(CT_KP_ATTN_FWD, attention_forward, out, lse, qkv, pos, drop, B, T, NH, NKV, HS);
    }
}
static void p_attention_backward_bf16(ct_backend *be, float *dqkv, const float *dout,
                                      const float *qkv, const float *out, const float *lse,
                                      const int32_t *pos, const ct_attn_dropout *drop, int B,
                                      int T, int NH, int NKV, int HS) {
    if (INNER(be)->i->attention_backward_bf16) {
        TIMED(CT_KP_ATTN_BWD, attention_backward_bf16, dqkv, dout, qkv, out, lse, pos, drop, B,
              T, NH, NKV, HS);
    } else {
        TIMED(CT_KP_ATTN_BWD, attention_backward, dqkv, dout, qkv, out, lse, pos, drop, B, T, NH,
              NKV, HS);
    }
}
static void p_attention_decode(ct_backend *be, float *out, const float *q, const float *kcache,
                               const float *vcache, int n, int NH, int NKV, int HS) {
    TIMED(CT_KP_OTHER, attention_decode, out, q, kcache, vcache, n, NH, NKV, HS);
}
static void p_rmsnorm_forward(ct_backend *be, float *out, float *rstd, const float *inp,
                              const float *weight, int N, int C, float eps, float wofs) {
    TIMED(CT_KP_NORM_FWD, rmsnorm_forward, out, rstd, inp, weight, N, C, eps, wofs);
}
static void p_rmsnorm_backward(ct_backend *be, float *dinp, float *dweight, const float *dout,
                               const float *inp, const float *weight, const float *rstd, int N,
                               int C, float wofs) {
    TIMED(CT_KP_NORM_BWD, rmsnorm_backward, dinp, dweight, dout, inp, weight, rstd, N, C, wofs);
}
static void p_rope_forward(ct_backend *be, float *qkv, const int32_t *pos, int B, int T, int NH,
                           int NKV, int HS, int pos0, const float *inv_freq) {
    TIMED(CT_KP_ROPE, rope_forward, qkv, pos, B, T, NH, NKV, HS, pos0, inv_freq);
}
static void p_rope_backward(ct_backend *be, float *dqkv, const int32_t *pos, int B, int T, int NH,
                            int NKV, int HS, int pos0, const float *inv_freq) {
    TIMED(CT_KP_ROPE, rope_backward, dqkv, pos, B, T, NH, NKV, HS, pos0, inv_freq);
}
static void p_qknorm_forward(ct_backend *be, float *out, float *rstd, const float *inp,
                             const float *wq, const float *wk, int N, int NH, int NKV, int HS,
                             float eps, float wofs) {
    TIMED(CT_KP_NORM_FWD, qknorm_forward, out, rstd, inp, wq, wk, N, NH, NKV, HS, eps, wofs);
}
static void p_qknorm_backward(ct_backend *be, float *dinp, float *dwq, float *dwk,
                              const float *dout, const float *inp, const float *wq,
                              const float *wk, const float *rstd, int N, int NH, int NKV,
                              int HS, float wofs) {
    TIMED(CT_KP_NORM_BWD, qknorm_backward, dinp, dwq, dwk, dout, inp, wq, wk, rstd, N, NH, NKV,
          HS, wofs);
}
static void p_geglu_forward(ct_backend *be, float *out, const float *inp, int N, int F) {
    TIMED(CT_KP_ACT_FWD, geglu_forward, out, inp, N, F);
}
static void p_geglu_backward(ct_backend *be, float *dinp, const float *inp, const float *dout,
                             int N, int F) {
    TIMED(CT_KP_ACT_BWD, geglu_backward, dinp, inp, dout, N, F);
}
static void p_swiglu_forward(ct_backend *be, float *out, const float *inp, int N, int F) {
    TIMED(CT_KP_ACT_FWD, swiglu_forward, out, inp, N, F);
}
static void p_swiglu_backward(ct_backend *be, float *dinp, const float *inp, const float *dout,
                              int N, int F) {
    TIMED(CT_KP_ACT_BWD, swiglu_backward, dinp, inp, dout, N, F);
}
static void p_gelu_forward(ct_backend *be, float *out, const float *inp, size_t n) {
    TIMED(CT_KP_ACT_FWD, gelu_forward, out, inp, n);
}
static void p_gelu_backward(ct_backend *be, float *dinp, const float *inp, const float *dout,
                            size_t n) {
    TIMED(CT_KP_ACT_BWD, gelu_backward, dinp, inp, dout, n);
}
static void p_residual_forward(ct_backend *be, float *out, const float *a, const float *b,
                               size_t n) {
    TIMED(CT_KP_RESIDUAL, residual_forward, out, a, b, n);
}
static void p_residual_backward(ct_backend *be, float *da, float *db, const float *dout,
                                size_t n) {
    TIMED(CT_KP_RESIDUAL, residual_backward, da, db, dout, n);
}
static void p_residual_layernorm_forward(ct_backend *be, float *res, float *out, float *mean,
                                         float *rstd, const float *a, const float *b,
                                         const float *weight, const float *bias, int N, int C,
                                         float eps) {
    TIMED(CT_KP_NORM_FWD, residual_layernorm_forward, res, out, mean, rstd, a, b, weight, bias,
          N, C, eps);
}
static void p_residual_rmsnorm_forward(ct_backend *be, float *res, float *out, float *rstd,
                                       const float *a, const float *b, const float *weight, int N,
                                       int C, float eps, float wofs) {
    TIMED(CT_KP_NORM_FWD, residual_rmsnorm_forward, res, out, rstd, a, b, weight, N, C, eps,
          wofs);
}
static void p_crossentropy_forward(ct_backend *be, float *losses, float *dlogits,
                                   const float *logits, const int32_t *targets, int N, int V,
                                   float dloss) {
    TIMED(CT_KP_XENT, crossentropy_forward, losses, dlogits, logits, targets, N, V, dloss);
}
static void p_adamw_update(ct_backend *be, float *params, const float *grads, float *m, float *v,
                           size_t n, float lr, float beta1, float beta2, float eps,
                           float weight_decay, float grad_scale, int64_t t) {
    TIMED(CT_KP_ADAMW, adamw_update, params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay,
          grad_scale, t);
}

static void p_adamw_update16(ct_backend *be, float *params, uint16_t *params16,
                             const float *grads, float *m, float *v, size_t n, float lr,
                             float beta1, float beta2, float eps, float weight_decay,
                             float grad_scale, int64_t t) {
    TIMED(CT_KP_ADAMW, adamw_update16, params, params16, grads, m, v, n, lr, beta1, beta2, eps,
          weight_decay, grad_scale, t);
}

static const ct_backend_i prof_i = {
    .name = "profiled",
    .buf_alloc = p_buf_alloc,
    .buf_free = p_buf_free,
    .host_alloc = p_host_alloc,
    .host_free = p_host_free,
    .memset = p_memset,
    .upload = p_upload,
    .download = p_download,
    .copy = p_copy,
    .f32_to_bf16 = p_f32_to_bf16,
    .bf16_to_f32 = p_bf16_to_f32,
    .f32_to_f16 = p_f32_to_f16,
    .scale_add = p_scale_add,
    .fill = p_fill,
    .scale = p_scale,
    .sum = p_sum,
    .sumsq = p_sumsq,
    .nonfinite = p_nonfinite,
    .reduce_add = p_reduce_add,
    .dropout_forward = p_dropout_forward,
    .dropout_backward = p_dropout_backward,
    .synchronize = p_synchronize,
    .event_record = p_event_record,
    .event_elapsed = p_event_elapsed,
    .encoder_forward = p_encoder_forward,
    .encoder_forward_wte16 = p_encoder_forward_wte16,
    .encoder_backward = p_encoder_backward,
    .layernorm_forward = p_layernorm_forward,
    .layernorm_backward = p_layernorm_backward,
    .matmul_forward = p_matmul_forward,
    .matmul_backward = p_matmul_backward,
    .matmul_forward_bf16 = p_matmul_forward_bf16,
    .matmul_backward_bf16 = p_matmul_backward_bf16,
    .matmul_forward_f16 = p_matmul_forward_f16,
    .matmul_forward_bf16_out16 = p_matmul_forward_bf16_out16,
    .crossentropy_forward_bf16 = p_crossentropy_forward_bf16,
    .matmul_backward_bf16_dout16 = p_matmul_backward_bf16_dout16,
    .head16_ld = p_head16_ld,
    .matmul_backward_f16 = p_matmul_backward_f16,
    .matmul_gelu_forward = p_matmul_gelu_forward,
    .matmul_gelu_forward_bf16 = p_matmul_gelu_forward_bf16,
    .matmul_forward_bf16_in16 = p_matmul_forward_bf16_in16,
    .matmul_gelu_forward_bf16_in16 = p_matmul_gelu_forward_bf16_in16,
    .layernorm_forward_out16 = p_layernorm_forward_out16,
    .rmsnorm_forward_out16 = p_rmsnorm_forward_out16,
    .mlp_act_forward_out16 = p_mlp_act_forward_out16,
    .attention_forward = p_attention_forward,
    .attention_backward = p_attention_backward,
    .attention_forward_bf16 = p_attention_forward_bf16,
    .attention_backward_bf16 = p_attention_backward_bf16,
    .attention_decode = p_attention_decode,
    .rmsnorm_forward = p_rmsnorm_forward,
    .rmsnorm_backward = p_rmsnorm_backward,
    .rope_forward = p_rope_forward,
    .rope_backward = p_rope_backward,
    .qknorm_forward = p_qknorm_forward,
    .qknorm_backward = p_qknorm_backward,
    .geglu_forward = p_geglu_forward,
    .geglu_backward = p_geglu_backward,
    .swiglu_forward = p_swiglu_forward,
    .swiglu_backward = p_swiglu_backward,
    .gelu_forward = p_gelu_forward,
    .gelu_backward = p_gelu_backward,
    .residual_forward = p_residual_forward,
    .residual_backward = p_residual_backward,
    .residual_layernorm_forward = p_residual_layernorm_forward,
    .residual_rmsnorm_forward = p_residual_rmsnorm_forward,
    .crossentropy_forward = p_crossentropy_forward,
    .adamw_update = p_adamw_update,
    .adamw_update16 = p_adamw_update16,
};

/* ------------------------------------------------------------ object */

ct_status ct_kprof_init(ct_kprof **out, ct_backend *inner) {
    *out = NULL;
    if (!inner || !inner->i)
        return CT_ERR(CT_ERR_ARG, "the kernel profiler needs a backend to wrap");
    ct_kprof *kp = calloc(1, sizeof *kp);
    if (!kp) return CT_ERR(CT_ERR_OOM, "out of memory for the kernel profiler");
    kp->inner = inner;
    kp->slow_kind = -1;
    kp->slow_factor = 1;
    /* the optional fp16 entries exist where the inner backend has them, so
     * what the model asks of the table (ct_model_set_opts) is the inner's answer */
    kp->table = prof_i;
    if (!inner->i->f32_to_f16) kp->table.f32_to_f16 = NULL;
    if (!inner->i->matmul_forward_f16) kp->table.matmul_forward_f16 = NULL;
    if (!inner->i->matmul_backward_f16) kp->table.matmul_backward_f16 = NULL;
    if (!inner->i->matmul_forward_bf16_out16) kp->table.matmul_forward_bf16_out16 = NULL;
    if (!inner->i->crossentropy_forward_bf16) kp->table.crossentropy_forward_bf16 = NULL;
    if (!inner->i->matmul_backward_bf16_dout16) kp->table.matmul_backward_bf16_dout16 = NULL;
    if (!inner->i->matmul_forward_bf16_in16) kp->table.matmul_forward_bf16_in16 = NULL;
    if (!inner->i->matmul_gelu_forward_bf16_in16) kp->table.matmul_gelu_forward_bf16_in16 = NULL;
    if (!inner->i->layernorm_forward_out16) kp->table.layernorm_forward_out16 = NULL;
    if (!inner->i->rmsnorm_forward_out16) kp->table.rmsnorm_forward_out16 = NULL;
    if (!inner->i->mlp_act_forward_out16) kp->table.mlp_act_forward_out16 = NULL;
    if (!inner->i->adamw_update16) kp->table.adamw_update16 = NULL;
    kp->be.i = &kp->table;
    kp->be.ctx = inner->ctx;
    kp->be.host_visible = inner->host_visible;
    kp->be.queued = inner->queued;
    kp->be.n_threads = inner->n_threads;
    kp->be.att_bq = inner->att_bq;
    kp->be.att_bk = inner->att_bk;
    kp->be.state = kp;
    *out = kp;
    return CT_OK;
}

void ct_kprof_free(ct_kprof *kp) {
    free(kp); /* unread times are dropped: the caller has read what it wanted */
}

void ct_kprof_flush(ct_kprof *kp) {
    if (kp) kp_flush(kp);
}

ct_backend *ct_kprof_backend(ct_kprof *kp) { return &kp->be; }

ct_backend *ct_kprof_inner(ct_kprof *kp) { return kp->inner; }

void ct_kprof_read(ct_kprof *kp, ct_kprof_counts *out, int reset) {
    kp_flush(kp);
    *out = kp->counts;
    if (reset) memset(&kp->counts, 0, sizeof kp->counts);
}

void ct_kprof_set_slow(ct_kprof *kp, int kind, int factor) {
    bool on = factor > 1 && kind >= 0 && kind < CT_KP_COUNT;
    kp->slow_kind = on ? kind : -1;
    kp->slow_factor = on ? factor : 1;
}

const char *ct_kprof_name(ct_kprof_kind k) {
    static const char *const names[CT_KP_COUNT] = {
        "matmul_fwd", "matmul_bwd", "attention_fwd", "attention_bwd", "norm_fwd",
        "norm_bwd",   "act_fwd",    "act_bwd",       "residual",      "encoder",
        "rope",       "crossentropy", "adamw",       "other"};
    return (k >= 0 && k < CT_KP_COUNT) ? names[k] : "?";
}

int ct_kprof_kind_of(const char *name) {
    for (int k = 0; k < CT_KP_COUNT; k++)
        if (name && !strcmp(name, ct_kprof_name((ct_kprof_kind)k))) return k;
    return -1;
}
