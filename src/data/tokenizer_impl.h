/*
 * Inside the GPT-2 tokenizer: the loaded tables shared by tokenizer_load.c
 * (reading encoder.json + vocab.bpe or tokenizer.json, hashing the identity,
 * compiling the pre-tokenisation pattern) and tokenizer.c (encode, decode),
 * plus two hooks the unit tests use to check the fast paths against the
 * plain ones. Never installed; nothing outside src/data/tokenizer*.c and the
 * tests includes it.
 * Leaves out: the public API (include/ctrain/data.h).
 */
#ifndef CT_TOKENIZER_IMPL_H
#define CT_TOKENIZER_IMPL_H

#include "ctrain/data.h"

#include <stdbool.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* One slot of the merge table: the adjacent pair (left id, right id) packed
 * as left << 32 | right, the merge's rank (lower merges first) and the id of
 * the token the pair merges into. key == TOK_PAIR_EMPTY marks a free slot. */
typedef struct tok_pair {
    uint64_t key;
    int32_t rank;
    int32_t merged;
} tok_pair;
#define TOK_PAIR_EMPTY UINT64_MAX

/* Open-addressing hash map from pair keys to tok_pair slots. */
typedef struct tok_pair_map {
    tok_pair *slots; /* [mask + 1] */
    size_t mask;     /* slot count - 1 (a power of two minus one) */
    size_t count;    /* slots in use */
} tok_pair_map;

struct ct_tokenizer {
    int32_t n_ids;      /* largest id + 1 */
    uint32_t *tok_off;  /* [n_ids] byte offset of each token in tok_bytes */
    uint32_t *tok_len;  /* [n_ids] bytes; TOK_NO_TOKEN where no token has the id */
    char *tok_bytes;    /* the tokens' bytes, back to back */
    int32_t byte_id[256]; /* id of the one-byte token for each byte value */
    tok_pair_map pairs; /* merge ranks, keyed by pair of ids */
    int64_t n_merges;   /* lines of vocab.bpe / entries of model.merges */
    int32_t *special;   /* [n_special] ids of special tokens, longest text first */
    size_t n_special;
    bool special_first[256]; /* a special token starts with this byte */
    int32_t eot;        /* id of <|endoftext|>, or -1 */
    char identity[32];  /* "gpt2-bpe:" + 16 hex digits */
    pcre2_code *re;     /* GPT-2's pre-tokenisation pattern */
    bool jit;           /* re was JIT-compiled */
};
#define TOK_NO_TOKEN UINT32_MAX

/* Slot of pair (left, right), or NULL when the two never merge. */
static inline const tok_pair *tok_pair_find(const tok_pair_map *m, int32_t left, int32_t right) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    /* Fibonacci hashing: the top bits of key * 2^64/phi spread nearby ids apart */
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & m->mask;
    for (;;) {
        const tok_pair *p = &m->slots[i];
        if (p->key == key) return p;
        if (p->key == TOK_PAIR_EMPTY) return NULL;
        i = (i + 1) & m->mask;
    }
}

/* Test hooks (not API). tok_set_jit(t, false) makes t match with the PCRE2
 * interpreter even when JIT is available, so both engines can be compared. */
void tok_set_jit(ct_tokenizer *t, bool on);
/* BPE of one pre-tokenised word (bytes w[0..n), n >= 1) into ids (room for n),
 * by the plain algorithm of the reference (reference = true) or the heap
 * one. Returns the number of ids. Borrows everything. */
size_t tok_bpe_word(const ct_tokenizer *t, ct_tok_state *s, const uint8_t *w, size_t n,
                    int32_t *ids, bool reference);

/* Compile GPT-2's pattern for t (tokenizer.c owns the pattern text). */
ct_status tok_compile_pattern(ct_tokenizer *t);

#endif
