/*
 * Scoring a model on token shards: the mean cross-entropy over a fixed,
 * sequential set of B x T windows (llm.c's order, no shuffle) and its
 * perplexity, exp(mean loss). `ctrain eval` is built on it, and it scores
 * exactly the windows the trainer's validation pass reads for the same data,
 * B, T and batch count. Also finds the weights to score in a model directory,
 * a ctrain checkpoint directory or a run directory, and loads a PEFT LoRA
 * adapter (a LoRA run) onto its base, unmerged or merged in memory.
 * Leaves out: sliding-window (strided) perplexity, per-document scoring,
 * shuffled or multi-rank evaluation, and anything that writes files.
 */
#ifndef CT_EVAL_H
#define CT_EVAL_H

#include "ctrain/config.h"
#include "ctrain/core.h"
#include "ctrain/model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Called after each scored batch: batches done so far, the batches planned
 * and the running mean loss. */
typedef void (*ct_eval_progress_fn)(int64_t done, int64_t total, double mean_loss, void *user);

typedef struct ct_eval_opts {
    const char *data;    /* shard file, glob or directory (borrowed during the run) */
    const char *split;   /* a directory's <split>_*.bin are taken when present, else every
                          * *.bin; NULL: "val" */
    int B, T;            /* rows per batch, tokens per row */
    int64_t batches;     /* batches to score; 0: every full window of the data once. More
                          * than the data holds wraps to its start, as the trainer does */
    int prefetch;        /* batches a background thread reads ahead; 0: none */
    ct_eval_progress_fn progress; /* may be NULL */
    void *user;                   /* passed to progress */
} ct_eval_opts;

typedef struct ct_eval_result {
    double loss;       /* mean cross-entropy per target token, nats */
    double perplexity; /* exp(loss) */
    int64_t tokens;    /* targets scored: batches * B * T */
    int64_t batches;   /* batches scored */
    int64_t data_tokens; /* tokens in the shards that were opened */
    int shards;        /* shards opened */
    double seconds;    /* wall time of the scoring loop */
} ct_eval_result;

/* data NULL, split "val", B = 4, T = 64, batches 0 (all), prefetch 2, no
 * progress callback. */
ct_eval_opts ct_eval_opts_default(void);

/* Score m on o->data. Reserves m for inference at (B, T) when it is not
 * reserved yet (a model already reserved for another shape gives CT_ERR_ARG).
 * Batch i of the run is the loader's sequential batch i, so the result equals
 * the trainer's validation loss over the same batches: the mean of the
 * per-batch mean losses, summed in double. Borrows ctx, m and o; fills *out.
 * Errors: CT_ERR_ARG (bad B, T or batches; T above the model's n_ctx; a shard
 * shorter than one batch, naming it; a token >= the model's vocab_size,
 * naming the shard and the token's index), CT_ERR_IO (no such file or no
 * shard matches), CT_ERR_FORMAT (a malformed shard), CT_ERR_NUMERIC (a
 * non-finite loss, naming the batch), CT_ERR_OOM. */
ct_status ct_eval_run(ct_ctx *ctx, ct_model *m, const ct_eval_opts *o, ct_eval_result *out);

/* Load the weights that `path` names:
 *   - a directory with config.json: a Hugging Face model directory, a run
 *     directory's final weights, or a checkpoint step_XXXXXXXX/ directory; when
 *     it holds a checkpoint MANIFEST.json, the manifest and every file's hash
 *     are verified first;
 *   - a directory with adapter_config.json and no config.json: a PEFT LoRA
 *     adapter (a LoRA run's directory or checkpoint, or any PEFT adapter
 *     directory), loaded onto its base as ct_eval_load does with no options;
 *   - a run directory without config.json or adapter_config.json but with
 *     checkpoints/: its newest checkpoint that verifies.
 * The directory the weights came from goes to resolved (cap bytes; may be
 * NULL) and the checkpoint's step to *step (-1 when the directory is not a
 * checkpoint; may be NULL). Returns owned *out; release with ct_model_free.
 * Errors: CT_ERR_IO (missing directory or file, naming it; no valid
 * checkpoint; an adapter's base not found, see ct_eval_load), CT_ERR_FORMAT
 * (bad config.json, safetensors or a checkpoint whose hashes do not match,
 * naming the file), CT_ERR_ARG (resolved too small), CT_ERR_OOM. */
ct_status ct_eval_load_model(ct_model **out, ct_ctx *ctx, const char *path, char *resolved,
                             size_t cap, int64_t *step);

#define CT_EVAL_PATH_MAX (CT_PATH_MAX + 64) /* bytes of a ct_eval_source path */

typedef struct ct_eval_load_opts {
    const char *base; /* an adapter's base model directory; NULL: the one the adapter's
                       * files name (borrowed) */
    bool merge;       /* fold an adapter into the base weights (W += alpha/r * B A in
                       * double), leaving a plain model the KV-cache decoder runs; false:
                       * the adapter stays attached (PEFT's unmerged forward, the
                       * trainer's own validation) */
} ct_eval_load_opts;

/* Where ct_eval_load found the weights. */
typedef struct ct_eval_source {
    char dir[CT_EVAL_PATH_MAX];      /* the weights' (or the adapter's) directory */
    int64_t step;                    /* its checkpoint step; -1 when not a checkpoint */
    bool adapter;                    /* dir holds a PEFT LoRA adapter, applied to base */
    bool merged;                     /* the adapter was folded into the base */
    char base[CT_EVAL_PATH_MAX];     /* adapter: the base model directory; "" when the
                                      * base was rebuilt from a run's config.yaml (a LoRA
                                      * run on freshly initialised weights) */
    char base_from[CT_EVAL_PATH_MAX + 64]; /* adapter: what named the base ("given",
                                      * "D/adapter_config.json", "R/config.yaml ...") */
    ct_lora_opts lora;               /* adapter: r, alpha, targets (dropout 0) */
    char tok_dir[CT_EVAL_PATH_MAX];  /* the directory whose tokenizer files go with the
                                      * weights: dir when it holds any, else the base */
} ct_eval_source;

/* ct_eval_load_model with options (o NULL: defaults) that also reports where
 * the weights came from in *src (caller-owned). An adapter's base is, in
 * order: o->base; base_model_name_or_path in the adapter's
 * adapter_config.json; for a run directory R (the adapter's directory, or R
 * of R/checkpoints/step_N), R/adapter_config.json's base and then
 * model.init_from in R/config.yaml; when that is empty, the run trained on
 * freshly initialised weights and the base is rebuilt from R/config.yaml
 * (model.preset or sizes, seeded with train.seed) exactly as the trainer
 * built it. A relative base path is taken from the working directory.
 * Errors: those of ct_eval_load_model; CT_ERR_IO when the base cannot be
 * found (naming adapter_config.json, the base path it names, with a hint for
 * an explicit base or `ctrain merge`); CT_ERR_ARG for o->base with a path
 * that holds no adapter; CT_ERR_FORMAT for an adapter that does not fit its
 * base (naming the file and tensor). */
ct_status ct_eval_load(ct_model **out, ct_ctx *ctx, const char *path,
                       const ct_eval_load_opts *o, ct_eval_source *src);

#endif
