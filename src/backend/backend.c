/*
 * The registry of backends: ct_backend_init fills a ct_backend for a kind.
 * The host-side thread pool belongs here: the cpu kernels, OpenBLAS's OpenMP
 * build and the library's own OpenMP loops (bf16 arrays, data preparation)
 * share one pool, sized and pinned once when the backend is made.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_SET */
#include "backend/backend.h"

#include "backend/cpu/gemm.h"
#include "backend/sim/sim.h"
#ifdef CT_USE_CUDA
#include "backend/cuda/cuda_int.h"
#endif

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#ifdef CT_USE_OPENMP
#include <omp.h>
#endif

#ifdef CT_USE_OPENMP
/* Binds OpenMP thread i of an n-thread team to the i-th allowed CPU. The
 * team's threads persist between parallel regions (libgomp keeps its pool), so
 * the binding holds for every later kernel and BLAS call. Best effort: a
 * refused binding leaves that thread free. */
static void pin_pool(int n) {
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
    int cpus[CPU_SETSIZE], k = 0;
    for (int c = 0; c < CPU_SETSIZE && k < n; c++)
        if (CPU_ISSET(c, &allowed)) cpus[k++] = c;
#pragma omp parallel num_threads(n)
    {
        int i = omp_get_thread_num();
        if (i < k) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(cpus[i], &one);
            (void)sched_setaffinity(0, sizeof one, &one);
        }
    }
}
#endif

ct_status ct_backend_init(ct_backend *be, ct_ctx *ctx, ct_backend_kind kind, int n_threads,
                          bool pin) {
    return ct_backend_init_device(be, ctx, kind, 0, n_threads, pin);
}

bool ct_backend_built(ct_backend_kind k) {
#ifdef CT_USE_CUDA
    if (k == CT_BACKEND_CUDA) return true;
#endif
    return k >= 0 && k < CT_BACKEND_CUDA;
}

int ct_cuda_probe(char *name, size_t name_size, char *why, size_t why_size) {
    if (name && name_size) name[0] = 0;
    if (why && why_size) why[0] = 0;
#ifdef CT_USE_CUDA
    int n = ct_cuda_device_count(why, why_size);
    if (n > 0 && name) ct_cuda_device_name(0, name, name_size);
    return n;
#else
    if (why) snprintf(why, why_size, "this ctrain was built without the CUDA backend");
    return -1;
#endif
}

/* A pool thread's buffer (ct_backend_thread_buf). */
struct ct_thread_buf {
    float *p;
    size_t n; /* floats */
};

ct_status ct_backend_init_device(ct_backend *be, ct_ctx *ctx, ct_backend_kind kind, int device,
                                 int n_threads, bool pin) {
    memset(be, 0, sizeof *be);
    switch (kind) {
    case CT_BACKEND_CPU: be->i = &ct_backend_cpu_i; break;
    case CT_BACKEND_REF: be->i = &ct_backend_ref_i; break;
    case CT_BACKEND_SIM: be->i = &ct_backend_sim_i; break;
    case CT_BACKEND_CUDA: {
#ifdef CT_USE_CUDA
        be->i = &ct_backend_cuda_i;
        break;
#else
        ct_status st = CT_ERR(CT_ERR_ARG, "run.device = cuda:%d: no CUDA device: this ctrain "
                              "was built without the CUDA backend", device);
        ct_error_hint("build where the CUDA toolkit is (nvcc found, CT_CUDA on), or train on the "
                      "CPU with run.device=cpu");
        return st;
#endif
    }
    default: return CT_ERR(CT_ERR_ARG, "unknown backend %d", (int)kind);
    }
    be->ctx = ctx;
    be->host_visible = kind != CT_BACKEND_SIM && kind != CT_BACKEND_CUDA;
    be->queued = !be->host_visible;
    be->n_threads = n_threads > 0 ? n_threads : 1;
    be->att_bq = 64;
    be->att_bk = 128;
    be->gemm = ct_gemm_lib_of("auto"); /* run.gemm's default, auto (see gemm.h) */
    /* every kind runs host code on the pool (the sim and ref kernels are
     * serial, the bf16 converters and data preparation are not) */
#ifdef CT_USE_OPENMP
    omp_set_num_threads(be->n_threads);
    if (pin) pin_pool(be->n_threads);
#else
    (void)pin;
#endif
    openblas_set_num_threads(be->n_threads);
    be->tbuf = calloc((size_t)be->n_threads, sizeof *be->tbuf); /* NULL: kernels do without */
    if (kind == CT_BACKEND_SIM) {
        ct_status st = ct_sim_init(be);
        if (st) {
            free(be->tbuf);
            memset(be, 0, sizeof *be);
            return st;
        }
    }
#ifdef CT_USE_CUDA
    if (kind == CT_BACKEND_CUDA) {
        ct_status st = ct_cuda_init(be, device);
        if (st) {
            free(be->tbuf);
            memset(be, 0, sizeof *be);
        }
        return st;
    }
#else
    (void)device;
#endif
    return CT_OK;
}

float *ct_backend_thread_buf(ct_backend *be, size_t n) {
    int t = 0;
#ifdef CT_USE_OPENMP
    t = omp_get_thread_num();
#endif
    if (!be->tbuf || t >= be->n_threads) return NULL;
    struct ct_thread_buf *b = &be->tbuf[t];
    if (b->n < n) {
        free(b->p);
        /* cache-line aligned: the vector kernels' rows start on one */
        void *p = NULL;
        b->p = posix_memalign(&p, 64, n * sizeof(float)) ? NULL : p;
        b->n = b->p ? n : 0;
    }
    return b->p;
}

bool ct_backend_thread_bufs_ready(ct_backend *be, size_t n) {
    int ok = 1;
#ifdef CT_USE_OPENMP
#pragma omp parallel reduction(&& : ok)
#endif
    ok = ct_backend_thread_buf(be, n) != NULL;
    return ok;
}

void ct_backend_free(ct_backend *be) {
    if (!be) return;
#ifdef CT_USE_CUDA
    if (be->i == &ct_backend_cuda_i) ct_cuda_free(be);
#endif
    if (be->i == &ct_backend_sim_i) ct_sim_free(be);
    if (be->tbuf)
        for (int t = 0; t < be->n_threads; t++) free(be->tbuf[t].p);
    free(be->tbuf);
    memset(be, 0, sizeof *be);
}

int ct_backend_head16_ld(ct_backend *be, int V) {
    const ct_backend_i *k = be->i;
    if (!k->matmul_forward_bf16_out16 || !k->crossentropy_forward_bf16 ||
        !k->matmul_backward_bf16_dout16 || V <= 0)
        return 0;
    if (k->head16_ld) return k->head16_ld(be, V);
    return (V + CT_VOCAB_PAD - 1) / CT_VOCAB_PAD * CT_VOCAB_PAD;
}

int ct_backend_set_gemm(ct_backend *be, const char *name) {
    int lib = ct_gemm_lib_of(name);
    if (lib < 0) return -1;
    be->gemm = lib;
    return 0;
}

int ct_backend_set_tiles(ct_backend *be, int bq, int bk) {
    if (bq < 1 || bq > CT_ATT_BQ_MAX || bk < 1 || bk > CT_ATT_BK_MAX) return -1;
    be->att_bq = bq;
    be->att_bk = bk;
    return 0;
}
