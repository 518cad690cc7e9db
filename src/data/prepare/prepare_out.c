/*
 * The --out directory of both prepare paths (prepare.c, sft_prepare.c): the
 * check that it holds no earlier outputs (unless --overwrite), the staging
 * directory new files are written into, and publishing them: old outputs out
 * (the manifest first), new files in by rename, the manifest last (the
 * caller writes it). Staging directories of runs whose process is gone are
 * removed on the way.
 * Leaves out: what the files hold.
 */
#include "data/prepare/prepare_impl.h"

#include "ctrain/config.h" /* CT_PATH_MAX */
#include "io/fileio.h"

#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What a prepare writes into --out, the manifest first (removal order: a
 * reader never sees a manifest without its shards). */
static const char *const out_pats[] = {"manifest.json", "train_*.bin", "val_*.bin",
                                       "train_*.sft", "val_*.sft"};
#define N_PATS (sizeof out_pats / sizeof *out_pats)

/* Remove staging directories of earlier runs whose process is gone. */
static void remove_stale_stages(const char *out) {
    char pat[CT_PATH_MAX + 32];
    snprintf(pat, sizeof pat, "%s/.staging-*", out);
    glob_t g;
    if (glob(pat, 0, NULL, &g) != 0) return;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *dash = strrchr(g.gl_pathv[i], '-');
        long pid = dash ? strtol(dash + 1, NULL, 10) : 0;
        if (ct_pid_gone(pid)) ct_remove_tree(g.gl_pathv[i]);
    }
    globfree(&g);
}

/* Prepared files in out (manifest, shards, sidecars); the first into first. */
static size_t count_outputs(const char *out, char *first, size_t cap) {
    size_t n = 0;
    first[0] = 0;
    for (size_t p = 0; p < N_PATS; p++) {
        char pat[CT_PATH_MAX + 32];
        snprintf(pat, sizeof pat, "%s/%s", out, out_pats[p]);
        glob_t g;
        if (glob(pat, 0, NULL, &g) != 0) continue;
        if (!n && g.gl_pathc) snprintf(first, cap, "%s", g.gl_pathv[0]);
        n += g.gl_pathc;
        globfree(&g);
    }
    return n;
}

ct_status prep_out_check(const char *out_dir, bool overwrite) {
    struct stat sb;
    if (stat(out_dir, &sb) != 0) return CT_OK;
    if (!S_ISDIR(sb.st_mode))
        return CT_ERR(CT_ERR_ARG, "--out %s exists and is not a directory", out_dir);
    char first[CT_PATH_MAX];
    size_t n = count_outputs(out_dir, first, sizeof first);
    if (n && !overwrite) {
        ct_status st = CT_ERR(CT_ERR_ARG, "--out %s already holds %zu prepared file%s (%s)",
                              out_dir, n, n == 1 ? "" : "s", first);
        ct_error_hint("pass --overwrite to replace them, or choose another --out");
        return st;
    }
    return CT_OK;
}

ct_status prep_out_stage(const char *out_dir, bool *created_out, char **stage) {
    struct stat sb;
    *stage = NULL;
    *created_out = stat(out_dir, &sb) != 0;
    ct_status st = ct_mkdir_p(out_dir);
    if (st) return st;
    remove_stale_stages(out_dir);
    size_t len = strlen(out_dir) + 32;
    char *s = malloc(len);
    if (!s) return CT_ERR(CT_ERR_OOM, "out of memory");
    snprintf(s, len, "%s/.staging-%ld", out_dir, (long)getpid());
    if (mkdir(s, 0777) != 0 && errno != EEXIST) {
        st = CT_ERR(CT_ERR_IO, "%s: cannot create the staging directory: %s", s, strerror(errno));
        ct_error_hint("is --out writable?");
        free(s);
        return st;
    }
    *stage = s;
    return CT_OK;
}

void prep_out_remove_outputs(const char *out_dir) {
    for (size_t p = 0; p < N_PATS; p++) {
        char pat[CT_PATH_MAX + 32];
        snprintf(pat, sizeof pat, "%s/%s", out_dir, out_pats[p]);
        glob_t g;
        if (glob(pat, 0, NULL, &g) != 0) continue;
        for (size_t i = 0; i < g.gl_pathc; i++) remove(g.gl_pathv[i]);
        globfree(&g);
    }
}

ct_status prep_out_move(const char *stage, const char *out_dir, const char *file) {
    char from[CT_PATH_MAX + 48], to[CT_PATH_MAX + 48];
    snprintf(from, sizeof from, "%s/%s", stage, file);
    snprintf(to, sizeof to, "%s/%s", out_dir, file);
    if (rename(from, to) != 0)
        return CT_ERR(CT_ERR_IO, "%s: cannot move the new file into place: %s", to,
                      strerror(errno));
    return CT_OK;
}
