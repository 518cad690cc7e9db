/*
 * Internals of the training loop shared by trainer.c (the loop, checkpoints,
 * rollbacks, evaluation, metrics) and trainer_setup.c (resolving the model,
 * the checkpoint to resume from and the contradictions between the config
 * and that checkpoint, before anything is written). Not installed.
 */
#ifndef CT_TRAINER_INT_H
#define CT_TRAINER_INT_H

#include "ctrain/dist.h"
#include "ctrain/train.h"
#include "io/metrics.h"
#include "io/tensorboard.h"
#include "train/checkpoint.h"
#include "train/guard.h"
#include "train/run_dir.h"
#include "train/train_state.h"
#include "perf/hwinfo.h"
#include "perf/memplan.h"
#include "perf/gpu_watch.h"
#include "perf/monitor.h"
#include "core/trace.h"

#define TRAINER_SIG_MAX 512
#define TRAINER_DIR_MAX (CT_PATH_MAX + 64)

typedef struct trainer {
    ct_ctx *ctx;                 /* borrowed */
    const ct_config *cfg;        /* &cfg_run */
    ct_config cfg_run;           /* the caller's config, train.steps resolved from
                                  * train.epochs */
    const ct_train_hooks *hooks; /* borrowed; never NULL (an empty one) */
    ct_train_result *res;        /* borrowed; never NULL */
    ct_model *model;
    ct_loader *train, *val;
    ct_metrics *metrics;
    ct_tb *tb;
    ct_adamw opt;
    int32_t *in, *tg; /* (B,T) each */
    int32_t *pos;     /* (B,T): positions inside examples (instruction data) */
    bool masked;      /* the training data masks targets (ct_loader_masked) */
    int64_t step_counted; /* counted targets of the step, all ranks */
    ct_schedule sched;
    ct_adamw_params ap;
    ct_ckpt_opts ckpt_opts;
    char signature[TRAINER_SIG_MAX]; /* ct_ckpt_signature of the model */
    int B, T;
    int64_t accum;
    ct_model_opts mopts; /* recompute and activation storage, resolved by the planner */
    ct_run_plan plan;    /* the memory plan the run fits under run.memory_limit */
    size_t mem_limit;    /* bytes */
    int64_t bad_first, bad_last; /* debug.bad_steps; 0, -1 when off */

    /* the monitor (perf/monitor.h) */
    ct_hwinfo hw;        /* this machine, read during setup */
    double gemm_peak;    /* GFLOP/s MFU is measured against; 0: unknown */
    int gemm_n;          /* sgemm size of the measured peak; 0: from alerts.gemm_peak_gflops */
    bool gpu;            /* the run's backend is a GPU: the peaks below are its */
    double gpu_theory;   /* the GPU's theoretical peak at the run's precision; 0 unknown */
    size_t dev_peak;     /* a device run: the most device memory in use so far (bytes) */
    ct_monitor mon;
    int64_t faults_prev; /* major page faults before the current step */
    /* the GPU through NVML (perf/gpu_watch.h), rank 0 of a GPU run */
    ct_gpu_watch *gwatch;  /* owned; NULL: not watched (a CPU run, no NVML) */
    ct_gpu_sample gsample; /* the latest reading */
    double gwatch_at;      /* ct_time_s of that reading; 0: none yet */
    ct_gpu_util_rule gutil; /* utilisation below 90% for a minute */

    /* data parallel (trainer_dist.c); one process: dist NULL or world 1 */
    ct_dist *dist;        /* borrowed from the hooks */
    int rank, world;
    bool zero;            /* dist.zero=1: opt holds this rank's shard */
    size_t shard_lo, shard_n; /* this rank's part of the flat buffer */
    size_t bucket;        /* gradient elements per allreduce */
    bool stop_seen;       /* the stop flag, agreed at the last step */
    int stop_value;
    double *xbuf;         /* (3 * world) values exchanged between ranks */
    float *stage;         /* (numel) host mirror of the trainable weights or
                           * gradients for MPI, when the backend's memory is
                           * not host memory; NULL otherwise */

    /* run.trace: the recorder and the profiling wrapper feeding it kernel spans */
    ct_trace *trace;               /* owned; NULL when run.trace is off */
    struct ct_kprof *kprof;        /* owned; NULL when run.trace is off */
    int64_t trace_first, trace_last; /* the traced steps, inclusive */

    /* train.precision=fp16: the loss scaler (torch's GradScaler); the seed
     * gradient of the loss is loss_scale times the true one
     * (trainer_batch_weight), so every gradient is too */
    bool fp16;          /* the run scales its loss */
    bool ls_dynamic;    /* the scale moves (train.loss_scale=dynamic) */
    double loss_scale;  /* S; 1 when not fp16 */
    int64_t ls_good;    /* good steps since S last changed (dynamic) */

    /* the run's state: what a checkpoint stores */
    int64_t step; /* loop steps done */
    ct_guard guard;
    double best_val;  /* NaN: no validation yet */
    int64_t best_step;    /* step of best_val's checkpoint (run.keep_best); -1: none */
    int64_t best_due;     /* step whose checkpoint holds a new best, once written; 0: none */
    int64_t eval_batches; /* micro-batches per validation (this rank's) */
    int64_t bad_evals;
    bool ckpt_pending;
    int64_t remote_retries_logged; /* remote data: retries as of the last "remote" line */
    bool data_failed;     /* the step failed reading its data (every rank's failure was that) */
    int64_t ckpt_step;    /* step of the last checkpoint written or resumed from; -1: none */

    /* run.dir: locked by rank 0 from setup to the end */
    run_lock *lock;                 /* owned; NULL on other ranks */
    bool clear_dir;                 /* run.overwrite: remove the earlier run's results */

    /* debug.dump_dropout: the masks of that step's micro-batches (rank 0),
     * gathered as the step runs; NULL otherwise */
    struct trainer_drop_dump *drop_dump;

    /* resume */
    int64_t resume_step;            /* -1: fresh */
    char resume_dir[TRAINER_DIR_MAX];
    ct_train_state *resume_state;   /* owned; read during setup */
} trainer;

/* Check the config, resolve the model (built, loaded from model.init_from or
 * from the checkpoint to resume from), pick that checkpoint and check it
 * against the config; open the loaders and restore the state. Writes nothing.
 * On error t holds what was acquired (trainer_release frees it). */
ct_status trainer_setup(trainer *t);
/* The GEMM peak for MFU (alerts.gemm_peak_gflops, else a short sgemm
 * benchmark on t->ctx) and the hardware profile; before the model allocates,
 * so the benchmark's buffers are gone before the run's memory is. */
ct_status trainer_measure_peak(trainer *t);
/* The monitor's parameters from the config, the model and the plan. */
void trainer_monitor_init(trainer *t);
/* Free everything t holds (safe on a partly set-up trainer). */
void trainer_release(trainer *t);
/* Current guard parameters from the config. */
ct_guard_params trainer_guard_params(const ct_config *cfg);

/* The next micro-batch of loader l into t->in and t->tg, and its positions
 * handed to the model (rows of whole examples; plain rows clear them).
 * *counted: its counted targets (B*T for plain data). The loader's errors. */
ct_status trainer_next_batch(trainer *t, ct_loader *l, int64_t *counted);
/* The share of the step's loss a micro-batch of `counted` targets carries:
 * counted / t->step_counted, so every counted target of the step weighs the
 * same (plain data: exactly 1/(grad_accum x ranks) in float), times the
 * fp16 loss scale (1 otherwise): the seed of every gradient. */
float trainer_batch_weight(const trainer *t, int64_t counted);

/* The loss scaler of an fp16 run from s (a checkpoint's state, its scale
 * and good-step count; NULL, or a record without them: the start values,
 * train.loss_scale_init or the static train.loss_scale); S = 1 for other
 * precisions. After t->mopts is known. */
void trainer_loss_scale_set(trainer *t, const ct_train_state *s);

/* CT_STATE_DATA_* flags of the run's training data (train_state.h). */
int64_t trainer_data_flags(const trainer *t);

/* trainer_dist.c: the data-parallel parts of setup and of a step. */
/* True on the rank that writes run.dir (rank 0). */
bool trainer_root(const trainer *t);
/* Rank, world and shard of the run from the hooks' communicator, and the
 * first collective: every rank's resolved config must be rank 0's. */
ct_status trainer_dist_begin(trainer *t);
/* After a setup every rank agreed on: the ranks resume the same checkpoint,
 * start from rank 0's weights, and rank 0 says how the run is split. */
ct_status trainer_dist_after_setup(trainer *t);
/* One step's micro-batches on every rank, the gradient average (allreduces
 * started during the last backward) and the agreement on the outcome:
 * *loss_sum is the sum over micro-batches of the ranks' mean loss; an error
 * on any rank is returned on every rank. *wait, *fwd and *bwd gain this
 * rank's data wait, forward and backward seconds. */
ct_status trainer_dist_micro_batches(trainer *t, int64_t step, double *loss_sum, double *wait,
                                     double *fwd, double *bwd);
/* Dropout masks of micro-batch a (0-based) of step `step`: the model's key
 * is a hash of train.seed and the step, and its row0 the global index of the
 * micro-batch's first row, (a*world + rank)*B, so the masks of a global row
 * do not depend on how many ranks or micro-batches share the step, and a
 * resumed run draws the masks of an unbroken one. With debug.dump_dropout
 * at this step, rank 0 also keeps the masks for trainer_dropout_write.
 * CT_ERR_OOM. */
ct_status trainer_dropout_micro(trainer *t, int64_t step, int64_t a);
/* Write the kept masks to run.dir/dropout_stepK.safetensors (F32, names
 * "mb<a>.embd", "mb<a>.h.<l>.attn_probs" (B,NH,T,T), "mb<a>.h.<l>.attn_resid",
 * "mb<a>.h.<l>.mlp_resid" (B,T,C), values 0 or 1/(1-p), only the sites whose
 * p > 0) and free them; nothing when none are kept. */
ct_status trainer_dropout_write(trainer *t, int64_t step);
/* Free kept masks (a step that failed). */
void trainer_dropout_free(trainer *t);
/* Global gradient norm from every rank's shard (the same on every rank). */
ct_status trainer_dist_grad_norm(trainer *t, double *norm);
/* AdamW on this rank's range, then (ZeRO-1) the parameters all-gathered;
 * *wrote16: whether AdamW wrote the 16-bit weight copies (ct_adamw_step:
 * ZeRO off, precision bf16), else the caller refreshes them. */
ct_status trainer_dist_update(trainer *t, float lr, float scale, bool *wrote16);
/* Save the checkpoint of s on rank 0 (the ZeRO-1 moments gathered there
 * first); every rank returns the agreed outcome. */
ct_status trainer_save_state(trainer *t, const ct_train_state *s);
/* Sum of x over the ranks (validation losses), the same on every rank. */
ct_status trainer_dist_sum(trainer *t, double *x);

#endif
