/*
 * What remote.c (the request engine: handles, retries, errors, counters) and
 * remote_s3.c (s3:// URLs, AWS credentials, multipart uploads) share.
 * Not part of remote.h: nothing outside src/data/shard/remote*.c includes this.
 */
#ifndef CT_REMOTE_INT_H
#define CT_REMOTE_INT_H

#include "data/shard/remote.h"

#include <stdbool.h>
#include <stdint.h>

#define REMOTE_DISP_MAX 512 /* a display URL, with room for " (part N of M)" */

/* AWS credentials and region for signing; wiped by remote_target_free. */
typedef struct remote_s3 {
    char region[64];
    char key_id[256];
    char secret[256];
    char token[4096];  /* AWS_SESSION_TOKEN / aws_session_token; "" when none */
    char source[600];  /* where the keys came from, for messages (never the values) */
} remote_s3;

/* One remote object: the URL requests go to, and what messages call it. */
typedef struct remote_target {
    char *url;                   /* http(s) URL (owned), no query string for s3 */
    char disp[REMOTE_DISP_MAX];  /* the spec as ct_remote_display shows it */
    bool s3;                     /* sign with cred */
    remote_s3 cred;
} remote_target;

/* Map spec (http(s):// as is; s3:// to its endpoint, with credentials and region).
 * Errors: CT_ERR_ARG (not a URL, s3:// without a key, a bad AWS_ENDPOINT_URL),
 * CT_ERR_IO (no credentials for s3://), CT_ERR_OOM. *t is always safe to free. */
ct_status remote_target_init(remote_target *t, const char *spec);
void remote_target_free(remote_target *t); /* wipes the credentials */
/* s3:// only (remote_s3.c): endpoint URL, region and credentials into t. */
ct_status remote_s3_resolve(remote_target *t, const char *spec);

/* A growable response body (XML answers, whole objects). */
typedef struct remote_buf {
    char *data; /* malloc, NUL-terminated */
    size_t len;
    size_t cap;
    size_t max; /* more than this fails the request */
} remote_buf;

/* One request, made up to 1 + o->retries times by remote_run. */
typedef struct remote_req {
    const char *method;     /* "GET", "HEAD", "PUT", "POST", "DELETE" */
    const char *query;      /* canonical query string (sorted, encoded, "k=v"), or NULL */
    int64_t off, len;       /* GET: len > 0 asks for bytes [off, off+len) into dst */
    uint8_t *dst;
    remote_buf *out;        /* else the 2xx body goes here (NULL: dropped) */
    const uint8_t *body;    /* request body from memory (PUT, POST) ... */
    int fd;                 /* ... or from file fd (>= 0) at body_off */
    int64_t body_off;
    int64_t body_len;       /* bytes */
    bool quiet;             /* on failure record no error (best-effort cleanup calls) */
    bool body_errors;       /* a 2xx whose body holds an S3 <Error> failed (retryable):
                               CompleteMultipartUpload answers errors that way */
    /* results */
    int64_t content_length; /* of the last 2xx response; -1 unknown */
    int64_t total;          /* object size from a Content-Range; -1 unknown */
    char etag[256];         /* the last response's ETag */
    bool transient;         /* it failed in a way retries may cure (unreachable, timeouts,
                               5xx): the server gave no answer about the object */
} remote_req;

/* Run r against t with retries and backoff; counts requests, retries and bytes.
 * On failure sets the error (unless r->quiet) naming t->disp. Does not count
 * failures (each public call counts its own). */
ct_status remote_run(const remote_target *t, remote_req *r, const ct_remote_opts *o);
void remote_count_failure(void);
void remote_wipe(void *p, size_t n); /* memset that the compiler keeps */

/* Multipart upload of fd's size bytes (remote_s3.c). */
ct_status remote_s3_put_multipart(remote_target *t, int fd, int64_t size, int64_t part,
                                  const ct_remote_opts *o);
/* The text of the first <tag>...</tag> in xml, XML entities decoded, into out;
 * false when absent. */
bool remote_xml_text(const char *xml, const char *tag, char *out, size_t cap);

#endif
