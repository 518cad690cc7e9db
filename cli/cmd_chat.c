/*
 * `ctrain chat --model DIR`: a conversation with a model through its chat
 * template. Each line of stdin is a user turn; the whole conversation (the
 * system message, the earlier turns, the new one) is rendered with the
 * template and add_generation_prompt, tokenised with the template's markup as
 * the added tokens' ids (as `ctrain tokenize --chat`), and the reply is
 * generated with the KV cache (the sampling of `ctrain sample`). The cache
 * keeps the conversation: when the new prompt starts with the ids it holds,
 * only the rest is read. A reply ends at an end-of-sequence id, --max-new
 * tokens or a full context; a conversation that outgrows the context loses
 * its oldest exchanges. --prompts FILE answers each conversation of a file
 * (JSONL messages, so turns may hold newlines) on its own instead.
 * Leaves out: tools, multi-line turns on stdin, stop strings
 * and rewinding the cache to a common prefix (the library has no such call:
 * a prompt that departs from the cached ids is read again from position 0).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cJSON.h>

#include "cli.h"
#include "ctrain/data.h"
#include "ctrain/model.h"
#include "data/chat/chat_template.h"
#include "io/fileio.h"
#include "train/eval.h"

typedef enum chat_stop {
    CHAT_STOP_EOS = 0,
    CHAT_STOP_MAX_NEW = 1,
    CHAT_STOP_N_CTX = 2,
    CHAT_STOP_COUNT
} chat_stop;

static const char *const chat_stop_names[CHAT_STOP_COUNT] = {"eos", "max_new", "n_ctx"};

/* The conversation: roles are static strings, contents owned. */
typedef struct chat_conv {
    ct_chat_msg *msg;
    size_t n, cap;
    size_t first; /* messages before it stay when the oldest exchanges go (the system message) */
} chat_conv;

typedef struct chat {
    ct_model *m;
    const ct_tokenizer *tok;
    ct_tok_state *ts;
    const ct_chat_template *tpl;
    cli_sampler s;
    cli_sample_params sp;
    ct_rng rng;
    float *logits;        /* (V) */
    int V, n_ctx;
    long max_new;
    cli_eos eos;          /* ids that end a reply (none with --ignore-eos) */
    int32_t *cache;       /* (n_ctx) the ids the KV cache holds, in order */
    size_t n_cache;
    ct_tokens prompt;     /* this turn's rendered conversation */
    int32_t *reply;       /* (n_ctx + 1) this turn's generated ids, an EOS excluded */
    size_t n_reply;
    int32_t *shown;       /* (n_ctx + 1) those of them the tokenizer has (a model's vocab
                           * may be padded past the tokenizer's): what the text is made of */
    int tok_V;            /* the tokenizer's ids */
    char *text;           /* the reply's text (owned; decoded anew after each id) */
    size_t len;
    size_t printed;       /* bytes of text already on stdout */
    bool json, escape;
} chat;

/* ------------------------------------------------------------ conversation */

static ct_status conv_push(chat_conv *cv, const char *role, const char *content, size_t len) {
    if (cv->n == cv->cap) {
        size_t cap = cv->cap ? 2 * cv->cap : 16;
        ct_chat_msg *p = realloc(cv->msg, cap * sizeof *p);
        if (!p) return CT_ERR(CT_ERR_OOM, "out of memory for the conversation");
        cv->msg = p;
        cv->cap = cap;
    }
    char *c = malloc(len + 1);
    if (!c) return CT_ERR(CT_ERR_OOM, "out of memory for the conversation");
    memcpy(c, content, len);
    c[len] = '\0';
    cv->msg[cv->n++] = (ct_chat_msg){role, c};
    return CT_OK;
}

/* Drop the oldest exchange (a user message and the reply after it). */
static void conv_drop_oldest(chat_conv *cv) {
    free((char *)cv->msg[cv->first].content);
    free((char *)cv->msg[cv->first + 1].content);
    memmove(cv->msg + cv->first, cv->msg + cv->first + 2, (cv->n - cv->first - 2) * sizeof *cv->msg);
    cv->n -= 2;
}

static void conv_free(chat_conv *cv) {
    for (size_t i = 0; i < cv->n; i++) free((char *)cv->msg[i].content);
    free(cv->msg);
}

/* ------------------------------------------------------------ one turn */

/* c->prompt: the conversation rendered with the generation prompt and
 * tokenised, the markup as the added tokens' ids. */
static ct_status chat_render(chat *c, const chat_conv *cv) {
    char *text = NULL;
    size_t len = 0;
    ct_status st = ct_chat_render(c->tpl, cv->msg, cv->n, true, &text, &len);
    if (st) return st;
    c->prompt.n = 0;
    st = ct_tokenizer_encode(c->tok, c->ts, text, len, CT_TOK_ADDED_TOKENS, &c->prompt);
    free(text);
    return st;
}

/* Render the conversation so that it leaves min(max_new, n_ctx/2) positions
 * for the reply, dropping the oldest exchanges (the system message stays)
 * while it does not; *dropped gets how many went. A single user turn that
 * fills the context on its own is CT_ERR_ARG. */
static ct_status chat_fit(chat *c, chat_conv *cv, int *dropped) {
    long room = c->max_new < c->n_ctx / 2 ? c->max_new : c->n_ctx / 2;
    if (room < 1) room = 1;
    *dropped = 0;
    for (;;) {
        ct_status st = chat_render(c, cv);
        if (st) return st;
        if ((long)c->prompt.n + room <= c->n_ctx) return CT_OK;
        if (cv->n - cv->first < 3) break; /* only the new user message is left to go */
        conv_drop_oldest(cv);
        (*dropped)++;
    }
    if (c->prompt.n < (size_t)c->n_ctx) return CT_OK; /* the reply gets what is left */
    ct_status st = CT_ERR(CT_ERR_ARG, "the prompt of this turn is %zu tokens (system message, template "
                          "and the message): no room for a reply in the model's context (n_ctx %d)",
                          c->prompt.n, c->n_ctx);
    ct_error_hint("send a shorter message (or a shorter --system)");
    return st;
}

/* Put c->prompt into the KV cache: the ids it already holds when they are
 * the prompt's start, else everything from position 0. *reused: the ids
 * that were not read again. */
static ct_status chat_prefill(chat *c, size_t *reused) {
    const int32_t *p = c->prompt.ids;
    size_t n = c->prompt.n;
    /* the prompt's last logits are needed: a cache holding all of it cannot give them */
    if (c->n_cache && c->n_cache < n && memcmp(c->cache, p, c->n_cache * sizeof *p) == 0) {
        *reused = c->n_cache;
    } else {
        ct_model_decode_reset(c->m);
        c->n_cache = 0;
        *reused = 0;
    }
    for (size_t i = c->n_cache; i < n; i++) {
        ct_status st = ct_model_decode_step(c->m, p[i], c->logits);
        if (st) return st;
        c->cache[c->n_cache++] = p[i];
    }
    return CT_OK;
}

/* t[0..n) as message text: each byte that starts no valid UTF-8 sequence,
 * and NUL, becomes U+FFFD (one per byte, as cli_put_json_string writes them).
 * Returns owned (NUL-terminated, *out_len set), or NULL on OOM. */
static char *chat_clean(const char *t, size_t n, size_t *out_len) {
    char *o = malloc(3 * n + 1);
    if (!o) return NULL;
    size_t i = 0, k = 0;
    while (i < n) {
        size_t ok = ct_utf8_valid_prefix(t + i, n - i);
        for (size_t j = i; j < i + ok; j++) {
            if (t[j]) {
                o[k++] = t[j];
            } else {
                memcpy(o + k, "\xEF\xBF\xBD", 3);
                k += 3;
            }
        }
        i += ok;
        if (i < n) {
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i++;
        }
    }
    o[k] = '\0';
    *out_len = k;
    return o;
}

/* Decode the reply so far into c->text and, streaming text, print what is
 * settled: the valid UTF-8 before the first NUL (a token may end inside a
 * character). */
static ct_status chat_stream(chat *c) {
    free(c->text);
    c->text = NULL;
    c->len = 0;
    size_t k = 0;
    for (size_t i = 0; i < c->n_reply; i++)
        if (c->reply[i] < c->tok_V) c->shown[k++] = c->reply[i];
    ct_status st = ct_tokenizer_decode(c->tok, c->shown, k, &c->text, &c->len);
    if (st || c->json) return st;
    size_t ok = ct_utf8_valid_prefix(c->text, c->len);
    size_t nul = strnlen(c->text, ok);
    if (nul > c->printed) {
        cli_put_text(c->text + c->printed, nul - c->printed, c->escape);
        c->printed = nul;
        fflush(stdout);
    }
    return CT_OK;
}

/* Generate the reply to c->prompt (already in the cache, its logits in
 * c->logits); *stop says why it ended. */
static ct_status chat_generate(chat *c, chat_stop *stop) {
    cli_sampler_reset(&c->s);
    for (size_t i = 0; i < c->prompt.n; i++) cli_sampler_see(&c->s, c->prompt.ids[i]);
    c->n_reply = 0;
    c->printed = 0;
    free(c->text);
    c->text = NULL;
    c->len = 0;
    for (;;) {
        int32_t id = cli_sample_token(&c->s, c->logits, &c->sp, &c->rng);
        if (cli_eos_has(&c->eos, id)) {
            *stop = CHAT_STOP_EOS;
            return CT_OK;
        }
        c->reply[c->n_reply++] = id;
        cli_sampler_see(&c->s, id);
        ct_status st = chat_stream(c);
        if (st) return st;
        if ((long)c->n_reply >= c->max_new) {
            *stop = CHAT_STOP_MAX_NEW;
            return CT_OK;
        }
        if (c->n_cache >= (size_t)c->n_ctx) {
            *stop = CHAT_STOP_N_CTX;
            return CT_OK;
        }
        if ((st = ct_model_decode_step(c->m, id, c->logits))) return st;
        c->cache[c->n_cache++] = id;
    }
}

/* The end of a turn's output: the rest of the text and a newline, or its JSON object. */
static void chat_finish(chat *c, long turn, const char *reply, size_t reply_len, size_t reused,
                        chat_stop stop) {
    if (!c->json) {
        if (reply_len > c->printed) cli_put_text(reply + c->printed, reply_len - c->printed, c->escape);
        printf("\n");
        fflush(stdout);
        return;
    }
    printf("{\"turn\": %ld, \"reply\": ", turn);
    cli_put_json_string(reply, reply_len);
    printf(", \"tokens\": [");
    for (size_t i = 0; i < c->n_reply; i++) printf("%s%d", i ? ", " : "", c->reply[i]);
    printf("], \"prompt_tokens\": %zu, \"cached_tokens\": %zu, \"stop\": \"%s\"}\n", c->prompt.n, reused,
           chat_stop_names[stop]);
    fflush(stdout);
}

/* ------------------------------------------------------------ setup */

/* The ids that end a reply: the model's (cli_eos_find: generation_config.json's
 * or config.json's eos_token_id in gen_dir, which may be NULL, else the
 * tokenizer's EOS), and beside them the tokenizer's end-of-text and the
 * template's eos_token (when it is one token): a turn ends at the end of turn. */
static void chat_eos_ids(chat *c, const char *gen_dir) {
    cli_eos_find("chat", &c->eos, gen_dir, c->tok, c->V);
    cli_eos_add(&c->eos, ct_tokenizer_eot(c->tok), c->V);
    const char *eos = ct_chat_template_token(c->tpl, "eos_token");
    if (eos && eos[0]) {
        ct_tokens ids = {0};
        if (ct_tokenizer_encode(c->tok, c->ts, eos, strlen(eos), CT_TOK_ADDED_TOKENS, &ids) == CT_OK &&
            ids.n == 1)
            cli_eos_add(&c->eos, ids.ids[0], c->V);
        else
            fprintf(stderr, "ctrain chat: warning: the template's eos_token \"%s\" is not one token: "
                    "it does not end a reply\n", eos);
        ct_error_clear();
        ct_tokens_free(&ids);
    }
}

/* The chat template: --chat-template FILE, else the one beside the
 * tokenizer (tok_dir), else (an adapter carrying tokenizer files without a
 * template) the one in model_dir. Errors name tok_dir's files. */
static ct_status chat_load_template(ct_chat_template **out, const char *file, const char *tok_dir,
                                    const char *model_dir) {
    if (file) return ct_chat_template_load_file(out, file, tok_dir);
    if (ct_chat_template_load(out, tok_dir) == CT_OK) return CT_OK;
    if (!model_dir || !strcmp(model_dir, tok_dir)) return ct_last_status();
    if (ct_chat_template_load(out, model_dir) == CT_OK) {
        ct_error_clear();
        return CT_OK;
    }
    return ct_chat_template_load(out, tok_dir); /* again, for its error */
}

static void chat_usage(void) {
    printf("usage: ctrain chat --model DIR [--adapter DIR] [--system TEXT] [--max-new N]\n"
           "                   [--temperature X] [--top-k K] [--top-p P] [--repetition-penalty R]\n"
           "                   [--seed S] [--chat-template FILE] [--threads N] [--json]\n"
           "                   [--prompts FILE] [--ignore-eos]\n"
           "Chats with a model through its chat template: each line of stdin is a user turn\n"
           "(an empty line is skipped, end of input ends the chat; on a terminal the prompt\n"
           "is \"> \" on stderr). The whole conversation is rendered with the template and\n"
           "the assistant's generation prompt, and the reply is generated with the KV cache,\n"
           "which keeps the conversation's earlier ids across turns. One reply per line on\n"
           "stdout, printed as it comes (when stdout is not a terminal, \\n, \\r and \\\\ in a\n"
           "reply are escaped so that it stays on its line).\n"
           "  --model DIR        a Hugging Face model directory (config.json, safetensors,\n"
           "                     tokenizer files, tokenizer_config.json with a chat_template),\n"
           "                     a run or checkpoint directory\n"
           "  --adapter DIR      a PEFT LoRA adapter for DIR, merged into it in memory\n"
           "  --system TEXT      a system message before the conversation\n"
           "  --max-new N        tokens per reply at most (default 256)\n"
           "  --temperature X    0 is greedy (default 1)\n"
           "  --top-k K, --top-p P, --repetition-penalty R, --seed S   as `ctrain sample`;\n"
           "                     the RNG is seeded once, for the whole chat (default 1337)\n"
           "  --chat-template FILE  a template instead of the model's: a .jinja file, or a\n"
           "                     JSON file with a chat_template\n"
           "  --prompts FILE     instead of stdin: each line a conversation of its own,\n"
           "                     answered with one reply (the RNG seeded with --seed for\n"
           "                     each); FILE.jsonl (or .ndjson): a JSON list of {\"role\",\n"
           "                     \"content\"} messages per line, {\"messages\": [...]}, or a\n"
           "                     string (one user message); another file: a user message per\n"
           "                     line. --system goes first where there is no system message\n"
           "  --ignore-eos       a reply goes on past an end-of-sequence id (to --max-new)\n"
           "  --json             one line per turn: {\"turn\" (with --prompts: the conversation's\n"
           "                     number), \"reply\", \"tokens\" (the reply's\n"
           "                     ids), \"prompt_tokens\", \"cached_tokens\" (prompt ids the cache\n"
           "                     already held), \"stop\": \"eos\" | \"max_new\" | \"n_ctx\"}\n"
           "A reply ends at an end-of-sequence id (generation_config.json's eos_token_id, a\n"
           "number or a list, else config.json's; the tokenizer's end-of-text; the template's\n"
           "eos_token), after --max-new tokens, or when the\n"
           "context (n_ctx) is full. When the conversation leaves less than\n"
           "min(--max-new, n_ctx/2) positions for the reply, its oldest exchanges are dropped\n"
           "(the system message stays; said on stderr); a single message that fills the\n"
           "context is an error (exit 2).\n");
}

/* ------------------------------------------------------------ command */

typedef struct chat_args {
    const char *model, *adapter, *system, *tpl_file, *prompts;
    long max_new, top_k, seed, threads;
    double temperature, top_p, penalty;
    bool json, ignore_eos;
} chat_args;

/* 0 to go on, 1 after --help, 2 after a usage error. */
static int chat_parse(const char *cmd, int argc, char **argv, chat_args *a) {
    *a = (chat_args){.max_new = 256, .seed = 1337, .temperature = 1.0, .top_p = 1.0, .penalty = 1.0};
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            chat_usage();
            return 1;
        }
        if (!strcmp(o, "--json")) {
            a->json = true;
            continue;
        }
        if (!strcmp(o, "--ignore-eos")) {
            a->ignore_eos = true;
            continue;
        }
        if (!v) return cli_usage_error(cmd, "option '%s' needs a value", o);
        const char *bad = NULL;
        if (!strcmp(o, "--model")) a->model = v;
        else if (!strcmp(o, "--adapter")) a->adapter = v;
        else if (!strcmp(o, "--system")) {
            if (ct_utf8_valid_prefix(v, strlen(v)) < strlen(v)) bad = "not valid UTF-8";
            else a->system = v;
        } else if (!strcmp(o, "--chat-template")) a->tpl_file = v;
        else if (!strcmp(o, "--prompts")) a->prompts = v;
        else if (!strcmp(o, "--max-new")) {
            if (cli_parse_long(v, 1, 1 << 24, &a->max_new)) bad = "expected a positive integer";
        } else if (!strcmp(o, "--top-k")) {
            if (cli_parse_long(v, 0, 1 << 24, &a->top_k)) bad = "expected an integer >= 0";
        } else if (!strcmp(o, "--seed")) {
            if (cli_parse_long(v, 0, 0x7fffffff, &a->seed)) bad = "expected an integer >= 0";
        } else if (!strcmp(o, "--threads")) {
            if (cli_parse_long(v, 0, 4096, &a->threads)) bad = "expected an integer >= 0";
        } else if (!strcmp(o, "--temperature")) {
            if (cli_parse_double(v, 0, 100, &a->temperature)) bad = "expected a number in 0..100";
        } else if (!strcmp(o, "--top-p")) {
            if (cli_parse_double(v, 0, 1, &a->top_p)) bad = "expected a number in 0..1";
        } else if (!strcmp(o, "--repetition-penalty")) {
            if (cli_parse_double(v, 1e-6, 1e6, &a->penalty)) bad = "expected a positive number";
        } else {
            return cli_usage_error(cmd, "unknown option '%s'", o);
        }
        if (bad) return cli_usage_error(cmd, "%s '%s': %s", o, v, bad);
        i++;
    }
    if (!a->model) return cli_usage_error(cmd, "--model DIR is required");
    return 0;
}

/* Read turns from stdin until EOF. 0, or 2 after printing the error. */
static int chat_loop(const char *cmd, chat *c, chat_conv *cv) {
    bool tty = isatty(STDIN_FILENO);
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0, turn = 0;
    int rc = 0;
    for (;;) {
        if (tty) {
            fputs("> ", stderr);
            fflush(stderr);
        }
        errno = 0;
        ssize_t got = getline(&line, &cap, stdin);
        if (got < 0) {
            if (ferror(stdin)) {
                fprintf(stderr, "ctrain %s: error: reading stdin: %s\n", cmd, strerror(errno));
                rc = 2;
            } else if (tty) {
                fputc('\n', stderr);
            }
            break;
        }
        lineno++;
        size_t n = (size_t)got;
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
        if (n == 0) continue;
        size_t bad = ct_utf8_valid_prefix(line, n), nul = strnlen(line, n);
        if (bad < n || nul < n) {
            fprintf(stderr, "ctrain %s: error: stdin line %ld: %s at byte offset %zu\n", cmd, lineno,
                    nul < bad ? "a NUL byte" : "invalid UTF-8", nul < bad ? nul : bad);
            if (tty) continue; /* a terminal user may type the line again */
            rc = 2;
            break;
        }
        turn++;
        int dropped = 0;
        size_t reused = 0;
        chat_stop stop = CHAT_STOP_EOS;
        if (conv_push(cv, "user", line, n) || chat_fit(c, cv, &dropped)) {
            ct_error_prefix("turn %ld (stdin line %ld)", turn, lineno);
            rc = cli_fail(cmd);
            break;
        }
        if (dropped)
            fprintf(stderr, "ctrain %s: the conversation outgrew the context (n_ctx %d): dropped its "
                    "oldest %d exchange%s\n", cmd, c->n_ctx, dropped, dropped == 1 ? "" : "s");
        if (chat_prefill(c, &reused) || chat_generate(c, &stop)) {
            if (!c->json) printf("\n");
            rc = cli_fail(cmd);
            break;
        }
        size_t reply_len = 0;
        char *reply = chat_clean(c->text ? c->text : "", c->len, &reply_len);
        if (!reply || conv_push(cv, "assistant", reply, reply_len)) {
            free(reply);
            fprintf(stderr, "ctrain %s: error: out of memory\n", cmd);
            rc = 2;
            break;
        }
        chat_finish(c, turn, reply, reply_len, reused, stop);
        free(reply);
        if (stop == CHAT_STOP_N_CTX)
            fprintf(stderr, "ctrain %s: turn %ld: the reply filled the context (n_ctx %d)\n", cmd, turn,
                    c->n_ctx);
        if (ferror(stdout)) {
            fprintf(stderr, "ctrain %s: error: writing stdout: %s\n", cmd, strerror(errno));
            rc = 2;
            break;
        }
    }
    free(line);
    return rc;
}

/* ------------------------------------------------------------ --prompts FILE */

/* role as the conversation's static string; NULL for another. */
static const char *chat_role(const char *r) {
    static const char *const roles[] = {"system", "user", "assistant"};
    for (size_t i = 0; i < sizeof roles / sizeof *roles; i++)
        if (!strcmp(r, roles[i])) return roles[i];
    return NULL;
}

/* The messages of JSONL value v (an array of {"role", "content"}, an object
 * with such "messages", or a string: one user message) appended to cv.
 * CT_ERR_ARG naming what is wrong (the caller names the line). */
static ct_status chat_conv_from_json(chat_conv *cv, const cJSON *v) {
    if (cJSON_IsString(v)) {
        size_t n = strlen(v->valuestring);
        if (ct_utf8_valid_prefix(v->valuestring, n) < n)
            return CT_ERR(CT_ERR_ARG, "the message is not valid UTF-8");
        return conv_push(cv, "user", v->valuestring, n);
    }
    const cJSON *msgs = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "messages") : v;
    if (!cJSON_IsArray(msgs) || !cJSON_GetArraySize(msgs))
        return CT_ERR(CT_ERR_ARG, "expected a conversation: a list of {\"role\", \"content\"} "
                      "messages, an object with \"messages\", or a string");
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(m, "content");
        const char *role = cJSON_IsString(r) ? chat_role(r->valuestring) : NULL;
        if (!role || !cJSON_IsString(t))
            return CT_ERR(CT_ERR_ARG, "message %d: expected {\"role\": \"system\" | \"user\" | "
                          "\"assistant\", \"content\": a string}", i + 1);
        if (ct_utf8_valid_prefix(t->valuestring, strlen(t->valuestring)) < strlen(t->valuestring))
            return CT_ERR(CT_ERR_ARG, "message %d: its content is not valid UTF-8", i + 1);
        ct_status st = conv_push(cv, role, t->valuestring, strlen(t->valuestring));
        if (st) return st;
        i++;
    }
    return CT_OK;
}

/* One conversation of --prompts: cv answered with one reply (number k). */
static ct_status chat_answer(chat *c, chat_conv *cv, long k, long seed) {
    int dropped = 0;
    size_t reused = 0;
    chat_stop stop = CHAT_STOP_EOS;
    ct_rng_init(&c->rng, (uint64_t)seed); /* each conversation as if alone */
    ct_status st = chat_fit(c, cv, &dropped);
    if (!st && dropped)
        fprintf(stderr, "ctrain chat: conversation %ld outgrew the context (n_ctx %d): dropped its "
                "oldest %d exchange%s\n", k, c->n_ctx, dropped, dropped == 1 ? "" : "s");
    if (!st) st = chat_prefill(c, &reused);
    if (!st) st = chat_generate(c, &stop);
    if (st) {
        if (!c->json) printf("\n");
        return st;
    }
    size_t reply_len = 0;
    char *reply = chat_clean(c->text ? c->text : "", c->len, &reply_len);
    if (!reply) return CT_ERR(CT_ERR_OOM, "out of memory for the reply");
    chat_finish(c, k, reply, reply_len, reused, stop);
    free(reply);
    return CT_OK;
}

/* --prompts FILE: each line one conversation of its own, answered with one
 * reply (in order, one output line each): FILE.jsonl / .ndjson holds a JSON
 * conversation per line (blank lines skipped), any other file a user message
 * per line. --system goes first when a conversation has no system message.
 * 0, or 2 after printing the error. */
static int chat_prompts(const char *cmd, chat *c, const chat_args *a) {
    char *text = NULL;
    size_t len = 0;
    if (ct_file_read_all(a->prompts, &text, &len)) {
        ct_error_prefix("--prompts");
        return cli_fail(cmd);
    }
    size_t fl = strlen(a->prompts);
    bool jsonl = (fl > 6 && !strcmp(a->prompts + fl - 6, ".jsonl")) ||
                 (fl > 7 && !strcmp(a->prompts + fl - 7, ".ndjson"));
    char *p = text, *end = text + len;
    long k = 0;
    int rc = 0;
    for (long line = 1; p < end && !rc; line++) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *e = nl ? nl : end;
        if (e > p && e[-1] == '\r') e--;
        *e = '\0';
        char *at = p;
        p = nl ? nl + 1 : end;
        if (at[strspn(at, " \t")] == '\0') continue;
        chat_conv cv = {0};
        ct_status st = CT_OK;
        if (jsonl) {
            cJSON *v = cJSON_Parse(at);
            st = v ? chat_conv_from_json(&cv, v) : CT_ERR(CT_ERR_ARG, "not JSON");
            cJSON_Delete(v);
        } else {
            size_t bad = ct_utf8_valid_prefix(at, strlen(at));
            st = bad < strlen(at) ? CT_ERR(CT_ERR_ARG, "invalid UTF-8 at byte offset %zu", bad)
                                  : conv_push(&cv, "user", at, strlen(at));
        }
        if (!st && a->system && strcmp(cv.msg[0].role, "system") != 0) {
            st = conv_push(&cv, "system", a->system, strlen(a->system));
            if (!st) { /* it goes first */
                ct_chat_msg sys = cv.msg[cv.n - 1];
                memmove(cv.msg + 1, cv.msg, (cv.n - 1) * sizeof *cv.msg);
                cv.msg[0] = sys;
            }
        }
        if (st) {
            ct_error_prefix("--prompts %s line %ld", a->prompts, line);
            rc = cli_fail(cmd);
        } else {
            cv.first = !strcmp(cv.msg[0].role, "system") ? 1 : 0;
            if ((st = chat_answer(c, &cv, ++k, a->seed))) {
                ct_error_prefix("--prompts %s line %ld", a->prompts, line);
                rc = cli_fail(cmd);
            } else if (ferror(stdout)) {
                fprintf(stderr, "ctrain %s: error: writing stdout: %s\n", cmd, strerror(errno));
                rc = 2;
            }
        }
        conv_free(&cv);
    }
    if (!rc && k == 0) rc = cli_usage_error(cmd, "--prompts %s holds no conversation", a->prompts);
    free(text);
    return rc;
}

int cmd_chat(int argc, char **argv) {
    const char *cmd = "chat";
    chat_args a;
    int rc = chat_parse(cmd, argc, argv, &a);
    if (rc) return rc == 1 ? 0 : rc;
    rc = 2;
    ct_ctx *ctx = NULL;
    ct_model *m = NULL;
    ct_tokenizer *tok = NULL;
    ct_chat_template *tpl = NULL;
    chat c = {0};
    chat_conv cv = {0};
    ct_eval_source *src = calloc(1, sizeof *src);
    if (!src) goto oom;

    ct_ctx_params cp = ct_ctx_params_default();
    cp.n_threads = (int)a.threads;
    if (cli_device_from_env(&cp) || ct_ctx_init(&ctx, &cp)) goto fail;
    /* the adapter is folded into its base: the KV-cache decoder runs plain weights */
    ct_eval_load_opts lo = {.base = a.adapter ? a.model : NULL, .merge = true};
    if (ct_eval_load(&m, ctx, a.adapter ? a.adapter : a.model, &lo, src)) {
        if (a.adapter) ct_error_prefix("--adapter %s", a.adapter);
        goto fail;
    }
    if (a.adapter && !src->adapter) {
        rc = cli_usage_error(cmd, "--adapter %s holds a full model (config.json), not a PEFT adapter "
                             "(adapter_config.json + adapter_model.safetensors)", a.adapter);
        goto done;
    }
    if (src->adapter)
        fprintf(stderr, "ctrain chat: LoRA adapter %s (r=%d, alpha=%g) merged in memory into %s%s\n",
                src->dir, src->lora.r, (double)src->lora.alpha, src->base[0] ? "the base " : "a base rebuilt from ",
                src->base[0] ? src->base : src->base_from);
    const ct_model_config *mc = ct_model_get_config(m);
    c.V = mc->vocab_size;
    c.n_ctx = mc->n_ctx;
    if (ct_tokenizer_load(&tok, src->tok_dir)) goto fail;
    if (ct_tokenizer_vocab_size(tok) > c.V) {
        fprintf(stderr, "ctrain chat: error: the tokenizer in %s has %d tokens, more than the model's "
                "vocab_size %d\n", src->tok_dir, ct_tokenizer_vocab_size(tok), c.V);
        goto done;
    }
    const char *model_dir = src->adapter ? (src->base[0] ? src->base : NULL) : src->dir;
    if (chat_load_template(&tpl, a.tpl_file, src->tok_dir, model_dir) || ct_chat_template_use_tokenizer(tpl, tok))
        goto fail;
    c.m = m;
    c.tok = tok;
    c.tpl = tpl;
    c.tok_V = ct_tokenizer_vocab_size(tok);
    c.max_new = a.max_new;
    c.sp = (cli_sample_params){a.temperature, (int)a.top_k, a.top_p, a.penalty};
    c.json = a.json;
    c.escape = !isatty(STDOUT_FILENO);
    ct_rng_init(&c.rng, (uint64_t)a.seed);
    if (!(c.ts = ct_tok_state_new(tok))) goto fail;
    if (!a.ignore_eos) chat_eos_ids(&c, model_dir);
    if (cli_sampler_init(&c.s, c.V)) goto fail;
    c.logits = malloc((size_t)c.V * sizeof *c.logits);
    c.cache = malloc((size_t)c.n_ctx * sizeof *c.cache);
    c.reply = malloc(((size_t)c.n_ctx + 1) * sizeof *c.reply);
    c.shown = malloc(((size_t)c.n_ctx + 1) * sizeof *c.shown);
    if (!c.logits || !c.cache || !c.reply || !c.shown) goto oom;
    if (ct_model_decode_reserve(m, c.n_ctx)) goto fail;
    if (a.system) {
        if (conv_push(&cv, "system", a.system, strlen(a.system))) goto fail;
        cv.first = 1;
    }
    rc = a.prompts ? chat_prompts(cmd, &c, &a) : chat_loop(cmd, &c, &cv);
    goto done;
oom:
    fprintf(stderr, "ctrain chat: error: out of memory\n");
    rc = 2;
    goto done;
fail:
    rc = cli_fail(cmd);
done:
    conv_free(&cv);
    free(c.text);
    free(c.reply);
    free(c.shown);
    free(c.cache);
    free(c.logits);
    ct_tokens_free(&c.prompt);
    cli_sampler_free(&c.s);
    ct_tok_state_free(c.ts);
    ct_chat_template_free(tpl);
    ct_tokenizer_free(tok);
    ct_model_free(m);
    ct_ctx_free(ctx);
    free(src);
    return rc;
}
