/*
 * Shared helpers of the libFuzzer harnesses (tests/fuzz/fuzz_*.c): a private
 * directory per process for the files a reader is given, raw file writes, the
 * oracles every harness applies, and the splitting of one input into several
 * files. Each harness is one LLVMFuzzerTestOneInput; it is linked either with
 * libFuzzer (clang -fsanitize=fuzzer, `make fuzz`) or with replay_main.c (any
 * compiler: the `fuzz_replay` test runs the corpora and reproducers).
 *
 * Oracles: a harness calls abort() (through fuzz_fail) when one breaks, so
 * libFuzzer saves the input as a crash. Common to all readers: a reader that
 * fails sets ct_last_error() to a non-empty message that names the path it was
 * given, with the status it returned.
 *
 * Environment: CT_FUZZ_VERBOSE=1 keeps the library's log on stderr (quiet
 * otherwise); CT_FUZZ_SEED_OUT=DIR makes harnesses that build their fixtures
 * with the library (ckpt, hf_index, hf_config, safetensors) write their seed
 * inputs into DIR (tests/fuzz/make_corpus.sh uses it).
 * Not a harness itself.
 */
#ifndef CT_FUZZ_H
#define CT_FUZZ_H

#include "ctrain/core.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define FUZZ_PATH_MAX 512

/* The entry point libFuzzer (or replay_main.c) calls once per input. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An oracle broke: say which and abort, so the fuzzer keeps the input. */
static inline void fuzz_fail(const char *fmt, ...) CT_PRINTF(1, 2);
static inline void fuzz_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "\n==fuzz oracle failed== ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
    abort();
}

/* A harness bug or a broken machine (cannot write /tmp): not a finding. */
static inline void fuzz_die(const char *what, const char *path) {
    fprintf(stderr, "fuzz harness: %s %s: %s\n", what, path, strerror(errno));
    exit(3);
}

static inline void fuzz_log_sink(ct_log_level level, const char *msg, void *user) {
    (void)level;
    (void)msg;
    (void)user;
}

/* Remove path and, for a directory, everything below it (no symlinks followed). */
static inline void fuzz_rm_rf(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            struct dirent *e;
            char sub[FUZZ_PATH_MAX];
            while ((e = readdir(d)) != NULL) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
                int k = snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
                if (k > 0 && (size_t)k < sizeof sub) fuzz_rm_rf(sub);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

static char fuzz_dir_buf[FUZZ_PATH_MAX];

static inline void fuzz_dir_cleanup(void) {
    if (fuzz_dir_buf[0]) fuzz_rm_rf(fuzz_dir_buf);
}

/* Remove the directories of processes with this tag that died without their
 * exit handlers (a crash, an abort: libFuzzer's fork mode leaves one per
 * finding): ctfuzz_<tag>_<pid>_* whose pid is gone. */
static inline void fuzz_sweep(const char *tmp, const char *tag) {
    char prefix[128];
    int pl = snprintf(prefix, sizeof prefix, "ctfuzz_%s_", tag);
    DIR *d = opendir(tmp);
    if (!d || pl <= 0 || (size_t)pl >= sizeof prefix) {
        if (d) closedir(d);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, (size_t)pl) != 0) continue;
        char *end = NULL;
        long pid = strtol(e->d_name + pl, &end, 10);
        if (pid <= 0 || !end || *end != '_') continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to judge */
        char path[FUZZ_PATH_MAX];
        int k = snprintf(path, sizeof path, "%s/%s", tmp, e->d_name);
        if (k > 0 && (size_t)k < sizeof path) fuzz_rm_rf(path);
    }
    closedir(d);
}

/* This process's private directory, made on the first call (removed at exit):
 * /tmp/ctfuzz_<tag>_<pid>_XXXXXX (under $TMPDIR when set). Also silences the
 * library's log unless CT_FUZZ_VERBOSE is set. */
static inline const char *fuzz_dir(const char *tag) {
    if (!fuzz_dir_buf[0]) {
        const char *tmp = getenv("TMPDIR");
        if (!tmp || !tmp[0]) tmp = "/tmp";
        fuzz_sweep(tmp, tag);
        snprintf(fuzz_dir_buf, sizeof fuzz_dir_buf, "%s/ctfuzz_%s_%ld_XXXXXX", tmp, tag,
                 (long)getpid());
        if (!mkdtemp(fuzz_dir_buf)) fuzz_die("cannot create", fuzz_dir_buf);
        atexit(fuzz_dir_cleanup);
        const char *v = getenv("CT_FUZZ_VERBOSE");
        if (!v || !v[0] || !strcmp(v, "0")) ct_log_set(fuzz_log_sink, NULL);
    }
    return fuzz_dir_buf;
}

/* out = dir + "/" + name (FUZZ_PATH_MAX bytes). */
static inline const char *fuzz_join(char *out, const char *dir, const char *name) {
    int k = snprintf(out, FUZZ_PATH_MAX, "%s/%s", dir, name);
    if (k < 0 || k >= FUZZ_PATH_MAX) {
        errno = ENAMETOOLONG;
        fuzz_die("path too long", dir);
    }
    return out;
}

static inline void fuzz_mkdir(const char *path) {
    if (mkdir(path, 0700) != 0 && errno != EEXIST) fuzz_die("cannot create", path);
}

/* Write n bytes to path (truncating). */
static inline void fuzz_write(const char *path, const void *data, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp) fuzz_die("cannot create", path);
    size_t w = n ? fwrite(data, 1, n, fp) : 0;
    if (fclose(fp) != 0 || w != n) fuzz_die("cannot write", path);
}

/* Read a whole file into a malloc'd buffer (NUL after the end); NULL when it
 * cannot be read. */
static inline char *fuzz_read(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (!buf) break;
        n += fread(buf + n, 1, cap - n, fp);
        if (n < cap) break;
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
        }
        buf = nb;
    }
    fclose(fp);
    if (!buf) return NULL;
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

/* Copy file src to dst (a harness fixture). */
static inline void fuzz_copy(const char *src, const char *dst) {
    size_t n = 0;
    char *b = fuzz_read(src, &n);
    if (!b) fuzz_die("cannot read", src);
    fuzz_write(dst, b, n);
    free(b);
}

/* Write a seed input into $CT_FUZZ_SEED_OUT/name when that is set. */
static inline void fuzz_seed_out(const char *name, const void *data, size_t n) {
    const char *out = getenv("CT_FUZZ_SEED_OUT");
    if (!out || !out[0]) return;
    char path[FUZZ_PATH_MAX];
    fuzz_write(fuzz_join(path, out, name), data, n);
}

/* The common oracle, after a reader of `path` returned st: on failure the
 * error slot holds the status returned and a non-empty message naming path.
 * Call ct_error_clear() before the reader, so an older message cannot pass. */
static inline void fuzz_check_error(ct_status st, const char *what, const char *path) {
    const char *v = getenv("CT_FUZZ_VERBOSE");
    if (v && v[0] && strcmp(v, "0") != 0) /* which seeds a reader takes */
        fprintf(stderr, "fuzz: %s: %s%s\n", what, st ? "refused: " : "accepted",
                st ? ct_last_error() : "");
    if (st == CT_OK) return;
    const char *e = ct_last_error();
    if (!e || !e[0])
        fuzz_fail("%s failed (%s) but ct_last_error() is empty", what, ct_status_str(st));
    if (!strstr(e, path))
        fuzz_fail("%s failed (%s) with an error that does not name %s: %s", what,
                  ct_status_str(st), path, e);
    if (ct_last_status() != st)
        fuzz_fail("%s returned %s but the error slot holds %s: %s", what, ct_status_str(st),
                  ct_status_str(ct_last_status()), e);
}

/* Split data at NUL bytes into at most max parts (the last part keeps any
 * further NULs); *n gets the number of parts (1 when there is no NUL). */
typedef struct fuzz_part {
    const uint8_t *p;
    size_t n;
} fuzz_part;
static inline int fuzz_split(const uint8_t *data, size_t size, fuzz_part *parts, int max) {
    int k = 0;
    size_t start = 0;
    for (size_t i = 0; i < size && k + 1 < max; i++) {
        if (data[i]) continue;
        parts[k].p = data + start;
        parts[k].n = i - start;
        k++;
        start = i + 1;
    }
    parts[k].p = data + start;
    parts[k].n = size - start;
    return k + 1;
}

#endif
