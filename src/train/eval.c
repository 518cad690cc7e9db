/*
 * Scoring a model on token shards (see eval.h): a sequential loader over the
 * data, one inference forward per batch, the mean of the batch losses in
 * double; and finding the weights behind a model, checkpoint or run directory,
 * or a PEFT LoRA adapter and the base it was trained on.
 */
#include "train/eval.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>

#include "ctrain/data.h"
#include "ctrain/train.h"
#include "io/fileio.h"
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
    int32_t *in = NULL, *tg = NULL, *pos = NULL;
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
    pos = ct_alloc(ctx, n * sizeof *pos, CT_TAG_DATA);
    if (!in || !tg || !pos) {
        st = ct_last_status();
        goto done;
    }
    int64_t total = o->batches ? o->batches : ct_loader_batches_per_epoch(ld);
    out->shards = ct_loader_num_shards(ld);
    out->data_tokens = ct_loader_total_tokens(ld);
    /* rows of whole examples attend each to itself; the loss is the mean
     * over the counted targets (every target of plain data) */
    double t0 = ct_time_s(), sum = 0, counted = 0;
    for (int64_t i = 0; i < total; i++) {
        float loss;
        ct_loader_batch b = {.inputs = in, .targets = tg, .pos = pos};
        if ((st = ct_loader_next_batch(ld, &b))) goto done;
        if ((st = b.positions ? ct_model_set_positions(m, pos, o->B, o->T)
                              : ct_model_set_positions(m, NULL, 0, 0)))
            goto done;
        int64_t c = b.counted;
        if ((st = ct_model_forward(m, in, tg, o->B, o->T, &loss))) goto done;
        if (!isfinite(loss)) {
            st = CT_ERR(CT_ERR_NUMERIC, "%s: batch %" PRId64 " of %" PRId64 " gives a "
                        "non-finite loss (%g)", o->data, i + 1, total, (double)loss);
            ct_error_hint("the model's weights hold NaN or Inf values");
            goto done;
        }
        /* same accumulation as the trainer's validation: float batch means,
         * double sums weighted by the counted targets */
        sum += (double)loss * (double)c;
        counted += (double)c;
        if (o->progress)
            o->progress(i + 1, total, counted > 0 ? sum / counted : 0.0, o->user);
    }
    out->seconds = ct_time_s() - t0;
    out->batches = total;
    out->tokens = (int64_t)counted;
    out->loss = counted > 0 ? sum / counted : 0.0;
    out->perplexity = exp(out->loss);
done:
    ct_free(ctx, in);
    ct_free(ctx, tg);
    ct_free(ctx, pos);
    (void)ct_model_set_positions(m, NULL, 0, 0); /* the model may be used again */
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

/* Copy src into dst (cap bytes): CT_ERR_ARG naming what when it does not fit. */
static ct_status eval_copy(char *dst, size_t cap, const char *src, const char *what) {
    int r = snprintf(dst, cap, "%s", src);
    if (r < 0 || (size_t)r >= cap)
        return CT_ERR(CT_ERR_ARG, "%s: %s longer than the %zu bytes given for it", src, what, cap);
    return CT_OK;
}

/* Which directory path's weights are in (a run directory without final
 * weights: its newest valid checkpoint; a checkpoint: verified first), and
 * whether it holds an adapter. Fills src->dir, step, adapter. */
static ct_status eval_resolve(const char *path, ct_eval_source *src) {
    struct stat sb;
    if (!path || !path[0]) return CT_ERR(CT_ERR_ARG, "no model directory given");
    if (stat(path, &sb) != 0) {
        ct_status st = CT_ERR(CT_ERR_IO, "%s: cannot open model directory: %s", path,
                              strerror(errno));
        ct_error_hint("expected a Hugging Face model directory (config.json + "
                      "model.safetensors), a PEFT adapter (adapter_config.json + "
                      "adapter_model.safetensors), a ctrain checkpoint or a run directory");
        return st;
    }
    if (!S_ISDIR(sb.st_mode)) {
        ct_status st = CT_ERR(CT_ERR_ARG, "%s: not a directory", path);
        ct_error_hint("pass the directory that holds config.json and model.safetensors");
        return st;
    }
    ct_status st;
    if (!eval_exists(path, "config.json", false) && !eval_exists(path, "adapter_config.json", false) &&
        eval_exists(path, "checkpoints", true)) {
        /* a run directory that has no final weights yet: its newest valid checkpoint */
        if ((st = ct_ckpt_latest(path, NULL, src->dir, sizeof src->dir, &src->step))) return st;
        ct_log(CT_LOG_INFO, "%s has no final weights: using its newest valid checkpoint %s",
               path, src->dir);
    } else {
        if ((st = eval_copy(src->dir, sizeof src->dir, path, "path"))) return st;
        if (eval_exists(src->dir, "MANIFEST.json", false)) {
            /* a checkpoint: its hashes must match before its weights are trusted */
            if ((st = ct_ckpt_verify(src->dir, NULL, &src->step))) return st;
        }
    }
    /* Hugging Face's rule, except that full weights beside an adapter win */
    src->adapter = eval_exists(src->dir, "adapter_config.json", false) &&
                   !eval_exists(src->dir, "config.json", false);
    return CT_OK;
}

/* base_model_name_or_path of dir/adapter_config.json into base ("" when
 * absent, null or empty). */
static ct_status eval_adapter_names(const char *dir, char *base, size_t cap) {
    char path[CT_EVAL_PATH_MAX + 32];
    base[0] = '\0';
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    cJSON *root = NULL;
    ct_status st = ct_json_read_object(path, &root);
    if (st) return st;
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, "base_model_name_or_path");
    if (b && !cJSON_IsNull(b) && !cJSON_IsString(b))
        st = CT_ERR(CT_ERR_FORMAT, "%s: key \"base_model_name_or_path\" must be a string", path);
    else if (cJSON_IsString(b))
        st = eval_copy(base, cap, b->valuestring, "base_model_name_or_path");
    cJSON_Delete(root);
    return st;
}

/* The run directory R an adapter directory belongs to: dir itself when it
 * holds config.yaml, or R of R/checkpoints/step_N; "" when neither. */
static void eval_run_dir(const char *dir, char *run, size_t cap) {
    run[0] = '\0';
    if (eval_exists(dir, "config.yaml", false)) {
        snprintf(run, cap, "%s", dir);
        return;
    }
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t b = n; /* start of the last component */
    while (b > 0 && dir[b - 1] != '/') b--;
    if (n - b < 6 || strncmp(dir + b, "step_", 5) != 0 || b < 1) return;
    size_t pe = b; /* the parent: ".../checkpoints/" */
    while (pe > 1 && dir[pe - 1] == '/') pe--;
    size_t pb = pe;
    while (pb > 0 && dir[pb - 1] != '/') pb--;
    if (pe - pb != 11 || strncmp(dir + pb, "checkpoints", 11) != 0) return;
    size_t re = pb;
    while (re > 1 && dir[re - 1] == '/') re--;
    if (re == 0)
        snprintf(run, cap, ".");
    else
        snprintf(run, cap, "%.*s", (int)re, dir);
    if (!eval_exists(run, "config.yaml", false)) run[0] = '\0';
}

/* The hint of every base that cannot be found (named: the path named, or ""). */
static void eval_base_hint(const char *dir, const char *named) {
    bool hub = named[0] && named[0] != '/' && named[0] != '.' && strchr(named, '/') &&
               strchr(named, '/') == strrchr(named, '/');
    ct_error_hint("give the base model directory with --base DIR, or fold the adapter into its "
                  "base once (ctrain merge --base DIR --adapter %s --out MERGED) and use MERGED%s",
                  dir, hub ? "; a Hugging Face Hub name is not downloaded: download the model "
                  "and give its directory" : "");
}

/* Which base the adapter in src->dir goes on (see ct_eval_load): fills
 * src->base and src->base_from; *fresh gets the run's config (owned; free)
 * when the base is rebuilt from it. */
static ct_status eval_find_base(const ct_eval_load_opts *o, ct_eval_source *src,
                                ct_config **fresh) {
    const char *dir = src->dir;
    *fresh = NULL;
    if (o->base) {
        snprintf(src->base_from, sizeof src->base_from, "given");
        return eval_copy(src->base, sizeof src->base, o->base, "base model path");
    }
    ct_status st = eval_adapter_names(dir, src->base, sizeof src->base);
    if (st) return st;
    if (src->base[0]) {
        snprintf(src->base_from, sizeof src->base_from, "%s/adapter_config.json", dir);
    } else {
        char run[CT_EVAL_PATH_MAX];
        eval_run_dir(dir, run, sizeof run);
        if (run[0] && strcmp(run, dir) != 0 && eval_exists(run, "adapter_config.json", false)) {
            if ((st = eval_adapter_names(run, src->base, sizeof src->base))) return st;
            if (src->base[0])
                snprintf(src->base_from, sizeof src->base_from, "%s/adapter_config.json", run);
        }
        if (!src->base[0] && run[0]) {
            char yaml[CT_EVAL_PATH_MAX + 16];
            snprintf(yaml, sizeof yaml, "%s/config.yaml", run);
            ct_config *c = malloc(sizeof *c);
            if (!c) return CT_ERR(CT_ERR_OOM, "out of memory reading %s", yaml);
            ct_config_default(c);
            if ((st = ct_config_load_yaml(c, yaml))) {
                free(c);
                return st;
            }
            if (c->model.init_from[0]) {
                st = eval_copy(src->base, sizeof src->base, c->model.init_from, "model.init_from");
                snprintf(src->base_from, sizeof src->base_from, "%s (model.init_from)", yaml);
                free(c);
                if (st) return st;
            } else if (c->lora.r > 0 || c->lora.init_from[0]) {
                /* a LoRA run on freshly initialised weights: rebuilt as the trainer built them */
                snprintf(src->base_from, sizeof src->base_from, "%s (fresh weights, train.seed "
                         "%lld)", yaml, (long long)c->train.seed);
                *fresh = c;
                return CT_OK;
            } else {
                free(c);
            }
        }
    }
    if (!src->base[0]) {
        st = CT_ERR(CT_ERR_IO, "%s/adapter_config.json names no base model "
                    "(base_model_name_or_path is empty) and no run's config.yaml says which "
                    "model the adapter was trained on", dir);
        eval_base_hint(dir, "");
        return st;
    }
    if (!eval_exists(src->base, "config.json", false)) {
        struct stat sb;
        bool there = stat(src->base, &sb) == 0;
        if (strstr(src->base_from, "adapter_config.json"))
            st = CT_ERR(CT_ERR_IO, "%s names the base model \"%s\" (base_model_name_or_path), "
                        "which is not a model directory here: %s", src->base_from, src->base,
                        there ? "it holds no config.json" : strerror(errno));
        else
            st = CT_ERR(CT_ERR_IO, "the adapter %s/adapter_config.json was trained on \"%s\" "
                        "(%s), which is not a model directory here: %s", dir, src->base,
                        src->base_from, there ? "it holds no config.json" : strerror(errno));
        eval_base_hint(dir, src->base);
        return st;
    }
    return CT_OK;
}

/* The base of the adapter in src->dir with the adapter attached (and merged
 * when o->merge). */
static ct_status eval_load_adapter(ct_model **out, ct_ctx *ctx, const ct_eval_load_opts *o,
                                   ct_eval_source *src) {
    ct_config *fresh = NULL;
    ct_model *m = NULL;
    ct_status st = eval_find_base(o, src, &fresh);
    if (st) return st;
    if (fresh) {
        ct_model_config mc;
        if (!(st = ct_model_config_from(&mc, fresh)) && !(st = ct_model_init(&m, ctx, &mc)))
            st = ct_model_init_weights(m, (uint64_t)fresh->train.seed);
        if (st) ct_error_prefix("rebuilding the base from %s", src->base_from);
        free(fresh);
    } else {
        st = ct_model_load_hf(&m, ctx, src->base);
        if (st && o->base)
            ct_error_prefix("the base model %s given for the adapter %s", src->base, src->dir);
        else if (st)
            ct_error_prefix("the base model of the adapter %s (named by %s)", src->dir,
                            src->base_from);
    }
    if (st) goto fail;
    ct_lora_opts lo;
    if ((st = ct_lora_config_load_peft(ct_model_get_config(m), src->dir, &lo))) goto fail;
    lo.dropout = 0; /* inference: no dropout */
    if ((st = ct_model_lora_attach(m, &lo))) goto fail;
    if ((st = ct_model_lora_load_peft(m, src->dir))) {
        ct_error_hint("the adapter must have been trained on a model of the base's shape (%s, "
                      "named by %s) with the targets its adapter_config.json names",
                      src->base[0] ? src->base : "rebuilt", src->base_from);
        goto fail;
    }
    if (o->merge) {
        if ((st = ct_model_lora_merge(m))) goto fail;
        src->merged = true;
    }
    src->lora = lo;
    *out = m;
    return CT_OK;
fail:
    ct_model_free(m);
    return st;
}

/* The model behind a resolved src (eval_resolve). */
static ct_status eval_load_resolved(ct_model **out, ct_ctx *ctx, const ct_eval_load_opts *o,
                                    ct_eval_source *src) {
    ct_status st;
    if (src->adapter) {
        if ((st = eval_load_adapter(out, ctx, o, src))) return st;
    } else {
        if (o->base) {
            st = CT_ERR(CT_ERR_ARG, "a base model (%s) was given, but %s holds no LoRA adapter "
                        "(adapter_config.json without config.json)", o->base, src->dir);
            ct_error_hint("a base goes with an adapter directory; a full model loads alone");
            return st;
        }
        if ((st = ct_model_load_hf(out, ctx, src->dir))) return st;
    }
    const char *tok = src->dir;
    if (src->adapter && src->base[0] && !ct_tokenizer_dir_has_files(src->dir)) tok = src->base;
    snprintf(src->tok_dir, sizeof src->tok_dir, "%s", tok);
    return CT_OK;
}

ct_status ct_eval_load(ct_model **out, ct_ctx *ctx, const char *path,
                       const ct_eval_load_opts *o, ct_eval_source *src) {
    ct_eval_load_opts none = {0};
    *out = NULL;
    memset(src, 0, sizeof *src);
    src->step = -1;
    ct_status st = eval_resolve(path, src);
    if (st) return st;
    return eval_load_resolved(out, ctx, o ? o : &none, src);
}

ct_status ct_eval_load_model(ct_model **out, ct_ctx *ctx, const char *path, char *resolved,
                             size_t cap, int64_t *step) {
    ct_eval_load_opts none = {0};
    *out = NULL;
    if (step) *step = -1;
    ct_eval_source *src = calloc(1, sizeof *src);
    if (!src) return CT_ERR(CT_ERR_OOM, "out of memory loading %s", path ? path : "(null)");
    src->step = -1;
    ct_status st = eval_resolve(path, src);
    if (!st && resolved) st = eval_copy(resolved, cap, src->dir, "path");
    if (!st) st = eval_load_resolved(out, ctx, &none, src);
    if (!st && step) *step = src->step;
    free(src);
    return st;
}
