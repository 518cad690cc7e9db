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
 * enough for the libraries' blocked kernels. The forwards on an input that
 * is bf16 already (the _in16 entries) against the same formula, on the
 * backends that have them. The bf16 head's three entries
 * (bf16 logits in padded rows: see test_head_matmul) on the backends that have
 * them. CT_TEST_VERBOSE=1 prints every measured error.
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

/* gelu_forward's tanh form in double. */
static double gelu_tanh(double x) {
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

/* The forwards on an input that is bf16 already (matmul_forward_bf16_in16,
 * matmul_gelu_forward_bf16_in16), where the backend has them: the output
 * (and the pre-activation) held to the formula over the rounded inputs, as
 * matmul_forward_bf16's; GELU's output to the tanh form of the
 * pre-activation the entry wrote (2e-5 + 2e-5 |x|, the tolerance of cuda's
 * epilogue check). Outputs start as NaN: the entries write every element. */
static void check_in16(ct_backend *be, const uint16_t *inp16, const uint16_t *w16,
                       const float *b, const want_t *fw, const want_t *fwn, int N, int C,
                       int OC) {
    size_t NC = (size_t)N * C, OCC = (size_t)OC * C, NOC = (size_t)N * OC;
    if (!be->i->matmul_forward_bf16_in16) {
        CHECK_MSG(strcmp(be->i->name, "cpu") == 0, "%s",
                  label(be, "matmul_forward_bf16_in16 missing on a device backend"));
        return;
    }
    karg f[] = {ARG(ffill(NOC, NAN), NOC), ARG(inp16, NC), ARG(w16, OCC), ARG(b, OC),
                ARG(ffill(NOC, NAN), NOC)};
    RUN(be, f, be->i->matmul_forward_bf16_in16(be, f[0].dev, f[1].dev, f[2].dev, f[3].dev, N, C,
                                               OC));
    check_bound(be, NULL, "matmul_forward_bf16_in16", f[0].got, fw, NOC);
    RUN(be, f, be->i->matmul_forward_bf16_in16(be, f[0].dev, f[1].dev, f[2].dev, NULL, N, C, OC));
    check_bound(be, NULL, "matmul_forward_bf16_in16 bias=NULL", f[0].got, fwn, NOC);
    if (!be->i->matmul_gelu_forward_bf16_in16) return;
    for (int bias = 1; bias >= 0; bias--) {
        RUN(be, f, be->i->matmul_gelu_forward_bf16_in16(be, f[0].dev, f[4].dev, f[1].dev,
                                                        f[2].dev, bias ? f[3].dev : NULL, N, C,
                                                        OC));
        check_bound(be, NULL, bias ? "matmul_gelu_forward_bf16_in16 pre"
                                   : "matmul_gelu_forward_bf16_in16 pre bias=NULL",
                    f[0].got, bias ? fw : fwn, NOC);
        double worst = 0;
        for (size_t i = 0; i < NOC; i++) {
            double want = gelu_tanh(f[0].got[i]);
            double r = fabs(f[4].got[i] - want) / (2e-5 + 2e-5 * fabs(want));
            if (!(r <= worst)) worst = r;
        }
        CHECK_MSG(worst <= 1.0, "%s: %.3g times the tolerance",
                  label(be, "matmul_gelu_forward_bf16_in16 out = gelu(pre)"), worst);
    }
}

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
        check_in16(be, inp16, w16, b, &fw, &fwn, N, C, OC);
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

/* ------------------------------------------------- the bf16 head (bf16 logits) */

/* The three optional entries of the bf16 vocabulary head
 * (matmul_forward_bf16_out16, crossentropy_forward_bf16,
 * matmul_backward_bf16_dout16), on the backends that have them (skipped
 * where NULL), against double formulas. A bf16 output is held to a
 * bracket: an fp32 result anywhere within the accumulation bound of the exact
 * value rounds (nearest even, monotone) to a bf16 between bf16(lo) and
 * bf16(hi), and that bracket is one value for nearly every element (the bound
 * is far below half a bf16 ulp), so a truncation or a wrong rounding fails.
 * The 16-bit rows are ld apart; their pad columns hold a NaN pattern that must
 * come back bit for bit and never reach a result. */

static const uint16_t PAD16 = 0x7fa5; /* a NaN in bf16 */

/* fp32 neighbours of x: the largest float <= x, the smallest >= x */
static float f32_down(double x) {
    float f = (float)x;
    return (double)f > x ? nextafterf(f, -INFINITY) : f;
}
static float f32_up(double x) {
    float f = (float)x;
    return (double)f < x ? nextafterf(f, INFINITY) : f;
}
/* bf16 bits on one ordered line (-0 and +0 equal) */
static int bf16_line(uint16_t x) { return x & 0x8000u ? -(int)(x & 0x7fffu) : (int)x; }

/* got (N rows, ld apart, bf16 bits) against want (N, OC): every element in
 * its bracket, every pad PAD16. With sharp, also asks that at least 90% of
 * the brackets of nonzero values be one value (the check is as sharp as the
 * rounding it checks): true where the bound is tight (K <= 64 terms; at
 * K = 768 the worst-case bound nears half a bf16 ulp). */
static void check_bracket16(const ct_backend *be, const char *what, const uint16_t *got, int ld,
                            const want_t *w, int N, int OC, bool sharp_required) {
    size_t out = 0, pads = 0, wide = 0, sharp = 0;
    for (int n = 0; n < N; n++) {
        for (int o = 0; o < OC; o++) {
            size_t i = (size_t)n * OC + o;
            uint16_t g = got[(size_t)n * ld + o];
            int lo = bf16_line(ct_f32_to_bf16(f32_down(w->v[i] - w->bound[i])));
            int hi = bf16_line(ct_f32_to_bf16(f32_up(w->v[i] + w->bound[i])));
            bool nan = (g & 0x7fffu) > 0x7f80u;
            out += nan || bf16_line(g) < lo || bf16_line(g) > hi;
            sharp += w->v[i] != 0.0;
            wide += w->v[i] != 0.0 && hi != lo;
        }
        for (int o = OC; o < ld; o++) pads += got[(size_t)n * ld + o] != PAD16;
    }
    size_t n_el = (size_t)N * OC;
    if (verbose)
        printf("  %-48s %zu outside, %zu pads written, %zu of %zu brackets wide\n",
               label(be, what), out, pads, wide, sharp);
    CHECK_MSG(out == 0, "%s: %zu of %zu outside their bracket", label(be, what), out, n_el);
    CHECK_MSG(pads == 0, "%s: %zu pad columns written", label(be, what), pads);
    CHECK_MSG(!sharp_required || wide * 10 <= sharp,
              "%s: %zu of %zu brackets span several bf16 values (a blunt test)", label(be, what),
              wide, sharp);
}

/* N rows of n bf16 values (scale * uniform), ld apart, pads PAD16. */
static uint16_t *rand16(int N, int n, int ld, float scale) {
    uint16_t *x = pool_alloc((size_t)N * ld * sizeof *x);
    for (int r = 0; r < N; r++)
        for (int i = 0; i < ld; i++)
            x[(size_t)r * ld + i] = i < n ? ct_f32_to_bf16(scale * rng_float()) : PAD16;
    return x;
}
static double w16(const uint16_t *x, size_t i) { return (double)ct_bf16_to_f32(x[i]); }
/* x (n bf16) widened into pooled doubles, for the formulas' inner loops */
static double *widen16(const uint16_t *x, size_t n) {
    double *y = dalloc(n);
    for (size_t i = 0; i < n; i++) y[i] = w16(x, i);
    return y;
}

/* The shapes of a GPT-2 head run on the backends under test only: their
 * results are held to the double formulas, and ref's scalar loops would take
 * most of the test's time. */
static bool skip_ref(const ct_backend *be, size_t work) { return be == ref_be && work > 100000000; }

/* matmul_forward_bf16_out16 and matmul_backward_bf16_dout16 at (N, C, OC),
 * rows ld apart. */
static void test_head_matmul(int N, int C, int OC, int ld) {
    size_t NC = (size_t)N * C, OCC = (size_t)OC * C, NOC = (size_t)N * OC, NLD = (size_t)N * ld;
    float *inp = frand(NC, 1.0f), *w = frand(OCC, 0.5f);
    uint16_t *wt16 = pool_alloc(OCC * sizeof *wt16), *inp16 = pool_alloc(NC * sizeof *inp16);
    ct_f32_to_bf16_array(wt16, w, OCC);
    ct_f32_to_bf16_array(inp16, inp, NC);
    uint16_t *dout16 = rand16(N, OC, ld, 1.0f), *stale = rand16(N, 0, ld, 0.0f);
    double *xd = widen16(inp16, NC), *wd = widen16(wt16, OCC), *dd = widen16(dout16, NLD);
    /* out = bf(inp) w16^T, its bound */
    want_t fw = want_alloc(NOC);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double acc = 0, mag = 0;
            for (int c = 0; c < C; c++) {
                double t = xd[(size_t)n * C + c] * wd[(size_t)o * C + c];
                acc += t;
                mag += fabs(t);
            }
            fw.v[(size_t)n * OC + o] = acc;
            fw.bound[(size_t)n * OC + o] = (C + 1) * U * mag;
        }
    /* dinp = 0.5 + dout16 w16; dweight = -1 + dout16^T inp16 */
    want_t gi = want_alloc(NC), gw = want_alloc(OCC);
    for (int n = 0; n < N; n++) {
        double *acc = gi.v + (size_t)n * C, *mag = gi.bound + (size_t)n * C;
        for (int o = 0; o < OC; o++) {
            double d = dd[(size_t)n * ld + o];
            for (int c = 0; c < C; c++) {
                double t = d * wd[(size_t)o * C + c];
                acc[c] += t;
                mag[c] += fabs(t);
            }
        }
        for (int c = 0; c < C; c++) {
            acc[c] += 0.5;
            mag[c] = (OC + 1) * U * (mag[c] + 0.5);
        }
    }
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double d = dd[(size_t)n * ld + o];
            double *acc = gw.v + (size_t)o * C, *mag = gw.bound + (size_t)o * C;
            for (int c = 0; c < C; c++) {
                double t = d * xd[(size_t)n * C + c];
                acc[c] += t;
                mag[c] += fabs(t);
            }
        }
    for (size_t i = 0; i < OCC; i++) {
        gw.v[i] += -1.0;
        gw.bound[i] = (N + 1) * U * (gw.bound[i] + 1.0);
    }
    char what[128];
    karg f[] = {ARG(stale, NLD), ARG(inp, NC), ARG(wt16, OCC)};
    karg g[] = {ARG(ffill(NC, 0.5f), NC), ARG(ffill(OCC, -1.0f), OCC), ARG(dout16, NLD),
                ARG(inp16, NC), ARG(wt16, OCC)};
    FOR_ALL(be) {
        if (skip_ref(be, NOC * C)) continue;
        if (!be->i->matmul_forward_bf16_out16 || !be->i->matmul_backward_bf16_dout16) {
            CHECK_MSG(!be->i->matmul_forward_bf16_out16 && !be->i->matmul_backward_bf16_dout16 &&
                          !be->i->crossentropy_forward_bf16,
                      "%s", label(be, "has some of the bf16 head's entries, not all three"));
            continue;
        }
        snprintf(what, sizeof what, "matmul_forward_bf16_out16 N=%d C=%d OC=%d ld=%d", N, C, OC,
                 ld);
        RUN(be, f, be->i->matmul_forward_bf16_out16(be, f[0].dev, ld, f[1].dev, f[2].dev, N, C,
                                                    OC));
        check_bracket16(be, what, (const uint16_t *)f[0].got, ld, &fw, N, OC, C <= 64);
        snprintf(what, sizeof what, "matmul_backward_bf16_dout16 N=%d C=%d OC=%d ld=%d", N, C,
                 OC, ld);
        RUN(be, g, be->i->matmul_backward_bf16_dout16(be, g[0].dev, g[1].dev, g[2].dev, ld,
                                                      g[3].dev, g[4].dev, N, C, OC));
        check_bound(be, NULL, what, g[0].got, &gi, NC);
        check_bound(be, NULL, what, g[1].got, &gw, OCC);
        // either output alone; inp16 NULL with dweight
        RUN(be, g, be->i->matmul_backward_bf16_dout16(be, g[0].dev, NULL, g[2].dev, ld, NULL,
                                                      g[4].dev, N, C, OC));
        check_bound(be, NULL, "matmul_backward_bf16_dout16 dweight=inp16=NULL", g[0].got, &gi,
                    NC);
        CHECK_MSG(g[1].got[0] == -1.0f && g[1].got[OCC - 1] == -1.0f, "%s",
                  label(be, "matmul_backward_bf16_dout16 dweight=NULL wrote dweight"));
        RUN(be, g, be->i->matmul_backward_bf16_dout16(be, NULL, g[1].dev, g[2].dev, ld, g[3].dev,
                                                      g[4].dev, N, C, OC));
        check_bound(be, NULL, "matmul_backward_bf16_dout16 dinp=NULL", g[1].got, &gw, OCC);
        CHECK_MSG(g[0].got[0] == 0.5f && g[0].got[NC - 1] == 0.5f, "%s",
                  label(be, "matmul_backward_bf16_dout16 dinp=NULL wrote dinp"));
        /* the gradient operand comes back as it went (pads included) */
        CHECK_MSG(!memcmp(g[2].got, dout16, NLD * sizeof *dout16), "%s",
                  label(be, "matmul_backward_bf16_dout16 wrote dout16"));
    }
    pool_free();
}

/* crossentropy_forward_bf16 over N rows of V bf16 logits ld apart (logits
 * spread by scale), into a separate gradient, in place, and without one.
 * Held to a double formula over the same bf16 logits: the loss within 2e-6
 * of max(1, |loss|) (fp32 sums of an online softmax: a few ulp of the
 * log-sum-exp), the gradient bracketed by (p - onehot) dloss with p within
 * 3e-5 relative (the log-sum-exp's fp32 error moves every p by that much at
 * most) and 2 fp32 roundings of the result (p - 1, the product); a row whose
 * target is < 0 has loss 0 and +0 bits. */
static void test_head_xent(int N, int V, int ld, float scale) {
    size_t NLD = (size_t)N * ld, NV = (size_t)N * V;
    uint16_t *x16 = rand16(N, V, ld, scale), *stale = rand16(N, 0, ld, 0.0f);
    if (V > 3) x16[(size_t)(N - 1) * ld + V - 1] = ct_f32_to_bf16(4.0f * scale); /* largest, late */
    int32_t *tg = pool_alloc((size_t)N * sizeof *tg);
    for (int n = 0; n < N; n++) tg[n] = n == 1 ? -1 : rng_int(V);
    const float dloss = 0.375f;
    double *loss = dalloc(N);
    want_t gd = want_alloc(NV);
    for (int n = 0; n < N; n++) {
        const uint16_t *x = x16 + (size_t)n * ld;
        double mx = -INFINITY, s = 0;
        for (int i = 0; i < V; i++) mx = fmax(mx, w16(x, i));
        for (int i = 0; i < V; i++) s += exp(w16(x, i) - mx);
        double lse = mx + log(s);
        loss[n] = tg[n] < 0 ? 0.0 : lse - w16(x, tg[n]);
        for (int i = 0; i < V; i++) {
            double p = tg[n] < 0 ? 0.0 : exp(w16(x, i) - lse);
            double g = tg[n] < 0 ? 0.0 : (p - (i == tg[n] ? 1.0 : 0.0)) * dloss;
            gd.v[(size_t)n * V + i] = g;
            gd.bound[(size_t)n * V + i] = tg[n] < 0 ? 0.0 : 3e-5 * p * dloss + 2.4e-7 * fabs(g);
        }
    }
    char what[128];
    karg a[] = {ARG(ffill(N, NAN), N), ARG(stale, NLD), ARG(x16, NLD), ARG(tg, N)};
    FOR_ALL(be) {
        /* test_head_matmul checks all-or-none */
        if (skip_ref(be, NV * 50) || !be->i->crossentropy_forward_bf16) continue;
        for (int mode = 0; mode < 3; mode++) { /* separate, in place, no gradient */
            RUN(be, a, be->i->crossentropy_forward_bf16(
                           be, a[0].dev, mode == 0 ? a[1].dev : mode == 1 ? a[2].dev : NULL,
                           a[2].dev, ld, a[3].dev, N, V, dloss));
            snprintf(what, sizeof what, "crossentropy_forward_bf16 N=%d V=%d ld=%d%s", N, V, ld,
                     mode == 0 ? "" : mode == 1 ? " in place" : " dlogits16=NULL");
            double el = 0;
            for (int n = 0; n < N; n++) {
                double e = fabs(a[0].got[n] - loss[n]) / fmax(1.0, fabs(loss[n]));
                el = isnan(e) ? INFINITY : fmax(el, e);
            }
            if (verbose) printf("  %-48s loss %.3g\n", label(be, what), el);
            CHECK_MSG(el <= 2e-6 && a[0].got[1] == 0.0f, "%s: losses %.3g apart",
                      label(be, what), el);
            const uint16_t *got = (const uint16_t *)(mode == 0 ? a[1].got : a[2].got);
            if (mode < 2) {
                check_bracket16(be, what, got, ld, &gd, N, V, true);
                bool zeros = true;
                for (int i = 0; i < V; i++) zeros &= got[(size_t)ld + i] == 0;
                CHECK_MSG(zeros, "%s: the ignored row's gradient is not +0", label(be, what));
            }
            if (mode != 1) /* the logits are read only */
                CHECK_MSG(!memcmp(a[2].got, x16, NLD * sizeof *x16), "%s: logits16 written",
                          label(be, what));
            if (mode == 2)
                CHECK_MSG(!memcmp(a[1].got, stale, NLD * sizeof *stale), "%s: dlogits16 written",
                          label(be, what));
        }
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
    test_head_matmul(5, 13, 17, 128);
    test_head_matmul(4, 1, 3, 128);
    test_head_matmul(37, 64, 96, 128);  /* the libraries' blocked kernels */
    test_head_matmul(16, 32, 256, 256); /* no pads: ld == OC */
    test_head_matmul(3, 32, 50257, 50304); /* GPT-2's padded vocabulary, few rows */
    test_head_xent(3, 1, 128, 1.0f);
    test_head_xent(4, 37, 128, 3.0f);
    test_head_xent(3, 1000, 1024, 30.0f); /* not a multiple of any block */
    test_head_xent(4, 50257, 50304, 8.0f);
    /* GPT-2 small's head at 64 tokens where a device backend is under test
     * (a GPU machine; too slow for ref and the formulas in the default run) */
    if (!bes[1].host_visible) {
        test_head_matmul(64, 768, 50257, 50304);
        test_head_xent(64, 50257, 50304, 8.0f);
    }
    return harness_finish("test_kernels_bf16");
}
