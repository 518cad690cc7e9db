/*
 * Tokenised-data cache tests: keys (determinism, namespace separation), round
 * trips through each tier, reopen from disk, LRU order and byte limits in
 * memory and on disk (also across a reopen, ordered by mtime), entries larger
 * than a tier, corrupt entries (checksum, truncation, magic, version, key),
 * stray temp files, unwritable directories and a full disk, four threads
 * sharing one cache, and the one-line summary.
 */
#include "ct_test.h"
#include "ct_tmpdir.h"
#include "data/prepare/cache.h"
#include "io/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

#define NS "test-tokenizer:0123"

static char root[128];
static int ndirs = 0;

/* ---------------------------------------------------------------- helpers */

/* A fresh directory under the test's root (buf >= 256 bytes). */
static const char *new_dir(char *buf, size_t len) {
    snprintf(buf, len, "%s/d%d", root, ndirs++);
    return buf;
}

static ct_cache_key key_for(int i) { return ct_cache_key_of(&i, sizeof i, NS); }

/* Entry i's tokens: n depends on i, values include negatives and large ids. */
static int64_t doc_len(int i) { return 5 + (i * 7) % 46; }
static void doc_fill(int i, int32_t *t, int64_t n) {
    for (int64_t j = 0; j < n; j++) t[j] = (int32_t)((i * 1000003 + j * 7919) % 100000) - 500;
}

/* Put n tokens of document `seed` under key. */
static ct_status put_doc(ct_cache *c, ct_cache_key key, int seed, int64_t n) {
    int32_t buf[512];
    if (n > 512) abort();
    doc_fill(seed, buf, n);
    return ct_cache_put(c, key, buf, n);
}

/* 1: found with document `seed`'s n tokens, 0: not found, -1: wrong content. */
static int get_doc(ct_cache *c, ct_cache_key key, int seed, int64_t n) {
    int32_t want[512], *got = NULL;
    int64_t gn = -1;
    bool found = true;
    if (ct_cache_get(c, key, &got, &gn, &found) != CT_OK) return -1;
    if (!found) return (got == NULL && gn == 0) ? 0 : -1;
    doc_fill(seed, want, n);
    int ok = got && gn == n && (n == 0 || memcmp(got, want, (size_t)n * 4) == 0);
    free(got);
    return ok ? 1 : -1;
}

/* The documented layout: DIR/ab/<hi><lo>.tok, 16 lowercase hex digits each. */
static const char *entry_path(char *buf, size_t len, const char *dir, ct_cache_key k) {
    char nm[33];
    snprintf(nm, sizeof nm, "%016" PRIx64 "%016" PRIx64, k.hi, k.lo);
    snprintf(buf, len, "%s/%.2s/%s.tok", dir, nm, nm);
    return buf;
}

static int64_t file_bytes(int64_t n) { return CT_CACHE_DISK_HEADER_BYTES + 4 * n; }
static int64_t mem_bytes(int64_t n) { return CT_CACHE_MEM_ENTRY_BYTES + 4 * n; }

/* Sum of st_size of the *.tok files under dir (one level of fan-out), their
 * count, and the number of *.tmp files. */
static int64_t disk_usage(const char *dir, int *ntok, int *ntmp) {
    int64_t sum = 0;
    *ntok = *ntmp = 0;
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char sub[512], p[1024];
        snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
        DIR *s = opendir(sub);
        if (!s) continue;
        struct dirent *f;
        while ((f = readdir(s)) != NULL) {
            size_t len = strlen(f->d_name);
            snprintf(p, sizeof p, "%s/%s", sub, f->d_name);
            struct stat sb;
            if (len > 4 && !strcmp(f->d_name + len - 4, ".tmp")) (*ntmp)++;
            if (len > 4 && !strcmp(f->d_name + len - 4, ".tok") && stat(p, &sb) == 0) {
                (*ntok)++;
                sum += (int64_t)sb.st_size;
            }
        }
        closedir(s);
    }
    closedir(d);
    return sum;
}

static bool exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

static bool ts_before(struct timespec a, struct timespec b) {
    return a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec < b.tv_nsec);
}

static void set_mtime(const char *p, time_t sec) {
    struct timespec ts[2] = {{sec, 0}, {sec, 0}};
    CHECK(utimensat(AT_FDCWD, p, ts, 0) == 0);
}

/* Captures warnings (the log sink is process-wide: single-threaded tests). */
static int nwarn = 0;
static char last_warn[1024];
static void capture_log(ct_log_level level, const char *msg, void *user) {
    (void)user;
    if (level != CT_LOG_WARN) return;
    nwarn++;
    snprintf(last_warn, sizeof last_warn, "%s", msg);
}

/* ---------------------------------------------------------------- keys */

static void test_keys(void) {
    const char *text = "The quick brown fox";
    size_t len = strlen(text);
    ct_cache_key a = ct_cache_key_of(text, len, "gpt2-bpe:1");
    ct_cache_key b = ct_cache_key_of(text, len, "gpt2-bpe:1");
    CHECK(a.lo == b.lo && a.hi == b.hi);
    ct_cache_key c = ct_cache_key_of(text, len, "gpt2-bpe:2");
    CHECK(c.lo != a.lo && c.hi != a.hi);
    ct_cache_key d = ct_cache_key_of(text, len - 1, "gpt2-bpe:1");
    CHECK(d.lo != a.lo && d.hi != a.hi);
    /* the split between namespace and content is not ambiguous */
    ct_cache_key e = ct_cache_key_of("c", 1, "ab"), f = ct_cache_key_of("bc", 2, "a");
    CHECK(e.lo != f.lo || e.hi != f.hi);
    /* every content byte counts */
    char buf[64];
    memcpy(buf, text, len);
    buf[7] ^= 1;
    ct_cache_key g = ct_cache_key_of(buf, len, "gpt2-bpe:1");
    CHECK(g.lo != a.lo && g.hi != a.hi);
    /* empty content and a NULL namespace (same as "") are fine */
    ct_cache_key h = ct_cache_key_of(NULL, 0, NULL), i = ct_cache_key_of("", 0, "");
    CHECK(h.lo == i.lo && h.hi == i.hi);
    ct_cache_key j = ct_cache_key_of("", 0, "x");
    CHECK(j.lo != h.lo || j.hi != h.hi);
}

/* ---------------------------------------------------------------- tiers */

static void test_round_trip(void) {
    char dir[256], p[512];
    new_dir(dir, sizeof dir);
    ct_cache *c = NULL;
    CHECK(ct_cache_open(&c, dir, 1 << 20, 1 << 20) == CT_OK);
    if (!c) return;
    int64_t ns[3] = {0, 1, 300};
    int64_t written = 0;
    for (int i = 0; i < 3; i++) {
        CHECK(put_doc(c, key_for(i), i, ns[i]) == CT_OK);
        entry_path(p, sizeof p, dir, key_for(i));
        CHECK_MSG(ct_tmpdir_size(p) == file_bytes(ns[i]), "%s", p);
        written += file_bytes(ns[i]);
    }
    for (int i = 0; i < 3; i++) CHECK(get_doc(c, key_for(i), i, ns[i]) == 1);
    CHECK(get_doc(c, key_for(99), 99, 1) == 0);
    ct_cache_stats s;
    ct_cache_get_stats(c, &s);
    CHECK(s.mem_hits == 3 && s.disk_hits == 0 && s.misses == 1);
    CHECK(s.mem_entries == 3 && s.disk_entries == 3);
    CHECK(s.disk_bytes == written && s.bytes_written == written && s.bytes_read == 0);
    CHECK(s.mem_bytes == mem_bytes(0) + mem_bytes(1) + mem_bytes(300));
    ct_cache_close(c);

    /* disk only: every get reads the file */
    CHECK(ct_cache_open(&c, dir, 1 << 20, 0) == CT_OK);
    if (!c) return;
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 3; i++) CHECK(get_doc(c, key_for(i), i, ns[i]) == 1);
    ct_cache_get_stats(c, &s);
    CHECK(s.disk_hits == 6 && s.mem_hits == 0 && s.mem_entries == 0);
    CHECK(s.bytes_read == 2 * written);
    ct_cache_close(c);

    /* memory only: no directory is touched */
    char nodir[256];
    new_dir(nodir, sizeof nodir);
    CHECK(ct_cache_open(&c, NULL, 1 << 20, 1 << 20) == CT_OK);
    if (!c) return;
    CHECK(put_doc(c, key_for(5), 5, 40) == CT_OK);
    CHECK(get_doc(c, key_for(5), 5, 40) == 1);
    ct_cache_get_stats(c, &s);
    CHECK(s.disk_entries == 0 && s.bytes_written == 0 && s.mem_entries == 1);
    ct_cache_close(c);
    /* disk_limit 0 turns the disk tier off even with a directory */
    CHECK(ct_cache_open(&c, nodir, 0, 1 << 20) == CT_OK);
    if (!c) return;
    CHECK(put_doc(c, key_for(5), 5, 40) == CT_OK);
    CHECK(!exists(nodir));
    ct_cache_close(c);
    /* both off: every get misses */
    CHECK(ct_cache_open(&c, nodir, 0, 0) == CT_OK);
    if (!c) return;
    CHECK(put_doc(c, key_for(5), 5, 40) == CT_OK);
    CHECK(get_doc(c, key_for(5), 5, 40) == 0);
    ct_cache_close(c);
    /* bad arguments */
    CHECK(ct_cache_open(&c, dir, -1, 0) == CT_ERR_ARG && c == NULL);
    CHECK(ct_cache_open(&c, dir, 0, -5) == CT_ERR_ARG && c == NULL);
    ct_cache_close(NULL);
}

static void test_reopen(void) {
    char dir[256];
    new_dir(dir, sizeof dir);
    ct_cache *c = NULL;
    CHECK(ct_cache_open(&c, dir, 1 << 20, 1 << 20) == CT_OK);
    if (!c) return;
    int64_t total = 0;
    for (int i = 0; i < 20; i++) {
        CHECK(put_doc(c, key_for(i), i, doc_len(i)) == CT_OK);
        total += file_bytes(doc_len(i));
    }
    ct_cache_close(c);
    CHECK(ct_cache_open(&c, dir, 1 << 20, 1 << 20) == CT_OK);
    if (!c) return;
    ct_cache_stats s;
    ct_cache_get_stats(c, &s);
    CHECK(s.mem_entries == 0 && s.mem_bytes == 0);
    CHECK(s.disk_entries == 20 && s.disk_bytes == total);
    for (int i = 0; i < 20; i++) CHECK(get_doc(c, key_for(i), i, doc_len(i)) == 1);
    ct_cache_get_stats(c, &s);
    CHECK(s.disk_hits == 20 && s.mem_hits == 0 && s.bytes_read == total);
    /* promoted: the second round comes from memory */
    for (int i = 0; i < 20; i++) CHECK(get_doc(c, key_for(i), i, doc_len(i)) == 1);
    ct_cache_get_stats(c, &s);
    CHECK(s.disk_hits == 20 && s.mem_hits == 20 && s.mem_entries == 20 && s.misses == 0);
    ct_cache_close(c);

    /* a second cache on the same directory sees what the first one writes */
    ct_cache *a = NULL, *b = NULL;
    CHECK(ct_cache_open(&a, dir, 1 << 20, 1 << 20) == CT_OK);
    CHECK(ct_cache_open(&b, dir, 1 << 20, 1 << 20) == CT_OK);
    if (a && b) {
        CHECK(put_doc(a, key_for(100), 100, 33) == CT_OK);
        CHECK(get_doc(b, key_for(100), 100, 33) == 1);
        ct_cache_get_stats(b, &s);
        CHECK(s.disk_hits == 1 && s.disk_entries == 21);
        /* an entry removed behind b's back (another process evicted it) is
         * a plain miss: not corrupt, and dropped from b's index */
        char p[512];
        entry_path(p, sizeof p, dir, key_for(3));
        CHECK(unlink(p) == 0);
        ct_cache_stats s0;
        ct_cache_get_stats(b, &s0);
        CHECK(get_doc(b, key_for(3), 3, doc_len(3)) == 0);
        ct_cache_get_stats(b, &s);
        CHECK(s.misses == s0.misses + 1 && s.corrupt == 0 && s.disk_entries == 20);
        CHECK(s.disk_bytes == s0.disk_bytes - file_bytes(doc_len(3)));
    }
    ct_cache_close(a);
    ct_cache_close(b);
}

static void test_mem_lru(void) {
    const int64_t n = 10, e = mem_bytes(10);
    ct_cache *c = NULL;
    CHECK(ct_cache_open(&c, NULL, 0, 3 * e) == CT_OK);
    if (!c) return;
    for (int i = 0; i < 3; i++) CHECK(put_doc(c, key_for(i), i, n) == CT_OK); /* A B C */
    ct_cache_stats s;
    ct_cache_get_stats(c, &s);
    CHECK(s.mem_bytes == 3 * e && s.mem_entries == 3 && s.mem_evictions == 0);
    CHECK(get_doc(c, key_for(0), 0, n) == 1); /* touch A: B is now the oldest */
    CHECK(put_doc(c, key_for(3), 3, n) == CT_OK); /* D evicts B */
    CHECK(get_doc(c, key_for(1), 1, n) == 0);
    CHECK(get_doc(c, key_for(0), 0, n) == 1);
    CHECK(get_doc(c, key_for(2), 2, n) == 1);
    CHECK(get_doc(c, key_for(3), 3, n) == 1);
    ct_cache_get_stats(c, &s);
    CHECK(s.mem_evictions == 1 && s.mem_entries == 3 && s.mem_bytes == 3 * e);
    /* order now A C D: putting C again replaces it (now A D C), evicts nothing */
    CHECK(put_doc(c, key_for(2), 42, n) == CT_OK);
    CHECK(get_doc(c, key_for(2), 42, n) == 1);
    ct_cache_get_stats(c, &s);
    CHECK(s.mem_evictions == 1 && s.mem_entries == 3);
    /* one entry of twice the size evicts the two oldest (A, D), keeps C */
    CHECK(put_doc(c, key_for(4), 4, 2 * n + CT_CACHE_MEM_ENTRY_BYTES / 4) == CT_OK);
    CHECK(get_doc(c, key_for(2), 42, n) == 1);
    CHECK(get_doc(c, key_for(0), 0, n) == 0);
    CHECK(get_doc(c, key_for(3), 3, n) == 0);
    ct_cache_get_stats(c, &s);
    CHECK(s.mem_evictions == 3 && s.mem_entries == 2 && s.mem_bytes == 3 * e);
    /* larger than the whole tier: not stored, nothing evicted */
    CHECK(put_doc(c, key_for(5), 5, 100) == CT_OK);
    CHECK(get_doc(c, key_for(5), 5, 100) == 0);
    ct_cache_get_stats(c, &s);
    CHECK(s.mem_evictions == 3 && s.mem_entries == 2);
    ct_cache_close(c);
    /* exactly the limit fits */
    CHECK(ct_cache_open(&c, NULL, 0, e) == CT_OK);
    if (!c) return;
    CHECK(put_doc(c, key_for(0), 0, n) == CT_OK);
    CHECK(get_doc(c, key_for(0), 0, n) == 1);
    ct_cache_close(c);
}

/* Files on disk agree with the stats and stay within the limit. */
static void check_disk(ct_cache *c, const char *dir, int64_t limit) {
    ct_cache_stats s;
    int ntok, ntmp;
    ct_cache_get_stats(c, &s);
    int64_t used = disk_usage(dir, &ntok, &ntmp);
    CHECK_MSG(used <= limit, "%" PRId64 " bytes on disk, limit %" PRId64, used, limit);
    CHECK_MSG(used == s.disk_bytes && ntok == s.disk_entries,
              "disk %" PRId64 " bytes in %d files, stats %" PRId64 " in %" PRId64, used, ntok,
              s.disk_bytes, s.disk_entries);
    CHECK(ntmp == 0);
}

static void test_disk_lru(void) {
    char dir[256], p[8][512];
    new_dir(dir, sizeof dir);
    const int64_t f = file_bytes(10), limit = 3 * f;
    for (int i = 0; i < 8; i++) entry_path(p[i], sizeof p[i], dir, key_for(i));
    ct_cache *c = NULL;
    CHECK(ct_cache_open(&c, dir, limit, 0) == CT_OK);
    if (!c) return;
    for (int i = 0; i < 3; i++) CHECK(put_doc(c, key_for(i), i, 10) == CT_OK); /* A B C */
    check_disk(c, dir, limit); /* exactly at the limit: all kept */
    CHECK(exists(p[0]) && exists(p[1]) && exists(p[2]));
    CHECK(get_doc(c, key_for(0), 0, 10) == 1); /* touch A */
    CHECK(put_doc(c, key_for(3), 3, 10) == CT_OK); /* D evicts B */
    CHECK(!exists(p[1]) && exists(p[0]) && exists(p[2]) && exists(p[3]));
    check_disk(c, dir, limit);
    /* order C A D; E (25 tokens, 140 bytes) needs two slots: C and A go */
    CHECK(put_doc(c, key_for(4), 4, 25) == CT_OK);
    CHECK(!exists(p[2]) && !exists(p[0]) && exists(p[3]) && exists(p[4]));
    check_disk(c, dir, limit);
    ct_cache_stats s;
    ct_cache_get_stats(c, &s);
    CHECK(s.disk_evictions == 3 && s.disk_bytes == f + file_bytes(25));
    /* larger than the tier: not written, nothing evicted */
    CHECK(put_doc(c, key_for(5), 5, 60) == CT_OK);
    CHECK(!exists(p[5]) && exists(p[3]) && exists(p[4]));
    CHECK(get_doc(c, key_for(5), 5, 60) == 0);
    ct_cache_get_stats(c, &s);
    CHECK(s.disk_evictions == 3);
    ct_cache_close(c);

    /* across a reopen the mtime decides: make E older than D, then reopen
     * with room for E alone: the older E goes, D stays */
    time_t now = time(NULL);
    set_mtime(p[4], now - 100);
    set_mtime(p[3], now - 50);
    CHECK(ct_cache_open(&c, dir, file_bytes(25), 0) == CT_OK);
    if (!c) return;
    CHECK(!exists(p[4]) && exists(p[3]));
    check_disk(c, dir, file_bytes(25));
    ct_cache_get_stats(c, &s);
    CHECK(s.disk_evictions == 1 && s.disk_entries == 1);
    ct_cache_close(c);

    /* the cache's own stamps order a reopen too: A B C written, A read
     * again; reopening with room for two drops B, the least recently used */
    new_dir(dir, sizeof dir);
    for (int i = 0; i < 8; i++) entry_path(p[i], sizeof p[i], dir, key_for(i));
    CHECK(ct_cache_open(&c, dir, limit, 0) == CT_OK);
    if (!c) return;
    for (int i = 0; i < 3; i++) CHECK(put_doc(c, key_for(i), i, 10) == CT_OK);
    CHECK(get_doc(c, key_for(0), 0, 10) == 1);
    ct_cache_close(c);
    struct stat sa, sb, sc;
    CHECK(stat(p[0], &sa) == 0 && stat(p[1], &sb) == 0 && stat(p[2], &sc) == 0);
    CHECK_MSG(ts_before(sb.st_mtim, sc.st_mtim) && ts_before(sc.st_mtim, sa.st_mtim),
              "mtimes should be B < C < A");
    CHECK(ct_cache_open(&c, dir, 2 * f, 0) == CT_OK);
    if (!c) return;
    CHECK(!exists(p[1]) && exists(p[0]) && exists(p[2]));
    CHECK(put_doc(c, key_for(3), 3, 10) == CT_OK); /* C is older than A: C goes */
    CHECK(!exists(p[2]) && exists(p[0]) && exists(p[3]));
    check_disk(c, dir, 2 * f);
    ct_cache_close(c);
}

/* ---------------------------------------------------------------- damage */

typedef enum damage {
    FLIP_PAYLOAD,
    TRUNCATE,
    TRAILING,
    BAD_MAGIC,
    BAD_VERSION,
    OTHER_KEY,
    DAMAGE_COUNT
} damage;

static void test_corrupt(void) {
    char dir[256], p[512], q[512];
    new_dir(dir, sizeof dir);
    ct_log_set(capture_log, NULL);
    for (int kind = 0; kind < DAMAGE_COUNT; kind++) {
        ct_cache *c = NULL;
        CHECK(ct_cache_open(&c, dir, 1 << 20, 0) == CT_OK);
        if (!c) break;
        int id = 10 * kind;
        CHECK(put_doc(c, key_for(id), id, 20) == CT_OK);
        CHECK(put_doc(c, key_for(id + 1), id + 1, 20) == CT_OK);
        entry_path(p, sizeof p, dir, key_for(id));
        entry_path(q, sizeof q, dir, key_for(id + 1));
        uint8_t buf[256];
        long len = ct_tmpdir_read(p, buf, sizeof buf);
        CHECK(len == file_bytes(20));
        if (kind == FLIP_PAYLOAD) buf[CT_CACHE_DISK_HEADER_BYTES + 13] ^= 0x10;
        if (kind == TRUNCATE) len -= 3;
        if (kind == TRAILING) buf[len++] = 0;
        if (kind == BAD_MAGIC) buf[0] = 'X';
        if (kind == BAD_VERSION) buf[4] = 9;
        if (kind == OTHER_KEY) /* q's file under p's name */
            len = ct_tmpdir_read(q, buf, sizeof buf);
        CHECK(ct_tmpdir_write(p, buf, (size_t)len) == 0);
        ct_cache_stats s0, s1;
        ct_cache_get_stats(c, &s0);
        int w0 = nwarn;
        CHECK_MSG(get_doc(c, key_for(id), id, 20) == 0, "damage %d", kind);
        ct_cache_get_stats(c, &s1);
        CHECK_MSG(s1.corrupt == s0.corrupt + 1 && s1.misses == s0.misses + 1, "damage %d", kind);
        CHECK(s1.disk_entries == s0.disk_entries - 1);
        CHECK_MSG(!exists(p), "damage %d: corrupt file should be removed", kind);
        CHECK(nwarn == w0 + 1 && strstr(last_warn, p) != NULL);
        /* the neighbour is fine, and the damaged key works again once re-put */
        CHECK(get_doc(c, key_for(id + 1), id + 1, 20) == 1);
        CHECK(put_doc(c, key_for(id), id, 20) == CT_OK);
        CHECK(get_doc(c, key_for(id), id, 20) == 1);
        ct_cache_close(c);
    }
    /* damage found by a fresh process (the index built at open) */
    ct_cache *c = NULL;
    entry_path(p, sizeof p, dir, key_for(0));
    CHECK(ct_tmpdir_write(p, "CTTK", 4) == 0);
    CHECK(ct_cache_open(&c, dir, 1 << 20, 1 << 20) == CT_OK);
    if (c) {
        CHECK(get_doc(c, key_for(0), 0, 20) == 0);
        ct_cache_stats s;
        ct_cache_get_stats(c, &s);
        CHECK(s.corrupt == 1 && !exists(p));
        check_disk(c, dir, 1 << 20);
    }
    ct_cache_close(c);
    ct_log_set(NULL, NULL);
}

static void test_stray_tmp(void) {
    char dir[256], fan[300], p[512], live[512], old[512], dead[512], other[512], tok[512];
    new_dir(dir, sizeof dir);
    snprintf(fan, sizeof fan, "%s/ab", dir);
    CHECK(ct_mkdir_p(fan) == CT_OK);
    pid_t child = fork();
    if (child == 0) _exit(0);
    CHECK(child > 0 && waitpid(child, NULL, 0) == child);
    snprintf(p, sizeof p, "%s/x.tmp", fan);                            /* no writer named */
    snprintf(live, sizeof live, "%s/ab01.%ld-0.tmp", fan, (long)getpid()); /* a live writer */
    snprintf(old, sizeof old, "%s/ab02.%ld-1.tmp", fan, (long)getpid());   /* live but stale */
    snprintf(dead, sizeof dead, "%s/ab03.%ld-0.tmp", fan, (long)child);    /* writer gone */
    snprintf(other, sizeof other, "%s/notes.txt", fan);                  /* not ours */
    const char *all[] = {p, live, old, dead, other};
    for (int i = 0; i < 5; i++) CHECK(ct_tmpdir_write(all[i], "partial", 7) == 0);
    set_mtime(old, time(NULL) - 2 * 3600);
    /* and one real entry under that fan-out */
    ct_cache_key k = {0x1111, 0xab00000000000000ull};
    entry_path(tok, sizeof tok, dir, k);
    ct_cache *c = NULL;
    CHECK(ct_cache_open(&c, dir, 1 << 20, 0) == CT_OK);
    if (!c) return;
    CHECK(put_doc(c, k, 7, 9) == CT_OK && exists(tok));
    ct_cache_close(c);
    CHECK(ct_cache_open(&c, dir, 1 << 20, 0) == CT_OK);
    if (!c) return;
    CHECK(!exists(p) && !exists(old) && !exists(dead));
    CHECK(exists(live) && exists(other));
    CHECK(get_doc(c, k, 7, 9) == 1);
    ct_cache_stats s;
    ct_cache_get_stats(c, &s);
    CHECK(s.disk_entries == 1 && s.corrupt == 0);
    ct_cache_close(c);
}

/* ---------------------------------------------------------------- failures */

/* A key whose file goes under the same fan-out as k's (first hex digits). */
static int same_fanout(ct_cache_key k, int start) {
    for (int i = start;; i++)
        if ((key_for(i).hi >> 56) == (k.hi >> 56)) return i;
}

static void test_unwritable(void) {
    char dir[256], p[512], fan[300];
    ct_cache_stats s;
    ct_log_set(capture_log, NULL);

    /* a regular file where the fan-out directory should be: works as root */
    new_dir(dir, sizeof dir);
    ct_cache *c = NULL;
    CHECK(ct_cache_open(&c, dir, 1 << 20, 1 << 20) == CT_OK);
    if (!c) goto done;
    ct_cache_key k = key_for(0);
    snprintf(fan, sizeof fan, "%s/%02x", dir, (unsigned)(k.hi >> 56));
    CHECK(ct_tmpdir_write(fan, "x", 1) == 0);
    int w0 = nwarn;
    CHECK(put_doc(c, k, 0, 30) == CT_OK);
    CHECK(nwarn == w0 + 1 && strstr(last_warn, dir) != NULL);
    int j = same_fanout(k, 1);
    CHECK(put_doc(c, key_for(j), j, 30) == CT_OK);
    CHECK(nwarn == w0 + 1); /* warned once */
    CHECK(get_doc(c, k, 0, 30) == 1 && get_doc(c, key_for(j), j, 30) == 1); /* from memory */
    int other = 1;
    while ((key_for(other).hi >> 56) == (k.hi >> 56)) other++;
    CHECK(put_doc(c, key_for(other), other, 30) == CT_OK);
    entry_path(p, sizeof p, dir, key_for(other));
    CHECK(exists(p)); /* the rest of the disk tier still works */
    ct_cache_get_stats(c, &s);
    CHECK(s.disk_entries == 1 && s.mem_entries == 3 && s.mem_hits == 2);
    check_disk(c, dir, 1 << 20);
    ct_cache_close(c);

    /* a read-only directory, when permissions stop this process */
    new_dir(dir, sizeof dir);
    CHECK(ct_mkdir_p(dir) == CT_OK);
    CHECK(chmod(dir, 0500) == 0);
    snprintf(p, sizeof p, "%s/probe", dir);
    int fd = open(p, O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) {
        close(fd);
        unlink(p);
        printf("test_cache: permissions do not stop writes here (root); "
               "the fan-out case covers it\n");
    } else {
        CHECK(ct_cache_open(&c, dir, 1 << 20, 1 << 20) == CT_OK);
        if (c) {
            w0 = nwarn;
            CHECK(put_doc(c, k, 0, 30) == CT_OK);
            CHECK(nwarn == w0 + 1);
            CHECK(get_doc(c, k, 0, 30) == 1);
            ct_cache_get_stats(c, &s);
            CHECK(s.disk_entries == 0 && s.mem_hits == 1);
        }
        ct_cache_close(c);
    }
    CHECK(chmod(dir, 0700) == 0);

    /* a full disk mid-write (a file size limit stands in for it) */
    new_dir(dir, sizeof dir);
    CHECK(ct_cache_open(&c, dir, 1 << 20, 1 << 20) == CT_OK);
    if (!c) goto done;
    struct rlimit lim, saved;
    if (getrlimit(RLIMIT_FSIZE, &saved) == 0) {
        void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
        lim = saved;
        lim.rlim_cur = 1000;
        if (setrlimit(RLIMIT_FSIZE, &lim) == 0) {
            w0 = nwarn;
            CHECK(put_doc(c, k, 0, 400) == CT_OK); /* 1640 bytes: cut off at 1000 */
            CHECK(put_doc(c, key_for(1), 1, 20) == CT_OK); /* small: still written */
            setrlimit(RLIMIT_FSIZE, &saved);
            CHECK(nwarn == w0 + 1);
            entry_path(p, sizeof p, dir, k);
            CHECK(!exists(p));
            CHECK(get_doc(c, k, 0, 400) == 1);
            CHECK(get_doc(c, key_for(1), 1, 20) == 1);
            check_disk(c, dir, 1 << 20); /* no temp file left, stats agree */
            ct_cache_get_stats(c, &s);
            CHECK(s.disk_entries == 1);
        }
        signal(SIGXFSZ, prev);
    }
    ct_cache_close(c);

    /* a directory that cannot be created is an error at open, naming it */
    snprintf(p, sizeof p, "%s/plainfile", root);
    CHECK(ct_tmpdir_write(p, "x", 1) == 0);
    snprintf(dir, sizeof dir, "%s/plainfile/cache", root);
    c = NULL;
    CHECK(ct_cache_open(&c, dir, 1 << 20, 1 << 20) == CT_ERR_IO && c == NULL);
    CHECK(strstr(ct_last_error(), "plainfile") != NULL);
done:
    ct_log_set(NULL, NULL);
}

/* ---------------------------------------------------------------- threads */

#define T_DOCS 64

typedef struct worker {
    ct_cache *c;
    int tid, ops;
    int64_t gets, found, wrong, errors;
} worker;

static void *worker_run(void *arg) {
    worker *w = arg;
    for (int i = 0; i < w->ops; i++) {
        int doc = (i * 7 + w->tid * 13 + (i / 50) * 5) % T_DOCS;
        int r = get_doc(w->c, key_for(doc), doc, doc_len(doc));
        w->gets++;
        if (r == 1) w->found++;
        if (r < 0) w->wrong++;
        if (r == 0 && put_doc(w->c, key_for(doc), doc, doc_len(doc)) != CT_OK) w->errors++;
    }
    return NULL;
}

/* Four threads of `ops` gets (and puts after misses) each; the stats must
 * add up to what the threads saw. */
static void run_threads(ct_cache *c, int ops, ct_cache_stats *s) {
    worker w[4];
    pthread_t th[4];
    for (int t = 0; t < 4; t++) {
        memset(&w[t], 0, sizeof w[t]);
        w[t].c = c;
        w[t].tid = t;
        w[t].ops = ops;
        CHECK(pthread_create(&th[t], NULL, worker_run, &w[t]) == 0);
    }
    int64_t gets = 0, found = 0;
    for (int t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        gets += w[t].gets;
        found += w[t].found;
        CHECK(w[t].wrong == 0 && w[t].errors == 0);
    }
    ct_cache_get_stats(c, s);
    CHECK(gets == 4 * ops);
    CHECK_MSG(s->mem_hits + s->disk_hits + s->misses == gets, "%" PRId64 " + %" PRId64 " + %" PRId64
              " != %" PRId64, s->mem_hits, s->disk_hits, s->misses, gets);
    CHECK(s->mem_hits + s->disk_hits == found);
    CHECK(s->corrupt == 0);
}

static void test_threads(void) {
    char dir[256];
    new_dir(dir, sizeof dir);
    const int64_t mem_limit = 16 * mem_bytes(30), disk_limit = 40 * file_bytes(28);
    ct_cache_stats s;
    ct_cache *c = NULL;
    /* memory only: many fast operations contend for the index */
    CHECK(ct_cache_open(&c, NULL, 0, mem_limit) == CT_OK);
    if (!c) return;
    run_threads(c, 20000, &s);
    CHECK(s.mem_bytes <= mem_limit && s.mem_evictions > 0);
    ct_cache_close(c);
    /* both tiers: fewer operations, since every put writes and syncs a file */
    CHECK(ct_cache_open(&c, dir, disk_limit, mem_limit) == CT_OK);
    if (!c) return;
    run_threads(c, 600, &s);
    CHECK(s.mem_bytes <= mem_limit && s.mem_evictions > 0 && s.disk_evictions > 0);
    check_disk(c, dir, disk_limit);
    ct_cache_close(c);
    /* everything left on disk reads back whole */
    CHECK(ct_cache_open(&c, dir, disk_limit, 0) == CT_OK);
    if (!c) return;
    int64_t back = 0;
    for (int d = 0; d < T_DOCS; d++) {
        int r = get_doc(c, key_for(d), d, doc_len(d));
        CHECK(r >= 0);
        back += r == 1;
    }
    ct_cache_get_stats(c, &s);
    CHECK(s.corrupt == 0 && back > 0 && s.disk_hits == back);
    ct_cache_close(c);
}

/* ---------------------------------------------------------------- summary */

static void test_format(void) {
    char buf[256];
    ct_cache_stats s = {0};
    s.mem_hits = 80;
    s.disk_hits = 40;
    s.misses = 3;
    s.mem_evictions = 1;
    s.disk_evictions = 1;
    s.disk_bytes = 1258291; /* 1.2 MiB */
    ct_cache_format_stats(&s, buf, sizeof buf);
    CHECK_MSG(!strcmp(buf, "cache: 120 hits (80 memory, 40 disk), 3 misses, 2 evictions, "
                           "1.2 MB on disk"),
              "%s", buf);
    memset(&s, 0, sizeof s);
    s.disk_hits = 1;
    s.misses = 1;
    s.mem_evictions = 1;
    s.disk_bytes = 512;
    s.corrupt = 2;
    ct_cache_format_stats(&s, buf, sizeof buf);
    CHECK_MSG(!strcmp(buf, "cache: 1 hit (0 memory, 1 disk), 1 miss, 1 eviction, 512 B on disk, "
                           "2 corrupt"),
              "%s", buf);
    char small[12];
    memset(small, 'z', sizeof small);
    ct_cache_format_stats(&s, small, sizeof small);
    CHECK(small[sizeof small - 1] == '\0' && !strcmp(small, "cache: 1 hi"));
}

int main(void) {
    if (!ct_tmpdir_make(root, sizeof root, "cache")) {
        fprintf(stderr, "cannot create a temp directory\n");
        return 1;
    }
    test_keys();
    test_round_trip();
    test_reopen();
    test_mem_lru();
    test_disk_lru();
    test_corrupt();
    test_stray_tmp();
    test_unwritable();
    test_threads();
    test_format();
    CHECK(ct_tmpdir_remove(root) == 0);
    return ct_test_result("test_cache");
}
