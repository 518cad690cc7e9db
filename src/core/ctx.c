/*
 * The context owns everything mutable the library needs: the kernel table, the
 * thread count (shared by our OpenMP loops and OpenBLAS's OpenMP build) and
 * the tagged allocation counters. Leaves out: a thread pool of our own (OpenMP
 * provides it).
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_SET */
#include "core/ctx.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>
#ifdef CT_USE_OPENMP
#include <omp.h>
#endif

struct ct_ctx {
    int n_threads;
    const ct_kernels *kernels;
    _Atomic int64_t current[CT_TAG_COUNT]; /* bytes */
    _Atomic int64_t peak[CT_TAG_COUNT];    /* bytes */
    _Atomic int64_t total_current;         /* bytes */
    _Atomic int64_t total_peak;            /* bytes */
};

/* Allocation header, one cache line before every block. */
typedef struct alloc_header {
    size_t bytes;
    int tag;
    uint32_t magic;
} alloc_header;
#define ALLOC_MAGIC 0xC7A11C8Du
#define ALLOC_HDR 64

const char *ct_tag_str(ct_tag t) {
    static const char *names[CT_TAG_COUNT] = {"params", "grads", "optim", "acts",
                                              "scratch", "data", "io", "other"};
    return (t >= 0 && t < CT_TAG_COUNT) ? names[t] : "?";
}

#ifdef CT_USE_OPENMP
/* Binds OpenMP thread i of an n-thread team to the i-th CPU of allowed. The
 * team's threads persist between parallel regions (libgomp keeps its pool), so
 * the binding holds for every later kernel and BLAS call. Best effort: a
 * refused binding leaves that thread free. */
static void pin_pool(const cpu_set_t *allowed, int n) {
    int cpus[CPU_SETSIZE], k = 0;
    for (int c = 0; c < CPU_SETSIZE && k < n; c++)
        if (CPU_ISSET(c, allowed)) cpus[k++] = c;
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

ct_ctx_params ct_ctx_params_default(void) {
    ct_ctx_params p = {0};
    p.n_threads = 0;
    p.backend = CT_BACKEND_CPU;
    p.pin_threads = true;
    return p;
}

ct_status ct_ctx_init(ct_ctx **out, const ct_ctx_params *params) {
    ct_ctx_params p = params ? *params : ct_ctx_params_default();
    *out = NULL;
    if (p.n_threads < 0) return CT_ERR(CT_ERR_ARG, "n_threads is %d, expected >= 0", p.n_threads);
    if (p.backend < 0 || p.backend >= CT_BACKEND_COUNT)
        return CT_ERR(CT_ERR_ARG, "unknown backend %d", (int)p.backend);
    ct_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return CT_ERR(CT_ERR_OOM, "out of memory allocating the context");
    cpu_set_t allowed;
    int n_allowed = 0;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) n_allowed = CPU_COUNT(&allowed);
    if (n_allowed < 1) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        n_allowed = cores > 0 ? (int)cores : 1;
        p.pin_threads = false;
    }
    int n = p.n_threads ? p.n_threads : n_allowed;
    ctx->n_threads = n;
    ctx->kernels = p.backend == CT_BACKEND_REF ? &ct_kernels_ref : &ct_kernels_cpu;
#ifdef CT_USE_OPENMP
    omp_set_num_threads(n);
    if (p.pin_threads && n <= n_allowed) pin_pool(&allowed, n);
#endif
    openblas_set_num_threads(n);
    *out = ctx;
    return CT_OK;
}

void ct_ctx_free(ct_ctx *ctx) { free(ctx); }

int ct_ctx_threads(const ct_ctx *ctx) { return ctx->n_threads; }

const ct_kernels *ct_ctx_kernels(const ct_ctx *ctx) { return ctx->kernels; }

void ct_ctx_set_kernels(ct_ctx *ctx, const ct_kernels *k) { ctx->kernels = k; }

void ct_ctx_memstats(const ct_ctx *ctx, ct_memstats *out) {
    for (int t = 0; t < CT_TAG_COUNT; t++) {
        out->current[t] = atomic_load(&ctx->current[t]);
        out->peak[t] = atomic_load(&ctx->peak[t]);
    }
    out->total_current = atomic_load(&ctx->total_current);
    out->total_peak = atomic_load(&ctx->total_peak);
}

static void raise_peak(_Atomic int64_t *peak, int64_t value) {
    int64_t old = atomic_load(peak);
    while (value > old && !atomic_compare_exchange_weak(peak, &old, value)) {
    }
}

void *ct_alloc(ct_ctx *ctx, size_t bytes, ct_tag tag) {
    if (tag < 0 || tag >= CT_TAG_COUNT) tag = CT_TAG_OTHER;
    if (bytes > SIZE_MAX - 2 * ALLOC_HDR) {
        CT_ERR(CT_ERR_OOM, "allocation of %zu bytes (%s) is too large", bytes, ct_tag_str(tag));
        return NULL;
    }
    size_t total = (bytes + ALLOC_HDR + 63) & ~(size_t)63;
    uint8_t *raw = aligned_alloc(64, total);
    if (!raw) {
        CT_ERR(CT_ERR_OOM, "out of memory allocating %zu bytes for %s", bytes, ct_tag_str(tag));
        return NULL;
    }
    memset(raw, 0, total);
    alloc_header *h = (alloc_header *)raw;
    h->bytes = bytes;
    h->tag = (int)tag;
    h->magic = ALLOC_MAGIC;
    if (ctx) {
        int64_t cur = atomic_fetch_add(&ctx->current[tag], (int64_t)bytes) + (int64_t)bytes;
        raise_peak(&ctx->peak[tag], cur);
        int64_t tot = atomic_fetch_add(&ctx->total_current, (int64_t)bytes) + (int64_t)bytes;
        raise_peak(&ctx->total_peak, tot);
    }
    return raw + ALLOC_HDR;
}

void ct_free(ct_ctx *ctx, void *p) {
    if (!p) return;
    alloc_header *h = (alloc_header *)((uint8_t *)p - ALLOC_HDR);
    CT_ASSERT(h->magic == ALLOC_MAGIC);
    if (ctx) {
        atomic_fetch_sub(&ctx->current[h->tag], (int64_t)h->bytes);
        atomic_fetch_sub(&ctx->total_current, (int64_t)h->bytes);
    }
    h->magic = 0;
    free(h);
}
