/*
 * The run report: one self-contained HTML file made from a run directory's
 * metrics.jsonl, config.yaml and hw.json. It holds a summary table, SVG plots
 * (loss, lr, grad norm, tokens/s, MFU, memory against the limit, the step-time
 * split) with markers for alerts and rollbacks, the alerts and rollbacks as
 * tables, the config as text and the hardware profile; a GPU run whose GPU
 * was watched adds a GPU section (a summary and plots of utilisation, memory
 * and power from its "device" lines), which a CPU run's page has not at all.
 * The page loads nothing from outside and runs no script. Keys an older run
 * did not write leave their plot out with a note. Long runs are reduced to a
 * bounded number of points per series, so the file stays small. Every
 * function is reentrant (no shared state); one ct_strbuf or ct_report_data
 * is not to be shared between threads while it is being written.
 * Leaves out: live updates, interactivity, comparing runs.
 */
#ifndef CT_TOOLS_REPORT_H
#define CT_TOOLS_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctrain/config.h"
#include "ctrain/core.h"
#include "core/strbuf.h"

/* The train-line keys the report reads (metrics.jsonl schema, src/io/metrics.h).
 * Serialized as names only, so the order may change. */
typedef enum ct_report_key {
    CT_REPORT_KEY_LOSS = 0,
    CT_REPORT_KEY_LR = 1,
    CT_REPORT_KEY_GRAD_NORM = 2,
    CT_REPORT_KEY_TOKENS_PER_S = 3,
    CT_REPORT_KEY_STEP_MS = 4,
    CT_REPORT_KEY_SKIPPED = 5,
    CT_REPORT_KEY_SPIKE = 6,
    CT_REPORT_KEY_ROLLBACK = 7,
    CT_REPORT_KEY_ROLLBACK_TO = 8,
    CT_REPORT_KEY_DATA_WAIT_MS = 9,
    CT_REPORT_KEY_MEM_BYTES = 10,
    CT_REPORT_KEY_T_DATA_MS = 11,
    CT_REPORT_KEY_T_FWD_MS = 12,
    CT_REPORT_KEY_T_BWD_MS = 13,
    CT_REPORT_KEY_T_OPT_MS = 14,
    CT_REPORT_KEY_T_COMM_MS = 15,
    CT_REPORT_KEY_GFLOPS = 16,
    CT_REPORT_KEY_MFU = 17,
    CT_REPORT_KEY_MFU_THEORY = 18,
    CT_REPORT_KEY_RSS_BYTES = 19,
    CT_REPORT_KEY_RSS_PEAK_BYTES = 20,
    CT_REPORT_KEY_ARENA_BYTES = 21,
    CT_REPORT_KEY_MEM_LIMIT_BYTES = 22,
    CT_REPORT_KEY_PLAN_BYTES = 23,
    CT_REPORT_KEY_MAJOR_FAULTS = 24,
    CT_REPORT_KEY_EPOCH = 25,
    CT_REPORT_KEY_COUNTED_TOKENS = 26,
    CT_REPORT_KEY_COUNT
} ct_report_key;

/* The JSON name of a key ("grad_norm"). Never NULL for a valid key. */
const char *ct_report_key_name(ct_report_key k);

typedef struct ct_report_row {
    int64_t step;
    int64_t line;                  /* 1-based line in metrics.jsonl */
    double v[CT_REPORT_KEY_COUNT]; /* NaN: absent or null */
} ct_report_row;

typedef struct ct_report_val {
    int64_t step;
    int64_t line;
    double loss;      /* NaN: null */
    double best_loss; /* NaN: absent or null */
} ct_report_val;

typedef struct ct_report_alert {
    int64_t step;
    int64_t line;
    char level[16];  /* "warning" | "critical" | what the file says, cut to fit */
    char kind[32];   /* "memory" | "throughput" | "loss" | "data_wait" | ... */
    double value;    /* NaN: absent */
    double threshold;
    char *message;   /* owned; "" when absent */
} ct_report_alert;

typedef struct ct_report_rollback {
    int64_t step; /* the step whose line said rollback=1 */
    int64_t to;   /* rollback_to; -1 when the line did not say */
    int64_t line;
} ct_report_rollback;

/* The counters of "remote" lines the report sums. */
enum {
    CT_REPORT_REMOTE_BYTES, CT_REPORT_REMOTE_REQUESTS, CT_REPORT_REMOTE_RETRIES,
    CT_REPORT_REMOTE_FAILURES, CT_REPORT_REMOTE_BAD_BLOCKS, CT_REPORT_REMOTE_DISK_HITS,
    CT_REPORT_REMOTE_BLOCKS, CT_REPORT_REMOTE_WAIT_MS
};

typedef struct ct_report_resume {
    int64_t step; /* the step the run continued after (its checkpoint's) */
    int64_t line;
} ct_report_resume;

/* The GPU readings of "device" lines (a run.device=cuda run whose GPU NVML
 * watched), in metrics.jsonl's names gpu_util, gpu_mem_util, ... */
typedef enum ct_report_gpu_key {
    CT_REPORT_GPU_UTIL = 0,          /* gpu_util, % */
    CT_REPORT_GPU_MEM_UTIL = 1,      /* gpu_mem_util, % */
    CT_REPORT_GPU_MEM_USED_MIB = 2,  /* gpu_mem_used_mib */
    CT_REPORT_GPU_MEM_TOTAL_MIB = 3, /* gpu_mem_total_mib */
    CT_REPORT_GPU_POWER_W = 4,       /* gpu_power_w */
    CT_REPORT_GPU_TEMP_C = 5,        /* gpu_temp_c */
    CT_REPORT_GPU_SM_CLOCK_MHZ = 6,  /* gpu_sm_clock_mhz */
    CT_REPORT_GPU_MEM_CLOCK_MHZ = 7, /* gpu_mem_clock_mhz */
    CT_REPORT_GPU_COUNT
} ct_report_gpu_key;

typedef struct ct_report_gpu_row {
    int64_t step;
    int64_t line;
    double v[CT_REPORT_GPU_COUNT]; /* NaN: absent or null (not reported by the board) */
} ct_report_gpu_row;

/* Everything read from a run directory. Train and val lines are sorted by step
 * with one entry per step: when a resumed run writes a step again, the later
 * line wins. Rollbacks and alerts keep every line, in file order. */
typedef struct ct_report_data {
    char *run_dir;                       /* owned copy */
    ct_report_row *train;                /* [n_train] */
    size_t n_train;
    ct_report_val *val;                  /* [n_val] */
    size_t n_val;
    ct_report_alert *alerts;             /* [n_alerts] */
    size_t n_alerts;
    ct_report_rollback *rollbacks;       /* [n_rollbacks] */
    size_t n_rollbacks;
    ct_report_resume *resumes;           /* [n_resumes]: "resume" lines, in file order */
    size_t n_resumes;
    /* "remote" lines (remote training data): counters summed over the
     * processes of the run (each restarts them), in CT_REPORT_REMOTE_* order */
    bool has_remote;
    double remote[8], remote_last[8];
    bool has_key[CT_REPORT_KEY_COUNT];   /* some train line holds the key (even as null) */
    bool has_device;                     /* some "device" line: the run used a GPU */
    ct_report_gpu_row *gpu;              /* [n_gpu] device lines with a GPU reading, by step */
    size_t n_gpu;
    int64_t n_lines;                     /* lines read, the blank ones included */
    int64_t n_replaced;                  /* train and val lines a later line of the same step replaced */
    int64_t torn_line;                   /* the unparseable last line that was skipped; 0: none */
    char *config_text;                   /* config.yaml, owned; NULL when absent */
    size_t config_len;
    char *hw_text;                       /* hw.json, owned; NULL when absent */
    /* what was trained, from config.yaml (and the adapter_config.json the run
     * wrote); has_setup false when config.yaml is absent or does not load */
    bool has_setup;
    char setup_model[CT_PATH_MAX + 32];  /* "model.init_from = DIR" or "from scratch: ..." */
    bool lora;                           /* a LoRA run: the fields below hold its settings */
    int64_t lora_r;
    double lora_alpha, lora_dropout;
    char lora_targets[CT_PATH_MAX];      /* as the run gave them; "" = the default */
    char lora_from[CT_PATH_MAX];         /* lora.init_from; "" = none */
    char lora_base_dtype[CT_NAME_MAX];   /* storage of the frozen base */
} ct_report_data;

/* Read run_dir/metrics.jsonl (required), run_dir/config.yaml and
 * run_dir/hw.json (both optional). Returns owned *out; release with
 * ct_report_free. An unparseable LAST line (what a crash mid-write leaves) is
 * skipped with a warning through ct_log; any other bad line is an error. A
 * malformed hw.json (not one JSON object) is a warning naming it, and the page
 * leaves the hardware out.
 * Errors: CT_ERR_IO (run_dir is not a directory, a file cannot be read),
 * CT_ERR_FORMAT (a line is not a JSON object with a numeric "step" and a
 * string "split", a known key has the wrong type; names the file and line;
 * or the file holds no train line), CT_ERR_OOM. */
ct_status ct_report_load(ct_report_data **out, const char *run_dir);
void ct_report_free(ct_report_data *d); /* NULL is fine */

/* What the GPU section says of the readings (NaN: no finite value). */
typedef struct ct_report_gpu_stats {
    size_t n_util;           /* readings with a finite gpu_util */
    double util_median;      /* % */
    size_t n_util_low;       /* of them, below CT_GPU_UTIL_THRESHOLD_PCT (90%) */
    double mem_peak_mib;     /* largest gpu_mem_used_mib */
    int64_t mem_peak_step;
    double mem_total_mib;    /* largest gpu_mem_total_mib */
    double power_median_w, power_max_w;
    double temp_max_c;
    double sm_clock_median_mhz;
    size_t n_util_alerts;    /* alert lines of kind gpu_util */
} ct_report_gpu_stats;

/* Summarise d's GPU readings into *out; nulls are skipped, never counted as
 * 0. Borrows d. Pure. */
void ct_report_gpu_summary(const ct_report_data *d, ct_report_gpu_stats *out);

/* Render the report as HTML. Borrows d. Returns owned *html (NUL-terminated;
 * release with free) and its length in *len. max_points bounds the points
 * drawn per series (0: the default, 1000; at least 8 is used).
 * Errors: CT_ERR_OOM. */
ct_status ct_report_render(const ct_report_data *d, size_t max_points, char **html, size_t *len);

/* Load run_dir and write the report atomically to out_path (NULL:
 * run_dir/report.html). The path written goes to written (NUL-terminated,
 * cut to cap). Nothing is written on error. Errors: those of ct_report_load
 * and ct_report_render, CT_ERR_IO (the write). */
ct_status ct_report_write(const char *run_dir, const char *out_path, char *written, size_t cap);

/* ------------------------------------------------------------ building blocks
 * Exposed for the tests; the renderer is made of them. */

/* Append text with &, <, >, " and ' as character references and NUL bytes
 * dropped, so it is safe in element content and quoted attributes. */
void ct_report_escape(ct_strbuf *b, const char *s, size_t n);

/* Reduce n points (xs ascending) to at most max_out (>= 2) for drawing:
 * n <= max_out copies them; otherwise max_out/2 buckets of consecutive points
 * each keep their smallest and largest finite y in step order (so spikes
 * survive), and a bucket with no finite y keeps one NaN point (a gap).
 * Writes ox/oy (room for max_out each; borrows the inputs) and returns the
 * number of points written. */
size_t ct_report_downsample(double *ox, double *oy, size_t max_out, const double *xs,
                            const double *ys, size_t n);
/* The same buckets as ct_report_downsample with nb = min(n, max_buckets)
 * buckets of consecutive points, keeping the mean x and the mean of the finite
 * y of each (NaN when none): what a stacked plot needs, because every layer
 * must share its x. Returns the number of points written (nb). */
size_t ct_report_downsample_mean(double *ox, double *oy, size_t max_buckets, const double *xs,
                                 const double *ys, size_t n);

/* A plot's mapping from data to pixels: x in [x0, x1] to [px, px + pw],
 * y in [y0, y1] to [py + ph, py] (up is larger). */
typedef struct ct_report_frame {
    double x0, x1, y0, y1;
    double px, py, pw, ph;
} ct_report_frame;

/* Append SVG path data ("M x y L x y ...", one decimal) for the points; a
 * non-finite y ends a run of line segments, and a point alone between gaps
 * becomes a zero-length segment (a dot with round caps). Borrows the inputs. */
void ct_report_svg_path(ct_strbuf *b, const ct_report_frame *f, const double *xs,
                        const double *ys, size_t n);

/* Round tick values for an axis over [lo, hi]: a step of 1, 2 or 5 times a
 * power of ten giving about `target` ticks, all inside [lo, hi]. Writes up to
 * max ticks and returns how many. lo == hi gives that one value. */
int ct_report_ticks(double lo, double hi, int target, double *ticks, int max);

#endif
