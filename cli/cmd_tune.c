/*
 * `ctrain tune --config RUN.yaml [--level basic|advanced|ultra|FILE.yaml]
 * [--out FILE] [--json] [--print-config] [key=value ...]`: measures the roofs,
 * then times real training steps of the run's model over the level's search
 * space under run.memory_limit (src/tools/tune.h), prints every trial as it
 * finishes and writes the profile (default run.dir/profile.yaml) that
 * `ctrain train --config` reads. The config is read as given: a profile's own
 * tune.settings are not applied here, so re-tuning starts from the base. It
 * says how noisy the timings were, which candidates were faster only inside
 * the noise, and warns when the machine was busy or the timings noisy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "backend/cpu/gemm.h"
#include "ctrain/train.h"
#include "io/fileio.h"
#include "tools/tune.h"

static void tune_usage(void) {
    printf("usage: ctrain tune --config RUN.yaml [--level basic|advanced|ultra|FILE.yaml]\n"
           "                   [--out FILE] [--json] [--print-config] [key=value ...]\n"
           "Times real training steps of the run's model over a search space and writes a\n"
           "profile (default: run.dir/profile.yaml) for `ctrain train --config PROFILE`.\n"
           "  --level basic     GEMM library, threads and micro-batch (the default)\n"
           "  --level advanced  + recompute policy, bf16 activation storage, and\n"
           "                    train.precision=bf16 where the CPU has bf16 instructions\n"
           "  --level ultra     + attention tile size, more timed steps per trial\n"
           "  --level FILE      tune.* search keys from a file (configs/levels/*.yaml)\n"
           "  tune.budget_s=S   seconds the search may take (default 300)\n"
           "The effective batch (batch_size x grad_accum) stays as the config sets it;\n"
           "candidates whose memory plan exceeds run.memory_limit are skipped, never run.\n"
           "Each trial is repeated until its noise band ((max - min) / median of its runs)\n"
           "is known; the config's own settings stay unless another setting is faster by\n"
           "more than the noise band (and 2%%), confirmed by interleaved runs at the end.\n"
           "It warns when other processes were using the CPUs (a busy machine), and when\n"
           "the timings spread more than 10%% without such load (a noisy machine).\n");
}

/* --level FILE: a YAML file of tune.* keys only; its search keys replace cfg's. */
static int load_level_file(ct_config *cfg, const char *path) {
    ct_config lv, dflt;
    ct_config_default(&lv);
    ct_config_default(&dflt);
    if (ct_config_load_yaml(&lv, path)) return cli_fail("tune");
    if (memcmp(&lv, &dflt, offsetof(ct_config, tune)) != 0)
        return cli_usage_error("tune", "--level %s: a level file holds tune.* keys only; put "
                               "other keys in the --config file", path);
    snprintf(cfg->tune.level, sizeof cfg->tune.level, "%s", lv.tune.level);
    snprintf(cfg->tune.search, sizeof cfg->tune.search, "%s", lv.tune.search);
    snprintf(cfg->tune.tile_candidates, sizeof cfg->tune.tile_candidates, "%s",
             lv.tune.tile_candidates);
    cfg->tune.trial_steps = lv.tune.trial_steps;
    return 0;
}

static const char *tiles_str(const ct_tune_point *p, char *buf, size_t cap) {
    snprintf(buf, cap, "%dx%d", p->tile_q, p->tile_k);
    return buf;
}

typedef struct tune_view {
    FILE *f; /* where the live table goes: stdout, or stderr with --json */
} tune_view;

/* "1.25 of 2 CPUs", or "unknown" */
static const char *load_str(double others, int cores, char *buf, size_t cap) {
    if (others < 0) snprintf(buf, cap, "unknown");
    else snprintf(buf, cap, "%.2f of %d CPUs", others, cores);
    return buf;
}

static void show_trial(const ct_tune_result *r, const ct_tune_trial *t, void *user) {
    tune_view *v = user;
    if (!t) {
        char load[48];
        fprintf(v->f, "roofs (%d CPUs): sgemm %.1f GFLOP/s, triad bandwidth %.1f GB/s; "
                "run.memory_limit %.0f MiB; %d sequences x %d tokens per optimizer step\n",
                r->cores, r->gemm_measured_gflops, r->membw_gbps, r->limit / 1048576.0,
                r->effective_batch, r->T);
        fprintf(v->f, "load: other processes used %s just before the search\n",
                load_str(r->others_before, r->cores, load, sizeof load));
        fprintf(v->f, "trial threads     B accum recompute acts  prec tiles     lib      plan MiB"
                "     tokens/s    MFU   runs  spread\n");
        fflush(v->f);
        return;
    }
    char tiles[16], rc[24];
    const ct_tune_point *p = &t->p;
    if (p->opts.recompute_layers > 0) /* full over the first K blocks */
        snprintf(rc, sizeof rc, "full:%d", p->opts.recompute_layers);
    else
        snprintf(rc, sizeof rc, "%s", ct_model_recompute_name(p->opts.recompute));
    fprintf(v->f, "%5d %7d %5d %5d %-9s %-5s %-4s %-9s %-8s %9.0f", (int)(t - r->trials) + 1,
            p->threads, p->B, p->grad_accum, rc,
            ct_model_act_dtype_name(p->opts.act_dtype), ct_model_precision_name(p->opts.precision),
            tiles_str(p, tiles, sizeof tiles), ct_gemm_lib_name((ct_gemm_lib)p->gemm),
            t->plan_bytes / 1048576.0);
    if (t->measured)
        fprintf(v->f, " %12.1f %5.1f%% %5d %6.1f%%  (%.1f s)%s\n", t->tokens_per_s,
                100.0 * t->mfu, t->runs, 100.0 * t->spread, t->seconds,
                t - r->trials == r->start ? "  start" : t - r->trials == r->best ? "  new best"
                                                                                   : "");
    else
        fprintf(v->f, "  skipped: over run.memory_limit\n");
    fflush(v->f);
}

/* The busy-machine warning on stderr (also under --json): the load, the
 * noise band and what it means for the profile. */
static void tune_warn_busy(const ct_tune_result *r) {
    char before[48], during[48];
    if (r->peak_source && strcmp(r->peak_source, "measured"))
        fprintf(stderr, "ctrain tune: warning: the sgemm peak measured %.1f GFLOP/s, "
                "implausibly low for these cores (theoretical %.1f GFLOP/s) or beaten by a "
                "trial: the machine was busy; MFU is against the %s peak %.1f GFLOP/s\n",
                r->gemm_measured_gflops, r->theory_gflops, r->peak_source, r->gemm_peak_gflops);
    double spread = r->max_spread > r->noise_band ? r->max_spread : r->noise_band;
    load_str(r->others_before, r->cores, before, sizeof before);
    load_str(r->others_during, r->cores, during, sizeof during);
    if (r->busy) {
        fprintf(stderr, "ctrain tune: warning: the machine is busy: other processes used %s "
                "before the search and %s during it; the noise band of the timings is %.1f%% (up "
                "to %.1f%% for a repeated setting). The settings were measured under that load (a "
                "thread count that wins on a busy machine may lose on a quiet one), and none won "
                "by less than its noise. Re-run ctrain tune when the machine is quiet.\n",
                before, during, 100.0 * r->noise_band, 100.0 * spread);
    } else if (r->noisy) {
        /* not others' load: frequency scaling, a virtual machine's neighbours, heat */
        fprintf(stderr, "ctrain tune: warning: the timings are noisy: a repeated setting spread "
                "up to %.1f%% (noise band %.1f%%) while other processes used %s before the search "
                "and %s during it, not enough to call the machine busy (noise without their load "
                "comes from CPU frequency changes, a virtual machine's neighbours or heat). No "
                "setting won by less than its noise; re-run ctrain tune to confirm the choice.\n",
                100.0 * spread, 100.0 * r->noise_band, before, during);
    }
}

/* s as the inside of a JSON string (quotes, backslashes and controls escaped). */
static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static void print_json(const ct_tune_result *r, const char *out, const char *settings) {
    printf("{\"signature\": \"%s\", \"level\": \"%s\", \"cores\": %d, \"gemm_peak_gflops\": %.3f, "
           "\"gemm_measured_gflops\": %.3f, \"theoretical_gflops\": %.3f, \"peak_source\": \"%s\", "
           "\"membw_gbps\": %.3f, \"limit_bytes\": %zu, \"effective_batch\": %d, \"seq_len\": %d, "
           "\"elapsed_s\": %.3f, \"budget_hit\": %s, \"best\": %d, \"start\": %d, "
           "\"noise_band\": %.5f, \"threshold\": %.5f, \"max_spread\": %.5f, \"inside_noise\": %d, "
           "\"confirm_gain\": %.5f, \"unconfirmed\": %s, \"others_cpus_before\": %.3f, "
           "\"others_cpus_during\": %.3f, \"busy\": %s, \"noisy\": %s, \"settings\": \"%s\", "
           "\"why_gemm\": ",
           r->signature, r->level, r->cores, r->gemm_peak_gflops, r->gemm_measured_gflops,
           r->theory_gflops, r->peak_source, r->membw_gbps, r->limit, r->effective_batch, r->T,
           r->elapsed_s, r->budget_hit ? "true" : "false", r->best, r->start, r->noise_band,
           r->threshold, r->max_spread, r->inside_noise, r->confirm_gain,
           r->unconfirmed ? "true" : "false",
           r->others_before, r->others_during, r->busy ? "true" : "false",
           r->noisy ? "true" : "false", settings);
    json_str(r->why_gemm);
    printf(", \"why_precision\": ");
    json_str(r->why_bf16);
    printf(", \"profile\": ");
    json_str(out);
    printf(", \"trials\": [");
    for (int i = 0; i < r->n_trials; i++) {
        const ct_tune_trial *t = &r->trials[i];
        char tiles[16];
        printf("%s{\"threads\": %d, \"batch_size\": %d, \"grad_accum\": %d, \"recompute\": "
               "\"%s\", \"recompute_layers\": %d, \"activation_dtype\": \"%s\", "
               "\"precision\": \"%s\", "
               "\"attention_tiles\": \"%s\", \"gemm\": \"%s\", "
               "\"plan_bytes\": %zu, \"fits\": %s, \"measured\": %s, \"step_s\": %.6f, "
               "\"opt_step_s\": %.6f, \"tokens_per_s\": %.3f, \"gflops\": %.3f, \"mfu\": %.5f, "
               "\"runs\": %d, \"spread\": %.5f, \"run_tokens_per_s\": [",
               i ? ", " : "", t->p.threads, t->p.B, t->p.grad_accum,
               ct_model_recompute_name(t->p.opts.recompute), t->p.opts.recompute_layers,
               ct_model_act_dtype_name(t->p.opts.act_dtype),
               ct_model_precision_name(t->p.opts.precision), tiles_str(&t->p, tiles, sizeof tiles),
               ct_gemm_lib_name((ct_gemm_lib)t->p.gemm), t->plan_bytes, t->fits ? "true" : "false",
               t->measured ? "true" : "false",
               t->step_s, t->opt_step_s, t->tokens_per_s, t->gflops, t->mfu, t->runs, t->spread);
        for (int k = 0; k < t->runs; k++) printf("%s%.3f", k ? ", " : "", t->run_tps[k]);
        printf("]}");
    }
    printf("]}\n");
}

/* The parent directory of path (created when missing), so a long search
 * never ends on an unwritable output. */
static int prepare_out_dir(const char *path) {
    char dir[CT_PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) return 0;
    if (slash == dir) return 0;
    *slash = '\0';
    if (ct_mkdir_p(dir)) return cli_fail("tune");
    return 0;
}

int cmd_tune(int argc, char **argv) {
    const char *config_path = NULL, *level = NULL, *out = NULL;
    bool json = false, print_only = false;
    ct_config cfg;
    ct_config_default(&cfg);
    cfg.model.arch[0] = '\0'; /* unset: the preset's (cli_config_arch) */
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tune_usage();
            return 0;
        }
        if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--print-config")) print_only = true;
        else if (!strcmp(a, "--config") || !strcmp(a, "--level") || !strcmp(a, "--out")) {
            if (i + 1 >= argc) return cli_usage_error("tune", "%s needs a value", a);
            const char *v = argv[++i];
            if (!strcmp(a, "--config")) config_path = v;
            else if (!strcmp(a, "--level")) level = v;
            else out = v;
        } else if (a[0] == '-') {
            return cli_usage_error("tune", "unknown option '%s'", a);
        }
    }
    /* defaults, the file as given, the level, then key=value overrides */
    if (config_path && ct_config_load_yaml(&cfg, config_path)) return cli_fail("tune");
    if (level) {
        bool file = strchr(level, '/') || strstr(level, ".yaml") || strstr(level, ".yml");
        if (file) {
            int rc = load_level_file(&cfg, level);
            if (rc) return rc;
        } else if (ct_tune_level_apply(&cfg, level)) {
            return cli_fail("tune");
        }
    }
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--config") || !strcmp(a, "--level") || !strcmp(a, "--out")) {
            i++;
            continue;
        }
        if (a[0] == '-') continue;
        if (ct_config_apply_override(&cfg, a)) return cli_fail("tune");
    }
    cli_config_arch("tune", &cfg);
    if (ct_config_validate(&cfg)) return cli_fail("tune");
    if (print_only) {
        char *yaml = ct_config_to_yaml(&cfg);
        if (!yaml) return cli_fail("tune");
        fputs(yaml, stdout);
        free(yaml);
        return 0;
    }
    ct_model_config mc;
    if (cfg.model.init_from[0]) {
        if (ct_model_config_load_hf(&mc, cfg.model.init_from)) return cli_fail("tune");
    } else if (ct_model_config_from(&mc, &cfg)) {
        return cli_fail("tune");
    }
    char out_path[CT_PATH_MAX + 32];
    if (out) snprintf(out_path, sizeof out_path, "%s", out);
    else snprintf(out_path, sizeof out_path, "%s/profile.yaml", cfg.run.dir);
    int rc = prepare_out_dir(out_path);
    if (rc) return rc;

    tune_view view = {json ? stderr : stdout};
    ct_tune_result r;
    if (ct_tune_run(&cfg, &mc, show_trial, &view, &r)) return cli_fail("tune");
    char settings[CT_PATH_MAX] = "";
    if (r.best >= 0) ct_tune_settings_format(&r.trials[r.best].p, settings, sizeof settings);
    char *yaml = ct_tune_profile_yaml(&cfg, &r);
    if (!yaml || ct_file_write_atomic(out_path, yaml, strlen(yaml))) {
        free(yaml);
        ct_tune_result_free(&r);
        return cli_fail("tune");
    }
    free(yaml);
    tune_warn_busy(&r);
    if (json) {
        print_json(&r, out_path, settings);
    } else {
        const ct_tune_trial *w = &r.trials[r.best], *b = &r.trials[r.start];
        printf("noise: the starting settings ran %d times: noise band %.1f%%, so another "
               "setting had to be more than %.1f%% faster (more when its own runs spread "
               "wider) to win\n", b->runs, 100.0 * r.noise_band, 100.0 * r.threshold);
        if (r.best == r.start && r.unconfirmed)
            printf("kept the starting settings: the best candidate was not faster by more than "
                   "the noise band in interleaved runs against them (%+.1f%%)\n",
                   100.0 * r.confirm_gain);
        else if (r.best == r.start && r.inside_noise)
            printf("kept the starting settings: %d candidate(s) were faster, but by less than "
                   "the noise band (inside the noise)\n", r.inside_noise);
        else if (r.best == r.start)
            printf("kept the starting settings: no candidate was faster\n");
        printf("why: %s\nwhy: %s\n", r.why_gemm, r.why_bf16);
        printf("best: %s\n  %.1f tokens/s, MFU %.1f%% of the %s peak %.1f GFLOP/s "
               "(%.2fx the starting settings, %.1f tokens/s%s)\n", settings, w->tokens_per_s,
               100.0 * w->mfu, r.peak_source, r.gemm_peak_gflops,
               w->tokens_per_s / b->tokens_per_s, b->tokens_per_s,
               r.confirm_gain > 0 && r.best != r.start ? "; confirmed by interleaved runs" : "");
        printf("%d trial(s) in %.0f s%s; profile written to %s\n"
               "run it: ctrain train --config %s\n", r.n_trials, r.elapsed_s,
               r.budget_hit ? " (tune.budget_s reached: raise it to search further)" : "",
               out_path, out_path);
    }
    ct_tune_result_free(&r);
    return 0;
}
