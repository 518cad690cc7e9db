/*
 * A growable text buffer for building files and pages in memory (YAML, HTML,
 * profiles) before one atomic write. Zero-initialise one; append with
 * ct_strbuf_printf / ct_strbuf_append; take p (owned by the caller from then
 * on) or release with ct_strbuf_free. After an allocation failure it keeps
 * what it had, ignores later appends and sets oom, so callers check once at
 * the end. Leaves out: shrinking, and any escaping (callers know their syntax).
 */
#ifndef CT_CORE_STRBUF_H
#define CT_CORE_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

#include "ctrain/core.h"

typedef struct ct_strbuf {
    char *p;    /* NUL-terminated once anything was appended */
    size_t len; /* bytes, without the NUL */
    size_t cap; /* bytes allocated */
    bool oom;
} ct_strbuf;

void ct_strbuf_printf(ct_strbuf *b, const char *fmt, ...) CT_PRINTF(2, 3);
void ct_strbuf_append(ct_strbuf *b, const char *s, size_t n);
/* Frees p and zeroes b (NULL b or p is fine). */
void ct_strbuf_free(ct_strbuf *b);

#endif
