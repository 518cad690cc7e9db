/*
 * `ctrain sample --model DIR`: generate tokens with temperature and top-k
 * sampling, one KV-cached decode step per token. Prints the generated ids,
 * space-separated, on stdout (the prompt is not repeated); with
 * --tokenizer DIR the prompt is text and the output is text.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ctrain/data.h"
#include "ctrain/model.h"

static int parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) return -1;
    *out = v;
    return 0;
}

/* Draw from softmax(logits / temperature) restricted to the top_k largest
 * (top_k 0: all); temperature 0 is greedy. probs is scratch (V). */
static int sample_token(const float *logits, float *probs, int V, double temperature, int top_k,
                        ct_rng *rng) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature <= 0) return best;
    float kth = -INFINITY; /* logits below the k-th largest are dropped */
    if (top_k > 0 && top_k < V) {
        memcpy(probs, logits, (size_t)V * sizeof *probs);
        /* partial selection: k passes of max-extraction are fine for sampling */
        for (int k = 0; k < top_k; k++) {
            int arg = 0;
            for (int i = 1; i < V; i++)
                if (probs[i] > probs[arg]) arg = i;
            kth = probs[arg];
            probs[arg] = -INFINITY;
        }
    }
    double sum = 0;
    for (int i = 0; i < V; i++) {
        double p = logits[i] >= kth ? exp((logits[i] - logits[best]) / temperature) : 0.0;
        probs[i] = (float)p;
        sum += p;
    }
    double r = ct_rng_double(rng) * sum, acc = 0;
    for (int i = 0; i < V; i++) {
        acc += probs[i];
        if (r < acc) return i;
    }
    return best;
}

int cmd_sample(int argc, char **argv) {
    const char *cmd = "sample", *model_dir = NULL, *prompt = NULL, *tok_dir = NULL;
    long n_tokens = 64, top_k = 0, seed = 1337, threads = 0;
    double temperature = 1.0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: ctrain sample --model DIR [--prompt \"ID ID ...\"] [--tokens N]\n"
                   "                     [--temperature X] [--top-k K] [--seed S] [--threads N]\n"
                   "                     [--tokenizer DIR]\n"
                   "  with --tokenizer, --prompt is text and the output is text\n");
            return 0;
        }
        if (!v) return cli_usage_error(cmd, "option '%s' needs a value", a);
        if (!strcmp(a, "--model")) model_dir = v;
        else if (!strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "--tokenizer")) tok_dir = v;
        else if (!strcmp(a, "--tokens")) {
            if (parse_long(v, 1, 1 << 20, &n_tokens))
                return cli_usage_error(cmd, "--tokens '%s': expected a positive integer", v);
        } else if (!strcmp(a, "--top-k")) {
            if (parse_long(v, 0, 1 << 24, &top_k))
                return cli_usage_error(cmd, "--top-k '%s': expected an integer >= 0", v);
        } else if (!strcmp(a, "--seed")) {
            if (parse_long(v, 0, 0x7fffffff, &seed))
                return cli_usage_error(cmd, "--seed '%s': expected an integer >= 0", v);
        } else if (!strcmp(a, "--threads")) {
            if (parse_long(v, 0, 4096, &threads))
                return cli_usage_error(cmd, "--threads '%s': expected an integer >= 0", v);
        } else if (!strcmp(a, "--temperature")) {
            if (parse_double(v, 0, 100, &temperature))
                return cli_usage_error(cmd, "--temperature '%s': expected a number in 0..100", v);
        } else
            return cli_usage_error(cmd, "unknown option '%s'", a);
        i++;
    }
    if (!model_dir) return cli_usage_error(cmd, "--model DIR is required");

    ct_ctx *ctx = NULL;
    ct_model *m = NULL;
    ct_tokenizer *tok = NULL;
    ct_tokens ptoks = {0};
    int32_t *ids = NULL;
    float *logits = NULL, *probs = NULL;
    int rc = 2;
    ct_ctx_params cp = ct_ctx_params_default();
    cp.n_threads = (int)threads;
    if (cli_device_from_env(&cp)) return cli_fail("sample");
    if (ct_ctx_init(&ctx, &cp) || ct_model_load_hf(&m, ctx, model_dir)) {
        rc = cli_fail(cmd);
        goto done;
    }
    const ct_model_config *mc = ct_model_get_config(m);
    int V = mc->vocab_size;
    if (tok_dir) {
        if (ct_tokenizer_load(&tok, tok_dir)) {
            rc = cli_fail(cmd);
            goto done;
        }
        if (ct_tokenizer_vocab_size(tok) > V) {
            fprintf(stderr, "ctrain sample: error: the tokenizer %s has %d tokens, more than the "
                    "model's vocab_size %d\n", tok_dir, ct_tokenizer_vocab_size(tok), V);
            goto done;
        }
    }
    /* prompt ids (the default is set below) */
    ids = calloc((size_t)mc->n_ctx, sizeof *ids);
    logits = calloc((size_t)V, sizeof *logits);
    probs = calloc((size_t)V, sizeof *probs);
    if (!ids || !logits || !probs) {
        fprintf(stderr, "ctrain sample: error: out of memory\n");
        goto done;
    }
    int n_prompt = 0;
    if (prompt && tok) {
        if (ct_tokenizer_encode(tok, NULL, prompt, strlen(prompt), 0, &ptoks)) {
            rc = cli_fail(cmd);
            goto done;
        }
        /* LLaMA documents start with BOS in training, as Hugging Face's tokenizer adds it */
        bool bos = ct_tokenizer_kind(tok) == CT_TOK_KIND_SPM_BPE && ct_tokenizer_bos(tok) >= 0;
        if (bos) ids[n_prompt++] = ct_tokenizer_bos(tok);
        if (ptoks.n + (size_t)n_prompt > (size_t)mc->n_ctx) {
            rc = cli_usage_error(cmd, "--prompt is %zu tokens, longer than the context (%d)",
                                 ptoks.n, mc->n_ctx);
            goto done;
        }
        for (size_t i = 0; i < ptoks.n; i++) ids[n_prompt++] = ptoks.ids[i];
    } else if (prompt) {
        const char *p = prompt;
        char *end;
        for (;;) {
            while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') p++;
            if (!*p) break;
            errno = 0;
            long t = strtol(p, &end, 10);
            if (end == p || errno || t < 0 || t >= V) {
                rc = cli_usage_error(cmd, "--prompt: '%.*s' is not a token id in 0..%d",
                                     (int)strcspn(p, " ,\t\n"), p, V - 1);
                goto done;
            }
            if (n_prompt >= mc->n_ctx) {
                rc = cli_usage_error(cmd, "--prompt is longer than the context (%d)", mc->n_ctx);
                goto done;
            }
            ids[n_prompt++] = (int32_t)t;
            p = end;
        }
    }
    /* no prompt: the token that starts every training document (GPT-2's end-of-text,
     * LLaMA's BOS), or the last id of the vocabulary without a tokenizer */
    if (n_prompt == 0) ids[n_prompt++] = tok && ct_tokenizer_bos(tok) >= 0 ? ct_tokenizer_bos(tok)
                                                                         : V - 1;
    long total = n_prompt + n_tokens;
    if (total > mc->n_ctx) total = mc->n_ctx;
    if (ct_model_decode_reserve(m, (int)total)) {
        rc = cli_fail(cmd);
        goto done;
    }
    ct_rng rng;
    ct_rng_init(&rng, (uint64_t)seed);
    for (int pos = 0; pos + 1 < total; pos++) {
        if (ct_model_decode_step(m, ids[pos], logits)) {
            rc = cli_fail(cmd);
            goto done;
        }
        if (pos + 1 < n_prompt) continue; /* still reading the prompt */
        ids[pos + 1] = sample_token(logits, probs, V, temperature, (int)top_k, &rng);
        if (tok) {
            /* a token may end inside a UTF-8 character: bytes go out as they are */
            size_t len;
            const char *bytes = ct_tokenizer_token_bytes(tok, ids[pos + 1], &len);
            if (bytes) fwrite(bytes, 1, len, stdout);
        } else {
            printf("%s%d", pos + 1 > n_prompt ? " " : "", ids[pos + 1]);
        }
        fflush(stdout);
    }
    printf("\n");
    rc = 0;
done:
    ct_tokens_free(&ptoks);
    ct_tokenizer_free(tok);
    free(ids);
    free(logits);
    free(probs);
    ct_model_free(m);
    ct_ctx_free(ctx);
    return rc;
}
