/*
 * The training loop behind `ctrain train`: resolve and check everything the
 * config names (model, weights, data, keys not yet supported) before writing
 * anything, then run optimizer steps of grad_accum micro-batches, AdamW with
 * clipping, periodic validation, metrics.jsonl, weight snapshots and the final
 * Hugging Face directory in run.dir.
 * Leaves out: optimizer-state checkpoints and resume, the stability guard's
 * rollback, LoRA and MPI, which later work adds (their keys are refused
 * with a clear message rather than ignored).
 */
#include "ctrain/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/fileio.h"
#include "io/metrics.h"
#include "io/tensorboard.h"

ct_status ct_model_config_from(ct_model_config *out, const ct_config *cfg) {
    const char *arch = cfg->model.arch;
    if (strcmp(arch, "gpt2") != 0)
        return CT_ERR(CT_ERR_ARG, "model.arch = %s is not available yet: only gpt2 is "
                      "implemented", arch);
    if (cfg->model.preset[0]) {
        ct_status st = ct_model_config_preset(out, cfg->model.preset);
        if (st) return st;
    } else {
        if (!cfg->model.n_layer || !cfg->model.n_head || !cfg->model.n_embd ||
            !cfg->model.vocab_size || !cfg->model.n_ctx) {
            ct_status st = CT_ERR(CT_ERR_ARG, "no model given: set model.init_from, model.preset, "
                                  "or all of model.n_layer, model.n_head, model.n_embd, "
                                  "model.vocab_size and model.n_ctx");
            ct_error_hint("e.g. model.preset=gpt2-demo");
            return st;
        }
        ct_model_config_gpt2(out, 1, 1, 1, 2, 1);
    }
    if (cfg->model.n_layer) out->n_layer = (int)cfg->model.n_layer;
    if (cfg->model.n_head) out->n_head = out->n_kv_head = (int)cfg->model.n_head;
    if (cfg->model.n_embd) {
        out->n_embd = (int)cfg->model.n_embd;
        out->n_ffn = 4 * out->n_embd;
    }
    if (cfg->model.n_ffn) out->n_ffn = (int)cfg->model.n_ffn;
    if (cfg->model.vocab_size) out->vocab_size = (int)cfg->model.vocab_size;
    if (cfg->model.n_ctx) out->n_ctx = (int)cfg->model.n_ctx;
    if (cfg->model.n_kv_head && cfg->model.n_kv_head != out->n_head)
        return CT_ERR(CT_ERR_ARG, "model.n_kv_head = %lld: grouped KV heads are not available "
                      "for gpt2", (long long)cfg->model.n_kv_head);
    return ct_model_config_validate(out);
}

/* Keys whose features are not built yet: refuse rather than silently ignore. */
static ct_status refuse_unsupported(const ct_config *cfg) {
    if (cfg->lora.r > 0 || cfg->lora.init_from[0])
        return CT_ERR(CT_ERR_ARG, "lora.r / lora.init_from: LoRA fine-tuning is not available "
                      "in this version");
    if (cfg->dist.zero)
        return CT_ERR(CT_ERR_ARG, "dist.zero = 1: data parallel training is not available in "
                      "this version");
    if (strcmp(cfg->train.resume, "never") != 0 && strcmp(cfg->train.resume, "auto") != 0)
        return CT_ERR(CT_ERR_ARG, "train.resume = %s: resuming from a checkpoint is not "
                      "available in this version (use auto or never)", cfg->train.resume);
    return CT_OK;
}

static ct_status build_model(ct_model **out, ct_ctx *ctx, const ct_config *cfg) {
    if (cfg->model.init_from[0]) {
        if (cfg->model.preset[0] || cfg->model.n_layer || cfg->model.n_head ||
            cfg->model.n_embd || cfg->model.vocab_size || cfg->model.n_ctx || cfg->model.n_ffn)
            return CT_ERR(CT_ERR_ARG, "model.init_from is set, so the model's shape comes from "
                          "%s/config.json: remove model.preset and model sizes",
                          cfg->model.init_from);
        return ct_model_load_hf(out, ctx, cfg->model.init_from);
    }
    ct_model_config mc;
    ct_status st = ct_model_config_from(&mc, cfg);
    if (st) return st;
    if ((st = ct_model_init(out, ctx, &mc))) return st;
    ct_model_init_weights(*out, (uint64_t)cfg->train.seed);
    return CT_OK;
}

static ct_status save_config_yaml(const ct_config *cfg) {
    char *yaml = ct_config_to_yaml(cfg);
    if (!yaml) return CT_ERR(CT_ERR_OOM, "out of memory writing config.yaml");
    char path[CT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/config.yaml", cfg->run.dir);
    ct_status st = ct_file_write_atomic(path, yaml, strlen(yaml));
    free(yaml);
    return st;
}

/* Mean loss over eval_batches micro-batches of the validation stream, always
 * the same ones (the loader restarts). */
static ct_status evaluate(ct_model *model, ct_loader *val, const ct_config *cfg, int32_t *in,
                          int32_t *tg, double *out) {
    ct_loader_reset(val);
    double sum = 0;
    int B = (int)cfg->train.batch_size, T = (int)cfg->train.seq_len;
    for (int64_t i = 0; i < cfg->train.eval_batches; i++) {
        float loss;
        ct_status st = ct_loader_next(val, in, tg);
        if (!st) st = ct_model_forward(model, in, tg, B, T, &loss);
        if (st) return st;
        sum += loss;
    }
    *out = sum / (double)cfg->train.eval_batches;
    return CT_OK;
}

/* Weights snapshot run.dir/checkpoints/step_NNNNNN (HF layout); keeps the last
 * run.keep_last of them. */
static ct_status snapshot(ct_model *model, const ct_config *cfg, int64_t step) {
    char dir[CT_PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s/checkpoints/step_%06lld", cfg->run.dir, (long long)step);
    ct_status st = ct_model_save_hf(model, dir, "model.safetensors", false, true);
    if (st) return st;
    int64_t old = step - cfg->run.keep_last * cfg->run.checkpoint_every;
    if (cfg->run.keep_last > 0 && old > 0) {
        char path[CT_PATH_MAX + 96];
        snprintf(dir, sizeof dir, "%s/checkpoints/step_%06lld", cfg->run.dir, (long long)old);
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        remove(path);
        snprintf(path, sizeof path, "%s/config.json", dir);
        remove(path);
        remove(dir);
    }
    return CT_OK;
}

ct_status ct_train_run(ct_ctx *ctx, const ct_config *cfg, ct_progress_fn progress, void *user) {
    ct_model *model = NULL;
    ct_loader *train = NULL, *val = NULL;
    ct_metrics *metrics = NULL;
    ct_tb *tb = NULL;
    ct_adamw opt = {0};
    int32_t *in = NULL, *tg = NULL;
    ct_schedule sched;
    ct_status st;
    int B = (int)cfg->train.batch_size, T = (int)cfg->train.seq_len;
    int64_t accum = cfg->train.grad_accum;

    /* 1. check everything before writing anything */
    if ((st = ct_config_validate(cfg))) return st;
    if ((st = refuse_unsupported(cfg))) return st;
    if ((st = ct_schedule_from_config(&sched, cfg))) return st;
    if ((st = build_model(&model, ctx, cfg))) goto done;
    const ct_model_config *mc = ct_model_get_config(model);
    if (T > mc->n_ctx) {
        st = CT_ERR(CT_ERR_ARG, "train.seq_len = %d exceeds the model's context n_ctx = %d", T,
                    mc->n_ctx);
        goto done;
    }
    if ((st = ct_model_reserve(model, B, T, true))) goto done;
    if ((st = ct_adamw_init(&opt, ctx, ct_model_numel(model)))) goto done;
    ct_loader_opts lo = ct_loader_opts_default();
    lo.spec = cfg->data.train;
    lo.B = B;
    lo.T = T;
    lo.vocab_size = mc->vocab_size;
    lo.shuffle = cfg->data.shuffle;
    lo.seed = (uint64_t)cfg->train.seed;
    lo.prefetch = (int)cfg->data.prefetch;
    if ((st = ct_loader_init(&train, &lo))) {
        ct_error_prefix("data.train");
        goto done;
    }
    /* validation reads the same first batches every time: read them in place */
    lo.spec = cfg->data.val;
    lo.split = "val";
    lo.shuffle = false;
    lo.seed = 0;
    lo.prefetch = 0;
    if (cfg->data.val[0] && (st = ct_loader_init(&val, &lo))) {
        ct_error_prefix("data.val");
        goto done;
    }
    in = ct_alloc(ctx, (size_t)B * T * sizeof *in, CT_TAG_DATA);
    tg = ct_alloc(ctx, (size_t)B * T * sizeof *tg, CT_TAG_DATA);
    if (!in || !tg) {
        st = ct_last_status();
        goto done;
    }

    ct_log(CT_LOG_INFO, "ctrain train: %zu parameters (%d layers, %d heads, C=%d, V=%d), "
           "%lld training tokens in %d shard(s), %d threads, run.dir %s", ct_model_numel(model),
           mc->n_layer, mc->n_head, mc->n_embd, mc->vocab_size,
           (long long)ct_loader_total_tokens(train), ct_loader_num_shards(train),
           ct_ctx_threads(ctx), cfg->run.dir);

    /* 2. the run directory */
    if ((st = ct_mkdir_p(cfg->run.dir))) goto done;
    if ((st = save_config_yaml(cfg))) goto done;
    if ((st = ct_metrics_open(&metrics, cfg->run.dir, false))) goto done;
    if ((st = ct_tb_open(&tb, cfg->run.dir))) goto done;

    ct_adamw_params ap = {(float)cfg->optim.beta1, (float)cfg->optim.beta2,
                          (float)cfg->optim.eps, (float)cfg->optim.weight_decay};
    int64_t skipped = 0;
    for (int64_t step = 1; step <= cfg->train.steps; step++) {
        double t0 = ct_time_s();
        ct_model_zero_grads(model);
        double loss_sum = 0, data_wait = 0;
        for (int64_t a = 0; a < accum; a++) {
            float loss;
            if ((st = ct_loader_next(train, in, tg))) goto done;
            data_wait += ct_loader_wait_s(train);
            if ((st = ct_model_forward_backward(model, in, tg, B, T, 1.0f / (float)accum, &loss)))
                goto done;
            loss_sum += loss;
        }
        ct_step_info info = {0};
        info.step = step;
        info.steps = cfg->train.steps;
        info.loss = loss_sum / (double)accum;
        info.grad_norm = ct_grad_norm(model);
        info.lr = ct_schedule_lr(&sched, step - 1);
        info.val_loss = NAN;
        if (cfg->debug.dump_grads_step == step) {
            char name[64];
            snprintf(name, sizeof name, "grads_step%lld.safetensors", (long long)step);
            if ((st = ct_model_save_hf(model, cfg->run.dir, name, true, false))) goto done;
        }
        if (!isfinite(info.loss) || !isfinite(info.grad_norm)) {
            /* never let a non-finite update reach the weights */
            info.skipped = true;
            skipped++;
            ct_log(CT_LOG_WARN, "step %lld: non-finite %s, update skipped (%lld so far)",
                   (long long)step, isfinite(info.loss) ? "gradient" : "loss", (long long)skipped);
        } else {
            float scale = ct_clip_scale(info.grad_norm, cfg->optim.grad_clip);
            ct_adamw_step(&opt, model, &ap, (float)info.lr, scale);
        }
        double dt = ct_time_s() - t0;
        info.step_ms = dt * 1e3;
        info.tokens_per_s = (double)B * T * (double)accum / (dt > 0 ? dt : 1e-9);
        const char *keys[] = {"loss", "lr", "grad_norm", "tokens_per_s", "step_ms", "skipped",
                              "data_wait_ms"};
        double vals[] = {info.loss, info.lr, info.grad_norm, info.tokens_per_s, info.step_ms,
                         (double)info.skipped, data_wait * 1e3};
        if ((st = ct_metrics_write(metrics, step, "train", 7, keys, vals))) goto done;
        ct_memstats ms;
        ct_ctx_memstats(ctx, &ms);
        const char *tk[] = {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s",
                            "memory/peak_bytes", "memory/current_bytes"};
        double tv[] = {info.loss, info.lr, info.grad_norm, info.tokens_per_s,
                       (double)ms.total_peak, (double)ms.total_current};
        double wall = ct_tb_wall_time();
        if ((st = ct_tb_scalars(tb, step, wall, 6, tk, tv))) goto done;
        bool last = step == cfg->train.steps;
        if (val && ((cfg->train.eval_every && step % cfg->train.eval_every == 0) || last)) {
            if ((st = evaluate(model, val, cfg, in, tg, &info.val_loss))) goto done;
            const char *vk[] = {"loss"};
            if ((st = ct_metrics_write(metrics, step, "val", 1, vk, &info.val_loss))) goto done;
            if ((st = ct_tb_scalar(tb, "val/loss", step, info.val_loss, ct_tb_wall_time())) ||
                (st = ct_tb_flush(tb)))
                goto done;
        }
        if (cfg->run.checkpoint_every && step % cfg->run.checkpoint_every == 0 && !last &&
            ((st = snapshot(model, cfg, step)) || (st = ct_tb_flush(tb))))
            goto done;
        if (progress) progress(&info, user);
    }
    if ((st = ct_tb_flush(tb))) goto done;
    st = ct_model_save_hf(model, cfg->run.dir, "model.safetensors", false, true);
done:
    ct_metrics_close(metrics);
    ct_tb_close(tb);
    ct_free(ctx, in);
    ct_free(ctx, tg);
    ct_loader_free(train);
    ct_loader_free(val);
    ct_adamw_free(&opt);
    ct_model_free(model);
    return st;
}
