/*
 * Tests of the fp16 entries of the seam (train.precision = fp16, GPUs without
 * bf16): f32_to_f16, matmul_forward_f16 and matmul_backward_f16 on the
 * harness shared with test_kernels.c, every backend that has them (ref, sim,
 * and cuda under CT_TEST_GPU=1: cuBLAS's GemmEx on CUDA_R_16F inputs; the cpu
 * backend leaves them NULL, which is checked too). The conversion must give
 * core/dtype.c's bits (NaN: any NaN, the hardware's is canonical); the GEMMs
 * are held to a double-precision formula over the fp16-rounded inputs within
 * the accumulation bound of an fp32 sum ((K + 1) u sum|terms|, u = 2^-24),
 * and the fp32 formula (inputs not rounded, about 2^-12 off) must miss that
 * bound, so the rounding is what is tested. A dout past fp16's range (65504)
 * must make the gradients it enters non-finite: the loss scaler's overflow.
 * CT_TEST_VERBOSE=1 prints every measured error.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/dtype.h"
#include "ct_test.h"
#include "ctrain/core.h"
#include "harness.h"

static const double U = 1.0 / 16777216.0; /* 2^-24: fp32's unit roundoff */

static double hf(float x) { return (double)ct_f16_to_f32(ct_f32_to_f16(x)); }

static bool has_f16(const ct_backend *be) {
    return be->i->f32_to_f16 && be->i->matmul_forward_f16 && be->i->matmul_backward_f16;
}

typedef struct want_t {
    double *v, *bound;
} want_t;

static want_t want_alloc(size_t n) { return (want_t){dalloc(n), dalloc(n)}; }

static void check_bound(const ct_backend *be, const char *what, const float *got,
                        const want_t *w, size_t n) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - w->v[i]);
        double r = w->bound[i] > 0 ? e / w->bound[i] : (e > 0 ? INFINITY : 0.0);
        if (!(r <= worst)) worst = r; /* NaN sticks */
    }
    if (verbose) printf("  %-48s %.3g of the bound\n", label(be, what), worst);
    CHECK_MSG(worst <= 1.0, "%s: error %.3g times the accumulation bound", label(be, what), worst);
}

static void check_teeth(const char *what, const double *f32, const want_t *w, size_t n) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double r = fabs(f32[i] - w->v[i]) / w->bound[i];
        if (r > worst) worst = r;
    }
    /* fp16 keeps 11 bits (bf16 8): at K = 200 the fp32 formula lands some 8 bounds off */
    CHECK_MSG(worst > 4.0, "%s: fp32 inputs land within %.3g of the fp16 bound", what, worst);
}

/* Values spread over fp16's range, its edges and beyond it. */
static void test_convert(void) {
    enum { N = 4096 };
    float *x = falloc(N);
    static const float edge[] = {0.0f,       -0.0f,        1.0f,         65504.0f,
                                 65519.99f,  65520.0f,     -65520.0f,    1e9f,
                                 5.9604645e-8f, 2.9802322e-8f, 2.98023259e-8f, 8.9406967e-8f,
                                 6.1035156e-5f, 6.1035e-5f, 1.00048828125f, 1.00146484375f,
                                 INFINITY,   -INFINITY,    NAN,          -NAN};
    size_t ne = sizeof edge / sizeof *edge;
    for (size_t i = 0; i < N; i++) {
        if (i < ne) {
            x[i] = edge[i];
        } else { /* magnitudes 2^-30 .. 2^18, both signs */
            float m = ldexpf(1.0f + 0.5f * rng_float(), (int)(i % 49) - 30);
            x[i] = (i & 1) ? -m : m;
        }
    }
    uint16_t *want = pool_alloc(N * sizeof *want);
    for (size_t i = 0; i < N; i++) want[i] = ct_f32_to_f16(x[i]);
    uint16_t *dst = pool_alloc(N * sizeof *dst);
    FOR_ALL(be) {
        if (!has_f16(be)) continue;
        karg a[] = {ARG(dst, N), ARG(x, N)};
        RUN(be, a, be->i->f32_to_f16(be, a[0].dev, a[1].dev, N));
        const uint16_t *got = (const uint16_t *)a[0].got;
        size_t bad = 0, first = N;
        for (size_t i = 0; i < N; i++) {
            bool nan_w = (want[i] & 0x7c00u) == 0x7c00u && (want[i] & 0x3ffu);
            bool nan_g = (got[i] & 0x7c00u) == 0x7c00u && (got[i] & 0x3ffu);
            bool ok = nan_w ? nan_g : got[i] == want[i];
            if (!ok && bad++ == 0) first = i;
        }
        CHECK_MSG(bad == 0, "%s: %zu of %d differ from ct_f32_to_f16 (first: %.9g -> 0x%04x, "
                  "want 0x%04x)", label(be, "f32_to_f16"), bad, N, first < N ? x[first] : 0.0,
                  first < N ? got[first] : 0, first < N ? want[first] : 0);
    }
    pool_free();
}

static void test_matmul_f16(int N, int C, int OC) {
    size_t NC = (size_t)N * C, OCC = (size_t)OC * C, NOC = (size_t)N * OC;
    float *inp = frand(NC, 1.0f), *w = frand(OCC, 0.5f), *b = frand(OC, 1.0f);
    float *dout = frand(NOC, 1.0f);
    uint16_t *w16 = pool_alloc(OCC * sizeof *w16), *inp16 = pool_alloc(NC * sizeof *inp16);
    for (size_t i = 0; i < OCC; i++) w16[i] = ct_f32_to_f16(w[i]);
    for (size_t i = 0; i < NC; i++) inp16[i] = ct_f32_to_f16(inp[i]);

    want_t fw = want_alloc(NOC), fwn = want_alloc(NOC);
    double *f32 = dalloc(NOC);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double acc = 0, mag = 0, acc32 = 0;
            for (int c = 0; c < C; c++) {
                double t = hf(inp[(size_t)n * C + c]) * hf(w[(size_t)o * C + c]);
                acc += t;
                mag += fabs(t);
                acc32 += (double)inp[(size_t)n * C + c] * w[(size_t)o * C + c];
            }
            size_t i = (size_t)n * OC + o;
            fw.v[i] = acc + b[o];
            fw.bound[i] = (C + 1) * U * (mag + fabs(b[o]));
            fwn.v[i] = acc;
            fwn.bound[i] = (C + 1) * U * mag;
            f32[i] = acc32 + b[o];
        }
    want_t gi = want_alloc(NC), gw = want_alloc(OCC), gb = want_alloc(OC);
    double *gi32 = dalloc(NC), *gw32 = dalloc(OCC);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double acc = 0, mag = 0, acc32 = 0;
            for (int o = 0; o < OC; o++) {
                double t = hf(dout[(size_t)n * OC + o]) * hf(w[(size_t)o * C + c]);
                acc += t;
                mag += fabs(t);
                acc32 += (double)dout[(size_t)n * OC + o] * w[(size_t)o * C + c];
            }
            size_t i = (size_t)n * C + c;
            gi.v[i] = 0.5 + acc;
            gi.bound[i] = (OC + 1) * U * (mag + 0.5);
            gi32[i] = 0.5 + acc32;
        }
    for (int o = 0; o < OC; o++)
        for (int c = 0; c < C; c++) {
            double acc = 0, mag = 0, acc32 = 0;
            for (int n = 0; n < N; n++) {
                double t = hf(dout[(size_t)n * OC + o]) * hf(inp[(size_t)n * C + c]);
                acc += t;
                mag += fabs(t);
                acc32 += (double)dout[(size_t)n * OC + o] * inp[(size_t)n * C + c];
            }
            size_t i = (size_t)o * C + c;
            gw.v[i] = -1.0 + acc;
            gw.bound[i] = (N + 1) * U * (mag + 1.0);
            gw32[i] = -1.0 + acc32;
        }
    for (int o = 0; o < OC; o++) {
        double acc = 0, mag = 0;
        for (int n = 0; n < N; n++) {
            acc += dout[(size_t)n * OC + o];
            mag += fabs(dout[(size_t)n * OC + o]);
        }
        gb.v[o] = 2.0 + acc;
        gb.bound[o] = (N + 1) * U * (mag + 2.0);
    }
    if (C >= 8 && OC >= 8 && N >= 8) {
        char what[96];
        snprintf(what, sizeof what, "N=%d C=%d OC=%d forward", N, C, OC);
        check_teeth(what, f32, &fw, NOC);
        snprintf(what, sizeof what, "N=%d C=%d OC=%d dinp", N, C, OC);
        check_teeth(what, gi32, &gi, NC);
        snprintf(what, sizeof what, "N=%d C=%d OC=%d dweight", N, C, OC);
        check_teeth(what, gw32, &gw, OCC);
    }
    karg f[] = {ARG(ffill(NOC, NAN), NOC), ARG(inp, NC), ARG(w16, OCC), ARG(b, OC)};
    karg g[] = {ARG(ffill(NC, 0.5f), NC), ARG(ffill(OCC, -1.0f), OCC), ARG(ffill(OC, 2.0f), OC),
                ARG(dout, NOC), ARG(inp16, NC), ARG(w16, OCC)};
    FOR_ALL(be) {
        if (!has_f16(be)) continue;
        RUN(be, f, be->i->matmul_forward_f16(be, f[0].dev, f[1].dev, f[2].dev, f[3].dev, N, C,
                                             OC));
        check_bound(be, "matmul_forward_f16", f[0].got, &fw, NOC);
        RUN(be, f, be->i->matmul_forward_f16(be, f[0].dev, f[1].dev, f[2].dev, NULL, N, C, OC));
        check_bound(be, "matmul_forward_f16 bias=NULL", f[0].got, &fwn, NOC);
        RUN(be, g, be->i->matmul_backward_f16(be, g[0].dev, g[1].dev, g[2].dev, g[3].dev,
                                              g[4].dev, g[5].dev, N, C, OC));
        check_bound(be, "matmul_backward_f16 dinp", g[0].got, &gi, NC);
        check_bound(be, "matmul_backward_f16 dweight", g[1].got, &gw, OCC);
        check_bound(be, "matmul_backward_f16 dbias", g[2].got, &gb, OC);
        float *dinp = g[0].got;
        RUN(be, g, be->i->matmul_backward_f16(be, g[0].dev, NULL, NULL, g[3].dev, NULL, g[5].dev,
                                              N, C, OC));
        CHECK_MSG(same_floats(dinp, g[0].got, NC), "%s",
                  label(be, "matmul_backward_f16 dweight=dbias=inp16=NULL"));
    }
    pool_free();
}

/* A loss-scaled gradient past 65504 becomes inf as the GEMM reads it: every
 * dinp of that row and every dweight of that column turn non-finite, while
 * the fp32 bias gradient stays finite; the same values below the edge stay
 * finite. The forward keeps fp16's whole range (65504 in, finite out). */
static void test_overflow(void) {
    enum { N = 6, C = 8, OC = 5 };
    float *dout = frand((size_t)N * OC, 1.0f), *inp = frand((size_t)N * C, 1.0f);
    float *w = frand((size_t)OC * C, 0.5f);
    uint16_t *w16 = pool_alloc((size_t)OC * C * sizeof *w16);
    uint16_t *inp16 = pool_alloc((size_t)N * C * sizeof *inp16);
    for (size_t i = 0; i < (size_t)OC * C; i++) w16[i] = ct_f32_to_f16(w[i]);
    for (size_t i = 0; i < (size_t)N * C; i++) inp16[i] = ct_f32_to_f16(inp[i]);
    float *big = fcopy(dout, (size_t)N * OC), *edge = fcopy(dout, (size_t)N * OC);
    big[2 * OC + 3] = 70000.0f;   /* row 2, column 3: inf in fp16 */
    edge[2 * OC + 3] = 65504.0f;  /* fp16's largest: finite */
    float *x = fcopy(inp, (size_t)N * C);
    x[1] = 65504.0f;
    FOR_ALL(be) {
        if (!has_f16(be)) {
            CHECK_MSG(!be->i->matmul_forward_f16 && !be->i->matmul_backward_f16 &&
                          !be->i->f32_to_f16,
                      "%s", label(be, "fp16 entries all present or all NULL"));
            continue;
        }
        for (int k = 0; k < 2; k++) {
            karg g[] = {ARG(ffill((size_t)N * C, 0.0f), (size_t)N * C),
                        ARG(ffill((size_t)OC * C, 0.0f), (size_t)OC * C), ARG(ffill(OC, 0.0f), OC),
                        ARG(k ? edge : big, (size_t)N * OC), ARG(inp16, (size_t)N * C),
                        ARG(w16, (size_t)OC * C)};
            RUN(be, g, be->i->matmul_backward_f16(be, g[0].dev, g[1].dev, g[2].dev, g[3].dev,
                                                  g[4].dev, g[5].dev, N, C, OC));
            size_t nf_in = 0, nf_w = 0, nf_b = 0;
            for (size_t i = 0; i < (size_t)N * C; i++) nf_in += !isfinite(g[0].got[i]);
            for (size_t i = 0; i < (size_t)OC * C; i++) nf_w += !isfinite(g[1].got[i]);
            for (size_t i = 0; i < OC; i++) nf_b += !isfinite(g[2].got[i]);
            if (k == 0)
                CHECK_MSG(nf_in >= C && nf_w >= 1 && nf_b == 0,
                          "%s: non-finite dinp %zu (want >= %d), dweight %zu, dbias %zu (want 0)",
                          label(be, "dout 70000 overflows fp16"), nf_in, C, nf_w, nf_b);
            else
                CHECK_MSG(nf_in + nf_w + nf_b == 0, "%s: %zu non-finite",
                          label(be, "dout 65504 stays finite"), nf_in + nf_w + nf_b);
        }
        karg f[] = {ARG(ffill((size_t)N * OC, 0.0f), (size_t)N * OC), ARG(x, (size_t)N * C),
                    ARG(w16, (size_t)OC * C)};
        RUN(be, f, be->i->matmul_forward_f16(be, f[0].dev, f[1].dev, f[2].dev, NULL, N, C, OC));
        size_t nf = 0;
        for (size_t i = 0; i < (size_t)N * OC; i++) nf += !isfinite(f[0].got[i]);
        CHECK_MSG(nf == 0, "%s: %zu non-finite", label(be, "forward input 65504 stays finite"),
                  nf);
    }
    pool_free();
}

int main(void) {
    if (harness_init(0xF16F16ULL) != CT_OK) {
        fprintf(stderr, "test_kernels_f16: %s\n", ct_last_error());
        return 1;
    }
    int with = 0;
    FOR_ALL(be) with += has_f16(be);
    CHECK_MSG(has_f16(ref_be), "ref has the fp16 entries");
    if (verbose) printf("%d backends with fp16 entries\n", with);
    test_convert();
    test_matmul_f16(5, 13, 17);
    test_matmul_f16(4, 1, 3);
    test_matmul_f16(1, 7, 1);
    test_matmul_f16(37, 64, 96);
    test_matmul_f16(64, 128, 200);
    test_overflow();
    return harness_finish("test_kernels_f16");
}
