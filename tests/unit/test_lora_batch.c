/*
 * models/lora.c's batched adapters: on LLaMA, q, k, v (one fused GEMM) and
 * gate, up (another) read the same input, and with no adapter dropout their
 * A side runs as one GEMM per group, forward and backward.
 * - Parity: the loss, the logits and every adapter gradient of one step on
 *   the batched path equal the per-module path's (model_lora_set_batch off)
 *   within float rounding, on ref, cpu and sim, for LLaMA with GQA (all seven
 *   kinds, and q,v alone) and GPT-2 (no group: the same bits).
 * - Calls: a counting backend table sees one A-side GEMM per group and layer
 *   (forward and backward) on the batched path, one per adapter on the
 *   per-module path, and the B sides one per adapter on both.
 * - Dropout: a training step with lora.dropout > 0 takes the per-module path
 *   (bits equal with batching on and off, per-adapter A-side calls), while a
 *   forward without dropout (evaluation) on the same model is batched.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ct_test.h"
#include "ctrain/model.h"
#include "models/model_impl.h"

enum { B = 2, T = 7, V = 37, R = 5 }; /* R: no model width is a multiple of it */

/* Adapter GEMMs seen by the counting table: the A side has OC = k R (its
 * output is h or h_all), the B side C = R (its input is h). */
typedef struct counts {
    int fwd_a, fwd_b, bwd_a, bwd_b;
    int fwd_a_rows; /* sum of the A side's OC: every adapter covered once */
} counts;

static counts cnt;
static const ct_backend_i *inner;

static void count_fwd(ct_backend *be, float *out, const float *inp, const float *weight,
                      const float *bias, int N, int C, int OC) {
    if (OC % R == 0) {
        cnt.fwd_a++;
        cnt.fwd_a_rows += OC;
    } else if (C == R) {
        cnt.fwd_b++;
    }
    inner->matmul_forward(be, out, inp, weight, bias, N, C, OC);
}

static void count_bwd(ct_backend *be, float *dinp, float *dweight, float *dbias,
                      const float *dout, const float *inp, const float *weight, int N, int C,
                      int OC) {
    if (OC % R == 0) cnt.bwd_a++;
    else if (C == R) cnt.bwd_b++;
    inner->matmul_backward(be, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}

typedef struct step_out {
    float loss;    /* the two micro-batches' sum */
    float *logits; /* (B, T, V) */
    float *grads;  /* trainable */
    size_t n;
    int ntab;
    size_t off[32], numel[32]; /* the trainable table's entries */
    counts c;      /* of the first micro-batch's forward_backward */
    counts c_eval; /* of ct_model_logits */
} step_out;

/* One training step (two micro-batches accumulated) of a model with
 * perturbed base weights and rank-R adapters on targets (B drawn non-zero),
 * batched or per module; then the logits of the first batch. */
static void step(ct_backend_kind kind, bool llama, uint32_t targets, float dropout, bool batch,
                 step_out *out) {
    memset(out, 0, sizeof *out);
    ct_ctx_params cp = ct_ctx_params_default();
    cp.backend = kind;
    cp.n_threads = 1;
    ct_ctx *ctx = NULL;
    CHECK(ct_ctx_init(&ctx, &cp) == CT_OK);
    if (!ctx) return;
    ct_backend *be = ct_ctx_backend(ctx);
    ct_backend_i table = *be->i; /* lives until the context is freed, below */
    inner = be->i;
    table.matmul_forward = count_fwd;
    table.matmul_backward = count_bwd;
    be->i = &table;

    ct_model_config c;
    if (llama) {
        ct_model_config_llama(&c, 2, 4, 2, 16, 24, V, 12);
        c.rope_theta = 100.0f;
    } else {
        ct_model_config_gpt2(&c, 2, 2, 16, V, 12);
    }
    ct_model *m = NULL;
    CHECK(ct_model_init(&m, ctx, &c) == CT_OK);
    CHECK(ct_model_init_weights(m, 7) == CT_OK);
    ct_rng r;
    ct_rng_init(&r, 99);
    size_t nb = ct_model_numel(m);
    float *h = malloc(nb * sizeof *h);
    ct_model_download(m, h, ct_model_params(m), nb * sizeof *h);
    for (size_t j = 0; j < nb; j++) h[j] += 0.3f * (ct_rng_float(&r) - 0.5f);
    ct_model_upload(m, ct_model_params(m), h, nb * sizeof *h);
    free(h);
    ct_lora_opts lo = {.r = R, .alpha = 10.0f, .dropout = dropout, .targets = targets,
                       .seed = 5};
    CHECK(ct_model_lora_attach(m, &lo) == CT_OK);
    CHECK(ct_model_lora_init_weights(m, 11) == CT_OK);
    size_t n = ct_model_trainable_numel(m);
    float *w = malloc(n * sizeof *w);
    ct_model_download(m, w, ct_model_trainable_params(m), n * sizeof *w);
    for (int i = 1; i < ct_model_num_trainable(m); i += 2) { /* B: non-zero */
        const ct_param *q = ct_model_trainable_param(m, i);
        for (size_t j = 0; j < q->numel; j++) w[q->offset + j] = ct_rng_float(&r) - 0.5f;
    }
    ct_model_upload(m, ct_model_trainable_params(m), w, n * sizeof *w);
    free(w);
    model_lora_set_batch(m, batch);
    CHECK(ct_model_reserve(m, B, T, true) == CT_OK);

    int32_t in[B * T], tg[B * T];
    for (int i = 0; i < B * T; i++) {
        in[i] = (int32_t)(ct_rng_u32(&r) % V);
        tg[i] = (int32_t)(ct_rng_u32(&r) % V);
    }
    ct_model_zero_grads(m);
    memset(&cnt, 0, sizeof cnt);
    CHECK(ct_model_forward_backward(m, in, tg, B, T, 0.5f, &out->loss) == CT_OK);
    out->c = cnt;
    /* a second micro-batch adds into the gradients (accumulation) */
    int32_t in2[B * T];
    for (int i = 0; i < B * T; i++) in2[i] = (in[i] + 3 + i) % V;
    float loss2;
    CHECK(ct_model_forward_backward(m, in2, tg, B, T, 0.5f, &loss2) == CT_OK);
    out->loss += loss2;
    out->n = n;
    out->grads = malloc(n * sizeof(float));
    ct_model_download(m, out->grads, ct_model_trainable_grads(m), n * sizeof(float));
    out->ntab = ct_model_num_trainable(m);
    CHECK(out->ntab <= 32);
    for (int i = 0; i < out->ntab && i < 32; i++) {
        out->off[i] = ct_model_trainable_param(m, i)->offset;
        out->numel[i] = ct_model_trainable_param(m, i)->numel;
    }
    out->logits = malloc((size_t)B * T * V * sizeof(float));
    memset(&cnt, 0, sizeof cnt);
    CHECK(ct_model_logits(m, in, B, T, out->logits) == CT_OK);
    out->c_eval = cnt;
    ct_model_free(m);
    be->i = inner; /* the backend's own table again: its clean-up knows it */
    ct_ctx_free(ctx);
}

static void step_out_free(step_out *o) {
    free(o->logits);
    free(o->grads);
}

/* |a - b| within float rounding of sums of a few dozen terms, relative to
 * the array's largest magnitude. */
static bool close_all(const float *a, const float *b, size_t n, double tol, const char *what,
                      const char *label) {
    double big = 0, worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabs(a[i]) > big) big = fabs(a[i]);
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= worst)) {
            worst = d;
            at = i;
        }
    }
    bool ok = worst <= tol * big;
    CHECK_MSG(ok, "%s %s: [%zu] batched %.9g, per module %.9g (largest %.3g)", label, what, at,
              (double)a[at], (double)b[at], big);
    return ok;
}

static void test_parity(ct_backend_kind kind, bool llama, uint32_t targets) {
    char label[64];
    snprintf(label, sizeof label, "%s %s targets 0x%x", ct_backend_kind_name(kind),
             llama ? "llama" : "gpt2", (unsigned)targets);
    step_out bat, mod;
    step(kind, llama, targets, 0.0f, true, &bat);
    step(kind, llama, targets, 0.0f, false, &mod);
    CHECK(bat.n == mod.n && bat.n > 0);
    CHECK_MSG(fabsf(bat.loss - mod.loss) <= 1e-6f * fabsf(mod.loss), "%s: loss %.9g vs %.9g",
              label, (double)bat.loss, (double)mod.loss);
    close_all(bat.logits, mod.logits, (size_t)B * T * V, 1e-6, "logits", label);
    /* each adapter's gradient against its own scale */
    ct_model_config c;
    if (llama) ct_model_config_llama(&c, 2, 4, 2, 16, 24, V, 12);
    else ct_model_config_gpt2(&c, 2, 2, 16, V, 12);
    int per_layer = 0, groups = 0, seen[LIN_FCPROJ + 1] = {0};
    for (int k = 0; k < ct_lora_num_kinds(&c); k++) {
        lora_mod md;
        if (!(targets & (1u << k)) || !lora_mod_of(&c, k, &md)) continue;
        per_layer++;
        if (!seen[md.gemm]++) groups++;
    }
    CHECK(bat.ntab == 2 * c.n_layer * per_layer && bat.ntab == mod.ntab);
    for (int i = 0; i < bat.ntab && i < 32; i++) {
        char what[48];
        snprintf(what, sizeof what, "gradient of table entry %d", i);
        close_all(bat.grads + bat.off[i], mod.grads + mod.off[i], bat.numel[i], 1e-5, what,
                  label);
    }
    if (groups == per_layer) /* no GEMM carries two adapters: the same path */
        CHECK_MSG(!memcmp(bat.grads, mod.grads, bat.n * sizeof(float)) && bat.loss == mod.loss,
                  "%s: no group, yet the bits differ", label);
    /* the A side: one GEMM per group batched, one per adapter per module */
    int L = c.n_layer;
    CHECK_MSG(bat.c.fwd_a == L * groups && bat.c.bwd_a == L * groups,
              "%s: batched A-side GEMMs forward %d, backward %d; expected %d each", label,
              bat.c.fwd_a, bat.c.bwd_a, L * groups);
    CHECK_MSG(mod.c.fwd_a == L * per_layer && mod.c.bwd_a == L * per_layer,
              "%s: per-module A-side GEMMs forward %d, backward %d; expected %d each", label,
              mod.c.fwd_a, mod.c.bwd_a, L * per_layer);
    CHECK(bat.c.fwd_a_rows == L * per_layer * R && mod.c.fwd_a_rows == L * per_layer * R);
    CHECK(bat.c_eval.fwd_a == L * groups && mod.c_eval.fwd_a == L * per_layer);
    CHECK(bat.c.fwd_b == L * per_layer && bat.c.bwd_b == L * per_layer);
    CHECK(mod.c.fwd_b == L * per_layer && mod.c.bwd_b == L * per_layer);
    printf("  %-28s loss %.6f, A-side GEMMs per step %d batched, %d per module\n", label,
           (double)bat.loss, bat.c.fwd_a + bat.c.bwd_a, mod.c.fwd_a + mod.c.bwd_a);
    step_out_free(&bat);
    step_out_free(&mod);
}

/* Dropout: the training step takes the per-module path (each adapter its own
 * mask): the same bits with batching on and off and one A-side GEMM per
 * adapter (two in the backward: dA, then dxin for the mask); the logits
 * (no dropout) are batched, so they agree within rounding only. */
static void test_dropout_keeps_per_module(ct_backend_kind kind) {
    step_out bat, mod;
    step(kind, true, 0x7F, 0.3f, true, &bat);
    step(kind, true, 0x7F, 0.3f, false, &mod);
    CHECK(bat.n == mod.n);
    CHECK_MSG(bat.loss == mod.loss && !memcmp(bat.grads, mod.grads, bat.n * sizeof(float)),
              "%s dropout 0.3: the training step's bits depend on batching",
              ct_backend_kind_name(kind));
    CHECK_MSG(bat.c.fwd_a == 2 * 7 && bat.c.bwd_a == 2 * 2 * 7,
              "%s dropout 0.3: A-side GEMMs forward %d, backward %d; expected 14, 28",
              ct_backend_kind_name(kind), bat.c.fwd_a, bat.c.bwd_a);
    CHECK_MSG(bat.c_eval.fwd_a == 2 * 4, "%s dropout 0.3: the forward without dropout ran "
              "%d A-side GEMMs, expected one per group and layer (8)", ct_backend_kind_name(kind),
              bat.c_eval.fwd_a);
    close_all(bat.logits, mod.logits, (size_t)B * T * V, 1e-6, "logits", "dropout 0.3");
    step_out_free(&bat);
    step_out_free(&mod);
}

int main(void) {
    const ct_backend_kind kinds[] = {CT_BACKEND_REF, CT_BACKEND_CPU, CT_BACKEND_SIM};
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        test_parity(kinds[i], true, 0x7F); /* q,k,v,o,gate,up,down */
        test_parity(kinds[i], true, 0x05); /* q,v */
        test_parity(kinds[i], false, 0x0F);
        test_dropout_keeps_per_module(kinds[i]);
    }
    return ct_test_result("test_lora_batch");
}
