/*
 * The keys and the order of use of the cuBLASLt plan table
 * (cuda_lt_cache.h): a linear search over CUDA_LT_CACHE_SIZE slots and
 * least-recently-used replacement. Plain C, built with or without CUDA.
 */
#include "backend/cuda/cuda_lt_cache.h"

bool cuda_lt_key_equal(const cuda_lt_key *a, const cuda_lt_key *b) {
    return a->cfg == b->cfg && a->N == b->N && a->C == b->C && a->OC == b->OC &&
           a->al_w == b->al_w && a->al_x == b->al_x && a->al_o == b->al_o &&
           a->al_bias == b->al_bias && a->al_aux == b->al_aux;
}

int cuda_lt_cache_find(cuda_lt_cache *c, const cuda_lt_key *k) {
    for (int i = 0; i < CUDA_LT_CACHE_SIZE; i++) {
        if (c->used[i] && cuda_lt_key_equal(&c->key[i], k)) {
            c->used[i] = ++c->tick;
            c->hits++;
            return i;
        }
    }
    c->misses++;
    return -1;
}

int cuda_lt_cache_claim(cuda_lt_cache *c, const cuda_lt_key *k, bool *evicted) {
    int slot = 0; /* the first empty slot, else the one used longest ago */
    for (int i = 0; i < CUDA_LT_CACHE_SIZE; i++) {
        if (!c->used[i]) {
            slot = i;
            break;
        }
        if (c->used[i] < c->used[slot]) slot = i;
    }
    *evicted = c->used[slot] != 0;
    if (*evicted) c->evictions++;
    c->key[slot] = *k;
    c->used[slot] = ++c->tick;
    return slot;
}

void cuda_lt_cache_drop(cuda_lt_cache *c, int i) { c->used[i] = 0; }
