/*
 * The harness the kernel tests share (tests/kernels/test_*.c): a seeded rng,
 * pooled host buffers, error measures and the CHECK_CLOSE macros, central
 * finite differences, and the backends held to ref (under_test[] in harness.c:
 * adding a backend to the kernel tests is one line there) with the macros that
 * run an entry on each backend through its own buffers and compare it with ref.
 */
#ifndef CT_TESTS_KERNELS_HARNESS_H
#define CT_TESTS_KERNELS_HARNESS_H
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "ct_test.h"
#include "ctrain/core.h"

/* Tolerances, as max |got - want| / max |want| over a buffer. */
#define TOL_EXACT 1e-6 /* float result of a double-exact formula (one rounding or so) */
#define TOL_FD 1e-5    /* float kernel gradient vs double finite differences */
#define TOL_CPU 1e-5   /* a backend under test vs ref */

extern int verbose; /* CT_TEST_VERBOSE=1: print every measured error */

/* ------------------------------------------------------------ helpers */

/* xorshift64*: deterministic, identical on every platform. harness_init seeds it. */
void harness_seed(uint64_t seed);
uint64_t rng_next(void);
float rng_float(void); /* uniform in [-1, 1), exactly representable in float */
int rng_int(int n);

/* Every host buffer a case allocates is recorded and freed by pool_free(). */
void *pool_alloc(size_t bytes);
void pool_free(void);
float *falloc(size_t n);
double *dalloc(size_t n);
float *frand(size_t n, float scale);
float *fcopy(const float *x, size_t n);
float *ffill(size_t n, float value);
double *to_double(const float *x, size_t n);
/* got - offset, for gradients accumulated onto a pre-filled buffer. */
float *fsub(const float *got, float offset, size_t n);

/* max |got - want| / max |want| (infinite on NaN): a relative error that is not
 * thrown by entries near zero. *nmse gets sum (got - want)^2 / sum want^2. */
double rel_err(const float *got, const double *want, size_t n, double *nmse);
/* rel_err, printed with the NMSE when verbose. */
double compare(const char *what, const float *got, const double *want, size_t n, double tol);

#define CHECK_CLOSE_D(what, got, want, n, tol)                                           \
    do {                                                                                 \
        double err_ = compare((what), (got), (want), (n), (tol));                        \
        CHECK_MSG(err_ <= (tol), "%s: err %.3g > tol %.3g", (what), err_, (double)(tol)); \
    } while (0)

#define CHECK_CLOSE_F(what, got, want, n, tol) \
    CHECK_CLOSE_D(what, got, to_double((want), (n)), n, tol)

/* A backend's result against a double formula; a gradient, less the value its
 * buffer was pre-filled with, against finite differences. */
#define CHECK_EXACT(be, what, got, want, n) \
    CHECK_CLOSE_D(label((be), what " vs double"), (got), (want), (n), TOL_EXACT)
#define CHECK_FD(be, what, got, prefill, want, n) \
    CHECK_CLOSE_D(label((be), what " vs FD"), fsub((got), (prefill), (n)), (want), (n), TOL_FD)

int same_floats(const float *a, const float *b, size_t n);
/* n 16-bit values, all v (a NaN pattern shows an element left unwritten). Pooled. */
uint16_t *u16fill(size_t n, uint16_t v);
/* Whether got holds f rounded to bf16 (nearest even), bit for bit. */
int same_bf16_of(const uint16_t *got, const float *f, size_t n);
/* mlp_act_forward_out16 (act: CT_ACT16_*) on be, where it has it, over inp
 * (N x F, or N x 2F for the GLUs), against want32, the fp32 entry's output
 * on the same backend: its bits rounded, every element written. */
void check_act_out16(ct_backend *be, const char *what, const float *inp, const float *want32,
                     int N, int F, int act);

/* Positions (B,T) for rows that pack examples (see backend.h): row b's
 * example lengths cycle through lens[0..nlens), starting at lens[b % nlens];
 * the last example of a row is cut at T. Pooled. */
int32_t *pos_packed(int B, int T, const int *lens, int nlens);

/* sum(out * R) over n, then frees out: L for a double forward's out. */
double dot_loss(double *out, const double *R, size_t n);

/* Central differences of loss(ctx) with respect to each x[i], written to g (n).
 * x must be an array loss() reads; it is restored after each probe. */
typedef double (*loss_fn)(void *ctx);
void fd_grad(double *g, double *x, size_t n, loss_fn loss, void *ctx);

/* ------------------------------------------------------------ the harness */

extern size_t n_under_test; /* the length of under_test[] in harness.c */
#define N_UNDER_TEST n_under_test
extern ct_ctx *ctx;
extern ct_backend bes[];            /* 1 + N_UNDER_TEST: bes[0] is ref, the truth */
extern ct_backend *const ref_be;    /* &bes[0] */

/* Seeds the rng, reads CT_TEST_VERBOSE, and makes a context and its backends,
 * ref first, with the context's thread count. */
ct_status harness_init(uint64_t seed);
/* Checks that every device buffer was freed, then frees the rest. */
void backends_free(void);

/* ct_test.h's counters are per translation unit: harness.c's checks (the
 * backends, synchronize, vs ref) are added to the test file's here. */
void harness_counts(int *checks, int *failures);

/* backends_free, then ct_test_result over the test file's checks and harness.c's. */
static inline int harness_finish(const char *name) {
    int checks = 0, failures = 0;
    backends_free();
    harness_counts(&checks, &failures);
    ct_test_checks += checks;
    ct_test_failures += failures;
    return ct_test_result(name);
}

/* Every backend, ref first; the backends under test only. */
#define FOR_ALL(be) for (ct_backend *be = bes; be < bes + 1 + N_UNDER_TEST; be++)
#define FOR_TESTED(be) for (ct_backend *be = bes + 1; be < bes + 1 + N_UNDER_TEST; be++)

/* "<backend name> <what>", in a buffer the next call overwrites. */
const char *label(const ct_backend *be, const char *what);

void *dev_alloc(ct_backend *be, size_t bytes);
/* A device copy of host src (bytes); a pooled host copy of device src. */
void *dev_up(ct_backend *be, const void *src, size_t bytes);
void *dev_down(ct_backend *be, const void *src, size_t bytes);

/* One argument of an entry: a host array uploaded to a fresh device buffer
 * before the call and downloaded after it (a NULL argument is written as NULL
 * in the call). */
typedef struct karg {
    const char *name;  /* an output VS_REF compares, or NULL */
    const void *host;  /* the contents before the call */
    size_t bytes;
    void *dev;         /* the device copy, during the call */
    float *got;        /* the contents after the call (pooled host memory) */
    const float *want; /* ref's contents after the call (VS_REF) */
} karg;
#define ARG(p, n) {.host = (p), .bytes = (size_t)(n) * sizeof *(p)}
#define OUT(what, p, n) {.name = (what), .host = (p), .bytes = (size_t)(n) * sizeof *(p)}
#define NARGS(a) (sizeof(a) / sizeof *(a))

void args_upload(ct_backend *be, karg *a, size_t n);
void args_download(ct_backend *be, karg *a, size_t n);

/* Runs call (entries of be over args[k].dev) on device copies of the host
 * arrays args[k].host; afterwards args[k].got holds their contents. */
#define RUN(be, args, call)                        \
    do {                                           \
        args_upload((be), (args), NARGS(args));    \
        call;                                      \
        args_download((be), (args), NARGS(args));  \
    } while (0)

/* Ref's results for the named args become the truth; another backend's are
 * compared with them. */
void check_vs_ref(ct_backend *be, karg *a, size_t n);

/* RUN on ref, then on each backend under test against ref's named results. */
#define VS_REF(be, args, call)               \
    FOR_ALL(be) {                            \
        RUN(be, args, call);                 \
        check_vs_ref(be, args, NARGS(args)); \
    }

#endif
