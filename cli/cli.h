/*
 * Subcommands of the ctrain program. Each returns the process exit status:
 * 0 on success, 2 on any error (bad input, missing or corrupt files, full disk),
 * after printing the error through cli_fail.
 */
#ifndef CT_CLI_H
#define CT_CLI_H
#include "ctrain/config.h"
#include "ctrain/core.h"
#include "ctrain/data.h"

int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_prepare(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_hw(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_tune(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_chat(int argc, char **argv);

/* Print ct_last_error() (and its hint) prefixed with "ctrain <cmd>: error:";
 * returns 2. */
int cli_fail(const char *cmd);
/* Print a usage error; returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) CT_PRINTF(2, 3);

/* Parse --config FILE, --print-config, --tokenizer DIR (data.tokenizer) and
 * key=value arguments into cfg. A
 * tuned profile's settings (tune.signature, tune.settings) apply after the
 * file and before the key=value overrides.
 * Returns 0 to go on, 1 when the config was printed (caller exits 0), 2 on
 * error (already printed). */
int cli_load_config(const char *cmd, int argc, char **argv, ct_config *cfg, bool *print_only);
/* model.arch from model.preset when one is set (a preset decides the
 * architecture), warning when a given model.arch differs; gpt2 when model.arch
 * is unset ("") and no preset names one. Call once the config is complete. */
void cli_config_arch(const char *cmd, ct_config *cfg);
/* The backend of commands without a config (eval, sample): CTRAIN_DEVICE
 * when set, as run.device spells it. CT_ERR_ARG for a bad name. */
ct_status cli_device_from_env(ct_ctx_params *cp);
/* The context parameters a run of cfg needs: run.threads, run.device (cuda:
 * the GPU of this process's rank on its machine, local_rank, -1 for none,
 * taken round-robin over the GPUs the driver sees; cuda:N names one
 * whatever the rank) and debug.sim_device_memory. The config's errors. */
ct_status cli_ctx_params(const ct_config *cfg, int local_rank, ct_ctx_params *cp);
struct ct_gpu_peaks;
/* A GPU's figures (perf/bench.h): two lines of text, or JSON members
 * (", \"gpu_...\": ...", no braces) to put inside an object; measured peaks
 * of 0 print as not measured (null). */
void cli_gpu_print(const struct ct_gpu_peaks *g, bool json);

/* A whole decimal number (strtol / strtod) in [lo, hi] into *out; -1 (out
 * untouched) for anything else. */
int cli_parse_long(const char *s, long lo, long hi, long *out);
int cli_parse_double(const char *s, double lo, double hi, double *out);

/* ---- the next token (sample, chat) */

typedef struct cli_sample_params {
    double temperature; /* 0: greedy */
    int top_k;          /* 0: all */
    double top_p;       /* 1: all */
    double penalty;     /* repetition penalty; 1: none */
} cli_sample_params;

typedef struct cli_cand {
    float score;
    int32_t id;
} cli_cand;

typedef struct cli_sampler {
    int V;
    float *scores;   /* (V) the logits after the repetition penalty */
    float *probs;    /* (V) unnormalised probabilities of the candidates */
    cli_cand *cand;  /* (V) the candidates */
    uint8_t *seen;   /* (V) ids already in the context */
    int32_t *uniq;   /* (V) those ids, each once */
    int n_uniq;
} cli_sampler;

/* The buffers of a sampler over V ids, its context empty. CT_ERR_OOM (s then
 * holds nothing). Release with cli_sampler_free (safe on a zeroed sampler). */
ct_status cli_sampler_init(cli_sampler *s, int V);
void cli_sampler_free(cli_sampler *s);
/* A new context (prompt), or one more id of it: what the penalty applies to. */
void cli_sampler_reset(cli_sampler *s);
void cli_sampler_see(cli_sampler *s, int32_t id);
/* The next token after logits(V), Hugging Face's order of processing:
 *  1. repetition penalty (CTRL): each distinct id of the context (prompt and
 *     generated, cli_sampler_see) gets score/R when its score is positive,
 *     score*R otherwise;
 *  2. temperature 0: the first largest score (greedy);
 *  3. temperature: scores / T; top-k keeps the scores >= the k-th largest
 *     (ties kept); top-p keeps, largest first, the smallest set whose
 *     probability (softmax over what top-k kept) reaches P (at least one);
 *  4. one draw r = U[0,1) * total over the candidates: in id order without
 *     top-p (as before top-p existed), largest first with it.
 * One ct_rng_double per sampled (not greedy) token. */
int cli_sample_token(cli_sampler *s, const float *logits, const cli_sample_params *p, ct_rng *rng);

/* ---- end of sequence (sample, chat) */

#define CLI_MAX_EOS 16

/* The ids that end a generation, and where they came from. */
typedef struct cli_eos {
    int32_t ids[CLI_MAX_EOS];
    int n;
    char from[CT_PATH_MAX + 96]; /* for messages; "" when there are none */
} cli_eos;

/* The model's end-of-sequence ids, as transformers' generate finds them:
 * eos_token_id (a number, or a list: every id of it, as Llama 3's
 * <|end_of_text|> and <|eot_id|>) of model_dir's generation_config.json, else
 * of its config.json, else the tokenizer's end-of-sequence token
 * (tokenizer_config.json's eos_token, GPT-2's <|endoftext|>). model_dir and
 * tok may be NULL. Ids outside 0..V-1 are left out; a file that is not JSON is
 * warned about on stderr ("ctrain CMD: warning: ...") and passed over. */
void cli_eos_find(const char *cmd, cli_eos *e, const char *model_dir, const ct_tokenizer *tok, int V);
/* Add id (when in 0..V-1, new and there is room). */
void cli_eos_add(cli_eos *e, int32_t id, int V);
bool cli_eos_has(const cli_eos *e, int32_t id);

/* ---- output on stdout */

/* Bytes of text as a JSON string: escapes, and U+FFFD for bytes that start
 * no valid UTF-8 sequence (a token may end inside a character). */
void cli_put_json_string(const char *t, size_t n);
/* Raw bytes, or (escape) with \\, \n and \r written as escapes so that one
 * output stays on one line. */
void cli_put_text(const char *t, size_t n, bool escape);
#endif
