/*
 * Inside the tokenizers: the loaded tables shared by tokenizer_load.c
 * (reading encoder.json + vocab.bpe or tokenizer.json, hashing the identity,
 * compiling the pre-tokenisation pattern), tokenizer.c (GPT-2 encode, decode,
 * the per-thread state and its word cache) and tokenizer_spm.c (the
 * SentencePiece-BPE kind), plus hooks the unit tests use to check the fast
 * paths against the plain ones. Never installed; nothing outside
 * src/data/tokenizer*.c and the tests includes it.
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

/* Where a SentencePiece-style tokenizer puts its "▁" (U+2581) before a text
 * segment (a text, or a piece between special tokens). */
typedef enum tok_prepend {
    TOK_PREPEND_NEVER = 0,
    TOK_PREPEND_ALWAYS = 1, /* before every segment (normalizer Prepend, Metaspace "always") */
    TOK_PREPEND_FIRST = 2,  /* only before the segment at the start of the text */
    TOK_PREPEND_COUNT
} tok_prepend;

/* Per-id flags of a SentencePiece-style vocabulary. */
#define TOK_SPM_BYTE 1u      /* a <0xXX> byte-fallback token */
#define TOK_SPM_SPECIAL 2u   /* an added token, its text taken as is */
#define TOK_SPM_LEAD_MARK 4u /* spelled with a leading "▁" (its bytes start with a space) */

/* The SentencePiece-BPE tables (kind CT_TOK_KIND_SPM_BPE). */
typedef struct tok_spm {
    int32_t ascii_id[128]; /* id of each one-character ASCII token, -1 where none */
    uint32_t *cp_key;      /* [cp_mask + 1] open addressing over code points >= 128 (0 = free) */
    int32_t *cp_id;        /* [cp_mask + 1] the one-character token of cp_key */
    size_t cp_mask;
    uint8_t *flags;        /* [n_ids] TOK_SPM_* */
    tok_prepend prepend;
    bool prepend_unless_mark; /* Metaspace: no "▁" added when the segment starts with one */
    bool replace_space;    /* ' ' becomes "▁" */
    bool split_all;        /* Metaspace split: a new piece starts at every "▁" */
    bool split_safe;       /* no token holds "▁" after another character, so pieces
                            * may start at a "▁" that follows another character */
    int32_t unk;           /* model.unk_token's id, or -1 */
} tok_spm;

struct ct_tokenizer {
    ct_tok_kind kind;
    int32_t n_ids;      /* largest id + 1 */
    uint32_t *tok_off;  /* [n_ids] byte offset of each token in tok_bytes */
    uint32_t *tok_len;  /* [n_ids] bytes; TOK_NO_TOKEN where no token has the id */
    char *tok_bytes;    /* the tokens' bytes, back to back (SentencePiece: decoded,
                         * "▁" as a space, <0xXX> as the byte) */
    int32_t byte_id[256]; /* id of the one-byte token for each byte value */
    tok_pair_map pairs; /* merge ranks, keyed by pair of ids */
    int64_t n_merges;   /* lines of vocab.bpe / entries of model.merges */
    int32_t *special;   /* [n_special] ids of special tokens, longest text first */
    size_t n_special;
    bool special_first[256]; /* a special token starts with this byte */
    int32_t *added;     /* [n_added] ids of every added token (tokenizer.json added_tokens,
                         * special or not; <|endoftext|> of encoder.json), longest text first:
                         * what CT_TOK_ADDED_TOKENS matches */
    size_t n_added;
    bool added_first[256]; /* an added token starts with this byte */
    int32_t eot;        /* id of <|endoftext|> (SentencePiece: EOS), or -1 */
    int32_t bos;        /* id put before each document (GPT-2: eot), or -1 */
    char identity[32];  /* "gpt2-bpe:" or "spm-bpe:" + 16 hex digits */
    pcre2_code *re;     /* GPT-2's pre-tokenisation pattern (NULL for SentencePiece) */
    bool jit;           /* re was JIT-compiled */
    tok_spm spm;        /* kind CT_TOK_KIND_SPM_BPE only */
    /* the files it was read from, and the name each is saved under
     * (ct_tokenizer_save_files); set by tokenizer_files.c */
    char *files[CT_TOK_FILES_MAX];          /* owned paths, as opened */
    const char *save_as[CT_TOK_FILES_MAX];  /* static names */
    int n_files;
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

/* ------------------------------------------------ per-thread state (tokenizer.c) */

typedef struct tok_cache_slot {
    uint64_t hash;    /* XXH3 of the word; 0 marks a free slot */
    uint32_t key_off; /* into keys */
    uint32_t ids_off; /* into ids */
    uint16_t key_len; /* bytes */
    uint16_t n_ids;
} tok_cache_slot;

typedef struct bpe_sym {
    int32_t id;   /* -1 once merged into its left neighbour */
    int32_t prev; /* index of the symbol to the left, -1 at the start */
    int32_t next; /* index of the symbol to the right, -1 at the end */
} bpe_sym;

typedef struct bpe_cand {
    int32_t rank, pos;    /* heap order: lowest rank, then leftmost */
    int32_t left, right;  /* the ids the pair had when it was queued */
    int32_t merged;
} bpe_cand;

struct ct_tok_state {
    const ct_tokenizer *t;
    pcre2_match_data *md;     /* GPT-2 only */
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;
    tok_cache_slot *slots; /* [mask + 1], NULL until first use */
    size_t mask, used;
    uint8_t *keys;
    size_t keys_n;
    int32_t *ids;
    size_t ids_n;
    bpe_sym *sym;     /* BPE scratch, [cap] each */
    bpe_cand *heap, *pass; /* candidates ([3 * cap]); one pass's pairs */
    int32_t *word;
    size_t cap, heap_n;
    uint8_t *norm;    /* SentencePiece: the normalised segment, [norm_cap] */
    size_t norm_cap;
};

#define TOK_CACHE_MAX_WORD 255 /* longer words are not cached */

ct_status tok_tokens_reserve(ct_tokens *v, size_t more);
/* Room for BPE of an n-symbol word in s->sym, heap, pass and word. */
ct_status tok_state_scratch(ct_tok_state *s, size_t n);
/* Free the scratch when a huge word made it large. */
void tok_state_trim(ct_tok_state *s);
bool tok_cand_less(const bpe_cand *x, const bpe_cand *y);
void tok_heap_push(bpe_cand *h, size_t *n, bpe_cand c);
bpe_cand tok_heap_pop(bpe_cand *h, size_t *n);
/* Word cache: hash of w[0..n), lookup (NULL on a miss), and insert. */
uint64_t tok_cache_hash(const uint8_t *w, size_t n);
const tok_cache_slot *tok_cache_find(const ct_tok_state *s, const uint8_t *w, size_t n, uint64_t h);
void tok_cache_put(ct_tok_state *s, const uint8_t *w, size_t n, uint64_t h, const int32_t *ids, size_t k);
/* Length of the valid UTF-8 sequence at s[0..n), 0 when none starts there. */
size_t tok_utf8_seq(const uint8_t *s, size_t n);

/* ------------------------------------------------ SentencePiece (tokenizer_spm.c) */

/* Encode one text segment (no special tokens in it) of a SentencePiece-style
 * tokenizer: at_start says the segment begins the text. Invalid UTF-8 bytes
 * (possible only in lossy mode) become byte tokens. Appends to out. */
ct_status tok_spm_encode(const ct_tokenizer *t, ct_tok_state *s, const uint8_t *text, size_t n, bool at_start,
                         ct_tokens *out);
/* Decode ids (already checked to be in the vocabulary) into p (room for the
 * sum of their lengths); returns the bytes written. */
size_t tok_spm_decode(const ct_tokenizer *t, const int32_t *ids, size_t n, char *p);

struct cJSON;
/* Everything a tokenizer file said, before it becomes tables (tokenizer_load.c). */
typedef struct load_entry {
    const char *s; /* the token as the file spells it (borrowed from the parsed file) */
    uint32_t len;  /* bytes of s */
    int32_t id;
    bool special;  /* matched as a whole with CT_TOK_ALLOW_SPECIAL; bytes are s as is */
    bool raw;      /* bytes are s as is (added tokens), not byte-alphabet text */
} load_entry;

typedef struct load_merge {
    const char *a, *b; /* the two symbols, borrowed */
    uint32_t alen, blen;
    int64_t where;     /* vocab.bpe line number, or model.merges index */
} load_merge;

typedef struct load_builder {
    const char *vocab_file;  /* for messages: where the tokens came from */
    const char *merges_file; /* where the merges came from */
    bool merges_by_line;     /* where = line number (vocab.bpe) or index (model.merges) */
    load_entry *e;
    size_t n_e, cap_e;
    load_merge *m;
    size_t n_m, cap_m;
    /* string -> entry index, open addressing over [mask + 1] (-1 = free) */
    int32_t *index;
    size_t mask;
} load_builder;

/* Index of the entry spelled s[0..len), or -1 (after the index is built). */
int32_t tok_load_find(const load_builder *b, const char *s, size_t len);
/* Quote a token for a message into buf[cap >= 16]; returns buf. */
const char *tok_load_quote(char *buf, size_t cap, const char *s, size_t len);
/* CT_ERR_FORMAT naming merge m (of b's merges file) as a repeat of first. */
ct_status tok_load_dup_merge(const load_builder *b, const load_merge *m, const load_merge *first);
/* Merge table helpers (tokenizer_load.c). */
ct_status tok_pairs_init(tok_pair_map *m, size_t n);
void tok_pairs_set(tok_pair_map *m, int32_t left, int32_t right, int32_t rank, int32_t merged, bool keep_max);
/* The identity hash over t's tables and b's merges: "<prefix>:<16 hex>";
 * extra[0..n_extra) is hashed after them (the SentencePiece settings). */
/* Sort t's special tokens longest first (so the longest one matches at a
 * position) and mark their first bytes; CT_ERR_FORMAT naming b's file for an
 * empty one. Also builds t->added from b's added (raw) entries. */
ct_status tok_load_specials(ct_tokenizer *t, const load_builder *b);
ct_status tok_load_identity(ct_tokenizer *t, const load_builder *b, const char *prefix, const void *extra,
                            size_t n_extra);
/* Check a SentencePiece-style tokenizer.json (root, parsed from path) and
 * build t from the entries and merges read into b (indexed). Reads
 * tokenizer_config.json beside path for bos_token / eos_token when present. */
ct_status tok_spm_build(ct_tokenizer *t, load_builder *b, const struct cJSON *root, const char *path);
/* Whether root describes a SentencePiece-style BPE (model.byte_fallback true). */
bool tok_spm_detect(const struct cJSON *root);
void tok_spm_free(tok_spm *spm);

/* Test hooks (not API). tok_set_jit(t, false) makes t match with the PCRE2
 * interpreter even when JIT is available, so both engines can be compared. */
void tok_set_jit(ct_tokenizer *t, bool on);
/* BPE of one pre-tokenised word (bytes w[0..n), n >= 1) into ids (room for n),
 * by the plain algorithm of the reference (reference = true) or the heap
 * one. Returns the number of ids. Borrows everything. */
size_t tok_bpe_word(const ct_tokenizer *t, ct_tok_state *s, const uint8_t *w, size_t n,
                    int32_t *ids, bool reference);

/* The two file formats (tokenizer_load.c), filling a calloc'd t: the GPT-2
 * pair (encoder.json + vocab.bpe, or vocab.json + merges.txt), and a Hugging
 * Face tokenizer.json of either kind. Errors name the file. */
ct_status tok_load_gpt2_files(ct_tokenizer *t, const char *enc_path, const char *bpe_path);
ct_status tok_load_hf_file(ct_tokenizer *t, const char *path);

/* Compile GPT-2's pattern for t (tokenizer.c owns the pattern text). */
ct_status tok_compile_pattern(ct_tokenizer *t);

#endif
