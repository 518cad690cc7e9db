/*
 * The CUDA backend's embedding backward, parallel and deterministic (device
 * code only, included by cuda_kernels.cu; tests/gpu/cuda_emu.cpp runs it on
 * the CPU). dwte row v gathers the dout rows whose token is v: the (token,
 * row) pairs of the batch are sorted once per call (64-bit keys token << 32 |
 * row, unique, so the order is fully determined), then each run of one token
 * is summed by a thread per column, in row order, onto what dwte held: the
 * very additions ref makes, in its order, so the result equals ref's bit for
 * bit. Learned positions (dwpe) the same way: rows t, T + t, ... of position
 * t without packed rows (no sort needed), the sorted (position, row) pairs
 * with them.
 * The sort: chunks of 1024 keys sorted in shared memory (bitonic), then
 * pairwise merges of sorted runs, a thread per key placing it by a binary
 * search in the other run. No atomics, no float reductions across threads.
 * Leaves out: splitting a very long run (one token in most rows) across
 * threads, which would change the order of its sum; such a run costs what
 * the old kernel cost for every token (a serial walk).
 */
#ifndef CT_BACKEND_CUDA_ENCODER_BWD_CUH
#define CT_BACKEND_CUDA_ENCODER_BWD_CUH

#include <stddef.h>
#include <stdint.h>

#define ENC_CHUNK 1024        /* keys a block sorts in shared memory */
#define ENC_SORT_THREADS 256  /* threads of that block */
#define ENC_MERGE_THREADS 256 /* threads per block of a merge pass */
#define ENC_SUM_THREADS 128   /* columns per block of the run sums */

__device__ inline uint32_t enc_value(uint64_t key) { return (uint32_t)(key >> 32); }
__device__ inline uint32_t enc_row(uint64_t key) { return (uint32_t)key; }

/* dst[c*ENC_CHUNK ..] = the sorted keys (values[n] << 32 | n) of chunk c =
 * blockIdx.x, rows [c*ENC_CHUNK, min((c+1)*ENC_CHUNK, N)). values are token
 * ids or positions (non-negative). */
__global__ void __launch_bounds__(ENC_SORT_THREADS)
k_enc_sort_chunk(uint64_t *dst, const int32_t *values, int N) {
    __shared__ uint64_t s[ENC_CHUNK];
    int r0 = blockIdx.x * ENC_CHUNK, n = min(ENC_CHUNK, N - r0);
    for (int k = threadIdx.x; k < ENC_CHUNK; k += blockDim.x)
        s[k] = k < n ? (uint64_t)(uint32_t)values[r0 + k] << 32 | (uint32_t)(r0 + k)
                     : ~(uint64_t)0; /* past the end: after every key */
    __syncthreads();
    for (int k = 2; k <= ENC_CHUNK; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int t = threadIdx.x; t < ENC_CHUNK / 2; t += blockDim.x) {
                int i = 2 * j * (t / j) + t % j, p = i + j; /* the pair (i, i + j) */
                bool up = (i & k) == 0;
                uint64_t a = s[i], b = s[p];
                if ((a > b) == up) s[i] = b, s[p] = a;
            }
            __syncthreads();
        }
    for (int k = threadIdx.x; k < n; k += blockDim.x) dst[r0 + k] = s[k];
}

/* One merge pass: src holds sorted runs of w keys (the last may be short);
 * dst gets sorted runs of 2w. Key n of run A = [s, s + w) lands at s + (its
 * place in A) + (keys of B = [s + w, s + 2w) below it), and a key of B
 * likewise; keys are unique, so the places are a permutation. */
__global__ void __launch_bounds__(ENC_MERGE_THREADS)
k_enc_merge(uint64_t *dst, const uint64_t *src, int N, int w) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    int s = n / (2 * w) * (2 * w), mid = min(s + w, N), end = min(s + 2 * w, N);
    uint64_t key = src[n];
    bool in_a = n < mid;
    int lo = in_a ? mid : s, hi = in_a ? end : mid; /* the other run */
    int first = lo;
    while (lo < hi) { /* keys of the other run below key */
        int m = lo + (hi - lo) / 2;
        if (src[m] < key) lo = m + 1;
        else hi = m;
    }
    int below = lo - first;
    dst[s + (n - (in_a ? s : mid)) + below] = key;
}

/* dw rows += the dout rows of each run of equal values in the sorted keys:
 * block (column tile, key group of `per` keys); a thread per column takes
 * each run that starts in its group and walks it in row order. */
__global__ void __launch_bounds__(ENC_SUM_THREADS)
k_enc_run_sum(float *dw, const float *dout, const uint64_t *keys, int N, int C, int per) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int k0 = blockIdx.y * per, k1 = min(k0 + per, N);
    for (int k = k0; k < k1; k++) {
        uint32_t v = enc_value(keys[k]);
        if (k > 0 && enc_value(keys[k - 1]) == v) continue; /* not a run's start */
        float *d = dw + (size_t)v * C + c;
        float acc = *d;
        for (int r = k; r < N && enc_value(keys[r]) == v; r++)
            acc += dout[(size_t)enc_row(keys[r]) * C + c];
        *d = acc;
    }
}

/* dwpe row t += dout rows t, T + t, ... in order (rows without pos): a
 * thread per (t, c). */
__global__ void k_enc_pos_sum(float *dwpe, const float *dout, int B, int T, int C) {
    size_t n = (size_t)T * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float acc = dwpe[i];
        for (int b = 0; b < B; b++) acc += dout[(size_t)b * n + i];
        dwpe[i] = acc;
    }
}

/* Keys a run-sum block takes: 16, or more where 65535 groups would not
 * cover N. */
__host__ __device__ inline int enc_run_per(int N) {
    int per = (N + 65534) / 65535;
    return per < 16 ? 16 : per;
}

#endif
