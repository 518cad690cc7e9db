/*
 * Scoring a model on token shards: the mean cross-entropy over a fixed,
 * sequential set of B x T windows (llm.c's order, no shuffle) and its
 * perplexity, exp(mean loss). `ctrain eval` is built on it, and it scores
 * exactly the windows the trainer's validation pass reads for the same data,
 * B, T and batch count. Also finds the weights to score in a model directory,
 * a ctrain checkpoint directory or a run directory.
 * Leaves out: sliding-window (strided) perplexity, per-document scoring,
 * shuffled or multi-rank evaluation, and anything that writes files.
 */
#ifndef CT_EVAL_H
#define CT_EVAL_H

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
 *   - a run directory without config.json but with checkpoints/: its newest
 *     checkpoint that verifies.
 * The directory the weights came from goes to resolved (cap bytes; may be
 * NULL) and the checkpoint's step to *step (-1 when the directory is not a
 * checkpoint; may be NULL). Returns owned *out; release with ct_model_free.
 * Errors: CT_ERR_IO (missing directory or file, naming it; no valid
 * checkpoint), CT_ERR_FORMAT (bad config.json, safetensors or a checkpoint
 * whose hashes do not match, naming the file), CT_ERR_ARG (resolved too
 * small), CT_ERR_OOM. */
ct_status ct_eval_load_model(ct_model **out, ct_ctx *ctx, const char *path, char *resolved,
                             size_t cap, int64_t *step);

#endif
