/*
 * The trainer's side of a checkpoint: what goes into the blobs the store
 * (checkpoint.h) keeps beside the weights, how it is read back into a model,
 * an optimizer and a state record, and the trimming of metrics.jsonl on
 * resume.
 *
 * Blobs of a checkpoint:
 *   "optimizer"  AdamW's moments: m then v, 2*numel little-endian float32
 *                (numel of the trainable parameters: a LoRA run's adapter),
 *                written straight from the optimizer's block (no copy on
 *                little-endian hosts); under ZeRO-1 rank 0 gathers the shards
 *                first, so the format does not depend on the rank count. Its
 *                step count is in "state".
 *   "state"      a versioned record, all integers and floats little-endian,
 *                field by field (format below).
 *
 * "state" format, version 4 (i64/u64: 8 bytes, i32/u32: 4, f64: IEEE double):
 *   u32 magic 0x53545443 (the bytes "CTTS"), u32 version 1,
 *   i64 step (loop steps done), i64 adam_t (updates applied), u64 numel,
 *   i64 batch_size, i64 seq_len, i64 grad_accum, i64 seed, i64 shuffle (0|1),
 *   loader position: i64 epoch, i64 index, i64 offset, i32 shard, i32 shuffled,
 *   i64 total_steps (train.steps when saved),
 *   guard: i64 window, f64 zscore, i64 min_steps, i64 max_bad, f64 lr_factor
 *          (the parameters), i64 count, count pairs (f64 loss, f64 norm)
 *          oldest first, i64 bad_run, i64 bad_start, i64 skipped, i64 spikes,
 *          i64 rollbacks, f64 lr_factor (the product so far),
 *   early stopping: f64 best_val (NaN: no validation yet), i64 bad_evals,
 *   i64 ckpt_pending (1: a periodic checkpoint was postponed and is due),
 *   u32 length + bytes: model.init_from of the run ("" when none),
 *   version 2 on: i64 world (ranks of the run; batch_size is per rank, and
 *   the loader position is rank 0's). Version 1 records read as world 1.
 *   version 3 on: i64 data_flags, i64 best_step (older: 0, -1).
 *   version 4 on: f64 loss_scale (train.precision=fp16: the scale after the
 *   step; 0 otherwise), i64 loss_scale_good (good steps since it last
 *   changed). Older records read as 0, 0: the run starts its scaler afresh.
 * No random-number state is stored: the loop draws no random numbers after
 * initialisation, and the shuffled order follows from (seed, loader position).
 *
 * Leaves out: the loop's decisions (when to save, what to restore on a
 * rollback): trainer.c makes them.
 */
#ifndef CT_TRAIN_STATE_H
#define CT_TRAIN_STATE_H

#include "ctrain/train.h"
#include "train/checkpoint.h"
#include "train/guard.h"

#define CT_TRAIN_STATE_MAGIC 0x53545443u
#define CT_TRAIN_STATE_VERSION 4

typedef struct ct_train_state {
    int64_t step;   /* loop steps done (the checkpoint's step) */
    int64_t adam_t; /* AdamW updates applied (skipped steps are not) */
    uint64_t numel; /* parameters */
    int64_t batch_size, seq_len, grad_accum, seed;
    bool shuffle;
    ct_loader_pos pos;   /* the next batch of the training loader */
    int64_t total_steps; /* train.steps of the run that saved it */
    ct_guard guard;      /* window, counters and LR factor */
    double best_val;     /* best validation loss; NaN when none ran */
    int64_t bad_evals;   /* validations since the best one */
    bool ckpt_pending;   /* a periodic checkpoint is postponed (guard's bad run) */
    char init_from[CT_PATH_MAX]; /* model.init_from of the run */
    int64_t world;               /* ranks of the run (batch_size is per rank) */
    /* version 3 (0 and -1 when reading older records) */
    int64_t data_flags; /* CT_STATE_DATA_*: how instruction data was batched */
    int64_t best_step;  /* step of the kept best checkpoint (run.keep_best); -1: none */
    /* version 4 (0 and 0 when reading older records) */
    double loss_scale;       /* train.precision=fp16: the loss scale after this step; 0: none
                              * (another precision, or an older record) */
    int64_t loss_scale_good; /* fp16, dynamic: good steps since the scale last changed */
} ct_train_state;

#define CT_STATE_DATA_SFT 1      /* the training shards held instruction examples */
#define CT_STATE_DATA_PACKING 2  /* data.packing */
#define CT_STATE_DATA_GROUPED 4  /* data.group_by_length */

/* Encode s as the "state" blob. Returns owned *out (release with free) and
 * its size in *len. CT_ERR_OOM. */
ct_status ct_train_state_encode(const ct_train_state *s, uint8_t **out, size_t *len);

/* Decode a "state" blob of len bytes into *s (borrows data). `where` names
 * the file in errors. CT_ERR_FORMAT (bad magic, other version, short or long
 * record, values out of range), naming where and the field. */
ct_status ct_train_state_decode(ct_train_state *s, const uint8_t *data, size_t len,
                                const char *where);

/* Save a checkpoint of step s->step into run_dir/checkpoints: the weights of
 * model, the moments of opt (opt->numel must equal the model's, and opt must
 * cover all of it: gather a ZeRO-1 shard first) and s. Borrows
 * everything; o as for ct_ckpt_save. The directory goes to out_dir (cap
 * bytes) when not NULL. Errors as ct_ckpt_save's (nothing of a failed save
 * remains). */
ct_status ct_train_state_save(const char *run_dir, ct_model *model, const ct_adamw *opt,
                              const ct_train_state *s, const ct_ckpt_opts *o, char *out_dir,
                              size_t cap);

/* Read the "state" record of checkpoint directory dir into *s (no weights).
 * Errors: those of ct_ckpt_read_blob and ct_train_state_decode. */
ct_status ct_train_state_read(const char *dir, ct_train_state *s);

/* Load checkpoint directory dir (verified by the caller) into model (its
 * weights; model NULL: the weights are not read), opt (the moments of its
 * range [lo, lo + n), and t = adam_t) and *s. The state and the moments are
 * read and checked first, the weights last: on error opt and *s are
 * unchanged (and model, unless the weights' read itself failed). Borrows all.
 * Errors: CT_ERR_FORMAT (a blob of the wrong size, another parameter count),
 * and those of ct_model_load_hf and ct_ckpt_read_blob. */
ct_status ct_train_state_load(const char *dir, ct_model *model, ct_adamw *opt,
                              ct_train_state *s);

/* Replace model's weights by those of the Hugging Face directory dir
 * (config.json + model.safetensors), which must have model's shape, read in
 * place (ct_model_load_hf_weights: every tensor's name, shape and dtype is
 * checked first, so only a read error part-way leaves the weights mixed).
 * With LoRA adapters attached only the adapter is replaced, from dir's PEFT
 * files (the frozen base is the run's own; the signature hashes it), and it
 * is restored on error. CT_ERR_ARG (another shape) and the errors of
 * ct_model_load_hf_weights. */
ct_status ct_train_state_load_weights(ct_model *model, const char *dir);

/* Keep the lines of run_dir/metrics.jsonl whose step is <= max_step (and
 * drop a torn last line), rewriting the file atomically when anything goes.
 * A missing file is fine. Errors: CT_ERR_IO, CT_ERR_OOM. */
ct_status ct_train_state_trim_metrics(const char *run_dir, int64_t max_step);

#endif
