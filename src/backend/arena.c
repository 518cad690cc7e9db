/*
 * Bump arena: one block, 64-byte aligned carving, overflow checks, mark/reset
 * for per-step scratch. Activations live in one arena sized by the model's plan.
 */
#include "ctrain/core.h"

#include <string.h>

size_t ct_arena_round(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

ct_status ct_arena_init(ct_arena *a, ct_ctx *ctx, size_t bytes, ct_tag tag) {
    memset(a, 0, sizeof *a);
    a->base = ct_alloc(ctx, bytes ? bytes : 64, tag);
    if (!a->base) return ct_last_status();
    a->size = bytes;
    a->tag = tag;
    a->owned = true;
    return CT_OK;
}

void ct_arena_wrap(ct_arena *a, void *mem, size_t bytes, ct_tag tag) {
    memset(a, 0, sizeof *a);
    /* Align the start; the usable size shrinks accordingly. */
    uintptr_t p = (uintptr_t)mem, aligned = (p + 63) & ~(uintptr_t)63;
    size_t skip = (size_t)(aligned - p);
    a->base = (uint8_t *)aligned;
    a->size = bytes > skip ? bytes - skip : 0;
    a->tag = tag;
}

void *ct_arena_alloc(ct_arena *a, size_t bytes) {
    size_t need = ct_arena_round(bytes);
    if (need < bytes || need > a->size - a->used) {
        CT_ERR(CT_ERR_OOM, "%s arena full: %zu of %zu bytes used, %zu more requested",
               ct_tag_str(a->tag), a->used, a->size, bytes);
        return NULL;
    }
    void *p = a->base + a->used;
    a->used += need;
    if (a->used > a->peak) a->peak = a->used;
    return p;
}

size_t ct_arena_mark(const ct_arena *a) { return a->used; }

void ct_arena_reset(ct_arena *a, size_t mark) {
    CT_ASSERT(mark <= a->used);
    a->used = mark;
}

void ct_arena_free(ct_arena *a, ct_ctx *ctx) {
    if (a->owned) ct_free(ctx, a->base);
    memset(a, 0, sizeof *a);
}
