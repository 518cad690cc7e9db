/*
 * The `ctrain prepare` pipeline (see prepare.h): read sources in order, cut
 * them into documents and content-defined chunks, look each chunk up in the
 * tokenised-data cache, tokenise the misses on all cores, and append the
 * documents' tokens, in input order, to the train or validation shards in a
 * staging directory; publish shards and manifest only when all went well.
 */
#include "data/prepare/prepare.h"

#include <cJSON.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>
#ifdef CT_USE_OPENMP
#include <omp.h>
#endif

#include "ctrain/config.h"
#include "ctrain/data.h"
#include "data/prepare/prepare_impl.h"
#include "data/shard/shard_remote.h"
#include "data/shard/shard.h"
#include "io/fileio.h"

#define PREP_CHUNK_BYTES (1 << 20)   /* a chunk ends at 1 MB ... */
#define PREP_CHUNK_MASK 63u          /* ... or after a document whose hash & 63 == 0 */
#define PREP_BATCH_BYTES (32 << 20)  /* text tokenised per parallel round */
#define PREP_BATCH_DOCS (1 << 20)
#define PREP_BAD_KEEP 10             /* bad JSONL lines listed in messages */
#define PREP_DEFAULT_SHARD 100000000

typedef struct bad_line {
    int64_t line;
    char why[160];
} bad_line;

typedef struct prep_chunk {
    int first, n;       /* documents [first, first+n) of the batch */
    ct_cache_key key;
    ct_tokens toks;     /* the document token before each good document */
    bool cached;
    char refused[256];  /* why a cache entry for this chunk was refused; "" when none was */
    int64_t tokenized;  /* documents that went through the encoder */
    int n_bad;
    bad_line bad[PREP_BAD_KEEP];
    ct_status st;
    char err[768], hint[256];
} prep_chunk;

typedef struct shard_info {
    char file[32];
    int64_t tokens;
} shard_info;

/* Shards of one split, written into the staging directory. */
typedef struct split_writer {
    const char *name; /* "train" or "val" */
    const char *stage;
    int64_t shard_tokens;
    int version;
    ct_shard_writer *w;
    shard_info *shards;
    int n, cap;
} split_writer;

typedef struct prep_run {
    const ct_prepare_opts *o;
    ct_tokenizer *tok;
    int32_t doc;  /* the token before each document: <|endoftext|> (GPT-2), <s> (LLaMA) */
    ct_cache *cache;
    char ns[256]; /* cache namespace: tokenizer identity and how text is read */
    ct_tok_state **states;
    int threads;
    prep_source *src;
    int n_src;
    char *stage;
    split_writer train, val;
    /* the batch */
    prep_doc *docs;
    int n_docs, cap_docs;
    prep_chunk *chunks;
    int n_chunks, cap_chunks;
    ct_prepare_report rep;
    double t0;
} prep_run;

/* ------------------------------------------------------------ writers */

static ct_status writer_append(split_writer *sw, const int32_t *tok, int64_t n) {
    while (n > 0) {
        if (!sw->w) {
            if (sw->n == sw->cap) {
                int cap = sw->cap ? 2 * sw->cap : 8;
                shard_info *v = realloc(sw->shards, (size_t)cap * sizeof *v);
                if (!v) return CT_ERR(CT_ERR_OOM, "out of memory");
                sw->shards = v;
                sw->cap = cap;
            }
            shard_info *si = &sw->shards[sw->n];
            snprintf(si->file, sizeof si->file, "%s_%06d.bin", sw->name, sw->n);
            si->tokens = 0;
            char path[CT_PATH_MAX + 48];
            snprintf(path, sizeof path, "%s/%s", sw->stage, si->file);
            ct_status st = ct_shard_writer_open(&sw->w, path, sw->version);
            if (st) return st;
            sw->n++;
        }
        shard_info *si = &sw->shards[sw->n - 1];
        int64_t take = sw->shard_tokens - si->tokens;
        if (take > n) take = n;
        ct_status st = ct_shard_writer_append(sw->w, (const uint32_t *)tok, take);
        if (st) return st;
        si->tokens += take;
        tok += take;
        n -= take;
        if (si->tokens == sw->shard_tokens) {
            st = ct_shard_writer_commit(sw->w);
            sw->w = NULL;
            if (st) return st;
        }
    }
    return CT_OK;
}

static ct_status writer_finish(split_writer *sw) {
    if (!sw->w) return CT_OK;
    ct_status st = ct_shard_writer_commit(sw->w);
    sw->w = NULL;
    return st;
}

static void writer_free(split_writer *sw) {
    ct_shard_writer_abort(sw->w);
    free(sw->shards);
}

/* ------------------------------------------------------- staging, publish */

static ct_status move_shards(const split_writer *sw, const char *out) {
    ct_status st = CT_OK;
    for (int i = 0; i < sw->n && !st; i++) st = prep_out_move(sw->stage, out, sw->shards[i].file);
    return st;
}

static const char *format_name(ct_prep_format f) {
    return f == CT_PREP_FORMAT_JSONL ? "jsonl" : f == CT_PREP_FORMAT_TEXT ? "text" : "auto";
}

/* path made absolute against the working directory (into buf), or path
 * itself when it is absolute or the directory is unknown. */
static const char *prep_abs_path(char *buf, size_t cap, const char *path) {
    char cwd[CT_PATH_MAX];
    if (path[0] == '/' || !getcwd(cwd, sizeof cwd)) return path;
    while (path[0] == '.' && path[1] == '/') path += 2;
    if (!strcmp(path, ".")) snprintf(buf, cap, "%s", cwd);
    else snprintf(buf, cap, "%s/%s", cwd, path);
    return buf;
}

cJSON *prep_manifest_tokenizer(cJSON *m, const ct_tokenizer *tok, const char *path, int32_t doc) {
    cJSON *tk = cJSON_AddObjectToObject(m, "tokenizer");
    if (!tk) return NULL;
    cJSON_AddStringToObject(tk, "path", path);
    /* where a run finds the files again to put them beside its model */
    char abs[2 * CT_PATH_MAX];
    cJSON_AddStringToObject(tk, "abs_path", prep_abs_path(abs, sizeof abs, path));
    cJSON *files = cJSON_AddArrayToObject(tk, "files");
    for (int i = 0; files && i < ct_tokenizer_num_files(tok); i++) {
        const char *f = prep_abs_path(abs, sizeof abs, ct_tokenizer_file(tok, i, NULL));
        cJSON_AddItemToArray(files, cJSON_CreateString(f));
    }
    cJSON_AddStringToObject(tk, "identity", ct_tokenizer_identity(tok));
    cJSON_AddNumberToObject(tk, "vocab_size", ct_tokenizer_vocab_size(tok));
    /* the identity's kind: gpt2-bpe, spm-bpe, or hf-bpe / hf-spm (a tokenizer.json's pipeline) */
    const char *ident = ct_tokenizer_identity(tok), *colon = strchr(ident, ':');
    char kind[32];
    snprintf(kind, sizeof kind, "%.*s", colon ? (int)(colon - ident) : (int)strlen(ident), ident);
    cJSON_AddStringToObject(tk, "kind", kind);
    cJSON_AddNumberToObject(tk, "eot", ct_tokenizer_eot(tok));
    cJSON_AddNumberToObject(tk, "bos", ct_tokenizer_bos(tok));
    cJSON_AddNumberToObject(tk, "document_token", doc);
    return tk;
}

static ct_status write_manifest(prep_run *r) {
    const ct_prepare_opts *o = r->o;
    ct_status st = CT_ERR(CT_ERR_OOM, "out of memory writing the manifest");
    char *text = NULL;
    cJSON *m = cJSON_CreateObject();
    if (!m) return st;
    cJSON_AddStringToObject(m, "format", "ctrain-shards/1");
    cJSON_AddStringToObject(m, "created_by", "ctrain " CT_VERSION);
    cJSON *tk = prep_manifest_tokenizer(m, r->tok, o->tokenizer, r->doc);
    cJSON *op = cJSON_AddObjectToObject(m, "options");
    if (op) {
        cJSON_AddStringToObject(op, "format", format_name(o->format));
        cJSON_AddStringToObject(op, "field", o->field ? o->field : "text");
        if (o->separator) {
            char *sep = strndup(o->separator, o->separator_len);
            if (sep) cJSON_AddStringToObject(op, "separator", sep);
            free(sep);
        } else {
            cJSON_AddNullToObject(op, "separator");
        }
        cJSON_AddStringToObject(op, "bad_lines", o->skip_bad_lines ? "skip" : "fail");
        cJSON_AddNumberToObject(op, "val_tokens", (double)o->val_tokens);
        cJSON_AddNumberToObject(op, "val_fraction", o->val_fraction);
        cJSON_AddNumberToObject(op, "shard_tokens", (double)r->train.shard_tokens);
    }
    cJSON *srcs = cJSON_AddArrayToObject(m, "sources");
    for (int i = 0; srcs && i < r->n_src; i++) {
        const prep_source *s = &r->src[i];
        cJSON *e = cJSON_CreateObject();
        if (!e) goto fail;
        cJSON_AddItemToArray(srcs, e);
        cJSON_AddStringToObject(e, "path", s->path);
        cJSON_AddStringToObject(e, "format", format_name(s->format));
        cJSON_AddNumberToObject(e, "bytes", (double)s->size);
        cJSON_AddStringToObject(e, "xxh3_128", s->hash_hex);
        cJSON_AddNumberToObject(e, "documents", (double)s->documents);
        cJSON_AddNumberToObject(e, "tokens", (double)s->tokens);
        if (s->format == CT_PREP_FORMAT_JSONL)
            cJSON_AddNumberToObject(e, "bad_lines", (double)s->bad_lines);
    }
    cJSON *sh = cJSON_AddArrayToObject(m, "shards");
    const split_writer *ws[2] = {&r->train, &r->val};
    for (int k = 0; sh && k < 2; k++) {
        for (int i = 0; i < ws[k]->n; i++) {
            cJSON *e = cJSON_CreateObject();
            if (!e) goto fail;
            cJSON_AddItemToArray(sh, e);
            cJSON_AddStringToObject(e, "file", ws[k]->shards[i].file);
            cJSON_AddStringToObject(e, "split", ws[k]->name);
            cJSON_AddNumberToObject(e, "tokens", (double)ws[k]->shards[i].tokens);
            cJSON_AddNumberToObject(e, "version", ws[k]->version);
            /* what a reader over the network checks each block against */
            char spath[CT_PATH_MAX + 300];
            snprintf(spath, sizeof spath, "%s/%s", o->out_dir, ws[k]->shards[i].file);
            if ((st = ct_shard_hash_manifest(spath, e))) goto fail;
            st = CT_ERR(CT_ERR_OOM, "out of memory writing the manifest");
        }
    }
    cJSON *tot = cJSON_AddObjectToObject(m, "totals");
    if (tot) {
        cJSON_AddNumberToObject(tot, "documents", (double)r->rep.documents);
        cJSON_AddNumberToObject(tot, "tokens", (double)r->rep.tokens);
        cJSON_AddNumberToObject(tot, "train_tokens", (double)r->rep.train_tokens);
        cJSON_AddNumberToObject(tot, "val_tokens", (double)r->rep.val_tokens);
        cJSON_AddNumberToObject(tot, "val_documents", (double)r->rep.val_documents);
        cJSON_AddNumberToObject(tot, "bad_lines", (double)r->rep.bad_lines);
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

/* ------------------------------------------------------------- chunks */

static void chunk_fail(prep_chunk *c) {
    c->st = ct_last_status() ? ct_last_status() : CT_ERR_IO;
    snprintf(c->err, sizeof c->err, "%s", ct_last_error());
    snprintf(c->hint, sizeof c->hint, "%s", ct_last_hint());
}

static void chunk_bad(prep_chunk *c, int64_t line, const char *why) {
    if (c->n_bad < PREP_BAD_KEEP) {
        c->bad[c->n_bad].line = line;
        snprintf(c->bad[c->n_bad].why, sizeof c->bad[c->n_bad].why, "%s", why);
    }
    c->n_bad++;
}

/* Whether tokens from the cache can stand for chunk c: every id a token of
 * the vocabulary, and one document token per document, the first at the
 * start (what chunk_run stores). An entry's checksum only says its file is
 * whole; a file written by hand or by another program can be whole and
 * still hold ids this tokenizer never produces, which would reach the
 * shards (and the model's embedding lookup). Says why not into why. */
static bool chunk_cached_ok(const prep_run *r, const prep_chunk *c, const int32_t *ids, int64_t n,
                            char *why, size_t cap) {
    int vocab = ct_tokenizer_vocab_size(r->tok);
    int64_t docs = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t len;
        if (!ct_tokenizer_token_bytes(r->tok, ids[i], &len)) {
            snprintf(why, cap, "token id %lld at position %lld is not in the vocabulary (ids 0..%d)",
                     (long long)ids[i], (long long)i, vocab - 1);
            return false;
        }
        docs += ids[i] == r->doc;
    }
    if (n == 0 || ids[0] != r->doc || docs != c->n) {
        snprintf(why, cap, "%lld tokens holding %lld document starts (id %d)%s, expected %d documents",
                 (long long)n, (long long)docs, (int)r->doc,
                 n > 0 && ids[0] != r->doc ? ", not one at the start" : "", c->n);
        return false;
    }
    return true;
}

/* Tokenise one chunk (on a worker thread), or take it from the cache. */
static void chunk_run(prep_run *r, prep_chunk *c, ct_tok_state *ts) {
    const ct_prepare_opts *o = r->o;
    const char *field = o->field ? o->field : "text";
    if (r->cache) {
        int32_t *ids;
        int64_t n;
        bool found;
        if (ct_cache_get(r->cache, c->key, &ids, &n, &found)) {
            chunk_fail(c);
            return;
        }
        if (found && chunk_cached_ok(r, c, ids, n, c->refused, sizeof c->refused)) {
            c->toks.ids = ids;
            c->toks.n = c->toks.cap = (size_t)n;
            c->cached = true;
            return;
        }
        free(ids); /* refused: a miss; the put below replaces the entry */
    }
    for (int i = c->first; i < c->first + c->n; i++) {
        const prep_doc *d = &r->docs[i];
        const prep_source *s = &r->src[d->src];
        const char *text = d->raw;
        size_t len = d->len;
        cJSON *json = NULL;
        char why[160];
        if (s->format == CT_PREP_FORMAT_JSONL &&
            !prep_jsonl_text(d->raw, d->len, field, &json, &text, &len, why, sizeof why)) {
            chunk_bad(c, d->line, why);
            r->docs[i].bad = true;
            continue;
        }
        size_t mark = c->toks.n;
        ct_status st = ct_tokens_push(&c->toks, r->doc);
        if (!st)
            st = ct_tokenizer_encode(r->tok, ts, text, len, o->lossy ? CT_TOK_LOSSY : 0,
                                     &c->toks);
        if (st == CT_ERR_FORMAT) {
            size_t at = ct_utf8_valid_prefix(text, len);
            c->toks.n = mark;
            if (s->format == CT_PREP_FORMAT_JSONL) {
                snprintf(why, sizeof why, "invalid UTF-8 in field \"%s\" at byte %zu of its text",
                         field, at);
                cJSON_Delete(json);
                chunk_bad(c, d->line, why);
                r->docs[i].bad = true;
                continue;
            }
            int64_t off = d->offset + (int64_t)at, line = 1;
            for (const char *p = s->data; p < s->data + off; p++) line += *p == '\n';
            CT_ERR(CT_ERR_FORMAT, "%s: invalid UTF-8 at byte offset %lld (line %lld)", s->path,
                   (long long)off, (long long)line);
            ct_error_hint("convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8), or pass "
                          "--lossy to encode its bytes as they are");
        }
        cJSON_Delete(json);
        if (st) {
            chunk_fail(c);
            return;
        }
        c->tokenized++;
    }
    /* a chunk with bad lines is not cached: its lines are reported every run */
    if (r->cache && c->n_bad == 0 && c->toks.n > 0 &&
        ct_cache_put(r->cache, c->key, c->toks.ids, (int64_t)c->toks.n))
        chunk_fail(c);
}

static void chunk_key(prep_run *r, prep_chunk *c) {
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    /* a JSONL line and the same bytes as text tokenise differently */
    unsigned char fmt = (unsigned char)r->src[r->docs[c->first].src].format;
    XXH3_128bits_update(&st, &fmt, 1);
    for (int i = c->first; i < c->first + c->n; i++) {
        uint64_t len = r->docs[i].len;
        XXH3_128bits_update(&st, &len, sizeof len);
        XXH3_128bits_update(&st, r->docs[i].raw, r->docs[i].len);
    }
    XXH128_hash_t h = XXH3_128bits_digest(&st);
    unsigned char digest[16];
    XXH128_canonicalFromHash((XXH128_canonical_t *)digest, h);
    c->key = ct_cache_key_of(digest, sizeof digest, r->ns);
}

static ct_status push_doc(prep_run *r, const prep_doc *d) {
    if (r->n_docs == r->cap_docs) {
        int cap = r->cap_docs ? 2 * r->cap_docs : 1024;
        prep_doc *v = realloc(r->docs, (size_t)cap * sizeof *v);
        if (!v) return CT_ERR(CT_ERR_OOM, "out of memory");
        r->docs = v;
        r->cap_docs = cap;
    }
    r->docs[r->n_docs++] = *d;
    return CT_OK;
}

static ct_status push_chunk(prep_run *r, int first, int n) {
    if (r->n_chunks == r->cap_chunks) {
        int cap = r->cap_chunks ? 2 * r->cap_chunks : 256;
        prep_chunk *v = realloc(r->chunks, (size_t)cap * sizeof *v);
        if (!v) return CT_ERR(CT_ERR_OOM, "out of memory");
        r->chunks = v;
        r->cap_chunks = cap;
    }
    prep_chunk *c = &r->chunks[r->n_chunks++];
    memset(c, 0, sizeof *c);
    c->first = first;
    c->n = n;
    chunk_key(r, c);
    return CT_OK;
}

/* ------------------------------------------------------------ batches */

/* Count every bad line of a JSONL source, for the error of bad_lines=fail. */
static ct_status fail_bad_lines(prep_run *r, int src) {
    prep_source *s = &r->src[src];
    const char *field = r->o->field ? r->o->field : "text";
    char list[1024] = "";
    size_t used = 0;
    int64_t bad = 0;
    prep_source scan = *s; /* walk the lines again from the start */
    scan.cursor = 0;
    scan.line = 0;
    scan.done = false;
    prep_doc d;
    while (prep_source_next(r->o, &scan, src, &d)) {
        cJSON *json;
        const char *text;
        size_t len;
        char why[160];
        bool ok = prep_jsonl_text(d.raw, d.len, field, &json, &text, &len, why, sizeof why);
        if (ok && ct_utf8_valid_prefix(text, len) != len) {
            ok = false;
            snprintf(why, sizeof why, "invalid UTF-8 in field \"%s\"", field);
        }
        cJSON_Delete(json);
        if (ok) continue;
        if (++bad <= PREP_BAD_KEEP && used < sizeof list)
            used += (size_t)snprintf(list + used, sizeof list - used, "%sline %lld: %s",
                                     bad > 1 ? "; " : "", (long long)d.line, why);
    }
    ct_status st = CT_ERR(CT_ERR_FORMAT, "%s: %lld bad JSONL line%s (%s%s)", s->path,
                          (long long)bad, bad == 1 ? "" : "s", list,
                          bad > PREP_BAD_KEEP ? "; ..." : "");
    ct_error_hint("fix those lines, or pass --bad-lines skip to leave them out");
    return st;
}

static bool to_val(const prep_run *r, const prep_doc *d) {
    const ct_prepare_opts *o = r->o;
    if (o->val_tokens > 0) return r->rep.val_tokens < o->val_tokens;
    if (o->val_fraction > 0) return (double)(d->hash >> 11) * 0x1p-53 < o->val_fraction;
    return false;
}

/* Tokenise the batch's chunks in parallel, then route them in order. */
static ct_status run_batch(prep_run *r) {
    int n = r->n_chunks;
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(r->threads)
#endif
    for (int i = 0; i < n; i++) {
        int t = 0;
#ifdef CT_USE_OPENMP
        t = omp_get_thread_num();
#endif
        chunk_run(r, &r->chunks[i], r->states[t]);
    }
    for (int i = 0; i < n; i++) {
        prep_chunk *c = &r->chunks[i];
        if (c->st) {
            ct_status st = CT_ERR(c->st, "%s", c->err);
            if (c->hint[0]) ct_error_hint("%s", c->hint);
            return st;
        }
        if (c->n_bad) {
            prep_source *s = &r->src[r->docs[c->first].src];
            if (!r->o->skip_bad_lines) return fail_bad_lines(r, r->docs[c->first].src);
            for (int k = 0; k < c->n_bad && k < PREP_BAD_KEEP; k++)
                if (s->bad_lines + k < PREP_BAD_KEEP)
                    ct_log(CT_LOG_WARN, "%s:%lld: skipped: %s", s->path,
                           (long long)c->bad[k].line, c->bad[k].why);
            s->bad_lines += c->n_bad;
            r->rep.bad_lines += c->n_bad;
        }
        if (c->refused[0]) {
            const prep_doc *d = &r->docs[c->first];
            ct_log(CT_LOG_WARN, "cache: the entry %016llx%016llx (for %s from %s %lld) was refused "
                   "and the text tokenised again: %s",
                   (unsigned long long)c->key.hi, (unsigned long long)c->key.lo, r->src[d->src].path,
                   d->line ? "line" : "byte offset", (long long)(d->line ? d->line : d->offset), c->refused);
        }
        r->rep.chunks++;
        r->rep.chunks_cached += c->cached;
        r->rep.docs_tokenized += c->tokenized;
        /* documents are the segments that start with the document token (the
         * encoder never emits it: special tokens are not matched in text) */
        const int32_t *t = c->toks.ids;
        size_t m = c->toks.n, a = 0;
        int doc = c->first;
        while (a < m) {
            size_t b = a + 1;
            while (b < m && t[b] != r->doc) b++;
            while (r->docs[doc].bad) doc++; /* bad documents made no segment */
            const prep_doc *d = &r->docs[doc];
            bool val = to_val(r, d);
            ct_status st = writer_append(val ? &r->val : &r->train, t + a, (int64_t)(b - a));
            if (st) return st;
            if (val) {
                r->rep.val_tokens += (int64_t)(b - a);
                r->rep.val_documents++;
            } else {
                r->rep.train_tokens += (int64_t)(b - a);
            }
            r->rep.tokens += (int64_t)(b - a);
            r->rep.documents++;
            r->src[d->src].documents++;
            r->src[d->src].tokens += (int64_t)(b - a);
            doc++;
            a = b;
        }
        ct_tokens_free(&c->toks);
    }
    r->n_chunks = 0;
    r->n_docs = 0;
    return CT_OK;
}

/* Bytes of input consumed so far: finished sources whole, the current one
 * up to its cursor. */
static int64_t bytes_done(const prep_run *r, int cur) {
    int64_t b = 0;
    for (int i = 0; i < cur && i < r->n_src; i++) b += r->src[i].size;
    if (cur < r->n_src) b += (int64_t)r->src[cur].cursor;
    return b;
}

static void report_progress(prep_run *r, int cur) {
    r->rep.bytes_done = bytes_done(r, cur);
    r->rep.seconds = ct_time_s() - r->t0;
    r->rep.train_shards = r->train.n;
    r->rep.val_shards = r->val.n;
    if (r->cache) ct_cache_get_stats(r->cache, &r->rep.cache);
    if (r->o->progress) r->o->progress(&r->rep, r->o->user);
}

/* Where the batch being filled stands. */
typedef struct batch_cursor {
    int chunk_first;     /* first document of the open chunk */
    size_t chunk_bytes, batch_bytes;
    int open_from;       /* sources before this one are closed */
} batch_cursor;

/* Close the open chunk; run the batch when it is full (or `flush`). */
static ct_status close_chunk(prep_run *r, batch_cursor *bc, int si, bool source_done,
                             bool flush) {
    ct_status st;
    if (r->n_docs > bc->chunk_first &&
        (st = push_chunk(r, bc->chunk_first, r->n_docs - bc->chunk_first)))
        return st;
    bc->chunk_first = r->n_docs;
    bc->chunk_bytes = 0;
    if (!flush && bc->batch_bytes < PREP_BATCH_BYTES && r->n_docs < PREP_BATCH_DOCS)
        return CT_OK;
    if (r->n_chunks && (st = run_batch(r))) return st;
    bc->chunk_first = 0;
    bc->batch_bytes = 0;
    int keep = source_done ? si + 1 : si; /* the batch no longer needs these */
    for (; bc->open_from < keep; bc->open_from++) prep_source_close(&r->src[bc->open_from]);
    report_progress(r, source_done ? si + 1 : si);
    return CT_OK;
}

/* Read every source in order, batch by batch. */
static ct_status run_sources(prep_run *r) {
    batch_cursor bc = {0};
    ct_status st;
    for (int si = 0; si < r->n_src; si++) {
        prep_source *s = &r->src[si];
        if ((st = prep_source_open(s))) return st;
        prep_doc d;
        while (prep_source_next(r->o, s, si, &d)) {
            if ((st = push_doc(r, &d))) return st;
            bc.chunk_bytes += d.len;
            bc.batch_bytes += d.len;
            if (((d.hash & PREP_CHUNK_MASK) == 0 || bc.chunk_bytes >= PREP_CHUNK_BYTES) &&
                (st = close_chunk(r, &bc, si, false, false)))
                return st;
        }
        /* a chunk never spans two sources */
        if ((st = close_chunk(r, &bc, si, true, si == r->n_src - 1))) return st;
    }
    return CT_OK;
}

static ct_status check_opts(const ct_prepare_opts *o) {
    if (!o->out_dir || !o->out_dir[0])
        return CT_ERR(CT_ERR_ARG, "--out DIR is required: where the shards go");
    if (!o->tokenizer || !o->tokenizer[0])
        return CT_ERR(CT_ERR_ARG, "--tokenizer DIR is required (encoder.json + vocab.bpe, or "
                      "tokenizer.json: GPT-2 byte-level or SentencePiece-BPE)");
    if (o->val_tokens < 0) return CT_ERR(CT_ERR_ARG, "--val-tokens %lld: expected >= 0",
                                         (long long)o->val_tokens);
    if (!(o->val_fraction >= 0 && o->val_fraction < 1))
        return CT_ERR(CT_ERR_ARG, "--val-fraction %g: expected a fraction in [0, 1)",
                      o->val_fraction);
    if (o->val_tokens > 0 && o->val_fraction > 0)
        return CT_ERR(CT_ERR_ARG, "--val-tokens and --val-fraction both given: choose one");
    if (o->shard_tokens < 0 || o->shard_tokens > INT32_MAX)
        return CT_ERR(CT_ERR_ARG, "--shard-tokens %lld: expected 1..%d", (long long)o->shard_tokens,
                      INT32_MAX);
    if (o->separator && o->separator_len == 0)
        return CT_ERR(CT_ERR_ARG, "--separator is empty");
    if (o->format < 0 || o->format >= CT_PREP_FORMAT_COUNT)
        return CT_ERR(CT_ERR_ARG, "bad input format %d", (int)o->format);
    if (strlen(o->out_dir) > CT_PATH_MAX - 64)
        return CT_ERR(CT_ERR_ARG, "%s: --out path too long", o->out_dir);
    return CT_OK;
}

ct_status ct_prepare_run(const ct_prepare_opts *o, ct_prepare_report *rep) {
    prep_run r;
    memset(&r, 0, sizeof r);
    bool created_out = false;
    r.o = o;
    r.t0 = ct_time_s();
    ct_status st;
    if ((st = check_opts(o))) goto done;
    if ((st = ct_tokenizer_load(&r.tok, o->tokenizer))) goto done;
    r.doc = ct_tokenizer_bos(r.tok);
    if (r.doc < 0) {
        bool spm = ct_tokenizer_kind(r.tok) == CT_TOK_KIND_SPM_BPE;
        st = CT_ERR(CT_ERR_FORMAT, "%s: the tokenizer has no %s token, which starts each document",
                    o->tokenizer, spm ? "BOS (<s>)" : "BOS or end-of-text (<|endoftext|>)");
        ct_error_hint("name it in tokenizer_config.json (\"%s\") beside tokenizer.json, or in its post_processor",
                      spm ? "bos_token" : "eos_token");
        goto done;
    }
    if ((st = prep_sources_list(o, &r.src, &r.n_src, &r.rep.bytes_total))) goto done;
    if ((st = prep_out_check(o->out_dir, o->overwrite))) goto done;

    /* nothing is written before this point */
    if ((st = prep_out_stage(o->out_dir, &created_out, &r.stage))) goto done;

    int version = ct_tokenizer_vocab_size(r.tok) <= 65536 ? 1 : 2;
    int64_t shard_tokens = o->shard_tokens ? o->shard_tokens : PREP_DEFAULT_SHARD;
    r.train = (split_writer){.name = "train", .stage = r.stage, .shard_tokens = shard_tokens,
                             .version = version};
    r.val = (split_writer){.name = "val", .stage = r.stage, .shard_tokens = shard_tokens,
                           .version = version};
    snprintf(r.ns, sizeof r.ns, "%s|prepare-chunk-v1|%s|%s", ct_tokenizer_identity(r.tok),
             o->lossy ? "lossy" : "strict", o->field ? o->field : "text");
    bool has_disk = o->cache_dir && o->cache_dir[0] && o->cache_disk_limit > 0;
    if ((has_disk || o->cache_mem_limit > 0) &&
        (st = ct_cache_open(&r.cache, has_disk ? o->cache_dir : NULL,
                            has_disk ? o->cache_disk_limit : 0, o->cache_mem_limit)))
        goto done;

    r.threads = o->threads;
#ifdef CT_USE_OPENMP
    if (r.threads <= 0) r.threads = omp_get_num_procs();
#else
    r.threads = 1;
#endif
    if (r.threads < 1) r.threads = 1;
    if (!(r.states = calloc((size_t)r.threads, sizeof *r.states))) {
        st = CT_ERR(CT_ERR_OOM, "out of memory");
        goto done;
    }
    for (int i = 0; i < r.threads; i++) {
        if (!(r.states[i] = ct_tok_state_new(r.tok))) {
            st = ct_last_status();
            goto done;
        }
    }

    if ((st = run_sources(&r))) goto done;
    if ((st = writer_finish(&r.train)) || (st = writer_finish(&r.val))) goto done;
    if (r.rep.train_tokens == 0) {
        st = CT_ERR(CT_ERR_ARG, "all %lld tokens went to the validation split, none to train",
                    (long long)r.rep.tokens);
        ct_error_hint("lower --val-tokens or --val-fraction");
        goto done;
    }

    /* publish: old outputs out (manifest first), new shards in, manifest last */
    prep_out_remove_outputs(o->out_dir);
    if ((st = move_shards(&r.train, o->out_dir)) || (st = move_shards(&r.val, o->out_dir)))
        goto done;
    st = write_manifest(&r);
    r.rep.seconds = ct_time_s() - r.t0;
    r.rep.train_shards = r.train.n;
    r.rep.val_shards = r.val.n;
    if (r.cache) ct_cache_get_stats(r.cache, &r.rep.cache);

done:
    if (rep) *rep = r.rep;
    for (int i = 0; i < r.n_chunks; i++) ct_tokens_free(&r.chunks[i].toks);
    writer_free(&r.train);
    writer_free(&r.val);
    if (r.stage) ct_remove_tree(r.stage);
    free(r.stage);
    if (st && created_out) rmdir(o->out_dir); /* leave no trace of a failed run */
    if (r.states)
        for (int i = 0; i < r.threads; i++) ct_tok_state_free(r.states[i]);
    free(r.states);
    ct_cache_close(r.cache);
    free(r.docs);
    free(r.chunks);
    prep_sources_free(r.src, r.n_src);
    ct_tokenizer_free(r.tok);
    return st;
}
