/*
 * What every subcommand shares: the error printers, the configuration loader
 * (defaults, the YAML file, a tuned profile's settings, then key=value
 * overrides), the backend named by CTRAIN_DEVICE, number arguments, and the
 * token sampler, end-of-sequence ids and output escapes of `sample` and `chat`. main.c dispatches
 * to cmd_*.c, and they call down into this file, never back into main.c.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>

#include "cli.h"
#include "backend/device.h"
#include "ctrain/data.h"
#include "ctrain/model.h"
#include "io/fileio.h"
#include "perf/bench.h"
#include "tools/tune.h"

ct_status cli_device_from_env(ct_ctx_params *cp) {
    const char *dev = getenv("CTRAIN_DEVICE");
    if (!dev || !*dev) return CT_OK;
    int kind, index;
    ct_status st = ct_config_device(dev, &kind, &index);
    if (st) return st;
    cp->backend = (ct_backend_kind)kind;
    cp->device = index;
    return CT_OK;
}

ct_status cli_ctx_params(const ct_config *cfg, int local_rank, ct_ctx_params *cp) {
    *cp = ct_ctx_params_default();
    cp->n_threads = (int)cfg->run.threads;
    int kind, index;
    ct_status st = ct_config_device(cfg->run.device, &kind, &index);
    if (st) return st;
    cp->backend = (ct_backend_kind)kind;
    cp->device = index;
    if (kind == CT_BACKEND_CUDA && local_rank > 0 && !strchr(cfg->run.device, ':')) {
        /* ranks of one machine spread over its GPUs (the driver starts here) */
        int n = ct_cuda_probe(NULL, 0, NULL, 0);
        cp->device = ct_device_for_rank(cfg->run.device, local_rank, n);
    }
    if (cfg->debug.sim_device_memory[0]) {
        int64_t bytes;
        if ((st = ct_config_bytes("debug.sim_device_memory", cfg->debug.sim_device_memory,
                                  &bytes)))
            return st;
        cp->sim_device_memory = (size_t)bytes;
    }
    return CT_OK;
}

void cli_gpu_print(const ct_gpu_peaks *g, bool json) {
    const ct_device_info *d = &g->info;
    if (json) {
        printf(", \"gpu_index\": %d, \"gpu_cc\": \"%d.%d\", \"gpu_sms\": %d, "
               "\"gpu_clock_mhz\": %.0f, \"gpu_memory_bytes\": %zu, \"gpu_memory_free_bytes\": "
               "%zu, \"gpu_fp32_theory_gflops\": %.1f, \"gpu_bf16_theory_gflops\": %.1f",
               d->index, d->cc_major, d->cc_minor, d->sms, d->clock_mhz, d->mem_total,
               d->mem_free, d->fp32_theory_gflops, d->bf16_theory_gflops);
        if (g->gemm_n > 0 && g->bf16_gemm_gflops > 0)
            printf(", \"gpu_gemm_n\": %d, \"gpu_fp32_gemm_gflops\": %.1f, "
                   "\"gpu_bf16_gemm_gflops\": %.1f", g->gemm_n, g->fp32_gemm_gflops,
                   g->bf16_gemm_gflops);
        else if (g->gemm_n > 0) /* a GPU without bf16 GEMMs */
            printf(", \"gpu_gemm_n\": %d, \"gpu_fp32_gemm_gflops\": %.1f, "
                   "\"gpu_bf16_gemm_gflops\": null", g->gemm_n, g->fp32_gemm_gflops);
        else
            printf(", \"gpu_fp32_gemm_gflops\": null, \"gpu_bf16_gemm_gflops\": null");
        return;
    }
    printf("gpu          %s (cuda:%d): compute capability %d.%d, %d multiprocessors at %.0f MHz, "
           "%.1f GiB (%.1f GiB free)\n", d->name, d->index, d->cc_major, d->cc_minor, d->sms,
           d->clock_mhz, d->mem_total / 1073741824.0, d->mem_free / 1073741824.0);
    if (d->fp32_theory_gflops > 0)
        printf("gpu peak     theoretical fp32 %.0f GFLOP/s, bf16 %.0f GFLOP/s (dense, at %.0f "
               "MHz)", d->fp32_theory_gflops, d->bf16_theory_gflops, d->clock_mhz);
    else
        printf("gpu peak     theoretical: n/a (compute capability %d.%d is not in ctrain's "
               "table)", d->cc_major, d->cc_minor);
    if (g->gemm_n > 0 && g->bf16_gemm_gflops > 0)
        printf("; cuBLAS measured fp32 %.0f GFLOP/s (TF32 off), bf16 %.0f GFLOP/s (n=%d)\n",
               g->fp32_gemm_gflops, g->bf16_gemm_gflops, g->gemm_n);
    else if (g->gemm_n > 0)
        printf("; cuBLAS measured fp32 %.0f GFLOP/s (TF32 off) (n=%d); bf16: none below "
               "compute capability 8.0 (train.precision=fp32 here)\n", g->fp32_gemm_gflops,
               g->gemm_n);
    else
        printf("\n");
}

int cli_fail(const char *cmd) {
    fprintf(stderr, "ctrain %s: error: %s\n", cmd, ct_last_error());
    if (ct_last_hint()[0]) fprintf(stderr, "  hint: %s\n", ct_last_hint());
    return 2;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "ctrain %s: error: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  hint: run `ctrain %s --help`\n", cmd);
    return 2;
}

/* A model directory key given a file inside it (model.init_from=DIR/model.safetensors,
 * DIR/config.json): the directory, said on stderr. */
static void cli_dir_of_file(const char *cmd, const char *key, char *path, size_t cap) {
    struct stat sb;
    if (!path[0] || stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return;
    char *slash = strrchr(path, '/');
    char dir[CT_PATH_MAX];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    fprintf(stderr, "ctrain %s: %s = %s is a file: using its directory %s\n", cmd, key, path, dir);
    snprintf(path, cap, "%s", dir);
}

void cli_config_arch(const char *cmd, ct_config *cfg) {
    bool given = cfg->model.arch[0] != '\0';
    ct_model_config pc;
    if (cfg->model.preset[0] && ct_model_config_preset(&pc, cfg->model.preset) == CT_OK) {
        const char *arch = ct_model_family_name(pc.family); /* gpt2, llama, qwen3, ... */
        if (given && strcmp(cfg->model.arch, arch) != 0 && !cfg->model.init_from[0])
            fprintf(stderr, "ctrain %s: warning: model.arch = %s is not used: model.preset = %s is "
                    "a %s model\n", cmd, cfg->model.arch, cfg->model.preset, arch);
        snprintf(cfg->model.arch, sizeof cfg->model.arch, "%s", arch);
    }
    ct_error_clear(); /* an unknown preset: the run names it */
    if (!cfg->model.arch[0]) snprintf(cfg->model.arch, sizeof cfg->model.arch, "gpt2");
}

int cli_load_config(const char *cmd, int argc, char **argv, ct_config *cfg, bool *print_only) {
    ct_config_default(cfg);
    cfg->model.arch[0] = '\0'; /* unset: the preset's (cli_config_arch) */
    /* CTRAIN_DEVICE: the default of run.device (the test suite runs on sim) */
    const char *dev = getenv("CTRAIN_DEVICE");
    if (dev && *dev) snprintf(cfg->run.device, sizeof cfg->run.device, "%s", dev);
    *print_only = false;
    const char *config_path = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--config")) {
            if (i + 1 >= argc) return cli_usage_error(cmd, "--config needs a file");
            config_path = argv[++i];
        } else if (!strcmp(argv[i], "--tokenizer")) {
            if (i + 1 >= argc) return cli_usage_error(cmd, "--tokenizer needs a directory or file");
            i++;
        } else if (!strcmp(argv[i], "--print-config")) {
            *print_only = true;
        }
    }
    if (config_path && ct_config_load_yaml(cfg, config_path)) return cli_fail(cmd);
    bool tuned; /* a tuned profile: its settings apply here, so overrides still win */
    if (config_path && ct_tune_profile_apply_here(cfg, config_path, &tuned))
        return cli_fail(cmd);
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--config")) {
            i++;
            continue;
        }
        if (!strcmp(argv[i], "--print-config") || !strcmp(argv[i], "--json")) continue;
        if (!strcmp(argv[i], "--tokenizer")) { /* data.tokenizer, in its place among the overrides */
            if (ct_config_set(cfg, "data.tokenizer", argv[++i], "--tokenizer")) return cli_fail(cmd);
            continue;
        }
        if (argv[i][0] == '-') return cli_usage_error(cmd, "unknown option '%s'", argv[i]);
        if (ct_config_apply_override(cfg, argv[i])) return cli_fail(cmd);
    }
    cli_config_arch(cmd, cfg);
    cli_dir_of_file(cmd, "model.init_from", cfg->model.init_from, sizeof cfg->model.init_from);
    cli_dir_of_file(cmd, "lora.init_from", cfg->lora.init_from, sizeof cfg->lora.init_from);
    return 0;
}

/* ------------------------------------------------------------ numbers */

int cli_parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cli_parse_double(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) return -1;
    *out = v;
    return 0;
}

/* ------------------------------------------------------------ end of sequence */

bool cli_eos_has(const cli_eos *e, int32_t id) {
    for (int k = 0; k < e->n; k++)
        if (e->ids[k] == id) return true;
    return false;
}

void cli_eos_add(cli_eos *e, int32_t id, int V) {
    if (id < 0 || id >= V || cli_eos_has(e, id) || e->n >= CLI_MAX_EOS) return;
    e->ids[e->n++] = id;
}

/* eos_token_id of dir/name (a number, a list or null) into e; whether the
 * file names any. A file that does not parse is warned about. */
static bool eos_from_file(const char *cmd, cli_eos *e, const char *dir, const char *name, int V) {
    char path[CT_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat sb;
    if (stat(path, &sb) != 0) return false;
    char *text = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    if (ct_file_read_all(path, &text, &len) == CT_OK) root = cJSON_ParseWithLength(text, len);
    ct_error_clear();
    free(text);
    if (!cJSON_IsObject(root)) {
        fprintf(stderr, "ctrain %s: warning: %s is not a JSON object: its eos_token_id is not "
                "used\n", cmd, path);
        cJSON_Delete(root);
        return false;
    }
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id"), *it;
    int before = e->n;
    if (cJSON_IsNumber(x)) cli_eos_add(e, (int32_t)x->valuedouble, V);
    if (cJSON_IsArray(x)) {
        cJSON_ArrayForEach(it, x) {
            if (cJSON_IsNumber(it)) cli_eos_add(e, (int32_t)it->valuedouble, V);
        }
    }
    cJSON_Delete(root);
    if (e->n == before) return false;
    snprintf(e->from, sizeof e->from, "%s's eos_token_id", path);
    return true;
}

void cli_eos_find(const char *cmd, cli_eos *e, const char *model_dir, const ct_tokenizer *tok, int V) {
    memset(e, 0, sizeof *e);
    if (model_dir && model_dir[0] &&
        (eos_from_file(cmd, e, model_dir, "generation_config.json", V) ||
         eos_from_file(cmd, e, model_dir, "config.json", V)))
        return;
    if (tok && ct_tokenizer_eot(tok) >= 0) {
        cli_eos_add(e, ct_tokenizer_eot(tok), V);
        if (e->n) snprintf(e->from, sizeof e->from, "the tokenizer's end-of-sequence token");
    }
}

/* ------------------------------------------------------------ sampling */

ct_status cli_sampler_init(cli_sampler *s, int V) {
    *s = (cli_sampler){.V = V};
    s->scores = malloc((size_t)V * sizeof *s->scores);
    s->probs = malloc((size_t)V * sizeof *s->probs);
    s->cand = malloc((size_t)V * sizeof *s->cand);
    s->seen = calloc((size_t)V, 1);
    s->uniq = malloc((size_t)V * sizeof *s->uniq);
    if (s->scores && s->probs && s->cand && s->seen && s->uniq) return CT_OK;
    cli_sampler_free(s);
    return CT_ERR(CT_ERR_OOM, "out of memory for the sampler (vocab %d)", V);
}

void cli_sampler_free(cli_sampler *s) {
    free(s->scores);
    free(s->probs);
    free(s->cand);
    free(s->seen);
    free(s->uniq);
    *s = (cli_sampler){0};
}

void cli_sampler_reset(cli_sampler *s) {
    memset(s->seen, 0, (size_t)s->V);
    s->n_uniq = 0;
}

void cli_sampler_see(cli_sampler *s, int32_t id) {
    if (id < 0 || id >= s->V || s->seen[id]) return;
    s->seen[id] = 1;
    s->uniq[s->n_uniq++] = id;
}

static int float_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x > y ? -1 : x < y;
}

/* top-p order: larger score first, then the smaller id */
static int cand_cmp(const void *a, const void *b) {
    const cli_cand *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

int cli_sample_token(cli_sampler *s, const float *logits, const cli_sample_params *p, ct_rng *rng) {
    int V = s->V;
    float *sc = s->scores;
    memcpy(sc, logits, (size_t)V * sizeof *sc);
    if (p->penalty != 1.0) {
        for (int j = 0; j < s->n_uniq; j++) {
            int32_t id = s->uniq[j];
            sc[id] = sc[id] > 0 ? (float)(sc[id] / p->penalty) : (float)(sc[id] * p->penalty);
        }
    }
    int best = 0;
    for (int i = 1; i < V; i++)
        if (sc[i] > sc[best]) best = i;
    if (p->temperature <= 0) return best;
    float kth = -INFINITY; /* scores below the k-th largest are dropped */
    if (p->top_k > 0 && p->top_k < V) {
        float *tmp = s->probs;
        memcpy(tmp, sc, (size_t)V * sizeof *tmp);
        if (p->top_k <= 16) {
            /* partial selection: k passes of max-extraction */
            for (int k = 0; k < p->top_k; k++) {
                int arg = 0;
                for (int i = 1; i < V; i++)
                    if (tmp[i] > tmp[arg]) arg = i;
                kth = tmp[arg];
                tmp[arg] = -INFINITY;
            }
        } else {
            qsort(tmp, (size_t)V, sizeof *tmp, float_desc);
            kth = tmp[p->top_k - 1];
        }
    }
    int n = 0;
    double sum = 0;
    for (int i = 0; i < V; i++) {
        double q = sc[i] >= kth ? exp((sc[i] - sc[best]) / p->temperature) : 0.0;
        s->probs[i] = (float)q;
        if (sc[i] >= kth) s->cand[n++] = (cli_cand){sc[i], i};
        sum += q;
    }
    if (p->top_p < 1.0) {
        qsort(s->cand, (size_t)n, sizeof *s->cand, cand_cmp);
        /* HF drops a token when the mass before it (larger scores) is >= P */
        double before = 0;
        int keep = 0;
        while (keep < n && (keep == 0 || before < p->top_p * sum))
            before += s->probs[s->cand[keep++].id];
        n = keep;
        sum = 0;
        for (int j = 0; j < n; j++) sum += s->probs[s->cand[j].id];
    }
    double r = ct_rng_double(rng) * sum, acc = 0;
    for (int j = 0; j < n; j++) {
        acc += s->probs[s->cand[j].id];
        if (r < acc) return s->cand[j].id;
    }
    return p->top_p < 1.0 && n ? s->cand[n - 1].id : best;
}

/* ------------------------------------------------------------ output */

void cli_put_json_string(const char *t, size_t n) {
    putchar('"');
    size_t i = 0;
    while (i < n) {
        size_t ok = ct_utf8_valid_prefix(t + i, n - i);
        for (size_t j = i; j < i + ok; j++) {
            unsigned char c = (unsigned char)t[j];
            if (c == '"' || c == '\\') printf("\\%c", c);
            else if (c == '\n') fputs("\\n", stdout);
            else if (c == '\r') fputs("\\r", stdout);
            else if (c == '\t') fputs("\\t", stdout);
            else if (c < 0x20 || c == 0x7f) printf("\\u%04x", c);
            else putchar(c);
        }
        i += ok;
        if (i < n) {
            fputs("\\ufffd", stdout);
            i++;
        }
    }
    putchar('"');
}

void cli_put_text(const char *t, size_t n, bool escape) {
    if (!escape) {
        fwrite(t, 1, n, stdout);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (t[i] == '\\') fputs("\\\\", stdout);
        else if (t[i] == '\n') fputs("\\n", stdout);
        else if (t[i] == '\r') fputs("\\r", stdout);
        else putchar(t[i]);
    }
}
