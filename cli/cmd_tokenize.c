/*
 * `ctrain tokenize --tokenizer DIR`: text on stdin -> token ids on stdout,
 * space-separated on one line (no end-of-text token added; BOS only with
 * --bos). --decode turns ids back into text; --jsonl encodes one JSON string
 * per input line into one line of ids each (a batch mode for tests and
 * scripts). Any tokenizer ctrain reads: GPT-2 byte-level BPE,
 * SentencePiece-BPE (LLaMA), or a tokenizer.json read generically (Llama 3,
 * Qwen, SmolLM2, Gemma). --chat reads one conversation per line (a JSON
 * array of messages, or TRL's {"messages", "tools", "chat_template_kwargs"}),
 * renders it with the model's chat template (data/chat/chat_template.h) and
 * prints the ids of the text, its markup as the added tokens' ids; --render
 * prints the rendered text as one JSON string per line instead.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ctrain/data.h"
#include "data/chat/chat_template.h"

#include <cJSON.h>
#include <sys/stat.h>

static const char *cmd = "tokenize";

static void tokenize_usage(FILE *f) {
    fprintf(f, "usage: ctrain tokenize --tokenizer DIR [--allow-special] [--lossy] [--bos] [--jsonl | --decode] < input\n"
               "       ctrain tokenize --tokenizer DIR --chat [--generation-prompt] [--chat-template FILE] < conversations\n"
               "       ctrain tokenize [--tokenizer DIR] --render [--generation-prompt] [--chat-template FILE] < conversations\n"
               "  DIR holds encoder.json + vocab.bpe, vocab.json + merges.txt or tokenizer.json\n"
               "      (or is a tokenizer.json; the path of another of them means its directory):\n"
               "      GPT-2 byte-level BPE, SentencePiece-BPE with byte fallback (LLaMA's), or any\n"
               "      tokenizer.json of a BPE model (Llama 3, Qwen2.5/Qwen3, SmolLM2, Gemma 3)\n"
               "  --allow-special  the text <|endoftext|>, <s>, </s> (special tokens) becomes its id\n"
               "                   (added tokens that are not special always do, as in Hugging Face)\n"
               "  --lossy          encode invalid UTF-8 byte by byte instead of refusing it\n"
               "  --bos            start the ids (of each line, with --jsonl) with the BOS token\n"
               "                   (<s> for LLaMA, <|begin_of_text|> for Llama 3, <bos> for Gemma;\n"
               "                   <|endoftext|> for GPT-2 and Qwen, which have none); off by default\n"
               "  --jsonl          each input line is a JSON string; one line of ids per line\n"
               "  --decode         read whitespace-separated ids, write the text they stand for\n"
               "  --chat           each input line is a JSON array of messages ({\"role\", \"content\"}), or\n"
               "                   {\"messages\": [...], \"tools\": [...], \"chat_template_kwargs\": {...}} as TRL\n"
               "                   takes them (kwargs such as Qwen3's enable_thinking become template variables);\n"
               "                   render it with the model's chat template (DIR/chat_template.jinja or\n"
               "                   DIR/tokenizer_config.json) and print its ids, one line per conversation;\n"
               "                   the template's markup (<|im_start|>, </s>, ...) becomes its added tokens' ids\n"
               "  --render         as --chat, but print the rendered text as one JSON string per line\n"
               "  --generation-prompt  render with add_generation_prompt (the prompt for the\n"
               "                   assistant's next turn)\n"
               "  --chat-template FILE  the template to use instead of the model's: a .jinja file, or a\n"
               "                   JSON file with a chat_template; the special tokens (bos_token, eos_token,\n"
               "                   ...) come from FILE, then DIR's tokenizer_config.json and\n"
               "                   special_tokens_map.json, then the tokenizer in DIR itself\n");
}

/* All of stdin; owned (release with free). NULL on failure (message printed). */
static char *read_stdin(size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, stdin);
        if (n < cap) break;
        char *p = cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
        if (!p) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = p;
        cap *= 2;
    }
    if (!buf) {
        fprintf(stderr, "ctrain %s: error: out of memory reading stdin\n", cmd);
        return NULL;
    }
    if (ferror(stdin)) {
        fprintf(stderr, "ctrain %s: error: reading stdin: %s\n", cmd, strerror(errno));
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* Write ids as decimal, space-separated, then a newline. 0 or -1 (EOF/error). */
static int write_ids(const int32_t *ids, size_t n) {
    char buf[1 << 14];
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (o + 16 > sizeof buf) {
            if (fwrite(buf, 1, o, stdout) != o) return -1;
            o = 0;
        }
        if (i) buf[o++] = ' ';
        char tmp[12];
        int k = 0;
        uint32_t v = (uint32_t)ids[i];
        do tmp[k++] = (char)('0' + v % 10);
        while ((v /= 10) != 0);
        while (k) buf[o++] = tmp[--k];
    }
    buf[o++] = '\n';
    return fwrite(buf, 1, o, stdout) == o ? 0 : -1;
}

static int hex4(const char *p, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

/* Decode the JSON string s[0..n) (surrounding whitespace allowed) into out,
 * which has room for n bytes; NUL and astral characters included. Returns the
 * byte count, or -1 with *why set. */
static long json_string(const char *s, size_t n, char *out, const char **why) {
    size_t i = 0, o = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t')) i++;
    if (i >= n || s[i] != '"') {
        *why = "expected a JSON string";
        return -1;
    }
    for (i++;; i++) {
        if (i >= n) {
            *why = "unterminated string";
            return -1;
        }
        unsigned char c = (unsigned char)s[i];
        if (c == '"') break;
        if (c < 0x20) {
            *why = "raw control character in a string";
            return -1;
        }
        if (c != '\\') {
            out[o++] = (char)c;
            continue;
        }
        if (++i >= n) {
            *why = "unterminated escape";
            return -1;
        }
        const char *simple = strchr("\"\\/bfnrt", s[i]);
        if (simple && s[i]) {
            static const char to[] = "\"\\/\b\f\n\r\t";
            out[o++] = to[simple - "\"\\/bfnrt"];
            continue;
        }
        uint32_t cp, lo;
        if (s[i] != 'u' || i + 4 >= n || hex4(s + i + 1, &cp)) {
            *why = "bad escape";
            return -1;
        }
        i += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (i + 6 >= n || s[i + 1] != '\\' || s[i + 2] != 'u' || hex4(s + i + 3, &lo) || lo < 0xDC00 ||
                lo > 0xDFFF) {
                *why = "unpaired surrogate escape";
                return -1;
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            i += 6;
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            *why = "unpaired surrogate escape";
            return -1;
        }
        /* an escape is at least 6 input bytes and at most 4 output bytes per code unit */
        if (cp < 0x80) {
            out[o++] = (char)cp;
        } else if (cp < 0x800) {
            out[o++] = (char)(0xC0 | cp >> 6);
            out[o++] = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out[o++] = (char)(0xE0 | cp >> 12);
            out[o++] = (char)(0x80 | (cp >> 6 & 0x3F));
            out[o++] = (char)(0x80 | (cp & 0x3F));
        } else {
            out[o++] = (char)(0xF0 | cp >> 18);
            out[o++] = (char)(0x80 | (cp >> 12 & 0x3F));
            out[o++] = (char)(0x80 | (cp >> 6 & 0x3F));
            out[o++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    for (i++; i < n; i++) {
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') {
            *why = "text after the string";
            return -1;
        }
    }
    return (long)o;
}

static int tokenize_decode(const ct_tokenizer *tok, char *in, size_t len) {
    ct_tokens ids = {0};
    size_t i = 0, count = 0;
    int rc = 0;
    while (i < len && !rc) {
        while (i < len && (in[i] == ' ' || in[i] == '\n' || in[i] == '\t' || in[i] == '\r')) i++;
        if (i >= len) break;
        size_t j = i;
        while (j < len && !(in[j] == ' ' || in[j] == '\n' || in[j] == '\t' || in[j] == '\r')) j++;
        long long v = -1;
        if (j - i <= 10) {
            char num[12];
            memcpy(num, in + i, j - i);
            num[j - i] = '\0';
            char *end;
            errno = 0;
            v = strtoll(num, &end, 10);
            if (errno || *end || end == num || num[0] == '+' || num[0] == '-') v = -1;
        }
        if (v < 0 || v > INT32_MAX) {
            rc = cli_usage_error(cmd, "stdin: token %zu ('%.*s'): expected a non-negative integer id", count,
                                 (int)(j - i > 40 ? 40 : j - i), in + i);
        } else if (ct_tokens_push(&ids, (int32_t)v)) {
            rc = cli_fail(cmd);
        }
        count++;
        i = j;
    }
    char *text = NULL;
    size_t n = 0;
    if (!rc && ct_tokenizer_decode(tok, ids.ids, ids.n, &text, &n)) {
        ct_error_prefix("stdin");
        rc = cli_fail(cmd);
    }
    if (!rc && (fwrite(text, 1, n, stdout) != n || fflush(stdout))) {
        fprintf(stderr, "ctrain %s: error: writing stdout: %s\n", cmd, strerror(errno));
        rc = 2;
    }
    free(text);
    ct_tokens_free(&ids);
    return rc;
}

/* Encode text[0..n) into ids (emptied first), after the BOS id when bos >= 0. */
static ct_status encode_one(const ct_tokenizer *tok, ct_tok_state *st, const char *text, size_t n, int flags,
                            int32_t bos, ct_tokens *ids) {
    ids->n = 0;
    ct_status s = bos >= 0 ? ct_tokens_push(ids, bos) : CT_OK;
    if (!s) s = ct_tokenizer_encode(tok, st, text, n, flags, ids);
    return s;
}

static int tokenize_jsonl(const ct_tokenizer *tok, ct_tok_state *st, char *in, size_t len, int flags, int32_t bos) {
    char *text = malloc(len + 1);
    ct_tokens ids = {0};
    int rc = 0;
    if (!text) {
        fprintf(stderr, "ctrain %s: error: out of memory\n", cmd);
        return 2;
    }
    size_t line = 0;
    for (size_t i = 0; i < len && !rc;) {
        char *nl = memchr(in + i, '\n', len - i);
        size_t e = nl ? (size_t)(nl - in) : len;
        line++;
        const char *why = NULL;
        long n = json_string(in + i, e - i, text, &why);
        if (n < 0) {
            rc = cli_usage_error(cmd, "stdin line %zu: %s (--jsonl wants one JSON string per line)", line, why);
            break;
        }
        if (encode_one(tok, st, text, (size_t)n, flags, bos, &ids)) {
            ct_error_prefix("stdin line %zu", line);
            rc = cli_fail(cmd);
        } else if (write_ids(ids.ids, ids.n)) {
            fprintf(stderr, "ctrain %s: error: writing stdout: %s\n", cmd, strerror(errno));
            rc = 2;
        }
        i = e + 1;
    }
    free(text);
    ct_tokens_free(&ids);
    return rc;
}

/* Write s[0..n) as a JSON string and a newline. 0 or -1. */
static int write_json_string(const char *s, size_t n) {
    char buf[1 << 14];
    size_t o = 0;
    buf[o++] = '"';
    for (size_t i = 0; i < n; i++) {
        if (o + 8 > sizeof buf) {
            if (fwrite(buf, 1, o, stdout) != o) return -1;
            o = 0;
        }
        unsigned char c = (unsigned char)s[i];
        const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                          : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
        if (esc) {
            memcpy(buf + o, esc, 2);
            o += 2;
        } else if (c < 0x20) {
            o += (size_t)snprintf(buf + o, 8, "\\u%04x", c);
        } else {
            buf[o++] = (char)c;
        }
    }
    buf[o++] = '"';
    buf[o++] = '\n';
    return fwrite(buf, 1, o, stdout) == o ? 0 : -1;
}

/* A NUL escape (\u0000) in a JSON text, which the JSON reader would cut the
 * string at: its offset, or n when none. */
static size_t json_nul_escape(const char *s, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] == 'u' && i + 5 < n && memcmp(s + i + 2, "0000", 4) == 0) return i;
        i++; /* the escaped character */
    }
    return n;
}

/* --chat / --render: one JSON array of messages per line. */
static int tokenize_chat(const ct_tokenizer *tok, ct_tok_state *st, const ct_chat_template *tpl, char *in, size_t len,
                         bool agp, bool render_only) {
    ct_tokens ids = {0};
    int rc = 0;
    size_t line = 0;
    for (size_t i = 0; i < len && !rc;) {
        char *nl = memchr(in + i, '\n', len - i);
        size_t e = nl ? (size_t)(nl - in) : len;
        line++;
        size_t n = e - i;
        if (n && in[i + n - 1] == '\r') n--;
        const char *text = in + i;
        i = e + 1;
        size_t bad = ct_utf8_valid_prefix(text, n), nul = json_nul_escape(text, n);
        if (bad < n) {
            rc = cli_usage_error(cmd, "stdin line %zu: invalid UTF-8 at byte offset %zu", line, bad);
            break;
        }
        if (nul < n) {
            rc = cli_usage_error(cmd, "stdin line %zu: a string holds \\u0000 (byte offset %zu), which chat templates "
                                 "do not take", line, nul);
            break;
        }
        const char *end = NULL;
        cJSON *msgs = cJSON_ParseWithLengthOpts(text, n, &end, false);
        size_t stop = end && end >= text && end <= text + n ? (size_t)(end - text) : 0;
        while (msgs && stop < n && (text[stop] == ' ' || text[stop] == '\t')) stop++;
        const cJSON *conv = NULL;
        cJSON *vars = NULL;
        if (!msgs || stop < n || (!cJSON_IsArray(msgs) && !cJSON_IsObject(msgs))) {
            if (!msgs || stop < n)
                rc = cli_usage_error(cmd, "stdin line %zu: not valid JSON (parsing stopped at byte offset %zu); --chat "
                                     "and --render want one JSON array of messages per line", line, stop);
            else
                rc = cli_usage_error(cmd, "stdin line %zu: expected a JSON array of messages ([{\"role\": ..., "
                                     "\"content\": ...}, ...]) or an object with \"messages\"", line);
            cJSON_Delete(msgs);
            break;
        }
        if (ct_chat_conv_vars(msgs, false, &conv, &vars)) {
            ct_error_prefix("stdin line %zu", line);
            rc = cli_fail(cmd);
            cJSON_Delete(msgs);
            break;
        }
        char *out = NULL;
        size_t out_n = 0;
        if (ct_chat_render_json(tpl, conv, vars, agp, &out, &out_n)) {
            ct_error_prefix("stdin line %zu", line);
            rc = cli_fail(cmd);
        } else if (render_only) {
            if (write_json_string(out, out_n)) rc = -1;
        } else {
            ids.n = 0;
            if (ct_tokenizer_encode(tok, st, out, out_n, CT_TOK_ADDED_TOKENS, &ids)) {
                ct_error_prefix("stdin line %zu", line);
                rc = cli_fail(cmd);
            } else if (write_ids(ids.ids, ids.n)) {
                rc = -1;
            }
        }
        if (rc < 0) {
            fprintf(stderr, "ctrain %s: error: writing stdout: %s\n", cmd, strerror(errno));
            rc = 2;
        }
        free(out);
        cJSON_Delete(vars);
        cJSON_Delete(msgs);
    }
    ct_tokens_free(&ids);
    return rc;
}

/* The directory a --tokenizer path stands for (itself, or the directory of a
 * file in it); owned. */
static char *tokenizer_dir(const char *path) {
    struct stat sb;
    size_t n = strlen(path);
    char *d = malloc(n + 2);
    if (!d) return NULL;
    memcpy(d, path, n + 1);
    if (stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
        char *slash = strrchr(d, '/');
        if (slash) *slash = '\0';
        else strcpy(d, ".");
    }
    return d;
}

static int tokenize_chat_main(const char *dir, const char *tpl_file, bool render_only, bool agp, int flags) {
    (void)flags;
    ct_tokenizer *tok = NULL;
    ct_tok_state *st = NULL;
    ct_chat_template *tpl = NULL;
    char *tdir = dir ? tokenizer_dir(dir) : NULL, *in = NULL;
    size_t len = 0;
    int rc = 0;
    if (dir && !tdir) {
        fprintf(stderr, "ctrain %s: error: out of memory\n", cmd);
        return 2;
    }
    if (!render_only && (ct_tokenizer_load(&tok, dir) || !(st = ct_tok_state_new(tok)))) rc = cli_fail(cmd);
    /* --render needs no tokenizer, but takes the special tokens of one that is there */
    if (!rc && render_only && dir && ct_tokenizer_load(&tok, dir)) ct_error_clear();
    if (!rc && (tpl_file ? ct_chat_template_load_file(&tpl, tpl_file, tdir) : ct_chat_template_load(&tpl, tdir)))
        rc = cli_fail(cmd);
    if (!rc && tok && ct_chat_template_use_tokenizer(tpl, tok)) rc = cli_fail(cmd);
    if (!rc && !(in = read_stdin(&len))) rc = 2;
    if (!rc) rc = tokenize_chat(tok, st, tpl, in, len, agp, render_only);
    if (!rc && fflush(stdout)) {
        fprintf(stderr, "ctrain %s: error: writing stdout: %s\n", cmd, strerror(errno));
        rc = 2;
    }
    free(in);
    free(tdir);
    ct_chat_template_free(tpl);
    ct_tok_state_free(st);
    ct_tokenizer_free(tok);
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    const char *dir = NULL, *tpl_file = NULL;
    bool decode = false, jsonl = false, bos = false, chat = false, render = false, agp = false;
    int flags = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tokenize_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--tokenizer")) {
            if (i + 1 >= argc) return cli_usage_error(cmd, "option '--tokenizer' needs a value");
            dir = argv[++i];
        } else if (!strcmp(a, "--allow-special")) {
            flags |= CT_TOK_ALLOW_SPECIAL;
        } else if (!strcmp(a, "--lossy")) {
            flags |= CT_TOK_LOSSY;
        } else if (!strcmp(a, "--bos")) {
            bos = true;
        } else if (!strcmp(a, "--decode")) {
            decode = true;
        } else if (!strcmp(a, "--jsonl")) {
            jsonl = true;
        } else if (!strcmp(a, "--chat")) {
            chat = true;
        } else if (!strcmp(a, "--render")) {
            render = true;
        } else if (!strcmp(a, "--generation-prompt")) {
            agp = true;
        } else if (!strcmp(a, "--chat-template")) {
            if (i + 1 >= argc) return cli_usage_error(cmd, "option '--chat-template' needs a file");
            tpl_file = argv[++i];
        } else {
            return cli_usage_error(cmd, "unknown option '%s'", a);
        }
    }
    if (chat && render) return cli_usage_error(cmd, "--chat and --render do not go together (--render prints the text, --chat its ids)");
    if ((chat || render) && (decode || jsonl))
        return cli_usage_error(cmd, "--%s does not go with --%s", chat ? "chat" : "render", decode ? "decode" : "jsonl");
    if ((chat || render) && bos)
        return cli_usage_error(cmd, "--bos does not go with --%s: the chat template puts BOS where the model expects it",
                               chat ? "chat" : "render");
    if (!chat && !render && (agp || tpl_file))
        return cli_usage_error(cmd, "%s is for --chat and --render", agp ? "--generation-prompt" : "--chat-template");
    if (render && !dir && !tpl_file)
        return cli_usage_error(cmd, "--render needs --tokenizer DIR (the model's chat template) or --chat-template FILE");
    if (render) return tokenize_chat_main(dir, tpl_file, true, agp, flags);
    if (!dir) return cli_usage_error(cmd, "--tokenizer DIR is required");
    if (chat) return tokenize_chat_main(dir, tpl_file, false, agp, flags);
    if (decode && jsonl) return cli_usage_error(cmd, "--decode and --jsonl do not go together");
    if (decode && bos) return cli_usage_error(cmd, "--bos is for encoding; --decode takes the ids as they are");
    ct_tokenizer *tok = NULL;
    if (ct_tokenizer_load(&tok, dir)) return cli_fail(cmd);
    int32_t bos_id = bos ? ct_tokenizer_bos(tok) : -1;
    if (bos && bos_id < 0) {
        fprintf(stderr, "ctrain %s: error: --bos: the tokenizer %s has no BOS token\n", cmd, dir);
        ct_tokenizer_free(tok);
        return 2;
    }
    size_t len = 0;
    char *in = read_stdin(&len);
    if (!in) {
        ct_tokenizer_free(tok);
        return 2;
    }
    int rc = 0;
    ct_tok_state *st = NULL;
    if (decode) {
        rc = tokenize_decode(tok, in, len);
    } else if (!(st = ct_tok_state_new(tok))) {
        rc = cli_fail(cmd);
    } else if (jsonl) {
        rc = tokenize_jsonl(tok, st, in, len, flags, bos_id);
    } else {
        ct_tokens ids = {0};
        if (encode_one(tok, st, in, len, flags, bos_id, &ids)) {
            ct_error_prefix("stdin");
            rc = cli_fail(cmd);
        } else if (write_ids(ids.ids, ids.n)) {
            fprintf(stderr, "ctrain %s: error: writing stdout: %s\n", cmd, strerror(errno));
            rc = 2;
        }
        ct_tokens_free(&ids);
    }
    if (!rc && fflush(stdout)) {
        fprintf(stderr, "ctrain %s: error: writing stdout: %s\n", cmd, strerror(errno));
        rc = 2;
    }
    ct_tok_state_free(st);
    ct_tokenizer_free(tok);
    free(in);
    return rc;
}
