/*
 * The CUDA backend's error path: the latch that keeps the first error with
 * what failed, the check after every kernel launch and cuBLAS call, and the
 * words synchronize reports. A kernel that faults (an illegal address) is
 * reported by the runtime only at the next wait, with no kernel named; with
 * CT_CUDA_SYNC=1 the check waits after every launch, so the fault is latched
 * under the kernel that caused it. CT_CUDA_FAULT=NAME makes a deliberate
 * fault right after the launch named NAME (the GPU check proves with it that
 * the switch names the kernel). Host code that calls the runtime's
 * cudaGetLastError, cudaStreamSynchronize and cudaGetErrorString only, and
 * cuda_fault_inject, so tests/gpu/cuda_emu.cpp runs it against a fake
 * runtime. The includer declares the runtime first (cuda_runtime.h).
 * Internal to src/backend/cuda.
 */
#ifndef CT_BACKEND_CUDA_CHECK_H
#define CT_BACKEND_CUDA_CHECK_H

#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_int.h"

/* Launch, on s's stream, a kernel that writes through an invalid address
 * (cuda_core.cu; the emulation's fake makes the stream fail). */
void cuda_fault_inject(cuda_state *s);

/* Whether code is a fault of a kernel's execution (the runtime's 700, 702,
 * 710, 714-719: an illegal or misaligned address, a trap, an assert, a
 * timeout, an illegal instruction, a launch failure), which any later call
 * may report, rather than an error of the call itself. */
static inline bool cuda_async_fault(int code) {
    return code == 700 || code == 702 || code == 710 || (code >= 714 && code <= 719);
}

/* Latch the first error (code != 0) with what failed; later ones are
 * dropped. A kernel's fault reported by a call that did not wait for that
 * kernel (no CT_CUDA_SYNC) belongs to some kernel launched before it: said
 * so, not blamed on the call. */
static inline void cuda_latch_state(cuda_state *s, int code, const char *what,
                                    const char *detail) {
    if (!s || code == 0 || s->err) return;
    s->err = code;
    if (cuda_async_fault(code) && !s->sync_each)
        snprintf(s->err_what, sizeof s->err_what, "a kernel launched before %.64s: %.200s", what,
                 detail ? detail : "failed");
    else
        snprintf(s->err_what, sizeof s->err_what, "%.64s: %.200s", what, detail ? detail : "failed");
}

/* After the launch of kernel (or the cuBLAS call) what: its launch error,
 * and with sync_each its fault too, latched under what (without it, a fault
 * of an earlier kernel that surfaces here is latched as such). */
static inline void cuda_check_after(cuda_state *s, const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && s->fault_after[0] && !strcmp(s->fault_after, what)) {
        cuda_fault_inject(s);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess && s->sync_each) e = cudaStreamSynchronize((cudaStream_t)s->stream);
    if (e != cudaSuccess) {
        char detail[128];
        snprintf(detail, sizeof detail, "%s%s", cudaGetErrorString(e),
                 s->sync_each ? " (found waiting right after it: CT_CUDA_SYNC=1)" : "");
        cuda_latch_state(s, (int)e, what, detail);
    }
}

/* synchronize's wait: a fault found only here is latched as "synchronize"
 * (with CT_CUDA_SYNC=1 the launch that caused it has latched it already). */
static inline void cuda_check_wait(cuda_state *s) {
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)s->stream);
    if (e != cudaSuccess) cuda_latch_state(s, (int)e, "synchronize", cudaGetErrorString(e));
}

/* The message and hint of a latched error, for synchronize's status: the
 * call that failed and the runtime's words; a kernel's fault that no launch
 * was found to cause gets the hint to rerun with CT_CUDA_SYNC=1. */
static inline void cuda_error_text(const cuda_state *s, char *msg, size_t msg_size, char *hint,
                                   size_t hint_size) {
    snprintf(msg, msg_size, "CUDA device %d (%s): %s", s->device, s->name, s->err_what);
    bool unnamed = !strncmp(s->err_what, "a kernel launched before ", 25);
    if (unnamed && !s->sync_each)
        snprintf(hint, hint_size, "a kernel launched before this wait failed; run again with "
                 "CT_CUDA_SYNC=1 to wait after every kernel and name the one that faults");
    else if (hint_size)
        hint[0] = 0;
}

#endif
