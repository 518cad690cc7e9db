/*
 * metrics.jsonl: one JSON object per line, flushed after every line so a
 * crashed run keeps what it logged. Non-finite numbers are written as null
 * (JSON has no NaN); integral values exactly (byte counts pass 1e9), others
 * to 9 significant digits.
 */
#ifndef CT_METRICS_H
#define CT_METRICS_H
#include "ctrain/core.h"

typedef struct ct_metrics ct_metrics;

/* Open run_dir/metrics.jsonl (truncate unless append). Returns owned *out;
 * release with ct_metrics_close. */
ct_status ct_metrics_open(ct_metrics **out, const char *run_dir, bool append);
void ct_metrics_close(ct_metrics *m); /* NULL is fine */
/* One line from alternating keys and values: keys[i] = vals[i]. */
ct_status ct_metrics_write(ct_metrics *m, int64_t step, const char *split, int n,
                           const char *const *keys, const double *vals);
/* An alert line: {"step": k, "split": "alert", "level": level, "kind": kind,
 * "value": x, "threshold": y, "message": "..."} (message JSON-escaped). */
ct_status ct_metrics_write_alert(ct_metrics *m, int64_t step, const char *level,
                                 const char *kind, double value, double threshold,
                                 const char *message);
#endif
