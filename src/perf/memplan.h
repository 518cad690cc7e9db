/*
 * The run's memory plan and the hard memory limit. Every byte a training run
 * keeps resident is counted from the model config and the settings before
 * anything big is allocated: the model's plan (params, grads, activations,
 * work, scratch), AdamW's moments (one rank's shard under ZeRO-1), the token
 * buffers of the loader's prefetch ring and the trainer, the mapped token
 * shards, and the process itself: its resident set when planned (program,
 * libraries, heap: measured), the threads the run starts later, and the GEMM
 * library's memory: the part of OpenBLAS's per-thread packing buffers this
 * run's GEMMs touch (modelled from the GEMM shapes and the kernel set's
 * blocking), or oneDNN's workspace for the step's shapes (asked of the GEMM
 * layer) and its state (measured constants). run.memory_limit
 * ("85%", "12GB", bytes) caps it; batch_size=auto and recompute=auto pick
 * settings under the cap by planning, never by trying an allocation.
 * Leaves out: what an MPI library maps after planning (its shared-memory
 * segments), and the file pages of anything but the token shards.
 */
#ifndef CT_PERF_MEMPLAN_H
#define CT_PERF_MEMPLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cpu/gemm.h"
#include "ctrain/config.h"
#include "ctrain/core.h"
#include "ctrain/model.h"

/* OpenBLAS's sgemm blocking for the kernel set it runs, which decides how much
 * of its packing buffers (one per thread, BUFFER_SIZE = 128 MiB of address
 * space each, touched only as far as a GEMM packs) a GEMM makes resident. */
typedef struct ct_blas_params {
    char core[32];    /* openblas_get_corename(): "Haswell", "SkylakeX", ... */
    int p, q;         /* GEMM_P: rows of A per packed block; GEMM_Q: its depth (K) */
    int unroll_m, unroll_n;
    int switch_ratio; /* OpenBLAS splits M and N over threads in steps of at least this */
    int jj_max;       /* columns of B packed at a time when A fits one block */
    bool known;       /* false: conservative blocking for a kernel set not in the table */
} ct_blas_params;

/* What a plan measures of the process it is made in (ct_run_env_measure). */
/* Mapped token shards count in a plan up to this many MiB: beyond it their
 * pages are page cache the kernel reclaims, not memory a run can run out of. */
#define CT_PLAN_SHARDS_MAX_MIB 256

typedef struct ct_run_env {
    /* device runs (ct_run_env_measure_device): the tensors live in memory of
     * the device's own, which run.memory_limit is then of */
    bool device;          /* cuda, or sim with debug.sim_device_memory */
    bool device_cuda;     /* the CUDA backend: its workspaces and reserve count too */
    size_t device_free;   /* bytes the run may fill: free when the backend had started */
    size_t device_total;  /* bytes of device memory */
    int device_share;     /* ranks of this machine that share the GPU (>= 1) */
    char device_name[128];
    int cc_major, cc_minor; /* the device's compute capability; 0.0: none (sim) */
    size_t process;   /* resident bytes of this process when measured */
    size_t shards;    /* bytes of the token shards the run maps (train + val), at most
                       * CT_PLAN_SHARDS_MAX_MIB MiB */
    size_t tokenizer; /* resident bytes loading the run's tokenizer added */
    ct_blas_params blas;
    int gemm;         /* the GEMM library the run uses: a ct_gemm_lib (run.gemm; auto
                       * and no config: oneDNN when built with it) */
} ct_run_env;

typedef struct ct_run_plan {
    int B, T, grad_accum;
    ct_model_opts opts;
    ct_lora_opts lora;   /* r == 0: no adapters */
    ct_model_plan model; /* params, grads, acts, work, scratch */
    size_t optim;        /* AdamW m and v of this rank's trainable parameters (all of
                          * them, or its shard under ZeRO-1) */
    int optim_shards;    /* ranks the moments are split over (ZeRO-1); 1: none */
    size_t data;         /* token buffers: prefetch ring + the trainer's batch */
    size_t shards;       /* mapped token shards (measured plans; 0 otherwise) */
    size_t runtime;      /* the process: the rt_* parts below */
    size_t rt_process;   /* measured plans: this process's RSS when planned (program,
                          * libraries, heap), at least CT_RUNTIME_PROCESS_MIB; otherwise
                          * CT_RUNTIME_BASE_MIB */
    size_t rt_code;      /* library code and data the training loop touches first
                          * (CT_RUNTIME_CODE_MIB) */
    size_t rt_tokenizer; /* the run's tokenizer, which train loads to copy it into
                          * run.dir: its heap stays resident (measured) */
    size_t rt_threads;   /* stacks and arenas of the threads the run starts later */
    size_t rt_io;        /* the checkpoint writer's buffers (see CT_RUNTIME_IO_MIB) */
    size_t rt_reserve;   /* CT_RUNTIME_RESERVE_MIB: what varies from run to run */
    size_t rt_blas;      /* the GEMM library's memory: measured plans, what this run's
                          * GEMMs hold (ct_run_plan_gemm: OpenBLAS's packing buffers, or
                          * oneDNN's workspace and state); otherwise the constants */
    int threads;         /* the thread count runtime was planned for */
    int prefetch;        /* the prefetch ring's batches (0: no prefetch thread) */
    bool measured;       /* runtime from a ct_run_env (ct_run_plan_measure) */
    ct_run_env env;      /* measured plans: what was measured */
    ct_model_config mc;  /* measured plans: the model shape (to re-plan the BLAS part) */
    size_t total;        /* the host's part: model.total + optim + data + shards + runtime;
                          * on a device run (env.device) data + shards + runtime only */
    size_t device;       /* device runs: what the device holds, model.total + optim +
                          * dev_ws + dev_reserve; 0 otherwise */
    size_t dev_ws;       /* the CUDA backend's workspaces for the step
                          * (ct_run_plan_cuda_ws) */
    size_t dev_reserve;  /* CT_CUDA_RESERVE_MIB on cuda (backend/device.h) */
} ct_run_plan;

/* Plans a training run of mc at micro-batch (B,T) with the options o and a
 * prefetch ring of `prefetch` batches, on all the CPUs this process may run
 * on (ct_run_plan_set_threads changes that). CT_ERR_ARG on a bad shape. */
ct_status ct_run_plan_make(const ct_model_config *mc, int B, int T, int grad_accum, int prefetch,
                           const ct_model_opts *o, ct_run_plan *out);
/* The same with LoRA adapters lo (NULL or r == 0: none): the frozen base has
 * no gradients and no moments. Borrows lo. */
ct_status ct_run_plan_make_lora(const ct_model_config *mc, int B, int T, int grad_accum,
                                int prefetch, const ct_model_opts *o, const ct_lora_opts *lo,
                                ct_run_plan *out);

/* Re-plans p's runtime baseline (and so its total) for `threads` threads
 * (<= 0: the CPUs this process may run on): the constants, or for a measured
 * plan its threads and BLAS parts. */
void ct_run_plan_set_threads(ct_run_plan *p, int threads);

/* The constant process baseline of an unmeasured plan (ct_run_plan_make) on
 * `threads` threads (<= 0: the CPUs this process may run on), in bytes:
 * CT_RUNTIME_BASE_MIB for the program, its libraries, the heap and the loader
 * thread, plus CT_RUNTIME_BLAS1_MIB of OpenBLAS packing buffers on one thread,
 * CT_RUNTIME_BLAS_MIB per thread when threaded. A rough figure (the packing
 * buffers grow with the GEMM shapes: 61 MiB for GPT-2's 50257-token head on
 * Haswell kernels); `train` and `plan` use measured plans instead. */
#define CT_RUNTIME_BASE_MIB 8.5
#define CT_RUNTIME_BLAS1_MIB 1.5
#define CT_RUNTIME_BLAS_MIB 5.5
size_t ct_run_plan_runtime(int threads);

/* Parts of a measured plan's runtime that cannot be measured when planning,
 * measured once (x86_64, glibc 2.36, OpenBLAS 0.3.21) by comparing
 * /proc/self/smaps when planning with smaps at the run's peak:
 *   THREAD: each thread but the main one (stack, TLS, malloc arena);
 *   CODE: library code and data the training loop is first to touch
 *         (kernels, libm, the tokenizer's regex), 1.2-1.5 MiB measured;
 *   IO: the checkpoint writer's buffers: the safetensors writer's two 1 MiB
 *       staging buffers and the file's 1 MiB stdio buffer, each touched as
 *       far as the weights it writes reach (3 x min(1 MiB, trainable bytes)),
 *       plus CT_RUNTIME_IO_MIB for the run directory's small-file writes;
 *   RESERVE: what varies from run to run of the same settings (where malloc's
 *       heap ends up, when a freed buffer goes back): up to 1 MiB measured
 *       first; a one-thread OpenBLAS run on a Cascade Lake VM peaked 0.1-0.6
 *       MiB above a plan with 1 MiB here, so 1.75.
 * The process line is the RSS measured when planning, but at least
 * CT_RUNTIME_PROCESS_MIB (above what this program measures there on its own:
 * 6.4-7.1 MiB in `plan` and `train`), so that plans do not vary with a few
 * pages between processes: `plan` and `train` make the same plan. The
 * tokenizer line is measured too, rounded up to whole MiB after a 0.5 MiB
 * guard for the same reason. */
#define CT_RUNTIME_THREAD_MIB 0.25
#define CT_RUNTIME_CODE_MIB 1.5
#define CT_RUNTIME_IO_MIB 0.5
#define CT_RUNTIME_RESERVE_MIB 1.75
#define CT_RUNTIME_PROCESS_MIB 7.5

/* The sgemm blocking of the OpenBLAS kernel set this process runs (OpenBLAS
 * 0.3.x's param.h; Prescott's GEMM_P follows the L2 size l2_bytes, 0: unknown,
 * as OpenBLAS's does). Unknown kernel sets get known = false and a blocking
 * that over-counts (p 256, q 512). */
void ct_blas_params_for(ct_blas_params *out, const char *core, size_t l2_bytes);
/* ct_blas_params_for of this process's OpenBLAS and L2 cache. */
void ct_blas_params_read(ct_blas_params *out);

/* Bytes of OpenBLAS packing buffers that one sgemm touches, as OpenBLAS 0.3's
 * level-3 drivers pack: column-major M x N x K (a row-major call's dimensions
 * swapped), on `threads` threads. Writes each thread's bytes to per[0..n-1]
 * (per has room for `threads`) and returns n, the threads it runs on. */
int ct_blas_gemm_touch(const ct_blas_params *bp, int64_t M, int64_t N, int64_t K, int threads,
                       size_t *per);
/* The sum over threads of ct_blas_gemm_touch (0 when out of memory). */
size_t ct_blas_gemm_resident(const ct_blas_params *bp, int64_t M, int64_t N, int64_t K,
                             int threads);

/* One GEMM of a training step as the model issues it (ct_sgemm's row-major
 * arguments): C (M,N) = op(A) (M,K) op(B) (K,N), operands of `type`. */
typedef struct ct_plan_gemm {
    ct_gemm_type type;
    bool ta, tb;
    int64_t M, N, K;
} ct_plan_gemm;
typedef void (*ct_plan_gemm_fn)(const ct_plan_gemm *g, void *user);

/* Calls fn once for each GEMM shape of a training step of mc at (B,T) under
 * o (and the LoRA adapters lo; NULL or r == 0: none): each linear's forward,
 * input gradient and, when its weight trains, weight gradient (one layer: the
 * others repeat it; recompute's re-runs are forwards again), the adapters' A
 * and B (fp32), and the head's row chunk. o->precision picks the linears' and
 * the head's types: CT_PREC_FP32 all CT_GEMM_F32; CT_PREC_BF16 all
 * CT_GEMM_F32_BF16 (fp32 A, bf16 weights or, for the weight gradient, the
 * input's bf16 copy). head16: the head as the cpu's bf16 head runs it
 * (ct_backend_head16_ld), its forward CT_GEMM_F32_BF16_C16 (and _F32_BF16,
 * for a pass that wants fp32 logits), its backward CT_GEMM_BF16 on the bf16
 * gradient the loss wrote. Attention's tile GEMMs (inside the pool) are not
 * here. */
void ct_run_plan_gemms(const ct_model_config *mc, int B, int T, const ct_model_opts *o,
                       const ct_lora_opts *lo, bool head16, ct_plan_gemm_fn fn, void *user);

/* The OpenBLAS packing buffers a training step of mc at (B,T) under o (and
 * the LoRA adapters lo; NULL or r == 0: none) leaves resident on `threads`
 * threads: per thread, the most any of its GEMMs (ct_run_plan_gemms) touches;
 * summed over threads, plus the small buffers the attention kernel's
 * per-thread GEMMs touch, plus the GEMM layer's fp32 operand copies when the
 * step has bf16 GEMMs (ct_gemm_workspace_bytes). */
size_t ct_run_plan_blas(const ct_model_config *mc, int B, int T, const ct_model_opts *o,
                        const ct_lora_opts *lo, int threads, const ct_blas_params *bp);

/* oneDNN's memory in a training step beyond what ct_run_plan_onednn counts
 * shape by shape (the workspace of the step's primitives, and the blocks its
 * gemm kernels malloc per call): the peak RSS of `train` runs with
 * run.gemm=onednn over the plan less this line, measured on a 2-core Cascade
 * Lake Xeon VM (oneDNN 2.6.3, glibc 2.36; tests/cli/test_plan_rss.py), the
 * largest seen rounded up (CT_RUNTIME_RESERVE_MIB is the margin). STATE where
 * the step's matmuls run brgemm (AVX-512 cores): the JIT kernels of its
 * primitives, the engine and streams, the code and data pages the step touches
 * (0.9-3.9 MiB seen); STATE_GEMM where they run the gemm kernels (AVX2 cores,
 * measured with oneDNN held to AVX2 by ONEDNN_MAX_CPU_ISA, which dispatches
 * the kernels an AVX2-only CPU runs; and bf16 emulated on AVX-512 cores
 * without AVX512_BF16), beyond twice the kernels' blocks: the same things (up
 * to 3.9 MiB seen); THREAD each worker thread's share (the attention tiles'
 * dnnl_sgemm blocks in the thread's malloc arena, oneDNN's per-thread state),
 * as measured earlier on an AVX-512 Xeon: more threads than 2 were not
 * measured here. */
#define CT_RUNTIME_ONEDNN_MIB 4.0
#define CT_RUNTIME_ONEDNN_GEMM_MIB 4.0
#define CT_RUNTIME_ONEDNN_THREAD_MIB 0.5

/* oneDNN's memory in a training step of mc at (B,T) under o (lo as above) on
 * `threads` threads: the GEMM layer's one buffer set (the step's GEMMs are
 * top-level calls, one at a time), each part at the largest any of the step's
 * GEMMs asks (ct_gemm_workspace_bytes, which creates those primitives in the
 * process's cache: they are the ones the step runs), the most that oneDNN's
 * gemm kernels malloc in one of those GEMMs on `threads` threads where oneDNN
 * dispatched them (ct_gemm_driver_bytes), written to *parts when not NULL,
 * counted twice (glibc's heaps may keep as much again free after them: a
 * conservative plan there), plus CT_RUNTIME_ONEDNN_MIB
 * (CT_RUNTIME_ONEDNN_GEMM_MIB where the step's matmuls run the gemm kernels)
 * and CT_RUNTIME_ONEDNN_THREAD_MIB per thread but the first. */
size_t ct_run_plan_onednn(const ct_model_config *mc, int B, int T, const ct_model_opts *o,
                          const ct_lora_opts *lo, int threads, ct_gemm_workspace *parts);

/* Whether a run under o (lo: its adapters, NULL for none) keeps the head's
 * logits in bf16 (backend.h's bf16 head, as the model uses it: precision
 * bf16, not debug.fp32_logits, a head that trains in bf16 GEMMs): on a
 * device (sim, cuda) always then; on the cpu where its GEMM library lib is
 * oneDNN with native bf16 (the cpu's head16_ld). */
bool ct_run_plan_logits16(const ct_model_opts *o, const ct_lora_opts *lo, int lib, bool device);

/* The GEMM library's memory in the step: ct_run_plan_onednn when lib is
 * CT_GEMM_ONEDNN (and the build has it), else ct_run_plan_blas. */
size_t ct_run_plan_gemm(const ct_model_config *mc, int B, int T, const ct_model_opts *o,
                        const ct_lora_opts *lo, int threads, int lib, const ct_blas_params *bp);

/* Measures this process for a plan of the run cfg describes (NULL: no data,
 * no tokenizer): its RSS now (/proc/self/status), the BLAS
 * blocking, the GEMM library run.gemm names, the bytes of the token shards data.train and data.val name
 * (resolved as the loader does: a file, a glob, or a directory's
 * <split>_*.bin, else its *.bin; a spec that names nothing counts 0, the
 * loader reports it later), and the RSS that loading the run's tokenizer
 * adds (the first of model.init_from's, data.train's and data.val's that is
 * at hand; loaded and freed here, about 0.2 s for GPT-2's). What cannot be
 * read counts 0 (without /proc/self/status the process line is its floor,
 * CT_RUNTIME_PROCESS_MIB); returns CT_OK. */
ct_status ct_run_env_measure(ct_run_env *out, const ct_config *cfg);

/* The device part of env for a run on backend be (ct_backend_has_device_memory:
 * cuda, sim with a capacity; else env->device stays false): its free memory
 * when it started, its total and name; share: the ranks of this machine that
 * use the same GPU (a percentage run.memory_limit is of free / share). CT_OK,
 * or the backend's error. */
ct_status ct_run_env_measure_device(ct_run_env *env, ct_backend *be, int share);

/* What the CUDA backend's workspaces hold in a training step of mc at (B,T)
 * under o (lo: LoRA adapters or NULL), by backend/device.h's rules: the bf16
 * copy of the largest fp32 operand of the step's mixed-precision GEMMs
 * (ct_run_plan_gemms), attention backward's D, and the column sums' partials
 * for the widest per-channel gradient; each grows to its most, never beside an
 * older one. cuBLAS's own workspace is allocated at start, so it is outside
 * the free memory a plan fills. */
size_t ct_run_plan_cuda_ws(const ct_model_config *mc, int B, int T, const ct_model_opts *o,
                           const ct_lora_opts *lo);

/* Makes p a measured plan: runtime = max(env->process, CT_RUNTIME_PROCESS_MIB)
 * + the tokenizer (env->tokenizer, rounded) + CT_RUNTIME_CODE_MIB + the
 * threads but the main one (threads - 1 workers and a prefetch thread when
 * prefetch > 0) x CT_RUNTIME_THREAD_MIB + the I/O buffers +
 * ct_run_plan_gemm (env->gemm's library) + CT_RUNTIME_RESERVE_MIB; shards = env->shards; total
 * follows. Borrows mc and env. */
void ct_run_plan_measure(ct_run_plan *p, const ct_model_config *mc, int prefetch,
                         const ct_run_env *env);

/* Split the plan's AdamW moments over `shards` ranks (ZeRO-1): each keeps
 * ceil(numel / shards) elements of m and v; total follows. shards <= 1 is a
 * no-op. */
void ct_run_plan_shard_optim(ct_run_plan *p, int shards);

/* Bytes this process may use: min(RAM, cgroup memory limit). 0 when unknown. */
size_t ct_memory_available(void);

/* What the run asks for. B = 0 is batch_size=auto; recompute_auto lets the
 * planner choose the policy (opts.recompute is the choice otherwise). */
typedef struct ct_fit_request {
    int B, T, grad_accum;
    int effective_batch; /* with B = 0: sequences per optimizer step (0: unset) */
    bool recompute_auto;
    double refine_share; /* recompute auto's choice of train.recompute_layers keeps
                          * the plan within this share of the limits (the memory
                          * warning's, so a faster backward never costs an alert);
                          * 0: the whole limits */
    ct_model_opts opts;
    ct_lora_opts lora;   /* r == 0: no adapters */
    int prefetch;
    int threads;         /* threads the run uses; 0: the CPUs this process may run on */
    size_t limit;        /* bytes the host part may take */
    size_t device_limit; /* device runs: bytes the device part may take; 0: no device */
    const char *limit_spec; /* for messages: the run.memory_limit text */
    int optim_shards;    /* ZeRO-1: ranks the AdamW moments are split over; 0 or 1: none */
    const ct_run_env *env; /* measured plans (ct_run_plan_measure); NULL: the constant
                            * runtime of ct_run_plan_make */
} ct_fit_request;

/* Resolves the automatic settings and checks the plan against the limit
 * (and, for a device run, its device part against device_limit: a plan fits
 * when both do). batch_size=auto takes the largest micro-batch that fits (a divisor of
 * effective_batch when that is set, which then sets grad_accum; at most 1024
 * otherwise). recompute=auto takes the lightest policy whose largest fitting
 * micro-batch is at least half of the largest any policy allows. On success
 * *out is the plan to run. When nothing fits: CT_ERR_ARG with the plan and the
 * limit in the message and the settings that would fit in the hint. */
ct_status ct_run_plan_fit(const ct_model_config *mc, const ct_fit_request *req, ct_run_plan *out);

/* The LoRA adapters the lora.* keys ask for on a model of shape mc: r = 0
 * when neither lora.r nor lora.init_from is set. With lora.init_from, its
 * adapter_config.json decides r, alpha and the targets (lora.r and
 * lora.targets, when set, must agree with it); otherwise lora.r, lora.alpha
 * and lora.targets (default: q_proj,v_proj for llama, c_attn for gpt2, as
 * PEFT's defaults). lora.dropout and train.seed (the dropout stream) come
 * from cfg. CT_ERR_ARG naming the key, or the adapter file's errors. */
ct_status ct_lora_opts_from_config(const ct_config *cfg, const ct_model_config *mc,
                                   ct_lora_opts *out);
/* train.recompute_layers into o->recompute_layers once o->recompute is set:
 * the count under full (ignored, 0, under the other policies); CT_ERR_ARG
 * when it exceeds mc's blocks. */
ct_status ct_run_recompute_layers(const ct_config *cfg, const ct_model_config *mc,
                                  ct_model_opts *o);
/* The fewest first blocks K in 1 .. n_layer - 1 for full recompute under
 * which fits(K, user) holds, by bisection (a plan shrinks as K grows: one
 * block's kept activations per block re-run); 0 when none of them fits and
 * every block must re-run. recompute=auto's planner and tune share it. */
int ct_recompute_layers_fewest(int n_layer, bool (*fits)(int k, void *user), void *user);
/* Whether lora.base_dtype stores the frozen base in bf16 at GEMM precision
 * prec: bf16, or auto at precision bf16 (whose GEMMs read the base's bf16
 * rounding anyway, so storing that rounding drops fp32 masters a frozen base
 * never updates: 2 bytes a weight instead of 4 + 2 for the copy). Pure. */
bool ct_lora_base_bf16_at(const ct_config *cfg, ct_precision prec);
/* The same at cfg's own train.precision, and its name ("bf16", "fp32"). */
bool ct_lora_base_bf16(const ct_config *cfg);
const char *ct_lora_base_dtype_name(const ct_config *cfg);

/* train.precision of cfg into *out: CT_ERR_ARG for an unknown word, for fp16
 * on the cpu and ref devices and on sim reporting a compute capability of 8.0
 * or more (ct_device_check_fp16; a cuda device is checked once opened), and for
 * bf16 on the cpu device where the run's bf16 GEMMs would run no bf16
 * instructions (ct_gemm_bf16_path_of the library the run would use: oneDNN
 * emulates bf16 on a CPU without AVX512_BF16 or AMX-BF16, and OpenBLAS or a
 * build without oneDNN widens it to fp32; either is slower than fp32), the
 * message saying which and why, unless debug.emulate_bf16 asks for that; the
 * ref and sim devices take bf16 anywhere. Borrows cfg; *out is untouched on
 * error. */
ct_status ct_run_precision(const ct_config *cfg, ct_precision *out);

/* The run's settings from cfg (batch size, recompute, activation dtype,
 * accumulation, effective batch, prefetch, run.threads, run.memory_limit against
 * ct_memory_available, dist.zero over dist.world ranks, 0 counting as 1, the
 * lora.* adapters) planned and fitted for the model shape mc, as `train` and
 * `plan` both do: a measured plan (ct_run_env_measure of this process and
 * data.train/data.val). *limit: run.memory_limit in bytes (of the device's
 * memory on a device run, bounding out->device). batch_size=auto keeps the effective batch: the
 * micro-batch is the largest divisor of train.effective_batch, or when that is
 * 0 of train.grad_accum x the default train.batch_size, whose plan fits, and
 * grad_accum takes the rest. Writes the plan and the limit in bytes.
 * CT_ERR_ARG. */
ct_status ct_run_plan_for_config(const ct_config *cfg, const ct_model_config *mc,
                                 ct_run_plan *out, size_t *limit);
/* The same for one rank of a run of `world` ranks, `local` of them on this
 * machine (the trainer passes the launcher's counts): ranks that share a
 * machine share its memory, so a percentage run.memory_limit is of the
 * available memory divided by local (a byte count stays per rank). On a
 * device run (env->device) run.memory_limit is of the device's free memory
 * (divided by env->device_share) and bounds the plan's device part, and the
 * host part must fit the host's available memory divided by local. */
ct_status ct_run_plan_for_world(const ct_config *cfg, const ct_model_config *mc, int world,
                                int local, ct_run_plan *out, size_t *limit);
/* The same with the measurement env of this process (ct_run_env_measure of
 * cfg; its process part less what the plan counts elsewhere, such as BLAS
 * buffers a benchmark touched before). Borrows env. */
ct_status ct_run_plan_for_env(const ct_config *cfg, const ct_model_config *mc, int world,
                              int local, const ct_run_env *env, ct_run_plan *out, size_t *limit);

#endif
