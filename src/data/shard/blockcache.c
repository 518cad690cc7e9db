/*
 * The disk block cache of remote data (see blockcache.h for the layout).
 * A block file is checked on every read from disk: its header, its length and
 * the xxh3-64 of its data (and the manifest's hash when the caller has one).
 * Last use is the file's mtime, refreshed at most once a minute per block;
 * eviction removes the oldest files first. Writes skip fsync: a block torn
 * by a crash fails its checksum and is fetched again.
 * Leaves out: fetching, and which blocks an object has.
 */
#define _GNU_SOURCE /* gettid-free thread ids: pthread_self in temp names */
#include "data/shard/blockcache.h"

#include "core/dtype.h"
#include "ctrain/config.h" /* CT_PATH_MAX */
#include "io/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define BLK_MAGIC "CTBLK001"
#define BLK_HEADER 32
#define BLK_TOUCH_S 60     /* refresh a block's last use at most this often */
#define BLK_LOW_WATER 0.9  /* eviction goes down to this share of the limit */
#define BLK_TMP_STALE_S 3600

struct ct_blockcache {
    char *dir;
    int64_t limit;
    double ttl_s;
    pthread_mutex_t mu; /* guards stats and eviction */
    ct_blockcache_stats st;
};

uint64_t ct_block_hash(const void *data, size_t len) { return XXH3_64bits(data, len); }

const char *ct_blockcache_default_dir(char *buf, size_t cap) {
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (x && x[0] == '/') snprintf(buf, cap, "%s/ctrain/shards", x);
    else if (h && h[0] == '/') snprintf(buf, cap, "%s/.cache/ctrain/shards", h);
    else snprintf(buf, cap, "/tmp/ctrain-shards-%ld", (long)getuid());
    return buf;
}

static void blk_path(const ct_blockcache *c, char *buf, size_t cap, const char *key, int64_t idx) {
    snprintf(buf, cap, "%s/%s/%08" PRId64 ".blk", c->dir, key, idx);
}

/* ------------------------------------------------------------- eviction */

typedef struct blk_entry {
    char *path;
    time_t mtime;
    int64_t bytes;
} blk_entry;

static int cmp_entry(const void *a, const void *b) {
    const blk_entry *x = a, *y = b;
    return x->mtime < y->mtime ? -1 : x->mtime > y->mtime ? 1 : 0;
}

/* Every block file of the cache (owned paths), stale temp files removed on the
 * way. Returns the count, or -1 when memory ran out. */
static int64_t scan_blocks(ct_blockcache *c, blk_entry **out, int64_t *total) {
    *out = NULL;
    *total = 0;
    int64_t n = 0, cap = 0;
    blk_entry *v = NULL;
    DIR *top = opendir(c->dir);
    if (!top) return 0;
    time_t now = time(NULL);
    struct dirent *e;
    char sub[CT_PATH_MAX], path[CT_PATH_MAX + 300];
    while ((e = readdir(top))) {
        if (e->d_name[0] == '.') continue;
        snprintf(sub, sizeof sub, "%s/%s", c->dir, e->d_name);
        DIR *d = opendir(sub);
        if (!d) continue;
        struct dirent *f;
        bool any = false;
        while ((f = readdir(d))) {
            if (f->d_name[0] == '.') continue;
            snprintf(path, sizeof path, "%s/%s", sub, f->d_name);
            struct stat sb;
            if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
            if (strstr(f->d_name, ".tmp.")) {
                /* a writer killed between write and rename */
                if (now - sb.st_mtime > BLK_TMP_STALE_S) unlink(path);
                continue;
            }
            any = true;
            if (n == cap) {
                int64_t nc = cap ? 2 * cap : 256;
                blk_entry *nv = realloc(v, (size_t)nc * sizeof *nv);
                if (!nv) goto oom;
                v = nv;
                cap = nc;
            }
            if (!(v[n].path = strdup(path))) goto oom;
            v[n].mtime = sb.st_mtime;
            v[n].bytes = (int64_t)sb.st_size;
            *total += v[n].bytes;
            n++;
            continue;
        oom:
            closedir(d);
            closedir(top);
            for (int64_t i = 0; i < n; i++) free(v[i].path);
            free(v);
            return -1;
        }
        closedir(d);
        if (!any) rmdir(sub); /* an object with no block left */
    }
    closedir(top);
    *out = v;
    return n;
}

/* Remove the least recently used blocks until the directory is under the
 * low-water mark. Called with mu held. */
static void evict(ct_blockcache *c) {
    blk_entry *v;
    int64_t total;
    int64_t n = scan_blocks(c, &v, &total);
    if (n < 0) return;
    c->st.bytes = total;
    if (total > c->limit) {
        qsort(v, (size_t)n, sizeof *v, cmp_entry);
        int64_t goal = (int64_t)((double)c->limit * BLK_LOW_WATER);
        for (int64_t i = 0; i < n && c->st.bytes > goal; i++) {
            if (unlink(v[i].path) == 0) {
                c->st.bytes -= v[i].bytes;
                c->st.evicted++;
            }
        }
    }
    for (int64_t i = 0; i < n; i++) free(v[i].path);
    free(v);
}

/* ------------------------------------------------------------ open/close */

ct_status ct_blockcache_open(ct_blockcache **out, const char *dir, int64_t limit, double ttl_s) {
    *out = NULL;
    if (!dir || !dir[0]) return CT_ERR(CT_ERR_ARG, "data.cache_dir is empty");
    if (limit <= 0)
        return CT_ERR(CT_ERR_ARG, "data.cache_limit = %" PRId64 " bytes, expected > 0", limit);
    ct_status st = ct_mkdir_p(dir);
    if (st) {
        ct_error_prefix("data.cache_dir: ");
        return st;
    }
    if (access(dir, W_OK | X_OK) != 0)
        return CT_ERR(CT_ERR_IO, "data.cache_dir %s: not writable: %s", dir, strerror(errno));
    ct_blockcache *c = calloc(1, sizeof *c);
    if (!c || !(c->dir = strdup(dir))) {
        free(c);
        return CT_ERR(CT_ERR_OOM, "out of memory for the block cache");
    }
    c->limit = limit;
    c->ttl_s = ttl_s;
    pthread_mutex_init(&c->mu, NULL);
    evict(c); /* measures the directory; trims it when another run left it over */
    *out = c;
    return CT_OK;
}

void ct_blockcache_close(ct_blockcache *c) {
    if (!c) return;
    pthread_mutex_destroy(&c->mu);
    free(c->dir);
    free(c);
}


void ct_blockcache_get_stats(ct_blockcache *c, ct_blockcache_stats *out) {
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    pthread_mutex_unlock(&c->mu);
}

static void count(ct_blockcache *c, int64_t *field) {
    pthread_mutex_lock(&c->mu);
    (*field)++;
    pthread_mutex_unlock(&c->mu);
}

/* ------------------------------------------------------------ get / put */

/* Open block file and check its header against *len (SIZE_MAX: any length,
 * set from the header); fills hash and time. Returns the descriptor, or -1
 * (the file is deleted when it is bad). */
static int open_block(ct_blockcache *c, const char *path, size_t *len, uint64_t *hash,
                      struct stat *sb, uint64_t *stored) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    uint8_t h[BLK_HEADER];
    bool ok = fstat(fd, sb) == 0 && pread(fd, h, sizeof h, 0) == (ssize_t)sizeof h &&
              !memcmp(h, BLK_MAGIC, 8);
    if (ok && *len == SIZE_MAX && sb->st_size >= BLK_HEADER) *len = (size_t)ct_le_load_u64(h + 8);
    ok = ok && (uint64_t)sb->st_size == BLK_HEADER + (uint64_t)*len &&
         ct_le_load_u64(h + 8) == (uint64_t)*len;
    if (!ok) {
        close(fd);
        unlink(path);
        count(c, &c->st.corrupt);
        return -1;
    }
    *hash = ct_le_load_u64(h + 16);
    uint64_t fetched = ct_le_load_u64(h + 24);
    if (stored) *stored = fetched;
    if (c->ttl_s > 0 && (double)time(NULL) - (double)fetched > c->ttl_s) {
        close(fd);
        unlink(path);
        count(c, &c->st.expired);
        return -1;
    }
    return fd;
}

static void touch(const char *path, const struct stat *sb) {
    time_t now = time(NULL);
    if (now - sb->st_mtime < BLK_TOUCH_S) return;
    (void)utimensat(AT_FDCWD, path, NULL, 0); /* last use: now */
}

bool ct_blockcache_has(ct_blockcache *c, const char *key, int64_t idx, size_t len) {
    char path[CT_PATH_MAX + 64];
    blk_path(c, path, sizeof path, key, idx);
    uint64_t hash;
    struct stat sb;
    int fd = open_block(c, path, &len, &hash, &sb, NULL);
    if (fd < 0) return false;
    close(fd);
    touch(path, &sb);
    return true;
}

bool ct_blockcache_get_all(ct_blockcache *c, const char *key, int64_t idx, size_t max, char **out,
                           size_t *len, double *stored) {
    *out = NULL;
    *len = 0;
    char path[CT_PATH_MAX + 64];
    blk_path(c, path, sizeof path, key, idx);
    uint64_t hash, when = 0;
    struct stat sb;
    size_t n = SIZE_MAX;
    int fd = open_block(c, path, &n, &hash, &sb, &when);
    if (fd < 0) return false;
    char *buf = n <= max ? malloc(n + 1) : NULL;
    size_t got = 0;
    while (buf && got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)(BLK_HEADER + got));
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (!buf || got != n || ct_block_hash(buf, n) != hash) {
        if (buf) { /* torn or corrupt: drop it (too large or no memory: keep it) */
            unlink(path);
            count(c, &c->st.corrupt);
        }
        free(buf);
        return false;
    }
    buf[n] = '\0';
    touch(path, &sb);
    count(c, &c->st.hits);
    *out = buf;
    *len = n;
    if (stored) *stored = (double)when;
    return true;
}

bool ct_blockcache_get(ct_blockcache *c, const char *key, int64_t idx, void *buf, size_t len,
                       uint64_t expect) {
    char path[CT_PATH_MAX + 64];
    blk_path(c, path, sizeof path, key, idx);
    uint64_t hash;
    struct stat sb;
    int fd = open_block(c, path, &len, &hash, &sb, NULL);
    if (fd < 0) {
        count(c, &c->st.misses);
        return false;
    }
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(fd, (uint8_t *)buf + got, len - got, (off_t)(BLK_HEADER + got));
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    uint64_t h = got == len ? ct_block_hash(buf, len) : 0;
    if (got != len || h != hash || (expect && h != expect)) {
        unlink(path);
        count(c, &c->st.corrupt);
        count(c, &c->st.misses);
        return false;
    }
    touch(path, &sb);
    count(c, &c->st.hits);
    return true;
}

ct_status ct_blockcache_put(ct_blockcache *c, const char *key, int64_t idx, const void *buf,
                            size_t len) {
    char dir[CT_PATH_MAX + 64], path[CT_PATH_MAX + 64], tmp[CT_PATH_MAX + 128];
    snprintf(dir, sizeof dir, "%s/%s", c->dir, key);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return CT_ERR(CT_ERR_IO, "%s: cannot make the cache directory: %s", dir, strerror(errno));
    blk_path(c, path, sizeof path, key, idx);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%lx", path, (long)getpid(),
             (unsigned long)pthread_self());
    uint8_t h[BLK_HEADER];
    memcpy(h, BLK_MAGIC, 8);
    ct_le_store_u64(h + 8, (uint64_t)len);
    ct_le_store_u64(h + 16, ct_block_hash(buf, len));
    ct_le_store_u64(h + 24, (uint64_t)time(NULL));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return CT_ERR(CT_ERR_IO, "%s: cannot write a cache block: %s", tmp, strerror(errno));
    bool ok = write(fd, h, sizeof h) == (ssize_t)sizeof h;
    size_t done = 0;
    while (ok && done < len) {
        ssize_t w = write(fd, (const uint8_t *)buf + done, len - done);
        if (w <= 0) ok = false;
        else done += (size_t)w;
    }
    int err = errno;
    if (close(fd) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (!ok || rename(tmp, path) != 0) {
        if (ok) err = errno;
        unlink(tmp);
        return CT_ERR(CT_ERR_IO, "%s: cannot write a cache block: %s", path, strerror(err));
    }
    pthread_mutex_lock(&c->mu);
    c->st.puts++;
    c->st.put_bytes += (int64_t)len;
    c->st.bytes += (int64_t)(len + BLK_HEADER);
    if (c->st.bytes > c->limit) evict(c);
    pthread_mutex_unlock(&c->mu);
    return CT_OK;
}
