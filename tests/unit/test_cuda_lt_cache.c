/*
 * The CUDA backend's cuBLASLt plan table (src/backend/cuda/cuda_lt_cache.c),
 * without a GPU: a key is found only when every field matches (a plan made
 * for another shape, dtype, epilogue or alignment is never reused), a full
 * table gives way to its least recently used entry and nothing else, and a
 * dropped slot is taken before any live one is evicted.
 */
#include <stdbool.h>
#include <string.h>

#include "backend/cuda/cuda_lt_cache.h"
#include "ct_test.h"

static cuda_lt_key key(int N) {
    cuda_lt_key k;
    memset(&k, 0, sizeof k);
    k.cfg = 2, k.N = N, k.C = 768, k.OC = 3072;
    k.al_w = 256, k.al_x = 256, k.al_o = 256, k.al_bias = 256, k.al_aux = 256;
    return k;
}

/* Each field on its own makes another key. */
static void test_fields(void) {
    cuda_lt_cache c;
    memset(&c, 0, sizeof c);
    cuda_lt_key k = key(16384);
    bool ev = true;
    CHECK(cuda_lt_cache_find(&c, &k) == -1);
    int s = cuda_lt_cache_claim(&c, &k, &ev);
    CHECK(s >= 0 && s < CUDA_LT_CACHE_SIZE && !ev);
    CHECK(cuda_lt_cache_find(&c, &k) == s);
    for (int f = 0; f < 9; f++) {
        cuda_lt_key o = k;
        switch (f) {
        case 0: o.cfg = 3; break;
        case 1: o.N = 16383; break;
        case 2: o.C = 769; break;
        case 3: o.OC = 768; break;
        case 4: o.al_w = 2; break;
        case 5: o.al_x = 4; break;
        case 6: o.al_o = 16; break;
        case 7: o.al_bias = 8; break;
        default: o.al_aux = 0; break;
        }
        CHECK_MSG(!cuda_lt_key_equal(&k, &o), "field %d", f);
        CHECK_MSG(cuda_lt_cache_find(&c, &o) == -1, "field %d found", f);
    }
    CHECK(c.hits == 1 && c.misses == 10);
}

/* A full table: the entry used longest ago gives way, the others stay. */
static void test_lru(void) {
    cuda_lt_cache c;
    memset(&c, 0, sizeof c);
    int slot[CUDA_LT_CACHE_SIZE];
    bool ev = true;
    for (int i = 0; i < CUDA_LT_CACHE_SIZE; i++) {
        cuda_lt_key k = key(i + 1);
        CHECK(cuda_lt_cache_find(&c, &k) == -1);
        slot[i] = cuda_lt_cache_claim(&c, &k, &ev);
        CHECK(!ev);
        for (int j = 0; j < i; j++) CHECK(slot[j] != slot[i]);
    }
    /* use every entry again but N = 6, which is then the least recent */
    for (int i = 0; i < CUDA_LT_CACHE_SIZE; i++) {
        cuda_lt_key k = key(i + 1);
        if (i != 5) CHECK(cuda_lt_cache_find(&c, &k) == slot[i]);
    }
    cuda_lt_key n = key(1000);
    CHECK(cuda_lt_cache_find(&c, &n) == -1);
    int s = cuda_lt_cache_claim(&c, &n, &ev);
    CHECK(ev && s == slot[5] && c.evictions == 1);
    CHECK(cuda_lt_cache_find(&c, &n) == s);
    cuda_lt_key old = key(6);
    CHECK(cuda_lt_cache_find(&c, &old) == -1);
    for (int i = 0; i < CUDA_LT_CACHE_SIZE; i++) {
        cuda_lt_key k = key(i + 1);
        if (i != 5) CHECK(cuda_lt_cache_find(&c, &k) == slot[i]);
    }
    /* now N = 1000 is the least recent: it goes next */
    s = cuda_lt_cache_claim(&c, &old, &ev);
    CHECK(ev && s == slot[5]);
    /* a dropped slot is taken before any live one goes */
    cuda_lt_cache_drop(&c, slot[40]);
    CHECK(!cuda_lt_cache_live(&c, slot[40]));
    cuda_lt_key k41 = key(41);
    CHECK(cuda_lt_cache_find(&c, &k41) == -1);
    cuda_lt_key m = key(2000);
    s = cuda_lt_cache_claim(&c, &m, &ev);
    CHECK(!ev && s == slot[40] && cuda_lt_cache_live(&c, s) && c.evictions == 2);
}

int main(void) {
    test_fields();
    test_lru();
    return ct_test_result("test_cuda_lt_cache");
}
