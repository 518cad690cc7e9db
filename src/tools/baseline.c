/*
 * Baseline files of the kernel suite and the comparison with them. See
 * baseline.h.
 */
#include "tools/baseline.h"

#include <cJSON.h>
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/fileio.h"

#define NOISE_DEF "relative spread of the repetitions' medians: (max - min) / median"

/* This machine as a string: the CPU model of /proc/cpuinfo, the online CPUs
 * and OpenBLAS's kernel family. Baselines compare only when it is equal. */
static void bench_host_signature(char *out, size_t cap) {
    char model[160] = "unknown cpu";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "model name", 10)) continue;
            const char *v = strchr(line, ':');
            if (!v) continue;
            v++;
            while (*v == ' ' || *v == '\t') v++;
            size_t n = strcspn(v, "\r\n");
            if (n >= sizeof model) n = sizeof model - 1;
            memcpy(model, v, n);
            model[n] = 0;
            break;
        }
        fclose(f);
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(out, cap, "%s | %ld cpus | OpenBLAS %s", model, cpus, openblas_get_corename());
}

void ct_baseline_init(ct_baseline *b, const char *bench, const char *options, const char *preset,
                      const char *table, int B, int T, int threads) {
    memset(b, 0, sizeof *b);
    bench_host_signature(b->host, sizeof b->host);
    snprintf(b->bench, sizeof b->bench, "%s", bench);
    snprintf(b->options, sizeof b->options, "%s", options ? options : "");
    snprintf(b->preset, sizeof b->preset, "%s", preset);
    snprintf(b->table, sizeof b->table, "%s", table);
    b->B = B, b->T = T, b->threads = threads;
}

ct_status ct_baseline_add(ct_baseline *b, const ct_bench_item *it) {
    if (b->n >= CT_BASELINE_MAX_KERNELS)
        return CT_ERR(CT_ERR_ARG, "baseline holds at most %d kernels", CT_BASELINE_MAX_KERNELS);
    ct_baseline_kernel *k = &b->k[b->n++];
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "%s", it->name);
    snprintf(k->shape, sizeof k->shape, "%s", it->shape);
    k->median_s = it->seconds;
    k->noise = it->spread;
    k->repeats = it->repeats < CT_BENCH_MAX_REPEAT ? it->repeats : CT_BENCH_MAX_REPEAT;
    for (int r = 0; r < k->repeats; r++) k->rep_s[r] = it->rep_s[r];
    return CT_OK;
}

ct_status ct_baseline_save(const ct_baseline *b, const char *path) {
    cJSON *root = cJSON_CreateObject(), *ks = cJSON_CreateArray();
    bool ok = root && ks;
    ok = ok && cJSON_AddStringToObject(root, "format", CT_BASELINE_FORMAT);
    ok = ok && cJSON_AddNumberToObject(root, "version", CT_BASELINE_VERSION);
    ok = ok && cJSON_AddStringToObject(root, "host", b->host);
    ok = ok && cJSON_AddStringToObject(root, "bench", b->bench);
    ok = ok && cJSON_AddStringToObject(root, "options", b->options);
    ok = ok && cJSON_AddStringToObject(root, "preset", b->preset);
    ok = ok && cJSON_AddNumberToObject(root, "B", b->B);
    ok = ok && cJSON_AddNumberToObject(root, "T", b->T);
    ok = ok && cJSON_AddNumberToObject(root, "threads", b->threads);
    ok = ok && cJSON_AddStringToObject(root, "table", b->table);
    ok = ok && cJSON_AddStringToObject(root, "noise", NOISE_DEF);
    for (int i = 0; ok && i < b->n; i++) {
        const ct_baseline_kernel *k = &b->k[i];
        cJSON *o = cJSON_CreateObject();
        ok = o && cJSON_AddItemToArray(ks, o);
        if (!ok) {
            cJSON_Delete(o);
            break;
        }
        ok = ok && cJSON_AddStringToObject(o, "name", k->name);
        ok = ok && cJSON_AddStringToObject(o, "shape", k->shape);
        ok = ok && cJSON_AddNumberToObject(o, "median_s", k->median_s);
        ok = ok && cJSON_AddNumberToObject(o, "noise", k->noise);
        cJSON *reps = ok ? cJSON_AddArrayToObject(o, "repeats_s") : NULL;
        ok = reps != NULL;
        for (int r = 0; ok && r < k->repeats; r++) {
            cJSON *v = cJSON_CreateNumber(k->rep_s[r]);
            ok = v && cJSON_AddItemToArray(reps, v);
        }
    }
    if (ok) ok = cJSON_AddItemToObject(root, "kernels", ks);
    else cJSON_Delete(ks);
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) return CT_ERR(CT_ERR_OOM, "out of memory writing the baseline %s", path);
    size_t len = strlen(text);
    text[len] = '\n'; /* replaces the NUL; the length below excludes nothing else */
    ct_status st = ct_file_write_atomic(path, text, len + 1);
    free(text);
    return st;
}

static ct_status bad_field(const char *path, const char *key, const char *expected) {
    return CT_ERR(CT_ERR_FORMAT, "baseline %s: field '%s' is missing or invalid: expected %s",
                  path, key, expected);
}

static ct_status get_str(const cJSON *o, const char *key, const char *path, char *out,
                         size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= cap)
        return bad_field(path, key, "a string");
    snprintf(out, cap, "%s", v->valuestring);
    return CT_OK;
}

/* As get_str, with fallback when the key is absent (files of older writers). */
static ct_status get_opt_str(const cJSON *o, const char *key, const char *path,
                             const char *fallback, char *out, size_t cap) {
    if (!cJSON_GetObjectItemCaseSensitive(o, key)) {
        snprintf(out, cap, "%s", fallback);
        return CT_OK;
    }
    return get_str(o, key, path, out, cap);
}

static ct_status get_int(const cJSON *o, const char *key, const char *path, int lo, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > 1 << 24 ||
        v->valuedouble != floor(v->valuedouble))
        return bad_field(path, key, "a whole number");
    *out = (int)v->valuedouble;
    return CT_OK;
}

static ct_status get_pos(const cJSON *o, const char *key, const char *path, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0)
        return bad_field(path, key, "a finite number >= 0");
    *out = v->valuedouble;
    return CT_OK;
}

static ct_status load_kernel(const cJSON *o, const char *path, int i, ct_baseline_kernel *k) {
    char key[64];
    snprintf(key, sizeof key, "kernels[%d]", i);
    if (!cJSON_IsObject(o)) return bad_field(path, key, "an object");
    ct_status st;
    if ((st = get_str(o, "name", path, k->name, sizeof k->name)) ||
        (st = get_str(o, "shape", path, k->shape, sizeof k->shape)) ||
        (st = get_pos(o, "median_s", path, &k->median_s)) ||
        (st = get_pos(o, "noise", path, &k->noise)))
        return st;
    if (k->median_s <= 0) return bad_field(path, "median_s", "seconds > 0");
    const cJSON *reps = cJSON_GetObjectItemCaseSensitive(o, "repeats_s");
    int nr = cJSON_IsArray(reps) ? cJSON_GetArraySize(reps) : -1;
    if (nr < 1 || nr > CT_BENCH_MAX_REPEAT)
        return bad_field(path, "repeats_s", "an array of 1..32 seconds");
    k->repeats = nr;
    for (int r = 0; r < nr; r++) {
        const cJSON *v = cJSON_GetArrayItem(reps, r);
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || !(v->valuedouble >= 0))
            return bad_field(path, "repeats_s", "an array of 1..32 finite seconds >= 0");
        k->rep_s[r] = v->valuedouble;
    }
    return CT_OK;
}

ct_status ct_baseline_load(ct_baseline *b, const char *path) {
    memset(b, 0, sizeof *b);
    cJSON *root = NULL;
    ct_status st = ct_json_read_object(path, &root);
    if (st == CT_ERR_FORMAT)
        ct_error_hint("save a new one with `ctrain bench kernels ... --save-baseline FILE`");
    if (st) return st;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, CT_BASELINE_FORMAT)) {
        st = CT_ERR(CT_ERR_FORMAT, "baseline %s: format is not \"%s\"", path, CT_BASELINE_FORMAT);
    } else if (!cJSON_IsNumber(ver) || ver->valuedouble != CT_BASELINE_VERSION) {
        st = CT_ERR(CT_ERR_FORMAT, "baseline %s: version %g is not supported: expected %d", path,
                    cJSON_IsNumber(ver) ? ver->valuedouble : -1.0, CT_BASELINE_VERSION);
    } else if (!(st = get_str(root, "host", path, b->host, sizeof b->host)) &&
               !(st = get_opt_str(root, "bench", path, "kernels", b->bench, sizeof b->bench)) &&
               !(st = get_opt_str(root, "options", path, "", b->options, sizeof b->options)) &&
               !(st = get_str(root, "preset", path, b->preset, sizeof b->preset)) &&
               !(st = get_str(root, "table", path, b->table, sizeof b->table)) &&
               !(st = get_int(root, "B", path, 1, &b->B)) &&
               !(st = get_int(root, "T", path, 1, &b->T)) &&
               !(st = get_int(root, "threads", path, 1, &b->threads))) {
        const cJSON *ks = cJSON_GetObjectItemCaseSensitive(root, "kernels");
        int n = cJSON_IsArray(ks) ? cJSON_GetArraySize(ks) : -1;
        if (n < 0 || n > CT_BASELINE_MAX_KERNELS)
            st = bad_field(path, "kernels", "an array of at most 64 kernels");
        for (int i = 0; !st && i < n; i++) {
            st = load_kernel(cJSON_GetArrayItem(ks, i), path, i, &b->k[i]);
            b->n = i + 1;
        }
    }
    cJSON_Delete(root);
    if (st) ct_error_hint("save a new one with `ctrain bench kernels ... --save-baseline FILE`");
    return st;
}

ct_status ct_baseline_check(const ct_baseline *base, const ct_baseline *now, const char *path) {
    if (strcmp(base->host, now->host)) {
        ct_status st = CT_ERR(CT_ERR_ARG,
                              "baseline %s comes from another host: baseline host \"%s\", this "
                              "host \"%s\"",
                              path, base->host, now->host);
        ct_error_hint("baselines only compare on the host that measured them; save one here");
        return st;
    }
    const char *field = NULL;
    char bv[64], nv[64];
    if (strcmp(base->bench, now->bench)) {
        ct_status st = CT_ERR(CT_ERR_ARG, "baseline %s holds `bench %s` figures, this run is "
                              "`bench %s`", path, base->bench, now->bench);
        ct_error_hint("compare like with like: `ctrain bench %s ... --baseline %s`", base->bench,
                      path);
        return st;
    }
    if (strcmp(base->options, now->options)) {
        field = "options";
        snprintf(bv, sizeof bv, "%s", base->options), snprintf(nv, sizeof nv, "%s", now->options);
    } else if (strcmp(base->preset, now->preset)) {
        field = "preset";
        snprintf(bv, sizeof bv, "%s", base->preset), snprintf(nv, sizeof nv, "%s", now->preset);
    } else if (strcmp(base->table, now->table)) {
        field = "table";
        snprintf(bv, sizeof bv, "%s", base->table), snprintf(nv, sizeof nv, "%s", now->table);
    } else if (base->B != now->B) {
        field = "B";
        snprintf(bv, sizeof bv, "%d", base->B), snprintf(nv, sizeof nv, "%d", now->B);
    } else if (base->T != now->T) {
        field = "T";
        snprintf(bv, sizeof bv, "%d", base->T), snprintf(nv, sizeof nv, "%d", now->T);
    } else if (base->threads != now->threads) {
        field = "threads";
        snprintf(bv, sizeof bv, "%d", base->threads), snprintf(nv, sizeof nv, "%d", now->threads);
    }
    if (!field) return CT_OK;
    ct_status st = CT_ERR(CT_ERR_ARG, "baseline %s was measured with %s = %s, this run has %s = %s",
                          path, field, bv, field, nv);
    ct_error_hint("rerun with the baseline's settings or save a new baseline");
    return st;
}

int ct_baseline_compare(const ct_baseline *base, const ct_baseline *now, ct_baseline_row *rows) {
    int regressed = 0;
    for (int i = 0; i < now->n; i++) {
        const ct_baseline_kernel *k = &now->k[i], *b = NULL;
        for (int j = 0; j < base->n && !b; j++)
            if (!strcmp(base->k[j].name, k->name)) b = &base->k[j];
        ct_baseline_row *r = &rows[i];
        memset(r, 0, sizeof *r);
        r->name = k->name;
        r->now_s = k->median_s;
        if (!b) {
            r->verdict = CT_BASELINE_NEW;
            continue;
        }
        r->base_s = b->median_s;
        r->change = k->median_s / b->median_s - 1.0;
        r->noise = b->noise > k->noise ? b->noise : k->noise;
        r->limit = CT_BASELINE_TOLERANCE + r->noise;
        if (k->median_s > b->median_s * (1.0 + r->limit)) {
            r->verdict = CT_BASELINE_REGRESSED;
            regressed++;
        }
    }
    return regressed;
}
