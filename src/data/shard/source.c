/*
 * The registry of sources (source.h) and what they share: opening a spec
 * with the first source that claims it, the base fields, and the name of
 * the file beside a shard.
 * Leaves out: the sources themselves (source_local.c, source_remote.c).
 */
#include "data/shard/source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Asked in order; the last one (local files) takes every spec. */
static const ct_source_i *const source_registry[] = {
    &ct_source_remote_i,
    &ct_source_local_i,
};

ct_status ct_source_open(ct_source **out, const ct_source_opts *o) {
    *out = NULL;
    size_t n = sizeof source_registry / sizeof *source_registry;
    for (size_t k = 0; k < n; k++)
        if (k + 1 == n || source_registry[k]->claims(o->spec))
            return source_registry[k]->open(out, o);
    return CT_ERR(CT_ERR_ARG, "%s: no source reads this", o->spec);
}

void ct_source_close(ct_source *s) {
    if (s) s->i->close(s);
}

ct_status ct_source_base_alloc(ct_source *s, const ct_source_i *i, int n) {
    s->i = i;
    s->n = n;
    s->names = calloc((size_t)(n > 0 ? n : 1), sizeof *s->names);
    s->ntok = calloc((size_t)(n > 0 ? n : 1), sizeof *s->ntok);
    if (!s->names || !s->ntok) return CT_ERR(CT_ERR_OOM, "out of memory for the loader");
    return CT_OK;
}

void ct_source_base_free(ct_source *s) {
    if (s->names)
        for (int k = 0; k < s->n; k++) free(s->names[k]);
    free(s->names);
    free(s->ntok);
    s->names = NULL;
    s->ntok = NULL;
}

ct_status ct_source_side_path(char *buf, size_t cap, const char *name, const char *suffix) {
    size_t n = strlen(name);
    if (n >= 4 && !strcmp(name + n - 4, ".bin")) n -= 4;
    int k = snprintf(buf, cap, "%.*s%s", (int)n, name, suffix);
    if (k < 0 || (size_t)k >= cap)
        return CT_ERR(CT_ERR_ARG, "%s: path too long for its sidecar's name", name);
    return CT_OK;
}
