/*
 * Error context: each thread keeps its last status, message, site and hint.
 * The library never exits; callers read ct_last_error() and decide.
 * Also the abort handler for broken invariants (CT_ASSERT).
 */
#include "ctrain/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERR_MSG_MAX 1024

typedef struct error_slot {
    ct_status status;
    char msg[ERR_MSG_MAX];
    char hint[ERR_MSG_MAX];
    char site[128];
} error_slot;

static _Thread_local error_slot err_slot;

const char *ct_version(void) { return CT_VERSION; }

const char *ct_status_str(ct_status s) {
    switch (s) {
    case CT_OK: return "ok";
    case CT_ERR_IO: return "io";
    case CT_ERR_OOM: return "out of memory";
    case CT_ERR_FORMAT: return "format";
    case CT_ERR_ARG: return "invalid argument";
    case CT_ERR_NUMERIC: return "numeric";
    case CT_ERR_DIST: return "distributed";
    }
    return "unknown";
}

ct_status ct_error_set(ct_status code, const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_slot.msg, sizeof err_slot.msg, fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
    snprintf(err_slot.site, sizeof err_slot.site, "%s:%d", base ? base + 1 : file, line);
    err_slot.hint[0] = '\0';
    err_slot.status = code;
    return code;
}

void ct_error_hint(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_slot.hint, sizeof err_slot.hint, fmt, ap);
    va_end(ap);
}

void ct_error_prefix(const char *fmt, ...) {
    char pre[ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    /* join into a larger buffer, then keep what fits */
    char joined[2 * ERR_MSG_MAX + 2];
    snprintf(joined, sizeof joined, "%s: %s", pre, err_slot.msg);
    memcpy(err_slot.msg, joined, ERR_MSG_MAX - 1);
    err_slot.msg[ERR_MSG_MAX - 1] = '\0';
}

const char *ct_last_error(void) { return err_slot.msg; }
const char *ct_last_hint(void) { return err_slot.hint; }
const char *ct_last_site(void) { return err_slot.site; }
ct_status ct_last_status(void) { return err_slot.status; }

void ct_error_clear(void) {
    err_slot.status = CT_OK;
    err_slot.msg[0] = err_slot.hint[0] = err_slot.site[0] = '\0';
}

/* Process-wide by design, like the log callback: the one handler the program
 * installs before anything runs (the library holds no other mutable global). */
static ct_abort_fn abort_handler = NULL;

void ct_set_abort_handler(ct_abort_fn fn) { abort_handler = fn; }

void ct_abort(const char *file, int line, const char *cond) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s:%d: assertion failed: %s", file, line, cond);
    if (abort_handler) abort_handler(msg);
    fprintf(stderr, "ctrain: %s\n", msg);
    abort();
}
