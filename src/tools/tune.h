/*
 * The tuner behind `ctrain tune` and the tuned profiles it writes. The search
 * measures the roofs (GEMM peak, memory bandwidth), then times real training
 * steps of the configured model over threads, micro-batch (the effective batch
 * B x grad_accum held fixed), recompute policy, bf16 activation storage and
 * the attention tile, skipping every candidate whose memory plan does not fit
 * run.memory_limit (no trial can run out of memory), within tune.budget_s.
 * A profile is the user's config plus a tune: section (signature, level,
 * settings, tokens/s, MFU, date); train and plan apply its settings on a
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
 *   basic     threads and micro-batch, 2 timed steps per trial;
 *   advanced  + recompute policy and bf16 activation storage, 3 steps;
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
} ct_tune_point;

/* The point as tune.settings text: "run.threads=2 train.batch_size=8
 * train.grad_accum=2 train.recompute=light train.activation_dtype=bf16
 * run.attention_tiles=64x128". Writes at most cap bytes (NUL included). */
void ct_tune_settings_format(const ct_tune_point *p, char *buf, size_t cap);

/* The profile hook of train and plan, run after the config file is loaded
 * and before command-line overrides (so those still win). With tune.signature
 * empty nothing happens. When it equals machine_sig, tune.settings is applied
 * (only run.threads, train.batch_size, train.grad_accum, train.recompute,
 * train.activation_dtype and run.attention_tiles may appear) and *applied is
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

/* One candidate of the search, measured or skipped. */
typedef struct ct_tune_trial {
    ct_tune_point p;
    size_t plan_bytes;   /* the run's memory plan at this point */
    bool fits;           /* plan_bytes <= the memory limit; false: skipped, never run */
    bool measured;       /* trial steps ran */
    double step_s;       /* median seconds of one micro-batch (forward, backward, AdamW) */
    double opt_step_s;   /* seconds of one optimizer step: grad_accum micro-batches, one AdamW */
    double tokens_per_s; /* tokens of an optimizer step / opt_step_s */
    double gflops;       /* model FLOPs / opt_step_s, in 1e9 */
    double mfu;          /* gflops / the measured GEMM peak */
    double seconds;      /* wall time the trial took (model set-up included) */
} ct_tune_trial;

typedef struct ct_tune_result {
    ct_tune_trial *trials; /* owned; n_trials of them in the order tried */
    int n_trials, cap;
    int best;              /* index of the winner (the fastest measured trial) */
    int cores;             /* CPUs this process may use: threads tried are 1..cores */
    double gemm_peak_gflops; /* sustained sgemm on all cores, the higher of a measurement
                              * before and after the search (the MFU denominator) */
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
} ct_tune_result;

/* Called after the micro-benchmarks (trial NULL) and after every trial. */
typedef void (*ct_tune_trial_fn)(const ct_tune_result *r, const ct_tune_trial *trial,
                                 void *user);

/* Runs the search for the model mc under cfg's training settings and tune.*
 * keys. Creates its own contexts (one per thread count) and restores the
 * process's CPU affinity and attention tile afterwards. Borrows cfg and mc;
 * *out is owned: release with ct_tune_result_free. fn may be NULL.
 * CT_ERR_ARG (bad tune.search or tune.tile_candidates, a batch shape that does
 * not fit the limit at any searched setting: the message is the planner's),
 * CT_ERR_OOM. */
ct_status ct_tune_run(const ct_config *cfg, const ct_model_config *mc, ct_tune_trial_fn fn,
                      void *user, ct_tune_result *out);
void ct_tune_result_free(ct_tune_result *r); /* NULL is fine */

/* The profile: a comment block (machine, roofs, every trial, the winner),
 * then ct_config_to_yaml of base with the tune: section filled from r
 * (signature, level, settings of the winner, its tokens/s and MFU, date).
 * Borrows both. Returns owned text; release with free(). NULL and CT_ERR_OOM
 * on out of memory. */
char *ct_tune_profile_yaml(const ct_config *base, const ct_tune_result *r);

#endif
