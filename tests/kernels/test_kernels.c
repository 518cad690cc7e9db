/*
 * Kernel tests. Each table (ref and cpu) is checked against double-precision
 * forwards written here and its backwards against central finite differences of
 * them (loss L = sum(out * R), so dout = R, with gradient buffers pre-filled to
 * check that backwards add). Attention is checked against a naive T x T softmax,
 * decode against the forward's rows, AdamW against torch's formula over 3 steps.
 * Then cpu is checked against ref on random odd shapes, two or more per op.
 * Set CT_TEST_VERBOSE=1 to print every measured error.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ct_test.h"
#include "ctrain/core.h"
#include "kernels/kernels.h"

/* Tolerances, as max |got - want| / max |want| over a buffer. */
#define TOL_EXACT 1e-6 /* float result of a double-exact formula (one rounding or so) */
#define TOL_FD 1e-5    /* float kernel gradient vs double finite differences */
#define TOL_CPU 1e-5   /* cpu table vs ref table */

static int verbose = 0;

/* ------------------------------------------------------------ helpers */

/* xorshift64*: deterministic, identical on every platform. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;

static uint64_t rng_next(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

/* Uniform in [-1, 1), exactly representable in float. */
static float rng_float(void) {
    return (float)((rng_next() >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static int rng_int(int n) { return (int)(rng_next() % (uint64_t)n); }

/* Every buffer a test allocates is recorded here and freed by pool_free(). */
static void *pool[256];
static int pool_len = 0;

static void *pool_alloc(size_t bytes) {
    if (pool_len == (int)(sizeof(pool) / sizeof(pool[0]))) {
        fprintf(stderr, "test pool exhausted\n");
        abort();
    }
    void *p = calloc(bytes ? bytes : 1, 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        abort();
    }
    pool[pool_len++] = p;
    return p;
}

static void pool_free(void) {
    while (pool_len > 0) free(pool[--pool_len]);
}

static float *falloc(size_t n) { return pool_alloc(n * sizeof(float)); }
static double *dalloc(size_t n) { return pool_alloc(n * sizeof(double)); }

static float *frand(size_t n, float scale) {
    float *x = falloc(n);
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_float();
    return x;
}

static float *fcopy(const float *x, size_t n) {
    float *y = falloc(n);
    memcpy(y, x, n * sizeof(float));
    return y;
}

static float *ffill(size_t n, float value) {
    float *x = falloc(n);
    for (size_t i = 0; i < n; i++) x[i] = value;
    return x;
}

static double *to_double(const float *x, size_t n) {
    double *y = dalloc(n);
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

/* got - offset, for gradients accumulated onto a pre-filled buffer. */
static float *fsub(const float *got, float offset, size_t n) {
    float *y = falloc(n);
    for (size_t i = 0; i < n; i++) y[i] = got[i] - offset;
    return y;
}

/* max |got - want| / max |want| (infinite on NaN): a relative error that is not
 * thrown by entries near zero. *nmse gets sum (got - want)^2 / sum want^2. */
static double rel_err(const float *got, const double *want, size_t n, double *nmse) {
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

/* rel_err, printed with the NMSE when verbose. */
static double compare(const char *what, const float *got, const double *want, size_t n,
                      double tol) {
    double nmse = 0.0, err = rel_err(got, want, n, &nmse);
    if (verbose) printf("  %-44s err %.2e  nmse %.2e  (tol %.0e)\n", what, err, nmse, tol);
    return err;
}

#define CHECK_CLOSE_D(what, got, want, n, tol)                                           \
    do {                                                                                 \
        double err_ = compare((what), (got), (want), (n), (tol));                        \
        CHECK_MSG(err_ <= (tol), "%s: err %.3g > tol %.3g", (what), err_, (double)(tol)); \
    } while (0)

#define CHECK_CLOSE_F(what, got, want, n, tol) \
    CHECK_CLOSE_D(what, got, to_double((want), (n)), n, tol)

static int same_floats(const float *a, const float *b, size_t n) {
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* Central differences of loss(ctx) with respect to each x[i], written to g (n).
 * x must be an array loss() reads; it is restored after each probe. */
typedef double (*loss_fn)(void *ctx);

static void fd_grad(double *g, double *x, size_t n, loss_fn loss, void *ctx) {
    const double h = 1e-5;
    for (size_t i = 0; i < n; i++) {
        double xi = x[i];
        x[i] = xi + h;
        double lp = loss(ctx);
        x[i] = xi - h;
        double lm = loss(ctx);
        x[i] = xi;
        g[i] = (lp - lm) / (2.0 * h);
    }
}

static char label_buf[160];

static const char *label(const ct_kernels *k, const char *what) {
    snprintf(label_buf, sizeof(label_buf), "%s %s", k->name, what);
    return label_buf;
}

/* ------------------------------------------------------------ encoder */

typedef struct {
    double *wte, *wpe, *R;
    const int32_t *inp;
    int B, T, C, pos0;
} encoder_ctx;

static void encoder_forward_d(double *out, const encoder_ctx *e) {
    for (int i = 0; i < e->B * e->T; i++)
        for (int c = 0; c < e->C; c++)
            out[(size_t)i * e->C + c] = e->wte[(size_t)e->inp[i] * e->C + c] +
                                        e->wpe[(size_t)(e->pos0 + i % e->T) * e->C + c];
}

static double encoder_loss(void *ctx) {
    encoder_ctx *e = ctx;
    double L = 0.0;
    for (int i = 0; i < e->B * e->T; i++)
        for (int c = 0; c < e->C; c++)
            L += (e->wte[(size_t)e->inp[i] * e->C + c] +
                  e->wpe[(size_t)(e->pos0 + i % e->T) * e->C + c]) *
                 e->R[(size_t)i * e->C + c];
    return L;
}

static void test_encoder(const ct_kernels *k, int B, int T, int C, int V, int maxT) {
    size_t N = (size_t)B * T;
    int32_t *inp = pool_alloc(N * sizeof(int32_t));
    for (size_t i = 0; i < N; i++) inp[i] = rng_int(V); // V small: repeated tokens
    float *wte = frand((size_t)V * C, 1.0f), *wpe = frand((size_t)maxT * C, 1.0f);
    float *R = frand(N * C, 1.0f);
    int pos0 = maxT - T;
    encoder_ctx e = {to_double(wte, (size_t)V * C), to_double(wpe, (size_t)maxT * C),
                     to_double(R, N * C), inp, B, T, C, pos0};

    float *out = falloc(N * C);
    double *want = dalloc(N * C);
    k->encoder_forward(out, inp, wte, wpe, B, T, C, pos0);
    encoder_forward_d(want, &e);
    CHECK_CLOSE_D(label(k, "encoder_forward vs double"), out, want, N * C, TOL_EXACT);

    // backward positions are 0..T-1 (training)
    e.pos0 = 0;
    float *dwte = ffill((size_t)V * C, 0.5f), *dwpe = ffill((size_t)maxT * C, -0.25f);
    k->encoder_backward(dwte, dwpe, R, inp, B, T, C);
    double *g_wte = dalloc((size_t)V * C), *g_wpe = dalloc((size_t)maxT * C);
    fd_grad(g_wte, e.wte, (size_t)V * C, encoder_loss, &e);
    fd_grad(g_wpe, e.wpe, (size_t)maxT * C, encoder_loss, &e);
    CHECK_CLOSE_D(label(k, "encoder_backward dwte vs FD"), fsub(dwte, 0.5f, (size_t)V * C), g_wte,
                  (size_t)V * C, TOL_FD);
    CHECK_CLOSE_D(label(k, "encoder_backward dwpe vs FD"), fsub(dwpe, -0.25f, (size_t)maxT * C),
                  g_wpe, (size_t)maxT * C, TOL_FD);

    // dwpe = NULL skips the positions and leaves dwte unchanged
    float *dwte2 = ffill((size_t)V * C, 0.5f);
    k->encoder_backward(dwte2, NULL, R, inp, B, T, C);
    CHECK_MSG(same_floats(dwte, dwte2, (size_t)V * C), "%s",
              label(k, "encoder_backward dwpe=NULL"));
    pool_free();
}

/* ------------------------------------------------------------ layernorm */

typedef struct {
    double *inp, *w, *b, *R;
    int N, C;
    double eps;
} layernorm_ctx;

static void layernorm_forward_d(double *out, double *mean, double *rstd, const layernorm_ctx *l) {
    for (int n = 0; n < l->N; n++) {
        const double *x = l->inp + (size_t)n * l->C;
        double mu = 0.0, var = 0.0;
        for (int c = 0; c < l->C; c++) mu += x[c];
        mu /= l->C;
        for (int c = 0; c < l->C; c++) var += (x[c] - mu) * (x[c] - mu);
        var /= l->C;
        double s = 1.0 / sqrt(var + l->eps);
        for (int c = 0; c < l->C; c++)
            out[(size_t)n * l->C + c] = (x[c] - mu) * s * l->w[c] + l->b[c];
        if (mean) mean[n] = mu;
        if (rstd) rstd[n] = s;
    }
}

static double layernorm_loss(void *ctx) {
    layernorm_ctx *l = ctx;
    size_t n = (size_t)l->N * l->C;
    double *out = malloc(n * sizeof(double));
    layernorm_forward_d(out, NULL, NULL, l);
    double L = 0.0;
    for (size_t i = 0; i < n; i++) L += out[i] * l->R[i];
    free(out);
    return L;
}

static void test_layernorm(const ct_kernels *k, int N, int C) {
    size_t NC = (size_t)N * C;
    const float eps = 1e-5f;
    float *inp = frand(NC, 2.0f), *w = frand(C, 1.0f), *b = frand(C, 1.0f), *R = frand(NC, 1.0f);
    for (int n = 0; n < N; n++) inp[(size_t)n * C] += 0.5f * n; // rows with different means
    layernorm_ctx l = {to_double(inp, NC), to_double(w, C), to_double(b, C), to_double(R, NC),
                       N, C, eps};

    float *out = falloc(NC), *mean = falloc(N), *rstd = falloc(N);
    double *want = dalloc(NC), *want_mean = dalloc(N), *want_rstd = dalloc(N);
    k->layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps);
    layernorm_forward_d(want, want_mean, want_rstd, &l);
    CHECK_CLOSE_D(label(k, "layernorm_forward out vs double"), out, want, NC, TOL_EXACT);
    CHECK_CLOSE_D(label(k, "layernorm_forward mean vs double"), mean, want_mean, N, TOL_EXACT);
    CHECK_CLOSE_D(label(k, "layernorm_forward rstd vs double"), rstd, want_rstd, N, TOL_EXACT);
    float *out2 = falloc(NC);
    k->layernorm_forward(out2, NULL, NULL, inp, w, b, N, C, eps);
    CHECK_MSG(same_floats(out, out2, NC), "%s", label(k, "layernorm_forward NULL mean/rstd"));

    float *dinp = ffill(NC, 0.5f), *dw = ffill(C, -1.0f), *db = ffill(C, 2.0f);
    k->layernorm_backward(dinp, dw, db, R, inp, w, mean, rstd, N, C);
    double *g_inp = dalloc(NC), *g_w = dalloc(C), *g_b = dalloc(C);
    fd_grad(g_inp, l.inp, NC, layernorm_loss, &l);
    fd_grad(g_w, l.w, C, layernorm_loss, &l);
    fd_grad(g_b, l.b, C, layernorm_loss, &l);
    CHECK_CLOSE_D(label(k, "layernorm_backward dinp vs FD"), fsub(dinp, 0.5f, NC), g_inp, NC,
                  TOL_FD);
    CHECK_CLOSE_D(label(k, "layernorm_backward dweight vs FD"), fsub(dw, -1.0f, C), g_w, C, TOL_FD);
    CHECK_CLOSE_D(label(k, "layernorm_backward dbias vs FD"), fsub(db, 2.0f, C), g_b, C, TOL_FD);
    pool_free();
}

/* ------------------------------------------------------------ matmul */

typedef struct {
    double *inp, *w, *b, *R;
    int N, C, OC;
} matmul_ctx;

static void matmul_forward_d(double *out, const matmul_ctx *mm, int use_bias) {
    for (int n = 0; n < mm->N; n++)
        for (int o = 0; o < mm->OC; o++) {
            double acc = use_bias ? mm->b[o] : 0.0;
            for (int c = 0; c < mm->C; c++)
                acc += mm->inp[(size_t)n * mm->C + c] * mm->w[(size_t)o * mm->C + c];
            out[(size_t)n * mm->OC + o] = acc;
        }
}

static double matmul_loss(void *ctx) {
    matmul_ctx *mm = ctx;
    size_t n = (size_t)mm->N * mm->OC;
    double *out = malloc(n * sizeof(double));
    matmul_forward_d(out, mm, 1);
    double L = 0.0;
    for (size_t i = 0; i < n; i++) L += out[i] * mm->R[i];
    free(out);
    return L;
}

static void test_matmul(const ct_kernels *k, int N, int C, int OC) {
    size_t NC = (size_t)N * C, OCC = (size_t)OC * C, NOC = (size_t)N * OC;
    float *inp = frand(NC, 1.0f), *w = frand(OCC, 1.0f), *b = frand(OC, 1.0f);
    float *R = frand(NOC, 1.0f);
    matmul_ctx mm = {to_double(inp, NC), to_double(w, OCC), to_double(b, OC), to_double(R, NOC),
                     N, C, OC};

    float *out = ffill(NOC, NAN); // forward writes: stale contents must not matter
    double *want = dalloc(NOC);
    k->matmul_forward(out, inp, w, b, N, C, OC);
    matmul_forward_d(want, &mm, 1);
    CHECK_CLOSE_D(label(k, "matmul_forward vs double"), out, want, NOC, TOL_EXACT);
    float *out_nb = ffill(NOC, NAN);
    k->matmul_forward(out_nb, inp, w, NULL, N, C, OC);
    matmul_forward_d(want, &mm, 0);
    CHECK_CLOSE_D(label(k, "matmul_forward bias=NULL vs double"), out_nb, want, NOC, TOL_EXACT);

    float *dinp = ffill(NC, 0.5f), *dw = ffill(OCC, -1.0f), *db = ffill(OC, 2.0f);
    k->matmul_backward(dinp, dw, db, R, inp, w, N, C, OC);
    double *g_inp = dalloc(NC), *g_w = dalloc(OCC), *g_b = dalloc(OC);
    fd_grad(g_inp, mm.inp, NC, matmul_loss, &mm);
    fd_grad(g_w, mm.w, OCC, matmul_loss, &mm);
    fd_grad(g_b, mm.b, OC, matmul_loss, &mm);
    CHECK_CLOSE_D(label(k, "matmul_backward dinp vs FD"), fsub(dinp, 0.5f, NC), g_inp, NC, TOL_FD);
    CHECK_CLOSE_D(label(k, "matmul_backward dweight vs FD"), fsub(dw, -1.0f, OCC), g_w, OCC,
                  TOL_FD);
    CHECK_CLOSE_D(label(k, "matmul_backward dbias vs FD"), fsub(db, 2.0f, OC), g_b, OC, TOL_FD);

    // each gradient alone (the others NULL) gives the same result
    float *dinp1 = ffill(NC, 0.5f), *dw1 = ffill(OCC, -1.0f), *db1 = ffill(OC, 2.0f);
    k->matmul_backward(dinp1, NULL, NULL, R, inp, w, N, C, OC);
    k->matmul_backward(NULL, dw1, NULL, R, inp, w, N, C, OC);
    k->matmul_backward(NULL, NULL, db1, R, inp, w, N, C, OC);
    CHECK_MSG(same_floats(dinp, dinp1, NC), "%s", label(k, "matmul_backward dinp alone"));
    CHECK_MSG(same_floats(dw, dw1, OCC), "%s", label(k, "matmul_backward dweight alone"));
    CHECK_MSG(same_floats(db, db1, OC), "%s", label(k, "matmul_backward dbias alone"));
    pool_free();
}

/* ------------------------------------------------------------ attention */

typedef struct {
    double *qkv, *R;
    int B, T, C, NH;
} attention_ctx;

/* Naive causal attention in double with the full T x T score matrix. */
static void attention_forward_d(double *out, double *lse, const attention_ctx *a) {
    int B = a->B, T = a->T, C = a->C, NH = a->NH, HS = C / NH;
    double scale = 1.0 / sqrt((double)HS);
    double *att = malloc((size_t)T * T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const double *base = a->qkv + (size_t)b * T * 3 * C;
            for (int t = 0; t < T; t++) {
                double maxval = -INFINITY;
                for (int j = 0; j < T; j++) {
                    double s = -INFINITY; // masked: j > t
                    if (j <= t) {
                        s = 0.0;
                        for (int d = 0; d < HS; d++)
                            s += base[(size_t)t * 3 * C + h * HS + d] *
                                 base[(size_t)j * 3 * C + C + h * HS + d];
                        s *= scale;
                    }
                    att[(size_t)t * T + j] = s;
                    if (s > maxval) maxval = s;
                }
                double sum = 0.0;
                for (int j = 0; j < T; j++) {
                    att[(size_t)t * T + j] = exp(att[(size_t)t * T + j] - maxval);
                    sum += att[(size_t)t * T + j];
                }
                if (lse) lse[((size_t)b * NH + h) * T + t] = maxval + log(sum);
                for (int d = 0; d < HS; d++) {
                    double acc = 0.0;
                    for (int j = 0; j < T; j++)
                        acc += att[(size_t)t * T + j] / sum *
                               base[(size_t)j * 3 * C + 2 * C + h * HS + d];
                    out[((size_t)b * T + t) * C + h * HS + d] = acc;
                }
            }
        }
    free(att);
}

static double attention_loss(void *ctx) {
    attention_ctx *a = ctx;
    size_t n = (size_t)a->B * a->T * a->C;
    double *out = malloc(n * sizeof(double));
    attention_forward_d(out, NULL, a);
    double L = 0.0;
    for (size_t i = 0; i < n; i++) L += out[i] * a->R[i];
    free(out);
    return L;
}

static void test_attention(const ct_kernels *k, int B, int T, int C, int NH) {
    size_t N3C = (size_t)B * T * 3 * C, NC = (size_t)B * T * C, NL = (size_t)B * NH * T;
    float *qkv = frand(N3C, 1.5f), *R = frand(NC, 1.0f);
    attention_ctx a = {to_double(qkv, N3C), to_double(R, NC), B, T, C, NH};

    float *out = ffill(NC, NAN), *lse = ffill(NL, NAN);
    double *want = dalloc(NC), *want_lse = dalloc(NL);
    k->attention_forward(out, lse, qkv, B, T, C, NH);
    attention_forward_d(want, want_lse, &a);
    CHECK_CLOSE_D(label(k, "attention_forward out vs naive"), out, want, NC, TOL_EXACT);
    CHECK_CLOSE_D(label(k, "attention_forward lse vs naive"), lse, want_lse, NL, TOL_EXACT);

    float *dqkv = ffill(N3C, 0.5f);
    k->attention_backward(dqkv, R, qkv, out, lse, B, T, C, NH);
    double *g = dalloc(N3C);
    fd_grad(g, a.qkv, N3C, attention_loss, &a);
    CHECK_CLOSE_D(label(k, "attention_backward dqkv vs FD"), fsub(dqkv, 0.5f, N3C), g, N3C, TOL_FD);

    // decode: query row t over the cached keys/values 0..t equals forward row t
    float *kc = falloc((size_t)T * C), *vc = falloc((size_t)T * C), *dec = falloc(C);
    double maxerr = 0.0;
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const float *row = qkv + ((size_t)b * T + t) * 3 * C;
            memcpy(kc + (size_t)t * C, row + C, (size_t)C * sizeof(float));
            memcpy(vc + (size_t)t * C, row + 2 * C, (size_t)C * sizeof(float));
        }
        for (int t = 0; t < T; t++) {
            k->attention_decode(dec, qkv + ((size_t)b * T + t) * 3 * C, kc, vc, t + 1, C, NH);
            double err = rel_err(dec, to_double(out + ((size_t)b * T + t) * C, C), C, NULL);
            if (err > maxerr) maxerr = err;
        }
    }
    if (verbose)
        printf("  %-44s err %.2e  (tol %.0e)\n", label(k, "attention_decode vs forward rows"),
               maxerr, TOL_EXACT);
    CHECK_MSG(maxerr <= TOL_EXACT, "%s: err %.3g", label(k, "attention_decode vs forward rows"),
              maxerr);
    pool_free();
}

/* ------------------------------------------------------------ gelu, residual */

typedef struct {
    double *x, *R;
    size_t n;
} gelu_ctx;

static double gelu_d(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / CT_PI) * (x + 0.044715 * x * x * x)));
}

static double gelu_loss(void *ctx) {
    gelu_ctx *g = ctx;
    double L = 0.0;
    for (size_t i = 0; i < g->n; i++) L += gelu_d(g->x[i]) * g->R[i];
    return L;
}

static void test_gelu(const ct_kernels *k, size_t n) {
    float *x = frand(n, 4.0f), *R = frand(n, 1.0f);
    gelu_ctx gc = {to_double(x, n), to_double(R, n), n};
    float *out = falloc(n);
    double *want = dalloc(n);
    k->gelu_forward(out, x, n);
    for (size_t i = 0; i < n; i++) want[i] = gelu_d(x[i]);
    CHECK_CLOSE_D(label(k, "gelu_forward vs double"), out, want, n, TOL_EXACT);

    float *dx = ffill(n, 0.5f);
    double *g = dalloc(n);
    k->gelu_backward(dx, x, R, n);
    fd_grad(g, gc.x, n, gelu_loss, &gc);
    CHECK_CLOSE_D(label(k, "gelu_backward vs FD"), fsub(dx, 0.5f, n), g, n, TOL_FD);
    pool_free();
}

typedef struct {
    double *a, *b, *R;
    size_t n;
} residual_ctx;

static double residual_loss(void *ctx) {
    residual_ctx *r = ctx;
    double L = 0.0;
    for (size_t i = 0; i < r->n; i++) L += (r->a[i] + r->b[i]) * r->R[i];
    return L;
}

static void test_residual(const ct_kernels *k, size_t n) {
    float *a = frand(n, 1.0f), *b = frand(n, 1.0f), *R = frand(n, 1.0f);
    residual_ctx rc = {to_double(a, n), to_double(b, n), to_double(R, n), n};
    float *out = falloc(n);
    double *want = dalloc(n);
    k->residual_forward(out, a, b, n);
    for (size_t i = 0; i < n; i++) want[i] = (double)a[i] + b[i];
    CHECK_CLOSE_D(label(k, "residual_forward vs double"), out, want, n, TOL_EXACT);
    float *a2 = fcopy(a, n); // out aliasing a
    k->residual_forward(a2, a2, b, n);
    CHECK_MSG(same_floats(a2, out, n), "%s", label(k, "residual_forward out=a"));

    float *da = ffill(n, 0.5f), *db = ffill(n, -0.5f);
    double *ga = dalloc(n), *gb = dalloc(n);
    k->residual_backward(da, db, R, n);
    fd_grad(ga, rc.a, n, residual_loss, &rc);
    fd_grad(gb, rc.b, n, residual_loss, &rc);
    CHECK_CLOSE_D(label(k, "residual_backward da vs FD"), fsub(da, 0.5f, n), ga, n, TOL_FD);
    CHECK_CLOSE_D(label(k, "residual_backward db vs FD"), fsub(db, -0.5f, n), gb, n, TOL_FD);
    pool_free();
}

/* ------------------------------------------------------------ cross-entropy */

typedef struct {
    double *logits;
    const int32_t *targets;
    int N, V;
    double dloss;
} ce_ctx;

static void ce_losses_d(double *losses, const ce_ctx *ce) {
    for (int n = 0; n < ce->N; n++) {
        const double *x = ce->logits + (size_t)n * ce->V;
        if (ce->targets[n] < 0) {
            losses[n] = 0.0;
            continue;
        }
        double maxval = x[0], sum = 0.0;
        for (int i = 1; i < ce->V; i++) maxval = x[i] > maxval ? x[i] : maxval;
        for (int i = 0; i < ce->V; i++) sum += exp(x[i] - maxval);
        losses[n] = maxval + log(sum) - x[ce->targets[n]];
    }
}

/* dloss * sum of the losses, whose gradient the kernel writes. */
static double ce_loss(void *ctx) {
    ce_ctx *ce = ctx;
    double *losses = malloc((size_t)ce->N * sizeof(double));
    ce_losses_d(losses, ce);
    double L = 0.0;
    for (int n = 0; n < ce->N; n++) L += losses[n];
    free(losses);
    return ce->dloss * L;
}

static void test_crossentropy(const ct_kernels *k, int N, int V) {
    size_t NV = (size_t)N * V;
    float *logits = frand(NV, 4.0f);
    int32_t *targets = pool_alloc((size_t)N * sizeof(int32_t));
    for (int n = 0; n < N; n++) targets[n] = n % 3 == 1 ? -1 : rng_int(V); // some ignored
    float dloss = 1.0f / (float)N;
    ce_ctx ce = {to_double(logits, NV), targets, N, V, dloss};

    float *losses = falloc(N), *dlogits = ffill(NV, NAN);
    double *want = dalloc(N);
    k->crossentropy_forward(losses, dlogits, logits, targets, N, V, dloss);
    ce_losses_d(want, &ce);
    CHECK_CLOSE_D(label(k, "crossentropy losses vs double"), losses, want, N, TOL_EXACT);
    double *g = dalloc(NV);
    fd_grad(g, ce.logits, NV, ce_loss, &ce);
    CHECK_CLOSE_D(label(k, "crossentropy dlogits vs FD"), dlogits, g, NV, TOL_FD);

    // dlogits may alias logits; dlogits NULL still gives the losses
    float *inplace = fcopy(logits, NV), *losses2 = falloc(N), *losses3 = falloc(N);
    k->crossentropy_forward(losses2, inplace, inplace, targets, N, V, dloss);
    CHECK_MSG(same_floats(inplace, dlogits, NV) && same_floats(losses2, losses, N), "%s",
              label(k, "crossentropy dlogits aliasing logits"));
    k->crossentropy_forward(losses3, NULL, logits, targets, N, V, dloss);
    CHECK_MSG(same_floats(losses3, losses, N), "%s", label(k, "crossentropy dlogits=NULL"));
    pool_free();
}

/* ------------------------------------------------------------ adamw, sumsq */

static void test_adamw(const ct_kernels *k, size_t n) {
    const float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f, scale = 0.5f;
    float *p = frand(n, 1.0f), *m = falloc(n), *v = falloc(n);
    double *pd = to_double(p, n), *md = dalloc(n), *vd = dalloc(n);
    float *p0 = fcopy(p, n);
    for (int64_t t = 1; t <= 3; t++) {
        float *grad = frand(n, 1e-2f);
        grad[0] = 0.0f; // zero gradient: v stays 0 and only eps keeps denom finite
        grad[1] = 1e-6f;
        k->adamw_update(p, grad, m, v, n, lr, beta1, beta2, eps, wd, scale, t);
        // torch.optim.AdamW (1.13, single tensor), transcribed in double
        double bc1 = 1.0 - pow(beta1, (double)t), bc2 = 1.0 - pow(beta2, (double)t);
        for (size_t i = 0; i < n; i++) {
            double gi = (double)grad[i] * scale;
            pd[i] *= 1.0 - (double)lr * wd;
            md[i] = md[i] * beta1 + gi * (1.0 - beta1);
            vd[i] = vd[i] * beta2 + (1.0 - beta2) * gi * gi;
            double denom = sqrt(vd[i]) / sqrt(bc2) + eps;
            pd[i] += -((double)lr / bc1) * md[i] / denom;
        }
    }
    CHECK_CLOSE_D(label(k, "adamw params vs double (3 steps)"), p, pd, n, TOL_EXACT);
    CHECK_CLOSE_D(label(k, "adamw m vs double"), m, md, n, TOL_EXACT);
    CHECK_CLOSE_D(label(k, "adamw v vs double"), v, vd, n, TOL_EXACT);
    // the update itself, which is ~1e-2 of the parameters
    float *upd = falloc(n);
    double *upd_d = dalloc(n);
    for (size_t i = 0; i < n; i++) {
        upd[i] = p[i] - p0[i];
        upd_d[i] = pd[i] - p0[i];
    }
    CHECK_CLOSE_D(label(k, "adamw update p - p0 vs double"), upd, upd_d, n, 1e-4);
    pool_free();
}

static void test_sumsq(const ct_kernels *k, size_t n) {
    float *x = frand(n, 3.0f);
    double want = 0.0;
    for (size_t i = 0; i < n; i++) want += (double)x[i] * x[i];
    double got = k->sumsq(x, n);
    if (verbose) printf("  %-44s err %.2e\n", label(k, "sumsq vs double"), fabs(got - want) / want);
    CHECK_MSG(fabs(got - want) <= 1e-11 * want, "%s: %.17g vs %.17g", label(k, "sumsq"), got, want);
    CHECK(k->sumsq(x, 0) == 0.0);
    pool_free();
}

/* ------------------------------------------------------------ cpu vs ref */

static const ct_kernels *const ref_k = &ct_kernels_ref;
static const ct_kernels *const cpu_k = &ct_kernels_cpu;

static void cmp_encoder(int B, int T, int C, int V, int maxT) {
    size_t N = (size_t)B * T, VC = (size_t)V * C, TC = (size_t)maxT * C;
    int32_t *inp = pool_alloc(N * sizeof(int32_t));
    for (size_t i = 0; i < N; i++) inp[i] = rng_int(V);
    float *wte = frand(VC, 1.0f), *wpe = frand(TC, 1.0f), *dout = frand(N * C, 1.0f);
    float *o1 = falloc(N * C), *o2 = falloc(N * C);
    ref_k->encoder_forward(o1, inp, wte, wpe, B, T, C, maxT - T);
    cpu_k->encoder_forward(o2, inp, wte, wpe, B, T, C, maxT - T);
    CHECK_CLOSE_F("cpu vs ref encoder_forward", o2, o1, N * C, TOL_CPU);
    float *dwte1 = frand(VC, 1.0f), *dwpe1 = frand(TC, 1.0f);
    float *dwte2 = fcopy(dwte1, VC), *dwpe2 = fcopy(dwpe1, TC);
    ref_k->encoder_backward(dwte1, dwpe1, dout, inp, B, T, C);
    cpu_k->encoder_backward(dwte2, dwpe2, dout, inp, B, T, C);
    CHECK_CLOSE_F("cpu vs ref encoder_backward dwte", dwte2, dwte1, VC, TOL_CPU);
    CHECK_CLOSE_F("cpu vs ref encoder_backward dwpe", dwpe2, dwpe1, TC, TOL_CPU);
    pool_free();
}

static void cmp_layernorm(int N, int C) {
    size_t NC = (size_t)N * C;
    float *inp = frand(NC, 3.0f), *w = frand(C, 1.0f), *b = frand(C, 1.0f), *dout = frand(NC, 1.0f);
    float *o1 = falloc(NC), *o2 = falloc(NC), *m1 = falloc(N), *m2 = falloc(N);
    float *r1 = falloc(N), *r2 = falloc(N);
    ref_k->layernorm_forward(o1, m1, r1, inp, w, b, N, C, 1e-5f);
    cpu_k->layernorm_forward(o2, m2, r2, inp, w, b, N, C, 1e-5f);
    CHECK_CLOSE_F("cpu vs ref layernorm_forward out", o2, o1, NC, TOL_CPU);
    CHECK_CLOSE_F("cpu vs ref layernorm_forward mean", m2, m1, N, TOL_CPU);
    CHECK_CLOSE_F("cpu vs ref layernorm_forward rstd", r2, r1, N, TOL_CPU);
    float *di1 = frand(NC, 1.0f), *dw1 = frand(C, 1.0f), *db1 = frand(C, 1.0f);
    float *di2 = fcopy(di1, NC), *dw2 = fcopy(dw1, C), *db2 = fcopy(db1, C);
    ref_k->layernorm_backward(di1, dw1, db1, dout, inp, w, m1, r1, N, C);
    cpu_k->layernorm_backward(di2, dw2, db2, dout, inp, w, m1, r1, N, C);
    CHECK_CLOSE_F("cpu vs ref layernorm_backward dinp", di2, di1, NC, TOL_CPU);
    CHECK_CLOSE_F("cpu vs ref layernorm_backward dweight", dw2, dw1, C, TOL_CPU);
    CHECK_CLOSE_F("cpu vs ref layernorm_backward dbias", db2, db1, C, TOL_CPU);
    pool_free();
}

static void cmp_matmul(int N, int C, int OC) {
    size_t NC = (size_t)N * C, OCC = (size_t)OC * C, NOC = (size_t)N * OC;
    float *inp = frand(NC, 1.0f), *w = frand(OCC, 1.0f), *b = frand(OC, 1.0f);
    float *dout = frand(NOC, 1.0f);
    float *o1 = falloc(NOC), *o2 = falloc(NOC);
    ref_k->matmul_forward(o1, inp, w, b, N, C, OC);
    cpu_k->matmul_forward(o2, inp, w, b, N, C, OC);
    CHECK_CLOSE_F("cpu vs ref matmul_forward", o2, o1, NOC, TOL_CPU);
    ref_k->matmul_forward(o1, inp, w, NULL, N, C, OC);
    cpu_k->matmul_forward(o2, inp, w, NULL, N, C, OC);
    CHECK_CLOSE_F("cpu vs ref matmul_forward bias=NULL", o2, o1, NOC, TOL_CPU);
    float *di1 = frand(NC, 1.0f), *dw1 = frand(OCC, 1.0f), *db1 = frand(OC, 1.0f);
    float *di2 = fcopy(di1, NC), *dw2 = fcopy(dw1, OCC), *db2 = fcopy(db1, OC);
    ref_k->matmul_backward(di1, dw1, db1, dout, inp, w, N, C, OC);
    cpu_k->matmul_backward(di2, dw2, db2, dout, inp, w, N, C, OC);
    CHECK_CLOSE_F("cpu vs ref matmul_backward dinp", di2, di1, NC, TOL_CPU);
    CHECK_CLOSE_F("cpu vs ref matmul_backward dweight", dw2, dw1, OCC, TOL_CPU);
    CHECK_CLOSE_F("cpu vs ref matmul_backward dbias", db2, db1, OC, TOL_CPU);
    pool_free();
}

static void cmp_attention(int B, int T, int C, int NH) {
    size_t N3C = (size_t)B * T * 3 * C, NC = (size_t)B * T * C, NL = (size_t)B * NH * T;
    float *qkv = frand(N3C, 2.0f), *dout = frand(NC, 1.0f);
    float *o1 = falloc(NC), *o2 = falloc(NC), *l1 = falloc(NL), *l2 = falloc(NL);
    ref_k->attention_forward(o1, l1, qkv, B, T, C, NH);
    cpu_k->attention_forward(o2, l2, qkv, B, T, C, NH);
    CHECK_CLOSE_F("cpu vs ref attention_forward out", o2, o1, NC, TOL_CPU);
    CHECK_CLOSE_F("cpu vs ref attention_forward lse", l2, l1, NL, TOL_CPU);
    float *d1 = frand(N3C, 1.0f), *d2 = fcopy(d1, N3C);
    ref_k->attention_backward(d1, dout, qkv, o1, l1, B, T, C, NH);
    cpu_k->attention_backward(d2, dout, qkv, o1, l1, B, T, C, NH);
    CHECK_CLOSE_F("cpu vs ref attention_backward dqkv", d2, d1, N3C, TOL_CPU);
    // decode over T cached rows with stride C
    float *q = frand(C, 2.0f), *kc = frand((size_t)T * C, 2.0f), *vc = frand((size_t)T * C, 1.0f);
    float *e1 = falloc(C), *e2 = falloc(C);
    ref_k->attention_decode(e1, q, kc, vc, T, C, NH);
    cpu_k->attention_decode(e2, q, kc, vc, T, C, NH);
    CHECK_CLOSE_F("cpu vs ref attention_decode", e2, e1, C, TOL_CPU);
    pool_free();
}

static void cmp_elementwise(size_t n) {
    float *x = frand(n, 5.0f), *y = frand(n, 1.0f), *dout = frand(n, 1.0f);
    float *o1 = falloc(n), *o2 = falloc(n);
    ref_k->gelu_forward(o1, x, n);
    cpu_k->gelu_forward(o2, x, n);
    CHECK_CLOSE_F("cpu vs ref gelu_forward", o2, o1, n, TOL_CPU);
    float *d1 = frand(n, 1.0f), *d2 = fcopy(d1, n);
    ref_k->gelu_backward(d1, x, dout, n);
    cpu_k->gelu_backward(d2, x, dout, n);
    CHECK_CLOSE_F("cpu vs ref gelu_backward", d2, d1, n, TOL_CPU);
    ref_k->residual_forward(o1, x, y, n);
    cpu_k->residual_forward(o2, x, y, n);
    CHECK_CLOSE_F("cpu vs ref residual_forward", o2, o1, n, TOL_CPU);
    float *a1 = frand(n, 1.0f), *b1 = frand(n, 1.0f), *a2 = fcopy(a1, n), *b2 = fcopy(b1, n);
    ref_k->residual_backward(a1, b1, dout, n);
    cpu_k->residual_backward(a2, b2, dout, n);
    CHECK_CLOSE_F("cpu vs ref residual_backward da", a2, a1, n, TOL_CPU);
    CHECK_CLOSE_F("cpu vs ref residual_backward db", b2, b1, n, TOL_CPU);
    pool_free();
}

static void cmp_crossentropy(int N, int V) {
    size_t NV = (size_t)N * V;
    float *logits = frand(NV, 8.0f);
    int32_t *targets = pool_alloc((size_t)N * sizeof(int32_t));
    for (int n = 0; n < N; n++) targets[n] = n == 2 ? -100 : rng_int(V);
    float *l1 = falloc(N), *l2 = falloc(N), *d1 = falloc(NV), *d2 = falloc(NV);
    ref_k->crossentropy_forward(l1, d1, logits, targets, N, V, 0.25f);
    cpu_k->crossentropy_forward(l2, d2, logits, targets, N, V, 0.25f);
    CHECK_CLOSE_F("cpu vs ref crossentropy losses", l2, l1, N, TOL_CPU);
    CHECK_CLOSE_F("cpu vs ref crossentropy dlogits", d2, d1, NV, TOL_CPU);
    pool_free();
}

static void cmp_adamw(size_t n) {
    float *p1 = frand(n, 1.0f), *m1 = frand(n, 1e-2f), *v1 = falloc(n);
    for (size_t i = 0; i < n; i++) v1[i] = 1e-4f * fabsf(rng_float());
    float *p2 = fcopy(p1, n), *m2 = fcopy(m1, n), *v2 = fcopy(v1, n);
    for (int64_t t = 1; t <= 2; t++) {
        float *g = frand(n, 1e-2f);
        ref_k->adamw_update(p1, g, m1, v1, n, 6e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, t);
        cpu_k->adamw_update(p2, g, m2, v2, n, 6e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, t);
    }
    CHECK_CLOSE_F("cpu vs ref adamw params", p2, p1, n, TOL_CPU);
    CHECK_CLOSE_F("cpu vs ref adamw m", m2, m1, n, TOL_CPU);
    CHECK_CLOSE_F("cpu vs ref adamw v", v2, v1, n, TOL_CPU);
    float *x = frand(n, 2.0f);
    double s1 = ref_k->sumsq(x, n), s2 = cpu_k->sumsq(x, n);
    CHECK_MSG(fabs(s1 - s2) <= 1e-11 * s1, "cpu vs ref sumsq: %.17g vs %.17g", s2, s1);
    pool_free();
}

int main(void) {
    const char *env = getenv("CT_TEST_VERBOSE");
    verbose = env && env[0] && env[0] != '0';
    CHECK(strcmp(ref_k->name, "ref") == 0);
    CHECK(strcmp(cpu_k->name, "cpu") == 0);

    const ct_kernels *tables[2] = {ref_k, cpu_k};
    for (int i = 0; i < 2; i++) {
        const ct_kernels *k = tables[i];
        if (verbose) printf("%s vs double / finite differences:\n", k->name);
        test_encoder(k, 3, 7, 12, 5, 9);
        test_encoder(k, 2, 1, 5, 3, 4);
        test_layernorm(k, 6, 13);
        test_layernorm(k, 3, 1); // C = 1: zero variance, output = bias
        test_matmul(k, 5, 13, 17);
        test_matmul(k, 4, 1, 3);
        test_attention(k, 2, 7, 12, 3);
        test_attention(k, 1, 5, 8, 1);
        test_attention(k, 2, 4, 3, 3); // HS = 1
        test_gelu(k, 301);
        test_residual(k, 37);
        test_crossentropy(k, 7, 37);
        test_crossentropy(k, 2, 1); // V = 1: loss 0, zero gradient
        test_adamw(k, 1003);
        test_sumsq(k, 100003);
    }

    if (verbose) printf("cpu vs ref:\n");
    cmp_encoder(3, 7, 12, 37, 9);
    cmp_encoder(4, 64, 100, 50, 70);
    cmp_layernorm(21, 12);
    cmp_layernorm(5, 13);
    cmp_layernorm(64, 768);
    cmp_matmul(5, 13, 17);
    cmp_matmul(21, 12, 36);
    cmp_matmul(67, 129, 131); // large enough for BLAS to block
    cmp_matmul(0, 5, 3);      // degenerate shapes fall back to ref
    cmp_matmul(3, 0, 4);
    cmp_attention(3, 7, 12, 3);
    cmp_attention(2, 33, 64, 4);
    cmp_attention(1, 1, 5, 5);
    cmp_attention(2, 150, 48, 2);  // several query and key tiles, ragged last tiles
    cmp_attention(1, 300, 128, 2); // HS = 64 as in GPT-2, > 2 key tiles
    cmp_attention(1, 9, 600, 2);   // HS = 300: beyond the tiled kernel, falls back to ref
    cmp_elementwise(7);
    cmp_elementwise(100003);
    cmp_crossentropy(5, 37);
    cmp_crossentropy(9, 1001);
    cmp_adamw(13);
    cmp_adamw(100003);

    return ct_test_result("test_kernels");
}
