/*
 * `ctrain eval --model DIR --data SPEC`: the mean loss and perplexity of a
 * model directory, checkpoint, run directory or LoRA adapter (on its base,
 * unmerged; --base DIR names the base) on token shards, over every
 * full window of the data once (or --batches N), in sequential order. Prints
 * a summary (or one JSON object with --json) on stdout; errors exit 2.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "ctrain/data.h"
#include "train/eval.h"

static int eval_parse_long(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

typedef struct eval_tty {
    double last; /* time of the last redraw */
    bool drawn;  /* a line is on screen, not yet ended */
} eval_tty;

/* On a terminal: a running "eval k/N | loss x" line, redrawn at most 10 times
 * a second. */
static void eval_progress(int64_t done, int64_t total, double loss, void *user) {
    eval_tty *t = user;
    double now = ct_time_s();
    if (done < total && now - t->last < 0.1) return;
    t->last = now;
    fprintf(stderr, "\r\033[Keval %lld/%lld | loss %.4f", (long long)done, (long long)total, loss);
    fflush(stderr);
    t->drawn = true;
}

static void print_json_number(const char *key, double v, bool last) {
    if (isfinite(v))
        printf("\"%s\": %.17g%s", key, v, last ? "" : ", ");
    else
        printf("\"%s\": null%s", key, last ? "" : ", ");
}

/* The model's tokenizer (files beside its weights) against the one the
 * shards were prepared with (their manifest.json); either may be unknown.
 * 0, or 2 after printing the error. */
static int eval_check_tokenizer(const char *cmd, const char *model_dir, const char *data) {
    ct_tok_info own, shards;
    if (ct_tok_info_of_dir(&own, model_dir)) {
        fprintf(stderr, "ctrain %s: warning: the tokenizer files in %s do not load (%s): the data's "
                "tokenizer is not checked against them\n", cmd, model_dir, ct_last_error());
        ct_error_clear();
        return 0;
    }
    if (!own.identity[0]) return 0;
    if (ct_tok_info_of_shards(&shards, data)) {
        ct_error_prefix("--data");
        return cli_fail(cmd);
    }
    char a[CT_TOK_WHERE_MAX + 16], b[CT_TOK_WHERE_MAX + 16];
    snprintf(a, sizeof a, "--model %s", model_dir);
    snprintf(b, sizeof b, "--data %s", data);
    if (!ct_tok_info_match(&own, a, &shards, b)) return 0;
    ct_error_hint("score the model on text prepared with its own tokenizer (ctrain prepare "
                  "--tokenizer %s --out DIR ...)", model_dir);
    return cli_fail(cmd);
}

/* The sequence length the run that wrote model_dir trained at: train.seq_len
 * of its config.yaml (in model_dir, or in the run directory of a checkpoint
 * model_dir/checkpoints/step_N that resolved names). 0 when there is none;
 * where it came from goes to from. */
static int64_t eval_run_seq_len(const char *model_dir, const char *resolved, char *from,
                                size_t cap) {
    char cands[2][2 * CT_PATH_MAX + 160];
    snprintf(cands[0], sizeof cands[0], "%s/config.yaml", model_dir);
    cands[1][0] = '\0';
    const char *ck = strstr(resolved, "/checkpoints/step_");
    if (ck && strchr(ck + 18, '/') == NULL)
        snprintf(cands[1], sizeof cands[1], "%.*s/config.yaml", (int)(ck - resolved), resolved);
    for (int i = 0; i < 2; i++) {
        if (!cands[i][0] || access(cands[i], R_OK) != 0) continue;
        ct_config *c = malloc(sizeof *c);
        if (!c) return 0;
        ct_config_default(c);
        int64_t T = ct_config_load_yaml(c, cands[i]) ? 0 : c->train.seq_len;
        free(c);
        ct_error_clear();
        if (T > 0) {
            size_t n = strlen(cands[i]);
            if (n >= cap) n = cap - 1;
            memcpy(from, cands[i], n);
            from[n] = '\0';
            return T;
        }
    }
    return 0;
}

int cmd_eval(int argc, char **argv) {
    const char *cmd = "eval", *model_dir = NULL, *data = NULL, *split = "val", *base = NULL;
    long long batches = 0, B = 1, T = 0, threads = 0;
    bool json = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: ctrain eval --model DIR --data SPEC [--batches N] [--batch-size B]\n"
                   "                   [--seq-len T] [--split NAME] [--threads N] [--json]\n"
                   "                   [--base DIR]\n"
                   "Scores DIR (a Hugging Face model directory, a ctrain checkpoint\n"
                   "run.dir/checkpoints/step_XXXXXXXX, a run directory, or a LoRA run or PEFT\n"
                   "adapter directory, applied unmerged to its base) on SPEC (a shard\n"
                   "file, glob or directory; in a directory, NAME_*.bin shards are preferred,\n"
                   "NAME 'val' by default; or a prepared directory's https://, http:// or\n"
                   "s3:// URL, read through the shard cache at its default settings) and\n"
                   "prints the mean loss, the perplexity exp(loss) and the tokens scored.\n"
                   "  --batches N     batches to score (default: every full window once)\n"
                   "  --batch-size B  rows per batch (default 1)\n"
                   "  --seq-len T     tokens per row (default: a run's train.seq_len, else the\n"
                   "                  model's context)\n"
                   "  --threads N     threads (default: all cores)\n"
                   "  --base DIR      an adapter's base model (default: the adapter's\n"
                   "                  base_model_name_or_path, or its run's model.init_from)\n"
                   "  --json          print {\"loss\", \"perplexity\", \"tokens\", \"batches\"}\n");
            return 0;
        }
        if (!strcmp(a, "--json")) {
            json = true;
            continue;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return cli_usage_error(cmd, "option '%s' needs a value", a);
        if (!strcmp(a, "--model")) model_dir = v;
        else if (!strcmp(a, "--data")) data = v;
        else if (!strcmp(a, "--base")) base = v;
        else if (!strcmp(a, "--split")) split = v;
        else if (!strcmp(a, "--batches")) {
            if (eval_parse_long(v, 1, (long long)1 << 50, &batches))
                return cli_usage_error(cmd, "--batches '%s': expected a positive integer", v);
        } else if (!strcmp(a, "--batch-size")) {
            if (eval_parse_long(v, 1, 1 << 20, &B))
                return cli_usage_error(cmd, "--batch-size '%s': expected a positive integer", v);
        } else if (!strcmp(a, "--seq-len")) {
            if (eval_parse_long(v, 1, 1 << 20, &T))
                return cli_usage_error(cmd, "--seq-len '%s': expected a positive integer", v);
        } else if (!strcmp(a, "--threads")) {
            if (eval_parse_long(v, 0, 4096, &threads))
                return cli_usage_error(cmd, "--threads '%s': expected an integer >= 0", v);
        } else
            return cli_usage_error(cmd, "unknown option '%s'", a);
        i++;
    }
    if (!model_dir) return cli_usage_error(cmd, "--model DIR is required");
    if (!data) return cli_usage_error(cmd, "--data SPEC is required");

    ct_ctx *ctx = NULL;
    ct_model *m = NULL;
    int rc = 2;
    ct_ctx_params cp = ct_ctx_params_default();
    cp.n_threads = (int)threads;
    if (cli_device_from_env(&cp)) return cli_fail("eval");
    /* a LoRA adapter is scored unmerged, as the trainer's validation and PEFT run it */
    ct_eval_source src;
    ct_eval_load_opts lo = {.base = base, .merge = false};
    if (ct_ctx_init(&ctx, &cp) || ct_eval_load(&m, ctx, model_dir, &lo, &src)) {
        rc = cli_fail(cmd);
        goto done;
    }
    const char *resolved = src.dir;
    int64_t step = src.step;
    if (src.adapter)
        fprintf(stderr, "ctrain %s: LoRA adapter %s (r=%d, alpha=%g), unmerged, on %s%s\n",
                cmd, src.dir, src.lora.r, (double)src.lora.alpha,
                src.base[0] ? "the base " : "a base rebuilt from ",
                src.base[0] ? src.base : src.base_from);
    if ((rc = eval_check_tokenizer(cmd, src.tok_dir, data))) goto done;
    rc = 2;
    const ct_model_config *mc = ct_model_get_config(m);
    if (T == 0) { /* a run's own length, not positions it never trained */
        char from[2 * CT_PATH_MAX + 160];
        int64_t run_T = eval_run_seq_len(model_dir, resolved, from, sizeof from);
        if (run_T > 0 && run_T <= mc->n_ctx) {
            T = run_T;
            fprintf(stderr, "ctrain %s: --seq-len %lld, the run's train.seq_len (%s)\n", cmd, T,
                    from);
        }
    }
    if (T > mc->n_ctx) {
        rc = cli_usage_error(cmd, "--seq-len %lld exceeds the model's context (n_ctx = %d in "
                             "%s/config.json)", T, mc->n_ctx, resolved);
        goto done;
    }
    ct_eval_opts o = ct_eval_opts_default();
    o.data = data;
    o.split = split;
    o.B = (int)B;
    o.T = T ? (int)T : mc->n_ctx;
    o.batches = batches;
    eval_tty tty = {0};
    if (isatty(STDERR_FILENO)) {
        o.progress = eval_progress;
        o.user = &tty;
    }
    ct_eval_result r;
    ct_status st = ct_eval_run(ctx, m, &o, &r);
    if (tty.drawn) fprintf(stderr, "\r\033[K");
    if (st) {
        ct_error_prefix("--data");
        rc = cli_fail(cmd);
        goto done;
    }
    if (json) {
        printf("{");
        print_json_number("loss", r.loss, false);
        print_json_number("perplexity", r.perplexity, false);
        printf("\"tokens\": %lld, \"batches\": %lld}\n", (long long)r.tokens,
               (long long)r.batches);
    } else {
        printf("model       %s", resolved);
        if (step >= 0) printf(" (checkpoint of step %lld)", (long long)step);
        if (src.adapter)
            printf("\nadapter     LoRA r=%d alpha=%g on %s%s", src.lora.r, (double)src.lora.alpha,
                   src.base[0] ? "the base " : "a base rebuilt from ",
                   src.base[0] ? src.base : src.base_from);
        printf("\ndata        %s (%d shard%s, %lld tokens)\n", data, r.shards,
               r.shards == 1 ? "" : "s", (long long)r.data_tokens);
        printf("scored      %lld tokens in %lld batches of B=%d x T=%d (%.2f s, %.0f tok/s)\n",
               (long long)r.tokens, (long long)r.batches, o.B, o.T, r.seconds,
               r.seconds > 0 ? (double)r.tokens / r.seconds : 0.0);
        printf("loss        %.6f\n", r.loss);
        printf("perplexity  %.4f\n", r.perplexity);
    }
    rc = 0;
done:
    ct_model_free(m);
    ct_ctx_free(ctx);
    return rc;
}
