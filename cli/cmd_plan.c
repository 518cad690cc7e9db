/*
 * `ctrain plan [--config F] [key=value ...] [--json]`: the memory plan of a
 * training run, computed from the configuration without allocating, for its
 * train.recompute policy, train.activation_dtype and train.precision (bf16 on
 * a CPU without bf16 instructions is refused here as train refuses it),
 * against run.memory_limit
 * (batch_size=auto and recompute=auto are resolved here exactly as `train`
 * resolves them). A plan over the limit is an error (exit 2) whose hint names
 * settings that fit. A tuned profile given as --config plans its settings on the
 * machine it was tuned on, as train runs them (cli_load_config). The process
 * itself is planned as `train` plans it: this process's measured RSS and the
 * run's tokenizer loaded here, the GEMM library's memory for the run's GEMMs
 * (OpenBLAS's packing buffers for the kernel set this process runs, or
 * oneDNN's workspace), and the constants of memplan.h. A run on a device with
 * memory of its own (run.device=cuda, or sim with debug.sim_device_memory)
 * starts that backend, as train does, to read the memory it has: the plan
 * then has a device part, which run.memory_limit bounds.
 * It says which library runs the GEMMs and why, and for a bf16 run which
 * instructions its bf16 GEMMs get (ct_gemm_bf16_path_of).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "backend/ctx.h"
#include "backend/device.h"
#include "backend/cpu/gemm.h"
#include "ctrain/train.h"
#include "perf/memplan.h"

int cmd_plan(int argc, char **argv) {
    bool json = false, print_only;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: ctrain plan [--config FILE.yaml] [key=value ...] [--json]\n");
            return 0;
        }
    }
    ct_config cfg;
    int rc = cli_load_config("plan", argc, argv, &cfg, &print_only);
    if (rc) return rc;
    ct_model_config mc;
    if (cfg.model.init_from[0]) {
        /* the shape comes from the directory's config.json */
        if (ct_model_config_load_hf(&mc, cfg.model.init_from)) return cli_fail("plan");
    } else if (ct_model_config_from(&mc, &cfg)) {
        return cli_fail("plan");
    }
    ct_run_plan rp;
    size_t limit;
    int kind, index;
    if (ct_config_device(cfg.run.device, &kind, &index)) return cli_fail("plan");
    if (kind == CT_BACKEND_CUDA || (kind == CT_BACKEND_SIM && cfg.debug.sim_device_memory[0])) {
        /* the device's memory is read from the backend, started as train starts it */
        ct_ctx_params cp;
        ct_ctx *ctx = NULL;
        ct_run_env env;
        int world = cfg.dist.world > 0 ? (int)cfg.dist.world : 1;
        if (cli_ctx_params(&cfg, ct_device_local_rank(), &cp) || ct_ctx_init(&ctx, &cp) ||
            ct_run_env_measure(&env, &cfg) ||
            ct_run_env_measure_device(&env, ct_ctx_base_backend(ctx), 1) ||
            ct_run_plan_for_env(&cfg, &mc, world, 1, &env, &rp, &limit)) {
            int rc2 = cli_fail("plan");
            ct_ctx_free(ctx);
            return rc2;
        }
        ct_ctx_free(ctx);
    } else if (ct_run_plan_for_config(&cfg, &mc, &rp, &limit)) {
        return cli_fail("plan");
    }
    bool dev = rp.env.device;
    const ct_model_plan *p = &rp.model;
    int B = rp.B, T = rp.T;
    char rc_name[64]; /* "full (the first K of L blocks)" under train.recompute_layers */
    if (rp.opts.recompute_layers > 0)
        snprintf(rc_name, sizeof rc_name, "full (the first %d of %d blocks)",
                 rp.opts.recompute_layers, mc.n_layer);
    else
        snprintf(rc_name, sizeof rc_name, "%s", ct_model_recompute_name(rp.opts.recompute));
    const char *dt_name = ct_model_act_dtype_name(rp.opts.act_dtype);
    const char *prec_name = ct_model_precision_name(rp.opts.precision);
    size_t optim = rp.optim, data = rp.data, total = rp.total;
    /* which library runs the GEMMs and why; a bf16 run's path */
    ct_gemm_lib lib = (ct_gemm_lib)rp.env.gemm;
    int named = ct_gemm_lib_of(cfg.run.gemm);
    char why[256], bwhy[320], impl[64] = "";
    if (named >= 0 && named != (int)lib)
        snprintf(why, sizeof why, "train.precision=bf16 on a CPU with bf16 instructions runs "
                 "oneDNN's bf16 matmul, whatever run.gemm=%s says", cfg.run.gemm);
    else if (!strcmp(cfg.run.gemm, "auto"))
        ct_gemm_auto_why(why, sizeof why);
    else
        snprintf(why, sizeof why, "as run.gemm names it");
    bool bf16 = rp.opts.precision == CT_PREC_BF16;
    bool logits16 = ct_run_plan_logits16(&rp.opts, &rp.lora, lib, dev);
    /* oneDNN's parts of the gemm line (the primitives are the plan's, cached) */
    ct_gemm_workspace gw = {0, 0, 0, 0};
    if (lib == CT_GEMM_ONEDNN)
        ct_run_plan_onednn(&rp.mc, rp.B, rp.T, &rp.opts, &rp.lora, rp.threads, &gw);
    ct_gemm_bf16_path path = ct_gemm_bf16_path_of(lib, impl, sizeof impl);
    ct_gemm_bf16_path_describe(path, lib, impl, bwhy, sizeof bwhy);
    if (json) {
        printf("{\"gemm_why\": ");
        cli_put_json_string(why, strlen(why));
        printf(", \"bf16_gemm\": ");
        if (bf16) {
            printf("\"%s\", \"bf16_gemm_impl\": ", ct_gemm_bf16_path_name(path));
            cli_put_json_string(impl, strlen(impl));
            printf(", \"bf16_gemm_why\": ");
            cli_put_json_string(bwhy, strlen(bwhy));
        } else {
            printf("null");
        }
        printf(", \"logits_dtype\": \"%s\"", logits16 ? "bf16" : "fp32");
        printf(", \"gemm_workspace_bytes\": %zu, \"gemm_driver_bytes\": %zu, ",
               gw.scratch + gw.packed + gw.convert, gw.driver);
        printf("\"recompute_layers\": %d, ", rp.opts.recompute_layers);
        printf("\"batch_size\": %d, \"grad_accum\": %d, \"recompute\": \"%s\", "
               "\"activation_dtype\": \"%s\", \"precision\": \"%s\", \"params_bytes\": %zu, "
               "\"weights16_bytes\": %zu, \"grads_bytes\": %zu, "
               "\"optim_bytes\": %zu, \"acts_bytes\": %zu, \"acts16_bytes\": %zu, "
               "\"work_bytes\": %zu, "
               "\"scratch_bytes\": %zu, \"data_bytes\": %zu, \"shards_bytes\": %zu, "
               "\"runtime_bytes\": %zu, \"process_bytes\": %zu, \"code_bytes\": %zu, "
               "\"tokenizer_bytes\": %zu, \"threads_bytes\": %zu, \"io_bytes\": %zu, "
               "\"reserve_bytes\": %zu, \"blas_bytes\": %zu, \"blas_core\": \"%s\", "
               "\"gemm\": \"%s\", \"threads\": %d, \"total_bytes\": %zu, \"limit_bytes\": %zu, "
               "\"device\": %s, \"device_bytes\": %zu, \"device_workspace_bytes\": %zu, "
               "\"device_reserve_bytes\": %zu, \"device_free_bytes\": %zu, "
               "\"device_total_bytes\": %zu}\n",
               B, rp.grad_accum, ct_model_recompute_name(rp.opts.recompute), dt_name, prec_name,
               p->params, p->weights16, p->grads,
               optim, p->acts, p->acts16, p->work,
               p->scratch, data, rp.shards, rp.runtime, rp.rt_process, rp.rt_code, rp.rt_tokenizer,
               rp.rt_threads, rp.rt_io, rp.rt_reserve, rp.rt_blas, rp.env.blas.core,
               ct_gemm_lib_name((ct_gemm_lib)rp.env.gemm), rp.threads,
               total, limit, dev ? "true" : "false", rp.device, rp.dev_ws, rp.dev_reserve,
               dev ? rp.env.device_free : (size_t)0, dev ? rp.env.device_total : (size_t)0);
        return 0;
    }
    const double MiB = 1024.0 * 1024.0;
    const ct_blas_params *bp = &rp.env.blas;
    printf("memory plan (B=%d, grad_accum %d, T=%d, %d layers, C=%d, V=%d; recompute %s, "
           "activations %s, precision %s)\n",
           B, rp.grad_accum, T, mc.n_layer, mc.n_embd, mc.vocab_size, rc_name, dt_name, prec_name);
    printf("  gemm: %s runs the GEMMs (run.gemm=%s: %s)\n",
           lib == CT_GEMM_ONEDNN ? "oneDNN" : "OpenBLAS", cfg.run.gemm, why);
    if (bf16) printf("  bf16 GEMMs: %s\n", bwhy);
    if (bf16)
        printf("  logits: %s\n", logits16 ? "bf16, as autocast's (the head's GEMM writes them; "
                                           "the loss writes its gradient in place)"
                                         : "fp32 (debug.fp32_logits, emulated bf16, or a head "
                                           "trained in fp32)");
    printf("  params   %10.1f MiB\n", p->params / MiB);
    if (p->weights16)
        printf("  params16 %10.1f MiB  (%s copies of the GEMM weights, precision %s)\n",
               p->weights16 / MiB, prec_name, prec_name);
    printf("  grads    %10.1f MiB\n", p->grads / MiB);
    printf("  optim    %10.1f MiB  (AdamW m, v)\n", optim / MiB);
    if (p->acts16)
        printf("  acts     %10.1f MiB  (kept for backward, %s; %.1f MiB of it the norms' and "
               "MLP activation's outputs as the %s operands of their GEMMs)\n",
               p->acts / MiB, dt_name, p->acts16 / MiB, prec_name);
    else
        printf("  acts     %10.1f MiB  (kept for backward, %s)\n", p->acts / MiB, dt_name);
    printf("  work     %10.1f MiB  (one block in fp32: recomputed and widened activations)\n",
           p->work / MiB);
    printf("  scratch  %10.1f MiB  (gradient activations, logits chunk)\n", p->scratch / MiB);
    printf("  data     %10.1f MiB  (token buffers: prefetch ring and the batch)\n", data / MiB);
    printf("  shards   %10.1f MiB  (mapped token files of data.train and data.val; remote: buffers)\n",
           rp.shards / MiB);
    printf("  runtime  %10.1f MiB  (the process itself:)\n", rp.runtime / MiB);
    printf("    process   %7.1f MiB  (program, libraries, heap: measured when planning, at "
           "least %.1f)\n", rp.rt_process / MiB, CT_RUNTIME_PROCESS_MIB);
    printf("    code      %7.1f MiB  (library code the training loop touches first)\n",
           rp.rt_code / MiB);
    printf("    tokenizer %7.1f MiB  (measured: the heap of loading the run's tokenizer, which "
           "train copies into run.dir)\n", rp.rt_tokenizer / MiB);
    printf("    threads   %7.1f MiB  (stacks of the pool's workers and the prefetch thread; "
           "%d compute threads)\n", rp.rt_threads / MiB, rp.threads);
    printf("    io        %7.1f MiB  (the checkpoint writer's buffers)\n", rp.rt_io / MiB);
    if (rp.env.gemm == CT_GEMM_ONEDNN)
        printf("    gemm      %7.1f MiB  (oneDNN: the workspace of this run's matmul primitives "
               "%.1f, the blocks its gemm kernels malloc per call %.1f, and the library's "
               "state)\n", rp.rt_blas / MiB, (gw.scratch + gw.packed + gw.convert) / MiB,
               gw.driver / MiB);
    else
        printf("    blas      %7.1f MiB  (OpenBLAS %s packing buffers for this run's GEMMs, P=%d "
               "Q=%d%s)\n", rp.rt_blas / MiB, bp->core, bp->p, bp->q,
               bp->known ? "" : "; kernels not in the table: counted high");
    printf("    reserve   %7.1f MiB  (what varies from run to run: the heap's layout)\n",
           rp.rt_reserve / MiB);
    if (!dev) {
        printf("  total    %10.1f MiB  of run.memory_limit %.1f MiB (%s)\n", total / MiB,
               limit / MiB, cfg.run.memory_limit);
        return 0;
    }
    printf("  host     %10.1f MiB  (data, shards and runtime: params to scratch and AdamW are "
           "the device's)\n", total / MiB);
    printf("device %s: %.1f MiB free when the backend had started (of %.1f MiB)\n",
           rp.env.device_name, rp.env.device_free / MiB, rp.env.device_total / MiB);
    printf("  tensors  %10.1f MiB  (params, 16-bit copies, grads, acts, work, scratch, AdamW "
           "above)\n", (p->total + optim) / MiB);
    printf("  workspaces %8.1f MiB  (the CUDA kernels' and the 16-bit GEMM operands')\n",
           rp.dev_ws / MiB);
    printf("  reserve  %10.1f MiB  (kernel code loaded on first launch, allocation rounding)\n",
           rp.dev_reserve / MiB);
    printf("  total    %10.1f MiB  of run.memory_limit %.1f MiB (%s of the free device memory)\n",
           rp.device / MiB, limit / MiB, cfg.run.memory_limit);
    return 0;
}
