/*
 * The training loop behind `ctrain train` (the rules are in train.h's
 * trainer section): optimizer steps of grad_accum micro-batches judged by the
 * stability guard before AdamW applies them, rollbacks to the last good
 * checkpoint, periodic validation with early stopping, metrics.jsonl and
 * TensorBoard, checkpoints through the store (checkpoint.h) with the
 * training state (train_state.h), a stop flag polled after every step, and
 * the final Hugging Face directory in run.dir. trainer_setup.c checks and
 * builds everything before the loop writes anything.
 * train.precision=fp16 scales the loss (loss_scale_step: GradScaler's dynamic
 * scale, overflows skipped outside the guard).
 * A LoRA run trains only the adapters and ends with a PEFT adapter directory;
 * under mpirun every rank runs this loop (trainer_dist.c), and run.trace
 * records chosen steps as a Chrome trace.
 * Leaves out: TensorBoard's purge of the steps a resumed run repeats (a new event file is
 * started each time; metrics.jsonl is the trimmed record).
 */
#include "train/trainer_int.h"
#include "backend/device.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/ctx.h"
#include "data/shard/remote.h"
#include "core/strbuf.h"
#include "io/fileio.h"
#include "perf/kprof.h"
#include "train/run_tokenizer.h"

static ct_status save_config_yaml(const ct_config *cfg) {
    char *yaml = ct_config_to_yaml(cfg);
    if (!yaml) return CT_ERR(CT_ERR_OOM, "out of memory writing config.yaml");
    char path[CT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/config.yaml", cfg->run.dir);
    ct_status st = ct_file_write_atomic(path, yaml, strlen(yaml));
    free(yaml);
    return st;
}

ct_status trainer_next_batch(trainer *t, ct_loader *l, int64_t *counted) {
    ct_loader_batch b = {.inputs = t->in, .targets = t->tg, .pos = t->pos};
    ct_status st = ct_loader_next_batch(l, &b);
    if (st) return st;
    *counted = b.counted;
    /* rows of whole examples attend each to itself; plain rows are 0..T-1 */
    if (b.positions) return ct_model_set_positions(t->model, t->pos, t->B, t->T);
    return ct_model_set_positions(t->model, NULL, 0, 0);
}

float trainer_batch_weight(const trainer *t, int64_t counted) {
    float w = t->step_counted > 0 ? (float)((double)counted / (double)t->step_counted) : 0.0f;
    /* fp16: the scaled loss's seed (a power of two, dynamic: exact) */
    return t->fp16 ? (float)((double)w * t->loss_scale) : w;
}

void trainer_loss_scale_set(trainer *t, const ct_train_state *s) {
    const ct_config *cfg = t->cfg;
    t->fp16 = t->mopts.precision == CT_PREC_FP16;
    t->ls_dynamic = t->fp16 && !(cfg->train.loss_scale > 0);
    t->loss_scale = !t->fp16 ? 1.0 : t->ls_dynamic ? cfg->train.loss_scale_init
                                                    : cfg->train.loss_scale;
    t->ls_good = 0;
    /* a checkpoint's dynamic scale; a record of another precision or an
     * older version (0) starts afresh */
    if (s && t->ls_dynamic && s->loss_scale > 0) {
        t->loss_scale = s->loss_scale;
        t->ls_good = s->loss_scale_good;
    }
}

/* fp16: judge the step's scaled gradient. An overflow (the scaled gradient
 * is not finite while the loss is) skips the update without the guard: the
 * dynamic scale halves (an error when it would fall below 1). Otherwise the
 * norm is unscaled, and a finite gradient counts towards doubling the scale
 * after train.loss_scale_window good steps in a row. *overflow says which. */
static ct_status loss_scale_step(trainer *t, int64_t step, ct_step_info *info, bool *overflow) {
    *overflow = false;
    if (!t->fp16) return CT_OK;
    double S = t->loss_scale;
    info->loss_scale = S;
    if (!isfinite(info->grad_norm) && isfinite(info->loss)) {
        *overflow = true;
        info->overflow = true;
        t->ls_good = 0;
        if (!t->ls_dynamic) {
            ct_log(CT_LOG_INFO, "step %lld: fp16 gradient overflow at the static loss scale %g: "
                   "update skipped", (long long)step, S);
            return CT_OK;
        }
        if (S * 0.5 < 1.0) {
            ct_status st = CT_ERR(CT_ERR_NUMERIC, "step %lld: the fp16 gradient overflows even at "
                                  "loss scale %g: the dynamic scale would fall below 1",
                                  (long long)step, S);
            ct_error_hint("the gradients do not fit fp16 (range 6e-8..65504) at any scale: lower "
                          "optim.lr, check the data, or train with train.precision=fp32");
            return st;
        }
        t->loss_scale = S * 0.5;
        ct_log(CT_LOG_INFO, "step %lld: fp16 gradient overflow at loss scale %g: update skipped, "
               "scale now %g", (long long)step, S, t->loss_scale);
        return CT_OK;
    }
    info->grad_norm /= S; /* the true gradient's norm (S is a power of two: exact) */
    if (t->ls_dynamic && isfinite(info->grad_norm) &&
        ++t->ls_good >= t->cfg->train.loss_scale_window) {
        t->ls_good = 0;
        t->loss_scale = S * 2.0 > 1e30 ? S : S * 2.0;
    }
    return CT_OK;
}

/* Mean loss over t->eval_batches micro-batches of the validation stream,
 * always the same ones (the loader restarts). Instruction data: the mean
 * over the counted targets of all of them. */
static ct_status evaluate(trainer *t, double *out, int64_t *scored) {
    ct_loader_reset(t->val);
    double sum = 0, tokens = 0;
    for (int64_t i = 0; i < t->eval_batches; i++) {
        float loss;
        int64_t counted;
        ct_status st = trainer_next_batch(t, t->val, &counted);
        if (!st) st = ct_model_forward(t->model, t->in, t->tg, t->B, t->T, &loss);
        if (st) return st;
        sum += (double)loss * (double)counted;
        tokens += (double)counted;
    }
    /* under mpirun each rank scored its own windows: the mean over all */
    ct_status st = trainer_dist_sum(t, &sum);
    if (!st) st = trainer_dist_sum(t, &tokens);
    if (st) return st;
    *out = tokens > 0 ? sum / tokens : 0.0;
    *scored = (int64_t)tokens;
    return CT_OK;
}

/* The state record of the run as it stands after step t->step. */
static void snapshot_state(trainer *t, ct_train_state *s) {
    memset(s, 0, sizeof *s);
    const ct_config *cfg = t->cfg;
    s->step = t->step;
    s->adam_t = t->opt.t;
    s->numel = t->opt.numel;
    s->batch_size = t->B;
    s->seq_len = cfg->train.seq_len;
    s->grad_accum = t->accum;
    s->seed = cfg->train.seed;
    s->shuffle = cfg->data.shuffle;
    ct_loader_get_pos(t->train, &s->pos);
    s->total_steps = cfg->train.steps;
    s->guard = t->guard;
    s->best_val = t->best_val;
    s->best_step = t->best_step;
    s->data_flags = trainer_data_flags(t);
    s->loss_scale = t->fp16 ? t->loss_scale : 0.0;
    s->loss_scale_good = t->fp16 ? t->ls_good : 0;
    s->bad_evals = t->bad_evals;
    s->ckpt_pending = t->ckpt_pending;
    snprintf(s->init_from, sizeof s->init_from, "%s", cfg->model.init_from);
    s->world = t->world;
}

static ct_status write_checkpoint(trainer *t) {
    ct_train_state *s = malloc(sizeof *s);
    if (!s) return CT_ERR(CT_ERR_OOM, "out of memory for the training state");
    /* a clean state settles a postponed checkpoint; one written inside a bad
     * run (a stop, the end) leaves it due, as an unbroken run would */
    if (t->guard.bad_run == 0) t->ckpt_pending = false;
    /* the best validation's weights are these: the checkpoint records it,
     * and pruning keeps it from now on */
    if (t->best_due == t->step) t->best_step = t->step;
    t->ckpt_opts.keep_also = t->best_step;
    snapshot_state(t, s);
    double t0 = ct_time_s();
    ct_status st = trainer_save_state(t, s); /* rank 0 writes; every rank agrees */
    free(s);
    if (st) return st;
    t->ckpt_step = t->step;
    if (trainer_root(t))
        ct_log(CT_LOG_INFO, "checkpoint of step %lld written: %s (%.1f s)", (long long)t->step,
               t->res->checkpoint, ct_time_s() - t0);
    return t->tb ? ct_tb_flush(t->tb) : CT_OK;
}

/* ------------------------------------------------------------- rollback */

/* The newest checkpoint that verifies and is older than step `before`; its
 * directory goes to dir. false when there is none (each failure is a
 * warning). */
static bool rollback_target(trainer *t, int64_t before, char *dir, size_t cap, int64_t *step) {
    int64_t *steps = NULL;
    int n = 0;
    if (ct_ckpt_list(t->cfg->run.dir, &steps, &n)) {
        ct_log(CT_LOG_WARN, "cannot list checkpoints to roll back to: %s", ct_last_error());
        return false;
    }
    bool found = false;
    for (int i = n - 1; i >= 0 && !found; i--) {
        if (steps[i] >= before) continue;
        snprintf(dir, cap, "%s/checkpoints/step_%08lld", t->cfg->run.dir, (long long)steps[i]);
        int64_t got = -1;
        ct_status st = ct_ckpt_verify(dir, t->signature, &got);
        if (!st && got != steps[i])
            st = CT_ERR(CT_ERR_FORMAT, "%s: the manifest is for step %lld", dir, (long long)got);
        if (!st) {
            *step = got;
            found = true;
        } else {
            ct_log(CT_LOG_WARN, "cannot roll back to %s, trying an older checkpoint: %s", dir,
                   ct_last_error());
        }
    }
    free(steps);
    return found;
}

/* Restore the weights, moments, guard window and early-stopping state of the
 * newest good checkpoint before the bad run; keep the step, the data position
 * and the counters; lower the LR. With no checkpoint yet, the current weights
 * and moments stay: skipped updates never reached them, so they are those of
 * the last good step (going back to the initial weights would throw away the
 * whole run). *to is the step whose state training goes on from. */
static ct_status rollback(trainer *t, int64_t step, int64_t *to) {
    const ct_config *cfg = t->cfg;
    ct_guard *g = &t->guard;
    int64_t bad_start = g->bad_start, bad_run = g->bad_run;
    if (cfg->guard.max_rollbacks > 0 && g->rollbacks >= cfg->guard.max_rollbacks) {
        ct_status st = CT_ERR(CT_ERR_NUMERIC, "step %lld: %lld bad steps in a row (from step %lld) "
                              "after %lld rollbacks (guard.max_rollbacks): training keeps "
                              "diverging", (long long)step, (long long)bad_run,
                              (long long)bad_start, (long long)g->rollbacks);
        ct_error_hint("lower optim.lr, check the data, or raise guard.max_rollbacks; the "
                      "checkpoints in %s/checkpoints are intact", cfg->run.dir);
        return st;
    }
    char dir[TRAINER_DIR_MAX];
    int64_t target = 0;
    ct_status st;
    if (rollback_target(t, bad_start, dir, sizeof dir, &target)) {
        ct_train_state *s = malloc(sizeof *s);
        if (!s) return CT_ERR(CT_ERR_OOM, "out of memory for a rollback");
        st = ct_train_state_load(dir, t->model, &t->opt, s);
        if (!st) {
            ct_guard_take_window(g, &s->guard);
            t->best_val = s->best_val;
            t->best_step = s->best_step;
            t->bad_evals = s->bad_evals;
            trainer_loss_scale_set(t, s); /* fp16: the scale of those weights */
        }
        free(s);
        if (st) {
            ct_error_prefix("rollback to %s", dir);
            return st;
        }
        ct_model_refresh_weights16(t->model); /* precision bf16 (the load did it too) */
    } else {
        target = bad_start - 1;
        snprintf(dir, sizeof dir, "the current weights (no checkpoint yet; the skipped updates "
                 "never reached them)");
    }
    ct_guard_rolled_back(g);
    *to = target;
    ct_log(CT_LOG_WARN, "step %lld: %lld bad steps in a row (from step %lld): rolled back to %s "
           "(step %lld); the data of steps %lld..%lld is skipped, LR factor now %g",
           (long long)step, (long long)bad_run, (long long)bad_start, dir, (long long)target,
           (long long)target + 1, (long long)step, g->lr_factor);
    return CT_OK;
}

/* ---------------------------------------------------------------- step */

static void inject_grad_faults(trainer *t, int64_t step) {
    const ct_config *cfg = t->cfg;
    if (cfg->debug.nan_step == step || (step >= t->bad_first && step <= t->bad_last)) {
        ct_model_grads_poison(t->model);
        ct_log(CT_LOG_INFO, "step %lld: debug: gradient made NaN", (long long)step);
    }
    if (cfg->debug.spike_step == step)
        ct_model_grads_scale(t->model, (float)cfg->debug.spike_factor);
}
/* The loss's part of debug.spike_step (the gradient's was scaled before the
 * norm was read). */
static void inject_loss_fault(trainer *t, int64_t step, double *loss) {
    const ct_config *cfg = t->cfg;
    if (cfg->debug.spike_step != step) return;
    *loss *= cfg->debug.spike_factor;
    ct_log(CT_LOG_INFO, "step %lld: debug: loss and gradient scaled by %g", (long long)step,
           cfg->debug.spike_factor);
}

/* One optimizer step: micro-batches, guard, update (or skip, or rollback).
 * The time split: data is ct_loader_next, forward and backward come from the
 * model, optimizer is the rest (zeroing gradients, the norm, the guard,
 * clipping, AdamW). */
/* Record the span [t0, now] when this step is traced; returns now. */
static double span(trainer *t, const char *name, double t0, int64_t step) {
    double now = ct_time_s();
    ct_trace_span(ct_ctx_trace(t->ctx), name, "train", CT_TRACE_TID_MAIN, t0, now, step);
    return now;
}

static ct_status train_step(trainer *t, int64_t step, ct_step_info *info) {
    const ct_config *cfg = t->cfg;
    double t0 = ct_time_s(), loss_sum = 0, wait = 0, fwd = 0, bwd = 0;
    ct_status st;
    const ct_backend *base = ct_ctx_base_backend(t->ctx);
    int64_t stalls0 = base->stalls;
    ct_model_zero_grads(t->model);
    /* the step's counted targets, all ranks: known from the loader's plan
     * before any batch, so each micro-batch's gradient gets its final weight */
    t->step_counted = ct_loader_counted_ahead(t->train, t->accum);
    double ts = span(t, "zero_grads", t0, step);
    if (t->world > 1) {
        /* every rank's part of the global batch and the averaged gradient */
        if ((st = trainer_dist_micro_batches(t, step, &loss_sum, &wait, &fwd, &bwd))) return st;
        ts = span(t, "micro_batches+allreduce", ts, step);
    }
    /* one process: the micro-batches are queued without a wait between them
     * and read once, with the gradient norm, after the last */
    for (int64_t a = 0; a < t->accum && t->world == 1; a++) {
        int64_t counted;
        if ((st = trainer_next_batch(t, t->train, &counted))) {
            t->data_failed = true;
            return st;
        }
        wait += ct_loader_wait_s(t->train);
        ts = span(t, "data", ts, step);
        if ((st = trainer_dropout_micro(t, step, a))) return st;
        if ((st = ct_model_forward_backward_queued(t->model, t->in, t->tg, t->B, t->T,
                                                   trainer_batch_weight(t, counted))))
            return st;
        ts = ct_time_s();
    }
    if (cfg->debug.dump_grads_step == step && trainer_root(t)) {
        char name[64];
        snprintf(name, sizeof name, "grads_step%lld.safetensors", (long long)step);
        if ((st = ct_model_save_hf(t->model, cfg->run.dir, name, true, false))) return st;
    }
    inject_grad_faults(t, step);
    if (t->world == 1) {
        ct_model_timing mt = {0, 0};
        double sumsq = 0;
        if ((st = ct_model_step_read(t->model, &loss_sum, &sumsq, &mt))) return st;
        fwd = mt.forward_s;
        bwd = mt.backward_s;
        info->grad_norm = sqrt(sumsq);
    }
    /* the mean over every counted target of the step, all ranks
     * (trainer_dist_micro_batches summed the ranks' parts) */
    info->loss = t->step_counted > 0 ? loss_sum / (double)t->step_counted : 0.0;
    info->counted = t->masked ? t->step_counted : 0;
    if ((st = trainer_dropout_write(t, step))) return st;
    inject_loss_fault(t, step, &info->loss);
    if (t->world > 1 && (st = trainer_dist_grad_norm(t, &info->grad_norm))) return st;
    ts = span(t, "grad_norm", ts, step);
    info->lr = ct_schedule_lr(&t->sched, step - 1) * t->guard.lr_factor;
    bool overflow;
    if ((st = loss_scale_step(t, step, info, &overflow))) return st;
    ct_guard_verdict verdict = CT_GUARD_GOOD;
    /* an fp16 overflow is the scaler's, never the guard's (no bad step, no spike) */
    ct_guard_action act = overflow ? CT_GUARD_SKIP
                                   : ct_guard_judge(&t->guard, step, info->loss, info->grad_norm,
                                                    &verdict);
    if (overflow) {
        info->skipped = true;
    } else if (act == CT_GUARD_UPDATE) {
        float scale = ct_clip_scale(info->grad_norm, cfg->optim.grad_clip);
        /* fp16: AdamW reads the scaled gradient times clip / S */
        if (t->fp16) scale *= (float)(1.0 / info->loss_scale);
        /* precision bf16/fp16: the next GEMMs read 16-bit copies of the new
         * weights, made here unless the update wrote them */
        bool wrote16;
        if (t->world > 1) {
            if ((st = trainer_dist_update(t, (float)info->lr, scale, &wrote16))) return st;
        } else {
            wrote16 = ct_adamw_step(&t->opt, t->model, &t->ap, (float)info->lr, scale);
        }
        if (!wrote16) ct_model_refresh_weights16(t->model);
    } else {
        info->skipped = true;
        info->spike = verdict == CT_GUARD_SPIKE_LOSS || verdict == CT_GUARD_SPIKE_NORM;
        if (info->spike)
            ct_log(CT_LOG_WARN, "step %lld: %s (loss %.4g z=%.1f, grad norm %.4g z=%.1f), update "
                   "skipped (%lld skipped so far)", (long long)step, ct_guard_verdict_str(verdict),
                   info->loss, t->guard.z_loss, info->grad_norm, t->guard.z_norm,
                   (long long)t->guard.skipped);
        else
            ct_log(CT_LOG_WARN, "step %lld: %s, update skipped (%lld skipped so far)",
                   (long long)step, ct_guard_verdict_str(verdict), (long long)t->guard.skipped);
        info->rolled_back = act == CT_GUARD_ROLLBACK; /* done by the caller */
    }
    span(t, overflow ? "loss_scale" : act == CT_GUARD_UPDATE ? "optimizer" : "guard", ts, step);
    info->host_waits = base->stalls - stalls0;
    double dt = span(t, "step", t0, step) - t0;
    info->step_ms = dt * 1e3;
    /* the whole job's tokens: every rank's part of the global batch */
    info->tokens_per_s = (double)t->B * t->T * (double)t->accum * t->world / (dt > 0 ? dt : 1e-9);
    info->data_wait_ms = wait * 1e3;
    double comm = ct_dist_take_comm_s(t->dist);
    info->t_data_ms = wait * 1e3;
    info->t_fwd_ms = fwd * 1e3;
    info->t_bwd_ms = bwd * 1e3;
    info->t_comm_ms = comm * 1e3;
    /* the rest: zeroing the gradients, the norm, the guard, clipping, AdamW
     * (and, across ranks, the exchange of losses and the parameter gather) */
    double opt = dt - wait - fwd - bwd - comm;
    info->t_opt_ms = (opt > 0 ? opt : 0) * 1e3;
    return CT_OK;
}

/* ------------------------------------------------------------- monitor */

/* run.dir/hw.json: the hardware profile as `ctrain hw --json` prints it, with
 * the GEMM peak MFU is measured against and where it came from (in a bf16
 * run, the bf16 GEMM peak, also as gemm_bf16_peak_gflops). */
static ct_status write_hw_json(trainer *t) {
    /* the peak MFU is measured against: the monitor sets aside one measured
     * on a busy machine and uses the theoretical peak instead */
    bool aside = t->mon.p.peak_set_aside > 0;
    ct_hw_roofs r = {.threads = ct_ctx_threads(t->ctx), .gemm_n = t->gemm_n,
                     .gemm_gflops = aside ? t->mon.p.gemm_peak_gflops : t->gemm_peak,
                     .gemm_source = aside      ? "theoretical (the measured peak read low)"
                                    : t->gemm_n ? "measured"
                                                : "config"};
    if (r.gemm_gflops <= 0) r.gemm_source = "unknown";
    /* a bf16 run's peak is its bf16 GEMMs' (trainer_measure_peak) */
    if (t->mopts.precision == CT_PREC_BF16 && !aside) r.gemm_bf16_gflops = r.gemm_gflops;
    char *json = ct_hwinfo_to_json(&t->hw, &r);
    if (!json) return ct_last_status();
    char path[CT_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/hw.json", t->cfg->run.dir);
    ct_status st = ct_file_write_atomic(path, json, strlen(json));
    free(json);
    return st;
}

/* How often a watched GPU is read: NVML's utilisation covers its last 1/6 s
 * to 1 s, so reading it more often says nothing new. */
#define TRAINER_GPU_PERIOD_S 1.0

/* A GPU watched through NVML: read it at most once a TRAINER_GPU_PERIOD_S
 * (*fresh: this step did), judge its utilisation (an alert line when it
 * stayed below 90% for a minute: the loader or the host is starving it),
 * and put the latest reading into info, with the alert when no other
 * stands. A failed read stops the watch with a warning: the run goes on. */
static ct_status gpu_watch_step(trainer *t, ct_step_info *info, bool *fresh) {
    *fresh = false;
    if (!t->gwatch) return CT_OK;
    double now = ct_time_s();
    if (t->gwatch_at <= 0 || now - t->gwatch_at >= TRAINER_GPU_PERIOD_S) {
        if (ct_gpu_watch_read(t->gwatch, &t->gsample)) {
            ct_log(CT_LOG_WARN, "step %lld: %s; the GPU is no longer watched",
                   (long long)info->step, ct_last_error());
            ct_error_clear();
            ct_gpu_watch_close(t->gwatch);
            t->gwatch = NULL;
            return CT_OK;
        }
        t->gwatch_at = now;
        *fresh = true;
        double low_for = 0, u = t->gsample.util_pct;
        ct_gpu_util_event e = ct_gpu_util_rule_update(&t->gutil, now, u, &low_for);
        if (e == CT_GPU_UTIL_FIRED) {
            char msg[192];
            snprintf(msg, sizeof msg, "GPU utilisation %.0f%%, below %.0f%% for %.0f s: the "
                     "loader or the host is starving the GPU", u, t->gutil.threshold_pct, low_for);
            ct_log(CT_LOG_WARN, "step %lld: warning gpu_util alert: %s", (long long)info->step,
                   msg);
            ct_status st = ct_metrics_write_alert(t->metrics, info->step, "warning", "gpu_util",
                                                  u, t->gutil.threshold_pct, msg);
            if (st) return st;
        } else if (e == CT_GPU_UTIL_CLEARED) {
            ct_log(CT_LOG_INFO, "monitor: step %lld: GPU utilisation back at %.0f%%",
                   (long long)info->step, u);
        }
    }
    info->gpu_util_pct = t->gsample.util_pct;
    info->gpu_power_w = t->gsample.power_w;
    if (t->gutil.firing && info->alert_level == 0) {
        info->alert_level = 1;
        snprintf(info->alert, sizeof info->alert, "gpu_util: GPU utilisation %.0f%% (below "
                 "%.0f%% for a minute or more)", t->gsample.util_pct, t->gutil.threshold_pct);
    }
    return CT_OK;
}

/* Feed the finished step to the monitor: process counters, derived figures
 * into info, alert reports to metrics.jsonl and the log, the alert to show
 * into info; then the GPU watch (*gpu_fresh: a new GPU reading). */
static ct_status monitor_step(trainer *t, ct_step_info *info, bool *gpu_fresh) {
    ct_monitor_sample s = {0};
    size_t rss = 0, peak = 0;
    int64_t faults = t->faults_prev;
    if (ct_monitor_read_process(&rss, &peak, &faults)) ct_error_clear(); /* figures stay 0 */
    s.step = info->step;
    s.loss = info->loss;
    s.step_s = info->step_ms * 1e-3;
    s.data_s = info->t_data_ms * 1e-3;
    s.fwd_s = info->t_fwd_ms * 1e-3;
    s.bwd_s = info->t_bwd_ms * 1e-3;
    s.opt_s = info->t_opt_ms * 1e-3;
    s.comm_s = info->t_comm_ms * 1e-3;
    s.rss_bytes = rss;
    s.rss_peak_bytes = peak;
    if (t->plan.env.device) { /* the device's own count, not ours */
        ct_device_info di;
        if (ct_backend_device_info(ct_ctx_base_backend(t->ctx), &di)) ct_error_clear();
        else t->dev_peak = di.mem_peak_used;
        s.device_bytes = t->dev_peak;
    }
    s.arena_bytes = (size_t)info->mem_bytes;
    s.major_faults = faults - t->faults_prev;
    t->faults_prev = faults;
    ct_monitor_figures fig;
    ct_alert ev[CT_ALERT_KIND_COUNT];
    int n = ct_monitor_update(&t->mon, &s, &fig, ev);
    info->gflops = fig.gflops;
    info->mfu = fig.mfu;
    info->mfu_theory = fig.mfu_theory;
    info->rss_bytes = (int64_t)rss;
    info->rss_peak_bytes = (int64_t)peak;
    info->major_faults = s.major_faults;
    for (int i = 0; i < n; i++) {
        const ct_alert *a = &ev[i];
        const char *kind = ct_alert_kind_str(a->kind);
        if (a->cleared) {
            ct_log(CT_LOG_INFO, "monitor: step %lld: %s", (long long)a->step, a->message);
            continue;
        }
        ct_log(CT_LOG_WARN, "step %lld: %s %s alert%s: %s", (long long)a->step,
               ct_alert_level_str(a->level), kind, a->repeat ? " (still)" : "", a->message);
        ct_status st = ct_metrics_write_alert(t->metrics, a->step, ct_alert_level_str(a->level),
                                              kind, a->value, a->threshold, a->message);
        if (st) return st;
    }
    const ct_alert *a = ct_monitor_active(&t->mon);
    info->alert_level = a ? (int)a->level : 0;
    if (a) snprintf(info->alert, sizeof info->alert, "%s: %s", ct_alert_kind_str(a->kind),
                    a->message);
    return gpu_watch_step(t, info, gpu_fresh);
}

/* Remote training data: the transport's and the cache's counters so far, as
 * a "remote" line at each progress line, at the end, and whenever a retry
 * happened since the last one. Nothing for local data. */
static ct_status log_remote(trainer *t, int64_t step) {
    ct_loader_remote_stats ls;
    if (!ct_loader_get_remote_stats(t->train, &ls)) return CT_OK;
    ct_remote_stats rs;
    ct_remote_stats_get(&rs);
    bool due = step % t->cfg->run.log_every == 0 || step == t->cfg->train.steps ||
               rs.retries != t->remote_retries_logged;
    if (!due) return CT_OK;
    t->remote_retries_logged = rs.retries;
    const char *k[] = {"bytes_fetched", "blocks_fetched", "disk_hits", "memory_hits",
                       "requests", "retries", "failures", "bad_blocks", "cache_write_errors",
                       "read_wait_ms"};
    double v[] = {(double)ls.bytes_fetched, (double)ls.blocks_fetched, (double)ls.disk_hits,
                  (double)ls.memory_hits, (double)rs.requests, (double)rs.retries,
                  (double)rs.failures, (double)ls.bad_blocks, (double)ls.cache_write_errors,
                  ls.read_wait_s * 1e3};
    return ct_metrics_write(t->metrics, step, "remote", (int)(sizeof k / sizeof *k), k, v);
}

/* metrics.jsonl and TensorBoard lines of a finished training step, after
 * the monitor has judged it (its alert lines come first). */
static ct_status log_step(trainer *t, ct_step_info *info) {
    bool gfresh = false;
    ct_status st = monitor_step(t, info, &gfresh);
    if (st) return st;
    ct_memstats ms;
    ct_ctx_memstats(t->ctx, &ms);
    const char *keys[] = {"loss", "lr", "grad_norm", "tokens_per_s", "step_ms", "skipped",
                          "spike", "rollback", "data_wait_ms", "mem_bytes", "t_data_ms",
                          "t_fwd_ms", "t_bwd_ms", "t_opt_ms", "t_comm_ms", "gflops", "mfu",
                          "mfu_theory", "rss_bytes", "rss_peak_bytes", "arena_bytes",
                          "mem_limit_bytes", "plan_bytes", "major_faults", "epoch",
                          "counted_tokens", "rollback_to"};
    double vals[] = {info->loss, info->lr, info->grad_norm, info->tokens_per_s, info->step_ms,
                     (double)info->skipped, (double)info->spike, (double)info->rolled_back,
                     info->data_wait_ms, (double)info->mem_bytes, info->t_data_ms,
                     info->t_fwd_ms, info->t_bwd_ms, info->t_opt_ms, info->t_comm_ms,
                     info->gflops, info->mfu, info->mfu_theory, (double)info->rss_bytes,
                     (double)info->rss_peak_bytes, (double)ms.total_current,
                     (double)t->mem_limit, (double)t->plan.total, (double)info->major_faults,
                     info->epoch, (double)info->counted, (double)info->rollback_to};
    int n = (int)(sizeof keys / sizeof *keys) - (info->rolled_back ? 0 : 1);
    if (!t->masked) { /* counted_tokens says something only when targets are masked */
        for (int i = (int)(sizeof keys / sizeof *keys) - 2; i < n - 1; i++) {
            keys[i] = keys[i + 1];
            vals[i] = vals[i + 1];
        }
        n--;
    }
    /* fp16: the loss scale of every step, and the overflows */
    const char *all_k[sizeof keys / sizeof *keys + 2];
    double all_v[sizeof keys / sizeof *keys + 2];
    memcpy(all_k, keys, (size_t)n * sizeof *keys);
    memcpy(all_v, vals, (size_t)n * sizeof *vals);
    if (t->fp16) {
        all_k[n] = "loss_scale";
        all_v[n++] = info->loss_scale;
        if (info->overflow) {
            all_k[n] = "overflow";
            all_v[n++] = 1;
        }
    }
    if ((st = ct_metrics_write(t->metrics, info->step, "train", n, all_k, all_v))) return st;
    const ct_gpu_sample *g = &t->gsample;
    if (t->plan.env.device) { /* the device's memory: its peak so far against the plan;
                               * a watched GPU's reading when this step took one */
        const char *dk[] = {"device_peak_bytes", "device_plan_bytes", "device_limit_bytes",
                            "device_free_bytes", "host_waits", "gpu_util", "gpu_mem_util",
                            "gpu_mem_used_mib", "gpu_mem_total_mib", "gpu_power_w", "gpu_temp_c",
                            "gpu_sm_clock_mhz", "gpu_mem_clock_mhz"};
        double dv[] = {(double)t->dev_peak, (double)t->plan.device, (double)t->mem_limit,
                       (double)t->plan.env.device_free, (double)info->host_waits, g->util_pct,
                       g->mem_util_pct, g->mem_used_mib, g->mem_total_mib, g->power_w, g->temp_c,
                       g->sm_clock_mhz, g->mem_clock_mhz};
        int nd = gfresh ? (int)(sizeof dk / sizeof *dk) : 5;
        if ((st = ct_metrics_write(t->metrics, info->step, "device", nd, dk, dv))) return st;
    }
    if ((st = log_remote(t, info->step))) return st;
    const char *tk[] = {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s",
                        "memory/peak_bytes", "memory/current_bytes", "guard/skipped",
                        "guard/rollbacks", "perf/step_ms", "perf/t_data_ms", "perf/t_fwd_ms",
                        "perf/t_bwd_ms", "perf/t_opt_ms", "perf/t_comm_ms", "perf/gflops",
                        "memory/rss_bytes", "memory/rss_peak_bytes", "memory/arena_bytes",
                        "memory/major_faults", "train/epoch", "alerts/memory", "alerts/throughput",
                        "alerts/loss", "alerts/data_wait", "perf/mfu", "perf/mfu_theory"};
    double tv[] = {info->loss, info->lr, info->grad_norm, info->tokens_per_s,
                   (double)ms.total_peak, (double)ms.total_current,
                   (double)info->skipped_total, (double)info->rollbacks, info->step_ms,
                   info->t_data_ms, info->t_fwd_ms, info->t_bwd_ms, info->t_opt_ms,
                   info->t_comm_ms, info->gflops, (double)info->rss_bytes,
                   (double)info->rss_peak_bytes, (double)ms.total_current,
                   (double)info->major_faults, info->epoch, (double)t->mon.level[CT_ALERT_MEMORY],
                   (double)t->mon.level[CT_ALERT_THROUGHPUT], (double)t->mon.level[CT_ALERT_LOSS],
                   (double)t->mon.level[CT_ALERT_DATA_WAIT], info->mfu, info->mfu_theory};
    /* the MFU figures are left out while their peaks are unknown (NaN) */
    int nt = (int)(sizeof tk / sizeof *tk) - 2;
    for (int i = nt; i < (int)(sizeof tk / sizeof *tk); i++) {
        if (!isfinite(tv[i])) continue;
        tk[nt] = tk[i];
        tv[nt++] = tv[i];
    }
    if ((st = ct_tb_scalars(t->tb, info->step, ct_tb_wall_time(), nt, tk, tv))) return st;
    if (!gfresh) return CT_OK;
    /* the GPU's reading, less what it does not report (NaN) */
    const char *gk[] = {"gpu/util_pct", "gpu/mem_util_pct", "gpu/mem_used_mib", "gpu/power_w",
                        "gpu/temp_c", "gpu/sm_clock_mhz", "gpu/mem_clock_mhz", "alerts/gpu_util"};
    double gv[] = {g->util_pct, g->mem_util_pct, g->mem_used_mib, g->power_w, g->temp_c,
                   g->sm_clock_mhz, g->mem_clock_mhz, t->gutil.firing ? 1.0 : 0.0};
    int ng = 0;
    for (int i = 0; i < (int)(sizeof gk / sizeof *gk); i++) {
        if (!isfinite(gv[i])) continue;
        gk[ng] = gk[i];
        gv[ng++] = gv[i];
    }
    return ct_tb_scalars(t->tb, info->step, ct_tb_wall_time(), ng, gk, gv);
}

/* Validate, log, and update early stopping; *stop when patience ran out. */
static ct_status validate(trainer *t, ct_step_info *info, bool *stop) {
    ct_status st = evaluate(t, &info->val_loss, &info->val_tokens);
    if (st) return st;
    double v = info->val_loss;
    if (isfinite(v) && (isnan(t->best_val) || v < t->best_val)) {
        t->best_val = v;
        t->bad_evals = 0;
        /* run.keep_best: this step's checkpoint is written now and kept */
        if (t->cfg->run.keep_best) {
            t->best_due = info->step;
            t->ckpt_pending = true;
        }
    } else {
        t->bad_evals++;
    }
    const char *vk[] = {"loss", "best_loss"};
    double vv[] = {v, t->best_val};
    if (trainer_root(t) &&
        ((st = ct_metrics_write(t->metrics, info->step, "val", 2, vk, vv)) ||
         (st = ct_tb_scalar(t->tb, "val/loss", info->step, v, ct_tb_wall_time())) ||
         (st = ct_tb_flush(t->tb))))
        return st;
    int64_t patience = t->cfg->train.early_stop_patience;
    if (patience > 0 && t->bad_evals >= patience) {
        ct_log(CT_LOG_INFO, "step %lld: early stop: validation loss %.4f has not improved on "
               "%.4f for %lld evaluations (train.early_stop_patience)", (long long)info->step, v,
               t->best_val, (long long)t->bad_evals);
        *stop = true;
    }
    return CT_OK;
}

/* debug.sleep_ms: a slow step, whole even when a signal arrives (as a long
 * computation would be), so a test can signal a run in mid-step. */
static void debug_sleep(int64_t ms) {
    if (ms <= 0) return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L}, rem;
    while (nanosleep(&ts, &rem) != 0 && errno == EINTR) ts = rem;
}

static bool stop_requested(const trainer *t) {
    if (t->world > 1) return t->stop_seen; /* agreed at the step, so all ranks stop together */
    return t->hooks->stop && *t->hooks->stop != 0;
}

/* --------------------------------------------------------------- the run */

static ct_status open_outputs(trainer *t) {
    const ct_config *cfg = t->cfg;
    ct_status st;
    if (!trainer_root(t)) return CT_OK; /* one voice: rank 0 writes run.dir */
    if ((st = ct_mkdir_p(cfg->run.dir))) return st;
    if (t->clear_dir) { /* a fresh start: run.overwrite, or leftovers of a run that saved nothing */
        char found[256];
        bool results = run_dir_results(cfg->run.dir, found, sizeof found) > 0;
        int removed = 0;
        if ((st = run_dir_clear(cfg->run.dir, results, &removed))) return st;
        if (results)
            ct_log(CT_LOG_INFO, "run.overwrite: removed the earlier run's results from %s (%s; "
                   "%d entries)", cfg->run.dir, found, removed);
        else if (removed)
            ct_log(CT_LOG_INFO, "%s: removed %d file(s) of an earlier run that saved no weights "
                   "(metrics, event files)", cfg->run.dir, removed);
    }
    /* config.yaml.tmp.<pid>, metrics.jsonl.tmp.<pid> and the like of a run
     * killed mid-rewrite: nothing else would ever remove them */
    int stale = ct_afile_remove_stale(cfg->run.dir);
    if (stale)
        ct_log(CT_LOG_INFO, "%s: removed %d temp file%s left by an interrupted write", cfg->run.dir, stale,
               stale == 1 ? "" : "s");
    if ((st = save_config_yaml(cfg))) return st;
    if (t->resume_step >= 0 && (st = ct_train_state_trim_metrics(cfg->run.dir, t->resume_step)))
        return st;
    if ((st = ct_metrics_open(&t->metrics, cfg->run.dir, t->resume_step >= 0))) return st;
    /* where the run went on after a stop: the report marks it */
    if (t->resume_step >= 0) {
        const char *rk[] = {"world"};
        double rv[] = {(double)t->world};
        if ((st = ct_metrics_write(t->metrics, t->resume_step, "resume", 1, rk, rv))) return st;
    }
    return ct_tb_open(&t->tb, cfg->run.dir);
}

/* run.dir/trace.json: the recorded steps in the Trace Event Format (rank 0). */
static ct_status write_trace(trainer *t) {
    if (!trainer_root(t)) return CT_OK;
    ct_kprof_flush(t->kprof); /* the kernels the device may still be at */
    ct_strbuf b = {0};
    ct_trace_to_json(t->trace, &b);
    if (b.oom) {
        ct_strbuf_free(&b);
        return CT_ERR(CT_ERR_OOM, "out of memory writing the trace");
    }
    char path[CT_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/trace.json", t->cfg->run.dir);
    ct_status st = ct_file_write_atomic(path, b.p, b.len);
    ct_strbuf_free(&b);
    if (!st)
        ct_log(CT_LOG_INFO, "trace of steps %lld..%lld: %s (%zu spans; open in Perfetto or "
               "chrome://tracing)", (long long)t->trace_first, (long long)t->trace_last, path,
               ct_trace_count(t->trace));
    return st;
}

/* Where the training loader stands after a step, in passes over the data. */
static void step_epoch(trainer *t, ct_step_info *info) {
    ct_loader_pos p;
    ct_loader_get_pos(t->train, &p);
    int64_t n = ct_loader_batches_in_epoch(t->train, p.epoch);
    info->epoch = (double)p.epoch + (n > 0 ? (double)p.index / (double)n : 0.0);
    info->epochs = t->cfg->train.epochs;
}

/* A step whose data could not be read (remote data past its retries): the
 * micro-batches it took go back, so the checkpoint of the last whole step
 * resumes at exactly the batch that failed; then the error stands. */
static ct_status stop_on_data_error(trainer *t, ct_status err, const ct_loader_pos *before) {
    char msg[1024], hint[1024], site[128];
    snprintf(msg, sizeof msg, "%s", ct_last_error());
    snprintf(hint, sizeof hint, "%s", ct_last_hint());
    snprintf(site, sizeof site, "%s", ct_last_site());
    ct_status st = ct_loader_set_pos(t->train, before);
    if (st == CT_OK && t->step > 0 && t->ckpt_step != t->step && t->resume_step != t->step) {
        if (trainer_root(t))
            ct_log(CT_LOG_WARN, "step %lld: the training data could not be read; writing a "
                   "checkpoint of step %lld before stopping", (long long)t->step + 1,
                   (long long)t->step);
        st = write_checkpoint(t);
    }
    if (st && trainer_root(t))
        ct_log(CT_LOG_ERROR, "no checkpoint after the data error: %s", ct_last_error());
    ct_error_clear();
    char *colon = strrchr(site, ':');
    int line = colon ? atoi(colon + 1) : 0;
    if (colon) *colon = '\0';
    ct_error_set(err, site[0] ? site : __FILE__, line, "%s", msg);
    if (hint[0]) ct_error_hint("%s", hint);
    return err;
}

static ct_status run_loop(trainer *t) {
    const ct_config *cfg = t->cfg;
    ct_train_result *res = t->res;
    int64_t every = cfg->run.checkpoint_every;
    ct_status st;
    while (t->step < cfg->train.steps) {
        int64_t step = t->step + 1;
        ct_step_info info = {0};
        info.step = step;
        info.steps = cfg->train.steps;
        info.val_loss = NAN;
        info.gpu_util_pct = info.gpu_power_w = NAN;
        info.rollback_to = -1;
        bool traced = t->trace && step >= t->trace_first && step <= t->trace_last;
        ct_ctx_set_trace(t->ctx, traced ? t->trace : NULL);
        ct_loader_pos before;
        ct_loader_get_pos(t->train, &before);
        t->data_failed = false;
        if ((st = train_step(t, step, &info)))
            return t->data_failed ? stop_on_data_error(t, st, &before) : st;
        /* a failed rollback still leaves its step in the metrics */
        ct_status rb = CT_OK;
        if (info.rolled_back && (rb = rollback(t, step, &info.rollback_to)))
            info.rolled_back = false;
        t->step = step;
        step_epoch(t, &info);
        res->last_step = step;
        res->final_loss = info.loss;
        info.skipped_total = t->guard.skipped;
        info.rollbacks = t->guard.rollbacks;
        info.lr_factor = t->guard.lr_factor;
        ct_memstats ms;
        ct_ctx_memstats(t->ctx, &ms);
        info.mem_bytes = ms.total_current;
        if (trainer_root(t) && (st = log_step(t, &info))) return st;
        if (rb) return rb;

        bool last = step == cfg->train.steps, early = false;
        double te = ct_time_s();
        if (t->val && ((cfg->train.eval_every && step % cfg->train.eval_every == 0) || last)) {
            if ((st = validate(t, &info, &early))) return st;
            span(t, "evaluation", te, step);
        }
        if (early) res->end = CT_TRAIN_END_EARLY_STOP;
        if (every > 0 && step % every == 0) t->ckpt_pending = true;
        /* the end always leaves a checkpoint: resume=auto continues a
         * finished run (train.steps raised) as it would an interrupted one */
        bool final = early || last || stop_requested(t);
        if (t->ckpt_pending && t->guard.bad_run > 0 && !final) {
            ct_log(CT_LOG_INFO, "step %lld: checkpoint postponed until a good step (%lld bad "
                   "steps in a row)", (long long)step, (long long)t->guard.bad_run);
        } else if (t->ckpt_pending || final) {
            double tc = ct_time_s();
            if ((st = write_checkpoint(t))) return st;
            span(t, "checkpoint", tc, step);
            info.checkpointed = true;
        }
        if (traced && (step == t->trace_last || last || stop_requested(t))) {
            ct_ctx_set_trace(t->ctx, NULL);
            if ((st = write_trace(t))) return st;
        }
        if (t->hooks->progress) t->hooks->progress(&info, t->hooks->user);
        debug_sleep(cfg->debug.sleep_ms);
        if (stop_requested(t)) {
            if (!info.checkpointed && (st = write_checkpoint(t))) return st;
            res->end = CT_TRAIN_END_STOPPED;
            res->stop_value = t->world > 1 ? t->stop_value : (int)*t->hooks->stop;
            break; /* res says where it stopped: the program tells the user once */
        }
        if (early) break;
    }
    return CT_OK;
}

/* train.load_best_at_end: a run that finished (all its steps, or stopped
 * early) ends with the weights of its best validation, from the checkpoint
 * run.keep_best kept; the checkpoint of the last step stays as it is, so
 * resume=auto still continues the run itself. */
static ct_status load_best(trainer *t) {
    const ct_config *cfg = t->cfg;
    if (!cfg->train.load_best_at_end || t->res->end == CT_TRAIN_END_STOPPED) return CT_OK;
    if (t->best_step < 0) {
        if (trainer_root(t))
            ct_log(CT_LOG_WARN, "train.load_best_at_end: no validation checkpoint was kept; the "
                   "final weights are the last step's");
        return CT_OK;
    }
    if (t->best_step == t->step) {
        if (trainer_root(t))
            ct_log(CT_LOG_INFO, "train.load_best_at_end: the last step (%lld) has the best "
                   "validation loss, %.4f", (long long)t->step, t->best_val);
        return CT_OK;
    }
    char dir[TRAINER_DIR_MAX];
    snprintf(dir, sizeof dir, "%s/checkpoints/step_%08lld", cfg->run.dir, (long long)t->best_step);
    int64_t got = -1;
    ct_status st = ct_ckpt_verify(dir, t->signature, &got);
    if (!st && got != t->best_step)
        st = CT_ERR(CT_ERR_FORMAT, "%s: the manifest is for step %lld", dir, (long long)got);
    if (!st) st = ct_train_state_load_weights(t->model, dir);
    if (!st) ct_model_refresh_weights16(t->model);
    if (st) {
        ct_error_prefix("train.load_best_at_end: the best checkpoint (step %lld)",
                        (long long)t->best_step);
        return st;
    }
    if (trainer_root(t))
        ct_log(CT_LOG_INFO, "train.load_best_at_end: the final weights are step %lld's, the best "
               "validation loss (%.4f), from %s", (long long)t->best_step, t->best_val, dir);
    return CT_OK;
}

ct_status ct_train_run_with(ct_ctx *ctx, const ct_config *cfg, const ct_train_hooks *hooks,
                            ct_train_result *result) {
    static const ct_train_hooks no_hooks = {0};
    ct_train_result local;
    trainer *t = calloc(1, sizeof *t);
    if (!result) result = &local;
    memset(result, 0, sizeof *result);
    result->resumed_from = -1;
    result->final_loss = result->best_val_loss = NAN;
    if (!t) return CT_ERR(CT_ERR_OOM, "out of memory for the trainer");
    t->ctx = ctx;
    t->cfg_run = *cfg; /* train.epochs may set train.steps (trainer_setup) */
    t->cfg = &t->cfg_run;
    t->hooks = hooks ? hooks : &no_hooks;
    t->res = result;

    /* 1. check everything before writing anything, on every rank */
    ct_status st = trainer_setup(t);
    if ((st = ct_dist_agree(t->dist, st, "setup")) || (st = trainer_dist_after_setup(t)))
        goto done;
    const ct_model_config *mc = ct_model_get_config(t->model);
    result->resumed_from = t->resume_step;
    result->last_step = t->step;
    ct_log(CT_LOG_INFO, "ctrain train: %zu parameters (%d layers, %d heads, C=%d, V=%d), "
           "%lld training tokens in %d shard%s, %d thread%s, run.dir %s",
           ct_model_numel(t->model), mc->n_layer, mc->n_head, mc->n_embd, mc->vocab_size,
           (long long)ct_loader_total_tokens(t->train), ct_loader_num_shards(t->train),
           ct_loader_num_shards(t->train) == 1 ? "" : "s", ct_ctx_threads(ctx),
           ct_ctx_threads(ctx) == 1 ? "" : "s", cfg->run.dir);
    if (t->resume_step >= 0)
        ct_log(CT_LOG_INFO, "resuming from %s (step %lld of %lld)", t->resume_dir,
               (long long)t->resume_step, (long long)cfg->train.steps);

    /* 2. the run directory, the loop, the final weights */
    if ((st = ct_dist_agree(t->dist, open_outputs(t), "opening run.dir"))) goto done;
    if (trainer_root(t) && (st = write_hw_json(t))) goto done;
    /* the tokenizer beside the weights from the start, so every checkpoint has it too */
    st = trainer_root(t) ? run_tokenizer_write(cfg, t->resume_step >= 0 ? t->resume_dir : "", cfg->run.dir)
                         : CT_OK;
    if ((st = ct_dist_agree(t->dist, st, "writing the tokenizer"))) goto done;
    if (t->step >= cfg->train.steps) {
        ct_log(CT_LOG_INFO, "the checkpoint is at train.steps = %lld already: nothing to train; "
               "writing the final weights", (long long)cfg->train.steps);
        /* a kill between that checkpoint's rename and its pruning left one too many */
        if (trainer_root(t) && t->resume_step >= 0)
            ct_ckpt_prune(cfg->run.dir, t->resume_step, (int)cfg->run.keep_last, t->best_step);
    }
    if ((st = run_loop(t))) goto done;
    if (t->plan.env.device && t->dev_peak && trainer_root(t))
        ct_log(CT_LOG_INFO, "device memory: peak %.1f MiB in use (%s's own count since the "
               "backend started), plan %.1f MiB (%+.1f%%)", t->dev_peak / 1048576.0,
               t->plan.env.device_name, t->plan.device / 1048576.0,
               100.0 * ((double)t->plan.device / (double)t->dev_peak - 1.0));
    if ((st = ct_dist_agree(t->dist, load_best(t), "loading the best checkpoint"))) goto done;
    if (trainer_root(t) && !(st = ct_tb_flush(t->tb))) {
        if (ct_model_lora(t->model)) { /* the adapter, in PEFT's format; the base is unchanged */
            /* the base as an absolute path, so eval, sample and merge find it from
             * any working directory */
            char base[2 * CT_PATH_MAX + 2], cwd[CT_PATH_MAX];
            const char *b = cfg->model.init_from;
            if (b[0] && b[0] != '/' && getcwd(cwd, sizeof cwd)) {
                snprintf(base, sizeof base, "%s/%s", cwd, b);
                b = base;
            }
            st = ct_model_lora_save_peft(t->model, cfg->run.dir, b);
        } else {
            st = ct_model_save_hf(t->model, cfg->run.dir, "model.safetensors", false, true);
        }
    }
    st = ct_dist_agree(t->dist, st, "writing the final weights");
done:
    result->skipped = t->guard.skipped;
    result->spikes = t->guard.spikes;
    result->rollbacks = t->guard.rollbacks;
    result->best_val_loss = t->best_val;
    trainer_release(t);
    run_dir_unlock(t->lock, st != CT_OK);
    free(t);
    return st;
}

ct_status ct_train_run(ct_ctx *ctx, const ct_config *cfg, ct_progress_fn progress, void *user) {
    ct_train_hooks hooks = {.progress = progress, .user = user, .stop = NULL};
    return ct_train_run_with(ctx, cfg, &hooks, NULL);
}
