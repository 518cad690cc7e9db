/*
 * llm.c token shards (.bin): a validating mmap reader and an atomic writer.
 * The format is specified in shard.c next to the reader; shards written by
 * llm.c's data scripts and by `ctrain prepare` are interchangeable.
 * Leaves out: shards at URLs (source_remote.c reads them through the block
 * cache), batching, shuffling and prefetch (the loader).
 */
#ifndef CT_SHARD_H
#define CT_SHARD_H

#include "ctrain/core.h"

#include <stdbool.h>
#include <stdint.h>

#define CT_SHARD_MAGIC 20240520
#define CT_SHARD_HEADER_INTS 256
#define CT_SHARD_HEADER_BYTES (CT_SHARD_HEADER_INTS * 4)

typedef struct ct_shard ct_shard; /* an open shard: opaque, read-only */

/* Map `path` read-only and validate its header against the file size.
 * Returns owned *out; release with ct_shard_close. Errors: CT_ERR_IO (missing
 * or unreadable), CT_ERR_FORMAT (bad magic, unknown version, no tokens,
 * truncated or trailing bytes; the message names the path), CT_ERR_OOM.
 * An open shard may be read from several threads at once. */
ct_status ct_shard_open(ct_shard **out, const char *path);
void ct_shard_close(ct_shard *s); /* NULL is fine */

const char *ct_shard_path(const ct_shard *s);
int64_t ct_shard_ntokens(const ct_shard *s);
/* Bytes per stored token: 2 (version 1) or 4 (version 2). */
int ct_shard_token_bytes(const ct_shard *s);
/* Token i, 0 <= i < ntokens (checked with CT_ASSERT: a caller bug). */
uint32_t ct_shard_token(const ct_shard *s, int64_t i);
/* Copy tokens [start, start+count) into out[count]. Errors: CT_ERR_ARG when
 * the range is outside the shard; CT_ERR_FORMAT for a token above INT32_MAX. */
ct_status ct_shard_read(const ct_shard *s, int64_t start, int64_t count, int32_t *out);
/* Index of the first token >= limit, or -1 when every token is below it. One
 * pass over the mapped tokens, block by block (a vectorisable max, then a
 * search only inside the block that holds the hit); nothing is copied. */
int64_t ct_shard_find_token_ge(const ct_shard *s, uint32_t limit);
/* Hint that tokens [start, start+count) are read soon (posix_madvise
 * WILLNEED on the pages that hold them). Only a hint: failures are ignored,
 * and a range outside the shard is clipped. */
void ct_shard_willneed(const ct_shard *s, int64_t start, int64_t count);
/* Drop the shard's pages from this process's resident set (after a scan of
 * every token): they stay in the page cache, and reads fault them back. */
void ct_shard_drop_pages(const ct_shard *s);

/* Write n >= 1 tokens as a shard, atomically (temp file, fsync, rename).
 * version 1: uint16 tokens, every token must be < 65536; version 2: uint32.
 * Borrows tokens. Errors: CT_ERR_ARG (bad version or count; a token too large
 * for version 1, naming the token and its position), CT_ERR_IO, CT_ERR_OOM. */
ct_status ct_shard_write(const char *path, const uint32_t *tokens, int64_t n, int version);

/* A shard written as a stream, for outputs larger than memory: open, append
 * tokens any number of times, then exactly one of commit or abort. The file
 * appears at `path` only at commit (temp file, fsync, rename), so an
 * interrupted writer never leaves a shard that looks complete.
 * open: CT_ERR_ARG (bad version), CT_ERR_IO, CT_ERR_OOM; returns owned *out.
 * append borrows tokens: CT_ERR_ARG for a token too large for version 1
 *   (naming it and its position in the shard) or past INT32_MAX tokens,
 *   CT_ERR_IO (full disk: the writer is then poisoned, abort it).
 * commit always consumes w: CT_ERR_ARG when no token was appended, CT_ERR_IO. */
typedef struct ct_shard_writer ct_shard_writer;
ct_status ct_shard_writer_open(ct_shard_writer **out, const char *path, int version);
ct_status ct_shard_writer_append(ct_shard_writer *w, const uint32_t *tokens, int64_t n);
int64_t ct_shard_writer_count(const ct_shard_writer *w);
ct_status ct_shard_writer_commit(ct_shard_writer *w);
void ct_shard_writer_abort(ct_shard_writer *w); /* NULL is fine */

#endif
