/*
 * `ctrain merge --base DIR --adapter DIR --out DIR [--bf16]`: folds a PEFT
 * LoRA adapter into its base model (W += lora_alpha/r * B A, per adapted
 * module; GPT-2's Conv1D weights are transposed on the way out as HF stores
 * them) and writes a Hugging Face model directory: config.json,
 * model.safetensors (F32, or BF16 with --bf16) and the base's tokenizer and
 * generation files copied as they are. Errors exit 2 and leave --out as it was
 * (every file is written atomically; a half-written directory can only miss
 * files, never hold a torn one).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "ctrain/model.h"
#include "io/fileio.h"

/* Files of an HF directory besides the weights that a merged model keeps. */
static const char *const merge_side_files[] = {
    "tokenizer.json",   "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
    "vocab.json",       "merges.txt",            "generation_config.json",  "added_tokens.json",
};

static ct_status merge_copy_file(const char *from_dir, const char *to_dir, const char *name) {
    char src[CT_PATH_MAX + 64], dst[CT_PATH_MAX + 64];
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
            printf("usage: ctrain merge --base DIR --adapter DIR --out DIR [--bf16]\n"
                   "Folds a PEFT LoRA adapter (adapter_config.json, adapter_model.safetensors)\n"
                   "into the Hugging Face model directory it was trained on and writes the\n"
                   "merged model to --out (config.json, model.safetensors, tokenizer files).\n"
                   "  --bf16   store the merged weights as BF16 (rounded to nearest even)\n");
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
    if (!base || !adapter || !out)
        return cli_usage_error(cmd, "--base, --adapter and --out are all required");
    if (merge_same_dir(base, out))
        return cli_usage_error(cmd, "--out %s is the base directory: write the merged model "
                               "elsewhere", out);

    ct_ctx *ctx = NULL;
    ct_model *m = NULL;
    int rc = 2;
    ct_lora_opts lo;
    if (ct_ctx_init(&ctx, NULL) || ct_model_load_hf(&m, ctx, base)) goto fail;
    if (ct_lora_config_load_peft(ct_model_get_config(m), adapter, &lo)) {
        ct_error_prefix("--adapter %s", adapter);
        goto fail;
    }
    lo.dropout = 0; /* inference: no dropout in the merge */
    if (ct_model_lora_attach(m, &lo)) goto fail;
    if (ct_model_lora_load_peft(m, adapter)) {
        ct_error_hint("the adapter must have been trained on a model of --base's shape with "
                      "the targets its adapter_config.json names");
        goto fail;
    }
    if (ct_model_lora_merge(m) || ct_model_export_hf(m, out, bf16)) goto fail;
    for (size_t i = 0; i < sizeof merge_side_files / sizeof *merge_side_files; i++)
        if (merge_copy_file(base, out, merge_side_files[i])) goto fail;
    fprintf(stderr, "ctrain merge: %s + %s (r=%d, alpha=%g) -> %s (config.json, "
            "model.safetensors%s)\n", base, adapter, lo.r, (double)lo.alpha, out,
            bf16 ? ", BF16" : "");
    rc = 0;
    goto done;
fail:
    rc = cli_fail(cmd);
done:
    ct_model_free(m);
    ct_ctx_free(ctx);
    return rc;
}
