/*
 * models/: the LLaMA member of the family (RMSNorm, RoPE, SwiGLU, grouped KV
 * heads, untied head) on tiny configs. Checks the backward against central
 * finite differences of the loss (untied and tied head), the KV-cache decode
 * (keys cached after RoPE) against a full forward, cpu vs ref kernel tables,
 * recompute light/full equal to none and bf16 storage leaving the loss as
 * fp32's, the memory plan equal to what reserve allocates under every option,
 * the parameter table (HF names, q/k/v and gate/up back to back), the
 * initialisation, the presets (TinyLlama's parameter count) and validation.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "ct_test.h"
#include "ct_tmpdir.h"
#include "ctrain/model.h"
#include "ctrain/train.h"
#include "perf/memplan.h"

enum { B = 2, T = 7, V = 37 };

static void tiny_config(ct_model_config *c, bool tied) {
    ct_model_config_llama(c, 2, 4, 2, 16, 24, V, 12);
    c->tied_head = tied;
    c->rope_theta = 100.0f; /* large angles at these short positions */
    c->norm_eps = 1e-5f;
}

static ct_model *make_model(ct_ctx *ctx, bool tied, const ct_model_opts *o, int Bres) {
    ct_model_config c;
    tiny_config(&c, tied);
    ct_model *m = NULL;
    CHECK(ct_model_init(&m, ctx, &c) == CT_OK);
    if (!m) return NULL;
    ct_model_init_weights(m, 7);
    /* make every parameter matter: random norm weights, larger matrices */
    ct_rng r;
    ct_rng_init(&r, 99);
    float *p = ct_model_params(m);
    for (int i = 0; i < ct_model_num_params(m); i++) {
        const ct_param *q = ct_model_param(m, i);
        for (size_t j = 0; j < q->numel; j++)
            p[q->offset + j] += (q->ndim == 1 ? 0.4f : 0.6f) * (ct_rng_float(&r) - 0.5f);
    }
    if (o) CHECK(ct_model_set_opts(m, o) == CT_OK);
    if (Bres) CHECK(ct_model_reserve(m, Bres, T, true) == CT_OK);
    return m;
}

static void make_tokens(int32_t *in, int32_t *tg, int n, uint64_t seed) {
    ct_rng r;
    ct_rng_init(&r, seed);
    for (int i = 0; i < n; i++) {
        in[i] = (int32_t)(ct_rng_u32(&r) % V);
        tg[i] = (int32_t)(ct_rng_u32(&r) % V);
    }
}

static void test_finite_differences(ct_ctx *ctx, bool tied) {
    ct_model *m = make_model(ctx, tied, NULL, B);
    int32_t in[B * T], tg[B * T];
    make_tokens(in, tg, B * T, 5);
    float loss;
    ct_model_zero_grads(m);
    CHECK(ct_model_forward_backward(m, in, tg, B, T, 1.0f, &loss) == CT_OK);
    float *p = ct_model_params(m), *g = ct_model_grads(m);
    ct_rng r;
    ct_rng_init(&r, 3);
    int checked = 0;
    for (int i = 0; i < ct_model_num_params(m); i++) {
        const ct_param *q = ct_model_param(m, i);
        /* the entry with the largest gradient, and two random ones */
        size_t pick[3] = {0, ct_rng_u32(&r) % q->numel, ct_rng_u32(&r) % q->numel};
        for (size_t j = 1; j < q->numel; j++)
            if (fabsf(g[q->offset + j]) > fabsf(g[q->offset + pick[0]])) pick[0] = j;
        CHECK_MSG(fabsf(g[q->offset + pick[0]]) > 0, "%s has no gradient at all", q->name);
        for (int s = 0; s < 3; s++) {
            size_t at = q->offset + pick[s];
            float keep = p[at];
            const float eps = 1e-2f;
            float lp, lm;
            p[at] = keep + eps;
            CHECK(ct_model_forward(m, in, tg, B, T, &lp) == CT_OK);
            p[at] = keep - eps;
            CHECK(ct_model_forward(m, in, tg, B, T, &lm) == CT_OK);
            p[at] = keep;
            double fd = ((double)lp - (double)lm) / (2.0 * eps);
            double an = g[at];
            CHECK_MSG(fabs(fd - an) <= 0.03 * fabs(an) + 2e-4,
                      "%s %s[%zu]: analytic %.6g vs finite difference %.6g",
                      tied ? "tied" : "untied", q->name, pick[s], an, fd);
            checked++;
        }
    }
    CHECK(checked == 3 * ct_model_num_params(m));
    ct_model_free(m);
}

static void test_decode_matches_forward(ct_ctx *ctx) {
    ct_model *m = make_model(ctx, false, NULL, 0);
    enum { n = 10 };
    CHECK(ct_model_reserve(m, 1, n, false) == CT_OK);
    int32_t ids[n] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
    float *full = malloc(sizeof(float) * n * V), *step = malloc(sizeof(float) * V);
    CHECK(ct_model_logits(m, ids, 1, n, full) == CT_OK);
    CHECK(ct_model_decode_reserve(m, n) == CT_OK);
    double worst = 0, scale = 0;
    for (int t = 0; t < n; t++) {
        CHECK(ct_model_decode_step(m, ids[t], step) == CT_OK);
        for (int v = 0; v < V; v++) {
            worst = fmax(worst, fabs(step[v] - full[t * V + v]));
            scale = fmax(scale, fabs(full[t * V + v]));
        }
    }
    CHECK_MSG(worst < 1e-5 * fmax(scale, 1.0), "decode vs full forward logits differ by %g",
              worst);
    /* positions matter: the same token at another position gives other logits */
    ct_model_decode_reset(m);
    CHECK(ct_model_decode_step(m, ids[1], step) == CT_OK);
    CHECK(ct_model_decode_step(m, ids[1], step) == CT_OK);
    CHECK(fabs(step[0] - full[1 * V + 0]) > 1e-4);
    free(full);
    free(step);
    ct_model_free(m);
}

static void test_cpu_matches_ref(void) {
    ct_ctx *cc = NULL, *rc = NULL;
    ct_ctx_params p = ct_ctx_params_default();
    CHECK(ct_ctx_init(&cc, &p) == CT_OK);
    p.backend = CT_BACKEND_REF;
    CHECK(ct_ctx_init(&rc, &p) == CT_OK);
    ct_model *a = make_model(cc, false, NULL, B), *b = make_model(rc, false, NULL, B);
    int32_t in[B * T], tg[B * T];
    make_tokens(in, tg, B * T, 17);
    float la, lb;
    ct_model_zero_grads(a);
    ct_model_zero_grads(b);
    CHECK(ct_model_forward_backward(a, in, tg, B, T, 1.0f, &la) == CT_OK);
    CHECK(ct_model_forward_backward(b, in, tg, B, T, 1.0f, &lb) == CT_OK);
    CHECK_MSG(fabs(la - lb) < 1e-5 * fabs(lb), "cpu loss %g vs ref %g", la, lb);
    float *ga = ct_model_grads(a), *gb = ct_model_grads(b);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < ct_model_numel(a); i++) {
        worst = fmax(worst, fabs(ga[i] - gb[i]));
        scale = fmax(scale, fabs(gb[i]));
    }
    CHECK_MSG(worst <= 1e-5 * scale, "cpu vs ref gradients differ by %g (scale %g)", worst, scale);
    ct_model_free(a);
    ct_model_free(b);
    ct_ctx_free(cc);
    ct_ctx_free(rc);
}

/* Loss and gradients of one step under options o. */
static float run_opts(ct_ctx *ctx, const ct_model_opts *o, float **grads, size_t *n) {
    ct_model *m = make_model(ctx, false, o, B);
    int32_t in[B * T], tg[B * T];
    make_tokens(in, tg, B * T, 23);
    float loss = 0;
    ct_model_zero_grads(m);
    CHECK(ct_model_forward_backward(m, in, tg, B, T, 1.0f, &loss) == CT_OK);
    *n = ct_model_numel(m);
    *grads = malloc(*n * sizeof(float));
    memcpy(*grads, ct_model_grads(m), *n * sizeof(float));
    ct_model_free(m);
    return loss;
}

static void test_recompute_and_bf16(void) {
    ct_ctx *ctx = NULL;
    ct_ctx_params p = ct_ctx_params_default();
    p.backend = CT_BACKEND_REF; /* deterministic scalar loops: recompute is exact */
    CHECK(ct_ctx_init(&ctx, &p) == CT_OK);
    ct_model_opts o = ct_model_opts_default();
    float *g0, *g;
    size_t n;
    float l0 = run_opts(ctx, &o, &g0, &n);
    for (int r = CT_RECOMPUTE_LIGHT; r <= CT_RECOMPUTE_FULL; r++) {
        o.recompute = (ct_recompute)r;
        o.act_dtype = CT_ACT_FP32;
        float l = run_opts(ctx, &o, &g, &n);
        CHECK_MSG(l == l0 && memcmp(g, g0, n * sizeof(float)) == 0,
                  "recompute %s/fp32 is not bit-identical to none", ct_model_recompute_name(o.recompute));
        free(g);
    }
    for (int r = CT_RECOMPUTE_NONE; r <= CT_RECOMPUTE_FULL; r++) {
        o.recompute = (ct_recompute)r;
        o.act_dtype = CT_ACT_BF16;
        float l = run_opts(ctx, &o, &g, &n);
        double d = 0, s = 0;
        for (size_t i = 0; i < n; i++) {
            d = fmax(d, fabs(g[i] - g0[i]));
            s = fmax(s, fabs(g0[i]));
        }
        CHECK_MSG(l == l0, "%s/bf16: loss %.9g differs from fp32's %.9g",
                  ct_model_recompute_name(o.recompute), l, l0);
        CHECK_MSG(d > 0 && d <= 1e-2 * s, "%s/bf16: gradients move by %.3g of %.3g",
                  ct_model_recompute_name(o.recompute), d, s);
        free(g);
    }
    free(g0);
    ct_ctx_free(ctx);
}

static void test_plan_is_allocation(void) {
    for (int r = 0; r < CT_RECOMPUTE_COUNT; r++) {
        for (int d = 0; d < CT_ACT_COUNT; d++) {
            for (int training = 0; training < 2; training++) {
                ct_ctx *ctx = NULL;
                CHECK(ct_ctx_init(&ctx, NULL) == CT_OK);
                ct_model_opts o = {(ct_recompute)r, (ct_act_dtype)d, 0, CT_PREC_FP32, false, 0};
                ct_model *m = make_model(ctx, false, &o, 0);
                ct_memstats before, after;
                ct_ctx_memstats(ctx, &before);
                CHECK(ct_model_reserve(m, 3, 5, training) == CT_OK);
                ct_ctx_memstats(ctx, &after);
                ct_model_plan plan;
                CHECK(ct_model_plan_memory_opts(ct_model_get_config(m), 3, 5, training, &o,
                                                &plan) == CT_OK);
                int64_t acts = after.current[CT_TAG_ACTS] - before.current[CT_TAG_ACTS];
                int64_t grads = after.current[CT_TAG_GRADS] - before.current[CT_TAG_GRADS];
                CHECK_MSG(acts == (int64_t)(plan.acts + plan.work + plan.scratch) &&
                          grads == (int64_t)plan.grads &&
                          plan.params == ct_model_numel(m) * sizeof(float),
                          "%s/%s training=%d: allocated %lld + %lld, planned %zu + %zu",
                          ct_model_recompute_name(o.recompute), ct_model_act_dtype_name(o.act_dtype),
                          training, (long long)acts, (long long)grads,
                          plan.acts + plan.work + plan.scratch, plan.grads);
                /* and the step runs in it */
                if (training) {
                    int32_t in[15], tg[15];
                    make_tokens(in, tg, 15, 2);
                    float loss;
                    ct_model_zero_grads(m);
                    CHECK(ct_model_forward_backward(m, in, tg, 3, 5, 1.0f, &loss) == CT_OK);
                    CHECK(isfinite(loss));
                }
                ct_model_free(m);
                ct_ctx_free(ctx);
            }
        }
    }
}

/* The run plan (model + AdamW) of the planner equals what a LLaMA and its
 * optimizer allocate, for each recompute policy. */
static void test_run_plan_is_allocation(void) {
    ct_model_config c;
    CHECK(ct_model_config_preset(&c, "llama-tiny") == CT_OK);
    for (int r = 0; r < CT_RECOMPUTE_COUNT; r++) {
        ct_ctx *ctx = NULL;
        CHECK(ct_ctx_init(&ctx, NULL) == CT_OK);
        ct_model_opts o = ct_model_opts_default();
        o.recompute = (ct_recompute)r;
        ct_run_plan p;
        CHECK(ct_run_plan_make(&c, 5, 32, 1, 2, &o, &p) == CT_OK);
        ct_model *m = NULL;
        CHECK(ct_model_init(&m, ctx, &c) == CT_OK);
        CHECK(ct_model_set_opts(m, &o) == CT_OK);
        CHECK(ct_model_reserve(m, 5, 32, true) == CT_OK);
        ct_adamw opt;
        CHECK(ct_adamw_init(&opt, ctx, ct_model_numel(m)) == CT_OK);
        ct_memstats ms;
        ct_ctx_memstats(ctx, &ms);
        int64_t got = ms.current[CT_TAG_PARAMS] + ms.current[CT_TAG_GRADS] +
                      ms.current[CT_TAG_ACTS] + ms.current[CT_TAG_OPTIM];
        CHECK_MSG(got == (int64_t)(p.model.total + p.optim), "recompute %d: allocated %lld, "
                  "planned %zu", r, (long long)got, p.model.total + p.optim);
        ct_adamw_free(&opt);
        ct_model_free(m);
        ct_ctx_free(ctx);
    }
}

static void test_table_and_init(ct_ctx *ctx) {
    ct_model_config c;
    tiny_config(&c, false);
    ct_model *m = NULL;
    CHECK(ct_model_init(&m, ctx, &c) == CT_OK);
    ct_model_init_weights(m, 1);
    const ct_param *q = ct_model_find_param(m, "model.layers.1.self_attn.q_proj.weight");
    const ct_param *k = ct_model_find_param(m, "model.layers.1.self_attn.k_proj.weight");
    const ct_param *v = ct_model_find_param(m, "model.layers.1.self_attn.v_proj.weight");
    const ct_param *gate = ct_model_find_param(m, "model.layers.1.mlp.gate_proj.weight");
    const ct_param *up = ct_model_find_param(m, "model.layers.1.mlp.up_proj.weight");
    const ct_param *down = ct_model_find_param(m, "model.layers.1.mlp.down_proj.weight");
    CHECK(q && k && v && gate && up && down);
    if (q && k && v && gate && up && down) {
        CHECK(q->shape[0] == 16 && q->shape[1] == 16);
        CHECK(k->shape[0] == 8 && k->shape[1] == 16 && v->shape[0] == 8); /* 2 KV heads of 4 */
        CHECK(k->offset == q->offset + q->numel && v->offset == k->offset + k->numel);
        CHECK(gate->shape[0] == 24 && up->offset == gate->offset + gate->numel);
        CHECK(down->shape[0] == 16 && down->shape[1] == 24);
        CHECK(q->decay && !q->hf_conv1d);
    }
    const char *names[] = {"model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
                           "model.layers.0.self_attn.o_proj.weight",
                           "model.layers.0.post_attention_layernorm.weight", "model.norm.weight",
                           "lm_head.weight"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        CHECK_MSG(ct_model_find_param(m, names[i]) != NULL, "no %s", names[i]);
    CHECK(ct_model_find_param(m, "wpe.weight") == NULL);
    CHECK(ct_model_num_params(m) == 1 + 2 * 9 + 2);
    /* init: norms 1 without decay, matrices N(0, 0.02) */
    const ct_param *nw = ct_model_find_param(m, "model.norm.weight");
    float *p = ct_model_params(m);
    CHECK(nw && !nw->decay && p[nw->offset] == 1.0f && p[nw->offset + 15] == 1.0f);
    const ct_param *e = ct_model_find_param(m, "model.embed_tokens.weight");
    double ss = 0;
    for (size_t i = 0; i < e->numel; i++) ss += (double)p[e->offset + i] * p[e->offset + i];
    double sd = sqrt(ss / e->numel);
    CHECK_MSG(sd > 0.017 && sd < 0.023, "embedding std %g, expected ~0.02", sd);
    ct_model_free(m);
    /* tied: no lm_head tensor */
    tiny_config(&c, true);
    CHECK(ct_model_init(&m, ctx, &c) == CT_OK);
    CHECK(ct_model_find_param(m, "lm_head.weight") == NULL);
    ct_model_free(m);
}

/* Export and load back: F32 exactly, BF16 as each weight rounded to nearest even;
 * the decoded logits of the reload equal the original's. */
static void test_hf_round_trip(ct_ctx *ctx) {
    char dir[96], sub[160];
    CHECK(ct_tmpdir_make(dir, sizeof dir, "llama_hf") != NULL);
    ct_model *m = make_model(ctx, false, NULL, 0), *back = NULL;
    size_t n = ct_model_numel(m);
    float *p = ct_model_params(m);
    ct_tmpdir_join(sub, sizeof sub, dir, "f32");
    CHECK(ct_model_export_hf(m, sub, false) == CT_OK);
    CHECK(ct_model_load_hf(&back, ctx, sub) == CT_OK);
    if (back) {
        CHECK(ct_model_numel(back) == n);
        CHECK(memcmp(ct_model_params(back), p, n * sizeof(float)) == 0);
        const ct_model_config *a = ct_model_get_config(m), *b = ct_model_get_config(back);
        CHECK(b->arch == CT_ARCH_LLAMA && b->n_kv_head == a->n_kv_head && b->n_ffn == a->n_ffn &&
              b->rope_theta == a->rope_theta && b->norm_eps == a->norm_eps && !b->tied_head);
        ct_model_free(back);
        back = NULL;
    }
    ct_tmpdir_join(sub, sizeof sub, dir, "bf16");
    CHECK(ct_model_export_hf(m, sub, true) == CT_OK);
    CHECK(ct_model_load_hf(&back, ctx, sub) == CT_OK);
    if (back) {
        const float *q = ct_model_params(back);
        size_t bad = 0, moved = 0;
        for (size_t i = 0; i < n; i++) {
            bad += q[i] != ct_bf16_to_f32(ct_f32_to_bf16(p[i]));
            moved += q[i] != p[i];
        }
        CHECK_MSG(bad == 0 && moved > n / 2, "bf16 export: %zu weights not the rounded value, %zu "
                  "moved", bad, moved);
        ct_model_free(back);
    }
    ct_model_free(m);
    CHECK(ct_tmpdir_remove(dir) == 0);
}

static void test_presets_and_validation(ct_ctx *ctx) {
    ct_model_config c;
    CHECK(ct_model_config_preset(&c, "tinyllama-1.1b") == CT_OK);
    CHECK(c.arch == CT_ARCH_LLAMA && c.n_layer == 22 && c.n_head == 32 && c.n_kv_head == 4 &&
          c.n_embd == 2048 && c.n_ffn == 5632 && c.vocab_size == 32000 && c.n_ctx == 2048 &&
          c.rope_theta == 10000.0f && c.norm_eps == 1e-5f && !c.tied_head && !c.bias);
    ct_model_plan plan;
    CHECK(ct_model_plan_memory(&c, 1, 16, false, &plan) == CT_OK);
    /* TinyLlama-1.1B's parameter count as Hugging Face reports it */
    CHECK_MSG(plan.params / sizeof(float) == 1100048384u, "tinyllama-1.1b has %zu parameters",
              plan.params / sizeof(float));
    CHECK(ct_model_config_preset(&c, "llama-demo") == CT_OK);
    CHECK(ct_model_plan_memory(&c, 1, 16, false, &plan) == CT_OK);
    CHECK(plan.params / 4 > 2000000 && plan.params / 4 < 6000000);
    CHECK(ct_model_config_preset(&c, "llama-tiny") == CT_OK && c.arch == CT_ARCH_LLAMA);
    CHECK(ct_model_config_preset(&c, "llama-huge") == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "tinyllama-1.1b") != NULL);
    ct_model *m = NULL;
    ct_model_config_llama(&c, 2, 4, 3, 16, 24, V, 12); /* 4 % 3 */
    CHECK(ct_model_init(&m, ctx, &c) == CT_ERR_ARG && m == NULL);
    CHECK(strstr(ct_last_error(), "n_kv_head = 3") != NULL);
    ct_model_config_llama(&c, 2, 3, 3, 16, 24, V, 12); /* 16 % 3 */
    CHECK(ct_model_config_validate(&c) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "not divisible by n_head = 3") != NULL);
    ct_model_config_llama(&c, 2, 4, 2, 12, 24, V, 12); /* head size 3: odd */
    CHECK(ct_model_config_validate(&c) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "even head size") != NULL);
    ct_model_config_llama(&c, 2, 4, 2, 16, 24, V, 12);
    c.bias = true;
    CHECK(ct_model_config_validate(&c) == CT_ERR_ARG);
    ct_model_config_llama(&c, 2, 4, 2, 16, 24, V, 12);
    c.rope_theta = 0;
    CHECK(ct_model_config_validate(&c) == CT_ERR_ARG);
    ct_model_config_gpt2(&c, 2, 4, 16, V, 12);
    c.n_kv_head = 2; /* GPT-2 has no grouped heads */
    CHECK(ct_model_config_validate(&c) == CT_ERR_ARG);
    /* the published models' parameter counts, as Hugging Face reports them:
     * their q,k,v biases, q/k norms, head sizes and tied heads all count */
    const struct {
        const char *preset;
        ct_family family;
        size_t numel;
    } pub[] = {{"qwen2.5-0.5b", CT_FAMILY_QWEN2, 494032768u},
               {"qwen3-0.6b", CT_FAMILY_QWEN3, 596049920u},
               {"llama3.2-1b", CT_FAMILY_LLAMA, 1235814400u},
               {"smollm2-135m", CT_FAMILY_LLAMA, 134515008u},
               {"mistral-7b", CT_FAMILY_MISTRAL, 7248023552u},
               {"gemma3-270m", CT_FAMILY_GEMMA3, 268098176u},
               {"gemma3-1b", CT_FAMILY_GEMMA3, 999885952u}};
    for (size_t i = 0; i < sizeof pub / sizeof *pub; i++) {
        CHECK(ct_model_config_preset(&c, pub[i].preset) == CT_OK && c.family == pub[i].family);
        CHECK(ct_model_plan_memory(&c, 1, 16, false, &plan) == CT_OK);
        CHECK_MSG(plan.params / sizeof(float) == pub[i].numel, "%s has %zu parameters, not %zu",
                  pub[i].preset, plan.params / sizeof(float), pub[i].numel);
    }
    CHECK(ct_model_config_preset(&c, "qwen3-0.6b") == CT_OK && ct_model_head_dim(&c) == 128 &&
          c.n_embd / c.n_head == 64 && c.qk_norm && !c.qkv_bias);
    CHECK(ct_model_config_preset(&c, "llama3.2-1b") == CT_OK &&
          c.rope_scaling.type == CT_ROPE_LLAMA3 && c.rope_scaling.factor == 32.0f &&
          c.rope_scaling.original_max_pos == 8192 && c.rope_theta == 500000.0f && c.tied_head);
    /* each family's switches and no other's */
    CHECK(ct_model_config_preset(&c, "qwen2-tiny") == CT_OK);
    c.o_bias = true; /* Qwen2 has no o_proj bias */
    CHECK(ct_model_config_validate(&c) == CT_ERR_ARG && strstr(ct_last_error(), "qwen2"));
    CHECK(ct_model_config_preset(&c, "mistral-tiny") == CT_OK);
    c.qk_norm = true;
    CHECK(ct_model_config_validate(&c) == CT_ERR_ARG && strstr(ct_last_error(), "mistral"));
    CHECK(ct_model_config_preset(&c, "llama3-tiny") == CT_OK);
    c.rope_scaling.high_freq_factor = c.rope_scaling.low_freq_factor;
    CHECK(ct_model_config_validate(&c) == CT_ERR_ARG &&
          strstr(ct_last_error(), "high_freq_factor"));
    ct_model_config_gpt2(&c, 2, 4, 16, V, 12);
    c.qk_norm = true; /* the llama layout's switches are not GPT-2's */
    CHECK(ct_model_config_validate(&c) == CT_ERR_ARG);
}

int main(void) {
    ct_ctx *ctx = NULL;
    CHECK(ct_ctx_init(&ctx, NULL) == CT_OK);
    test_finite_differences(ctx, false);
    test_finite_differences(ctx, true);
    test_decode_matches_forward(ctx);
    test_cpu_matches_ref();
    test_recompute_and_bf16();
    test_plan_is_allocation();
    test_run_plan_is_allocation();
    test_table_and_init(ctx);
    test_hf_round_trip(ctx);
    test_presets_and_validation(ctx);
    ct_ctx_free(ctx);
    return ct_test_result("test_model_llama");
}
