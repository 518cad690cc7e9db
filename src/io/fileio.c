/*
 * Atomic file writes (temp file, fsync, rename, fsync of the directory, as
 * redis does for its RDB files) and the removal of temp files that killed
 * writers left, whole-file reads, read-only whole-file mmap and mkdir -p.
 * Leaves out: locking against concurrent writers of the same path (each
 * writer uses its own pid-named temp file; the last rename wins).
 */
#include "io/fileio.h"

#include <cJSON.h>

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define AFILE_BUF_BYTES ((size_t)1 << 20)

struct ct_afile {
    FILE *fp;
    char *path;     /* the target */
    char *tmp_path; /* path.tmp.<pid> */
    char *buf;      /* stdio buffer, AFILE_BUF_BYTES */
    int64_t written; /* bytes */
    bool failed;    /* a write failed: commit refuses */
};

/* Thread-safe strerror into a caller buffer (XSI strerror_r). */
static const char *fileio_strerror(int err, char *buf, size_t len) {
    if (strerror_r(err, buf, len) != 0) snprintf(buf, len, "error %d", err);
    return buf;
}

static ct_status fileio_errno(const char *what, const char *path, int err) {
    char ebuf[128];
    ct_status st = CT_ERR(CT_ERR_IO, "%s: %s: %s", path, what, fileio_strerror(err, ebuf, sizeof ebuf));
    if (err == ENOSPC || err == EDQUOT)
        ct_error_hint("the disk (or quota) is full: free space or write somewhere else");
    else if (err == EACCES || err == EPERM || err == EROFS)
        ct_error_hint("check the permissions of the file and its directory");
    else if (err == ENOENT)
        ct_error_hint("check that the path is spelled right and its directory exists");
    return st;
}

static char *fileio_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

/* The directory holding `path` ("." when there is no slash). Owned. */
static char *fileio_dirname(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return fileio_strdup(".");
    size_t n = (size_t)(slash - path);
    if (n == 0) n = 1; /* "/file" -> "/" */
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, path, n);
    d[n] = '\0';
    return d;
}

static void afile_release(ct_afile *f) {
    if (!f) return;
    if (f->fp) fclose(f->fp);
    free(f->buf);
    free(f->tmp_path);
    free(f->path);
    free(f);
}

ct_status ct_afile_open(ct_afile **out, const char *path) {
    ct_status st = CT_OK;
    *out = NULL;
    if (!path || !path[0]) return CT_ERR(CT_ERR_ARG, "atomic write: empty path");
    ct_afile *f = calloc(1, sizeof *f);
    if (!f) return CT_ERR(CT_ERR_OOM, "%s: out of memory opening for write", path);
    size_t n = strlen(path) + 32;
    f->path = fileio_strdup(path);
    f->tmp_path = malloc(n);
    f->buf = malloc(AFILE_BUF_BYTES);
    if (!f->path || !f->tmp_path || !f->buf) {
        st = CT_ERR(CT_ERR_OOM, "%s: out of memory opening for write", path);
        goto fail;
    }
    snprintf(f->tmp_path, n, "%s.tmp.%ld", path, (long)getpid());
    f->fp = fopen(f->tmp_path, "wb");
    if (!f->fp) {
        st = fileio_errno("cannot create temp file", f->tmp_path, errno);
        goto fail;
    }
    setvbuf(f->fp, f->buf, _IOFBF, AFILE_BUF_BYTES);
    *out = f;
    return CT_OK;
fail:
    afile_release(f);
    return st;
}

/* The writer pid in a name of ct_afile_open's pattern "<name>.tmp.<pid>"
 * (at least one byte of name, pid all digits and > 0), or 0. */
static long afile_tmp_pid(const char *name) {
    const char *tag = NULL;
    for (const char *p = strstr(name, ".tmp."); p; p = strstr(p + 1, ".tmp.")) tag = p;
    if (!tag || tag == name) return 0;
    const char *d = tag + 5;
    size_t n = strspn(d, "0123456789");
    if (n == 0 || n > 9 || d[n] != '\0') return 0; /* pids fit in 9 digits (pid_max <= 2^22) */
    long pid = strtol(d, NULL, 10);
    return pid > 0 ? pid : 0;
}

int ct_afile_remove_stale(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int removed = 0;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d)) != NULL) {
        long pid = afile_tmp_pid(e->d_name);
        if (!pid || !ct_pid_gone(pid)) continue;
        int k = snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (k < 0 || (size_t)k >= sizeof path || lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (unlink(path) == 0) removed++;
    }
    closedir(d);
    return removed;
}

ct_status ct_afile_write(ct_afile *f, const void *data, size_t bytes) {
    if (f->failed)
        return CT_ERR(CT_ERR_IO, "%s: an earlier write to %s failed", f->path, f->tmp_path);
    if (bytes == 0) return CT_OK;
    errno = 0;
    if (fwrite(data, 1, bytes, f->fp) != bytes) {
        f->failed = true;
        return fileio_errno("write failed", f->path, errno ? errno : EIO);
    }
    f->written += (int64_t)bytes;
    return CT_OK;
}

int64_t ct_afile_tell(const ct_afile *f) { return f->written; }

ct_status ct_afile_pwrite(ct_afile *f, int64_t offset, const void *data, size_t bytes) {
    if (f->failed)
        return CT_ERR(CT_ERR_IO, "%s: an earlier write to %s failed", f->path, f->tmp_path);
    if (offset < 0 || (int64_t)bytes > f->written || offset > f->written - (int64_t)bytes)
        return CT_ERR(CT_ERR_ARG, "%s: overwrite of bytes [%lld, %lld) outside the %lld written",
                      f->path, (long long)offset, (long long)offset + (long long)bytes,
                      (long long)f->written);
    errno = 0;
    if (fflush(f->fp) != 0) {
        f->failed = true;
        return fileio_errno("write failed", f->path, errno ? errno : EIO);
    }
    const char *p = data;
    while (bytes > 0) {
        ssize_t k = pwrite(fileno(f->fp), p, bytes, (off_t)offset);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            f->failed = true;
            return fileio_errno("write failed", f->path, k < 0 ? errno : EIO);
        }
        p += k;
        bytes -= (size_t)k;
        offset += k;
    }
    return CT_OK;
}

/* fsync the directory so the rename itself survives a crash. Filesystems
 * that cannot sync a directory answer EINVAL; that is not an error. */
static ct_status fileio_sync_dir(const char *path) {
    ct_status st = CT_OK;
    char *dir = fileio_dirname(path);
    if (!dir) return CT_ERR(CT_ERR_OOM, "%s: out of memory", path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) {
        st = fileio_errno("cannot open directory for fsync", dir, errno);
        goto fail;
    }
    if (fsync(fd) != 0 && errno != EINVAL && errno != EROFS)
        st = fileio_errno("fsync of directory failed", dir, errno);
    close(fd);
fail:
    free(dir);
    return st;
}

ct_status ct_afile_commit(ct_afile *f) {
    ct_status st = CT_OK;
    FILE *fp = NULL;
    if (f->failed) {
        st = CT_ERR(CT_ERR_IO, "%s: not committed: an earlier write failed", f->path);
        goto fail;
    }
    errno = 0;
    if (fflush(f->fp) != 0) {
        st = fileio_errno("write failed", f->path, errno ? errno : EIO);
        goto fail;
    }
    if (fsync(fileno(f->fp)) != 0) {
        st = fileio_errno("fsync failed", f->path, errno);
        goto fail;
    }
    fp = f->fp;
    f->fp = NULL;
    if (fclose(fp) != 0) {
        st = fileio_errno("close failed", f->path, errno);
        goto fail;
    }
    if (rename(f->tmp_path, f->path) != 0) {
        st = fileio_errno("cannot rename the temp file onto it", f->path, errno);
        goto fail;
    }
    /* renamed: the new file is in place even if the directory sync fails */
    st = fileio_sync_dir(f->path);
    afile_release(f);
    return st;
fail:
    if (f->fp) {
        fclose(f->fp);
        f->fp = NULL;
    }
    unlink(f->tmp_path);
    afile_release(f);
    return st;
}

void ct_afile_abort(ct_afile *f) {
    if (!f) return;
    if (f->fp) {
        fclose(f->fp);
        f->fp = NULL;
    }
    unlink(f->tmp_path);
    afile_release(f);
}

ct_status ct_file_write_atomic(const char *path, const void *data, size_t bytes) {
    ct_afile *f = NULL;
    ct_status st = ct_afile_open(&f, path);
    if (st != CT_OK) return st;
    st = ct_afile_write(f, data, bytes);
    if (st != CT_OK) {
        ct_afile_abort(f);
        return st;
    }
    return ct_afile_commit(f);
}

ct_status ct_file_read_all(const char *path, char **out, size_t *len) {
    ct_status st = CT_OK;
    char *buf = NULL;
    *out = NULL;
    if (len) *len = 0;
    if (!path || !path[0]) return CT_ERR(CT_ERR_ARG, "read: empty path");
    FILE *fp = fopen(path, "rb");
    if (!fp) return fileio_errno("cannot open", path, errno);
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0) {
        st = fileio_errno("cannot stat", path, errno);
        goto fail;
    }
    if (S_ISDIR(sb.st_mode)) {
        st = CT_ERR(CT_ERR_IO, "%s: is a directory, expected a file", path);
        goto fail;
    }
    /* st_size is a hint only (pipes and /proc files report 0) */
    size_t cap = (S_ISREG(sb.st_mode) && sb.st_size > 0) ? (size_t)sb.st_size + 1 : 4096;
    size_t used = 0;
    buf = malloc(cap);
    if (!buf) {
        st = CT_ERR(CT_ERR_OOM, "%s: out of memory reading %zu bytes", path, cap);
        goto fail;
    }
    for (;;) {
        if (used + 1 >= cap) {
            if (cap > ((size_t)-1) / 2) {
                st = CT_ERR(CT_ERR_OOM, "%s: file too large to read into memory", path);
                goto fail;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                st = CT_ERR(CT_ERR_OOM, "%s: out of memory reading %zu bytes", path, cap * 2);
                goto fail;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + used, 1, cap - 1 - used, fp);
        used += got;
        if (got == 0) {
            if (ferror(fp)) {
                st = fileio_errno("read failed", path, errno ? errno : EIO);
                goto fail;
            }
            break; /* EOF */
        }
    }
    fclose(fp);
    buf[used] = '\0';
    *out = buf;
    if (len) *len = used;
    return CT_OK;
fail:
    free(buf);
    fclose(fp);
    return st;
}

ct_status ct_file_map(const char *path, size_t min_bytes, const ct_file_map_msgs *msgs,
                      const void **map, size_t *len) {
    static const ct_file_map_msgs plain = {0};
    ct_status st = CT_OK;
    char ebuf[128];
    *map = NULL;
    *len = 0;
    if (!msgs) msgs = &plain;
    if (!path || !path[0]) return CT_ERR(CT_ERR_ARG, "map: empty path");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        st = CT_ERR(CT_ERR_IO, "%s: cannot open%s%s: %s", path, msgs->noun ? " " : "",
                    msgs->noun ? msgs->noun : "",
                    strerror_r(err, ebuf, sizeof ebuf) == 0 ? ebuf : "unknown error");
        if (err == ENOENT && msgs->missing_hint) ct_error_hint("%s", msgs->missing_hint);
        return st;
    }
    struct stat sb;
    int64_t fsize = 0;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = CT_ERR(CT_ERR_IO, "%s: not a regular file", path);
        goto done;
    }
    fsize = (int64_t)sb.st_size;
    if (fsize < 0 || (uint64_t)fsize < (uint64_t)min_bytes) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: file is %" PRId64 " bytes, shorter than the %zu-byte %s",
                    path, fsize, min_bytes, msgs->short_what ? msgs->short_what : "minimum");
        if (msgs->short_hint) ct_error_hint("%s", msgs->short_hint);
        goto done;
    }
    if ((uint64_t)fsize > (uint64_t)SIZE_MAX) {
        st = CT_ERR(CT_ERR_IO, "%s: file of %" PRId64 " bytes cannot be mapped", path, fsize);
        goto done;
    }
    if (fsize == 0) goto done; /* nothing to map (mmap refuses length 0) */
    void *m = mmap(NULL, (size_t)fsize, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_err = errno;
    if (m == MAP_FAILED) {
        st = CT_ERR(CT_ERR_IO, "%s: cannot mmap %" PRId64 " bytes: %s", path, fsize,
                    strerror_r(map_err, ebuf, sizeof ebuf) == 0 ? ebuf : "unknown error");
        goto done;
    }
    *map = m;
    *len = (size_t)fsize;
done:
    close(fd);
    return st;
}

void ct_file_unmap(const void *map, size_t len) {
    if (map) munmap((void *)(uintptr_t)map, len);
}

static ct_status mkdir_one(const char *dir) {
    if (mkdir(dir, 0777) == 0) return CT_OK;
    int err = errno;
    struct stat sb;
    if (stat(dir, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) return CT_OK; /* exists (maybe created concurrently) */
        return CT_ERR(CT_ERR_IO, "%s: exists and is not a directory", dir);
    }
    return fileio_errno("cannot create directory", dir, err);
}

ct_status ct_mkdir_p(const char *path) {
    if (!path || !path[0]) return CT_ERR(CT_ERR_ARG, "mkdir: empty path");
    char *p = fileio_strdup(path);
    if (!p) return CT_ERR(CT_ERR_OOM, "%s: out of memory", path);
    ct_status st = CT_OK;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/' || s[-1] == '/') continue; /* skip repeated slashes */
        *s = '\0';
        st = mkdir_one(p);
        *s = '/';
        if (st != CT_OK) goto fail;
    }
    st = mkdir_one(p);
fail:
    free(p);
    return st;
}

bool ct_remove_tree(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return errno == ENOENT;
    if (!S_ISDIR(sb.st_mode)) return unlink(path) == 0;
    bool ok = true;
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        char child[4096];
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            int k = snprintf(child, sizeof child, "%s/%s", path, e->d_name);
            if (k < 0 || (size_t)k >= sizeof child || !ct_remove_tree(child)) ok = false;
        }
        closedir(d);
    }
    return rmdir(path) == 0 && ok;
}

/* A zombie (killed, not yet reaped: mpirun may leave one for seconds) is
 * gone too: it will never finish its writes. */
static bool pid_zombie(long pid) {
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')'); /* the name may hold spaces and ')' */
    return paren && paren[1] == ' ' && paren[2] == 'Z';
}

bool ct_pid_gone(long pid) {
    if (pid <= 0 || pid == (long)getpid()) return false;
    if (kill((pid_t)pid, 0) != 0) return errno == ESRCH;
    return pid_zombie(pid);
}

ct_status ct_json_read_object(const char *path, cJSON **out) {
    *out = NULL;
    char *text = NULL;
    size_t len = 0;
    ct_status st = ct_file_read_all(path, &text, &len);
    if (st) return st;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!root) {
        size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        st = CT_ERR(CT_ERR_FORMAT, "%s: not a JSON object (parsing stopped at byte offset %zu)",
                    path, at);
    } else if (!cJSON_IsObject(root)) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: not a JSON object (found another JSON value)", path);
        cJSON_Delete(root);
        root = NULL;
    }
    free(text);
    *out = root;
    return st;
}
