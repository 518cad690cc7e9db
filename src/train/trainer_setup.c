/*
 * Everything `ctrain train` checks before it writes a byte: the config's keys
 * and their contradictions, that run.dir can be created, the model (from
 * sizes, model.init_from, or the checkpoint to resume from; with the
 * train.recompute policy and train.activation_dtype), which checkpoint
 * train.resume names and whether it fits the config (model signature, batch
 * shape, seed, shuffling, starting weights), the data, and the restored
 * optimizer, loader, guard and early-stopping state. LoRA runs (lora.*) load
 * the frozen base, attach the adapters and train only those.
 * Leaves out: the loop itself (trainer.c).
 */
#include "train/trainer_int.h"

#include "ctrain/data.h"

#include "backend/backend.h"
#include "backend/cpu/gemm.h"
#include "backend/ctx.h"
#include "backend/device.h"
#include "perf/kprof.h"
#include "train/run_tokenizer.h"

#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "perf/bench.h"

#include <cblas.h>

ct_status ct_model_config_from(ct_model_config *out, const ct_config *cfg) {
    const char *arch = cfg->model.arch;
    ct_family fam;
    if (!ct_model_family_from_name(arch, &fam))
        return CT_ERR(CT_ERR_ARG, "model.arch = %s is unknown: expected gpt2, llama, mistral, "
                      "qwen2, qwen3 or gemma3_text", arch);
    bool llama = fam != CT_FAMILY_GPT2;
    if (cfg->model.preset[0]) {
        ct_status st = ct_model_config_preset(out, cfg->model.preset);
        if (st) return st;
    } else {
        if (!cfg->model.n_layer || !cfg->model.n_head || !cfg->model.n_embd ||
            !cfg->model.vocab_size || !cfg->model.n_ctx || (llama && !cfg->model.n_ffn)) {
            ct_status st = CT_ERR(CT_ERR_ARG, "no model given: set model.init_from, model.preset, "
                                  "or all of model.n_layer, model.n_head, model.n_embd, "
                                  "model.vocab_size and model.n_ctx%s",
                                  llama ? " (and model.n_ffn for the llama layout)" : "");
            ct_error_hint(llama ? "e.g. model.preset=llama-demo, with model.vocab_size=32000 for "
                                  "text prepared with LLaMA's tokenizer (the preset's own "
                                  "vocabulary is a toy 512)"
                                : "e.g. model.preset=gpt2-demo, with model.vocab_size=50257 for "
                                  "text prepared with the GPT-2 tokenizer (the preset's own "
                                  "vocabulary is a toy 512)");
            return st;
        }
        if (llama) {
            ct_model_config_llama(out, 1, 1, 1, 2, 1, 2, 1);
            /* the family's own switches (Qwen2's q, k, v biases, Qwen3's q/k norms,
             * Gemma's; no sliding window from sizes) */
            ct_model_config_family(out, fam);
        } else {
            ct_model_config_gpt2(out, 1, 1, 1, 2, 1);
        }
    }
    bool is_llama = out->arch == CT_ARCH_LLAMA; /* a preset decides the arch */
    if (cfg->model.n_layer) out->n_layer = (int)cfg->model.n_layer;
    if (cfg->model.n_head) {
        out->n_head = (int)cfg->model.n_head;
        if (!is_llama || !cfg->model.n_kv_head) out->n_kv_head = out->n_head;
    }
    if (cfg->model.n_embd) {
        out->n_embd = (int)cfg->model.n_embd;
        if (!is_llama) out->n_ffn = 4 * out->n_embd;
    }
    if (cfg->model.n_ffn) out->n_ffn = (int)cfg->model.n_ffn;
    if (cfg->model.vocab_size) out->vocab_size = (int)cfg->model.vocab_size;
    if (cfg->model.n_ctx) out->n_ctx = (int)cfg->model.n_ctx;
    if (cfg->model.n_kv_head) {
        if (!is_llama && cfg->model.n_kv_head != out->n_head)
            return CT_ERR(CT_ERR_ARG, "model.n_kv_head = %lld: grouped KV heads are not "
                          "available for gpt2 (n_head = %d)", (long long)cfg->model.n_kv_head,
                          out->n_head);
        out->n_kv_head = (int)cfg->model.n_kv_head;
    }
    if (cfg->model.head_dim) {
        if (!is_llama && cfg->model.head_dim * out->n_head != out->n_embd)
            return CT_ERR(CT_ERR_ARG, "model.head_dim = %lld: a gpt2 model's head size is "
                          "n_embd / n_head = %d", (long long)cfg->model.head_dim,
                          out->n_embd / out->n_head);
        out->head_dim = (int)cfg->model.head_dim;
    }
    return ct_model_config_validate(out);
}

ct_guard_params trainer_guard_params(const ct_config *cfg) {
    ct_guard_params p = {.window = (int)cfg->guard.window, .zscore = cfg->guard.zscore,
                         .min_steps = (int)cfg->guard.min_steps, .max_bad = (int)cfg->guard.max_bad,
                         .lr_factor = cfg->guard.lr_factor,
                         .norm_spikes = !(cfg->optim.grad_clip > 0)};
    return p;
}

/* Keys whose features are not built yet: refuse rather than silently ignore. */
static ct_status refuse_unsupported(const ct_config *cfg) {
    if (cfg->debug.dump_grads_step && (cfg->lora.r > 0 || cfg->lora.init_from[0]))
        return CT_ERR(CT_ERR_ARG, "debug.dump_grads_step writes the model's gradients, and a "
                      "LoRA run's frozen base has none: unset it for lora.* runs");
    return CT_OK;
}

/* bf16 (train.precision or lora.base_dtype) on a GPU without bf16 GEMMs
 * (compute capability below 8.0): refused before anything is built. */
/* And fp16 where it does not belong: on a CPU, or on a GPU that has bf16
 * (ct_run_precision asks the cpu, ref and sim devices; an opened GPU is asked
 * here). */
static ct_status check_device_bf16(trainer *t) {
    ct_precision prec;
    ct_status st = ct_run_precision(t->cfg, &prec);
    if (st) return st;
    ct_backend *be = ct_ctx_base_backend(t->ctx);
    if (!ct_backend_has_device_memory(be)) return CT_OK;
    ct_device_info di;
    if (ct_backend_device_info(be, &di)) return ct_last_status();
    if (prec == CT_PREC_FP16 && (st = ct_device_check_fp16(&di))) return st;
    bool lora = t->cfg->lora.r > 0 || t->cfg->lora.init_from[0];
    return ct_device_check_bf16(&di, t->cfg->train.precision, lora ? ct_lora_base_dtype_name(t->cfg) : NULL);
}

/* debug.bad_steps "A-B" (1 <= A <= B) into first/last; "" gives 0, -1. */
static ct_status parse_bad_steps(const char *v, int64_t *first, int64_t *last) {
    *first = 0;
    *last = -1;
    if (!v[0]) return CT_OK;
    long long a, b;
    char tail;
    if (sscanf(v, "%lld-%lld%c", &a, &b, &tail) != 2 || a < 1 || b < a)
        return CT_ERR(CT_ERR_ARG, "debug.bad_steps = '%s': expected A-B with 1 <= A <= B "
                      "(e.g. 5-8)", v);
    *first = a;
    *last = b;
    return CT_OK;
}

/* run.dir must be a directory we can create (or write into), found without
 * creating anything: walk up to the first path component that exists. */
static ct_status check_run_dir(const char *dir) {
    char p[CT_PATH_MAX];
    snprintf(p, sizeof p, "%s", dir);
    for (;;) {
        struct stat sb;
        if (stat(p, &sb) == 0) {
            if (!S_ISDIR(sb.st_mode)) {
                ct_status st = CT_ERR(CT_ERR_IO, "run.dir = %s: cannot create it: %s is not a "
                                      "directory", dir, p);
                ct_error_hint("set run.dir to a directory path");
                return st;
            }
            if (access(p, W_OK | X_OK) != 0) {
                ct_status st = CT_ERR(CT_ERR_IO, "run.dir = %s: %s is not writable: %s", dir, p,
                                      strerror(errno));
                ct_error_hint("check its permissions or set run.dir elsewhere");
                return st;
            }
            return CT_OK;
        }
        if (errno != ENOENT && errno != ENOTDIR)
            return CT_ERR(CT_ERR_IO, "run.dir = %s: cannot inspect %s: %s", dir, p,
                          strerror(errno));
        char *slash = strrchr(p, '/');
        while (slash && slash > p && slash[1] == '\0') { /* trailing slashes */
            *slash = '\0';
            slash = strrchr(p, '/');
        }
        if (!slash) {
            snprintf(p, sizeof p, ".");
        } else if (slash == p) {
            p[1] = '\0'; /* "/" */
        } else {
            *slash = '\0';
        }
    }
}

/* The model's shape, from model.init_from's config.json or the sizes. */
static ct_status model_shape(const ct_config *cfg, ct_model_config *mc) {
    if (cfg->model.init_from[0]) {
        if (cfg->model.preset[0] || cfg->model.n_layer || cfg->model.n_head ||
            cfg->model.n_embd || cfg->model.vocab_size || cfg->model.n_ctx || cfg->model.n_ffn)
            return CT_ERR(CT_ERR_ARG, "model.init_from is set, so the model's shape comes from "
                          "%s/config.json: remove model.preset and model sizes",
                          cfg->model.init_from);
        return ct_model_config_load_hf(mc, cfg->model.init_from);
    }
    return ct_model_config_from(mc, cfg);
}

/* A LoRA checkpoint whose base was stored the other way than lora.base_dtype=auto
 * stores it now (runs started when fp32 was the default kept it fp32 under
 * train.precision=bf16 too): name the setting that resumes it. The signatures
 * are in the error's text, the checkpoint's first. */
static void hint_lora_base_dtype(const trainer *t) {
    const ct_config *cfg = t->cfg;
    if (t->plan.lora.r <= 0 || strcmp(cfg->lora.base_dtype, "auto")) return;
    const char *other = t->plan.lora.base_bf16 ? "fp32" : "bf16";
    char tok[16];
    snprintf(tok, sizeof tok, "base=%s ", other);
    if (!strstr(ct_last_error(), tok)) return;
    ct_error_hint("the checkpoint keeps the LoRA base in %s, and lora.base_dtype=auto stores it "
                  "in %s under train.precision=%s: set lora.base_dtype=%s to resume it",
                  other, t->plan.lora.base_bf16 ? "bf16" : "fp32", cfg->train.precision, other);
}

/* Which checkpoint train.resume names, per the rules in train.h; sets
 * t->resume_dir / resume_step (-1: fresh) and reads its state record. */
static ct_status find_resume(trainer *t) {
    const ct_config *cfg = t->cfg;
    const char *mode = cfg->train.resume, *run = cfg->run.dir;
    t->resume_step = -1;
    int64_t *steps = NULL;
    int n = 0;
    ct_status st;
    bool is_path = strcmp(mode, "never") != 0 && strcmp(mode, "auto") != 0;
    if (cfg->run.overwrite && strcmp(mode, "never") != 0)
        return CT_ERR(CT_ERR_ARG, "run.overwrite = true deletes an earlier run's results, so it "
                      "goes only with train.resume = never (it is %s)", mode);
    if (!is_path) {
        if ((st = ct_ckpt_list(run, &steps, &n))) return st;
        int64_t newest = n ? steps[n - 1] : -1;
        free(steps);
        /* an earlier run's results are never overwritten unasked */
        char found[256];
        int results = run_dir_results(run, found, sizeof found);
        if (!strcmp(mode, "never") && results) {
            if (cfg->run.overwrite) {
                t->clear_dir = true;
                return CT_OK;
            }
            if (n)
                st = CT_ERR(CT_ERR_ARG, "run.dir = %s holds an earlier run (%s; the newest "
                            "checkpoint step_%08lld) and train.resume = never", run, found,
                            (long long)newest);
            else
                st = CT_ERR(CT_ERR_ARG, "run.dir = %s holds an earlier run's results (%s) and "
                            "train.resume = never would overwrite them", run, found);
            ct_error_hint(n ? "continue it with train.resume=auto (raise train.steps to train "
                              "longer), start over with run.overwrite=true (deletes its results), "
                              "or set another run.dir"
                            : "start over with run.overwrite=true (deletes them), set another "
                              "run.dir, or train from those weights with model.init_from=%s in "
                              "a new run.dir", run);
            return st;
        }
        if (n == 0) {
            if (results) { /* auto, with results but no checkpoint: not a fresh start */
                st = CT_ERR(CT_ERR_ARG, "train.resume = auto: run.dir = %s holds an earlier "
                            "run's results (%s) but no checkpoint to continue from", run, found);
                ct_error_hint("train from those weights with model.init_from=%s in a new "
                              "run.dir, or start over with train.resume=never "
                              "run.overwrite=true (deletes them)", run);
                return st;
            }
            if (!strcmp(mode, "auto"))
                ct_log(CT_LOG_INFO, "train.resume = auto: no checkpoint in %s/checkpoints, "
                       "starting a fresh run", run);
            /* what a run that saved nothing left (metrics, event files)
             * goes, so it cannot mix with this run's */
            t->clear_dir = true;
            return CT_OK;
        }
        st = ct_ckpt_latest(run, t->signature, t->resume_dir, sizeof t->resume_dir,
                            &t->resume_step);
        if (st == CT_ERR_ARG) {
            ct_error_prefix("train.resume = auto");
            ct_error_hint("run.dir %s belongs to a run of another model: set the same model keys, "
                          "or use another run.dir", run);
            hint_lora_base_dtype(t);
            return st;
        }
        if (st == CT_ERR_IO) {
            ct_error_prefix("train.resume = auto");
            ct_error_hint("every checkpoint failed to verify (see the warnings): move them away to "
                          "start over, or name one with train.resume=PATH");
        }
        if (st) return st;
    } else {
        /* a LoRA run's checkpoint holds only the adapter: the base comes from
         * model.init_from (checked against the checkpoint's base hash) */
        if (cfg->model.init_from[0] && !t->plan.lora.r) {
            st = CT_ERR(CT_ERR_ARG, "model.init_from = %s and train.resume = %s both name the "
                        "starting weights", cfg->model.init_from, mode);
            ct_error_hint("drop model.init_from to resume the checkpoint, or set "
                          "train.resume=never to start from %s", cfg->model.init_from);
            return st;
        }
        if (snprintf(t->resume_dir, sizeof t->resume_dir, "%s", mode) >= (int)sizeof t->resume_dir)
            return CT_ERR(CT_ERR_ARG, "train.resume: path too long");
        st = ct_ckpt_verify(t->resume_dir, t->signature, &t->resume_step);
        if (st) {
            ct_error_prefix("train.resume = %s", mode);
            char manifest[TRAINER_DIR_MAX + 32];
            snprintf(manifest, sizeof manifest, "%s/checkpoints", mode);
            struct stat sb;
            if (st == CT_ERR_IO && stat(manifest, &sb) == 0)
                ct_error_hint("%s is a run directory: name one of %s/step_* or use "
                              "train.resume=auto with run.dir=%s", mode, manifest, mode);
            else if (st != CT_ERR_ARG)
                ct_error_hint("name an intact checkpoint directory (run.dir/checkpoints/step_*)");
            else
                hint_lora_base_dtype(t);
            return st;
        }
    }
    t->resume_state = malloc(sizeof *t->resume_state);
    if (!t->resume_state) return CT_ERR(CT_ERR_OOM, "out of memory reading a checkpoint");
    if ((st = ct_train_state_read(t->resume_dir, t->resume_state))) return st;
    if (t->resume_state->step != t->resume_step)
        return CT_ERR(CT_ERR_FORMAT, "%s: the training state is for step %lld, the manifest for "
                      "step %lld", t->resume_dir, (long long)t->resume_state->step,
                      (long long)t->resume_step);
    return CT_OK;
}

/* The config against the checkpoint's record: what must not change. */
static ct_status check_resume_fits(trainer *t) {
    const ct_config *cfg = t->cfg;
    const ct_train_state *s = t->resume_state;
    /* the global batch must stay; the rank count may change with it (2 ranks
     * x B resume as 1 x 2B: the same rows, the same sequential position) */
    if ((int64_t)t->B * t->world != s->batch_size * s->world ||
        (cfg->data.shuffle && s->world != t->world)) {
        ct_status st = CT_ERR(CT_ERR_ARG, "train.batch_size = %d on %d rank(s), but checkpoint "
                              "%s was written with train.batch_size = %lld on %lld rank(s)",
                              t->B, t->world, t->resume_dir, (long long)s->batch_size,
                              (long long)s->world);
        if (cfg->data.shuffle)
            ct_error_hint("with data.shuffle=true resume with the same batch size and rank "
                          "count (the shuffled windows are batch-sized)");
        else
            ct_error_hint("keep train.batch_size x ranks = %lld (e.g. train.batch_size=%lld "
                          "on one process)", (long long)(s->batch_size * s->world),
                          (long long)(s->batch_size * s->world));
        return st;
    }
    if (s->world != t->world)
        ct_log(CT_LOG_INFO, "resuming a run of %lld rank(s) on %d: the global batch of %lld "
               "sequences is unchanged", (long long)s->world, t->world,
               (long long)(s->batch_size * s->world));
    struct {
        const char *key;
        int64_t now, then;
    } same[] = {
        {"train.seq_len", cfg->train.seq_len, s->seq_len},
        {"train.grad_accum", t->accum, s->grad_accum},
        {"train.seed", cfg->train.seed, s->seed},
        {"data.shuffle", cfg->data.shuffle ? 1 : 0, s->shuffle ? 1 : 0},
    };
    /* instruction data's rows: compared once the loaders are open (they say
     * whether the shards hold examples) */
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        if (same[i].now == same[i].then) continue;
        ct_status st = CT_ERR(CT_ERR_ARG, "%s = %lld, but checkpoint %s was written with "
                              "%s = %lld", same[i].key, (long long)same[i].now, t->resume_dir,
                              same[i].key, (long long)same[i].then);
        ct_error_hint("a resumed run must keep its batch shape, seed and data order: set %s=%lld, "
                      "or start a new run in another run.dir", same[i].key,
                      (long long)same[i].then);
        return st;
    }
    if (cfg->model.init_from[0] && strcmp(cfg->model.init_from, s->init_from) != 0) {
        ct_status st;
        if (s->init_from[0])
            st = CT_ERR(CT_ERR_ARG, "model.init_from = %s, but the run in %s started from %s",
                        cfg->model.init_from, cfg->run.dir, s->init_from);
        else
            st = CT_ERR(CT_ERR_ARG, "model.init_from = %s, but the run in %s started from "
                        "freshly initialised weights", cfg->model.init_from, cfg->run.dir);
        ct_error_hint("drop model.init_from to continue that run, or use another run.dir");
        return st;
    }
    if (cfg->train.epochs == 0 && s->step > cfg->train.steps) {
        ct_status st = CT_ERR(CT_ERR_ARG, "train.steps = %lld, but checkpoint %s is already at "
                              "step %lld", (long long)cfg->train.steps, t->resume_dir,
                              (long long)s->step);
        ct_error_hint("set train.steps above %lld to continue training", (long long)s->step);
        return st;
    }
    return CT_OK;
}

/* Plans the run's memory for the model shape mc before anything is allocated:
 * resolves batch_size=auto and recompute=auto and refuses a run that does not
 * fit run.memory_limit. Sets t->B, t->accum, t->mopts, t->plan, t->mem_limit. */
static ct_status plan_memory(trainer *t, const ct_model_config *mc) {
    const ct_config *cfg = t->cfg;
    /* plan for the context's threads: run.threads = 0 would count the CPUs
     * this thread may run on, and the context has pinned it to one */
    ct_config *c = malloc(sizeof *c);
    if (!c) return CT_ERR(CT_ERR_OOM, "out of memory planning the run");
    *c = *cfg;
    c->run.threads = ct_ctx_threads(t->ctx);
    ct_run_env env;
    ct_status st = ct_run_env_measure(&env, c);
    if (!st && t->gemm_n > 0 && env.gemm == CT_GEMM_OPENBLAS) {
        /* the GEMM peak measurement's packing buffers are resident already,
         * and the plan's BLAS line counts them (as `ctrain plan` sees it).
         * oneDNN's were released after the measurement */
        size_t b = ct_blas_gemm_resident(&env.blas, t->gemm_n, t->gemm_n, t->gemm_n,
                                         c->run.threads);
        env.process -= b < env.process ? b : env.process;
    }
    /* a device's memory holds the tensors of a GPU run: run.memory_limit is of it */
    int local = ct_dist_local_size(t->dist);
    if (!st) {
        ct_backend *be = ct_ctx_base_backend(t->ctx);
        bool gpu = ct_backend_has_device_memory(be) && be->i != &ct_backend_sim_i;
        int n = gpu ? ct_cuda_probe(NULL, 0, NULL, 0) : 1;
        st = ct_run_env_measure_device(&env, be, ct_device_share(cfg->run.device, local, n));
    }
    if (!st)
        st = ct_run_plan_for_env(c, mc, t->world, local, &env, &t->plan, &t->mem_limit);
    free(c);
    if (st) return st;
    t->B = t->plan.B;
    t->accum = t->plan.grad_accum;
    t->mopts = t->plan.opts; /* train.precision included (ct_run_precision) */
    t->mopts.fp32_logits = t->cfg->debug.fp32_logits;
    const ct_run_plan *p = &t->plan;
    const double MiB = 1048576.0;
    if (t->mopts.precision == CT_PREC_BF16 && t->rank == 0)
        ct_log(CT_LOG_INFO, "train.precision = bf16: the linear and head GEMMs read bf16 inputs "
               "(autocast), fp32 sums and master weights; bf16 weight copies %.1f MiB",
               p->model.weights16 / MiB);
    if (t->mopts.precision == CT_PREC_FP16 && t->rank == 0) {
        char sc[128];
        if (cfg->train.loss_scale > 0) snprintf(sc, sizeof sc, "static loss scale %g",
                                                cfg->train.loss_scale);
        else snprintf(sc, sizeof sc, "dynamic loss scale from %g, x2 every %lld good steps",
                      cfg->train.loss_scale_init, (long long)cfg->train.loss_scale_window);
        ct_log(CT_LOG_INFO, "train.precision = fp16: the linear and head GEMMs read fp16 inputs "
               "(autocast), fp32 sums and master weights, attention fp32; %s; fp16 weight "
               "copies %.1f MiB", sc, p->model.weights16 / MiB);
    }
    bool dev = p->env.device;
    char layers[48] = "";
    if (t->mopts.recompute_layers > 0)
        snprintf(layers, sizeof layers, " train.recompute_layers=%d", t->mopts.recompute_layers);
    if (cfg->train.batch_size == 0 || strcmp(cfg->train.recompute, "auto") == 0)
        ct_log(CT_LOG_INFO, "memory plan: train.batch_size=%d train.grad_accum=%lld "
               "train.recompute=%s%s, %.0f MiB of run.memory_limit %.0f MiB%s", t->B,
               (long long)t->accum, ct_model_recompute_name(t->mopts.recompute), layers,
               (dev ? p->device : p->total) / MiB, t->mem_limit / MiB,
               dev ? " (device memory)" : "");
    if (dev)
        ct_log(CT_LOG_INFO, "device memory plan: %.1f MiB of %s's %.1f MiB free (%.1f MiB in "
               "all) = model %.1f + AdamW %.1f + workspaces %.1f + reserve %.1f; "
               "run.memory_limit %.1f MiB", p->device / MiB, p->env.device_name,
               p->env.device_free / MiB, p->env.device_total / MiB, p->model.total / MiB,
               p->optim / MiB, p->dev_ws / MiB, p->dev_reserve / MiB, t->mem_limit / MiB);
    char gemm_label[64];
    if (p->env.gemm == CT_GEMM_ONEDNN) snprintf(gemm_label, sizeof gemm_label, "oneDNN workspace");
    else snprintf(gemm_label, sizeof gemm_label, "OpenBLAS %s buffers", p->env.blas.core);
    ct_log(CT_LOG_INFO, "%smemory plan: %.1f MiB = model %.1f + AdamW %.1f + data %.1f + shards "
           "%.1f + process %.1f (measured %.1f) + code %.1f + tokenizer %.1f + threads %.1f + "
           "I/O %.1f + %s %.1f + reserve %.1f", dev ? "host " : "", p->total / MiB,
           dev ? 0.0 : p->model.total / MiB, dev ? 0.0 : p->optim / MiB, p->data / MiB,
           p->shards / MiB,
           p->rt_process / MiB, env.process / MiB, p->rt_code / MiB, p->rt_tokenizer / MiB,
           p->rt_threads / MiB, p->rt_io / MiB, gemm_label, p->rt_blas / MiB,
           p->rt_reserve / MiB);
    return CT_OK;
}

/* A LoRA run: the frozen base first (model.init_from, or the seeded
 * initialisation: either way what every resume rebuilds), then the adapters,
 * whose signature includes the base's hash; their weights come from the
 * checkpoint, lora.init_from, or PEFT's seeded initialisation. */
static ct_status build_lora_model(trainer *t, const ct_model_config *mc) {
    const ct_config *cfg = t->cfg;
    ct_status st;
    if (cfg->model.init_from[0]) {
        /* a bf16 base is read straight into bf16: no fp32 copy of it ever exists */
        st = ct_model_load_hf_lora(&t->model, t->ctx, cfg->model.init_from, &t->plan.lora);
        if (st) return st;
    } else {
        if ((st = ct_model_init(&t->model, t->ctx, mc))) return st;
        if ((st = ct_model_init_weights(t->model, (uint64_t)cfg->train.seed))) return st;
        if ((st = ct_model_lora_attach(t->model, &t->plan.lora))) return st;
    }
    if ((st = ct_ckpt_signature(t->model, t->signature, sizeof t->signature))) return st;
    if ((st = find_resume(t))) return st;
    const ct_lora_opts *lo = &t->plan.lora;
    int kinds = 0;
    for (uint32_t b = lo->targets; b; b &= b - 1) kinds++;
    ct_log(CT_LOG_INFO, "LoRA: r=%d alpha=%g dropout=%g on %d modules per layer%s%s, %zu "
           "trainable parameters, base frozen (%zu, stored %s%s)", lo->r, (double)lo->alpha,
           (double)lo->dropout, kinds,
           lo->save_modules ? ", trained in full (modules_to_save):" : "",
           lo->save_modules == (CT_LORA_SAVE_EMBED | CT_LORA_SAVE_HEAD) ? " embed_tokens, lm_head"
           : lo->save_modules == CT_LORA_SAVE_EMBED ? " embed_tokens"
           : lo->save_modules == CT_LORA_SAVE_HEAD ? " lm_head" : "",
           ct_model_trainable_numel(t->model), ct_model_numel(t->model),
           lo->base_bf16 ? "bf16" : "fp32",
           strcmp(cfg->lora.base_dtype, "auto") ? ""
           : lo->base_bf16 ? ": lora.base_dtype=auto under train.precision=bf16, whose GEMMs "
                             "read it in bf16"
                           : ": lora.base_dtype=auto");
    if (t->resume_step >= 0) {
        if ((st = check_resume_fits(t))) return st;
        return ct_train_state_load_weights(t->model, t->resume_dir);
    }
    if (cfg->lora.init_from[0]) {
        st = ct_model_lora_load_peft(t->model, cfg->lora.init_from);
        if (st) ct_error_prefix("lora.init_from = %s", cfg->lora.init_from);
        return st;
    }
    return ct_model_lora_init_weights(t->model, (uint64_t)cfg->train.seed);
}

/* Build the model: fresh from sizes (seeded init), from model.init_from, or
 * from the checkpoint (its weights, shape checked by the signature). */
static ct_status build_model(trainer *t) {
    const ct_config *cfg = t->cfg;
    ct_model_config mc;
    ct_status st = model_shape(cfg, &mc);
    if (st) return st;
    if ((st = plan_memory(t, &mc))) return st;
    if (t->plan.lora.r > 0) return build_lora_model(t, &mc);
    /* the signature needs a model; its zeroed weights are the fresh run's start */
    if ((st = ct_model_init(&t->model, t->ctx, &mc))) return st;
    if ((st = ct_ckpt_signature(t->model, t->signature, sizeof t->signature))) return st;
    if ((st = find_resume(t))) return st;
    if (t->resume_step >= 0) {
        if ((st = check_resume_fits(t))) return st;
        ct_model_free(t->model);
        t->model = NULL;
        if ((st = ct_model_load_hf(&t->model, t->ctx, t->resume_dir))) return st;
        char got[TRAINER_SIG_MAX];
        if ((st = ct_ckpt_signature(t->model, got, sizeof got))) return st;
        if (strcmp(got, t->signature) != 0)
            return CT_ERR(CT_ERR_FORMAT, "%s: config.json describes [%s], the manifest [%s]",
                          t->resume_dir, got, t->signature);
        return CT_OK;
    }
    if (cfg->model.init_from[0]) {
        ct_model_free(t->model);
        t->model = NULL;
        return ct_model_load_hf(&t->model, t->ctx, cfg->model.init_from);
    }
    return ct_model_init_weights(t->model, (uint64_t)cfg->train.seed);
}

/* model.dropout: -1 keeps the model's probabilities (config.json's, the
 * checkpoint's on a resume; 0 for a model built from scratch), p >= 0 sets
 * every dropout the arch has to p (LLaMA: attention only, as HF's
 * LlamaModel has no other). Logs what trains. */
static ct_status apply_dropout(trainer *t) {
    const ct_config *cfg = t->cfg;
    bool llama = ct_model_get_config(t->model)->arch == CT_ARCH_LLAMA;
    const char *from;
    if (cfg->model.dropout >= 0) {
        float p = (float)cfg->model.dropout;
        ct_status st = ct_model_set_dropout(t->model, llama ? 0.0f : p, llama ? 0.0f : p, p);
        if (st) {
            ct_error_prefix("model.dropout = %g", cfg->model.dropout);
            return st;
        }
        from = "model.dropout";
    } else if (t->resume_step >= 0 && !ct_model_lora(t->model)) {
        from = "the checkpoint's config.json";
    } else if (cfg->model.init_from[0]) {
        from = "config.json";
    } else {
        from = "none from scratch; model.dropout sets it";
    }
    const ct_model_config *mc = ct_model_get_config(t->model);
    if (llama)
        ct_log(CT_LOG_INFO, "dropout: attention %g (%s)", (double)mc->attn_pdrop, from);
    else
        ct_log(CT_LOG_INFO, "dropout: embeddings %g, residual %g, attention %g (%s)",
               (double)mc->embd_pdrop, (double)mc->resid_pdrop, (double)mc->attn_pdrop, from);
    return CT_OK;
}

/* How many micro-batches one validation scores: train.eval_batches, or
 * (0) the whole val split, one pass, capped at train.eval_tokens. */
static ct_status plan_evaluation(trainer *t) {
    const ct_config *cfg = t->cfg;
    t->eval_batches = 0;
    if (!t->val) return CT_OK;
    int64_t per_epoch = ct_loader_batches_per_epoch(t->val); /* this rank's */
    int64_t batch = (int64_t)t->B * t->T * t->world;         /* tokens per batch, all ranks */
    int64_t n = cfg->train.eval_batches;
    if (n == 0) {
        n = per_epoch;
        if (cfg->train.eval_tokens > 0 && n * batch > cfg->train.eval_tokens)
            n = cfg->train.eval_tokens / batch;
        if (n < 1) n = 1;
    }
    t->eval_batches = n;
    int64_t split = ct_loader_total_tokens(t->val);
    if (cfg->train.eval_batches)
        ct_log(CT_LOG_INFO, "validation: %lld batches of %lld tokens (train.eval_batches) = "
               "%lld of the val split's %lld tokens", (long long)n, (long long)batch,
               (long long)(n * batch), (long long)split);
    else if (n >= per_epoch)
        ct_log(CT_LOG_INFO, "validation: the whole val split, %lld batches of %lld tokens = "
               "%lld of its %lld tokens", (long long)n, (long long)batch,
               (long long)(n * batch), (long long)split);
    else
        ct_log(CT_LOG_INFO, "validation: %lld batches of %lld tokens = %lld of the val split's "
               "%lld tokens (%.0f%%; train.eval_tokens = %lld caps it)", (long long)n,
               (long long)batch, (long long)(n * batch), (long long)split,
               100.0 * (double)(n * batch) / (double)split, (long long)cfg->train.eval_tokens);
    return CT_OK;
}

static ct_status open_loaders(trainer *t) {
    const ct_config *cfg = t->cfg;
    ct_loader_opts lo = ct_loader_opts_default();
    /* remote data's settings (validated with the config) */
    lo.cache_dir = cfg->data.cache_dir;
    (void)ct_config_bytes("data.cache_limit", cfg->data.cache_limit, &lo.cache_limit);
    (void)ct_config_bytes("data.readahead", cfg->data.readahead, &lo.readahead);
    lo.cache_ttl_s = cfg->data.cache_ttl;
    lo.retries = (int)cfg->data.retries;
    lo.timeout_s = cfg->data.timeout_s;
    lo.offline = cfg->data.offline;
    lo.spec = cfg->data.train;
    lo.B = t->B;
    lo.T = t->T;
    lo.vocab_size = ct_model_get_config(t->model)->vocab_size;
    lo.shuffle = cfg->data.shuffle;
    lo.seed = (uint64_t)cfg->train.seed;
    lo.prefetch = (int)cfg->data.prefetch;
    lo.rank = t->rank; /* rank r of w reads window (m*w + r) of every step */
    lo.world = t->world;
    lo.packing = cfg->data.packing;
    lo.group_by_length = cfg->data.group_by_length;
    lo.accum = (int)t->accum;
    ct_status st = ct_loader_init(&t->train, &lo);
    if (st) {
        ct_error_prefix("data.train");
        if (strstr(ct_last_error(), "fewer than one batch"))
            ct_error_hint("a batch is train.batch_size x train.seq_len tokens (+1): lower them, "
                          "or prepare more text");
        /* a preset's toy vocabulary under real text: name the size the shards need */
        char keep[1024];
        snprintf(keep, sizeof keep, "%s", ct_last_error());
        ct_tok_info shards;
        if (strstr(keep, "the model's vocab_size is") &&
            ct_tok_info_of_shards(&shards, cfg->data.train) == CT_OK && shards.vocab_size > 0 &&
            shards.vocab_size > lo.vocab_size && !cfg->model.init_from[0]) {
            ct_error_clear();
            st = CT_ERR(st, "%s", keep);
            ct_error_hint("the shards were prepared with a tokenizer of %lld tokens (%s): set "
                          "model.vocab_size=%lld%s", (long long)shards.vocab_size, shards.where,
                          (long long)shards.vocab_size,
                          cfg->model.preset[0] ? " (the demo and tiny presets have toy "
                                                 "vocabularies)" : "");
        }
        return st;
    }
    /* validation reads the same first batches every time: read them in place;
     * the ranks split them as they split training batches, so N ranks at B
     * score the rows of one rank at N*B */
    lo.spec = cfg->data.val;
    lo.split = "val";
    lo.shuffle = false;
    lo.seed = 0;
    lo.prefetch = 0;
    lo.group_by_length = false;
    lo.accum = 1;
    if (cfg->data.val[0] && ct_loader_split_missing(cfg->data.val, "val")) {
        /* its *.bin are training shards: scoring them is not validation */
        if (cfg->train.early_stop_patience > 0) {
            st = CT_ERR(CT_ERR_ARG, "data.val = %s holds no val_*.bin, and "
                        "train.early_stop_patience needs validation", cfg->data.val);
            ct_error_hint("make a validation split (`ctrain prepare --val-fraction F`), or "
                          "set train.early_stop_patience=0");
            return st;
        }
        ct_log(CT_LOG_WARN, "data.val = %s holds no val_*.bin (`ctrain prepare` made no "
               "validation split; its train_*.bin are training data): this run has no "
               "validation", cfg->data.val);
    } else if (cfg->data.val[0] && (st = ct_loader_init(&t->val, &lo))) {
        ct_error_prefix("data.val");
        return st;
    }
    t->masked = ct_loader_masked(t->train);
    char about[512];
    if (t->rank == 0 && ct_loader_describe(t->train, about, sizeof about)[0])
        ct_log(CT_LOG_INFO, "%s", about);
    return plan_evaluation(t);
}

/* run.keep_best and train.load_best_at_end need validations to judge by. */
static ct_status check_best(const trainer *t) {
    const ct_config *cfg = t->cfg;
    ct_status st;
    if (cfg->train.load_best_at_end && !cfg->run.keep_best) {
        st = CT_ERR(CT_ERR_ARG, "train.load_best_at_end = true needs run.keep_best = true (the "
                    "best checkpoint must be kept to be loaded)");
        ct_error_hint("add run.keep_best=true");
        return st;
    }
    if ((cfg->run.keep_best || cfg->train.load_best_at_end) && !t->val) {
        st = CT_ERR(CT_ERR_ARG, "%s = true needs validation data, and data.val %s",
                    cfg->train.load_best_at_end ? "train.load_best_at_end" : "run.keep_best",
                    cfg->data.val[0] ? "holds no validation split" : "is not set");
        ct_error_hint("set data.val to a prepared directory with val_*.bin (prepare "
                      "--val-examples N for instruction data), and train.eval_every=N");
        return st;
    }
    return CT_OK;
}

/* The data flags of this run (train_state.h's CT_STATE_DATA_*): the
 * loader's position mode bits without the shuffle bit (2 instruction rows,
 * 4 packing, 8 group_by_length become 1, 2, 4). */
int64_t trainer_data_flags(const trainer *t) {
    ct_loader_pos p;
    ct_loader_get_pos(t->train, &p);
    return (p.shuffled >> 1) & (CT_STATE_DATA_SFT | CT_STATE_DATA_PACKING | CT_STATE_DATA_GROUPED);
}

/* A resumed run batches its data as the checkpoint's did: instruction rows
 * depend on data.packing and data.group_by_length. */
static ct_status check_resume_rows(trainer *t) {
    if (t->resume_step < 0 || !t->resume_state) return CT_OK;
    int64_t now = trainer_data_flags(t), then = t->resume_state->data_flags;
    if (now == then) return CT_OK;
    ct_status st;
    if ((now ^ then) & CT_STATE_DATA_SFT) {
        st = CT_ERR(CT_ERR_ARG, "data.train = %s holds %s, but checkpoint %s was trained on %s",
                    t->cfg->data.train, now & CT_STATE_DATA_SFT ? "instruction examples" : "plain "
                    "text shards", t->resume_dir, then & CT_STATE_DATA_SFT ? "instruction "
                    "examples" : "plain text shards");
        ct_error_hint("resume with the training data of the run that wrote it");
        return st;
    }
    const char *key = (now ^ then) & CT_STATE_DATA_PACKING ? "data.packing" : "data.group_by_length";
    int64_t bit = (now ^ then) & CT_STATE_DATA_PACKING ? CT_STATE_DATA_PACKING : CT_STATE_DATA_GROUPED;
    st = CT_ERR(CT_ERR_ARG, "%s = %s, but checkpoint %s was written with %s = %s", key,
                now & bit ? "true" : "false", t->resume_dir, key, then & bit ? "true" : "false");
    ct_error_hint("a resumed run must batch its examples as before: set %s=%s, or start a new "
                  "run in another run.dir", key, then & bit ? "true" : "false");
    return st;
}

/* train.epochs > 0: train.steps becomes the steps of that many passes over
 * the training data (instruction data: each epoch is whole steps; plain
 * data: the micro-batches of the epochs, in whole steps, rounded down). */
static ct_status resolve_epochs(trainer *t) {
    ct_config *cfg = &t->cfg_run;
    int64_t epochs = cfg->train.epochs;
    if (epochs <= 0) return CT_OK;
    int64_t batches = 0;
    for (int64_t e = 0; e < epochs; e++) batches += ct_loader_batches_in_epoch(t->train, e);
    int64_t steps = batches / t->accum;
    if (steps < 1) {
        ct_status st = CT_ERR(CT_ERR_ARG, "train.epochs = %lld is less than one optimizer step "
                              "(%lld micro-batches of %d x %d tokens per epoch, train.grad_accum "
                              "= %lld)", (long long)epochs,
                              (long long)ct_loader_batches_in_epoch(t->train, 0), t->B, t->T,
                              (long long)t->accum);
        ct_error_hint("lower train.batch_size or train.grad_accum, or prepare more data");
        return st;
    }
    if (t->rank == 0)
        ct_log(CT_LOG_INFO, "train.epochs = %lld: %lld optimizer steps (%lld micro-batches of "
               "%d x %d per epoch on each of %d rank(s), %lld per step)", (long long)epochs,
               (long long)steps, (long long)ct_loader_batches_in_epoch(t->train, 0), t->B, t->T,
               t->world, (long long)t->accum);
    cfg->train.steps = steps;
    ct_status st = ct_schedule_from_config(&t->sched, cfg);
    if (st) return st;
    if (t->resume_state && t->resume_state->step > steps) {
        st = CT_ERR(CT_ERR_ARG, "train.epochs = %lld is %lld steps, but checkpoint %s is already "
                    "at step %lld", (long long)epochs, (long long)steps, t->resume_dir,
                    (long long)t->resume_state->step);
        ct_error_hint("raise train.epochs to continue training");
        return st;
    }
    return CT_OK;
}

/* Moments, loader position, guard and early stopping from the checkpoint. */
static ct_status restore_state(trainer *t) {
    ct_train_state *s = t->resume_state;
    ct_status st = ct_train_state_load(t->resume_dir, NULL, &t->opt, s);
    if (st) return st;
    if ((st = ct_loader_set_pos(t->train, &s->pos))) {
        ct_error_prefix("checkpoint %s does not fit data.train = %s", t->resume_dir,
                        t->cfg->data.train);
        ct_error_hint("resume with the same training shards as the run that wrote it");
        return st;
    }
    ct_guard_take_window(&t->guard, &s->guard);
    t->guard.bad_run = s->guard.bad_run;
    t->guard.bad_start = s->guard.bad_start;
    t->guard.skipped = s->guard.skipped;
    t->guard.spikes = s->guard.spikes;
    t->guard.rollbacks = s->guard.rollbacks;
    t->guard.lr_factor = s->guard.lr_factor;
    t->best_val = s->best_val;
    t->best_step = s->best_step;
    t->bad_evals = s->bad_evals;
    t->ckpt_pending = s->ckpt_pending;
    trainer_loss_scale_set(t, s);
    t->step = s->step;
    if (s->total_steps != t->cfg->train.steps && strcmp(t->cfg->schedule.name, "constant") != 0)
        ct_log(CT_LOG_WARN, "train.steps changed from %lld to %lld since the checkpoint: the "
               "%s schedule now follows the new length", (long long)s->total_steps,
               (long long)t->cfg->train.steps, t->cfg->schedule.name);
    return CT_OK;
}

/* run.trace: a recorder for the chosen steps, and the kernel profiler in
 * front of the backend (before the model is made, so its kernels are timed). */
static ct_status trace_setup(trainer *t) {
    const char *spec = t->cfg->run.trace;
    if (!spec[0]) return CT_OK;
    ct_status st = ct_config_trace_steps(spec, &t->trace_first, &t->trace_last);
    if (st) return st;
    if ((st = ct_trace_init(&t->trace))) return st;
    if ((st = ct_kprof_init(&t->kprof, ct_ctx_backend(t->ctx)))) return st;
    ct_ctx_set_backend(t->ctx, ct_kprof_backend(t->kprof));
    return CT_OK;
}

/* run.gemm into the backend (a bf16 run on a CPU with bf16 instructions runs
 * oneDNN's bf16 matmul whatever it names: ct_gemm_lib_for_run, as the plan
 * counts it), and the start-up lines: which library runs the GEMMs and why,
 * and which instructions a bf16 run's GEMMs get. */
static ct_status gemm_setup(trainer *t) {
    const ct_config *cfg = t->cfg;
    int named = ct_gemm_lib_of(cfg->run.gemm);
    if (named < 0) {
        ct_status st = CT_ERR(CT_ERR_ARG, "run.gemm = %s: this build has no oneDNN", cfg->run.gemm);
        ct_error_hint("install libdnnl-dev and build again (scripts/bootstrap.sh), or set "
                      "run.gemm=auto or openblas");
        return st;
    }
    ct_precision prec = CT_PREC_FP32;
    if (ct_model_precision_from_name(&prec, cfg->train.precision)) ct_error_clear(); /* the plan
                                                                                 * reports it */
    bool bf16 = prec == CT_PREC_BF16;
    ct_backend *be = ct_ctx_base_backend(t->ctx);
    be->gemm = ct_gemm_lib_for_run((ct_gemm_lib)named, bf16, bf16 && ct_gemm_have_bf16());
    if (t->rank != 0 || strcmp(cfg->run.device, "cpu")) return CT_OK;
    bool onednn = be->gemm == CT_GEMM_ONEDNN;
    char why[256];
    if (be->gemm != named)
        ct_log(CT_LOG_INFO, "run.gemm=%s, but train.precision=bf16 on a CPU with bf16 "
               "instructions: oneDNN runs the GEMMs (OpenBLAS would widen bf16 to fp32; the plan "
               "counts its workspace)", cfg->run.gemm);
    else
        ct_log(CT_LOG_INFO, "run.gemm=%s: %s runs the GEMMs (%s; the plan counts its %s%s)",
               cfg->run.gemm, onednn ? "oneDNN" : "OpenBLAS",
               !strcmp(cfg->run.gemm, "auto") ? ct_gemm_auto_why(why, sizeof why) : "as named",
               onednn ? "workspace" : "packing buffers",
               onednn && !ct_gemm_have_brgemm()
                   ? ", on these cores without AVX-512 with a margin measured by emulating them "
                     "on an AVX-512 Xeon"
                   : "");
    if (named == CT_GEMM_OPENBLAS && strcmp(cfg->run.gemm, "auto") &&
        ct_gemm_lib_of("auto") == CT_GEMM_ONEDNN && !bf16)
        ct_log(CT_LOG_WARN, "run.gemm=openblas runs OpenBLAS's %s kernels (%d-bit vectors) on "
               "cores with %d-bit ones: run.gemm=auto (the default) runs oneDNN's here, which "
               "were 1.6-3.7x faster where measured", openblas_get_corename(),
               ct_gemm_blas_bits(openblas_get_corename()), ct_gemm_cpu_bits());
    if (bf16) {
        char impl[64];
        ct_gemm_bf16_path path = ct_gemm_bf16_path_of((ct_gemm_lib)be->gemm, impl, sizeof impl);
        bool native = ct_gemm_bf16_path_native(path);
        ct_gemm_bf16_path_describe(path, (ct_gemm_lib)be->gemm, impl, why, sizeof why);
        bool h16 = ct_backend_head16_ld(be, 1) > 0 && !cfg->debug.fp32_logits;
        ct_log(native ? CT_LOG_INFO : CT_LOG_WARN, "train.precision=bf16: bf16 GEMMs: %s; the "
               "head's logits %s%s", why, h16 ? "bf16, as autocast's" : "fp32",
               native ? "" : "; debug.emulate_bf16 runs it for numerics checks, never for speed");
    }
    return CT_OK;
}

ct_status trainer_setup(trainer *t) {
    const ct_config *cfg = t->cfg;
    ct_status st;
    t->B = (int)cfg->train.batch_size;
    t->T = (int)cfg->train.seq_len;
    t->accum = cfg->train.grad_accum;
    t->resume_step = -1;
    t->ckpt_step = -1;
    t->best_val = NAN;
    t->best_step = -1;
    /* first, on every rank: the ranks' configs must agree (a collective) */
    if ((st = trainer_dist_begin(t))) return st;
    if ((st = ct_config_validate(cfg))) return st;
    if ((st = refuse_unsupported(cfg))) return st;
    if ((st = check_device_bf16(t))) return st;
    int bq, bk; /* run.attention_tiles; auto keeps the kernel's built-in tile */
    if ((st = ct_config_attention_tiles(cfg->run.attention_tiles, &bq, &bk))) return st;
    if (bq && ct_backend_set_tiles(ct_ctx_base_backend(t->ctx), bq, bk))
        return CT_ERR(CT_ERR_ARG, "run.attention_tiles = %s: the attention kernel refused it",
                      cfg->run.attention_tiles);
    if ((st = gemm_setup(t))) return st;
    if ((st = ct_schedule_from_config(&t->sched, cfg))) return st;
    if ((st = parse_bad_steps(cfg->debug.bad_steps, &t->bad_first, &t->bad_last))) return st;
    if ((st = check_run_dir(cfg->run.dir))) return st;
    /* one run at a time in run.dir, from before it decides what to resume */
    if (t->rank == 0 && (st = run_dir_lock(cfg->run.dir, "ctrain train", &t->lock))) return st;
    ct_guard_params gp = trainer_guard_params(cfg);
    ct_guard_init(&t->guard, &gp);
    if ((st = trainer_measure_peak(t))) return st;
    if ((st = trace_setup(t))) return st;
    if ((st = build_model(t))) return st;
    if ((st = apply_dropout(t))) return st;
    if ((st = ct_model_set_opts(t->model, &t->mopts))) return st;
    if ((st = ct_model_reserve(t->model, t->B, t->T, true))) return st;
    /* what trains: the whole model, or only the LoRA adapters */
    size_t numel = ct_model_trainable_numel(t->model);
    ct_dist_shard(numel, t->world, t->rank, &t->shard_lo, &t->shard_n);
    if (t->zero)
        st = ct_adamw_init_range(&t->opt, t->ctx, numel, t->shard_lo, t->shard_n);
    else
        st = ct_adamw_init(&t->opt, t->ctx, numel);
    if (st) return st;
    /* MPI reads host memory: a host mirror when the backend's is not */
    if (t->world > 1 && !ct_model_host_visible(t->model)) {
        size_t n = numel > 2 * t->shard_n ? numel : 2 * t->shard_n;
        if (!(t->stage = ct_alloc(t->ctx, n * sizeof(float), CT_TAG_IO))) return ct_last_status();
    }
    /* the gradient buckets exist from here on, so no step allocates them */
    float *grads = t->stage ? t->stage : ct_model_trainable_grads(t->model);
    if ((st = ct_dist_grad_begin(t->dist, grads, numel, t->bucket))) return st;
    if ((st = open_loaders(t))) return st;
    if ((st = check_resume_rows(t)) || (st = resolve_epochs(t))) return st;
    if ((st = check_best(t))) return st;
    /* the shards' tokenizer must be the starting model's (ids that fit prove nothing) */
    if ((st = run_tokenizer_check(cfg, t->resume_step >= 0 ? t->resume_dir : ""))) return st;
    t->in = ct_alloc(t->ctx, (size_t)t->B * t->T * sizeof *t->in, CT_TAG_DATA);
    t->tg = ct_alloc(t->ctx, (size_t)t->B * t->T * sizeof *t->tg, CT_TAG_DATA);
    t->pos = ct_alloc(t->ctx, (size_t)t->B * t->T * sizeof *t->pos, CT_TAG_DATA);
    if (!t->in || !t->tg || !t->pos) return ct_last_status();
    trainer_loss_scale_set(t, NULL);
    if (t->resume_step >= 0 && (st = restore_state(t))) return st;
    t->ap = (ct_adamw_params){(float)cfg->optim.beta1, (float)cfg->optim.beta2,
                              (float)cfg->optim.eps, (float)cfg->optim.weight_decay};
    t->ckpt_opts = ct_ckpt_opts_default();
    t->ckpt_opts.compress = cfg->run.checkpoint_compress;
    t->ckpt_opts.keep_last = (int)cfg->run.keep_last;
    t->ckpt_opts.signature = t->signature;
    trainer_monitor_init(t);
    return CT_OK;
}

/* sgemm size of the start-up peak measurement: 3 runs of 2.1 GFLOP, about
 * 0.1 s at 60 GFLOP/s, its 12 MiB of buffers freed before the run allocates */
#define TRAINER_PEAK_N 1024

/* cuBLAS GEMM size of a GPU's peak measurement: 1.1 TFLOP a run, a few ms
 * in bf16 and some 20 ms in fp32 on a recent GPU, 0.75 GiB of buffers freed
 * before the run allocates */
#define TRAINER_GPU_PEAK_N 8192

/* A GPU run's peaks: the theoretical one of the run's precision, and cuBLAS's
 * measured GEMM rate unless alerts.gemm_peak_gflops sets it. */
static ct_status measure_gpu_peak(trainer *t, ct_precision prec) {
    ct_backend *be = ct_ctx_base_backend(t->ctx);
    ct_device_info di;
    ct_status st = ct_backend_device_info(be, &di);
    if (st) return st;
    /* fp16 (GPUs without bf16): its tensor cores' rate is not in the theory's
     * table, so MFU is against the measured fp16 GEMM peak only */
    t->gpu_theory = prec == CT_PREC_BF16   ? di.bf16_theory_gflops
                    : prec == CT_PREC_FP32 ? di.fp32_theory_gflops
                                           : 0;
    if (t->gemm_peak > 0) return CT_OK;
    double t0 = ct_time_s();
    st = ct_backend_gemm_peak(be, (int)prec, TRAINER_GPU_PEAK_N, 3, &t->gemm_peak);
    if (st) {
        ct_log(CT_LOG_WARN, "cannot measure the GPU's GEMM peak (%s): MFU is reported against "
               "the theoretical peak only (mfu_theory); set alerts.gemm_peak_gflops",
               ct_last_error());
        ct_error_clear();
        t->gemm_peak = 0;
        return CT_OK;
    }
    t->gemm_n = TRAINER_GPU_PEAK_N;
    ct_log(CT_LOG_INFO, "%s: %s GEMM peak %.0f GFLOP/s (cuBLAS, n=%d, %.2f s); theoretical "
           "%.0f GFLOP/s (%d multiprocessors at %.0f MHz, compute capability %d.%d)", di.name,
           ct_model_precision_name(prec), t->gemm_peak, TRAINER_GPU_PEAK_N, ct_time_s() - t0,
           t->gpu_theory, di.sms, di.clock_mhz, di.cc_major, di.cc_minor);
    return CT_OK;
}

ct_status trainer_measure_peak(trainer *t) {
    ct_hwinfo_read(&t->hw);
    t->gemm_n = 0;
    t->gemm_peak = t->cfg->alerts.gemm_peak_gflops;
    /* precision bf16: MFU against the GEMMs the step runs, bf16 ones */
    ct_precision prec = CT_PREC_FP32;
    if (ct_model_precision_from_name(&prec, t->cfg->train.precision)) ct_error_clear();
    ct_backend *base = ct_ctx_base_backend(t->ctx);
    ct_device_info di;
    t->gpu = ct_backend_has_device_memory(base) && !ct_backend_device_info(base, &di) &&
             di.cc_major > 0;
    if (t->gpu) return measure_gpu_peak(t, prec);
    if (t->gemm_peak > 0) return CT_OK;
    double t0 = ct_time_s();
    ct_status st;
    if (prec == CT_PREC_BF16) {
        ct_bench_gemm_info gi;
        st = ct_bench_gemm_bf16_peak_info(t->ctx, TRAINER_PEAK_N, 2, &gi);
        if (!st) t->gemm_peak = gi.gflops;
    } else {
        st = ct_bench_gemm_peak(t->ctx, TRAINER_PEAK_N, 2, &t->gemm_peak);
    }
    /* the benchmark's oneDNN primitives and their buffers (n x n: 4 MiB of
     * packed B on AVX-512 cores) are not the step's: dropped, and the heap
     * trimmed now, before the model's allocations land among the freed
     * pages (ct_run_env_measure trims again before it reads RSS; without
     * this one, train's plan read 0.3 MiB more than `ctrain plan`'s), so the
     * process the plan measures holds what `ctrain plan`'s does */
    ct_gemm_release();
#ifdef __GLIBC__
    malloc_trim(0);
#endif
    if (st) {
        ct_log(CT_LOG_WARN, "cannot measure the GEMM peak (%s): MFU is not reported; set "
               "alerts.gemm_peak_gflops", ct_last_error());
        ct_error_clear();
        t->gemm_peak = 0;
        return CT_OK;
    }
    t->gemm_n = TRAINER_PEAK_N;
    ct_log(CT_LOG_DEBUG, "GEMM peak %.1f GFLOP/s (%s n=%d, %.2f s)", t->gemm_peak,
           prec == CT_PREC_BF16 ? "bf16 GEMM" : "sgemm", TRAINER_PEAK_N, ct_time_s() - t0);
    return CT_OK;
}

void trainer_monitor_init(trainer *t) {
    /* the theoretical peak of the cores the run's threads occupy (SMT
     * siblings share their core's FMA pipes). Not t->hw.theoretical_gflops:
     * the context pinned this thread to one CPU, so the profile read here
     * sees an affinity mask of one. */
    int cores = t->hw.physical_cores > 0 ? t->hw.physical_cores : 1;
    int threads = ct_ctx_threads(t->ctx);
    /* a GPU run's MFU is against the GPU's peaks */
    double theory = t->gpu ? t->gpu_theory
                           : ct_bench_theoretical_gflops(threads < cores ? threads : cores, NULL);
    t->hw.theoretical_gflops = theory; /* hw.json holds the peak mfu_theory uses */
    ct_monitor_params p;
    size_t adapters = ct_model_lora(t->model) ? ct_model_trainable_numel(t->model) : 0;
    bool dev = t->plan.env.device;
    ct_monitor_params_for_run(&p, t->cfg, ct_model_get_config(t->model), t->B, t->T, t->accum,
                              adapters, t->gemm_peak, theory, t->mem_limit,
                              dev ? t->plan.device : t->plan.total);
    p.device_memory = dev;
    ct_monitor_init(&t->mon, &p);
    size_t rss, peak;
    if (ct_monitor_read_process(&rss, &peak, &t->faults_prev)) ct_error_clear();
    ct_log(CT_LOG_INFO, "monitor: %s%sGEMM peak %.1f GFLOP/s (%s), theoretical %.1f GFLOP/s, "
           "%.3g model GFLOP per step, expected %.0f tokens/s", t->gpu ? "GPU " : "",
           t->mopts.precision == CT_PREC_BF16 ? "bf16 " : "", t->gemm_peak,
           t->gemm_n ? "measured" : t->gemm_peak > 0 ? "alerts.gemm_peak_gflops" : "unknown",
           theory, p.step_flops / 1e9, p.expected_tokens_per_s);
    /* a GPU run: its utilisation, memory, power, temperature and clocks
     * through NVML when the driver's library is there (off otherwise, with
     * an info line); rank 0 watches its own GPU */
    ct_gpu_util_rule_init(&t->gutil, CT_GPU_UTIL_THRESHOLD_PCT, CT_GPU_UTIL_WINDOW_S);
    if (!t->gpu || !trainer_root(t)) return;
    ct_device_info di;
    if (ct_backend_device_info(ct_ctx_base_backend(t->ctx), &di) ||
        ct_gpu_watch_open(&t->gwatch, NULL, di.index, di.pci_bus_id, NULL, 0)) {
        ct_log(CT_LOG_WARN, "gpu watch off: %s", ct_last_error()); /* out of memory */
        ct_error_clear();
    }
}

void trainer_release(trainer *t) {
    trainer_dropout_free(t);
    ct_gpu_watch_close(t->gwatch);
    t->gwatch = NULL;
    ct_metrics_close(t->metrics);
    ct_tb_close(t->tb);
    ct_free(t->ctx, t->in);
    ct_free(t->ctx, t->tg);
    ct_free(t->ctx, t->pos);
    ct_loader_free(t->train);
    ct_loader_free(t->val);
    ct_adamw_free(&t->opt);
    ct_model_free(t->model);
    /* the wrapper goes after what was allocated through it */
    ct_ctx_set_trace(t->ctx, NULL);
    if (t->kprof) ct_ctx_set_backend(t->ctx, NULL);
    ct_kprof_free(t->kprof);
    ct_trace_free(t->trace);
    t->kprof = NULL;
    t->trace = NULL;
    ct_free(t->ctx, t->stage);
    t->stage = NULL;
    free(t->resume_state);
    free(t->xbuf);
    t->xbuf = NULL;
    t->metrics = NULL;
    t->tb = NULL;
    t->in = t->tg = t->pos = NULL;
    t->train = t->val = NULL;
    t->model = NULL;
    t->resume_state = NULL;
}
