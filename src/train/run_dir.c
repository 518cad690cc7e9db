/*
 * The run directory's lock, its earlier results, and their removal (see
 * run_dir.h). The lock is flock(2) on run.dir/run.lock: the kernel drops it
 * when its process dies, however it dies, so a stale file is simply locked
 * again by the next run. The file is unlinked on release while still locked;
 * a run that opened the old file before the unlink sees, after locking it,
 * that the path names another file (or none) and tries again.
 * Leaves out: locking across machines on filesystems without flock (some NFS
 * setups): two hosts could then both hold "the" lock.
 */
#include "train/run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/fileio.h"

struct run_lock {
    int fd;
    char path[CT_PATH_MAX + 16];
    char dir[CT_PATH_MAX];
    char top[CT_PATH_MAX]; /* the outermost directory run_dir_lock made; "" none */
};

/* The outermost missing directory of the path dir (dir itself when only it
 * is missing) into top; "" when dir exists. */
static void first_missing(const char *dir, char *top, size_t cap) {
    char p[CT_PATH_MAX];
    struct stat sb;
    top[0] = '\0';
    snprintf(p, sizeof p, "%s", dir);
    while (p[0] && stat(p, &sb) != 0 && errno == ENOENT) {
        snprintf(top, cap, "%s", p);
        char *slash = strrchr(p, '/');
        while (slash && slash > p && slash[1] == '\0') { /* trailing slashes */
            *slash = '\0';
            slash = strrchr(p, '/');
        }
        if (!slash || slash == p) break;
        *slash = '\0';
    }
}

/* Remove the empty directories run_dir_lock made, from dir up to top. */
static void remove_made(const char *dir, const char *top) {
    if (!top[0]) return;
    char p[CT_PATH_MAX];
    snprintf(p, sizeof p, "%s", dir);
    while (rmdir(p) == 0 && strcmp(p, top) != 0) {
        char *slash = strrchr(p, '/');
        if (!slash || slash == p) break;
        *slash = '\0';
    }
}

/* The holder's record, "pid 123 on host vm since 2026-11-24 21:40:02 UTC
 * (ctrain train)", from the lock file's text. */
static void lock_holder(int fd, char *out, size_t cap) {
    char buf[512];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    char *nl = strchr(buf, '\n');
    if (nl) *nl = '\0';
    snprintf(out, cap, "%s", buf[0] ? buf : "a process that left no record");
}

static void lock_record(char *out, size_t cap, const char *what) {
    char host[256] = "?", when[64] = "?";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    snprintf(out, cap, "pid %ld on host %s since %s (%s)\n", (long)getpid(), host, when, what);
}

ct_status run_dir_lock(const char *dir, const char *what, run_lock **out) {
    *out = NULL;
    run_lock *l = calloc(1, sizeof *l);
    if (!l) return CT_ERR(CT_ERR_OOM, "out of memory locking run.dir");
    l->fd = -1;
    snprintf(l->dir, sizeof l->dir, "%s", dir);
    if (snprintf(l->path, sizeof l->path, "%s/%s", dir, RUN_LOCK_NAME) >= (int)sizeof l->path) {
        free(l);
        return CT_ERR(CT_ERR_ARG, "run.dir = %s: path too long", dir);
    }
    first_missing(dir, l->top, sizeof l->top);
    ct_status st = ct_mkdir_p(dir);
    if (st) {
        free(l);
        return st;
    }
    for (int attempt = 0; attempt < 8; attempt++) {
        int fd = open(l->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
            st = CT_ERR(CT_ERR_IO, "run.dir = %s: cannot create %s: %s", dir, l->path,
                        strerror(errno));
            break;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            char holder[512];
            lock_holder(fd, holder, sizeof holder);
            close(fd);
            if (e != EWOULDBLOCK) {
                st = CT_ERR(CT_ERR_IO, "run.dir = %s: cannot lock %s: %s", dir, l->path,
                            strerror(e));
                break;
            }
            st = CT_ERR(CT_ERR_ARG, "run.dir = %s is in use by another run: %s", dir, holder);
            ct_error_hint("wait for that run to end (or stop it), or set another run.dir; the "
                          "lock (%s) goes away with its process", l->path);
            break;
        }
        /* locked: is it still the file the path names? (a releasing run
         * unlinks it while holding the lock) */
        struct stat a, b;
        if (fstat(fd, &a) != 0 || stat(l->path, &b) != 0 || a.st_ino != b.st_ino ||
            a.st_dev != b.st_dev) {
            close(fd);
            continue;
        }
        char old[512], rec[512];
        if (a.st_size > 0) {
            lock_holder(fd, old, sizeof old);
            ct_log(CT_LOG_INFO, "%s: took over the lock of a run that is gone (%s)", dir, old);
        }
        lock_record(rec, sizeof rec, what);
        if (ftruncate(fd, 0) != 0 || pwrite(fd, rec, strlen(rec), 0) != (ssize_t)strlen(rec)) {
            st = CT_ERR(CT_ERR_IO, "run.dir = %s: cannot write %s: %s", dir, l->path,
                        strerror(errno));
            close(fd);
            break;
        }
        l->fd = fd;
        *out = l;
        return CT_OK;
    }
    if (!st) st = CT_ERR(CT_ERR_IO, "run.dir = %s: %s keeps changing under us", dir, l->path);
    remove_made(dir, l->top); /* only when empty: nothing else was written */
    free(l);
    return st;
}

void run_dir_unlock(run_lock *l, bool failed) {
    if (!l) return;
    unlink(l->path); /* while still locked: see the file comment */
    close(l->fd);
    if (failed) remove_made(l->dir, l->top); /* stops, as it should, at one not empty */
    free(l);
}

/* ----------------------------------------------------------------- results */

/* Files a ctrain run writes in run.dir (besides checkpoints/ and its
 * TensorBoard event files), the tokenizer copies among them; run.overwrite
 * deletes them (it is only needed where weights or checkpoints are). */
static const char *const result_files[] = {
    "model.safetensors", "adapter_model.safetensors", "config.json", "adapter_config.json",
    "metrics.jsonl", "config.yaml", "hw.json", "trace.json", "report.html",
    "vocab.json", "merges.txt", "encoder.json", "vocab.bpe", "tokenizer.json",
    "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
};
#define N_RESULT_FILES (sizeof result_files / sizeof *result_files)
/* the leftovers of a run that saved no weights, cleared by any fresh start */
static const char *const leftover_files[] = {"metrics.jsonl", "hw.json", "trace.json"};
#define N_LEFTOVER_FILES (sizeof leftover_files / sizeof *leftover_files)
#define EVENTS_PREFIX "events.out.tfevents."

/* One of our event files: events.out.tfevents.<time>.<host>.<pid>.ctrain[suffix] */
static bool our_events_file(const char *name) {
    return !strncmp(name, EVENTS_PREFIX, strlen(EVENTS_PREFIX)) && strstr(name, ".ctrain");
}

/* Is name one of the results that count as "an earlier run is here"? Only
 * trained weights (and checkpoints): metrics or a config alone are the
 * leftovers of a run that saved nothing, which a fresh start clears. */
static bool counts_as_result(const char *name) {
    return !strcmp(name, "model.safetensors") || !strcmp(name, "adapter_model.safetensors");
}

static int count_checkpoints(const char *dir) {
    char p[CT_PATH_MAX + 16];
    snprintf(p, sizeof p, "%s/checkpoints", dir);
    DIR *d = opendir(p);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (!strncmp(e->d_name, "step_", 5)) n++;
    closedir(d);
    return n;
}

int run_dir_results(const char *dir, char *what, size_t cap) {
    size_t len = 0;
    int n = 0;
    what[0] = '\0';
    int ck = count_checkpoints(dir);
    if (ck) {
        int k = snprintf(what, cap, "%d checkpoint%s", ck, ck == 1 ? "" : "s");
        len = k > 0 ? (size_t)k : 0;
        n++;
    }
    for (size_t i = 0; i < N_RESULT_FILES; i++) {
        if (!counts_as_result(result_files[i])) continue;
        char p[CT_PATH_MAX + 64];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", dir, result_files[i]);
        if (stat(p, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size == 0) continue;
        if (len < cap) {
            int k = snprintf(what + len, cap - len, "%s%s", n ? ", " : "", result_files[i]);
            len += k > 0 ? (size_t)k : 0;
        }
        n++;
    }
    return n;
}

ct_status run_dir_clear(const char *dir, bool everything, int *removed) {
    *removed = 0;
    char p[CT_PATH_MAX + 64];
    struct stat sb;
    snprintf(p, sizeof p, "%s/checkpoints", dir);
    if (everything && stat(p, &sb) == 0) {
        if (!ct_remove_tree(p))
            return CT_ERR(CT_ERR_IO, "run.overwrite: cannot remove %s", p);
        (*removed)++;
    }
    const char *const *names = everything ? result_files : leftover_files;
    size_t count = everything ? N_RESULT_FILES : N_LEFTOVER_FILES;
    for (size_t i = 0; i < count; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        if (unlink(p) == 0) (*removed)++;
        else if (errno != ENOENT)
            return CT_ERR(CT_ERR_IO, "%s: cannot remove %s: %s", dir, p, strerror(errno));
    }
    DIR *d = opendir(dir);
    if (!d) return CT_ERR(CT_ERR_IO, "%s: cannot list it: %s", dir, strerror(errno));
    ct_status st = CT_OK;
    for (struct dirent *e; !st && (e = readdir(d));) {
        if (!our_events_file(e->d_name)) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) == 0) (*removed)++;
        else st = CT_ERR(CT_ERR_IO, "%s: cannot remove %s: %s", dir, p, strerror(errno));
    }
    closedir(d);
    return st;
}
