/*
 * The tuner: ready levels, the search over threads, micro-batch, recompute,
 * activation storage and attention tiles by timed trial steps under the
 * memory plan, and the profile hook of train and plan. The profile text is
 * built in tune_profile.c. See tune.h.
 */
#define _GNU_SOURCE /* sched_getaffinity: trials pin threads; the tuner restores the mask */
#include "tools/tune.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/ctx.h"
#include "perf/bench.h"
#include "perf/hwinfo.h"
#include "perf/memplan.h"
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
    {"basic", "threads,batch", "32x64,64x64,64x128,128x128", 2},
    {"advanced", "threads,batch,recompute,dtype", "32x64,64x64,64x128,128x128", 3},
    {"ultra", "threads,batch,recompute,dtype,tiles",
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

/* ------------------------------------------------------------ profiles */

void ct_tune_settings_format(const ct_tune_point *p, char *buf, size_t cap) {
    snprintf(buf, cap,
             "run.threads=%d train.batch_size=%d train.grad_accum=%d train.recompute=%s "
             "train.activation_dtype=%s run.attention_tiles=%dx%d",
             p->threads, p->B, p->grad_accum, ct_model_recompute_name(p->opts.recompute),
             ct_model_act_dtype_name(p->opts.act_dtype), p->tile_q, p->tile_k);
}

/* The keys a tuned profile may set. */
static const char *const tuned_keys[] = {"run.threads",      "train.batch_size",
                                         "train.grad_accum", "train.recompute",
                                         "train.activation_dtype", "run.attention_tiles"};

static bool tuned_key(const char *key) {
    for (size_t i = 0; i < sizeof tuned_keys / sizeof *tuned_keys; i++)
        if (!strcmp(key, tuned_keys[i])) return true;
    return false;
}

/* The config's sequences per optimizer step; 0 when batch_size=auto leaves it
 * to the planner. */
static int64_t config_effective_batch(const ct_config *c) {
    if (c->train.batch_size > 0) return c->train.batch_size * c->train.grad_accum;
    return c->train.effective_batch;
}

/* Applies every key=value pair of text to cfg (where: for messages). */
static ct_status apply_settings(ct_config *cfg, const char *text, const char *where) {
    char buf[CT_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", text);
    char *save = NULL;
    for (char *tok = strtok_r(buf, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok) {
            ct_status st = CT_ERR(CT_ERR_ARG, "%s: '%s': expected key=value pairs separated by "
                                  "spaces", where, tok);
            ct_error_hint("e.g. tune.settings: \"run.threads=2 train.batch_size=8 "
                          "train.grad_accum=2\"; or re-run ctrain tune");
            return st;
        }
        *eq = '\0';
        if (!tuned_key(tok)) {
            ct_status st = CT_ERR(CT_ERR_ARG, "%s: '%s' is not a tuned setting: expected run.threads, "
                                  "train.batch_size, train.grad_accum, train.recompute, "
                                  "train.activation_dtype or run.attention_tiles", where, tok);
            ct_error_hint("set other keys in the profile's own sections, or re-run ctrain tune");
            return st;
        }
        ct_status st = ct_config_set(cfg, tok, eq + 1, where);
        if (st) {
            ct_error_hint("fix tune.settings or re-run ctrain tune on this machine");
            return st;
        }
    }
    return CT_OK;
}

ct_status ct_tune_profile_apply(ct_config *cfg, const char *machine_sig, const char *source,
                                bool *applied) {
    *applied = false;
    if (!cfg->tune.signature[0]) {
        if (cfg->tune.settings[0])
            ct_log(CT_LOG_WARN, "%s: tune.settings is set without tune.signature, so it is "
                   "ignored: re-run ctrain tune on this machine to make a profile", source);
        return CT_OK;
    }
    if (strcmp(cfg->tune.signature, machine_sig) != 0) {
        ct_log(CT_LOG_WARN, "%s: this tuned profile was measured on machine %s, but this machine "
               "is %s: its tune.settings (%s) are ignored and the config's own settings run; "
               "re-run ctrain tune on this machine (ctrain tune --config %s --out NEW.yaml)",
               source, cfg->tune.signature, machine_sig,
               cfg->tune.settings[0] ? cfg->tune.settings : "none", source);
        return CT_OK;
    }
    char where[CT_PATH_MAX + 32];
    snprintf(where, sizeof where, "%s: tune.settings", source);
    ct_config c = *cfg;
    int64_t want = config_effective_batch(cfg);
    ct_status st = apply_settings(&c, cfg->tune.settings, where);
    int bq, bk;
    if (!st && (st = ct_config_attention_tiles(c.run.attention_tiles, &bq, &bk)))
        ct_error_prefix("%s", where);
    if (st) return st;
    if (c.train.batch_size > 0 && want > 0) {
        int64_t B = c.train.batch_size, got = B * c.train.grad_accum;
        if (got != want) {
            if (want % B) {
                st = CT_ERR(CT_ERR_ARG, "%s: train.batch_size=%lld does not divide the %lld "
                            "sequences per optimizer step the config asks for (train.batch_size x "
                            "train.grad_accum)", where, (long long)B, (long long)want);
                ct_error_hint("a tuned run must train the same batch: re-run ctrain tune with "
                              "this config");
                return st;
            }
            c.train.grad_accum = want / B;
            ct_log(CT_LOG_INFO, "%s: train.grad_accum=%lld keeps the config's %lld sequences "
                   "per step at train.batch_size=%lld", where, (long long)c.train.grad_accum,
                   (long long)want, (long long)B);
        }
        c.train.effective_batch = 0; /* the batch is explicit now */
    }
    /* the monitor's throughput alerts judge the run against what the tuner
     * measured with these settings (unless the config names a figure) */
    if (c.alerts.expected_tokens_per_s <= 0 && c.tune.tokens_per_s > 0)
        c.alerts.expected_tokens_per_s = c.tune.tokens_per_s;
    *cfg = c;
    *applied = true;
    ct_log(CT_LOG_INFO, "%s: tuned profile for this machine (level %s, measured %.0f tokens/s, "
           "MFU %.1f%%, %s) applies: %s", source, cfg->tune.level, cfg->tune.tokens_per_s,
           100.0 * cfg->tune.mfu, cfg->tune.date[0] ? cfg->tune.date : "undated",
           cfg->tune.settings[0] ? cfg->tune.settings : "(no settings)");
    return CT_OK;
}

ct_status ct_tune_profile_apply_here(ct_config *cfg, const char *source, bool *applied) {
    *applied = false;
    if (!cfg->tune.signature[0] && !cfg->tune.settings[0]) return CT_OK; /* skip reading /proc */
    ct_hwinfo h;
    ct_status st = ct_hwinfo_read(&h);
    if (st) return st;
    return ct_tune_profile_apply(cfg, h.signature, source, applied);
}

/* ------------------------------------------------------------ search */

enum { DIM_THREADS = 1, DIM_BATCH = 2, DIM_RECOMPUTE = 4, DIM_DTYPE = 8, DIM_TILES = 16 };
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
    double sec_per_token; /* of the last trial, for the budget's estimate; 0 unknown */
    bool have_mask;
    cpu_set_t mask; /* the process's CPUs when the search began */
    int physical;   /* physical cores */
    int tile_q, tile_k; /* the config's attention tile (the backend's default when auto) */
} tune_state;

static ct_status parse_search(const char *text, unsigned *dims) {
    static const struct {
        const char *name;
        unsigned bit;
    } names[] = {{"threads", DIM_THREADS}, {"batch", DIM_BATCH}, {"recompute", DIM_RECOMPUTE},
                 {"dtype", DIM_DTYPE}, {"tiles", DIM_TILES}};
    char buf[CT_NAME_MAX];
    snprintf(buf, sizeof buf, "%s", text);
    *dims = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        size_t i = 0;
        while (i < sizeof names / sizeof *names && strcmp(tok, names[i].name)) i++;
        if (i == sizeof names / sizeof *names)
            return CT_ERR(CT_ERR_ARG, "tune.search = '%s': '%s' is not a dimension: expected a "
                          "comma-separated list of threads, batch, recompute, dtype, tiles",
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
           a->tile_q == b->tile_q && a->tile_k == b->tile_k;
}

static ct_status plan_point(const tune_state *s, const ct_tune_point *p, size_t *bytes) {
    ct_run_plan rp;
    ct_status st = ct_run_plan_make(s->mc, p->B, s->r->T, p->grad_accum, s->prefetch, &p->opts,
                                    &rp);
    if (!st) ct_run_plan_set_threads(&rp, p->threads); /* the runtime grows with threads */
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

/* The GEMM peak becomes g (higher than before); the MFU of the trials so far
 * is taken against it. */
static void raise_peak(ct_tune_result *r, double g) {
    r->gemm_peak_gflops = g;
    for (int i = 0; i < r->n_trials; i++)
        if (r->trials[i].measured) r->trials[i].mfu = r->trials[i].gflops / g;
}

/* Times the trial steps of t->p on a context of its own. */
static ct_status measure(tune_state *s, ct_tune_trial *t) {
    const ct_tune_point *p = &t->p;
    if (s->have_mask) (void)sched_setaffinity(0, sizeof s->mask, &s->mask);
    ct_ctx *ctx = NULL;
    ct_ctx_params cp = ct_ctx_params_default();
    cp.n_threads = p->threads;
    ct_status st = ct_ctx_init(&ctx, &cp);
    if (st) return st;
    /* the tiles are the trial's backend's own: nothing outlives the trial */
    if (ct_backend_set_tiles(ct_ctx_base_backend(ctx), p->tile_q, p->tile_k)) {
        ct_ctx_free(ctx);
        return CT_ERR(CT_ERR_ARG, "attention tile %dx%d is out of range", p->tile_q, p->tile_k);
    }
    ct_bench_step_opts o = {.B = p->B, .T = s->r->T, .warmup = 1, .steps = s->steps,
                            .model = p->opts};
    ct_bench_step_result *res = malloc(sizeof *res);
    if (!res) {
        ct_ctx_free(ctx);
        return CT_ERR(CT_ERR_OOM, "out of memory for a tuning trial");
    }
    double t0 = ct_time_s();
    st = ct_bench_step(ctx, s->mc, &o, res);
    t->seconds = ct_time_s() - t0;
    ct_ctx_free(ctx);
    if (!st) {
        /* AdamW runs once per optimizer step, the micro-batch grad_accum times */
        double adam = res->split.seconds[CT_KP_ADAMW] / res->steps;
        if (adam > res->median_s) adam = res->median_s;
        t->measured = true;
        t->step_s = res->median_s;
        t->opt_step_s = p->grad_accum * (res->median_s - adam) + adam;
        double tokens = (double)p->B * p->grad_accum * s->r->T;
        t->tokens_per_s = tokens / t->opt_step_s;
        t->gflops = p->grad_accum * res->flops / t->opt_step_s / 1e9;
        /* a whole step cannot beat GEMMs alone: the peak was measured in a busy moment */
        if (s->r->gemm_peak_gflops > 0 && t->gflops > s->r->gemm_peak_gflops)
            raise_peak(s->r, t->gflops);
        t->mfu = s->r->gemm_peak_gflops > 0 ? t->gflops / s->r->gemm_peak_gflops : 0;
        s->sec_per_token = t->seconds / ((double)p->B * s->r->T * (1 + s->steps));
    }
    free(res);
    return st;
}

/* The trial of p: an earlier one, a skipped one (over the limit) or a new
 * measurement. *idx = -1 when the budget leaves no time for it. */
static ct_status try_point(tune_state *s, const ct_tune_point *p, int *idx) {
    ct_tune_result *r = s->r;
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
    if (t.fits) {
        double now = ct_time_s();
        double guess = s->sec_per_token * p->B * r->T * (1 + s->steps);
        if (r->n_trials > 0 && (now >= s->deadline || now + guess > s->deadline)) {
            r->budget_hit = true;
            return CT_OK;
        }
        if ((st = measure(s, &t))) return st;
    }
    if ((st = push_trial(r, &t))) return st;
    *idx = r->n_trials - 1;
    if (t.measured && (r->best < 0 || t.tokens_per_s > r->trials[r->best].tokens_per_s))
        r->best = *idx;
    if (s->fn) s->fn(r, &r->trials[*idx], s->user);
    return CT_OK;
}

/* Memory settings from lightest (fastest) to leanest, restricted to what the
 * search may change: the base's values otherwise. */
static int memory_options(const tune_state *s, const ct_model_opts *base, ct_model_opts *out) {
    static const ct_model_opts order[] = {
        {CT_RECOMPUTE_NONE, CT_ACT_FP32, 0},  {CT_RECOMPUTE_NONE, CT_ACT_BF16, 0},
        {CT_RECOMPUTE_LIGHT, CT_ACT_FP32, 0}, {CT_RECOMPUTE_LIGHT, CT_ACT_BF16, 0},
        {CT_RECOMPUTE_FULL, CT_ACT_FP32, 0},  {CT_RECOMPUTE_FULL, CT_ACT_BF16, 0},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof order / sizeof *order; i++) {
        if (!(s->dims & DIM_RECOMPUTE) && order[i].recompute != base->recompute) continue;
        if (!(s->dims & DIM_DTYPE) && order[i].act_dtype != base->act_dtype) continue;
        out[n] = order[i];
        out[n++].head_chunk_rows = base->head_chunk_rows;
    }
    return n;
}

/* p with the lightest memory settings the search allows under which it fits
 * (p's own first); false when none fits. */
static bool fit_memory(const tune_state *s, ct_tune_point *p) {
    size_t bytes;
    if (!plan_point(s, p, &bytes) && bytes <= s->r->limit) return true;
    ct_model_opts opts[6];
    int n = memory_options(s, &p->opts, opts);
    for (int i = 0; i < n; i++) {
        ct_tune_point q = *p;
        q.opts = opts[i];
        if (!plan_point(s, &q, &bytes) && bytes <= s->r->limit) {
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

static bool better(const tune_state *s, int idx, int than) {
    const ct_tune_trial *t = s->r->trials;
    return idx >= 0 && t[idx].measured && (than < 0 || t[idx].tokens_per_s > t[than].tokens_per_s);
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
            int best = s->r->best, idx;
            ct_status st = try_point(s, &q, &idx);
            if (st) return st;
            if (idx < 0 || !s->r->trials[idx].fits) break;
            if (idx != s->r->best && !better(s, idx, best)) break;
        }
    }
    return CT_OK;
}

static ct_status search_dim(tune_state *s, unsigned dim, const ct_tune_point *cur) {
    ct_status st = CT_OK;
    int idx;
    if (dim == DIM_BATCH) return search_batch(s, cur);
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
    if (st) return st;
    p->threads = cfg->run.threads > 0 ? (int)cfg->run.threads : s->r->cores;
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
    static const unsigned order[] = {DIM_THREADS, DIM_BATCH, DIM_RECOMPUTE, DIM_TILES};
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
    return CT_OK;
}

/* The GEMM peak again after the search: on a shared machine one measurement
 * can land in a busy moment, so the higher of the two is the roof, and every
 * trial's MFU is taken against it. */
static ct_status remeasure_peak(tune_state *s, bool quick) {
    ct_tune_result *r = s->r;
    ct_ctx *ctx = NULL;
    ct_ctx_params cp = ct_ctx_params_default();
    ct_status st = ct_ctx_init(&ctx, &cp);
    if (st) return st;
    double g = 0;
    st = ct_bench_gemm_peak(ctx, quick ? 1024 : 2048, quick ? 5 : 3, &g);
    ct_ctx_free(ctx);
    if (st || g <= r->gemm_peak_gflops) return st;
    raise_peak(r, g);
    return CT_OK;
}

ct_status ct_tune_run(const ct_config *cfg, const ct_model_config *mc, ct_tune_trial_fn fn,
                      void *user, ct_tune_result *out) {
    memset(out, 0, sizeof *out);
    out->best = -1;
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
    ct_status st = parse_search(cfg->tune.search, &s.dims);
    if (!st) st = parse_tiles(&s, cfg->tune.tile_candidates);
    if (!st) st = ct_config_memory_limit(cfg->run.memory_limit, ct_memory_available(), &out->limit);
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
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(out->date, sizeof out->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    s.have_mask = sched_getaffinity(0, sizeof s.mask, &s.mask) == 0;
    s.physical = h.physical_cores > 0 ? h.physical_cores : 1;
    int q, k;
    if ((st = ct_config_attention_tiles(cfg->run.attention_tiles, &q, &k))) return st;

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
    st = ct_bench_gemm_peak(ctx, quick ? 1024 : 2048, quick ? 5 : 3, &out->gemm_peak_gflops);
    if (!st) st = ct_bench_membw(ctx, quick ? 16 : 128, 3, &out->membw_gbps);
    ct_ctx_free(ctx);
    if (st) return st;
    if (fn) fn(out, NULL, user);

    st = tune_search(&s, &start);
    if (s.have_mask) (void)sched_setaffinity(0, sizeof s.mask, &s.mask);
    if (!st) st = remeasure_peak(&s, quick);
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
    r->best = -1;
}
