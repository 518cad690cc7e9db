/*
 * `ctrain sample --model DIR`: generate tokens one KV-cached decode step at a
 * time, with Hugging Face's sampling semantics: repetition penalty on the raw
 * logits, then temperature, top-k and top-p (nucleus); temperature 0 is
 * greedy. Prints the generated ids, space-separated, on stdout (the prompt is
 * not repeated); with --tokenizer DIR the prompt is text and the output is
 * text (refused when the model directory carries another tokenizer beside its
 * weights). Generation ends at the model's end-of-sequence ids (as
 * transformers' generate: generation_config.json, config.json, the
 * tokenizer's EOS), a --stop or --tokens. Several prompts (--prompt, or
 * --prompts FILE of lines or JSONL strings) give one line each (--json: one
 * object each).
 * A LoRA run or PEFT adapter is merged into its base in memory first.
 * When prompt + generation outgrow the context, the window slides (see
 * sample_generate). Leaves out: beam search, batched prompts (each prompt is
 * decoded on its own), and chat templates.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "cli.h"
#include "core/strbuf.h"
#include "ctrain/data.h"
#include "ctrain/model.h"
#include "io/fileio.h"
#include "train/eval.h"

#define SAMPLE_MAX_STOPS 64
#define SAMPLE_MAX_PROMPTS 4096 /* --prompt given on the command line */

/* ------------------------------------------------------------ one prompt */

typedef struct stop_seq {
    const char *text; /* as given */
    size_t len;       /* text mode: bytes of text */
    int32_t *ids;     /* ids mode: the id sequence (owned) */
    int n;
} stop_seq;

typedef struct sample_run {
    ct_model *m;
    const ct_tokenizer *tok; /* NULL: ids */
    cli_sampler s;
    cli_sample_params sp;
    long n_tokens;
    uint64_t seed;
    int n_ctx, cap;   /* the model's context; the KV cache reserved */
    float *logits;    /* (V) */
    stop_seq *stops;
    int n_stops;
    size_t hold;      /* bytes (text) or ids held back while streaming: a stop may begin there */
    cli_eos eos;      /* ids that end the generation (none with --ignore-eos) */
    bool json, escape;
} sample_run;

typedef struct gen {
    int32_t *hist;   /* prompt then generated ids */
    size_t n_hist, n_prompt;
    char *text;      /* text mode: the generation's bytes */
    size_t len, cap_text;
    size_t out;      /* what the output holds: bytes (text) or generated ids, a stop excluded */
    size_t printed;  /* of out, already on stdout */
    long n_gen;
    int slides;
    bool stopped;
    bool eos;        /* it ended at an end-of-sequence id (stopped too; not in the output) */
    bool keep_bos;   /* the window keeps hist[0] (a BOS the prompt was given) */
} gen;

static ct_status gen_feed(sample_run *r, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++) {
        ct_status st = ct_model_decode_step(r->m, ids[i], r->logits);
        if (st) return st;
    }
    return CT_OK;
}

/* Append token id's output; sets g->stopped and g->out. */
static ct_status gen_append(sample_run *r, gen *g, int32_t id) {
    if (r->tok) {
        size_t len = 0;
        const char *b = ct_tokenizer_token_bytes(r->tok, id, &len);
        if (!b) len = 0;
        if (g->len + len + 1 > g->cap_text) {
            size_t cap = (g->cap_text ? 2 * g->cap_text : 256) + len;
            char *t = realloc(g->text, cap);
            if (!t) return CT_ERR(CT_ERR_OOM, "out of memory for the generated text");
            g->text = t;
            g->cap_text = cap;
        }
        size_t old = g->len;
        if (len) memcpy(g->text + g->len, b, len);
        g->len += len;
        g->out = g->len;
        /* the earliest stop string now in the text; earlier text held none */
        for (int k = 0; k < r->n_stops; k++) {
            const stop_seq *st = &r->stops[k];
            if (st->len > g->len) continue;
            size_t from = old + 1 >= st->len ? old + 1 - st->len : 0;
            for (size_t at = from; at + st->len <= g->len; at++) {
                if (memcmp(g->text + at, st->text, st->len) == 0) {
                    if (!g->stopped || at < g->out) g->out = at;
                    g->stopped = true;
                    break;
                }
            }
        }
    } else {
        const int32_t *gen_ids = g->hist + g->n_prompt;
        size_t n = (size_t)g->n_gen;
        g->out = n;
        for (int k = 0; k < r->n_stops; k++) {
            const stop_seq *st = &r->stops[k];
            if ((size_t)st->n > n) continue;
            if (memcmp(gen_ids + n - st->n, st->ids, (size_t)st->n * sizeof *st->ids) == 0) {
                if (!g->stopped || n - st->n < g->out) g->out = n - st->n;
                g->stopped = true;
            }
        }
    }
    return CT_OK;
}

/* Print what is safe to print of g's output: all of it when done, else all
 * but what a stop could still begin with. */
static void gen_print(sample_run *r, gen *g, bool done) {
    if (r->json) return;
    size_t upto = g->out;
    if (!done && !g->stopped) upto = upto > r->hold ? upto - r->hold : 0;
    if (upto <= g->printed) return;
    if (r->tok) {
        cli_put_text(g->text + g->printed, upto - g->printed, r->escape);
    } else {
        for (size_t i = g->printed; i < upto; i++)
            printf("%s%d", i ? " " : "", g->hist[g->n_prompt + i]);
    }
    g->printed = upto;
    fflush(stdout);
}

/* Generate r->n_tokens tokens after g's prompt (g->hist[0..n_prompt)),
 * stopping early at a stop. The window: the KV cache holds at most n_ctx
 * positions; when it is full and another token must be read, the cache is
 * emptied and the last n_ctx/2 tokens (prompt and generated; a BOS the
 * prompt starts with stays first) are read again from position 0, so the
 * model always sees at least n_ctx/2 tokens and each slide costs n_ctx/2
 * steps. The RNG is seeded with --seed for every prompt. */
static ct_status sample_generate(sample_run *r, gen *g) {
    ct_rng rng;
    ct_rng_init(&rng, r->seed);
    cli_sampler_reset(&r->s);
    for (size_t i = 0; i < g->n_prompt; i++) cli_sampler_see(&r->s, g->hist[i]);
    ct_model_decode_reset(r->m);
    size_t clen = g->n_prompt;
    ct_status st = gen_feed(r, g->hist, g->n_prompt);
    if (st) return st;
    for (long t = 0; t < r->n_tokens; t++) {
        int32_t id = cli_sample_token(&r->s, r->logits, &r->sp, &rng);
        g->hist[g->n_hist++] = id;
        cli_sampler_see(&r->s, id);
        g->n_gen++;
        if (cli_eos_has(&r->eos, id)) {
            /* the end of the sequence: counted, not output (a stop pending stays out too) */
            g->stopped = g->eos = true;
            break;
        }
        if ((st = gen_append(r, g, id))) return st;
        gen_print(r, g, false);
        if (g->stopped || t + 1 == r->n_tokens) break;
        if (clen < (size_t)r->cap) {
            if ((st = gen_feed(r, &id, 1))) return st;
            clen++;
            continue;
        }
        /* the window is full: slide it */
        size_t w = r->n_ctx / 2 > 0 ? (size_t)(r->n_ctx / 2) : 1;
        if (w > g->n_hist) w = g->n_hist;
        ct_model_decode_reset(r->m);
        size_t from = g->n_hist - w;
        if (g->keep_bos && w > 1 && from > 0) {
            if ((st = gen_feed(r, g->hist, 1))) return st;
            from++;
        }
        if ((st = gen_feed(r, g->hist + from, g->n_hist - from))) return st;
        clen = w;
        g->slides++;
    }
    return CT_OK;
}

/* --logits FILE: the logits after each token of prompt ids (n of them), fed
 * one at a time through the KV cache as generation feeds them, written
 * atomically as JSON {"ids": [...], "logits": [[V floats] per position]}
 * (%.9g: float32 exactly), for comparisons with other implementations. */
static ct_status sample_dump_logits(sample_run *r, const int32_t *ids, size_t n, int V,
                                    const char *path) {
    ct_strbuf b = {0};
    ct_strbuf_printf(&b, "{\"ids\": [");
    for (size_t i = 0; i < n; i++) ct_strbuf_printf(&b, "%s%d", i ? ", " : "", ids[i]);
    ct_strbuf_printf(&b, "], \"logits\": [");
    ct_model_decode_reset(r->m);
    ct_status st = CT_OK;
    for (size_t i = 0; i < n && !st; i++) {
        if ((st = ct_model_decode_step(r->m, ids[i], r->logits))) break;
        ct_strbuf_printf(&b, "%s[", i ? ",\n" : "");
        for (int v = 0; v < V; v++) ct_strbuf_printf(&b, "%s%.9g", v ? ", " : "", r->logits[v]);
        ct_strbuf_printf(&b, "]");
    }
    ct_strbuf_printf(&b, "]}\n");
    if (!st && b.oom) st = CT_ERR(CT_ERR_OOM, "out of memory writing %s", path);
    if (!st) st = ct_file_write_atomic(path, b.p, b.len);
    ct_strbuf_free(&b);
    return st;
}

/* ------------------------------------------------------------ arguments */

/* ids in "1 2, 3" into out (cap ids); -1 (with *bad set to the offending
 * word) for a word that is no id in 0..V-1 or more than cap ids. */
static int parse_ids(const char *s, int V, int32_t *out, size_t cap, size_t *n, const char **bad) {
    const char *p = s;
    char *end;
    *n = 0;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (!*p) return 0;
        errno = 0;
        long t = strtol(p, &end, 10);
        if (end == p || errno || t < 0 || t >= V || *n >= cap) {
            *bad = p;
            return -1;
        }
        out[(*n)++] = (int32_t)t;
        p = end;
    }
}

/* r->stops from the --stop arguments: text (with a tokenizer) or id
 * sequences; r->hold is what the output holds back while streaming. 0, or
 * 2 after printing the error. */
static int sample_stops(const char *cmd, sample_run *r, const char *const *args, int n, int V) {
    r->stops = calloc((size_t)n + 1, sizeof *r->stops);
    if (!r->stops) goto oom;
    r->n_stops = n; /* the cleanup frees every ids, NULL or not */
    for (int k = 0; k < n; k++) {
        stop_seq *st = &r->stops[k];
        st->text = args[k];
        st->len = strlen(args[k]);
        size_t len = st->len;
        if (!r->tok) {
            const char *bad = NULL;
            st->ids = calloc(st->len + 1, sizeof *st->ids);
            if (!st->ids) goto oom;
            if (parse_ids(st->text, V, st->ids, st->len + 1, &len, &bad) || len == 0)
                return cli_usage_error(cmd, "--stop '%s': without --tokenizer a stop is a "
                                       "sequence of token ids in 0..%d", st->text, V - 1);
            st->n = (int)len;
        }
        if (len > r->hold + 1) r->hold = len - 1;
    }
    return 0;
oom:
    fprintf(stderr, "ctrain %s: error: out of memory\n", cmd);
    return 2;
}

/* The ids of prompt p (which: how errors name it) into ids (room for n_ctx);
 * *n gets their count. 0, or 2 after printing the error. */
static int sample_encode(const char *cmd, const ct_tokenizer *tok, ct_tokens *scratch,
                         const char *p, const char *which, int V, int n_ctx, int32_t *ids,
                         size_t *n) {
    *n = 0;
    if (p[0] && tok) {
        scratch->n = 0;
        if (ct_tokenizer_encode(tok, NULL, p, strlen(p), 0, scratch)) {
            ct_error_prefix("%s", which);
            return cli_fail(cmd);
        }
        /* LLaMA, Llama 3 and Gemma documents start with BOS in training, as Hugging Face's
         * tokenizer adds it */
        bool bos = ct_tokenizer_adds_bos(tok);
        if (scratch->n + (bos ? 1 : 0) > (size_t)n_ctx)
            return cli_usage_error(cmd, "%s is %zu tokens, longer than the context (%d)", which,
                                   scratch->n, n_ctx);
        if (bos) ids[(*n)++] = ct_tokenizer_bos(tok);
        for (size_t i = 0; i < scratch->n; i++) ids[(*n)++] = scratch->ids[i];
    } else if (p[0]) {
        const char *bad = NULL;
        if (parse_ids(p, V, ids, (size_t)n_ctx, n, &bad)) {
            char *end;
            errno = 0;
            long t = strtol(bad, &end, 10);
            if (end != bad && !errno && t >= 0 && t < V)
                return cli_usage_error(cmd, "%s is longer than the context (%d)", which, n_ctx);
            return cli_usage_error(cmd, "%s: '%.*s' is not a token id in 0..%d", which,
                                   (int)strcspn(bad, " ,\t\n\r"), bad, V - 1);
        }
    }
    /* no prompt: the token that starts every training document (GPT-2's end-of-text,
     * LLaMA's BOS), or the last id of the vocabulary without a tokenizer */
    if (*n == 0) ids[(*n)++] = tok && ct_tokenizer_bos(tok) >= 0 ? ct_tokenizer_bos(tok) : V - 1;
    return 0;
}

/* The end of one prompt's output: the rest of the text or ids and a newline,
 * or its JSON object. */
static void sample_finish(sample_run *r, gen *g, const char *prompt) {
    gen_print(r, g, true);
    if (!r->json) {
        printf("\n");
        fflush(stdout);
        return;
    }
    printf("{\"prompt\": ");
    cli_put_json_string(prompt, strlen(prompt));
    if (r->tok) {
        printf(", \"text\": ");
        cli_put_json_string(g->text ? g->text : "", g->out);
    } else {
        printf(", \"ids\": [");
        for (size_t i = 0; i < g->out; i++) printf("%s%d", i ? ", " : "", g->hist[g->n_prompt + i]);
        printf("]");
    }
    printf(", \"tokens\": %ld, \"stopped\": \"%s\"}\n", g->n_gen,
           g->eos ? "eos" : g->stopped ? "stop" : "length");
    fflush(stdout);
}

/* The model directory's own tokenizer (its tokenizer files) must be the one
 * given: ids of one tokenizer are other text under another. A model without
 * tokenizer files is not checked. 0, or 2 after printing the error. */
static int sample_check_tokenizer(const char *cmd, const ct_tokenizer *tok, const char *tok_path,
                                  const char *model_dir) {
    ct_tok_info given, own;
    ct_tok_info_of(&given, tok, tok_path);
    if (ct_tok_info_of_dir(&own, model_dir)) {
        fprintf(stderr, "ctrain %s: warning: the tokenizer files in %s do not load (%s): --tokenizer "
                "is not checked against them\n", cmd, model_dir, ct_last_error());
        ct_error_clear();
        return 0;
    }
    char a[CT_TOK_WHERE_MAX + 16], b[CT_TOK_WHERE_MAX + 16];
    snprintf(a, sizeof a, "--tokenizer %s", tok_path);
    snprintf(b, sizeof b, "--model %s", model_dir);
    if (!ct_tok_info_match(&given, a, &own, b)) return 0;
    ct_error_hint("give the model's own tokenizer: --tokenizer %s", model_dir);
    return cli_fail(cmd);
}

/* Whether --prompts FILE is JSONL (by its name, as prepare tells). */
static bool sample_is_jsonl(const char *file) {
    size_t n = strlen(file);
    return (n > 6 && !strcmp(file + n - 6, ".jsonl")) || (n > 7 && !strcmp(file + n - 7, ".ndjson"));
}

/* JSONL line p (NUL-terminated, inside *text): a JSON string, or an object
 * with a "prompt" string; the prompt is written over the line (it is never
 * longer). 0, or 2 after printing the error. */
static int sample_jsonl_prompt(const char *cmd, const char *file, int line, char *p) {
    cJSON *v = cJSON_Parse(p);
    const cJSON *s = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "prompt") : v;
    if (!cJSON_IsString(s)) {
        int rc = cli_usage_error(cmd, "--prompts %s line %d: %s: expected a JSON string (or an "
                                 "object with a \"prompt\" string) per line", file, line,
                                 !v ? "not JSON" : cJSON_IsObject(v) ? "no \"prompt\" string"
                                                                     : "not a string");
        cJSON_Delete(v);
        return rc;
    }
    memmove(p, s->valuestring, strlen(s->valuestring) + 1);
    cJSON_Delete(v);
    return 0;
}

/* The prompts: every --prompt in order, then each line of --prompts FILE (a
 * final newline ends the last line; "\r\n" counts as one): the line's text,
 * or for FILE.jsonl / .ndjson the JSON string on it (blank lines skipped),
 * so a prompt may hold newlines. *text owns the file's bytes the prompts
 * point into; lines[i] gets the line of list[i] (0 for --prompt). */
static int sample_read_prompts(const char *cmd, const char *file, const char **list, int *lines,
                               int *n, int cap, char **text) {
    size_t len = 0;
    if (ct_file_read_all(file, text, &len)) {
        ct_error_prefix("--prompts");
        return cli_fail(cmd);
    }
    char *p = *text, *end = *text + len;
    bool jsonl = sample_is_jsonl(file);
    if (len == 0) return cli_usage_error(cmd, "--prompts %s is empty: expected one prompt per line", file);
    for (int line = 1; p < end; line++) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *e = nl ? nl : end;
        if (e > p && e[-1] == '\r') e--;
        *e = '\0';
        char *at = p;
        p = nl ? nl + 1 : end;
        if (jsonl && at[strspn(at, " \t")] == '\0') continue;
        if (jsonl && sample_jsonl_prompt(cmd, file, line, at)) return 2;
        if (*n >= cap)
            return cli_usage_error(cmd, "--prompts %s: more than %d prompts", file, cap);
        lines[*n] = line;
        list[(*n)++] = at;
    }
    if (*n == 0) return cli_usage_error(cmd, "--prompts %s holds no prompt", file);
    return 0;
}

static void sample_usage(void) {
    printf("usage: ctrain sample --model DIR [--prompt TEXT]... [--prompts FILE] [--tokens N]\n"
           "                     [--temperature X] [--top-k K] [--top-p P]\n"
           "                     [--repetition-penalty R] [--stop STR]... [--ignore-eos]\n"
           "                     [--seed S] [--threads N] [--tokenizer DIR] [--base DIR] [--json]\n"
           "                     [--logits FILE]\n"
           "Generates up to N tokens after each prompt, ending at the model's end-of-sequence\n"
           "token. DIR is a Hugging Face model directory, a checkpoint, a run directory, or a\n"
           "LoRA run / PEFT adapter (merged into its base in memory; --base DIR names the base\n"
           "when the adapter does not).\n"
           "  --prompt TEXT      ids \"1 2 3\", or text with --tokenizer; repeatable\n"
           "  --prompts FILE     one prompt per line, after the --prompt ones; FILE.jsonl\n"
           "                     (or .ndjson): one JSON string per line (or {\"prompt\": ...}),\n"
           "                     so a prompt may hold newlines; each prompt is generated on\n"
           "                     its own, the RNG seeded with --seed for each\n"
           "  --tokens N         tokens to generate at most (default 64); past the model's\n"
           "                     context the window slides: the last n_ctx/2 tokens are re-read\n"
           "  --temperature X    0 is greedy (default 1)\n"
           "  --top-k K          keep the K most likely tokens (0: all)\n"
           "  --top-p P          keep the most likely tokens up to probability P (1: all)\n"
           "  --repetition-penalty R  divide positive (multiply negative) logits of tokens\n"
           "                     already in the context by R (1: none)\n"
           "  --stop STR         stop when the generated text contains STR (not printed);\n"
           "                     without --tokenizer, STR is a token id sequence; repeatable\n"
           "  --ignore-eos       go on past the end-of-sequence token (it is then printed)\n"
           "  --tokenizer DIR    the prompt is text and the output is text; DIR holds\n"
           "                     encoder.json + vocab.bpe, vocab.json + merges.txt or\n"
           "                     tokenizer.json (a run directory holds its model's); it must be\n"
           "                     the tokenizer beside the model's weights when there is one\n"
           "  --json             one line per prompt: {\"prompt\", \"text\" or \"ids\", \"tokens\",\n"
           "                     \"stopped\": \"eos\" | \"stop\" | \"length\"}\n"
           "  --logits FILE      generate nothing: write the logits after each token of the\n"
           "                     first prompt, read one at a time through the KV cache, to\n"
           "                     FILE as JSON {\"ids\": [...], \"logits\": [[...], ...]}\n"
           "The end-of-sequence ids are generation_config.json's eos_token_id (a number or a\n"
           "list: any of them ends it), else config.json's, else the tokenizer's EOS token;\n"
           "the EOS is not printed. Several prompts print one line each (text with \\n, \\r\n"
           "and \\\\ escaped).\n");
}

/* ------------------------------------------------------------ command */

int cmd_sample(int argc, char **argv) {
    const char *cmd = "sample", *model_dir = NULL, *tok_dir = NULL, *prompts_file = NULL,
               *base = NULL, *logits_path = NULL;
    const char **prompts = NULL;
    const char *stop_args[SAMPLE_MAX_STOPS];
    int n_prompts = 0, n_stops = 0;
    long n_tokens = 64, top_k = 0, seed = 1337, threads = 0;
    double temperature = 1.0, top_p = 1.0, penalty = 1.0;
    bool json = false, ignore_eos = false;
    prompts = calloc(SAMPLE_MAX_PROMPTS, sizeof *prompts);
    if (!prompts) {
        fprintf(stderr, "ctrain sample: error: out of memory\n");
        return 2;
    }
    int rc = 2;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            sample_usage();
            free(prompts);
            return 0;
        }
        if (!strcmp(a, "--json")) {
            json = true;
            continue;
        }
        if (!strcmp(a, "--ignore-eos")) {
            ignore_eos = true;
            continue;
        }
        if (!v) {
            rc = cli_usage_error(cmd, "option '%s' needs a value", a);
            goto out;
        }
        const char *bad = NULL;
        if (!strcmp(a, "--model")) model_dir = v;
        else if (!strcmp(a, "--prompt")) {
            if (n_prompts >= SAMPLE_MAX_PROMPTS) bad = "at most 4096 --prompt (use --prompts FILE)";
            else prompts[n_prompts++] = v;
        } else if (!strcmp(a, "--prompts")) {
            if (prompts_file) bad = "given twice";
            else prompts_file = v;
        } else if (!strcmp(a, "--stop")) {
            if (!v[0]) bad = "an empty stop string stops everything";
            else if (n_stops >= SAMPLE_MAX_STOPS) bad = "at most 64 --stop";
            else stop_args[n_stops++] = v;
        } else if (!strcmp(a, "--tokenizer")) tok_dir = v;
        else if (!strcmp(a, "--base")) base = v;
        else if (!strcmp(a, "--logits")) logits_path = v;
        else if (!strcmp(a, "--tokens")) {
            if (cli_parse_long(v, 1, 1 << 20, &n_tokens)) bad = "expected a positive integer";
        } else if (!strcmp(a, "--top-k")) {
            if (cli_parse_long(v, 0, 1 << 24, &top_k)) bad = "expected an integer >= 0";
        } else if (!strcmp(a, "--seed")) {
            if (cli_parse_long(v, 0, 0x7fffffff, &seed)) bad = "expected an integer >= 0";
        } else if (!strcmp(a, "--threads")) {
            if (cli_parse_long(v, 0, 4096, &threads)) bad = "expected an integer >= 0";
        } else if (!strcmp(a, "--temperature")) {
            if (cli_parse_double(v, 0, 100, &temperature)) bad = "expected a number in 0..100";
        } else if (!strcmp(a, "--top-p")) {
            if (cli_parse_double(v, 0, 1, &top_p)) bad = "expected a number in 0..1";
        } else if (!strcmp(a, "--repetition-penalty")) {
            if (cli_parse_double(v, 1e-6, 1e6, &penalty)) bad = "expected a positive number";
        } else {
            rc = cli_usage_error(cmd, "unknown option '%s'", a);
            goto out;
        }
        if (bad) {
            rc = cli_usage_error(cmd, "%s '%s': %s", a, v, bad);
            goto out;
        }
        i++;
    }
    if (!model_dir) {
        rc = cli_usage_error(cmd, "--model DIR is required");
        goto out;
    }

    ct_ctx *ctx = NULL;
    ct_model *m = NULL;
    ct_tokenizer *tok = NULL;
    ct_tokens ptoks = {0};
    char *file_text = NULL;
    ct_eval_source *src = NULL;
    sample_run r = {0};
    gen g = {0};
    size_t *plen = NULL;
    int32_t **pids = NULL;
    int *plines = NULL;
    int n_all = n_prompts;

    plines = calloc(SAMPLE_MAX_PROMPTS, sizeof *plines);
    if (!plines) goto oom;
    if (prompts_file && (rc = sample_read_prompts(cmd, prompts_file, prompts, plines, &n_all,
                                                  SAMPLE_MAX_PROMPTS, &file_text)))
        goto done;
    rc = 2;
    if (n_all == 0 && logits_path) {
        rc = cli_usage_error(cmd, "--logits needs a --prompt (the ids to score)");
        goto done;
    }
    if (n_all == 0) prompts[n_all++] = ""; /* no prompt: the start token below */
    ct_ctx_params cp = ct_ctx_params_default();
    cp.n_threads = (int)threads;
    if (cli_device_from_env(&cp)) {
        rc = cli_fail(cmd);
        goto done;
    }
    src = calloc(1, sizeof *src);
    if (!src) {
        fprintf(stderr, "ctrain sample: error: out of memory\n");
        goto done;
    }
    /* a LoRA adapter is folded into its base: the KV-cache decoder runs plain weights */
    ct_eval_load_opts lo = {.base = base, .merge = true};
    if (ct_ctx_init(&ctx, &cp) || ct_eval_load(&m, ctx, model_dir, &lo, src)) {
        rc = cli_fail(cmd);
        goto done;
    }
    if (src->adapter)
        fprintf(stderr, "ctrain sample: LoRA adapter %s (r=%d, alpha=%g) merged in memory into "
                "%s%s\n", src->dir, src->lora.r, (double)src->lora.alpha,
                src->base[0] ? "the base " : "a base rebuilt from ",
                src->base[0] ? src->base : src->base_from);
    const ct_model_config *mc = ct_model_get_config(m);
    int V = mc->vocab_size;
    if (tok_dir) {
        if (ct_tokenizer_load(&tok, tok_dir)) {
            rc = cli_fail(cmd);
            goto done;
        }
        if ((rc = sample_check_tokenizer(cmd, tok, tok_dir, src->tok_dir))) goto done;
        rc = 2;
        if (ct_tokenizer_vocab_size(tok) > V) {
            fprintf(stderr, "ctrain sample: error: the tokenizer %s has %d tokens, more than the "
                    "model's vocab_size %d\n", tok_dir, ct_tokenizer_vocab_size(tok), V);
            goto done;
        }
    }

    r.tok = tok;
    /* the model's end of sequence: its generation_config.json or config.json (beside the
     * base an adapter was merged into), else the tokenizer's */
    if (!ignore_eos) {
        const char *gen_dir = src->adapter ? src->base : src->dir;
        cli_eos_find(cmd, &r.eos, gen_dir, tok, V);
    }
    if ((rc = sample_stops(cmd, &r, stop_args, n_stops, V))) goto done;
    rc = 2;

    /* every prompt's ids first: errors before any output */
    plen = calloc((size_t)n_all, sizeof *plen);
    pids = calloc((size_t)n_all, sizeof *pids);
    if (!plen || !pids) goto oom;
    size_t longest = 0;
    for (int k = 0; k < n_all; k++) {
        const char *p = prompts[k];
        pids[k] = calloc((size_t)mc->n_ctx + 1, sizeof **pids);
        if (!pids[k]) goto oom;
        char which[CT_PATH_MAX + 64] = "--prompt";
        if (k >= n_prompts && prompts_file)
            snprintf(which, sizeof which, "prompt %d (--prompts %s line %d)", k + 1, prompts_file,
                     plines[k]);
        else if (n_all > 1)
            snprintf(which, sizeof which, "prompt %d", k + 1);
        size_t n = 0;
        if ((rc = sample_encode(cmd, tok, &ptoks, p, which, V, mc->n_ctx, pids[k], &n)))
            goto done;
        rc = 2;
        plen[k] = n;
        if (n > longest) longest = n;
    }

    /* the KV cache: what the longest prompt needs, at most the context (then it slides) */
    long need = (long)longest + n_tokens - 1;
    r.m = m;
    r.n_ctx = mc->n_ctx;
    r.cap = need < mc->n_ctx ? (int)need : mc->n_ctx;
    if (r.cap < 1) r.cap = 1;
    r.n_tokens = n_tokens;
    r.seed = (uint64_t)seed;
    r.sp = (cli_sample_params){temperature, (int)top_k, top_p, penalty};
    r.json = json;
    r.escape = n_all > 1;
    if (cli_sampler_init(&r.s, V)) goto oom;
    r.logits = malloc((size_t)V * sizeof *r.logits);
    g.hist = malloc(((size_t)mc->n_ctx + (size_t)n_tokens + 1) * sizeof *g.hist);
    if (!r.logits || !g.hist) goto oom;
    if (logits_path) { /* the first prompt's logits instead of a generation */
        if (!plen[0]) {
            rc = cli_usage_error(cmd, "--logits: the first prompt holds no tokens");
            goto done;
        }
        if (ct_model_decode_reserve(m, (int)plen[0]) ||
            sample_dump_logits(&r, pids[0], plen[0], V, logits_path)) {
            rc = cli_fail(cmd);
            goto done;
        }
        rc = 0;
        goto done;
    }
    if (ct_model_decode_reserve(m, r.cap)) {
        rc = cli_fail(cmd);
        goto done;
    }
    for (int k = 0; k < n_all; k++) {
        memcpy(g.hist, pids[k], plen[k] * sizeof *g.hist);
        g.n_hist = g.n_prompt = plen[k];
        g.len = g.out = g.printed = 0;
        g.n_gen = 0;
        g.slides = 0;
        g.stopped = false;
        g.keep_bos = tok && ct_tokenizer_adds_bos(tok) && g.hist[0] == ct_tokenizer_bos(tok);
        if (sample_generate(&r, &g)) {
            if (!json) printf("\n");
            rc = cli_fail(cmd);
            goto done;
        }
        sample_finish(&r, &g, prompts[k]);
        if (g.slides) {
            char which[32] = "";
            if (n_all > 1) snprintf(which, sizeof which, "prompt %d: ", k + 1);
            fprintf(stderr, "ctrain sample: %sthe context (n_ctx %d) filled up: slid the window "
                    "%d time%s, each time re-reading the last %d tokens\n", which, mc->n_ctx,
                    g.slides, g.slides == 1 ? "" : "s", mc->n_ctx / 2 > 0 ? mc->n_ctx / 2 : 1);
        }
    }
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "ctrain sample: error: out of memory\n");
    rc = 2;
done:
    if (pids)
        for (int k = 0; k < n_all; k++) free(pids[k]);
    free(pids);
    free(plen);
    free(plines);
    if (r.stops)
        for (int k = 0; k < r.n_stops; k++) free(r.stops[k].ids);
    free(r.stops);
    cli_sampler_free(&r.s);
    free(r.logits);
    free(g.hist);
    free(g.text);
    free(file_text);
    free(src);
    ct_tokens_free(&ptoks);
    ct_tokenizer_free(tok);
    ct_model_free(m);
    ct_ctx_free(ctx);
out:
    free(prompts);
    return rc;
}
