/*
 * Inside the tokenizers: the loaded tables shared by tokenizer_load.c
 * (reading encoder.json + vocab.bpe or tokenizer.json, hashing the identity,
 * compiling the pre-tokenisation pattern), tokenizer.c (GPT-2 encode, decode,
 * the per-thread state and its word cache), tokenizer_spm.c (the
 * SentencePiece-BPE kind), tokenizer_hf.c / tokenizer_pipe.c /
 * tokenizer_regex.c (the generic tokenizer.json pipeline), plus hooks the
 * unit tests use to check the fast paths against the plain ones. Never
 * installed; nothing outside src/data/tokenizer/ and the tests includes it.
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

/* An added token (tokenizer.json's added_tokens; <|endoftext|> of
 * encoder.json): matched in the text before anything else runs. */
typedef struct tok_added {
    int32_t id;
    uint32_t len;        /* bytes of its text as written (the trie spells it) */
    bool special;        /* matched only with CT_TOK_ALLOW_SPECIAL / CT_TOK_ADDED_TOKENS */
    bool lstrip, rstrip; /* whitespace before / after it is dropped */
} tok_added;

/* A node of the byte trie over the added tokens' texts (node 0 is the root). */
typedef struct tok_trie {
    int32_t child;   /* first child, -1 when none */
    int32_t sibling; /* next child of the same parent, -1 when none */
    int32_t added;   /* index into t->added of the token ending here, or -1 */
    uint8_t byte;
} tok_trie;

struct tok_hf;

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
    tok_added *added;   /* [n_added] every added token (tokenizer.json added_tokens, special
                         * or not; <|endoftext|> of encoder.json) */
    size_t n_added;
    tok_trie *trie;     /* [n_trie] the added tokens' texts */
    size_t n_trie;
    bool added_first[256]; /* an added token starts with this byte */
    bool plain_first[256]; /* a non-special added token starts with this byte */
    bool adds_bos;      /* encoding a text for the model puts bos first (LLaMA, Llama 3, Gemma) */
    struct tok_hf *hf;  /* the generic tokenizer.json pipeline; NULL for the two fixed forms */
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
    /* the generic pipeline (tokenizer_pipe.c): normaliser output, the pieces'
     * bytes, the pieces (two lists, one step's input and output), the
     * pieces of one regex split */
    uint8_t *nbuf[2];
    size_t ncap[2];
    uint8_t *pbuf;
    size_t pbuf_n, pbuf_cap;
    struct tok_span *span[2];
    size_t span_n[2], span_cap[2];
    struct tok_seg *seg;
    size_t seg_n, seg_cap;
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
    bool lstrip, rstrip; /* added tokens: whitespace around them is dropped */
    bool in_model; /* listed in the model's vocabulary (encoder.json, model.vocab) */
} load_entry;

typedef struct load_merge {
    const char *a, *b; /* the two symbols, borrowed */
    uint32_t alen, blen;
    int64_t where;     /* vocab.bpe line number, or model.merges index */
    int32_t ida, idb;  /* the symbols' ids, once the merge table is built */
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
    size_t n_indexed; /* entries e[0..n_indexed) are in the index */
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
/* Check t's special tokens (CT_ERR_FORMAT naming b's file for an empty one)
 * and build t->added, the trie over their texts as written and the
 * first-byte tables from b's added (raw) entries (tokenizer.c). */
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
/* GPT-2's pattern as a JavaScript regex (the gpt-3-encoder's, and the one a
 * ByteLevel pre-tokenizer with use_regex runs in transformers.js). */
extern const char tok_gpt2_pattern[];

/* Compile the JavaScript regex src[0..n) (u flag) with PCRE2, rewritten so
 * that it matches exactly what node's RegExp matches (tokenizer_regex.c).
 * where names the pattern in messages ("FILE: pre_tokenizer.pattern.Regex").
 * Returns owned *re (release with pcre2_code_free); *jit when JIT-compiled.
 * Errors: CT_ERR_FORMAT naming where, the offset and what is not supported
 * or what PCRE2 refused; CT_ERR_OOM. */
ct_status tok_regex_compile(pcre2_code **re, bool *jit, const char *src, size_t n, const char *where);
/* Bytes of the UTF-8 character at p[0..n) when it is JavaScript whitespace
 * (what \s and String.prototype.trim take), else 0. */
size_t tok_js_space_len(const uint8_t *p, size_t n);

/* ------------------------------------------------ the generic pipeline */

/* A piece of text in the state's piece buffer. */
typedef struct tok_span {
    uint32_t off, len;
} tok_span;

/* One part of a piece split by a pattern: a match or the text between. */
typedef struct tok_seg {
    uint32_t off, len;
    bool match;
} tok_seg;

typedef enum tok_norm_kind {
    TOK_NORM_NFC = 0,
    TOK_NORM_NFD = 1,
    TOK_NORM_NFKC = 2,
    TOK_NORM_NFKD = 3,
    TOK_NORM_PREPEND = 4, /* text = s + text (a non-empty text) */
    TOK_NORM_REPLACE = 5, /* every s in the text becomes to */
    TOK_NORM_COUNT
} tok_norm_kind;

typedef struct tok_norm_step {
    tok_norm_kind kind;
    char *s, *to; /* owned, NUL-terminated */
    size_t s_len, to_len;
} tok_norm_step;

/* Hugging Face's SplitDelimiterBehavior. */
typedef enum tok_split_how {
    TOK_SPLIT_REMOVED = 0,
    TOK_SPLIT_ISOLATED = 1,
    TOK_SPLIT_MERGED_WITH_PREVIOUS = 2,
    TOK_SPLIT_MERGED_WITH_NEXT = 3,
    TOK_SPLIT_CONTIGUOUS = 4,
    TOK_SPLIT_COUNT
} tok_split_how;

typedef enum tok_pre_kind {
    TOK_PRE_SPLIT = 0,     /* a Regex (re) or a String (s) */
    TOK_PRE_BYTELEVEL = 1, /* prefix space, GPT-2's pattern when re is set */
    TOK_PRE_METASPACE = 2, /* ' ' -> "▁", prepend, split at "▁" */
    TOK_PRE_DIGITS = 3,    /* ASCII digits apart from the rest */
    TOK_PRE_COUNT
} tok_pre_kind;

typedef struct tok_pre_step {
    tok_pre_kind kind;
    pcre2_code *re;      /* owned; Split Regex, ByteLevel use_regex */
    bool jit;
    char *s;             /* owned; Split String */
    size_t s_len;
    tok_split_how how;
    bool invert;         /* Split: the matches are the pieces */
    bool prefix_space;   /* ByteLevel add_prefix_space */
    tok_prepend prepend; /* Metaspace */
    bool split;          /* Metaspace split */
    bool individual;     /* Digits individual_digits */
} tok_pre_step;

/* The generic pipeline of a tokenizer.json: added tokens, normalizer,
 * pre_tokenizer, BPE model (tokenizer_hf.c reads it, tokenizer_pipe.c runs it). */
typedef struct tok_hf {
    tok_norm_step *norm;
    int n_norm;
    tok_pre_step *pre;
    int n_pre;
    bool byte_level;    /* the vocabulary is spelled in GPT-2's byte alphabet (ByteLevel) */
    bool ignore_merges; /* a piece that is a token is that token */
    uint32_t ovec;      /* ovector pairs the patterns need */
    /* spelling -> id, for ignore_merges: open addressing over [voc_mask + 1]
     * (-1 = free), keys back to back in voc_keys */
    int32_t *voc_slot;
    size_t voc_mask;
    char *voc_keys;
    uint32_t *voc_off, *voc_len; /* [n_ids] */
    /* SentencePiece-style vocabulary: code points after which a "▁" may not
     * start a new piece (some token holds that character then "▁"), sorted */
    uint32_t *glue;
    size_t n_glue;
} tok_hf;

/* Whether root is one of the two fixed forms: GPT-2's byte-level BPE
 * (tokenizer_load.c builds it; tokenizer_hf.c tells) or LLaMA's SentencePiece
 * BPE (tok_spm_build);
 * everything else goes through the generic pipeline. */
bool tok_hf_is_gpt2_form(const struct cJSON *root);
bool tok_spm_is_form(const struct cJSON *root, const char *path);
/* Build the generic kind from root (parsed from path) and b's entries and
 * merges (indexed). Errors name path and the JSON key (CT_ERR_FORMAT). */
ct_status tok_hf_build(ct_tokenizer *t, load_builder *b, const struct cJSON *root, const char *path);
void tok_hf_free(tok_hf *hf);
/* Encode one text segment (valid UTF-8 between added tokens; at_start: it
 * begins the text) through the pipeline. Appends to out. */
ct_status tok_hf_encode(const ct_tokenizer *t, ct_tok_state *s, const uint8_t *text, size_t n, bool at_start,
                        ct_tokens *out);
/* Encode bytes that are no valid UTF-8 (lossy mode) as the model's word. */
ct_status tok_hf_encode_raw(const ct_tokenizer *t, ct_tok_state *s, const uint8_t *w, size_t n, ct_tokens *out);
void tok_hf_state_free(ct_tok_state *s);

/* Builders shared with the generic kind. tok_load_byte_tables: token bytes
 * through GPT-2's byte alphabet, the byte table, specials (tokenizer_load.c);
 * tok_load_merge_table: the merges by id, with gpt-3-encoder's comma aliases
 * when aliases. tok_spm_tables: a SentencePiece-style vocabulary (tokens,
 * byte fallback, merges). */
ct_status tok_load_byte_tables(ct_tokenizer *t, const load_builder *b);
ct_status tok_load_merge_table(ct_tokenizer *t, const load_builder *b, bool aliases);
ct_status tok_spm_tables(ct_tokenizer *t, const load_builder *b, const struct cJSON *model);
/* Hugging Face's BPE over s->sym[0..k) (ids set): the lowest-ranked adjacent
 * pair merges first, of equal ranks the leftmost, one merge at a time. Writes
 * the ids to out (room for k); returns their count. */
size_t tok_bpe_merge(const ct_tokenizer *t, ct_tok_state *s, size_t k, int32_t *out);
/* Append the ids of one SentencePiece-style piece w[0..n): characters to
 * their tokens or byte tokens, then tok_bpe_merge, through the word cache. */
ct_status tok_spm_piece(const ct_tokenizer *t, ct_tok_state *s, const uint8_t *w, size_t n, ct_tokens *out);

#endif
