/*
 * `ctrain prepare --tokenizer DIR --out DIR [options] INPUT...`: raw text to
 * llm.c token shards with a manifest (the pipeline is data/prepare/prepare.c), or,
 * with --format sft, instruction data to shards with loss-mask sidecars
 * (data/prepare/sft_prepare.c). This file parses options and draws the progress line.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"
#include "data/prepare/prepare.h"
#include "data/shard/remote.h"
#include "data/prepare/sft_prepare.h"
#include "io/fileio.h"

static const char *cmd = "prepare";

static void prepare_usage(FILE *f) {
    fprintf(f,
            "usage: ctrain prepare --tokenizer DIR --out DIR [options] INPUT...\n"
            "\n"
            "Tokenise text into llm.c shards OUT/train_000000.bin ... and OUT/val_000000.bin,\n"
            "with OUT/manifest.json. Each document is preceded by <|endoftext|> (GPT-2) or\n"
            "by BOS <s> (SentencePiece-BPE, LLaMA). Shards hold uint16 tokens (version 1)\n"
            "when the vocabulary fits, else uint32 (version 2).\n"
            "\n"
            "INPUT: a text file, a directory (all files, recursively), a quoted glob, a\n"
            "       .jsonl file (one document per line), or - for stdin.\n"
            "\n"
            "options:\n"
            "  --tokenizer DIR      encoder.json + vocab.bpe, vocab.json + merges.txt or\n"
            "                       tokenizer.json (a model directory has them): GPT-2\n"
            "                       byte-level BPE or LLaMA's SentencePiece-BPE (required);\n"
            "                       its identity goes into manifest.json, and training\n"
            "                       checks it against the model's\n"
            "  --out DIR            output directory (required); or s3://bucket/prefix/ (an\n"
            "                       http(s) URL that takes PUT works too): prepared in a\n"
            "                       temporary directory ($TMPDIR), then uploaded, manifest last\n"
            "  --format F           auto | text | jsonl | sft (default auto: .jsonl/.ndjson are\n"
            "                       JSONL; sft: instruction data, see below)\n"
            "  --field NAME         JSONL field holding the text (default text)\n"
            "  --separator S        split text inputs into documents at S (escapes \\n \\t \\r\n"
            "                       \\\\); default: one document per file\n"
            "  --bad-lines fail|skip  bad JSONL lines fail the run (default) or are skipped\n"
            "  --lossy              encode invalid UTF-8 byte by byte instead of failing\n"
            "  --val-tokens N       the first documents, at least N tokens, become validation\n"
            "  --val-fraction F     about a fraction F of documents (by content hash) become\n"
            "                       validation\n"
            "  --shard-tokens N     at most N tokens per shard (default 100000000)\n"
            "  --threads N          tokeniser threads (default: all cores)\n"
            "  --cache DIR          tokenised-data cache (default $XDG_CACHE_HOME/ctrain/tokens,\n"
            "                       else ~/.cache/ctrain/tokens)\n"
            "  --cache-limit SIZE   disk cache limit (default 2GB; KB/MB/GB suffixes)\n"
            "  --cache-mem SIZE     memory cache limit (default 256MB)\n"
            "  --no-cache           no cache at all\n"
            "  --overwrite          replace shards already in --out\n"
            "  --quiet              no progress line\n"
            "\n"
            "--format sft: each JSONL line is one example, {\"prompt\", \"completion\"}, Alpaca's\n"
            "{\"instruction\", \"input\", \"output\"} (with the Alpaca prompt), or {\"messages\":\n"
            "[{\"role\", \"content\"}, ...]} (rendered with the model's chat template). Beside each\n"
            "shard, OUT/train_000000.sft holds where each example starts and the loss mask:\n"
            "completion and assistant tokens (and the EOS after each completion) count, the\n"
            "prompt, system and user turns and template markup do not. Options there:\n"
            "  --tokenizer, --out, --bad-lines, --val-fraction, --shard-tokens, --overwrite,\n"
            "  --quiet as above, and\n"
            "  --val-examples N     the first N examples become validation\n"
            "  --max-len N          at most N tokens per example (default: no limit)\n"
            "  --max-len-policy P   truncate (default: keep the first N tokens, the prompt\n"
            "                       first) | drop: what to do with a longer example\n"
            "  --chat-template FILE the template for messages instead of DIR's\n"
            "                       tokenizer_config.json: a .jinja file, or a JSON file with a\n"
            "                       chat_template\n");
}

/* "123", "64KB", "2GB" (powers of 1024) -> bytes; -1 when malformed. */
static int64_t parse_size(const char *s) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v >= 0)) return -1;
    while (*end == ' ') end++;
    double mul = 1;
    if (!strcasecmp(end, "KB") || !strcasecmp(end, "K")) mul = 1024.0;
    else if (!strcasecmp(end, "MB") || !strcasecmp(end, "M")) mul = 1024.0 * 1024;
    else if (!strcasecmp(end, "GB") || !strcasecmp(end, "G")) mul = 1024.0 * 1024 * 1024;
    else if (*end && strcasecmp(end, "B")) return -1;
    if (v * mul > 9e18) return -1;
    return (int64_t)(v * mul);
}

static bool parse_int(const char *s, int64_t lo, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo) return false;
    *out = v;
    return true;
}

/* Undo \n \t \r \\ escapes in place; returns the length. */
static size_t unescape(char *s) {
    size_t w = 0;
    for (size_t r = 0; s[r]; r++) {
        if (s[r] == '\\' && s[r + 1]) {
            char c = s[++r];
            s[w++] = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
        } else {
            s[w++] = s[r];
        }
    }
    s[w] = 0;
    return w;
}

typedef struct progress_state {
    bool tty, quiet;
    double last;
    int width;
} progress_state;

static void fmt_eta(char *buf, size_t cap, double s) {
    if (!isfinite(s) || s < 0) {
        snprintf(buf, cap, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

/* Whether a progress line is due at now: every 0.2 s on a terminal, 5 s in a
 * log, and at the end. */
static bool progress_due(progress_state *p, double now, int64_t done, int64_t total) {
    if (p->quiet) return false;
    if (done < total && now - p->last < (p->tty ? 0.2 : 5.0)) return false;
    p->last = now;
    return true;
}

/* One progress line: rewritten in place on a terminal, appended in a log. */
static void progress_print(progress_state *p, const char *line, int n) {
    if (p->tty) {
        fprintf(stderr, "\r%s%*s", line, p->width > n ? p->width - n : 0, "");
        p->width = n;
    } else {
        fprintf(stderr, "%s\n", line);
    }
    fflush(stderr);
}

static void on_progress(const ct_prepare_report *r, void *user) {
    progress_state *p = user;
    double now = r->seconds;
    if (!progress_due(p, now, r->bytes_done, r->bytes_total)) return;
    double mb = (double)r->bytes_done / 1e6, total = (double)r->bytes_total / 1e6;
    double rate = now > 0 ? mb / now : 0;
    char eta[32];
    fmt_eta(eta, sizeof eta, rate > 0 ? (total - mb) / rate : NAN);
    char line[256];
    int n = snprintf(line, sizeof line,
                     "prepare: %.1f/%.1f MB (%.0f%%), %.1f MB/s, %lld tokens, %lld documents, "
                     "ETA %s", mb, total, total > 0 ? 100.0 * mb / total : 100.0, rate,
                     (long long)r->tokens, (long long)r->documents, eta);
    progress_print(p, line, n);
}

static void on_sft_progress(const ct_sft_report *r, void *user) {
    progress_state *p = user;
    if (!progress_due(p, r->seconds, r->bytes_done, r->bytes_total)) return;
    double mb = (double)r->bytes_done / 1e6, total = (double)r->bytes_total / 1e6;
    char line[256];
    int n = snprintf(line, sizeof line,
                     "prepare: %.1f/%.1f MB (%.0f%%), %lld examples, %lld tokens (%lld counted), %lld bad "
                     "lines", mb, total, total > 0 ? 100.0 * mb / total : 100.0, (long long)r->examples,
                     (long long)r->tokens, (long long)r->counted_tokens, (long long)r->bad_lines);
    progress_print(p, line, n);
}

/* --out URL: a local staging directory to prepare into (stage[cap]). */
static bool remote_stage(char *stage, size_t cap) {
    const char *tmp = getenv("TMPDIR");
    snprintf(stage, cap, "%s/ctrain-prepare-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(stage)) return true;
    fprintf(stderr, "ctrain prepare: error: %s: cannot make a staging directory for the upload: %s\n", stage,
            strerror(errno));
    return false;
}

static ct_status remote_upload(const char *stage, const char *url, const char *shown, bool overwrite, bool quiet) {
    double t0 = ct_time_s();
    int64_t sent = 0;
    if (!quiet) fprintf(stderr, "ctrain prepare: uploading to %s\n", shown);
    ct_status st = ct_prepare_upload(stage, url, overwrite, NULL, &sent);
    if (st == CT_OK && !quiet)
        fprintf(stderr, "ctrain prepare: uploaded %.1f MB and the manifest in %.2f s\n", (double)sent / 1e6,
                ct_time_s() - t0);
    return st;
}

/* --format sft: instruction data (data/prepare/sft_prepare.h). */
static int prepare_sft(ct_sft_opts *so, bool quiet) {
    const char *remote_out = NULL;
    char stage[CT_PATH_MAX], shown[CT_PATH_MAX];
    if (ct_remote_is_url(so->out_dir)) {
        remote_out = so->out_dir;
        if (!remote_stage(stage, sizeof stage)) return 2;
        so->out_dir = stage;
        ct_remote_display(remote_out, shown, sizeof shown);
    }
    progress_state ps = {isatty(2) != 0, quiet, -1e9, 0};
    so->progress = on_sft_progress;
    so->user = &ps;
    ct_sft_report r;
    ct_status st = ct_sft_prepare_run(so, &r);
    if (ps.tty && !quiet && ps.width) fputc('\n', stderr);
    if (st == CT_OK && remote_out) {
        st = remote_upload(stage, remote_out, shown, so->overwrite, quiet);
        so->out_dir = shown;
    }
    if (remote_out) ct_remove_tree(stage);
    if (st) return cli_fail(cmd);
    double mbs = r.seconds > 0 ? (double)r.bytes_total / 1e6 / r.seconds : 0;
    fprintf(stderr,
            "ctrain prepare: %lld examples (%lld prompt/completion, %lld alpaca, %lld messages), %lld tokens, "
            "%lld counted -> %s: train %lld examples, %lld tokens in %d shard%s; val %lld examples, %lld tokens "
            "in %d shard%s; %.1f MB in %.2f s (%.1f MB/s)\n",
            (long long)r.examples, (long long)r.kind_examples[CT_SFT_KIND_PROMPT_COMPLETION],
            (long long)r.kind_examples[CT_SFT_KIND_ALPACA], (long long)r.kind_examples[CT_SFT_KIND_MESSAGES],
            (long long)r.tokens, (long long)r.counted_tokens, so->out_dir, (long long)r.train_examples,
            (long long)r.train_tokens, r.train_shards, r.train_shards == 1 ? "" : "s", (long long)r.val_examples,
            (long long)r.val_tokens, r.val_shards, r.val_shards == 1 ? "" : "s", (double)r.bytes_total / 1e6,
            r.seconds, mbs);
    fprintf(stderr, "ctrain prepare: truncated %lld, dropped %lld", (long long)r.truncated, (long long)r.dropped);
    if (so->max_len > 0)
        fprintf(stderr, " (--max-len %lld, %s)", (long long)so->max_len,
                so->max_len_policy == CT_SFT_LEN_DROP ? "drop" : "truncate");
    fprintf(stderr, "; skipped %lld bad line%s\n", (long long)r.bad_lines, r.bad_lines == 1 ? "" : "s");
    if (so->val_fraction > 0 && r.val_examples == 0)
        fprintf(stderr, "ctrain prepare: warning: --val-fraction %g put none of the %lld example%s "
                "into the validation split (chosen by a hash of each example): no val shard was "
                "written; give more examples, or --val-examples N\n", so->val_fraction,
                (long long)r.examples, r.examples == 1 ? "" : "s");
    return 0;
}

int cmd_prepare(int argc, char **argv) {
    ct_prepare_opts o;
    memset(&o, 0, sizeof o);
    ct_sft_opts so;
    memset(&so, 0, sizeof so);
    bool sft = false;
    const char *sft_only = NULL, *plain_only = NULL; /* an option of one mode, for the error */
    const char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
    if (!inputs) return cli_usage_error(cmd, "out of memory");
    bool no_cache = false, quiet = false;
    const char *cache_dir = NULL;
    int64_t cache_limit = 2LL << 30, cache_mem = 256LL << 20;
    char *sep = NULL;
    int rc = 2;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            prepare_usage(stdout);
            rc = 0;
            goto done;
        }
        if (!strcmp(a, "-") || a[0] != '-') {
            inputs[o.n_inputs++] = a;
            continue;
        }
        if (!strcmp(a, "--lossy")) {
            o.lossy = true;
            plain_only = a;
            continue;
        }
        if (!strcmp(a, "--no-cache")) {
            no_cache = true;
            continue;
        }
        if (!strcmp(a, "--overwrite")) {
            o.overwrite = true;
            continue;
        }
        if (!strcmp(a, "--quiet")) {
            quiet = true;
            continue;
        }
        if (i + 1 >= argc) {
            cli_usage_error(cmd, "option '%s' needs a value", a);
            goto done;
        }
        const char *v = argv[++i];
        int64_t x;
        if (!strcmp(a, "--tokenizer")) {
            o.tokenizer = v;
        } else if (!strcmp(a, "--out")) {
            o.out_dir = v;
        } else if (!strcmp(a, "--chat-template")) {
            so.chat_template = v;
            sft_only = a;
        } else if (!strcmp(a, "--max-len-policy")) {
            if (!strcmp(v, "truncate")) so.max_len_policy = CT_SFT_LEN_TRUNCATE;
            else if (!strcmp(v, "drop")) so.max_len_policy = CT_SFT_LEN_DROP;
            else {
                cli_usage_error(cmd, "--max-len-policy '%s': expected truncate or drop", v);
                goto done;
            }
            sft_only = a;
        } else if (!strcmp(a, "--max-len") || !strcmp(a, "--val-examples")) {
            bool ml = !strcmp(a, "--max-len");
            if (!parse_int(v, ml ? 1 : 0, &x) || x > 2147483647LL) {
                cli_usage_error(cmd, "%s '%s': expected an integer in %s..2147483647", a, v, ml ? "1" : "0");
                goto done;
            }
            if (ml) so.max_len = x;
            else so.val_examples = x;
            sft_only = a;
        } else if (!strcmp(a, "--field")) {
            plain_only = a;
            if (!*v) {
                cli_usage_error(cmd, "--field is empty: expected a JSON field name");
                goto done;
            }
            o.field = v;
        } else if (!strcmp(a, "--cache")) {
            cache_dir = v;
            plain_only = a;
        } else if (!strcmp(a, "--format")) {
            sft = false;
            if (!strcmp(v, "auto")) o.format = CT_PREP_FORMAT_AUTO;
            else if (!strcmp(v, "text")) o.format = CT_PREP_FORMAT_TEXT;
            else if (!strcmp(v, "jsonl")) o.format = CT_PREP_FORMAT_JSONL;
            else if (!strcmp(v, "sft")) sft = true;
            else {
                cli_usage_error(cmd, "--format '%s': expected auto, text, jsonl or sft", v);
                goto done;
            }
        } else if (!strcmp(a, "--bad-lines")) {
            if (!strcmp(v, "skip")) o.skip_bad_lines = true;
            else if (strcmp(v, "fail")) {
                cli_usage_error(cmd, "--bad-lines '%s': expected fail or skip", v);
                goto done;
            }
        } else if (!strcmp(a, "--separator")) {
            plain_only = a;
            free(sep);
            if (!(sep = strdup(v))) goto done;
            o.separator = sep;
            o.separator_len = unescape(sep);
            if (!o.separator_len) {
                cli_usage_error(cmd, "--separator is empty");
                goto done;
            }
        } else if (!strcmp(a, "--val-fraction")) {
            char *end;
            errno = 0;
            o.val_fraction = strtod(v, &end);
            if (errno || end == v || *end || !(o.val_fraction >= 0 && o.val_fraction < 1)) {
                cli_usage_error(cmd, "--val-fraction '%s': expected a fraction in [0, 1)", v);
                goto done;
            }
        } else if (!strcmp(a, "--val-tokens") || !strcmp(a, "--shard-tokens") ||
                   !strcmp(a, "--threads")) {
            bool shard = !strcmp(a, "--shard-tokens"), thr = !strcmp(a, "--threads");
            if (!parse_int(v, shard || thr ? 1 : 0, &x) || (shard && x > 2147483647LL) ||
                (thr && x > 1024)) {
                cli_usage_error(cmd, "%s '%s': expected %s", a, v,
                                shard ? "an integer in 1..2147483647"
                                : thr ? "an integer in 1..1024" : "an integer >= 0");
                goto done;
            }
            if (shard) o.shard_tokens = x;
            else if (thr) o.threads = (int)x;
            else o.val_tokens = x;
            if (!shard) plain_only = a;
        } else if (!strcmp(a, "--cache-limit") || !strcmp(a, "--cache-mem")) {
            if ((x = parse_size(v)) < 0) {
                cli_usage_error(cmd, "%s '%s': expected a size in bytes (KB/MB/GB suffixes)", a,
                                v);
                goto done;
            }
            if (!strcmp(a, "--cache-limit")) cache_limit = x;
            else cache_mem = x;
            plain_only = a;
        } else {
            cli_usage_error(cmd, "unknown option '%s'", a);
            goto done;
        }
    }
    if (!o.tokenizer) {
        cli_usage_error(cmd, "--tokenizer DIR is required");
        goto done;
    }
    if (!o.out_dir) {
        cli_usage_error(cmd, "--out DIR is required");
        goto done;
    }
    if (!o.n_inputs) {
        cli_usage_error(cmd, "no INPUT given: name files, directories, globs, or - for stdin");
        goto done;
    }
    o.inputs = inputs;
    if (!sft && sft_only) {
        cli_usage_error(cmd, "%s is for --format sft", sft_only);
        goto done;
    }
    if (sft && plain_only) {
        cli_usage_error(cmd, "%s does not apply to --format sft", plain_only);
        goto done;
    }
    if (sft) {
        so.tokenizer = o.tokenizer;
        so.out_dir = o.out_dir;
        so.inputs = inputs;
        so.n_inputs = o.n_inputs;
        so.skip_bad_lines = o.skip_bad_lines;
        so.val_fraction = o.val_fraction;
        so.shard_tokens = o.shard_tokens;
        so.overwrite = o.overwrite;
        rc = prepare_sft(&so, quiet);
        goto done;
    }

    char default_cache[CT_PATH_MAX];
    if (!no_cache && !cache_dir) {
        const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        if (xdg && *xdg) snprintf(default_cache, sizeof default_cache, "%s/ctrain/tokens", xdg);
        else if (home && *home)
            snprintf(default_cache, sizeof default_cache, "%s/.cache/ctrain/tokens", home);
        else default_cache[0] = 0;
        cache_dir = default_cache;
    }
    if (!no_cache) {
        o.cache_dir = cache_dir;
        o.cache_disk_limit = cache_limit;
        o.cache_mem_limit = cache_mem;
    }

    /* a URL: prepare in a staging directory, then upload it */
    const char *remote_out = NULL;
    char stage[CT_PATH_MAX], shown[CT_PATH_MAX];
    if (ct_remote_is_url(o.out_dir)) {
        remote_out = o.out_dir;
        if (!remote_stage(stage, sizeof stage)) goto done;
        o.out_dir = stage;
        ct_remote_display(remote_out, shown, sizeof shown);
    }

    progress_state ps = {isatty(2) != 0, quiet, -1e9, 0};
    o.progress = on_progress;
    o.user = &ps;
    ct_prepare_report r;
    ct_status st = ct_prepare_run(&o, &r);
    if (ps.tty && !quiet && ps.width) fputc('\n', stderr);
    if (st == CT_OK && remote_out) {
        st = remote_upload(stage, remote_out, shown, o.overwrite, quiet);
        o.out_dir = shown;
    }
    if (remote_out) ct_remove_tree(stage);
    if (st) {
        cli_fail(cmd);
        goto done;
    }
    double mbs = r.seconds > 0 ? (double)r.bytes_total / 1e6 / r.seconds : 0;
    fprintf(stderr,
            "ctrain prepare: %lld documents, %lld tokens -> %s: train %lld tokens in %d "
            "shard%s, val %lld tokens (%lld documents) in %d shard%s; %.1f MB in %.2f s "
            "(%.1f MB/s)\n",
            (long long)r.documents, (long long)r.tokens, o.out_dir, (long long)r.train_tokens,
            r.train_shards, r.train_shards == 1 ? "" : "s", (long long)r.val_tokens,
            (long long)r.val_documents, r.val_shards, r.val_shards == 1 ? "" : "s",
            (double)r.bytes_total / 1e6, r.seconds, mbs);
    fprintf(stderr, "ctrain prepare: tokenised %lld documents; %lld of %lld chunks from the cache",
            (long long)r.docs_tokenized, (long long)r.chunks_cached, (long long)r.chunks);
    if (r.bad_lines) fprintf(stderr, "; skipped %lld bad lines", (long long)r.bad_lines);
    fputc('\n', stderr);
    if (o.val_fraction > 0 && r.val_documents == 0)
        fprintf(stderr, "ctrain prepare: warning: --val-fraction %g put none of the %lld document%s "
                "into the validation split (a document goes whole to one split, chosen by a hash "
                "of its text): no val shard was written. Split the text into more documents "
                "(--separator '\\n\\n', one JSONL line each, or several files)\n", o.val_fraction,
                (long long)r.documents, r.documents == 1 ? "" : "s");
    if (!no_cache) {
        char line[256];
        ct_cache_format_stats(&r.cache, line, sizeof line);
        fprintf(stderr, "ctrain prepare: %s\n", line);
    }
    rc = 0;
done:
    free(sep);
    free(inputs);
    return rc;
}
