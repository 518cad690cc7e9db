/*
 * Training-state blobs of a checkpoint (format in train_state.h): the state
 * record's little-endian encoder and validating decoder, saving and loading a
 * whole checkpoint into a model and an optimizer, and trimming metrics.jsonl
 * back to a checkpoint's step.
 */
#include "train/train_state.h"

#include "backend/ctx.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/fileio.h"

/* ------------------------------------------------------------ byte order */

static bool host_little_endian(void) {
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

typedef struct wbuf {
    uint8_t *p;
    size_t len, cap;
    bool oom;
} wbuf;

static void put_bytes(wbuf *w, const void *data, size_t n) {
    if (w->oom) return;
    if (w->len + n > w->cap) {
        size_t cap = (w->cap + n) * 2;
        uint8_t *p = realloc(w->p, cap);
        if (!p) {
            w->oom = true;
            return;
        }
        w->p = p;
        w->cap = cap;
    }
    memcpy(w->p + w->len, data, n);
    w->len += n;
}

static void put_u64(wbuf *w, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    put_bytes(w, b, 8);
}
static void put_u32(wbuf *w, uint32_t v) {
    uint8_t b[4];
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
    put_bytes(w, b, 4);
}
static void put_i64(wbuf *w, int64_t v) { put_u64(w, (uint64_t)v); }
static void put_i32(wbuf *w, int32_t v) { put_u32(w, (uint32_t)v); }
static void put_f64(wbuf *w, double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    put_u64(w, u);
}

typedef struct rbuf {
    const uint8_t *p;
    size_t len, at;
    const char *where;
    ct_status st;
} rbuf;

/* Read n bytes or record a CT_ERR_FORMAT naming the field. */
static const uint8_t *take(rbuf *r, size_t n, const char *field) {
    if (r->st) return NULL;
    if (r->len - r->at < n) {
        r->st = CT_ERR(CT_ERR_FORMAT, "%s: training state ends at byte %zu inside field %s "
                       "(%zu bytes needed)", r->where, r->len, field, n);
        return NULL;
    }
    const uint8_t *p = r->p + r->at;
    r->at += n;
    return p;
}
static uint64_t get_u64(rbuf *r, const char *field) {
    const uint8_t *b = take(r, 8, field);
    uint64_t v = 0;
    if (b)
        for (int i = 0; i < 8; i++) v |= (uint64_t)b[i] << (8 * i);
    return v;
}
static uint32_t get_u32(rbuf *r, const char *field) {
    const uint8_t *b = take(r, 4, field);
    uint32_t v = 0;
    if (b)
        for (int i = 0; i < 4; i++) v |= (uint32_t)b[i] << (8 * i);
    return v;
}
static int64_t get_i64(rbuf *r, const char *field) { return (int64_t)get_u64(r, field); }
static int32_t get_i32(rbuf *r, const char *field) { return (int32_t)get_u32(r, field); }
static double get_f64(rbuf *r, const char *field) {
    uint64_t u = get_u64(r, field);
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* Record a range error for a decoded field (first error wins). */
static void bad_field(rbuf *r, const char *field, const char *expected, double got) {
    if (r->st) return;
    r->st = CT_ERR(CT_ERR_FORMAT, "%s: training state field %s = %.17g: expected %s", r->where,
                   field, got, expected);
}

/* ----------------------------------------------------------- state record */

ct_status ct_train_state_encode(const ct_train_state *s, uint8_t **out, size_t *len) {
    *out = NULL;
    *len = 0;
    wbuf w = {0};
    put_u32(&w, CT_TRAIN_STATE_MAGIC);
    put_u32(&w, CT_TRAIN_STATE_VERSION);
    put_i64(&w, s->step);
    put_i64(&w, s->adam_t);
    put_u64(&w, s->numel);
    put_i64(&w, s->batch_size);
    put_i64(&w, s->seq_len);
    put_i64(&w, s->grad_accum);
    put_i64(&w, s->seed);
    put_i64(&w, s->shuffle ? 1 : 0);
    put_i64(&w, s->pos.epoch);
    put_i64(&w, s->pos.index);
    put_i64(&w, s->pos.offset);
    put_i32(&w, s->pos.shard);
    put_i32(&w, s->pos.shuffled);
    put_i64(&w, s->total_steps);
    const ct_guard *g = &s->guard;
    put_i64(&w, g->p.window);
    put_f64(&w, g->p.zscore);
    put_i64(&w, g->p.min_steps);
    put_i64(&w, g->p.max_bad);
    put_f64(&w, g->p.lr_factor);
    put_i64(&w, g->count);
    for (int i = 0; i < g->count; i++) {
        int at = (g->head + i) % g->p.window;
        put_f64(&w, g->loss[at]);
        put_f64(&w, g->norm[at]);
    }
    put_i64(&w, g->bad_run);
    put_i64(&w, g->bad_start);
    put_i64(&w, g->skipped);
    put_i64(&w, g->spikes);
    put_i64(&w, g->rollbacks);
    put_f64(&w, g->lr_factor);
    put_f64(&w, s->best_val);
    put_i64(&w, s->bad_evals);
    put_i64(&w, s->ckpt_pending ? 1 : 0);
    size_t n = strnlen(s->init_from, sizeof s->init_from);
    put_u32(&w, (uint32_t)n);
    put_bytes(&w, s->init_from, n);
    put_i64(&w, s->world);
    put_i64(&w, s->data_flags);
    put_i64(&w, s->best_step);
    put_f64(&w, s->loss_scale);
    put_i64(&w, s->loss_scale_good);
    if (w.oom) {
        free(w.p);
        return CT_ERR(CT_ERR_OOM, "out of memory encoding the training state");
    }
    *out = w.p;
    *len = w.len;
    return CT_OK;
}

ct_status ct_train_state_decode(ct_train_state *s, const uint8_t *data, size_t len,
                                const char *where) {
    rbuf r = {.p = data, .len = len, .where = where};
    ct_train_state t;
    memset(&t, 0, sizeof t);
    uint32_t magic = get_u32(&r, "magic");
    if (!r.st && magic != CT_TRAIN_STATE_MAGIC)
        r.st = CT_ERR(CT_ERR_FORMAT, "%s: not a training-state record (magic 0x%08x, expected "
                      "0x%08x)", where, magic, CT_TRAIN_STATE_MAGIC);
    uint32_t version = get_u32(&r, "version");
    if (!r.st && (version < 1 || version > CT_TRAIN_STATE_VERSION)) {
        r.st = CT_ERR(CT_ERR_FORMAT, "%s: training-state version %u, this build reads versions "
                      "1..%d", where, version, CT_TRAIN_STATE_VERSION);
        ct_error_hint("resume it with the ctrain version that wrote it");
    }
    t.step = get_i64(&r, "step");
    t.adam_t = get_i64(&r, "adam_t");
    t.numel = get_u64(&r, "numel");
    t.batch_size = get_i64(&r, "batch_size");
    t.seq_len = get_i64(&r, "seq_len");
    t.grad_accum = get_i64(&r, "grad_accum");
    t.seed = get_i64(&r, "seed");
    int64_t shuffle = get_i64(&r, "shuffle");
    t.pos.epoch = get_i64(&r, "loader.epoch");
    t.pos.index = get_i64(&r, "loader.index");
    t.pos.offset = get_i64(&r, "loader.offset");
    t.pos.shard = get_i32(&r, "loader.shard");
    t.pos.shuffled = get_i32(&r, "loader.shuffled");
    t.total_steps = get_i64(&r, "total_steps");
    ct_guard *g = &t.guard;
    int64_t window = get_i64(&r, "guard.window");
    g->p.zscore = get_f64(&r, "guard.zscore");
    int64_t min_steps = get_i64(&r, "guard.min_steps");
    int64_t max_bad = get_i64(&r, "guard.max_bad");
    g->p.lr_factor = get_f64(&r, "guard.lr_factor");
    int64_t count = get_i64(&r, "guard.count");
    if (t.step < 0) bad_field(&r, "step", ">= 0", (double)t.step);
    if (t.adam_t < 0 || t.adam_t > t.step) bad_field(&r, "adam_t", "0..step", (double)t.adam_t);
    if (t.batch_size < 1 || t.seq_len < 1 || t.grad_accum < 1)
        bad_field(&r, "batch_size/seq_len/grad_accum", ">= 1",
                  (double)(t.batch_size < 1 ? t.batch_size : t.seq_len < 1 ? t.seq_len
                                                                          : t.grad_accum));
    if (shuffle != 0 && shuffle != 1) bad_field(&r, "shuffle", "0 or 1", (double)shuffle);
    if (window < 1 || window > CT_GUARD_WINDOW_MAX)
        bad_field(&r, "guard.window", "1..1024", (double)window);
    if (count < 0 || count > window) bad_field(&r, "guard.count", "0..guard.window", (double)count);
    if (r.st) return r.st;
    t.shuffle = shuffle == 1;
    g->p.window = (int)window;
    g->p.min_steps = (int)(min_steps < 0 ? 0 : min_steps > INT32_MAX ? INT32_MAX : min_steps);
    g->p.max_bad = (int)(max_bad < 0 ? 0 : max_bad > INT32_MAX ? INT32_MAX : max_bad);
    g->count = (int)count;
    g->head = 0;
    for (int i = 0; i < g->count; i++) {
        g->loss[i] = get_f64(&r, "guard.loss");
        g->norm[i] = get_f64(&r, "guard.norm");
    }
    g->bad_run = get_i64(&r, "guard.bad_run");
    g->bad_start = get_i64(&r, "guard.bad_start");
    g->skipped = get_i64(&r, "guard.skipped");
    g->spikes = get_i64(&r, "guard.spikes");
    g->rollbacks = get_i64(&r, "guard.rollbacks");
    g->lr_factor = get_f64(&r, "guard.lr_factor_now");
    g->z_loss = g->z_norm = NAN;
    t.best_val = get_f64(&r, "best_val");
    t.bad_evals = get_i64(&r, "bad_evals");
    int64_t pending = get_i64(&r, "ckpt_pending");
    if (pending != 0 && pending != 1) bad_field(&r, "ckpt_pending", "0 or 1", (double)pending);
    t.ckpt_pending = pending == 1;
    uint32_t n = get_u32(&r, "init_from.length");
    if (!r.st && n >= sizeof t.init_from)
        bad_field(&r, "init_from.length", "a path shorter than CT_PATH_MAX", (double)n);
    const uint8_t *name = take(&r, n, "init_from");
    if (name) memcpy(t.init_from, name, n);
    t.world = version >= 2 ? get_i64(&r, "world") : 1; /* version 1: one process */
    if (t.world < 1) bad_field(&r, "world", ">= 1", (double)t.world);
    t.data_flags = version >= 3 ? get_i64(&r, "data_flags") : 0;
    t.best_step = version >= 3 ? get_i64(&r, "best_step") : -1;
    if (t.data_flags < 0 || t.data_flags > 7) bad_field(&r, "data_flags", "0..7", (double)t.data_flags);
    if (t.best_step < -1 || t.best_step > t.step)
        bad_field(&r, "best_step", "-1..step", (double)t.best_step);
    /* version 4: the fp16 loss scaler (0, 0 in older records: the run's defaults) */
    t.loss_scale = version >= 4 ? get_f64(&r, "loss_scale") : 0.0;
    t.loss_scale_good = version >= 4 ? get_i64(&r, "loss_scale_good") : 0;
    if (!r.st && !(t.loss_scale == 0 || (t.loss_scale >= 1 && isfinite(t.loss_scale))))
        bad_field(&r, "loss_scale", "0 (none) or a finite number >= 1", t.loss_scale);
    if (!r.st && t.loss_scale_good < 0)
        bad_field(&r, "loss_scale_good", ">= 0", (double)t.loss_scale_good);
    if (!r.st && (g->bad_run < 0 || g->skipped < 0 || g->spikes < 0 || g->rollbacks < 0 ||
                  t.bad_evals < 0))
        bad_field(&r, "guard counters", ">= 0", -1);
    if (!r.st && !(g->lr_factor > 0 && g->lr_factor <= 1))
        bad_field(&r, "guard.lr_factor_now", "in (0, 1]", g->lr_factor);
    if (!r.st && r.at != r.len)
        r.st = CT_ERR(CT_ERR_FORMAT, "%s: training state has %zu bytes after its last field",
                      where, r.len - r.at);
    if (r.st) return r.st;
    *s = t;
    return CT_OK;
}

/* ------------------------------------------------------------- save, load */

ct_status ct_train_state_save(const char *run_dir, ct_model *model, const ct_adamw *opt,
                              const ct_train_state *s, const ct_ckpt_opts *o, char *out_dir,
                              size_t cap) {
    CT_ASSERT(opt->numel == ct_model_trainable_numel(model) && s->numel == opt->numel);
    CT_ASSERT(opt->lo == 0 && opt->n == opt->numel); /* a ZeRO shard is gathered first */
    uint8_t *state = NULL;
    size_t state_len = 0;
    ct_status st = ct_train_state_encode(s, &state, &state_len);
    if (st) return st;
    size_t moment_bytes = 2 * opt->numel * sizeof(float);
    ct_backend *be = ct_ctx_backend(opt->ctx);
    float *moments = opt->m; /* v follows m in one block */
    float *swapped = NULL;
    if (!host_little_endian() || (!be->host_visible && !opt->host)) {
        /* a host copy: for the byte swap, or staged from device memory */
        swapped = malloc(moment_bytes ? moment_bytes : 1);
        if (!swapped) {
            free(state);
            return CT_ERR(CT_ERR_OOM, "out of memory staging the optimizer state");
        }
        if (opt->host)
            memcpy(swapped, opt->m, moment_bytes);
        else
            ct_be_download(be, swapped, opt->m, moment_bytes);
        moments = swapped;
    }
    if (!host_little_endian()) {
        const uint8_t *src = (const uint8_t *)moments;
        uint8_t *dst = (uint8_t *)swapped;
        for (size_t i = 0; i < 2 * opt->numel; i++)
            for (int b = 0; b < 4; b++) dst[4 * i + (size_t)b] = src[4 * i + 3 - (size_t)b];
        moments = swapped;
    }
    ct_ckpt_blob blobs[2] = {{"optimizer", moments, moment_bytes}, {"state", state, state_len}};
    st = ct_ckpt_save(run_dir, s->step, model, blobs, 2, o, out_dir, cap);
    free(swapped);
    free(state);
    return st;
}

ct_status ct_train_state_read(const char *dir, ct_train_state *s) {
    void *data = NULL;
    size_t len = 0;
    ct_status st = ct_ckpt_read_blob(dir, "state", &data, &len);
    if (st) return st;
    char where[CT_PATH_MAX + 64];
    snprintf(where, sizeof where, "%s/state.bin", dir);
    st = ct_train_state_decode(s, data, len, where);
    free(data);
    return st;
}

/* A LoRA run's checkpoint holds the adapter: read it into the attached
 * adapters, restoring them when the file does not fit. */
static ct_status load_adapter(ct_model *model, const char *dir) {
    size_t n = ct_model_trainable_numel(model);
    float *keep = malloc(n * sizeof *keep + 1);
    if (!keep) return CT_ERR(CT_ERR_OOM, "out of memory reading the adapter of %s", dir);
    ct_model_download(model, keep, ct_model_trainable_params(model), n * sizeof *keep);
    ct_status st = ct_model_lora_load_peft(model, dir);
    if (st) ct_model_upload(model, ct_model_trainable_params(model), keep, n * sizeof *keep);
    free(keep);
    return st;
}

ct_status ct_train_state_load_weights(ct_model *model, const char *dir) {
    if (ct_model_lora(model)) return load_adapter(model, dir);
    /* in place: a rollback or resume never holds a second copy of the weights */
    return ct_model_load_hf_weights(model, dir);
}

ct_status ct_train_state_load(const char *dir, ct_model *model, ct_adamw *opt,
                              ct_train_state *s) {
    ct_train_state *t = malloc(sizeof *t);
    if (!t) return CT_ERR(CT_ERR_OOM, "out of memory reading a checkpoint");
    void *moments = NULL;
    size_t len = 0;
    ct_status st = ct_train_state_read(dir, t);
    if (st) goto done;
    if (t->numel != opt->numel) {
        st = CT_ERR(CT_ERR_FORMAT, "%s/state.bin: the training state is for %llu parameters, "
                    "this model has %zu", dir, (unsigned long long)t->numel, opt->numel);
        goto done;
    }
    if ((st = ct_ckpt_read_blob(dir, "optimizer", &moments, &len))) goto done;
    /* the blob always holds every parameter's moments; a ZeRO-1 optimizer
     * takes its range of m and of v */
    if (len != 2 * opt->numel * sizeof(float)) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: the optimizer state is %zu bytes, expected %zu (m and v "
                    "of %zu parameters as float32)", dir, len, 2 * opt->numel * sizeof(float),
                    opt->numel);
        goto done;
    }
    /* the weights last: they change the model, so nothing may fail after */
    if (model && (st = ct_train_state_load_weights(model, dir))) goto done;
    if (!host_little_endian()) { /* file order to host order, in place */
        uint8_t *b = moments;
        for (size_t i = 0; i < 2 * opt->numel; i++) {
            uint8_t x0 = b[4 * i], x1 = b[4 * i + 1];
            b[4 * i] = b[4 * i + 3], b[4 * i + 1] = b[4 * i + 2];
            b[4 * i + 2] = x1, b[4 * i + 3] = x0;
        }
    }
    ct_backend *be = ct_ctx_backend(opt->ctx);
    for (int half = 0; half < 2; half++) {
        const uint8_t *src = (const uint8_t *)moments + (half * opt->numel + opt->lo) * 4;
        ct_be_upload(be, half ? opt->v : opt->m, src, opt->n * sizeof(float));
    }
    opt->t = t->adam_t;
    *s = *t;
done:
    free(moments);
    free(t);
    return st;
}

/* ---------------------------------------------------------------- metrics */

/* The step of a metrics line `{"step": N, ...}`; false when the line is not
 * one (a torn write). */
static bool metrics_line_step(const char *line, size_t n, int64_t *step) {
    static const char prefix[] = "{\"step\": ";
    size_t k = sizeof prefix - 1;
    if (n < k + 2 || memcmp(line, prefix, k) != 0 || line[n - 1] != '}') return false;
    int64_t v = 0;
    size_t i = k;
    if (line[i] < '0' || line[i] > '9') return false;
    for (; i < n && line[i] >= '0' && line[i] <= '9'; i++) {
        if (v > (INT64_MAX - 9) / 10) return false;
        v = v * 10 + (line[i] - '0');
    }
    if (i >= n || line[i] != ',') return false;
    *step = v;
    return true;
}

ct_status ct_train_state_trim_metrics(const char *run_dir, int64_t max_step) {
    char path[CT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    FILE *probe = fopen(path, "rb");
    if (!probe) return CT_OK; /* nothing to keep */
    fclose(probe);
    char *text = NULL;
    size_t len = 0;
    ct_status st = ct_file_read_all(path, &text, &len);
    if (st) return st;
    /* filter in place: kept lines move towards the front */
    size_t w = 0, dropped = 0;
    for (size_t at = 0; at < len;) {
        char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
        int64_t step;
        if (nl && metrics_line_step(text + at, n, &step) && step <= max_step) {
            memmove(text + w, text + at, n + 1);
            w += n + 1;
        } else {
            dropped++;
        }
        at += n + (nl ? 1 : 0);
    }
    if (dropped) {
        st = ct_file_write_atomic(path, text, w);
        if (!st)
            ct_log(CT_LOG_INFO, "%s: dropped %zu line(s) after step %lld (the checkpoint resumed "
                   "from)", path, dropped, (long long)max_step);
    }
    free(text);
    return st;
}
