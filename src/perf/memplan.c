/*
 * Run memory plan, the memory limit and the automatic batch and recompute
 * choice. See memplan.h.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "perf/memplan.h"

#include <glob.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#ifdef __GLIBC__
#include <malloc.h> /* malloc_trim */
#endif

#include <cblas.h>

#include "ctrain/data.h"
#include "ctrain/loader.h"
#include "data/shard/remote.h"
#include "data/shard/shard_remote.h"
#include "io/fileio.h"
#include "perf/hwinfo.h"
#include "backend/cpu/gemm.h"
#include "backend/device.h"

/* The totals from the parts: on a device run the model and the moments are
 * the device's, the rest the host's. */
static void plan_totals(ct_run_plan *p) {
    size_t tensors = p->model.total + p->optim;
    if (p->measured && p->env.device) {
        p->device = tensors + p->dev_ws + p->dev_reserve;
        p->total = p->data + p->shards + p->runtime;
    } else {
        p->device = 0;
        p->total = tensors + p->data + p->shards + p->runtime;
    }
}

ct_status ct_run_plan_make(const ct_model_config *mc, int B, int T, int grad_accum, int prefetch,
                           const ct_model_opts *o, ct_run_plan *out) {
    return ct_run_plan_make_lora(mc, B, T, grad_accum, prefetch, o, NULL, out);
}

ct_status ct_run_plan_make_lora(const ct_model_config *mc, int B, int T, int grad_accum,
                                int prefetch, const ct_model_opts *o, const ct_lora_opts *lo,
                                ct_run_plan *out) {
    memset(out, 0, sizeof *out);
    if (lo && lo->r <= 0) lo = NULL;
    ct_status st = ct_model_plan_memory_lora(mc, B, T, true, o, lo, &out->model);
    if (st) return st;
    out->B = B;
    out->T = T;
    out->grad_accum = grad_accum;
    out->opts = *o;
    if (lo) out->lora = *lo;
    /* moments of what trains: the whole model, or only the adapters */
    out->optim = 2 * out->model.trainable;
    out->optim_shards = 1;
    /* inputs and targets: the prefetch ring's slots and the trainer's own pair */
    out->data = (size_t)(prefetch + 1) * 2 * (size_t)B * T * sizeof(int32_t);
    out->prefetch = prefetch;
    ct_run_plan_set_threads(out, 0);
    return CT_OK;
}

/* threads, or when <= 0 the CPUs this process may run on (what a context
 * with n_threads = 0 uses) */
static int plan_threads(int threads) {
    if (threads > 0) return threads;
    cpu_set_t set;
    CPU_ZERO(&set);
    threads = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    return threads < 1 ? 1 : threads;
}

size_t ct_run_plan_runtime(int threads) {
    threads = plan_threads(threads);
    double mib = CT_RUNTIME_BASE_MIB +
                 (threads == 1 ? CT_RUNTIME_BLAS1_MIB : CT_RUNTIME_BLAS_MIB * threads);
    return (size_t)(mib * 1048576.0);
}

void ct_run_plan_set_threads(ct_run_plan *p, int threads) {
    p->threads = plan_threads(threads);
    if (p->measured) {
        ct_run_plan_measure(p, &p->mc, p->prefetch, &p->env);
        return;
    }
    p->runtime = ct_run_plan_runtime(p->threads);
    p->rt_process = (size_t)(CT_RUNTIME_BASE_MIB * 1048576.0);
    p->rt_code = p->rt_tokenizer = p->rt_threads = p->rt_io = p->rt_reserve = 0;
    p->rt_blas = p->runtime - p->rt_process;
    plan_totals(p);
}

void ct_run_plan_shard_optim(ct_run_plan *p, int shards) {
    if (shards <= 1) return;
    size_t numel = p->model.trainable / sizeof(float); /* the adapters alone under LoRA */
    size_t shard = (numel + (size_t)shards - 1) / (size_t)shards; /* padded, as the trainer */
    p->optim = 2 * shard * sizeof(float);
    p->optim_shards = shards;
    plan_totals(p);
}

/* ------------------------------------------------ OpenBLAS packing buffers */

/* sgemm blocking of OpenBLAS 0.3.x's x86_64 kernel sets (param.h and
 * kernel/setparam-ref.c, float, not Windows): GEMM_P = pa x (L2 KiB >> ps) +
 * pc (the older cores size it by the L2 cache), GEMM_Q, unroll M and N,
 * SWITCH_RATIO, and 6 (AVX-512 kernels) or 3 x unroll_n: the columns of B the
 * serial driver packs at a time. Checked against the peak RSS of runs with
 * each forced by OPENBLAS_CORETYPE on one Intel machine (0.3.21), all but
 * Opteron and the Bulldozer family, whose kernels it cannot run. */
static const struct blas_row {
    const char *core;
    int pa, ps, pc, q, um, un, sr, jj;
} BLAS_TABLE[] = {
    {"Haswell", 0, 0, 320, 320, 8, 4, 8, 3},
    {"Zen", 0, 0, 320, 320, 8, 4, 16, 3},
    {"SkylakeX", 0, 0, 448, 448, 16, 4, 16, 6},
    {"Cooperlake", 0, 0, 640, 320, 16, 4, 16, 6},
    {"SapphireRapids", 0, 0, 640, 320, 16, 4, 16, 6},
    {"Sandybridge", 0, 0, 768, 384, 16, 4, 4, 3},
    {"Nehalem", 0, 0, 504, 512, 4, 8, 4, 3},
    {"Prescott", 56, 7, 0, 128, 8, 4, 2, 3},
    {"Core2", 92, 9, 8, 256, 8, 4, 4, 3},
    {"Penryn", 42, 9, 8, 512, 8, 4, 4, 3},
    {"Dunnington", 42, 9, 8, 768, 8, 4, 4, 3},
    {"Atom", 0, 0, 256, 256, 8, 4, 2, 3},
    {"Opteron", 56, 7, 224, 240, 8, 4, 2, 3},
    {"Barcelona", 0, 0, 448, 224, 8, 4, 2, 3},
    {"Bobcat", 0, 0, 448, 224, 8, 4, 2, 3},
    {"Bulldozer", 0, 0, 448, 224, 16, 2, 2, 3},
    {"Piledriver", 0, 0, 448, 224, 16, 2, 2, 3},
    {"Steamroller", 0, 0, 448, 224, 16, 2, 2, 3},
    {"Excavator", 0, 0, 448, 224, 16, 2, 2, 3},
};

/* OpenBLAS's BUFFER_SIZE (32 << 22) on x86_64 and arm64: one per thread */
#define BLAS_BUFFER_BYTES ((int64_t)32 << 22)

void ct_blas_params_for(ct_blas_params *out, const char *core, size_t l2_bytes) {
    /* unknown kernels: deep blocks and a small P over-count, never under-count much */
    *out = (ct_blas_params){.p = 256, .q = 512, .unroll_m = 16, .unroll_n = 8,
                            .switch_ratio = 4, .jj_max = 48, .known = false};
    snprintf(out->core, sizeof out->core, "%s", core && core[0] ? core : "?");
    for (size_t i = 0; core && i < sizeof BLAS_TABLE / sizeof *BLAS_TABLE; i++) {
        const struct blas_row *r = &BLAS_TABLE[i];
        if (strcmp(core, r->core) != 0) continue;
        /* the L2 size as OpenBLAS reads it, 256 KiB when unknown; P in unroll_m rows */
        int kib = l2_bytes ? (int)(l2_bytes / 1024) : 256;
        int p = r->pa * (kib >> r->ps) + r->pc;
        out->p = p > 0 ? (p + r->um - 1) / r->um * r->um : 64;
        out->q = r->q;
        out->unroll_m = r->um;
        out->unroll_n = r->un;
        out->switch_ratio = r->sr;
        out->jj_max = r->jj * r->un;
        out->known = true;
    }
}

void ct_blas_params_read(ct_blas_params *out) {
    ct_hwinfo h;
    size_t l2 = ct_hwinfo_read(&h) == CT_OK ? h.l2 : 0;
    ct_error_clear();
    ct_blas_params_for(out, openblas_get_corename(), l2);
}

static int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

/* The depth of a packed block for K: Q, or half of K (the threaded driver
 * unrounded, the serial one rounded to unroll_m) when K < 2Q, or K. */
static int64_t blas_min_l(const ct_blas_params *b, int64_t K, bool threaded) {
    if (K >= 2 * (int64_t)b->q) return b->q;
    if (K > b->q) return threaded ? (K + 1) / 2 : round_up(K / 2, b->unroll_m);
    return K;
}

/* Rows of A packed at once from m rows: P, or half of m when m < 2P, or m. */
static int64_t blas_min_i(const ct_blas_params *b, int64_t m) {
    if (m >= 2 * (int64_t)b->p) return b->p;
    if (m > b->p) return round_up(m / 2, b->unroll_m);
    return m;
}

/* OpenBLAS 0.3's sgemm (interface/gemm.c, driver/level3/level3.c and
 * level3_thread.c): below 65536 x 4 multiply-adds, or when the split leaves
 * one thread, the serial driver packs A's blocks (min_i x min_l) and, when A
 * takes more than one block, all of B's min_l x min(N, R) panel (else
 * jj_max columns at a time); threaded, M and N are split over nthreads_m x
 * nthreads_n threads (parts of at least SWITCH_RATIO) and each thread packs
 * its own A block and its share of B's columns. */
int ct_blas_gemm_touch(const ct_blas_params *b, int64_t M, int64_t N, int64_t K, int threads,
                       size_t *per) {
    int64_t P = b->p, Q = b->q, sr = b->switch_ratio;
    int64_t R = ((BLAS_BUFFER_BYTES - round_up(P * Q * 4, 16384)) / (Q * 4) - 15) & ~(int64_t)15;
    if (R < 16) R = 16;
    if (threads > 1 && (double)M * (double)N * (double)K > 65536.0 * 4) {
        int64_t nm = 1, nn = 1;
        if (M >= 2 * sr) {
            nm = threads;
            while (nm > 1 && M < nm * sr) nm /= 2;
        }
        if (N >= sr * nm) {
            nn = (N + sr * nm - 1) / (sr * nm);
            if (nm * nn > threads) nn = threads / nm;
        }
        int64_t tt = nm * nn;
        if (tt > 1) {
            int64_t ml = blas_min_l(b, K, true);
            int64_t mi = blas_min_i(b, (M + nm - 1) / nm);
            int64_t width = (N + tt - 1) / tt;
            if (width > R) width = R;
            size_t bytes = (size_t)(mi * ml + ml * round_up(width, b->unroll_n)) * sizeof(float);
            for (int64_t i = 0; i < tt; i++) per[i] = bytes;
            return (int)tt;
        }
    }
    int64_t ml = blas_min_l(b, K, false), mi = blas_min_i(b, M);
    int64_t cols = M > P ? (N < R ? N : R) : (N < b->jj_max ? N : b->jj_max);
    per[0] = (size_t)(mi * ml + ml * cols) * sizeof(float);
    return 1;
}

size_t ct_blas_gemm_resident(const ct_blas_params *bp, int64_t M, int64_t N, int64_t K,
                             int threads) {
    if (threads < 1) threads = 1;
    size_t *per = calloc((size_t)threads, sizeof *per), total = 0;
    if (!per) return 0;
    int n = ct_blas_gemm_touch(bp, M, N, K, threads, per);
    for (int i = 0; i < n; i++) total += per[i];
    free(per);
    return total;
}

/* ------------------------------------------------ the step's GEMMs */

/* The operand types of the linears' and the head's GEMMs under o: fp32, or
 * under CT_PREC_BF16 fp32 activations (and gradients) times bf16 weights, the
 * weight gradient's B being a bf16 copy of the layer's input. CT_PREC_FP16
 * (GPU only) has the same shapes and 16-bit operand sizes. */
static ct_gemm_type plan_gemm_type(const ct_model_opts *o) {
    return o && o->precision != CT_PREC_FP32 ? CT_GEMM_F32_BF16 : CT_GEMM_F32;
}

static void plan_gemm(ct_plan_gemm_fn fn, void *user, ct_gemm_type t, bool ta, bool tb,
                      int64_t M, int64_t N, int64_t K) {
    ct_plan_gemm g = {.type = t, .ta = ta, .tb = tb, .M = M, .N = N, .K = K};
    fn(&g, user);
}

/* A linear layer (N rows, in -> out) as backend/cpu/matmul.c issues it:
 * forward out (N,out) = inp (N,in) W (out,in)^T, the input gradient
 * dinp (N,in) += dout (N,out) W, and when its weight trains the weight
 * gradient dW (out,in) += dout^T inp. */
static void plan_linear(ct_plan_gemm_fn fn, void *user, ct_gemm_type t, int64_t N, int64_t in,
                        int64_t out, bool dw) {
    plan_gemm(fn, user, t, false, true, N, out, in);
    plan_gemm(fn, user, t, false, false, N, in, out);
    if (dw) plan_gemm(fn, user, t, true, false, out, in, N);
}

/* The LoRA group (0 qkv, 1 attention output, 2 first MLP GEMM, 3 MLP output)
 * of module kind k, from its path. */
static int lora_group(const ct_model_config *mc, int k) {
    const char *path = ct_lora_kind_path(mc, k);
    if (!path) return -1;
    if (strstr(path, "q_proj") || strstr(path, "k_proj") || strstr(path, "v_proj") ||
        strstr(path, "c_attn"))
        return 0;
    if (strstr(path, "o_proj") || strstr(path, "attn.c_proj")) return 1;
    if (strstr(path, "gate") || strstr(path, "up_proj") || strstr(path, "c_fc")) return 2;
    return 3;
}

void ct_run_plan_gemms(const ct_model_config *mc, int B, int T, const ct_model_opts *o,
                       const ct_lora_opts *lo, bool head16, ct_plan_gemm_fn fn, void *user) {
    bool lora = lo && lo->r > 0, dw = !lora; /* a LoRA base is frozen: no weight gradients */
    ct_gemm_type t = plan_gemm_type(o);
    int64_t N = (int64_t)B * T, C = mc->n_embd, F = mc->n_ffn;
    int64_t HS = ct_model_head_dim(mc), q = HS * mc->n_head, kv = HS * mc->n_kv_head;
    int64_t width[4] = {q + 2 * kv, C, mc->mlp != CT_MLP_GELU ? 2 * F : F, C};
    int64_t input[4] = {C, q, C, F};
    for (int g = 0; g < 4; g++) plan_linear(fn, user, t, N, input[g], width[g], dw);
    if (lora) { /* A: in -> r and B: r -> out, both training, fp32 (their own block) */
        bool seen[4] = {false, false, false, false};
        for (int k = 0; k < ct_lora_num_kinds(mc); k++) {
            int g = lora_group(mc, k);
            if (g < 0 || seen[g] || !(lo->targets & (1u << k))) continue;
            seen[g] = true;
            plan_linear(fn, user, CT_GEMM_F32, N, input[g], lo->r, true);
            plan_linear(fn, user, CT_GEMM_F32, N, lo->r, width[g], true);
        }
    }
    /* the head, chunked over rows; its weight trains unless LoRA froze it */
    int chunk = ct_model_head_chunk_rows(mc, (int)N);
    if (o && o->head_chunk_rows > 0) chunk = o->head_chunk_rows < N ? o->head_chunk_rows : (int)N;
    int64_t V = mc->vocab_size;
    if (!head16) {
        plan_linear(fn, user, t, chunk, C, V, dw);
        return;
    }
    plan_gemm(fn, user, CT_GEMM_F32_BF16_C16, false, true, chunk, V, C);
    plan_gemm(fn, user, CT_GEMM_F32_BF16, false, true, chunk, V, C);
    plan_gemm(fn, user, CT_GEMM_BF16, false, false, chunk, C, V);
    if (dw) plan_gemm(fn, user, CT_GEMM_BF16, true, false, V, C, chunk);
}

/* ct_run_plan_gemms' visitor for OpenBLAS: per thread, the most any GEMM
 * packs, and the GEMM layer's fp32 operand copies of the bf16 types (one
 * buffer set: the step's GEMMs are top-level calls, one at a time). */
typedef struct blas_visit {
    const ct_blas_params *bp;
    int threads;
    size_t *per, *tmp;
    size_t convert;
} blas_visit;

static void blas_visit_gemm(const ct_plan_gemm *g, void *user) {
    blas_visit *v = user;
    if (g->M <= 0 || g->N <= 0 || g->K <= 0) return;
    /* OpenBLAS is column-major: a row-major call's M and N swap */
    int n = ct_blas_gemm_touch(v->bp, g->N, g->M, g->K, v->threads, v->tmp);
    for (int i = 0; i < n; i++) v->per[i] = v->tmp[i] > v->per[i] ? v->tmp[i] : v->per[i];
    if (g->type != CT_GEMM_F32) {
        ct_gemm_workspace w;
        ct_gemm_workspace_bytes(CT_GEMM_OPENBLAS, g->type, g->ta, g->tb, (int)g->M, (int)g->N,
                                (int)g->K, &w);
        v->convert = w.convert > v->convert ? w.convert : v->convert;
    }
}

size_t ct_run_plan_blas(const ct_model_config *mc, int B, int T, const ct_model_opts *o,
                        const ct_lora_opts *lo, int threads, const ct_blas_params *bp) {
    if (threads < 1) threads = 1;
    size_t *per = calloc((size_t)threads * 2, sizeof *per);
    if (!per) return 0;
    blas_visit v = {.bp = bp, .threads = threads, .per = per, .tmp = per + threads};
    ct_run_plan_gemms(mc, B, T, o, lo, false, blas_visit_gemm, &v);
    size_t *tmp = v.tmp, total = v.convert;
    for (int i = 0; i < threads; i++) total += per[i];
    /* attention's tile GEMMs run inside the pool, serially in each thread, on
     * their own buffers (64 x 128 tiles of head size HS): the workers' count */
    int64_t HS = ct_model_head_dim(mc), bq = 64, bk = 128;
    size_t att = 0;
    const int64_t shapes[3][3] = {{bk, bq, HS}, {HS, bq, bk}, {HS, bk, bq}};
    for (int s = 0; s < 3; s++) {
        ct_blas_gemm_touch(bp, shapes[s][0], shapes[s][1], shapes[s][2], 1, tmp);
        att = tmp[0] > att ? tmp[0] : att;
    }
    total += (size_t)(threads - 1) * att;
    free(per);
    return total;
}

/* ct_run_plan_gemms' visitor for oneDNN: each part of the one buffer set the
 * step's top-level GEMMs use, at its largest (ct_gemm_workspace_bytes), and
 * the most oneDNN's gemm kernels malloc in one of them on the run's threads. */
typedef struct dnnl_visit {
    ct_gemm_workspace most;
    int threads;
} dnnl_visit;

static void dnnl_visit_gemm(const ct_plan_gemm *g, void *user) {
    dnnl_visit *v = user;
    ct_gemm_workspace *most = &v->most, w;
    if (g->M <= 0 || g->N <= 0 || g->K <= 0) return;
    ct_gemm_workspace_bytes(CT_GEMM_ONEDNN, g->type, g->ta, g->tb, (int)g->M, (int)g->N,
                            (int)g->K, &w);
    if (w.driver) /* the gemm kernels run it: their blocks on the run's threads */
        w.driver = ct_gemm_driver_bytes(ct_gemm_onednn_isa_bits(), g->type == CT_GEMM_F32 ? 4 : 2,
                                        g->ta, g->tb, g->M, g->N, g->K, v->threads);
    if (w.scratch > most->scratch) most->scratch = w.scratch;
    if (w.packed > most->packed) most->packed = w.packed;
    if (w.convert > most->convert) most->convert = w.convert;
    if (w.driver > most->driver) most->driver = w.driver;
}

bool ct_run_plan_logits16(const ct_model_opts *o, const ct_lora_opts *lo, int lib, bool device) {
    if (!o || o->precision != CT_PREC_BF16 || o->fp32_logits) return false;
    /* a head that LoRA's modules_to_save trains runs its own fp32 GEMMs */
    if (lo && lo->r > 0 && (lo->save_modules & CT_LORA_SAVE_HEAD)) return false;
    /* the cpu: where its bf16 GEMMs are oneDNN's native ones (ct_head16_ld_cpu) */
    return device || (lib == CT_GEMM_ONEDNN && ct_gemm_have_bf16());
}

size_t ct_run_plan_onednn(const ct_model_config *mc, int B, int T, const ct_model_opts *o,
                          const ct_lora_opts *lo, int threads, ct_gemm_workspace *parts) {
    if (threads < 1) threads = 1;
    dnnl_visit v = {{0, 0, 0, 0}, threads};
    bool head16 = ct_run_plan_logits16(o, lo, CT_GEMM_ONEDNN, false);
    ct_run_plan_gemms(mc, B, T, o, lo, head16, dnnl_visit_gemm, &v);
    ct_gemm_workspace most = v.most;
    if (parts) *parts = most;
    /* the gemm kernels: no brgemm on these cores, or bf16 emulated on them */
    bool kernels = !ct_gemm_have_brgemm() ||
                   (o && o->precision == CT_PREC_BF16 && !ct_gemm_have_bf16());
    double state = (kernels ? CT_RUNTIME_ONEDNN_GEMM_MIB : CT_RUNTIME_ONEDNN_MIB) +
                   CT_RUNTIME_ONEDNN_THREAD_MIB * (threads - 1);
    /* the gemm kernels' blocks, and as much again: glibc frees a large block
     * into its thread's heap after raising the mmap threshold to its size, and
     * keeps up to twice that (the trim threshold) free at the heap's top, so a
     * run holds between once and twice the blocks (seen: 1.0-2.4 times with
     * oneDNN held to AVX2, run to run) */
    return most.scratch + most.packed + most.convert + 2 * most.driver +
           (size_t)(state * 1048576.0);
}

size_t ct_run_plan_gemm(const ct_model_config *mc, int B, int T, const ct_model_opts *o,
                        const ct_lora_opts *lo, int threads, int lib, const ct_blas_params *bp) {
    if (lib == CT_GEMM_ONEDNN && ct_gemm_have_onednn())
        return ct_run_plan_onednn(mc, B, T, o, lo, threads, NULL);
    return ct_run_plan_blas(mc, B, T, o, lo, threads, bp);
}

/* ---------------------------------------------------- measuring the process */

/* Bytes of the shard files spec names for split, resolved as the loader does
 * (a directory's <split>_*.bin, else its *.bin; a glob; a file); 0 for none. */
static size_t shard_bytes(const char *spec, const char *split) {
    if (!spec || !spec[0]) return 0;
    /* remote shards: the loader's memory tier and fetch buffers, not the data */
    if (ct_remote_is_url(spec)) return (size_t)CT_REMOTE_MEMORY_BYTES;
    struct stat sb;
    char pat[2048];
    glob_t g;
    memset(&g, 0, sizeof g);
    int rc;
    if (stat(spec, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(pat, sizeof pat, "%s/%s_*.bin", spec, split);
        rc = glob(pat, 0, NULL, &g);
        if (rc == GLOB_NOMATCH) {
            globfree(&g);
            memset(&g, 0, sizeof g);
            snprintf(pat, sizeof pat, "%s/*.bin", spec);
            rc = glob(pat, 0, NULL, &g);
        }
    } else if (strpbrk(spec, "*?[")) {
        rc = glob(spec, 0, NULL, &g);
    } else {
        return stat(spec, &sb) == 0 ? (size_t)sb.st_size : 0;
    }
    size_t total = 0;
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++)
        if (stat(g.gl_pathv[i], &sb) == 0) total += (size_t)sb.st_size;
    globfree(&g);
    return total;
}

/* The value of a "Key:   N kB" or "Key: N" line of /proc/self/status. */
static bool status_field(const char *text, const char *key, size_t *out) {
    size_t klen = strlen(key);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, key, klen) != 0 || l[klen] != ':') continue;
        char *end;
        unsigned long long v = strtoull(l + klen + 1, &end, 10);
        if (end == l + klen + 1) return false;
        *out = (size_t)v;
        return true;
    }
    return false;
}

/* This process's resident bytes now. */
static ct_status read_rss(size_t *rss) {
    char *text = NULL;
    size_t len = 0, kib = 0;
    ct_status st = ct_file_read_all("/proc/self/status", &text, &len);
    if (st) return st;
    bool ok = status_field(text, "VmRSS", &kib);
    free(text);
    if (!ok) return CT_ERR(CT_ERR_IO, "/proc/self/status: no VmRSS line to plan memory from");
    *rss = kib * 1024;
    return CT_OK;
}

/* The resident bytes loading the run's tokenizer adds (run_tokenizer_write
 * loads it to copy its files into run.dir; the heap it used stays resident):
 * the first tokenizer at hand of model.init_from, data.train and data.val. */
static size_t tokenizer_bytes(const ct_config *cfg) {
    const char *src[3] = {cfg->model.init_from, cfg->data.train, cfg->data.val};
    for (int i = 0; i < 3; i++) {
        if (!src[i][0]) continue;
        ct_tok_info info;
        ct_status st = i == 0 ? ct_tok_info_of_dir(&info, src[i])
                              : ct_tok_info_of_shards(&info, src[i]);
        if (st || !info.identity[0] || !info.load[0]) {
            ct_error_clear(); /* the trainer reports it */
            continue;
        }
        size_t before, after;
        ct_tokenizer *t = NULL;
#ifdef __GLIBC__
        /* glibc serves blocks below its mmap threshold from the heap, which
         * keeps what they free, and raises that threshold to the size of the
         * first mmap'd block freed: in a trainer (whose start-up GEMM
         * benchmark frees 4 MiB buffers) the tokenizer loads into the heap, and
         * so it does here, whatever this process freed before */
        void *volatile prime = malloc((size_t)4 << 20);
        free(prime);
#endif
        if (read_rss(&before) || ct_tokenizer_load(&t, info.load)) {
            ct_error_clear();
            return 0;
        }
        ct_status rs = read_rss(&after);
        ct_tokenizer_free(t);
#ifdef __GLIBC__
        malloc_trim(0); /* give back what it freed, so the trainer's own load starts afresh */
#endif
        if (rs) ct_error_clear();
        return !rs && after > before ? after - before : 0;
    }
    return 0;
}

/* Starts oneDNN as a run's first GEMM does (the engine, a stream, its
 * dispatcher's code and data pages) with one small matmul, so that the RSS a
 * plan measures holds it in every process alike: `plan`, and `train` after
 * its start-up GEMM benchmark. A bf16 run's start-up benchmark runs bf16
 * GEMMs, whose kernels (without bf16 instructions oneDNN's emulating gemm
 * kernels, ~2-3 MiB of code and state) stay after it: one small bf16 matmul
 * starts them too. The step's own primitives are the plan's. */
static void onednn_start(bool bf16) {
    float a[64 * 64], c[64 * 64];
    uint16_t h[64 * 64];
    for (int i = 0; i < 64 * 64; i++) a[i] = 1.0f / (float)(i + 1), h[i] = 0x3f80;
    ct_sgemm(CT_GEMM_ONEDNN, false, true, 16, 16, 16, 1.0f, a, 16, a, 16, 0.0f, c, 16);
    if (bf16)
        ct_gemm_bf16(CT_GEMM_ONEDNN, false, true, 64, 64, 64, 1.0f, h, 64, h, 64, 0.0f, c, 64);
}

ct_status ct_run_env_measure(ct_run_env *out, const ct_config *cfg) {
    memset(out, 0, sizeof *out);
    /* the library run.gemm names, as a run of train.precision uses it
     * (ct_gemm_lib_of_run: a bf16 run on a CPU with bf16 instructions runs
     * oneDNN); a build without oneDNN refuses `onednn` later, in the
     * trainer; OpenBLAS is what it would run */
    ct_precision prec = CT_PREC_FP32;
    if (cfg && ct_model_precision_from_name(&prec, cfg->train.precision)) ct_error_clear();
    int lib = ct_gemm_lib_of_run(cfg ? cfg->run.gemm : "auto", prec == CT_PREC_BF16);
    out->gemm = lib < 0 ? CT_GEMM_OPENBLAS : lib;
    if (out->gemm == CT_GEMM_ONEDNN) onednn_start(prec == CT_PREC_BF16);
#ifdef __GLIBC__
    /* freed heap pages given back first, in every process alike (`train`
     * trims after its start-up GEMM benchmark), so that what is measured is
     * what the process holds, not what its heap kept of earlier work */
    malloc_trim(0);
#endif
    if (read_rss(&out->process)) { /* no /proc: the plan's floor stands in */
        ct_error_clear();
        out->process = 0;
    }
    ct_blas_params_read(&out->blas);
    if (!cfg) return CT_OK;
    out->shards = shard_bytes(cfg->data.train, "train");
    /* the trainer reads no validation from a directory of training shards */
    if (cfg->data.val[0] && !ct_loader_split_missing(cfg->data.val, "val"))
        out->shards += shard_bytes(cfg->data.val, "val");
    /* mapped shard pages (not remote shards' buffers, counted whole) are page
     * cache: the kernel takes them back under
     * pressure, so a dataset larger than memory still trains. Up to this
     * much of them is counted (small datasets stay resident whole) */
    if (out->shards > (size_t)CT_PLAN_SHARDS_MAX_MIB << 20)
        out->shards = (size_t)CT_PLAN_SHARDS_MAX_MIB << 20;
    out->tokenizer = tokenizer_bytes(cfg);
    return CT_OK;
}

void ct_run_plan_measure(ct_run_plan *p, const ct_model_config *mc, int prefetch,
                         const ct_run_env *env) {
    const size_t MB = (size_t)1 << 20;
    if (&p->env != env) p->env = *env;
    if (&p->mc != mc) p->mc = *mc;
    p->measured = true;
    p->prefetch = prefetch;
    size_t base = (size_t)(CT_RUNTIME_PROCESS_MIB * 1048576.0);
    p->rt_process = env->process > base ? env->process : base;
    p->rt_tokenizer = env->tokenizer ? (env->tokenizer + MB / 2 + MB - 1) / MB * MB : 0;
    p->rt_code = (size_t)(CT_RUNTIME_CODE_MIB * 1048576.0);
    /* the pool's workers and the prefetch thread, which the run may start later */
    int threads = p->threads - 1 + (prefetch > 0 ? 1 : 0);
    p->rt_threads = (size_t)(threads * CT_RUNTIME_THREAD_MIB * 1048576.0);
    size_t w = p->model.trainable; /* what a checkpoint writes */
    p->rt_io = 3 * (w < MB ? w : MB) + (size_t)(CT_RUNTIME_IO_MIB * 1048576.0);
    p->rt_blas = ct_run_plan_gemm(mc, p->B, p->T, &p->opts, &p->lora, p->threads, env->gemm,
                                  &env->blas);
    p->rt_reserve = (size_t)(CT_RUNTIME_RESERVE_MIB * 1048576.0);
    p->runtime = p->rt_process + p->rt_code + p->rt_tokenizer + p->rt_threads + p->rt_io +
                 p->rt_blas + p->rt_reserve;
    p->shards = env->shards;
    p->dev_ws = env->device && env->device_cuda
                    ? ct_run_plan_cuda_ws(mc, p->B, p->T, &p->opts, &p->lora)
                    : 0;
    p->dev_reserve = env->device && env->device_cuda ? (size_t)CT_CUDA_RESERVE_MIB << 20 : 0;
    plan_totals(p);
}

ct_status ct_run_env_measure_device(ct_run_env *env, ct_backend *be, int share) {
    env->device = false;
    if (!ct_backend_has_device_memory(be)) return CT_OK;
    ct_device_info di;
    ct_status st = ct_backend_device_info(be, &di);
    if (st) return st;
    env->device = true;
    env->device_cuda = di.cc_major > 0;
    env->cc_major = di.cc_major;
    env->cc_minor = di.cc_minor;
    env->device_free = di.mem_base_free;
    env->device_total = di.mem_total;
    env->device_share = share > 1 ? share : 1;
    snprintf(env->device_name, sizeof env->device_name, "%s", di.name);
    return CT_OK;
}

/* ct_run_plan_gemms' visitor for the CUDA backend's bf16 operand copy: the
 * largest fp32 A (M x K) of a mixed-precision GEMM */
static void cuda_ws_visit(const ct_plan_gemm *g, void *user) {
    size_t *most = user;
    if (g->type == CT_GEMM_F32 || g->M <= 0 || g->K <= 0) return;
    size_t b = ct_cuda_ws_bf16_bytes((size_t)g->M * (size_t)g->K);
    if (b > *most) *most = b;
}

size_t ct_run_plan_cuda_ws(const ct_model_config *mc, int B, int T, const ct_model_opts *o,
                           const ct_lora_opts *lo) {
    size_t bf16 = 0;
    ct_run_plan_gemms(mc, B, T, o, lo, false, cuda_ws_visit, &bf16);
    int C = mc->n_embd, HS = ct_model_head_dim(mc);
    /* one workspace: the GEMMs' copies and the attention's take turns */
    size_t att16 = ct_cuda_ws_attention_bf16_bytes(B * T, mc->n_head, mc->n_kv_head, HS,
                                                   o->precision == CT_PREC_BF16, mc->attn_pdrop);
    if (att16 > bf16) bf16 = att16;
    int qkv = (mc->n_head + 2 * mc->n_kv_head) * HS;
    int fw = mc->mlp == CT_MLP_SWIGLU ? 2 * mc->n_ffn : mc->n_ffn;
    /* the column sums' partials: their chunks depend on the width summed (the
     * channels, a linear's outputs, the q/k norms' head size), so the most of
     * those the step sums */
    int widths[] = {C, qkv, fw, HS};
    size_t col = 0;
    for (size_t i = 0; i < sizeof widths / sizeof *widths; i++) {
        size_t b = ct_cuda_ws_colsum_bytes(B * T, widths[i]);
        if (b > col) col = b;
    }
    return bf16 + ct_cuda_ws_attention_bytes(B, mc->n_head, T) + col +
           ct_cuda_ws_encoder_bytes(B * T);
}

/* ct_run_plan_make for the request's thread count and its ZeRO sharding. */
static ct_status plan_for(const ct_model_config *mc, const ct_fit_request *r, int B, int accum,
                          const ct_model_opts *o, ct_run_plan *out) {
    ct_status st = ct_run_plan_make_lora(mc, B, r->T, accum, r->prefetch, o, &r->lora, out);
    if (!st) {
        ct_run_plan_set_threads(out, r->threads);
        ct_run_plan_shard_optim(out, r->optim_shards);
        if (r->env) ct_run_plan_measure(out, mc, r->prefetch, r->env);
    }
    return st;
}

size_t ct_memory_available(void) {
    ct_hwinfo h;
    if (ct_hwinfo_read(&h)) return 0;
    return ct_hwinfo_memory_available(&h);
}

/* Whether plan p fits r's limits: the host part, and a device run's device part. */
static bool plan_fits(const ct_fit_request *r, const ct_run_plan *p) {
    return p->total <= r->limit && (!r->device_limit || p->device <= r->device_limit);
}

/* The part of p that r's binding limit bounds, for messages: the device's on
 * a device run (unless the host's is what does not fit). */
static size_t plan_need(const ct_fit_request *r, const ct_run_plan *p) {
    return r->device_limit && p->total <= r->limit ? p->device : p->total;
}

/* The largest micro-batch (a divisor of eff when eff > 0, else <= cap) whose
 * plan fits the limit under opts; 0 when not even 1 does. */
static int largest_fit(const ct_model_config *mc, const ct_fit_request *r, const ct_model_opts *o,
                       ct_run_plan *best) {
    int cap = r->effective_batch > 0 ? r->effective_batch : 1024;
    int found = 0;
    /* plans grow with B, so search upward and stop at the first miss */
    for (int B = 1; B <= cap; B++) {
        if (r->effective_batch > 0 && r->effective_batch % B) continue;
        ct_run_plan p;
        int accum = r->effective_batch > 0 ? r->effective_batch / B : r->grad_accum;
        if (plan_for(mc, r, B, accum, o, &p)) break;
        if (!plan_fits(r, &p)) break;
        *best = p;
        found = B;
    }
    return found;
}

static const double MiB = 1024.0 * 1024.0;

/* Names, for the messages, of the smallest settings that fit, or says none do. */
static void hint_fits(const ct_model_config *mc, const ct_fit_request *r) {
    char hint[512] = "";
    size_t n = 0;
    static const ct_recompute pols[] = {CT_RECOMPUTE_NONE, CT_RECOMPUTE_LIGHT, CT_RECOMPUTE_FULL};
    ct_fit_request q = *r;
    q.effective_batch = 0;
    for (int d = 0; d < CT_ACT_COUNT; d++) {
        for (int i = 0; i < 3; i++) {
            ct_model_opts o = r->opts;
            o.recompute = pols[i];
            o.act_dtype = (ct_act_dtype)d;
            ct_run_plan p = {0};
            int B = largest_fit(mc, &q, &o, &p);
            if (!B || n >= sizeof hint - 120) continue;
            n += (size_t)snprintf(hint + n, sizeof hint - n, "%strain.batch_size=%d "
                                  "train.recompute=%s train.activation_dtype=%s (%.0f MiB)",
                                  n ? "; " : "", B, ct_model_recompute_name(o.recompute),
                                  ct_model_act_dtype_name(o.act_dtype), plan_need(r, &p) / MiB);
        }
    }
    if (n)
        ct_error_hint("settings that fit: %s; or train.batch_size=auto, or raise "
                      "run.memory_limit", hint);
    else
        ct_error_hint("not even train.batch_size=1 with train.recompute=full and bf16 "
                      "activations fits: raise run.memory_limit, shorten train.seq_len or "
                      "choose a smaller model");
}

int ct_recompute_layers_fewest(int n_layer, bool (*fits)(int k, void *user), void *user) {
    int lo = 1, hi = n_layer; /* K = n_layer: every block, which fits */
    while (lo < hi) {
        int k = lo + (hi - lo) / 2;
        if (fits(k, user)) hi = k;
        else lo = k + 1;
    }
    return hi < n_layer ? hi : 0;
}

/* fewest_recomputed's question: does p's micro-batch fit with K blocks re-run. */
typedef struct {
    const ct_model_config *mc;
    const ct_fit_request *r;
    const ct_run_plan *p;
} refine_ctx;
static bool refine_fits(int k, void *user) {
    const refine_ctx *c = user;
    ct_model_opts o = c->p->opts;
    o.recompute_layers = k;
    ct_run_plan q;
    return !plan_for(c->mc, c->r, c->p->B, c->p->grad_accum, &o, &q) && plan_fits(c->r, &q);
}

/* recompute auto chose full for *p: re-run only the first K blocks, the
 * fewest under which p's micro-batch still fits within r's refine_share of
 * the limits, so the memory the limit leaves spares re-runs without raising
 * the memory warning. *p unchanged when every block must re-run. */
static ct_status fewest_recomputed(const ct_model_config *mc, const ct_fit_request *r,
                                   ct_run_plan *p) {
    ct_fit_request soft = *r;
    if (r->refine_share > 0 && r->refine_share < 1) {
        soft.limit = (size_t)((double)r->limit * r->refine_share);
        soft.device_limit = (size_t)((double)r->device_limit * r->refine_share);
    }
    refine_ctx c = {mc, &soft, p};
    int k = ct_recompute_layers_fewest(mc->n_layer, refine_fits, &c);
    if (!k) return CT_OK;
    ct_model_opts o = p->opts;
    o.recompute_layers = k;
    return plan_for(mc, &soft, p->B, p->grad_accum, &o, p);
}

ct_status ct_run_plan_fit(const ct_model_config *mc, const ct_fit_request *r, ct_run_plan *out) {
    static const ct_recompute pols[] = {CT_RECOMPUTE_NONE, CT_RECOMPUTE_LIGHT, CT_RECOMPUTE_FULL};
    ct_run_plan plans[3];
    int fits[3] = {0, 0, 0}, npol = r->recompute_auto ? 3 : 1;
    for (int i = 0; i < npol; i++) {
        ct_model_opts o = r->opts;
        if (r->recompute_auto) o.recompute = pols[i];
        if (r->B > 0) {
            ct_status st = plan_for(mc, r, r->B, r->grad_accum, &o, &plans[i]);
            if (st) return st;
            fits[i] = plan_fits(r, &plans[i]) ? r->B : 0;
        } else {
            fits[i] = largest_fit(mc, r, &o, &plans[i]);
        }
    }
    int best = 0;
    for (int i = 0; i < npol; i++) best = fits[i] > best ? fits[i] : best;
    for (int i = 0; i < npol && best; i++) {
        if (fits[i] && 2 * fits[i] >= best) {
            *out = plans[i];
            if (r->recompute_auto && pols[i] == CT_RECOMPUTE_FULL)
                return fewest_recomputed(mc, r, out);
            return CT_OK;
        }
    }
    /* nothing fits: say what the asked-for settings need */
    ct_run_plan need;
    ct_model_opts o = r->opts;
    if (r->recompute_auto) o.recompute = CT_RECOMPUTE_FULL;
    ct_status st = plan_for(mc, r, r->B > 0 ? r->B : 1, r->grad_accum, &o, &need);
    if (st) return st;
    if (r->device_limit && need.total <= r->limit) {
        st = CT_ERR(CT_ERR_ARG,
                    "the run needs %.0f MiB of device memory on %s (params %.0f, 16-bit copies "
                    "%.0f, grads %.0f, AdamW %.0f, activations %.0f, work %.0f, scratch %.0f, "
                    "workspaces %.0f, reserve %.0f; B=%d T=%d recompute %s, %s activations) but "
                    "run.memory_limit = '%s' of its %.0f MiB free allows %.0f MiB",
                    need.device / MiB, need.env.device_name, need.model.params / MiB,
                    need.model.weights16 / MiB, need.model.grads / MiB, need.optim / MiB,
                    need.model.acts / MiB, need.model.work / MiB, need.model.scratch / MiB,
                    need.dev_ws / MiB, need.dev_reserve / MiB, need.B, need.T,
                    ct_model_recompute_name(o.recompute), ct_model_act_dtype_name(o.act_dtype),
                    r->limit_spec ? r->limit_spec : "?", need.env.device_free / MiB,
                    r->device_limit / MiB);
        hint_fits(mc, r);
        return st;
    }
    st = CT_ERR(CT_ERR_ARG,
                "the run needs %.0f MiB (params %.0f, grads %.0f, AdamW %.0f, activations %.0f, "
                "work %.0f, scratch %.0f, data %.0f, shards %.0f, runtime %.0f; B=%d T=%d "
                "recompute %s, %s activations) but run.memory_limit = '%s' allows %.0f MiB",
                need.total / MiB, need.model.params / MiB, need.model.grads / MiB,
                need.optim / MiB, need.model.acts / MiB, need.model.work / MiB,
                need.model.scratch / MiB, need.data / MiB, need.shards / MiB, need.runtime / MiB,
                need.B, need.T, ct_model_recompute_name(o.recompute),
                ct_model_act_dtype_name(o.act_dtype), r->limit_spec ? r->limit_spec : "?",
                r->limit / MiB);
    hint_fits(mc, r);
    return st;
}

bool ct_lora_base_bf16_at(const ct_config *cfg, ct_precision prec) {
    const char *d = cfg->lora.base_dtype;
    return !strcmp(d, "bf16") || (!strcmp(d, "auto") && prec == CT_PREC_BF16);
}

bool ct_lora_base_bf16(const ct_config *cfg) {
    return ct_lora_base_bf16_at(cfg, strcmp(cfg->train.precision, "bf16") ? CT_PREC_FP32
                                                                             : CT_PREC_BF16);
}

const char *ct_lora_base_dtype_name(const ct_config *cfg) {
    return ct_lora_base_bf16(cfg) ? "bf16" : "fp32";
}

ct_status ct_lora_opts_from_config(const ct_config *cfg, const ct_model_config *mc,
                                   ct_lora_opts *out) {
    memset(out, 0, sizeof *out);
    const char *dir = cfg->lora.init_from;
    bool bf16 = ct_lora_base_bf16(cfg);
    if (cfg->lora.r <= 0 && !dir[0]) {
        if (!strcmp(cfg->lora.base_dtype, "bf16"))
            return CT_ERR(CT_ERR_ARG, "lora.base_dtype = bf16 stores a frozen LoRA base: set "
                          "lora.r (or lora.init_from) too; a full run trains fp32 weights");
        if (cfg->lora.targets[0] || cfg->lora.dropout > 0 || cfg->lora.modules_to_save[0])
            return CT_ERR(CT_ERR_ARG, "lora.%s is set but LoRA is off: set lora.r (or "
                          "lora.init_from) to train adapters", cfg->lora.targets[0] ? "targets"
                          : cfg->lora.dropout > 0 ? "dropout" : "modules_to_save");
        return CT_OK;
    }
    ct_lora_opts o = {0};
    ct_status st;
    if (dir[0]) {
        if ((st = ct_lora_config_load_peft(mc, dir, &o))) {
            ct_error_prefix("lora.init_from = %s", dir);
            return st;
        }
        if (cfg->lora.r > 0 && cfg->lora.r != o.r)
            return CT_ERR(CT_ERR_ARG, "lora.r = %lld, but lora.init_from = %s has r = %d "
                          "(adapter_config.json)", (long long)cfg->lora.r, dir, o.r);
        if (cfg->lora.targets[0]) {
            uint32_t mask = 0;
            if ((st = ct_lora_targets_parse(mc, cfg->lora.targets, "lora.targets", &mask)))
                return st;
            if (mask != o.targets) {
                char got[256];
                ct_lora_targets_format(mc, o.targets, got, sizeof got);
                return CT_ERR(CT_ERR_ARG, "lora.targets = %s, but lora.init_from = %s adapts "
                              "%s (adapter_config.json target_modules)", cfg->lora.targets, dir,
                              got);
            }
        }
    } else {
        o.r = (int)cfg->lora.r;
        o.alpha = (float)cfg->lora.alpha;
        const char *t = cfg->lora.targets[0] ? cfg->lora.targets
                        : mc->arch == CT_ARCH_LLAMA ? "q_proj,v_proj" : "c_attn";
        if ((st = ct_lora_targets_parse(mc, t, "lora.targets", &o.targets))) return st;
    }
    if (cfg->lora.modules_to_save[0]) {
        uint32_t mask = 0;
        if ((st = ct_lora_save_modules_parse(mc, cfg->lora.modules_to_save,
                                             "lora.modules_to_save", &mask)))
            return st;
        if (dir[0] && mask != o.save_modules)
            return CT_ERR(CT_ERR_ARG, "lora.modules_to_save = %s, but lora.init_from = %s saves "
                          "%s%s%s (adapter_config.json modules_to_save)",
                          cfg->lora.modules_to_save, dir,
                          o.save_modules & CT_LORA_SAVE_EMBED ? "embed_tokens " : "",
                          o.save_modules & CT_LORA_SAVE_HEAD ? "lm_head" : "",
                          o.save_modules ? "" : "none");
        o.save_modules = mask;
    }
    o.dropout = (float)cfg->lora.dropout;
    o.seed = (uint64_t)cfg->train.seed;
    o.base_bf16 = bf16;
    if ((st = ct_lora_opts_validate(mc, &o))) return st;
    *out = o;
    return CT_OK;
}

ct_status ct_run_plan_for_config(const ct_config *cfg, const ct_model_config *mc,
                                 ct_run_plan *out, size_t *limit) {
    return ct_run_plan_for_world(cfg, mc, cfg->dist.world > 0 ? (int)cfg->dist.world : 1, 1,
                                 out, limit);
}

ct_status ct_run_precision(const ct_config *cfg, ct_precision *out) {
    ct_precision p;
    ct_status st = ct_model_precision_from_name(&p, cfg->train.precision);
    if (st) return st;
    int kind, index;
    if ((st = ct_config_device(cfg->run.device, &kind, &index))) return st;
    /* fp16 is for GPUs without bf16: refused on a CPU, and on sim when the
     * capability it reports (CT_SIM_COMPUTE_CAPABILITY) has bf16; a cuda
     * device is asked by whoever opens it (ct_run_plan_for_env, the trainer) */
    if (p == CT_PREC_FP16 && (kind == CT_BACKEND_CPU || kind == CT_BACKEND_REF))
        return ct_device_check_fp16(NULL);
    if (p == CT_PREC_FP16 && kind == CT_BACKEND_SIM) {
        ct_device_info di;
        memset(&di, 0, sizeof di);
        snprintf(di.name, sizeof di.name, "sim");
        if ((st = ct_device_sim_capability(&di.cc_major, &di.cc_minor))) return st;
        if ((st = ct_device_check_fp16(&di))) return st;
    }
    /* ref and sim compute bf16 products by their formula: the test backends
     * take bf16 anywhere */
    if (p == CT_PREC_BF16 && kind == CT_BACKEND_CPU && !cfg->debug.emulate_bf16) {
        /* the path the run's bf16 GEMMs would take, asked of oneDNN itself */
        int lib = ct_gemm_lib_of_run(cfg->run.gemm, true);
        char impl[64], why[320];
        ct_gemm_bf16_path path = ct_gemm_bf16_path_of(lib < 0 ? CT_GEMM_OPENBLAS : (ct_gemm_lib)lib,
                                                      impl, sizeof impl);
        if (!ct_gemm_bf16_path_native(path)) {
            ct_hwinfo h;
            ct_hwinfo_read(&h);
            char has[256];
            ct_gemm_bf16_path_describe(path, lib < 0 ? CT_GEMM_OPENBLAS : (ct_gemm_lib)lib, impl,
                                       why, sizeof why);
            st = CT_ERR(CT_ERR_ARG, "train.precision = bf16 would run no bf16 instructions on "
                        "this CPU (%s; bf16 instructions: %s): %s",
                        h.cpu_model[0] ? h.cpu_model : "model unknown",
                        ct_hwinfo_bf16_describe(&h, has, sizeof has), why);
            ct_error_hint("%s; debug.emulate_bf16=true runs bf16 this way anyway, for numerics "
                          "checks only",
                          ct_hwinfo_bf16(&h) != CT_HW_BF16_NONE
                              ? "build with oneDNN (scripts/bootstrap.sh installs libdnnl-dev), "
                                "whose bf16 matmul uses this CPU's bf16 instructions"
                              : "train with train.precision=fp32 (the default) on this machine");
            return st;
        }
    }
    *out = p;
    return CT_OK;
}

ct_status ct_run_recompute_layers(const ct_config *cfg, const ct_model_config *mc,
                                  ct_model_opts *o) {
    int64_t k = cfg->train.recompute_layers;
    o->recompute_layers = 0;
    if (k <= 0 || o->recompute != CT_RECOMPUTE_FULL) return CT_OK;
    if (k > mc->n_layer)
        return CT_ERR(CT_ERR_ARG, "train.recompute_layers = %lld exceeds the model's %d blocks",
                      (long long)k, mc->n_layer);
    o->recompute_layers = (int)k;
    return CT_OK;
}

ct_status ct_run_plan_for_env(const ct_config *cfg, const ct_model_config *mc, int world,
                              int local, const ct_run_env *env, ct_run_plan *out, size_t *limit) {
    ct_fit_request r;
    memset(&r, 0, sizeof r);
    r.optim_shards = cfg->dist.zero ? world : 1;
    r.recompute_auto = strcmp(cfg->train.recompute, "auto") == 0;
    r.refine_share = cfg->alerts.memory_warning;
    ct_status st = ct_model_opts_from_names(&r.opts, r.recompute_auto ? "none" :
                                            cfg->train.recompute, cfg->train.activation_dtype);
    if (!st) st = ct_run_precision(cfg, &r.opts.precision);
    if (st) return st;
    r.opts.fp32_logits = cfg->debug.fp32_logits; /* the head's GEMMs are counted as they run */
    if ((st = ct_run_recompute_layers(cfg, mc, &r.opts))) return st;
    if (r.opts.precision == CT_PREC_FP16 && env && env->device && env->cc_major > 0) {
        ct_device_info di; /* the opened GPU: fp16 only where it has no bf16 */
        memset(&di, 0, sizeof di);
        snprintf(di.name, sizeof di.name, "%s", env->device_name);
        di.cc_major = env->cc_major;
        di.cc_minor = env->cc_minor;
        if ((st = ct_device_check_fp16(&di))) return st;
    }
    r.B = (int)cfg->train.batch_size;
    r.T = (int)cfg->train.seq_len;
    r.grad_accum = (int)cfg->train.grad_accum;
    r.effective_batch = (int)cfg->train.effective_batch;
    r.prefetch = (int)cfg->data.prefetch;
    r.threads = (int)cfg->run.threads;
    r.limit_spec = cfg->run.memory_limit;
    if ((st = ct_lora_opts_from_config(cfg, mc, &r.lora))) return st;
    if (r.B > 0 && r.effective_batch > 0)
        return CT_ERR(CT_ERR_ARG, "train.effective_batch = %d applies to train.batch_size=auto "
                      "only; with train.batch_size = %d set train.grad_accum instead",
                      r.effective_batch, r.B);
    if (r.T > mc->n_ctx) {
        st = CT_ERR(CT_ERR_ARG, "train.seq_len = %d exceeds the model's context n_ctx = %d",
                    r.T, mc->n_ctx);
        ct_error_hint("set train.seq_len=%d (or less), or a model with a longer context",
                      mc->n_ctx);
        return st;
    }
    if (r.B == 0 && r.effective_batch == 0) {
        /* auto keeps the effective batch of the default micro-batch: it only
         * splits it (as HF's auto_find_batch_size only goes down) */
        ct_config *d = malloc(sizeof *d);
        if (!d) return CT_ERR(CT_ERR_OOM, "out of memory planning the run");
        ct_config_default(d);
        int64_t eff = d->train.batch_size * cfg->train.grad_accum;
        free(d);
        if (eff > (1 << 30))
            return CT_ERR(CT_ERR_ARG, "train.batch_size=auto with train.grad_accum = %lld: "
                          "the effective batch %lld is too large", (long long)cfg->train.grad_accum,
                          (long long)eff);
        r.effective_batch = (int)eff;
    }
    size_t avail = ct_memory_available() / (size_t)(local > 1 ? local : 1);
    if (env && env->device) {
        /* run.memory_limit is of the device's memory; the host part must fit
         * the host */
        size_t dev = env->device_free / (size_t)(env->device_share > 1 ? env->device_share : 1);
        if ((st = ct_config_memory_limit(cfg->run.memory_limit, dev, &r.device_limit)))
            return st;
        /* bytes past what the device has would be found out by an allocation */
        if (r.device_limit > dev) r.device_limit = dev;
        r.limit = avail ? avail : SIZE_MAX;
    } else if ((st = ct_config_memory_limit(cfg->run.memory_limit, avail, &r.limit))) {
        return st;
    }
    r.env = env;
    if ((st = ct_run_plan_fit(mc, &r, out))) return st;
    *limit = r.device_limit ? r.device_limit : r.limit;
    return CT_OK;
}

ct_status ct_run_plan_for_world(const ct_config *cfg, const ct_model_config *mc, int world,
                                int local, ct_run_plan *out, size_t *limit) {
    ct_run_env env;
    ct_status st = ct_run_env_measure(&env, cfg);
    if (st) return st;
    return ct_run_plan_for_env(cfg, mc, world, local, &env, out, limit);
}
