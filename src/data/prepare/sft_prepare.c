/*
 * `ctrain prepare --format sft` (data/prepare/sft_prepare.h): read the JSONL inputs
 * line by line, turn each line into an example (sft_example.c), apply the
 * length limit, route it to train or validation, and append it whole to the
 * split's current shard and sidecar in a staging directory; publish shards,
 * sidecars and the manifest only when all went well.
 *
 * Output in OUT:
 *   train_NNNNNN.bin, val_NNNNNN.bin   llm.c token shards (data/shard/shard.c)
 *   train_NNNNNN.sft, val_NNNNNN.sft   example offsets + loss mask per shard
 *                                      (data/shard/sft_shard.c gives the layout)
 *   manifest.json, written last:
 *     {"format": "ctrain-sft/1", "created_by",
 *      "tokenizer": {as plain prepare: path, abs_path, files, identity,
 *                    vocab_size, kind, eot, bos, document_token},
 *      "options": {"format": "sft", "bad_lines", "val_examples",
 *                  "val_fraction", "max_len" (null: none), "max_len_policy",
 *                  "shard_tokens", "chat_template" (its name, or null),
 *                  "bos" (starts prompt/completion examples), "eos" (ends
 *                  their completions), "mask": "target-overlap"},
 *      "chat_template": {"name", "template", "special_tokens": {"bos_token",
 *                  ...}} (ct_chat_template_record; only when a template was
 *                  loaded: --chat-template, or a messages line read the
 *                  tokenizer directory's),
 *      "sources": [{"path", "format": "jsonl", "bytes", "xxh3_128",
 *                   "examples", "tokens", "counted_tokens", "bad_lines",
 *                   "truncated", "dropped"}],
 *      "shards": [{"file", "split", "tokens", "version", "examples",
 *                  "counted_tokens", "bytes", "xxh3_128", "block_bytes",
 *                  "blocks" (what remote reads check),
 *                  "sidecar": {"file", "bytes", "xxh3_128"}}],
 *      "totals": {"examples", "tokens", "counted_tokens", "train_examples",
 *                 "train_tokens", "val_examples", "val_tokens", "truncated",
 *                 "dropped", "bad_lines",
 *                 "kinds": {"prompt_completion" | "alpaca" | "messages":
 *                           {"examples", "tokens", "counted_tokens",
 *                            "truncated", "dropped"}}}}
 * Counts: examples and tokens are those written; truncated examples are
 * among them, dropped ones are not; a truncated example with no counted
 * token left is counted as dropped only.
 */
#include "data/prepare/sft_prepare.h"

#include <cJSON.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "ctrain/config.h"
#include "data/chat/chat_template.h"
#include "data/prepare/prepare_impl.h"
#include "data/shard/sft_shard.h"
#include "data/shard/shard.h"
#include "data/shard/shard_remote.h"
#include "io/fileio.h"

#define SFT_BAD_KEEP 10           /* bad lines listed in messages, per file */
#define SFT_DEFAULT_SHARD 100000000
#define SFT_PROGRESS_EVERY 4096   /* lines between progress calls */

typedef struct sft_shard_info {
    char file[32], side[32];
    int64_t tokens, examples, counted;
} sft_shard_info;

/* The shards and sidecars of one split, written into the staging directory. */
typedef struct sft_split {
    const char *name; /* "train" or "val" */
    const char *stage;
    int64_t shard_tokens;
    int version;
    ct_shard_writer *w;
    ct_sft_writer *sw;
    sft_shard_info *shards;
    int n, cap;
    int64_t examples, tokens;
} sft_split;

/* What one kind of example (or one source) added up to. */
typedef struct sft_counts {
    int64_t examples, tokens, counted, truncated, dropped, bad;
} sft_counts;

typedef struct sft_run {
    const ct_sft_opts *o;
    ct_prepare_opts po;  /* the inputs as prepare_src.c lists them */
    ct_sft_encoder *enc;
    prep_source *src;
    int n_src;
    sft_counts *per_src; /* [n_src] */
    sft_counts kinds[CT_SFT_KIND_COUNT];
    char *stage;
    sft_split train, val;
    ct_sft_report rep;
    double t0;
} sft_run;

/* ------------------------------------------------------------ writers */

static ct_status split_close(sft_split *sp) {
    if (!sp->w) return CT_OK;
    ct_status st = ct_shard_writer_commit(sp->w);
    sp->w = NULL;
    ct_status st2 = st ? CT_OK : ct_sft_writer_commit(sp->sw);
    if (st) ct_sft_writer_abort(sp->sw);
    sp->sw = NULL;
    return st ? st : st2;
}

static ct_status split_open(sft_split *sp) {
    if (sp->n == sp->cap) {
        int cap = sp->cap ? 2 * sp->cap : 8;
        sft_shard_info *v = realloc(sp->shards, (size_t)cap * sizeof *v);
        if (!v) return CT_ERR(CT_ERR_OOM, "out of memory");
        sp->shards = v;
        sp->cap = cap;
    }
    sft_shard_info *si = &sp->shards[sp->n];
    memset(si, 0, sizeof *si);
    snprintf(si->file, sizeof si->file, "%s_%06d.bin", sp->name, sp->n);
    snprintf(si->side, sizeof si->side, "%s_%06d.sft", sp->name, sp->n);
    char path[CT_PATH_MAX + 48];
    snprintf(path, sizeof path, "%s/%s", sp->stage, si->file);
    ct_status st = ct_shard_writer_open(&sp->w, path, sp->version);
    if (st) return st;
    snprintf(path, sizeof path, "%s/%s", sp->stage, si->side);
    if ((st = ct_sft_writer_open(&sp->sw, path))) {
        ct_shard_writer_abort(sp->w);
        sp->w = NULL;
        return st;
    }
    sp->n++;
    return CT_OK;
}

/* Append one example whole: a new shard starts when it would not fit. */
static ct_status split_append(sft_split *sp, const int32_t *ids, const uint8_t *mask, int64_t n) {
    ct_status st;
    if (sp->w && sp->shards[sp->n - 1].tokens + n > sp->shard_tokens && (st = split_close(sp))) return st;
    if (!sp->w && (st = split_open(sp))) return st;
    sft_shard_info *si = &sp->shards[sp->n - 1];
    if ((st = ct_shard_writer_append(sp->w, (const uint32_t *)ids, n)) || (st = ct_sft_writer_add(sp->sw, mask, n)))
        return st;
    si->tokens += n;
    si->examples++;
    si->counted = ct_sft_writer_counted(sp->sw);
    sp->examples++;
    sp->tokens += n;
    return CT_OK;
}

static void split_free(sft_split *sp) {
    ct_shard_writer_abort(sp->w);
    ct_sft_writer_abort(sp->sw);
    free(sp->shards);
}

/* ------------------------------------------------------- staging, publish */

static ct_status split_publish(const sft_split *sp, const char *out) {
    ct_status st = CT_OK;
    for (int i = 0; i < sp->n && !st; i++)
        if (!(st = prep_out_move(sp->stage, out, sp->shards[i].file))) st = prep_out_move(sp->stage, out, sp->shards[i].side);
    return st;
}

/* ------------------------------------------------------------ manifest */

static void add_counts(cJSON *o, const sft_counts *c) {
    cJSON_AddNumberToObject(o, "examples", (double)c->examples);
    cJSON_AddNumberToObject(o, "tokens", (double)c->tokens);
    cJSON_AddNumberToObject(o, "counted_tokens", (double)c->counted);
    cJSON_AddNumberToObject(o, "truncated", (double)c->truncated);
    cJSON_AddNumberToObject(o, "dropped", (double)c->dropped);
}

/* The sidecar's entry: file, bytes, xxh3_128 (hex of the canonical form, as
 * ct_shard_hash_manifest writes a shard's). */
static ct_status sidecar_entry(cJSON *e, const char *dir, const char *file) {
    char path[CT_PATH_MAX + 48];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    char *data;
    size_t len;
    ct_status st = ct_file_read_all(path, &data, &len);
    if (st) return st;
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(data, len));
    free(data);
    char hex[33];
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", c.digest[i]);
    cJSON *s = cJSON_AddObjectToObject(e, "sidecar");
    if (!s || !cJSON_AddStringToObject(s, "file", file) || !cJSON_AddNumberToObject(s, "bytes", (double)len) ||
        !cJSON_AddStringToObject(s, "xxh3_128", hex))
        return CT_ERR(CT_ERR_OOM, "out of memory writing the manifest");
    return CT_OK;
}

static ct_status write_manifest(sft_run *r) {
    const ct_sft_opts *o = r->o;
    ct_status st = CT_ERR(CT_ERR_OOM, "out of memory writing the manifest");
    char *text = NULL;
    cJSON *m = cJSON_CreateObject();
    if (!m) return st;
    cJSON_AddStringToObject(m, "format", "ctrain-sft/1");
    cJSON_AddStringToObject(m, "created_by", "ctrain " CT_VERSION);
    const ct_tokenizer *tok = ct_sft_encoder_tokenizer(r->enc);
    cJSON *tk = prep_manifest_tokenizer(m, tok, o->tokenizer, ct_tokenizer_bos(tok));
    cJSON *op = cJSON_AddObjectToObject(m, "options");
    if (op) {
        cJSON_AddStringToObject(op, "format", "sft");
        cJSON_AddStringToObject(op, "bad_lines", o->skip_bad_lines ? "skip" : "fail");
        cJSON_AddNumberToObject(op, "val_examples", (double)o->val_examples);
        cJSON_AddNumberToObject(op, "val_fraction", o->val_fraction);
        if (o->max_len > 0) cJSON_AddNumberToObject(op, "max_len", (double)o->max_len);
        else cJSON_AddNullToObject(op, "max_len");
        cJSON_AddStringToObject(op, "max_len_policy", o->max_len_policy == CT_SFT_LEN_DROP ? "drop" : "truncate");
        cJSON_AddNumberToObject(op, "shard_tokens", (double)r->train.shard_tokens);
        const char *tn = ct_sft_encoder_template(r->enc);
        if (tn) cJSON_AddStringToObject(op, "chat_template", tn);
        else cJSON_AddNullToObject(op, "chat_template");
        cJSON_AddNumberToObject(op, "bos", ct_sft_encoder_bos(r->enc));
        cJSON_AddNumberToObject(op, "eos", ct_sft_encoder_eos(r->enc));
        cJSON_AddStringToObject(op, "mask", "target-overlap");
    }
    /* the template the conversations were rendered with: train writes it into the run */
    const ct_chat_template *tpl = ct_sft_encoder_chat_template(r->enc);
    if (tpl) {
        cJSON *rec = ct_chat_template_record(tpl);
        if (!rec || !cJSON_AddItemToObject(m, "chat_template", rec)) {
            cJSON_Delete(rec);
            goto fail;
        }
    }
    cJSON *srcs = cJSON_AddArrayToObject(m, "sources");
    for (int i = 0; srcs && i < r->n_src; i++) {
        const prep_source *s = &r->src[i];
        cJSON *e = cJSON_CreateObject();
        if (!e) goto fail;
        cJSON_AddItemToArray(srcs, e);
        cJSON_AddStringToObject(e, "path", s->path);
        cJSON_AddStringToObject(e, "format", "jsonl");
        cJSON_AddNumberToObject(e, "bytes", (double)s->size);
        cJSON_AddStringToObject(e, "xxh3_128", s->hash_hex);
        add_counts(e, &r->per_src[i]);
        cJSON_AddNumberToObject(e, "bad_lines", (double)r->per_src[i].bad);
    }
    cJSON *sh = cJSON_AddArrayToObject(m, "shards");
    const sft_split *sps[2] = {&r->train, &r->val};
    for (int k = 0; sh && k < 2; k++) {
        for (int i = 0; i < sps[k]->n; i++) {
            const sft_shard_info *si = &sps[k]->shards[i];
            cJSON *e = cJSON_CreateObject();
            if (!e) goto fail;
            cJSON_AddItemToArray(sh, e);
            cJSON_AddStringToObject(e, "file", si->file);
            cJSON_AddStringToObject(e, "split", sps[k]->name);
            cJSON_AddNumberToObject(e, "tokens", (double)si->tokens);
            cJSON_AddNumberToObject(e, "version", sps[k]->version);
            cJSON_AddNumberToObject(e, "examples", (double)si->examples);
            cJSON_AddNumberToObject(e, "counted_tokens", (double)si->counted);
            char spath[CT_PATH_MAX + 300];
            snprintf(spath, sizeof spath, "%s/%s", o->out_dir, si->file);
            if ((st = ct_shard_hash_manifest(spath, e)) || (st = sidecar_entry(e, o->out_dir, si->side))) goto fail;
            st = CT_ERR(CT_ERR_OOM, "out of memory writing the manifest");
        }
    }
    cJSON *tot = cJSON_AddObjectToObject(m, "totals");
    cJSON *kinds = tot ? cJSON_CreateObject() : NULL;
    if (tot && kinds) {
        cJSON_AddNumberToObject(tot, "examples", (double)r->rep.examples);
        cJSON_AddNumberToObject(tot, "tokens", (double)r->rep.tokens);
        cJSON_AddNumberToObject(tot, "counted_tokens", (double)r->rep.counted_tokens);
        cJSON_AddNumberToObject(tot, "train_examples", (double)r->rep.train_examples);
        cJSON_AddNumberToObject(tot, "train_tokens", (double)r->rep.train_tokens);
        cJSON_AddNumberToObject(tot, "val_examples", (double)r->rep.val_examples);
        cJSON_AddNumberToObject(tot, "val_tokens", (double)r->rep.val_tokens);
        cJSON_AddNumberToObject(tot, "truncated", (double)r->rep.truncated);
        cJSON_AddNumberToObject(tot, "dropped", (double)r->rep.dropped);
        cJSON_AddNumberToObject(tot, "bad_lines", (double)r->rep.bad_lines);
        cJSON_AddItemToObject(tot, "kinds", kinds);
        for (int k = 0; k < CT_SFT_KIND_COUNT; k++) {
            cJSON *e = cJSON_AddObjectToObject(kinds, ct_sft_kind_name((ct_sft_kind)k));
            if (!e) goto fail;
            add_counts(e, &r->kinds[k]);
        }
    } else {
        cJSON_Delete(kinds);
    }
    if (!srcs || !sh || !tot || !tk || !op || !(text = cJSON_Print(m))) goto fail;
    char path[CT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/manifest.json", o->out_dir);
    size_t len = strlen(text);
    text[len] = '\n'; /* replaces the NUL; the write is by length */
    st = ct_file_write_atomic(path, text, len + 1);
fail:
    free(text);
    cJSON_Delete(m);
    return st;
}

/* ------------------------------------------------------------- lines */

static bool to_val(const sft_run *r, const prep_doc *d) {
    const ct_sft_opts *o = r->o;
    if (o->val_examples > 0) return r->rep.val_examples < o->val_examples;
    if (o->val_fraction > 0) return (double)(d->hash >> 11) * 0x1p-53 < o->val_fraction;
    return false;
}

static void report_progress(sft_run *r, int cur) {
    int64_t b = 0;
    for (int i = 0; i < cur && i < r->n_src; i++) b += r->src[i].size;
    if (cur < r->n_src) b += (int64_t)r->src[cur].cursor;
    r->rep.bytes_done = b;
    r->rep.seconds = ct_time_s() - r->t0;
    r->rep.train_shards = r->train.n;
    r->rep.val_shards = r->val.n;
    if (r->o->progress) r->o->progress(&r->rep, r->o->user);
}

/* The bad lines of one source, kept for the error of bad_lines = fail. */
typedef struct bad_list {
    char text[1024];
    size_t used;
} bad_list;

/* One example: limit, split, shards, counts. */
static ct_status take_example(sft_run *r, int si, const prep_doc *d, ct_sft_example *ex) {
    const ct_sft_opts *o = r->o;
    sft_counts *kc = &r->kinds[ex->kind], *sc = &r->per_src[si];
    int64_t n = (int64_t)ex->ids.n;
    bool cut = false;
    if (o->max_len > 0 && n > o->max_len) {
        n = o->max_len;
        bool any = false;
        for (int64_t k = 0; k < n && !any; k++) any = ex->mask[k];
        if (o->max_len_policy == CT_SFT_LEN_DROP || !any) {
            kc->dropped++;
            sc->dropped++;
            r->rep.dropped++;
            return CT_OK;
        }
        cut = true;
    }
    int64_t counted = 0;
    for (int64_t k = 0; k < n; k++) counted += ex->mask[k];
    bool val = to_val(r, d);
    ct_status st = split_append(val ? &r->val : &r->train, ex->ids.ids, ex->mask, n);
    if (st) return st;
    sft_counts add = {1, n, counted, cut, 0, 0};
    sft_counts *cs[2] = {kc, sc};
    for (int i = 0; i < 2; i++) {
        cs[i]->examples += add.examples;
        cs[i]->tokens += add.tokens;
        cs[i]->counted += add.counted;
        cs[i]->truncated += add.truncated;
    }
    r->rep.examples++;
    r->rep.tokens += n;
    r->rep.counted_tokens += counted;
    r->rep.truncated += cut;
    r->rep.kind_examples[ex->kind]++;
    if (val) {
        r->rep.val_examples++;
        r->rep.val_tokens += n;
    } else {
        r->rep.train_examples++;
        r->rep.train_tokens += n;
    }
    return CT_OK;
}

static ct_status run_source(sft_run *r, int si, ct_sft_example *ex) {
    prep_source *s = &r->src[si];
    ct_status st = prep_source_open(s);
    if (st) return st;
    bad_list bl = {.used = 0};
    bl.text[0] = 0;
    sft_counts *sc = &r->per_src[si];
    prep_doc d;
    int64_t lines = 0;
    while (prep_source_next(&r->po, s, si, &d)) {
        bool bad;
        char why[256];
        if ((st = ct_sft_encode_line(r->enc, d.raw, d.len, ex, &bad, why, sizeof why))) {
            ct_error_prefix("%s:%lld", s->path, (long long)d.line);
            return st;
        }
        if (bad) {
            sc->bad++;
            if (r->o->skip_bad_lines) {
                if (sc->bad <= SFT_BAD_KEEP)
                    ct_log(CT_LOG_WARN, "%s:%lld: skipped: %s", s->path, (long long)d.line, why);
                r->rep.bad_lines++;
            } else if (sc->bad <= SFT_BAD_KEEP && bl.used < sizeof bl.text) {
                bl.used += (size_t)snprintf(bl.text + bl.used, sizeof bl.text - bl.used, "%sline %lld: %s",
                                            sc->bad > 1 ? "; " : "", (long long)d.line, why);
            }
        } else if ((st = take_example(r, si, &d, ex))) {
            return st;
        }
        if (++lines % SFT_PROGRESS_EVERY == 0) report_progress(r, si);
    }
    if (sc->bad && !r->o->skip_bad_lines) {
        r->rep.bad_lines += sc->bad;
        st = CT_ERR(CT_ERR_FORMAT, "%s: %lld bad JSONL line%s (%s%s)", s->path, (long long)sc->bad,
                    sc->bad == 1 ? "" : "s", bl.text, sc->bad > SFT_BAD_KEEP ? "; ..." : "");
        ct_error_hint("fix those lines, or pass --bad-lines skip to leave them out");
        return st;
    }
    prep_source_close(s);
    report_progress(r, si + 1);
    return CT_OK;
}

/* ------------------------------------------------------------- the run */

static ct_status check_opts(const ct_sft_opts *o) {
    if (!o->out_dir || !o->out_dir[0])
        return CT_ERR(CT_ERR_ARG, "--out DIR is required: where the shards go");
    if (!o->tokenizer || !o->tokenizer[0])
        return CT_ERR(CT_ERR_ARG, "--tokenizer DIR is required (encoder.json + vocab.bpe, or "
                      "tokenizer.json: GPT-2 byte-level or SentencePiece-BPE)");
    if (o->val_examples < 0)
        return CT_ERR(CT_ERR_ARG, "--val-examples %lld: expected >= 0", (long long)o->val_examples);
    if (!(o->val_fraction >= 0 && o->val_fraction < 1))
        return CT_ERR(CT_ERR_ARG, "--val-fraction %g: expected a fraction in [0, 1)", o->val_fraction);
    if (o->val_examples > 0 && o->val_fraction > 0)
        return CT_ERR(CT_ERR_ARG, "--val-examples and --val-fraction both given: choose one");
    if (o->shard_tokens < 0 || o->shard_tokens > INT32_MAX)
        return CT_ERR(CT_ERR_ARG, "--shard-tokens %lld: expected 1..%d", (long long)o->shard_tokens, INT32_MAX);
    if (o->max_len < 0 || o->max_len > INT32_MAX)
        return CT_ERR(CT_ERR_ARG, "--max-len %lld: expected 1..%d", (long long)o->max_len, INT32_MAX);
    if (o->max_len_policy < 0 || o->max_len_policy >= CT_SFT_LEN_COUNT)
        return CT_ERR(CT_ERR_ARG, "bad --max-len-policy %d", (int)o->max_len_policy);
    if (strlen(o->out_dir) > CT_PATH_MAX - 64)
        return CT_ERR(CT_ERR_ARG, "%s: --out path too long", o->out_dir);
    return CT_OK;
}

ct_status ct_sft_prepare_run(const ct_sft_opts *o, ct_sft_report *rep) {
    sft_run r;
    memset(&r, 0, sizeof r);
    ct_sft_example ex = {0};
    bool created_out = false;
    r.o = o;
    r.t0 = ct_time_s();
    ct_status st;
    if ((st = check_opts(o))) goto done;
    if ((st = ct_sft_encoder_init(&r.enc, o->tokenizer, o->chat_template))) goto done;
    r.po.inputs = o->inputs;
    r.po.n_inputs = o->n_inputs;
    r.po.format = CT_PREP_FORMAT_JSONL; /* every input, stdin included */
    if ((st = prep_sources_list(&r.po, &r.src, &r.n_src, &r.rep.bytes_total))) goto done;
    if (!(r.per_src = calloc((size_t)r.n_src, sizeof *r.per_src))) {
        st = CT_ERR(CT_ERR_OOM, "out of memory");
        goto done;
    }
    if ((st = prep_out_check(o->out_dir, o->overwrite))) goto done;

    /* nothing is written before this point */
    if ((st = prep_out_stage(o->out_dir, &created_out, &r.stage))) goto done;
    const ct_tokenizer *tok = ct_sft_encoder_tokenizer(r.enc);
    int version = ct_tokenizer_vocab_size(tok) <= 65536 ? 1 : 2;
    int64_t shard_tokens = o->shard_tokens ? o->shard_tokens : SFT_DEFAULT_SHARD;
    r.train = (sft_split){.name = "train", .stage = r.stage, .shard_tokens = shard_tokens, .version = version};
    r.val = (sft_split){.name = "val", .stage = r.stage, .shard_tokens = shard_tokens, .version = version};

    for (int si = 0; si < r.n_src; si++)
        if ((st = run_source(&r, si, &ex))) goto done;
    if ((st = split_close(&r.train)) || (st = split_close(&r.val))) goto done;
    if (r.rep.examples == 0) {
        st = CT_ERR(CT_ERR_ARG, "no example to write: %lld bad line%s skipped, %lld example%s dropped by --max-len",
                    (long long)r.rep.bad_lines, r.rep.bad_lines == 1 ? "" : "s", (long long)r.rep.dropped,
                    r.rep.dropped == 1 ? "" : "s");
        goto done;
    }
    if (r.rep.train_examples == 0) {
        st = CT_ERR(CT_ERR_ARG, "all %lld examples went to the validation split, none to train",
                    (long long)r.rep.examples);
        ct_error_hint("lower --val-examples or --val-fraction");
        goto done;
    }

    /* publish: old outputs out (manifest first), new shards in, manifest last */
    prep_out_remove_outputs(o->out_dir);
    if ((st = split_publish(&r.train, o->out_dir)) || (st = split_publish(&r.val, o->out_dir))) goto done;
    st = write_manifest(&r);
    r.rep.seconds = ct_time_s() - r.t0;
    r.rep.train_shards = r.train.n;
    r.rep.val_shards = r.val.n;

done:
    if (rep) *rep = r.rep;
    ct_sft_example_free(&ex);
    split_free(&r.train);
    split_free(&r.val);
    if (r.stage) ct_remove_tree(r.stage);
    free(r.stage);
    if (st && created_out) rmdir(o->out_dir); /* leave no trace of a failed run */
    prep_sources_free(r.src, r.n_src);
    free(r.per_src);
    ct_sft_encoder_free(r.enc);
    return st;
}
