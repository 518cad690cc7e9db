/*
 * The remote-object request engine over libcurl: a pool of easy handles (their
 * connections stay alive between calls), one request per attempt with a stall
 * timeout, retries with doubling backoff for what a retry can fix, error
 * messages that name the URL (never credentials or query strings), and
 * process-wide counters. s3:// mapping, credentials and multipart uploads are in
 * remote_s3.c.
 * Leaves out: parallel transfers within one call, and HTTP caching.
 *
 * Process-wide state, by design (the one exception to "state hangs off ct_ctx"):
 * curl_global_init, the handle pool and the counters serve every thread and every
 * caller, as the connection cache of a process must.
 */
#include "data/shard/remote_int.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define REMOTE_BACKOFF_CAP_S 8.0           /* longest wait between attempts */
#define REMOTE_POOL_MAX 16                 /* idle easy handles kept */
#define REMOTE_ERRBODY_MAX 2048            /* bytes of an error body kept (S3's <Code>) */
#define REMOTE_PART_DEFAULT (64LL << 20)   /* put_file's part size when 0 is given */
#define REMOTE_PART_MIN (5LL << 20)        /* S3's smallest part (all but the last) */
#define REMOTE_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static pthread_once_t remote_once = PTHREAD_ONCE_INIT;
static CURLcode remote_init_rc = CURLE_FAILED_INIT;
static pthread_mutex_t remote_pool_mu = PTHREAD_MUTEX_INITIALIZER;
static CURL *remote_pool[REMOTE_POOL_MAX];
static int remote_pool_n;

static _Atomic int64_t remote_n_requests, remote_n_retries, remote_n_failures, remote_n_bytes;
static _Atomic int64_t remote_wait_ns;

/* ---------------------------------------------------------------- small helpers */

static void *(*const volatile remote_memset)(void *, int, size_t) = memset;

void remote_wipe(void *p, size_t n) {
    if (p && n) remote_memset(p, 0, n);
}

static int64_t remote_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void remote_sleep(double s) {
    if (!(s > 0)) return;
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

ct_remote_opts ct_remote_opts_default(void) {
    return (ct_remote_opts){.retries = 5, .timeout_s = 30.0, .backoff_s = 0.5};
}

bool ct_remote_is_url(const char *spec) {
    return spec && (strncasecmp(spec, "http://", 7) == 0 || strncasecmp(spec, "https://", 8) == 0 ||
                    strncasecmp(spec, "s3://", 5) == 0);
}

const char *ct_remote_display(const char *url, char *buf, size_t cap) {
    if (!buf || cap == 0) return buf;
    buf[0] = '\0';
    if (!url) return buf;
    size_t o = 0;
    const char *p = url;
    const char *scheme = strstr(url, "://");
    if (scheme) {
        size_t n = (size_t)(scheme + 3 - url);
        for (size_t i = 0; i < n && o + 1 < cap; i++) buf[o++] = url[i];
        p = scheme + 3;
        /* user:password@ lies before the first '/', '?' or '#' */
        size_t auth = strcspn(p, "/?#");
        const char *at = NULL;
        for (size_t i = 0; i < auth; i++)
            if (p[i] == '@') at = p + i;
        if (at) p = at + 1;
    }
    for (; *p && *p != '?' && *p != '#' && o + 1 < cap; p++) buf[o++] = *p;
    buf[o] = '\0';
    return buf;
}

void ct_remote_stats_get(ct_remote_stats *out) {
    out->requests = atomic_load(&remote_n_requests);
    out->retries = atomic_load(&remote_n_retries);
    out->failures = atomic_load(&remote_n_failures);
    out->bytes = atomic_load(&remote_n_bytes);
    out->wait_s = (double)atomic_load(&remote_wait_ns) * 1e-9;
}

void remote_count_failure(void) { atomic_fetch_add(&remote_n_failures, 1); }

static void remote_add_wait(int64_t ns) { atomic_fetch_add(&remote_wait_ns, ns); }

/* ---------------------------------------------------------------- handle pool */

static void remote_global_init(void) { remote_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

static ct_status remote_ready(void) {
    pthread_once(&remote_once, remote_global_init);
    if (remote_init_rc != CURLE_OK)
        return CT_ERR(CT_ERR_IO, "libcurl failed to initialise: %s", curl_easy_strerror(remote_init_rc));
    return CT_OK;
}

/* An easy handle: an idle one from the pool (its live connections, DNS and TLS
 * session caches kept) or a new one. NULL when out of memory. */
static CURL *remote_pool_take(void) {
    CURL *h = NULL;
    pthread_mutex_lock(&remote_pool_mu);
    if (remote_pool_n > 0) h = remote_pool[--remote_pool_n];
    pthread_mutex_unlock(&remote_pool_mu);
    return h ? h : curl_easy_init();
}

/* Back to the pool, its options (credentials included) reset; connections stay. */
static void remote_pool_put(CURL *h) {
    curl_easy_reset(h);
    pthread_mutex_lock(&remote_pool_mu);
    if (remote_pool_n < REMOTE_POOL_MAX) {
        remote_pool[remote_pool_n++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&remote_pool_mu);
    if (h) curl_easy_cleanup(h);
}

/* ---------------------------------------------------------------- one transfer */

/* What one attempt saw. */
typedef struct remote_xfer {
    remote_req *r;
    long status;         /* of the last status line; 0 before one */
    char reason[64];     /* its reason phrase ("" for HTTP/2) */
    int64_t clen;        /* Content-Length; -1 unknown */
    int64_t cr_first, cr_last, cr_total; /* Content-Range "bytes F-L/T"; -1 unknown or '*' */
    bool cr_seen;
    double retry_after;  /* seconds; -1 none */
    char etag[256];
    int64_t got;         /* body bytes stored into r->dst or r->out */
    int64_t skip;        /* bytes of a 200 body still to drop before r->off */
    bool range_checked;  /* a 206's Content-Range was compared with the range asked */
    bool range_done;     /* a 200 reached off+len: the rest was not read */
    bool bad_range;      /* a 206 for other bytes than asked */
    bool too_big;        /* more than r->out->max */
    bool oom;
    char errbody[REMOTE_ERRBODY_MAX]; /* the start of a non-2xx body, NUL-terminated */
    size_t errlen;
    int64_t rx;          /* body bytes received, kept or not */
    int64_t sent;        /* request body bytes handed to curl */
    int read_errno;      /* reading the request body's file failed */
} remote_xfer;

typedef enum remote_verdict {
    REMOTE_DONE = 0,  /* success */
    REMOTE_RETRY = 1, /* a retry may succeed */
    REMOTE_FAIL = 2,  /* retrying cannot help */
} remote_verdict;

/* What kind of failure, for the wording of the suffix and the hint. */
typedef enum remote_kind {
    REMOTE_K_OTHER = 0,
    REMOTE_K_HTTP = 1,      /* a status a retry may fix (5xx, 429, 408) */
    REMOTE_K_TIMEOUT = 2,
    REMOTE_K_CONN = 3,      /* connect, reset, no response */
    REMOTE_K_TRUNC = 4,     /* body shorter than announced */
    REMOTE_K_NOTFOUND = 5,
    REMOTE_K_DENIED = 6,    /* 401 / 403 */
    REMOTE_K_TLS = 7,       /* certificate not trusted */
    REMOTE_K_RANGE = 8,     /* 416, or a range beyond the end */
    REMOTE_K_FILE = 9,      /* the local file being uploaded */
    REMOTE_K_OOM = 10,
} remote_kind;

static int64_t remote_parse_i64(const char *s, const char **end) {
    char *e;
    errno = 0;
    long long v = strtoll(s, &e, 10);
    if (e == s || errno) v = -1;
    if (end) *end = e;
    return (int64_t)v;
}

/* "bytes F-L/T", or "bytes *" then "/T", into x. */
static void remote_parse_content_range(remote_xfer *x, const char *v) {
    x->cr_seen = true;
    x->cr_first = x->cr_last = x->cr_total = -1;
    if (strncasecmp(v, "bytes", 5) != 0) return;
    v += 5;
    while (*v == ' ') v++;
    const char *e;
    if (*v == '*') {
        e = v + 1;
    } else {
        x->cr_first = remote_parse_i64(v, &e);
        if (*e != '-') return;
        x->cr_last = remote_parse_i64(e + 1, &e);
    }
    if (*e == '/' && e[1] != '*') x->cr_total = remote_parse_i64(e + 1, NULL);
}

static size_t remote_on_header(char *p, size_t size, size_t n, void *user) {
    remote_xfer *x = user;
    size_t len = size * n;
    char line[1024];
    size_t k = len < sizeof line - 1 ? len : sizeof line - 1;
    memcpy(line, p, k);
    while (k > 0 && (line[k - 1] == '\r' || line[k - 1] == '\n' || line[k - 1] == ' ')) k--;
    line[k] = '\0';
    if (strncmp(line, "HTTP/", 5) == 0) { /* a new response (after 100 Continue, a redirect) */
        const char *sp = strchr(line, ' ');
        x->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        x->reason[0] = '\0';
        if (sp && (sp = strchr(sp + 1, ' ')) != NULL) {
            size_t o = 0;
            for (sp++; *sp && o + 1 < sizeof x->reason; sp++)
                x->reason[o++] = (*sp >= 0x20 && *sp < 0x7f) ? *sp : '?';
            x->reason[o] = '\0';
        }
        x->clen = x->cr_first = x->cr_last = x->cr_total = -1;
        x->cr_seen = false;
        x->retry_after = -1;
        x->etag[0] = '\0';
        return len;
    }
    char *colon = strchr(line, ':');
    if (!colon) return len;
    *colon = '\0';
    const char *v = colon + 1;
    while (*v == ' ' || *v == '\t') v++;
    if (strcasecmp(line, "content-length") == 0) {
        x->clen = remote_parse_i64(v, NULL);
        remote_buf *b = x->r->out;
        if (b && x->status >= 200 && x->status < 300 && x->clen >= 0 && (uint64_t)x->clen > b->max) {
            x->too_big = true;
            return 0; /* abort before the body */
        }
    } else if (strcasecmp(line, "content-range") == 0) {
        remote_parse_content_range(x, v);
    } else if (strcasecmp(line, "etag") == 0) {
        snprintf(x->etag, sizeof x->etag, "%s", v);
    } else if (strcasecmp(line, "retry-after") == 0) {
        const char *e;
        int64_t s = remote_parse_i64(v, &e);
        if (s >= 0 && *e == '\0') x->retry_after = (double)s;
    }
    return len;
}

static bool remote_buf_append(remote_buf *b, const char *p, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) return false;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return true;
}

static size_t remote_on_body(char *p, size_t size, size_t n, void *user) {
    remote_xfer *x = user;
    remote_req *r = x->r;
    size_t len = size * n;
    x->rx += (int64_t)len;
    if (x->status < 200 || x->status >= 300) { /* keep the start of an error body */
        size_t room = sizeof x->errbody - 1 - x->errlen;
        size_t k = len < room ? len : room;
        memcpy(x->errbody + x->errlen, p, k);
        x->errlen += k;
        x->errbody[x->errlen] = '\0';
        return len;
    }
    if (r->dst && x->status == 206 && !x->range_checked) {
        /* the bytes asked for, or (s3rver answers "0-0" with the whole object) a
         * range that holds them: skip to off as for a 200 */
        x->range_checked = true;
        if (x->cr_first < 0 || x->cr_first > r->off || x->cr_last < r->off + r->len - 1) {
            x->bad_range = true;
            return 0;
        }
        x->skip = r->off - x->cr_first;
    }
    if (r->dst) { /* [off, off+len) of a 206 or of a 200's whole object */
        size_t i = 0;
        if (x->skip > 0) {
            i = (int64_t)len < x->skip ? len : (size_t)x->skip;
            x->skip -= (int64_t)i;
        }
        if (i < len && x->got == r->len) { /* have it all: stop reading */
            x->range_done = true;
            return 0;
        }
        size_t k = len - i;
        if ((int64_t)k > r->len - x->got) k = (size_t)(r->len - x->got);
        memcpy(r->dst + x->got, p + i, k);
        x->got += (int64_t)k;
        if (i + k < len) {
            x->range_done = true;
            return 0;
        }
        return len;
    }
    if (r->out) {
        if (r->out->len + len > r->out->max) {
            x->too_big = true;
            return 0;
        }
        if (!remote_buf_append(r->out, p, len)) {
            x->oom = true;
            return 0;
        }
        x->got += (int64_t)len;
    }
    return len;
}

static size_t remote_on_read(char *p, size_t size, size_t n, void *user) {
    remote_xfer *x = user;
    remote_req *r = x->r;
    int64_t left = r->body_len - x->sent;
    size_t want = size * n;
    if (left <= 0) return 0;
    if ((int64_t)want > left) want = (size_t)left;
    if (r->fd >= 0) {
        ssize_t k;
        do {
            k = pread(r->fd, p, want, (off_t)(r->body_off + x->sent));
        } while (k < 0 && errno == EINTR);
        if (k <= 0) {
            x->read_errno = k < 0 ? errno : EIO; /* 0: the file shrank */
            return CURL_READFUNC_ABORT;
        }
        want = (size_t)k;
    } else {
        memcpy(p, r->body + x->sent, want);
    }
    x->sent += (int64_t)want;
    return want;
}

static int remote_on_seek(void *user, curl_off_t offset, int origin) {
    remote_xfer *x = user;
    if (origin != SEEK_SET || offset < 0 || offset > x->r->body_len) return CURL_SEEKFUNC_CANTSEEK;
    x->sent = offset;
    return CURL_SEEKFUNC_OK;
}

static const char *remote_reason(long status, const char *seen) {
    if (seen && seen[0]) return seen;
    switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 416: return "Range Not Satisfiable";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "";
    }
}

/* " (Code)" of an S3 error body, or "": with_message adds its <Message> (for
 * the statuses whose message says what to fix, as the region of a 400). */
static void remote_s3_code(const char *body, bool with_message, char *out, size_t cap) {
    char code[128], text[200];
    out[0] = '\0';
    if (!body || !remote_xml_text(body, "Code", code, sizeof code) || !code[0]) return;
    if (with_message && remote_xml_text(body, "Message", text, sizeof text) && text[0]) {
        for (char *c = text; *c; c++)
            if ((unsigned char)*c < 0x20) *c = ' ';
        snprintf(out, cap, " (%s: %s)", code, text);
    } else {
        snprintf(out, cap, " (%s)", code);
    }
}

/* The CA file libcurl should trust: CURL_CA_BUNDLE, else SSL_CERT_FILE (and for
 * s3:// AWS_CA_BUNDLE first), as the curl and aws tools read them; NULL: the default. */
static const char *remote_ca_file(bool s3) {
    const char *names[] = {s3 ? "AWS_CA_BUNDLE" : NULL, "CURL_CA_BUNDLE", "SSL_CERT_FILE"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = names[i] ? getenv(names[i]) : NULL;
        if (v && v[0]) return v;
    }
    return NULL;
}

static void remote_set_protocols(CURL *h) {
#if LIBCURL_VERSION_NUM >= 0x075500 /* 7.85: the _STR forms; the bitmask ones are deprecated */
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(h, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
}

/* Free a header list, wiping its strings first (one holds the session token). */
static void remote_free_headers(struct curl_slist *l) {
    for (struct curl_slist *i = l; i; i = i->next) remote_wipe(i->data, strlen(i->data));
    curl_slist_free_all(l);
}

/* One request. Fills x, and on failure msg (what happened, without the URL) and *kind. */
static remote_verdict remote_attempt(const remote_target *t, const char *url, remote_req *r,
                                     const ct_remote_opts *o, remote_xfer *x, char *msg,
                                     size_t cap, remote_kind *kind) {
    memset(x, 0, sizeof *x);
    x->r = r;
    x->clen = x->cr_first = x->cr_last = x->cr_total = -1;
    x->retry_after = -1;
    x->skip = r->dst ? r->off : 0;
    if (r->out) {
        r->out->len = 0;
        if (r->out->data) r->out->data[0] = '\0';
    }
    *kind = REMOTE_K_OTHER;
    msg[0] = '\0';

    CURL *h = remote_pool_take();
    if (!h) {
        snprintf(msg, cap, "out of memory for a libcurl handle");
        *kind = REMOTE_K_OOM;
        return REMOTE_FAIL;
    }
    char errbuf[CURL_ERROR_SIZE];
    errbuf[0] = '\0';
    struct curl_slist *hdrs = NULL, *l;
    bool hdr_oom = false;
#define REMOTE_HDR(s)                                   \
    do {                                                \
        if ((l = curl_slist_append(hdrs, (s))) != NULL) \
            hdrs = l;                                   \
        else                                            \
            hdr_oom = true;                             \
    } while (0)

    long stall = (long)ceil(o->timeout_s);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "ctrain/" CT_VERSION);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)ceil(o->timeout_s * 1000.0));
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, stall < 1 ? 1L : stall);
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 256L * 1024L);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, remote_on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, remote_on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    remote_set_protocols(h);
    const char *ca = remote_ca_file(t->s3);
    if (ca) curl_easy_setopt(h, CURLOPT_CAINFO, ca);

    bool body = r->body || r->fd >= 0;
    if (strcmp(r->method, "HEAD") == 0) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (strcmp(r->method, "PUT") == 0) {
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->body_len);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, remote_on_read);
        curl_easy_setopt(h, CURLOPT_READDATA, x);
        curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, remote_on_seek);
        curl_easy_setopt(h, CURLOPT_SEEKDATA, x);
    } else if (strcmp(r->method, "POST") == 0) { /* small bodies from memory only */
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(r->body ? r->body_len : 0));
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body ? (const char *)r->body : "");
        if (r->body) REMOTE_HDR("Content-Type: application/xml");
    } else if (strcmp(r->method, "GET") != 0) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);
    }
    char range[64];
    if (r->dst) {
        snprintf(range, sizeof range, "%" PRId64 "-%" PRId64, r->off, r->off + r->len - 1);
        curl_easy_setopt(h, CURLOPT_RANGE, range);
    }
    if (!t->s3 && (strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0)) {
        curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L); /* a signed request is never redirected */
        curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
    }
    /* No 100-continue round trip before a body; but not for s3://, where libcurl
     * 7.88 would sign the empty "expect" header it then leaves out. */
    if (!t->s3) REMOTE_HDR("Expect:");
    char sigv4[128];
    char tokhdr[sizeof t->cred.token + 32];
    tokhdr[0] = '\0';
    if (t->s3) {
        /* libcurl 7.88 signs but neither adds x-amz-content-sha256, which S3 requires,
         * nor canonicalises the query (the caller's query is already canonical); it
         * signs every header given here and uses this one's value as the payload hash. */
        snprintf(sigv4, sizeof sigv4, "aws:amz:%s:s3", t->cred.region);
        curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4);
        curl_easy_setopt(h, CURLOPT_USERNAME, t->cred.key_id);
        curl_easy_setopt(h, CURLOPT_PASSWORD, t->cred.secret);
        REMOTE_HDR(body ? "x-amz-content-sha256: UNSIGNED-PAYLOAD"
                        : "x-amz-content-sha256: " REMOTE_EMPTY_SHA256);
        if (t->cred.token[0]) {
            snprintf(tokhdr, sizeof tokhdr, "x-amz-security-token: %s", t->cred.token);
            REMOTE_HDR(tokhdr);
        }
    }
#undef REMOTE_HDR
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);

    CURLcode cc = hdr_oom ? CURLE_OUT_OF_MEMORY : curl_easy_perform(h);
    remote_pool_put(h);
    remote_free_headers(hdrs);
    remote_wipe(tokhdr, sizeof tokhdr);

    if (x->oom || cc == CURLE_OUT_OF_MEMORY) {
        snprintf(msg, cap, "out of memory");
        *kind = REMOTE_K_OOM;
        return REMOTE_FAIL;
    }
    if (cc == CURLE_WRITE_ERROR && x->range_done) cc = CURLE_OK;
    if (x->bad_range) {
        if (x->cr_total >= 0 && x->cr_total < r->off + r->len) {
            snprintf(msg, cap, "bytes [%" PRId64 ", %" PRId64 ") lie beyond the end of the %" PRId64
                     "-byte object", r->off, r->off + r->len, x->cr_total);
            *kind = REMOTE_K_RANGE;
        } else {
            snprintf(msg, cap, "asked for bytes %" PRId64 "-%" PRId64 ", the server answered %s%"
                     PRId64 "-%" PRId64, r->off, r->off + r->len - 1,
                     x->cr_seen ? "bytes " : "no Content-Range, or ", x->cr_first, x->cr_last);
        }
        return REMOTE_FAIL;
    }
    if (x->too_big) {
        snprintf(msg, cap, "the object is larger than the %zu-byte limit%s", r->out ? r->out->max : 0,
                 x->clen >= 0 ? "" : " (no Content-Length)");
        if (x->clen >= 0)
            snprintf(msg, cap, "the object is %" PRId64 " bytes, more than the %zu-byte limit",
                     x->clen, r->out ? r->out->max : 0);
        return REMOTE_FAIL;
    }
    if (x->read_errno) {
        snprintf(msg, cap, "reading the file to upload failed at byte %" PRId64 ": %s",
                 r->body_off + x->sent, strerror(x->read_errno));
        *kind = REMOTE_K_FILE;
        return REMOTE_FAIL;
    }
    if (cc != CURLE_OK) {
        const char *e = errbuf[0] ? errbuf : curl_easy_strerror(cc);
        switch (cc) {
        case CURLE_OPERATION_TIMEDOUT:
            snprintf(msg, cap, "timed out after %g s (data.timeout_s)", o->timeout_s);
            *kind = REMOTE_K_TIMEOUT;
            return REMOTE_RETRY;
        case CURLE_PARTIAL_FILE: {
            int64_t want = x->clen, have = x->rx;
            if (r->dst && x->status == 206) want = r->len, have = x->got;
            snprintf(msg, cap, "truncated body: %" PRId64 " of %" PRId64 " bytes", have, want);
            *kind = REMOTE_K_TRUNC;
            return REMOTE_RETRY;
        }
        case CURLE_RECV_ERROR:
        case CURLE_SEND_ERROR:
            if (strstr(e, "reset") || strstr(e, "Reset") || strstr(e, "104"))
                snprintf(msg, cap, "connection reset");
            else
                snprintf(msg, cap, "connection failed: %s", e);
            *kind = REMOTE_K_CONN;
            return REMOTE_RETRY;
        case CURLE_GOT_NOTHING:
            snprintf(msg, cap, "connection closed with no response");
            *kind = REMOTE_K_CONN;
            return REMOTE_RETRY;
        case CURLE_COULDNT_CONNECT:
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_RESOLVE_PROXY:
            snprintf(msg, cap, "cannot connect: %s", e);
            *kind = REMOTE_K_CONN;
            return REMOTE_RETRY;
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_HTTP2:
        case CURLE_HTTP2_STREAM:
            snprintf(msg, cap, "%s", e);
            *kind = REMOTE_K_CONN;
            return REMOTE_RETRY;
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_CACERT_BADFILE:
            snprintf(msg, cap, "TLS: %s", e);
            *kind = REMOTE_K_TLS;
            return REMOTE_FAIL;
        default:
            snprintf(msg, cap, "%s (curl error %d)", e, (int)cc);
            return REMOTE_FAIL;
        }
    }

    long st = x->status;
    const char *reason = remote_reason(st, x->reason);
    if (st >= 200 && st < 300) {
        if (r->dst && x->got != r->len) {
            if (x->status != 206 && x->clen >= 0 && x->clen < r->off + r->len) {
                snprintf(msg, cap, "bytes [%" PRId64 ", %" PRId64 ") lie beyond the end of the %"
                         PRId64 "-byte object", r->off, r->off + r->len, x->clen);
                *kind = REMOTE_K_RANGE;
                return REMOTE_FAIL;
            }
            snprintf(msg, cap, "truncated body: %" PRId64 " of %" PRId64 " bytes", x->got, r->len);
            *kind = REMOTE_K_TRUNC;
            return REMOTE_RETRY;
        }
        if (r->body_errors && r->out && r->out->data && strstr(r->out->data, "<Error>")) {
            char code[160];
            remote_s3_code(r->out->data, false, code, sizeof code);
            snprintf(msg, cap, "HTTP %ld with an error in its body%s", st, code);
            *kind = REMOTE_K_HTTP;
            return REMOTE_RETRY;
        }
        r->content_length = x->clen;
        r->total = x->cr_total >= 0 ? x->cr_total : (x->status == 200 ? x->clen : -1);
        snprintf(r->etag, sizeof r->etag, "%s", x->etag);
        return REMOTE_DONE;
    }
    char code[360];
    bool say = st != 401 && st != 403 && st != 404 && st != 416 && st < 500;
    remote_s3_code(x->errbody, say, code, sizeof code);
    if (st == 408 || st == 429 || st >= 500) {
        snprintf(msg, cap, "HTTP %ld %s%s", st, reason, code);
        *kind = REMOTE_K_HTTP;
        return REMOTE_RETRY;
    }
    if (st == 401 || st == 403) {
        snprintf(msg, cap, "HTTP %ld %s: %s%s", st, reason,
                 t->s3 ? "the credentials were refused" : "access denied", code);
        *kind = REMOTE_K_DENIED;
    } else if (st == 404) {
        snprintf(msg, cap, "HTTP 404 %s%s", reason, code);
        *kind = REMOTE_K_NOTFOUND;
    } else if (st == 416) {
        if (x->cr_total >= 0)
            snprintf(msg, cap, "HTTP 416 %s: bytes [%" PRId64 ", %" PRId64 ") start beyond the end "
                     "of the %" PRId64 "-byte object", reason, r->off, r->off + r->len, x->cr_total);
        else
            snprintf(msg, cap, "HTTP 416 %s: bytes [%" PRId64 ", %" PRId64 ") start beyond the end "
                     "of the object", reason, r->off, r->off + r->len);
        *kind = REMOTE_K_RANGE;
    } else if (st >= 300 && st < 400) {
        snprintf(msg, cap, "HTTP %ld %s: a redirect%s", st, reason,
                 t->s3 ? " (the bucket may be in another region: set AWS_REGION)" : " (too many, or "
                 "not followed)");
    } else {
        snprintf(msg, cap, "HTTP %ld %s%s", st, reason, code);
    }
    return REMOTE_FAIL;
}

static void remote_hint(remote_kind kind, const remote_target *t, const char *msg) {
    switch (kind) {
    case REMOTE_K_HTTP:
        ct_error_hint("the server kept failing: raise data.retries or data.timeout_s, or try later");
        break;
    case REMOTE_K_TIMEOUT:
        ct_error_hint("raise data.timeout_s (the seconds a request may stall) or check the network");
        break;
    case REMOTE_K_CONN:
        ct_error_hint("check that the server is up and reachable at the URL's host and port; "
                      "raise data.retries for a flaky link");
        break;
    case REMOTE_K_TRUNC:
        ct_error_hint("the connection keeps dropping mid-transfer: raise data.retries or "
                      "data.timeout_s");
        break;
    case REMOTE_K_NOTFOUND:
        if (strstr(msg, "NoSuchBucket"))
            ct_error_hint("the bucket does not exist: check its name, AWS_ENDPOINT_URL and AWS_REGION");
        else
            ct_error_hint("check the URL (data.train / data.val): it must name a `ctrain prepare` output");
        break;
    case REMOTE_K_DENIED:
        if (t->s3)
            ct_error_hint("check the AWS credentials (from %s), that they may access this bucket, "
                          "and AWS_REGION", t->cred.source);
        else
            ct_error_hint("the server refused access: a presigned URL may have expired");
        break;
    case REMOTE_K_TLS:
        ct_error_hint("the server's certificate is not trusted: set CURL_CA_BUNDLE%s to its CA file",
                      t->s3 ? " or AWS_CA_BUNDLE" : "");
        break;
    case REMOTE_K_RANGE:
        ct_error_hint("the object is shorter than expected: it may have changed while being read");
        break;
    default:
        if (t->s3 && (strstr(msg, "AuthorizationHeaderMalformed") || strstr(msg, "PermanentRedirect") ||
                      strstr(msg, "a redirect")))
            ct_error_hint("set AWS_REGION to the bucket's region");
        break;
    }
}

ct_status remote_run(const remote_target *t, remote_req *r, const ct_remote_opts *o) {
    ct_status st = remote_ready();
    if (st) return st;
    ct_remote_opts op = o ? *o : ct_remote_opts_default();
    if (op.retries < 0) op.retries = 0;
    if (!(op.timeout_s > 0)) op.timeout_s = ct_remote_opts_default().timeout_s;
    if (!(op.backoff_s >= 0)) op.backoff_s = 0;
    r->content_length = r->total = -1;
    r->etag[0] = '\0';
    r->transient = false;

    size_t ulen = strlen(t->url) + (r->query ? strlen(r->query) + 1 : 0) + 1;
    char *url = malloc(ulen);
    if (!url) return r->quiet ? CT_ERR_OOM : CT_ERR(CT_ERR_OOM, "%s: out of memory", t->disp);
    snprintf(url, ulen, "%s%s%s", t->url, r->query ? "?" : "", r->query ? r->query : "");

    remote_xfer *x = malloc(sizeof *x);
    if (!x) {
        free(url);
        return r->quiet ? CT_ERR_OOM : CT_ERR(CT_ERR_OOM, "%s: out of memory", t->disp);
    }
    char msg[640];
    remote_kind kind = REMOTE_K_OTHER;
    remote_verdict v = REMOTE_FAIL;
    uint64_t rng = (uint64_t)remote_now_ns() ^ (uint64_t)(uintptr_t)x;
    int attempt = 0;
    for (;; attempt++) {
        if (attempt > 0) {
            double wait = op.backoff_s * ldexp(1.0, attempt - 1);
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17; /* xorshift64 */
            wait *= 0.75 + 0.5 * (double)(rng >> 11) * 0x1.0p-53; /* +-25%: ranks do not retry in step */
            if (x->retry_after > wait) wait = x->retry_after;
            if (wait > REMOTE_BACKOFF_CAP_S) wait = REMOTE_BACKOFF_CAP_S;
            ct_log(CT_LOG_DEBUG, "%s: %s; retry %d of %d in %.2f s", t->disp, msg, attempt,
                   op.retries, wait);
            int64_t t0 = remote_now_ns();
            remote_sleep(wait);
            remote_add_wait(remote_now_ns() - t0);
            atomic_fetch_add(&remote_n_retries, 1);
        }
        int64_t t0 = remote_now_ns();
        v = remote_attempt(t, url, r, &op, x, msg, sizeof msg, &kind);
        remote_add_wait(remote_now_ns() - t0);
        atomic_fetch_add(&remote_n_requests, 1);
        atomic_fetch_add(&remote_n_bytes, x->rx);
        if (v != REMOTE_RETRY || attempt >= op.retries) break;
    }
    free(x);
    free(url);
    if (v == REMOTE_DONE) return CT_OK;
    r->transient = v == REMOTE_RETRY;
    ct_status code = kind == REMOTE_K_OOM ? CT_ERR_OOM : CT_ERR_IO;
    if (r->quiet) return code;
    char suffix[96] = "";
    if (v == REMOTE_RETRY)
        snprintf(suffix, sizeof suffix, "%s %d attempt%s (data.retries=%d)",
                 kind == REMOTE_K_TIMEOUT ? ", on each of" : " after", attempt + 1,
                 attempt ? "s" : "", op.retries);
    st = CT_ERR(code, "%s: %s%s", t->disp, msg, suffix);
    remote_hint(kind, t, msg);
    return st;
}

/* ---------------------------------------------------------------- targets */

ct_status remote_target_init(remote_target *t, const char *spec) {
    memset(t, 0, sizeof *t);
    if (!ct_remote_is_url(spec))
        return CT_ERR(CT_ERR_ARG, "%s: not a remote URL (http://, https:// or s3://)",
                      spec ? spec : "(null)");
    ct_remote_display(spec, t->disp, sizeof t->disp - 40);
    if (strncasecmp(spec, "s3://", 5) == 0) {
        t->s3 = true;
        return remote_s3_resolve(t, spec);
    }
    size_t n = strlen(spec) + 1;
    t->url = malloc(n);
    if (!t->url) return CT_ERR(CT_ERR_OOM, "%s: out of memory", t->disp);
    memcpy(t->url, spec, n);
    return CT_OK;
}

void remote_target_free(remote_target *t) {
    if (!t) return;
    free(t->url);
    t->url = NULL;
    remote_wipe(&t->cred, sizeof t->cred);
}

/* ---------------------------------------------------------------- the API */

static ct_status remote_finish(remote_target *t, ct_status st) {
    remote_target_free(t);
    if (st) remote_count_failure();
    return st;
}

ct_status ct_remote_get_range(const char *url, int64_t off, int64_t len, void *buf,
                              const ct_remote_opts *o) {
    remote_target t;
    ct_status st = remote_target_init(&t, url);
    if (st) return remote_finish(&t, st);
    if (off < 0 || len < 1 || !buf || off > INT64_MAX - len) {
        st = CT_ERR(CT_ERR_ARG, "%s: cannot read %" PRId64 " bytes at offset %" PRId64, t.disp, len, off);
        return remote_finish(&t, st);
    }
    remote_req r = {.method = "GET", .off = off, .len = len, .dst = buf, .fd = -1};
    return remote_finish(&t, remote_run(&t, &r, o));
}

ct_status ct_remote_get(const char *url, size_t max, char **data, size_t *len,
                        const ct_remote_opts *o) {
    return ct_remote_get_ex(url, max, data, len, o, NULL);
}

ct_status ct_remote_get_ex(const char *url, size_t max, char **data, size_t *len,
                           const ct_remote_opts *o, bool *transient) {
    *data = NULL;
    if (len) *len = 0;
    if (transient) *transient = false;
    remote_target t;
    ct_status st = remote_target_init(&t, url);
    if (st) return remote_finish(&t, st);
    remote_buf b = {.max = max};
    remote_req r = {.method = "GET", .out = &b, .fd = -1};
    st = remote_run(&t, &r, o);
    if (transient) *transient = st && r.transient;
    if (st == CT_OK && !b.data) { /* an empty object */
        b.data = malloc(1);
        if (!b.data) st = CT_ERR(CT_ERR_OOM, "%s: out of memory", t.disp);
        else b.data[0] = '\0';
    }
    if (st) {
        free(b.data);
        return remote_finish(&t, st);
    }
    *data = b.data;
    if (len) *len = b.len;
    return remote_finish(&t, CT_OK);
}

ct_status ct_remote_size(const char *url, int64_t *size, const ct_remote_opts *o) {
    *size = -1;
    remote_target t;
    ct_status st = remote_target_init(&t, url);
    if (st) return remote_finish(&t, st);
    remote_req r = {.method = "HEAD", .fd = -1};
    st = remote_run(&t, &r, o);
    if (st == CT_OK && r.content_length < 0) { /* no length on HEAD: ask for one byte */
        uint8_t one;
        remote_req g = {.method = "GET", .off = 0, .len = 1, .dst = &one, .fd = -1};
        st = remote_run(&t, &g, o);
        if (st == CT_OK && g.total < 0)
            st = CT_ERR(CT_ERR_IO, "%s: the server gives no object size (no Content-Length on "
                        "HEAD, no Content-Range on a range GET)", t.disp);
        r.content_length = g.total;
    }
    if (st == CT_OK) *size = r.content_length;
    return remote_finish(&t, st);
}

ct_status ct_remote_put(const char *url, const void *data, size_t len, const ct_remote_opts *o) {
    remote_target t;
    ct_status st = remote_target_init(&t, url);
    if (st) return remote_finish(&t, st);
    if (!data && len) return remote_finish(&t, CT_ERR(CT_ERR_ARG, "%s: no data to put", t.disp));
    static const uint8_t empty[1];
    remote_req r = {.method = "PUT", .body = data ? data : empty, .body_len = (int64_t)len, .fd = -1};
    return remote_finish(&t, remote_run(&t, &r, o));
}

ct_status ct_remote_put_file(const char *url, const char *path, int64_t part_bytes,
                             const ct_remote_opts *o) {
    remote_target t;
    int fd = -1;
    ct_status st = remote_target_init(&t, url);
    if (st) goto done;
    if (part_bytes == 0) part_bytes = REMOTE_PART_DEFAULT;
    if (part_bytes < REMOTE_PART_MIN) {
        st = CT_ERR(CT_ERR_ARG, "%s: part size %" PRId64 " bytes is below S3's minimum of 5 MiB "
                    "(%lld bytes)", t.disp, part_bytes, REMOTE_PART_MIN);
        goto done;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        st = CT_ERR(CT_ERR_IO, "%s: cannot open the file to upload: %s", path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = CT_ERR(CT_ERR_IO, "%s: not a regular file", path);
        goto done;
    }
    int64_t size = (int64_t)sb.st_size;
    if (t.s3 && size > part_bytes) {
        st = remote_s3_put_multipart(&t, fd, size, part_bytes, o);
    } else {
        remote_req r = {.method = "PUT", .fd = fd, .body_off = 0, .body_len = size};
        st = remote_run(&t, &r, o);
    }
done:
    if (fd >= 0) close(fd);
    return remote_finish(&t, st);
}
