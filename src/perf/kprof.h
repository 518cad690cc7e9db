/*
 * Kernel profiler: a ct_kernels table that forwards every call to another
 * table and adds the wall time of the call to a per-kind counter. The bench
 * uses it to split a training step's time by layer type. Counters are global
 * (one profiler per process) and are only touched by the calling thread, which
 * is the thread that drives the model; the kernels' own threads are inside the
 * timed call. Leaves out: per-layer attribution and nested timing.
 */
#ifndef CT_PERF_KPROF_H
#define CT_PERF_KPROF_H

#include <stdint.h>

#include "kernels/kernels.h"

typedef enum ct_kprof_kind {
    CT_KP_MATMUL_FWD = 0,
    CT_KP_MATMUL_BWD,
    CT_KP_ATTN_FWD,
    CT_KP_ATTN_BWD,
    CT_KP_NORM_FWD, /* LayerNorm or RMSNorm */
    CT_KP_NORM_BWD,
    CT_KP_ACT_FWD, /* GELU or SwiGLU */
    CT_KP_ACT_BWD,
    CT_KP_RESIDUAL,
    CT_KP_ENCODER,
    CT_KP_ROPE,
    CT_KP_XENT,
    CT_KP_ADAMW,
    CT_KP_OTHER, /* sumsq, decode */
    CT_KP_COUNT
} ct_kprof_kind;

typedef struct ct_kprof_counts {
    double seconds[CT_KP_COUNT];
    int64_t calls[CT_KP_COUNT];
} ct_kprof_counts;

/* Returns the profiling table wrapping base (borrowed, must outlive its use).
 * A second call rewraps: there is one profiler per process. */
const ct_kernels *ct_kprof_wrap(const ct_kernels *base);
/* Copies the counters into out and, when reset, zeroes them. */
void ct_kprof_read(ct_kprof_counts *out, int reset);
/* Short name of a kind ("matmul_fwd", "attention_bwd", ...). */
const char *ct_kprof_name(ct_kprof_kind k);
/* The kind of a short name; -1 when no kind has it. */
int ct_kprof_kind_of(const char *name);
/* Test knob of the regression gate: every call of a kernel of `kind` runs
 * factor times inside its timing (kind -1 or factor <= 1: off). Reset by
 * ct_kprof_wrap. */
void ct_kprof_set_slow(int kind, int factor);

#endif
