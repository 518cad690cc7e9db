/*
 * `ctrain merge --adapter DIR --out DIR [--base DIR] [--bf16]`: folds a PEFT
 * LoRA adapter into its base model (W += lora_alpha/r * B A, per adapted
 * module; GPT-2's Conv1D weights are transposed on the way out as HF stores
 * them) and writes a Hugging Face model directory: config.json,
 * model.safetensors (F32, or BF16 with --bf16), the tokenizer files (the
 * adapter's or run's own, else the base's) and the base's generation files,
 * copied as they are. The base is --base, or the one the adapter names (see
 * ct_eval_load: base_model_name_or_path, a run's model.init_from, or a run's
 * freshly initialised weights). Errors exit 2 and leave --out as it was
 * (every file is written atomically; a half-written directory can only miss
 * files, never hold a torn one).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "ctrain/data.h"
#include "ctrain/model.h"
#include "io/fileio.h"
#include "train/eval.h"

/* Files of the base's HF directory besides the weights and the tokenizer
 * files ctrain reads (ct_tokenizer_copy_files) that a merged model keeps. */
static const char *const merge_side_files[] = {
    "tokenizer.model", "generation_config.json", "added_tokens.json",
};

static ct_status merge_copy_file(const char *from_dir, const char *to_dir, const char *name) {
    char src[CT_EVAL_PATH_MAX + 64], dst[CT_PATH_MAX + 64];
    snprintf(src, sizeof src, "%s/%s", from_dir, name);
    snprintf(dst, sizeof dst, "%s/%s", to_dir, name);
    struct stat sb;
    if (stat(src, &sb) != 0) return CT_OK; /* not every base has every file */
    char *data = NULL;
    size_t len = 0;
    ct_status st = ct_file_read_all(src, &data, &len);
    if (!st) st = ct_file_write_atomic(dst, data, len);
    free(data);
    return st;
}

/* true when a and b name the same existing directory */
static bool merge_same_dir(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

int cmd_merge(int argc, char **argv) {
    const char *cmd = "merge", *base = NULL, *adapter = NULL, *out = NULL;
    bool bf16 = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: ctrain merge --adapter DIR --out DIR [--base DIR] [--bf16]\n"
                   "Folds a PEFT LoRA adapter (adapter_config.json, adapter_model.safetensors;\n"
                   "a LoRA run directory or checkpoint) into the Hugging Face model directory\n"
                   "it was trained on and writes the merged model to --out (config.json,\n"
                   "model.safetensors, the tokenizer files of the adapter or else the base).\n"
                   "  --base DIR  the base model (default: the adapter's base_model_name_or_path,\n"
                   "              or its run's model.init_from)\n"
                   "  --bf16      store the merged weights as BF16 (rounded to nearest even)\n");
            return 0;
        }
        if (!strcmp(a, "--bf16")) {
            bf16 = true;
            continue;
        }
        const char **slot = !strcmp(a, "--base") ? &base : !strcmp(a, "--adapter") ? &adapter
                          : !strcmp(a, "--out") ? &out : NULL;
        if (!slot) return cli_usage_error(cmd, "unknown argument '%s'", a);
        if (i + 1 >= argc) return cli_usage_error(cmd, "%s needs a directory", a);
        *slot = argv[++i];
    }
    if (!adapter || !out) return cli_usage_error(cmd, "--adapter and --out are both required");
    if (base && merge_same_dir(base, out))
        return cli_usage_error(cmd, "--out %s is the base directory: write the merged model "
                               "elsewhere", out);

    ct_ctx *ctx = NULL;
    ct_model *m = NULL;
    int rc = 2;
    ct_eval_source *src = calloc(1, sizeof *src);
    if (!src) {
        fprintf(stderr, "ctrain merge: error: out of memory\n");
        return 2;
    }
    ct_eval_load_opts lo = {.base = base, .merge = true};
    if (ct_ctx_init(&ctx, NULL)) goto fail;
    if (ct_eval_load(&m, ctx, adapter, &lo, src)) {
        ct_error_prefix("--adapter %s", adapter);
        goto fail;
    }
    if (!src->adapter) {
        rc = cli_usage_error(cmd, "--adapter %s holds a full model (config.json), not a PEFT "
                             "adapter (adapter_config.json + adapter_model.safetensors)", adapter);
        goto done;
    }
    if (merge_same_dir(src->base, out) || merge_same_dir(src->dir, out)) {
        rc = cli_usage_error(cmd, "--out %s is the %s directory: write the merged model "
                             "elsewhere", out, merge_same_dir(src->base, out) ? "base" : "adapter");
        goto done;
    }
    if (ct_model_export_hf(m, out, bf16)) goto fail;
    const char *tok_names[CT_TOK_FILES_MAX];
    int n_tok = 0;
    if (ct_tokenizer_copy_files(src->tok_dir, out, tok_names, &n_tok)) goto fail;
    if (src->base[0])
        for (size_t i = 0; i < sizeof merge_side_files / sizeof *merge_side_files; i++)
            if (merge_copy_file(src->base, out, merge_side_files[i])) goto fail;
    char toks[256] = "";
    for (int i = 0; i < n_tok; i++)
        snprintf(toks + strlen(toks), sizeof toks - strlen(toks), ", %s", tok_names[i]);
    fprintf(stderr, "ctrain merge: %s + %s (r=%d, alpha=%g) -> %s (config.json, "
            "model.safetensors%s%s%s%s)\n", src->base[0] ? src->base : src->base_from, src->dir,
            src->lora.r, (double)src->lora.alpha, out, bf16 ? ", BF16" : "", toks,
            n_tok ? " from " : "", n_tok ? src->tok_dir : "");
    rc = 0;
    goto done;
fail:
    rc = cli_fail(cmd);
done:
    ct_model_free(m);
    ct_ctx_free(ctx);
    free(src);
    return rc;
}
