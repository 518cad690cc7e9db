/*
 * The run report's data: reading a run directory (metrics.jsonl line by line:
 * train, val, alert, remote, resume and device lines; config.yaml as text;
 * hw.json as text checked to be a JSON object) into ct_report_data. The page
 * (report.c, report_html.c, report_gpu.c) reads it; nothing here knows the
 * page.
 * config.yaml is shown as text; only what the summary names (the model it
 * started from, LoRA's settings) is read from it, and adapter_config.json
 * (what a LoRA run wrote) decides LoRA's settings when present.
 * Leaves out: any other interpretation of config.yaml.
 */
#include "tools/report.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>

#include "ctrain/config.h"
#include "io/fileio.h"
#include "perf/memplan.h"

static const char *const report_key_names[CT_REPORT_KEY_COUNT] = {
    "loss",         "lr",          "grad_norm",       "tokens_per_s", "step_ms",
    "skipped",      "spike",       "rollback",        "rollback_to",  "data_wait_ms",
    "mem_bytes",    "t_data_ms",   "t_fwd_ms",        "t_bwd_ms",     "t_opt_ms",
    "t_comm_ms",    "gflops",      "mfu",             "mfu_theory",   "rss_bytes",
    "rss_peak_bytes", "arena_bytes", "mem_limit_bytes", "plan_bytes",   "major_faults",
    "epoch",        "counted_tokens",
};

static const char *const report_gpu_names[CT_REPORT_GPU_COUNT] = {
    "gpu_util",    "gpu_mem_util", "gpu_mem_used_mib", "gpu_mem_total_mib",
    "gpu_power_w", "gpu_temp_c",   "gpu_sm_clock_mhz", "gpu_mem_clock_mhz",
};

const char *ct_report_key_name(ct_report_key k) {
    CT_ASSERT(k >= 0 && k < CT_REPORT_KEY_COUNT);
    return report_key_names[k];
}

void ct_report_free(ct_report_data *d) {
    if (!d) return;
    for (size_t i = 0; i < d->n_alerts; i++) free(d->alerts[i].message);
    free(d->alerts);
    free(d->train);
    free(d->gpu);
    free(d->val);
    free(d->rollbacks);
    free(d->resumes);
    free(d->config_text);
    free(d->hw_text);
    free(d->run_dir);
    free(d);
}

/* Grow *arr (of elem-byte items, *cap of them) to hold one more than n. */
static ct_status report_grow(void **arr, size_t *cap, size_t n, size_t elem) {
    if (n < *cap) return CT_OK;
    size_t nc = *cap ? *cap * 2 : 256;
    void *p = realloc(*arr, nc * elem);
    if (!p) return CT_ERR(CT_ERR_OOM, "out of memory reading metrics (%zu lines)", n);
    *arr = p;
    *cap = nc;
    return CT_OK;
}

typedef struct report_parse {
    ct_report_data *d;
    const char *path;
    size_t cap_train, cap_val, cap_alerts, cap_rollbacks, cap_resumes, cap_gpu;
} report_parse;

/* A JSON number, or NaN for null; *ok false for any other type. */
static double report_num(const cJSON *it, bool *ok) {
    *ok = true;
    if (cJSON_IsNumber(it)) return it->valuedouble;
    if (cJSON_IsNull(it)) return NAN;
    *ok = false;
    return NAN;
}

static ct_status report_bad_key(const report_parse *p, int64_t line, const char *key,
                                const char *want) {
    ct_status st = CT_ERR(CT_ERR_FORMAT, "%s:%lld: key \"%s\" must be %s", p->path,
                          (long long)line, key, want);
    ct_error_hint("the run's metrics file is damaged; fix or delete that line");
    return st;
}

static ct_status report_train_line(report_parse *p, const cJSON *o, int64_t step, int64_t line) {
    ct_report_data *d = p->d;
    ct_status st = report_grow((void **)&d->train, &p->cap_train, d->n_train, sizeof *d->train);
    if (st) return st;
    ct_report_row *r = &d->train[d->n_train];
    r->step = step;
    r->line = line;
    for (int k = 0; k < CT_REPORT_KEY_COUNT; k++) {
        r->v[k] = NAN;
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, report_key_names[k]);
        if (!it) continue;
        bool ok;
        r->v[k] = report_num(it, &ok);
        if (!ok) return report_bad_key(p, line, report_key_names[k], "a number or null");
        d->has_key[k] = true;
    }
    if (r->v[CT_REPORT_KEY_ROLLBACK] > 0) {
        st = report_grow((void **)&d->rollbacks, &p->cap_rollbacks, d->n_rollbacks,
                         sizeof *d->rollbacks);
        if (st) return st;
        double to = r->v[CT_REPORT_KEY_ROLLBACK_TO];
        d->rollbacks[d->n_rollbacks++] =
            (ct_report_rollback){.step = step, .to = isfinite(to) ? (int64_t)to : -1, .line = line};
    }
    d->n_train++;
    return CT_OK;
}

static ct_status report_val_line(report_parse *p, const cJSON *o, int64_t step, int64_t line) {
    ct_report_data *d = p->d;
    ct_status st = report_grow((void **)&d->val, &p->cap_val, d->n_val, sizeof *d->val);
    if (st) return st;
    ct_report_val *v = &d->val[d->n_val];
    v->step = step;
    v->line = line;
    v->loss = v->best_loss = NAN;
    const char *keys[2] = {"loss", "best_loss"};
    double *dst[2] = {&v->loss, &v->best_loss};
    for (int i = 0; i < 2; i++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, keys[i]);
        if (!it) continue;
        bool ok;
        *dst[i] = report_num(it, &ok);
        if (!ok) return report_bad_key(p, line, keys[i], "a number or null");
    }
    d->n_val++;
    return CT_OK;
}

/* A "device" line: the device's memory against the plan on every step of a
 * GPU run, and the GPU's reading (gpu_util, ...) on the steps the NVML watch
 * read it. A line with no gpu_* key holds no reading and is only counted. */
static ct_status report_device_line(report_parse *p, const cJSON *o, int64_t step, int64_t line) {
    ct_report_data *d = p->d;
    d->has_device = true;
    ct_report_gpu_row r = {.step = step, .line = line};
    bool any = false;
    for (int k = 0; k < CT_REPORT_GPU_COUNT; k++) {
        r.v[k] = NAN;
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, report_gpu_names[k]);
        if (!it) continue;
        bool ok;
        r.v[k] = report_num(it, &ok);
        if (!ok) return report_bad_key(p, line, report_gpu_names[k], "a number or null");
        any = true;
    }
    if (!any) return CT_OK;
    ct_status st = report_grow((void **)&d->gpu, &p->cap_gpu, d->n_gpu, sizeof *d->gpu);
    if (st) return st;
    d->gpu[d->n_gpu++] = r;
    return CT_OK;
}

/* Copy a string item into dst (cut to fit); "" when absent. */
static ct_status report_str(const report_parse *p, const cJSON *o, const char *key, int64_t line,
                            char *dst, size_t cap) {
    dst[0] = '\0';
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!it || cJSON_IsNull(it)) return CT_OK;
    if (!cJSON_IsString(it)) return report_bad_key(p, line, key, "a string");
    snprintf(dst, cap, "%s", it->valuestring);
    return CT_OK;
}

static ct_status report_alert_line(report_parse *p, const cJSON *o, int64_t step, int64_t line) {
    ct_report_data *d = p->d;
    ct_status st = report_grow((void **)&d->alerts, &p->cap_alerts, d->n_alerts, sizeof *d->alerts);
    if (st) return st;
    ct_report_alert a = {.step = step, .line = line, .value = NAN, .threshold = NAN};
    if ((st = report_str(p, o, "level", line, a.level, sizeof a.level)) ||
        (st = report_str(p, o, "kind", line, a.kind, sizeof a.kind)))
        return st;
    const char *nk[2] = {"value", "threshold"};
    double *dst[2] = {&a.value, &a.threshold};
    for (int i = 0; i < 2; i++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, nk[i]);
        if (!it) continue;
        bool ok;
        *dst[i] = report_num(it, &ok);
        if (!ok) return report_bad_key(p, line, nk[i], "a number or null");
    }
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "message");
    if (m && !cJSON_IsNull(m) && !cJSON_IsString(m))
        return report_bad_key(p, line, "message", "a string");
    const char *msg = cJSON_IsString(m) ? m->valuestring : "";
    a.message = malloc(strlen(msg) + 1);
    if (!a.message) return CT_ERR(CT_ERR_OOM, "out of memory reading alerts");
    strcpy(a.message, msg);
    d->alerts[d->n_alerts++] = a;
    return CT_OK;
}

/* A "remote" line: the counters of one process so far. A count lower than
 * the last line's means a new process (a resume): the last one's are kept. */
static void report_remote_line(ct_report_data *d, const cJSON *o) {
    static const char *const keys[8] = {"bytes_fetched", "requests", "retries", "failures",
                                        "bad_blocks", "disk_hits", "blocks_fetched",
                                        "read_wait_ms"};
    double v[8];
    bool restarted = false;
    for (int i = 0; i < 8; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, keys[i]);
        v[i] = cJSON_IsNumber(x) && isfinite(x->valuedouble) && x->valuedouble >= 0
                   ? x->valuedouble : 0;
        restarted |= v[i] < d->remote_last[i];
    }
    for (int i = 0; i < 8; i++) {
        if (restarted) d->remote[i] += d->remote_last[i];
        d->remote_last[i] = v[i];
    }
    d->has_remote = true;
}

/* One line of metrics.jsonl. Blank lines are fine; lines of an unknown split
 * are ignored (newer writers may add kinds). CT_ERR_FORMAT names the line;
 * *syntax says the line is not JSON at all (what a torn write looks like). */
static ct_status report_line(report_parse *p, const char *text, size_t n, int64_t line,
                             bool *syntax) {
    *syntax = false;
    size_t i = 0;
    while (i < n && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n')) i++;
    if (i == n) return CT_OK;
    cJSON *o = cJSON_ParseWithLength(text, n);
    ct_status st = CT_OK;
    if (!o || !cJSON_IsObject(o)) {
        *syntax = !o;
        size_t e = n; /* the excerpt without the line's end */
        while (e > i && (text[e - 1] == '\n' || text[e - 1] == '\r' || text[e - 1] == ' ')) e--;
        int show = e - i > 60 ? 60 : (int)(e - i);
        st = CT_ERR(CT_ERR_FORMAT, "%s:%lld: not a JSON object: %.*s%s", p->path, (long long)line,
                    show, text + i, e - i > 60 ? "..." : "");
        ct_error_hint("every line of metrics.jsonl is one JSON object; fix or delete that line");
        goto done;
    }
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(o, "step");
    const cJSON *split = cJSON_GetObjectItemCaseSensitive(o, "split");
    if (!cJSON_IsNumber(step) || !isfinite(step->valuedouble) || step->valuedouble < 0 ||
        step->valuedouble != floor(step->valuedouble) || step->valuedouble > 9e15) {
        st = report_bad_key(p, line, "step", "a whole number >= 0");
        goto done;
    }
    if (!cJSON_IsString(split)) {
        st = report_bad_key(p, line, "split", "a string (\"train\", \"val\" or \"alert\")");
        goto done;
    }
    int64_t s = (int64_t)step->valuedouble;
    if (!strcmp(split->valuestring, "train")) st = report_train_line(p, o, s, line);
    else if (!strcmp(split->valuestring, "val")) st = report_val_line(p, o, s, line);
    else if (!strcmp(split->valuestring, "alert")) st = report_alert_line(p, o, s, line);
    else if (!strcmp(split->valuestring, "device")) st = report_device_line(p, o, s, line);
    else if (!strcmp(split->valuestring, "remote")) report_remote_line(p->d, o);
    else if (!strcmp(split->valuestring, "resume")) { /* the trainer continued after step s */
        ct_report_data *d = p->d;
        st = report_grow((void **)&d->resumes, &p->cap_resumes, d->n_resumes, sizeof *d->resumes);
        if (!st) d->resumes[d->n_resumes++] = (ct_report_resume){.step = s, .line = line};
    }
done:
    cJSON_Delete(o);
    return st;
}

static int report_cmp_row(const void *a, const void *b) {
    const ct_report_row *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return (x->line > y->line) - (x->line < y->line);
}

static int report_cmp_val(const void *a, const void *b) {
    const ct_report_val *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return (x->line > y->line) - (x->line < y->line);
}

static int report_cmp_gpu(const void *a, const void *b) {
    const ct_report_gpu_row *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return (x->line > y->line) - (x->line < y->line);
}

/* Sort by (step, line) and keep the last line of each step (GPU readings
 * too, uncounted: a resume writes them again as it writes the steps). */
static void report_dedup(ct_report_data *d) {
    if (d->n_gpu) {
        qsort(d->gpu, d->n_gpu, sizeof *d->gpu, report_cmp_gpu);
        size_t w = 0;
        for (size_t i = 0; i < d->n_gpu; i++) {
            if (!w || d->gpu[w - 1].step != d->gpu[i].step) w++;
            d->gpu[w - 1] = d->gpu[i];
        }
        d->n_gpu = w;
    }
    if (d->n_train) {
        qsort(d->train, d->n_train, sizeof *d->train, report_cmp_row);
        size_t w = 0;
        for (size_t i = 0; i < d->n_train; i++) {
            if (w && d->train[w - 1].step == d->train[i].step) d->n_replaced++;
            else w++;
            d->train[w - 1] = d->train[i];
        }
        d->n_train = w;
    }
    if (d->n_val) {
        qsort(d->val, d->n_val, sizeof *d->val, report_cmp_val);
        size_t w = 0;
        for (size_t i = 0; i < d->n_val; i++) {
            if (w && d->val[w - 1].step == d->val[i].step) d->n_replaced++;
            else w++;
            d->val[w - 1] = d->val[i];
        }
        d->n_val = w;
    }
}

/* Read metrics.jsonl line by line. A line that is not JSON is held back: if
 * another non-blank line follows, it is an error; if it was the last, it is
 * what a crash mid-write leaves, and it is skipped with a warning. Valid JSON
 * with a wrong key is an error wherever it is. */
static ct_status report_read_metrics(ct_report_data *d, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        ct_status st;
        if (errno == ENOENT) {
            st = CT_ERR(CT_ERR_FORMAT, "no metrics in %s: the file does not exist", path);
            ct_error_hint("run `ctrain train run.dir=%s ...` first, or point ctrain report at a "
                          "run directory", d->run_dir);
        } else {
            st = CT_ERR(CT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        }
        return st;
    }
    report_parse p = {.d = d, .path = path};
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    ct_status st = CT_OK, pending = CT_OK;
    char pend_msg[1024] = "", pend_hint[512] = "";
    while ((n = getline(&line, &cap, f)) >= 0) {
        d->n_lines++;
        bool blank = true;
        for (ssize_t i = 0; i < n && blank; i++)
            blank = line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n';
        if (blank) continue;
        if (pending) {
            /* the held-back bad line was not the last: restore its error */
            st = CT_ERR(pending, "%s", pend_msg);
            if (pend_hint[0]) ct_error_hint("%s", pend_hint);
            goto done;
        }
        bool syntax;
        st = report_line(&p, line, (size_t)n, d->n_lines, &syntax);
        if (st == CT_ERR_FORMAT && syntax) {
            pending = st;
            d->torn_line = d->n_lines;
            snprintf(pend_msg, sizeof pend_msg, "%s", ct_last_error());
            snprintf(pend_hint, sizeof pend_hint, "%s", ct_last_hint());
            st = CT_OK;
        } else if (st) {
            goto done;
        }
    }
    if (ferror(f)) {
        st = CT_ERR(CT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
        goto done;
    }
    if (pending) {
        ct_log(CT_LOG_WARN, "%s (skipped: the last line, as a crash mid-write leaves it)", pend_msg);
        ct_error_clear();
    }
    if (!d->n_train) {
        st = CT_ERR(CT_ERR_FORMAT, "no metrics in %s: it holds no training step (no line with "
                    "\"split\": \"train\")", path);
        ct_error_hint("run `ctrain train run.dir=%s ...` first and let it finish at least one "
                      "step", d->run_dir);
        goto done;
    }
    report_dedup(d);
done:
    free(line);
    fclose(f);
    return st;
}

/* Read an optional text file: *out NULL when it does not exist. */
static ct_status report_read_optional(const char *path, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT) return CT_OK;
    return ct_file_read_all(path, out, len);
}

/* hw.json must be one JSON object (what `ctrain train` writes, atomically:
 * a damaged one is not a crash's leftover). It is optional and nothing in
 * the report is computed from it, so unlike a damaged metrics line it is no
 * error: a warning names the file and where parsing stopped, and the page
 * leaves the hardware section out. Returns whether it is one object. */
static bool report_check_hw(const char *path, const char *text, size_t len) {
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(text, len, &end, false);
    size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
    if (o && cJSON_IsObject(o)) {
        size_t i = at;
        while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n')) i++;
        if (i == len) {
            cJSON_Delete(o);
            return true;
        }
        ct_log(CT_LOG_WARN, "%s: expected one JSON object, found more after byte offset %zu; the report "
               "leaves the hardware section out", path, at);
    } else if (o) {
        ct_log(CT_LOG_WARN, "%s: expected a JSON object, found another JSON value; the report leaves the "
               "hardware section out", path);
    } else {
        ct_log(CT_LOG_WARN, "%s: expected a JSON object, but it is not valid JSON (parsing stopped at byte "
               "offset %zu); the report leaves the hardware section out", path, at);
    }
    cJSON_Delete(o);
    return false;
}

/* LoRA's settings as the run's adapter_config.json (PEFT's) records them:
 * they are the adapter's own when lora.init_from gave it. Absent or damaged:
 * config.yaml's stand. */
static void report_read_adapter(ct_report_data *d, const char *path) {
    char *text = NULL;
    size_t len = 0;
    if (report_read_optional(path, &text, &len) || !text) {
        ct_error_clear();
        free(text);
        return;
    }
    cJSON *o = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "r");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "lora_alpha");
    const cJSON *dr = cJSON_GetObjectItemCaseSensitive(o, "lora_dropout");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "target_modules");
    if (cJSON_IsNumber(r) && r->valuedouble >= 1 && r->valuedouble < 1e9) {
        d->lora = true;
        d->lora_r = (int64_t)r->valuedouble;
        if (cJSON_IsNumber(a)) d->lora_alpha = a->valuedouble;
        if (cJSON_IsNumber(dr)) d->lora_dropout = dr->valuedouble;
        size_t n = 0;
        const cJSON *e;
        if (cJSON_IsString(t)) {
            snprintf(d->lora_targets, sizeof d->lora_targets, "%s", t->valuestring);
        } else if (cJSON_IsArray(t)) {
            d->lora_targets[0] = '\0';
            cJSON_ArrayForEach(e, t) {
                if (!cJSON_IsString(e) || n >= sizeof d->lora_targets) continue;
                n += (size_t)snprintf(d->lora_targets + n, sizeof d->lora_targets - n, "%s%s",
                                      n ? "," : "", e->valuestring);
            }
        }
    }
    cJSON_Delete(o);
}

/* d's setup fields from config.yaml at path (and adapter_config.json beside
 * it). A config.yaml this version cannot read leaves them out. */
static void report_read_setup(ct_report_data *d, const char *path, const char *adapter) {
    ct_config *c = malloc(sizeof *c);
    if (!c) return;
    ct_config_default(c);
    if (ct_config_load_yaml(c, path)) {
        ct_error_clear();
        free(c);
        return;
    }
    d->has_setup = true;
    if (c->model.init_from[0])
        snprintf(d->setup_model, sizeof d->setup_model, "model.init_from = %s", c->model.init_from);
    else
        snprintf(d->setup_model, sizeof d->setup_model, "from scratch: %s%s%s", c->model.arch,
                 c->model.preset[0] ? ", preset " : "", c->model.preset);
    d->lora = c->lora.r > 0 || c->lora.init_from[0];
    d->lora_r = c->lora.r;
    d->lora_alpha = c->lora.alpha;
    d->lora_dropout = c->lora.dropout;
    snprintf(d->lora_targets, sizeof d->lora_targets, "%s", c->lora.targets);
    snprintf(d->lora_from, sizeof d->lora_from, "%s", c->lora.init_from);
    snprintf(d->lora_base_dtype, sizeof d->lora_base_dtype, "%s", ct_lora_base_dtype_name(c));
    free(c);
    if (d->lora) report_read_adapter(d, adapter);
}

ct_status ct_report_load(ct_report_data **out, const char *run_dir) {
    *out = NULL;
    struct stat sb;
    int rc = stat(run_dir, &sb);
    if (rc != 0 || !S_ISDIR(sb.st_mode)) {
        ct_status st = CT_ERR(CT_ERR_IO, "%s: %s", run_dir,
                              rc == 0 ? "not a directory"
                              : errno == ENOENT ? "no such run directory" : strerror(errno));
        ct_error_hint("give the run.dir of a training run (where metrics.jsonl is)");
        return st;
    }
    ct_report_data *d = calloc(1, sizeof *d);
    if (!d) return CT_ERR(CT_ERR_OOM, "out of memory for the report");
    size_t rl = strlen(run_dir);
    while (rl > 1 && run_dir[rl - 1] == '/') rl--;
    char *path = malloc(rl + 32);
    d->run_dir = malloc(rl + 1);
    ct_status st = CT_OK;
    if (!path || !d->run_dir) {
        st = CT_ERR(CT_ERR_OOM, "out of memory for the report");
        goto fail;
    }
    memcpy(d->run_dir, run_dir, rl);
    d->run_dir[rl] = '\0';
    snprintf(path, rl + 32, "%s/metrics.jsonl", d->run_dir);
    if ((st = report_read_metrics(d, path))) goto fail;
    snprintf(path, rl + 32, "%s/config.yaml", d->run_dir);
    if ((st = report_read_optional(path, &d->config_text, &d->config_len))) goto fail;
    if (d->config_text) {
        char *adapter = malloc(rl + 32);
        if (!adapter) {
            st = CT_ERR(CT_ERR_OOM, "out of memory for the report");
            goto fail;
        }
        snprintf(adapter, rl + 32, "%s/adapter_config.json", d->run_dir);
        report_read_setup(d, path, adapter);
        free(adapter);
    }
    size_t hl;
    snprintf(path, rl + 32, "%s/hw.json", d->run_dir);
    if ((st = report_read_optional(path, &d->hw_text, &hl))) goto fail;
    if (d->hw_text && !report_check_hw(path, d->hw_text, hl))
        d->hw_text[0] = '\0'; /* the page then says it is damaged, whatever bytes it held */
    free(path);
    *out = d;
    return CT_OK;
fail:
    free(path);
    ct_report_free(d);
    return st;
}
