/*
 * One entry file of the tokenised-data cache: its name under the cache
 * directory, its binary format, an atomic write and a fully checked read,
 * plus the clean-up of temp files that interrupted writers left behind.
 * Leaves out: the index, the byte limits and recency order (data/prepare/cache.c).
 */
#include "data/prepare/cache_file.h"

#include "core/dtype.h"
#include "io/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

/*
 * Disk layout: DIR/ab/<name>.tok, where <name> is key.hi then key.lo as 16
 * lowercase hex digits each and "ab" is its first two digits. Each file:
 *
 *   offset  0  4 bytes   magic "CTTK"
 *           4  u32 LE    version (1)
 *           8  i64 LE    token count N
 *          16  u64 LE    XXH64 (seed 0) of the 4N payload bytes
 *          24  u64 LE    key.lo   (guards against a file copied under
 *          32  u64 LE    key.hi    another entry's name)
 *          40  N x i32 LE tokens
 *
 * The size must be exactly 40 + 4N. A writer creates DIR/ab/<name>.<pid>-<seq>.tmp
 * (O_EXCL), writes it, sets its mtime, fsyncs it and renames it onto the
 * name, so a reader sees a whole entry or none. The directory is not fsync'd:
 * a crash may lose the rename, which costs a miss, never a torn entry.
 * Recency lives in the mtime (see ct_cache_file_touch and data/prepare/cache.c).
 */

#define CACHE_FILE_MAGIC "CTTK"
#define CACHE_FILE_VERSION 1u
#define CACHE_FILE_STRAY_AGE_S 3600 /* a live writer's temp file older than this is stale */

static bool host_is_le(void) {
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

void ct_cache_file_name(ct_cache_key k, char name[33]) {
    snprintf(name, 33, "%016" PRIx64 "%016" PRIx64, k.hi, k.lo);
}

void ct_cache_file_path(const char *dir, ct_cache_key k, char *buf) {
    char nm[33];
    ct_cache_file_name(k, nm);
    snprintf(buf, CT_CACHE_FILE_PATH_CAP, "%s/%.2s/%s.tok", dir, nm, nm);
}

void ct_cache_file_touch(const char *path, struct timespec when) {
    struct timespec ts[2] = {when, when};
    if (utimensat(AT_FDCWD, path, ts, 0) != 0 && (errno == EPERM || errno == EACCES))
        (void)utimensat(AT_FDCWD, path, NULL, 0);
}

static int write_full(int fd, const void *data, size_t n) {
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Bytes read (short only at end of file), or -1 with errno set. */
static ssize_t read_full(int fd, void *data, size_t n) {
    uint8_t *p = data;
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

int ct_cache_file_write(const char *dir, ct_cache_key key, const int32_t *tokens, int64_t n,
                        struct timespec when, uint64_t seq, char *path, const char **what) {
    char nm[33], tmp[CT_CACHE_FILE_PATH_CAP], fan[CT_CACHE_FILE_PATH_CAP];
    uint8_t hdr[CT_CACHE_DISK_HEADER_BYTES];
    size_t nb = (size_t)n * 4;
    uint8_t *enc = NULL;
    const void *payload = tokens;
    int fd = -1, err = 0;
    ct_cache_file_name(key, nm);
    ct_cache_file_path(dir, key, path);
    snprintf(fan, sizeof fan, "%s/%.2s", dir, nm);
    if (!host_is_le() && nb > 0) {
        *what = "encode";
        enc = malloc(nb);
        if (!enc) return ENOMEM;
        for (int64_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &tokens[i], 4);
            ct_le_store_u32(enc + 4 * i, u);
        }
        payload = enc;
    }
    *what = "create a temp file";
    bool made_fan = false;
    for (int attempt = 0; attempt < 8 && fd < 0; attempt++) {
        int k = snprintf(tmp, sizeof tmp, "%s/%s.%ld-%" PRIu64 ".tmp", fan, nm,
                         (long)getpid(), seq * 8 + (uint64_t)attempt);
        if (k < 0 || (size_t)k >= sizeof tmp) { /* cannot happen: dir <= CT_CACHE_FILE_DIR_MAX */
            err = ENAMETOOLONG;
            break;
        }
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0) break;
        err = errno;
        if (err == ENOENT && !made_fan) { /* first entry under this fan-out */
            made_fan = true;
            if (mkdir(fan, 0777) != 0 && errno != EEXIST) {
                err = errno;
                *what = "create the fan-out directory";
                break;
            }
        } else if (err != EEXIST) {
            break;
        }
    }
    if (fd < 0) {
        free(enc);
        return err ? err : EEXIST;
    }
    memcpy(hdr, CACHE_FILE_MAGIC, 4);
    ct_le_store_u32(hdr + 4, CACHE_FILE_VERSION);
    ct_le_store_u64(hdr + 8, (uint64_t)n);
    ct_le_store_u64(hdr + 16, XXH64(payload, nb, 0));
    ct_le_store_u64(hdr + 24, key.lo);
    ct_le_store_u64(hdr + 32, key.hi);
    *what = "write";
    err = write_full(fd, hdr, sizeof hdr);
    if (!err) err = write_full(fd, payload, nb);
    if (!err) {
        struct timespec ts[2] = {when, when};
        (void)futimens(fd, ts); /* recency only; not worth failing for */
        *what = "fsync";
        if (fsync(fd) != 0) err = errno;
    }
    if (close(fd) != 0 && !err) {
        err = errno;
        *what = "close";
    }
    if (!err && rename(tmp, path) != 0) {
        err = errno;
        *what = "rename the temp file onto";
    }
    if (err) (void)unlink(tmp);
    free(enc);
    return err;
}

ct_cache_file_result ct_cache_file_read(const char *path, ct_cache_key key, int32_t **tokens,
                                        int64_t *n, struct stat *sb, char *why, size_t whycap) {
    uint8_t hdr[CT_CACHE_DISK_HEADER_BYTES];
    ct_cache_file_result r = CT_CACHE_FILE_CORRUPT;
    int32_t *buf = NULL;
    *tokens = NULL;
    *n = 0;
    memset(sb, 0, sizeof *sb);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return (errno == ENOENT || errno == ENOTDIR) ? CT_CACHE_FILE_MISSING
                                                     : CT_CACHE_FILE_UNREADABLE;
    if (fstat(fd, sb) != 0 || !S_ISREG(sb->st_mode)) {
        r = CT_CACHE_FILE_UNREADABLE;
        goto done;
    }
    int64_t size = (int64_t)sb->st_size;
    ssize_t got = read_full(fd, hdr, sizeof hdr);
    if (got < 0) {
        r = CT_CACHE_FILE_UNREADABLE;
        goto done;
    }
    if ((size_t)got < sizeof hdr) {
        snprintf(why, whycap, "%" PRId64 " bytes, shorter than the %d-byte header", size,
                 CT_CACHE_DISK_HEADER_BYTES);
        goto done;
    }
    if (memcmp(hdr, CACHE_FILE_MAGIC, 4) != 0) {
        snprintf(why, whycap, "bad magic at offset 0 (expected \"%s\")", CACHE_FILE_MAGIC);
        goto done;
    }
    uint32_t version = ct_le_load_u32(hdr + 4);
    if (version != CACHE_FILE_VERSION) {
        snprintf(why, whycap, "version %" PRIu32 " at offset 4, expected %u", version,
                 CACHE_FILE_VERSION);
        goto done;
    }
    uint64_t count = ct_le_load_u64(hdr + 8);
    int64_t payload = size - CT_CACHE_DISK_HEADER_BYTES;
    if (count > (uint64_t)payload / 4 || (int64_t)count * 4 != payload) {
        snprintf(why, whycap, "header says %" PRIu64 " tokens but the file is %" PRId64
                 " bytes (truncated or trailing bytes)", count, size);
        goto done;
    }
    if (ct_le_load_u64(hdr + 24) != key.lo || ct_le_load_u64(hdr + 32) != key.hi) {
        snprintf(why, whycap, "the header holds another entry's key (offset 24)");
        goto done;
    }
    size_t nb = (size_t)count * 4;
    buf = malloc(nb ? nb : 4);
    if (!buf) {
        r = CT_CACHE_FILE_OOM;
        goto done;
    }
    got = read_full(fd, buf, nb);
    if (got < 0) {
        r = CT_CACHE_FILE_UNREADABLE;
        goto done;
    }
    if ((size_t)got != nb) {
        snprintf(why, whycap, "payload ends after %zd of %zu bytes", got, nb);
        goto done;
    }
    if (XXH64(buf, nb, 0) != ct_le_load_u64(hdr + 16)) {
        snprintf(why, whycap, "payload checksum (XXH64 at offset 16) does not match");
        goto done;
    }
    if (!host_is_le()) {
        for (uint64_t i = 0; i < count; i++) {
            uint32_t u = ct_le_load_u32(&buf[i]);
            memcpy(&buf[i], &u, 4);
        }
    }
    *tokens = buf;
    *n = (int64_t)count;
    buf = NULL;
    r = CT_CACHE_FILE_HIT;
done:
    free(buf);
    close(fd);
    return r;
}

static int hex_val(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    return -1;
}

bool ct_cache_file_is_fanout(const char *name) {
    return strlen(name) == 2 && hex_val(name[0]) >= 0 && hex_val(name[1]) >= 0;
}

bool ct_cache_file_parse_name(const char *name, const char *fan, ct_cache_key *k) {
    if (strlen(name) != 36 || strcmp(name + 32, ".tok") != 0) return false;
    if (name[0] != fan[0] || name[1] != fan[1]) return false;
    uint64_t v[2] = {0, 0};
    for (int i = 0; i < 32; i++) {
        int h = hex_val(name[i]);
        if (h < 0) return false;
        v[i / 16] = (v[i / 16] << 4) | (uint64_t)h;
    }
    k->hi = v[0];
    k->lo = v[1];
    return true;
}

void ct_cache_file_stray(const char *path, const char *name) {
    long pid = 0;
    const char *dot = strchr(name, '.');
    if (dot) {
        char *end = NULL;
        pid = strtol(dot + 1, &end, 10);
        if (!end || *end != '-') pid = 0;
    }
    bool live = false;
    if (pid > 0) live = !ct_pid_gone(pid);
    struct stat sb;
    if (live && stat(path, &sb) == 0 && time(NULL) - sb.st_mtime < CACHE_FILE_STRAY_AGE_S) return;
    (void)unlink(path);
}
