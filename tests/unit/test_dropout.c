/*
 * models/: dropout as Hugging Face's modules apply it (ct_model_set_dropout,
 * ct_model_set_dropout_key), on "gpt2-tiny" (embedding, residual and
 * attention dropout) and "llama-tiny" (attention only), on the cpu and sim
 * backends (sim runs ref's kernels behind device memory). Checked: p = 0
 * gives the bits of a model that never heard of dropout, whatever the key;
 * the forward (evaluation) and logits never drop; the same key twice gives
 * the same loss and gradients bit for bit, another key others; a batch of
 * 2B rows at row0 = 0 equals two batches of B rows at row0 = 0 and row0 = B
 * with weights 1/2 (the N-ranks-equal-one property), LoRA's adapter dropout
 * included; recompute light and full equal none with dropout on (bit for bit
 * in fp32), LoRA included; the
 * cpu backend draws sim's (ref's) masks; each site drops about p of its
 * elements; without a key each call draws new masks, and
 * ct_model_dropout_mask predicts them; the probabilities' errors; and
 * config.json's dropout keys, written and read back, with HF's defaults when
 * absent (GPT2Config 0.1, LlamaConfig 0.0); and the gradient with dropout on
 * against central differences of the loss under the same masks.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_test.h"
#include "ct_tmpdir.h"
#include "ctrain/core.h"
#include "ctrain/model.h"

enum { B = 2, T = 16 };

/* A batch of rows tokens (B rows at most twice over): random ids and targets. */
static void batch(int32_t *in, int32_t *tg, int rows, int V, uint64_t seed) {
    ct_rng r;
    ct_rng_init(&r, seed);
    for (int i = 0; i < rows * T; i++) {
        in[i] = (int32_t)(ct_rng_u32(&r) % (uint32_t)V);
        tg[i] = (int32_t)(ct_rng_u32(&r) % (uint32_t)V);
    }
}

/* A model of preset `name`, weights seeded and perturbed so every parameter
 * matters, reserved for training at (Bres, T) under rc; LoRA adapters on
 * every kind (B non-zero) with adapter dropout lora when lora >= 0. */
static ct_model *make_model(ct_ctx *ctx, const char *name, int Bres, ct_recompute rc,
                            float lora) {
    ct_model_config c;
    CHECK(ct_model_config_preset(&c, name) == CT_OK);
    ct_model *m = NULL;
    CHECK(ct_model_init(&m, ctx, &c) == CT_OK);
    if (!m) return NULL;
    CHECK(ct_model_init_weights(m, 7) == CT_OK);
    ct_rng r;
    ct_rng_init(&r, 99);
    size_t n = ct_model_numel(m);
    float *p = malloc(n * sizeof *p);
    ct_model_download(m, p, ct_model_params(m), n * sizeof *p);
    for (size_t j = 0; j < n; j++) p[j] += 0.3f * (ct_rng_float(&r) - 0.5f);
    ct_model_upload(m, ct_model_params(m), p, n * sizeof *p);
    free(p);
    if (lora >= 0) {
        ct_lora_opts lo = {.r = 3, .alpha = 6.0f, .dropout = lora,
                           .targets = (1u << ct_lora_num_kinds(&c)) - 1, .seed = 5};
        CHECK(ct_model_lora_attach(m, &lo) == CT_OK);
        CHECK(ct_model_lora_init_weights(m, 11) == CT_OK);
        size_t na = ct_model_trainable_numel(m);
        float *a = malloc(na * sizeof *a);
        ct_model_download(m, a, ct_model_trainable_params(m), na * sizeof *a);
        for (size_t j = 0; j < na; j++) a[j] += 0.2f * (ct_rng_float(&r) - 0.5f);
        ct_model_upload(m, ct_model_trainable_params(m), a, na * sizeof *a);
        free(a);
    }
    ct_model_opts o = ct_model_opts_default();
    o.recompute = rc;
    CHECK(ct_model_set_opts(m, &o) == CT_OK);
    CHECK(ct_model_reserve(m, Bres, T, true) == CT_OK);
    return m;
}

/* Every dropout the arch has set to p. */
static void set_p(ct_model *m, float p) {
    bool llama = ct_model_get_config(m)->arch == CT_ARCH_LLAMA;
    CHECK(ct_model_set_dropout(m, llama ? 0.0f : p, llama ? 0.0f : p, p) == CT_OK);
}

typedef struct {
    float loss;
    float *g; /* trainable gradients, owned */
    size_t n;
} step_out;

/* One forward_backward of rows rows at the given weight, gradients zeroed first. */
static step_out step(ct_model *m, const int32_t *in, const int32_t *tg, int rows, float w) {
    step_out o = {0, NULL, ct_model_trainable_numel(m)};
    ct_model_zero_grads(m);
    CHECK(ct_model_forward_backward(m, in, tg, rows, T, w, &o.loss) == CT_OK);
    o.g = malloc(o.n * sizeof *o.g);
    ct_model_download(m, o.g, ct_model_trainable_grads(m), o.n * sizeof *o.g);
    return o;
}

static bool same_step(const step_out *a, const step_out *b) {
    return a->n == b->n && memcmp(&a->loss, &b->loss, sizeof a->loss) == 0 &&
           memcmp(a->g, b->g, a->n * sizeof *a->g) == 0;
}

/* max |a - b| / max |b| over n. */
static double rel_diff(const float *a, const float *b, size_t n) {
    double d = 0.0, w = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= d)) d = e; /* NaN sticks */
        if (fabs(b[i]) > w) w = fabs(b[i]);
    }
    return d / (w > 0.0 ? w : 1.0);
}

/* p = 0 is the model without dropout, bit for bit, keyed or not; forward and
 * logits ignore dropout; the same key repeats, another differs. */
static void test_keys(ct_ctx *ctx, const char *name) {
    ct_model *m = make_model(ctx, name, B, CT_RECOMPUTE_NONE, -1.0f);
    if (!m) return;
    int V = ct_model_get_config(m)->vocab_size;
    int32_t in[B * T], tg[B * T];
    batch(in, tg, B, V, 3);
    step_out plain = step(m, in, tg, B, 1.0f); /* never keyed, p = 0 */
    float fwd0;
    CHECK(ct_model_forward(m, in, tg, B, T, &fwd0) == CT_OK);
    float *logits0 = malloc((size_t)B * T * V * sizeof *logits0);
    float *logits1 = malloc((size_t)B * T * V * sizeof *logits1);
    CHECK(ct_model_logits(m, in, B, T, logits0) == CT_OK);
    ct_model_set_dropout_key(m, 0x1234, 5);
    set_p(m, 0.0f);
    step_out zero = step(m, in, tg, B, 1.0f);
    CHECK_MSG(same_step(&plain, &zero), "%s: dropout p = 0 differs from no dropout", name);

    set_p(m, 0.3f);
    float fwd1;
    CHECK(ct_model_forward(m, in, tg, B, T, &fwd1) == CT_OK);
    CHECK(ct_model_logits(m, in, B, T, logits1) == CT_OK);
    CHECK_MSG(memcmp(&fwd0, &fwd1, sizeof fwd0) == 0 &&
                  memcmp(logits0, logits1, (size_t)B * T * V * sizeof *logits0) == 0,
              "%s: ct_model_forward / logits changed with dropout on", name);
    step_out a = step(m, in, tg, B, 1.0f), b = step(m, in, tg, B, 1.0f);
    CHECK_MSG(same_step(&a, &b), "%s: the same dropout key twice differs", name);
    CHECK_MSG(fabsf(a.loss - plain.loss) > 1e-4f, "%s: dropout 0.3 left the loss %g (%g)", name,
              (double)a.loss, (double)plain.loss);
    /* the forward after a training pass still does not drop */
    CHECK(ct_model_forward(m, in, tg, B, T, &fwd1) == CT_OK);
    CHECK_MSG(memcmp(&fwd0, &fwd1, sizeof fwd0) == 0, "%s: forward dropped after training", name);
    ct_model_set_dropout_key(m, 0x1235, 5);
    step_out c = step(m, in, tg, B, 1.0f);
    CHECK_MSG(c.loss != a.loss && rel_diff(c.g, a.g, a.n) > 1e-3,
              "%s: another key gives the same loss %g", name, (double)c.loss);
    ct_model_set_dropout_key(m, 0x1234, 6);
    step_out d = step(m, in, tg, B, 1.0f);
    CHECK_MSG(d.loss != a.loss, "%s: another row0 gives the same loss", name);
    free(plain.g), free(zero.g), free(a.g), free(b.g), free(c.g), free(d.g);
    free(logits0), free(logits1);
    ct_model_free(m);
}

/* 2B rows at row0 r equal B rows at r and B rows at r + B, weights 1/2:
 * the masks follow the global row (LoRA's adapter dropout too when lora >= 0). */
static void test_split_rows(ct_ctx *ctx, const char *name, float lora) {
    ct_model *m = make_model(ctx, name, 2 * B, CT_RECOMPUTE_NONE, lora);
    if (!m) return;
    int V = ct_model_get_config(m)->vocab_size;
    set_p(m, 0.25f);
    int32_t in[2 * B * T], tg[2 * B * T];
    batch(in, tg, 2 * B, V, 4);
    ct_model_set_dropout_key(m, 777, 4);
    step_out whole = step(m, in, tg, 2 * B, 1.0f);
    size_t n = whole.n;
    float *sum = calloc(n, sizeof *sum);
    float loss = 0;
    for (int half = 0; half < 2; half++) {
        ct_model_set_dropout_key(m, 777, 4 + half * B);
        step_out h = step(m, in + half * B * T, tg + half * B * T, B, 0.5f);
        for (size_t i = 0; i < n; i++) sum[i] += h.g[i];
        loss += 0.5f * h.loss;
        free(h.g);
    }
    double dg = rel_diff(sum, whole.g, n), dl = fabs((double)loss - whole.loss) / whole.loss;
    CHECK_MSG(dg < 2e-5 && dl < 1e-5, "%s: 2B rows vs two halves: loss %g vs %g (%.2g), "
              "gradients %.2g", name, (double)whole.loss, (double)loss, dl, dg);
    /* and the halves at the wrong rows do differ (the check can fail) */
    ct_model_set_dropout_key(m, 777, 4);
    step_out wrong = step(m, in + B * T, tg + B * T, B, 0.5f);
    ct_model_set_dropout_key(m, 777, 4 + B);
    step_out right = step(m, in + B * T, tg + B * T, B, 0.5f);
    CHECK_MSG(wrong.loss != right.loss, "%s: row0 does not change the masks", name);
    free(wrong.g), free(right.g), free(whole.g), free(sum);
    ct_model_free(m);
}

/* Recompute light and full equal none with dropout on (fp32: bit for bit);
 * lora >= 0: with adapters and that adapter dropout. */
static void test_recompute(ct_ctx *ctx, const char *name, float lora) {
    const ct_recompute rcs[] = {CT_RECOMPUTE_NONE, CT_RECOMPUTE_LIGHT, CT_RECOMPUTE_FULL};
    step_out out[3];
    for (int r = 0; r < 3; r++) {
        ct_model *m = make_model(ctx, name, B, rcs[r], lora);
        if (!m) return;
        int V = ct_model_get_config(m)->vocab_size;
        set_p(m, 0.2f);
        int32_t in[B * T], tg[B * T];
        batch(in, tg, B, V, 5);
        ct_model_set_dropout_key(m, 99, 0);
        out[r] = step(m, in, tg, B, 1.0f);
        ct_model_free(m);
    }
    for (int r = 1; r < 3; r++)
        CHECK_MSG(same_step(&out[0], &out[r]), "%s%s: recompute %s with dropout differs from none "
                  "(loss %g vs %g)", name, lora >= 0 ? " lora" : "",
                  ct_model_recompute_name(rcs[r]),
                  (double)out[r].loss, (double)out[0].loss);
    for (int r = 0; r < 3; r++) free(out[r].g);
}

/* The gradient with dropout on is the derivative of the loss under the same
 * masks: along a random direction d, (L(w + e d) - L(w - e d)) / 2e = g . d
 * (central differences of the fp32 training loss; a mask missing from a
 * backward is an error of order 1). */
static void test_fd(ct_ctx *ctx, const char *name) {
    ct_model *m = make_model(ctx, name, B, CT_RECOMPUTE_NONE, -1.0f);
    if (!m) return;
    set_p(m, 0.3f);
    int32_t in[B * T], tg[B * T];
    batch(in, tg, B, ct_model_get_config(m)->vocab_size, 9);
    ct_model_set_dropout_key(m, 31337, 1);
    step_out g = step(m, in, tg, B, 1.0f);
    size_t n = g.n;
    float *w = malloc(n * sizeof *w), *wd = malloc(n * sizeof *wd);
    double *d = malloc(n * sizeof *d);
    ct_model_download(m, w, ct_model_params(m), n * sizeof *w);
    ct_rng r;
    ct_rng_init(&r, 17);
    double gd = 0.0;
    for (size_t i = 0; i < n; i++) {
        d[i] = ct_rng_float(&r) - 0.5;
        gd += d[i] * g.g[i];
    }
    const double e = 2e-3;
    float loss[2];
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < n; i++) wd[i] = (float)(w[i] + (k ? -e : e) * d[i]);
        ct_model_upload(m, ct_model_params(m), wd, n * sizeof *wd);
        step_out s = step(m, in, tg, B, 1.0f);
        loss[k] = s.loss;
        free(s.g);
    }
    double fd = ((double)loss[0] - loss[1]) / (2 * e);
    if (getenv("CT_TEST_VERBOSE"))
        printf("  %s: g . d %.6g, central difference %.6g\n", name, gd, fd);
    CHECK_MSG(fabs(fd - gd) <= 1e-2 * fabs(gd) + 1e-4, "%s: dropout gradient along d %.6g, "
              "central difference %.6g", name, gd, fd);
    free(w), free(wd), free(d), free(g.g);
    ct_model_free(m);
}

/* Each site's mask drops about p of its elements, scales the rest by 1/(1-p);
 * without a key each pass draws new masks, which ct_model_dropout_mask
 * predicts (the pass run twice under the predicted key gives its bits). */
static void test_masks(ct_ctx *ctx, const char *name) {
    ct_model *m = make_model(ctx, name, B, CT_RECOMPUTE_NONE, -1.0f);
    if (!m) return;
    const ct_model_config *c = ct_model_get_config(m);
    bool llama = c->arch == CT_ARCH_LLAMA;
    const float p = 0.3f;
    set_p(m, p);
    size_t nprob = (size_t)B * c->n_head * T * T, nrow = (size_t)B * T * c->n_embd;
    float *mask = malloc((nprob > nrow ? nprob : nrow) * sizeof *mask);
    for (int s = 0; s < CT_DROPOUT_SITE_COUNT; s++) {
        size_t n = s == CT_DROPOUT_ATTN_PROBS ? nprob : nrow, dropped = 0, bad = 0;
        CHECK(ct_model_dropout_mask(m, (ct_dropout_site)s, 1, B, T, mask) == CT_OK);
        float want = ct_model_dropout_p(m, (ct_dropout_site)s) > 0 ? 1.0f / (1.0f - p) : 1.0f;
        for (size_t i = 0; i < n; i++) {
            dropped += mask[i] == 0.0f;
            bad += mask[i] != 0.0f && mask[i] != want;
        }
        double frac = (double)dropped / n;
        bool on = !llama || s == CT_DROPOUT_ATTN_PROBS;
        CHECK_MSG(bad == 0 && (on ? fabs(frac - p) < 0.03 : dropped == 0),
                  "%s %s: %zu of %zu dropped (p %g), %zu bad values", name,
                  ct_model_dropout_site_name((ct_dropout_site)s), dropped, n,
                  on ? (double)p : 0.0, bad);
    }
    CHECK(ct_model_dropout_mask(m, CT_DROPOUT_SITE_COUNT, 0, B, T, mask) == CT_ERR_ARG);
    CHECK(ct_model_dropout_mask(m, CT_DROPOUT_EMBD, c->n_layer, B, T, mask) == CT_ERR_ARG);
    CHECK(strcmp(ct_model_dropout_site_name(CT_DROPOUT_MLP_RESID), "mlp_resid") == 0);
    free(mask);
    ct_model_free(m);

    /* unkeyed passes: each one new masks */
    m = make_model(ctx, name, B, CT_RECOMPUTE_NONE, -1.0f);
    if (!m) return;
    set_p(m, p);
    int32_t in[B * T], tg[B * T];
    batch(in, tg, B, ct_model_get_config(m)->vocab_size, 6);
    step_out a = step(m, in, tg, B, 1.0f), b = step(m, in, tg, B, 1.0f);
    CHECK_MSG(a.loss != b.loss, "%s: two unkeyed passes drew the same masks", name);
    free(a.g), free(b.g);
    ct_model_free(m);
}

/* Probabilities outside [0, 1), and a LLaMA's embedding or residual dropout,
 * are refused and change nothing. */
static void test_errors(ct_ctx *ctx) {
    ct_model_config c;
    CHECK(ct_model_config_preset(&c, "llama-tiny") == CT_OK);
    ct_model *m = NULL;
    CHECK(ct_model_init(&m, ctx, &c) == CT_OK);
    if (!m) return;
    CHECK(ct_model_set_dropout(m, 0.0f, 0.1f, 0.1f) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "attention") != NULL);
    CHECK(ct_model_set_dropout(m, 0.0f, 0.0f, 1.0f) == CT_ERR_ARG);
    CHECK(ct_model_set_dropout(m, 0.0f, 0.0f, -0.1f) == CT_ERR_ARG);
    CHECK(ct_model_set_dropout(m, 0.0f, 0.0f, NAN) == CT_ERR_ARG);
    CHECK(ct_model_get_config(m)->attn_pdrop == 0.0f);
    CHECK(ct_model_set_dropout(m, 0.0f, 0.0f, 0.5f) == CT_OK);
    CHECK(ct_model_get_config(m)->attn_pdrop == 0.5f);
    ct_model_free(m);
    c.resid_pdrop = 0.1f;
    CHECK(ct_model_config_validate(&c) == CT_ERR_ARG);
    CHECK(ct_model_config_preset(&c, "gpt2-tiny") == CT_OK);
    CHECK(c.embd_pdrop == 0.0f && c.resid_pdrop == 0.0f && c.attn_pdrop == 0.0f);
    c.attn_pdrop = 1.0f;
    CHECK(ct_model_config_validate(&c) == CT_ERR_ARG);
}

/* The cpu backend draws ref's masks: its loss and gradients with dropout on
 * match the sim backend's (ref's kernels) to float rounding. */
static void test_backends(ct_ctx *cpu, ct_ctx *sim, const char *name) {
    step_out out[2];
    ct_ctx *ctxs[2] = {cpu, sim};
    for (int k = 0; k < 2; k++) {
        ct_model *m = make_model(ctxs[k], name, B, CT_RECOMPUTE_NONE, -1.0f);
        if (!m) return;
        set_p(m, 0.3f);
        int32_t in[B * T], tg[B * T];
        batch(in, tg, B, ct_model_get_config(m)->vocab_size, 8);
        ct_model_set_dropout_key(m, 4242, 2);
        out[k] = step(m, in, tg, B, 1.0f);
        ct_model_free(m);
    }
    double dl = fabs((double)out[0].loss - out[1].loss) / out[1].loss;
    double dg = rel_diff(out[0].g, out[1].g, out[0].n);
    CHECK_MSG(dl < 1e-5 && dg < 1e-4, "%s: cpu vs sim with dropout: loss %.2g, gradients %.2g",
              name, dl, dg);
    free(out[0].g), free(out[1].g);
}

/* config.json: written as the model has it, read back; HF's defaults when
 * absent. */
static void test_hf_config(ct_ctx *ctx) {
    char dir[64], path[128];
    if (!ct_tmpdir_make(dir, sizeof dir, "dropout")) {
        CHECK(0);
        return;
    }
    ct_tmpdir_join(path, sizeof path, dir, "config.json");
    const char *presets[] = {"gpt2-tiny", "llama-tiny"};
    for (int k = 0; k < 2; k++) {
        ct_model_config c, back;
        CHECK(ct_model_config_preset(&c, presets[k]) == CT_OK);
        ct_model *m = NULL;
        CHECK(ct_model_init(&m, ctx, &c) == CT_OK);
        if (!m) continue;
        if (k == 0)
            CHECK(ct_model_set_dropout(m, 0.05f, 0.1f, 0.2f) == CT_OK);
        else
            CHECK(ct_model_set_dropout(m, 0.0f, 0.0f, 0.125f) == CT_OK);
        CHECK(ct_model_save_hf(m, dir, "model.safetensors", false, true) == CT_OK);
        CHECK(ct_model_config_load_hf(&back, dir) == CT_OK);
        CHECK_MSG(back.embd_pdrop == ct_model_get_config(m)->embd_pdrop &&
                      back.resid_pdrop == ct_model_get_config(m)->resid_pdrop &&
                      back.attn_pdrop == ct_model_get_config(m)->attn_pdrop,
                  "%s: config.json dropout %g %g %g read back as %g %g %g", presets[k],
                  (double)ct_model_get_config(m)->embd_pdrop,
                  (double)ct_model_get_config(m)->resid_pdrop,
                  (double)ct_model_get_config(m)->attn_pdrop, (double)back.embd_pdrop,
                  (double)back.resid_pdrop, (double)back.attn_pdrop);
        ct_model *l = NULL;
        CHECK(ct_model_load_hf(&l, ctx, dir) == CT_OK);
        if (l) CHECK(ct_model_get_config(l)->attn_pdrop == ct_model_get_config(m)->attn_pdrop);
        ct_model_free(l);
        ct_model_free(m);
    }
    /* absent keys: GPT2Config's 0.1, LlamaConfig's 0 */
    const char *gpt2 = "{\"model_type\": \"gpt2\", \"n_layer\": 1, \"n_head\": 2, \"n_embd\": 8, "
                       "\"vocab_size\": 16, \"n_positions\": 8}";
    ct_model_config c;
    CHECK(ct_tmpdir_write(path, gpt2, strlen(gpt2)) == 0);
    CHECK(ct_model_config_load_hf(&c, dir) == CT_OK);
    CHECK_MSG(c.embd_pdrop == 0.1f && c.resid_pdrop == 0.1f && c.attn_pdrop == 0.1f,
              "GPT-2 without dropout keys: %g %g %g, expected GPT2Config's 0.1",
              (double)c.embd_pdrop, (double)c.resid_pdrop, (double)c.attn_pdrop);
    const char *llama = "{\"model_type\": \"llama\", \"num_hidden_layers\": 1, \"hidden_size\": 8, "
                        "\"intermediate_size\": 16, \"num_attention_heads\": 2, "
                        "\"vocab_size\": 16}";
    CHECK(ct_tmpdir_write(path, llama, strlen(llama)) == 0);
    CHECK(ct_model_config_load_hf(&c, dir) == CT_OK);
    CHECK(c.attn_pdrop == 0.0f && c.embd_pdrop == 0.0f && c.resid_pdrop == 0.0f);
    const char *bad = "{\"model_type\": \"gpt2\", \"n_layer\": 1, \"n_head\": 2, \"n_embd\": 8, "
                      "\"vocab_size\": 16, \"n_positions\": 8, \"attn_pdrop\": 1.5}";
    CHECK(ct_tmpdir_write(path, bad, strlen(bad)) == 0);
    CHECK(ct_model_config_load_hf(&c, dir) == CT_ERR_FORMAT);
    CHECK(strstr(ct_last_error(), "attn_pdrop") != NULL);
    ct_tmpdir_remove(dir);
}

int main(void) {
    const ct_backend_kind kinds[] = {CT_BACKEND_CPU, CT_BACKEND_SIM};
    const char *presets[] = {"gpt2-tiny", "llama-tiny"};
    ct_ctx *ctxs[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        ct_ctx_params cp = ct_ctx_params_default();
        cp.backend = kinds[k];
        cp.n_threads = 2;
        cp.pin_threads = false;
        CHECK(ct_ctx_init(&ctxs[k], &cp) == CT_OK);
        if (!ctxs[k]) return ct_test_result("test_dropout");
    }
    for (int k = 0; k < 2; k++) {
        for (int p = 0; p < 2; p++) {
            test_keys(ctxs[k], presets[p]);
            test_split_rows(ctxs[k], presets[p], -1.0f);
            test_split_rows(ctxs[k], presets[p], 0.2f); // LoRA's adapter dropout as well
            test_recompute(ctxs[k], presets[p], -1.0f);
            test_recompute(ctxs[k], presets[p], 0.2f);
            test_masks(ctxs[k], presets[p]);
            test_fd(ctxs[k], presets[p]);
        }
    }
    for (int p = 0; p < 2; p++) test_backends(ctxs[0], ctxs[1], presets[p]);
    test_errors(ctxs[0]);
    test_hf_config(ctxs[0]);
    for (int k = 0; k < 2; k++) {
        ct_memstats ms;
        ct_ctx_memstats(ctxs[k], &ms);
        CHECK_MSG(ms.total_current == 0, "%lld bytes still allocated",
                  (long long)ms.total_current);
        ct_ctx_free(ctxs[k]);
    }
    return ct_test_result("test_dropout");
}
