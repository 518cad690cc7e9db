/*
 * `ctrain prepare`: raw text to llm.c token shards, on all cores.
 *
 * Inputs are text files, directories (walked recursively, sorted, hidden
 * entries skipped), globs, JSONL files (one document per line, the text in a
 * chosen field) and stdin ("-"). A document is a whole text file, one JSONL
 * line, or a piece of a text file between separators. Each document becomes
 * the tokenizer's document token followed by its tokens, in input order:
 * <|endoftext|> for GPT-2 (as llm.c), BOS <s> for SentencePiece-BPE (LLaMA),
 * as their pretraining does.
 *
 * Documents are grouped into content-defined chunks (a chunk ends after a
 * document whose hash has its low 6 bits zero, at 1 MB, or at the end of a
 * source), so an edit to one document changes only its own chunk's key.
 * Each chunk's tokens are looked up in the tokenised-data cache (data/prepare/cache.h)
 * under its content hash and the tokenizer's identity, and tokenised only on
 * a miss.
 *
 * Output: OUT/train_NNNNNN.bin and OUT/val_NNNNNN.bin (at most shard_tokens
 * tokens each; version 1 for vocabularies up to 65,536, else 2) and
 * OUT/manifest.json (sources with content hashes, counts, shards, tokenizer
 * identity, options). Shards are written into a staging directory inside OUT
 * and moved into place only after every input was read and tokenised, the
 * manifest last: a failed or interrupted prepare leaves OUT's previous
 * contents as they were.
 * Leaves out: tokenizers other than ct_tokenizer_load's, and deduplication.
 */
#ifndef CT_PREPARE_H
#define CT_PREPARE_H

#include "ctrain/core.h"
#include "data/prepare/cache.h"

typedef enum ct_prep_format {
    CT_PREP_FORMAT_AUTO = 0,  /* .jsonl / .ndjson files are JSONL, the rest text */
    CT_PREP_FORMAT_TEXT = 1,
    CT_PREP_FORMAT_JSONL = 2,
    CT_PREP_FORMAT_COUNT
} ct_prep_format;

/* Counters of a run, for progress lines and the final summary. */
typedef struct ct_prepare_report {
    int64_t bytes_total;  /* input bytes (known once the inputs are listed) */
    int64_t bytes_done;   /* input bytes read and tokenised so far */
    int64_t documents, tokens;            /* tokens include one document token per document */
    int64_t train_tokens, val_tokens, val_documents;
    int64_t docs_tokenized;  /* documents that went through the encoder */
    int64_t chunks, chunks_cached;
    int64_t bad_lines;       /* JSONL lines skipped (bad_lines = skip) */
    int64_t empty_documents; /* skipped: no text */
    int train_shards, val_shards;
    double seconds;
    ct_cache_stats cache;
} ct_prepare_report;

typedef void (*ct_prepare_progress_fn)(const ct_prepare_report *r, void *user);

typedef struct ct_prepare_opts {
    const char *tokenizer;        /* directory or tokenizer.json */
    const char *out_dir;
    const char *const *inputs;    /* files, directories, globs, "-" for stdin */
    int n_inputs;
    ct_prep_format format;
    const char *field;            /* JSONL text field; NULL: "text" */
    const char *separator;        /* NULL: one document per text file */
    size_t separator_len;
    bool skip_bad_lines;          /* false: bad JSONL lines fail the run */
    bool lossy;                   /* encode invalid UTF-8 byte by byte instead of failing */
    int64_t val_tokens;           /* > 0: the first documents, >= this many tokens */
    double val_fraction;          /* > 0: documents chosen by content hash */
    int64_t shard_tokens;         /* 0: 100,000,000 */
    int threads;                  /* 0: all cores */
    const char *cache_dir;        /* NULL or "": no disk tier */
    int64_t cache_disk_limit;     /* bytes */
    int64_t cache_mem_limit;      /* bytes; 0 with no cache_dir: no cache */
    bool overwrite;               /* replace shards already in out_dir */
    ct_prepare_progress_fn progress; /* may be NULL; called on this thread */
    void *user;
} ct_prepare_opts;

/* Run a preparation. *rep (may be NULL) is filled as far as the run got.
 * Everything the options name is checked before any work: missing or empty
 * inputs, an unreadable tokenizer, an out_dir that already holds shards
 * without overwrite. Errors name the file with the line or byte offset:
 * CT_ERR_IO, CT_ERR_FORMAT (invalid UTF-8, bad JSONL lines, a malformed
 * tokenizer), CT_ERR_ARG, CT_ERR_OOM. */
ct_status ct_prepare_run(const ct_prepare_opts *o, ct_prepare_report *rep);

/* Upload the prepared directory dir (its manifest's shards, then the manifest
 * last) to url (s3:// or an http(s) URL that takes PUT). A manifest already at
 * url is refused unless overwrite. *bytes: shard bytes sent.
 * Errors: CT_ERR_IO (naming the URL or file), CT_ERR_FORMAT, CT_ERR_OOM. */
struct ct_remote_opts;
ct_status ct_prepare_upload(const char *dir, const char *url, bool overwrite,
                            const struct ct_remote_opts *net, int64_t *bytes);

#endif
