/*
 * The CUDA backend's table of cuBLASLt GEMM plans (cuda_lt.cu), keyed by
 * everything a plan's descriptor, layouts and heuristic choice depend on:
 * the configuration (inputs' dtype, epilogue), the shape, and the
 * alignments the heuristic was told of. A training step has a handful of
 * shapes, so a small table searched linearly does; when it is full the
 * least recently used entry gives way. This file keeps the keys and the
 * order of use only (plain C, no CUDA header, tested without a GPU:
 * tests/unit/test_cuda_lt_cache.c); the cuBLASLt objects of each slot are
 * cuda_lt.cu's. Not thread-safe: one backend, one host thread, as the rest
 * of its state.
 */
#ifndef CT_BACKEND_CUDA_LT_CACHE_H
#define CT_BACKEND_CUDA_LT_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#define CUDA_LT_CACHE_SIZE 64

/* What a plan depends on. out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias,
 * column-major as the plain path: the transposes are fixed (W transposed,
 * inp not), and the leading dimensions follow from the shape (C, C, OC;
 * the GELU aux matrix's OC). The pointers themselves are set on the plan
 * at every call; what the heuristic may assume of them, their alignment,
 * is in the key. */
typedef struct cuda_lt_key {
    int cfg;                  /* CUDA_LT_* (cuda_common.cuh): bf16 inputs or fp32, bias or bias+GELU */
    int N, C, OC;             /* the GEMM's shape */
    uint32_t al_w, al_x, al_o; /* alignment in bytes (a power of two <= 256) of weight, inp, out */
    uint32_t al_bias, al_aux; /* of bias and of the GELU aux matrix (0 without one) */
} cuda_lt_key;

typedef struct cuda_lt_cache {
    cuda_lt_key key[CUDA_LT_CACHE_SIZE];
    uint64_t used[CUDA_LT_CACHE_SIZE]; /* tick of the slot's last use; 0: empty */
    uint64_t tick;                     /* uses so far */
    uint64_t hits, misses, evictions;  /* counters, for the log */
} cuda_lt_cache;

/* Whether two keys are the same plan's (every field compared). */
bool cuda_lt_key_equal(const cuda_lt_key *a, const cuda_lt_key *b);
/* The slot holding k, marked as just used (a hit); -1 (a miss) when none. */
int cuda_lt_cache_find(cuda_lt_cache *c, const cuda_lt_key *k);
/* A slot for k, which find has just missed: an empty one, else the least
 * recently used, whose plan the caller must release first (*evicted true).
 * The slot holds k from now on, marked as just used. */
int cuda_lt_cache_claim(cuda_lt_cache *c, const cuda_lt_key *k, bool *evicted);
/* Empty slot i (its plan released by the caller). */
void cuda_lt_cache_drop(cuda_lt_cache *c, int i);
/* Whether slot i holds a plan. */
static inline bool cuda_lt_cache_live(const cuda_lt_cache *c, int i) { return c->used[i] != 0; }

#endif
