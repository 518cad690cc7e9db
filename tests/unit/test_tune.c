/*
 * The tuner (src/tools/tune.c): ready levels, the profile hook (a matching
 * signature applies tune.settings, another one warns and changes nothing, a
 * bad settings string is an error naming the key, the effective batch is
 * kept), a real search on a tiny model under a memory limit that rules some
 * candidates out, the profile text read back as a config, and the noise
 * rule on synthetic timings (debug.tune_fake, debug.tune_noise): a gain
 * inside the noise band never wins.
 */
#include <stdlib.h>
#include <string.h>

#include "ct_test.h"
#include "ct_tmpdir.h"
#include "ctrain/config.h"
#include "ctrain/train.h"
#include "perf/memplan.h"
#include "tools/tune.h"

/* Log capture: the last warning and info lines. */
typedef struct log_catch {
    char warn[2048];
    char info[2048];
    int warns;
} log_catch;

static void catch_log(ct_log_level level, const char *msg, void *user) {
    log_catch *c = user;
    if (level == CT_LOG_WARN) {
        snprintf(c->warn, sizeof c->warn, "%s", msg);
        c->warns++;
    } else if (level == CT_LOG_INFO) {
        snprintf(c->info, sizeof c->info, "%s", msg);
    }
}

static void test_levels(void) {
    ct_config c;
    ct_config_default(&c);
    CHECK(!strcmp(ct_tune_level_detect(&c), "basic")); /* the defaults are the basic level */
    CHECK(ct_tune_level_apply(&c, "advanced") == CT_OK);
    CHECK(!strcmp(c.tune.level, "advanced"));
    CHECK(strstr(c.tune.search, "recompute") && strstr(c.tune.search, "dtype"));
    CHECK(!strstr(c.tune.search, "tiles"));
    CHECK(!strcmp(ct_tune_level_detect(&c), "advanced"));
    int steps_adv = (int)c.tune.trial_steps;
    CHECK(ct_tune_level_apply(&c, "ultra") == CT_OK);
    CHECK(strstr(c.tune.search, "tiles") != NULL);
    CHECK(c.tune.trial_steps > steps_adv);
    CHECK(!strcmp(ct_tune_level_detect(&c), "ultra"));
    c.tune.trial_steps = 7;
    CHECK(!strcmp(ct_tune_level_detect(&c), "custom"));
    ct_config before = c;
    CHECK(ct_tune_level_apply(&c, "turbo") == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "turbo") && strstr(ct_last_error(), "basic"));
    CHECK(memcmp(&before, &c, sizeof c) == 0);
}

/* A config as a profile file would hold it: B=4 x accum 4. */
static void profile_config(ct_config *c, const char *settings) {
    ct_config_default(c);
    c->train.batch_size = 4;
    c->train.grad_accum = 4;
    snprintf(c->tune.signature, sizeof c->tune.signature, "x86_64-00000000000000aa");
    snprintf(c->tune.settings, sizeof c->tune.settings, "%s", settings);
    c->tune.tokens_per_s = 1234;
    c->tune.mfu = 0.25;
}

static void test_apply_match(void) {
    log_catch lc = {0};
    ct_log_set(catch_log, &lc);
    ct_config c;
    ct_tune_point p = {.threads = 1, .B = 8, .grad_accum = 2,
                       .opts = {CT_RECOMPUTE_LIGHT, CT_ACT_BF16, 0}, .tile_q = 32, .tile_k = 64};
    char settings[512];
    ct_tune_settings_format(&p, settings, sizeof settings);
    CHECK(strstr(settings, "train.batch_size=8") && strstr(settings, "run.attention_tiles=32x64"));
    profile_config(&c, settings);
    bool applied = false;
    CHECK(ct_tune_profile_apply(&c, "x86_64-00000000000000aa", "p.yaml", &applied) == CT_OK);
    CHECK(applied);
    CHECK(c.run.threads == 1 && c.train.batch_size == 8 && c.train.grad_accum == 2);
    CHECK(!strcmp(c.train.recompute, "light") && !strcmp(c.train.activation_dtype, "bf16"));
    CHECK(!strcmp(c.run.attention_tiles, "32x64"));
    CHECK(c.train.batch_size * c.train.grad_accum == 16); /* the effective batch is kept */
    /* the throughput alerts expect what the tuner measured */
    CHECK(c.alerts.expected_tokens_per_s == 1234);
    CHECK(strstr(lc.info, "p.yaml") && strstr(lc.info, "train.batch_size=8"));
    CHECK(lc.warns == 0);
    CHECK(ct_config_validate(&c) == CT_OK);

    /* a tuned micro-batch that divides the batch: grad_accum is rescaled */
    profile_config(&c, "train.batch_size=8 train.grad_accum=1");
    CHECK(ct_tune_profile_apply(&c, "x86_64-00000000000000aa", "p.yaml", &applied) == CT_OK);
    CHECK(applied && c.train.batch_size == 8 && c.train.grad_accum == 2);
    profile_config(&c, "train.batch_size=2");
    CHECK(ct_tune_profile_apply(&c, "x86_64-00000000000000aa", "p.yaml", &applied) == CT_OK);
    CHECK(c.train.batch_size == 2 && c.train.grad_accum == 8);
    /* one that does not divide it: an error, cfg as it was */
    profile_config(&c, "train.batch_size=3 train.grad_accum=5");
    ct_config before = c;
    CHECK(ct_tune_profile_apply(&c, "x86_64-00000000000000aa", "p.yaml", &applied) == CT_ERR_ARG);
    CHECK(!applied && memcmp(&before, &c, sizeof c) == 0);
    CHECK(strstr(ct_last_error(), "tune.settings") && strstr(ct_last_error(), "16"));
    /* batch_size=auto with effective_batch: the explicit batch replaces it */
    profile_config(&c, "train.batch_size=4 train.grad_accum=3");
    c.train.batch_size = 0;
    c.train.grad_accum = 1;
    c.train.effective_batch = 12;
    CHECK(ct_tune_profile_apply(&c, "x86_64-00000000000000aa", "p.yaml", &applied) == CT_OK);
    CHECK(c.train.batch_size == 4 && c.train.grad_accum == 3 && c.train.effective_batch == 0);
    ct_log_set(NULL, NULL);
}

static void test_apply_mismatch(void) {
    log_catch lc = {0};
    ct_log_set(catch_log, &lc);
    ct_config c;
    profile_config(&c, "run.threads=1 train.batch_size=8 train.grad_accum=2");
    ct_config before = c;
    bool applied = true;
    CHECK(ct_tune_profile_apply(&c, "x86_64-00000000000000bb", "p.yaml", &applied) == CT_OK);
    CHECK(!applied);
    CHECK(memcmp(&before, &c, sizeof c) == 0);
    CHECK(lc.warns == 1);
    CHECK(strstr(lc.warn, "x86_64-00000000000000aa") && strstr(lc.warn, "x86_64-00000000000000bb"));
    CHECK(strstr(lc.warn, "re-run ctrain tune on this machine") && strstr(lc.warn, "p.yaml"));
    /* no signature: not a profile, nothing happens (settings alone warn) */
    ct_config_default(&c);
    before = c;
    lc.warns = 0;
    CHECK(ct_tune_profile_apply(&c, "x86_64-00000000000000bb", "p.yaml", &applied) == CT_OK);
    CHECK(!applied && lc.warns == 0 && memcmp(&before, &c, sizeof c) == 0);
    snprintf(c.tune.settings, sizeof c.tune.settings, "run.threads=1");
    CHECK(ct_tune_profile_apply(&c, "x86_64-00000000000000bb", "p.yaml", &applied) == CT_OK);
    CHECK(!applied && lc.warns == 1 && c.run.threads == 0);
    ct_log_set(NULL, NULL);
}

static void test_apply_bad(void) {
    const char *bad[][2] = {
        {"run.threads=1 train.batch_size", "'train.batch_size'"},      /* no '=' */
        {"optim.lr=1e-3", "optim.lr"},                                 /* not a tuned key */
        {"train.recompute=medium", "train.recompute"},                 /* bad value */
        {"run.attention_tiles=64by128", "run.attention_tiles"},        /* not QxK */
        {"run.threads=-2", "run.threads"},                             /* out of range */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ct_config c;
        profile_config(&c, bad[i][0]);
        ct_config before = c;
        bool applied = true;
        ct_status st = ct_tune_profile_apply(&c, "x86_64-00000000000000aa", "prof.yaml", &applied);
        CHECK_MSG(st == CT_ERR_ARG, "settings '%s' accepted", bad[i][0]);
        CHECK_MSG(strstr(ct_last_error(), bad[i][1]) != NULL, "%s", ct_last_error());
        CHECK_MSG(strstr(ct_last_error(), "prof.yaml: tune.settings") != NULL, "%s",
                  ct_last_error());
        CHECK(!applied && memcmp(&before, &c, sizeof c) == 0);
    }
}

/* The tiny model: 2 layers, C=16, V=64, n_ctx=32; 8 sequences of 16 per step. */
static void tiny(ct_config *c, ct_model_config *mc) {
    ct_config_default(c);
    snprintf(c->model.preset, sizeof c->model.preset, "gpt2-tiny");
    c->train.seq_len = 16;
    c->train.batch_size = 4;
    c->train.grad_accum = 2;
    c->tune.budget_s = 20;
    c->tune.trial_steps = 1;
    CHECK(ct_model_config_from(mc, c) == CT_OK);
}

static size_t plan_of(const ct_model_config *mc, const ct_config *c, int B) {
    ct_run_plan rp;
    ct_model_opts o = ct_model_opts_default();
    CHECK(ct_run_plan_make(mc, B, (int)c->train.seq_len, 8 / B, (int)c->data.prefetch, &o, &rp) ==
          CT_OK);
    ct_run_plan_set_threads(&rp, (int)c->run.threads);
    /* measured as tune (and train) plan: this process, the BLAS buffers */
    ct_run_env env;
    CHECK(ct_run_env_measure(&env, c) == CT_OK);
    ct_run_plan_measure(&rp, mc, (int)c->data.prefetch, &env);
    return rp.total;
}

static int n_callbacks;
static void count_trials(const ct_tune_result *r, const ct_tune_trial *t, void *user) {
    (void)r;
    (void)user;
    if (t) n_callbacks++;
}

static void test_search(void) {
    ct_config c;
    ct_model_config mc;
    tiny(&c, &mc);
    /* wide enough that B=4 and B=8 plan megabytes apart: the plans are measured
     * (this process's RSS), and a sanitizer build's RSS moves by more than the
     * few kilobytes gpt2-tiny's activations differ by */
    c.model.n_embd = 256;
    CHECK(ct_model_config_from(&mc, &c) == CT_OK);
    /* one thread: the plan's runtime share depends on the thread count */
    c.run.threads = 1;
    snprintf(c.tune.search, sizeof c.tune.search, "batch");
    /* a limit between the plans of B=4 and B=8: 8 x 1 must be skipped, never run
     * (the search starts at the config's 4 x 2 and tries 8 first, then 2) */
    size_t p4 = plan_of(&mc, &c, 4), p8 = plan_of(&mc, &c, 8);
    CHECK(p8 > p4);
    snprintf(c.run.memory_limit, sizeof c.run.memory_limit, "%zu", (p4 + p8) / 2);
    ct_tune_result r;
    n_callbacks = 0;
    CHECK(ct_tune_run(&c, &mc, count_trials, NULL, &r) == CT_OK);
    CHECK(r.n_trials >= 3 && n_callbacks == r.n_trials);
    CHECK(r.effective_batch == 8 && r.T == 16 && r.cores >= 1 && r.gemm_peak_gflops > 0);
    CHECK(r.trials[0].p.B == 4 && r.trials[0].p.grad_accum == 2); /* the config first */
    CHECK(r.best >= 0 && r.trials[r.best].measured);
    bool skipped8 = false, saw2 = false;
    for (int i = 0; i < r.n_trials; i++) {
        const ct_tune_trial *t = &r.trials[i];
        CHECK(t->p.B * t->p.grad_accum == 8);
        CHECK(t->fits == (t->plan_bytes <= r.limit));
        CHECK(!t->measured || t->fits);
        if (t->p.B == 8) skipped8 = !t->measured && !t->fits;
        if (t->p.B == 2 && t->measured) saw2 = true;
        if (t->measured) {
            CHECK(t->tokens_per_s > 0 && t->mfu > 0 && t->opt_step_s >= t->step_s);
            /* the peak is at least every trial's rate: MFU never above 100% */
            CHECK(t->mfu <= 1.0 + 1e-12 && t->gflops <= r.gemm_peak_gflops * (1 + 1e-12));
        }
        CHECK(t->p.threads >= 1 && t->p.threads <= r.cores);
        /* basic: memory settings and tiles stay the config's */
        CHECK(t->p.opts.recompute == CT_RECOMPUTE_NONE && t->p.opts.act_dtype == CT_ACT_FP32);
    }
    CHECK(skipped8);
    CHECK(saw2);
    /* the config's settings ran until their noise band was known; the winner
     * is them, or beat them by more than the band */
    CHECK(r.start == 0 && r.trials[0].runs >= CT_TUNE_MIN_RUNS);
    CHECK(r.threshold >= CT_TUNE_MIN_GAIN && r.threshold >= r.noise_band);
    CHECK(r.best == r.start ||
          r.trials[r.best].tokens_per_s > r.trials[r.start].tokens_per_s * (1 + r.threshold));

    /* the profile reads back as a config whose settings are the winner's */
    char *yaml = ct_tune_profile_yaml(&c, &r);
    CHECK(yaml != NULL);
    char dir[64], path[128];
    CHECK(ct_tmpdir_make(dir, sizeof dir, "tune") != NULL);
    ct_tmpdir_join(path, sizeof path, dir, "profile.yaml");
    CHECK(yaml && ct_tmpdir_write(path, yaml, strlen(yaml)) == 0);
    ct_config back;
    ct_config_default(&back);
    CHECK(ct_config_load_yaml(&back, path) == CT_OK);
    /* one timed step per trial is no ready level */
    CHECK(!strcmp(back.tune.signature, r.signature) && !strcmp(back.tune.level, "custom"));
    CHECK(back.tune.tokens_per_s == r.trials[r.best].tokens_per_s);
    CHECK(back.train.batch_size == 4 && back.train.grad_accum == 2); /* the base as given */
    bool applied = false;
    CHECK(ct_tune_profile_apply(&back, r.signature, path, &applied) == CT_OK && applied);
    CHECK(back.train.batch_size == r.trials[r.best].p.B);
    CHECK(back.run.threads == r.trials[r.best].p.threads);
    CHECK(back.train.batch_size * back.train.grad_accum == 8);
    free(yaml);
    ct_tmpdir_remove(dir);
    ct_tune_result_free(&r);

    /* errors: a bad search dimension, a batch that fits nowhere */
    tiny(&c, &mc);
    snprintf(c.tune.search, sizeof c.tune.search, "threads,warp");
    CHECK(ct_tune_run(&c, &mc, NULL, NULL, &r) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "tune.search") && strstr(ct_last_error(), "warp"));
    tiny(&c, &mc);
    snprintf(c.run.memory_limit, sizeof c.run.memory_limit, "1KB");
    CHECK(ct_tune_run(&c, &mc, NULL, NULL, &r) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "run.memory_limit") != NULL);
}

/* Synthetic timings: B=2 is 3% faster than the config's B=4. Under 20% noise
 * that is inside the band and the config's settings stay; without noise the
 * band is 0 and 3% beats the 2% floor. */
static void test_noise(void) {
    ct_config c;
    ct_model_config mc;
    tiny(&c, &mc);
    c.run.threads = 1;
    c.tune.budget_s = 20;
    snprintf(c.tune.search, sizeof c.tune.search, "batch");
    snprintf(c.debug.tune_fake, sizeof c.debug.tune_fake, "train.batch_size=2:0.97");
    c.debug.tune_noise = 0.2;
    ct_tune_result r;
    CHECK(ct_tune_run(&c, &mc, NULL, NULL, &r) == CT_OK);
    CHECK(r.start == 0 && r.trials[0].runs >= CT_TUNE_MIN_RUNS);
    CHECK(r.best == r.start && r.trials[r.best].p.B == 4 && r.trials[r.best].p.grad_accum == 2);
    CHECK(r.noise_band > CT_TUNE_MIN_GAIN && (r.inside_noise >= 1 || r.unconfirmed));
    ct_tune_result_free(&r);
    c.debug.tune_noise = 0;
    CHECK(ct_tune_run(&c, &mc, NULL, NULL, &r) == CT_OK);
    CHECK(r.noise_band == 0 && r.threshold == CT_TUNE_MIN_GAIN);
    CHECK(r.best >= 0 && r.trials[r.best].p.B == 2 && r.trials[r.best].p.grad_accum == 4);
    CHECK(!r.unconfirmed && r.confirm_gain > CT_TUNE_MIN_GAIN);
    ct_tune_result_free(&r);
    snprintf(c.debug.tune_fake, sizeof c.debug.tune_fake, "train.batch_size");
    CHECK(ct_tune_run(&c, &mc, NULL, NULL, &r) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "debug.tune_fake") != NULL);
}

int main(void) {
    test_levels();
    test_apply_match();
    test_apply_mismatch();
    test_apply_bad();
    test_search();
    test_noise();
    return ct_test_result("test_tune");
}
