/*
 * The context owns everything mutable the library needs: the backend (and a
 * wrapper put in front of it), the thread count, the trace recorder while
 * tracing, and the tagged allocation counters behind ct_alloc and the
 * backends' device buffers. It lives beside the backends because it makes
 * one. Leaves out: a thread pool of our own (the cpu backend's OpenMP pool).
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "backend/ctx.h"

#include "backend/device.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct ct_ctx {
    int n_threads;
    ct_backend be;      /* the backend this context made */
    ct_backend *active; /* what models and optimizers use: be, or a wrapper of it */
    ct_trace *trace;    /* borrowed; NULL when not tracing */
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

static const char *const backend_names[CT_BACKEND_COUNT] = {"cpu", "ref", "sim", "cuda"};

const char *ct_backend_kind_name(ct_backend_kind k) {
    return (k >= 0 && k < CT_BACKEND_COUNT) ? backend_names[k] : "?";
}

int ct_backend_kind_of(const char *name) {
    for (int k = 0; k < CT_BACKEND_COUNT; k++)
        if (name && !strcmp(name, backend_names[k])) return k;
    return -1;
}

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
    ct_status st = ct_backend_init_device(&ctx->be, ctx, p.backend, p.device, n,
                                          p.pin_threads && n <= n_allowed);
    if (st) {
        free(ctx);
        return st;
    }
    if (p.sim_device_memory) ct_backend_sim_set_capacity(&ctx->be, p.sim_device_memory);
    ctx->active = &ctx->be;
    *out = ctx;
    return CT_OK;
}

void ct_ctx_free(ct_ctx *ctx) {
    if (!ctx) return;
    ct_backend_free(&ctx->be);
    free(ctx);
}

int ct_ctx_threads(const ct_ctx *ctx) { return ctx->n_threads; }

ct_backend *ct_ctx_backend(ct_ctx *ctx) { return ctx->active; }

ct_backend *ct_ctx_base_backend(ct_ctx *ctx) { return &ctx->be; }

void ct_ctx_set_backend(ct_ctx *ctx, ct_backend *be) { ctx->active = be ? be : &ctx->be; }

ct_trace *ct_ctx_trace(const ct_ctx *ctx) { return ctx->trace; }

void ct_ctx_set_trace(ct_ctx *ctx, ct_trace *tr) { ctx->trace = tr; }

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

void ct_ctx_count(ct_ctx *ctx, ct_tag tag, int64_t bytes) {
    if (!ctx) return;
    if (tag < 0 || tag >= CT_TAG_COUNT) tag = CT_TAG_OTHER;
    int64_t cur = atomic_fetch_add(&ctx->current[tag], bytes) + bytes;
    int64_t tot = atomic_fetch_add(&ctx->total_current, bytes) + bytes;
    if (bytes > 0) {
        raise_peak(&ctx->peak[tag], cur);
        raise_peak(&ctx->total_peak, tot);
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
    ct_ctx_count(ctx, tag, (int64_t)bytes);
    return raw + ALLOC_HDR;
}

size_t ct_alloc_size(const void *p) {
    if (!p) return 0;
    const alloc_header *h = (const alloc_header *)((const uint8_t *)p - ALLOC_HDR);
    CT_ASSERT(h->magic == ALLOC_MAGIC);
    return h->bytes;
}

void ct_free(ct_ctx *ctx, void *p) {
    if (!p) return;
    alloc_header *h = (alloc_header *)((uint8_t *)p - ALLOC_HDR);
    CT_ASSERT(h->magic == ALLOC_MAGIC);
    ct_ctx_count(ctx, (ct_tag)h->tag, -(int64_t)h->bytes);
    h->magic = 0;
    free(h);
}
