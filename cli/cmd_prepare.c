/*
 * `ctrain prepare --tokenizer DIR --out DIR [options] INPUT...`: raw text to
 * llm.c token shards with a manifest (the pipeline is data/prepare.c). This
 * file parses options and draws the progress line.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"
#include "data/prepare.h"
#include "data/remote.h"
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
            "  --format F           auto | text | jsonl (default auto: .jsonl/.ndjson are JSONL)\n"
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
            "  --quiet              no progress line\n");
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

static void on_progress(const ct_prepare_report *r, void *user) {
    progress_state *p = user;
    if (p->quiet) return;
    double now = r->seconds;
    if (!p->tty && now - p->last < 5.0 && r->bytes_done < r->bytes_total) return;
    if (p->tty && now - p->last < 0.2 && r->bytes_done < r->bytes_total) return;
    p->last = now;
    double mb = (double)r->bytes_done / 1e6, total = (double)r->bytes_total / 1e6;
    double rate = now > 0 ? mb / now : 0;
    char eta[32];
    fmt_eta(eta, sizeof eta, rate > 0 ? (total - mb) / rate : NAN);
    char line[256];
    int n = snprintf(line, sizeof line,
                     "prepare: %.1f/%.1f MB (%.0f%%), %.1f MB/s, %lld tokens, %lld documents, "
                     "ETA %s", mb, total, total > 0 ? 100.0 * mb / total : 100.0, rate,
                     (long long)r->tokens, (long long)r->documents, eta);
    if (p->tty) {
        fprintf(stderr, "\r%s%*s", line, p->width > n ? p->width - n : 0, "");
        p->width = n;
    } else {
        fprintf(stderr, "%s\n", line);
    }
    fflush(stderr);
}

int cmd_prepare(int argc, char **argv) {
    ct_prepare_opts o;
    memset(&o, 0, sizeof o);
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
        } else if (!strcmp(a, "--field")) {
            if (!*v) {
                cli_usage_error(cmd, "--field is empty: expected a JSON field name");
                goto done;
            }
            o.field = v;
        } else if (!strcmp(a, "--cache")) {
            cache_dir = v;
        } else if (!strcmp(a, "--format")) {
            if (!strcmp(v, "auto")) o.format = CT_PREP_FORMAT_AUTO;
            else if (!strcmp(v, "text")) o.format = CT_PREP_FORMAT_TEXT;
            else if (!strcmp(v, "jsonl")) o.format = CT_PREP_FORMAT_JSONL;
            else {
                cli_usage_error(cmd, "--format '%s': expected auto, text or jsonl", v);
                goto done;
            }
        } else if (!strcmp(a, "--bad-lines")) {
            if (!strcmp(v, "skip")) o.skip_bad_lines = true;
            else if (strcmp(v, "fail")) {
                cli_usage_error(cmd, "--bad-lines '%s': expected fail or skip", v);
                goto done;
            }
        } else if (!strcmp(a, "--separator")) {
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
        } else if (!strcmp(a, "--cache-limit") || !strcmp(a, "--cache-mem")) {
            if ((x = parse_size(v)) < 0) {
                cli_usage_error(cmd, "%s '%s': expected a size in bytes (KB/MB/GB suffixes)", a,
                                v);
                goto done;
            }
            if (!strcmp(a, "--cache-limit")) cache_limit = x;
            else cache_mem = x;
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
        const char *tmp = getenv("TMPDIR");
        snprintf(stage, sizeof stage, "%s/ctrain-prepare-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(stage)) {
            fprintf(stderr, "ctrain prepare: error: %s: cannot make a staging directory for the "
                    "upload: %s\n", stage, strerror(errno));
            goto done;
        }
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
        double t0 = ct_time_s();
        int64_t sent = 0;
        if (!quiet) fprintf(stderr, "ctrain prepare: uploading to %s\n", shown);
        st = ct_prepare_upload(stage, remote_out, o.overwrite, NULL, &sent);
        if (st == CT_OK && !quiet)
            fprintf(stderr, "ctrain prepare: uploaded %.1f MB and the manifest in %.2f s\n",
                    (double)sent / 1e6, ct_time_s() - t0);
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
