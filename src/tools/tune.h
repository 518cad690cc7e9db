/*
 * The tuner behind `ctrain tune` and the tuned profiles it writes. The search
 * measures the roofs (GEMM peak, memory bandwidth), then times real training
 * steps of the configured model over the GEMM library (run.gemm), threads,
 * micro-batch (the effective batch B x grad_accum held fixed), recompute
 * policy, bf16 activation storage, train.precision=bf16 (only where the CPU's
 * bf16 GEMMs are native) and the attention tile, skipping every candidate
 * whose memory plan does not fit run.memory_limit (no trial can run out of
 * memory), within tune.budget_s.
 *
 * Noise: a trial is one or more runs (a fresh context, a warm-up step, the
 * timed steps). The starting point (the config's own settings) runs until
 * the noise band of its runs, (max - min) / median (the slowest left out from
 * 4 runs on), is known: CT_TUNE_MIN_RUNS runs at least, more while a run
 * still widens it. A candidate that beats the best so far by more than
 * max(the best's band, CT_TUNE_MIN_GAIN) on its first run is repeated the
 * same way, and wins only if its median beats the best's by more than the
 * larger of the two bands (and CT_TUNE_MIN_GAIN). A winner other than the
 * start is confirmed by interleaved runs of both at the end. So the profile
 * keeps the config's settings unless another setting is faster by more than
 * the noise. The tuner also measures how much CPU other processes take
 * (before and during the search): the result says when the machine was busy.
 *
 * A profile is the user's config plus a tune: section (signature, level,
 * settings, tokens/s, MFU, date), and comments that say why the library and
 * the precision were chosen; train and plan apply its settings on a
 * machine with the same signature and ignore them, with a warning, elsewhere.
 * Leaves out: multi-process runs, GPUs, and tuning the optimizer or the data.
 */
#ifndef CT_TOOLS_TUNE_H
#define CT_TOOLS_TUNE_H

#include <stdbool.h>
#include <stddef.h>

#include "ctrain/config.h"
#include "ctrain/core.h"
#include "ctrain/model.h"

/* ------------------------------------------------------------ levels */

/* Sets the search keys of a ready level (tune.level, tune.search,
 * tune.tile_candidates, tune.trial_steps), the same keys and values as
 * configs/levels/<level>.yaml:
 *   basic     the GEMM library, threads and micro-batch, 2 timed steps per trial;
 *   advanced  + recompute policy, bf16 activation storage and (where the CPU
 *             has bf16 instructions) train.precision=bf16, 3 steps;
 *   ultra     + the attention tile, 5 steps.
 * Leaves tune.budget_s and every other key alone. CT_ERR_ARG for another
 * name (the message lists the levels). */
ct_status ct_tune_level_apply(ct_config *cfg, const char *level);

/* The level whose keys cfg's search keys equal, or "custom". Static string. */
const char *ct_tune_level_detect(const ct_config *cfg);

/* ------------------------------------------------------------ profiles */

/* One point of the search space. */
typedef struct ct_tune_point {
    int threads;
    int B, grad_accum;  /* micro-batch and accumulation: B x grad_accum is fixed */
    ct_model_opts opts; /* recompute policy, activation storage */
    int tile_q, tile_k; /* attention tile (query rows x keys) */
    int gemm;           /* the GEMM library, a ct_gemm_lib (run.gemm): the one the run uses
                         * (a bf16 point where bf16 is native: oneDNN, ct_gemm_lib_for_run) */
} ct_tune_point;

/* The point as tune.settings text: "run.threads=2 train.batch_size=8
 * train.grad_accum=2 train.recompute=light train.activation_dtype=bf16
 * run.attention_tiles=64x128 run.gemm=onednn" (and train.precision=bf16 when
 * bf16 won). Writes at most cap bytes (NUL included). */
void ct_tune_settings_format(const ct_tune_point *p, char *buf, size_t cap);

/* The profile hook of train and plan, run after the config file is loaded
 * and before command-line overrides (so those still win). With tune.signature
 * empty nothing happens. When it equals machine_sig, tune.settings is applied
 * (only run.threads, train.batch_size, train.grad_accum, train.recompute,
 * train.activation_dtype, run.attention_tiles, train.precision and run.gemm
 * may appear) and *applied is
 * set; the effective batch (batch_size x grad_accum, or effective_batch under
 * batch_size=auto) stays what the config asked for: grad_accum is rescaled
 * when the tuned micro-batch divides it, otherwise it is an error. On another
 * signature a warning names both and says to re-run `ctrain tune`, and cfg is
 * left as it was. source names the file in messages. Borrows all strings.
 * CT_ERR_ARG naming `source: tune.settings` and the bad pair (missing '=',
 * a key outside the list, a bad value, a batch that does not divide). */
ct_status ct_tune_profile_apply(ct_config *cfg, const char *machine_sig, const char *source,
                                bool *applied);

/* ct_tune_profile_apply with this machine's signature (ct_hwinfo_read). */
ct_status ct_tune_profile_apply_here(ct_config *cfg, const char *source, bool *applied);

/* ------------------------------------------------------------ search */

#define CT_TUNE_MIN_RUNS 3    /* runs of the start, and of a candidate that looks faster */
#define CT_TUNE_MAX_RUNS 8    /* runs of one trial at most */
#define CT_TUNE_MIN_GAIN 0.02 /* a winner is faster by more than this share, whatever the band */
#define CT_TUNE_NOISY 0.10    /* a noise band above this share: the timings are noisy */

/* One candidate of the search, measured or skipped. */
typedef struct ct_tune_trial {
    ct_tune_point p;
    size_t plan_bytes;   /* the run's memory plan at this point */
    bool fits;           /* plan_bytes <= the memory limit; false: skipped, never run */
    bool measured;       /* trial steps ran */
    int runs;            /* runs measured (each: a fresh context, warm-up, timed steps) */
    double run_tps[CT_TUNE_MAX_RUNS]; /* each run's tokens/s */
    double run_step_s[CT_TUNE_MAX_RUNS]; /* each run's median micro-batch seconds */
    double spread;       /* noise band of its runs: (max - min) / median of run_tps, the
                          * slowest left out from 4 runs on; 0 with one run */
    double step_s;       /* median seconds of one micro-batch (forward, backward, AdamW) */
    double opt_step_s;   /* seconds of one optimizer step: grad_accum micro-batches, one AdamW */
    double tokens_per_s; /* tokens of an optimizer step / opt_step_s: the runs' median */
    double gflops;       /* model FLOPs / opt_step_s, in 1e9 */
    double mfu;          /* gflops / the result's gemm_peak_gflops */
    double seconds;      /* wall time of its runs (model set-up included) */
} ct_tune_trial;

typedef struct ct_tune_result {
    ct_tune_trial *trials; /* owned; n_trials of them in the order tried */
    int n_trials, cap;
    int best;              /* index of the winner: the start, or a trial faster than the
                            * start by more than the noise (confirmed) */
    int start;             /* index of the starting trial (the config's settings); -1 none */
    int cores;             /* CPUs this process may use: threads tried are 1..cores */
    double gemm_peak_gflops; /* MFU's denominator: the measured sgemm peak (the higher of
                              * a measurement before and after the search), or the
                              * theoretical peak when the measurement read implausibly
                              * low or a trial beat it (peak_source says which) */
    double gemm_measured_gflops; /* the sgemm measurement itself */
    double theory_gflops;  /* the cores' theoretical FMA peak (hwinfo); 0 unknown */
    const char *peak_source; /* "measured", "theoretical" or "best trial"; static */
    double noise_band;     /* the start's spread: the noise of the reference timing */
    double threshold;      /* the least gain over the start a winner needed:
                            * max(noise_band, CT_TUNE_MIN_GAIN) (more when the winner's own
                            * spread is larger) */
    double max_spread;     /* the largest spread of a repeated trial */
    int inside_noise;      /* candidates faster than the best, by less than the noise */
    double confirm_gain;   /* the winner over the start in interleaved runs at the end;
                            * 0 when best is the start or there was no time */
    bool unconfirmed;      /* a winner was set back to the start by the interleaved runs */
    double others_before;  /* CPUs other processes used just before the search; -1 unknown */
    double others_during;  /* CPUs they used on average during it; -1 unknown */
    bool busy;             /* either is over CT_HW_BUSY_CPUS: the settings were measured
                            * under other processes' load */
    bool noisy;            /* max_spread over CT_TUNE_NOISY: the timings themselves spread
                            * (with or without others' load) */
    double membw_gbps;     /* triad bandwidth */
    size_t limit;          /* run.memory_limit in bytes */
    int effective_batch;   /* sequences per optimizer step, held fixed */
    int T;
    double elapsed_s;      /* the whole search, micro-benchmarks included */
    bool budget_hit;       /* candidates were left untried when tune.budget_s ran out */
    char signature[64];    /* this machine's */
    char cpu_model[128];
    char date[32];         /* UTC, ISO 8601 */
    char level[16];        /* ct_tune_level_detect of the config */
    char why_gemm[320];    /* why the winner's GEMM library: the figures of both libraries
                            * at the same settings, or why the other was not tried */
    char why_bf16[512];    /* why the winner's precision: bf16's figures against fp32's, or
                            * why bf16 was not tried (the CPU's bf16 path) */
} ct_tune_result;

/* Called after the micro-benchmarks (trial NULL) and after every trial. */
typedef void (*ct_tune_trial_fn)(const ct_tune_result *r, const ct_tune_trial *trial,
                                 void *user);

/* Runs the search for the model mc under cfg's training settings and tune.*
 * keys. Creates its own contexts (one per run) and restores the process's CPU
 * affinity and attention tile afterwards. Test knobs: debug.tune_noise = x
 * slows every run by a factor 1 + x u (u uniform in [0, 1) from a fixed seed);
 * debug.tune_fake = "on" or "KEY=VALUE:FACTOR ..." replaces the steps by a
 * synthetic time (1 us per token, times FACTOR for each tuned key the point
 * matches; no model runs). Borrows cfg and mc; *out is owned: release with
 * ct_tune_result_free. fn may be NULL (it is called once per trial, after
 * its runs). CT_ERR_ARG (bad tune.search, tune.tile_candidates or
 * debug.tune_fake, a batch shape that does not fit the limit at any searched
 * setting: the message is the planner's), CT_ERR_OOM. */
ct_status ct_tune_run(const ct_config *cfg, const ct_model_config *mc, ct_tune_trial_fn fn,
                      void *user, ct_tune_result *out);
void ct_tune_result_free(ct_tune_result *r); /* NULL is fine */

/* The profile: a comment block (machine, roofs, noise band and load, every
 * trial, the winner),
 * then ct_config_to_yaml of base with the tune: section filled from r
 * (signature, level, settings of the winner, its tokens/s and MFU, date).
 * Borrows both. Returns owned text; release with free(). NULL and CT_ERR_OOM
 * on out of memory. */
char *ct_tune_profile_yaml(const ct_config *base, const ct_tune_result *r);

#endif
