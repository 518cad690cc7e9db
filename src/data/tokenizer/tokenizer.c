/*
 * GPT-2 byte-level BPE, encode and decode, token-for-token the npm package
 * gpt-3-encoder's (the reference): UTF-8 check, the added tokens split out
 * (a byte trie; the special ones on request, whitespace dropped beside
 * lstrip/rstrip ones), GPT-2's pre-tokenisation pattern run by PCRE2 (JIT
 * when available), then BPE of each word on token ids with a per-state word
 * cache. The entry points (encode, decode) and the per-thread state serve
 * every kind; SentencePiece segments go to tokenizer_spm.c, those of a
 * generic tokenizer.json to tokenizer_pipe.c.
 * Leaves out: loading the files (tokenizer_load.c, tokenizer_hf.c),
 * normalisation (GPT-2 has none), SentencePiece's own encoding
 * (tokenizer_spm.c), the generic pipeline (tokenizer_pipe.c).
 */
#include "data/tokenizer/tokenizer_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

/* ------------------------------------------------------- token vectors */

ct_status tok_tokens_reserve(ct_tokens *v, size_t more) {
    if (v->n + more <= v->cap) return CT_OK;
    size_t cap = v->cap ? v->cap : 256;
    while (cap < v->n + more) {
        if (cap > SIZE_MAX / 2 / sizeof *v->ids) return CT_ERR(CT_ERR_OOM, "tokens: too many token ids");
        cap *= 2;
    }
    int32_t *p = realloc(v->ids, cap * sizeof *p);
    if (!p) return CT_ERR(CT_ERR_OOM, "tokens: out of memory for %zu token ids", cap);
    v->ids = p;
    v->cap = cap;
    return CT_OK;
}

ct_status ct_tokens_push(ct_tokens *v, int32_t id) {
    ct_status st = tok_tokens_reserve(v, 1);
    if (st) return st;
    v->ids[v->n++] = id;
    return CT_OK;
}

void ct_tokens_free(ct_tokens *v) {
    if (!v) return;
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

/* ------------------------------------------------------- the pattern */

/* The reference's pattern, a JavaScript regex with the u flag; tokenizer_regex.c
 * spells \s, \p{L} and \p{N} out as the code points node's regexes accept
 * (PCRE2 and JavaScript disagree on \s, and may be built on different Unicode
 * versions). */
const char tok_gpt2_pattern[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

ct_status tok_compile_pattern(ct_tokenizer *t) {
    return tok_regex_compile(&t->re, &t->jit, tok_gpt2_pattern, strlen(tok_gpt2_pattern), "GPT-2's pattern");
}

void tok_set_jit(ct_tokenizer *t, bool on) {
    uint32_t size = 0;
    t->jit = on && pcre2_pattern_info(t->re, PCRE2_INFO_JITSIZE, &size) == 0 && size > 0;
}

/* ------------------------------------------------------- per-thread state */

/* Word cache: open addressing over 24-byte slots (1.5 MiB at most); the
 * words and their ids live in two arenas (4 MiB each at most, touched as they
 * fill). Words come in roughly by frequency, so the hot ones sit together at
 * the arenas' start. When the slots are 3/4 full or an arena is full, the
 * cache is emptied: bounded memory, no eviction bookkeeping on the hot path. */
#define CACHE_SLOTS_MIN 4096
#define CACHE_SLOTS_MAX 65536   /* at most 3/4 used: ~49k words */
#define CACHE_KEY_BYTES (4u << 20)
#define CACHE_ID_COUNT (1u << 20)

ct_tok_state *ct_tok_state_new(const ct_tokenizer *t) {
    CT_ASSERT(t);
    ct_tok_state *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->t = t;
    if (!t->re && !(t->hf && t->hf->ovec)) return s; /* no pattern to match */
    s->md = t->hf ? pcre2_match_data_create(t->hf->ovec, NULL) : pcre2_match_data_create_from_pattern(t->re, NULL);
    s->mctx = pcre2_match_context_create(NULL);
    s->jstack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, NULL);
    if (!s->md || !s->mctx || !s->jstack) goto oom;
    pcre2_jit_stack_assign(s->mctx, NULL, s->jstack);
    return s;
oom:
    ct_tok_state_free(s);
    CT_ERR(CT_ERR_OOM, "tokenizer: out of memory for an encoder state");
    return NULL;
}

static void state_drop_scratch(ct_tok_state *s) {
    free(s->sym);
    free(s->heap);
    free(s->pass);
    free(s->word);
    s->sym = NULL;
    s->heap = s->pass = NULL;
    s->word = NULL;
    s->cap = 0;
}

void ct_tok_state_free(ct_tok_state *s) {
    if (!s) return;
    pcre2_match_data_free(s->md);
    pcre2_match_context_free(s->mctx);
    pcre2_jit_stack_free(s->jstack);
    free(s->slots);
    free(s->keys);
    free(s->ids);
    free(s->norm);
    tok_hf_state_free(s);
    state_drop_scratch(s);
    free(s);
}

/* Room for BPE of an n-byte word. The heap takes the n - 1 first pairs and
 * at most two more per merge (n - 1 merges at most), stale ones included. */
ct_status tok_state_scratch(ct_tok_state *s, size_t n) {
    if (n <= s->cap) return CT_OK;
    if (n > INT32_MAX / 4) return CT_ERR(CT_ERR_ARG, "tokenizer: a %zu-byte word is too long to encode", n);
    size_t cap = s->cap ? s->cap : 64;
    while (cap < n) cap *= 2;
    bpe_sym *sym = realloc(s->sym, cap * sizeof *sym);
    if (sym) s->sym = sym;
    bpe_cand *heap = realloc(s->heap, 3 * cap * sizeof *heap);
    if (heap) s->heap = heap;
    bpe_cand *pass = realloc(s->pass, cap * sizeof *pass);
    if (pass) s->pass = pass;
    int32_t *word = realloc(s->word, cap * sizeof *word);
    if (word) s->word = word;
    if (!sym || !heap || !pass || !word)
        return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory for a %zu-byte word", n);
    s->cap = cap;
    return CT_OK;
}

void tok_state_trim(ct_tok_state *s) {
    if (s->cap > (1u << 20)) state_drop_scratch(s); /* do not keep a huge word's scratch */
    if (s->norm_cap > (16u << 20)) {
        free(s->norm);
        s->norm = NULL;
        s->norm_cap = 0;
    }
}

/* ------------------------------------------------------- BPE */

/* The reference's loop, kept as the readable definition the fast one is
 * tested against: find the lowest-ranked adjacent pair (of equal ranks the
 * rightmost: the reference keeps the last pair it sees per rank), merge every
 * occurrence of that exact pair left to right, repeat. a[0..n) holds the ids
 * on entry and the result on return; returns the new count. */
static size_t bpe_reference(const ct_tokenizer *t, int32_t *a, size_t n) {
    while (n > 1) {
        int32_t best = INT32_MAX, bl = -1, br = -1, merged = -1;
        for (size_t i = 0; i + 1 < n; i++) {
            const tok_pair *p = tok_pair_find(&t->pairs, a[i], a[i + 1]);
            if (p && p->rank <= best) {
                best = p->rank;
                bl = a[i];
                br = a[i + 1];
                merged = p->merged;
            }
        }
        if (best == INT32_MAX) break;
        size_t j = 0;
        for (size_t i = 0; i < n;) {
            if (i + 1 < n && a[i] == bl && a[i + 1] == br) {
                a[j++] = merged;
                i += 2;
            } else {
                a[j++] = a[i++];
            }
        }
        n = j;
    }
    return n;
}

bool tok_cand_less(const bpe_cand *x, const bpe_cand *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

void tok_heap_push(bpe_cand *h, size_t *n, bpe_cand c) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!tok_cand_less(&c, &h[up])) break;
        h[i] = h[up];
        i = up;
    }
    h[i] = c;
}

bpe_cand tok_heap_pop(bpe_cand *h, size_t *n) {
    bpe_cand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && tok_cand_less(&h[c + 1], &h[c])) c++;
        if (!tok_cand_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

/* Queue the pair at symbols (i, j) if it merges. */
static void bpe_queue(const ct_tokenizer *t, ct_tok_state *s, int32_t i, int32_t j) {
    const tok_pair *p = tok_pair_find(&t->pairs, s->sym[i].id, s->sym[j].id);
    if (p) tok_heap_push(s->heap, &s->heap_n, (bpe_cand){p->rank, i, s->sym[i].id, s->sym[j].id, p->merged});
}

/* Whether candidate c still describes two adjacent symbols. */
static bool bpe_live(const bpe_sym *sym, const bpe_cand *c) {
    int32_t r = sym[c->pos].next;
    return sym[c->pos].id == c->left && r >= 0 && sym[r].id == c->right;
}

/* Heap BPE over a linked list of symbols: O(n log n) instead of the
 * reference's O(n^2) passes. Like the reference, each pass takes every pair
 * of the lowest rank at once (they leave the heap together, leftmost first)
 * and merges them left to right, skipping ones an earlier merge of the pass
 * used up; pairs the merges create wait in the heap for later passes.
 * Returns the number of ids written to out, or 0 when two different pairs
 * share the lowest rank (possible only through the reference's comma
 * aliases): the caller then runs bpe_reference, which picks between them
 * as the reference does. */
static size_t bpe_heap(const ct_tokenizer *t, ct_tok_state *s, const uint8_t *w, size_t n, int32_t *out) {
    bpe_sym *sym = s->sym;
    bpe_cand *pass = s->pass;
    for (size_t i = 0; i < n; i++)
        sym[i] = (bpe_sym){t->byte_id[w[i]], (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1};
    s->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++) bpe_queue(t, s, (int32_t)i, (int32_t)i + 1);
    while (s->heap_n) {
        int32_t rank = s->heap[0].rank;
        size_t np = 0;
        while (s->heap_n && s->heap[0].rank == rank) {
            bpe_cand c = tok_heap_pop(s->heap, &s->heap_n);
            if (bpe_live(sym, &c)) pass[np++] = c;
        }
        for (size_t k = 1; k < np; k++)
            if (pass[k].left != pass[0].left || pass[k].right != pass[0].right) return 0;
        for (size_t k = 0; k < np; k++) {
            const bpe_cand *c = &pass[k];
            if (!bpe_live(sym, c)) continue; /* overlaps the previous merge: "aaa" -> "aa" "a" */
            int32_t r = sym[c->pos].next;
            sym[c->pos].id = c->merged;
            sym[r].id = -1;
            sym[c->pos].next = sym[r].next;
            if (sym[r].next >= 0) sym[sym[r].next].prev = c->pos;
            if (sym[c->pos].prev >= 0) bpe_queue(t, s, sym[c->pos].prev, c->pos);
            if (sym[c->pos].next >= 0) bpe_queue(t, s, c->pos, sym[c->pos].next);
        }
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = sym[i].next) out[k++] = sym[i].id;
    return k;
}

/* BPE of word w[0..n) into s->word[0..*k). */
static ct_status bpe_word(const ct_tokenizer *t, ct_tok_state *s, const uint8_t *w, size_t n, size_t *k) {
    ct_status st = tok_state_scratch(s, n);
    if (st) return st;
    *k = bpe_heap(t, s, w, n, s->word);
    if (*k == 0) {
        for (size_t i = 0; i < n; i++) s->word[i] = t->byte_id[w[i]];
        *k = bpe_reference(t, s->word, n);
    }
    return CT_OK;
}

size_t tok_bpe_word(const ct_tokenizer *t, ct_tok_state *s, const uint8_t *w, size_t n, int32_t *ids,
                    bool reference) {
    if (reference) {
        for (size_t i = 0; i < n; i++) ids[i] = t->byte_id[w[i]];
        return bpe_reference(t, ids, n);
    }
    size_t k = 0;
    if (bpe_word(t, s, w, n, &k)) return 0;
    memcpy(ids, s->word, k * sizeof *ids);
    return k;
}

/* ------------------------------------------------------- word cache */

/* Empty the cache, with `slots` slots; false when memory ran out (the cache
 * is then off until the next try: it is an optimisation, never an error). */
static bool cache_clear(ct_tok_state *s, size_t slots) {
    if (!s->slots || slots != s->mask + 1) {
        free(s->slots);
        s->slots = calloc(slots, sizeof *s->slots);
        s->mask = s->slots ? slots - 1 : 0;
    } else {
        memset(s->slots, 0, slots * sizeof *s->slots);
    }
    s->used = s->keys_n = s->ids_n = 0;
    if (!s->keys) s->keys = malloc(CACHE_KEY_BYTES);
    if (!s->ids) s->ids = malloc(CACHE_ID_COUNT * sizeof *s->ids);
    if (s->slots && s->keys && s->ids) return true;
    free(s->slots);
    s->slots = NULL;
    return false;
}

/* Double the slots, keeping the entries. */
static bool cache_grow(ct_tok_state *s) {
    size_t slots = s->mask + 1, want = 2 * slots;
    tok_cache_slot *neu = calloc(want, sizeof *neu);
    if (!neu) return false;
    for (size_t i = 0; i < slots; i++) {
        if (!s->slots[i].hash) continue;
        size_t j = (size_t)s->slots[i].hash & (want - 1);
        while (neu[j].hash) j = (j + 1) & (want - 1);
        neu[j] = s->slots[i];
    }
    free(s->slots);
    s->slots = neu;
    s->mask = want - 1;
    return true;
}

uint64_t tok_cache_hash(const uint8_t *w, size_t n) {
    uint64_t h = XXH3_64bits(w, n);
    return h ? h : 1;
}

const tok_cache_slot *tok_cache_find(const ct_tok_state *s, const uint8_t *w, size_t n, uint64_t h) {
    if (!s->slots) return NULL;
    for (size_t i = (size_t)h & s->mask;; i = (i + 1) & s->mask) {
        const tok_cache_slot *c = &s->slots[i];
        if (c->hash == 0) return NULL;
        if (c->hash == h && c->key_len == n && memcmp(s->keys + c->key_off, w, n) == 0) return c;
    }
}

/* Remember word w -> ids: grows the slots up to CACHE_SLOTS_MAX, then empties
 * the cache when the slots or either arena are full. */
void tok_cache_put(ct_tok_state *s, const uint8_t *w, size_t n, uint64_t h, const int32_t *ids, size_t k) {
    if (!s->slots && !cache_clear(s, CACHE_SLOTS_MIN)) return;
    size_t slots = s->mask + 1;
    if (4 * (s->used + 1) > 3 * slots) {
        if (slots < CACHE_SLOTS_MAX ? !cache_grow(s) : !cache_clear(s, slots)) return;
    }
    if ((s->keys_n + n > CACHE_KEY_BYTES || s->ids_n + k > CACHE_ID_COUNT) && !cache_clear(s, s->mask + 1)) return;
    size_t i = (size_t)h & s->mask;
    while (s->slots[i].hash) i = (i + 1) & s->mask;
    memcpy(s->keys + s->keys_n, w, n);
    memcpy(s->ids + s->ids_n, ids, k * sizeof *ids);
    s->slots[i] = (tok_cache_slot){h, (uint32_t)s->keys_n, (uint32_t)s->ids_n, (uint16_t)n, (uint16_t)k};
    s->keys_n += n;
    s->ids_n += k;
    s->used++;
}

/* ------------------------------------------------------- added tokens */

/* Sort ids[0..n) longest token text first (insertion sort: few tokens). */
static void added_sort_longest(const ct_tokenizer *t, int32_t *ids, size_t n) {
    for (size_t i = 1; i < n; i++) {
        int32_t x = ids[i];
        size_t j = i;
        while (j > 0 && t->tok_len[ids[j - 1]] < t->tok_len[x]) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = x;
    }
}

/* Add the text of added token a to the trie (room is there: one node per byte). */
static void added_trie_add(ct_tokenizer *t, const char *text, size_t len, int32_t a) {
    int32_t node = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t c = (uint8_t)text[i];
        int32_t k = t->trie[node].child;
        while (k >= 0 && t->trie[k].byte != c) k = t->trie[k].sibling;
        if (k < 0) {
            k = (int32_t)t->n_trie++;
            t->trie[k] = (tok_trie){-1, t->trie[node].child, -1, c};
            t->trie[node].child = k;
        }
        node = k;
    }
    t->trie[node].added = a;
}

ct_status tok_load_specials(ct_tokenizer *t, const load_builder *b) {
    /* longest special token first (the order the identity hash sorts away) */
    added_sort_longest(t, t->special, t->n_special);
    for (size_t i = 0; i < t->n_special; i++)
        if (t->tok_len[t->special[i]] == 0)
            return CT_ERR(CT_ERR_FORMAT, "%s: special token %d is empty", b->vocab_file, (int)t->special[i]);
    /* every added token (raw entries), matched through a byte trie */
    size_t n_raw = 0, bytes = 1;
    for (size_t k = 0; k < b->n_e; k++)
        if (b->e[k].raw) {
            n_raw++;
            bytes += b->e[k].len;
        }
    t->added = malloc((n_raw + 1) * sizeof *t->added);
    t->trie = malloc(bytes * sizeof *t->trie);
    if (!t->added || !t->trie) return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory for %zu added tokens", n_raw);
    t->n_added = 0;
    t->n_trie = 1;
    t->trie[0] = (tok_trie){-1, -1, -1, 0};
    for (size_t k = 0; k < b->n_e; k++) {
        const load_entry *e = &b->e[k];
        if (!e->raw || e->len == 0 || t->tok_len[e->id] == TOK_NO_TOKEN) continue;
        const char *text = e->s; /* matched as written (its decoded bytes may differ: "▁") */
        uint32_t len = e->len;
        int32_t a = (int32_t)t->n_added++;
        t->added[a] = (tok_added){e->id, len, e->special, e->lstrip, e->rstrip};
        added_trie_add(t, text, len, a);
        t->added_first[(unsigned char)text[0]] = true;
        if (!e->special) t->plain_first[(unsigned char)text[0]] = true;
    }
    return CT_OK;
}

/* ------------------------------------------------------- encoding */

/* Append the ids of one pre-tokenised word. */
static ct_status enc_word(const ct_tokenizer *t, ct_tok_state *s, const uint8_t *w, size_t n, ct_tokens *out) {
    ct_status st = tok_tokens_reserve(out, n);
    if (st) return st;
    if (n == 1) {
        out->ids[out->n++] = t->byte_id[w[0]];
        return CT_OK;
    }
    uint64_t h = 0;
    if (n <= TOK_CACHE_MAX_WORD) {
        h = tok_cache_hash(w, n);
        const tok_cache_slot *c = tok_cache_find(s, w, n, h);
        if (c) {
            memcpy(out->ids + out->n, s->ids + c->ids_off, c->n_ids * sizeof *out->ids);
            out->n += c->n_ids;
            return CT_OK;
        }
    }
    size_t k = 0;
    if ((st = bpe_word(t, s, w, n, &k))) return st;
    memcpy(out->ids + out->n, s->word, k * sizeof *out->ids);
    out->n += k;
    if (n <= TOK_CACHE_MAX_WORD) tok_cache_put(s, w, n, h, s->word, k);
    tok_state_trim(s);
    return CT_OK;
}

/* Pre-tokenise valid UTF-8 text[0..n) and encode each piece. */
static ct_status enc_valid(const ct_tokenizer *t, ct_tok_state *s, const uint8_t *text, size_t n, ct_tokens *out) {
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
    size_t o = 0;
    while (o < n) {
        int rc = t->jit ? pcre2_jit_match(t->re, text, n, o, 0, s->md, s->mctx)
                        : pcre2_match(t->re, text, n, o, PCRE2_NO_UTF_CHECK, s->md, s->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break; /* as the reference's matchAll: the rest gives no tokens */
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return CT_ERR(rc == PCRE2_ERROR_NOMEMORY || rc == PCRE2_ERROR_JIT_STACKLIMIT ? CT_ERR_OOM : CT_ERR_ARG,
                          "tokenizer: pattern match failed at byte offset %zu: %s", o, (const char *)msg);
        }
        /* every character matches one alternative, so matches tile the text */
        CT_ASSERT(ov[1] > ov[0] && ov[1] <= n);
        ct_status st = enc_word(t, s, text + ov[0], ov[1] - ov[0], out);
        if (st) return st;
        o = ov[1];
    }
    return CT_OK;
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when none starts there
 * (a stray continuation byte, 0xC0/0xC1/0xF5..0xFF, a truncated sequence, an
 * overlong form, a surrogate, or a code point above U+10FFFF). */
size_t tok_utf8_seq(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    if (c < 0xC2 || c > 0xF4) return 0;
    size_t len = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (n < len) return 0;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c == 0xE0) lo = 0xA0;     /* overlong */
    if (c == 0xED) hi = 0x9F;     /* surrogates */
    if (c == 0xF0) lo = 0x90;     /* overlong */
    if (c == 0xF4) hi = 0x8F;     /* above U+10FFFF */
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t k = 2; k < len; k++)
        if ((s[k] & 0xC0) != 0x80) return 0;
    return len;
}

/* Offset of the first byte of s[0..n) that starts no valid sequence, or n. */
static size_t utf8_valid_prefix(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        /* eight ASCII bytes at a time */
        while (i + 8 <= n) {
            uint64_t x;
            memcpy(&x, s + i, 8);
            if (x & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        size_t k = tok_utf8_seq(s + i, n - i);
        if (!k) return i;
        i += k;
    }
    return n;
}

size_t ct_utf8_valid_prefix(const char *text, size_t len) {
    return utf8_valid_prefix((const uint8_t *)text, len);
}

/* Encode text[0..n), which is valid UTF-8 unless lossy. In lossy mode each
 * maximal run of bytes that start no valid sequence is one word of its own,
 * and the valid text on either side is pre-tokenised as if the run were the
 * end or the start of the text. */
static ct_status enc_text(const ct_tokenizer *t, ct_tok_state *s, const uint8_t *text, size_t n, bool lossy,
                          ct_tokens *out) {
    if (!lossy) return enc_valid(t, s, text, n, out);
    size_t i = 0;
    while (i < n) {
        size_t v = utf8_valid_prefix(text + i, n - i);
        ct_status st = enc_valid(t, s, text + i, v, out);
        if (st) return st;
        i += v;
        size_t j = i;
        while (j < n && tok_utf8_seq(text + j, n - j) == 0) j++;
        if (j > i && (st = enc_word(t, s, text + i, j - i, out))) return st;
        i = j;
    }
    return CT_OK;
}

/* The first added token at or after text[from] (all of them, or only the
 * non-special ones), the longest one at a position, as transformers.js's
 * splitter finds them: its offset (n when none) and index into t->added. */
static size_t enc_find_added(const ct_tokenizer *t, bool all, const uint8_t *text, size_t n, size_t from,
                             int32_t *which) {
    const bool *first = all ? t->added_first : t->plain_first;
    for (size_t i = from; i < n; i++) {
        if (!first[text[i]]) continue;
        int32_t best = -1, node = 0;
        for (size_t j = i; j < n; j++) {
            int32_t c = t->trie[node].child;
            while (c >= 0 && t->trie[c].byte != text[j]) c = t->trie[c].sibling;
            if (c < 0) break;
            node = c;
            int32_t a = t->trie[node].added;
            if (a >= 0 && (all || !t->added[a].special)) best = a;
        }
        if (best >= 0) {
            *which = best;
            return i;
        }
    }
    return n;
}

/* Whether the UTF-8 character ending at text[end - 1] / starting at text[i]
 * is JavaScript whitespace (what trimEnd / trimStart drop): its length, or 0. */
static size_t enc_space_before(const uint8_t *text, size_t begin, size_t end) {
    if (end == begin) return 0;
    uint8_t c = text[end - 1];
    if (c == ' ' || (c >= '\t' && c <= '\r')) return 1;
    size_t k = 1;
    while (k < 4 && end - k > begin && (text[end - k] & 0xC0) == 0x80) k++;
    return tok_js_space_len(text + end - k, k) == k ? k : 0;
}

static size_t enc_space_after(const uint8_t *text, size_t i, size_t end) {
    return i < end ? tok_js_space_len(text + i, end - i) : 0;
}

/* Encode one segment of text between added tokens. */
static ct_status enc_segment(const ct_tokenizer *t, ct_tok_state *s, const uint8_t *text, size_t n, bool at_start,
                             bool lossy, ct_tokens *out) {
    if (!t->hf) {
        if (t->kind == CT_TOK_KIND_SPM_BPE) return tok_spm_encode(t, s, text, n, at_start, out);
        return enc_text(t, s, text, n, lossy, out);
    }
    if (!lossy) return tok_hf_encode(t, s, text, n, at_start, out);
    /* each run of bytes that start no valid sequence is a word of its own */
    size_t i = 0;
    while (i < n) {
        size_t v = utf8_valid_prefix(text + i, n - i);
        ct_status st = tok_hf_encode(t, s, text + i, v, at_start && i == 0, out);
        if (st) return st;
        i += v;
        size_t j = i;
        while (j < n && tok_utf8_seq(text + j, n - j) == 0) j++;
        if (j > i && (st = tok_hf_encode_raw(t, s, text + i, j - i, out))) return st;
        i = j;
    }
    return CT_OK;
}

ct_status ct_tokenizer_encode(const ct_tokenizer *t, ct_tok_state *state, const char *text, size_t len, int flags,
                              ct_tokens *out) {
    CT_ASSERT(t && out && (text || len == 0));
    CT_ASSERT(!state || state->t == t);
    const uint8_t *u = (const uint8_t *)text;
    bool lossy = (flags & CT_TOK_LOSSY) != 0;
    if (!lossy) {
        size_t bad = utf8_valid_prefix(u, len);
        if (bad < len) {
            ct_status st = CT_ERR(CT_ERR_FORMAT, "invalid UTF-8 at byte offset %zu (byte 0x%02X)", bad, u[bad]);
            ct_error_hint("fix the text's encoding, or encode its raw bytes anyway (CT_TOK_LOSSY, `ctrain tokenize --lossy`)");
            return st;
        }
    }
    ct_tok_state *s = state ? state : ct_tok_state_new(t);
    if (!s) return ct_last_status();
    size_t n0 = out->n, pos = 0;
    ct_status st = CT_OK;
    /* the added tokens matched in the text: all of them, or the non-special ones
     * (which are part of ordinary text, as Hugging Face matches them) */
    bool all = (flags & (CT_TOK_ADDED_TOKENS | CT_TOK_ALLOW_SPECIAL)) != 0;
    bool rstrip = false; /* the previous added token drops the whitespace after it */
    while (pos < len && !st) {
        int32_t a = -1;
        size_t at = t->n_added ? enc_find_added(t, all, u, len, pos, &a) : len;
        size_t begin = pos, end = at, k;
        if (rstrip)
            while ((k = enc_space_after(u, begin, end)) > 0) begin += k;
        if (a >= 0 && t->added[a].lstrip)
            while ((k = enc_space_before(u, begin, end)) > 0) end -= k;
        if (end > begin) st = enc_segment(t, s, u + begin, end - begin, pos == 0, lossy, out);
        if (!st && a >= 0) {
            st = ct_tokens_push(out, t->added[a].id);
            at += t->added[a].len;
            rstrip = t->added[a].rstrip;
        }
        pos = at;
    }
    if (s != state) ct_tok_state_free(s);
    if (st) out->n = n0;
    return st;
}

/* ------------------------------------------------------- decoding */

const char *ct_tokenizer_token_bytes(const ct_tokenizer *t, int32_t id, size_t *len) {
    CT_ASSERT(t && len);
    if (id < 0 || id >= t->n_ids || t->tok_len[id] == TOK_NO_TOKEN) {
        *len = 0;
        return NULL;
    }
    *len = t->tok_len[id];
    return t->tok_bytes + t->tok_off[id];
}

ct_status ct_tokenizer_decode(const ct_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len) {
    CT_ASSERT(t && text && (ids || n == 0));
    *text = NULL;
    if (len) *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_ids || t->tok_len[id] == TOK_NO_TOKEN)
            return CT_ERR(CT_ERR_ARG, "token id %d at position %zu is not in the vocabulary (ids 0..%d)", (int)id, i,
                          (int)t->n_ids - 1);
        total += t->tok_len[id];
    }
    char *p = malloc(total + 1);
    if (!p) return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory decoding %zu bytes", total);
    size_t o = 0;
    if (t->kind == CT_TOK_KIND_SPM_BPE) {
        o = tok_spm_decode(t, ids, n, p);
    } else {
        for (size_t i = 0; i < n; i++) {
            memcpy(p + o, t->tok_bytes + t->tok_off[ids[i]], t->tok_len[ids[i]]);
            o += t->tok_len[ids[i]];
        }
    }
    p[o] = '\0';
    *text = p;
    if (len) *len = o;
    return CT_OK;
}
