/*
 * Batch loader over llm.c token shards (see shard.h for the format).
 * Sequential order (data.shuffle=false) follows llm.c's loader: windows of
 * B*T+1 tokens at stride world*B*T, moving to the next shard when a window no
 * longer fits. Shuffled order visits every window of every shard once per
 * epoch in a permutation seeded by (seed, epoch).
 * Leaves out: the background prefetch thread and exact-resume positions, which
 * the data pipeline work adds.
 */
#include "ctrain/train.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/shard.h"

typedef struct window {
    int shard;
    int64_t pos;
} window;

struct ct_loader {
    int B, T, rank, world;
    int n_shards;
    ct_shard **shards;
    char **paths;
    int64_t total_tokens;
    /* sequential state */
    int cur_shard;
    int64_t cur_pos;
    /* shuffled state */
    bool shuffle;
    uint64_t seed;
    window *windows;
    int64_t n_windows, next_window, epoch;
};

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Expand spec into a sorted list of shard paths (owned by *paths). */
static ct_status resolve_paths(const char *spec, const char *split, char ***paths, int *n) {
    struct stat sb;
    *paths = NULL;
    *n = 0;
    glob_t g;
    memset(&g, 0, sizeof g);
    int rc;
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

/* Every token of the shard must be a valid id for the model. */
static ct_status check_shard_tokens(ct_shard *s, const char *path, int vocab_size) {
    enum { CHUNK = 1 << 16 };
    int32_t *buf = malloc(CHUNK * sizeof *buf);
    if (!buf) return CT_ERR(CT_ERR_OOM, "out of memory checking %s", path);
    int64_t n = ct_shard_ntokens(s);
    ct_status st = CT_OK;
    for (int64_t p = 0; p < n && st == CT_OK; p += CHUNK) {
        int64_t cnt = n - p < CHUNK ? n - p : CHUNK;
        if ((st = ct_shard_read(s, p, cnt, buf))) break;
        for (int64_t i = 0; i < cnt; i++) {
            if (buf[i] < 0 || buf[i] >= vocab_size) {
                st = CT_ERR(CT_ERR_ARG, "%s: token %d at index %lld is out of range: the model's "
                            "vocab_size is %d (expected 0..%d)", path, buf[i],
                            (long long)(p + i), vocab_size, vocab_size - 1);
                ct_error_hint("the shards were made for a different vocabulary than the model");
                break;
            }
        }
    }
    free(buf);
    return st;
}

static void shuffle_windows(ct_loader *l) {
    ct_rng rng;
    ct_rng_init(&rng, l->seed * 1000003u + (uint64_t)l->epoch);
    for (int64_t i = l->n_windows - 1; i > 0; i--) {
        int64_t j = (int64_t)(((uint64_t)ct_rng_u32(&rng) << 32 | ct_rng_u32(&rng)) %
                              (uint64_t)(i + 1));
        window tmp = l->windows[i];
        l->windows[i] = l->windows[j];
        l->windows[j] = tmp;
    }
    l->next_window = l->rank;
}

ct_status ct_loader_init(ct_loader **out, const char *spec, const char *split, int B, int T,
                         int vocab_size, bool shuffle, uint64_t seed, int rank, int world) {
    *out = NULL;
    if (B < 1 || T < 1 || world < 1 || rank < 0 || rank >= world)
        return CT_ERR(CT_ERR_ARG, "loader: bad shape B=%d T=%d rank=%d world=%d", B, T, rank,
                      world);
    if (!spec || !*spec) return CT_ERR(CT_ERR_ARG, "data.%s is empty: expected a shard file, glob "
                                       "or directory", split);
    ct_loader *l = calloc(1, sizeof *l);
    if (!l) return CT_ERR(CT_ERR_OOM, "out of memory for the loader");
    l->B = B;
    l->T = T;
    l->rank = rank;
    l->world = world;
    l->shuffle = shuffle;
    l->seed = seed;
    ct_status st = resolve_paths(spec, split, &l->paths, &l->n_shards);
    if (st) goto fail;
    l->shards = calloc((size_t)l->n_shards, sizeof *l->shards);
    if (!l->shards) {
        st = CT_ERR(CT_ERR_OOM, "out of memory for the loader");
        goto fail;
    }
    int64_t need = (int64_t)B * T + 1;
    for (int i = 0; i < l->n_shards; i++) {
        if ((st = ct_shard_open(&l->shards[i], l->paths[i]))) goto fail;
        int64_t n = ct_shard_ntokens(l->shards[i]);
        if (n < need) {
            st = CT_ERR(CT_ERR_ARG, "%s: shard has %lld tokens, fewer than one batch needs "
                        "(train.batch_size * train.seq_len + 1 = %lld)", l->paths[i],
                        (long long)n, (long long)need);
            goto fail;
        }
        if (vocab_size > 0 && (st = check_shard_tokens(l->shards[i], l->paths[i], vocab_size)))
            goto fail;
        l->total_tokens += n;
        l->n_windows += (n - 1) / ((int64_t)B * T);
    }
    if (shuffle) {
        l->windows = calloc((size_t)l->n_windows, sizeof *l->windows);
        if (!l->windows) {
            st = CT_ERR(CT_ERR_OOM, "out of memory for the shuffle order");
            goto fail;
        }
        int64_t w = 0;
        for (int i = 0; i < l->n_shards; i++) {
            int64_t n = ct_shard_ntokens(l->shards[i]);
            for (int64_t p = 0; p + need <= n; p += (int64_t)B * T) l->windows[w++] = (window){i, p};
        }
        l->n_windows = w;
    }
    ct_loader_reset(l);
    *out = l;
    return CT_OK;
fail:
    ct_loader_free(l);
    return st;
}

void ct_loader_free(ct_loader *l) {
    if (!l) return;
    for (int i = 0; i < l->n_shards; i++) {
        if (l->shards) ct_shard_close(l->shards[i]);
        if (l->paths) free(l->paths[i]);
    }
    free(l->shards);
    free(l->paths);
    free(l->windows);
    free(l);
}

void ct_loader_reset(ct_loader *l) {
    l->cur_shard = 0;
    l->cur_pos = (int64_t)l->rank * l->B * l->T;
    l->epoch = 0;
    if (l->shuffle) shuffle_windows(l);
}

ct_status ct_loader_next(ct_loader *l, int32_t *inputs, int32_t *targets) {
    int64_t BT = (int64_t)l->B * l->T;
    int shard;
    int64_t pos;
    if (l->shuffle) {
        if (l->next_window >= l->n_windows) {
            l->epoch++;
            shuffle_windows(l);
            if (l->next_window >= l->n_windows) l->next_window = l->next_window % l->n_windows;
        }
        shard = l->windows[l->next_window].shard;
        pos = l->windows[l->next_window].pos;
        l->next_window += l->world;
    } else {
        /* llm.c order: move on when this window no longer fits */
        int tries = 0;
        while (l->cur_pos + BT + 1 > ct_shard_ntokens(l->shards[l->cur_shard])) {
            l->cur_shard = (l->cur_shard + 1) % l->n_shards;
            l->cur_pos = (int64_t)l->rank * BT;
            if (++tries > l->n_shards)
                return CT_ERR(CT_ERR_ARG, "no shard holds %lld tokens for rank %d",
                              (long long)((l->rank + 1) * BT + 1), l->rank);
        }
        shard = l->cur_shard;
        pos = l->cur_pos;
        l->cur_pos += BT * l->world;
    }
    ct_status st = ct_shard_read(l->shards[shard], pos, BT, inputs);
    if (st == CT_OK) st = ct_shard_read(l->shards[shard], pos + 1, BT, targets);
    return st;
}

int64_t ct_loader_total_tokens(const ct_loader *l) { return l->total_tokens; }
int ct_loader_num_shards(const ct_loader *l) { return l->n_shards; }
