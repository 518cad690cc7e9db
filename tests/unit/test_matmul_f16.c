/*
 * The ref backend's fp16 GEMMs (train.precision = fp16) are the fp32 GEMM of
 * their fp16-rounded inputs, bit for bit: an fp32 loop in the same order over
 * inputs rounded beforehand (ct_f32_to_f16 and back) gives every output's
 * bits, forward, dinp, dweight and dbias. The ref table's f32_to_f16 gives
 * core/dtype.c's bits at fp16's edges (65504, 65520 -> inf, the smallest
 * subnormal 2^-24, ties, NaN). The kernel harness (tests/kernels) ties the
 * other backends to ref.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/ref/ref.h"
#include "core/dtype.h"
#include "ct_test.h"

static uint32_t rng = 12345u;
static float urand(float a) { /* [-a, a) */
    rng = rng * 1664525u + 1013904223u;
    return a * ((float)(rng >> 8) / 8388608.0f - 1.0f);
}

static float r16(float x) { return ct_f16_to_f32(ct_f32_to_f16(x)); }

static bool same_bits(const float *a, const float *b, size_t n) {
    return memcmp(a, b, n * sizeof *a) == 0;
}

static void test_gemm(int N, int C, int OC, float amp) {
    size_t NC = (size_t)N * C, OCC = (size_t)OC * C, NOC = (size_t)N * OC;
    float *x = malloc(NC * 4), *w = malloc(OCC * 4), *b = malloc(OC * 4), *d = malloc(NOC * 4);
    float *xr = malloc(NC * 4), *wr = malloc(OCC * 4), *dr = malloc(NOC * 4);
    uint16_t *x16 = malloc(NC * 2), *w16 = malloc(OCC * 2);
    float *out = malloc(NOC * 4), *want = malloc(NOC * 4);
    float *gi = malloc(NC * 4), *gi_w = malloc(NC * 4), *gw = malloc(OCC * 4),
          *gw_w = malloc(OCC * 4), *gb = malloc(OC * 4), *gb_w = malloc(OC * 4);
    CHECK(x && w && b && d && xr && wr && dr && x16 && w16 && out && want && gi && gi_w && gw &&
          gw_w && gb && gb_w);
    for (size_t i = 0; i < NC; i++) x[i] = urand(amp);
    for (size_t i = 0; i < OCC; i++) w[i] = urand(0.5f);
    for (int i = 0; i < OC; i++) b[i] = urand(1.0f);
    for (size_t i = 0; i < NOC; i++) d[i] = urand(amp);
    for (size_t i = 0; i < NC; i++) {
        x16[i] = ct_f32_to_f16(x[i]);
        xr[i] = r16(x[i]);
    }
    for (size_t i = 0; i < OCC; i++) {
        w16[i] = ct_f32_to_f16(w[i]);
        wr[i] = r16(w[i]);
    }
    for (size_t i = 0; i < NOC; i++) dr[i] = r16(d[i]);
    /* forward: fp32 sums in c order, then the bias */
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            float acc = 0.0f;
            for (int c = 0; c < C; c++) acc += xr[(size_t)n * C + c] * wr[(size_t)o * C + c];
            want[(size_t)n * OC + o] = acc + b[o];
        }
    ct_matmul_forward_f16_ref(NULL, out, x, w16, b, N, C, OC);
    CHECK_MSG(same_bits(out, want, NOC), "forward N=%d C=%d OC=%d: not the fp32 GEMM of the "
              "rounded inputs bit for bit", N, C, OC);
    /* backward, added into 0.25 / -1 / 2 */
    for (size_t i = 0; i < NC; i++) gi[i] = gi_w[i] = 0.25f;
    for (size_t i = 0; i < OCC; i++) gw[i] = gw_w[i] = -1.0f;
    for (int i = 0; i < OC; i++) gb[i] = gb_w[i] = 2.0f;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            float acc = 0.0f;
            for (int o = 0; o < OC; o++) acc += dr[(size_t)n * OC + o] * wr[(size_t)o * C + c];
            gi_w[(size_t)n * C + c] += acc;
        }
    for (int o = 0; o < OC; o++)
        for (int c = 0; c < C; c++) {
            float acc = 0.0f;
            for (int n = 0; n < N; n++) acc += dr[(size_t)n * OC + o] * xr[(size_t)n * C + c];
            gw_w[(size_t)o * C + c] += acc;
        }
    for (int o = 0; o < OC; o++) { /* the fp32 dout's column sums, in double (ref's fp32 path) */
        double acc = 0.0;
        for (int n = 0; n < N; n++) acc += d[(size_t)n * OC + o];
        gb_w[o] += (float)acc;
    }
    ct_matmul_backward_f16_ref(NULL, gi, gw, gb, d, x16, w16, N, C, OC);
    CHECK_MSG(same_bits(gi, gi_w, NC), "dinp N=%d C=%d OC=%d: not bit for bit", N, C, OC);
    CHECK_MSG(same_bits(gw, gw_w, OCC), "dweight N=%d C=%d OC=%d: not bit for bit", N, C, OC);
    CHECK_MSG(same_bits(gb, gb_w, OC), "dbias N=%d C=%d OC=%d: not bit for bit", N, C, OC);
    /* and the rounding is in effect: the unrounded fp32 GEMM differs */
    if (C >= 8) {
        bool differs = false;
        for (int n = 0; n < N && !differs; n++)
            for (int o = 0; o < OC && !differs; o++) {
                float acc = 0.0f;
                for (int c = 0; c < C; c++) acc += x[(size_t)n * C + c] * w[(size_t)o * C + c];
                differs = acc + b[o] != out[(size_t)n * OC + o];
            }
        CHECK_MSG(differs, "N=%d C=%d OC=%d: the fp16 GEMM equals the unrounded one", N, C, OC);
    }
    free(x), free(w), free(b), free(d), free(xr), free(wr), free(dr), free(x16), free(w16);
    free(out), free(want), free(gi), free(gi_w), free(gw), free(gw_w), free(gb), free(gb_w);
}

static void test_convert_entry(void) {
    const ct_backend_i *k = &ct_backend_ref_i;
    CHECK(k->f32_to_f16 && k->matmul_forward_f16 && k->matmul_backward_f16);
    if (!k->f32_to_f16) return;
    const float in[] = {65504.0f,       65520.0f,           -65520.0f,
                        ldexpf(1, -24), ldexpf(1, -25),     ldexpf(3, -25),
                        1.0f + ldexpf(1, -11), 1.0f + ldexpf(3, -11), NAN,
                        ldexpf(1, -14), 1e-10f,             INFINITY};
    const uint16_t want[] = {0x7bff, 0x7c00, 0xfc00, 0x0001, 0x0000, 0x0002,
                             0x3c00, 0x3c02, 0x7e00, 0x0400, 0x0000, 0x7c00};
    enum { NV = sizeof in / sizeof *in };
    uint16_t got[NV];
    k->f32_to_f16(NULL, got, in, NV);
    for (int i = 0; i < NV; i++) {
        if (isnan(in[i]))
            CHECK_MSG((got[i] & 0x7c00) == 0x7c00 && (got[i] & 0x3ff), "NaN -> 0x%04x", got[i]);
        else
            CHECK_MSG(got[i] == want[i], "%.9g -> 0x%04x, want 0x%04x", in[i], got[i], want[i]);
    }
    /* every fp16 value widened and converted back is itself (NaNs stay NaNs) */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ct_f16_to_f32((uint16_t)h);
        uint16_t back;
        k->f32_to_f16(NULL, &back, &f, 1);
        bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        bad += nan ? !((back & 0x7c00) == 0x7c00 && (back & 0x3ff)) : back != h;
    }
    CHECK_MSG(bad == 0, "%d fp16 patterns failed the round trip through f32_to_f16", bad);
}

int main(void) {
    test_convert_entry();
    test_gemm(3, 5, 4, 1.0f);
    test_gemm(7, 33, 19, 1.0f);
    test_gemm(16, 64, 48, 300.0f); /* products up to 150 * 300: still exact in fp32 */
    test_gemm(5, 16, 9, 1e-5f);    /* inputs among fp16's subnormals (below 6.1e-5) */
    return ct_test_result("test_matmul_f16");
}
