/*
 * Tests of attention, the LLaMA kernels and AdamW as backend tests, on the
 * harness shared with test_kernels.c (harness.h): each backend runs through its
 * own buffers, and adding one to under_test[] in harness.c holds it to ref.
 * Attention is one entry for grouped-query and plain multi-head (NKV == NH)
 * attention; the LLaMA kernels are RMSNorm, RoPE (Hugging Face's rotate_half
 * convention, at a table of inverse frequencies), Qwen3's per-head q/k RMSNorm
 * (both norms also with Gemma's 1 + weight scale), SwiGLU and Gemma's GeGLU. Every backend, ref included, is checked against
 * double-precision forwards written here from the papers' formulas and its
 * backwards against central finite differences of them (loss L = sum(out * R),
 * gradient buffers pre-filled to check that backwards add); attention against a
 * naive softmax with the KV heads repeated, decode against the forward's rows,
 * GQA against MHA over repeated KV heads, AdamW against torch's formula over 3
 * steps. Then every backend under test against ref on odd shapes, attention
 * also on several tile shapes, on head sizes that fall back to ref, and for
 * determinism. Precision bf16's attention entries, on the backends that have
 * them (cuda's tensor-core kernels: a GPU run), against the double formula
 * over bf16-rounded inputs, whose analytic backward is checked against finite
 * differences everywhere. CT_TEST_VERBOSE=1 prints every measured error.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/dtype.h"
#include "ct_test.h"
#include "ctrain/core.h"
#include "ctrain/model.h"
#include "harness.h"

#define TOL_ROPE 2e-6  /* RoPE angles are rounded to fp32 as HF does */

/* ------------------------------------------------------------ rmsnorm */

typedef struct {
    double *inp, *w, *R;
    int N, C;
    double eps, wofs; /* wofs 1: Gemma's (1 + weight) scale */
} rms_ctx;

static void rmsnorm_d(double *out, double *rstd, const rms_ctx *r) {
    for (int n = 0; n < r->N; n++) {
        const double *x = r->inp + (size_t)n * r->C;
        double ms = 0.0;
        for (int c = 0; c < r->C; c++) ms += x[c] * x[c];
        double s = 1.0 / sqrt(ms / r->C + r->eps);
        for (int c = 0; c < r->C; c++) out[(size_t)n * r->C + c] = x[c] * s * (r->wofs + r->w[c]);
        if (rstd) rstd[n] = s;
    }
}

static double rms_loss(void *ctx_) {
    rms_ctx *r = ctx_;
    size_t n = (size_t)r->N * r->C;
    double *out = malloc(n * sizeof *out);
    rmsnorm_d(out, NULL, r);
    return dot_loss(out, r->R, n);
}

static void test_rmsnorm(int N, int C, float eps, float wofs) {
    size_t NC = (size_t)N * C;
    float *inp = frand(NC, 2.0f), *w = frand(C, 1.0f), *R = frand(NC, 1.0f);
    /* the fp32 sum wofs + w is what the kernels scale by (Gemma's, in fp32) */
    rms_ctx r = {to_double(inp, NC), to_double(w, C), to_double(R, NC), N, C, eps, wofs};
    if (wofs != 0.0f)
        for (int c = 0; c < C; c++) r.w[c] = (double)(wofs + w[c]) - wofs;
    double *want = dalloc(NC), *want_rstd = dalloc(N), *g_inp = dalloc(NC), *g_w = dalloc(C);
    rmsnorm_d(want, want_rstd, &r);
    fd_grad(g_inp, r.inp, NC, rms_loss, &r);
    fd_grad(g_w, r.w, C, rms_loss, &r);

    karg f[] = {ARG(ffill(NC, NAN), NC), ARG(falloc(N), N), ARG(inp, NC), ARG(w, C)};
    karg f2[] = {ARG(falloc(NC), NC), ARG(inp, NC), ARG(w, C)};
    FOR_ALL(be) {
        RUN(be, f, be->i->rmsnorm_forward(be, f[0].dev, f[1].dev, f[2].dev, f[3].dev, N, C, eps,
                                          wofs));
        CHECK_EXACT(be, "rmsnorm_forward out", f[0].got, want, NC);
        CHECK_EXACT(be, "rmsnorm_forward rstd", f[1].got, want_rstd, N);
        RUN(be, f2, be->i->rmsnorm_forward(be, f2[0].dev, NULL, f2[1].dev, f2[2].dev, N, C, eps,
                                           wofs));
        CHECK_MSG(same_floats(f[0].got, f2[0].got, NC), "%s",
                  label(be, "rmsnorm_forward with rstd NULL"));
        karg g[] = {ARG(ffill(NC, 0.5f), NC), ARG(ffill(C, -1.0f), C), ARG(R, NC),
                    ARG(inp, NC),            ARG(w, C),               ARG(f[1].got, N)};
        RUN(be, g, be->i->rmsnorm_backward(be, g[0].dev, g[1].dev, g[2].dev, g[3].dev, g[4].dev,
                                           g[5].dev, N, C, wofs));
        CHECK_FD(be, "rmsnorm_backward dinp", g[0].got, 0.5f, g_inp, NC);
        CHECK_FD(be, "rmsnorm_backward dweight", g[1].got, -1.0f, g_w, C);
    }
    pool_free();
}

/* residual_rmsnorm_forward on every backend: res = a + b (the float adds),
 * out and rstd the double RMSNorm of that res, the same bits as
 * residual_forward then rmsnorm_forward on the same backend; res aliasing a
 * (as the model calls it) or b, and rstd NULL. */
static void test_residual_rmsnorm(int N, int C, float eps, float wofs) {
    size_t NC = (size_t)N * C;
    float *a = frand(NC, 2.0f), *b = frand(NC, 1.0f), *w = frand(C, 1.0f);
    float *sum = falloc(NC);
    for (size_t i = 0; i < NC; i++) sum[i] = a[i] + b[i];
    rms_ctx r = {to_double(sum, NC), to_double(w, C), NULL, N, C, eps, wofs};
    if (wofs != 0.0f)
        for (int c = 0; c < C; c++) r.w[c] = (double)(wofs + w[c]) - wofs;
    double *want = dalloc(NC), *want_rstd = dalloc(N);
    rmsnorm_d(want, want_rstd, &r);

    /* res, out, rstd, a, b, weight */
    karg f[] = {ARG(ffill(NC, NAN), NC), ARG(ffill(NC, NAN), NC), ARG(ffill(N, NAN), N),
                ARG(a, NC),              ARG(b, NC),              ARG(w, C)};
    karg two[NARGS(f)];
    memcpy(two, f, sizeof f);
    /* res aliasing a or b: out, a, b, weight */
    karg g[] = {ARG(ffill(NC, NAN), NC), ARG(a, NC), ARG(b, NC), ARG(w, C)};
    FOR_ALL(be) {
        RUN(be, f, be->i->residual_rmsnorm_forward(be, f[0].dev, f[1].dev, f[2].dev, f[3].dev,
                                                   f[4].dev, f[5].dev, N, C, eps, wofs));
        CHECK_MSG(same_floats(f[0].got, sum, NC), "%s", label(be, "residual_rmsnorm res"));
        CHECK_EXACT(be, "residual_rmsnorm out", f[1].got, want, NC);
        CHECK_EXACT(be, "residual_rmsnorm rstd", f[2].got, want_rstd, N);
        RUN(be, two, {
            be->i->residual_forward(be, two[0].dev, two[3].dev, two[4].dev, NC);
            be->i->rmsnorm_forward(be, two[1].dev, two[2].dev, two[0].dev, two[5].dev, N, C, eps,
                                   wofs);
        });
        CHECK_MSG(same_floats(f[1].got, two[1].got, NC) && same_floats(f[2].got, two[2].got, N),
                  "%s", label(be, "residual_rmsnorm == residual_forward + rmsnorm_forward"));
        RUN(be, g, be->i->residual_rmsnorm_forward(be, g[1].dev, g[0].dev, NULL, g[1].dev,
                                                   g[2].dev, g[3].dev, N, C, eps, wofs));
        CHECK_MSG(same_floats(g[1].got, sum, NC) && same_floats(g[0].got, f[1].got, NC), "%s",
                  label(be, "residual_rmsnorm res=a, rstd NULL"));
        RUN(be, g, be->i->residual_rmsnorm_forward(be, g[2].dev, g[0].dev, NULL, g[1].dev,
                                                   g[2].dev, g[3].dev, N, C, eps, wofs));
        CHECK_MSG(same_floats(g[2].got, sum, NC) && same_floats(g[0].got, f[1].got, NC), "%s",
                  label(be, "residual_rmsnorm res=b"));
        /* the bf16 output (rmsnorm_forward_out16): the fp32 output rounded,
         * with the add (b) and without (the norm of the sum itself) */
        if (!be->i->rmsnorm_forward_out16) continue;
        for (int add = 1; add >= 0; add--) {
            karg h[] = {ARG(ffill(NC, NAN), NC), ARG(u16fill(NC, 0x7fc1), NC),
                        ARG(ffill(N, NAN), N),   ARG(add ? a : sum, NC),
                        ARG(b, NC),              ARG(w, C)};
            RUN(be, h, be->i->rmsnorm_forward_out16(be, add ? h[0].dev : NULL, h[1].dev, h[2].dev,
                                                    h[3].dev, add ? h[4].dev : NULL, h[5].dev, N,
                                                    C, eps, wofs));
            CHECK_MSG((!add || same_floats(h[0].got, sum, NC)) &&
                          same_bf16_of((const uint16_t *)h[1].got, f[1].got, NC) &&
                          same_floats(h[2].got, f[2].got, N),
                      "%s", label(be, add ? "rmsnorm_forward_out16 == bf16(residual_rmsnorm)"
                                          : "rmsnorm_forward_out16 b=NULL == bf16(rmsnorm)"));
        }
    }
    pool_free();
}

/* ------------------------------------------------------------ rope */

typedef struct {
    double *x, *R;
    const int32_t *pos; /* (B,T) or NULL: positions 0..T-1 */
    int B, T, NH, NKV, HS, pos0;
    const float *inv;   /* (HS/2) inverse frequencies */
} rope_ctx;

/* The RoFormer rotation in double, HF's pairing: (i, i + HS/2) turns by
 * the fp32 angle pos * inv[i] (theta^(-2i/HS) unscaled). q and k heads
 * rotate; v passes through. */
static void rope_d(double *out, const rope_ctx *r) {
    int W = (r->NH + 2 * r->NKV) * r->HS, half = r->HS / 2;
    for (int b = 0; b < r->B; b++)
        for (int t = 0; t < r->T; t++) {
            const double *x = r->x + ((size_t)b * r->T + t) * W;
            double *y = out + ((size_t)b * r->T + t) * W;
            for (int j = 0; j < W; j++) y[j] = x[j];
            for (int h = 0; h < r->NH + r->NKV; h++)
                for (int i = 0; i < half; i++) {
                    int p = r->pos ? r->pos[(size_t)b * r->T + t] : t;
                    /* the fp32 angle, as HF rounds it (at position 9000 an
                     * fp32 ulp is ~1e-3 rad: the spec, not an error) */
                    double a = (float)((float)(r->pos0 + p) * r->inv[i]);
                    double x1 = x[h * r->HS + i], x2 = x[h * r->HS + i + half];
                    y[h * r->HS + i] = x1 * cos(a) - x2 * sin(a);
                    y[h * r->HS + i + half] = x2 * cos(a) + x1 * sin(a);
                }
        }
}

static double rope_loss(void *ctx_) {
    rope_ctx *r = ctx_;
    size_t n = (size_t)r->B * r->T * (r->NH + 2 * r->NKV) * r->HS;
    double *out = malloc(n * sizeof *out);
    rope_d(out, r);
    return dot_loss(out, r->R, n);
}

/* RoPE's unscaled inverse frequencies theta^(-2i/HS) (HS/2), from the
 * model's function (a llama config of head size HS). */
static float *rope_table(int HS, float theta) {
    ct_model_config c;
    ct_model_config_llama(&c, 1, 1, 1, HS, 1, 2, 1);
    c.rope_theta = theta;
    float *inv = pool_alloc((size_t)(HS / 2) * sizeof(float));
    ct_model_rope_inv_freq(&c, inv);
    return inv;
}

/* pos (B,T) or NULL: the packed rows' positions (pos_packed). The table
 * (HS/2) is theta's unless inv is given. */
static void test_rope_table(int B, int T, int NH, int NKV, int HS, int pos0, const float *inv,
                            const int32_t *pos) {
    size_t n = (size_t)B * T * (NH + 2 * NKV) * HS, N = (size_t)B * T;
    float *x = frand(n, 1.0f), *R = frand(n, 1.0f);
    float *table = (float *)inv; /* uploaded as an argument, like the others */
    rope_ctx r = {to_double(x, n), to_double(R, n), pos, B, T, NH, NKV, HS, pos0, inv};
    double *want = dalloc(n), *g = dalloc(n);
    rope_d(want, &r);
    fd_grad(g, r.x, n, rope_loss, &r);
    int W = (NH + 2 * NKV) * HS, voff = (NH + NKV) * HS;

    karg f[] = {ARG(x, n), ARG(pos, N), ARG(table, HS / 2)};
    karg b[] = {ARG(R, n), ARG(pos, N), ARG(table, HS / 2)};
    FOR_ALL(be) {
        RUN(be, f, be->i->rope_forward(be, f[0].dev, f[1].dev, B, T, NH, NKV, HS, pos0, f[2].dev));
        CHECK_CLOSE_D(label(be, pos ? "rope_forward packed vs double" : "rope_forward vs double"),
                      f[0].got, want, n, TOL_ROPE);
        // v is untouched bit for bit
        int v_same = 1;
        for (int row = 0; row < B * T; row++)
            v_same &= same_floats(f[0].got + (size_t)row * W + voff, x + (size_t)row * W + voff,
                                  (size_t)NKV * HS);
        CHECK_MSG(v_same, "%s", label(be, "rope_forward leaves v alone"));
        // backward writes the transpose rotation: dx = J^T R
        RUN(be, b, be->i->rope_backward(be, b[0].dev, b[1].dev, B, T, NH, NKV, HS, pos0, b[2].dev));
        CHECK_FD(be, pos ? "rope_backward packed" : "rope_backward", b[0].got, 0.0f, g, n);
        // backward undoes forward (the rotation is orthogonal)
        RUN(be, f, {
            be->i->rope_forward(be, f[0].dev, f[1].dev, B, T, NH, NKV, HS, pos0, f[2].dev);
            be->i->rope_backward(be, f[0].dev, f[1].dev, B, T, NH, NKV, HS, pos0, f[2].dev);
        });
        CHECK_CLOSE_F(label(be, "rope_backward(rope_forward(x)) == x"), f[0].got, x, n, 1e-6);
    }
    pool_free();
}

static void test_rope(int B, int T, int NH, int NKV, int HS, int pos0, float theta,
                      const int32_t *pos) {
    test_rope_table(B, T, NH, NKV, HS, pos0, rope_table(HS, theta), pos);
}

/* The model's inverse frequencies: unscaled, theta^(-2i/HS) to fp32
 * rounding; linear scaling divides them; Llama 3's keeps the high
 * frequencies (wavelength < old/high), divides the low ones (wavelength >
 * old/low) and interpolates the band between, smooth = (old/wavelength -
 * low) / (high - low), all checked against double formulas. */
static void test_rope_inv_freq(void) {
    ct_model_config c;
    ct_model_config_llama(&c, 1, 4, 4, 4 * 64, 1, 2, 131072);
    c.rope_theta = 500000.0f;
    int half = 32;
    float base[32], lin[32], l3[32];
    ct_model_rope_inv_freq(&c, base);
    for (int i = 0; i < half; i++) {
        double want = pow(500000.0, -2.0 * i / 64);
        CHECK_MSG(fabs(base[i] - want) <= 2e-7 * want, "rope inv_freq[%d] %.9g vs %.9g", i,
                  (double)base[i], want);
    }
    c.rope_scaling = (ct_rope_scaling){CT_ROPE_LINEAR, 4.0f, 0, 0, 0};
    ct_model_rope_inv_freq(&c, lin);
    for (int i = 0; i < half; i++)
        CHECK_MSG(lin[i] == base[i] / 4.0f, "linear rope inv_freq[%d]", i);
    c.rope_scaling = (ct_rope_scaling){CT_ROPE_LLAMA3, 32.0f, 1.0f, 4.0f, 8192};
    ct_model_rope_inv_freq(&c, l3);
    int kept = 0, divided = 0, between = 0;
    for (int i = 0; i < half; i++) {
        double wl = 2 * CT_PI / base[i], want;
        if (wl < 8192.0 / 4.0) {
            want = base[i], kept++;
        } else if (wl > 8192.0) {
            want = base[i] / 32.0, divided++;
        } else {
            double sm = (8192.0 / wl - 1.0) / 3.0;
            want = (1 - sm) * base[i] / 32.0 + sm * base[i], between++;
        }
        CHECK_MSG(fabs(l3[i] - want) <= 1e-6 * want, "llama3 rope inv_freq[%d] %.9g vs %.9g", i,
                  (double)l3[i], want);
    }
    CHECK_MSG(kept && divided && between, "llama3 scaling: %d kept, %d divided, %d between",
              kept, divided, between);
}

/* ------------------------------------------------------------ q/k norms */

typedef struct {
    double *inp, *wq, *wk, *R;
    int N, NH, NKV, HS;
    double eps, wofs;
} qkn_ctx;

/* Each q head (HS values) of a row is RMSNorm'd with wq, each k head with
 * wk; v copied. rstd (N, NH+NKV) unless NULL. */
static void qknorm_d(double *out, double *rstd, const qkn_ctx *q) {
    int heads = q->NH + q->NKV, W = (q->NH + 2 * q->NKV) * q->HS;
    for (int n = 0; n < q->N; n++) {
        for (int j = 0; j < W; j++) out[(size_t)n * W + j] = q->inp[(size_t)n * W + j];
        for (int h = 0; h < heads; h++) {
            const double *x = q->inp + (size_t)n * W + (size_t)h * q->HS;
            const double *w = h < q->NH ? q->wq : q->wk;
            double ms = 0.0;
            for (int c = 0; c < q->HS; c++) ms += x[c] * x[c];
            double s = 1.0 / sqrt(ms / q->HS + q->eps);
            for (int c = 0; c < q->HS; c++)
                out[(size_t)n * W + (size_t)h * q->HS + c] = x[c] * s * (q->wofs + w[c]);
            if (rstd) rstd[(size_t)n * heads + h] = s;
        }
    }
}

static double qkn_loss(void *ctx_) {
    qkn_ctx *q = ctx_;
    size_t n = (size_t)q->N * (q->NH + 2 * q->NKV) * q->HS;
    double *out = malloc(n * sizeof *out);
    qknorm_d(out, NULL, q);
    return dot_loss(out, q->R, n);
}

static void test_qknorm(int N, int NH, int NKV, int HS, float eps, float wofs) {
    size_t n = (size_t)N * (NH + 2 * NKV) * HS, nr = (size_t)N * (NH + NKV);
    float *inp = frand(n, 2.0f), *wq = frand(HS, 1.5f), *wk = frand(HS, 1.5f), *R = frand(n, 1.0f);
    qkn_ctx q = {to_double(inp, n), to_double(wq, HS), to_double(wk, HS), to_double(R, n), N, NH,
                 NKV, HS, eps, wofs};
    if (wofs != 0.0f)
        for (int c = 0; c < HS; c++) { /* the kernels' fp32 sums */
            q.wq[c] = (double)(wofs + wq[c]) - wofs;
            q.wk[c] = (double)(wofs + wk[c]) - wofs;
        }
    double *want = dalloc(n), *want_rstd = dalloc(nr), *g_inp = dalloc(n);
    double *g_wq = dalloc(HS), *g_wk = dalloc(HS);
    qknorm_d(want, want_rstd, &q);
    fd_grad(g_inp, q.inp, n, qkn_loss, &q);
    fd_grad(g_wq, q.wq, HS, qkn_loss, &q);
    fd_grad(g_wk, q.wk, HS, qkn_loss, &q);
    karg f[] = {ARG(ffill(n, NAN), n), ARG(falloc(nr), nr), ARG(inp, n), ARG(wq, HS),
                ARG(wk, HS)};
    FOR_ALL(be) {
        RUN(be, f, be->i->qknorm_forward(be, f[0].dev, f[1].dev, f[2].dev, f[3].dev, f[4].dev, N,
                                         NH, NKV, HS, eps, wofs));
        CHECK_EXACT(be, "qknorm_forward out", f[0].got, want, n);
        CHECK_EXACT(be, "qknorm_forward rstd", f[1].got, want_rstd, nr);
        // dinp is written (a prefill must not survive), the weights' gradients add
        karg g[] = {ARG(ffill(n, 7.0f), n), ARG(ffill(HS, 0.5f), HS), ARG(ffill(HS, -1.0f), HS),
                    ARG(R, n),              ARG(inp, n),              ARG(wq, HS),
                    ARG(wk, HS),            ARG(f[1].got, nr)};
        RUN(be, g, be->i->qknorm_backward(be, g[0].dev, g[1].dev, g[2].dev, g[3].dev, g[4].dev,
                                          g[5].dev, g[6].dev, g[7].dev, N, NH, NKV, HS, wofs));
        CHECK_FD(be, "qknorm_backward dinp", g[0].got, 0.0f, g_inp, n);
        CHECK_FD(be, "qknorm_backward dwq", g[1].got, 0.5f, g_wq, HS);
        CHECK_FD(be, "qknorm_backward dwk", g[2].got, -1.0f, g_wk, HS);
        // in place: dinp == dout gives the same bits
        float *first = g[0].got;
        karg h[] = {ARG(R, n), ARG(falloc(HS), HS), ARG(falloc(HS), HS), ARG(inp, n), ARG(wq, HS),
                    ARG(wk, HS), ARG(f[1].got, nr)};
        RUN(be, h, be->i->qknorm_backward(be, h[0].dev, h[1].dev, h[2].dev, h[0].dev, h[3].dev,
                                          h[4].dev, h[5].dev, h[6].dev, N, NH, NKV, HS, wofs));
        CHECK_MSG(same_floats(first, h[0].got, n), "%s", label(be, "qknorm_backward in place"));
    }
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

static double swiglu_loss(void *ctx_) {
    swiglu_ctx *s = ctx_;
    size_t n = (size_t)s->N * s->F;
    double *out = malloc(n * sizeof *out);
    swiglu_d(out, s);
    return dot_loss(out, s->R, n);
}

static void test_swiglu(int N, int F) {
    size_t NF = (size_t)N * F;
    float *inp = frand(2 * NF, 4.0f), *R = frand(NF, 1.0f);
    swiglu_ctx s = {to_double(inp, 2 * NF), to_double(R, NF), N, F};
    double *want = dalloc(NF), *g = dalloc(2 * NF);
    swiglu_d(want, &s);
    fd_grad(g, s.inp, 2 * NF, swiglu_loss, &s);
    karg f[] = {ARG(ffill(NF, NAN), NF), ARG(inp, 2 * NF)};
    karg b[] = {ARG(ffill(2 * NF, 0.25f), 2 * NF), ARG(inp, 2 * NF), ARG(R, NF)};
    FOR_ALL(be) {
        RUN(be, f, be->i->swiglu_forward(be, f[0].dev, f[1].dev, N, F));
        CHECK_EXACT(be, "swiglu_forward", f[0].got, want, NF);
        check_act_out16(be, "mlp_act_forward_out16 SwiGLU == bf16(swiglu_forward)", inp,
                        f[0].got, N, F, CT_ACT16_SWIGLU);
        RUN(be, b, be->i->swiglu_backward(be, b[0].dev, b[1].dev, b[2].dev, N, F));
        CHECK_FD(be, "swiglu_backward", b[0].got, 0.25f, g, 2 * NF);
    }
    pool_free();
}

/* ------------------------------------------------------------ geglu */

static void geglu_d(double *out, const swiglu_ctx *s) {
    for (int n = 0; n < s->N; n++)
        for (int i = 0; i < s->F; i++) {
            double g = s->inp[(size_t)n * 2 * s->F + i], u = s->inp[(size_t)n * 2 * s->F + s->F + i];
            /* GELU, tanh form: 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) */
            double gelu = 0.5 * g * (1.0 + tanh(sqrt(2.0 / CT_PI) * (g + 0.044715 * g * g * g)));
            out[(size_t)n * s->F + i] = gelu * u;
        }
}

static double geglu_loss(void *ctx_) {
    swiglu_ctx *s = ctx_;
    size_t n = (size_t)s->N * s->F;
    double *out = malloc(n * sizeof *out);
    geglu_d(out, s);
    return dot_loss(out, s->R, n);
}

static void test_geglu(int N, int F) {
    size_t NF = (size_t)N * F;
    float *inp = frand(2 * NF, 4.0f), *R = frand(NF, 1.0f);
    swiglu_ctx s = {to_double(inp, 2 * NF), to_double(R, NF), N, F};
    double *want = dalloc(NF), *g = dalloc(2 * NF);
    geglu_d(want, &s);
    fd_grad(g, s.inp, 2 * NF, geglu_loss, &s);
    karg f[] = {ARG(ffill(NF, NAN), NF), ARG(inp, 2 * NF)};
    karg b[] = {ARG(ffill(2 * NF, 0.25f), 2 * NF), ARG(inp, 2 * NF), ARG(R, NF)};
    FOR_ALL(be) {
        RUN(be, f, be->i->geglu_forward(be, f[0].dev, f[1].dev, N, F));
        CHECK_EXACT(be, "geglu_forward", f[0].got, want, NF);
        check_act_out16(be, "mlp_act_forward_out16 GeGLU == bf16(geglu_forward)", inp, f[0].got,
                        N, F, CT_ACT16_GEGLU);
        RUN(be, b, be->i->geglu_backward(be, b[0].dev, b[1].dev, b[2].dev, N, F));
        CHECK_FD(be, "geglu_backward", b[0].got, 0.25f, g, 2 * NF);
    }
    pool_free();
}

/* ------------------------------------------------------------ attention */

typedef struct {
    double *qkv, *R;
    const int32_t *pos; /* (B,T) or NULL: query t sees keys [t - pos[b,t], t], or [0, t] */
    int B, T, NH, NKV, HS;
    const ct_attn_dropout *drop; /* dropout of the probabilities, or NULL */
} att_ctx;

static double dot_d(const double *a, const double *b, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Naive causal attention in double with a full score row, KV heads repeated
 * over their groups (HF repeat_kv), each query over its example's keys j0..t
 * when packed, the normalised probabilities multiplied by the dropout mask
 * (a fixed function of the key: finite differences see a smooth function).
 * out (B,T,NH*HS); lse (B,NH,T) unless NULL. */
static void att_d(double *out, double *lse, const att_ctx *a) {
    int W = (a->NH + 2 * a->NKV) * a->HS, C = a->NH * a->HS, group = a->NH / a->NKV;
    double *p = malloc((size_t)a->T * sizeof *p);
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < a->NH; h++) {
            int ko = C + (h / group) * a->HS, vo = ko + a->NKV * a->HS;
            for (int t = 0; t < a->T; t++) {
                const double *q = a->qkv + ((size_t)b * a->T + t) * W + h * a->HS;
                double mx = -INFINITY, sum = 0.0;
                int j0 = a->pos ? t - a->pos[(size_t)b * a->T + t] : 0;
                for (int j = j0; j <= t; j++) {
                    p[j] = dot_d(q, a->qkv + ((size_t)b * a->T + j) * W + ko, a->HS) /
                           sqrt((double)a->HS);
                    if (p[j] > mx) mx = p[j];
                }
                for (int j = j0; j <= t; j++) sum += (p[j] = exp(p[j] - mx));
                if (lse) lse[((size_t)b * a->NH + h) * a->T + t] = mx + log(sum);
                double *o = out + ((size_t)b * a->T + t) * C + h * a->HS;
                for (int d = 0; d < a->HS; d++) {
                    double acc = 0.0;
                    for (int j = j0; j <= t; j++)
                        acc += p[j] * ct_attn_drop_mult(a->drop, b, h, t, j, a->NH, a->T) *
                               a->qkv[((size_t)b * a->T + j) * W + vo + d];
                    o[d] = acc / sum;
                }
            }
        }
    free(p);
}

static double att_loss(void *ctx_) {
    att_ctx *a = ctx_;
    size_t n = (size_t)a->B * a->T * a->NH * a->HS;
    double *out = malloc(n * sizeof *out);
    att_d(out, NULL, a);
    return dot_loss(out, a->R, n);
}

/* pos (B,T) or NULL: the packed rows' positions (pos_packed); drop: dropout
 * of the probabilities or NULL (decode is then not compared: it never drops). */
static void test_attention_drop(int B, int T, int NH, int NKV, int HS, const int32_t *pos,
                                const ct_attn_dropout *drop) {
    int C = NH * HS, KV = NKV * HS, W = (NH + 2 * NKV) * HS;
    size_t rows = (size_t)B * T, nqkv = rows * W, nout = rows * C, NL = (size_t)B * NH * T;
    float *qkv = frand(nqkv, 1.5f), *R = frand(nout, 1.0f);
    att_ctx a = {to_double(qkv, nqkv), to_double(R, nout), pos, B, T, NH, NKV, HS, drop};
    double *want = dalloc(nout), *want_lse = dalloc(NL), *g = dalloc(nqkv);
    att_d(want, want_lse, &a);
    fd_grad(g, a.qkv, nqkv, att_loss, &a);
    // the decode caches: the key and value rows of every position
    float *kc = falloc(rows * KV), *vc = falloc(rows * KV);
    for (size_t r = 0; r < rows; r++) {
        memcpy(kc + r * KV, qkv + r * W + C, (size_t)KV * sizeof(float));
        memcpy(vc + r * KV, qkv + r * W + C + KV, (size_t)KV * sizeof(float));
    }

    karg f[] = {ARG(ffill(nout, NAN), nout), ARG(ffill(NL, NAN), NL), ARG(qkv, nqkv),
                ARG(pos, rows)};
    FOR_ALL(be) {
        RUN(be, f, be->i->attention_forward(be, f[0].dev, f[1].dev, f[2].dev, f[3].dev, drop, B,
                                            T, NH, NKV, HS));
        CHECK_CLOSE_D(label(be, !drop ? (pos ? "attention_forward packed out vs double"
                                             : "attention_forward out vs double")
                                      : (pos ? "attention_forward packed dropout out vs double"
                                             : "attention_forward dropout out vs double")),
                      f[0].got, want, nout, TOL_EXACT);
        CHECK_EXACT(be, pos ? "attention_forward packed lse" : "attention_forward lse", f[1].got,
                    want_lse, NL);
        karg bw[] = {ARG(ffill(nqkv, 0.5f), nqkv), ARG(R, nout), ARG(qkv, nqkv),
                     ARG(f[0].got, nout), ARG(f[1].got, NL), ARG(pos, rows)};
        RUN(be, bw, be->i->attention_backward(be, bw[0].dev, bw[1].dev, bw[2].dev, bw[3].dev,
                                              bw[4].dev, bw[5].dev, drop, B, T, NH, NKV, HS));
        CHECK_CLOSE_D(label(be, !drop ? (pos ? "attention_backward packed dqkv vs FD"
                                             : "attention_backward dqkv vs FD")
                                      : (pos ? "attention_backward packed dropout dqkv vs FD"
                                             : "attention_backward dropout dqkv vs FD")),
                      fsub(bw[0].got, 0.5f, nqkv), g, nqkv, TOL_FD);
        if (drop) continue;
        // decode: query row t over exactly the cached rows of its example (0..t
        // unpacked) equals forward row t
        double maxerr = 0.0;
        for (size_t r = 0; r < rows; r++) {
            size_t t = pos ? (size_t)pos[r] : r % T, n = (t + 1) * KV;
            karg d[] = {ARG(falloc(C), C), ARG(qkv + r * W, C), ARG(kc + (r - t) * KV, n),
                        ARG(vc + (r - t) * KV, n)};
            RUN(be, d, be->i->attention_decode(be, d[0].dev, d[1].dev, d[2].dev, d[3].dev,
                                               (int)t + 1, NH, NKV, HS));
            double err = rel_err(d[0].got, to_double(f[0].got + r * C, C), C, NULL);
            if (err > maxerr) maxerr = err;
        }
        if (verbose)
            printf("  %-50s err %.2e  (tol %.0e)\n", label(be, "attention_decode vs forward rows"),
                   maxerr, TOL_EXACT);
        CHECK_MSG(maxerr <= TOL_EXACT, "%s: err %.3g",
                  label(be, "attention_decode vs forward rows"), maxerr);
    }
    pool_free();
}

static void test_attention(int B, int T, int NH, int NKV, int HS, const int32_t *pos) {
    test_attention_drop(B, T, NH, NKV, HS, pos, NULL);
}

/* Grouped-query attention is multi-head attention over the KV heads repeated
 * across their groups: the same outputs and dq bit for bit, and dk, dv the
 * sums of the repeated heads' gradients over each group; with dropout too
 * (drop, or NULL), whose mask is indexed by the query head. */
static void test_repeat_kv(int B, int T, int NH, int NKV, int HS, const ct_attn_dropout *drop) {
    int C = NH * HS, KV = NKV * HS, W = (NH + 2 * NKV) * HS, group = NH / NKV;
    size_t rows = (size_t)B * T, NL = (size_t)B * NH * T;
    float *qkv = frand(rows * W, 1.5f), *rep = falloc(rows * 3 * C), *dout = frand(rows * C, 1.0f);
    for (size_t r = 0; r < rows; r++) {
        memcpy(rep + r * 3 * C, qkv + r * W, (size_t)C * sizeof(float));
        for (int h = 0; h < NH; h++)
            for (int kv = 0; kv < 2; kv++) // k, then v
                memcpy(rep + r * 3 * C + (1 + kv) * C + h * HS,
                       qkv + r * W + C + kv * KV + (h / group) * HS, (size_t)HS * sizeof(float));
    }
    karg g[] = {ARG(falloc(rows * C), rows * C), ARG(falloc(NL), NL), ARG(qkv, rows * W),
                ARG(falloc(rows * W), rows * W), ARG(dout, rows * C)};
    karg m[] = {ARG(falloc(rows * C), rows * C), ARG(falloc(NL), NL), ARG(rep, rows * 3 * C),
                ARG(falloc(rows * 3 * C), rows * 3 * C), ARG(dout, rows * C)};
    FOR_ALL(be) {
        RUN(be, g, {
            be->i->attention_forward(be, g[0].dev, g[1].dev, g[2].dev, NULL, drop, B, T, NH, NKV,
                                     HS);
            be->i->attention_backward(be, g[3].dev, g[4].dev, g[2].dev, g[0].dev, g[1].dev, NULL,
                                      drop, B, T, NH, NKV, HS);
        });
        RUN(be, m, {
            be->i->attention_forward(be, m[0].dev, m[1].dev, m[2].dev, NULL, drop, B, T, NH, NH,
                                     HS);
            be->i->attention_backward(be, m[3].dev, m[4].dev, m[2].dev, m[0].dev, m[1].dev, NULL,
                                      drop, B, T, NH, NH, HS);
        });
        CHECK_MSG(same_floats(g[0].got, m[0].got, rows * C) && same_floats(g[1].got, m[1].got, NL),
                  "%s", label(be, "attention_forward GQA == MHA over repeated KV heads"));
        // the MHA gradients folded back onto the GQA layout
        double *want = dalloc(rows * W);
        for (size_t r = 0; r < rows; r++) {
            const float *dm = m[3].got + r * 3 * C;
            for (int c = 0; c < C; c++) want[r * W + c] = dm[c];
            for (int h = 0; h < NH; h++)
                for (int kv = 0; kv < 2; kv++)
                    for (int d = 0; d < HS; d++)
                        want[r * W + C + kv * KV + (h / group) * HS + d] +=
                            dm[(1 + kv) * C + h * HS + d];
        }
        int dq_same = 1;
        for (size_t r = 0; r < rows; r++)
            dq_same &= same_floats(g[3].got + r * W, m[3].got + r * 3 * C, (size_t)C);
        CHECK_MSG(dq_same, "%s", label(be, "attention_backward GQA dq == MHA dq"));
        CHECK_CLOSE_D(label(be, "attention_backward GQA dk, dv == MHA group sums"), g[3].got, want,
                      rows * W, TOL_EXACT);
    }
    pool_free();
}

/* ------------------------------------------------------------ adamw */

static void test_adamw(size_t n) {
    const float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f, scale = 0.5f;
    float *p0 = frand(n, 1.0f), *grad[3];
    double *pd = to_double(p0, n), *md = dalloc(n), *vd = dalloc(n);
    for (int64_t t = 1; t <= 3; t++) {
        float *g = grad[t - 1] = frand(n, 1e-2f);
        g[0] = 0.0f; // zero gradient: v stays 0 and only eps keeps denom finite
        g[1] = 1e-6f;
        // torch.optim.AdamW (1.13, single tensor), transcribed in double
        double bc1 = 1.0 - pow(beta1, (double)t), bc2 = 1.0 - pow(beta2, (double)t);
        for (size_t i = 0; i < n; i++) {
            double gi = (double)g[i] * scale;
            pd[i] *= 1.0 - (double)lr * wd;
            md[i] = md[i] * beta1 + gi * (1.0 - beta1);
            vd[i] = vd[i] * beta2 + (1.0 - beta2) * gi * gi;
            double denom = sqrt(vd[i]) / sqrt(bc2) + eps;
            pd[i] += -((double)lr / bc1) * md[i] / denom;
        }
    }
    // the update itself, which is ~1e-2 of the parameters
    double *upd_d = dalloc(n);
    for (size_t i = 0; i < n; i++) upd_d[i] = pd[i] - p0[i];

    karg d[] = {ARG(p0, n),      ARG(falloc(n), n), ARG(falloc(n), n),
                ARG(grad[0], n), ARG(grad[1], n),   ARG(grad[2], n)};
    FOR_ALL(be) {
        RUN(be, d, {
            for (int t = 1; t <= 3; t++)
                be->i->adamw_update(be, d[0].dev, d[2 + t].dev, d[1].dev, d[2].dev, n, lr, beta1,
                                    beta2, eps, wd, scale, t);
        });
        CHECK_EXACT(be, "adamw params", d[0].got, pd, n);
        CHECK_EXACT(be, "adamw m", d[1].got, md, n);
        CHECK_EXACT(be, "adamw v", d[2].got, vd, n);
        float *upd = falloc(n);
        for (size_t i = 0; i < n; i++) upd[i] = d[0].got[i] - p0[i];
        CHECK_CLOSE_D(label(be, "adamw update p - p0 vs double"), upd, upd_d, n, 1e-4);
        if (!be->i->adamw_update16) continue;
        /* the fused variant: the same three updates bit for bit, and each
         * step's bf16 copy of the new params (the last one read back) */
        karg e[] = {ARG(p0, n),      ARG(falloc(n), n), ARG(falloc(n), n),
                    ARG(grad[0], n), ARG(grad[1], n),   ARG(grad[2], n),
                    ARG(u16fill(n, 0x7fc1), n)};
        RUN(be, e, {
            for (int t = 1; t <= 3; t++)
                be->i->adamw_update16(be, e[0].dev, e[6].dev, e[2 + t].dev, e[1].dev, e[2].dev, n,
                                      lr, beta1, beta2, eps, wd, scale, t);
        });
        for (int k = 0; k < 3; k++)
            CHECK_MSG(same_floats(e[k].got, d[k].got, n), "%s",
                      label(be, k == 0 ? "adamw_update16 params == adamw_update's"
                                       : "adamw_update16 moments == adamw_update's"));
        CHECK_MSG(same_bf16_of((const uint16_t *)e[6].got, e[0].got, n), "%s",
                  label(be, "adamw_update16 copy == bf16(params)"));
    }
    pool_free();
}

/* ------------------------------------------------------------ backends vs ref */

/* lens (nlens) or NULL: the rows pack examples of these lengths (pos_packed);
 * drop: dropout of the probabilities (the same masks on every backend) or NULL. */
static void cmp_attention_drop(int B, int T, int NH, int NKV, int HS, const int *lens, int nlens,
                               const ct_attn_dropout *drop) {
    int C = NH * HS, KV = NKV * HS;
    size_t rows = (size_t)B * T, nqkv = rows * (C + 2 * KV), nout = rows * C;
    size_t NL = (size_t)B * NH * T;
    float *qkv = frand(nqkv, 2.0f), *dout = frand(nout, 1.0f);
    int32_t *pos = lens ? pos_packed(B, T, lens, nlens) : NULL;
    const char *kind = drop ? (pos ? " packed dropout" : " dropout") : (pos ? " packed" : "");
    char n_out[64], n_lse[64], n_dqkv[64];
    snprintf(n_out, sizeof n_out, "attention_forward%s out", kind);
    snprintf(n_lse, sizeof n_lse, "attention_forward%s lse", kind);
    snprintf(n_dqkv, sizeof n_dqkv, "attention_backward%s dqkv", kind);
    karg f[] = {OUT(n_out, falloc(nout), nout), OUT(n_lse, falloc(NL), NL), ARG(qkv, nqkv),
                ARG(pos, rows)};
    VS_REF(be, f, be->i->attention_forward(be, f[0].dev, f[1].dev, f[2].dev, f[3].dev, drop, B, T,
                                           NH, NKV, HS));
    karg g[] = {OUT(n_dqkv, ffill(nqkv, 0.25f), nqkv),
                ARG(dout, nout), ARG(qkv, nqkv), ARG(f[0].want, nout), ARG(f[1].want, NL),
                ARG(pos, rows)};
    VS_REF(be, g, be->i->attention_backward(be, g[0].dev, g[1].dev, g[2].dev, g[3].dev, g[4].dev,
                                            g[5].dev, drop, B, T, NH, NKV, HS));
    // deterministic: a second run gives the same bits
    FOR_TESTED(be) {
        float *first = NULL;
        for (int rep = 0; rep < 2; rep++) {
            RUN(be, g, be->i->attention_backward(be, g[0].dev, g[1].dev, g[2].dev, g[3].dev,
                                                 g[4].dev, g[5].dev, drop, B, T, NH, NKV, HS));
            if (!first) first = g[0].got;
        }
        CHECK_MSG(same_floats(first, g[0].got, nqkv), "%s",
                  label(be, "attention_backward is deterministic"));
    }
    if (drop) { // decode never drops
        pool_free();
        return;
    }
    // decode of one query over T cached rows
    float *q = frand(C, 2.0f), *kc = frand((size_t)T * KV, 2.0f), *vc = frand((size_t)T * KV, 1.0f);
    karg d[] = {OUT("attention_decode", falloc(C), C), ARG(q, C), ARG(kc, (size_t)T * KV),
                ARG(vc, (size_t)T * KV)};
    VS_REF(be, d, be->i->attention_decode(be, d[0].dev, d[1].dev, d[2].dev, d[3].dev, T, NH, NKV,
                                          HS));
    pool_free();
}

static void cmp_attention_packed(int B, int T, int NH, int NKV, int HS, const int *lens,
                                 int nlens) {
    cmp_attention_drop(B, T, NH, NKV, HS, lens, nlens, NULL);
}

static void cmp_attention(int B, int T, int NH, int NKV, int HS) {
    cmp_attention_packed(B, T, NH, NKV, HS, NULL, 0);
}

/* Example lengths for the packed cases: length-1 examples side by side and
 * after longer ones, examples that start mid-tile and span several tiles
 * (the cpu's tiles 1..256 wide), so whole key tiles are skipped too. */
static const int pack_lens[] = {5, 1, 1, 37, 2, 1, 90, 13, 1, 150, 7};
#define PACK_N ((int)(sizeof pack_lens / sizeof *pack_lens))

/* Positions 0..T-1 in every row (one example per row) give the bits of pos =
 * NULL: attention and RoPE, on every backend. */
static void test_positions_iota(int B, int T, int NH, int NKV, int HS) {
    int C = NH * HS, W = (NH + 2 * NKV) * HS;
    size_t rows = (size_t)B * T, nqkv = rows * W, nout = rows * C, NL = (size_t)B * NH * T;
    int32_t *iota = pool_alloc(rows * sizeof(int32_t));
    for (size_t r = 0; r < rows; r++) iota[r] = (int32_t)(r % T);
    float *inv = rope_table(HS, 10000.0f);
    karg a[] = {ARG(falloc(nout), nout), ARG(falloc(NL), NL), ARG(frand(nqkv, 2.0f), nqkv),
                ARG(ffill(nqkv, 0.25f), nqkv), ARG(frand(nout, 1.0f), nout), ARG(iota, rows),
                ARG(inv, HS / 2)};
    FOR_ALL(be) {
        float *got[4];
        for (int k = 0; k < 2; k++) {
            RUN(be, a, {
                const int32_t *p = k ? a[5].dev : NULL;
                be->i->rope_forward(be, a[2].dev, p, B, T, NH, NKV, HS, 0, a[6].dev);
                be->i->attention_forward(be, a[0].dev, a[1].dev, a[2].dev, p, NULL, B, T, NH, NKV,
                                         HS);
                be->i->attention_backward(be, a[3].dev, a[4].dev, a[2].dev, a[0].dev, a[1].dev, p,
                                          NULL, B, T, NH, NKV, HS);
                be->i->rope_backward(be, a[3].dev, p, B, T, NH, NKV, HS, 0, a[6].dev);
            });
            if (!k) got[0] = a[0].got, got[1] = a[1].got, got[2] = a[2].got, got[3] = a[3].got;
        }
        CHECK_MSG(same_floats(got[0], a[0].got, nout) && same_floats(got[1], a[1].got, NL) &&
                      same_floats(got[2], a[2].got, nqkv) && same_floats(got[3], a[3].got, nqkv),
                  "%s", label(be, "attention, rope with positions 0..T-1 == without"));
    }
    pool_free();
}

/* Dropout of the attention probabilities: p = 0 is the code path without it,
 * bit for bit; and the masks follow the global row, so a batch run whole at
 * row0 equals its rows run one at a time at row0 + b (forward and backward,
 * bit for bit: the rows are independent), on every backend. lens: packed
 * rows (pos_packed) or NULL. */
static void test_attention_drop_rows(int B, int T, int NH, int NKV, int HS, const int *lens,
                                     int nlens) {
    int C = NH * HS, W = (NH + 2 * NKV) * HS;
    size_t rows = (size_t)B * T, nqkv = rows * W, nout = rows * C, NL = (size_t)B * NH * T;
    int32_t *pos = lens ? pos_packed(B, T, lens, nlens) : NULL;
    float *qkv = frand(nqkv, 2.0f), *dout = frand(nout, 1.0f);
    const ct_attn_dropout zero = {0.0f, 12345, 3}, drop = {0.25f, 0xC0FFEEull, 7};
    FOR_ALL(be) {
        // p = 0 and NULL
        float *got[2][3];
        for (int k = 0; k < 2; k++) {
            karg a[] = {ARG(falloc(nout), nout), ARG(falloc(NL), NL), ARG(qkv, nqkv),
                        ARG(ffill(nqkv, 0.25f), nqkv), ARG(dout, nout), ARG(pos, rows)};
            const ct_attn_dropout *d = k ? &zero : NULL;
            RUN(be, a, {
                be->i->attention_forward(be, a[0].dev, a[1].dev, a[2].dev, a[5].dev, d, B, T, NH,
                                         NKV, HS);
                be->i->attention_backward(be, a[3].dev, a[4].dev, a[2].dev, a[0].dev, a[1].dev,
                                          a[5].dev, d, B, T, NH, NKV, HS);
            });
            got[k][0] = a[0].got, got[k][1] = a[1].got, got[k][2] = a[3].got;
        }
        CHECK_MSG(same_floats(got[0][0], got[1][0], nout) &&
                      same_floats(got[0][1], got[1][1], NL) &&
                      same_floats(got[0][2], got[1][2], nqkv),
                  "%s", label(be, "attention with dropout p = 0 == without"));
        // the whole batch at row0, then each row alone at row0 + b
        karg w[] = {ARG(falloc(nout), nout), ARG(falloc(NL), NL), ARG(qkv, nqkv),
                    ARG(ffill(nqkv, 0.25f), nqkv), ARG(dout, nout), ARG(pos, rows)};
        RUN(be, w, {
            be->i->attention_forward(be, w[0].dev, w[1].dev, w[2].dev, w[5].dev, &drop, B, T, NH,
                                     NKV, HS);
            be->i->attention_backward(be, w[3].dev, w[4].dev, w[2].dev, w[0].dev, w[1].dev,
                                      w[5].dev, &drop, B, T, NH, NKV, HS);
        });
        CHECK_MSG(!same_floats(w[0].got, got[0][0], nout), "%s",
                  label(be, "attention dropout p = 0.25 changes the output"));
        int same = 1;
        for (int b = 0; b < B; b++) {
            size_t T_ = (size_t)T;
            ct_attn_dropout d1 = drop;
            d1.row0 = drop.row0 + b;
            karg r[] = {ARG(falloc(T_ * C), T_ * C), ARG(falloc((size_t)NH * T), (size_t)NH * T),
                        ARG(qkv + b * T_ * W, T_ * W), ARG(ffill(T_ * W, 0.25f), T_ * W),
                        ARG(dout + b * T_ * C, T_ * C), ARG(pos ? pos + b * T_ : NULL, T_)};
            RUN(be, r, {
                be->i->attention_forward(be, r[0].dev, r[1].dev, r[2].dev, r[5].dev, &d1, 1, T,
                                         NH, NKV, HS);
                be->i->attention_backward(be, r[3].dev, r[4].dev, r[2].dev, r[0].dev, r[1].dev,
                                          r[5].dev, &d1, 1, T, NH, NKV, HS);
            });
            same &= same_floats(r[0].got, w[0].got + b * T_ * C, T_ * C) &&
                    same_floats(r[1].got, w[1].got + (size_t)b * NH * T, (size_t)NH * T) &&
                    same_floats(r[3].got, w[3].got + b * T_ * W, T_ * W);
        }
        CHECK_MSG(same, "%s", label(be, "attention dropout: rows alone at row0 + b == batch"));
    }
    pool_free();
}

/* The gradient of sum(out * R) with respect to qkv in double, analytically
 * (no dropout): P the softmax row, dP = R v^T, D = rowsum(R o out), dS =
 * P (dP - D) / sqrt(HS); dq = dS k, dk = dS^T q, dv = P^T R. Writes dqkv. */
static void att_bwd_d(double *dqkv, const att_ctx *a) {
    int W = (a->NH + 2 * a->NKV) * a->HS, C = a->NH * a->HS, group = a->NH / a->NKV;
    double sc = 1.0 / sqrt((double)a->HS);
    double *p = malloc((size_t)a->T * sizeof *p), *o = malloc((size_t)a->HS * sizeof *o);
    memset(dqkv, 0, (size_t)a->B * a->T * W * sizeof *dqkv);
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < a->NH; h++) {
            int ko = C + (h / group) * a->HS, vo = ko + a->NKV * a->HS;
            for (int t = 0; t < a->T; t++) {
                size_t rt = (size_t)b * a->T + t;
                const double *q = a->qkv + rt * W + h * a->HS, *r = a->R + rt * C + h * a->HS;
                int j0 = a->pos ? t - a->pos[rt] : 0;
                double mx = -INFINITY, sum = 0.0;
                for (int j = j0; j <= t; j++) {
                    p[j] = dot_d(q, a->qkv + ((size_t)b * a->T + j) * W + ko, a->HS) * sc;
                    if (p[j] > mx) mx = p[j];
                }
                for (int j = j0; j <= t; j++) sum += (p[j] = exp(p[j] - mx));
                for (int d = 0; d < a->HS; d++) o[d] = 0.0;
                for (int j = j0; j <= t; j++) {
                    p[j] /= sum;
                    const double *v = a->qkv + ((size_t)b * a->T + j) * W + vo;
                    for (int d = 0; d < a->HS; d++) o[d] += p[j] * v[d];
                }
                double D = dot_d(r, o, a->HS);
                for (int j = j0; j <= t; j++) {
                    size_t rj = (size_t)b * a->T + j;
                    double ds = p[j] * (dot_d(r, a->qkv + rj * W + vo, a->HS) - D) * sc;
                    for (int d = 0; d < a->HS; d++) {
                        dqkv[rt * W + h * a->HS + d] += ds * a->qkv[rj * W + ko + d];
                        dqkv[rj * W + ko + d] += ds * q[d];
                        dqkv[rj * W + vo + d] += p[j] * r[d];
                    }
                }
            }
        }
    free(p);
    free(o);
}

/* The double backward above is the derivative of att_d: finite differences
 * agree (it is the truth of test_attention_bf16; runs on every machine). */
static void test_att_bwd_d(int B, int T, int NH, int NKV, int HS, const int32_t *pos) {
    int C = NH * HS, W = (NH + 2 * NKV) * HS;
    size_t nqkv = (size_t)B * T * W, nout = (size_t)B * T * C;
    att_ctx a = {to_double(frand(nqkv, 1.5f), nqkv), to_double(frand(nout, 1.0f), nout), pos, B,
                 T, NH, NKV, HS, NULL};
    double *g = dalloc(nqkv), *want = dalloc(nqkv);
    fd_grad(want, a.qkv, nqkv, att_loss, &a);
    att_bwd_d(g, &a);
    float *gf = falloc(nqkv);
    for (size_t i = 0; i < nqkv; i++) gf[i] = (float)g[i];
    CHECK_CLOSE_D(pos ? "attention double backward (packed) vs FD" : "attention double backward vs FD",
                  gf, want, nqkv, TOL_FD);
    pool_free();
}

/* Precision bf16's attention entries (attention_forward_bf16 / _backward_bf16;
 * backend.h) on the backends that have them (cuda): their contract is either
 * the double formula over bf16-rounded q, k, v and dout within bf16's own
 * error (the tensor-core kernels: P and dS rounded to bf16, fp32 sums; out
 * within 2u, dqkv within 4u of the largest entry, u = 2^-9, lse 1e-5; the
 * bounds tests/gpu/cuda_emu.cpp holds the same kernels to on the CPU), or
 * the fp32 entries' exact results where the fast path does not take the call.
 * With CT_TEST_TENSOR_CORES=1 (a GPU with bf16 tensor cores: the GPU check)
 * the first is required at head sizes 64 and 128. Backends without the
 * entries (the model then calls the fp32 ones) are tested by the cases above.
 * lens: packed rows, or NULL. */
static void test_attention_bf16(int B, int T, int NH, int NKV, int HS, const int *lens,
                                int nlens) {
    int any = 0;
    FOR_TESTED(be) any |= be->i->attention_forward_bf16 && be->i->attention_backward_bf16;
    if (!any) return;
    const double u = 1.0 / 512.0;
    const char *tc = getenv("CT_TEST_TENSOR_CORES");
    int need_tc = tc && !strcmp(tc, "1") && (HS == 64 || HS == 128);
    int C = NH * HS, W = (NH + 2 * NKV) * HS;
    size_t rows = (size_t)B * T, nqkv = rows * W, nout = rows * C, NL = (size_t)B * NH * T;
    const int32_t *pos = lens ? pos_packed(B, T, lens, nlens) : NULL;
    float *qkv = frand(nqkv, 2.0f), *R = frand(nout, 1.0f);
    float *qkv16 = falloc(nqkv), *R16 = falloc(nout);
    ct_f32_round_bf16_array(qkv16, qkv, nqkv);
    ct_f32_round_bf16_array(R16, R, nout);
    att_ctx a16 = {to_double(qkv16, nqkv), to_double(R16, nout), pos, B, T, NH, NKV, HS, NULL};
    att_ctx a32 = {to_double(qkv, nqkv), to_double(R, nout), pos, B, T, NH, NKV, HS, NULL};
    double *o16 = dalloc(nout), *l16 = dalloc(NL), *g16 = dalloc(nqkv);
    double *o32 = dalloc(nout), *l32 = dalloc(NL), *g32 = dalloc(nqkv);
    att_d(o16, l16, &a16);
    att_bwd_d(g16, &a16);
    att_d(o32, l32, &a32);
    att_bwd_d(g32, &a32);
    char what[128];
    FOR_TESTED(be) {
        if (!be->i->attention_forward_bf16 || !be->i->attention_backward_bf16) continue;
        karg f[] = {ARG(ffill(nout, NAN), nout), ARG(ffill(NL, NAN), NL), ARG(qkv, nqkv),
                    ARG(pos, rows)};
        RUN(be, f, be->i->attention_forward_bf16(be, f[0].dev, f[1].dev, f[2].dev, f[3].dev, NULL,
                                                 B, T, NH, NKV, HS));
        karg bw[] = {ARG(ffill(nqkv, 0.5f), nqkv), ARG(R, nout), ARG(qkv, nqkv),
                     ARG(f[0].got, nout), ARG(f[1].got, NL), ARG(pos, rows)};
        RUN(be, bw, be->i->attention_backward_bf16(be, bw[0].dev, bw[1].dev, bw[2].dev,
                                                   bw[3].dev, bw[4].dev, bw[5].dev, NULL, B, T,
                                                   NH, NKV, HS));
        float *dq = fsub(bw[0].got, 0.5f, nqkv);
        double e16[3] = {rel_err(f[0].got, o16, nout, NULL), rel_err(f[1].got, l16, NL, NULL),
                         rel_err(dq, g16, nqkv, NULL)};
        double e32[3] = {rel_err(f[0].got, o32, nout, NULL), rel_err(f[1].got, l32, NL, NULL),
                         rel_err(dq, g32, nqkv, NULL)};
        int bf16_ok = e16[0] <= 2 * u && e16[1] <= 1e-5 && e16[2] <= 4 * u;
        int fp32_ok = e32[0] <= TOL_EXACT && e32[1] <= TOL_EXACT && e32[2] <= TOL_FD;
        snprintf(what, sizeof what, "attention_bf16 B=%d T=%d NH=%d NKV=%d HS=%d%s", B, T, NH,
                 NKV, HS, pos ? " packed" : "");
        if (verbose)
            printf("  %-50s vs rounded inputs: out %.2e lse %.2e dqkv %.2e; vs fp32: out %.2e "
                   "lse %.2e dqkv %.2e (%s)\n",
                   label(be, what), e16[0], e16[1], e16[2], e32[0], e32[1], e32[2],
                   fp32_ok ? "fp32 kernels" : "bf16 kernels");
        /* cpu takes every even head size up to 256 without dropout: bf16 required */
        int need16 = need_tc || !strcmp(be->i->name, "cpu");
        CHECK_MSG(bf16_ok || (fp32_ok && !need16),
                  "%s: vs the double formula on bf16 inputs out %.3g (tol %.3g) lse %.3g (1e-5) "
                  "dqkv %.3g (tol %.3g); vs fp32 out %.3g lse %.3g dqkv %.3g%s",
                  label(be, what), e16[0], 2 * u, e16[1], e16[2], 4 * u, e32[0], e32[1], e32[2],
                  need_tc ? " (CT_TEST_TENSOR_CORES=1: the tensor-core kernels must run)" : "");
        CHECK_MSG(!need16 || !fp32_ok, "%s: the fp32 kernels ran%s", label(be, what),
                  need_tc ? " (CT_TEST_TENSOR_CORES=1)" : "");
    }
    pool_free();
}

/* The dropout of the dropout cases: p = 0.3, rows from 5 on. */
static const ct_attn_dropout att_drop03 = {0.3f, 0x9E3779B97F4A7C15ull, 5};

/* Other tile shapes on every backend under test (tiles are the cpu's; others
 * ignore them): square, tall, wide and odd, then the defaults back. */
static void cmp_attention_tiles(void) {
    const int lens[] = {3, 1, 17, 1, 1, 9, 30};
    const int tiles[][2] = {{16, 16}, {128, 256}, {7, 5}, {32, 16}, {1, 1}};
    int defaults[1 + N_UNDER_TEST][2];
    FOR_TESTED(be) {
        defaults[be - bes][0] = be->att_bq;
        defaults[be - bes][1] = be->att_bk;
    }
    for (size_t i = 0; i < sizeof tiles / sizeof *tiles; i++) {
        FOR_TESTED(be) {
            CHECK(ct_backend_set_tiles(be, tiles[i][0], tiles[i][1]) == 0);
            CHECK(be->att_bq == tiles[i][0] && be->att_bk == tiles[i][1]);
        }
        cmp_attention(2, 70, 2, 2, 24);
        cmp_attention(1, 45, 4, 2, 16);
        cmp_attention_packed(3, 70, 4, 2, 8, lens, 7); // GQA, rows start at other lengths
        cmp_attention_packed(2, 150, 2, 2, 16, pack_lens, PACK_N);
        cmp_attention_drop(2, 150, 2, 2, 16, pack_lens, PACK_N, &att_drop03);
        cmp_attention_drop(1, 45, 4, 2, 16, NULL, 0, &att_drop03);
        test_attention_bf16(1, 45, 4, 2, 16, NULL, 0); // odd T; odd tiles made even (cpu)
        test_attention_bf16(3, 71, 4, 2, 8, lens, 7);
    }
    FOR_TESTED(be) {
        CHECK(ct_backend_set_tiles(be, 0, 16) == -1);
        CHECK(ct_backend_set_tiles(be, 16, CT_ATT_BK_MAX + 1) == -1);
        CHECK(ct_backend_set_tiles(be, CT_ATT_BQ_MAX + 1, 16) == -1);
        CHECK(be->att_bq == 1 && be->att_bk == 1); // unchanged by the refusals
        CHECK(ct_backend_set_tiles(be, defaults[be - bes][0], defaults[be - bes][1]) == 0);
    }
}

static void cmp_llama(int B, int T, int NH, int NKV, int HS, int F) {
    int32_t *pos = pos_packed(B, T, pack_lens, PACK_N);
    int C = NH * HS, N = B * T;
    size_t NC = (size_t)N * C, nqkv = (size_t)N * (NH + 2 * NKV) * HS, NF = (size_t)N * F;
    float *x = frand(NC, 3.0f), *w = frand(C, 1.0f), *dy = frand(NC, 1.0f);
    karg f[] = {OUT("rmsnorm_forward out", falloc(NC), NC),
                OUT("rmsnorm_forward rstd", falloc(N), N), ARG(x, NC), ARG(w, C)};
    VS_REF(be, f, be->i->rmsnorm_forward(be, f[0].dev, f[1].dev, f[2].dev, f[3].dev, N, C, 1e-6f,
                                         0.0f));
    karg g[] = {OUT("rmsnorm_backward dinp", ffill(NC, 1.0f), NC),
                OUT("rmsnorm_backward dweight", falloc(C), C), ARG(dy, NC), ARG(x, NC), ARG(w, C),
                ARG(f[1].want, N)};
    VS_REF(be, g, be->i->rmsnorm_backward(be, g[0].dev, g[1].dev, g[2].dev, g[3].dev, g[4].dev,
                                          g[5].dev, N, C, 0.0f));
    karg fo[] = {OUT("rmsnorm_forward out, 1 + w", falloc(NC), NC),
                 OUT("rmsnorm_forward rstd, 1 + w", falloc(N), N), ARG(x, NC), ARG(w, C)};
    VS_REF(be, fo, be->i->rmsnorm_forward(be, fo[0].dev, fo[1].dev, fo[2].dev, fo[3].dev, N, C,
                                          1e-6f, 1.0f));
    karg go[] = {OUT("rmsnorm_backward dinp, 1 + w", ffill(NC, 1.0f), NC),
                 OUT("rmsnorm_backward dweight, 1 + w", falloc(C), C), ARG(dy, NC), ARG(x, NC),
                 ARG(w, C), ARG(fo[1].want, N)};
    VS_REF(be, go, be->i->rmsnorm_backward(be, go[0].dev, go[1].dev, go[2].dev, go[3].dev,
                                           go[4].dev, go[5].dev, N, C, 1.0f));
    for (int k = 0; k < 2; k++) { /* the residual add fused in front, wofs 0 and 1 */
        karg rn[] = {OUT(k ? "residual_rmsnorm res, 1 + w" : "residual_rmsnorm res", falloc(NC),
                         NC),
                     OUT(k ? "residual_rmsnorm out, 1 + w" : "residual_rmsnorm out", falloc(NC),
                         NC),
                     OUT(k ? "residual_rmsnorm rstd, 1 + w" : "residual_rmsnorm rstd", falloc(N),
                         N),
                     ARG(x, NC), ARG(dy, NC), ARG(w, C)};
        VS_REF(be, rn, be->i->residual_rmsnorm_forward(be, rn[0].dev, rn[1].dev, rn[2].dev,
                                                       rn[3].dev, rn[4].dev, rn[5].dev, N, C,
                                                       1e-6f, (float)k));
    }

    float *inv = rope_table(HS, 10000.0f);
    karg r[] = {OUT("rope_forward", frand(nqkv, 1.0f), nqkv), ARG(inv, HS / 2)};
    VS_REF(be, r, be->i->rope_forward(be, r[0].dev, NULL, B, T, NH, NKV, HS, 3, r[1].dev));
    karg rb[] = {OUT("rope_backward", r[0].want, nqkv), ARG(inv, HS / 2)};
    VS_REF(be, rb, be->i->rope_backward(be, rb[0].dev, NULL, B, T, NH, NKV, HS, 3, rb[1].dev));
    karg rp[] = {OUT("rope_forward packed", frand(nqkv, 1.0f), nqkv), ARG(pos, N),
                 ARG(inv, HS / 2)};
    VS_REF(be, rp, be->i->rope_forward(be, rp[0].dev, rp[1].dev, B, T, NH, NKV, HS, 0, rp[2].dev));
    karg rpb[] = {OUT("rope_backward packed", rp[0].want, nqkv), ARG(pos, N), ARG(inv, HS / 2)};
    VS_REF(be, rpb,
           be->i->rope_backward(be, rpb[0].dev, rpb[1].dev, B, T, NH, NKV, HS, 0, rpb[2].dev));
    float *wq = frand(HS, 1.5f), *wk = frand(HS, 1.5f), *dq = frand(nqkv, 1.0f);
    float *qin = frand(nqkv, 3.0f);
    size_t nr = (size_t)N * (NH + NKV);
    karg q[] = {OUT("qknorm_forward out", falloc(nqkv), nqkv),
                OUT("qknorm_forward rstd", falloc(nr), nr), ARG(qin, nqkv), ARG(wq, HS),
                ARG(wk, HS)};
    VS_REF(be, q, be->i->qknorm_forward(be, q[0].dev, q[1].dev, q[2].dev, q[3].dev, q[4].dev, N,
                                        NH, NKV, HS, 1e-6f, 1.0f));
    karg qb[] = {OUT("qknorm_backward dinp", ffill(nqkv, 3.0f), nqkv),
                 OUT("qknorm_backward dwq", ffill(HS, 1.0f), HS),
                 OUT("qknorm_backward dwk", falloc(HS), HS), ARG(dq, nqkv), ARG(qin, nqkv),
                 ARG(wq, HS), ARG(wk, HS), ARG(q[1].want, nr)};
    VS_REF(be, qb, be->i->qknorm_backward(be, qb[0].dev, qb[1].dev, qb[2].dev, qb[3].dev,
                                          qb[4].dev, qb[5].dev, qb[6].dev, qb[7].dev, N, NH, NKV,
                                          HS, 1.0f));

    float *h = frand(2 * NF, 6.0f), *dh = frand(NF, 1.0f);
    karg s[] = {OUT("swiglu_forward", falloc(NF), NF), ARG(h, 2 * NF)};
    VS_REF(be, s, be->i->swiglu_forward(be, s[0].dev, s[1].dev, N, F));
    karg sb[] = {OUT("swiglu_backward", ffill(2 * NF, -0.5f), 2 * NF), ARG(h, 2 * NF), ARG(dh, NF)};
    VS_REF(be, sb, be->i->swiglu_backward(be, sb[0].dev, sb[1].dev, sb[2].dev, N, F));
    karg gg[] = {OUT("geglu_forward", falloc(NF), NF), ARG(h, 2 * NF)};
    VS_REF(be, gg, be->i->geglu_forward(be, gg[0].dev, gg[1].dev, N, F));
    karg gb[] = {OUT("geglu_backward", ffill(2 * NF, -0.5f), 2 * NF), ARG(h, 2 * NF), ARG(dh, NF)};
    VS_REF(be, gb, be->i->geglu_backward(be, gb[0].dev, gb[1].dev, gb[2].dev, N, F));
    pool_free();
    cmp_attention(B, T, NH, NKV, HS);
    cmp_attention_packed(B, T, NH, NKV, HS, pack_lens, PACK_N);
}

static void cmp_adamw(size_t n) {
    float *v = falloc(n);
    karg d[] = {OUT("adamw params", frand(n, 1.0f), n), OUT("adamw m", frand(n, 1e-2f), n),
                OUT("adamw v", v, n), ARG(frand(n, 1e-2f), n), ARG(frand(n, 1e-2f), n)};
    for (size_t i = 0; i < n; i++) v[i] = 1e-4f * fabsf(rng_float());
    VS_REF(be, d, {
        for (int t = 1; t <= 2; t++)
            be->i->adamw_update(be, d[0].dev, d[2 + t].dev, d[1].dev, d[2].dev, n, 6e-4f, 0.9f,
                                0.999f, 1e-8f, 0.0f, 1.0f, t);
    });
    // sumsq: ref straight on host memory (ref's buffers are host memory)
    float *x = frand(n, 2.0f);
    double s1 = ref_be->i->sumsq(ref_be, x, n);
    karg s[] = {ARG(x, n)};
    FOR_TESTED(be) {
        double s2 = 0.0;
        RUN(be, s, s2 = be->i->sumsq(be, s[0].dev, n));
        CHECK_MSG(fabs(s1 - s2) <= 1e-11 * s1, "%s: %.17g vs %.17g", label(be, "sumsq vs ref"),
                  s2, s1);
    }
    pool_free();
}

int main(void) {
    if (harness_init(0x243F6A8885A308D3ULL) != CT_OK) {
        fprintf(stderr, "test_kernels_llama: %s\n", ct_last_error());
        return 1;
    }
    if (verbose) printf("every backend vs double / finite differences:\n");
    test_rmsnorm(6, 13, 1e-5f, 0.0f);
    test_rmsnorm(3, 32, 1e-6f, 0.0f);
    test_rmsnorm(2, 1, 0.5f, 0.0f); // C = 1 (a large eps keeps the gradient away from 0)
    test_rmsnorm(5, 19, 1e-6f, 1.0f); // Gemma's 1 + weight
    test_residual_rmsnorm(6, 13, 1e-5f, 0.0f);
    test_residual_rmsnorm(4, 40, 1e-6f, 0.0f); // two 16-lane blocks and a tail
    test_residual_rmsnorm(2, 1, 0.5f, 0.0f);
    test_residual_rmsnorm(5, 19, 1e-6f, 1.0f); // Gemma's 1 + weight
    test_rope(2, 5, 2, 1, 8, 0, 10000.0f, NULL);
    test_rope(1, 4, 3, 3, 6, 7, 500000.0f, NULL); // pos0 > 0 (decoding), other theta
    test_rope(1, 3, 1, 1, 2, 0, 10.0f, NULL);     // HS = 2
    {
        const int lens[] = {2, 1, 4};
        test_rope(3, 7, 2, 1, 8, 0, 10000.0f, pos_packed(3, 7, lens, 3)); // packed rows
    }
    test_rope_inv_freq();
    {
        // Llama 3's scaled frequencies through the kernels, at positions past
        // the original context (pos0 = 9000 > 8192)
        ct_model_config c;
        ct_model_config_llama(&c, 1, 2, 1, 2 * 16, 1, 2, 16384);
        c.rope_theta = 500000.0f;
        c.rope_scaling = (ct_rope_scaling){CT_ROPE_LLAMA3, 8.0f, 1.0f, 4.0f, 8192};
        float *inv = pool_alloc(8 * sizeof(float));
        ct_model_rope_inv_freq(&c, inv);
        float keep[8];
        memcpy(keep, inv, sizeof keep);
        test_rope_table(1, 3, 2, 1, 16, 9000, keep, NULL);
    }
    test_qknorm(3, 2, 1, 8, 1e-6f, 0.0f);
    test_qknorm(2, 4, 2, 16, 1e-5f, 0.0f);
    test_qknorm(1, 1, 1, 19, 0.5f, 0.0f); // HS not a multiple of 16, one head each
    test_qknorm(2, 2, 1, 24, 1e-6f, 1.0f); // Gemma's 1 + weight
    test_swiglu(5, 11);
    test_swiglu(2, 33);
    test_geglu(5, 11);
    test_geglu(2, 33);
    test_attention(2, 7, 3, 3, 4, NULL); // multi-head: NKV == NH
    test_attention(1, 5, 1, 1, 8, NULL);
    test_attention(2, 4, 3, 3, 1, NULL); // HS = 1
    test_attention(2, 6, 4, 2, 3, NULL); // grouped-query
    test_attention(1, 5, 3, 1, 4, NULL); // multi-query
    test_attention(1, 4, 2, 2, 2, NULL);
    {
        // packed rows: length-1 examples, several per row, GQA and MHA
        const int lens[] = {3, 1, 1, 4, 2};
        test_attention(3, 8, 4, 2, 3, pos_packed(3, 8, lens, 5));
        test_attention(2, 9, 2, 2, 4, pos_packed(2, 9, lens + 1, 4));
        test_attention(1, 6, 3, 1, 2, pos_packed(1, 6, lens + 1, 2)); // all length 1
    }
    test_positions_iota(2, 37, 4, 2, 8);
    test_positions_iota(1, 300, 2, 2, 64); // several tiles at the default sizes
    test_repeat_kv(2, 9, 4, 2, 4, NULL);
    test_repeat_kv(1, 7, 3, 1, 5, NULL);
    // dropout of the probabilities, p = 0.3: forward vs double, backward vs FD
    // (the mask is fixed for a key), GQA == MHA, p = 0, rows split
    test_attention_drop(2, 7, 3, 3, 4, NULL, &att_drop03);
    test_attention_drop(2, 6, 4, 2, 3, NULL, &att_drop03); // grouped-query
    {
        const int lens[] = {3, 1, 1, 4, 2};
        test_attention_drop(3, 8, 4, 2, 3, pos_packed(3, 8, lens, 5), &att_drop03);
    }
    test_repeat_kv(2, 9, 4, 2, 4, &att_drop03);
    test_attention_drop_rows(3, 20, 2, 1, 8, NULL, 0);
    test_attention_drop_rows(2, 300, 2, 2, 64, pack_lens, PACK_N); // tiles, packed
    // precision bf16's attention: its double truth, then the backends that have it
    test_att_bwd_d(2, 6, 4, 2, 3, NULL);
    {
        const int lens[] = {3, 1, 1, 4, 2};
        test_att_bwd_d(3, 8, 4, 2, 3, pos_packed(3, 8, lens, 5));
    }
    test_attention_bf16(2, 150, 4, 2, 64, NULL, 0);      // GQA, ragged last tiles
    test_attention_bf16(1, 130, 2, 1, 128, NULL, 0);     // multi-query, head size 128
    test_attention_bf16(2, 300, 2, 2, 64, pack_lens, PACK_N);      // packed, tiles skipped
    test_attention_bf16(1, 200, 4, 2, 128, pack_lens + 3, PACK_N - 3);
    test_attention_bf16(2, 150, 2, 2, 32, NULL, 0);      // head size 32: cuda's fp32 kernels
    test_attention_bf16(2, 131, 4, 2, 64, NULL, 0);      // odd T: a zero row in the pairs
    test_adamw(1003);

    if (verbose) printf("backends vs ref:\n");
    cmp_llama(2, 7, 4, 2, 8, 21);
    cmp_llama(2, 33, 4, 1, 16, 40);
    cmp_llama(1, 150, 8, 2, 32, 172); // several attention tiles, ragged tails
    cmp_llama(3, 5, 6, 3, 4, 7);
    cmp_attention(3, 7, 3, 3, 4);
    cmp_attention(2, 33, 4, 4, 16);
    cmp_attention(1, 1, 5, 5, 1);
    cmp_attention(2, 150, 2, 2, 24);  // several query and key tiles, ragged last tiles
    cmp_attention(1, 300, 2, 2, 64);  // HS = 64 as in GPT-2, > 2 key tiles
    cmp_attention_packed(2, 300, 2, 2, 64, pack_lens, PACK_N); // whole key tiles skipped
    cmp_attention_packed(2, 300, 4, 1, 32, pack_lens + 3, PACK_N - 3); // multi-query
    cmp_attention(1, 9, 2, 2, 300);   // HS = 300: beyond the tiled kernel, falls back to ref
    cmp_attention_packed(2, 9, 2, 2, 300, pack_lens, 3);
    // dropout: every backend draws ref's masks (tiles, packed rows, GQA, ref's fallback)
    cmp_attention_drop(2, 150, 2, 2, 24, NULL, 0, &att_drop03);
    cmp_attention_drop(1, 300, 2, 2, 64, NULL, 0, &att_drop03);
    cmp_attention_drop(2, 300, 4, 1, 32, pack_lens, PACK_N, &att_drop03);
    cmp_attention_drop(1, 9, 2, 2, 300, NULL, 0, &att_drop03);
    cmp_attention_tiles();
    cmp_adamw(13);
    cmp_adamw(100003);

    return harness_finish("test_kernels_llama");
}
