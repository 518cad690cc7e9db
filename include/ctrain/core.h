/*
 * ctrain core: status codes and error context, logging, the context object that
 * owns threads and allocator statistics, tagged allocation, arenas and the
 * seeded RNG (mt19937, bit-compatible with torch.manual_seed on CPU).
 * Leaves out: anything model- or file-specific.
 */
#ifndef CT_CORE_H
#define CT_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CT_API __attribute__((visibility("default")))
#define CT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CT_API
#define CT_PRINTF(a, b)
#endif

#define CT_VERSION "0.1.0"
CT_API const char *ct_version(void);

#define CT_PI 3.14159265358979323846

/* ---------------------------------------------------------------- errors */

typedef enum ct_status {
    CT_OK = 0,
    CT_ERR_IO = -1,      /* a file could not be opened, read or written */
    CT_ERR_OOM = -2,     /* an allocation failed or would exceed a limit */
    CT_ERR_FORMAT = -3,  /* a file's content is not what its format says */
    CT_ERR_ARG = -4,     /* a caller or user value is invalid */
    CT_ERR_NUMERIC = -5, /* non-finite values where finite ones are required */
    CT_ERR_DIST = -6,    /* a distributed-run failure */
} ct_status;

/* Name of a status code ("io", "format", ...). Never NULL. */
CT_API const char *ct_status_str(ct_status s);

/* Record an error in this thread's error slot and return `code`.
 * Use through CT_ERR so the site's file:line is recorded. Thread-safe
 * (the slot is thread-local). */
CT_API ct_status ct_error_set(ct_status code, const char *file, int line,
                              const char *fmt, ...) CT_PRINTF(4, 5);
#define CT_ERR(code, ...) ct_error_set((code), __FILE__, __LINE__, __VA_ARGS__)
/* Attach a hint ("what to do about it") to the last error. */
CT_API void ct_error_hint(const char *fmt, ...) CT_PRINTF(1, 2);
/* Prefix the last error message with context, e.g. the file being loaded. */
CT_API void ct_error_prefix(const char *fmt, ...) CT_PRINTF(1, 2);
CT_API const char *ct_last_error(void); /* "" when none */
CT_API const char *ct_last_hint(void);  /* "" when none */
CT_API const char *ct_last_site(void);  /* "file.c:123" of the error site */
CT_API ct_status ct_last_status(void);
CT_API void ct_error_clear(void);

/* Broken invariants only (never user or file data): calls the abort handler. */
typedef void (*ct_abort_fn)(const char *msg);
CT_API void ct_set_abort_handler(ct_abort_fn fn); /* process-wide */
CT_API void ct_abort(const char *file, int line, const char *cond);
#define CT_ASSERT(x) ((x) ? (void)0 : ct_abort(__FILE__, __LINE__, #x))

/* ---------------------------------------------------------------- logging */

typedef enum ct_log_level {
    CT_LOG_DEBUG = 0,
    CT_LOG_INFO = 1,
    CT_LOG_WARN = 2,
    CT_LOG_ERROR = 3,
    CT_LOG_COUNT
} ct_log_level;
typedef void (*ct_log_fn)(ct_log_level level, const char *msg, void *user);
/* Process-wide log sink; NULL restores the default (stderr, INFO and up). */
CT_API void ct_log_set(ct_log_fn fn, void *user);
CT_API void ct_log(ct_log_level level, const char *fmt, ...) CT_PRINTF(2, 3);

/* ---------------------------------------------------------------- context */

typedef enum ct_tag {
    CT_TAG_PARAMS = 0,
    CT_TAG_GRADS = 1,
    CT_TAG_OPTIM = 2,
    CT_TAG_ACTS = 3,
    CT_TAG_SCRATCH = 4,
    CT_TAG_DATA = 5,
    CT_TAG_IO = 6,
    CT_TAG_OTHER = 7,
    CT_TAG_COUNT
} ct_tag;
CT_API const char *ct_tag_str(ct_tag t);

/* The backends a context can run on (run.device). */
typedef enum ct_backend_kind {
    CT_BACKEND_CPU = 0, /* OpenMP + BLAS kernels */
    CT_BACKEND_REF = 1, /* plain scalar references */
    CT_BACKEND_SIM = 2, /* ref kernels on memory the host cannot dereference (tests) */
    CT_BACKEND_CUDA = 3, /* an NVIDIA GPU (builds with the CUDA backend) */
    CT_BACKEND_COUNT
} ct_backend_kind;
/* "cpu", "ref", "sim", "cuda"; "?" outside the enum. Static strings. */
CT_API const char *ct_backend_kind_name(ct_backend_kind k);
/* The kind named name (a run.device word); -1 when none is. */
CT_API int ct_backend_kind_of(const char *name);
/* Whether this build has the backend of kind k (cuda: built with the CUDA
 * toolkit; whether a GPU is present is ct_ctx_init's to find out). */
CT_API bool ct_backend_built(ct_backend_kind k);
/* The CUDA devices the driver sees (starts the CUDA runtime: call it only
 * where a GPU matters); the first one's name into name. 0 with the driver's
 * reason in why when there is none; -1 when the build has no CUDA backend. */
CT_API int ct_cuda_probe(char *name, size_t name_size, char *why, size_t why_size);

typedef struct ct_ctx_params {
    int n_threads;           /* 0: all available cores */
    ct_backend_kind backend; /* where tensors live and kernels run */
    int device;              /* CT_BACKEND_CUDA: the GPU's index (run.device cuda:N) */
    bool pin_threads;   /* pin OpenMP (and so BLAS) threads to cores, one each;
                           default on when there are no more threads than cores */
    size_t sim_device_memory; /* CT_BACKEND_SIM: the device memory it simulates, bytes
                               * (0: no limit) */
} ct_ctx_params;
CT_API ct_ctx_params ct_ctx_params_default(void);

typedef struct ct_ctx ct_ctx; /* opaque: the backend, threads, allocator stats */

/* Create a context. Returns owned *out; release with ct_ctx_free.
 * Sets the OpenMP and BLAS thread counts to params->n_threads (0: the CPUs
 * this process may run on) and, with pin_threads, binds OpenMP thread i to the
 * i-th allowed CPU. OpenBLAS's OpenMP build runs on the same threads, so one
 * pool serves both and nothing oversubscribes the cores. */
CT_API ct_status ct_ctx_init(ct_ctx **out, const ct_ctx_params *params);
CT_API void ct_ctx_free(ct_ctx *ctx); /* NULL is fine */
CT_API int ct_ctx_threads(const ct_ctx *ctx);

typedef struct ct_memstats {
    int64_t current[CT_TAG_COUNT]; /* bytes live now, per tag */
    int64_t peak[CT_TAG_COUNT];    /* high-water mark, per tag */
    int64_t total_current;
    int64_t total_peak;
} ct_memstats;
CT_API void ct_ctx_memstats(const ct_ctx *ctx, ct_memstats *out);

/* Tagged, counted, 64-byte aligned, zero-filled allocation. Returns NULL and
 * sets CT_ERR_OOM on failure. Release with ct_free (NULL is fine). */
CT_API void *ct_alloc(ct_ctx *ctx, size_t bytes, ct_tag tag);
CT_API void ct_free(ct_ctx *ctx, void *p);

/* ---------------------------------------------------------------- arena */

/* Bump allocator over one block; 64-byte aligned; overflow-checked. */
typedef struct ct_arena {
    uint8_t *base;
    size_t size; /* bytes */
    size_t used; /* bytes */
    size_t peak; /* bytes */
    ct_tag tag;
    bool owned; /* base came from ct_alloc */
} ct_arena;
CT_API ct_status ct_arena_init(ct_arena *a, ct_ctx *ctx, size_t bytes, ct_tag tag);
/* Borrow caller memory (must outlive the arena). */
CT_API void ct_arena_wrap(ct_arena *a, void *mem, size_t bytes, ct_tag tag);
/* NULL and CT_ERR_OOM when the arena is full. */
CT_API void *ct_arena_alloc(ct_arena *a, size_t bytes);
CT_API size_t ct_arena_mark(const ct_arena *a);
CT_API void ct_arena_reset(ct_arena *a, size_t mark);
CT_API void ct_arena_free(ct_arena *a, ct_ctx *ctx);
/* Bytes ct_arena_alloc(bytes) consumes (rounded up to 64). */
CT_API size_t ct_arena_round(size_t bytes);

/* ---------------------------------------------------------------- rng */

/* mt19937 with torch's CPU float sampling, so that ct_rng_init(s) followed by
 * ct_rng_normal matches torch.manual_seed(s); torch.empty(n).normal_(). */
typedef struct ct_rng {
    uint32_t state[624];
    int index;
    bool has_next_normal; /* torch caches the second Box-Muller sample */
    double next_normal;
} ct_rng;
CT_API void ct_rng_init(ct_rng *r, uint64_t seed);
CT_API uint32_t ct_rng_u32(ct_rng *r);
CT_API float ct_rng_float(ct_rng *r);   /* [0,1), 24 random bits */
CT_API double ct_rng_double(ct_rng *r); /* [0,1), 53 random bits */
CT_API void ct_rng_normal(ct_rng *r, float *out, size_t n, float mean, float std);

/* ---------------------------------------------------------------- time */
CT_API double ct_time_s(void); /* monotonic seconds */

#ifdef __cplusplus
}
#endif
#endif
