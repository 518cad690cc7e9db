/*
 * Tuned profiles: the hook of train and plan that applies a profile's
 * settings on the machine it was measured on, and the text of a profile: a
 * comment block that a person reads (the machine, the roofs, the noise band
 * and the machine's load, every trial and the winner) above the user's config
 * with its tune: section filled in, which is what `--config` reads back.
 * Leaves out: writing the file (the caller writes it atomically). See tune.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/gemm.h"
#include "core/strbuf.h"
#include "perf/hwinfo.h"
#include "tools/tune.h"

/* ------------------------------------------------------------ profiles */

void ct_tune_settings_format(const ct_tune_point *p, char *buf, size_t cap) {
    /* train.precision only when bf16 won: fp32 is every config's default;
     * train.recompute_layers only under full (0 there: every block) */
    char layers[48] = "";
    if (p->opts.recompute == CT_RECOMPUTE_FULL)
        snprintf(layers, sizeof layers, " train.recompute_layers=%d", p->opts.recompute_layers);
    snprintf(buf, cap,
             "run.threads=%d train.batch_size=%d train.grad_accum=%d train.recompute=%s%s "
             "train.activation_dtype=%s run.attention_tiles=%dx%d run.gemm=%s%s",
             p->threads, p->B, p->grad_accum, ct_model_recompute_name(p->opts.recompute), layers,
             ct_model_act_dtype_name(p->opts.act_dtype), p->tile_q, p->tile_k,
             ct_gemm_lib_name((ct_gemm_lib)p->gemm),
             p->opts.precision == CT_PREC_BF16 ? " train.precision=bf16" : "");
}

/* The keys a tuned profile may set. */
static const char *const tuned_keys[] = {"run.threads",      "train.batch_size",
                                         "train.grad_accum", "train.recompute",
                                         "train.recompute_layers",
                                         "train.activation_dtype", "run.attention_tiles",
                                         "train.precision",  "run.gemm"};

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
            ct_status st = CT_ERR(CT_ERR_ARG, "%s: '%s' is not a tuned setting: expected "
                                  "run.threads, train.batch_size, train.grad_accum, "
                                  "train.recompute, train.recompute_layers, "
                                  "train.activation_dtype, "
                                  "run.attention_tiles, train.precision or run.gemm", where, tok);
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


/* the profile is a few dozen lines of printf into one buffer */
#define put ct_strbuf_printf

static const double MiB = 1024.0 * 1024.0;

char *ct_tune_profile_yaml(const ct_config *base, const ct_tune_result *r) {
    ct_strbuf b = {0};
    put(&b, "# ctrain tuned profile, measured by `ctrain tune` at %s\n", r->date);
    put(&b, "# machine %s (%s), %d CPUs for this process\n", r->signature,
        r->cpu_model[0] ? r->cpu_model : "unknown CPU", r->cores);
    put(&b, "# roofs: sgemm %.1f GFLOP/s measured; MFU against the %s peak %.1f GFLOP/s; triad "
        "bandwidth %.1f GB/s; run.memory_limit %.0f MiB\n", r->gemm_measured_gflops,
        r->peak_source ? r->peak_source : "measured", r->gemm_peak_gflops, r->membw_gbps,
        r->limit / MiB);
    put(&b, "# noise: band %.1f%% ((max - min) / median of the start's runs); a setting had to "
        "be more than %.1f%% faster than the config's own to win", 100.0 * r->noise_band,
        100.0 * r->threshold);
    if (r->inside_noise) put(&b, "; %d faster only inside the noise", r->inside_noise);
    if (r->unconfirmed) put(&b, "; the best was not confirmed by interleaved runs");
    put(&b, "\n# load: other processes used %.2f CPUs before the search, %.2f during it%s\n",
        r->others_before, r->others_during,
        r->busy ? " -- BUSY: measured under load, re-run ctrain tune on a quiet machine"
        : r->noisy ? " -- NOISY: the timings spread without other load; re-run ctrain tune to "
                     "confirm"
                   : "");
    put(&b, "# search: level %s (tune.search %s), %d sequences x %d tokens per optimizer step, "
        "%d trial(s) in %.0f s%s\n", r->level, base->tune.search, r->effective_batch, r->T,
        r->n_trials, r->elapsed_s, r->budget_hit ? ", stopped by tune.budget_s" : "");
    put(&b, "# why: %s\n# why: %s\n", r->why_gemm[0] ? r->why_gemm : "run.gemm: not decided",
        r->why_bf16[0] ? r->why_bf16 : "train.precision: not decided");
    put(&b, "#   threads     B accum recompute acts  gemm tiles     lib      plan MiB     tokens/s "
        "   MFU  runs spread\n");
    for (int i = 0; i < r->n_trials; i++) {
        const ct_tune_trial *t = &r->trials[i];
        const ct_tune_point *p = &t->p;
        char tiles[16];
        snprintf(tiles, sizeof tiles, "%dx%d", p->tile_q, p->tile_k);
        put(&b, "#   %7d %5d %5d %-9s %-5s %-4s %-9s %-8s %9.0f", p->threads, p->B, p->grad_accum,
            ct_model_recompute_name(p->opts.recompute), ct_model_act_dtype_name(p->opts.act_dtype),
            ct_model_precision_name(p->opts.precision), tiles,
            ct_gemm_lib_name((ct_gemm_lib)p->gemm), t->plan_bytes / MiB);
        if (t->measured)
            put(&b, " %12.1f %5.1f%% %5d %5.1f%%%s%s\n", t->tokens_per_s, 100.0 * t->mfu, t->runs,
                100.0 * t->spread, i == r->start ? "  (start)" : "",
                i == r->best ? "  <- best" : "");
        else
            put(&b, "  skipped: over run.memory_limit\n");
    }
    char settings[CT_PATH_MAX] = "";
    ct_config c = *base;
    if (r->best >= 0) {
        const ct_tune_trial *w = &r->trials[r->best];
        ct_tune_settings_format(&w->p, settings, sizeof settings);
        c.tune.tokens_per_s = w->tokens_per_s;
        c.tune.mfu = w->mfu;
    }
    snprintf(c.tune.signature, sizeof c.tune.signature, "%s", r->signature);
    snprintf(c.tune.level, sizeof c.tune.level, "%s", r->level);
    snprintf(c.tune.settings, sizeof c.tune.settings, "%s", settings);
    snprintf(c.tune.date, sizeof c.tune.date, "%s", r->date);
    put(&b, "# Use: ctrain train --config THIS_FILE (key=value arguments still override it).\n"
        "# On a machine with another signature tune.settings is ignored with a warning:\n"
        "# re-run ctrain tune there.\n");
    char *yaml = ct_config_to_yaml(&c);
    if (!yaml) b.oom = true;
    else put(&b, "%s", yaml);
    free(yaml);
    if (b.oom) {
        ct_strbuf_free(&b);
        CT_ERR(CT_ERR_OOM, "out of memory writing the tuned profile");
        return NULL;
    }
    return b.p;
}
