/*
 * The local source (source.h): shards named by a file, a glob or a
 * directory (its <split>_*.bin, else every *.bin), sorted by path, each
 * mapped read-only and its header validated (shard.c); the files beside
 * them (a .sft sidecar) mapped likewise; manifest.json beside the first.
 * Leaves out: fetching (source_remote.c), batching (the loader).
 */
#include "data/shard/source.h"

#include "data/shard/shard.h"

#include <glob.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define LOCAL_PATH_MAX 4096

typedef struct local_source {
    ct_source base;
    ct_shard **shards;   /* (n) */
    char *manifest;      /* manifest.json beside the first shard; NULL: none */
    size_t manifest_len;
    bool manifest_read;  /* looked for it already */
} local_source;

static bool local_claims(const char *spec) {
    (void)spec;
    return true;
}

/* ------------------------------------------------------------ the paths */

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* How many files match dir/pattern. */
static size_t count_matches(const char *dir, const char *pattern) {
    char pat[2048];
    snprintf(pat, sizeof pat, "%s/%s", dir, pattern);
    glob_t g;
    memset(&g, 0, sizeof g);
    size_t n = glob(pat, 0, NULL, &g) == 0 ? g.gl_pathc : 0;
    globfree(&g);
    return n;
}

bool ct_source_split_missing(const char *spec, const char *split) {
    struct stat sb;
    if (!spec || !spec[0] || stat(spec, &sb) != 0 || !S_ISDIR(sb.st_mode)) return false;
    char own[128];
    snprintf(own, sizeof own, "%s_*.bin", split ? split : "train");
    if (count_matches(spec, own)) return false;
    /* the splits `ctrain prepare` writes */
    const char *other = split && !strcmp(split, "train") ? "val_*.bin" : "train_*.bin";
    return count_matches(spec, other) > 0;
}

/* Expand spec into a sorted list of shard paths (owned by *paths). */
static ct_status resolve_paths(const char *spec, const char *split, char ***paths, int *n) {
    struct stat sb;
    *paths = NULL;
    *n = 0;
    glob_t g;
    memset(&g, 0, sizeof g);
    int rc;
    if (ct_source_split_missing(spec, split))
        return CT_ERR(CT_ERR_IO, "%s: directory holds no %s_*.bin token shards (its *.bin are "
                      "another split's: `ctrain prepare` made no %s split)", spec, split, split);
    if (stat(spec, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        char pat[2048];
        snprintf(pat, sizeof pat, "%s/%s_*.bin", spec, split);
        rc = glob(pat, 0, NULL, &g);
        if (rc == GLOB_NOMATCH) {
            globfree(&g);
            memset(&g, 0, sizeof g);
            snprintf(pat, sizeof pat, "%s/*.bin", spec);
            rc = glob(pat, 0, NULL, &g);
        }
        if (rc != 0) {
            globfree(&g);
            return CT_ERR(CT_ERR_IO, "%s: directory holds no %s_*.bin or *.bin token shards",
                          spec, split);
        }
    } else if (strpbrk(spec, "*?[")) {
        rc = glob(spec, 0, NULL, &g);
        if (rc != 0) {
            globfree(&g);
            return CT_ERR(CT_ERR_IO, "%s: no files match this pattern", spec);
        }
    } else {
        FILE *f = fopen(spec, "rb");
        if (!f) return CT_ERR(CT_ERR_IO, "%s: cannot open token shard: no such file", spec);
        fclose(f);
        g.gl_pathc = 0;
    }
    size_t count = g.gl_pathc ? g.gl_pathc : 1;
    if (count > INT32_MAX) {
        globfree(&g);
        return CT_ERR(CT_ERR_ARG, "%s: %zu shards, more than a loader takes", spec, count);
    }
    char **list = calloc(count, sizeof *list);
    if (!list) {
        globfree(&g);
        return CT_ERR(CT_ERR_OOM, "out of memory listing shards");
    }
    for (size_t i = 0; i < count; i++) {
        list[i] = strdup(g.gl_pathc ? g.gl_pathv[i] : spec);
        if (!list[i]) {
            for (size_t j = 0; j < i; j++) free(list[j]);
            free(list);
            globfree(&g);
            return CT_ERR(CT_ERR_OOM, "out of memory listing shards");
        }
    }
    globfree(&g);
    qsort(list, count, sizeof *list, cmp_str);
    *paths = list;
    *n = (int)count;
    return CT_OK;
}

/* ------------------------------------------------------------ open, close */

static void local_close(ct_source *src) {
    local_source *s = (local_source *)src;
    if (s->shards)
        for (int i = 0; i < src->n; i++) ct_shard_close(s->shards[i]);
    free(s->shards);
    free(s->manifest);
    ct_source_base_free(src);
    free(s);
}

static ct_status local_open(ct_source **out, const ct_source_opts *o) {
    local_source *s = calloc(1, sizeof *s);
    if (!s) return CT_ERR(CT_ERR_OOM, "out of memory for the loader");
    s->base.i = &ct_source_local_i;
    char **paths = NULL;
    int n = 0;
    ct_status st = resolve_paths(o->spec, o->split, &paths, &n);
    if (st == CT_OK && (st = ct_source_base_alloc(&s->base, &ct_source_local_i, n)) == CT_OK) {
        memcpy(s->base.names, paths, (size_t)n * sizeof *paths);
        free(paths);
        paths = NULL;
        if (!(s->shards = calloc((size_t)n, sizeof *s->shards)))
            st = CT_ERR(CT_ERR_OOM, "out of memory for the loader");
    }
    for (int i = 0; st == CT_OK && i < n; i++) {
        st = ct_shard_open(&s->shards[i], s->base.names[i]);
        if (st == CT_OK) s->base.ntok[i] = ct_shard_ntokens(s->shards[i]);
    }
    if (paths) { /* the base could not take them */
        for (int i = 0; i < n; i++) free(paths[i]);
        free(paths);
    }
    if (st) {
        local_close(&s->base);
        return st;
    }
    *out = &s->base;
    return CT_OK;
}

/* ------------------------------------------------------------ the tokens */

static ct_status local_read(ct_source *src, int i, int64_t start, int64_t count, int32_t *out) {
    return ct_shard_read(((local_source *)src)->shards[i], start, count, out);
}

static ct_status local_check_tokens(ct_source *src, int i, int vocab) {
    const ct_shard *sh = ((local_source *)src)->shards[i];
    int64_t k = ct_shard_find_token_ge(sh, (uint32_t)vocab);
    /* the scan touched every page: let them go (page cache, not our RSS) */
    ct_shard_drop_pages(sh);
    if (k < 0) return CT_OK;
    ct_status st = CT_ERR(CT_ERR_ARG, "%s: token %" PRIu32 " at index %" PRId64 " is out of "
                          "range: the model's vocab_size is %d (expected 0..%d)", src->names[i],
                          ct_shard_token(sh, k), k, vocab, vocab - 1);
    ct_error_hint("the shards were made for a different vocabulary than the model");
    return st;
}

static void local_willneed(ct_source *src, int i, int64_t start, int64_t count) {
    ct_shard_willneed(((local_source *)src)->shards[i], start, count);
}

/* ------------------------------------------------------ files beside them */

static bool local_has_side(ct_source *src, int i, const char *suffix) {
    char path[LOCAL_PATH_MAX];
    struct stat sb;
    return ct_source_side_path(path, sizeof path, src->names[i], suffix) == CT_OK &&
           stat(path, &sb) == 0;
}

static ct_status local_side_name(ct_source *src, int i, const char *suffix, char *buf,
                                 size_t cap) {
    return ct_source_side_path(buf, cap, src->names[i], suffix);
}

static void local_unmap(const void *data, size_t len) { ct_file_unmap(data, len); }

static ct_status local_side_open(ct_source *src, int i, const char *suffix, size_t min_bytes,
                                 const ct_file_map_msgs *msgs, ct_source_bytes *out) {
    memset(out, 0, sizeof *out);
    char path[LOCAL_PATH_MAX];
    ct_status st = ct_source_side_path(path, sizeof path, src->names[i], suffix);
    if (st) return st;
    if ((st = ct_file_map(path, min_bytes, msgs, &out->data, &out->len))) return st;
    out->release = local_unmap;
    return CT_OK;
}

static const char *local_manifest(ct_source *src, size_t *len) {
    local_source *s = (local_source *)src;
    if (!s->manifest_read && src->n > 0) {
        s->manifest_read = true;
        char path[LOCAL_PATH_MAX];
        const char *name = src->names[0], *slash = strrchr(name, '/');
        int k = slash ? snprintf(path, sizeof path, "%.*s/manifest.json", (int)(slash - name), name)
                      : snprintf(path, sizeof path, "manifest.json");
        struct stat sb;
        if (k > 0 && (size_t)k < sizeof path && stat(path, &sb) == 0 && S_ISREG(sb.st_mode) &&
            ct_file_read_all(path, &s->manifest, &s->manifest_len)) {
            ct_error_clear(); /* an unreadable manifest is no manifest */
            s->manifest = NULL;
        }
    }
    *len = s->manifest_len;
    return s->manifest;
}

static bool local_stats(ct_source *src, ct_source_stats *out) {
    (void)src;
    memset(out, 0, sizeof *out);
    return false;
}

const ct_source_i ct_source_local_i = {
    .name = "local",
    .claims = local_claims,
    .open = local_open,
    .close = local_close,
    .read = local_read,
    .check_tokens = local_check_tokens,
    .willneed = local_willneed,
    .ahead = NULL,
    .has_side = local_has_side,
    .side_name = local_side_name,
    .side_open = local_side_open,
    .manifest = local_manifest,
    .stats = local_stats,
};
