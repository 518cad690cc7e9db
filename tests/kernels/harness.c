/*
 * The kernel tests' shared harness (see harness.h): the backends under test,
 * the rng, the host pool, error measures, finite differences, and the device
 * buffers each entry runs on.
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"

/* The backends held to ref. Adding a backend to the kernel tests is one line
 * here. With CT_TEST_GPU=1 (the `gpu` ctest label, `make test-gpu`) the
 * CUDA backend alone is held to ref instead; without a GPU (or a build
 * without CUDA) that run says why and exits 77, which ctest reports as
 * skipped, or fails when CT_GPU_REQUIRED=1 asks for a GPU. */
static const ct_backend_kind under_test_cpu[] = {
    CT_BACKEND_CPU,
    CT_BACKEND_SIM,
};
static const ct_backend_kind under_test_gpu[] = {
    CT_BACKEND_CUDA,
};
static const ct_backend_kind *under_test = under_test_cpu;

int verbose = 0;

/* ------------------------------------------------------------ helpers */

static uint64_t rng_state; /* harness_seed sets it, nonzero */

void harness_seed(uint64_t seed) { rng_state = seed; }

uint64_t rng_next(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

float rng_float(void) {
    return (float)((rng_next() >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

int rng_int(int n) { return (int)(rng_next() % (uint64_t)n); }

static void *pool[4096];
static int pool_len = 0;

void *pool_alloc(size_t bytes) {
    void *p = pool_len < (int)(sizeof pool / sizeof *pool) ? calloc(bytes ? bytes : 1, 1) : NULL;
    if (!p) {
        fprintf(stderr, "test pool exhausted, or out of memory\n");
        abort();
    }
    pool[pool_len++] = p;
    return p;
}

void pool_free(void) {
    while (pool_len > 0) free(pool[--pool_len]);
}

float *falloc(size_t n) { return pool_alloc(n * sizeof(float)); }
double *dalloc(size_t n) { return pool_alloc(n * sizeof(double)); }

float *frand(size_t n, float scale) {
    float *x = falloc(n);
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_float();
    return x;
}

float *fcopy(const float *x, size_t n) {
    float *y = falloc(n);
    memcpy(y, x, n * sizeof(float));
    return y;
}

float *ffill(size_t n, float value) {
    float *x = falloc(n);
    for (size_t i = 0; i < n; i++) x[i] = value;
    return x;
}

double *to_double(const float *x, size_t n) {
    double *y = dalloc(n);
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

float *fsub(const float *got, float offset, size_t n) {
    float *y = falloc(n);
    for (size_t i = 0; i < n; i++) y[i] = got[i] - offset;
    return y;
}

double rel_err(const float *got, const double *want, size_t n, double *nmse) {
    double maxdiff = 0.0, maxwant = 0.0, se = 0.0, sw = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(got[i] - want[i]);
        if (isnan(d)) maxdiff = INFINITY;
        if (d > maxdiff) maxdiff = d;
        if (fabs(want[i]) > maxwant) maxwant = fabs(want[i]);
        se += d * d;
        sw += want[i] * want[i];
    }
    if (nmse) *nmse = se / (sw > 0.0 ? sw : 1.0);
    return maxdiff / (maxwant > 0.0 ? maxwant : 1.0);
}

double compare(const char *what, const float *got, const double *want, size_t n, double tol) {
    double nmse = 0.0, err = rel_err(got, want, n, &nmse);
    if (verbose) printf("  %-50s err %.2e  nmse %.2e  (tol %.0e)\n", what, err, nmse, tol);
    return err;
}

int same_floats(const float *a, const float *b, size_t n) {
    return memcmp(a, b, n * sizeof(float)) == 0;
}

uint16_t *u16fill(size_t n, uint16_t v) {
    uint16_t *x = pool_alloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = v;
    return x;
}

int same_bf16_of(const uint16_t *got, const float *f, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != ct_f32_to_bf16(f[i])) return 0;
    return 1;
}

void check_act_out16(ct_backend *be, const char *what, const float *inp, const float *want32,
                     int N, int F, int act) {
    if (!be->i->mlp_act_forward_out16) return;
    size_t NF = (size_t)N * F, nin = act == CT_ACT16_GELU ? NF : 2 * NF;
    karg h[] = {ARG(u16fill(NF, 0x7fc1), NF), ARG(inp, nin)};
    RUN(be, h, be->i->mlp_act_forward_out16(be, h[0].dev, h[1].dev, N, F, act));
    CHECK_MSG(same_bf16_of((const uint16_t *)h[0].got, want32, NF), "%s", label(be, what));
}

int32_t *pos_packed(int B, int T, const int *lens, int nlens) {
    int32_t *pos = pool_alloc((size_t)B * T * sizeof(int32_t));
    for (int b = 0; b < B; b++) {
        int k = b % nlens, left = lens[k];
        for (int t = 0; t < T; t++) {
            if (left == 0) left = lens[k = (k + 1) % nlens];
            pos[(size_t)b * T + t] = t == 0 || left == lens[k] ? 0 : pos[(size_t)b * T + t - 1] + 1;
            left--;
        }
    }
    return pos;
}

double dot_loss(double *out, const double *R, size_t n) {
    double L = 0.0;
    for (size_t i = 0; i < n; i++) L += out[i] * R[i];
    free(out);
    return L;
}

void fd_grad(double *g, double *x, size_t n, loss_fn loss, void *loss_ctx) {
    const double h = 1e-5;
    for (size_t i = 0; i < n; i++) {
        double xi = x[i];
        x[i] = xi + h;
        double lp = loss(loss_ctx);
        x[i] = xi - h;
        double lm = loss(loss_ctx);
        x[i] = xi;
        g[i] = (lp - lm) / (2.0 * h);
    }
}

/* ------------------------------------------------------------ the harness */

size_t n_under_test = sizeof under_test_cpu / sizeof *under_test_cpu;
ct_ctx *ctx;
ct_backend bes[1 + sizeof under_test_cpu / sizeof *under_test_cpu];
ct_backend *const ref_be = &bes[0];

ct_status harness_init(uint64_t seed) {
    const char *env = getenv("CT_TEST_VERBOSE");
    verbose = env && env[0] && env[0] != '0';
    harness_seed(seed);
    const char *gpu = getenv("CT_TEST_GPU");
    bool on_gpu = gpu && gpu[0] && gpu[0] != '0';
    if (on_gpu) {
        under_test = under_test_gpu;
        n_under_test = sizeof under_test_gpu / sizeof *under_test_gpu;
    }
    ct_ctx_params cp = ct_ctx_params_default();
    cp.backend = CT_BACKEND_REF;
    cp.pin_threads = false;
    ct_status st = ct_ctx_init(&ctx, &cp);
    for (size_t i = 0; st == CT_OK && i <= N_UNDER_TEST; i++)
        st = ct_backend_init(&bes[i], ctx, i ? under_test[i - 1] : CT_BACKEND_REF,
                             ct_ctx_threads(ctx), false);
    if (st && on_gpu) {
        const char *req = getenv("CT_GPU_REQUIRED");
        bool required = req && req[0] && req[0] != '0';
        printf("%s: the CUDA backend cannot run here: %s\n", required ? "FAIL" : "skip",
               ct_last_error());
        exit(required ? 1 : 77);
    }
    CHECK(st != CT_OK || (!strcmp(ref_be->i->name, "ref") && ref_be->host_visible));
    return st;
}

void backends_free(void) {
    /* every buffer a test made is freed; what a backend keeps for itself
     * (cuda's pinned upload slots, counted under io, which the tests use for
     * host staging only, freed at once) goes with the backend */
    ct_memstats ms;
    ct_ctx_memstats(ctx, &ms);
    int64_t own = ms.current[CT_TAG_IO];
    CHECK_MSG(ms.total_current - own == 0, "%lld bytes still allocated",
              (long long)(ms.total_current - own));
    for (size_t i = 0; i <= N_UNDER_TEST; i++) ct_backend_free(&bes[i]);
    ct_ctx_memstats(ctx, &ms);
    CHECK_MSG(ms.total_current == 0, "%lld bytes still allocated after freeing the backends",
              (long long)ms.total_current);
    ct_ctx_free(ctx);
}

void harness_counts(int *checks, int *failures) {
    *checks = ct_test_checks;
    *failures = ct_test_failures;
}

static char label_buf[160];

const char *label(const ct_backend *be, const char *what) {
    snprintf(label_buf, sizeof label_buf, "%s %s", be->i->name, what);
    return label_buf;
}

void *dev_alloc(ct_backend *be, size_t bytes) {
    void *p = be->i->buf_alloc(be, bytes, CT_TAG_SCRATCH);
    if (!p) {
        fprintf(stderr, "%s buf_alloc(%zu): %s\n", be->i->name, bytes, ct_last_error());
        abort();
    }
    return p;
}

void *dev_up(ct_backend *be, const void *src, size_t bytes) {
    void *p = dev_alloc(be, bytes);
    ct_be_upload(be, p, src, bytes);
    return p;
}

void *dev_down(ct_backend *be, const void *src, size_t bytes) {
    void *p = pool_alloc(bytes);
    ct_be_download(be, p, src, bytes);
    return p;
}

void args_upload(ct_backend *be, karg *a, size_t n) {
    for (size_t k = 0; k < n; k++) a[k].dev = a[k].host ? dev_up(be, a[k].host, a[k].bytes) : NULL;
}

void args_download(ct_backend *be, karg *a, size_t n) {
    ct_status st = be->i->synchronize(be);
    if (st != CT_OK) CHECK_MSG(st == CT_OK, "%s synchronize: %s", be->i->name, ct_status_str(st));
    for (size_t k = 0; k < n; k++) {
        a[k].got = a[k].dev ? dev_down(be, a[k].dev, a[k].bytes) : NULL;
        be->i->buf_free(be, a[k].dev);
        a[k].dev = NULL;
    }
}

void check_vs_ref(ct_backend *be, karg *a, size_t n) {
    char what[160];
    for (size_t k = 0; k < n; k++) {
        if (!a[k].name) continue;
        if (be == ref_be) {
            a[k].want = a[k].got;
            continue;
        }
        snprintf(what, sizeof what, "%s vs ref %s", be->i->name, a[k].name);
        CHECK_CLOSE_F(what, a[k].got, a[k].want, a[k].bytes / sizeof(float), TOL_CPU);
    }
}
