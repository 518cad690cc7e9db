/*
 * The transport under remote training data: byte-range GETs, whole-object GETs,
 * sizes and PUTs over HTTP(S) and S3 (libcurl), with retries, backoff, stall
 * timeouts, kept-alive connections and process-wide counters. s3:// URLs are
 * signed with AWS Signature Version 4 from the usual AWS environment variables
 * and ~/.aws files (remote_s3.c).
 * Leaves out: caching (data/shard/blockcache.c), shards and manifests (shard_remote.c), and
 * AWS credential sources beyond keys in the environment and the profile files
 * (no instance metadata, SSO or credential_process).
 */
#ifndef CT_REMOTE_H
#define CT_REMOTE_H

#include "ctrain/core.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ct_remote_opts {
    int retries;      /* attempts after the first for retryable failures (data.retries), default 5 */
    double timeout_s; /* per request: connect timeout, and abort when a transfer stalls (less than
                         1 byte/s) this long (data.timeout_s), default 30; the stall is
                         measured in whole seconds (rounded up) */
    double backoff_s; /* wait before the first retry, doubled each time, capped at 8 s (default 0.5) */
} ct_remote_opts;
ct_remote_opts ct_remote_opts_default(void);

/* true for http://, https:// and s3:// specs (the scheme in any case). */
bool ct_remote_is_url(const char *spec);

/*
 * Every call below is thread-safe and may run on several threads at once: each
 * takes a libcurl handle from a small process-wide pool (so connections are kept
 * alive across calls) and gives it back. `o` may be NULL (the defaults).
 * Every error names the URL as ct_remote_display shows it (credentials and query
 * strings are never printed) and says what happened; the status is CT_ERR_IO
 * unless said otherwise, with a hint.
 * Retried with backoff (up to o->retries times): connection failures and resets,
 * timeouts (connect, or a stall of o->timeout_s), bodies shorter than announced,
 * HTTP 5xx, 429 and 408. Failing at once: other 4xx (403, 404, 416, ...), TLS
 * certificate errors, bad URLs.
 */

/* GET bytes [off, off+len) of url into buf (len >= 1; borrows buf): exactly len
 * bytes, else an error. A 206 with the matching Content-Range, or a 200 whose body
 * is skipped to off. A range beyond the object's end fails at once.
 * Errors: CT_ERR_IO, CT_ERR_ARG (bad URL, off < 0, len < 1). */
ct_status ct_remote_get_range(const char *url, int64_t off, int64_t len, void *buf,
                              const ct_remote_opts *o);
/* GET a whole object of at most max bytes (manifests). Returns owned *data (malloc;
 * release with free), NUL-terminated beyond *len. Larger objects fail at once.
 * Errors: CT_ERR_IO, CT_ERR_OOM, CT_ERR_ARG. */
ct_status ct_remote_get(const char *url, size_t max, char **data, size_t *len,
                        const ct_remote_opts *o);
/* ct_remote_get that also says (*transient, may be NULL) whether a failure is
 * one retries may cure (the server unreachable, timing out, answering 5xx):
 * no answer about the object, as against a 404, 403 or a bad URL. */
ct_status ct_remote_get_ex(const char *url, size_t max, char **data, size_t *len,
                           const ct_remote_opts *o, bool *transient);
/* Object size in bytes (HEAD; for S3 too; a 1-byte range GET when HEAD gives no
 * length). 404 -> CT_ERR_IO naming the URL. */
ct_status ct_remote_size(const char *url, int64_t *size, const ct_remote_opts *o);
/* PUT len bytes (borrows data) at url: s3://, or http(s):// (a WebDAV-style PUT).
 * Errors: CT_ERR_IO, CT_ERR_ARG. */
ct_status ct_remote_put(const char *url, const void *data, size_t len, const ct_remote_opts *o);
/* PUT the file at path to url. For s3:// a file larger than part_bytes (0: 64 MiB;
 * at least 5 MiB, S3's minimum part; raised when the file would need more than
 * 10000 parts) goes up as a multipart upload (CreateMultipartUpload, UploadPart
 * each part with retries, CompleteMultipartUpload; AbortMultipartUpload when it
 * fails). Anything else is one streamed PUT.
 * Errors: CT_ERR_IO (the file or the transfer), CT_ERR_ARG (part_bytes, URL), CT_ERR_OOM. */
ct_status ct_remote_put_file(const char *url, const char *path, int64_t part_bytes,
                             const ct_remote_opts *o);

/* Process-wide counters, updated atomically by every call (all threads). */
typedef struct ct_remote_stats {
    int64_t requests; /* HTTP requests made, retries included */
    int64_t retries;  /* requests that were retries */
    int64_t failures; /* calls that failed in the end */
    int64_t bytes;    /* body bytes received */
    double wait_s;    /* seconds spent in requests and backoff */
} ct_remote_stats;
void ct_remote_stats_get(ct_remote_stats *out);
/* A URL safe to print: no user:password@, no query string or fragment (presigned
 * URLs carry keys there), written into buf (cap bytes, truncated, always
 * NUL-terminated when cap >= 1). Returns buf. */
const char *ct_remote_display(const char *url, char *buf, size_t cap);

#endif
