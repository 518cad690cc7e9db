/*
 * Configuration keys, one table: path, type, where it lives in ct_config, range
 * and allowed words, with the defaults, key lookup and "did you mean", value
 * parsing (ct_config_set, key=value overrides) and the validators. The YAML
 * reader, --print-config and the saved config.yaml walk the same table, so a
 * key is added in exactly one place. Leaves out: reading and writing YAML
 * (config_yaml.c, through config_int.h).
 */
#include "ctrain/config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/config_int.h"

#define OFF(field) offsetof(ct_config, field)
#define SZ(field) sizeof(((ct_config *)0)->field)
#define I(p, f, lo, hi, h) {p, KEY_INT, OFF(f), SZ(f), lo, hi, NULL, h}
#define F(p, f, lo, hi, h) {p, KEY_FLOAT, OFF(f), SZ(f), lo, hi, NULL, h}
#define B(p, f, h) {p, KEY_BOOL, OFF(f), SZ(f), 0, 1, NULL, h}
#define S(p, f, h) {p, KEY_STRING, OFF(f), SZ(f), 0, 0, NULL, h}
#define E(p, f, w, h) {p, KEY_ENUM, OFF(f), SZ(f), 0, 0, w, h}
#define BIG 9.0e15

const key_def config_keys[] = {
    S("model.init_from", model.init_from, "HF model directory or ctrain run directory"),
    E("model.arch", model.arch, "gpt2|llama|mistral|qwen2|qwen3|gemma3_text", "family when building from scratch (qwen2: q, k, v biases; qwen3: q/k norms; gemma3_text: Gemma 3's switches, no sliding window)"),
    S("model.preset", model.preset, "size preset (gpt2, gpt2-medium, gpt2-large, gpt2-xl, gpt2-demo, gpt2-tiny, tinyllama-1.1b, llama-demo, llama-tiny, llama3.2-1b, smollm2-135m, smollm2-360m, qwen2.5-0.5b, qwen2.5-1.5b, qwen3-0.6b, qwen3-1.7b, mistral-7b, llama3-tiny, mistral-tiny, qwen2-tiny, qwen3-tiny)"),
    I("model.n_layer", model.n_layer, 0, 4096, "layers (0: from preset)"),
    I("model.n_head", model.n_head, 0, 4096, "attention heads (0: from preset)"),
    I("model.n_kv_head", model.n_kv_head, 0, 4096, "key/value heads (0: = n_head)"),
    I("model.n_embd", model.n_embd, 0, 1 << 20, "channels (0: from preset)"),
    I("model.n_ffn", model.n_ffn, 0, 1 << 22, "MLP hidden size (0: 4*n_embd)"),
    I("model.vocab_size", model.vocab_size, 0, 1 << 24, "vocabulary size (0: from preset)"),
    I("model.n_ctx", model.n_ctx, 0, 1 << 20, "context length (0: from preset)"),
    I("model.head_dim", model.head_dim, 0, 1 << 20, "attention head size (0: the preset's, else n_embd / n_head)"),
    F("model.dropout", model.dropout, -1, 0.999,
      "training dropout where HF's modules apply it: GPT-2's embd_pdrop, resid_pdrop and "
      "attn_pdrop all set to p, LLaMA's attention_dropout (-1: config.json's, where GPT-2 "
      "absent means HF's 0.1; 0 from scratch)"),
    S("data.train", data.train, "training shards: file, glob or directory"),
    S("data.val", data.val, "validation shards: file, glob or directory"),
    S("data.tokenizer", data.tokenizer,
      "the model's tokenizer (a directory or tokenizer file) when the model directory's own "
      "files do not load or it has none; checked against the shards' and saved in run.dir"),
    B("data.shuffle", data.shuffle, "shuffle windows (false: sequential llm.c order)"),
    B("data.packing", data.packing,
      "instruction data: pack several examples into each row, attention kept inside each "
      "(false: one example per row, padded)"),
    B("data.group_by_length", data.group_by_length,
      "instruction data: batch examples of similar length together (less padding)"),
    I("data.prefetch", data.prefetch, 0, 4096,
      "batches the background thread reads ahead (0: read on the training thread)"),
    S("data.cache_dir", data.cache_dir,
      "remote data: the disk cache of shard blocks (empty: ~/.cache/ctrain/shards)"),
    S("data.cache_limit", data.cache_limit,
      "remote data: size of the disk cache, bytes (KB/MB/GB/TB); least recently used "
      "blocks go first"),
    F("data.cache_ttl", data.cache_ttl, 0, 1e12,
      "remote data: seconds a cached block stays valid (0: forever)"),
    S("data.readahead", data.readahead,
      "remote data: bytes of shard blocks fetched ahead of the reader (KB/MB/GB)"),
    I("data.retries", data.retries, 0, 1000,
      "remote data: retries of a failed request (reset, timeout, 5xx), with backoff"),
    F("data.timeout_s", data.timeout_s, 0.1, 86400,
      "remote data: seconds to connect, and a stalled transfer's limit"),
    B("data.offline", data.offline,
      "remote data: read the disk cache only (its copy of the manifest and the blocks), never "
      "the network"),
    {"train.batch_size", KEY_INT, OFF(train.batch_size), SZ(train.batch_size), 1, 1 << 20, "auto",
     "micro-batch size B, or auto: the largest that fits run.memory_limit"},
    I("train.effective_batch", train.effective_batch, 0, 1 << 30,
      "sequences per optimizer step when batch_size is auto (0: grad_accum x 4, the default "
      "micro-batch; auto never changes it)"),
    I("train.seq_len", train.seq_len, 1, 1 << 20, "sequence length T"),
    I("train.grad_accum", train.grad_accum, 1, 1 << 20, "micro-batches per optimizer step"),
    I("train.steps", train.steps, 0, BIG, "optimizer steps"),
    I("train.epochs", train.epochs, 0, 1 << 20,
      "passes over the training data; sets train.steps when > 0 (0: train.steps decides)"),
    B("train.load_best_at_end", train.load_best_at_end,
      "end with the weights of the lowest validation loss (needs run.keep_best)"),
    I("train.seed", train.seed, 0, BIG, "seed for initialisation and shuffling"),
    S("train.resume", train.resume, "auto | never | PATH"),
    I("train.eval_every", train.eval_every, 0, BIG, "steps between validations (0: at end)"),
    I("train.eval_batches", train.eval_batches, 0, BIG,
      "micro-batches per validation (0: the whole val split, up to train.eval_tokens)"),
    I("train.eval_tokens", train.eval_tokens, 0, BIG,
      "with eval_batches 0: the most tokens one validation scores (0: no cap)"),
    I("train.early_stop_patience", train.early_stop_patience, 0, BIG,
      "stop after this many validations without a better loss (0: off)"),
    E("train.recompute", train.recompute, "none|light|full|auto",
      "activations re-derived in backward: none, light (norms, GELU), full (whole blocks), "
      "auto (the lightest that fits run.memory_limit)"),
    I("train.recompute_layers", train.recompute_layers, 0, 1 << 20,
      "train.recompute=full: re-run only the first N blocks, the others keep their "
      "activations (0: every block)"),
    E("train.activation_dtype", train.activation_dtype, "fp32|bf16",
      "storage of the activations kept for backward (math stays fp32)"),
    E("train.precision", train.precision, "fp32|bf16|fp16",
      "matmul precision: bf16 = mixed as torch.autocast (bf16 GEMM inputs, fp32 sums, "
      "fp32 master weights; faster only on CPUs with fast bf16: AMX, Zen 4/5, and on GPUs "
      "of compute capability 8.0+); fp16 = the same with fp16 inputs and dynamic loss "
      "scaling, only on GPUs without bf16 (compute capability < 8.0: T4, V100)"),
    {"train.loss_scale", KEY_FLOAT, OFF(train.loss_scale), SZ(train.loss_scale), 1, 1e30,
     "dynamic",
     "train.precision=fp16: the loss scale, dynamic (as torch's GradScaler: halved and the "
     "update skipped on overflow, doubled after train.loss_scale_window good steps) or a fixed "
     "number >= 1 (overflowing steps are skipped); ignored by fp32 and bf16"},
    F("train.loss_scale_init", train.loss_scale_init, 1, 1e30,
      "train.precision=fp16, dynamic loss scale: its first value (GradScaler's init_scale)"),
    I("train.loss_scale_window", train.loss_scale_window, 1, BIG,
      "train.precision=fp16, dynamic loss scale: good steps in a row before it doubles "
      "(GradScaler's growth_interval)"),
    F("optim.lr", optim.lr, 0, 10, "peak learning rate"),
    F("optim.beta1", optim.beta1, 0, 0.999999, "AdamW beta1"),
    F("optim.beta2", optim.beta2, 0, 0.999999999, "AdamW beta2"),
    F("optim.eps", optim.eps, 0, 1, "AdamW epsilon"),
    F("optim.weight_decay", optim.weight_decay, 0, 10, "decoupled weight decay (matrices)"),
    F("optim.grad_clip", optim.grad_clip, 0, 1e9, "max global grad norm (0: off)"),
    E("schedule.name", schedule.name, "constant|cosine|linear|onecycle", "LR schedule"),
    I("schedule.warmup_steps", schedule.warmup_steps, 0, BIG, "linear warmup steps"),
    F("schedule.min_lr", schedule.min_lr, 0, 10, "floor of cosine/linear decay"),
    F("schedule.pct_start", schedule.pct_start, 0, 1, "onecycle: share of steps rising"),
    F("schedule.div_factor", schedule.div_factor, 1e-12, 1e12, "onecycle: initial = lr/div"),
    F("schedule.final_div_factor", schedule.final_div_factor, 1e-12, 1e12,
      "onecycle: final = initial/final_div"),
    E("schedule.anneal", schedule.anneal, "cos|linear", "onecycle annealing"),
    S("run.dir", run.dir, "output directory"),
    I("run.checkpoint_every", run.checkpoint_every, 0, BIG, "steps between checkpoints"),
    I("run.keep_last", run.keep_last, 0, 1 << 20, "checkpoints to keep (0: all)"),
    B("run.keep_best", run.keep_best,
      "keep the checkpoint of the lowest validation loss as well as the last ones"),
    B("run.checkpoint_compress", run.checkpoint_compress,
      "zstd the optimizer and state files of checkpoints"),
    B("run.overwrite", run.overwrite,
      "with train.resume=never: delete an earlier run's results in run.dir and start over"),
    I("run.threads", run.threads, 0, 4096, "threads (0: all cores)"),
    I("run.log_every", run.log_every, 1, BIG, "steps between progress lines"),
    S("run.memory_limit", run.memory_limit, "bytes (KB/MB/GB) or N% of RAM"),
    E("run.gemm", run.gemm, "auto|onednn|openblas",
      "GEMM library: auto (default: oneDNN where OpenBLAS's kernels are narrower than "
      "the cores, as on a CPU OpenBLAS cannot name, else OpenBLAS; `ctrain hw` says which "
      "and why), onednn, openblas; a bf16 run on a CPU with bf16 instructions runs oneDNN "
      "whatever this says; the memory plan counts the one that runs"),
    S("run.attention_tiles", run.attention_tiles,
      "attention tile: QxK query rows (1..128) x keys (1..256), or auto (64x128)"),
    S("run.device", run.device, "where tensors live and kernels run: cpu | cuda | cuda:N "
      "(ref and sim: the test backends)"),
    S("run.trace", run.trace, "steps to trace into run.dir/trace.json (Chrome trace "
      "format), e.g. steps:5-7 or steps:3; empty: off"),
    I("guard.window", guard.window, 1, 1024, "good steps the spike z-scores look back on"),
    F("guard.zscore", guard.zscore, 0, 1e6, "loss / grad-norm spike threshold (0: off)"),
    I("guard.min_steps", guard.min_steps, 2, 1024, "good steps before spikes are judged"),
    I("guard.max_bad", guard.max_bad, 0, 1 << 20,
      "consecutive bad steps that trigger a rollback (0: never)"),
    F("guard.lr_factor", guard.lr_factor, 1e-6, 1, "LR multiplier at each rollback"),
    I("guard.max_rollbacks", guard.max_rollbacks, 0, 1 << 20,
      "rollbacks before the run fails (0: unlimited)"),
    F("alerts.memory_warning", alerts.memory_warning, 0, 100,
      "warn when RSS exceeds this fraction of run.memory_limit (0: off)"),
    F("alerts.memory_critical", alerts.memory_critical, 0, 100,
      "critical alert when RSS exceeds this fraction of run.memory_limit (0: off)"),
    F("alerts.throughput_warning", alerts.throughput_warning, 0, 1,
      "warn when tokens/s falls below this fraction of the expected rate (0: off)"),
    F("alerts.throughput_critical", alerts.throughput_critical, 0, 1,
      "critical alert when tokens/s falls below this fraction of the expected rate (0: off)"),
    F("alerts.loss_warning", alerts.loss_warning, 0, 1e9,
      "warn when the step's loss exceeds this (both loss keys 0: 1.25 x ln(vocab_size))"),
    F("alerts.loss_critical", alerts.loss_critical, 0, 1e9,
      "critical alert when the loss exceeds this (both loss keys 0: 2 x ln(vocab_size))"),
    F("alerts.data_wait_warning", alerts.data_wait_warning, 0, 1,
      "warn when waiting for data takes more than this share of a step (0: off)"),
    F("alerts.data_wait_critical", alerts.data_wait_critical, 0, 1,
      "critical alert when waiting for data takes more than this share of a step (0: off)"),
    F("alerts.data_wait_min_ms", alerts.data_wait_min_ms, 0, 1e9,
      "data waits shorter than this (ms per step) raise no alert, whatever their share"),
    I("alerts.warmup_steps", alerts.warmup_steps, 0, BIG,
      "first steps of a run whose throughput and data wait are not judged"),
    I("alerts.repeat_every", alerts.repeat_every, 0, BIG,
      "steps between repeats of an alert that stays at its level (0: only changes)"),
    F("alerts.gemm_peak_gflops", alerts.gemm_peak_gflops, 0, 1e9,
      "GEMM peak for MFU in GFLOP/s (0: a short sgemm benchmark at the start)"),
    F("alerts.expected_mfu", alerts.expected_mfu, 1e-6, 1,
      "expected share of the GEMM peak a step reaches (sets the expected tokens/s)"),
    F("alerts.expected_tokens_per_s", alerts.expected_tokens_per_s, 0, 1e15,
      "expected tokens/s for the throughput alerts (0: from the GEMM peak and expected_mfu)"),
    I("lora.r", lora.r, 0, 1 << 16, "LoRA rank (0: off)"),
    F("lora.alpha", lora.alpha, 0, 1e9, "LoRA alpha"),
    F("lora.dropout", lora.dropout, 0, 1, "LoRA dropout"),
    S("lora.targets", lora.targets, "modules to adapt, comma-separated"),
    S("lora.init_from", lora.init_from, "PEFT adapter directory"),
    S("lora.modules_to_save", lora.modules_to_save, "modules trained in full beside the adapters, as PEFT's modules_to_save: embed_tokens, lm_head (comma-separated)"),
    E("lora.base_dtype", lora.base_dtype, "auto|fp32|bf16",
      "storage of the frozen base weights (bf16 halves them; auto: bf16 under "
      "train.precision=bf16, whose GEMMs read the base in bf16 anyway, else fp32)"),
    I("dist.zero", dist.zero, 0, 1,
      "1: ZeRO-1 under mpirun, each rank keeps and updates the AdamW moments of 1/N"),
    I("dist.world", dist.world, 0, 1 << 20,
      "ranks to plan memory for (ctrain plan); 0: the launcher's; under mpirun it must match"),
    F("dist.timeout_s", dist.timeout_s, 0, 1e7,
      "longest wait for the other ranks in one collective, seconds (0: forever)"),
    F("dist.bucket_mb", dist.bucket_mb, 0, 1e6, "MiB of gradients per allreduce (0: one)"),
    B("dist.overlap", dist.overlap,
      "start each bucket's allreduce during the backward pass, as soon as it is final"),
    I("debug.dump_grads_step", debug.dump_grads_step, 0, BIG,
      "write run.dir/grads_stepK.safetensors at step K (0: off)"),
    I("debug.dump_dropout", debug.dump_dropout, 0, BIG,
      "write run.dir/dropout_stepK.safetensors at step K: rank 0's dropout masks of each "
      "micro-batch, 0 or 1/(1-p) (0: off)"),
    I("debug.nan_step", debug.nan_step, 0, BIG, "make step K's gradient NaN (0: off)"),
    I("debug.spike_step", debug.spike_step, 0, BIG,
      "scale step K's loss and gradient by debug.spike_factor (0: off)"),
    F("debug.spike_factor", debug.spike_factor, 0, 1e30, "scale of debug.spike_step"),
    S("debug.bad_steps", debug.bad_steps, "\"A-B\": make steps A..B's gradients NaN"),
    I("debug.sleep_ms", debug.sleep_ms, 0, 3600000, "pause after every step, in ms"),
    I("debug.rank", debug.rank, 0, 1 << 20, "the rank debug.kill_step and hang_step act on"),
    I("debug.kill_step", debug.kill_step, 0, BIG,
      "after step K, rank debug.rank kills itself with SIGKILL (0: off)"),
    I("debug.hang_step", debug.hang_step, 0, BIG,
      "after step K, rank debug.rank stops answering (0: off)"),
    F("debug.tune_noise", debug.tune_noise, 0, 10,
      "ctrain tune: slow each run by 1 + x*U, U uniform in [0,1) from a fixed seed (0: off)"),
    S("debug.tune_fake", debug.tune_fake,
      "ctrain tune: \"on\" or \"KEY=VALUE:FACTOR ...\": runs take 1 us per token (times "
      "the factors the point matches) instead of running the model"),
    B("debug.emulate_bf16", debug.emulate_bf16,
      "run train.precision=bf16 on a CPU without bf16 instructions, emulated (slower than "
      "fp32: for numerics checks, never for speed)"),
    B("debug.fp32_logits", debug.fp32_logits,
      "train.precision=bf16: keep the head's logits fp32 where the backend would write them "
      "bf16 (sim, cuda, cpu with native bf16), for numerics checks against fp32-logit "
      "references"),
    S("debug.sim_device_memory", debug.sim_device_memory,
      "run.device=sim: the device memory it simulates, bytes (KB/MB/GB); a buffer past it "
      "fails as on a full GPU, and run.memory_limit is of it (\"\": no limit)"),
    S("tune.signature", tune.signature,
      "tuned profile: machine signature it was measured on (`ctrain hw`); \"\": not a profile"),
    E("tune.level", tune.level, "basic|advanced|ultra|custom",
      "tuned profile: the search space it came from (set by ctrain tune --level)"),
    S("tune.settings", tune.settings,
      "tuned profile: key=value settings applied when tune.signature is this machine's"),
    F("tune.tokens_per_s", tune.tokens_per_s, 0, 1e15,
      "tuned profile: measured training tokens/s with tune.settings"),
    F("tune.mfu", tune.mfu, 0, 100, "tuned profile: measured MFU (fraction of the GEMM peak)"),
    S("tune.date", tune.date, "tuned profile: UTC time of the measurement"),
    S("tune.search", tune.search,
      "ctrain tune: dimensions searched, comma-separated: gemm,threads,batch,recompute,dtype,"
      "tiles"),
    S("tune.tile_candidates", tune.tile_candidates,
      "ctrain tune: attention tiles tried when tune.search has tiles (QxK,QxK,...)"),
    I("tune.trial_steps", tune.trial_steps, 1, 64,
      "ctrain tune: timed steps per trial after one untimed warm-up (the median counts)"),
    F("tune.budget_s", tune.budget_s, 0.001, 1e7, "ctrain tune: seconds the search may take"),
};
#define N_KEYS (sizeof config_keys / sizeof config_keys[0])
const size_t config_n_keys = N_KEYS;

void ct_config_default(ct_config *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->model.arch, sizeof c->model.arch, "gpt2");
    c->data.shuffle = false;
    c->data.prefetch = 2;
    c->data.packing = true;
    c->model.dropout = -1;
    snprintf(c->data.cache_limit, sizeof c->data.cache_limit, "10GB");
    c->data.cache_ttl = 7 * 24 * 3600.0;
    snprintf(c->data.readahead, sizeof c->data.readahead, "256MB");
    c->data.retries = 5;
    c->data.timeout_s = 30;
    c->train.batch_size = 4;
    c->train.seq_len = 64;
    c->train.grad_accum = 1;
    c->train.steps = 100;
    c->train.seed = 1337;
    snprintf(c->train.resume, sizeof c->train.resume, "never");
    c->train.eval_every = 0;
    c->train.eval_batches = 0;
    c->train.eval_tokens = 262144;
    snprintf(c->train.recompute, sizeof c->train.recompute, "none");
    snprintf(c->train.activation_dtype, sizeof c->train.activation_dtype, "fp32");
    snprintf(c->train.precision, sizeof c->train.precision, "fp32");
    c->train.loss_scale = 0; /* dynamic */
    c->train.loss_scale_init = 65536.0;
    c->train.loss_scale_window = 2000;
    c->optim.lr = 3e-4;
    c->optim.beta1 = 0.9;
    c->optim.beta2 = 0.999;
    c->optim.eps = 1e-8;
    c->optim.weight_decay = 0.0;
    c->optim.grad_clip = 1.0;
    snprintf(c->schedule.name, sizeof c->schedule.name, "constant");
    c->schedule.pct_start = 0.3;
    c->schedule.div_factor = 25.0;
    c->schedule.final_div_factor = 1e4;
    snprintf(c->schedule.anneal, sizeof c->schedule.anneal, "cos");
    snprintf(c->run.dir, sizeof c->run.dir, "runs/latest");
    c->run.keep_last = 3;
    c->run.log_every = 1;
    c->guard.window = 50;
    c->guard.zscore = 6.0;
    c->guard.min_steps = 20;
    c->guard.max_bad = 3;
    c->guard.lr_factor = 0.5;
    c->guard.max_rollbacks = 10;
    c->debug.spike_factor = 1000.0;
    c->dist.timeout_s = 600;
    c->dist.bucket_mb = 8;
    c->dist.overlap = true;
    snprintf(c->run.memory_limit, sizeof c->run.memory_limit, "85%%");
    snprintf(c->run.gemm, sizeof c->run.gemm, "auto");
    c->alerts.memory_warning = 0.90;
    c->alerts.memory_critical = 0.95;
    c->alerts.throughput_warning = 0.5;
    c->alerts.throughput_critical = 0.25;
    c->alerts.data_wait_warning = 0.10;
    c->alerts.data_wait_critical = 0.30;
    c->alerts.data_wait_min_ms = 1.0;
    c->alerts.warmup_steps = 5;
    c->alerts.repeat_every = 100;
    c->alerts.expected_mfu = 0.10;
    snprintf(c->run.attention_tiles, sizeof c->run.attention_tiles, "auto");
    snprintf(c->run.device, sizeof c->run.device, "cpu");
    /* the tune.* search keys default to the basic level (tools/tune.c) */
    snprintf(c->tune.level, sizeof c->tune.level, "basic");
    snprintf(c->tune.search, sizeof c->tune.search, "gemm,threads,batch");
    snprintf(c->tune.tile_candidates, sizeof c->tune.tile_candidates, "32x64,64x64,64x128,128x128");
    c->tune.trial_steps = 2;
    c->tune.budget_s = 300;
    c->lora.alpha = 16;
    snprintf(c->lora.base_dtype, sizeof c->lora.base_dtype, "auto");
}

const key_def *config_find_key(const char *path) {
    for (size_t i = 0; i < N_KEYS; i++)
        if (strcmp(config_keys[i].path, path) == 0) return &config_keys[i];
    return NULL;
}

bool ct_config_has_key(const char *key) { return config_find_key(key) != NULL; }

/* Levenshtein distance, for "did you mean". */
static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 127 || lb > 127) return 1000;
    size_t prev[128], cur[128];
    for (size_t j = 0; j <= lb; j++) prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, (lb + 1) * sizeof(size_t));
    }
    return prev[lb];
}

static const char *closest_key(const char *path) {
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    /* a close key of the same section first: "lora.rank" -> "lora.r", not "debug.rank" */
    const char *pdot = strrchr(path, '.');
    for (size_t i = 0; pdot && i < N_KEYS; i++) {
        const char *dot = strrchr(config_keys[i].path, '.');
        size_t sec = dot ? (size_t)(dot - config_keys[i].path) : 0;
        if (!dot || sec != (size_t)(pdot - path) || strncmp(config_keys[i].path, path, sec))
            continue;
        size_t d = edit_distance(pdot + 1, dot + 1);
        if (d < best_d) {
            best_d = d;
            best = config_keys[i].path;
        }
    }
    if (best && best_d <= 3) return best;
    best = NULL;
    best_d = (size_t)-1;
    for (size_t i = 0; i < N_KEYS; i++) {
        size_t d = edit_distance(path, config_keys[i].path);
        /* also compare the last segment alone: "lr" -> "optim.lr" */
        const char *dot = strrchr(config_keys[i].path, '.');
        if (dot) {
            size_t d2 = edit_distance(pdot ? pdot + 1 : path, dot + 1) + (pdot ? 1 : 0);
            if (d2 < d) d = d2;
        }
        /* a prefix: train.batch */
        if (strncmp(config_keys[i].path, path, strlen(path)) == 0) d = 1;
        if (d < best_d) {
            best_d = d;
            best = config_keys[i].path;
        }
    }
    return best_d <= 4 ? best : NULL;
}

/* The names users bring from the Hugging Face Trainer (TrainingArguments),
 * PEFT and nanoGPT, matched on a key's last segment: "optim.learning_rate"
 * and "learning_rate" both lead to optim.lr. */
static const struct {
    const char *theirs, *ours;
} config_aliases[] = {
    {"learning_rate", "optim.lr"},
    {"per_device_train_batch_size", "train.batch_size"},
    {"train_batch_size", "train.batch_size"},
    {"micro_batch_size", "train.batch_size"},
    {"gradient_accumulation_steps", "train.grad_accum"},
    {"max_steps", "train.steps"},
    {"max_iters", "train.steps"},
    {"num_train_epochs", "train.epochs"},
    {"group_by_length", "data.group_by_length"},
    {"packing", "data.packing"},
    {"load_best_model_at_end", "train.load_best_at_end"},
    {"resid_pdrop", "model.dropout"},
    {"dropout", "model.dropout"},
    {"warmup_steps", "schedule.warmup_steps"},
    {"warmup_iters", "schedule.warmup_steps"},
    {"lr_scheduler_type", "schedule.name"},
    {"max_grad_norm", "optim.grad_clip"},
    {"adam_beta1", "optim.beta1"},
    {"adam_beta2", "optim.beta2"},
    {"adam_epsilon", "optim.eps"},
    {"output_dir", "run.dir"},
    {"out_dir", "run.dir"},
    {"save_steps", "run.checkpoint_every"},
    {"save_total_limit", "run.keep_last"},
    {"eval_steps", "train.eval_every"},
    {"eval_interval", "train.eval_every"},
    {"logging_steps", "run.log_every"},
    {"log_interval", "run.log_every"},
    {"max_seq_length", "train.seq_len"},
    {"block_size", "train.seq_len"},
    {"model_name_or_path", "model.init_from"},
    {"resume_from_checkpoint", "train.resume"},
    {"lora_r", "lora.r"},
    {"lora_alpha", "lora.alpha"},
    {"lora_dropout", "lora.dropout"},
    {"target_modules", "lora.targets"},
};

static const char *alias_key(const char *path) {
    const char *dot = strrchr(path, '.');
    const char *last = dot ? dot + 1 : path;
    for (size_t i = 0; i < sizeof config_aliases / sizeof *config_aliases; i++)
        if (edit_distance(last, config_aliases[i].theirs) <= 2 &&
            ct_config_has_key(config_aliases[i].ours)) /* a typo of their name too */
            return config_aliases[i].ours;
    return NULL;
}

ct_status config_unknown_key(const char *path, const char *where) {
    const char *alias = alias_key(path);
    const char *near = alias ? alias : closest_key(path);
    ct_status st = CT_ERR(CT_ERR_ARG, "%s: unknown config key '%s'", where, path);
    if (near)
        ct_error_hint("did you mean '%s'? `ctrain train --print-config` lists every key", near);
    else
        ct_error_hint("`ctrain train --print-config` lists every key");
    return st;
}

static bool parse_bool(const char *v, bool *out) {
    static const char *yes[] = {"true", "True", "TRUE", "yes", "on", "1"};
    static const char *no[] = {"false", "False", "FALSE", "no", "off", "0"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
        if (strcmp(v, yes[i]) == 0) return (*out = true), true;
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        if (strcmp(v, no[i]) == 0) return (*out = false), true;
    return false;
}

static bool word_in(const char *words, const char *v) {
    size_t n = strlen(v);
    const char *p = words;
    while (*p) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0) return true;
        if (!bar) break;
        p = bar + 1;
    }
    return false;
}

/* Length of the well-formed UTF-8 sequence at p (1..4) and its code point in
 * *cp; 0 for a stray, truncated, overlong or surrogate sequence, or one past
 * U+10FFFF. */
size_t config_utf8_seq(const unsigned char *p, uint32_t *cp) {
    uint32_t c = p[0];
    size_t n;
    uint32_t min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xE0) == 0xC0) {
        n = 2, c &= 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        n = 3, c &= 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        n = 4, c &= 0x07, min = 0x10000;
    } else {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0; /* also stops at the NUL */
        c = (c << 6) | (p[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    *cp = c;
    return n;
}

/* s (n bytes) quoted for an error message: control bytes, bytes that are not
 * UTF-8 and NULs (also NUL_MARK) shown as escapes, cut at about out_n. */
const char *config_shown(const char *s, size_t n, char *out, size_t out_n) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 8 < out_n;) {
        const unsigned char *p = (const unsigned char *)s + i;
        uint32_t cp = 0;
        size_t len = p[0] ? config_utf8_seq(p, &cp) : 1;
        if (n - i >= 3 && !memcmp(p, NUL_MARK, 3)) {
            o += (size_t)snprintf(out + o, out_n - o, "\\0");
            len = 3;
        } else if (!p[0]) {
            o += (size_t)snprintf(out + o, out_n - o, "\\0");
        } else if (p[0] == '\n') {
            o += (size_t)snprintf(out + o, out_n - o, "\\n");
        } else if (p[0] == '\t') {
            o += (size_t)snprintf(out + o, out_n - o, "\\t");
        } else if (!len || i + len > n || cp < 0x20 || cp == 0x7F) {
            o += (size_t)snprintf(out + o, out_n - o, "\\x%02X", p[0]);
            len = 1;
        } else {
            memcpy(out + o, p, len);
            o += len;
        }
        i += len;
        if (i < n && o + 8 >= out_n) o += (size_t)snprintf(out + o, out_n - o, "...");
    }
    out[o < out_n ? o : out_n - 1] = '\0';
    return out;
}

ct_status config_set_value(ct_config *cfg, const key_def *k, const char *v, const char *where) {
    char *base = (char *)cfg + k->offset;
    switch (k->type) {
    case KEY_INT: {
        if (k->words && strcmp(v, k->words) == 0) { /* "auto", stored as 0 */
            int64_t zero = 0;
            memcpy(base, &zero, sizeof zero);
            return CT_OK;
        }
        errno = 0;
        char *end = NULL;
        double d = strtod(v, &end); /* accepts 1e6 too; must be integral */
        while (end && isspace((unsigned char)*end)) end++;
        if (!*v || errno || !end || *end || d != floor(d))
            return CT_ERR(CT_ERR_ARG, "%s: %s = '%s': expected an integer%s%s", where, k->path, v,
                          k->words ? " or " : "", k->words ? k->words : "");
        if (d < k->min || d > k->max)
            return CT_ERR(CT_ERR_ARG, "%s: %s = %s is out of range: expected %.0f..%.0f", where,
                          k->path, v, k->min, k->max);
        int64_t iv = (int64_t)d;
        memcpy(base, &iv, sizeof iv);
        return CT_OK;
    }
    case KEY_FLOAT: {
        if (k->words && strcmp(v, k->words) == 0) { /* "dynamic", stored as 0 */
            double zero = 0;
            memcpy(base, &zero, sizeof zero);
            return CT_OK;
        }
        errno = 0;
        char *end = NULL;
        double d = strtod(v, &end);
        while (end && isspace((unsigned char)*end)) end++;
        if (!*v || errno || !end || *end || !isfinite(d))
            return CT_ERR(CT_ERR_ARG, "%s: %s = '%s': expected a number%s%s", where, k->path, v,
                          k->words ? " or " : "", k->words ? k->words : "");
        if (d < k->min || d > k->max)
            return CT_ERR(CT_ERR_ARG, "%s: %s = %s is out of range: expected %g..%g", where,
                          k->path, v, k->min, k->max);
        memcpy(base, &d, sizeof d);
        return CT_OK;
    }
    case KEY_BOOL: {
        bool b;
        if (!parse_bool(v, &b))
            return CT_ERR(CT_ERR_ARG, "%s: %s = '%s': expected true or false", where, k->path, v);
        memcpy(base, &b, sizeof b);
        return CT_OK;
    }
    case KEY_ENUM:
        if (!word_in(k->words, v))
            return CT_ERR(CT_ERR_ARG, "%s: %s = '%s': expected one of %s", where, k->path, v,
                          k->words);
        /* fall through */
    case KEY_STRING:
        /* config.yaml records every value, and YAML text is UTF-8 */
        for (const unsigned char *p = (const unsigned char *)v; *p;) {
            uint32_t cp;
            size_t len = config_utf8_seq(p, &cp);
            if (!len) {
                char show[128];
                return CT_ERR(CT_ERR_ARG, "%s: %s = '%s': expected UTF-8 text (config.yaml "
                              "records it)", where, k->path,
                              config_shown(v, strlen(v), show, sizeof show));
            }
            p += len;
        }
        if (strlen(v) >= k->size)
            return CT_ERR(CT_ERR_ARG, "%s: %s is too long (%zu characters, at most %zu)", where,
                          k->path, strlen(v), k->size - 1);
        memcpy(base, v, strlen(v) + 1);
        return CT_OK;
    }
    return CT_ERR(CT_ERR_ARG, "%s: %s: internal key type error", where, k->path);
}

ct_status ct_config_set(ct_config *cfg, const char *key, const char *value, const char *source) {
    const key_def *k = config_find_key(key);
    if (!k) return config_unknown_key(key, source);
    return config_set_value(cfg, k, value, source);
}

ct_status ct_config_apply_override(ct_config *cfg, const char *kv) {
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        return CT_ERR(CT_ERR_ARG, "command line: '%s': expected key=value", kv);
    char key[256];
    size_t n = (size_t)(eq - kv);
    if (n >= sizeof key) return CT_ERR(CT_ERR_ARG, "command line: key too long in '%s'", kv);
    memcpy(key, kv, n);
    key[n] = '\0';
    return ct_config_set(cfg, key, eq + 1, "command line");
}

/* x bytes times the scale of suffix end ("", B, KB, MB, GB, TB); false when
 * the suffix is none of those. */
static bool scale_bytes(double x, const char *end, double *bytes) {
    static const char *suffix[] = {"", "B", "KB", "MB", "GB", "TB"};
    static const double scale[] = {1, 1, 1024.0, 1048576.0, 1073741824.0, 1099511627776.0};
    for (size_t i = 0; i < 6; i++) {
        if (!strcmp(end, suffix[i])) {
            *bytes = x * scale[i];
            return true;
        }
    }
    return false;
}

ct_status ct_config_bytes(const char *key, const char *spec, int64_t *out) {
    char *end;
    double x = strtod(spec, &end), bytes;
    if (end != spec && isfinite(x) && x > 0) {
        while (*end == ' ') end++;
        if (scale_bytes(x, end, &bytes) && bytes >= 1 && bytes < 9.0e18) {
            *out = (int64_t)bytes;
            return CT_OK;
        }
    }
    return CT_ERR(CT_ERR_ARG, "%s = '%s': expected bytes with an optional KB/MB/GB/TB suffix "
                  "(e.g. 10GB)", key, spec);
}

ct_status ct_config_memory_limit(const char *spec, size_t available, size_t *out) {
    char *end;
    double x = strtod(spec, &end);
    if (end == spec || !isfinite(x) || x <= 0) goto bad;
    while (*end == ' ') end++;
    double bytes;
    if (!strcmp(end, "%")) {
        if (x > 100) goto bad;
        if (!available)
            return CT_ERR(CT_ERR_ARG, "run.memory_limit = '%s' is a share of RAM, but this "
                          "machine's RAM could not be read: give bytes instead (e.g. 12GB)",
                          spec);
        bytes = (double)available * x / 100.0;
    } else if (!scale_bytes(x, end, &bytes)) {
        goto bad;
    }
    *out = (size_t)bytes;
    return CT_OK;
bad:
    return CT_ERR(CT_ERR_ARG, "run.memory_limit = '%s': expected bytes with an optional "
                  "KB/MB/GB/TB suffix (e.g. 12GB) or a percentage of RAM (e.g. 85%%)", spec);
}

/* A warning level must come before its critical level: for "above" alerts
 * warning <= critical, for throughput ("below") warning >= critical. Levels
 * set to 0 are off and not compared. */
static ct_status validate_alerts(const ct_config *c) {
    static const struct {
        const char *name;
        size_t warn, crit;
        bool below;
    } pairs[] = {
        {"memory", OFF(alerts.memory_warning), OFF(alerts.memory_critical), false},
        {"throughput", OFF(alerts.throughput_warning), OFF(alerts.throughput_critical), true},
        {"loss", OFF(alerts.loss_warning), OFF(alerts.loss_critical), false},
        {"data_wait", OFF(alerts.data_wait_warning), OFF(alerts.data_wait_critical), false},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        double w, k;
        memcpy(&w, (const char *)c + pairs[i].warn, sizeof w);
        memcpy(&k, (const char *)c + pairs[i].crit, sizeof k);
        if (w <= 0 || k <= 0 || (pairs[i].below ? w >= k : w <= k)) continue;
        ct_status st = CT_ERR(CT_ERR_ARG, "alerts.%s_warning = %g %s alerts.%s_critical = %g: "
                              "the warning must come before the critical alert",
                              pairs[i].name, w, pairs[i].below ? "is below" : "exceeds",
                              pairs[i].name, k);
        ct_error_hint("%s alerts.%s_warning, or set either to 0 to turn that level off",
                      pairs[i].below ? "raise" : "lower", pairs[i].name);
        return st;
    }
    return CT_OK;
}

ct_status ct_config_attention_tiles(const char *spec, int *bq, int *bk) {
    *bq = *bk = 0;
    if (!strcmp(spec, "auto")) return CT_OK;
    int q = 0, k = 0;
    char tail = 0;
    if (sscanf(spec, "%dx%d%c", &q, &k, &tail) != 2 || q < 1 || q > 128 || k < 1 || k > 256) {
        ct_status st = CT_ERR(CT_ERR_ARG, "run.attention_tiles = '%s': expected auto or QxK with "
                              "Q query rows in 1..128 and K keys in 1..256", spec);
        ct_error_hint("e.g. run.attention_tiles=64x128 (the built-in tile)");
        return st;
    }
    *bq = q;
    *bk = k;
    return CT_OK;
}

ct_status ct_config_trace_steps(const char *spec, int64_t *first, int64_t *last) {
    long long a = 0, b = 0;
    char tail = 0;
    int n = sscanf(spec, "steps:%lld-%lld%c", &a, &b, &tail);
    if (n == 1) {
        n = sscanf(spec, "steps:%lld%c", &a, &tail);
        b = a;
        n = n == 1 ? 2 : 0;
    }
    if (n != 2 || a < 1 || b < a) {
        ct_status st = CT_ERR(CT_ERR_ARG, "run.trace = '%s': expected steps:A-B (1 <= A <= B) "
                              "or steps:A", spec);
        ct_error_hint("e.g. run.trace=steps:5-7 traces steps 5, 6 and 7 into run.dir/trace.json");
        return st;
    }
    *first = a;
    *last = b;
    return CT_OK;
}

ct_status ct_config_device(const char *spec, int *kind, int *index) {
    *index = 0;
    int k = ct_backend_kind_of(spec);
    if (k >= 0 && k != CT_BACKEND_CUDA) {
        *kind = k;
        return CT_OK;
    }
    char tail = 0;
    if (!strcmp(spec, "cuda") || (sscanf(spec, "cuda:%d%c", index, &tail) == 1 && *index >= 0)) {
        if (ct_backend_built(CT_BACKEND_CUDA)) {
            *kind = CT_BACKEND_CUDA; /* whether the GPU is there: the context finds out */
            return CT_OK;
        }
        ct_status st = CT_ERR(CT_ERR_ARG, "run.device = %s: no CUDA device: this ctrain was built "
                              "without the CUDA backend", spec);
        ct_error_hint("train on the CPU with run.device=cpu");
        return st;
    }
    ct_status st = CT_ERR(CT_ERR_ARG, "run.device = '%s': expected cpu, cuda or cuda:N (ref and "
                          "sim are the test backends)", spec);
    return st;
}

ct_status ct_config_validate(const ct_config *c) {
    size_t limit;
    ct_status st0 = ct_config_memory_limit(c->run.memory_limit, 1, &limit);
    if (st0) return st0;
    int bq, bk;
    if ((st0 = ct_config_attention_tiles(c->run.attention_tiles, &bq, &bk))) return st0;
    int dev_kind, dev_index;
    if ((st0 = ct_config_device(c->run.device, &dev_kind, &dev_index))) return st0;
    int64_t cache_limit, readahead;
    if ((st0 = ct_config_bytes("data.cache_limit", c->data.cache_limit, &cache_limit))) return st0;
    if ((st0 = ct_config_bytes("data.readahead", c->data.readahead, &readahead))) return st0;
    int64_t sim_mem;
    if (c->debug.sim_device_memory[0] &&
        (st0 = ct_config_bytes("debug.sim_device_memory", c->debug.sim_device_memory, &sim_mem)))
        return st0;
    int64_t tr0, tr1;
    if (c->run.trace[0] && (st0 = ct_config_trace_steps(c->run.trace, &tr0, &tr1))) return st0;
    if (c->schedule.warmup_steps > c->train.steps && c->train.steps > 0)
        return CT_ERR(CT_ERR_ARG,
                      "schedule.warmup_steps = %lld exceeds train.steps = %lld",
                      (long long)c->schedule.warmup_steps, (long long)c->train.steps);
    if (c->schedule.min_lr > c->optim.lr)
        return CT_ERR(CT_ERR_ARG, "schedule.min_lr = %g exceeds optim.lr = %g",
                      c->schedule.min_lr, c->optim.lr);
    if (!c->run.dir[0]) return CT_ERR(CT_ERR_ARG, "run.dir is empty: expected a directory");
    if (c->guard.zscore > 0 && c->guard.min_steps > c->guard.window) {
        ct_status st = CT_ERR(CT_ERR_ARG, "guard.min_steps = %lld exceeds guard.window = %lld: "
                              "spikes would never be judged", (long long)c->guard.min_steps,
                              (long long)c->guard.window);
        ct_error_hint("raise guard.window or lower guard.min_steps (guard.zscore=0 turns spike "
                      "detection off)");
        return st;
    }
    if (c->train.early_stop_patience > 0 && !c->data.val[0])
        return CT_ERR(CT_ERR_ARG, "train.early_stop_patience = %lld needs validation data: "
                      "set data.val", (long long)c->train.early_stop_patience);
    if (c->train.early_stop_patience > 0 && c->train.eval_every == 0)
        return CT_ERR(CT_ERR_ARG, "train.early_stop_patience = %lld needs periodic validation: "
                      "train.eval_every is 0 (validation at the end only)",
                      (long long)c->train.early_stop_patience);
    if ((st0 = validate_alerts(c))) return st0;
    if (c->model.n_kv_head && c->model.n_head && c->model.n_head % c->model.n_kv_head)
        return CT_ERR(CT_ERR_ARG, "model.n_head = %lld is not a multiple of model.n_kv_head = %lld",
                      (long long)c->model.n_head, (long long)c->model.n_kv_head);
    return CT_OK;
}
