/*
 * remote_tool: a small command line over src/data/shard/remote.h for the tests
 * (tests/cli/test_remote_transport.py) and for trying a store by hand.
 *
 *   remote_tool [--retries N] [--timeout S] [--backoff S] COMMAND ...
 *     get URL OFF LEN OUTFILE       ct_remote_get_range into OUTFILE
 *     cat URL OUTFILE [MAX]         ct_remote_get (MAX bytes, default 1 GiB)
 *     size URL                      ct_remote_size: prints "size N"
 *     put FILE URL [PART_BYTES]     ct_remote_put_file
 *     putmem FILE URL               ct_remote_put of FILE's bytes from memory
 *     read URL CHUNK OUTFILE [THREADS]  the whole object in CHUNK-byte ranges,
 *                                   THREADS at once (default 1): prints MB/s
 *     display URL                   ct_remote_display
 *     stats                         only the counters
 * The options default to $REMOTE_RETRIES, $REMOTE_TIMEOUT, $REMOTE_BACKOFF, then
 * ct_remote_opts_default(). Every command ends with the line
 * "stats requests=N retries=N failures=N bytes=N wait_s=S" on stdout.
 * Errors: the message and hint on stderr, exit status 2 (1: usage).
 */
#include "data/shard/remote.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int tool_fail(const char *cmd) {
    fprintf(stderr, "remote_tool %s: error: %s\n", cmd, ct_last_error());
    if (ct_last_hint()[0]) fprintf(stderr, "  hint: %s\n", ct_last_hint());
    return 2;
}

static int tool_usage(void) {
    fprintf(stderr, "usage: remote_tool [--retries N] [--timeout S] [--backoff S] "
                    "get|cat|size|put|putmem|read|display|stats ...\n");
    return 1;
}

static void tool_stats(void) {
    ct_remote_stats s;
    ct_remote_stats_get(&s);
    printf("stats requests=%" PRId64 " retries=%" PRId64 " failures=%" PRId64 " bytes=%" PRId64
           " wait_s=%.3f\n", s.requests, s.retries, s.failures, s.bytes, s.wait_s);
}

static int tool_write(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "remote_tool: cannot write %s\n", path);
        return 2;
    }
    return 0;
}

static char *tool_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *d = malloc(sz > 0 ? (size_t)sz : 1);
    if (d && fread(d, 1, (size_t)sz, f) != (size_t)sz) {
        free(d);
        d = NULL;
    }
    fclose(f);
    *n = (size_t)sz;
    return d;
}

typedef struct tool_reader {
    const char *url;
    const ct_remote_opts *o;
    uint8_t *buf;
    int64_t size, chunk;
    _Atomic int64_t next; /* next chunk index */
    _Atomic int failed;
    char err[1024];
    pthread_mutex_t mu;
} tool_reader;

static void *tool_read_worker(void *arg) {
    tool_reader *r = arg;
    for (;;) {
        int64_t i = atomic_fetch_add(&r->next, 1);
        int64_t off = i * r->chunk;
        if (off >= r->size || atomic_load(&r->failed)) return NULL;
        int64_t n = r->size - off < r->chunk ? r->size - off : r->chunk;
        if (ct_remote_get_range(r->url, off, n, r->buf + off, r->o) != CT_OK) {
            pthread_mutex_lock(&r->mu);
            if (!atomic_exchange(&r->failed, 1))
                snprintf(r->err, sizeof r->err, "%s%s%s", ct_last_error(),
                         ct_last_hint()[0] ? "\n  hint: " : "", ct_last_hint());
            pthread_mutex_unlock(&r->mu);
            return NULL;
        }
    }
}

static double tool_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int tool_read(const char *url, int64_t chunk, const char *out, int threads,
                     const ct_remote_opts *o) {
    int64_t size;
    if (ct_remote_size(url, &size, o) != CT_OK) return tool_fail("read");
    tool_reader r = {.url = url, .o = o, .size = size, .chunk = chunk};
    pthread_mutex_init(&r.mu, NULL);
    r.buf = malloc(size > 0 ? (size_t)size : 1);
    if (!r.buf || chunk < 1 || threads < 1 || threads > 64) {
        fprintf(stderr, "remote_tool read: bad chunk or threads, or out of memory\n");
        free(r.buf);
        return 1;
    }
    pthread_t th[64];
    double t0 = tool_now();
    for (int i = 0; i < threads; i++) pthread_create(&th[i], NULL, tool_read_worker, &r);
    for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
    double dt = tool_now() - t0;
    int rc = 0;
    if (r.failed) {
        fprintf(stderr, "remote_tool read: error: %s\n", r.err);
        rc = 2;
    } else {
        printf("read %" PRId64 " bytes in %.3f s: %.1f MB/s\n", size, dt, (double)size / dt / 1e6);
        rc = tool_write(out, r.buf, (size_t)size);
    }
    free(r.buf);
    pthread_mutex_destroy(&r.mu);
    return rc;
}

static int tool_run(int argc, char **argv, const ct_remote_opts *o) {
    const char *cmd = argv[0];
    if (strcmp(cmd, "get") == 0 && argc == 5) {
        int64_t off = strtoll(argv[2], NULL, 10), len = strtoll(argv[3], NULL, 10);
        uint8_t *buf = malloc(len > 0 ? (size_t)len : 1);
        if (!buf) return 2;
        int rc = ct_remote_get_range(argv[1], off, len, buf, o) ? tool_fail(cmd)
                                                                 : tool_write(argv[4], buf, (size_t)len);
        free(buf);
        return rc;
    }
    if (strcmp(cmd, "cat") == 0 && (argc == 3 || argc == 4)) {
        size_t max = argc == 4 ? (size_t)strtoull(argv[3], NULL, 10) : (size_t)1 << 30;
        char *data;
        size_t n;
        if (ct_remote_get(argv[1], max, &data, &n, o)) return tool_fail(cmd);
        int rc = data[n] == '\0' ? tool_write(argv[2], data, n) : 3; /* NUL beyond the end */
        free(data);
        return rc;
    }
    if (strcmp(cmd, "size") == 0 && argc == 2) {
        int64_t size;
        if (ct_remote_size(argv[1], &size, o)) return tool_fail(cmd);
        printf("size %" PRId64 "\n", size);
        return 0;
    }
    if (strcmp(cmd, "put") == 0 && (argc == 3 || argc == 4)) {
        int64_t part = argc == 4 ? strtoll(argv[3], NULL, 10) : 0;
        return ct_remote_put_file(argv[2], argv[1], part, o) ? tool_fail(cmd) : 0;
    }
    if (strcmp(cmd, "putmem") == 0 && argc == 3) {
        size_t n;
        char *d = tool_read_file(argv[1], &n);
        if (!d) {
            fprintf(stderr, "remote_tool putmem: cannot read %s\n", argv[1]);
            return 2;
        }
        int rc = ct_remote_put(argv[2], d, n, o) ? tool_fail(cmd) : 0;
        free(d);
        return rc;
    }
    if (strcmp(cmd, "read") == 0 && (argc == 4 || argc == 5))
        return tool_read(argv[1], strtoll(argv[2], NULL, 10), argv[3],
                         argc == 5 ? atoi(argv[4]) : 1, o);
    if (strcmp(cmd, "display") == 0 && argc == 2) {
        char buf[512];
        printf("%s\n", ct_remote_display(argv[1], buf, sizeof buf));
        return 0;
    }
    if (strcmp(cmd, "stats") == 0 && argc == 1) return 0;
    return tool_usage();
}

int main(int argc, char **argv) {
    ct_remote_opts o = ct_remote_opts_default();
    const char *e;
    if ((e = getenv("REMOTE_RETRIES")) != NULL) o.retries = atoi(e);
    if ((e = getenv("REMOTE_TIMEOUT")) != NULL) o.timeout_s = atof(e);
    if ((e = getenv("REMOTE_BACKOFF")) != NULL) o.backoff_s = atof(e);
    int i = 1;
    for (; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        if (strcmp(argv[i], "--retries") == 0) o.retries = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--timeout") == 0) o.timeout_s = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--backoff") == 0) o.backoff_s = atof(argv[i + 1]);
        else return tool_usage();
    }
    if (i >= argc) return tool_usage();
    int rc = tool_run(argc - i, argv + i, &o);
    tool_stats();
    return rc;
}
