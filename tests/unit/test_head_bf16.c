/*
 * The bf16 vocabulary head (backend.h: matmul_forward_bf16_out16,
 * crossentropy_forward_bf16, matmul_backward_bf16_dout16) in ref is the
 * existing bf16 path with its rounding moved, bit for bit:
 * - the forward's logits are matmul_forward_bf16's outputs rounded to bf16;
 * - the loss over bf16 logits is crossentropy_forward's over the same values
 *   widened, and its gradient that gradient rounded to bf16, in place too;
 * - the backward from a bf16 gradient is matmul_backward_bf16 from its fp32
 *   gradient (which rounds it as it reads).
 * Rows are ld apart and the pad columns (OC..ld-1) keep their poison: nothing
 * reads or writes them. The kernel profiler passes the three entries through
 * where its inner backend has them, and its layout (head16_ld), so a profiled
 * run keeps the run's numerics. The cpu's loss over bf16 logits is its fp32
 * loss over the same values widened, its gradient that gradient rounded, bit
 * for bit; the cpu uses its bf16 head only on oneDNN where bf16 is native,
 * with dense rows. The kernel harness ties cpu and cuda to double formulas.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/gemm.h"
#include "backend/ctx.h"
#include "backend/ref/ref.h"
#include "core/dtype.h"
#include "ct_test.h"
#include "perf/kprof.h"

#define POISON 0x7fbd /* a bf16 NaN no entry writes */

static uint32_t rng = 2024u;
static float urand(float a) { /* [-a, a) */
    rng = rng * 1664525u + 1013904223u;
    return a * ((float)(rng >> 8) / 8388608.0f - 1.0f);
}

static bool pads_kept(const uint16_t *m, int N, int V, int ld) {
    for (int n = 0; n < N; n++)
        for (int i = V; i < ld; i++)
            if (m[(size_t)n * ld + i] != POISON) return false;
    return true;
}

static void test_head(int N, int C, int V, int ld) {
    size_t NC = (size_t)N * C, VC = (size_t)V * C, NV = (size_t)N * V, NL = (size_t)N * ld;
    float *x = malloc(NC * 4), *w = malloc(VC * 4), *logits = malloc(NV * 4),
          *dl = malloc(NV * 4), *loss = malloc(N * 4), *loss16 = malloc(N * 4);
    float *gi = malloc(NC * 4), *gi_w = malloc(NC * 4), *gw = malloc(VC * 4),
          *gw_w = malloc(VC * 4);
    uint16_t *x16 = malloc(NC * 2), *w16 = malloc(VC * 2), *l16 = malloc(NL * 2),
             *d16 = malloc(NL * 2);
    float *wide = malloc(NV * 4);
    int32_t *tg = malloc(N * sizeof *tg);
    CHECK(x && w && logits && dl && loss && loss16 && gi && gi_w && gw && gw_w && x16 && w16 &&
          l16 && d16 && wide && tg);
    for (size_t i = 0; i < NC; i++) x[i] = urand(2.0f);
    for (size_t i = 0; i < VC; i++) w[i] = urand(0.5f);
    ct_f32_to_bf16_array(x16, x, NC);
    ct_f32_to_bf16_array(w16, w, VC);
    for (int n = 0; n < N; n++) tg[n] = n % 5 == 3 ? -1 : (int32_t)((n * 7919u) % (unsigned)V);
    for (size_t i = 0; i < NL; i++) l16[i] = d16[i] = POISON;

    /* forward: the bf16 GEMM's fp32 outputs, rounded */
    ct_matmul_forward_bf16_ref(NULL, logits, x, w16, NULL, N, C, V);
    ct_matmul_forward_bf16_out16_ref(NULL, l16, ld, x, w16, N, C, V);
    bool same = true;
    for (int n = 0; n < N; n++)
        for (int i = 0; i < V; i++)
            same &= l16[(size_t)n * ld + i] == ct_f32_to_bf16(logits[(size_t)n * V + i]);
    CHECK_MSG(same, "N=%d C=%d V=%d ld=%d: out16 is not the bf16 GEMM's sums rounded", N, C, V,
              ld);
    CHECK_MSG(pads_kept(l16, N, V, ld), "ld=%d: the forward wrote a pad column", ld);

    /* the loss: fp32's over the widened logits, its gradient rounded */
    for (int n = 0; n < N; n++)
        for (int i = 0; i < V; i++) wide[(size_t)n * V + i] = ct_bf16_to_f32(l16[(size_t)n * ld + i]);
    float dloss = 1.0f / (float)N;
    ct_crossentropy_forward_ref(NULL, loss, dl, wide, tg, N, V, dloss);
    ct_crossentropy_forward_bf16_ref(NULL, loss16, d16, l16, ld, tg, N, V, dloss);
    CHECK_MSG(memcmp(loss, loss16, N * 4) == 0, "V=%d: the bf16 loss differs from fp32's over "
              "the same values", V);
    same = true;
    for (int n = 0; n < N; n++)
        for (int i = 0; i < V; i++)
            same &= d16[(size_t)n * ld + i] == ct_f32_to_bf16(dl[(size_t)n * V + i]);
    CHECK_MSG(same, "V=%d: the bf16 gradient is not fp32's rounded", V);
    CHECK_MSG(pads_kept(d16, N, V, ld), "ld=%d: the loss wrote a pad column", ld);
    if (N > 3) { /* row 3's target is ignored: loss 0, gradient row 0 */
        bool zero_row = true;
        for (int i = 0; i < V; i++) zero_row &= d16[3 * (size_t)ld + i] == 0;
        CHECK_MSG(loss16[3] == 0.0f && zero_row, "an ignored target is not ignored");
    }
    /* in place: dlogits16 aliasing logits16 gives the same bits */
    float *loss_in = malloc(N * 4);
    CHECK(loss_in);
    ct_crossentropy_forward_bf16_ref(NULL, loss_in, l16, l16, ld, tg, N, V, dloss);
    CHECK_MSG(memcmp(l16, d16, NL * 2) == 0 && memcmp(loss_in, loss16, N * 4) == 0,
              "the loss in place differs from the loss out of place");
    /* no gradient wanted: losses only, logits untouched */
    uint16_t *keep = malloc(NL * 2);
    CHECK(keep);
    memcpy(keep, d16, NL * 2);
    ct_crossentropy_forward_bf16_ref(NULL, loss_in, NULL, d16, ld, tg, N, V, dloss);
    CHECK_MSG(memcmp(keep, d16, NL * 2) == 0, "dlogits16 NULL: the logits were written");

    /* backward: matmul_backward_bf16 from the fp32 gradient, into 0.5 / -1 */
    for (size_t i = 0; i < NC; i++) gi[i] = gi_w[i] = 0.5f;
    for (size_t i = 0; i < VC; i++) gw[i] = gw_w[i] = -1.0f;
    ct_matmul_backward_bf16_ref(NULL, gi_w, gw_w, NULL, dl, x16, w16, N, C, V);
    ct_matmul_backward_bf16_dout16_ref(NULL, gi, gw, d16, ld, x16, w16, N, C, V);
    CHECK_MSG(memcmp(gi, gi_w, NC * 4) == 0, "V=%d: dinp from the bf16 gradient differs", V);
    CHECK_MSG(memcmp(gw, gw_w, VC * 4) == 0, "V=%d: dweight from the bf16 gradient differs", V);
    /* either output skipped */
    ct_matmul_backward_bf16_dout16_ref(NULL, NULL, gw, d16, ld, x16, w16, N, C, V);
    ct_matmul_backward_bf16_dout16_ref(NULL, gi, NULL, d16, ld, NULL, w16, N, C, V);
    ct_matmul_backward_bf16_ref(NULL, gi_w, gw_w, NULL, dl, x16, w16, N, C, V);
    CHECK_MSG(memcmp(gi, gi_w, NC * 4) == 0 && memcmp(gw, gw_w, VC * 4) == 0,
              "V=%d: a skipped output changed the other", V);

    free(x); free(w); free(logits); free(dl); free(loss); free(loss16); free(gi); free(gi_w);
    free(gw); free(gw_w); free(x16); free(w16); free(l16); free(d16); free(wide); free(tg);
    free(loss_in); free(keep);
}

/* The profiler's table has the entries exactly where the inner backend does. */
static void test_kprof(ct_backend_kind kind, bool has) {
    ct_ctx_params cp = ct_ctx_params_default();
    cp.backend = kind;
    cp.n_threads = 1;
    ct_ctx *ctx = NULL;
    CHECK(ct_ctx_init(&ctx, &cp) == CT_OK);
    ct_backend *be = ct_ctx_backend(ctx);
    CHECK_MSG((be->i->matmul_forward_bf16_out16 != NULL) == has &&
              (be->i->crossentropy_forward_bf16 != NULL) == has &&
              (be->i->matmul_backward_bf16_dout16 != NULL) == has,
              "backend %s: the bf16 head %s expected", be->i->name, has ? "is" : "is not");
    ct_kprof *kp = NULL;
    CHECK(ct_kprof_init(&kp, be) == CT_OK);
    const ct_backend_i *t = ct_kprof_backend(kp)->i;
    CHECK_MSG((t->matmul_forward_bf16_out16 != NULL) == has &&
              (t->crossentropy_forward_bf16 != NULL) == has &&
              (t->matmul_backward_bf16_dout16 != NULL) == has,
              "the profiler over %s does not mirror its bf16 head", be->i->name);
    ct_kprof_free(kp);
    ct_ctx_free(ctx);
}

/* The cpu's bf16 loss against its fp32 loss over the widened logits: the
 * same losses and the gradient that gradient rounded, bit for bit, out of
 * place, in place and without a gradient; pads untouched. */
static void test_cpu_xent(ct_backend *be, int N, int V, int ld, float spread) {
    size_t NV = (size_t)N * V, NL = (size_t)N * ld;
    uint16_t *x16 = malloc(NL * 2), *d16 = malloc(NL * 2), *in = malloc(NL * 2);
    float *wide = malloc(NV * 4), *dl = malloc(NV * 4), *loss = malloc(N * 4),
          *loss16 = malloc(N * 4), *loss_in = malloc(N * 4);
    int32_t *tg = malloc(N * sizeof *tg);
    CHECK(x16 && d16 && in && wide && dl && loss && loss16 && loss_in && tg);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < ld; i++) {
            size_t j = (size_t)n * ld + i;
            x16[j] = i < V ? ct_f32_to_bf16(urand(spread)) : POISON;
            d16[j] = POISON;
        }
    for (int n = 0; n < N; n++) {
        tg[n] = n % 4 == 1 ? -1 : (int32_t)((n * 7919u + 3) % (unsigned)V);
        for (int i = 0; i < V; i++) wide[(size_t)n * V + i] = ct_bf16_to_f32(x16[(size_t)n * ld + i]);
    }
    memcpy(in, x16, NL * 2);
    float dloss = 1.0f / (float)N;
    be->i->crossentropy_forward(be, loss, dl, wide, tg, N, V, dloss);
    be->i->crossentropy_forward_bf16(be, loss16, d16, x16, ld, tg, N, V, dloss);
    be->i->crossentropy_forward_bf16(be, loss_in, in, in, ld, tg, N, V, dloss);
    bool same = !memcmp(loss, loss16, N * 4) && !memcmp(loss, loss_in, N * 4);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < V; i++)
            same &= d16[(size_t)n * ld + i] == ct_f32_to_bf16(dl[(size_t)n * V + i]);
    CHECK_MSG(same, "cpu N=%d V=%d ld=%d: the bf16 loss is not the fp32 loss over the same "
              "values, or its gradient not that one rounded", N, V, ld);
    CHECK_MSG(!memcmp(in, d16, NL * 2), "cpu V=%d: the loss in place differs", V);
    CHECK_MSG(pads_kept(d16, N, V, ld) && pads_kept(in, N, V, ld), "cpu ld=%d: a pad written",
              ld);
    memcpy(in, x16, NL * 2);
    be->i->crossentropy_forward_bf16(be, loss_in, NULL, in, ld, tg, N, V, dloss);
    CHECK_MSG(!memcmp(loss_in, loss, N * 4) && !memcmp(in, x16, NL * 2),
              "cpu: without a gradient, other losses or the logits written");
    /* a backend without the pool threads' buffers: a block at a time, in place */
    ct_backend bare = {.i = be->i, .host_visible = true, .n_threads = be->n_threads,
                       .gemm = be->gemm};
    be->i->crossentropy_forward_bf16(&bare, loss_in, in, in, ld, tg, N, V, dloss);
    CHECK_MSG(!memcmp(loss_in, loss, N * 4) && !memcmp(in, d16, NL * 2),
              "cpu V=%d: without row buffers, other bits", V);
    free(x16), free(d16), free(in), free(wide), free(dl), free(loss), free(loss16), free(loss_in);
    free(tg);
}

/* Where the cpu runs its bf16 head (ct_backend_head16_ld): dense rows on
 * oneDNN with native bf16, nowhere else; the profiler over it says the same. */
static void test_cpu(void) {
    ct_ctx_params cp = ct_ctx_params_default();
    cp.backend = CT_BACKEND_CPU;
    cp.n_threads = 2;
    ct_ctx *ctx = NULL;
    CHECK(ct_ctx_init(&ctx, &cp) == CT_OK);
    ct_backend *be = ct_ctx_backend(ctx);
    ct_kprof *kp = NULL;
    CHECK(ct_kprof_init(&kp, be) == CT_OK);
    CHECK(ct_backend_set_gemm(be, "openblas") == 0);
    CHECK_MSG(ct_backend_head16_ld(be, 50257) == 0 &&
                  ct_backend_head16_ld(ct_kprof_backend(kp), 50257) == 0,
              "cpu on OpenBLAS: the bf16 head would widen its operands, not to be used");
    if (ct_gemm_have_onednn()) {
        CHECK(ct_backend_set_gemm(be, "onednn") == 0);
        int want = ct_gemm_have_bf16() ? 50257 : 0;
        CHECK_MSG(ct_backend_head16_ld(be, 50257) == want &&
                      ct_backend_head16_ld(ct_kprof_backend(kp), 50257) == want,
                  "cpu on oneDNN: head16_ld %d, want %d", ct_backend_head16_ld(be, 50257), want);
    }
    test_cpu_xent(be, 5, 1, 1, 1.0f);
    test_cpu_xent(be, 7, 37, 40, 3.0f);
    test_cpu_xent(be, 6, 4099, 4099, 8.0f); /* a block of 4096 and a tail */
    test_cpu_xent(be, 4, 9000, 9003, 20.0f);
    ct_kprof_free(kp);
    ct_ctx_free(ctx);
}

int main(void) {
    test_head(1, 3, 1, CT_VOCAB_PAD);
    test_head(7, 16, 97, 128);
    test_head(6, 33, 293, 384);
    test_head(9, 24, 256, 256); /* no pad */
    test_kprof(CT_BACKEND_REF, true);
    test_kprof(CT_BACKEND_SIM, true);
    test_kprof(CT_BACKEND_CPU, true);
    test_cpu();
    return ct_test_result("test_head_bf16");
}
