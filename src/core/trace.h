/*
 * A trace recorder: spans (name, category, thread, start, end) collected in
 * memory and written as Chrome's Trace Event Format ("X" complete events in
 * a JSON object with a traceEvents array), which Perfetto and chrome://tracing
 * open. The trainer records steps, data waits, the forward and backward,
 * allreduces, the optimizer, evaluations and checkpoint writes; the kernel
 * profiler records every backend call inside them. Times are ct_time_s()
 * seconds; spans on one thread nest or follow each other. Not thread-safe: one
 * recorder per recording thread. Leaves out: counters, flows and async events.
 */
#ifndef CT_CORE_TRACE_H
#define CT_CORE_TRACE_H

#include <stddef.h>

#include "core/strbuf.h"
#include "ctrain/core.h"

typedef struct ct_trace ct_trace;

/* Thread ids of the recorded timelines; DEVICE is an asynchronous device's
 * stream, whose kernels run after the host queued them (perf/kprof.h). */
enum { CT_TRACE_TID_MAIN = 1, CT_TRACE_TID_DATA = 2, CT_TRACE_TID_DEVICE = 3 };

/* An empty recorder. Returns owned *out; release with ct_trace_free. */
ct_status ct_trace_init(ct_trace **out);
void ct_trace_free(ct_trace *tr); /* NULL is fine */
/* Record a span [t0, t1] on thread tid. name is copied (up to 47 bytes); cat
 * must be a static string. step (>= 0) is written as an argument; -1 omits
 * it. Out of memory drops the span and counts it. tr NULL does nothing. */
void ct_trace_span(ct_trace *tr, const char *name, const char *cat, int tid, double t0,
                   double t1, long long step);
/* Spans recorded (and dropped for lack of memory). */
size_t ct_trace_count(const ct_trace *tr);
size_t ct_trace_dropped(const ct_trace *tr);
/* Append the trace as JSON to out: timestamps in microseconds from the first
 * span, one process ("ctrain") and named threads. */
void ct_trace_to_json(const ct_trace *tr, ct_strbuf *out);

#endif
