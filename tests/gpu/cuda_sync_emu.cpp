/*
 * The CUDA backend's error path (src/backend/cuda/cuda_check.h) against a
 * fake CUDA runtime, on any machine: a kernel that faults is named only with
 * CT_CUDA_SYNC=1 (without it the fault surfaces at the next wait, as
 * "synchronize", with the hint to rerun under CT_CUDA_SYNC=1); a launch error
 * is named either way; the first error is kept; CT_CUDA_FAULT=NAME faults
 * after exactly the launch NAME. The fake stands for what a GPU does: a
 * launch returns at once, a fault is reported by the next wait and every wait
 * after it (a sticky error). What it cannot show (that a real fault is
 * reported that way) the GPU check shows with CT_CUDA_FAULT on a GPU.
 *
 * usage: cuda_sync_emu   (exit 0: every check passed)
 */
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------ the fake runtime */
typedef int cudaError_t;
typedef void *cudaStream_t;
enum { cudaSuccess = 0, cudaErrorInvalidConfiguration = 9, cudaErrorIllegalAddress = 700 };
static int launch_error;  /* what the next cudaGetLastError returns (then cleared) */
static int sticky_fault;  /* a fault every later wait reports, and every later call once a
                           * launch has happened after it (the GPU has run into it) */
static int launches_since_fault;
static cudaError_t cudaGetLastError() {
    int e = launch_error;
    launch_error = 0;
    if (!e && sticky_fault && launches_since_fault > 0) e = sticky_fault;
    return e;
}
static cudaError_t cudaStreamSynchronize(cudaStream_t) { return sticky_fault; }
static const char *cudaGetErrorString(cudaError_t e) {
    return e == cudaErrorIllegalAddress       ? "an illegal memory access was encountered"
           : e == cudaErrorInvalidConfiguration ? "invalid configuration argument"
                                                : "unknown error";
}

#include "backend/cuda/cuda_check.h"

static int injected;
void cuda_fault_inject(cuda_state *) {
    injected++;
    sticky_fault = cudaErrorIllegalAddress;
}

/* ------------------------------------------------------------ the checks */
static int fails = 0;
#define CHECK(c)                                                              \
    do {                                                                      \
        if (!(c)) {                                                           \
            fails++;                                                          \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); \
        }                                                                     \
    } while (0)

/* A launch of kernel name; faults: it writes where no memory is (the wait
 * finds out); bad: the launch itself is refused. Then the backend's check. */
static void launch(cuda_state *s, const char *name, bool faults = false, bool bad = false) {
    if (sticky_fault) launches_since_fault++;
    if (bad) launch_error = cudaErrorInvalidConfiguration;
    if (faults) sticky_fault = cudaErrorIllegalAddress;
    cuda_check_after(s, name);
}

static void fresh(cuda_state *s, int sync_each, const char *fault_after) {
    memset(s, 0, sizeof *s);
    s->device = 0;
    snprintf(s->name, sizeof s->name, "Fake GPU");
    s->sync_each = sync_each;
    snprintf(s->fault_after, sizeof s->fault_after, "%s", fault_after);
    launch_error = sticky_fault = injected = launches_since_fault = 0;
}

static void text(const cuda_state *s, char *msg, char *hint) {
    cuda_error_text(s, msg, 640, hint, 256);
}

int main() {
    static cuda_state s;
    char msg[640], hint[256];

    /* without CT_CUDA_SYNC: the fault of "layernorm_backward" surfaces at the
     * next launch or wait, which must not be blamed for it */
    fresh(&s, 0, "");
    launch(&s, "encoder_forward");
    launch(&s, "layernorm_backward", true);
    CHECK(s.err == 0); /* nothing known yet: launches return at once */
    cuda_check_wait(&s);
    CHECK(s.err == cudaErrorIllegalAddress);
    text(&s, msg, hint);
    CHECK(strstr(msg, "a kernel launched before synchronize: an illegal memory access") != NULL);
    CHECK(strstr(msg, "layernorm_backward") == NULL);
    CHECK(strstr(msg, "CUDA device 0 (Fake GPU)") != NULL);
    CHECK(strstr(hint, "CT_CUDA_SYNC=1") != NULL);
    fresh(&s, 0, "");
    launch(&s, "layernorm_backward", true);
    launch(&s, "gelu_backward"); /* the GPU has met the fault: this call reports it */
    text(&s, msg, hint);
    CHECK(strstr(msg, "a kernel launched before gelu_backward: an illegal memory access") != NULL);
    CHECK(strstr(msg, "layernorm_backward") == NULL);
    CHECK(strstr(hint, "CT_CUDA_SYNC=1") != NULL);

    /* with it: the kernel that faulted is named, and keeps the latch */
    fresh(&s, 1, "");
    launch(&s, "encoder_forward");
    CHECK(s.err == 0);
    launch(&s, "layernorm_backward", true);
    launch(&s, "gelu_backward");
    cuda_check_wait(&s);
    text(&s, msg, hint);
    CHECK(strstr(msg, "layernorm_backward: an illegal memory access") != NULL);
    CHECK(strstr(msg, "CT_CUDA_SYNC=1") != NULL);
    CHECK(strstr(msg, "gelu_backward") == NULL && strstr(msg, "synchronize") == NULL);
    CHECK(hint[0] == 0);

    /* a refused launch is named with or without it */
    fresh(&s, 0, "");
    launch(&s, "attention_forward", false, true);
    launch(&s, "matmul_forward");
    cuda_check_wait(&s);
    text(&s, msg, hint);
    CHECK(strstr(msg, "attention_forward: invalid configuration argument") != NULL);
    CHECK(hint[0] == 0);

    /* CT_CUDA_FAULT=NAME: a fault after exactly that launch, named with the
     * switch, found by the wait without it */
    fresh(&s, 1, "rmsnorm_forward");
    launch(&s, "rmsnorm_backward");
    CHECK(injected == 0 && s.err == 0);
    launch(&s, "rmsnorm_forward");
    CHECK(injected == 1);
    text(&s, msg, hint);
    CHECK(strstr(msg, "rmsnorm_forward: an illegal memory access") != NULL);
    fresh(&s, 0, "rmsnorm_forward");
    launch(&s, "rmsnorm_forward");
    CHECK(injected == 1 && s.err == 0);
    cuda_check_wait(&s);
    text(&s, msg, hint);
    CHECK(strstr(msg, "before synchronize:") != NULL && strstr(hint, "CT_CUDA_SYNC=1") != NULL);
    fresh(&s, 1, "no_such_kernel");
    launch(&s, "rmsnorm_forward");
    cuda_check_wait(&s);
    CHECK(injected == 0 && s.err == 0);

    /* a fault a runtime call reports (a download's wait) is not the call's */
    fresh(&s, 0, "");
    cuda_latch_state(&s, cudaErrorIllegalAddress, "download", "an illegal memory access");
    text(&s, msg, hint);
    CHECK(strstr(msg, "a kernel launched before download:") != NULL);
    CHECK(strstr(hint, "CT_CUDA_SYNC=1") != NULL);
    /* an error of the call itself is the call's */
    fresh(&s, 0, "");
    cuda_latch_state(&s, 2, "bf16 GEMM workspace", "out of memory");
    text(&s, msg, hint);
    CHECK(strstr(msg, ": bf16 GEMM workspace: out of memory") != NULL && hint[0] == 0);

    printf("cuda_sync_emu: %s\n", fails ? "FAILED" : "all checks passed");
    return fails ? 1 : 0;
}
