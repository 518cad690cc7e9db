/*
 * The data-parallel side of the training loop (the rules are in train.h's
 * trainer section): every rank checks its config against rank 0's, starts
 * from rank 0's weights, reads its own windows of each global batch, and
 * weights its loss by 1/world so that the summed gradient (bucketed
 * allreduces, started from the model's per-block hook during the last
 * micro-batch's backward) is the gradient of the global mean loss. The loss,
 * the gradient norm and the stop flag are exchanged so that the guard's
 * verdict is the same on every rank. Under ZeRO-1 each rank updates only its
 * shard and the parameters are all-gathered; rank 0 gathers the moments for a
 * checkpoint, whose format stays that of one process. Dropout masks are
 * keyed by the step and each micro-batch's global rows (trainer_dropout_micro),
 * on one process as on many.
 * Leaves out: the single-process step (trainer.c runs it unchanged).
 */
#include "train/trainer_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

bool trainer_root(const trainer *t) { return t->rank == 0; }

static bool parallel(const trainer *t) { return t->world > 1; }

ct_status trainer_dist_begin(trainer *t) {
    const ct_config *cfg = t->cfg;
    t->dist = t->hooks->dist;
    t->rank = ct_dist_rank(t->dist);
    t->world = ct_dist_world(t->dist);
    t->zero = cfg->dist.zero != 0;
    ct_dist_set_timeout(t->dist, cfg->dist.timeout_s);
    double bucket = cfg->dist.bucket_mb * 1048576.0 / sizeof(float);
    t->bucket = bucket >= 1 ? (size_t)bucket : 0;
    if (!parallel(t)) {
        if (cfg->dist.world > 1) {
            ct_status st = CT_ERR(CT_ERR_ARG, "dist.world = %lld, but this run is one process",
                                  (long long)cfg->dist.world);
            ct_error_hint("start it with mpirun -np %lld (dist.world only plans memory for "
                          "`ctrain plan`)", (long long)cfg->dist.world);
            return st;
        }
        return CT_OK;
    }
    /* the exchanges of small per-rank values: 3 doubles per rank at most */
    t->xbuf = calloc((size_t)t->world * 3, sizeof *t->xbuf);
    /* the first collective: the same config everywhere, or a clear refusal */
    char *yaml = ct_config_to_yaml(cfg);
    ct_status st = yaml && t->xbuf ? CT_OK : CT_ERR(CT_ERR_OOM, "out of memory comparing "
                                                    "configurations");
    /* every rank must reach the comparison; a rank without its text sends "" */
    ct_status cmp = ct_dist_check_same(t->dist, yaml ? yaml : "", "configuration");
    free(yaml);
    if (st) return st;
    if (cmp) return cmp;
    if (cfg->dist.world > 0 && cfg->dist.world != t->world) {
        st = CT_ERR(CT_ERR_ARG, "dist.world = %lld, but mpirun started %d ranks",
                    (long long)cfg->dist.world, t->world);
        ct_error_hint("drop dist.world (it plans memory for `ctrain plan`), or start %lld ranks",
                      (long long)cfg->dist.world);
        return st;
    }
    return CT_OK;
}

/* The distinct hosts of the job, "a, b" (the first few), and their count. */
static int dist_hosts(const trainer *t, char *out, size_t cap) {
    int n = 0;
    size_t len = 0;
    out[0] = '\0';
    for (int r = 0; r < t->world; r++) {
        const char *h = ct_dist_host(t->dist, r);
        bool seen = false;
        for (int q = 0; q < r && !seen; q++) seen = !strcmp(h, ct_dist_host(t->dist, q));
        if (seen) continue;
        if (n++ < 4 && len < cap) {
            int k = snprintf(out + len, cap - len, "%s%s", n > 1 ? ", " : "", h);
            len += k > 0 ? (size_t)k : 0;
        }
    }
    if (n > 4 && len < cap) snprintf(out + len, cap - len, ", ...");
    return n;
}

ct_status trainer_dist_after_setup(trainer *t) {
    if (!parallel(t)) return CT_OK;
    /* one checkpoint for all: run.dir must look the same from every rank */
    double mine[2] = {(double)t->resume_step, (double)(t->opt.n * 2 * sizeof(float))};
    double *all = t->xbuf;
    ct_status st = ct_dist_allgather_f64(t->dist, mine, 2, all);
    int other = -1;
    for (int r = 1; !st && r < t->world && other < 0; r++)
        if (all[2 * r] != all[0]) other = r;
    if (!st && other >= 0) {
        st = CT_ERR(CT_ERR_ARG, "the ranks disagree on the checkpoint to resume: rank 0 %s%.0f, "
                    "rank %d %s%.0f", all[0] < 0 ? "starts fresh " : "step ", all[0], other,
                    all[2 * other] < 0 ? "starts fresh " : "step ", all[2 * other]);
        ct_error_hint("run.dir (%s) must be one directory that every rank sees, on a shared "
                      "filesystem", t->cfg->run.dir);
    }
    if (!st && trainer_root(t)) {
        char per[256] = "";
        size_t n = 0;
        for (int r = 0; r < t->world && n < sizeof per - 32; r++)
            n += (size_t)snprintf(per + n, sizeof per - n, "%s%.0f", r ? " " : "",
                                  all[2 * r + 1]);
        if (n >= sizeof per - 32) snprintf(per + n, sizeof per - n, " ...");
        char hosts[256];
        int nh = dist_hosts(t, hosts, sizeof hosts);
        ct_log(CT_LOG_INFO, "data parallel: %d ranks on %d host(s) (%s) x batch %d = %d "
               "sequences per micro-batch; AdamW moments per rank: %s bytes%s", t->world, nh,
               hosts, t->B, t->B * t->world, per, t->zero ? " (ZeRO-1 shards)" : "");
    }
    if (st) return st;
    /* the same starting weights, whatever each rank read or initialised (a
     * frozen LoRA base comes from the same files or seed on every rank; its
     * adapters are what trains) */
    float *w = ct_model_trainable_params(t->model);
    size_t bytes = ct_model_trainable_numel(t->model) * sizeof(float);
    if (!t->stage) {
        st = ct_dist_bcast(t->dist, w, bytes, 0);
    } else { /* MPI reads host memory: through the host mirror */
        ct_model_download(t->model, t->stage, w, bytes);
        if ((st = ct_dist_bcast(t->dist, t->stage, bytes, 0))) return st;
        ct_model_upload(t->model, w, t->stage, bytes);
    }
    /* precision bf16: the GEMMs' copies of the broadcast weights */
    if (!st) ct_model_refresh_weights16(t->model);
    return st;
}

/* ------------------------------------------------------------ dropout */

/* debug.dump_dropout's masks: entries with owned names and data. */
typedef struct trainer_drop_dump {
    ct_st_entry *e;
    int n, cap;
} trainer_drop_dump;

/* splitmix64's finalizer. */
static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

void trainer_dropout_free(trainer *t) {
    trainer_drop_dump *d = t->drop_dump;
    if (!d) return;
    for (int i = 0; i < d->n; i++) {
        free((char *)d->e[i].name);
        free((float *)d->e[i].data);
    }
    free(d->e);
    free(d);
    t->drop_dump = NULL;
}

/* Keep the mask of site s, layer l of micro-batch a (debug only: allocates). */
static ct_status dump_mask(trainer *t, int64_t a, ct_dropout_site s, int l) {
    const ct_model_config *c = ct_model_get_config(t->model);
    trainer_drop_dump *d = t->drop_dump;
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 16;
        ct_st_entry *e = realloc(d->e, (size_t)cap * sizeof *e);
        if (!e) return CT_ERR(CT_ERR_OOM, "out of memory keeping dropout masks");
        d->e = e;
        d->cap = cap;
    }
    ct_st_entry *e = &d->e[d->n];
    memset(e, 0, sizeof *e);
    if (s == CT_DROPOUT_ATTN_PROBS) { /* (B,NH,T,T) */
        e->ndim = 4;
        e->shape[0] = t->B, e->shape[1] = c->n_head, e->shape[2] = t->T, e->shape[3] = t->T;
    } else { /* (B,T,C) */
        e->ndim = 3;
        e->shape[0] = t->B, e->shape[1] = t->T, e->shape[2] = c->n_embd;
    }
    size_t n = 1;
    for (int i = 0; i < e->ndim; i++) n *= (size_t)e->shape[i];
    e->dtype = CT_DTYPE_F32;
    char name[96];
    if (s == CT_DROPOUT_EMBD)
        snprintf(name, sizeof name, "mb%lld.embd", (long long)a);
    else
        snprintf(name, sizeof name, "mb%lld.h.%d.%s", (long long)a, l,
                 ct_model_dropout_site_name(s));
    float *buf = malloc(n * sizeof *buf);
    char *nm = strdup(name);
    if (!buf || !nm) {
        free(buf);
        free(nm);
        return CT_ERR(CT_ERR_OOM, "out of memory keeping dropout mask %s (%zu floats)", name, n);
    }
    ct_status st = ct_model_dropout_mask(t->model, s, l, t->B, t->T, buf);
    if (st) {
        free(buf);
        free(nm);
        return st;
    }
    e->name = nm;
    e->data = buf;
    d->n++;
    return CT_OK;
}

ct_status trainer_dropout_micro(trainer *t, int64_t step, int64_t a) {
    uint64_t key = mix64(mix64((uint64_t)t->cfg->train.seed ^ 0x6A09E667F3BCC909ull) ^
                         (uint64_t)step * 0x9E3779B97F4A7C15ull);
    ct_model_set_dropout_key(t->model, key, (a * t->world + t->rank) * (int64_t)t->B);
    if (t->cfg->debug.dump_dropout != step || !trainer_root(t)) return CT_OK;
    if (a == 0) trainer_dropout_free(t); /* a step run again starts over */
    if (!t->drop_dump && !(t->drop_dump = calloc(1, sizeof *t->drop_dump)))
        return CT_ERR(CT_ERR_OOM, "out of memory keeping dropout masks");
    ct_status st = CT_OK;
    if (ct_model_dropout_p(t->model, CT_DROPOUT_EMBD) > 0)
        st = dump_mask(t, a, CT_DROPOUT_EMBD, 0);
    int L = ct_model_get_config(t->model)->n_layer;
    for (int l = 0; l < L && !st; l++)
        for (int s = CT_DROPOUT_ATTN_PROBS; s < CT_DROPOUT_SITE_COUNT && !st; s++)
            if (ct_model_dropout_p(t->model, (ct_dropout_site)s) > 0)
                st = dump_mask(t, a, (ct_dropout_site)s, l);
    return st;
}

ct_status trainer_dropout_write(trainer *t, int64_t step) {
    trainer_drop_dump *d = t->drop_dump;
    if (!d) return CT_OK;
    char path[TRAINER_DIR_MAX + 64];
    snprintf(path, sizeof path, "%s/dropout_step%lld.safetensors", t->cfg->run.dir,
             (long long)step);
    const char *meta[] = {"format", "pt"};
    ct_status st = ct_st_write(path, d->e, d->n, meta, 1);
    if (!st)
        ct_log(CT_LOG_INFO, "step %lld: debug: %d dropout masks written to %s", (long long)step,
               d->n, path);
    trainer_dropout_free(t);
    return st;
}

/* ------------------------------------------------------- micro-batches */

static void grad_hook(size_t lo, size_t hi, void *user) {
    ct_dist_grad_ready(user, lo, hi);
}

#define DATA_FAILED 1000.0 /* a status no ct_status has */

ct_status trainer_dist_micro_batches(trainer *t, int64_t step, double *loss_sum, double *wait,
                                     double *fwd, double *bwd) {
    ct_status local = CT_OK, st;
    float weight;
    float *dgrads = ct_model_trainable_grads(t->model);
    size_t numel = ct_model_trainable_numel(t->model);
    /* on a backend whose memory is not the host's, the allreduce runs on the
     * host mirror after the backward (no overlap) */
    float *grads = t->stage ? t->stage : dgrads;
    bool staged = t->stage != NULL;
    bool begun = false, data_local = false;
    for (int64_t a = 0; a < t->accum && !local; a++) {
        float loss;
        int64_t counted;
        if ((local = trainer_next_batch(t, t->train, &counted))) {
            data_local = true;
            break;
        }
        *wait += ct_loader_wait_s(t->train);
        if (a == t->accum - 1 && !staged) {
            /* the last backward finishes each block's gradient: start its
             * allreduce then (never fails: the buckets exist since setup) */
            if ((st = ct_dist_grad_begin(t->dist, grads, numel, t->bucket))) return st;
            begun = true;
            if (t->cfg->dist.overlap) ct_model_set_grad_hook(t->model, grad_hook, t->dist);
        }
        ct_model_timing mt = {0, 0};
        weight = trainer_batch_weight(t, counted);
        if ((local = trainer_dropout_micro(t, step, a))) break;
        local = ct_model_forward_backward_timed(t->model, t->in, t->tg, t->B, t->T, weight, &loss,
                                                &mt);
        *fwd += mt.forward_s;
        *bwd += mt.backward_s;
        ct_model_set_grad_hook(t->model, NULL, NULL);
        *loss_sum += (double)loss * (double)counted;
    }
    if (staged) ct_model_download(t->model, grads, dgrads, numel * sizeof(float));
    /* a rank that failed still joins the allreduces, so nobody waits on it */
    if (!begun && (st = ct_dist_grad_begin(t->dist, grads, numel, t->bucket))) return st;
    if (staged) {
        ct_dist_grad_ready(t->dist, 0, numel);
        if ((st = ct_dist_grad_finish(t->dist))) return st;
        ct_model_upload(t->model, dgrads, grads, numel * sizeof(float));
    } else if ((st = ct_dist_grad_finish(t->dist))) {
        return st;
    }
    bool stop = t->hooks->stop && *t->hooks->stop != 0;
    /* a rank whose data could not be read says so: when that is every
     * failure, the ranks checkpoint together before stopping */
    double mine[3] = {data_local ? DATA_FAILED : (double)local, *loss_sum,
                      stop ? (double)*t->hooks->stop : 0.0};
    double *all = t->xbuf;
    st = ct_dist_allgather_f64(t->dist, mine, 3, all);
    bool failed = false, only_data = true;
    double sum = 0, stop_value = 0;
    for (int r = 0; !st && r < t->world; r++) {
        failed |= all[3 * r] != 0;
        only_data &= all[3 * r] == 0 || all[3 * r] == DATA_FAILED;
        sum += all[3 * r + 1];
        stop_value = all[3 * r + 2] > stop_value ? all[3 * r + 2] : stop_value;
    }
    if (st) return st;
    if (failed) {
        t->data_failed = only_data;
        char what[64];
        snprintf(what, sizeof what, "step %lld", (long long)step);
        return ct_dist_agree(t->dist, local, what);
    }
    /* every rank's counted-weighted loss sum, summed in rank order: the same
     * bits everywhere (the caller divides by the step's counted targets) */
    *loss_sum = sum;
    t->stop_seen = stop_value != 0;
    t->stop_value = (int)stop_value;
    return CT_OK;
}

ct_status trainer_dist_grad_norm(trainer *t, double *norm) {
    double mine = ct_grad_sumsq_range(t->model, t->shard_lo, t->shard_n);
    double *all = t->xbuf;
    ct_status st = ct_dist_allgather_f64(t->dist, &mine, 1, all);
    double sum = 0;
    for (int r = 0; !st && r < t->world; r++) sum += all[r];
    *norm = sqrt(sum);
    return st;
}

ct_status trainer_dist_update(trainer *t, float lr, float scale, bool *wrote16) {
    /* ZeRO off: every rank updates everything, identically, and AdamW may
     * write the 16-bit copies as it goes; ZeRO: a shard, the copies after */
    *wrote16 = ct_adamw_step(&t->opt, t->model, &t->ap, lr, scale);
    if (!t->zero) return CT_OK;
    float *w = ct_model_trainable_params(t->model);
    size_t n = ct_model_trainable_numel(t->model);
    if (!t->stage) return ct_dist_allgather_shards(t->dist, w, n);
    ct_model_download(t->model, t->stage, w, n * sizeof(float));
    ct_status st = ct_dist_allgather_shards(t->dist, t->stage, n);
    if (!st) ct_model_upload(t->model, w, t->stage, n * sizeof(float));
    return st;
}

ct_status trainer_save_state(trainer *t, const ct_train_state *s) {
    const ct_config *cfg = t->cfg;
    char *out = t->res->checkpoint;
    size_t cap = sizeof t->res->checkpoint;
    if (!parallel(t))
        return ct_train_state_save(cfg->run.dir, t->model, &t->opt, s, &t->ckpt_opts, out, cap);
    ct_adamw full = t->opt;
    float *buf = NULL;
    ct_status st = CT_OK;
    if (t->zero) {
        /* rank 0 holds every moment for the moment of the write */
        size_t numel = t->opt.numel;
        /* counted (tag io), so the memory figures show it */
        if (trainer_root(t) && !(buf = ct_alloc(t->ctx, 2 * numel * sizeof *buf + 1, CT_TAG_IO)))
            st = ct_last_status();
        if ((st = ct_dist_agree(t->dist, st, "checkpoint buffer"))) {
            ct_free(t->ctx, buf);
            return st;
        }
        /* this rank's moments as host memory (the mirror holds numel floats,
         * enough for both halves of a shard) */
        float *m = t->opt.m, *v = t->opt.v;
        if (t->stage) {
            ct_model_download(t->model, t->stage, t->opt.m, 2 * t->opt.n * sizeof(float));
            m = t->stage;
            v = t->stage + t->opt.n;
        }
        if (!(st = ct_dist_gather_shards(t->dist, m, buf, numel)))
            st = ct_dist_gather_shards(t->dist, v, buf ? buf + numel : NULL, numel);
        if (st) {
            ct_free(t->ctx, buf);
            return st;
        }
        full.m = buf;
        full.v = buf ? buf + numel : NULL;
        full.lo = 0;
        full.n = numel;
        full.host = true;
    }
    if (trainer_root(t))
        st = ct_train_state_save(cfg->run.dir, t->model, &full, s, &t->ckpt_opts, out, cap);
    ct_free(t->ctx, buf);
    return ct_dist_agree(t->dist, st, "writing a checkpoint");
}

ct_status trainer_dist_sum(trainer *t, double *x) {
    if (!parallel(t)) return CT_OK;
    double *all = t->xbuf;
    ct_status st = ct_dist_allgather_f64(t->dist, x, 1, all);
    double sum = 0;
    for (int r = 0; !st && r < t->world; r++) sum += all[r];
    if (!st) *x = sum;
    return st;
}
