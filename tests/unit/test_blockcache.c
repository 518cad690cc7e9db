/*
 * The disk block cache of remote data (data/shard/blockcache.c): a block reads back
 * byte-exact; a corrupted, truncated or foreign file is refused and removed;
 * the manifest's hash is enforced; the time to live expires blocks; eviction
 * keeps the directory under its limit and removes the least recently used
 * blocks first; stale temp files of a killed writer go; a directory that
 * cannot be written is a clear error.
 */
#include "ct_test.h"
#include "ct_tmpdir.h"

#include "data/shard/blockcache.h"

#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>

#define KEY "0123456789abcdef0123456789abcdef"
#define BLK 65536

static void fill(uint8_t *b, size_t n, int seed) {
    uint32_t x = 2463534242u + (uint32_t)seed;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b[i] = (uint8_t)x;
    }
}

static void block_path(char *out, size_t cap, const char *dir, int64_t idx) {
    snprintf(out, cap, "%s/%s/%08lld.blk", dir, KEY, (long long)idx);
}

/* Set a file's mtime (the cache's last use) to `ago` seconds in the past. */
static void age(const char *path, int ago) {
    struct timeval tv[2];
    gettimeofday(&tv[0], NULL);
    tv[0].tv_sec -= ago;
    tv[1] = tv[0];
    utimes(path, tv);
}

static void test_roundtrip_and_corruption(const char *dir) {
    ct_blockcache *c;
    CHECK(ct_blockcache_open(&c, dir, 1 << 24, 0) == CT_OK);
    static uint8_t a[BLK], b[BLK];
    fill(a, sizeof a, 1);
    CHECK(!ct_blockcache_get(c, KEY, 0, b, sizeof b, 0)); /* absent */
    CHECK(ct_blockcache_put(c, KEY, 0, a, sizeof a) == CT_OK);
    CHECK(ct_blockcache_has(c, KEY, 0, sizeof a));
    memset(b, 0, sizeof b);
    CHECK(ct_blockcache_get(c, KEY, 0, b, sizeof b, ct_block_hash(a, sizeof a)));
    CHECK(memcmp(a, b, sizeof a) == 0);
    /* the manifest's hash disagrees: refused and removed */
    CHECK(!ct_blockcache_get(c, KEY, 0, b, sizeof b, ct_block_hash(a, sizeof a) ^ 1));
    CHECK(!ct_blockcache_has(c, KEY, 0, sizeof a));
    /* one flipped data byte: refused and removed */
    CHECK(ct_blockcache_put(c, KEY, 1, a, sizeof a) == CT_OK);
    char path[512];
    block_path(path, sizeof path, dir, 1);
    int fd = open(path, O_RDWR);
    uint8_t x;
    CHECK(pread(fd, &x, 1, 32 + 1000) == 1);
    x ^= 0x40;
    CHECK(pwrite(fd, &x, 1, 32 + 1000) == 1);
    close(fd);
    CHECK(!ct_blockcache_get(c, KEY, 1, b, sizeof b, 0));
    struct stat sb;
    CHECK(stat(path, &sb) != 0);
    /* truncated file and a foreign file under a block's name */
    CHECK(ct_blockcache_put(c, KEY, 2, a, sizeof a) == CT_OK);
    block_path(path, sizeof path, dir, 2);
    CHECK(truncate(path, 32 + BLK / 2) == 0);
    CHECK(!ct_blockcache_has(c, KEY, 2, sizeof a));
    block_path(path, sizeof path, dir, 3);
    CHECK(ct_tmpdir_write(path, a, sizeof a) == 0);
    CHECK(!ct_blockcache_get(c, KEY, 3, b, sizeof b, 0));
    /* a block of another length than asked is not this block */
    CHECK(ct_blockcache_put(c, KEY, 4, a, sizeof a) == CT_OK);
    CHECK(!ct_blockcache_has(c, KEY, 4, sizeof a - 1));
    ct_blockcache_stats st;
    ct_blockcache_get_stats(c, &st);
    CHECK_MSG(st.corrupt == 5 && st.hits == 1, "corrupt %lld hits %lld", (long long)st.corrupt,
              (long long)st.hits);
    ct_blockcache_close(c);
}

static void test_ttl(const char *dir) {
    ct_blockcache *c;
    CHECK(ct_blockcache_open(&c, dir, 1 << 24, 100) == CT_OK);
    static uint8_t a[BLK], b[BLK];
    fill(a, sizeof a, 2);
    CHECK(ct_blockcache_put(c, KEY, 7, a, sizeof a) == CT_OK);
    CHECK(ct_blockcache_get(c, KEY, 7, b, sizeof b, 0));
    /* the fetch time lives in the header: rewrite it 200 s into the past */
    char path[512];
    block_path(path, sizeof path, dir, 7);
    int fd = open(path, O_RDWR);
    uint8_t t[8];
    uint64_t then = (uint64_t)time(NULL) - 200;
    for (int i = 0; i < 8; i++) t[i] = (uint8_t)(then >> (8 * i));
    CHECK(pwrite(fd, t, 8, 24) == 8);
    close(fd);
    CHECK(!ct_blockcache_get(c, KEY, 7, b, sizeof b, 0));
    ct_blockcache_stats st;
    ct_blockcache_get_stats(c, &st);
    CHECK(st.expired == 1);
    ct_blockcache_close(c);
}

static void test_eviction(const char *dir) {
    /* room for about 5 blocks: 8 puts leave at most 5, and the oldest go */
    ct_blockcache *c;
    int64_t limit = 5 * (BLK + 32) + 100;
    CHECK(ct_blockcache_open(&c, dir, limit, 0) == CT_OK);
    static uint8_t a[BLK], b[BLK];
    char path[512];
    for (int i = 0; i < 8; i++) {
        fill(a, sizeof a, 10 + i);
        CHECK(ct_blockcache_put(c, KEY, i, a, sizeof a) == CT_OK);
        block_path(path, sizeof path, dir, i);
        age(path, 1000 - 10 * i); /* block i last used before block i+1 */
        if (i == 1) { /* block 0 is used again: it becomes the newest of the first ones */
            block_path(path, sizeof path, dir, 0);
            age(path, 5);
        }
    }
    ct_blockcache_stats st;
    ct_blockcache_get_stats(c, &st);
    CHECK_MSG(st.bytes <= limit, "%lld bytes over a limit of %lld", (long long)st.bytes,
              (long long)limit);
    CHECK(st.evicted >= 3);
    fill(a, sizeof a, 17);
    CHECK(ct_blockcache_get(c, KEY, 7, b, sizeof b, 0) && memcmp(a, b, sizeof a) == 0);
    fill(a, sizeof a, 10);
    CHECK(ct_blockcache_get(c, KEY, 0, b, sizeof b, 0) && memcmp(a, b, sizeof a) == 0);
    CHECK(!ct_blockcache_has(c, KEY, 1, sizeof a)); /* the least recently used went first */
    CHECK(!ct_blockcache_has(c, KEY, 2, sizeof a));
    ct_blockcache_close(c);
    /* a new process measures the directory and trims it to a lower limit */
    CHECK(ct_blockcache_open(&c, dir, 2 * (BLK + 32), 0) == CT_OK);
    ct_blockcache_get_stats(c, &st);
    CHECK(st.bytes <= 2 * (BLK + 32));
    CHECK(ct_blockcache_has(c, KEY, 7, sizeof a)); /* the newest stays */
    ct_blockcache_close(c);
}

static void test_stale_tmp_and_errors(const char *dir) {
    char sub[512], tmp[600];
    snprintf(sub, sizeof sub, "%s/%s", dir, KEY);
    mkdir(sub, 0755);
    snprintf(tmp, sizeof tmp, "%s/00000009.blk.tmp.99999.1", sub);
    CHECK(ct_tmpdir_write(tmp, "x", 1) == 0);
    age(tmp, 7200);
    ct_blockcache *c;
    CHECK(ct_blockcache_open(&c, dir, 1 << 24, 0) == CT_OK);
    struct stat sb;
    CHECK(stat(tmp, &sb) != 0); /* a killed writer's temp file is removed */
    ct_blockcache_close(c);
    CHECK(ct_blockcache_open(&c, "", 1 << 20, 0) == CT_ERR_ARG);
    CHECK(ct_blockcache_open(&c, dir, 0, 0) == CT_ERR_ARG);
    if (geteuid() != 0) { /* root writes anywhere */
        char ro[512];
        snprintf(ro, sizeof ro, "%s/readonly", dir);
        mkdir(ro, 0555);
        CHECK(ct_blockcache_open(&c, ro, 1 << 20, 0) == CT_ERR_IO);
        CHECK(strstr(ct_last_error(), "readonly") != NULL);
    }
    char def[512];
    CHECK(strstr(ct_blockcache_default_dir(def, sizeof def), "ctrain") != NULL);
}

int main(void) {
    char dir[128];
    const char *tags[] = {"bc_rt", "bc_ttl", "bc_evict", "bc_misc"};
    void (*tests[])(const char *) = {test_roundtrip_and_corruption, test_ttl, test_eviction,
                                     test_stale_tmp_and_errors};
    for (int i = 0; i < 4; i++) {
        if (!ct_tmpdir_make(dir, sizeof dir, tags[i])) return 1;
        tests[i](dir);
        ct_tmpdir_remove(dir);
    }
    return ct_test_result("test_blockcache");
}
