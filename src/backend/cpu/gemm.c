/*
 * The GEMM layer (see gemm.h): dispatch to OpenBLAS or oneDNN, oneDNN's
 * matmul primitives in an LRU cache, the per-thread buffers they and the bf16
 * conversions use, and the scalar bf16 reference.
 * Row-major with transposes as flags maps to oneDNN as plain strides: A (M,K)
 * has strides {lda, 1}, or {1, lda} when transposed, likewise B (K,N); alpha
 * is an output scale and beta a sum post-op. The caller's operands are never
 * rearranged; the one copy is a plain B packed into this layer's buffer
 * (prim_create says why).
 * The cache and the buffers are the process's one GEMM state, behind one
 * mutex: ct_sgemm's signature carries no context, and the state is a memo
 * (results never depend on it), like oneDNN's own primitive cache.
 * Leaves out: oneDNN 3.x's matmul API (GEMM_PRIM is 0 there).
 */
#include "backend/cpu/gemm.h"
#include "backend/cpu/tile.h"
#include "backend/cpu/vmath.h"

#include "core/dtype.h"

#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef CT_USE_OPENMP
#include <omp.h>
#endif
#ifdef CT_HAVE_DNNL
#include <dnnl.h>
#if DNNL_VERSION_MAJOR == 2
#define GEMM_PRIM 1
#endif
#endif
#ifndef GEMM_PRIM
#define GEMM_PRIM 0
#endif

#define GEMM_CACHE_CAP 128 /* primitives kept; a GPT-2 or LLaMA step uses ~20-30 */
#define GEMM_SETS 64       /* per-thread buffer sets, at most */
#define GEMM_ALIGN 64
/* A plain B up to this size is packed per call (see prim_create) */
#define GEMM_PACK_MAX ((size_t)64 << 20)

/* ------------------------------------------------------------ reference */

/* A is fp32 (Af, rounded to bf16 as it is read) or bf16 (Ah). */
static void ref_mixed(bool ta, bool tb, int M, int N, int K, float alpha, const float *Af,
                      const uint16_t *Ah, int lda, const uint16_t *B, int ldb, float beta, float *C,
                      int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) {
                size_t x = ta ? (size_t)k * lda + i : (size_t)i * lda + k;
                uint16_t ah = Ah ? Ah[x] : ct_f32_to_bf16(Af[x]);
                float b = ct_bf16_to_f32(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
                acc += ct_bf16_to_f32(ah) * b; /* the product of two bf16 is exact in fp32 */
            }
            float *c = &C[(size_t)i * ldc + j];
            *c = beta == 0.0f ? alpha * acc : alpha * acc + beta * *c;
        }
}

void ct_gemm_bf16_ref(bool ta, bool tb, int M, int N, int K, float alpha, const uint16_t *A,
                      int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc) {
    ref_mixed(ta, tb, M, N, K, alpha, NULL, A, lda, B, ldb, beta, C, ldc);
}

/* ------------------------------------------------------------ state */

/* A primitive's type beside CT_GEMM_F32 and CT_GEMM_BF16: bf16 A, B and C
 * (what CT_GEMM_F32_BF16_C16 runs once A is rounded). */
#define KEY_BF16_C16 CT_GEMM_TYPE_COUNT

/* What makes two calls the same primitive. All int32, so no padding. */
typedef struct gemm_key {
    int32_t M, N, K, lda, ldb, ldc;
    int32_t ta, tb, type, nthr; /* type: CT_GEMM_F32, CT_GEMM_BF16 or KEY_BF16_C16 */
    uint32_t alpha, beta;       /* bit patterns */
} gemm_key;

typedef struct gemm_entry {
    gemm_key key;
#if GEMM_PRIM
    dnnl_primitive_t prim;          /* the matmul */
    dnnl_primitive_t pack;          /* the reorder packing a plain B, or NULL: B read in place */
    const_dnnl_primitive_desc_t pd, pack_pd; /* owned by prim, pack */
#endif
    size_t scratch; /* bytes of user scratchpad (the larger of the two primitives') */
    size_t packed;  /* bytes of packed B; 0 without pack */
    uint64_t used;  /* tick of its last use (LRU) */
    int busy;       /* calls running it now: never evicted while > 0 */
    bool live;
} gemm_entry;

/* One calling thread's buffers, taken for the length of a call. */
typedef struct gemm_set {
    bool busy;
    void *scratch;  /* oneDNN scratchpad, scratch_n bytes */
    size_t scratch_n;
    void *conv;     /* operand copies (bf16 A, or fp32 A and B), conv_n bytes */
    size_t conv_n;
    void *pack;     /* packed B, pack_n bytes */
    size_t pack_n;
#if GEMM_PRIM
    dnnl_stream_t stream; /* a stream per set: streams are not shared across threads */
#endif
} gemm_set;

typedef struct gemm_state {
    pthread_mutex_t mu;
#if GEMM_PRIM
    dnnl_engine_t eng; /* created on first use */
    bool eng_failed;
#endif
    gemm_entry ent[GEMM_CACHE_CAP];
    gemm_set set[GEMM_SETS];
    uint64_t tick;
    ct_gemm_stats st;
} gemm_state;

static gemm_state g_gemm = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void *aligned_bytes(size_t n) {
    void *p = NULL;
    n = (n + GEMM_ALIGN - 1) / GEMM_ALIGN * GEMM_ALIGN;
    return posix_memalign(&p, GEMM_ALIGN, n ? n : GEMM_ALIGN) == 0 ? p : NULL;
}

/* Grows *buf to at least `need` bytes (contents not kept). Caller holds mu
 * and owns the set. */
static bool grow(void **buf, size_t *have, size_t need, size_t *total) {
    if (need <= *have) return true;
    void *p = aligned_bytes(need);
    if (!p) return false;
    free(*buf);
    *total += need - *have;
    *buf = p;
    *have = need;
    return true;
}

/* Grows set s to at least scratch, conv and pack bytes (and gives it a
 * stream once the engine exists). Caller holds mu and owns s. */
static bool set_fit(gemm_state *g, gemm_set *s, size_t scratch, size_t conv, size_t pack) {
    if (!grow(&s->scratch, &s->scratch_n, scratch, &g->st.scratch_bytes) ||
        !grow(&s->conv, &s->conv_n, conv, &g->st.convert_bytes) ||
        !grow(&s->pack, &s->pack_n, pack, &g->st.packed_bytes))
        return false;
#if GEMM_PRIM
    if (g->eng && !s->stream &&
        dnnl_stream_create(&s->stream, g->eng, dnnl_stream_default_flags) != dnnl_success) {
        s->stream = NULL;
        return false;
    }
#endif
    return true;
}

/* A free buffer set, fitted (set_fit); NULL when none is free or memory ran
 * out. Caller holds mu. */
static gemm_set *set_take(gemm_state *g, size_t scratch, size_t conv, size_t pack) {
    for (int i = 0; i < GEMM_SETS; i++) {
        gemm_set *s = &g->set[i];
        if (s->busy) continue;
        if (i >= g->st.buffers) g->st.buffers = i + 1;
        if (!set_fit(g, s, scratch, conv, pack)) return NULL;
        s->busy = true;
        return s;
    }
    return NULL;
}

static void set_give(gemm_state *g, gemm_set *s) {
    pthread_mutex_lock(&g->mu);
    s->busy = false;
    pthread_mutex_unlock(&g->mu);
}

static int gemm_threads(void) {
#ifdef CT_USE_OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ------------------------------------------------------------ primitives */

#if GEMM_PRIM
/* Creates e's primitives for k: the matmul, and when B is plain (not
 * transposed) and at most GEMM_PACK_MAX bytes, the reorder that packs it into
 * the layout the matmul picks. oneDNN 2.6's brgemm reads a plain B in place
 * at 45-95% of dnnl_sgemm's speed (2.3x slower at N = 3072: 140 against 320
 * GFLOP/s, 2 threads); packed, it runs at 90-97% of it, the reorder included
 * (0.7 ms for 9 MiB). Larger B (the vocabulary head's input gradient) is read
 * in place. False when oneDNN refuses k. */
static bool prim_create(dnnl_engine_t eng, const gemm_key *k, gemm_entry *e) {
    dnnl_data_type_t dt = k->type != CT_GEMM_F32 ? dnnl_bf16 : dnnl_f32;
    dnnl_data_type_t cdt = k->type == KEY_BF16_C16 ? dnnl_bf16 : dnnl_f32;
    size_t esize = k->type != CT_GEMM_F32 ? 2 : 4;
    dnnl_dims_t ad = {k->M, k->K}, bd = {k->K, k->N}, cd = {k->M, k->N};
    dnnl_dims_t as = {k->ta ? 1 : k->lda, k->ta ? k->lda : 1};
    dnnl_dims_t bs = {k->tb ? 1 : k->ldb, k->tb ? k->ldb : 1};
    dnnl_dims_t cs = {k->ldc, 1};
    dnnl_memory_desc_t a, b, bany, c;
    dnnl_matmul_desc_t d;
    dnnl_primitive_attr_t attr = NULL, rattr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL, rpd = NULL;
    bool ok = false, pack = !k->tb && (size_t)k->K * k->N * esize <= GEMM_PACK_MAX;
    float alpha, beta;
    memcpy(&alpha, &k->alpha, sizeof alpha);
    memcpy(&beta, &k->beta, sizeof beta);
    e->prim = e->pack = NULL;
    e->scratch = e->packed = 0;
    if (dnnl_memory_desc_init_by_strides(&a, 2, ad, dt, as) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&b, 2, bd, dt, bs) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&bany, 2, bd, dt, dnnl_format_tag_any) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&c, 2, cd, cdt, cs) != dnnl_success ||
        dnnl_primitive_attr_create(&attr) != dnnl_success ||
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success)
        goto done;
    // alpha scales the product; beta adds the old C (a sum post-op)
    if (alpha != 1.0f && dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha) != dnnl_success)
        goto done;
    if (beta != 0.0f &&
        (dnnl_post_ops_create(&po) != dnnl_success || dnnl_post_ops_append_sum(po, beta) != dnnl_success ||
         dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success))
        goto done;
    // B's layout left to oneDNN when it is to be packed; refused, B as it is
    for (int tries = pack ? 2 : 1; tries > 0 && !pd; tries--) {
        bool any = tries == 2;
        if (dnnl_matmul_desc_init(&d, &a, any ? &bany : &b, NULL, &c) != dnnl_success ||
            dnnl_primitive_desc_create(&pd, &d, attr, eng, NULL) != dnnl_success)
            pd = NULL;
        else
            pack = any;
    }
    if (!pd) goto done;
    e->scratch = dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
    const dnnl_memory_desc_t *wmd = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    if (pack && !dnnl_memory_desc_equal(wmd, &b)) {
        if (dnnl_primitive_attr_create(&rattr) != dnnl_success ||
            dnnl_primitive_attr_set_scratchpad_mode(rattr, dnnl_scratchpad_mode_user) != dnnl_success ||
            dnnl_reorder_primitive_desc_create(&rpd, &b, eng, wmd, eng, rattr) != dnnl_success ||
            dnnl_primitive_create(&e->pack, rpd) != dnnl_success)
            goto done;
        size_t rs = dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(rpd, dnnl_query_scratchpad_md, 0));
        e->scratch = rs > e->scratch ? rs : e->scratch;
        e->packed = dnnl_memory_desc_get_size(wmd);
        dnnl_primitive_get_primitive_desc(e->pack, &e->pack_pd);
    }
    if (dnnl_primitive_create(&e->prim, pd) != dnnl_success) goto done;
    dnnl_primitive_get_primitive_desc(e->prim, &e->pd);
    ok = true;
done:
    if (!ok) {
        if (e->pack) dnnl_primitive_destroy(e->pack);
        if (e->prim) dnnl_primitive_destroy(e->prim);
        e->prim = e->pack = NULL;
    }
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (rattr) dnnl_primitive_attr_destroy(rattr);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return ok;
}

static void entry_destroy(gemm_entry *e) {
    if (e->pack) dnnl_primitive_destroy(e->pack);
    if (e->prim) dnnl_primitive_destroy(e->prim);
    e->prim = e->pack = NULL;
}

/* The cache entry for k, created when missing (the LRU idle one goes when
 * full); NULL when oneDNN refuses k or every entry is busy. Caller holds mu. */
static gemm_entry *entry_get(gemm_state *g, const gemm_key *k) {
    if (!g->eng && !g->eng_failed && dnnl_engine_create(&g->eng, dnnl_cpu, 0) != dnnl_success) {
        g->eng = NULL;
        g->eng_failed = true;
    }
    if (!g->eng) return NULL;
    gemm_entry *slot = NULL;
    for (int i = 0; i < GEMM_CACHE_CAP; i++) {
        gemm_entry *e = &g->ent[i];
        if (e->live && !memcmp(&e->key, k, sizeof *k)) {
            e->used = ++g->tick;
            g->st.hits++;
            return e;
        }
        if (!e->live) {
            if (!slot || slot->live) slot = e;
        } else if (!e->busy && (!slot || (slot->live && e->used < slot->used))) {
            slot = e;
        }
    }
    if (!slot) return NULL;
    gemm_entry fresh = {.key = *k, .used = ++g->tick, .live = true};
    if (!prim_create(g->eng, k, &fresh)) {
        g->st.refused++;
        return NULL;
    }
    if (slot->live) {
        entry_destroy(slot);
        g->st.evicted++;
        g->st.primitives--;
    }
    *slot = fresh;
    g->st.created++;
    g->st.primitives++;
    return slot;
}

/* Executes prim with the n memories of (args, mds, ptrs) on set s's stream. */
static bool exec(gemm_state *g, gemm_set *s, const_dnnl_primitive_t prim, int n, const int *args,
                 const dnnl_memory_desc_t **mds, void **ptrs) {
    dnnl_memory_t m[4] = {NULL, NULL, NULL, NULL};
    dnnl_exec_arg_t ea[4];
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        ok = dnnl_memory_create(&m[i], mds[i], g->eng, ptrs[i]) == dnnl_success;
        ea[i] = (dnnl_exec_arg_t){args[i], m[i]};
    }
    ok = ok && dnnl_primitive_execute(prim, s->stream, n, ea) == dnnl_success &&
         dnnl_stream_wait(s->stream) == dnnl_success;
    for (int i = 0; i < n; i++)
        if (m[i]) dnnl_memory_destroy(m[i]);
    return ok;
}

/* Runs entry e with set s (both taken by the caller): B packed first when e
 * packs it. The two primitives share the scratchpad, one after the other. */
static bool entry_run(gemm_state *g, const gemm_entry *e, gemm_set *s, const void *A, const void *B,
                      void *C) {
    const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(e->pd, dnnl_query_scratchpad_md, 0);
    if (e->pack) {
        const dnnl_memory_desc_t *rsp = dnnl_primitive_desc_query_md(e->pack_pd, dnnl_query_scratchpad_md, 0);
        int args[3] = {DNNL_ARG_FROM, DNNL_ARG_TO, DNNL_ARG_SCRATCHPAD};
        const dnnl_memory_desc_t *mds[3] = {dnnl_primitive_desc_query_md(e->pack_pd, dnnl_query_src_md, 0),
                                            dnnl_primitive_desc_query_md(e->pack_pd, dnnl_query_dst_md, 0), rsp};
        void *ptrs[3] = {(void *)B, s->pack, s->scratch};
        if (!exec(g, s, e->pack, dnnl_memory_desc_get_size(rsp) ? 3 : 2, args, mds, ptrs)) return false;
        B = s->pack;
    }
    int args[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD};
    const dnnl_memory_desc_t *mds[4] = {dnnl_primitive_desc_query_md(e->pd, dnnl_query_src_md, 0),
                                        dnnl_primitive_desc_query_md(e->pd, dnnl_query_weights_md, 0),
                                        dnnl_primitive_desc_query_md(e->pd, dnnl_query_dst_md, 0), sp};
    void *ptrs[4] = {(void *)A, (void *)B, C, s->scratch};
    return exec(g, s, e->prim, dnnl_memory_desc_get_size(sp) ? 4 : 3, args, mds, ptrs);
}
#endif

/* Runs the primitive for k on A, B, C. With `held`, the caller already took
 * that buffer set (its conv buffer holds A). False when no primitive ran. */
static bool prim_call(gemm_state *g, const gemm_key *k, const void *A, const void *B, void *C,
                      gemm_set *held) {
#if GEMM_PRIM
    pthread_mutex_lock(&g->mu);
    gemm_entry *e = entry_get(g, k);
    gemm_set *s = NULL;
    if (e) {
        if (held)
            s = set_fit(g, held, e->scratch, 0, e->packed) ? held : NULL;
        else
            s = set_take(g, e->scratch, 0, e->packed);
    }
    if (e && s) e->busy++;
    pthread_mutex_unlock(&g->mu);
    if (!e || !s) {
        if (s && !held) set_give(g, s);
        return false;
    }
    bool ok = entry_run(g, e, s, A, B, C);
    pthread_mutex_lock(&g->mu);
    e->busy--;
    if (!held) s->busy = false;
    pthread_mutex_unlock(&g->mu);
    return ok;
#else
    (void)g, (void)k, (void)A, (void)B, (void)C, (void)held;
    return false;
#endif
}

static gemm_key key_of(int type, bool ta, bool tb, int M, int N, int K, float alpha,
                       int lda, int ldb, float beta, int ldc) {
    return (gemm_key){.M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc, .ta = ta,
                      .tb = tb, .type = type, .nthr = gemm_threads(), .alpha = f32_bits(alpha),
                      .beta = f32_bits(beta == 0.0f ? 0.0f : beta)};
}

/* rows x cols of src (row stride lds) rounded to dense bf16 rows of dst */
static void round_rows(uint16_t *dst, const float *src, int rows, int cols, int lds) {
    if (lds == cols) {
        ct_f32_to_bf16_array(dst, src, (size_t)rows * cols);
        return;
    }
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static) if ((size_t)rows * cols >= ((size_t)1 << 16))
#endif
    for (int r = 0; r < rows; r++)
        ct_f32_to_bf16_array(dst + (size_t)r * cols, src + (size_t)r * lds, (size_t)cols);
}

/* ct_gemm_colsums' columns [o0, o0 + w) (w a multiple of VN, at most
 * COLSUM_W), 64 rows to a block as the header says. */
#define COLSUM_W 256
static void colsum_window(float *dbias, uint16_t *g16, const float *G, int N, int OC, int o0,
                          int w) {
    double acc[COLSUM_W] = {0};
    for (int n0 = 0; n0 < N; n0 += 64) {
        int n1 = N - n0 < 64 ? N : n0 + 64;
        vnf blk[COLSUM_W / VN];
        for (int v = 0; v < w / VN; v++) blk[v] = vn_set1(0.0f);
        for (int n = n0; n < n1; n++) {
            const float *g = G + (size_t)n * OC + o0;
            for (int v = 0; v < w / VN; v++) {
                vnf x;
                memcpy(&x, g + v * VN, sizeof x);
                blk[v] += x;
                if (!g16) continue;
                vnh h = vn_bf16(x);
                memcpy(g16 + (size_t)n * OC + o0 + v * VN, &h, sizeof h);
            }
        }
        for (int v = 0; v < w / VN; v++)
            for (int l = 0; l < VN; l++) acc[v * VN + l] += blk[v][l];
    }
    for (int j = 0; j < w; j++) dbias[o0 + j] += (float)acc[j];
}

void ct_gemm_colsums(float *dbias, uint16_t *g16, const float *G, int N, int OC) {
    int nv = OC / 16, ov = nv * 16;
#ifdef CT_USE_OPENMP
#pragma omp parallel
#endif
    {
        int t = 0, nt = 1;
#ifdef CT_USE_OPENMP
        t = omp_get_thread_num(), nt = omp_get_num_threads();
#endif
        /* this thread's run of 16-column vectors, a window at a time */
        int o1 = (int)((int64_t)nv * (t + 1) / nt) * 16;
        for (int o = (int)((int64_t)nv * t / nt) * 16; o < o1; o += COLSUM_W)
            colsum_window(dbias, g16, G, N, OC, o, o1 - o < COLSUM_W ? o1 - o : COLSUM_W);
        /* the last columns, fewer than 16: summed in double, rounded whole */
        for (int o = ov + t; o < OC; o += nt) {
            double a = 0.0;
            for (int n = 0; n < N; n++) {
                float x = G[(size_t)n * OC + o];
                a += x;
                if (g16) g16[(size_t)n * OC + o] = ct_t16_round(x);
            }
            dbias[o] += (float)a;
        }
    }
}

/* rows x cols bf16 (row stride lds) widened to dense fp32 rows of dst */
static void widen_rows(float *dst, const uint16_t *src, int rows, int cols, int lds) {
    if (lds == cols) {
        ct_bf16_to_f32_array(dst, src, (size_t)rows * cols);
        return;
    }
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static) if ((size_t)rows * cols >= ((size_t)1 << 16))
#endif
    for (int r = 0; r < rows; r++)
        ct_bf16_to_f32_array(dst + (size_t)r * cols, src + (size_t)r * lds, (size_t)cols);
}

bool ct_gemm_primitive(ct_gemm_type type, bool ta, bool tb, int M, int N, int K, float alpha,
                       const void *A, int lda, const void *B, int ldb, float beta, void *C,
                       int ldc) {
    gemm_state *g = &g_gemm;
    if (type == CT_GEMM_F32_BF16 || type == CT_GEMM_F32_BF16_C16) {
        if (!GEMM_PRIM) return false;
        int ar = ta ? K : M, ac = ta ? M : K;
        size_t need = (size_t)ar * ac * sizeof(uint16_t);
        pthread_mutex_lock(&g->mu);
        gemm_set *s = set_take(g, 0, need, 0);
        pthread_mutex_unlock(&g->mu);
        if (!s) return false;
        round_rows(s->conv, A, ar, ac, lda);
        int kt = type == CT_GEMM_F32_BF16 ? CT_GEMM_BF16 : KEY_BF16_C16;
        gemm_key k = key_of(kt, ta, tb, M, N, K, alpha, ac, ldb, beta, ldc);
        bool ok = prim_call(g, &k, s->conv, B, C, s);
        set_give(g, s);
        return ok;
    }
    gemm_key k = key_of(type, ta, tb, M, N, K, alpha, lda, ldb, beta, ldc);
    return prim_call(g, &k, A, B, C, NULL);
}

/* ------------------------------------------------------------ entry points */

static void blas_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M,
                N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

#ifdef CT_HAVE_DNNL
static bool in_parallel(void) {
#ifdef CT_USE_OPENMP
    return omp_in_parallel() != 0;
#else
    return false;
#endif
}

/* Whether op(A), op(B) and C are dense, the only layout oneDNN 2.x's brgemm
 * matmul takes (anything else gets its gemm kernels, dnnl_sgemm's own). */
static bool dense(bool ta, bool tb, int M, int N, int K, int lda, int ldb, int ldc) {
    return lda == (ta ? M : K) && ldb == (tb ? K : N) && ldc == N;
}
#endif

void ct_sgemm(ct_gemm_lib lib, bool ta, bool tb, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
#ifdef CT_HAVE_DNNL
    if (lib == CT_GEMM_ONEDNN) {
        if (!in_parallel() && dense(ta, tb, M, N, K, lda, ldb, ldc) &&
            ct_gemm_primitive(CT_GEMM_F32, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
            return;
        if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C,
                       ldc) == dnnl_success)
            return;
        /* oneDNN refused the arguments: OpenBLAS computes the same product */
    }
#else
    (void)lib;
#endif
    blas_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* OpenBLAS on bf16 operands: widen them (Ah, B) or round A's fp32 values to
 * bf16 (Af) into fp32 copies in a buffer set, then cblas_sgemm: the same
 * products as oneDNN's, in another summation order. Falls back to the
 * reference when no buffer can be had. */
static void blas_bf16(bool ta, bool tb, int M, int N, int K, float alpha, const float *Af,
                      const uint16_t *Ah, int lda, const uint16_t *B, int ldb, float beta, float *C,
                      int ldc) {
    gemm_state *g = &g_gemm;
    int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    size_t na = (size_t)ar * ac, nb = (size_t)br * bc;
    pthread_mutex_lock(&g->mu);
    gemm_set *s = set_take(g, 0, (na + nb) * sizeof(float), 0);
    pthread_mutex_unlock(&g->mu);
    if (!s) { /* no buffer (more threads than sets, or out of memory): the reference */
        ref_mixed(ta, tb, M, N, K, alpha, Af, Ah, lda, B, ldb, beta, C, ldc);
        return;
    }
    float *aw = s->conv, *bw = aw + na;
    if (Ah) {
        widen_rows(aw, Ah, ar, ac, lda);
    } else if (lda == ac) {
        ct_f32_round_bf16_array(aw, Af, na);
    } else {
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static) if (na >= ((size_t)1 << 16))
#endif
        for (int r = 0; r < ar; r++)
            ct_f32_round_bf16_array(aw + (size_t)r * ac, Af + (size_t)r * lda, (size_t)ac);
    }
    widen_rows(bw, B, br, bc, ldb);
    blas_sgemm(ta, tb, M, N, K, alpha, aw, ac, bw, bc, beta, C, ldc);
    set_give(g, s);
}

void ct_gemm_bf16(ct_gemm_lib lib, bool ta, bool tb, int M, int N, int K, float alpha,
                  const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta, float *C,
                  int ldc) {
    if (lib == CT_GEMM_ONEDNN &&
        ct_gemm_primitive(CT_GEMM_BF16, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
        return;
    blas_bf16(ta, tb, M, N, K, alpha, NULL, A, lda, B, ldb, beta, C, ldc);
}

void ct_gemm_f32_bf16(ct_gemm_lib lib, bool ta, bool tb, int M, int N, int K, float alpha,
                      const float *A, int lda, const uint16_t *B, int ldb, float beta, float *C,
                      int ldc) {
    if (lib == CT_GEMM_ONEDNN &&
        ct_gemm_primitive(CT_GEMM_F32_BF16, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
        return;
    blas_bf16(ta, tb, M, N, K, alpha, A, NULL, lda, B, ldb, beta, C, ldc);
}

/* ct_gemm_f32_bf16_out16 on OpenBLAS: A rounded and B widened into fp32
 * copies once, then CT_GEMM_OUT16_ROWS rows of C at a time into an fp32 block
 * of the same buffer set, rounded into C16. No buffer: the reference. */
static void blas_out16(bool ta, bool tb, int M, int N, int K, const float *A, int lda,
                       const uint16_t *B, int ldb, uint16_t *C16, int ldc) {
    gemm_state *g = &g_gemm;
    int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    int rb = M < CT_GEMM_OUT16_ROWS ? M : CT_GEMM_OUT16_ROWS;
    size_t na = (size_t)ar * ac, nb = (size_t)br * bc, nc = (size_t)rb * N;
    pthread_mutex_lock(&g->mu);
    gemm_set *s = set_take(g, 0, (na + nb + nc) * sizeof(float), 0);
    pthread_mutex_unlock(&g->mu);
    if (!s) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float c;
                ref_mixed(ta, tb, 1, 1, K, 1.0f, A + (ta ? (size_t)i : (size_t)i * lda), NULL,
                          lda, B + (tb ? (size_t)j * ldb : (size_t)j), ldb, 0.0f, &c, 1);
                C16[(size_t)i * ldc + j] = ct_f32_to_bf16(c);
            }
        return;
    }
    float *aw = s->conv, *bw = aw + na, *cw = bw + nb;
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static) if (na >= ((size_t)1 << 16))
#endif
    for (int r = 0; r < ar; r++)
        ct_f32_round_bf16_array(aw + (size_t)r * ac, A + (size_t)r * lda, (size_t)ac);
    widen_rows(bw, B, br, bc, ldb);
    for (int r0 = 0; r0 < M; r0 += rb) {
        int rows = M - r0 < rb ? M - r0 : rb;
        blas_sgemm(ta, tb, rows, N, K, 1.0f, ta ? aw + r0 : aw + (size_t)r0 * ac, ac, bw, bc,
                   0.0f, cw, N);
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static) if ((size_t)rows * N >= ((size_t)1 << 16))
#endif
        for (int r = 0; r < rows; r++)
            ct_f32_to_bf16_array(C16 + (size_t)(r0 + r) * ldc, cw + (size_t)r * N, (size_t)N);
    }
    set_give(g, s);
}

void ct_gemm_f32_bf16_out16(ct_gemm_lib lib, bool ta, bool tb, int M, int N, int K,
                            const float *A, int lda, const uint16_t *B, int ldb, uint16_t *C16,
                            int ldc) {
    if (lib == CT_GEMM_ONEDNN && ct_gemm_have_bf16() &&
        ct_gemm_primitive(CT_GEMM_F32_BF16_C16, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C16,
                          ldc))
        return;
    blas_out16(ta, tb, M, N, K, A, lda, B, ldb, C16, ldc);
}

void ct_gemm_bwd_f32_bf16(ct_gemm_lib lib, int N, int C, int OC, const float *G,
                          const uint16_t *W16, const uint16_t *X16, float *dinp, float *dweight,
                          float *dbias) {
    bool di = dinp != NULL, dw = dweight != NULL;
#if GEMM_PRIM
    gemm_state *g = &g_gemm;
    gemm_set *s = NULL;
    if (lib == CT_GEMM_ONEDNN && di && dw) {
        pthread_mutex_lock(&g->mu);
        s = set_take(g, 0, (size_t)N * OC * sizeof(uint16_t), 0);
        pthread_mutex_unlock(&g->mu);
    }
    if (s) {
        if (dbias)
            ct_gemm_colsums(dbias, s->conv, G, N, OC);
        else
            round_rows(s->conv, G, N, OC, OC);
        dbias = NULL;
        gemm_key ki = key_of(CT_GEMM_BF16, false, false, N, C, OC, 1.0f, OC, C, 1.0f, C);
        gemm_key kw = key_of(CT_GEMM_BF16, true, false, OC, C, N, 1.0f, OC, C, 1.0f, C);
        di = !prim_call(g, &ki, s->conv, W16, dinp, s);
        dw = !prim_call(g, &kw, s->conv, X16, dweight, s);
        set_give(g, s);
    }
#endif
    /* what is left: each product with its own rounding */
    if (di) ct_gemm_f32_bf16(lib, false, false, N, C, OC, 1.0f, G, OC, W16, C, 1.0f, dinp, C);
    if (dw) ct_gemm_f32_bf16(lib, true, false, OC, C, N, 1.0f, G, OC, X16, C, 1.0f, dweight, C);
    if (dbias) ct_gemm_colsums(dbias, NULL, G, N, OC);
}

/* ------------------------------------------------------------ accounting */

/* oneDNN 2.6's gemm kernels (src/cpu/x64/gemm/gemm_driver.cpp), as far as
 * the memory they malloc per call: a column-major m x n x k problem (the
 * row-major call's N x M x K: oneDNN swaps the operands) either runs the
 * "nocopy" kernels, which copy nothing, or packs blocks of A (m_padd x
 * k_padd) and B (k_padd x n_padd) per thread, the threads splitting m, n or
 * both (set_thread_opts_nopack), or sharing one copy of A (the 1D copy-A
 * scheme). The blocking is gemm_info.cpp's for the ISA. */
typedef struct gemm_blocking {
    int64_t um, un, bm, bn, bk, bk_trad;
} gemm_blocking;

static int64_t rnd_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static int64_t div_up(int64_t x, int64_t m) { return (x + m - 1) / m; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static int64_t k_padd_of(const gemm_blocking *b, int64_t k) {
    return k <= b->bk_trad ? max64(128, k) : k < 2 * b->bk ? (k + 1) / 2 : b->bk;
}
static int64_t m_padd_of(const gemm_blocking *b, int64_t m) {
    return rnd_up(min64(max64(m, b->um), b->bm), b->um);
}
static int64_t n_padd_of(const gemm_blocking *b, int64_t n) {
    return rnd_up(min64(max64(n, b->un), b->bn), b->un);
}

/* nocopy_checker_avx2 / _avx512 for dense operands (lda, ldb, ldc as the
 * column-major call has them). */
static bool driver_nocopy(int isa_bits, int nthr, bool ta, bool tb, int64_t m, int64_t n,
                          int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
    if (isa_bits < 512) {
        if (1.0 / m + 1.0 / n >= 0.0038) return true;
        if (m <= 378 && n <= 378 && k >= nthr * 378) return false;
        if (m >= nthr * 378 && k >= nthr * 378) return false;
        if (m <= 128 && n <= 128) return true;
        if (!tb) {
            if (n <= nthr * 16 || k <= nthr * 2 || (m <= 64 && n >= nthr * 16)) return true;
        } else if (n <= nthr || k <= nthr) {
            return true;
        }
        return false;
    }
    bool nn = !ta && !tb, nt = !ta && tb, tn = ta && !tb;
    bool lda_bad = lda % 256 == 0, ld_bad = lda_bad || ldb % 256 == 0 || ldc % 256 == 0;
    bool lda_verybad = lda % 1024 == 0;
    if (nthr == 1 && tn && m > 100 &&
        ((m < 1200 && n < 200 && k < 1200) || (lda_bad && ldb % 256 == 0)))
        return false;
    if (nthr <= 8 && nn && lda_verybad && k > 500 && n > 100) return false;
    if (1.0 / m + 1.0 / n >= 0.00196 && !(lda_verybad && nt)) return true;
    if (ld_bad && m >= 32 && (n > 16 || (n == 16 && (k >= 6400 || ta || m == 4096))))
        return false;
    if (m <= 378 && n <= 378 && k >= nthr * 378) return false;
    if (m >= nthr * 378 && k >= nthr * 378) return false;
    if (!tb) return m <= nthr * 28 || n <= nthr * 28 || k <= nthr;
    return (m <= nthr * 28 && m >= n) || n <= nthr * 28 || k <= nthr;
}

size_t ct_gemm_driver_bytes(int isa_bits, size_t elem, bool ta, bool tb, int64_t M, int64_t N,
                            int64_t K, int threads) {
    if (M <= 0 || N <= 0 || K <= 0) return 0;
    int nthr = threads > 0 ? threads : 1;
    /* column-major: m = N, n = M, op(A) the weights (row-major B), op(B) the input */
    int64_t m = N, n = M, k = K;
    bool cta = tb, ctb = ta;
    gemm_blocking b;
    if (elem == 2) /* bf16 without AMX (AMX runs brgemm): avx512_core's */
        b = (gemm_blocking){48, 8, 9984, 384, 768, 384};
    else if (isa_bits >= 512)
        b = (gemm_blocking){48, 8, 9984, 384, 384, 384};
    else if (isa_bits >= 256)
        b = (gemm_blocking){24, 4, 10000, 384, 192, 256};
    else
        b = (gemm_blocking){16, 4, 4096, 256, 256, 256};
    const size_t page = 4096;
    int64_t kp = k_padd_of(&b, k);
    if (elem == 2) {
        /* bf16 (emulated or native gemm kernels): no nocopy path; its threading
         * is not modelled: every thread counted with whole blocks, and a
         * k-partition's copy of C (m, n <= 768, k >= 2048) */
        size_t one = (size_t)(m_padd_of(&b, m) * kp + kp * n_padd_of(&b, n)) * elem + 2 * page;
        if (m <= 768 && n <= 768 && k >= 2048) one += (size_t)(m * n) * sizeof(float);
        return one * (size_t)nthr;
    }
    if (driver_nocopy(isa_bits, nthr, cta, ctb, m, n, k, cta ? k : m, ctb ? n : k, m)) return 0;
    if (nthr == 1) /* one thread packs its blocks of the whole problem */
        return (size_t)(m_padd_of(&b, m) * kp + kp * n_padd_of(&b, n)) * elem + 2 * page;
    /* set_thread_opts_nopack for sgemm: 2D (m in up to 4 parts), the shared
     * copy of A, or 1D along the larger dimension */
    const int64_t N2D = 384, M2D = 384;
    bool two_d;
    if (isa_bits < 512 && n <= N2D && m >= nthr * M2D)
        two_d = false;
    else
        two_d = (n > nthr * N2D || n <= nthr * N2D / 2) && m >= 2 * M2D;
    bool copy_a = isa_bits >= 512 ? m >= 1000 && n >= nthr * (N2D / 4)
                                  : m >= 1000 && n >= 4000;
    if (copy_a) two_d = false;
    int nm = 1, nn = nthr;
    if (two_d) {
        while (nn % 2 == 0 && (n / nthr > N2D || n / nn <= N2D / 2) && m / nm >= 2 * M2D &&
               nm < 4)
            nm *= 2, nn /= 2;
    } else if (copy_a) {
        /* one copy of A for all threads, m_padd x min(threads, 10) rows of it
         * at most, and each thread's block of B */
        int64_t ma = min64(m_padd_of(&b, m) * min64(nthr, 10), rnd_up(m, b.um));
        return (size_t)(ma * kp) * elem + page +
               (size_t)nthr * ((size_t)(kp * n_padd_of(&b, div_up(n, nthr))) * elem + 2 * page);
    } else {
        int64_t veclen = isa_bits >= 512 ? 16 : 8;
        if (m > n && (m >= nthr * veclen || n < nthr)) nm = nthr, nn = 1; /* rows: split m */
        /* else columns: split n, every thread packs all of m */
    }
    int64_t mt = div_up(m, nm), nt = div_up(n, nn);
    return (size_t)nthr *
           ((size_t)(m_padd_of(&b, mt) * kp + kp * n_padd_of(&b, nt)) * elem + 2 * page);
}

int ct_gemm_onednn_isa_bits(void) {
#if GEMM_PRIM
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    if ((isa & (unsigned)dnnl_cpu_isa_avx512_core) == (unsigned)dnnl_cpu_isa_avx512_core)
        return 512;
    if ((isa & (unsigned)dnnl_cpu_isa_avx2) == (unsigned)dnnl_cpu_isa_avx2) return 256;
    return 128;
#else
    return 0;
#endif
}

size_t ct_gemm_workspace_bytes(ct_gemm_lib lib, ct_gemm_type type, bool ta, bool tb, int M, int N,
                               int K, ct_gemm_workspace *parts) {
    ct_gemm_workspace w = {0, 0, 0, 0};
    if (M <= 0 || N <= 0 || K <= 0 || type < 0 || type >= CT_GEMM_TYPE_COUNT) goto out;
    size_t a = (size_t)M * K, b = (size_t)K * N;
    bool c16 = type == CT_GEMM_F32_BF16_C16;
#if GEMM_PRIM
    if (lib == CT_GEMM_ONEDNN && (!c16 || ct_gemm_have_bf16())) {
        gemm_state *g = &g_gemm;
        int pt = type == CT_GEMM_F32 ? CT_GEMM_F32 : c16 ? KEY_BF16_C16 : CT_GEMM_BF16;
        bool ok = true;
        pthread_mutex_lock(&g->mu);
        for (int beta = 0; beta <= (c16 ? 0 : 1); beta++) {
            gemm_key k = key_of(pt, ta, tb, M, N, K, 1.0f, ta ? M : K, tb ? K : N, (float)beta, N);
            gemm_entry *e = entry_get(g, &k);
            ok &= e != NULL;
            if (e && e->scratch > w.scratch) w.scratch = e->scratch;
            if (e && e->packed > w.packed) w.packed = e->packed;
            /* the gemm kernels (not brgemm) malloc their own blocks per call */
            const char *impl = NULL;
            if (e && dnnl_primitive_desc_query(e->pd, dnnl_query_impl_info_str, 0, &impl) ==
                         dnnl_success && impl && !strncmp(impl, "gemm:", 5)) {
                size_t d = ct_gemm_driver_bytes(ct_gemm_onednn_isa_bits(),
                                                pt == CT_GEMM_F32 ? 4 : 2, ta, tb, M, N, K,
                                                gemm_threads());
                if (d > w.driver) w.driver = d;
            }
        }
        pthread_mutex_unlock(&g->mu);
        if (ok) {
            w.convert = type != CT_GEMM_F32 && type != CT_GEMM_BF16 ? a * sizeof(uint16_t) : 0;
            goto out;
        }
        w = (ct_gemm_workspace){0, 0, 0, 0}; /* refused: the call falls back to OpenBLAS */
    }
#else
    (void)lib, (void)ta, (void)tb;
#endif
    w.convert = type == CT_GEMM_F32 ? 0 : (a + b) * sizeof(float);
    if (c16) w.convert += (size_t)(M < CT_GEMM_OUT16_ROWS ? M : CT_GEMM_OUT16_ROWS) * N * 4;
out:
    if (parts) *parts = w;
    return w.scratch + w.packed + w.convert;
}

void ct_gemm_stats_get(ct_gemm_stats *out) {
    pthread_mutex_lock(&g_gemm.mu);
    *out = g_gemm.st;
    pthread_mutex_unlock(&g_gemm.mu);
}

void ct_gemm_release(void) {
    gemm_state *g = &g_gemm;
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < GEMM_CACHE_CAP; i++) {
#if GEMM_PRIM
        if (g->ent[i].live) entry_destroy(&g->ent[i]);
#endif
        g->ent[i] = (gemm_entry){0};
    }
    for (int i = 0; i < GEMM_SETS; i++) {
        free(g->set[i].scratch);
        free(g->set[i].conv);
        free(g->set[i].pack);
#if GEMM_PRIM
        if (g->set[i].stream) dnnl_stream_destroy(g->set[i].stream);
#endif
        g->set[i] = (gemm_set){0};
    }
    g->st = (ct_gemm_stats){0};
    pthread_mutex_unlock(&g->mu);
}

/* ------------------------------------------------------------ names */

bool ct_gemm_have_onednn(void) {
#ifdef CT_HAVE_DNNL
    return true;
#else
    return false;
#endif
}

bool ct_gemm_have_bf16(void) {
#if GEMM_PRIM
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    unsigned want = (unsigned)dnnl_cpu_isa_avx512_core_bf16;
    return (isa & want) == want;
#else
    return false;
#endif
}

bool ct_gemm_have_brgemm(void) {
#if GEMM_PRIM
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    unsigned want = (unsigned)dnnl_cpu_isa_avx512_core;
    return (isa & want) == want;
#else
    return false;
#endif
}

ct_gemm_bf16_path ct_gemm_bf16_path_classify(const char *impl, bool native_isa) {
    if (!impl || !impl[0]) return CT_GEMM_BF16_WIDENED;
    if (strstr(impl, "amx")) return CT_GEMM_BF16_AMX;
    if (strstr(impl, "bf16")) return CT_GEMM_BF16_NATIVE;
    /* the gemm kernels use vdpbf16ps where the ISA has it, else emulate */
    if (!strncmp(impl, "gemm:jit", 8))
        return native_isa ? CT_GEMM_BF16_NATIVE : CT_GEMM_BF16_EMULATED;
    return CT_GEMM_BF16_EMULATED;
}

ct_gemm_bf16_path ct_gemm_bf16_path_of(ct_gemm_lib lib, char *impl, size_t cap) {
    const char *name = NULL;
#if GEMM_PRIM
    /* a mid-sized dense shape, as the step's GEMMs are (brgemm's) */
    if (lib == CT_GEMM_ONEDNN) {
        gemm_state *g = &g_gemm;
        gemm_key k = key_of(CT_GEMM_BF16, false, true, 64, 64, 64, 1.0f, 64, 64, 0.0f, 64);
        pthread_mutex_lock(&g->mu);
        gemm_entry *e = entry_get(g, &k);
        if (e && dnnl_primitive_desc_query(e->pd, dnnl_query_impl_info_str, 0, &name) !=
                     dnnl_success)
            name = NULL;
        if (impl && cap) snprintf(impl, cap, "%s", name ? name : "");
        pthread_mutex_unlock(&g->mu);
        return ct_gemm_bf16_path_classify(name, ct_gemm_have_bf16());
    }
#else
    (void)lib;
#endif
    if (impl && cap) impl[0] = 0;
    return ct_gemm_bf16_path_classify(name, false);
}

const char *ct_gemm_bf16_path_name(ct_gemm_bf16_path p) {
    static const char *const names[CT_GEMM_BF16_PATH_COUNT] = {"amx", "avx512_bf16", "emulated",
                                                               "widened"};
    return p >= 0 && p < CT_GEMM_BF16_PATH_COUNT ? names[p] : "widened";
}

const char *ct_gemm_bf16_path_describe(ct_gemm_bf16_path p, ct_gemm_lib lib, const char *impl,
                                       char *buf, size_t cap) {
    char k[80] = "";
    if (impl && impl[0]) snprintf(k, sizeof k, " (%s)", impl);
    switch (p) {
    case CT_GEMM_BF16_AMX:
        snprintf(buf, cap, "AMX tiles: oneDNN's bf16 matmul%s", k);
        break;
    case CT_GEMM_BF16_NATIVE:
        snprintf(buf, cap, "AVX512_BF16: oneDNN's bf16 matmul%s", k);
        break;
    case CT_GEMM_BF16_EMULATED:
        snprintf(buf, cap, "emulated: no AVX512_BF16 or AMX on this CPU, so oneDNN's bf16 "
                 "matmul%s widens in registers and multiplies in fp32 (no speed-up over fp32)", k);
        break;
    default:
        snprintf(buf, cap, "widened: %s, so bf16 GEMMs widen both operands to fp32 copies, "
                 "then OpenBLAS's sgemm (no speed-up over fp32)",
                 !ct_gemm_have_onednn() ? "this build has no oneDNN"
                 : lib == CT_GEMM_OPENBLAS
                     ? (ct_gemm_have_bf16() ? "run.gemm=openblas, which has no bf16 GEMM here "
                                              "(a bf16 run uses oneDNN's instead)"
                                            : "no AVX512_BF16 or AMX on this CPU, and run.gemm "
                                              "runs OpenBLAS, which has no bf16 GEMM here")
                     : "no AVX512_BF16 or AMX on this CPU, and oneDNN has no bf16 matmul on "
                       "these cores");
        break;
    }
    return buf;
}

bool ct_gemm_bf16_path_native(ct_gemm_bf16_path p) {
    return p == CT_GEMM_BF16_AMX || p == CT_GEMM_BF16_NATIVE;
}

ct_gemm_lib ct_gemm_lib_for_run(ct_gemm_lib lib, bool bf16, bool native) {
    return bf16 && native ? CT_GEMM_ONEDNN : lib;
}

int ct_gemm_lib_of_run(const char *name, bool bf16) {
    int lib = ct_gemm_lib_of(name);
    if (lib < 0) return lib;
    /* oneDNN's ISA is asked only for a bf16 run: it maps pages of the library
     * that an fp32 run on OpenBLAS never touches (and its plan would count) */
    return (int)ct_gemm_lib_for_run((ct_gemm_lib)lib, bf16, bf16 && ct_gemm_have_bf16());
}

const char *ct_gemm_lib_name(ct_gemm_lib lib) {
    return lib == CT_GEMM_ONEDNN ? "onednn" : "openblas";
}

int ct_gemm_blas_bits(const char *core) {
    static const char *const w512[] = {"skylakex", "cooperlake", "sapphirerapids", NULL};
    static const char *const w256[] = {"haswell", "zen", "sandybridge", "bulldozer", "piledriver",
                                       "steamroller", "excavator", NULL};
    char c[64];
    size_t n = 0;
    for (; core && core[n] && n + 1 < sizeof c; n++)
        c[n] = (char)(core[n] >= 'A' && core[n] <= 'Z' ? core[n] - 'A' + 'a' : core[n]);
    c[n] = 0;
    for (int i = 0; w512[i]; i++)
        if (!strcmp(c, w512[i])) return 512;
    for (int i = 0; w256[i]; i++)
        if (!strcmp(c, w256[i])) return 256;
    return 128;
}

int ct_gemm_cpu_bits(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return 512;
    if (__builtin_cpu_supports("avx")) return 256;
#endif
    return 128;
}

ct_gemm_lib ct_gemm_auto_pick(bool onednn_built, int blas_bits, int cpu_bits) {
    return onednn_built && blas_bits < cpu_bits ? CT_GEMM_ONEDNN : CT_GEMM_OPENBLAS;
}

const char *ct_gemm_auto_why(char *buf, size_t cap) {
    const char *core = openblas_get_corename();
    int bb = ct_gemm_blas_bits(core), cb = ct_gemm_cpu_bits();
    if (!ct_gemm_have_onednn())
        snprintf(buf, cap, "this build has no oneDNN");
    else if (ct_gemm_auto_pick(true, bb, cb) == CT_GEMM_ONEDNN)
        snprintf(buf, cap, "OpenBLAS's %s kernels use %d-bit vectors on %d-bit cores, oneDNN's "
                 "the full width", core, bb, cb);
    else
        snprintf(buf, cap, "OpenBLAS's %s kernels use the cores' full %d-bit width", core, cb);
    return buf;
}

int ct_gemm_lib_of(const char *name) {
    if (!name || !strcmp(name, "auto") || !name[0])
        return (int)ct_gemm_auto_pick(ct_gemm_have_onednn(),
                                      ct_gemm_blas_bits(openblas_get_corename()),
                                      ct_gemm_cpu_bits());
    if (!strcmp(name, "openblas")) return CT_GEMM_OPENBLAS;
    if (!strcmp(name, "onednn")) return ct_gemm_have_onednn() ? CT_GEMM_ONEDNN : -1;
    return -1;
}
