/*
 * Run configuration: every key `ctrain train` accepts, as one plain struct.
 * Filled from defaults, then a YAML file, then `key=value` overrides (dotted
 * paths). Each key is described once in a table (src/io/config.c) that drives
 * parsing, range checks, --print-config and the saved run.dir/config.yaml.
 */
#ifndef CT_CONFIG_H
#define CT_CONFIG_H

#include "ctrain/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CT_PATH_MAX 1024
#define CT_NAME_MAX 64

typedef struct ct_config {
    struct {
        char init_from[CT_PATH_MAX]; /* HF directory or ctrain run dir; "" = from scratch */
        char arch[CT_NAME_MAX];      /* gpt2 | llama | mistral | qwen2 | qwen3 */
        char preset[CT_NAME_MAX];    /* gpt2, gpt2-medium, gpt2-tiny, ... ; "" = use sizes */
        int64_t n_layer, n_head, n_kv_head, n_embd, n_ffn, vocab_size, n_ctx; /* 0 = preset's */
        int64_t head_dim; /* 0 = preset's, else n_embd / n_head */
        double dropout; /* residual, embedding and attention dropout; -1: config.json's (0 from scratch) */
    } model;
    struct {
        char train[CT_PATH_MAX]; /* shard file, glob or directory */
        char val[CT_PATH_MAX];
        char tokenizer[CT_PATH_MAX]; /* the model's tokenizer when its directory's files do not
                                      * load or it has none; "" = the model's or the shards' */
        bool shuffle;
        bool packing;         /* instruction data: several examples per row (false: one, padded) */
        bool group_by_length; /* instruction data: batch examples of similar length */
        int64_t prefetch; /* batches read ahead by a background thread; 0: none */
        /* remote data (http(s)://, s3:// in data.train / data.val) */
        char cache_dir[CT_PATH_MAX];   /* "" = ~/.cache/ctrain/shards */
        char cache_limit[CT_NAME_MAX]; /* bytes with KB/MB/GB/TB */
        double cache_ttl;              /* seconds a cached block stays valid; 0 = forever */
        char readahead[CT_NAME_MAX];   /* bytes fetched ahead of the reader */
        int64_t retries;               /* attempts after the first, per request */
        double timeout_s;              /* connect / stalled-transfer timeout */
        bool offline;                  /* the disk cache only, never the network */
    } data;
    struct {
        int64_t batch_size; /* 0: auto (the planner picks it under run.memory_limit) */
        int64_t effective_batch; /* with batch_size auto: sequences per step (0: unset) */
        int64_t seq_len, grad_accum, steps, seed;
        int64_t epochs;           /* passes over the training data; 0: train.steps decides */
        bool load_best_at_end;    /* end with the weights of the best validation (run.keep_best) */
        char resume[CT_PATH_MAX]; /* auto | never | PATH */
        int64_t eval_every;       /* steps between validation passes; 0 = end only */
        int64_t eval_batches;     /* micro-batches per validation pass; 0: the whole split */
        int64_t eval_tokens;      /* with eval_batches 0: tokens per pass at most; 0: no cap */
        int64_t early_stop_patience; /* evaluations without improvement; 0 = off */
        char recompute[CT_NAME_MAX];        /* none | light | full | auto */
        int64_t recompute_layers;           /* full: the first N blocks only; 0: all */
        char activation_dtype[CT_NAME_MAX]; /* fp32 | bf16: storage of kept activations */
        char precision[CT_NAME_MAX];        /* fp32 | bf16 | fp16: matmul precision (autocast) */
        double loss_scale;         /* fp16: 0 = dynamic, else a static loss scale (>= 1) */
        double loss_scale_init;    /* fp16, dynamic: the first scale (65536) */
        int64_t loss_scale_window; /* fp16, dynamic: good steps before the scale doubles */
    } train;
    struct {
        double lr, beta1, beta2, eps, weight_decay, grad_clip;
    } optim;
    struct {
        char name[CT_NAME_MAX]; /* constant | cosine | linear | onecycle */
        int64_t warmup_steps;
        double min_lr, pct_start, div_factor, final_div_factor;
        char anneal[CT_NAME_MAX]; /* cos | linear */
    } schedule;
    struct {
        char dir[CT_PATH_MAX];
        int64_t checkpoint_every, keep_last, threads, log_every;
        bool keep_best;           /* also keep the checkpoint of the best validation loss */
        bool checkpoint_compress; /* zstd the checkpoints' training-state blobs */
        bool overwrite;           /* resume=never may delete an earlier run's results */
        char memory_limit[CT_NAME_MAX]; /* bytes with KB/MB/GB suffix, or N% */
        char attention_tiles[CT_NAME_MAX]; /* "QxK" query rows x keys per tile, or auto */
        char gemm[CT_NAME_MAX];            /* auto | onednn | openblas */
        char device[CT_NAME_MAX];          /* cpu | cuda | cuda:N | ref | sim */
        char trace[CT_NAME_MAX];           /* "steps:A-B" traced into trace.json, or "" */
    } run;
    struct {
        int64_t window;        /* good steps the z-scores look back on */
        double zscore;         /* spike threshold; 0 = off */
        int64_t min_steps;     /* good steps before spikes are judged */
        int64_t max_bad;       /* consecutive bad steps before a rollback; 0 = never */
        double lr_factor;      /* LR multiplier per rollback (cumulative) */
        int64_t max_rollbacks; /* rollbacks before the run fails; 0 = unlimited */
    } guard;
    struct {
        /* warning and critical thresholds of the training monitor (perf/monitor.h);
         * a threshold of 0 is off unless said otherwise */
        double memory_warning, memory_critical; /* RSS as a fraction of run.memory_limit */
        double throughput_warning, throughput_critical; /* tokens/s below this fraction of
                                                         * the expected rate */
        double loss_warning, loss_critical; /* loss above; both 0: 1.25 and 2 x ln(vocab) */
        double data_wait_warning, data_wait_critical; /* data wait above this share of the
                                                       * step time */
        double data_wait_min_ms;      /* waits shorter than this are never judged */
        int64_t warmup_steps;         /* first steps of a run not judged on time */
        int64_t repeat_every;         /* steps between repeats of a standing alert; 0: never */
        double gemm_peak_gflops;      /* MFU's peak; 0: measured at the start of the run */
        double expected_mfu;          /* the planner's expected share of the GEMM peak */
        double expected_tokens_per_s; /* overrides the derived expectation; 0: derived */
    } alerts;
    struct {
        int64_t r;
        double alpha, dropout;
        char targets[CT_PATH_MAX];
        char init_from[CT_PATH_MAX];
        char base_dtype[CT_NAME_MAX]; /* fp32 | bf16: storage of the frozen base */
        char modules_to_save[CT_NAME_MAX]; /* "embed_tokens,lm_head": trained in full */
    } lora;
    struct {
        int64_t zero;      /* 1: ZeRO-1, each rank keeps the AdamW moments of its shard */
        int64_t world;     /* ranks to plan for (ctrain plan); 0: the launcher's */
        double timeout_s;  /* longest wait in one collective; 0: forever */
        double bucket_mb;  /* MiB of gradients per allreduce */
        bool overlap;      /* start allreduces during the backward pass */
    } dist;
    struct {
        int64_t dump_grads_step; /* write run.dir/grads_stepK.safetensors; 0 = off */
        int64_t dump_dropout;    /* write run.dir/dropout_stepK.safetensors (the masks); 0 = off */
        int64_t nan_step;        /* step whose gradient is made NaN; 0 = off */
        int64_t spike_step;      /* step whose loss and gradient are scaled; 0 = off */
        double spike_factor;     /* the scale of spike_step */
        char bad_steps[CT_NAME_MAX]; /* "A-B": steps A..B get a NaN gradient; "" = off */
        int64_t sleep_ms;        /* pause after every step (tests of kills and signals) */
        int64_t rank;            /* the rank kill_step and hang_step act on */
        int64_t kill_step;       /* after step K, rank debug.rank kills itself (SIGKILL) */
        int64_t hang_step;       /* after step K, rank debug.rank stops answering */
        double tune_noise;       /* ctrain tune: runs slowed by 1 + x*U (tests); 0 = off */
        char tune_fake[CT_NAME_MAX]; /* ctrain tune: synthetic run times (tests); "" = off */
        bool emulate_bf16;       /* train.precision=bf16 on a CPU without bf16 instructions */
        bool fp32_logits;        /* train.precision=bf16: the head's logits fp32 (the bf16 head) */
        char sim_device_memory[CT_NAME_MAX]; /* run.device=sim: its device memory, bytes with
                                              * KB/MB/GB; "": no limit */
    } debug;
    struct {
        /* a tuned profile (written by `ctrain tune`, read by train and plan) */
        char signature[CT_NAME_MAX]; /* machine signature it was measured on; "" = none */
        char level[CT_NAME_MAX];     /* basic | advanced | ultra | custom */
        char settings[CT_PATH_MAX];  /* "key=value ..." applied on a matching machine */
        double tokens_per_s;         /* measured with the settings */
        double mfu;                  /* fraction 0..1 of the measured GEMM peak */
        char date[CT_NAME_MAX];      /* UTC time of the measurement */
        /* the search of `ctrain tune` */
        char search[CT_NAME_MAX];           /* dimensions: threads,batch,recompute,dtype,tiles */
        char tile_candidates[CT_PATH_MAX];  /* "QxK,QxK,...": attention tiles tried */
        int64_t trial_steps;                /* timed steps per trial, after one warm-up */
        double budget_s;                    /* seconds the whole search may take */
    } tune;
} ct_config;

/* Every key at its default value. */
CT_API void ct_config_default(ct_config *cfg);

/* Apply a YAML file (nested mappings; keys by dotted path). Errors name the
 * file, the line and the key: CT_ERR_IO (missing file), CT_ERR_FORMAT (bad YAML),
 * CT_ERR_ARG (unknown key, with the closest known key suggested; wrong type;
 * out of range). */
CT_API ct_status ct_config_load_yaml(ct_config *cfg, const char *path);

/* Apply one `dotted.key=value` override (source names where it came from in
 * errors, e.g. "command line"). */
CT_API ct_status ct_config_set(ct_config *cfg, const char *key, const char *value,
                               const char *source);
/* Apply "key=value" text, splitting at the first '='. */
CT_API ct_status ct_config_apply_override(ct_config *cfg, const char *kv);

/* Cross-key checks run once everything is applied (e.g. warmup <= steps). */
/* run.memory_limit's text in bytes: "N%" of `available`, "N" bytes, or N with
 * a KB/MB/GB/TB suffix (powers of 1024). CT_ERR_ARG naming the key. */
CT_API ct_status ct_config_memory_limit(const char *spec, size_t available, size_t *out);
/* A byte count with an optional KB/MB/GB/TB suffix (powers of 1024), e.g.
 * data.cache_limit; key names the setting in the error (CT_ERR_ARG). */
CT_API ct_status ct_config_bytes(const char *key, const char *spec, int64_t *out);
CT_API ct_status ct_config_validate(const ct_config *cfg);

/* run.attention_tiles's text: "auto" gives 0 x 0 (the kernel's built-in
 * tiles), "QxK" its query rows (1..128) and keys (1..256) per tile. Borrows
 * spec. CT_ERR_ARG naming the key and the expected form. */
CT_API ct_status ct_config_attention_tiles(const char *spec, int *bq, int *bk);
/* run.trace's text "steps:A-B" or "steps:A" (1 <= A <= B) as the first and
 * last traced step. CT_ERR_ARG naming the key. */
CT_API ct_status ct_config_trace_steps(const char *spec, int64_t *first, int64_t *last);
/* run.device's text as a backend kind (ct_backend_kind) and device index:
 * cpu, ref, sim; cuda and cuda:N are refused (CT_ERR_ARG, "no CUDA device:
 * ...") by a build without the CUDA backend. */
CT_API ct_status ct_config_device(const char *spec, int *kind, int *index);

/* Write the configuration as YAML with every key. Returns owned text; free().
 * NULL on out of memory. */
CT_API char *ct_config_to_yaml(const ct_config *cfg);

/* True when key names a known configuration key. */
CT_API bool ct_config_has_key(const char *key);

#ifdef __cplusplus
}
#endif
#endif
