/*
 * Test helpers for file tests: a private directory under /tmp (mkdtemp),
 * raw file writes for crafting corrupt inputs, and recursive removal.
 * Not a test itself (the name does not start with test_).
 */
#ifndef CT_TMPDIR_H
#define CT_TMPDIR_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Create /tmp/ctrain_<tag>_XXXXXX into buf (>= 64 bytes); NULL on failure. */
static inline char *ct_tmpdir_make(char *buf, size_t len, const char *tag) {
    snprintf(buf, len, "/tmp/ctrain_%s_XXXXXX", tag);
    return mkdtemp(buf);
}

/* out = dir + "/" + name */
static inline const char *ct_tmpdir_join(char *out, size_t len, const char *dir, const char *name) {
    int k = snprintf(out, len, "%s/%s", dir, name);
    if (k < 0 || (size_t)k >= len) abort(); /* test paths are short */
    return out;
}

/* Write n raw bytes to path (truncating). 0 on success. */
static inline int ct_tmpdir_write(const char *path, const void *data, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return -1;
    size_t w = n ? fwrite(data, 1, n, fp) : 0;
    int rc = fclose(fp);
    return (w == n && rc == 0) ? 0 : -1;
}

/* Read up to cap bytes of path into buf; returns bytes read or -1. */
static inline long ct_tmpdir_read(const char *path, void *buf, size_t cap) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return -1;
    size_t r = fread(buf, 1, cap, fp);
    fclose(fp);
    return (long)r;
}

static inline long ct_tmpdir_size(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) return -1;
    return (long)sb.st_size;
}

/* Number of entries in dir, not counting . and .. (-1 on error). */
static inline int ct_tmpdir_count(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

/* rm -r dir. 0 on success. */
static inline int ct_tmpdir_remove(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[4096];
        int k = snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (k < 0 || (size_t)k >= sizeof p) {
            rc = -1;
            continue;
        }
        struct stat sb;
        if (lstat(p, &sb) != 0) {
            rc = -1;
            continue;
        }
        if (S_ISDIR(sb.st_mode)) {
            if (ct_tmpdir_remove(p) != 0) rc = -1;
        } else if (unlink(p) != 0) {
            rc = -1;
        }
    }
    closedir(d);
    if (rmdir(dir) != 0) rc = -1;
    return rc;
}

#endif
