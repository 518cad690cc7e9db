/*
 * Logging through one process-wide callback (stderr by default). The library
 * never writes to stdout.
 */
#include "ctrain/core.h"

#include <stdarg.h>
#include <stdio.h>

static ct_log_fn log_fn = NULL;
static void *log_user = NULL;

void ct_log_set(ct_log_fn fn, void *user) {
    log_fn = fn;
    log_user = user;
}

void ct_log(ct_log_level level, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (log_fn) {
        log_fn(level, msg, log_user);
        return;
    }
    if (level < CT_LOG_INFO) return;
    static const char *names[CT_LOG_COUNT] = {"debug", "info", "warning", "error"};
    if (level == CT_LOG_INFO)
        fprintf(stderr, "%s\n", msg);
    else
        fprintf(stderr, "%s: %s\n", names[level], msg);
}
