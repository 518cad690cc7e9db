/*
 * Internals of `ctrain prepare` shared by prepare.c (the pipeline: chunks,
 * cache, tokenisation, shards, manifest) and prepare_src.c (listing inputs,
 * mapping them, and cutting them into documents).
 */
#ifndef CT_PREPARE_IMPL_H
#define CT_PREPARE_IMPL_H

#include "data/prepare/prepare.h"

#include <stdint.h>

/* One input file (or stdin). */
typedef struct prep_source {
    char *path;            /* as listed; "<stdin>" for stdin */
    bool is_stdin;
    ct_prep_format format; /* TEXT or JSONL, resolved */
    int64_t size;          /* bytes, known at listing */
    const char *data;      /* while open: mapped file, or the stdin buffer */
    size_t len;
    bool mapped;
    char hash_hex[33];     /* XXH3-128 of the content, set by prep_source_open */
    /* where splitting stands */
    size_t cursor;
    int64_t line;          /* JSONL: lines consumed so far */
    bool done;
    /* results */
    int64_t documents, tokens, bad_lines;
} prep_source;

/* One document: a slice of its source's bytes (for JSONL, the raw line). */
typedef struct prep_doc {
    int src;
    const char *raw;
    size_t len;
    int64_t offset; /* of raw in the source */
    int64_t line;   /* JSONL: 1-based line; 0 for text */
    uint64_t hash;  /* XXH3-64 of raw */
    bool bad;       /* JSONL: the line was skipped (set while tokenising) */
} prep_doc;

/* List every source the inputs name, in order, checking each exists and is
 * not empty (an empty file inside a directory is skipped with a warning).
 * stdin is read whole here. Returns owned *out (release with
 * prep_sources_free). */
ct_status prep_sources_list(const ct_prepare_opts *o, prep_source **out, int *n,
                            int64_t *bytes_total);
void prep_sources_free(prep_source *s, int n);
/* Map a source and hash its content. */
ct_status prep_source_open(prep_source *s);
/* Unmap (stdin's buffer stays until prep_sources_free). */
void prep_source_close(prep_source *s);

/* Cut the next document out of an open source. Returns false at its end. */
bool prep_source_next(const ct_prepare_opts *o, prep_source *s, int src, prep_doc *out);

/* A JSONL line's text field. On success returns true with *text / *len
 * pointing into *json (release with cJSON_Delete). On failure returns false
 * with a reason in why[cap] and *json NULL. */
struct cJSON;
bool prep_jsonl_text(const char *raw, size_t len, const char *field, struct cJSON **json,
                     const char **text, size_t *text_len, char *why, size_t cap);

/* The manifest's "tokenizer" object (path as given and absolute, files,
 * identity, vocab_size, kind, eot, bos, document_token), added to m and
 * returned; NULL on OOM. Shared by prepare and prepare --format sft, so both
 * manifests describe their tokenizer alike. */
struct ct_tokenizer;
struct cJSON *prep_manifest_tokenizer(struct cJSON *m, const struct ct_tokenizer *tok, const char *path, int32_t doc);

/* prepare_out.c: the --out directory both prepare paths publish into.
 * check: a directory (or absent) without earlier outputs (manifest, shards,
 *   sidecars), unless overwrite (CT_ERR_ARG naming the first one).
 * stage: make out_dir (*created_out: it did not exist), drop staging
 *   directories of dead runs, make out_dir/.staging-<pid> (owned *stage).
 * remove_outputs: the earlier outputs, the manifest first.
 * move: stage/file to out_dir/file by rename. */
ct_status prep_out_check(const char *out_dir, bool overwrite);
ct_status prep_out_stage(const char *out_dir, bool *created_out, char **stage);
void prep_out_remove_outputs(const char *out_dir);
ct_status prep_out_move(const char *stage, const char *out_dir, const char *file);

#endif
