/*
 * Kernel profiler: a backend wrapper that forwards every call to an inner
 * backend and adds the time of each kernel call to a per-kind counter. The
 * bench uses it to split a training step's time by layer type; while a trace
 * recorder is active (ct_ctx_trace), each kernel call is also a span. Times
 * come from the inner backend's events, so they stay right on an asynchronous
 * backend; they are read at the next entry that waits for the device anyway
 * (a download, a reduction, synchronize, a free) or at ct_kprof_read, so the
 * profiler adds no wait of its own to a step (ct_backend.stalls). There, the
 * kernels' spans go on the device's track (CT_TRACE_TID_DEVICE), placed by
 * the device's clock: a GPU runs them after the host queued them. All state lives in the
 * ct_kprof. Leaves out: per-layer attribution, nested timing, and timing of
 * the memory operations (they forward untimed, except the reductions).
 */
#ifndef CT_PERF_KPROF_H
#define CT_PERF_KPROF_H

#include <stdint.h>

#include "backend/backend.h"

typedef enum ct_kprof_kind {
    CT_KP_MATMUL_FWD = 0, /* matmul_gelu_forward (linear + GELU in one call) too */
    CT_KP_MATMUL_BWD = 1,
    CT_KP_ATTN_FWD = 2,
    CT_KP_ATTN_BWD = 3,
    CT_KP_NORM_FWD = 4, /* LayerNorm or RMSNorm, with or without the residual add fused in */
    CT_KP_NORM_BWD = 5,
    CT_KP_ACT_FWD = 6, /* GELU or SwiGLU */
    CT_KP_ACT_BWD = 7,
    CT_KP_RESIDUAL = 8, /* adds not fused into a norm, and their backward */
    CT_KP_ENCODER = 9,
    CT_KP_ROPE = 10,
    CT_KP_XENT = 11,
    CT_KP_ADAMW = 12,
    CT_KP_OTHER = 13, /* attention_decode and the reductions sum, sumsq, nonfinite */
    CT_KP_COUNT
} ct_kprof_kind;

typedef struct ct_kprof_counts {
    double seconds[CT_KP_COUNT]; /* seconds of the kind's calls (inner backend's events) */
    int64_t calls[CT_KP_COUNT];  /* calls of the kind */
} ct_kprof_counts;

typedef struct ct_kprof ct_kprof;

/* A profiler wrapping inner (borrowed; must outlive the profiler), with zero
 * counters and the slow knob off. Returns owned *out; release with
 * ct_kprof_free. CT_ERR_OOM.
 * Kernels run on inner itself (inner->i->X(inner, ...)), so inner's settings
 * count: set attention tiles with ct_backend_set_tiles on inner, not on the
 * wrapper (whose att_bq/att_bk are copies taken here, for reading). */
ct_status ct_kprof_init(ct_kprof **out, ct_backend *inner);
/* NULL is fine. Whatever holds the wrapper (ct_ctx_set_backend, a model made
 * while it was set) must be done with it first. */
void ct_kprof_free(ct_kprof *kp);
/* The wrapper backend: i is the profiling table, state the profiler, and
 * ctx, host_visible, n_threads and the tiles are inner's. Borrowed from kp;
 * put it in front with ct_ctx_set_backend before creating models. */
ct_backend *ct_kprof_backend(ct_kprof *kp);
/* The wrapped backend. */
ct_backend *ct_kprof_inner(ct_kprof *kp);
/* Reads the times not read yet (waiting for their kernels where the device
 * is still at them): into the counters, and the spans into the recorders
 * that were active when each call was made. Before writing a trace. */
void ct_kprof_flush(ct_kprof *kp);
/* Copies the counters (after ct_kprof_flush) into out and, when reset,
 * zeroes them. */
void ct_kprof_read(ct_kprof *kp, ct_kprof_counts *out, int reset);
/* Test knob of the regression gate: every call of a kernel of `kind` runs
 * factor times inside its timing (kind -1 or factor <= 1: off). */
void ct_kprof_set_slow(ct_kprof *kp, int kind, int factor);
/* Short name of a kind ("matmul_fwd", "attention_bwd", ...); "?" outside the
 * enum. Static strings. */
const char *ct_kprof_name(ct_kprof_kind k);
/* The kind of a short name; -1 when no kind has it. */
int ct_kprof_kind_of(const char *name);

/* Thread-safety: one profiler is driven by one thread at a time (the thread
 * that drives the model); the kernels' own threads run inside a timed call. */

#endif
