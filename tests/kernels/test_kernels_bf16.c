/*
 * Tests of the mixed-precision matmul entries (matmul_forward_bf16,
 * matmul_backward_bf16: bf16 GEMM inputs, fp32 sums and outputs, as
 * torch.autocast's linear) on the harness shared with test_kernels.c: every
 * backend (ref, cpu with each GEMM library this build has, sim) against a
 * double-precision formula over the bf16-rounded inputs. The tolerance comes
 * from the accumulation order only: any order of summing K terms in fp32 is
 * within (K + 1) u sum|terms| of the exact sum (u = 2^-24; one more rounding
 * for the bias or the buffer added into), so nothing a wrong rounding of an
 * input (about 2^-9 relative) could hide in. Each case also checks that the
 * fp32 formula (inputs not rounded) is outside that tolerance, so the test
 * has teeth. Shapes: odd ones (ref's fallbacks included) and ones large
 * enough for the libraries' blocked kernels. CT_TEST_VERBOSE=1 prints every
 * measured error.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/gemm.h"
#include "core/dtype.h"
#include "ct_test.h"
#include "ctrain/core.h"
#include "harness.h"

static const double U = 1.0 / 16777216.0; /* 2^-24: fp32's unit roundoff */

static double bf(float x) { return (double)ct_bf16_to_f32(ct_f32_to_bf16(x)); }

/* A double reference with each element's bound: want[i] = base[i] + sum of
 * K terms, bound[i] = (K + 1) u (|base[i]| + sum |terms|). */
typedef struct want_t {
    double *v, *bound;
} want_t;

/* The largest |got - want| / bound over n (> 1: outside the tolerance). */
static double over_bound(const float *got, const want_t *w, size_t n) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - w->v[i]);
        double r = w->bound[i] > 0 ? e / w->bound[i] : (e > 0 ? INFINITY : 0.0);
        if (!(r <= worst)) worst = r; /* NaN sticks */
    }
    return worst;
}

static void check_bound(const ct_backend *be, const char *lib, const char *what,
                        const float *got, const want_t *w, size_t n) {
    double r = over_bound(got, w, n);
    char name[160];
    snprintf(name, sizeof name, "%s%s%s", what, lib ? " gemm=" : "", lib ? lib : "");
    if (verbose) printf("  %-48s %.3g of the bound\n", label(be, name), r);
    CHECK_MSG(r <= 1.0, "%s: error %.3g times the accumulation bound", label(be, name), r);
}

/* The fp32 formula (inputs not rounded) must miss the bf16 one's bound: the
 * rounding under test is visible at this tolerance. */
static void check_teeth(const char *what, const double *f32, const want_t *w, size_t n) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double r = fabs(f32[i] - w->v[i]) / w->bound[i];
        if (r > worst) worst = r;
    }
    CHECK_MSG(worst > 10.0, "%s: fp32 inputs land within %.3g of the bf16 bound", what, worst);
}

static want_t want_alloc(size_t n) { return (want_t){dalloc(n), dalloc(n)}; }

static void test_matmul_bf16(int N, int C, int OC) {
    size_t NC = (size_t)N * C, OCC = (size_t)OC * C, NOC = (size_t)N * OC;
    float *inp = frand(NC, 1.0f), *w = frand(OCC, 0.5f), *b = frand(OC, 1.0f);
    float *dout = frand(NOC, 1.0f);
    uint16_t *w16 = pool_alloc(OCC * sizeof *w16), *inp16 = pool_alloc(NC * sizeof *inp16);
    ct_f32_to_bf16_array(w16, w, OCC);
    ct_f32_to_bf16_array(inp16, inp, NC);

    /* forward: out = bf(inp) bf(w)^T + b; and without bias */
    want_t fw = want_alloc(NOC), fwn = want_alloc(NOC);
    double *f32 = dalloc(NOC);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double acc = 0, mag = 0, acc32 = 0;
            for (int c = 0; c < C; c++) {
                double t = bf(inp[(size_t)n * C + c]) * bf(w[(size_t)o * C + c]);
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
    /* backward: dinp = 0.5 + bf(dout) w16; dweight = -1 + bf(dout)^T inp16;
     * dbias = 2 + colsum(dout) (fp32 dout, not rounded) */
    want_t gi = want_alloc(NC), gw = want_alloc(OCC), gb = want_alloc(OC);
    double *gi32 = dalloc(NC), *gw32 = dalloc(OCC);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double acc = 0, mag = 0, acc32 = 0;
            for (int o = 0; o < OC; o++) {
                double t = bf(dout[(size_t)n * OC + o]) * bf(w[(size_t)o * C + c]);
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
                double t = bf(dout[(size_t)n * OC + o]) * bf(inp[(size_t)n * C + c]);
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

    // forward writes: stale (NaN) contents must not matter
    karg f[] = {ARG(ffill(NOC, NAN), NOC), ARG(inp, NC), ARG(w16, OCC), ARG(b, OC)};
    karg g[] = {ARG(ffill(NC, 0.5f), NC), ARG(ffill(OCC, -1.0f), OCC), ARG(ffill(OC, 2.0f), OC),
                ARG(dout, NOC), ARG(inp16, NC), ARG(w16, OCC)};
    FOR_ALL(be) {
        /* the cpu backend once per GEMM library of this build */
        int libs[2] = {CT_GEMM_OPENBLAS, CT_GEMM_ONEDNN};
        int nlib = strcmp(be->i->name, "cpu") == 0 ? (ct_gemm_have_onednn() ? 2 : 1) : 1;
        ct_gemm_lib was = be->gemm;
        for (int li = 0; li < nlib; li++) {
            const char *lib = NULL;
            if (strcmp(be->i->name, "cpu") == 0) {
                be->gemm = (ct_gemm_lib)libs[li];
                lib = ct_gemm_lib_name(be->gemm);
            }
            RUN(be, f, be->i->matmul_forward_bf16(be, f[0].dev, f[1].dev, f[2].dev, f[3].dev, N,
                                                  C, OC));
            check_bound(be, lib, "matmul_forward_bf16", f[0].got, &fw, NOC);
            RUN(be, f, be->i->matmul_forward_bf16(be, f[0].dev, f[1].dev, f[2].dev, NULL, N, C,
                                                  OC));
            check_bound(be, lib, "matmul_forward_bf16 bias=NULL", f[0].got, &fwn, NOC);
            RUN(be, g, be->i->matmul_backward_bf16(be, g[0].dev, g[1].dev, g[2].dev, g[3].dev,
                                                   g[4].dev, g[5].dev, N, C, OC));
            check_bound(be, lib, "matmul_backward_bf16 dinp", g[0].got, &gi, NC);
            check_bound(be, lib, "matmul_backward_bf16 dweight", g[1].got, &gw, OCC);
            check_bound(be, lib, "matmul_backward_bf16 dbias", g[2].got, &gb, OC);
            // NULL dweight, dbias and inp16 skip them and leave dinp as before
            float *dinp = g[0].got;
            RUN(be, g, be->i->matmul_backward_bf16(be, g[0].dev, NULL, NULL, g[3].dev, NULL,
                                                   g[5].dev, N, C, OC));
            CHECK_MSG(same_floats(dinp, g[0].got, NC), "%s",
                      label(be, "matmul_backward_bf16 dweight=dbias=inp16=NULL"));
        }
        be->gemm = was;
    }
    pool_free();
}

/* The weight is the only thing the entries read as bf16: the same rounded
 * inputs through the fp32 entries give the same sums (up to the order), so
 * the bf16 path is the fp32 one on rounded values, as autocast defines it. */
static void test_same_as_rounded_fp32(int N, int C, int OC) {
    size_t NC = (size_t)N * C, OCC = (size_t)OC * C, NOC = (size_t)N * OC;
    float *inp = frand(NC, 1.0f), *w = frand(OCC, 0.5f);
    uint16_t *w16 = pool_alloc(OCC * sizeof *w16);
    ct_f32_to_bf16_array(w16, w, OCC);
    float *inp_r = falloc(NC), *w_r = falloc(OCC);
    ct_f32_round_bf16_array(inp_r, inp, NC);
    ct_f32_round_bf16_array(w_r, w, OCC);
    karg f[] = {ARG(ffill(NOC, 0.0f), NOC), ARG(inp, NC), ARG(w16, OCC)};
    karg h[] = {ARG(ffill(NOC, 0.0f), NOC), ARG(inp_r, NC), ARG(w_r, OCC)};
    FOR_ALL(be) {
        RUN(be, f, be->i->matmul_forward_bf16(be, f[0].dev, f[1].dev, f[2].dev, NULL, N, C, OC));
        RUN(be, h, be->i->matmul_forward(be, h[0].dev, h[1].dev, h[2].dev, NULL, N, C, OC));
        double err = 0, mag = 0;
        for (size_t i = 0; i < NOC; i++) {
            double e = fabs((double)f[0].got[i] - h[0].got[i]);
            if (e > err) err = e;
            if (fabs(h[0].got[i]) > mag) mag = fabs(h[0].got[i]);
        }
        /* both sums within C u of the exact one (|terms| <= 0.5 each) */
        CHECK_MSG(err <= 2.0 * (C + 1) * U * 0.5 * C + 1e-30, "%s: %.3g apart (|out| <= %.3g)",
                  label(be, "matmul_forward_bf16 vs matmul_forward on rounded inputs"), err, mag);
    }
    pool_free();
}

int main(void) {
    if (harness_init(0xB16B00B5ULL) != CT_OK) {
        fprintf(stderr, "test_kernels_bf16: %s\n", ct_last_error());
        return 1;
    }
    if (verbose) printf("every backend vs the double formula over bf16 inputs:\n");
    test_matmul_bf16(5, 13, 17);
    test_matmul_bf16(4, 1, 3);
    test_matmul_bf16(1, 7, 1);
    test_matmul_bf16(37, 64, 96);   /* the libraries' blocked kernels */
    test_matmul_bf16(64, 128, 200); /* K = 128 / 200 / 64 along each GEMM */
    test_same_as_rounded_fp32(16, 48, 40);
    return harness_finish("test_kernels_bf16");
}
