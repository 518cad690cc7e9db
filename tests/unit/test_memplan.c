/*
 * The run memory plan and the hard limit (src/perf/memplan.c): limit parsing,
 * the plan's parts, the automatic batch and recompute choice, the refusal and
 * its hint, and that what a model and AdamW then allocate is what was planned
 * (so a run chosen under the limit stays under it without trying).
 */
#include <stdlib.h>
#include <string.h>

#include "ct_test.h"
#include "ctrain/config.h"
#include "ctrain/model.h"
#include "ctrain/train.h"
#include "perf/memplan.h"

static void test_limit_parse(void) {
    size_t v = 0;
    CHECK(ct_config_memory_limit("50%", 1000, &v) == CT_OK && v == 500);
    CHECK(ct_config_memory_limit("12GB", 0, &v) == CT_OK && v == (size_t)12 << 30);
    CHECK(ct_config_memory_limit("2.5MB", 0, &v) == CT_OK && v == (size_t)5 << 19);
    CHECK(ct_config_memory_limit("1048576", 0, &v) == CT_OK && v == 1048576);
    CHECK(ct_config_memory_limit("64KB", 0, &v) == CT_OK && v == 65536);
    const char *bad[] = {"lots", "0", "-1GB", "150%", "12XB", "", "GB"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(ct_config_memory_limit(bad[i], 1000, &v) == CT_ERR_ARG);
        CHECK(strstr(ct_last_error(), "run.memory_limit") != NULL);
    }
    CHECK(ct_config_memory_limit("85%", 0, &v) == CT_ERR_ARG); /* RAM unknown */
    CHECK(ct_memory_available() > 0);
}

static ct_model_config small(void) {
    ct_model_config c;
    ct_model_config_gpt2(&c, 2, 2, 32, 97, 64);
    return c;
}

static ct_fit_request request(int B, size_t limit) {
    ct_fit_request r;
    memset(&r, 0, sizeof r);
    r.B = B;
    r.T = 32;
    r.grad_accum = 1;
    r.opts = ct_model_opts_default();
    r.prefetch = 2;
    r.limit = limit;
    r.limit_spec = "test";
    return r;
}

static size_t total_at(const ct_model_config *c, int B, ct_recompute rc) {
    ct_model_opts o = ct_model_opts_default();
    o.recompute = rc;
    ct_run_plan p;
    CHECK(ct_run_plan_make(c, B, 32, 1, 2, &o, &p) == CT_OK);
    return p.total;
}

static void test_plan_and_fit(void) {
    ct_model_config c = small();
    ct_run_plan p;
    ct_model_opts o = ct_model_opts_default();
    CHECK(ct_run_plan_make(&c, 4, 32, 1, 2, &o, &p) == CT_OK);
    CHECK(p.optim == 2 * p.model.params);
    CHECK(p.data == 3 * 2 * 4 * 32 * sizeof(int32_t));
    CHECK(p.total == p.model.total + p.optim + p.data + p.runtime);
    /* the process baseline: the measured constants, per BLAS thread when threaded */
    ct_run_plan_set_threads(&p, 1);
    CHECK(p.threads == 1 && p.runtime == (size_t)((CT_RUNTIME_BASE_MIB + CT_RUNTIME_BLAS1_MIB) *
                                                  1048576.0));
    size_t one = p.total;
    ct_run_plan_set_threads(&p, 4);
    CHECK(p.threads == 4 && p.runtime == (size_t)((CT_RUNTIME_BASE_MIB + 4 * CT_RUNTIME_BLAS_MIB) *
                                                  1048576.0));
    CHECK(p.total == one - ct_run_plan_runtime(1) + ct_run_plan_runtime(4));
    ct_run_plan_set_threads(&p, 0); /* back to this process's CPUs */
    CHECK(p.threads >= 1 && p.runtime == ct_run_plan_runtime(p.threads));
    /* a fixed batch: fits exactly at its own total, refused one byte below */
    ct_fit_request r = request(4, p.total);
    CHECK(ct_run_plan_fit(&c, &r, &p) == CT_OK && p.B == 4);
    r.limit = p.total - 1;
    CHECK(ct_run_plan_fit(&c, &r, &p) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "run.memory_limit") != NULL);
    CHECK(strstr(ct_last_hint(), "train.batch_size=3") != NULL); /* the next size down */
    /* auto: the largest B whose plan fits */
    size_t lim = total_at(&c, 6, CT_RECOMPUTE_NONE) + 100;
    r = request(0, lim);
    CHECK(ct_run_plan_fit(&c, &r, &p) == CT_OK);
    CHECK(p.B == 6 && p.total <= lim && total_at(&c, 7, CT_RECOMPUTE_NONE) > lim);
    /* auto with an effective batch: a divisor, the rest through accumulation */
    r.effective_batch = 8;
    CHECK(ct_run_plan_fit(&c, &r, &p) == CT_OK && p.B == 4 && p.grad_accum == 2);
    /* recompute auto: the lightest policy whose B is at least half the best */
    size_t lim2 = total_at(&c, 8, CT_RECOMPUTE_LIGHT);
    CHECK(total_at(&c, 8, CT_RECOMPUTE_NONE) > lim2);
    r = request(8, lim2);
    r.recompute_auto = true;
    CHECK(ct_run_plan_fit(&c, &r, &p) == CT_OK && p.opts.recompute == CT_RECOMPUTE_LIGHT);
    r = request(8, total_at(&c, 8, CT_RECOMPUTE_NONE));
    r.recompute_auto = true;
    CHECK(ct_run_plan_fit(&c, &r, &p) == CT_OK && p.opts.recompute == CT_RECOMPUTE_NONE);
    /* recompute auto settling on full: full over the fewest first blocks under
     * which the batch still fits (K - 1 blocks would not) */
    {
        enum { L4 = 4 };
        ct_model_config c4;
        ct_model_config_gpt2(&c4, L4, 2, 32, 97, 64);
        ct_model_opts of = ct_model_opts_default();
        of.recompute = CT_RECOMPUTE_FULL;
        ct_run_plan pk[L4];
        for (int k = 1; k <= L4; k++) {
            of.recompute_layers = k;
            CHECK(ct_run_plan_make(&c4, 8, 32, 1, 2, &of, &pk[k - 1]) == CT_OK);
            if (k > 1) CHECK(pk[k - 1].total < pk[k - 2].total);
        }
        /* below light's plan (light is the cheaper re-run where it fits) */
        size_t light = total_at(&c4, 8, CT_RECOMPUTE_LIGHT);
        int tried = 0;
        for (int want = 1; want <= L4; want++) {
            if (pk[want - 1].total >= light) continue;
            r = request(8, pk[want - 1].total);
            r.recompute_auto = true;
            CHECK(ct_run_plan_fit(&c4, &r, &p) == CT_OK);
            int got = p.opts.recompute_layers;
            CHECK_MSG(p.opts.recompute == CT_RECOMPUTE_FULL && got == (want == L4 ? 0 : want) &&
                          p.total <= r.limit,
                      "limit at full over %d blocks: auto chose %s over %d", want,
                      ct_model_recompute_name(p.opts.recompute), got);
            tried++;
        }
        CHECK(tried >= 2);
        /* within a share of the limit (the memory warning's): the fewest blocks
         * whose plan stays under it, or every block when none does */
        int shared = 0;
        /* a batch whose activations outweigh the rest, so the share matters */
        ct_run_plan pb[L4];
        for (int k = 1; k <= L4; k++) {
            of.recompute_layers = k;
            CHECK(ct_run_plan_make(&c4, 256, 32, 1, 2, &of, &pb[k - 1]) == CT_OK);
        }
        light = total_at(&c4, 256, CT_RECOMPUTE_LIGHT);
        for (int want = 1; want < L4; want++) {
            r = request(256, (size_t)((double)pb[want - 1].total / 0.9) + 1);
            if (light <= r.limit) continue; /* light fits the looser limit */
            r.recompute_auto = true;
            r.refine_share = 0.9;
            CHECK(ct_run_plan_fit(&c4, &r, &p) == CT_OK);
            int got = p.opts.recompute_layers;
            CHECK_MSG(p.opts.recompute == CT_RECOMPUTE_FULL && got == want &&
                          p.total <= 0.9 * (double)r.limit,
                      "share 0.9, limit %zu: auto chose %s over %d, want %d", r.limit,
                      ct_model_recompute_name(p.opts.recompute), got, want);
            shared++;
        }
        CHECK(shared >= 1);
        /* an explicit full re-runs every block */
        r = request(8, pk[L4 - 2].total);
        r.opts.recompute = CT_RECOMPUTE_FULL;
        CHECK(ct_run_plan_fit(&c4, &r, &p) == CT_OK && p.opts.recompute_layers == 0);
    }
    /* nothing fits: the hint says so */
    r = request(0, 1000);
    CHECK(ct_run_plan_fit(&c, &r, &p) == CT_ERR_ARG);
    CHECK(strstr(ct_last_hint(), "not even train.batch_size=1") != NULL);
}

/* What reserve and AdamW allocate equals the plan's model and optimizer parts. */
static void test_plan_is_allocation(void) {
    ct_model_config c = small();
    const ct_recompute pols[] = {CT_RECOMPUTE_NONE, CT_RECOMPUTE_LIGHT, CT_RECOMPUTE_FULL};
    for (int i = 0; i < 3; i++) {
        ct_ctx *ctx = NULL;
        CHECK(ct_ctx_init(&ctx, NULL) == CT_OK);
        ct_model_opts o = ct_model_opts_default();
        o.recompute = pols[i];
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
        int64_t want = (int64_t)(p.model.total + p.optim);
        CHECK_MSG(got == want, "recompute %d: allocated %lld bytes, planned %lld", i,
                  (long long)got, (long long)want);
        ct_adamw_free(&opt);
        ct_model_free(m);
        ct_ctx_free(ctx);
    }
}

/* ZeRO-1: each rank plans ceil(numel / world) elements of m and v, and the
 * fit sees the smaller total. */
static void test_zero_shards(void) {
    ct_model_config c = small();
    ct_model_opts o = ct_model_opts_default();
    ct_run_plan full, half, third;
    CHECK(ct_run_plan_make(&c, 4, 32, 1, 2, &o, &full) == CT_OK);
    size_t numel = full.model.params / sizeof(float);
    CHECK(full.optim == 2 * numel * sizeof(float) && full.optim_shards == 1);
    half = full;
    ct_run_plan_shard_optim(&half, 2);
    CHECK(half.optim == 2 * ((numel + 1) / 2) * sizeof(float));
    CHECK(half.total == full.total - full.optim + half.optim && half.optim_shards == 2);
    third = full;
    ct_run_plan_shard_optim(&third, 3);
    CHECK_MSG(third.optim == 2 * ((numel + 2) / 3) * sizeof(float),
              "numel %zu: 3 shards of %zu bytes", numel, third.optim);
    ct_run_plan same = full;
    ct_run_plan_shard_optim(&same, 1);
    CHECK(memcmp(&same, &full, sizeof same) == 0);
    /* a limit between the sharded and the full total: only ZeRO fits */
    ct_fit_request r = request(4, half.total);
    ct_run_plan p;
    CHECK(ct_run_plan_fit(&c, &r, &p) == CT_ERR_ARG);
    r.optim_shards = 2;
    CHECK(ct_run_plan_fit(&c, &r, &p) == CT_OK && p.optim == half.optim);
    /* the config path: dist.zero over dist.world */
    ct_config cfg;
    ct_config_default(&cfg);
    cfg.model.n_layer = 2;
    cfg.train.batch_size = 4;
    cfg.train.seq_len = 32;
    snprintf(cfg.run.memory_limit, sizeof cfg.run.memory_limit, "100%%");
    ct_run_plan a, b;
    size_t lim;
    CHECK(ct_run_plan_for_config(&cfg, &c, &a, &lim) == CT_OK);
    cfg.dist.world = 2;
    CHECK(ct_run_plan_for_config(&cfg, &c, &b, &lim) == CT_OK && b.optim == a.optim);
    cfg.dist.zero = 1;
    CHECK(ct_run_plan_for_config(&cfg, &c, &b, &lim) == CT_OK && b.optim == half.optim);
}

int main(void) {
    test_limit_parse();
    test_zero_shards();
    test_plan_and_fit();
    test_plan_is_allocation();
    return ct_test_result("test_memplan");
}
