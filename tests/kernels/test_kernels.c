/*
 * Kernel tests as backend tests: every check runs each backend through its own
 * buffers (buf_alloc, upload, the entry, download), so adding a backend to
 * under_test[] in harness.c is all it takes to hold it to ref. This file: the
 * GPT-2 kernels and the memory entries (attention, the LLaMA kernels and AdamW
 * are in test_kernels_llama.c, on the same harness). Every backend, ref
 * included, is checked against double-precision forwards written here and its
 * backwards against central finite differences of them (loss L = sum(out * R),
 * so dout = R, gradient buffers pre-filled to check that backwards add); the
 * memory entries against plain host loops; then every backend under test
 * against ref on random odd shapes, two or more per op. CT_TEST_VERBOSE=1
 * prints every measured error.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/dtype.h"
#include "ct_test.h"
#include "ctrain/core.h"
#include "harness.h"

/* ------------------------------------------------------------ encoder */

typedef struct {
    double *wte, *wpe, *R;
    const int32_t *inp, *pos; /* pos (B,T) or NULL: positions 0..T-1 */
    int B, T, C, pos0;
} encoder_ctx;

static void encoder_forward_d(double *out, const encoder_ctx *e) {
    for (int i = 0; i < e->B * e->T; i++) {
        int p = e->pos0 + (e->pos ? e->pos[i] : i % e->T);
        for (int c = 0; c < e->C; c++)
            out[(size_t)i * e->C + c] = e->wte[(size_t)e->inp[i] * e->C + c] +
                                        e->wpe[(size_t)p * e->C + c];
    }
}

static double encoder_loss(void *ctx_) {
    encoder_ctx *e = ctx_;
    size_t n = (size_t)e->B * e->T * e->C;
    double *out = malloc(n * sizeof(double));
    encoder_forward_d(out, e);
    return dot_loss(out, e->R, n);
}

/* pos (B,T) or NULL: the packed rows' positions (see pos_packed). */
static void test_encoder(int B, int T, int C, int V, int maxT, const int32_t *pos) {
    size_t N = (size_t)B * T, NC = N * C, VC = (size_t)V * C, TC = (size_t)maxT * C;
    int32_t *inp = pool_alloc(N * sizeof(int32_t));
    for (size_t i = 0; i < N; i++) inp[i] = rng_int(V); // V small: repeated tokens
    float *wte = frand(VC, 1.0f), *wpe = frand(TC, 1.0f), *R = frand(NC, 1.0f);
    int pos0 = maxT - T;
    encoder_ctx e = {to_double(wte, VC), to_double(wpe, TC), to_double(R, NC), inp, pos,
                     B, T, C, pos0};
    double *want = dalloc(NC), *g_wte = dalloc(VC), *g_wpe = dalloc(TC);
    encoder_forward_d(want, &e);
    e.pos0 = 0; // backward positions are 0..T-1 (training)
    fd_grad(g_wte, e.wte, VC, encoder_loss, &e);
    fd_grad(g_wpe, e.wpe, TC, encoder_loss, &e);

    karg f[] = {ARG(falloc(NC), NC), ARG(inp, N), ARG(wte, VC), ARG(wpe, TC), ARG(pos, N)};
    karg g[] = {ARG(ffill(VC, 0.5f), VC), ARG(ffill(TC, -0.25f), TC), ARG(R, NC), ARG(inp, N),
                ARG(pos, N)};
    FOR_ALL(be) {
        RUN(be, f, be->i->encoder_forward(be, f[0].dev, f[1].dev, f[2].dev, f[3].dev, f[4].dev, B,
                                          T, C, pos0));
        CHECK_EXACT(be, pos ? "encoder_forward packed" : "encoder_forward", f[0].got, want, NC);
        RUN(be, g, be->i->encoder_backward(be, g[0].dev, g[1].dev, g[2].dev, g[3].dev, g[4].dev, B,
                                           T, C));
        CHECK_FD(be, "encoder_backward dwte", g[0].got, 0.5f, g_wte, VC);
        CHECK_FD(be, pos ? "encoder_backward dwpe packed" : "encoder_backward dwpe", g[1].got,
                 -0.25f, g_wpe, TC);
        // dwpe = NULL skips the positions and leaves dwte unchanged
        float *dwte = g[0].got;
        RUN(be, g, be->i->encoder_backward(be, g[0].dev, NULL, g[2].dev, g[3].dev, g[4].dev, B, T,
                                           C));
        CHECK_MSG(same_floats(dwte, g[0].got, VC), "%s", label(be, "encoder_backward dwpe=NULL"));
    }
    /* from a bf16 table (a frozen LoRA base): the rows widened exactly as read */
    uint16_t *wte16 = pool_alloc(VC * sizeof *wte16);
    ct_f32_to_bf16_array(wte16, wte, VC);
    encoder_ctx e16 = e;
    e16.wte = dalloc(VC);
    e16.pos0 = pos0;
    for (size_t i = 0; i < VC; i++) e16.wte[i] = ct_bf16_to_f32(wte16[i]);
    double *want16 = dalloc(NC), *want16_nopos = dalloc(NC);
    encoder_forward_d(want16, &e16);
    for (size_t i = 0; i < N; i++)
        for (int c = 0; c < C; c++)
            want16_nopos[i * C + c] = e16.wte[(size_t)inp[i] * C + c];
    karg h[] = {ARG(falloc(NC), NC), ARG(inp, N), ARG(wte16, VC), ARG(wpe, TC), ARG(pos, N)};
    FOR_ALL(be) {
        RUN(be, h, be->i->encoder_forward_wte16(be, h[0].dev, h[1].dev, h[2].dev, h[3].dev,
                                                h[4].dev, B, T, C, pos0));
        CHECK_EXACT(be, pos ? "encoder_forward_wte16 packed" : "encoder_forward_wte16", h[0].got,
                    want16, NC);
        RUN(be, h, be->i->encoder_forward_wte16(be, h[0].dev, h[1].dev, h[2].dev, NULL, h[4].dev,
                                                B, T, C, pos0));
        CHECK_EXACT(be, "encoder_forward_wte16 wpe=NULL", h[0].got, want16_nopos, NC);
    }
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

static double layernorm_loss(void *ctx_) {
    layernorm_ctx *l = ctx_;
    size_t n = (size_t)l->N * l->C;
    double *out = malloc(n * sizeof(double));
    layernorm_forward_d(out, NULL, NULL, l);
    return dot_loss(out, l->R, n);
}

static void test_layernorm(int N, int C) {
    size_t NC = (size_t)N * C;
    const float eps = 1e-5f;
    float *inp = frand(NC, 2.0f), *w = frand(C, 1.0f), *b = frand(C, 1.0f), *R = frand(NC, 1.0f);
    for (int n = 0; n < N; n++) inp[(size_t)n * C] += 0.5f * n; // rows with different means
    layernorm_ctx l = {to_double(inp, NC), to_double(w, C), to_double(b, C), to_double(R, NC),
                       N, C, eps};
    double *want = dalloc(NC), *want_mean = dalloc(N), *want_rstd = dalloc(N);
    layernorm_forward_d(want, want_mean, want_rstd, &l);
    double *g_inp = dalloc(NC), *g_w = dalloc(C), *g_b = dalloc(C);
    fd_grad(g_inp, l.inp, NC, layernorm_loss, &l);
    fd_grad(g_w, l.w, C, layernorm_loss, &l);
    fd_grad(g_b, l.b, C, layernorm_loss, &l);

    karg f[] = {ARG(falloc(NC), NC), ARG(falloc(N), N), ARG(falloc(N), N),
                ARG(inp, NC),        ARG(w, C),         ARG(b, C)};
    karg f2[] = {ARG(falloc(NC), NC), ARG(inp, NC), ARG(w, C), ARG(b, C)};
    FOR_ALL(be) {
        RUN(be, f, be->i->layernorm_forward(be, f[0].dev, f[1].dev, f[2].dev, f[3].dev, f[4].dev,
                                            f[5].dev, N, C, eps));
        CHECK_EXACT(be, "layernorm_forward out", f[0].got, want, NC);
        CHECK_EXACT(be, "layernorm_forward mean", f[1].got, want_mean, N);
        CHECK_EXACT(be, "layernorm_forward rstd", f[2].got, want_rstd, N);
        RUN(be, f2, be->i->layernorm_forward(be, f2[0].dev, NULL, NULL, f2[1].dev, f2[2].dev,
                                             f2[3].dev, N, C, eps));
        CHECK_MSG(same_floats(f[0].got, f2[0].got, NC), "%s",
                  label(be, "layernorm_forward NULL mean/rstd"));
        karg g[] = {ARG(ffill(NC, 0.5f), NC), ARG(ffill(C, -1.0f), C), ARG(ffill(C, 2.0f), C),
                    ARG(R, NC), ARG(inp, NC), ARG(w, C), ARG(f[1].got, N), ARG(f[2].got, N)};
        RUN(be, g, be->i->layernorm_backward(be, g[0].dev, g[1].dev, g[2].dev, g[3].dev, g[4].dev,
                                             g[5].dev, g[6].dev, g[7].dev, N, C));
        CHECK_FD(be, "layernorm_backward dinp", g[0].got, 0.5f, g_inp, NC);
        CHECK_FD(be, "layernorm_backward dweight", g[1].got, -1.0f, g_w, C);
        CHECK_FD(be, "layernorm_backward dbias", g[2].got, 2.0f, g_b, C);
    }
    pool_free();
}

/* residual_layernorm_forward on every backend: res = a + b (the float adds
 * themselves), out, mean and rstd the double LayerNorm of that res, and the
 * same bits as residual_forward then layernorm_forward on the same backend;
 * res aliasing a (as the model calls it) or b, and NULL statistics. */
static void test_residual_layernorm(int N, int C) {
    size_t NC = (size_t)N * C;
    const float eps = 1e-5f;
    float *a = frand(NC, 2.0f), *b = frand(NC, 1.0f), *w = frand(C, 1.0f), *bias = frand(C, 1.0f);
    for (int n = 0; n < N; n++) a[(size_t)n * C] += 0.5f * n; // rows with different means
    float *sum = falloc(NC);
    for (size_t i = 0; i < NC; i++) sum[i] = a[i] + b[i];
    layernorm_ctx l = {to_double(sum, NC), to_double(w, C), to_double(bias, C), NULL, N, C, eps};
    double *want = dalloc(NC), *want_mean = dalloc(N), *want_rstd = dalloc(N);
    layernorm_forward_d(want, want_mean, want_rstd, &l);

    /* res, out, mean, rstd, a, b, weight, bias */
    karg f[] = {ARG(ffill(NC, NAN), NC), ARG(ffill(NC, NAN), NC), ARG(ffill(N, NAN), N),
                ARG(ffill(N, NAN), N),   ARG(a, NC),             ARG(b, NC),
                ARG(w, C),               ARG(bias, C)};
    karg two[NARGS(f)];
    memcpy(two, f, sizeof f);
    /* res aliasing a or b: out, a, b, weight, bias, rstd */
    karg g[] = {ARG(ffill(NC, NAN), NC), ARG(a, NC), ARG(b, NC),
                ARG(w, C),               ARG(bias, C), ARG(ffill(N, NAN), N)};
    FOR_ALL(be) {
        RUN(be, f, be->i->residual_layernorm_forward(be, f[0].dev, f[1].dev, f[2].dev, f[3].dev,
                                                     f[4].dev, f[5].dev, f[6].dev, f[7].dev, N,
                                                     C, eps));
        CHECK_MSG(same_floats(f[0].got, sum, NC), "%s", label(be, "residual_layernorm res"));
        CHECK_EXACT(be, "residual_layernorm out", f[1].got, want, NC);
        CHECK_EXACT(be, "residual_layernorm mean", f[2].got, want_mean, N);
        CHECK_EXACT(be, "residual_layernorm rstd", f[3].got, want_rstd, N);
        RUN(be, two, {
            be->i->residual_forward(be, two[0].dev, two[4].dev, two[5].dev, NC);
            be->i->layernorm_forward(be, two[1].dev, two[2].dev, two[3].dev, two[0].dev,
                                     two[6].dev, two[7].dev, N, C, eps);
        });
        CHECK_MSG(same_floats(f[1].got, two[1].got, NC) && same_floats(f[2].got, two[2].got, N) &&
                      same_floats(f[3].got, two[3].got, N),
                  "%s", label(be, "residual_layernorm == residual_forward + layernorm_forward"));
        RUN(be, g, be->i->residual_layernorm_forward(be, g[1].dev, g[0].dev, NULL, NULL, g[1].dev,
                                                     g[2].dev, g[3].dev, g[4].dev, N, C, eps));
        CHECK_MSG(same_floats(g[1].got, sum, NC) && same_floats(g[0].got, f[1].got, NC), "%s",
                  label(be, "residual_layernorm res=a, NULL mean/rstd"));
        RUN(be, g, be->i->residual_layernorm_forward(be, g[2].dev, g[0].dev, NULL, g[5].dev,
                                                     g[1].dev, g[2].dev, g[3].dev, g[4].dev, N,
                                                     C, eps));
        CHECK_MSG(same_floats(g[2].got, sum, NC) && same_floats(g[0].got, f[1].got, NC) &&
                      same_floats(g[5].got, f[3].got, N),
                  "%s", label(be, "residual_layernorm res=b, NULL mean"));
        /* the bf16 output (layernorm_forward_out16): the fp32 output rounded,
         * with the add (b) and without (the norm of the sum itself) */
        if (!be->i->layernorm_forward_out16) continue;
        for (int add = 1; add >= 0; add--) {
            karg h[] = {ARG(ffill(NC, NAN), NC), ARG(u16fill(NC, 0x7fc1), NC),
                        ARG(ffill(N, NAN), N),   ARG(ffill(N, NAN), N),
                        ARG(add ? a : sum, NC),  ARG(b, NC),
                        ARG(w, C),               ARG(bias, C)};
            RUN(be, h, be->i->layernorm_forward_out16(be, add ? h[0].dev : NULL, h[1].dev,
                                                      h[2].dev, h[3].dev, h[4].dev,
                                                      add ? h[5].dev : NULL, h[6].dev, h[7].dev,
                                                      N, C, eps));
            CHECK_MSG((!add || same_floats(h[0].got, sum, NC)) &&
                          same_bf16_of((const uint16_t *)h[1].got, f[1].got, NC) &&
                          same_floats(h[2].got, f[2].got, N) && same_floats(h[3].got, f[3].got, N),
                      "%s", label(be, add ? "layernorm_forward_out16 == bf16(residual_layernorm)"
                                          : "layernorm_forward_out16 b=NULL == bf16(layernorm)"));
        }
    }
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

static double matmul_loss(void *ctx_) {
    matmul_ctx *mm = ctx_;
    size_t n = (size_t)mm->N * mm->OC;
    double *out = malloc(n * sizeof(double));
    matmul_forward_d(out, mm, 1);
    return dot_loss(out, mm->R, n);
}

static void test_matmul(int N, int C, int OC) {
    size_t NC = (size_t)N * C, OCC = (size_t)OC * C, NOC = (size_t)N * OC;
    float *inp = frand(NC, 1.0f), *w = frand(OCC, 1.0f), *b = frand(OC, 1.0f);
    float *R = frand(NOC, 1.0f);
    matmul_ctx mm = {to_double(inp, NC), to_double(w, OCC), to_double(b, OC), to_double(R, NOC),
                     N, C, OC};
    double *want = dalloc(NOC), *want_nb = dalloc(NOC);
    matmul_forward_d(want, &mm, 1);
    matmul_forward_d(want_nb, &mm, 0);
    double *g_inp = dalloc(NC), *g_w = dalloc(OCC), *g_b = dalloc(OC);
    fd_grad(g_inp, mm.inp, NC, matmul_loss, &mm);
    fd_grad(g_w, mm.w, OCC, matmul_loss, &mm);
    fd_grad(g_b, mm.b, OC, matmul_loss, &mm);

    // forward writes: stale (NaN) contents must not matter
    karg f[] = {ARG(ffill(NOC, NAN), NOC), ARG(inp, NC), ARG(w, OCC), ARG(b, OC)};
    karg g[] = {ARG(ffill(NC, 0.5f), NC), ARG(ffill(OCC, -1.0f), OCC), ARG(ffill(OC, 2.0f), OC),
                ARG(R, NOC), ARG(inp, NC), ARG(w, OCC)};
    FOR_ALL(be) {
        RUN(be, f, be->i->matmul_forward(be, f[0].dev, f[1].dev, f[2].dev, f[3].dev, N, C, OC));
        CHECK_EXACT(be, "matmul_forward", f[0].got, want, NOC);
        RUN(be, f, be->i->matmul_forward(be, f[0].dev, f[1].dev, f[2].dev, NULL, N, C, OC));
        CHECK_EXACT(be, "matmul_forward bias=NULL", f[0].got, want_nb, NOC);
        RUN(be, g, be->i->matmul_backward(be, g[0].dev, g[1].dev, g[2].dev, g[3].dev, g[4].dev,
                                          g[5].dev, N, C, OC));
        CHECK_FD(be, "matmul_backward dinp", g[0].got, 0.5f, g_inp, NC);
        CHECK_FD(be, "matmul_backward dweight", g[1].got, -1.0f, g_w, OCC);
        CHECK_FD(be, "matmul_backward dbias", g[2].got, 2.0f, g_b, OC);
        // NULL dweight and dbias skip them and leave dinp unchanged
        float *dinp = g[0].got;
        RUN(be, g, be->i->matmul_backward(be, g[0].dev, NULL, NULL, g[3].dev, g[4].dev, g[5].dev,
                                          N, C, OC));
        CHECK_MSG(same_floats(dinp, g[0].got, NC), "%s",
                  label(be, "matmul_backward dweight=dbias=NULL"));
    }
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

static double gelu_loss(void *ctx_) {
    gelu_ctx *g = ctx_;
    double L = 0.0;
    for (size_t i = 0; i < g->n; i++) L += gelu_d(g->x[i]) * g->R[i];
    return L;
}

static void test_gelu(size_t n) {
    float *x = frand(n, 4.0f), *R = frand(n, 1.0f);
    gelu_ctx gc = {to_double(x, n), to_double(R, n), n};
    double *want = dalloc(n), *g = dalloc(n);
    for (size_t i = 0; i < n; i++) want[i] = gelu_d(x[i]);
    fd_grad(g, gc.x, n, gelu_loss, &gc);
    karg f[] = {ARG(falloc(n), n), ARG(x, n)};
    karg b[] = {ARG(ffill(n, 0.5f), n), ARG(x, n), ARG(R, n)};
    FOR_ALL(be) {
        RUN(be, f, be->i->gelu_forward(be, f[0].dev, f[1].dev, n));
        CHECK_EXACT(be, "gelu_forward", f[0].got, want, n);
        check_act_out16(be, "mlp_act_forward_out16 GELU == bf16(gelu_forward)", x, f[0].got, 1,
                        (int)n, CT_ACT16_GELU);
        RUN(be, b, be->i->gelu_backward(be, b[0].dev, b[1].dev, b[2].dev, n));
        CHECK_FD(be, "gelu_backward", b[0].got, 0.5f, g, n);
    }
    pool_free();
}

typedef struct {
    double *a, *b, *R;
    size_t n;
} residual_ctx;

static double residual_loss(void *ctx_) {
    residual_ctx *r = ctx_;
    double L = 0.0;
    for (size_t i = 0; i < r->n; i++) L += (r->a[i] + r->b[i]) * r->R[i];
    return L;
}

static void test_residual(size_t n) {
    float *a = frand(n, 1.0f), *b = frand(n, 1.0f), *R = frand(n, 1.0f);
    residual_ctx rc = {to_double(a, n), to_double(b, n), to_double(R, n), n};
    double *want = dalloc(n), *ga = dalloc(n), *gb = dalloc(n);
    for (size_t i = 0; i < n; i++) want[i] = (double)a[i] + b[i];
    fd_grad(ga, rc.a, n, residual_loss, &rc);
    fd_grad(gb, rc.b, n, residual_loss, &rc);
    karg f[] = {ARG(falloc(n), n), ARG(a, n), ARG(b, n)};
    karg g[] = {ARG(ffill(n, 0.5f), n), ARG(ffill(n, -0.5f), n), ARG(R, n)};
    FOR_ALL(be) {
        RUN(be, f, be->i->residual_forward(be, f[0].dev, f[1].dev, f[2].dev, n));
        float *out = f[0].got;
        CHECK_EXACT(be, "residual_forward", out, want, n);
        RUN(be, f, be->i->residual_forward(be, f[1].dev, f[1].dev, f[2].dev, n)); // out aliasing a
        CHECK_MSG(same_floats(f[1].got, out, n), "%s", label(be, "residual_forward out=a"));
        RUN(be, g, be->i->residual_backward(be, g[0].dev, g[1].dev, g[2].dev, n));
        CHECK_FD(be, "residual_backward da", g[0].got, 0.5f, ga, n);
        CHECK_FD(be, "residual_backward db", g[1].got, -0.5f, gb, n);
    }
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
static double ce_loss(void *ctx_) {
    ce_ctx *ce = ctx_;
    double *losses = malloc((size_t)ce->N * sizeof(double));
    ce_losses_d(losses, ce);
    double L = 0.0;
    for (int n = 0; n < ce->N; n++) L += losses[n];
    free(losses);
    return ce->dloss * L;
}

static void test_crossentropy(int N, int V) {
    size_t NV = (size_t)N * V;
    float *logits = frand(NV, 4.0f);
    int32_t *targets = pool_alloc((size_t)N * sizeof(int32_t));
    for (int n = 0; n < N; n++) targets[n] = n % 3 == 1 ? -1 : rng_int(V); // some ignored
    float dloss = 1.0f / (float)N;
    ce_ctx ce = {to_double(logits, NV), targets, N, V, dloss};
    double *want = dalloc(N), *g = dalloc(NV);
    ce_losses_d(want, &ce);
    fd_grad(g, ce.logits, NV, ce_loss, &ce);

    karg f[] = {ARG(falloc(N), N), ARG(ffill(NV, NAN), NV), ARG(logits, NV), ARG(targets, N)};
    karg a[] = {ARG(falloc(N), N), ARG(logits, NV), ARG(targets, N)};
    FOR_ALL(be) {
        RUN(be, f, be->i->crossentropy_forward(be, f[0].dev, f[1].dev, f[2].dev, f[3].dev, N, V,
                                               dloss));
        CHECK_EXACT(be, "crossentropy losses", f[0].got, want, N);
        CHECK_FD(be, "crossentropy dlogits", f[1].got, 0.0f, g, NV);
        // dlogits may alias logits
        RUN(be, a, be->i->crossentropy_forward(be, a[0].dev, a[1].dev, a[1].dev, a[2].dev, N, V,
                                               dloss));
        CHECK_MSG(same_floats(a[1].got, f[1].got, NV) && same_floats(a[0].got, f[0].got, N), "%s",
                  label(be, "crossentropy dlogits aliasing logits"));
        // dlogits NULL still gives the losses
        RUN(be, a, be->i->crossentropy_forward(be, a[0].dev, NULL, a[1].dev, a[2].dev, N, V,
                                               dloss));
        CHECK_MSG(same_floats(a[0].got, f[0].got, N), "%s", label(be, "crossentropy dlogits=NULL"));
    }
    pool_free();
}

/* ------------------------------------------------------------ memory entries */

/* buf_alloc and host_alloc (zero-filled, counted), upload, download and copy
 * at odd offsets, memset, buf_free (uncounted; NULL is fine); events around
 * them measure a time >= 0 and synchronize returns CT_OK. */
static void test_transfers(size_t n) {
    size_t bytes = n * sizeof(float);
    float *x = frand(n, 3.0f), *y = frand(n, 1.0f), *want = fcopy(y, n);
    uint8_t *zero = pool_alloc(bytes), part[13];
    memcpy(want + 3, x + 5, (n - 8) * sizeof(float));
    memset((uint8_t *)want + 1, 0xA5, 10);
    FOR_ALL(be) {
        ct_memstats m0, m1, m2;
        ct_event e0, e1;
        be->i->event_record(be, &e0);
        ct_ctx_memstats(ctx, &m0);
        float *dx = dev_alloc(be, bytes), *dy = dev_alloc(be, bytes);
        ct_ctx_memstats(ctx, &m1);
        CHECK_MSG(m1.current[CT_TAG_SCRATCH] - m0.current[CT_TAG_SCRATCH] >= 2 * (int64_t)bytes &&
                      !memcmp(dev_down(be, dx, bytes), zero, bytes),
                  "%s", label(be, "buf_alloc counted, zero-filled"));
        float *stage = be->i->host_alloc(be, bytes, CT_TAG_IO);
        CHECK_MSG(stage && !memcmp(stage, zero, bytes), "%s", label(be, "host_alloc zero-filled"));
        if (!stage) abort();
        memcpy(stage, x, bytes); // staging memory: the host writes it
        be->i->upload(be, dx, stage, bytes);
        be->i->host_free(be, stage);
        be->i->download(be, part, (uint8_t *)dx + 3, sizeof part);
        CHECK_MSG(!memcmp(dev_down(be, dx, bytes), x, bytes) &&
                      !memcmp(part, (uint8_t *)x + 3, sizeof part),
                  "%s", label(be, "upload, download whole and at +3"));
        be->i->upload(be, dy, y, bytes);
        be->i->copy(be, dy + 3, dx + 5, (n - 8) * sizeof(float));
        be->i->memset(be, (uint8_t *)dy + 1, 0xA5, 10);
        be->i->event_record(be, &e1);
        double dt = be->i->event_elapsed(be, &e0, &e1);
        CHECK_MSG(dt >= 0.0 && isfinite(dt), "%s: %g", label(be, "event_elapsed >= 0"), dt);
        CHECK_MSG(be->i->synchronize(be) == CT_OK, "%s", label(be, "synchronize"));
        CHECK_MSG(!memcmp(dev_down(be, dy, bytes), want, bytes), "%s",
                  label(be, "copy and memset at offsets"));
        be->i->buf_free(be, dx);
        be->i->buf_free(be, dy);
        be->i->buf_free(be, NULL);
        ct_ctx_memstats(ctx, &m2);
        CHECK_MSG(m2.current[CT_TAG_SCRATCH] == m0.current[CT_TAG_SCRATCH], "%s",
                  label(be, "buf_free uncounts"));
    }
    pool_free();
}

/* f32_to_bf16 and bf16_to_f32, bit for bit those of core/dtype.h. */
static void test_bf16(size_t n) {
    static const uint32_t special[] = {
        0x7FC00000u, 0xFFC00001u, 0x7F800001u, // quiet NaN, NaN with payload, signalling NaN
        0x7F800000u, 0xFF800000u, 0x00000000u, 0x80000000u, // +-inf, +-0
        0x00000001u, 0x807FFFFFu, 0x7F7FFFFFu, // subnormals; FLT_MAX rounds to inf
        0x3F808000u, 0x3F818000u, 0x3F80FFFFu, // ties to even (down, up), just below a tie
    };
    float *x = frand(n, 4.0f);
    for (size_t i = 0; i < sizeof special / sizeof *special && i < n; i++) {
        memcpy(&x[i], &special[i], 4);
        memcpy(&x[n - 1 - i], &special[i], 4);
    }
    uint16_t *h = pool_alloc(n * 2), *want16 = pool_alloc(n * 2);
    float *want32 = falloc(n);
    for (size_t i = 0; i < n; i++) h[i] = (uint16_t)(i * 40503u); // every pattern once n >= 64K
    ct_f32_to_bf16_array(want16, x, n);
    ct_bf16_to_f32_array(want32, h, n);
    FOR_ALL(be) {
        void *dx = dev_up(be, x, n * 4), *dh = dev_up(be, h, n * 2);
        void *d16 = dev_alloc(be, n * 2), *d32 = dev_alloc(be, n * 4);
        be->i->f32_to_bf16(be, d16, dx, n);
        be->i->bf16_to_f32(be, d32, dh, n);
        CHECK_MSG(memcmp(dev_down(be, d16, n * 2), want16, n * 2) == 0, "%s n=%zu",
                  label(be, "f32_to_bf16 == ct_f32_to_bf16_array"), n);
        CHECK_MSG(memcmp(dev_down(be, d32, n * 4), want32, n * 4) == 0, "%s n=%zu",
                  label(be, "bf16_to_f32 == ct_bf16_to_f32_array"), n);
        void *bufs[] = {dx, dh, d16, d32};
        for (int i = 0; i < 4; i++) be->i->buf_free(be, bufs[i]);
    }
    pool_free();
}

/* scale_add (a block at column offsets, strided rows), fill and scale. */
static void test_elementwise_memory(size_t n) {
    const int rows = 5, cols = 7, ldy = 13, ldx = 11, oy = 3, ox = 2;
    const float a = -0.75f;
    float *y = frand((size_t)rows * ldy, 1.0f), *x = frand((size_t)rows * ldx, 1.0f);
    float *want[2] = {fcopy(y, (size_t)rows * ldy), fcopy(y, (size_t)rows * ldy)};
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            want[0][r * ldy + oy + c] = a * x[r * ldx + ox + c];
            want[1][r * ldy + oy + c] += a * x[r * ldx + ox + c];
        }
    float *v = frand(n, 3.0f), *want_fill = fcopy(v, n), *want_scale = fcopy(v, n);
    for (size_t i = 1; i + 1 < n; i++) want_fill[i] = 2.5f;
    for (size_t i = n / 2; i < n; i++) want_scale[i] *= -3.0f;
    karg d[] = {ARG(y, rows * ldy), ARG(x, rows * ldx)};
    karg f[] = {ARG(v, n)};
    FOR_ALL(be) {
        for (int acc = 0; acc < 2; acc++) {
            RUN(be, d, be->i->scale_add(be, (float *)d[0].dev + oy, ldy, (float *)d[1].dev + ox,
                                        ldx, rows, cols, a, acc));
            CHECK_CLOSE_F(label(be, acc ? "scale_add accumulate" : "scale_add write"), d[0].got,
                          want[acc], (size_t)rows * ldy, TOL_EXACT);
        }
        RUN(be, f, be->i->fill(be, (float *)f[0].dev + 1, 2.5f, n - 2));
        CHECK_MSG(same_floats(f[0].got, want_fill, n), "%s", label(be, "fill"));
        RUN(be, f, be->i->scale(be, (float *)f[0].dev + n / 2, -3.0f, n - n / 2));
        CHECK_MSG(same_floats(f[0].got, want_scale, n), "%s", label(be, "scale"));
    }
    pool_free();
}

/* sum and sumsq against double loops; nonfinite with NaN and Inf planted. */
static void test_reductions(size_t n) {
    float *x = frand(n, 3.0f), *bad = fcopy(x, n);
    bad[0] = NAN;
    bad[n / 3] = -NAN;
    bad[n / 2] = INFINITY;
    bad[n - 1] = -INFINITY;
    double sum = 0.0, sabs = 0.0, ss = 0.0;
    size_t nf = 0, nf_in = 0; // in x(n) and in x[1, n-1)
    for (size_t i = 0; i < n; i++) {
        sum += x[i];
        sabs += fabs(x[i]);
        ss += (double)x[i] * x[i];
        nf += !isfinite(bad[i]);
        nf_in += i > 0 && i + 1 < n && !isfinite(bad[i]);
    }
    karg d[] = {ARG(x, n), ARG(bad, n)};
    FOR_ALL(be) {
        double s = 0.0, s0 = 1.0, q = 0.0, q0 = 1.0;
        size_t c = 0, c_in = 0, c_x = 1, c0 = 1;
        RUN(be, d, {
            s = be->i->sum(be, d[0].dev, n);
            s0 = be->i->sum(be, d[0].dev, 0);
            q = be->i->sumsq(be, d[0].dev, n);
            q0 = be->i->sumsq(be, d[0].dev, 0);
            c = be->i->nonfinite(be, d[1].dev, n);
            c_in = be->i->nonfinite(be, (float *)d[1].dev + 1, n - 2);
            c_x = be->i->nonfinite(be, d[0].dev, n);
            c0 = be->i->nonfinite(be, d[1].dev, 0);
        });
        CHECK_MSG(fabs(s - sum) <= 1e-11 * sabs && s0 == 0.0, "%s: %.17g vs %.17g",
                  label(be, "sum"), s, sum);
        CHECK_MSG(fabs(q - ss) <= 1e-11 * ss && q0 == 0.0, "%s: %.17g vs %.17g",
                  label(be, "sumsq"), q, ss);
        CHECK_MSG(c == nf && c_in == nf_in && c_x == 0 && c0 == 0, "%s: %zu %zu %zu %zu",
                  label(be, "nonfinite"), c, c_in, c_x, c0);
    }
    pool_free();
}

/* The mask before ct_dropout_threshold existed: the hash's top 24 bits as a
 * float in [0, 1), kept when >= p. The integer test must agree everywhere. */
static bool keep_float(uint64_t key, uint64_t i, float p) {
    uint64_t x = key ^ i;
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    float u = (float)(x >> 40) * (1.0f / 16777216.0f);
    return u >= p;
}

/* dropout_forward writes, dropout_backward adds, both by ct_dropout_keep of
 * offset + i; the decisions depend on the element index only, so a buffer
 * split into parts at their offsets draws the whole buffer's mask (in place
 * too). */
static void test_dropout(size_t n, float p, uint64_t key, uint64_t offset) {
    float *x = frand(n, 2.0f), *dout = frand(n, 1.0f), *dinp = frand(n, 1.0f);
    float *want = falloc(n), *want_d = fcopy(dinp, n), inv = 1.0f / (1.0f - p);
    size_t kept = 0, differ = 0;
    for (size_t i = 0; i < n; i++) differ += ct_dropout_keep(key, offset + i, p) !=
                                             keep_float(key, offset + i, p);
    CHECK_MSG(differ == 0, "ct_dropout_keep differs from the float test at %zu of %zu (p=%g)",
              differ, n, p);
    for (size_t i = 0; i < n; i++) {
        bool keep = ct_dropout_keep(key, offset + i, p);
        kept += keep;
        want[i] = keep ? x[i] * inv : 0.0f;
        want_d[i] += keep ? dout[i] * inv : 0.0f;
    }
    if (n >= 10000) // the mask keeps about 1 - p of the elements
        CHECK_MSG(fabs((double)kept / n - (1.0 - p)) < 0.01, "ct_dropout_keep kept %zu of %zu at p=%g",
                  kept, n, p);
    karg f[] = {ARG(ffill(n, NAN), n), ARG(x, n)};
    karg g[] = {ARG(dinp, n), ARG(dout, n)};
    FOR_ALL(be) {
        RUN(be, f, be->i->dropout_forward(be, f[0].dev, f[1].dev, n, p, key, offset));
        size_t leaks = 0; // dropped elements must be exactly 0
        for (size_t i = 0; i < n; i++)
            leaks += !ct_dropout_keep(key, offset + i, p) && f[0].got[i] != 0.0f;
        CHECK_MSG(leaks == 0, "%s: %zu dropped elements not 0", label(be, "dropout_forward"), leaks);
        CHECK_CLOSE_F(label(be, "dropout_forward vs ct_dropout_keep"), f[0].got, want, n, TOL_EXACT);
        RUN(be, g, be->i->dropout_backward(be, g[0].dev, g[1].dev, n, p, key, offset));
        CHECK_CLOSE_F(label(be, "dropout_backward adds"), g[0].got, want_d, n, TOL_EXACT);
        // three parts at their offsets, in place: the whole buffer's bits
        size_t cut[4] = {0, n / 3, n / 3 + (n > 7 ? 7 : 0), n};
        karg h[] = {ARG(x, n)};
        RUN(be, h, {
            for (int k = 0; k < 3; k++) {
                float *part = (float *)h[0].dev + cut[k];
                be->i->dropout_forward(be, part, part, cut[k + 1] - cut[k], p, key,
                                       offset + cut[k]);
            }
        });
        CHECK_MSG(same_floats(h[0].got, f[0].got, n), "%s",
                  label(be, "dropout_forward in parts at their offsets == whole"));
        karg h2[] = {ARG(dinp, n), ARG(dout, n)};
        RUN(be, h2, {
            for (int k = 0; k < 3; k++)
                be->i->dropout_backward(be, (float *)h2[0].dev + cut[k],
                                        (const float *)h2[1].dev + cut[k], cut[k + 1] - cut[k], p,
                                        key, offset + cut[k]);
        });
        CHECK_MSG(same_floats(h2[0].got, g[0].got, n), "%s",
                  label(be, "dropout_backward in parts at their offsets == whole"));
    }
    pool_free();
}

/* ------------------------------------------------------------ backends vs ref */

/* lens (nlens) or NULL: the rows pack examples of these lengths (pos_packed). */
static void cmp_encoder(int B, int T, int C, int V, int maxT, const int *lens, int nlens) {
    size_t N = (size_t)B * T, VC = (size_t)V * C, TC = (size_t)maxT * C;
    int32_t *inp = pool_alloc(N * sizeof(int32_t));
    for (size_t i = 0; i < N; i++) inp[i] = rng_int(V);
    int32_t *pos = lens ? pos_packed(B, T, lens, nlens) : NULL;
    float *wte = frand(VC, 1.0f), *wpe = frand(TC, 1.0f), *dout = frand(N * C, 1.0f);
    karg f[] = {OUT("encoder_forward", falloc(N * C), N * C), ARG(inp, N), ARG(wte, VC),
                ARG(wpe, TC), ARG(pos, N)};
    VS_REF(be, f, be->i->encoder_forward(be, f[0].dev, f[1].dev, f[2].dev, f[3].dev, f[4].dev, B,
                                         T, C, maxT - T));
    uint16_t *wte16 = pool_alloc(VC * sizeof *wte16);
    ct_f32_to_bf16_array(wte16, wte, VC);
    karg h[] = {OUT("encoder_forward_wte16", falloc(N * C), N * C), ARG(inp, N), ARG(wte16, VC),
                ARG(wpe, TC), ARG(pos, N)};
    VS_REF(be, h, be->i->encoder_forward_wte16(be, h[0].dev, h[1].dev, h[2].dev, h[3].dev,
                                               h[4].dev, B, T, C, maxT - T));
    karg g[] = {OUT("encoder_backward dwte", frand(VC, 1.0f), VC),
                OUT("encoder_backward dwpe", frand(TC, 1.0f), TC), ARG(dout, N * C), ARG(inp, N),
                ARG(pos, N)};
    VS_REF(be, g, be->i->encoder_backward(be, g[0].dev, g[1].dev, g[2].dev, g[3].dev, g[4].dev,
                                          B, T, C));
    pool_free();
}

/* Positions 0..T-1 in every row (one example per row) give the bits of pos =
 * NULL, on every backend. */
static void test_encoder_iota(int B, int T, int C, int V) {
    size_t N = (size_t)B * T, VC = (size_t)V * C, TC = (size_t)T * C;
    int32_t *inp = pool_alloc(N * sizeof(int32_t)), *iota = pool_alloc(N * sizeof(int32_t));
    for (size_t i = 0; i < N; i++) inp[i] = rng_int(V), iota[i] = (int32_t)(i % T);
    float *wte = frand(VC, 1.0f), *wpe = frand(TC, 1.0f), *dout = frand(N * C, 1.0f);
    karg f[] = {ARG(falloc(N * C), N * C), ARG(inp, N), ARG(wte, VC), ARG(wpe, TC), ARG(iota, N),
                ARG(frand(VC, 1.0f), VC), ARG(frand(TC, 1.0f), TC), ARG(dout, N * C)};
    FOR_ALL(be) {
        float *got[3];
        for (int k = 0; k < 2; k++) {
            RUN(be, f, {
                void *p = k ? f[4].dev : NULL;
                be->i->encoder_forward(be, f[0].dev, f[1].dev, f[2].dev, f[3].dev, p, B, T, C, 0);
                be->i->encoder_backward(be, f[5].dev, f[6].dev, f[7].dev, f[1].dev, p, B, T, C);
            });
            if (!k) got[0] = f[0].got, got[1] = f[5].got, got[2] = f[6].got;
        }
        CHECK_MSG(same_floats(got[0], f[0].got, N * C) && same_floats(got[1], f[5].got, VC) &&
                      same_floats(got[2], f[6].got, TC),
                  "%s", label(be, "encoder with positions 0..T-1 == without"));
    }
    pool_free();
}

static void cmp_layernorm(int N, int C) {
    size_t NC = (size_t)N * C;
    float *inp = frand(NC, 3.0f), *w = frand(C, 1.0f), *b = frand(C, 1.0f), *dout = frand(NC, 1.0f);
    karg f[] = {OUT("layernorm_forward out", falloc(NC), NC),
                OUT("layernorm_forward mean", falloc(N), N),
                OUT("layernorm_forward rstd", falloc(N), N), ARG(inp, NC), ARG(w, C), ARG(b, C)};
    VS_REF(be, f, be->i->layernorm_forward(be, f[0].dev, f[1].dev, f[2].dev, f[3].dev, f[4].dev,
                                           f[5].dev, N, C, 1e-5f));
    karg g[] = {OUT("layernorm_backward dinp", frand(NC, 1.0f), NC),
                OUT("layernorm_backward dweight", frand(C, 1.0f), C),
                OUT("layernorm_backward dbias", frand(C, 1.0f), C),
                ARG(dout, NC), ARG(inp, NC), ARG(w, C), ARG(f[1].want, N), ARG(f[2].want, N)};
    VS_REF(be, g, be->i->layernorm_backward(be, g[0].dev, g[1].dev, g[2].dev, g[3].dev, g[4].dev,
                                            g[5].dev, g[6].dev, g[7].dev, N, C));
    pool_free();
}

static void cmp_residual_layernorm(int N, int C) {
    size_t NC = (size_t)N * C;
    float *a = frand(NC, 3.0f), *b = frand(NC, 1.0f), *w = frand(C, 1.0f), *bias = frand(C, 1.0f);
    karg f[] = {OUT("residual_layernorm res", falloc(NC), NC),
                OUT("residual_layernorm out", falloc(NC), NC),
                OUT("residual_layernorm mean", falloc(N), N),
                OUT("residual_layernorm rstd", falloc(N), N),
                ARG(a, NC), ARG(b, NC), ARG(w, C), ARG(bias, C)};
    VS_REF(be, f, be->i->residual_layernorm_forward(be, f[0].dev, f[1].dev, f[2].dev, f[3].dev,
                                                    f[4].dev, f[5].dev, f[6].dev, f[7].dev, N, C,
                                                    1e-5f));
    pool_free();
}

static void cmp_matmul(int N, int C, int OC) {
    size_t NC = (size_t)N * C, OCC = (size_t)OC * C, NOC = (size_t)N * OC;
    float *inp = frand(NC, 1.0f), *w = frand(OCC, 1.0f), *b = frand(OC, 1.0f);
    float *dout = frand(NOC, 1.0f);
    karg f[] = {OUT("matmul_forward", falloc(NOC), NOC), ARG(inp, NC), ARG(w, OCC), ARG(b, OC)};
    VS_REF(be, f, be->i->matmul_forward(be, f[0].dev, f[1].dev, f[2].dev, f[3].dev, N, C, OC));
    f[0].name = "matmul_forward bias=NULL";
    VS_REF(be, f, be->i->matmul_forward(be, f[0].dev, f[1].dev, f[2].dev, NULL, N, C, OC));
    karg g[] = {OUT("matmul_backward dinp", frand(NC, 1.0f), NC),
                OUT("matmul_backward dweight", frand(OCC, 1.0f), OCC),
                OUT("matmul_backward dbias", frand(OC, 1.0f), OC), ARG(dout, NOC), ARG(inp, NC),
                ARG(w, OCC)};
    VS_REF(be, g, be->i->matmul_backward(be, g[0].dev, g[1].dev, g[2].dev, g[3].dev, g[4].dev,
                                         g[5].dev, N, C, OC));
    pool_free();
}

/* The optional fused linear+GELU (matmul_gelu_forward and its _bf16 twin),
 * on each backend that has it: against ref's, and against the same backend's
 * two calls (matmul_forward or _bf16, then gelu_forward): bit for bit on ref
 * and sim (their fused entry is those two kernels), within TOL_CPU elsewhere
 * (cuda: one cuBLASLt GEMM whose epilogue adds the bias and applies GELU).
 * The weights spread pre over about [-6, 6], where the erf GELU is 4e-4 from
 * the tanh form, far outside the tolerance. bias NULL too. */
static void cmp_matmul_gelu(int N, int C, int OC) {
    size_t NC = (size_t)N * C, OCC = (size_t)OC * C, NOC = (size_t)N * OC;
    float *inp = frand(NC, 1.0f), *w = frand(OCC, 6.0f / sqrtf((float)(C > 0 ? C : 1)));
    float *b = frand(OC, 1.0f);
    uint16_t *w16 = pool_alloc(OCC * sizeof(uint16_t) + 2);
    ct_f32_to_bf16_array(w16, w, OCC);
    for (int bf16 = 0; bf16 < 2; bf16++) {
        for (int with_bias = 1; with_bias >= 0; with_bias--) {
            const char *pre_name = bf16 ? "matmul_gelu_forward_bf16 pre" : "matmul_gelu_forward pre";
            const char *out_name = bf16 ? "matmul_gelu_forward_bf16 out" : "matmul_gelu_forward out";
            karg f[] = {OUT(pre_name, falloc(NOC), NOC), OUT(out_name, falloc(NOC), NOC),
                        ARG(inp, NC), ARG(w, OCC), ARG(b, OC)};
            if (bf16) f[3] = (karg)ARG(w16, OCC);
            karg g[] = {ARG(falloc(NOC), NOC), ARG(falloc(NOC), NOC), ARG(inp, NC), ARG(w, OCC),
                        ARG(b, OC)};
            if (bf16) g[3] = (karg)ARG(w16, OCC);
            FOR_ALL(be) {
                const ct_backend_i *k = be->i;
                if (bf16 ? !k->matmul_gelu_forward_bf16 : !k->matmul_gelu_forward) continue;
                const float *bias = NULL;
                RUN(be, f, bias = with_bias ? f[4].dev : NULL;
                    bf16 ? k->matmul_gelu_forward_bf16(be, f[0].dev, f[1].dev, f[2].dev, f[3].dev,
                                                       bias, N, C, OC)
                         : k->matmul_gelu_forward(be, f[0].dev, f[1].dev, f[2].dev, f[3].dev,
                                                  bias, N, C, OC));
                check_vs_ref(be, f, NARGS(f));
                RUN(be, g, bias = with_bias ? g[4].dev : NULL;
                    bf16 ? k->matmul_forward_bf16(be, g[0].dev, g[2].dev, g[3].dev, bias, N, C, OC)
                         : k->matmul_forward(be, g[0].dev, g[2].dev, g[3].dev, bias, N, C, OC);
                    k->gelu_forward(be, g[1].dev, g[0].dev, NOC));
                bool exact = !strcmp(k->name, "ref") || !strcmp(k->name, "sim");
                for (int o = 0; o < 2; o++) {
                    char what[160];
                    snprintf(what, sizeof what, "%s %s bias=%s == the two calls", k->name,
                             o ? out_name : pre_name, with_bias ? "yes" : "NULL");
                    if (exact)
                        CHECK_MSG(same_floats(f[o].got, g[o].got, NOC), "%s: not bit for bit",
                                  what);
                    else
                        CHECK_CLOSE_F(what, f[o].got, g[o].got, NOC, TOL_CPU);
                }
            }
        }
    }
    pool_free();
}

static void cmp_elementwise(size_t n) {
    float *x = frand(n, 5.0f), *y = frand(n, 1.0f), *dout = frand(n, 1.0f);
    karg f[] = {OUT("gelu_forward", falloc(n), n), ARG(x, n)};
    VS_REF(be, f, be->i->gelu_forward(be, f[0].dev, f[1].dev, n));
    karg g[] = {OUT("gelu_backward", frand(n, 1.0f), n), ARG(x, n), ARG(dout, n)};
    VS_REF(be, g, be->i->gelu_backward(be, g[0].dev, g[1].dev, g[2].dev, n));
    karg r[] = {OUT("residual_forward", falloc(n), n), ARG(x, n), ARG(y, n)};
    VS_REF(be, r, be->i->residual_forward(be, r[0].dev, r[1].dev, r[2].dev, n));
    karg s[] = {OUT("residual_backward da", frand(n, 1.0f), n),
                OUT("residual_backward db", frand(n, 1.0f), n), ARG(dout, n)};
    VS_REF(be, s, be->i->residual_backward(be, s[0].dev, s[1].dev, s[2].dev, n));
    pool_free();
}

static void cmp_crossentropy(int N, int V) {
    size_t NV = (size_t)N * V;
    float *logits = frand(NV, 8.0f);
    int32_t *targets = pool_alloc((size_t)N * sizeof(int32_t));
    for (int n = 0; n < N; n++) targets[n] = n == 2 ? -100 : rng_int(V);
    karg f[] = {OUT("crossentropy losses", falloc(N), N), OUT("crossentropy dlogits", falloc(NV), NV),
                ARG(logits, NV), ARG(targets, N)};
    VS_REF(be, f, be->i->crossentropy_forward(be, f[0].dev, f[1].dev, f[2].dev, f[3].dev, N, V,
                                              0.25f));
    pool_free();
}

int main(void) {
    if (harness_init(0x9E3779B97F4A7C15ULL) != CT_OK) {
        fprintf(stderr, "test_kernels: %s\n", ct_last_error());
        return 1;
    }

    if (verbose) printf("every backend vs double / finite differences:\n");
    test_encoder(3, 7, 12, 5, 9, NULL);
    test_encoder(2, 1, 5, 3, 4, NULL);
    {
        const int lens[] = {3, 1, 1, 4, 2};
        test_encoder(3, 9, 6, 5, 11, pos_packed(3, 9, lens, 5)); // packed rows, pos0 > 0
    }
    test_encoder_iota(3, 10, 7, 11);
    test_layernorm(6, 13);
    test_layernorm(3, 1); // C = 1: zero variance, output = bias
    test_residual_layernorm(6, 13);
    test_residual_layernorm(5, 40); // two 16-lane blocks and a tail
    test_residual_layernorm(3, 1);
    test_matmul(5, 13, 17);
    test_matmul(4, 1, 3);
    test_gelu(301);
    test_residual(37);
    test_crossentropy(7, 37);
    test_crossentropy(2, 1); // V = 1: loss 0, zero gradient

    if (verbose) printf("memory entries vs host loops:\n");
    test_transfers(1003);
    test_bf16(13);
    test_bf16(100003); // >= 64K: the threaded converters
    test_elementwise_memory(7);
    test_elementwise_memory(1001);
    test_reductions(7);
    test_reductions(100003);
    test_dropout(100003, 0.1f, 0x5DEECE66DULL, 0);
    test_dropout(7, 0.5f, 42, 0);
    test_dropout(33, 0.0f, 1, 0);
    test_dropout(20011, 0.3f, 7, 3 * 20011); // a micro-batch past the first
    test_dropout(4099, 0.999f, 9, (uint64_t)1 << 41);

    if (verbose) printf("backends vs ref:\n");
    cmp_encoder(3, 7, 12, 37, 9, NULL, 0);
    cmp_encoder(4, 64, 100, 50, 70, NULL, 0);
    {
        const int lens[] = {1, 20, 7, 1, 1, 33, 2};
        cmp_encoder(3, 7, 12, 37, 9, lens + 2, 3);
        cmp_encoder(4, 64, 100, 50, 70, lens, 7);
    }
    cmp_layernorm(21, 12);
    cmp_layernorm(5, 13);
    cmp_layernorm(64, 768);
    cmp_residual_layernorm(21, 12);
    cmp_residual_layernorm(5, 13);
    cmp_residual_layernorm(64, 768);
    cmp_residual_layernorm(3, 300); // wider than a GPU block's threads, ragged
    cmp_matmul(5, 13, 17);
    cmp_matmul(21, 12, 36);
    cmp_matmul(67, 129, 131); // large enough for BLAS to block
    cmp_matmul(0, 5, 3);      // degenerate shapes fall back to ref
    cmp_matmul(3, 0, 4);
    cmp_matmul_gelu(5, 13, 17);   // OC not a multiple of 8: cuda's plain path
    cmp_matmul_gelu(21, 12, 40);
    cmp_matmul_gelu(64, 96, 256); // cuda: cuBLASLt's epilogue
    cmp_elementwise(7);
    cmp_elementwise(100003);
    cmp_crossentropy(5, 37);
    cmp_crossentropy(9, 1001);

    return harness_finish("test_kernels");
}
