/*
 * The stability guard: judges every optimizer step before its update is
 * applied. A step is bad when its loss or gradient norm is not finite, or when
 * either is a spike: a z-score above `zscore` against the window of recent
 * good steps (judged once `min_steps` good steps are in the window). A bad
 * step's update is skipped; `max_bad` bad steps in a row ask the trainer to
 * roll back, after which the LR factor is multiplied by `lr_factor`.
 * The guard is plain data (no allocation), so a checkpoint stores it field by
 * field (train_state.c) and a resumed run judges exactly as an unbroken one.
 * Leaves out: the rollback itself (the trainer restores a checkpoint), and
 * low spikes (a loss far below the window's mean is never bad).
 */
#ifndef CT_GUARD_H
#define CT_GUARD_H

#include "ctrain/core.h"

#include <stdbool.h>
#include <stdint.h>

#define CT_GUARD_WINDOW_MAX 1024 /* largest guard.window */

typedef struct ct_guard_params {
    int window;       /* good steps remembered, 1..CT_GUARD_WINDOW_MAX */
    double zscore;    /* spike threshold; 0 = spikes are never judged */
    int min_steps;    /* good steps in the window before spikes are judged (>= 2) */
    int max_bad;      /* consecutive bad steps that ask for a rollback; 0 = never */
    double lr_factor; /* LR multiplier applied at each rollback, (0, 1] */
    bool norm_spikes; /* a grad-norm spike alone makes a bad step. The trainer
                       * sets it only without clipping: clipping already bounds
                       * the update, and early in training the norm jumps while
                       * the loss falls, so skipping those would stall it. */
} ct_guard_params;

/* window 50, zscore 6, min_steps 20, max_bad 3, lr_factor 0.5, norm_spikes. */
ct_guard_params ct_guard_params_default(void);

typedef enum ct_guard_verdict {
    CT_GUARD_GOOD = 0,
    CT_GUARD_NONFINITE_LOSS = 1,
    CT_GUARD_NONFINITE_GRAD = 2,
    CT_GUARD_SPIKE_LOSS = 3,
    CT_GUARD_SPIKE_NORM = 4,
    CT_GUARD_VERDICT_COUNT
} ct_guard_verdict;

typedef enum ct_guard_action {
    CT_GUARD_UPDATE = 0,   /* apply the update */
    CT_GUARD_SKIP = 1,     /* skip the update */
    CT_GUARD_ROLLBACK = 2, /* skip it and roll back: max_bad bad steps in a row */
    CT_GUARD_ACTION_COUNT
} ct_guard_action;

typedef struct ct_guard {
    ct_guard_params p;
    double loss[CT_GUARD_WINDOW_MAX]; /* ring of good steps' losses, indices mod p.window */
    double norm[CT_GUARD_WINDOW_MAX]; /* and their gradient norms */
    int head;                         /* index of the oldest entry, < p.window */
    int count;                        /* entries in the ring, <= p.window */
    int64_t bad_run;   /* consecutive bad steps ending at the last judged step */
    int64_t bad_start; /* step of the first of them (0 when bad_run is 0) */
    int64_t skipped;   /* bad steps in total (every verdict but GOOD) */
    int64_t spikes;    /* of which spikes */
    int64_t rollbacks; /* rollbacks done */
    double lr_factor;  /* product of lr_factor over the rollbacks, starts at 1 */
    double z_loss, z_norm; /* z-scores of the last judged step (NaN when not judged) */
} ct_guard;

/* An empty guard with params p (borrowed; copied). The caller validates p
 * (the config's ranges do). */
void ct_guard_init(ct_guard *g, const ct_guard_params *p);

/* Judge the step `step` with mean loss `loss` and gradient norm `norm`
 * (before clipping). A good step joins the window and ends a bad run; a bad
 * one is counted. Returns the action; the verdict goes to *verdict (may be
 * NULL). Thread-compatible (one guard, one thread). */
ct_guard_action ct_guard_judge(ct_guard *g, int64_t step, double loss, double norm,
                               ct_guard_verdict *verdict);

/* Record that a rollback happened: counts it, multiplies lr_factor by
 * p.lr_factor and ends the bad run. */
void ct_guard_rolled_back(ct_guard *g);

/* Replace the window by `from`'s (the newest entries that fit g's window);
 * counters, bad run and lr_factor stay g's. Used after a rollback, so spikes
 * are judged against the restored weights' history. */
void ct_guard_take_window(ct_guard *g, const ct_guard *from);

/* Mean and population standard deviation of the window's losses (which = 0)
 * or norms (which = 1), summed oldest to newest in double. 0, 0 when empty. */
void ct_guard_stats(const ct_guard *g, int which, double *mean, double *std);

/* "good", "non-finite loss", "non-finite gradient", "loss spike", "grad-norm
 * spike". */
const char *ct_guard_verdict_str(ct_guard_verdict v);

#endif
