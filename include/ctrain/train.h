/*
 * Training: the training loop that `ctrain train`
 * runs (checkpoints with exact resume, the stability guard with rollback,
 * early stopping, a caller-owned stop flag).
 * Data-parallel training runs the same loop on every rank of an mpirun job
 * (ct_train_hooks.dist, see ctrain/dist.h).
 * A LoRA run trains only the adapters (ctrain/model.h's trainable view).
 * AdamW and the schedules are in ctrain/optim.h, the loader in
 * ctrain/loader.h (both included here).
 * Leaves out: signal handling itself (the program installs handlers; the
 * library only polls the flag it is given).
 */
#ifndef CT_TRAIN_H
#define CT_TRAIN_H

#include <signal.h>

#include "ctrain/config.h"
#include "ctrain/core.h"
#include "ctrain/dist.h"
#include "ctrain/loader.h"
#include "ctrain/model.h"
#include "ctrain/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* -------------------------------------------------------------- trainer */

/*
 * The training loop. Checkpoints (run.dir/checkpoints/step_NNNNNNNN, see
 * src/train/checkpoint.h) hold the weights, the AdamW moments and a training
 * state record (step, AdamW step count, loader position, guard, early
 * stopping), so that a run resumed with train.resume=auto produces bit for
 * bit the losses of an unbroken run at the same thread count.
 *
 * train.resume: "never" starts fresh and refuses a run.dir that already holds
 * checkpoints (CT_ERR_ARG: resume with auto, or pick another run.dir); "auto"
 * continues from the newest checkpoint that verifies (damaged newer ones are
 * skipped with a warning) or starts fresh when there is none; a PATH names a
 * checkpoint directory that must verify. A checkpoint of another model shape,
 * or of another global batch (train.batch_size x ranks), seq_len, grad_accum,
 * seed or data.shuffle, is refused (CT_ERR_ARG naming both values), and so is
 * model.init_from with
 * a PATH, or with an auto checkpoint that recorded another model.init_from.
 * On resume, metrics.jsonl keeps its lines up to the checkpoint's step
 * (rewritten atomically) and grows from there.
 *
 * Stability guard: a step whose loss or gradient is not finite, or whose loss
 * or gradient norm is a z-score spike against recent good steps
 * (guard.window, guard.zscore, guard.min_steps), is skipped: no update.
 * guard.max_bad bad steps in a row roll back: the weights, moments and guard
 * window of the newest valid checkpoint older than the bad run are restored
 * (the initial weights and zero moments when there is none), the step counter
 * and the data position stay where they are (the data since that checkpoint
 * is not seen again), and the LR is multiplied by guard.lr_factor (cumulative).
 * More than guard.max_rollbacks rollbacks end the run with CT_ERR_NUMERIC.
 * Periodic checkpoints are postponed while a bad run is open, so every one of
 * them is a state to roll back to.
 *
 * fp16 loss scaling (train.precision=fp16, as torch's GradScaler): the seed
 * gradient of the loss is S times the true one (S from train.loss_scale_init,
 * or the static train.loss_scale). A step whose gradient is not finite while
 * its loss is overflowed: its update is skipped, S halves (CT_ERR_NUMERIC when
 * it would fall below 1), and the guard never sees it. Otherwise the guard,
 * clipping and the metrics see the gradient norm / S, AdamW the gradient
 * times clip / S, and after train.loss_scale_window good steps in a row S
 * doubles. S and the good-step count are in the checkpoint and are restored
 * on resume and rollback.
 *
 * Data parallel (hooks->dist with more than one rank; every rank calls
 * ct_train_run_with with the same config): the ranks first compare their
 * resolved configs (a difference is CT_ERR_ARG on every rank, naming the
 * first differing line) and agree on the outcome of setup, so a bad input on
 * any rank ends every rank with the reason before anything is written. All
 * ranks start from rank 0's weights. train.batch_size is per rank: rank r
 * of w reads its own window of each global batch (see the loader), weights
 * its loss by 1/w, and the gradients are summed by allreduces over buckets of
 * dist.bucket_mb, started during the last micro-batch's backward
 * (dist.overlap) and finished before the guard, so the loss, the gradient,
 * the norm, the guard's verdicts and the stop flag are the same on every
 * rank; N ranks at batch B train like one process at N*B (sequential data).
 * dist.zero=1 (ZeRO-1): each rank keeps the AdamW moments of its
 * ceil(numel/N) shard and updates only that shard, then the parameters are
 * all-gathered (bit-identical to ZeRO off). Rank 0 alone writes run.dir
 * (config.yaml, metrics.jsonl, TensorBoard, checkpoints, the final weights);
 * for a checkpoint it gathers the ZeRO moments, so checkpoints have the
 * one-process format. A resume may change the rank count when the global
 * batch (train.batch_size x ranks) stays and data.shuffle is false (a
 * shuffled run keeps both); run.dir must be visible to every rank (the
 * ranks check they resume the same step). Every wait for other ranks ends
 * after dist.timeout_s with CT_ERR_DIST; errors no other rank knows of (see
 * ct_dist_failed_together) leave the job to be aborted by the program.
 */

typedef struct ct_step_info {
    int64_t step, steps;
    double epoch;          /* passes over the training data after this step (2.5: halfway
                            * through the third) */
    int64_t epochs;        /* train.epochs (0: the run is counted in steps) */
    int64_t counted;       /* instruction data: targets the loss counted, all ranks; 0 else */
    double loss, lr, grad_norm, tokens_per_s, step_ms;
    double val_loss;       /* NaN when no validation ran this step */
    int64_t val_tokens;    /* tokens that validation scored (0 when none ran) */
    bool skipped;          /* update skipped (non-finite loss or gradient, or a spike) */
    bool spike;            /* skipped as a loss or grad-norm spike */
    bool overflow;         /* train.precision=fp16: skipped as a loss-scale overflow (the
                            * scaled gradient was not finite, the loss was); the guard
                            * does not see such a step */
    double loss_scale;     /* train.precision=fp16: the loss scale this step ran with;
                            * 0 for other precisions */
    bool rolled_back;      /* this step ended a bad run with a rollback */
    bool checkpointed;     /* a checkpoint of this step was written */
    int64_t rollback_to;   /* step of the restored checkpoint (0: initial state); -1: none */
    int64_t skipped_total; /* bad steps so far in the run (resumes included) */
    int64_t rollbacks;     /* rollbacks so far */
    double lr_factor;      /* product of guard.lr_factor over the rollbacks */
    double data_wait_ms;   /* time this step waited for its batches */
    int64_t mem_bytes;     /* bytes held by the context's allocator after the step */
    /* the monitor's figures (metrics.jsonl's train-line keys of the same names) */
    double t_data_ms, t_fwd_ms, t_bwd_ms, t_opt_ms; /* the step time split */
    double t_comm_ms;      /* time spent communicating with the other ranks (gradient
                            * allreduce, exchanges, ZeRO gathers; the part overlapping
                            * the backward counts in both); 0 alone */
    double gflops;         /* achieved model GFLOP/s */
    double mfu;            /* gflops / measured GEMM peak; NaN when unknown */
    double mfu_theory;     /* gflops / theoretical ISA x cores x clock peak; NaN when unknown */
    int64_t rss_bytes, rss_peak_bytes; /* resident set after the step and its high-water mark */
    int64_t major_faults;  /* major page faults during the step */
    int64_t host_waits;    /* on a device: the times the step waited for work it had queued
                            * (1 is the ideal, the read of its loss and gradient norm);
                            * 0 on the CPU, where nothing is queued */
    double gpu_util_pct;   /* a GPU watched through NVML: its latest utilisation (%) */
    double gpu_power_w;    /* and board power (W); both NaN when not watched */
    int alert_level;       /* the standing alert shown: 0 none, 1 warning, 2 critical */
    char alert[224];       /* "memory: RSS ... (warning above 90%)"; "" when none */
} ct_step_info;

typedef void (*ct_progress_fn)(const ct_step_info *info, void *user);

/* What the caller hands the loop. Every field may be NULL. */
typedef struct ct_train_hooks {
    ct_progress_fn progress; /* called after every step (and its checkpoint) */
    void *user;              /* passed to progress */
    /* Polled after every step: when *stop is non-zero the loop writes a
     * checkpoint of that step and the final weights, and returns CT_OK with
     * result->end = CT_TRAIN_END_STOPPED. A signal handler may set it (the
     * library installs no handlers and keeps no global state). */
    volatile sig_atomic_t *stop;
    /* The ranks of an mpirun job (ctrain/dist.h); NULL: one process. Every
     * rank calls ct_train_run_with with the same config; see "Data parallel"
     * above. */
    ct_dist *dist;
} ct_train_hooks;

typedef enum ct_train_end {
    CT_TRAIN_END_DONE = 0,       /* train.steps reached */
    CT_TRAIN_END_STOPPED = 1,    /* *hooks->stop was set */
    CT_TRAIN_END_EARLY_STOP = 2, /* validation loss stopped improving */
    CT_TRAIN_END_COUNT
} ct_train_end;

typedef struct ct_train_result {
    ct_train_end end;
    int stop_value;        /* *hooks->stop as seen when stopping; 0 otherwise */
    int64_t resumed_from;  /* checkpoint step the run continued from; -1: fresh */
    int64_t last_step;     /* last step completed */
    int64_t skipped, spikes, rollbacks; /* guard counters (resumes included) */
    double final_loss;     /* training loss of the last step; NaN when none ran */
    double best_val_loss;  /* best validation loss; NaN when none ran */
    char checkpoint[CT_PATH_MAX + 64]; /* last checkpoint written; "" when none */
} ct_train_result;

/* Run `ctrain train`: build or load the model, resume when asked, open data,
 * train, evaluate, write run.dir/metrics.jsonl, run.dir/config.yaml, the
 * TensorBoard file, checkpoints (every run.checkpoint_every steps and at the
 * end when that is set; on a stop or early stop always) and the final weights
 * (run.dir/config.json + model.safetensors). Everything the config names and
 * the checkpoint to resume from are checked before anything is written.
 * hooks and result may be NULL; *result is filled also on error (as far as
 * the run got). Borrows ctx and cfg. Errors: CT_ERR_ARG (bad or
 * contradictory config, unusable checkpoint), CT_ERR_IO (files, full disk:
 * the checkpoints already written stay valid), CT_ERR_FORMAT, CT_ERR_OOM,
 * CT_ERR_NUMERIC (more than guard.max_rollbacks rollbacks, or an fp16 loss
 * scale that would fall below 1). */
CT_API ct_status ct_train_run_with(ct_ctx *ctx, const ct_config *cfg, const ct_train_hooks *hooks,
                                   ct_train_result *result);

/* ct_train_run_with with only a progress callback (progress may be NULL). */
CT_API ct_status ct_train_run(ct_ctx *ctx, const ct_config *cfg, ct_progress_fn progress,
                              void *user);

/* Resolve the model of a config (init_from, preset or explicit sizes). */
CT_API ct_status ct_model_config_from(ct_model_config *out, const ct_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
