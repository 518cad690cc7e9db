/*
 * The registry of example kinds (kind.h) and what they share: detecting the
 * kind of a source's shards and opening it, the base fields.
 * Leaves out: the kinds themselves (kind_tokens.c, kind_sft.c).
 */
#include "data/loader/kind.h"

#include <stdlib.h>

/* Asked in order; the last (plain token windows) takes whatever is left. */
static const loader_kind_i *const loader_kinds[] = {
    &loader_kind_sft_i,
    &loader_kind_tokens_i,
};

ct_status loader_kind_open(loader_kind **out, ct_source *src, const loader_kind_opts *o) {
    *out = NULL;
    size_t n = sizeof loader_kinds / sizeof *loader_kinds;
    for (size_t k = 0; k < n; k++) {
        bool yes = k + 1 == n;
        ct_status st = yes ? CT_OK : loader_kinds[k]->detect(src, &yes);
        if (st) return st;
        if (yes) return loader_kinds[k]->open(out, src, o);
    }
    return CT_OK; /* not reached: the last kind takes every source */
}

void loader_kind_close(loader_kind *k) {
    if (k) k->i->close(k);
}

ct_status loader_kind_base_init(loader_kind *k, const loader_kind_i *i, int n_groups) {
    k->i = i;
    k->n_groups = n_groups;
    k->group_start = calloc((size_t)n_groups + 1, sizeof *k->group_start);
    if (!k->group_start) return CT_ERR(CT_ERR_OOM, "out of memory for the loader");
    return CT_OK;
}

void loader_kind_base_free(loader_kind *k) {
    free(k->group_start);
    k->group_start = NULL;
}

int loader_kind_group_of(const loader_kind *k, int64_t x) {
    int lo = 0, hi = k->n_groups; /* group_start[lo] <= x < group_start[hi] */
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (k->group_start[mid] <= x) lo = mid;
        else hi = mid;
    }
    return lo;
}
