/*
 * Tests of the LLaMA switches' kernels: RMSNorm, RoPE (Hugging Face's
 * rotate_half convention), SwiGLU and grouped-query attention. Each table (ref
 * and cpu) is checked against double-precision forwards written here, from the
 * papers' formulas, and its backwards against central finite differences of
 * them (loss L = sum(out * R), gradient buffers pre-filled to check that
 * backwards add). Then cpu is checked against ref on odd shapes, GQA with
 * NKV == NH against the plain attention entries, and GQA decode against the
 * forward's rows. Set CT_TEST_VERBOSE=1 to print every measured error.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ct_test.h"
#include "kernels/kernels.h"

#define TOL_EXACT 1e-6 /* float result of a double-exact formula */
#define TOL_ROPE 2e-6  /* RoPE angles are rounded to fp32 as HF does */
#define TOL_FD 1e-5    /* float kernel gradient vs double finite differences */
#define TOL_CPU 1e-5   /* cpu table vs ref table */

static int verbose = 0;

/* ------------------------------------------------------------ helpers */

static uint64_t rng_state = 0x243F6A8885A308D3ULL;

static uint64_t rng_next(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

static float rng_float(void) {
    return (float)((rng_next() >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static void *pool[256];
static int pool_len = 0;

static void *pool_alloc(size_t bytes) {
    if (pool_len == (int)(sizeof pool / sizeof *pool)) abort();
    void *p = calloc(bytes ? bytes : 1, 1);
    if (!p) abort();
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

static float *fsub(const float *got, float offset, size_t n) {
    float *y = falloc(n);
    for (size_t i = 0; i < n; i++) y[i] = got[i] - offset;
    return y;
}

/* max |got - want| / max |want| (infinite on NaN). */
static double rel_err(const float *got, const double *want, size_t n) {
    double maxdiff = 0.0, maxwant = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(got[i] - want[i]);
        if (isnan(d)) maxdiff = INFINITY;
        if (d > maxdiff) maxdiff = d;
        if (fabs(want[i]) > maxwant) maxwant = fabs(want[i]);
    }
    return maxdiff / (maxwant > 0.0 ? maxwant : 1.0);
}

static char label_buf[160];

static const char *label(const ct_kernels *k, const char *what) {
    snprintf(label_buf, sizeof label_buf, "%s %s", k->name, what);
    return label_buf;
}

#define CHECK_CLOSE_D(what, got, want, n, tol)                                             \
    do {                                                                                   \
        double err_ = rel_err((got), (want), (n));                                         \
        if (verbose) printf("  %-48s err %.2e (tol %.0e)\n", (what), err_, (double)(tol)); \
        CHECK_MSG(err_ <= (tol), "%s: err %.3g > tol %.3g", (what), err_, (double)(tol));  \
    } while (0)
#define CHECK_CLOSE_F(what, got, want, n, tol) \
    CHECK_CLOSE_D(what, got, to_double((want), (n)), n, tol)

typedef double (*loss_fn)(void *ctx);

/* Central differences of loss with respect to each x[i] into g (n). */
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

static double dot_d(const double *a, const double *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ------------------------------------------------------------ rmsnorm */

typedef struct {
    double *inp, *w, *R;
    int N, C;
    double eps;
} rms_ctx;

static void rmsnorm_d(double *out, double *rstd, const rms_ctx *r) {
    for (int n = 0; n < r->N; n++) {
        const double *x = r->inp + (size_t)n * r->C;
        double ms = 0.0;
        for (int c = 0; c < r->C; c++) ms += x[c] * x[c];
        double s = 1.0 / sqrt(ms / r->C + r->eps);
        for (int c = 0; c < r->C; c++) out[(size_t)n * r->C + c] = x[c] * s * r->w[c];
        if (rstd) rstd[n] = s;
    }
}

static double rms_loss(void *ctx) {
    rms_ctx *r = ctx;
    size_t n = (size_t)r->N * r->C;
    double *out = malloc(n * sizeof *out);
    rmsnorm_d(out, NULL, r);
    double L = dot_d(out, r->R, n);
    free(out);
    return L;
}

static void test_rmsnorm(const ct_kernels *k, int N, int C, float eps) {
    size_t NC = (size_t)N * C;
    float *inp = frand(NC, 2.0f), *w = frand(C, 1.0f), *R = frand(NC, 1.0f);
    rms_ctx r = {to_double(inp, NC), to_double(w, C), to_double(R, NC), N, C, eps};
    float *out = ffill(NC, NAN), *rstd = falloc(N);
    double *want = dalloc(NC), *want_rstd = dalloc(N);
    k->rmsnorm_forward(out, rstd, inp, w, N, C, eps);
    rmsnorm_d(want, want_rstd, &r);
    CHECK_CLOSE_D(label(k, "rmsnorm_forward out vs double"), out, want, NC, TOL_EXACT);
    CHECK_CLOSE_D(label(k, "rmsnorm_forward rstd vs double"), rstd, want_rstd, N, TOL_EXACT);
    float *out2 = falloc(NC);
    k->rmsnorm_forward(out2, NULL, inp, w, N, C, eps);
    CHECK_MSG(memcmp(out, out2, NC * sizeof(float)) == 0, "%s",
              label(k, "rmsnorm_forward with rstd NULL"));

    float *dinp = ffill(NC, 0.5f), *dw = ffill(C, -1.0f);
    k->rmsnorm_backward(dinp, dw, R, inp, w, rstd, N, C);
    double *g_inp = dalloc(NC), *g_w = dalloc(C);
    fd_grad(g_inp, r.inp, NC, rms_loss, &r);
    fd_grad(g_w, r.w, C, rms_loss, &r);
    CHECK_CLOSE_D(label(k, "rmsnorm_backward dinp vs FD"), fsub(dinp, 0.5f, NC), g_inp, NC,
                  TOL_FD);
    CHECK_CLOSE_D(label(k, "rmsnorm_backward dweight vs FD"), fsub(dw, -1.0f, C), g_w, C, TOL_FD);
    pool_free();
}

/* ------------------------------------------------------------ rope */

typedef struct {
    double *x, *R;
    int B, T, NH, NKV, HS, pos0;
    double theta;
} rope_ctx;

/* The RoFormer rotation in double, HF's pairing: (i, i + HS/2) turns by
 * pos * theta^(-2i/HS). q and k heads rotate; v passes through. */
static void rope_d(double *out, const rope_ctx *r) {
    int W = (r->NH + 2 * r->NKV) * r->HS, half = r->HS / 2;
    for (int b = 0; b < r->B; b++)
        for (int t = 0; t < r->T; t++) {
            const double *x = r->x + ((size_t)b * r->T + t) * W;
            double *y = out + ((size_t)b * r->T + t) * W;
            for (int j = 0; j < W; j++) y[j] = x[j];
            for (int h = 0; h < r->NH + r->NKV; h++)
                for (int i = 0; i < half; i++) {
                    double a = (r->pos0 + t) * pow(r->theta, -2.0 * i / r->HS);
                    double x1 = x[h * r->HS + i], x2 = x[h * r->HS + i + half];
                    y[h * r->HS + i] = x1 * cos(a) - x2 * sin(a);
                    y[h * r->HS + i + half] = x2 * cos(a) + x1 * sin(a);
                }
        }
}

static double rope_loss(void *ctx) {
    rope_ctx *r = ctx;
    size_t n = (size_t)r->B * r->T * (r->NH + 2 * r->NKV) * r->HS;
    double *out = malloc(n * sizeof *out);
    rope_d(out, r);
    double L = dot_d(out, r->R, n);
    free(out);
    return L;
}

static void test_rope(const ct_kernels *k, int B, int T, int NH, int NKV, int HS, int pos0,
                      float theta) {
    size_t n = (size_t)B * T * (NH + 2 * NKV) * HS;
    float *x = frand(n, 1.0f), *R = frand(n, 1.0f);
    rope_ctx r = {to_double(x, n), to_double(R, n), B, T, NH, NKV, HS, pos0, theta};
    float *y = fcopy(x, n);
    double *want = dalloc(n);
    k->rope_forward(y, B, T, NH, NKV, HS, pos0, theta);
    rope_d(want, &r);
    CHECK_CLOSE_D(label(k, "rope_forward vs double"), y, want, n, TOL_ROPE);
    // v is untouched bit for bit
    int W = (NH + 2 * NKV) * HS, voff = (NH + NKV) * HS;
    int v_same = 1;
    for (int row = 0; row < B * T; row++)
        v_same &= memcmp(y + (size_t)row * W + voff, x + (size_t)row * W + voff,
                         (size_t)NKV * HS * sizeof(float)) == 0;
    CHECK_MSG(v_same, "%s", label(k, "rope_forward leaves v alone"));
    // backward writes the transpose rotation: dx = J^T R
    float *dx = fcopy(R, n);
    k->rope_backward(dx, B, T, NH, NKV, HS, pos0, theta);
    double *g = dalloc(n);
    fd_grad(g, r.x, n, rope_loss, &r);
    CHECK_CLOSE_D(label(k, "rope_backward vs FD"), dx, g, n, TOL_FD);
    // backward undoes forward (the rotation is orthogonal)
    k->rope_backward(y, B, T, NH, NKV, HS, pos0, theta);
    CHECK_CLOSE_F(label(k, "rope_backward(rope_forward(x)) == x"), y, x, n, 1e-6);
    pool_free();
}

/* ------------------------------------------------------------ swiglu */

typedef struct {
    double *inp, *R;
    int N, F;
} swiglu_ctx;

static void swiglu_d(double *out, const swiglu_ctx *s) {
    for (int n = 0; n < s->N; n++)
        for (int i = 0; i < s->F; i++) {
            double g = s->inp[(size_t)n * 2 * s->F + i], u = s->inp[(size_t)n * 2 * s->F + s->F + i];
            out[(size_t)n * s->F + i] = g / (1.0 + exp(-g)) * u;
        }
}

static double swiglu_loss(void *ctx) {
    swiglu_ctx *s = ctx;
    size_t n = (size_t)s->N * s->F;
    double *out = malloc(n * sizeof *out);
    swiglu_d(out, s);
    double L = dot_d(out, s->R, n);
    free(out);
    return L;
}

static void test_swiglu(const ct_kernels *k, int N, int F) {
    size_t NF = (size_t)N * F;
    float *inp = frand(2 * NF, 4.0f), *R = frand(NF, 1.0f);
    swiglu_ctx s = {to_double(inp, 2 * NF), to_double(R, NF), N, F};
    float *out = ffill(NF, NAN);
    double *want = dalloc(NF);
    k->swiglu_forward(out, inp, N, F);
    swiglu_d(want, &s);
    CHECK_CLOSE_D(label(k, "swiglu_forward vs double"), out, want, NF, TOL_EXACT);
    float *dinp = ffill(2 * NF, 0.25f);
    k->swiglu_backward(dinp, inp, R, N, F);
    double *g = dalloc(2 * NF);
    fd_grad(g, s.inp, 2 * NF, swiglu_loss, &s);
    CHECK_CLOSE_D(label(k, "swiglu_backward vs FD"), fsub(dinp, 0.25f, 2 * NF), g, 2 * NF, TOL_FD);
    pool_free();
}

/* ------------------------------------------------------------ GQA attention */

typedef struct {
    double *qkv, *R;
    int B, T, NH, NKV, HS;
} gqa_ctx;

/* Naive causal attention in double with a full score row, KV heads repeated
 * over their groups (HF repeat_kv). out (B,T,NH*HS). */
static void gqa_d(double *out, const gqa_ctx *a) {
    int W = (a->NH + 2 * a->NKV) * a->HS, C = a->NH * a->HS, group = a->NH / a->NKV;
    double *p = malloc((size_t)a->T * sizeof *p);
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < a->NH; h++) {
            int ko = C + (h / group) * a->HS, vo = ko + a->NKV * a->HS;
            for (int t = 0; t < a->T; t++) {
                const double *q = a->qkv + ((size_t)b * a->T + t) * W + h * a->HS;
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j <= t; j++) {
                    p[j] = dot_d(q, a->qkv + ((size_t)b * a->T + j) * W + ko, (size_t)a->HS) /
                           sqrt((double)a->HS);
                    if (p[j] > mx) mx = p[j];
                }
                for (int j = 0; j <= t; j++) sum += (p[j] = exp(p[j] - mx));
                double *o = out + ((size_t)b * a->T + t) * C + h * a->HS;
                for (int d = 0; d < a->HS; d++) {
                    double acc = 0.0;
                    for (int j = 0; j <= t; j++)
                        acc += p[j] * a->qkv[((size_t)b * a->T + j) * W + vo + d];
                    o[d] = acc / sum;
                }
            }
        }
    free(p);
}

static double gqa_loss(void *ctx) {
    gqa_ctx *a = ctx;
    size_t n = (size_t)a->B * a->T * a->NH * a->HS;
    double *out = malloc(n * sizeof *out);
    gqa_d(out, a);
    double L = dot_d(out, a->R, n);
    free(out);
    return L;
}

static void test_gqa(const ct_kernels *k, int B, int T, int NH, int NKV, int HS) {
    size_t W = (size_t)(NH + 2 * NKV) * HS, nqkv = (size_t)B * T * W;
    size_t nout = (size_t)B * T * NH * HS;
    float *qkv = frand(nqkv, 1.5f), *R = frand(nout, 1.0f);
    gqa_ctx a = {to_double(qkv, nqkv), to_double(R, nout), B, T, NH, NKV, HS};
    float *out = ffill(nout, NAN), *lse = falloc((size_t)B * NH * T);
    double *want = dalloc(nout);
    k->attention_gqa_forward(out, lse, qkv, B, T, NH, NKV, HS);
    gqa_d(want, &a);
    CHECK_CLOSE_D(label(k, "attention_gqa_forward vs naive double"), out, want, nout, TOL_FD);
    float *dqkv = ffill(nqkv, 0.5f);
    k->attention_gqa_backward(dqkv, R, qkv, out, lse, B, T, NH, NKV, HS);
    double *g = dalloc(nqkv);
    fd_grad(g, a.qkv, nqkv, gqa_loss, &a);
    CHECK_CLOSE_D(label(k, "attention_gqa_backward vs FD"), fsub(dqkv, 0.5f, nqkv), g, nqkv,
                  TOL_FD);
    // decode of the last position of batch 0 reproduces the forward's row
    float *kc = falloc((size_t)T * NKV * HS), *vc = falloc((size_t)T * NKV * HS);
    for (int t = 0; t < T; t++) {
        memcpy(kc + (size_t)t * NKV * HS, qkv + t * W + NH * HS, (size_t)NKV * HS * 4);
        memcpy(vc + (size_t)t * NKV * HS, qkv + t * W + (NH + NKV) * HS, (size_t)NKV * HS * 4);
    }
    float *dec = falloc((size_t)NH * HS);
    k->attention_gqa_decode(dec, qkv + (size_t)(T - 1) * W, kc, vc, T, NH, NKV, HS);
    CHECK_CLOSE_F(label(k, "attention_gqa_decode vs forward row"), dec,
                  out + (size_t)(T - 1) * NH * HS, (size_t)NH * HS, 1e-5);
    pool_free();
}

/* NKV == NH must be exactly the plain multi-head entries. */
static void test_gqa_is_mha(const ct_kernels *k, int B, int T, int NH, int HS) {
    int C = NH * HS;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    float *qkv = frand(nqkv, 1.0f), *dout = frand(nout, 1.0f);
    float *o1 = falloc(nout), *o2 = falloc(nout);
    float *l1 = falloc((size_t)B * NH * T), *l2 = falloc((size_t)B * NH * T);
    k->attention_forward(o1, l1, qkv, B, T, C, NH);
    k->attention_gqa_forward(o2, l2, qkv, B, T, NH, NH, HS);
    CHECK_MSG(memcmp(o1, o2, nout * 4) == 0 && memcmp(l1, l2, (size_t)B * NH * T * 4) == 0,
              "%s", label(k, "gqa forward with NKV == NH equals attention_forward"));
    float *d1 = falloc(nqkv), *d2 = falloc(nqkv);
    k->attention_backward(d1, dout, qkv, o1, l1, B, T, C, NH);
    k->attention_gqa_backward(d2, dout, qkv, o1, l1, B, T, NH, NH, HS);
    CHECK_MSG(memcmp(d1, d2, nqkv * 4) == 0, "%s",
              label(k, "gqa backward with NKV == NH equals attention_backward"));
    pool_free();
}

/* ------------------------------------------------------------ cpu vs ref */

static const ct_kernels *ref_k = &ct_kernels_ref;
static const ct_kernels *cpu_k = &ct_kernels_cpu;

static void cmp_llama(int B, int T, int NH, int NKV, int HS, int F) {
    int C = NH * HS, N = B * T;
    size_t NC = (size_t)N * C, W = (size_t)(NH + 2 * NKV) * HS, nqkv = (size_t)N * W;
    float *x = frand(NC, 3.0f), *w = frand(C, 1.0f), *dy = frand(NC, 1.0f);
    float *o1 = falloc(NC), *o2 = falloc(NC), *r1 = falloc(N), *r2 = falloc(N);
    ref_k->rmsnorm_forward(o1, r1, x, w, N, C, 1e-6f);
    cpu_k->rmsnorm_forward(o2, r2, x, w, N, C, 1e-6f);
    CHECK_CLOSE_F("cpu rmsnorm_forward vs ref", o2, o1, NC, TOL_CPU);
    float *dx1 = ffill(NC, 1.0f), *dx2 = ffill(NC, 1.0f), *dw1 = falloc(C), *dw2 = falloc(C);
    ref_k->rmsnorm_backward(dx1, dw1, dy, x, w, r1, N, C);
    cpu_k->rmsnorm_backward(dx2, dw2, dy, x, w, r1, N, C);
    CHECK_CLOSE_F("cpu rmsnorm_backward dinp vs ref", dx2, dx1, NC, TOL_CPU);
    CHECK_CLOSE_F("cpu rmsnorm_backward dweight vs ref", dw2, dw1, C, TOL_CPU);

    float *q1 = frand(nqkv, 1.0f), *q2 = fcopy(q1, nqkv);
    ref_k->rope_forward(q1, B, T, NH, NKV, HS, 3, 10000.0f);
    cpu_k->rope_forward(q2, B, T, NH, NKV, HS, 3, 10000.0f);
    CHECK_CLOSE_F("cpu rope_forward vs ref", q2, q1, nqkv, TOL_CPU);
    ref_k->rope_backward(q1, B, T, NH, NKV, HS, 3, 10000.0f);
    cpu_k->rope_backward(q2, B, T, NH, NKV, HS, 3, 10000.0f);
    CHECK_CLOSE_F("cpu rope_backward vs ref", q2, q1, nqkv, TOL_CPU);

    size_t NF = (size_t)N * F;
    float *h = frand(2 * NF, 6.0f), *dh = frand(NF, 1.0f);
    float *s1 = falloc(NF), *s2 = falloc(NF);
    ref_k->swiglu_forward(s1, h, N, F);
    cpu_k->swiglu_forward(s2, h, N, F);
    CHECK_CLOSE_F("cpu swiglu_forward vs ref", s2, s1, NF, TOL_CPU);
    float *ds1 = ffill(2 * NF, -0.5f), *ds2 = ffill(2 * NF, -0.5f);
    ref_k->swiglu_backward(ds1, h, dh, N, F);
    cpu_k->swiglu_backward(ds2, h, dh, N, F);
    CHECK_CLOSE_F("cpu swiglu_backward vs ref", ds2, ds1, 2 * NF, TOL_CPU);

    float *qkv = frand(nqkv, 1.0f), *dout = frand(NC, 1.0f);
    float *a1 = falloc(NC), *a2 = falloc(NC);
    float *l1 = falloc((size_t)B * NH * T), *l2 = falloc((size_t)B * NH * T);
    ref_k->attention_gqa_forward(a1, l1, qkv, B, T, NH, NKV, HS);
    cpu_k->attention_gqa_forward(a2, l2, qkv, B, T, NH, NKV, HS);
    CHECK_CLOSE_F("cpu attention_gqa_forward vs ref", a2, a1, NC, TOL_CPU);
    CHECK_CLOSE_F("cpu attention_gqa_forward lse vs ref", l2, l1, (size_t)B * NH * T, TOL_CPU);
    float *g1 = ffill(nqkv, 0.25f), *g2 = ffill(nqkv, 0.25f), *g3 = ffill(nqkv, 0.25f);
    ref_k->attention_gqa_backward(g1, dout, qkv, a1, l1, B, T, NH, NKV, HS);
    cpu_k->attention_gqa_backward(g2, dout, qkv, a1, l1, B, T, NH, NKV, HS);
    CHECK_CLOSE_F("cpu attention_gqa_backward vs ref", g2, g1, nqkv, TOL_CPU);
    // deterministic: a second run gives the same bits
    cpu_k->attention_gqa_backward(g3, dout, qkv, a1, l1, B, T, NH, NKV, HS);
    CHECK_MSG(memcmp(g2, g3, nqkv * 4) == 0, "cpu attention_gqa_backward is deterministic");
    pool_free();
}

int main(void) {
    const char *env = getenv("CT_TEST_VERBOSE");
    verbose = env && env[0] && env[0] != '0';
    const ct_kernels *tables[2] = {ref_k, cpu_k};
    for (int i = 0; i < 2; i++) {
        const ct_kernels *k = tables[i];
        if (verbose) printf("%s vs double / finite differences:\n", k->name);
        test_rmsnorm(k, 6, 13, 1e-5f);
        test_rmsnorm(k, 3, 32, 1e-6f);
        test_rmsnorm(k, 2, 1, 0.5f); // C = 1 (a large eps keeps the gradient away from 0)
        test_rope(k, 2, 5, 2, 1, 8, 0, 10000.0f);
        test_rope(k, 1, 4, 3, 3, 6, 7, 500000.0f); // pos0 > 0 (decoding), other theta
        test_rope(k, 1, 3, 1, 1, 2, 0, 10.0f);     // HS = 2
        test_swiglu(k, 5, 11);
        test_swiglu(k, 2, 33);
        test_gqa(k, 2, 6, 4, 2, 3);
        test_gqa(k, 1, 5, 3, 1, 4); // multi-query
        test_gqa(k, 1, 4, 2, 2, 2); // NKV == NH
        test_gqa_is_mha(k, 2, 9, 3, 4);
    }
    if (verbose) printf("cpu vs ref:\n");
    cmp_llama(2, 7, 4, 2, 8, 21);
    cmp_llama(2, 33, 4, 1, 16, 40);
    cmp_llama(1, 150, 8, 2, 32, 172); // several attention tiles, ragged tails
    cmp_llama(3, 5, 6, 3, 4, 7);
    return ct_test_result("test_kernels_llama");
}
