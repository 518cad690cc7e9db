/*
 * Training: AdamW over the flat buffers, learning-rate schedules, the data
 * loader over llm.c token shards, and the training loop that `ctrain train`
 * runs (checkpoints with exact resume, the stability guard with rollback,
 * early stopping, a caller-owned stop flag).
 * Data-parallel training runs the same loop on every rank of an mpirun job
 * (ct_train_hooks.dist, see ctrain/dist.h).
 * Leaves out: LoRA (refused with a clear error), and signal handling itself
 * (the program installs handlers; the library only polls the flag it is
 * given).
 */
#ifndef CT_TRAIN_H
#define CT_TRAIN_H

#include <signal.h>

#include "ctrain/config.h"
#include "ctrain/core.h"
#include "ctrain/dist.h"
#include "ctrain/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- AdamW */

typedef struct ct_adamw_params {
    float beta1, beta2, eps, weight_decay;
} ct_adamw_params;

/* Moments m and v mirror the parameter range [lo, lo + n) of the flat buffer
 * (tag optim): all of it, or one rank's ZeRO-1 shard. They are one block:
 * v == m + n, so m[0 .. 2*n) covers both; m[i] belongs to parameter lo + i. */
typedef struct ct_adamw {
    ct_ctx *ctx;
    float *m, *v; /* (n) each, contiguous */
    size_t numel; /* parameters of the model */
    size_t lo, n; /* the range this optimizer updates: [lo, lo + n) of numel */
    int64_t t;    /* steps taken */
} ct_adamw;

/* Zeroed moments for numel parameters, t = 0. Fills *opt (owned; release with
 * ct_adamw_free; borrows ctx). CT_ERR_OOM. */
CT_API ct_status ct_adamw_init(ct_adamw *opt, ct_ctx *ctx, size_t numel);
/* The same for the range [lo, lo + n) of numel parameters only (ZeRO-1: one
 * rank's shard; n may be 0): moments of n elements, and ct_adamw_step
 * updates that range alone. CT_ASSERT lo + n <= numel. CT_ERR_OOM. */
CT_API ct_status ct_adamw_init_range(ct_adamw *opt, ct_ctx *ctx, size_t numel, size_t lo,
                                     size_t n);
CT_API void ct_adamw_free(ct_adamw *opt); /* NULL and a zeroed struct are fine */
/* One update with torch.optim.AdamW semantics of the optimizer's range;
 * weight decay only on parameters whose table entry has decay set (rank >=
 * 2). grad_scale multiplies the gradients first (clipping). Each element's
 * update is the same arithmetic whatever the range, so shards updated
 * separately equal one full update bit for bit. */
CT_API void ct_adamw_step(ct_adamw *opt, ct_model *model, const ct_adamw_params *p, float lr,
                          float grad_scale);
/* Global L2 norm of the gradient buffer (double accumulation). */
CT_API double ct_grad_norm(ct_model *model);
/* Sum of squares of the gradients [lo, lo + n) (double accumulation): one
 * rank's part of the global norm. */
CT_API double ct_grad_sumsq_range(ct_model *model, size_t lo, size_t n);
/* torch.nn.utils.clip_grad_norm_'s factor: min(1, max_norm / (norm + 1e-6)); 1 when
 * max_norm <= 0. */
CT_API float ct_clip_scale(double norm, double max_norm);

/* ------------------------------------------------------------- schedule */

typedef enum ct_sched_kind {
    CT_SCHED_CONSTANT = 0,
    CT_SCHED_COSINE = 1,
    CT_SCHED_LINEAR = 2,
    CT_SCHED_ONECYCLE = 3,
    CT_SCHED_COUNT
} ct_sched_kind;

typedef struct ct_schedule {
    ct_sched_kind kind;
    double lr;            /* peak */
    double min_lr;        /* floor of cosine/linear */
    int64_t warmup_steps; /* linear warmup (constant/cosine/linear) */
    int64_t total_steps;
    double pct_start, div_factor, final_div_factor; /* onecycle */
    bool anneal_linear;                             /* onecycle: linear instead of cos */
} ct_schedule;

/* Parse the schedule.* keys (names to enums once). */
CT_API ct_status ct_schedule_from_config(ct_schedule *s, const ct_config *cfg);
/* Learning rate of optimizer step `step` (0-based). */
CT_API double ct_schedule_lr(const ct_schedule *s, int64_t step);

/* --------------------------------------------------------------- loader */

/*
 * Batches of B x T tokens from llm.c token shards, streamed from read-only
 * mappings (shards need not fit in RAM), optionally read ahead by a background
 * thread, with an exact, serialisable position.
 *
 * A window is B*T+1 consecutive tokens of one shard starting at a multiple of
 * B*T; row b of the batch is tokens [p + b*T, p + b*T + T), targets shifted by
 * one.
 *
 * data.shuffle=false (llm.c's order): micro-batch m reads the window at token
 * (m*world + rank)*B*T of the current shard; when the world*B*T+1 tokens of
 * the next step of all ranks no longer fit, every rank moves to the next shard
 * (wrapping to the first) and starts again at rank*B*T. So world ranks at B
 * read exactly the rows one rank at world*B reads. Shards shorter than
 * world*B*T+1 tokens are passed over.
 *
 * data.shuffle=true: each epoch visits the shards in a seeded permutation of
 * their order and, within each shard, its windows in a seeded permutation;
 * both depend only on (seed, epoch, shard). Window i of that epoch order goes
 * to rank i % world; when the window count N is not a multiple of world, the
 * last N % world windows of the epoch's order are left out (a different set
 * each epoch), so every rank takes N / world batches per epoch and all ranks
 * change epoch together.
 *
 * One loader is used by one thread at a time (its own prefetch thread aside).
 */
typedef struct ct_loader ct_loader; /* opaque */

typedef struct ct_loader_opts {
    const char *spec;  /* shard file, glob or directory (borrowed during init) */
    const char *split; /* "train" | "val": a directory's <split>_*.bin; names data.<split>
                        * in errors */
    int B, T;          /* rows per micro-batch, tokens per row */
    int vocab_size;    /* every token must be < vocab_size; 0: unchecked */
    bool shuffle;      /* false: sequential llm.c order */
    uint64_t seed;     /* shuffle seed */
    int rank, world;   /* 0 <= rank < world */
    int prefetch;      /* batches a background thread reads ahead; 0: read on the
                        * caller's thread */
} ct_loader_opts;

/* split "train", B = T = 1, no vocabulary check, sequential, seed 0, rank 0 of
 * 1, prefetch 2; spec NULL (must be set). */
CT_API ct_loader_opts ct_loader_opts_default(void);

/* The exact position of a loader: plain data, fixed size (32 bytes, no
 * padding); a checkpoint stores its five fields. (epoch, index) alone fix the
 * next batch; shard and offset say where it lies and let ct_loader_set_pos
 * check that the position belongs to these shards, this batch shape, seed,
 * rank and mode. */
typedef struct ct_loader_pos {
    int64_t epoch;    /* completed passes over the data */
    int64_t index;    /* micro-batches this rank has taken in this epoch */
    int64_t offset;   /* first token of the next batch's window in its shard */
    int32_t shard;    /* that shard's index in the sorted shard list */
    int32_t shuffled; /* 1: taken from a shuffled loader; 0: sequential */
} ct_loader_pos;

/* Open the shards named by opts->spec (a file, a glob, or a directory, where
 * <split>_*.bin files are taken, else every *.bin; sorted by path). Every
 * shard's header is validated and, when vocab_size > 0, every token is checked
 * to be < vocab_size (one pass over the mapped tokens). Starts the prefetch
 * thread when opts->prefetch > 0. Returns owned *out; release with
 * ct_loader_free. Borrows opts.
 * Errors: CT_ERR_ARG (bad options; a shard shorter than one window; a token
 * >= vocab_size, naming the shard and the token's index; no window for this
 * rank; fewer shuffled windows than ranks), CT_ERR_IO (missing file, no match,
 * cannot start the thread), CT_ERR_FORMAT (bad shard, naming the path),
 * CT_ERR_OOM. */
CT_API ct_status ct_loader_init(ct_loader **out, const ct_loader_opts *opts);
/* Stop and join the prefetch thread, unmap the shards, free l. NULL is fine. */
CT_API void ct_loader_free(ct_loader *l);
/* Fill inputs(B,T) and targets(B,T) (caller-owned, B*T int32 each) with the
 * next batch and move past it. Blocks only while the prefetch ring is empty.
 * An error while reading (also one met by the prefetch thread, carried over
 * with its message) is returned when the failing batch is reached; the
 * position stays on that batch, so later calls return the same error until
 * ct_loader_set_pos, ct_loader_skip or ct_loader_reset moves it.
 * Errors: CT_ERR_FORMAT (a version 2 token above INT32_MAX when vocab_size
 * is 0), CT_ERR_ARG. */
CT_API ct_status ct_loader_next(ct_loader *l, int32_t *inputs, int32_t *targets);
/* Back to the first batch of epoch 0 (what init starts with); drops batches
 * read ahead and restarts the prefetch thread there. */
CT_API void ct_loader_reset(ct_loader *l);
/* The position of the next batch ct_loader_next returns (never counting
 * batches only read ahead). Call it from the thread that calls
 * ct_loader_next (it updates a cache inside l). */
CT_API void ct_loader_get_pos(ct_loader *l, ct_loader_pos *out);
/* Continue from pos (from ct_loader_get_pos of a loader over the same shards,
 * B, T, seed, world and mode, of this rank or of rank 0, since (epoch, index)
 * is the same on every rank): from here on the batches are exactly
 * those an uninterrupted loader would have returned. Drops batches read ahead
 * and restarts the prefetch thread. Borrows pos.
 * Errors: CT_ERR_ARG when pos does not fit this loader (negative epoch, index
 * past the epoch, shard out of range, shard/offset not where (epoch, index)
 * lead, other mode); the loader is then unchanged. */
CT_API ct_status ct_loader_set_pos(ct_loader *l, const ct_loader_pos *pos);
/* Skip n >= 0 micro-batches: the same position as taking n batches, without
 * reading them (batches already read ahead are reused). CT_ERR_ARG for n < 0. */
CT_API ct_status ct_loader_skip(ct_loader *l, int64_t n);
/* Seconds the last ct_loader_next spent before returning (waiting for the
 * prefetch thread, or reading when prefetch is 0), and the total over all
 * calls since init. */
CT_API double ct_loader_wait_s(const ct_loader *l);
CT_API double ct_loader_wait_total_s(const ct_loader *l);
/* Micro-batches this rank takes per epoch. */
CT_API int64_t ct_loader_batches_per_epoch(const ct_loader *l);
CT_API int64_t ct_loader_total_tokens(const ct_loader *l);
CT_API int ct_loader_num_shards(const ct_loader *l);

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
    double loss, lr, grad_norm, tokens_per_s, step_ms;
    double val_loss;       /* NaN when no validation ran this step */
    bool skipped;          /* update skipped (non-finite loss or gradient, or a spike) */
    bool spike;            /* skipped as a loss or grad-norm spike */
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
 * CT_ERR_NUMERIC (more than guard.max_rollbacks rollbacks). */
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
