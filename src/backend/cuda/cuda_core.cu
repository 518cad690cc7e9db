/*
 * The CUDA backend's memory, stream and the small kernels: device buffers
 * (cudaMalloc, zero-filled, counted under their tag in the context),
 * pinned staging buffers, copies on the backend's stream, events from a
 * ring, the reductions the trainer needs (sum and sum of squares in double,
 * per-block partials of a fixed grid summed on the host in block order, so
 * they are deterministic), bf16 conversions, dropout and fused AdamW with the
 * float arithmetic of the ref backend (torch 1.13's single-tensor AdamW).
 * Never managed memory. Leaves out: a caching allocator (the model and the
 * trainer allocate once) and multi-stream overlap.
 */
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_small.cuh"

/* ------------------------------------------------------------ errors */

extern "C" void cuda_latch(ct_backend *be, int code, const char *what, const char *detail) {
    cuda_latch_state(cuda_st(be), code, what, detail);
}

/* A kernel that faults: one thread writing where no memory is. */
__global__ void k_fault(float *p) { p[threadIdx.x] = 1.0f; }

void cuda_fault_inject(cuda_state *s) {
    k_fault<<<1, 1, 0, (cudaStream_t)s->stream>>>((float *)(uintptr_t)16);
}

/* ------------------------------------------------------------ device */

extern "C" int ct_cuda_device_count(char *why, size_t why_size) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        if (why) snprintf(why, why_size, "%s", cudaGetErrorString(e));
        cudaGetLastError(); /* clear it */
        return 0;
    }
    if (n == 0 && why) snprintf(why, why_size, "the driver reports no CUDA device");
    return n;
}

extern "C" void ct_cuda_device_name(int dev, char *name, size_t name_size) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) == cudaSuccess) snprintf(name, name_size, "%s", prop.name);
    else if (name_size) name[0] = 0;
}

#define CT_STR2(x) #x
#define CT_STR(x) CT_STR2(x)

/* dlopen's the CUDA library `base` (e.g. "libcublas"): the soname the loader
 * knows (ldconfig, LD_LIBRARY_PATH), else $CUDA_HOME's, /usr/local/cuda's or
 * the toolkit's directory this build was made with (a build carried to
 * another machine finds that machine's toolkit). NULL when none loads; so
 * (so_size) gets the soname tried first. */
void *cuda_lib_open(const char *base, char *so, size_t so_size) {
    snprintf(so, so_size, "%s.so." CT_STR(CUBLAS_VER_MAJOR), base);
    char home[1024] = "", local[512], built[1024] = "", plain[256];
    const char *ch = getenv("CUDA_HOME");
    if (ch && *ch) snprintf(home, sizeof home, "%s/lib64/%s", ch, so);
    snprintf(local, sizeof local, "/usr/local/cuda/lib64/%s", so);
#ifdef CT_CUDA_LIBDIR
    snprintf(built, sizeof built, CT_CUDA_LIBDIR "/%s", so);
#endif
    snprintf(plain, sizeof plain, "%s.so", base);
    const char *names[] = {so, home, local, built, plain};
    void *lib = NULL;
    for (size_t i = 0; !lib && i < sizeof names / sizeof *names; i++)
        if (names[i][0]) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    return lib;
}

/* Loads libcublas and its entry points into s (cuda_lib_open). CT_OK, or
 * CT_ERR_ARG naming what is missing. */
static ct_status cublas_load(cuda_state *s) {
    char so[256];
    void *lib = cuda_lib_open("libcublas", so, sizeof so);
    if (!lib)
        return CT_ERR(CT_ERR_ARG, "run.device = cuda: cannot load cuBLAS (%s): %s", so,
                      dlerror());
    cublas_fns *f = (cublas_fns *)calloc(1, sizeof *f);
    if (!f) {
        dlclose(lib);
        return CT_ERR(CT_ERR_OOM, "out of memory loading cuBLAS");
    }
    struct {
        void **slot;
        const char *sym;
    } syms[] = {{(void **)&f->create, "cublasCreate_v2"},
                {(void **)&f->destroy, "cublasDestroy_v2"},
                {(void **)&f->set_stream, "cublasSetStream_v2"},
                {(void **)&f->set_math_mode, "cublasSetMathMode"},
                {(void **)&f->set_workspace, "cublasSetWorkspace_v2"},
                {(void **)&f->sgemm, "cublasSgemm_v2"},
                {(void **)&f->gemm_ex, "cublasGemmEx"}};
    for (size_t i = 0; i < sizeof syms / sizeof *syms; i++) {
        *syms[i].slot = dlsym(lib, syms[i].sym);
        if (!*syms[i].slot) {
            free(f);
            dlclose(lib);
            return CT_ERR(CT_ERR_ARG, "run.device = cuda: cuBLAS (%s) lacks %s", so,
                          syms[i].sym);
        }
    }
    s->cublas_lib = lib;
    s->cublas_fns = f;
    return CT_OK;
}

static void state_release(cuda_state *s) {
    if (!s) return;
    for (int i = 0; i < CUDA_EVENTS; i++)
        if (s->events[i]) cudaEventDestroy((cudaEvent_t)s->events[i]);
    for (int i = 0; i < CUDA_UP_SLOTS; i++)
        if (s->up_done[i]) cudaEventDestroy((cudaEvent_t)s->up_done[i]);
    if (s->red) cudaFree(s->red);
    if (s->count) cudaFree(s->count);
    if (s->red_host) cudaFreeHost(s->red_host);
    if (s->count_host) cudaFreeHost(s->count_host);
    if (s->ws) cudaFree(s->ws);
    if (s->att_ws) cudaFree(s->att_ws);
    if (s->enc_ws) cudaFree(s->enc_ws);
    if (s->col_ws) cudaFree(s->col_ws);
    if (s->blas_ws) cudaFree(s->blas_ws);
    for (int i = 0; i < s->n_bufs; i++) {
        if (s->bufs[i].pinned) cudaFreeHost(s->bufs[i].p);
        else cudaFree(s->bufs[i].p);
    }
    free(s->bufs);
    cuda_lt_release(s);
    const cublas_fns *f = (const cublas_fns *)s->cublas_fns;
    if (s->cublas && f) f->destroy((cublasHandle_t)s->cublas);
    free(s->cublas_fns);
    if (s->cublas_lib) dlclose(s->cublas_lib);
    if (s->stream) cudaStreamDestroy((cudaStream_t)s->stream);
    free(s);
}

extern "C" ct_status ct_cuda_init(ct_backend *be, int device) {
    char why[256] = "";
    int n = ct_cuda_device_count(why, sizeof why);
    if (n == 0) {
        ct_status st = CT_ERR(CT_ERR_ARG, "run.device = cuda:%d: no CUDA device: %s", device, why);
        ct_error_hint("train on the CPU with run.device=cpu");
        return st;
    }
    if (device < 0 || device >= n) {
        ct_status st = CT_ERR(CT_ERR_ARG, "run.device = cuda:%d: no such CUDA device (the driver "
                              "sees %d: cuda:0..cuda:%d)", device, n, n - 1);
        ct_error_hint("pick one of them, or run.device=cuda for the first");
        return st;
    }
    cuda_state *s = (cuda_state *)calloc(1, sizeof *s);
    if (!s) return CT_ERR(CT_ERR_OOM, "out of memory for the CUDA backend's state");
    s->device = device;
    const char *sync = getenv("CT_CUDA_SYNC"), *fault = getenv("CT_CUDA_FAULT");
    s->sync_each = sync && *sync && strcmp(sync, "0") != 0;
    if (fault) snprintf(s->fault_after, sizeof s->fault_after, "%s", fault);
    cudaStream_t stream = NULL;
    cublasHandle_t h = NULL;
    cudaDeviceProp prop;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, device);
    if (e == cudaSuccess) {
        snprintf(s->name, sizeof s->name, "%s", prop.name);
        s->cc_major = prop.major;
        s->cc_minor = prop.minor;
        s->sms = prop.multiProcessorCount;
        int khz = 0;
        if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device) == cudaSuccess)
            s->clock_mhz = khz / 1000.0;
        e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    }
    s->stream = stream;
    if (e == cudaSuccess) e = cudaMalloc((void **)&s->red, CUDA_RED_BLOCKS * sizeof(double));
    if (e == cudaSuccess) e = cudaMalloc((void **)&s->count, sizeof(unsigned long long));
    if (e == cudaSuccess)
        e = cudaMallocHost((void **)&s->red_host, CUDA_RED_BLOCKS * sizeof(double));
    if (e == cudaSuccess) e = cudaMallocHost((void **)&s->count_host, sizeof(unsigned long long));
    if (e == cudaSuccess) e = cudaMalloc(&s->blas_ws, CT_CUDA_CUBLAS_WS_BYTES);
    for (int i = 0; e == cudaSuccess && i < CUDA_EVENTS; i++) {
        cudaEvent_t ev;
        e = cudaEventCreate(&ev);
        s->events[i] = ev;
    }
    if (e != cudaSuccess) {
        ct_status st = CT_ERR(CT_ERR_ARG, "run.device = cuda:%d: no CUDA device: %s", device,
                              cudaGetErrorString(e));
        state_release(s);
        return st;
    }
    ct_status lst = cublas_load(s);
    if (lst) {
        state_release(s);
        return lst;
    }
    const cublas_fns *f = (const cublas_fns *)s->cublas_fns;
    cublasStatus_t cs = f->create(&h);
    if (cs == CUBLAS_STATUS_SUCCESS) {
        s->cublas = h;
        cs = f->set_stream(h, stream);
    }
    /* our own workspace, of a size the memory plan knows (cuBLAS would
     * otherwise allocate its own when a GEMM first needs one) */
    if (cs == CUBLAS_STATUS_SUCCESS)
        cs = f->set_workspace(h, s->blas_ws, CT_CUDA_CUBLAS_WS_BYTES);
    /* the default math mode runs fp32 GEMMs in fp32 (TF32 only on request:
     * PyTorch parity with TF32 off on both sides) and bf16 inputs on tensor
     * cores; reduced-precision reductions are refused */
    if (cs == CUBLAS_STATUS_SUCCESS)
        cs = f->set_math_mode(h, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                                CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    if (cs != CUBLAS_STATUS_SUCCESS) {
        ct_status st = CT_ERR(CT_ERR_ARG, "run.device = cuda:%d: cuBLAS did not start (status "
                              "%d)", device, (int)cs);
        state_release(s);
        return st;
    }
    cuda_lt_load(s); /* optional: without it the plain path runs */
    be->state = s;
    be->host_visible = false;
    /* what the run may fill: free now, with the context, cuBLAS and the
     * buffers above taken */
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
        s->mem_total = total_b;
        s->mem_base_free = s->mem_min_free = free_b;
    }
    return CT_OK;
}

extern "C" void cuda_mem_sample(ct_backend *be) {
    cuda_state *s = cuda_st(be);
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError(); /* a sample is not worth an error */
        return;
    }
    if (free_b < s->mem_min_free) s->mem_min_free = free_b;
}

extern "C" void ct_cuda_free(ct_backend *be) {
    if (!be || !be->state) return;
    cuda_state *s = cuda_st(be);
    cudaStreamSynchronize((cudaStream_t)s->stream);
    for (int i = 0; i < s->n_bufs; i++)
        ct_ctx_count(be->ctx, (ct_tag)s->bufs[i].tag, -(int64_t)s->bufs[i].bytes);
    state_release(s);
    be->state = NULL;
}

/* ------------------------------------------------------------ memory */

static bool buf_track(ct_backend *be, void *p, size_t bytes, ct_tag tag, int pinned) {
    cuda_state *s = cuda_st(be);
    if (s->n_bufs == s->cap_bufs) {
        int cap = s->cap_bufs ? 2 * s->cap_bufs : 64;
        cuda_buf *nb = (cuda_buf *)realloc(s->bufs, (size_t)cap * sizeof *nb);
        if (!nb) return false;
        s->bufs = nb;
        s->cap_bufs = cap;
    }
    s->bufs[s->n_bufs++] = cuda_buf{p, bytes, (int)tag, pinned};
    ct_ctx_count(be->ctx, tag, (int64_t)bytes);
    return true;
}

/* Forget p; returns whether it was pinned (-1: not ours). */
static int buf_untrack(ct_backend *be, void *p) {
    cuda_state *s = cuda_st(be);
    for (int i = s->n_bufs - 1; i >= 0; i--) {
        if (s->bufs[i].p != p) continue;
        int pinned = s->bufs[i].pinned;
        ct_ctx_count(be->ctx, (ct_tag)s->bufs[i].tag, -(int64_t)s->bufs[i].bytes);
        s->bufs[i] = s->bufs[--s->n_bufs];
        return pinned;
    }
    return -1;
}

extern "C" void *ct_buf_alloc_cuda(ct_backend *be, size_t bytes, ct_tag tag) {
    void *p = NULL;
    size_t n = bytes ? bytes : 1;
    cudaError_t e = cudaMalloc(&p, n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        CT_ERR(CT_ERR_OOM, "out of GPU memory allocating %zu bytes for %s on %s (%.1f of %.1f "
               "GiB free): %s", bytes, ct_tag_str(tag), cuda_st(be)->name, free_b / 1073741824.0,
               total_b / 1073741824.0, cudaGetErrorString(e));
        return NULL;
    }
    /* zero-filled, as the seam promises, before anything else reads it */
    e = cudaMemsetAsync(p, 0, n, cuda_stream(be));
    if (e == cudaSuccess) e = cuda_wait(be);
    if (e != cudaSuccess || !buf_track(be, p, bytes, tag, 0)) {
        cudaFree(p);
        CT_ERR(CT_ERR_OOM, "cannot prepare a %zu-byte GPU buffer: %s", bytes,
               cudaGetErrorString(e));
        return NULL;
    }
    cuda_mem_sample(be);
    return p;
}

extern "C" void ct_buf_free_cuda(ct_backend *be, void *p) {
    if (!p) return;
    cuda_wait(be); /* nothing queued may still use it */
    if (buf_untrack(be, p) == 0) cudaFree(p);
}

extern "C" void *ct_host_alloc_cuda(ct_backend *be, size_t bytes, ct_tag tag) {
    void *p = NULL;
    size_t n = bytes ? bytes : 1;
    cudaError_t e = cudaMallocHost(&p, n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        CT_ERR(CT_ERR_OOM, "out of pinned host memory allocating %zu bytes for %s: %s", bytes,
               ct_tag_str(tag), cudaGetErrorString(e));
        return NULL;
    }
    memset(p, 0, n);
    if (!buf_track(be, p, bytes, tag, 1)) {
        cudaFreeHost(p);
        CT_ERR(CT_ERR_OOM, "out of memory tracking a host buffer");
        return NULL;
    }
    return p;
}

extern "C" void ct_host_free_cuda(ct_backend *be, void *p) {
    if (!p) return;
    cuda_wait(be);
    if (buf_untrack(be, p) == 1) cudaFreeHost(p);
}

extern "C" void ct_memset_cuda(ct_backend *be, void *dst, int value, size_t bytes) {
    if (!bytes) return;
    cuda_ok(be, cudaMemsetAsync(dst, value, bytes, cuda_stream(be)), "memset");
}

/* The upload slots and their events, made once; false (nothing latched)
 * when they cannot be had: uploads then wait, as large ones do. */
static bool upload_slots(ct_backend *be) {
    cuda_state *s = cuda_st(be);
    if (s->up_ring) return true;
    if (s->up_done[0]) return false; /* tried before */
    for (int i = 0; i < CUDA_UP_SLOTS; i++) {
        cudaEvent_t e;
        if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
        s->up_done[i] = e;
    }
    s->up_ring = ct_host_alloc_cuda(be, CUDA_UP_SLOTS * CUDA_UP_SLOT_BYTES, CT_TAG_IO);
    if (!s->up_ring) ct_error_clear(); /* not an error: the waiting path stays */
    return s->up_ring != NULL;
}

extern "C" void ct_upload_cuda(ct_backend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    cuda_state *s = cuda_st(be);
    if (bytes <= CUDA_UP_SLOT_BYTES && upload_slots(be)) {
        /* the caller may reuse src at once: it is copied into a pinned slot
         * (once the slot's last copy has been read) and sent from there,
         * with no wait for the work queued before it */
        int k = s->up_next;
        s->up_next = (k + 1) % CUDA_UP_SLOTS;
        cudaEvent_t done = (cudaEvent_t)s->up_done[k];
        if (cudaEventQuery(done) == cudaErrorNotReady) be->stalls++;
        if (!cuda_ok(be, cudaEventSynchronize(done), "upload")) return;
        unsigned char *slot = (unsigned char *)s->up_ring + (size_t)k * CUDA_UP_SLOT_BYTES;
        memcpy(slot, src, bytes);
        cuda_ok(be, cudaMemcpyAsync(dst, slot, bytes, cudaMemcpyHostToDevice, cuda_stream(be)),
                "upload");
        cuda_ok(be, cudaEventRecord(done, cuda_stream(be)), "upload");
        return;
    }
    /* a pageable source: the runtime waits for the stream before the copy
     * anyway, and the caller may reuse src at once: wait */
    cuda_ok(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cuda_stream(be)),
            "upload");
    cuda_ok(be, cuda_wait(be), "upload");
}

extern "C" void ct_download_cuda(ct_backend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    cuda_ok(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cuda_stream(be)),
            "download");
    cuda_ok(be, cuda_wait(be), "download");
}

extern "C" void ct_copy_cuda(ct_backend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return;
    cuda_ok(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_stream(be)),
            "copy");
}

/* ------------------------------------------------------------ stream, events */

extern "C" ct_status ct_synchronize_cuda(ct_backend *be) {
    cuda_state *s = cuda_st(be);
    if (cudaStreamQuery((cudaStream_t)s->stream) == cudaErrorNotReady) be->stalls++;
    cuda_check_wait(s);
    cuda_mem_sample(be);
    if (!s->err) return CT_OK;
    char msg[640], hint[256];
    cuda_error_text(s, msg, sizeof msg, hint, sizeof hint);
    ct_status st = CT_ERR(CT_ERR_IO, "%s", msg);
    if (hint[0]) ct_error_hint("%s", hint);
    /* reported once: a later call starts clean (a sticky device error, which
     * the runtime returns again, latches again) */
    s->err = 0;
    s->err_what[0] = 0;
    return st;
}

extern "C" void ct_event_record_cuda(ct_backend *be, ct_event *ev) {
    cuda_state *s = cuda_st(be);
    cudaEvent_t e = (cudaEvent_t)s->events[s->next_event];
    s->next_event = (s->next_event + 1) % CUDA_EVENTS;
    cuda_ok(be, cudaEventRecord(e, (cudaStream_t)s->stream), "event record");
    ev->t = ct_time_s(); /* when it was recorded (the trace places spans by it) */
    ev->handle = e;
}

extern "C" double ct_event_elapsed_cuda(ct_backend *be, const ct_event *a, const ct_event *b) {
    float ms = 0;
    if (cudaEventQuery((cudaEvent_t)b->handle) == cudaErrorNotReady) be->stalls++;
    if (!cuda_ok(be, cudaEventSynchronize((cudaEvent_t)b->handle), "event wait")) return 0;
    if (!cuda_ok(be, cudaEventElapsedTime(&ms, (cudaEvent_t)a->handle, (cudaEvent_t)b->handle),
                 "event time"))
        return 0;
    return ms / 1e3;
}

/* ------------------------------------------------------------ conversions */

/* fp32 -> IEEE half bits, nearest even: overflow (from 65520 on) to inf,
 * subnormals kept, NaN a NaN (the hardware's canonical one: the payload is
 * not kept, unlike core/dtype.c's; no run reads a NaN's payload) */
__global__ void k_f32_to_f16(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __half_as_ushort(__float2half_rn(src[i]));
}

extern "C" void ct_f32_to_f16_cuda(ct_backend *be, uint16_t *dst, const float *src, size_t n) {
    if (!n) return;
    k_f32_to_f16<<<cuda_grid(n, 256), 256, 0, cuda_stream(be)>>>(dst, src, n);
    cuda_launched(be, "f32_to_f16");
}
extern "C" void ct_f32_to_bf16_cuda(ct_backend *be, uint16_t *dst, const float *src, size_t n) {
    if (!n) return;
    k_f32_to_bf16<<<cuda_grid(n, 256), 256, 0, cuda_stream(be)>>>(dst, src, n);
    cuda_launched(be, "f32_to_bf16");
}
extern "C" void ct_bf16_to_f32_cuda(ct_backend *be, float *dst, const uint16_t *src, size_t n) {
    if (!n) return;
    k_bf16_to_f32<<<cuda_grid(n, 256), 256, 0, cuda_stream(be)>>>(dst, src, n);
    cuda_launched(be, "bf16_to_f32");
}

/* ------------------------------------------------------------ elementwise */

extern "C" void ct_scale_add_cuda(ct_backend *be, float *y, int ldy, const float *x, int ldx,
                                  int rows, int cols, float a, bool accumulate) {
    if (rows <= 0 || cols <= 0) return;
    k_scale_add<<<cuda_grid((size_t)rows * cols, 256), 256, 0, cuda_stream(be)>>>(
        y, ldy, x, ldx, rows, cols, a, accumulate);
    cuda_launched(be, "scale_add");
}

extern "C" void ct_fill_cuda(ct_backend *be, float *x, float value, size_t n) {
    if (!n) return;
    k_fill<<<cuda_grid(n, 256), 256, 0, cuda_stream(be)>>>(x, value, n);
    cuda_launched(be, "fill");
}
extern "C" void ct_scale_cuda(ct_backend *be, float *x, float a, size_t n) {
    if (!n) return;
    k_scale<<<cuda_grid(n, 256), 256, 0, cuda_stream(be)>>>(x, a, n);
    cuda_launched(be, "scale");
}

/* ------------------------------------------------------------ reductions */

static double reduce(ct_backend *be, const float *x, size_t n, bool squares) {
    cuda_state *s = cuda_st(be);
    if (!n) return 0.0;
    k_sum_partials<<<CUDA_RED_BLOCKS, 256, 0, cuda_stream(be)>>>(s->red, x, n, squares);
    cuda_launched(be, squares ? "sumsq" : "sum");
    cuda_ok(be, cudaMemcpyAsync(s->red_host, s->red, CUDA_RED_BLOCKS * sizeof(double),
                                cudaMemcpyDeviceToHost, cuda_stream(be)), "reduction");
    if (!cuda_ok(be, cuda_wait(be), "reduction")) return NAN;
    double acc = 0.0;
    for (int b = 0; b < CUDA_RED_BLOCKS; b++) acc += s->red_host[b];
    return acc;
}
/* *dst += the partials summed in block order, as reduce sums them on the host
 * (the same double, bit for bit). One thread: 256 additions. */
extern "C" void ct_reduce_add_cuda(ct_backend *be, double *dst, const float *x, size_t n,
                                   bool squares) {
    cuda_state *s = cuda_st(be);
    if (!n) return;
    k_sum_partials<<<CUDA_RED_BLOCKS, 256, 0, cuda_stream(be)>>>(s->red, x, n, squares);
    cuda_launched(be, squares ? "reduce_add sumsq" : "reduce_add sum");
    k_sum_finish<<<1, 1, 0, cuda_stream(be)>>>(dst, s->red, CUDA_RED_BLOCKS);
    cuda_launched(be, "reduce_add finish");
}
extern "C" double ct_sum_cuda(ct_backend *be, const float *x, size_t n) {
    return reduce(be, x, n, false);
}
extern "C" double ct_sumsq_cuda(ct_backend *be, const float *x, size_t n) {
    return reduce(be, x, n, true);
}

extern "C" size_t ct_nonfinite_cuda(ct_backend *be, const float *x, size_t n) {
    cuda_state *s = cuda_st(be);
    if (!n) return 0;
    cuda_ok(be, cudaMemsetAsync(s->count, 0, sizeof *s->count, cuda_stream(be)), "nonfinite");
    k_nonfinite<<<cuda_grid(n, 256), 256, 0, cuda_stream(be)>>>(s->count, x, n);
    cuda_launched(be, "nonfinite");
    cuda_ok(be, cudaMemcpyAsync(s->count_host, s->count, sizeof *s->count,
                                cudaMemcpyDeviceToHost, cuda_stream(be)), "nonfinite");
    /* a failed device says "all of them", so a run never trusts its values */
    if (!cuda_ok(be, cuda_wait(be), "nonfinite")) return n;
    return (size_t)*s->count_host;
}

/* ------------------------------------------------------------ dropout */

extern "C" void ct_dropout_forward_cuda(ct_backend *be, float *out, const float *inp, size_t n,
                                        float p, uint64_t key, uint64_t offset) {
    if (!n) return;
    k_dropout_fwd<<<cuda_grid(n, 256), 256, 0, cuda_stream(be)>>>(
        out, inp, n, 1.0f / (1.0f - p), ct_dropout_threshold(p), key, offset);
    cuda_launched(be, "dropout_forward");
}
extern "C" void ct_dropout_backward_cuda(ct_backend *be, float *dinp, const float *dout, size_t n,
                                         float p, uint64_t key, uint64_t offset) {
    if (!n) return;
    k_dropout_bwd<<<cuda_grid(n, 256), 256, 0, cuda_stream(be)>>>(
        dinp, dout, n, 1.0f / (1.0f - p), ct_dropout_threshold(p), key, offset);
    cuda_launched(be, "dropout_backward");
}

/* ------------------------------------------------------------ AdamW */

extern "C" void ct_adamw_update_cuda(ct_backend *be, float *params, const float *grads, float *m,
                                     float *v, size_t n, float lr, float beta1, float beta2,
                                     float eps, float weight_decay, float grad_scale, int64_t t) {
    if (!n) return;
    adamw_scalars a = adamw_scalars_of(lr, beta1, beta2, weight_decay, t);
    k_adamw<<<cuda_grid(n, 256), 256, 0, cuda_stream(be)>>>(params, grads, m, v, n, beta1, beta2,
                                                            eps, grad_scale, a);
    cuda_launched(be, "adamw");
}
