/*
 * The tuner: ready levels, the search over threads, micro-batch, recompute,
 * activation storage (with it, train.precision=bf16 where the CPU has bf16
 * instructions) and attention tiles by timed trial steps under the
 * memory plan, repeated until the noise band is known, so that no setting
 * wins by less than the noise. The profile hook of train and plan and the
 * profile text are in tune_profile.c. See tune.h.
 */
#define _GNU_SOURCE /* sched_getaffinity: trials pin threads; the tuner restores the mask */
#include "tools/tune.h"

#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/gemm.h"
#include "backend/ctx.h"
#include "perf/bench.h"
#include "perf/hwinfo.h"
#include "perf/memplan.h"
#include "perf/monitor.h"
#include "tools/bench_tools.h"

/* ------------------------------------------------------------ levels */

typedef struct tune_level {
    const char *name;
    const char *search; /* tune.search */
    const char *tiles;  /* tune.tile_candidates */
    int steps;          /* tune.trial_steps */
} tune_level;

/* configs/levels/<name>.yaml hold the same values (tests/cli/test_tune.py checks). */
static const tune_level levels[] = {
    {"basic", "gemm,threads,batch", "32x64,64x64,64x128,128x128", 2},
    {"advanced", "gemm,threads,batch,recompute,dtype", "32x64,64x64,64x128,128x128", 3},
    {"ultra", "gemm,threads,batch,recompute,dtype,tiles",
     "32x64,64x64,64x128,128x128,64x256,128x256", 5},
};
#define N_LEVELS (sizeof levels / sizeof levels[0])

ct_status ct_tune_level_apply(ct_config *cfg, const char *level) {
    for (size_t i = 0; i < N_LEVELS; i++) {
        const tune_level *l = &levels[i];
        if (strcmp(level, l->name) != 0) continue;
        snprintf(cfg->tune.level, sizeof cfg->tune.level, "%s", l->name);
        snprintf(cfg->tune.search, sizeof cfg->tune.search, "%s", l->search);
        snprintf(cfg->tune.tile_candidates, sizeof cfg->tune.tile_candidates, "%s", l->tiles);
        cfg->tune.trial_steps = l->steps;
        return CT_OK;
    }
    ct_status st = CT_ERR(CT_ERR_ARG, "tune level '%s' is unknown: expected basic, advanced or "
                          "ultra", level);
    ct_error_hint("or a level file such as configs/levels/advanced.yaml");
    return st;
}

const char *ct_tune_level_detect(const ct_config *cfg) {
    for (size_t i = 0; i < N_LEVELS; i++) {
        const tune_level *l = &levels[i];
        if (!strcmp(cfg->tune.search, l->search) && !strcmp(cfg->tune.tile_candidates, l->tiles) &&
            cfg->tune.trial_steps == l->steps)
            return l->name;
    }
    return "custom";
}

/* ------------------------------------------------------------ search */

enum { DIM_THREADS = 1, DIM_BATCH = 2, DIM_RECOMPUTE = 4, DIM_DTYPE = 8, DIM_TILES = 16,
       DIM_GEMM = 32 };
#define MAX_TILES 16
#define MAX_DIVISORS 256

typedef struct tune_state {
    const ct_config *cfg;
    const ct_model_config *mc;
    ct_tune_result *r;
    ct_tune_trial_fn fn;
    void *user;
    unsigned dims;
    int tq[MAX_TILES], tk[MAX_TILES], n_tiles;
    int steps, prefetch;
    double t0, deadline;
    double sec_per_token; /* of the last run, for the budget's estimate; 0 unknown */
    uint64_t rng;         /* debug.tune_noise's generator */
    bool have_mask;
    cpu_set_t mask; /* the process's CPUs when the search began */
    int physical;   /* physical cores */
    int tile_q, tile_k; /* the config's attention tile (the backend's default when auto) */
    ct_run_env env;     /* this process, measured once: candidates are planned as train
                         * plans them, so a profile's setting is one train accepts */
    bool bf16_ok;       /* the dtype search may try train.precision=bf16: the run's bf16
                         * GEMMs are native, or debug.emulate_bf16 */
    bool bf16_native;   /* a bf16 run's GEMMs run bf16 instructions here */
    char bf16_path[320]; /* which instructions they run, and why (ct_gemm_bf16_path_describe) */
    ct_lora_opts lora;   /* a LoRA run's adapters (r == 0: none): planned and timed as the
                          * run trains, the base frozen */
    size_t adapters;     /* their parameters, for the FLOPs */
} tune_state;

static ct_status parse_search(const char *text, unsigned *dims) {
    static const struct {
        const char *name;
        unsigned bit;
    } names[] = {{"threads", DIM_THREADS}, {"batch", DIM_BATCH}, {"recompute", DIM_RECOMPUTE},
                 {"dtype", DIM_DTYPE}, {"tiles", DIM_TILES}, {"gemm", DIM_GEMM}};
    char buf[CT_NAME_MAX];
    snprintf(buf, sizeof buf, "%s", text);
    *dims = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        size_t i = 0;
        while (i < sizeof names / sizeof *names && strcmp(tok, names[i].name)) i++;
        if (i == sizeof names / sizeof *names)
            return CT_ERR(CT_ERR_ARG, "tune.search = '%s': '%s' is not a dimension: expected a "
                          "comma-separated list of gemm, threads, batch, recompute, dtype, tiles",
                          text, tok);
        *dims |= names[i].bit;
    }
    return CT_OK;
}

static ct_status parse_tiles(tune_state *s, const char *text) {
    char buf[CT_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", text);
    s->n_tiles = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        int q, k;
        ct_status st = ct_config_attention_tiles(tok, &q, &k);
        if (st || !q || s->n_tiles == MAX_TILES) {
            st = CT_ERR(CT_ERR_ARG, "tune.tile_candidates = '%s': '%s': expected up to %d tiles "
                        "QxK (Q in 1..128, K in 1..256), comma-separated", text, tok, MAX_TILES);
            return st;
        }
        s->tq[s->n_tiles] = q;
        s->tk[s->n_tiles++] = k;
    }
    if (!s->n_tiles && (s->dims & DIM_TILES))
        return CT_ERR(CT_ERR_ARG, "tune.search has tiles but tune.tile_candidates is empty");
    return CT_OK;
}

static bool same_point(const ct_tune_point *a, const ct_tune_point *b) {
    return a->threads == b->threads && a->B == b->B && a->grad_accum == b->grad_accum &&
           a->opts.recompute == b->opts.recompute && a->opts.act_dtype == b->opts.act_dtype &&
           a->opts.recompute_layers == b->opts.recompute_layers &&
           a->opts.precision == b->opts.precision && a->tile_q == b->tile_q &&
           a->tile_k == b->tile_k && a->gemm == b->gemm;
}

/* The adapters as a run at p's precision has them: under lora.base_dtype=auto
 * a bf16 point stores its frozen base in bf16. */
static ct_lora_opts lora_of(const tune_state *s, const ct_tune_point *p) {
    ct_lora_opts o = s->lora;
    if (o.r > 0) o.base_bf16 = ct_lora_base_bf16_at(s->cfg, p->opts.precision);
    return o;
}

static ct_status plan_point(const tune_state *s, const ct_tune_point *p, size_t *bytes) {
    ct_run_plan rp;
    ct_lora_opts lo = lora_of(s, p);
    ct_status st = ct_run_plan_make_lora(s->mc, p->B, s->r->T, p->grad_accum, s->prefetch,
                                         &p->opts, &lo, &rp);
    if (!st) {
        ct_run_env env = s->env;
        env.gemm = p->gemm; /* the point's library's memory */
        ct_run_plan_set_threads(&rp, p->threads); /* the runtime grows with threads */
        ct_run_plan_measure(&rp, s->mc, s->prefetch, &env);
    }
    *bytes = st ? 0 : rp.total;
    return st;
}

static ct_status push_trial(ct_tune_result *r, const ct_tune_trial *t) {
    if (r->n_trials == r->cap) {
        int cap = r->cap ? 2 * r->cap : 32;
        ct_tune_trial *n = realloc(r->trials, (size_t)cap * sizeof *n);
        if (!n) return CT_ERR(CT_ERR_OOM, "out of memory recording tuning trials");
        r->trials = n;
        r->cap = cap;
    }
    r->trials[r->n_trials++] = *t;
    return CT_OK;
}

/* ------------------------------------------------------------ the peak */

/* MFU's denominator from the sgemm measurement and the trials so far: the
 * measurement, unless it reads implausibly low against the cores' theoretical
 * peak (a busy machine) or a trial beat it (a whole step cannot beat GEMMs
 * alone); then the theoretical peak, or the best trial's rate when even that
 * is beaten. Never a trial's own rate while a real bound is above it, so MFU
 * does not read 100% because the sgemm ran in a busy moment. */
static void settle_peak(ct_tune_result *r) {
    double best = 0;
    for (int i = 0; i < r->n_trials; i++)
        if (r->trials[i].measured && r->trials[i].gflops > best) best = r->trials[i].gflops;
    double g = r->gemm_measured_gflops;
    r->peak_source = "measured";
    bool low = r->theory_gflops > 0 && g < CT_MONITOR_PEAK_MIN_SHARE * r->theory_gflops;
    if (low || best > g) {
        g = r->theory_gflops, r->peak_source = "theoretical";
        if (best > g) g = best, r->peak_source = "best trial";
    }
    r->gemm_peak_gflops = g;
    for (int i = 0; i < r->n_trials; i++)
        if (r->trials[i].measured) r->trials[i].mfu = g > 0 ? r->trials[i].gflops / g : 0;
}

/* ------------------------------------------------------------ runs */

/* The synthetic seconds of one micro-batch at p under debug.tune_fake: 1 us
 * per token, times each factor whose KEY=VALUE the point matches. */
static double fake_step_s(const tune_state *s, const ct_tune_point *p) {
    double sec = 1e-6 * p->B * s->r->T;
    char buf[CT_NAME_MAX], val[32];
    snprintf(buf, sizeof buf, "%s", s->cfg->debug.tune_fake);
    char *save = NULL;
    for (char *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '='), *colon = strrchr(tok, ':');
        if (!eq || !colon || colon < eq) continue; /* "on" (checked by fake_check) */
        *eq = *colon = '\0';
        const char *key = tok, *want = eq + 1;
        if (!strcmp(key, "run.threads")) snprintf(val, sizeof val, "%d", p->threads);
        else if (!strcmp(key, "train.batch_size")) snprintf(val, sizeof val, "%d", p->B);
        else if (!strcmp(key, "train.recompute"))
            snprintf(val, sizeof val, "%s", ct_model_recompute_name(p->opts.recompute));
        else if (!strcmp(key, "train.activation_dtype"))
            snprintf(val, sizeof val, "%s", ct_model_act_dtype_name(p->opts.act_dtype));
        else if (!strcmp(key, "train.precision"))
            snprintf(val, sizeof val, "%s", ct_model_precision_name(p->opts.precision));
        else if (!strcmp(key, "run.gemm"))
            snprintf(val, sizeof val, "%s", ct_gemm_lib_name((ct_gemm_lib)p->gemm));
        else snprintf(val, sizeof val, "%dx%d", p->tile_q, p->tile_k);
        if (!strcmp(val, want)) sec *= atof(colon + 1);
    }
    return sec;
}

/* debug.tune_fake: "" (off), "on", or KEY=VALUE:FACTOR words with KEY a tuned
 * key the synthetic time knows and FACTOR > 0. */
static ct_status fake_check(const char *text) {
    char buf[CT_NAME_MAX];
    snprintf(buf, sizeof buf, "%s", text);
    char *save = NULL;
    for (char *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        if (!strcmp(tok, "on")) continue;
        char *eq = strchr(tok, '='), *colon = strrchr(tok, ':'), *end = NULL;
        double f = colon ? strtod(colon + 1, &end) : 0;
        bool key_ok = false;
        if (eq) {
            *eq = '\0';
            key_ok = !strcmp(tok, "run.threads") || !strcmp(tok, "train.batch_size") ||
                     !strcmp(tok, "train.recompute") || !strcmp(tok, "train.activation_dtype") ||
                     !strcmp(tok, "run.attention_tiles") || !strcmp(tok, "train.precision") ||
                     !strcmp(tok, "run.gemm");
        }
        if (!key_ok || !colon || colon < eq || !end || *end || !(f > 0)) {
            ct_status st = CT_ERR(CT_ERR_ARG, "debug.tune_fake = '%s': expected \"on\" or "
                                  "KEY=VALUE:FACTOR words (KEY run.threads, train.batch_size, "
                                  "train.recompute, train.activation_dtype, run.attention_tiles, "
                                  "train.precision or run.gemm; "
                                  "FACTOR > 0)", text);
            ct_error_hint("e.g. debug.tune_fake=\"run.threads=1:0.97\" (a test knob)");
            return st;
        }
    }
    return CT_OK;
}

/* A uniform draw in [0, 1) from the search's own generator (debug.tune_noise). */
static double noise_draw(tune_state *s) {
    s->rng = s->rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(s->rng >> 11) / 9007199254740992.0;
}

/* One run of t->p (a context of its own, a warm-up step, the timed steps):
 * writes its tokens/s, micro-batch seconds and optimizer-step seconds. */
static ct_status run_once(tune_state *s, ct_tune_trial *t, double *tps, double *step_s,
                          double *opt_s) {
    const ct_tune_point *p = &t->p;
    double tokens = (double)p->B * p->grad_accum * s->r->T;
    double t0 = ct_time_s();
    if (s->cfg->debug.tune_fake[0]) {
        *step_s = fake_step_s(s, p);
        *opt_s = p->grad_accum * *step_s;
    } else {
        if (s->have_mask) (void)sched_setaffinity(0, sizeof s->mask, &s->mask);
        ct_ctx *ctx = NULL;
        ct_ctx_params cp = ct_ctx_params_default();
        cp.n_threads = p->threads;
        ct_status st = ct_ctx_init(&ctx, &cp);
        if (st) return st;
        /* the tiles and the library are the run's backend's own: nothing
         * outlives the run */
        ct_ctx_base_backend(ctx)->gemm = p->gemm;
        if (ct_backend_set_tiles(ct_ctx_base_backend(ctx), p->tile_q, p->tile_k)) {
            ct_ctx_free(ctx);
            return CT_ERR(CT_ERR_ARG, "attention tile %dx%d is out of range", p->tile_q,
                          p->tile_k);
        }
        ct_bench_step_opts o = {.B = p->B, .T = s->r->T, .warmup = 1, .steps = s->steps,
                                .model = p->opts, .lora = lora_of(s, p)};
        ct_bench_step_result *res = malloc(sizeof *res);
        if (!res) {
            ct_ctx_free(ctx);
            return CT_ERR(CT_ERR_OOM, "out of memory for a tuning trial");
        }
        st = ct_bench_step(ctx, s->mc, &o, res);
        ct_ctx_free(ctx);
        if (st) {
            free(res);
            return st;
        }
        /* AdamW runs once per optimizer step, the micro-batch grad_accum times */
        double adam = res->split.seconds[CT_KP_ADAMW] / res->steps;
        if (adam > res->median_s) adam = res->median_s;
        *step_s = res->median_s;
        *opt_s = p->grad_accum * (res->median_s - adam) + adam;
        free(res);
    }
    if (s->cfg->debug.tune_noise > 0) {
        double f = 1.0 + s->cfg->debug.tune_noise * noise_draw(s);
        *step_s *= f, *opt_s *= f;
    }
    *tps = tokens / *opt_s;
    double dt = ct_time_s() - t0;
    t->seconds += dt;
    s->sec_per_token = dt / ((double)p->B * s->r->T * (1 + s->steps));
    return CT_OK;
}

/* The noise band of runs v[0..n) (tokens/s): (max - min) / median, without
 * the slowest run when there are 4 or more (one burst of load does not make
 * the band; it still counts in the median); 0 for fewer than 2. */
static double spread_of(const double *v, int n) {
    if (n < 2) return 0;
    int slowest = 0;
    for (int i = 1; i < n; i++) slowest = v[i] < v[slowest] ? i : slowest;
    double lo = 0, hi = 0;
    bool any = false;
    for (int i = 0; i < n; i++) {
        if (n >= 4 && i == slowest) continue;
        lo = !any || v[i] < lo ? v[i] : lo;
        hi = !any || v[i] > hi ? v[i] : hi;
        any = true;
    }
    double med = ct_bench_median(v, n);
    return med > 0 ? (hi - lo) / med : 0;
}

/* Whether one more run of a trial that takes about run_s fits the budget. */
static bool budget_allows(const tune_state *s, double run_s) {
    double now = ct_time_s();
    return now < s->deadline && now + run_s <= s->deadline;
}

/* The estimated seconds of one run of p. */
static double run_guess(const tune_state *s, const ct_tune_point *p) {
    return s->sec_per_token * p->B * s->r->T * (1 + s->steps);
}

/* Runs t->p once more and folds the run into the trial's median, spread and
 * figures. */
static ct_status add_run(tune_state *s, ct_tune_trial *t) {
    double tps, step_s, opt_s;
    ct_status st = run_once(s, t, &tps, &step_s, &opt_s);
    if (st) return st;
    (void)opt_s; /* the figures follow from the median tokens/s */
    t->run_tps[t->runs] = tps;
    t->run_step_s[t->runs] = step_s;
    t->runs++;
    t->measured = true;
    t->tokens_per_s = ct_bench_median(t->run_tps, t->runs);
    t->spread = spread_of(t->run_tps, t->runs);
    t->step_s = ct_bench_median(t->run_step_s, t->runs);
    double tokens = (double)t->p.B * t->p.grad_accum * s->r->T;
    t->opt_step_s = tokens / t->tokens_per_s;
    t->gflops = t->p.grad_accum * ct_bench_step_flops_lora(s->mc, t->p.B, s->r->T, s->adapters) /
                t->opt_step_s / 1e9;
    return CT_OK;
}

/* Repeats t until its spread is known: CT_TUNE_MIN_RUNS runs at least, then
 * more (up to CT_TUNE_MAX_RUNS) while the last run still widened the spread
 * by more than a quarter and half a point. always: the minimum ignores the
 * budget (the start must have a band). *known: the minimum was reached. */
static ct_status repeat_runs(tune_state *s, ct_tune_trial *t, bool always, bool *known) {
    bool widened = true;
    while (t->runs < CT_TUNE_MAX_RUNS && (t->runs < CT_TUNE_MIN_RUNS || widened)) {
        bool must = always && t->runs < CT_TUNE_MIN_RUNS;
        if (!must && !budget_allows(s, run_guess(s, &t->p))) {
            s->r->budget_hit = true;
            break;
        }
        double before = t->spread;
        ct_status st = add_run(s, t);
        if (st) return st;
        widened = t->runs < 2 || t->spread > before * 1.25 + 0.005;
    }
    *known = t->runs >= CT_TUNE_MIN_RUNS;
    return CT_OK;
}

/* The gain one trial needs over another: the larger of their noise bands,
 * and CT_TUNE_MIN_GAIN at least. */
static double gain_needed(const ct_tune_trial *a, const ct_tune_trial *b) {
    double g = a->spread > b->spread ? a->spread : b->spread;
    return g > CT_TUNE_MIN_GAIN ? g : CT_TUNE_MIN_GAIN;
}

/* Whether trial a's median beats trial b's by more than their noise. */
static bool beats(const ct_tune_trial *a, const ct_tune_trial *b) {
    return a->tokens_per_s > b->tokens_per_s * (1.0 + gain_needed(a, b));
}

/* The trial of p: an earlier one, a skipped one (over the limit) or a new
 * measurement. *idx = -1 when the budget leaves no time for it. The first
 * trial (the start) repeats until the noise band is known; a later one runs
 * once, and again until its own spread is known when that run beats the best
 * by more than the threshold; it becomes the best only if its median still
 * does. */
static ct_status try_point(tune_state *s, const ct_tune_point *pp, int *idx) {
    ct_tune_result *r = s->r;
    /* the library the point's run uses: a bf16 point where bf16 is native
     * runs oneDNN whatever it asked (so both libraries are one point there) */
    ct_tune_point norm = *pp;
    norm.gemm = ct_gemm_lib_for_run((ct_gemm_lib)norm.gemm, norm.opts.precision == CT_PREC_BF16,
                                    s->bf16_native);
    const ct_tune_point *p = &norm;
    for (int i = 0; i < r->n_trials; i++) {
        if (same_point(&r->trials[i].p, p)) {
            *idx = i;
            return CT_OK;
        }
    }
    *idx = -1;
    ct_tune_trial t;
    memset(&t, 0, sizeof t);
    t.p = *p;
    ct_status st = plan_point(s, p, &t.plan_bytes);
    if (st) return st;
    t.fits = t.plan_bytes <= r->limit;
    bool first = r->start < 0;
    if (t.fits) {
        if (!first && !budget_allows(s, run_guess(s, p))) {
            r->budget_hit = true;
            return CT_OK;
        }
        bool known = false;
        if ((st = add_run(s, &t))) return st;
        /* one run has no band of its own: it must beat the best by the best's */
        const ct_tune_trial *best = first ? NULL : &r->trials[r->best];
        if (first || beats(&t, best)) {
            if ((st = repeat_runs(s, &t, first, &known))) return st;
            if (t.spread > r->max_spread) r->max_spread = t.spread;
            best = first ? NULL : &r->trials[r->best];
        }
        if (first) {
            r->noise_band = t.spread;
            r->threshold = gain_needed(&t, &t);
        }
        bool wins = first || (known && beats(&t, best));
        if (!wins && best && t.tokens_per_s > best->tokens_per_s) r->inside_noise++;
        if (wins) {
            if ((st = push_trial(r, &t))) return st;
            r->best = r->n_trials - 1;
            if (first) r->start = r->best;
            *idx = r->n_trials - 1;
            settle_peak(r);
            if (s->fn) s->fn(r, &r->trials[*idx], s->user);
            return CT_OK;
        }
    }
    if ((st = push_trial(r, &t))) return st;
    *idx = r->n_trials - 1;
    if (t.measured) settle_peak(r);
    if (s->fn) s->fn(r, &r->trials[*idx], s->user);
    return CT_OK;
}

/* A winner other than the start, against the start in interleaved runs (so a
 * drift of the machine's load between their trials cancels): it stays the
 * winner only if its median there still beats the start's by more than the
 * noise of their trials. No time left: the winner stands on its trials. */
static ct_status confirm_winner(tune_state *s) {
    ct_tune_result *r = s->r;
    if (r->best < 0 || r->start < 0 || r->best == r->start) return CT_OK;
    ct_tune_trial a = r->trials[r->start], b = r->trials[r->best];
    double guess = run_guess(s, &a.p) + run_guess(s, &b.p);
    double va[CT_TUNE_MIN_RUNS], vb[CT_TUNE_MIN_RUNS];
    if (!budget_allows(s, CT_TUNE_MIN_RUNS * guess)) return CT_OK;
    for (int i = 0; i < CT_TUNE_MIN_RUNS; i++) {
        double step_s, opt_s;
        ct_status st = run_once(s, &a, &va[i], &step_s, &opt_s);
        if (!st) st = run_once(s, &b, &vb[i], &step_s, &opt_s);
        if (st) return st;
    }
    double ma = ct_bench_median(va, CT_TUNE_MIN_RUNS), mb = ct_bench_median(vb, CT_TUNE_MIN_RUNS);
    r->confirm_gain = ma > 0 ? mb / ma - 1.0 : 0;
    if (!(mb > ma * (1.0 + gain_needed(&a, &b)))) {
        r->unconfirmed = true;
        r->best = r->start;
    }
    return CT_OK;
}

/* Memory settings from lightest (fastest) to leanest, restricted to what the
 * search may change: the base's values otherwise. */
static int memory_options(const tune_state *s, const ct_model_opts *base, ct_model_opts *out) {
    static const ct_model_opts order[] = {
        {CT_RECOMPUTE_NONE, CT_ACT_FP32, 0, CT_PREC_FP32, false, 0},
        {CT_RECOMPUTE_NONE, CT_ACT_BF16, 0, CT_PREC_FP32, false, 0},
        {CT_RECOMPUTE_LIGHT, CT_ACT_FP32, 0, CT_PREC_FP32, false, 0},
        {CT_RECOMPUTE_LIGHT, CT_ACT_BF16, 0, CT_PREC_FP32, false, 0},
        {CT_RECOMPUTE_FULL, CT_ACT_FP32, 0, CT_PREC_FP32, false, 0},
        {CT_RECOMPUTE_FULL, CT_ACT_BF16, 0, CT_PREC_FP32, false, 0},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof order / sizeof *order; i++) {
        if (!(s->dims & DIM_RECOMPUTE) && order[i].recompute != base->recompute) continue;
        if (!(s->dims & DIM_DTYPE) && order[i].act_dtype != base->act_dtype) continue;
        out[n] = order[i];
        out[n].precision = base->precision;
        /* the config's train.recompute_layers holds for every full point */
        if (order[i].recompute == CT_RECOMPUTE_FULL && base->recompute == CT_RECOMPUTE_FULL)
            out[n].recompute_layers = base->recompute_layers;
        out[n++].head_chunk_rows = base->head_chunk_rows;
    }
    return n;
}

/* p with the lightest memory settings the search allows under which it fits
 * (p's own first); false when none fits. */
/* A point whose memory settings the search chose to be full recompute over
 * every block: full over the fewest first blocks whose plan stays within
 * alerts.memory_warning of the limit, as recompute=auto does (memplan.c). */
typedef struct {
    const tune_state *s;
    const ct_tune_point *p;
    size_t soft; /* alerts.memory_warning's share of the limit */
} fewest_ctx;
static bool fewest_fits(int k, void *user) {
    const fewest_ctx *c = user;
    ct_tune_point q = *c->p;
    q.opts.recompute_layers = k;
    size_t bytes;
    return !plan_point(c->s, &q, &bytes) && bytes <= c->soft;
}

static void fewest_full(const tune_state *s, ct_tune_point *p) {
    if (!(s->dims & DIM_RECOMPUTE) || p->opts.recompute != CT_RECOMPUTE_FULL ||
        p->opts.recompute_layers)
        return;
    double share = s->cfg->alerts.memory_warning;
    fewest_ctx c = {s, p, share > 0 && share < 1 ? (size_t)((double)s->r->limit * share)
                                                 : s->r->limit};
    p->opts.recompute_layers = ct_recompute_layers_fewest(s->mc->n_layer, fewest_fits, &c);
}

static bool fit_memory(const tune_state *s, ct_tune_point *p) {
    size_t bytes;
    if (!plan_point(s, p, &bytes) && bytes <= s->r->limit) {
        fewest_full(s, p);
        return true;
    }
    ct_model_opts opts[6];
    int n = memory_options(s, &p->opts, opts);
    for (int i = 0; i < n; i++) {
        ct_tune_point q = *p;
        q.opts = opts[i];
        if (!plan_point(s, &q, &bytes) && bytes <= s->r->limit) {
            fewest_full(s, &q);
            *p = q;
            return true;
        }
    }
    return false;
}

static int divisors(int E, int *d) {
    int n = 0;
    for (int b = 1; b <= E && n < MAX_DIVISORS; b++)
        if (E % b == 0) d[n++] = b;
    return n;
}

/* Micro-batches up from the current one, then down, each way until one is no
 * faster than the best so far or does not fit. */
static ct_status search_batch(tune_state *s, const ct_tune_point *cur) {
    int d[MAX_DIVISORS], n = divisors(s->r->effective_batch, d), at = 0;
    while (at < n && d[at] != cur->B) at++;
    for (int dir = 1; dir >= -1; dir -= 2) {
        for (int i = at + dir; i >= 0 && i < n; i += dir) {
            ct_tune_point q = *cur;
            q.B = d[i];
            q.grad_accum = s->r->effective_batch / d[i];
            (void)fit_memory(s, &q); /* when nothing fits, q's trial records the skip */
            int idx;
            ct_status st = try_point(s, &q, &idx);
            if (st) return st;
            /* on while each step wins (by more than the noise) */
            if (idx < 0 || idx != s->r->best) break;
        }
    }
    return CT_OK;
}

static ct_status search_dim(tune_state *s, unsigned dim, const ct_tune_point *cur) {
    ct_status st = CT_OK;
    int idx;
    if (dim == DIM_BATCH) return search_batch(s, cur);
    if (dim == DIM_GEMM) { /* the other library, when the build has both */
        if (!ct_gemm_have_onednn()) return CT_OK;
        ct_tune_point q = *cur;
        q.gemm = cur->gemm == CT_GEMM_ONEDNN ? CT_GEMM_OPENBLAS : CT_GEMM_ONEDNN;
        if (fit_memory(s, &q)) st = try_point(s, &q, &idx);
        return st;
    }
    if (dim == DIM_THREADS) {
        int c = s->r->cores;
        for (int t = c; t >= 1 && !st; t = c <= 8 ? t - 1 : t / 2) {
            ct_tune_point q = *cur;
            q.threads = t;
            st = try_point(s, &q, &idx);
            if (c > 8 && t > s->physical && t / 2 < s->physical && !st) {
                q.threads = s->physical; /* SMT off */
                st = try_point(s, &q, &idx);
            }
        }
    } else if (dim == DIM_RECOMPUTE) { /* with dtype: the joint memory settings */
        ct_model_opts opts[6];
        int n = memory_options(s, &cur->opts, opts);
        for (int i = 0; i < n && !st; i++) {
            ct_tune_point q = *cur;
            q.opts = opts[i];
            st = try_point(s, &q, &idx);
        }
        /* and the other GEMM precision, where bf16 runs natively (or is
         * emulated on request: debug.emulate_bf16) */
        if (!st && (s->dims & DIM_DTYPE) && s->bf16_ok) {
            ct_tune_point q = *cur;
            q.opts.precision = cur->opts.precision == CT_PREC_BF16 ? CT_PREC_FP32 : CT_PREC_BF16;
            if (fit_memory(s, &q)) st = try_point(s, &q, &idx);
        }
    } else if (dim == DIM_TILES) {
        for (int i = 0; i < s->n_tiles && !st; i++) {
            ct_tune_point q = *cur;
            q.tile_q = s->tq[i];
            q.tile_k = s->tk[i];
            st = try_point(s, &q, &idx);
        }
    }
    return st;
}

/* The base point: the config's own settings, or, when they do not fit, the
 * largest micro-batch with the lightest memory settings the search may use. */
static ct_status start_point(tune_state *s, ct_tune_point *p) {
    const ct_config *cfg = s->cfg;
    bool rc_auto = !strcmp(cfg->train.recompute, "auto");
    ct_status st = ct_model_opts_from_names(&p->opts, rc_auto ? "none" : cfg->train.recompute,
                                            cfg->train.activation_dtype);
    if (!st) st = ct_run_precision(cfg, &p->opts.precision);
    if (!st) st = ct_run_recompute_layers(cfg, s->mc, &p->opts);
    if (st) return st;
    if (p->opts.precision == CT_PREC_FP16) { /* ct_run_precision refuses it on a CPU already */
        st = CT_ERR(CT_ERR_ARG, "train.precision = fp16: ctrain tune measures training on this "
                    "CPU, and fp16 is for NVIDIA GPUs without bf16");
        ct_error_hint("tune with train.precision=fp32 or bf16");
        return st;
    }
    p->threads = cfg->run.threads > 0 ? (int)cfg->run.threads : s->r->cores;
    int lib = ct_gemm_lib_of_run(cfg->run.gemm, p->opts.precision == CT_PREC_BF16);
    if (lib < 0) {
        st = CT_ERR(CT_ERR_ARG, "run.gemm = %s: this build has no oneDNN", cfg->run.gemm);
        ct_error_hint("set run.gemm=auto or openblas");
        return st;
    }
    p->gemm = lib;
    p->tile_q = s->tile_q;
    p->tile_k = s->tile_k;
    if (cfg->train.batch_size > 0) {
        p->B = (int)cfg->train.batch_size;
        p->grad_accum = (int)cfg->train.grad_accum;
    } else { /* batch_size=auto: what train would run */
        ct_run_plan rp;
        size_t limit;
        if ((st = ct_run_plan_for_config(cfg, s->mc, &rp, &limit))) return st;
        p->B = rp.B;
        p->grad_accum = rp.grad_accum;
        p->opts = rp.opts;
    }
    if ((int64_t)p->B * p->grad_accum > (1 << 20))
        return CT_ERR(CT_ERR_ARG, "train.batch_size x train.grad_accum = %lld is too large to "
                      "tune", (long long)p->B * p->grad_accum);
    s->r->effective_batch = p->B * p->grad_accum;
    ct_tune_point q = *p;
    if (fit_memory(s, &q)) {
        *p = q;
        return CT_OK;
    }
    if (s->dims & DIM_BATCH) {
        int d[MAX_DIVISORS], n = divisors(s->r->effective_batch, d);
        for (int i = n - 1; i >= 0; i--) {
            q = *p;
            q.B = d[i];
            q.grad_accum = s->r->effective_batch / d[i];
            if (fit_memory(s, &q)) {
                *p = q;
                return CT_OK;
            }
        }
    }
    /* nothing fits: the planner says what does */
    ct_run_plan rp;
    size_t limit;
    ct_config c = *cfg;
    if (rc_auto) snprintf(c.train.recompute, sizeof c.train.recompute, "none");
    if ((st = ct_run_plan_for_config(&c, s->mc, &rp, &limit))) return st;
    return CT_ERR(CT_ERR_ARG, "no searched setting of %d sequences per step fits "
                  "run.memory_limit = '%s'", s->r->effective_batch, cfg->run.memory_limit);
}

static ct_status tune_search(tune_state *s, const ct_tune_point *start) {
    ct_tune_result *r = s->r;
    int idx;
    ct_status st = try_point(s, start, &idx);
    if (st) return st;
    if (idx < 0 || !r->trials[idx].measured)
        return CT_ERR(CT_ERR_ARG, "the starting trial could not run");
    /* the library first: where it matters it matters most (1.6-3.7x) */
    static const unsigned order[] = {DIM_GEMM, DIM_THREADS, DIM_BATCH, DIM_RECOMPUTE, DIM_TILES};
    /* coordinate descent: each dimension in turn from the best point so far,
     * repeated while a pass moves the best point (measured points are reused) */
    for (int pass = 0; pass < 3 && !r->budget_hit; pass++) {
        ct_tune_point before = r->trials[r->best].p;
        /* after the budget is hit, later dimensions still get the candidates
         * whose estimated time fits what is left (try_point decides) */
        for (size_t i = 0; i < sizeof order / sizeof *order; i++) {
            unsigned dim = order[i];
            bool on = dim == DIM_RECOMPUTE ? (s->dims & (DIM_RECOMPUTE | DIM_DTYPE)) != 0
                                           : (s->dims & dim) != 0;
            if (!on) continue;
            ct_tune_point from = r->trials[r->best].p;
            if ((st = search_dim(s, dim, &from))) return st;
        }
        if (same_point(&before, &r->trials[r->best].p)) break;
    }
    return confirm_winner(s);
}

/* ------------------------------------------------------------ why */

/* Whether trials a and b differ only in the library (by_gemm) or only in the
 * precision (then the library may differ too, as a bf16 run's can). */
static bool twins(const ct_tune_point *a, const ct_tune_point *b, bool by_gemm) {
    ct_tune_point x = *a, y = *b;
    if (by_gemm) {
        if (x.gemm == y.gemm) return false;
        x.gemm = y.gemm;
    } else {
        if (x.opts.precision == y.opts.precision) return false;
        x.opts.precision = y.opts.precision;
        x.gemm = y.gemm;
    }
    return same_point(&x, &y);
}

/* The last measured pair of trials that differ only in the library (or the
 * precision), one of them at the winner's value: *mine (the winner's value)
 * and *other; false when the search measured no such pair. */
static bool pair_of(const ct_tune_result *r, bool by_gemm, int *mine, int *other) {
    const ct_tune_point *w = &r->trials[r->best].p;
    for (int i = r->n_trials - 1; i >= 0; i--) {
        const ct_tune_trial *t = &r->trials[i];
        bool at_w = by_gemm ? t->p.gemm == w->gemm : t->p.opts.precision == w->opts.precision;
        if (!t->measured || at_w) continue;
        for (int j = 0; j < r->n_trials; j++) {
            if (!r->trials[j].measured || !twins(&r->trials[j].p, &t->p, by_gemm)) continue;
            *mine = j;
            *other = i;
            return true;
        }
    }
    return false;
}

/* why_gemm and why_bf16 of the result: the figures that decided, or why the
 * other choice was not tried. */
static void explain(const tune_state *s) {
    ct_tune_result *r = s->r;
    if (r->best < 0) return;
    const ct_tune_point *w = &r->trials[r->best].p;
    const char *lib = ct_gemm_lib_name((ct_gemm_lib)w->gemm);
    int a, b;
    if (w->opts.precision == CT_PREC_BF16 && s->bf16_native && w->gemm == CT_GEMM_ONEDNN)
        snprintf(r->why_gemm, sizeof r->why_gemm, "run.gemm=onednn: a bf16 run's GEMMs need "
                 "oneDNN's bf16 matmul (OpenBLAS would widen them to fp32)");
    else if (!(s->dims & DIM_GEMM))
        snprintf(r->why_gemm, sizeof r->why_gemm, "run.gemm=%s, the config's (tune.search has "
                 "no gemm)", lib);
    else if (!ct_gemm_have_onednn())
        snprintf(r->why_gemm, sizeof r->why_gemm, "run.gemm=openblas: this build has no oneDNN");
    else if (pair_of(r, true, &a, &b))
        snprintf(r->why_gemm, sizeof r->why_gemm, "run.gemm=%s: %.1f tokens/s, %s %.1f at the "
                 "same settings (%+.1f%%; another library had to be faster by more than the "
                 "noise, %.1f%%, to win)", lib, r->trials[a].tokens_per_s,
                 ct_gemm_lib_name((ct_gemm_lib)r->trials[b].p.gemm), r->trials[b].tokens_per_s,
                 100.0 * (r->trials[a].tokens_per_s / r->trials[b].tokens_per_s - 1.0),
                 100.0 * r->threshold);
    else
        snprintf(r->why_gemm, sizeof r->why_gemm, "run.gemm=%s: the other library was not "
                 "measured (over run.memory_limit, or tune.budget_s ran out)", lib);
    const char *prec = ct_model_precision_name(w->opts.precision);
    if (!(s->dims & DIM_DTYPE))
        snprintf(r->why_bf16, sizeof r->why_bf16, "train.precision=%s, the config's (tune.search "
                 "has no dtype)", prec);
    else if (!s->bf16_ok)
        snprintf(r->why_bf16, sizeof r->why_bf16, "train.precision=%s: bf16 not tried, its "
                 "GEMMs here would be %s", prec, s->bf16_path);
    else if (pair_of(r, false, &a, &b))
        snprintf(r->why_bf16, sizeof r->why_bf16, "train.precision=%s: %.1f tokens/s, %s %.1f "
                 "at the same settings (%+.1f%%)%s", prec, r->trials[a].tokens_per_s,
                 ct_model_precision_name(r->trials[b].p.opts.precision),
                 r->trials[b].tokens_per_s,
                 100.0 * (r->trials[a].tokens_per_s / r->trials[b].tokens_per_s - 1.0),
                 s->bf16_native ? "" : "; bf16 was emulated (debug.emulate_bf16), not native");
    else
        snprintf(r->why_bf16, sizeof r->why_bf16, "train.precision=%s: the other precision was "
                 "not measured (over run.memory_limit, or tune.budget_s ran out)", prec);
}

/* The GEMM peak again after the search: on a shared machine one measurement
 * can land in a busy moment, so the higher of the two is the measurement, and
 * every trial's MFU is taken against the settled peak. */
static ct_status remeasure_peak(tune_state *s, bool quick) {
    ct_tune_result *r = s->r;
    ct_ctx *ctx = NULL;
    ct_ctx_params cp = ct_ctx_params_default();
    ct_status st = ct_ctx_init(&ctx, &cp);
    if (st) return st;
    ct_bench_gemm_info gi;
    st = ct_bench_gemm_peak_info(ctx, quick ? 1024 : 2048, 3, &gi);
    ct_ctx_free(ctx);
    if (st) return st;
    if (gi.gflops > r->gemm_measured_gflops) r->gemm_measured_gflops = gi.gflops;
    settle_peak(r);
    return CT_OK;
}

ct_status ct_tune_run(const ct_config *cfg, const ct_model_config *mc, ct_tune_trial_fn fn,
                      void *user, ct_tune_result *out) {
    memset(out, 0, sizeof *out);
    out->best = out->start = -1;
    out->others_before = out->others_during = -1;
    out->threshold = CT_TUNE_MIN_GAIN;
    out->peak_source = "measured";
    tune_state s;
    memset(&s, 0, sizeof s);
    s.cfg = cfg;
    s.mc = mc;
    s.r = out;
    s.fn = fn;
    s.user = user;
    s.steps = (int)cfg->tune.trial_steps;
    s.prefetch = (int)cfg->data.prefetch;
    s.t0 = ct_time_s();
    s.deadline = s.t0 + cfg->tune.budget_s;
    s.rng = 0x5EED5EED5EEDull;
    ct_status st = parse_search(cfg->tune.search, &s.dims);
    if (!st) st = fake_check(cfg->debug.tune_fake);
    if (!st) st = parse_tiles(&s, cfg->tune.tile_candidates);
    if (!st) st = ct_config_memory_limit(cfg->run.memory_limit, ct_memory_available(), &out->limit);
    if (!st) st = ct_run_env_measure(&s.env, cfg);
    if (!st) st = ct_lora_opts_from_config(cfg, mc, &s.lora);
    if (!st && s.lora.r > 0) {
        ct_model_plan mp;
        st = ct_model_plan_memory_lora(mc, 1, 1, true, NULL, &s.lora, &mp);
        s.adapters = mp.trainable / sizeof(float);
    }
    if (st) return st;
    out->T = (int)cfg->train.seq_len;
    if (out->T > mc->n_ctx)
        return CT_ERR(CT_ERR_ARG, "train.seq_len = %d exceeds the model's context n_ctx = %d",
                      out->T, mc->n_ctx);
    ct_hwinfo h;
    ct_hwinfo_read(&h);
    snprintf(out->signature, sizeof out->signature, "%s", h.signature);
    snprintf(out->cpu_model, sizeof out->cpu_model, "%s", h.cpu_model);
    snprintf(out->level, sizeof out->level, "%s", ct_tune_level_detect(cfg));
    out->theory_gflops = h.theoretical_gflops;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(out->date, sizeof out->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    s.have_mask = sched_getaffinity(0, sizeof s.mask, &s.mask) == 0;
    s.physical = h.physical_cores > 0 ? h.physical_cores : 1;
    /* bf16 is tried where a bf16 run's GEMMs get bf16 instructions (the
     * library such a run uses, asked of oneDNN) */
    {
        int lib = ct_gemm_lib_of_run(cfg->run.gemm, true);
        ct_gemm_lib bl = lib < 0 ? CT_GEMM_OPENBLAS : (ct_gemm_lib)lib;
        char impl[64];
        ct_gemm_bf16_path path = ct_gemm_bf16_path_of(bl, impl, sizeof impl);
        s.bf16_native = ct_gemm_bf16_path_native(path);
        ct_gemm_bf16_path_describe(path, bl, impl, s.bf16_path, sizeof s.bf16_path);
    }
    s.bf16_ok = s.bf16_native || cfg->debug.emulate_bf16;
    int q, k;
    if ((st = ct_config_attention_tiles(cfg->run.attention_tiles, &q, &k))) return st;

    /* how busy the machine is with this process idle */
    out->others_before = ct_hwinfo_cpu_idle_probe(0.2);

    /* the roofs, on every CPU this process may use */
    ct_ctx *ctx = NULL;
    ct_ctx_params cp = ct_ctx_params_default();
    if ((st = ct_ctx_init(&ctx, &cp))) return st;
    out->cores = ct_ctx_threads(ctx);
    /* auto tiles: the backend's defaults */
    const ct_backend *be = ct_ctx_base_backend(ctx);
    s.tile_q = q ? q : be->att_bq;
    s.tile_k = q ? k : be->att_bk;
    ct_tune_point start;
    if ((st = start_point(&s, &start))) {
        ct_ctx_free(ctx);
        return st;
    }
    bool quick = cfg->tune.budget_s < 30; /* small budgets: small roofs */
    ct_bench_gemm_info gi;
    st = ct_bench_gemm_peak_info(ctx, quick ? 1024 : 2048, 3, &gi);
    if (!st) st = ct_bench_membw(ctx, quick ? 16 : 128, 3, &out->membw_gbps);
    ct_ctx_free(ctx);
    if (st) return st;
    out->gemm_measured_gflops = gi.gflops;
    settle_peak(out);
    if (fn) fn(out, NULL, user);

    ct_hw_cpu_sample c0, c1;
    ct_hwinfo_cpu_sample(&c0);
    st = tune_search(&s, &start);
    ct_hwinfo_cpu_sample(&c1);
    out->others_during = ct_hwinfo_cpu_others(&c0, &c1);
    if (s.have_mask) (void)sched_setaffinity(0, sizeof s.mask, &s.mask);
    if (!st) st = remeasure_peak(&s, quick);
    if (!st) explain(&s);
    /* synthetic timings (debug.tune_fake) were not measured under anyone's load */
    out->busy = !cfg->debug.tune_fake[0] &&
                (out->others_before >= CT_HW_BUSY_CPUS || out->others_during >= CT_HW_BUSY_CPUS);
    out->noisy = out->max_spread > CT_TUNE_NOISY;
    out->elapsed_s = ct_time_s() - s.t0;
    if (st) {
        ct_tune_result_free(out);
        return st;
    }
    return CT_OK;
}

void ct_tune_result_free(ct_tune_result *r) {
    if (!r) return;
    free(r->trials);
    r->trials = NULL;
    r->n_trials = r->cap = 0;
    r->best = r->start = -1;
}
