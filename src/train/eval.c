/*
 * Scoring a model on token shards (see eval.h): a sequential loader over the
 * data, one inference forward per batch, the mean of the batch losses in
 * double; and finding the weights behind a model, checkpoint or run directory.
 */
#include "train/eval.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "ctrain/train.h"
#include "train/checkpoint.h"

ct_eval_opts ct_eval_opts_default(void) {
    ct_eval_opts o;
    memset(&o, 0, sizeof o);
    o.split = "val";
    o.B = 4;
    o.T = 64;
    o.prefetch = 2;
    return o;
}

static ct_status eval_check_opts(const ct_model *m, const ct_eval_opts *o) {
    const ct_model_config *mc = ct_model_get_config(m);
    if (!o->data || !o->data[0])
        return CT_ERR(CT_ERR_ARG, "no data to score: expected a shard file, glob or directory");
    if (o->B < 1 || o->T < 1)
        return CT_ERR(CT_ERR_ARG, "batch shape B=%d T=%d: expected both >= 1", o->B, o->T);
    if (o->T > mc->n_ctx) {
        ct_status st = CT_ERR(CT_ERR_ARG, "sequence length T=%d exceeds the model's context "
                              "n_ctx = %d", o->T, mc->n_ctx);
        ct_error_hint("score with T <= %d", mc->n_ctx);
        return st;
    }
    if (o->batches < 0)
        return CT_ERR(CT_ERR_ARG, "batches = %" PRId64 ": expected >= 0 (0: all the data once)",
                      o->batches);
    if (o->prefetch < 0)
        return CT_ERR(CT_ERR_ARG, "prefetch = %d: expected >= 0", o->prefetch);
    return CT_OK;
}

ct_status ct_eval_run(ct_ctx *ctx, ct_model *m, const ct_eval_opts *o, ct_eval_result *out) {
    memset(out, 0, sizeof *out);
    ct_status st = eval_check_opts(m, o);
    if (st) return st;
    const ct_model_config *mc = ct_model_get_config(m);
    ct_loader *ld = NULL;
    int32_t *in = NULL, *tg = NULL;
    if ((st = ct_model_reserve(m, o->B, o->T, false))) return st;

    ct_loader_opts lo = ct_loader_opts_default();
    lo.spec = o->data;
    lo.split = o->split ? o->split : "val";
    lo.B = o->B;
    lo.T = o->T;
    lo.vocab_size = mc->vocab_size;
    lo.shuffle = false;
    lo.seed = 0;
    lo.prefetch = o->prefetch;
    if ((st = ct_loader_init(&ld, &lo))) {
        if (st == CT_ERR_ARG && !ct_last_hint()[0])
            ct_error_hint("each shard must hold at least B*T+1 = %" PRId64 " tokens; score "
                          "with a smaller batch size or sequence length",
                          (int64_t)o->B * o->T + 1);
        return st;
    }
    size_t n = (size_t)o->B * (size_t)o->T;
    in = ct_alloc(ctx, n * sizeof *in, CT_TAG_DATA);
    tg = ct_alloc(ctx, n * sizeof *tg, CT_TAG_DATA);
    if (!in || !tg) {
        st = ct_last_status();
        goto done;
    }
    int64_t total = o->batches ? o->batches : ct_loader_batches_per_epoch(ld);
    out->shards = ct_loader_num_shards(ld);
    out->data_tokens = ct_loader_total_tokens(ld);
    double t0 = ct_time_s(), sum = 0;
    for (int64_t i = 0; i < total; i++) {
        float loss;
        if ((st = ct_loader_next(ld, in, tg))) goto done;
        if ((st = ct_model_forward(m, in, tg, o->B, o->T, &loss))) goto done;
        if (!isfinite(loss)) {
            st = CT_ERR(CT_ERR_NUMERIC, "%s: batch %" PRId64 " of %" PRId64 " gives a "
                        "non-finite loss (%g)", o->data, i + 1, total, (double)loss);
            ct_error_hint("the model's weights hold NaN or Inf values");
            goto done;
        }
        /* same accumulation as the trainer's validation: float batch means, double sum */
        sum += loss;
        if (o->progress) o->progress(i + 1, total, sum / (double)(i + 1), o->user);
    }
    out->seconds = ct_time_s() - t0;
    out->batches = total;
    out->tokens = total * (int64_t)n;
    out->loss = sum / (double)total;
    out->perplexity = exp(out->loss);
done:
    ct_free(ctx, in);
    ct_free(ctx, tg);
    ct_loader_free(ld);
    return st;
}

static bool eval_exists(const char *dir, const char *name, bool want_dir) {
    char path[CT_PATH_MAX + 64];
    int r = snprintf(path, sizeof path, "%s/%s", dir, name);
    if (r < 0 || (size_t)r >= sizeof path) return false;
    struct stat sb;
    if (stat(path, &sb) != 0) return false;
    return want_dir ? S_ISDIR(sb.st_mode) : S_ISREG(sb.st_mode);
}

ct_status ct_eval_load_model(ct_model **out, ct_ctx *ctx, const char *path, char *resolved,
                             size_t cap, int64_t *step) {
    *out = NULL;
    if (step) *step = -1;
    char dir[CT_PATH_MAX + 64];
    struct stat sb;
    if (!path || !path[0]) return CT_ERR(CT_ERR_ARG, "no model directory given");
    if (stat(path, &sb) != 0) {
        ct_status st = CT_ERR(CT_ERR_IO, "%s: cannot open model directory: %s", path,
                              strerror(errno));
        ct_error_hint("expected a Hugging Face model directory (config.json + "
                      "model.safetensors), a ctrain checkpoint or a run directory");
        return st;
    }
    if (!S_ISDIR(sb.st_mode)) {
        ct_status st = CT_ERR(CT_ERR_ARG, "%s: not a directory", path);
        ct_error_hint("pass the directory that holds config.json and model.safetensors");
        return st;
    }
    ct_status st;
    if (!eval_exists(path, "config.json", false) && eval_exists(path, "checkpoints", true)) {
        /* a run directory that has no final weights yet: its newest valid checkpoint */
        int64_t s = -1;
        if ((st = ct_ckpt_latest(path, NULL, dir, sizeof dir, &s))) return st;
        if (step) *step = s;
        ct_log(CT_LOG_INFO, "%s has no final weights: scoring its newest valid checkpoint %s",
               path, dir);
    } else {
        int r = snprintf(dir, sizeof dir, "%s", path);
        if (r < 0 || (size_t)r >= sizeof dir)
            return CT_ERR(CT_ERR_ARG, "%s: path too long", path);
        if (eval_exists(dir, "MANIFEST.json", false)) {
            /* a checkpoint: its hashes must match before its weights are trusted */
            int64_t s = -1;
            if ((st = ct_ckpt_verify(dir, NULL, &s))) return st;
            if (step) *step = s;
        }
    }
    if (resolved) {
        int r = snprintf(resolved, cap, "%s", dir);
        if (r < 0 || (size_t)r >= cap)
            return CT_ERR(CT_ERR_ARG, "%s: path longer than the %zu bytes given for it", dir, cap);
    }
    return ct_model_load_hf(out, ctx, dir);
}
