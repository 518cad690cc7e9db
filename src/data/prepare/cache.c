/*
 * The tokenised-data cache: an in-memory LRU of token arrays in front of an
 * on-disk LRU of one file per entry, each tier bounded in bytes. Each tier is
 * a hash index (key -> node) plus a doubly linked recency list; one mutex
 * guards both, and the file reads and writes run outside it.
 * Leaves out: locks between processes (atomic renames are enough for
 * correctness) and keeping several processes' byte counts in step: each
 * process trims the directory by what its own index knows.
 */
#include "data/prepare/cache.h"

#include "data/prepare/cache_file.h"
#include "io/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

/*
 * Entry files and their format: data/prepare/cache_file.c. Recency across processes
 * lives in the files' mtimes: this cache stamps each file it writes or reads
 * with a strictly increasing time (cache_next_stamp), and open orders the
 * entries by mtime. Memory hits move an entry in this process's disk order
 * but leave its mtime alone (no system call on the fast path).
 */

typedef struct cache_node {
    ct_cache_key key;
    struct cache_node *hnext;         /* next in the hash bucket */
    struct cache_node *older, *newer; /* recency list */
    int32_t *tokens;                  /* memory tier: n tokens, owned; disk tier: NULL */
    int64_t n;                        /* tokens */
    int64_t bytes;                    /* charged against the tier's limit */
    bool pending;                     /* disk tier: a put of this process is writing it */
    bool served;                      /* disk tier: a get returned this file's tokens */
} cache_node;

/* the node and its share of a bucket and of two allocations' headers */
_Static_assert(sizeof(cache_node) + sizeof(cache_node *) + 32 <= CT_CACHE_MEM_ENTRY_BYTES,
               "CT_CACHE_MEM_ENTRY_BYTES undercounts an entry's memory");

typedef struct cache_tier {
    cache_node **buckets;
    size_t nbuckets;             /* power of two; 0 when the tier is off */
    int64_t limit;               /* bytes; 0: off */
    int64_t bytes, count;        /* held now */
    cache_node *oldest, *newest; /* recency list ends */
} cache_tier;

struct ct_cache {
    pthread_mutex_t lock;
    char *dir; /* NULL: no disk tier */
    cache_tier mem, disk;
    ct_cache_stats st;     /* counters; the *_bytes and *_entries come from the tiers */
    struct timespec stamp; /* the last mtime given to a file */
    uint64_t tmp_seq;      /* numbers this cache's temp files */
    bool warned;           /* the disk-write warning was logged */
};

/* ---------------------------------------------------------------- keys */

ct_cache_key ct_cache_key_of(const void *data, size_t len, const char *ns) {
    CT_ASSERT(data || len == 0);
    if (!ns) ns = "";
    /* the namespace picks the hash function: a seed derived from it */
    XXH64_hash_t seed = XXH3_64bits(ns, strlen(ns));
    XXH128_hash_t h = XXH3_128bits_withSeed(data, len, seed);
    ct_cache_key k = {h.low64, h.high64};
    return k;
}

static bool key_eq(ct_cache_key a, ct_cache_key b) { return a.lo == b.lo && a.hi == b.hi; }

static size_t key_bucket(ct_cache_key k, size_t nbuckets) {
    /* keys are hashes already, but callers may build their own: mix anyway */
    uint64_t h = k.lo ^ (k.hi * 0x9E3779B97F4A7C15ull);
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    return (size_t)h & (nbuckets - 1);
}

/* ---------------------------------------------------------------- tiers */

static ct_status tier_init(cache_tier *t, int64_t limit) {
    memset(t, 0, sizeof *t);
    t->limit = limit;
    if (limit <= 0) return CT_OK;
    t->nbuckets = 64;
    t->buckets = calloc(t->nbuckets, sizeof *t->buckets);
    if (!t->buckets) return CT_ERR(CT_ERR_OOM, "cache: out of memory for the index");
    return CT_OK;
}

static cache_node *tier_find(const cache_tier *t, ct_cache_key k) {
    if (!t->nbuckets) return NULL;
    for (cache_node *e = t->buckets[key_bucket(k, t->nbuckets)]; e; e = e->hnext)
        if (key_eq(e->key, k)) return e;
    return NULL;
}

/* Double the buckets; on OOM keep the old ones (chains only get longer). */
static void tier_grow(cache_tier *t) {
    size_t nb = t->nbuckets * 2;
    cache_node **b = calloc(nb, sizeof *b);
    if (!b) return;
    for (size_t i = 0; i < t->nbuckets; i++) {
        cache_node *e = t->buckets[i];
        while (e) {
            cache_node *next = e->hnext;
            size_t j = key_bucket(e->key, nb);
            e->hnext = b[j];
            b[j] = e;
            e = next;
        }
    }
    free(t->buckets);
    t->buckets = b;
    t->nbuckets = nb;
}

static void tier_link_newest(cache_tier *t, cache_node *e) {
    e->newer = NULL;
    e->older = t->newest;
    if (t->newest) t->newest->newer = e;
    else t->oldest = e;
    t->newest = e;
}

static void tier_unlink_list(cache_tier *t, cache_node *e) {
    if (e->older) e->older->newer = e->newer;
    else t->oldest = e->newer;
    if (e->newer) e->newer->older = e->older;
    else t->newest = e->older;
    e->older = e->newer = NULL;
}

/* Insert e (key not present) as the most recently used entry. */
static void tier_add(cache_tier *t, cache_node *e) {
    if ((size_t)t->count >= t->nbuckets) tier_grow(t);
    size_t j = key_bucket(e->key, t->nbuckets);
    e->hnext = t->buckets[j];
    t->buckets[j] = e;
    tier_link_newest(t, e);
    t->count++;
    t->bytes += e->bytes;
}

/* Take e out of the index and the list; the caller frees it. */
static void tier_remove(cache_tier *t, cache_node *e) {
    cache_node **pp = &t->buckets[key_bucket(e->key, t->nbuckets)];
    while (*pp != e) pp = &(*pp)->hnext;
    *pp = e->hnext;
    e->hnext = NULL;
    tier_unlink_list(t, e);
    t->count--;
    t->bytes -= e->bytes;
}

static void tier_touch(cache_tier *t, cache_node *e) {
    if (t->newest == e) return;
    tier_unlink_list(t, e);
    tier_link_newest(t, e);
}

static void node_free_chain(cache_node *e) {
    while (e) {
        cache_node *next = e->hnext;
        free(e->tokens);
        free(e);
        e = next;
    }
}

static void tier_free(cache_tier *t) {
    cache_node *e = t->oldest;
    while (e) {
        cache_node *next = e->newer;
        free(e->tokens);
        free(e);
        e = next;
    }
    free(t->buckets);
    memset(t, 0, sizeof *t);
}

/* ---------------------------------------------------------------- helpers */

static const char *cache_strerror(int err, char *buf, size_t len) {
    if (strerror_r(err, buf, len) != 0) snprintf(buf, len, "error %d", err);
    return buf;
}

static void cache_lock(const ct_cache *c) {
    /* the mutex is the one field a const (read-only) call still changes */
    pthread_mutex_lock((pthread_mutex_t *)&c->lock);
}
static void cache_unlock(const ct_cache *c) { pthread_mutex_unlock((pthread_mutex_t *)&c->lock); }

static bool ts_after(struct timespec a, struct timespec b) {
    return a.tv_sec > b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec > b.tv_nsec);
}

/* The next mtime to give a file: now, or just after the last one given. */
static struct timespec cache_next_stamp(ct_cache *c) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (!ts_after(now, c->stamp)) {
        now = c->stamp;
        if (++now.tv_nsec >= 1000000000L) {
            now.tv_sec++;
            now.tv_nsec = 0;
        }
    }
    c->stamp = now;
    return now;
}

/* Drop least recently used memory entries until the tier fits; never `keep`.
 * Dropped nodes are chained onto *freed, to be freed after unlocking. */
static void mem_evict(ct_cache *c, const cache_node *keep, cache_node **freed) {
    cache_node *v = c->mem.oldest;
    while (c->mem.bytes > c->mem.limit && v) {
        cache_node *next = v->newer;
        if (v != keep) {
            tier_remove(&c->mem, v);
            v->hnext = *freed;
            *freed = v;
            c->st.mem_evictions++;
        }
        v = next;
    }
}

/* Drop least recently used disk entries (their files too) until the tier
 * fits; never `keep` nor an entry being written. Unlinking under the lock
 * keeps a later put of the same key from losing its fresh file. Returns
 * whether the tier fits. */
static bool disk_evict(ct_cache *c, const cache_node *keep) {
    char path[CT_CACHE_FILE_PATH_CAP];
    cache_node *v = c->disk.oldest;
    while (c->disk.bytes > c->disk.limit && v) {
        cache_node *next = v->newer;
        if (v != keep && !v->pending) {
            ct_cache_file_path(c->dir, v->key, path);
            (void)unlink(path); /* already gone (another process) is fine */
            tier_remove(&c->disk, v);
            free(v);
            c->st.disk_evictions++;
        }
        v = next;
    }
    return c->disk.bytes <= c->disk.limit;
}

/* ---------------------------------------------------------------- open */

typedef struct scan_item {
    ct_cache_key key;
    int64_t bytes;
    struct timespec mtime;
} scan_item;

static int scan_cmp(const void *pa, const void *pb) {
    const scan_item *a = pa, *b = pb;
    if (a->mtime.tv_sec != b->mtime.tv_sec) return a->mtime.tv_sec < b->mtime.tv_sec ? -1 : 1;
    if (a->mtime.tv_nsec != b->mtime.tv_nsec) return a->mtime.tv_nsec < b->mtime.tv_nsec ? -1 : 1;
    if (a->key.hi != b->key.hi) return a->key.hi < b->key.hi ? -1 : 1;
    if (a->key.lo != b->key.lo) return a->key.lo < b->key.lo ? -1 : 1;
    return 0;
}

/* Index the entries under c->dir (oldest mtime first), remove stray temp
 * files, trim to the disk limit. CT_ERR_IO when the directory is unreadable. */
static ct_status cache_scan(ct_cache *c) {
    ct_status st = CT_OK;
    char ebuf[128], sub[CT_CACHE_FILE_PATH_CAP], path[CT_CACHE_FILE_PATH_CAP];
    scan_item *items = NULL;
    size_t nitems = 0, cap = 0;
    DIR *d = opendir(c->dir);
    if (!d) {
        st = CT_ERR(CT_ERR_IO, "%s: cannot read the cache directory: %s", c->dir,
                    cache_strerror(errno, ebuf, sizeof ebuf));
        ct_error_hint("check its permissions, or use another cache directory");
        return st;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *fan = e->d_name;
        if (!ct_cache_file_is_fanout(fan)) continue;
        snprintf(sub, sizeof sub, "%s/%s", c->dir, fan);
        DIR *s = opendir(sub);
        if (!s) continue; /* not a directory, or unreadable: not ours */
        struct dirent *f;
        while ((f = readdir(s)) != NULL) {
            size_t len = strlen(f->d_name);
            int plen = snprintf(path, sizeof path, "%s/%s", sub, f->d_name);
            if (plen < 0 || (size_t)plen >= sizeof path) continue; /* too long to be ours */
            if (len > 4 && strcmp(f->d_name + len - 4, ".tmp") == 0) {
                ct_cache_file_stray(path, f->d_name);
                continue;
            }
            ct_cache_key k;
            struct stat sb;
            if (!ct_cache_file_parse_name(f->d_name, fan, &k)) continue;
            if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
            if (nitems == cap) {
                size_t ncap = cap ? cap * 2 : 256;
                scan_item *ni = realloc(items, ncap * sizeof *ni);
                if (!ni) {
                    closedir(s);
                    st = CT_ERR(CT_ERR_OOM, "%s: out of memory indexing the cache", c->dir);
                    goto done;
                }
                items = ni;
                cap = ncap;
            }
            items[nitems].key = k;
            items[nitems].bytes = (int64_t)sb.st_size;
            items[nitems].mtime = sb.st_mtim;
            nitems++;
        }
        closedir(s);
    }
    if (nitems) qsort(items, nitems, sizeof *items, scan_cmp);
    for (size_t i = 0; i < nitems; i++) {
        cache_node *node = calloc(1, sizeof *node);
        if (!node) {
            st = CT_ERR(CT_ERR_OOM, "%s: out of memory indexing the cache", c->dir);
            goto done;
        }
        node->key = items[i].key;
        node->bytes = items[i].bytes;
        tier_add(&c->disk, node);
        /* stamps given from now on sort after every file already there */
        if (ts_after(items[i].mtime, c->stamp)) c->stamp = items[i].mtime;
    }
    disk_evict(c, NULL);
done:
    closedir(d);
    free(items);
    return st;
}

ct_status ct_cache_open(ct_cache **out, const char *dir, int64_t disk_limit, int64_t mem_limit) {
    ct_status st = CT_OK;
    CT_ASSERT(out);
    *out = NULL;
    if (disk_limit < 0 || mem_limit < 0)
        return CT_ERR(CT_ERR_ARG,
                      "cache: limits must be >= 0 bytes (0 turns a tier off), got disk %" PRId64
                      " and memory %" PRId64,
                      disk_limit, mem_limit);
    bool use_disk = dir && dir[0] && disk_limit > 0;
    if (use_disk && strlen(dir) > CT_CACHE_FILE_DIR_MAX)
        return CT_ERR(CT_ERR_ARG, "cache directory path is %zu bytes long, expected at most %d",
                      strlen(dir), CT_CACHE_FILE_DIR_MAX);
    ct_cache *c = calloc(1, sizeof *c);
    if (!c) return CT_ERR(CT_ERR_OOM, "cache: out of memory");
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c);
        return CT_ERR(CT_ERR_OOM, "cache: cannot create its mutex");
    }
    st = tier_init(&c->mem, mem_limit);
    if (st == CT_OK) st = tier_init(&c->disk, use_disk ? disk_limit : 0);
    if (st != CT_OK) goto fail;
    if (use_disk) {
        size_t len = strlen(dir) + 1;
        c->dir = malloc(len);
        if (!c->dir) {
            st = CT_ERR(CT_ERR_OOM, "cache: out of memory");
            goto fail;
        }
        memcpy(c->dir, dir, len);
        st = ct_mkdir_p(dir);
        if (st != CT_OK) {
            ct_error_prefix("cache directory: ");
            goto fail;
        }
        st = cache_scan(c);
        if (st != CT_OK) goto fail;
    }
    *out = c;
    return CT_OK;
fail:
    ct_cache_close(c);
    return st;
}

void ct_cache_close(ct_cache *c) {
    if (!c) return;
    tier_free(&c->mem);
    tier_free(&c->disk);
    pthread_mutex_destroy(&c->lock);
    free(c->dir);
    free(c);
}

/* ---------------------------------------------------------------- get */

/* After a disk hit: index the file (it may have come from another process)
 * and promote the tokens to memory. Allocations happen before locking; what
 * is not used is freed after. */
static void get_promote(ct_cache *c, ct_cache_key key, const int32_t *tokens, int64_t n,
                        int64_t file_bytes, struct timespec *when) {
    size_t nb = (size_t)n * 4;
    int64_t mbytes = CT_CACHE_MEM_ENTRY_BYTES + 4 * n;
    cache_node *dn = calloc(1, sizeof *dn), *mn = NULL, *freed = NULL;
    if (c->mem.limit > 0 && mbytes <= c->mem.limit) {
        mn = calloc(1, sizeof *mn);
        if (mn) mn->tokens = malloc(nb ? nb : 4);
        if (mn && mn->tokens) {
            if (nb) memcpy(mn->tokens, tokens, nb);
            mn->key = key;
            mn->n = n;
            mn->bytes = mbytes;
        } else if (mn) {
            free(mn); /* promotion is an optimisation: skip it on OOM */
            mn = NULL;
        }
    }
    cache_lock(c);
    c->st.disk_hits++;
    c->st.bytes_read += file_bytes;
    cache_node *d = tier_find(&c->disk, key);
    if (d) {
        tier_touch(&c->disk, d);
        if (!d->pending) d->served = true;
    } else if (dn && file_bytes <= c->disk.limit) {
        dn->key = key;
        dn->bytes = file_bytes;
        dn->served = true;
        tier_add(&c->disk, dn);
        disk_evict(c, dn);
        dn = NULL;
    }
    if (mn) {
        cache_node *m = tier_find(&c->mem, key);
        if (m) { /* another thread promoted or put it meanwhile */
            tier_touch(&c->mem, m);
        } else {
            tier_add(&c->mem, mn);
            mem_evict(c, mn, &freed);
            mn = NULL;
        }
    }
    *when = cache_next_stamp(c);
    cache_unlock(c);
    free(dn);
    if (mn) {
        free(mn->tokens);
        free(mn);
    }
    node_free_chain(freed);
}

ct_status ct_cache_get(ct_cache *c, ct_cache_key key, int32_t **tokens, int64_t *n,
                       bool *found) {
    CT_ASSERT(c && tokens && n && found);
    *tokens = NULL;
    *n = 0;
    *found = false;

    cache_lock(c);
    cache_node *m = tier_find(&c->mem, key);
    if (m) {
        size_t nb = (size_t)m->n * 4;
        int32_t *copy = malloc(nb ? nb : 4);
        if (!copy) {
            c->st.misses++;
            int64_t want = m->n;
            cache_unlock(c);
            return CT_ERR(CT_ERR_OOM, "cache: out of memory copying %" PRId64 " tokens", want);
        }
        if (nb) memcpy(copy, m->tokens, nb);
        *n = m->n;
        tier_touch(&c->mem, m);
        cache_node *d = tier_find(&c->disk, key);
        if (d) tier_touch(&c->disk, d);
        c->st.mem_hits++;
        cache_unlock(c);
        *tokens = copy;
        *found = true;
        return CT_OK;
    }
    if (!c->dir) {
        c->st.misses++;
        cache_unlock(c);
        return CT_OK;
    }
    cache_unlock(c);

    /* Not in memory: try the file even when the index lacks it, since
     * another process sharing the directory may have written it. */
    char path[CT_CACHE_FILE_PATH_CAP], why[256] = "";
    int32_t *buf = NULL;
    int64_t cnt = 0;
    struct stat sb;
    ct_cache_file_path(c->dir, key, path);
    ct_cache_file_result r = ct_cache_file_read(path, key, &buf, &cnt, &sb, why, sizeof why);
    if (r == CT_CACHE_FILE_HIT) {
        struct timespec when;
        get_promote(c, key, buf, cnt, (int64_t)sb.st_size, &when);
        ct_cache_file_touch(path, when);
        *tokens = buf;
        *n = cnt;
        *found = true;
        return CT_OK;
    }
    cache_lock(c);
    c->st.misses++;
    cache_node *d = tier_find(&c->disk, key);
    bool drop = r == CT_CACHE_FILE_MISSING || r == CT_CACHE_FILE_CORRUPT;
    if (r == CT_CACHE_FILE_CORRUPT) {
        c->st.corrupt++;
        /* unlink only the file we read, not one renamed over it since */
        struct stat now;
        if (stat(path, &now) == 0 && now.st_ino == sb.st_ino && now.st_dev == sb.st_dev)
            (void)unlink(path);
    }
    if (drop && d && !d->pending) {
        tier_remove(&c->disk, d);
        free(d);
    }
    cache_unlock(c);
    if (r == CT_CACHE_FILE_CORRUPT)
        ct_log(CT_LOG_WARN, "cache: dropped corrupt entry %s: %s", path, why);
    if (r == CT_CACHE_FILE_OOM)
        return CT_ERR(CT_ERR_OOM, "%s: out of memory reading a cache entry", path);
    return CT_OK;
}

/* ---------------------------------------------------------------- put */

static ct_status put_mem(ct_cache *c, ct_cache_key key, const int32_t *tokens, int64_t n) {
    size_t nb = (size_t)n * 4;
    cache_node *node = calloc(1, sizeof *node), *freed = NULL;
    int32_t *copy = malloc(nb ? nb : 4);
    if (!node || !copy) {
        free(node);
        free(copy);
        return CT_ERR(CT_ERR_OOM, "cache: out of memory storing %" PRId64 " tokens", n);
    }
    if (nb) memcpy(copy, tokens, nb);
    node->key = key;
    node->tokens = copy;
    node->n = n;
    node->bytes = CT_CACHE_MEM_ENTRY_BYTES + 4 * n;
    cache_lock(c);
    cache_node *old = tier_find(&c->mem, key);
    if (old) { /* replaced, not evicted */
        tier_remove(&c->mem, old);
        old->hnext = freed;
        freed = old;
    }
    tier_add(&c->mem, node);
    mem_evict(c, node, &freed);
    cache_unlock(c);
    node_free_chain(freed);
    return CT_OK;
}

/* Write the entry's file unless this process already has it. The entry is
 * indexed (as pending) and room made before writing, so the files stay
 * within the limit at every moment. Failures only skip the disk tier.
 * One exception to "already has it": a file whose tokens a get returned and
 * whose key is put again. A caller puts a key it just got only when it
 * refused what the file held (prepare checks the ids against the vocabulary;
 * the checksum only says the file is whole), so that file is rewritten. */
static ct_status put_disk(ct_cache *c, ct_cache_key key, const int32_t *tokens, int64_t n) {
    char path[CT_CACHE_FILE_PATH_CAP];
    int64_t fbytes = CT_CACHE_DISK_HEADER_BYTES + 4 * n;
    cache_node *node = calloc(1, sizeof *node);
    if (!node) return CT_ERR(CT_ERR_OOM, "cache: out of memory storing %" PRId64 " tokens", n);
    cache_lock(c);
    cache_node *have = tier_find(&c->disk, key);
    if (have && have->served && !have->pending) { /* refused by its reader: index it anew */
        tier_remove(&c->disk, have);
        free(have);
        have = NULL;
    }
    if (have) { /* same key, same content: a use, not a new write */
        tier_touch(&c->disk, have);
        bool pending = have->pending;
        struct timespec when = cache_next_stamp(c);
        cache_unlock(c);
        free(node);
        if (!pending) {
            ct_cache_file_path(c->dir, key, path);
            ct_cache_file_touch(path, when);
        }
        return CT_OK;
    }
    node->key = key;
    node->bytes = fbytes;
    node->pending = true;
    tier_add(&c->disk, node);
    if (!disk_evict(c, node)) { /* the rest is being written by other threads */
        tier_remove(&c->disk, node);
        cache_unlock(c);
        free(node);
        return CT_OK;
    }
    uint64_t seq = c->tmp_seq++;
    struct timespec when = cache_next_stamp(c);
    cache_unlock(c);

    const char *what = "write";
    int err = ct_cache_file_write(c->dir, key, tokens, n, when, seq, path, &what);

    bool warn = false;
    cache_lock(c);
    node = tier_find(&c->disk, key);
    CT_ASSERT(node && node->pending); /* pending entries are neither evicted nor dropped */
    if (!err) {
        node->pending = false;
        c->st.bytes_written += fbytes;
    } else {
        tier_remove(&c->disk, node);
        free(node);
        warn = !c->warned;
        c->warned = true;
    }
    cache_unlock(c);
    if (warn) {
        char ebuf[128];
        ct_log(CT_LOG_WARN,
               "cache: cannot %s %s: %s; entries that cannot be written stay in memory only "
               "(warned once)",
               what, path, cache_strerror(err, ebuf, sizeof ebuf));
    }
    return CT_OK;
}

ct_status ct_cache_put(ct_cache *c, ct_cache_key key, const int32_t *tokens, int64_t n) {
    CT_ASSERT(c && n >= 0 && (tokens || n == 0));
    CT_ASSERT((uint64_t)n <= (uint64_t)(INT64_MAX / 8) && (uint64_t)n <= SIZE_MAX / 4);
    if (c->mem.limit > 0 && CT_CACHE_MEM_ENTRY_BYTES + 4 * n <= c->mem.limit) {
        ct_status st = put_mem(c, key, tokens, n);
        if (st != CT_OK) return st;
    }
    if (c->dir && CT_CACHE_DISK_HEADER_BYTES + 4 * n <= c->disk.limit)
        return put_disk(c, key, tokens, n);
    return CT_OK;
}

/* ---------------------------------------------------------------- stats */

void ct_cache_get_stats(const ct_cache *c, ct_cache_stats *out) {
    CT_ASSERT(c && out);
    cache_lock(c);
    *out = c->st;
    out->mem_bytes = c->mem.bytes;
    out->mem_entries = c->mem.count;
    out->disk_bytes = c->disk.bytes;
    out->disk_entries = c->disk.count;
    cache_unlock(c);
}

static void format_bytes(char *buf, size_t cap, int64_t v) {
    static const char *units[] = {"B", "KB", "MB", "GB", "TB"};
    double x = (double)v;
    int u = 0;
    while (x >= 1024.0 && u < 4) {
        x /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(buf, cap, "%" PRId64 " B", v);
    else snprintf(buf, cap, "%.1f %s", x, units[u]);
}

void ct_cache_format_stats(const ct_cache_stats *s, char *buf, size_t cap) {
    CT_ASSERT(s);
    if (!buf || cap == 0) return;
    int64_t hits = s->mem_hits + s->disk_hits, ev = s->mem_evictions + s->disk_evictions;
    char size[32];
    format_bytes(size, sizeof size, s->disk_bytes);
    int k = snprintf(buf, cap,
                     "cache: %" PRId64 " hit%s (%" PRId64 " memory, %" PRId64 " disk), %" PRId64
                     " miss%s, %" PRId64 " eviction%s, %s on disk",
                     hits, hits == 1 ? "" : "s", s->mem_hits, s->disk_hits, s->misses,
                     s->misses == 1 ? "" : "es", ev, ev == 1 ? "" : "s", size);
    if (s->corrupt > 0 && k >= 0 && (size_t)k < cap)
        snprintf(buf + k, cap - (size_t)k, ", %" PRId64 " corrupt", s->corrupt);
}
