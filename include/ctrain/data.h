/*
 * ctrain data: the GPT-2 byte-level BPE tokenizer (encode and decode) and the
 * growable token vector it fills.
 * Loads the files OpenAI and Hugging Face ship: encoder.json + vocab.bpe, or a
 * tokenizer.json holding a GPT-2-style byte-level BPE model. Pre-tokenisation
 * runs GPT-2's pattern through PCRE2 (JIT, UTF, UCP), and the output is
 * token-for-token the npm package gpt-3-encoder's.
 * Leaves out: SentencePiece/LLaMA tokenizers (later work), shard writing and
 * the tokenised-data cache (data/prepare.c, data/cache.c).
 */
#ifndef CT_DATA_H
#define CT_DATA_H

#include "ctrain/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A growable vector of token ids. Zero-initialise, append with the encoder,
 * release with ct_tokens_free (which leaves it empty and reusable). */
typedef struct ct_tokens {
    int32_t *ids;
    size_t n, cap;
} ct_tokens;
CT_API ct_status ct_tokens_push(ct_tokens *v, int32_t id);
CT_API void ct_tokens_free(ct_tokens *v);

typedef struct ct_tokenizer ct_tokenizer; /* opaque, read-only once loaded */
typedef struct ct_tok_state ct_tok_state; /* per-thread encoder scratch */

/* Load a tokenizer from `path`: a directory holding encoder.json + vocab.bpe
 * (tried first) or tokenizer.json, or the path of a tokenizer.json file.
 * With encoder.json, <|endoftext|> (when present) is the special token; in a
 * tokenizer.json the special added_tokens are (other added tokens decode but
 * are not matched in text), and it must be GPT-2-like: model.type "BPE",
 * ByteLevel pre-tokenizer without add_prefix_space, no normalizer.
 * Returns owned *out; release with ct_tokenizer_free. Errors name the file
 * and what was wrong: CT_ERR_IO (missing/unreadable), CT_ERR_FORMAT
 * (malformed JSON, a merge line that is not two symbols, a merge naming an
 * unknown symbol, duplicate ids, not a byte-level BPE model; vocab.bpe
 * errors give the line number), CT_ERR_OOM. */
CT_API ct_status ct_tokenizer_load(ct_tokenizer **out, const char *path);
CT_API void ct_tokenizer_free(ct_tokenizer *t); /* NULL is fine */

/* Number of ids (largest id + 1). */
CT_API int ct_tokenizer_vocab_size(const ct_tokenizer *t);
/* Id of <|endoftext|>, or -1 when the vocabulary has none. */
CT_API int32_t ct_tokenizer_eot(const ct_tokenizer *t);
/* Identity string, stable across runs and machines, that changes whenever
 * the vocabulary, merges or special tokens change:
 * "gpt2-bpe:<16 hex digits of a hash over them>". Borrowed; lives as long
 * as t. Used to key cached tokenisations and recorded in manifests. */
CT_API const char *ct_tokenizer_identity(const ct_tokenizer *t);

/* Per-thread scratch (PCRE2 match data, JIT stack, a word cache bounded at
 * about 10 MiB). One tokenizer may be shared by many threads, each with its
 * own state; reuse a state across calls (the cache makes later documents
 * cheaper). Returns owned; release with ct_tok_state_free (after the last
 * encode with it; the tokenizer must outlive it). NULL on OOM (error set). */
CT_API ct_tok_state *ct_tok_state_new(const ct_tokenizer *t);
CT_API void ct_tok_state_free(ct_tok_state *s); /* NULL is fine */

enum {
    /* The literal text "<|endoftext|>" (and other special tokens) encode to
     * their ids; without this flag they are ordinary text, as in the
     * gpt-3-encoder reference and llm.c's encode_ordinary. */
    CT_TOK_ALLOW_SPECIAL = 1 << 0,
    /* Invalid UTF-8 is encoded instead of refused (byte-level BPE can
     * represent any bytes): each maximal run of bytes that start no valid
     * UTF-8 sequence is a word of its own, BPE-merged like any word, and the
     * valid text on either side is pre-tokenised as if the run were the end
     * or the start of the text. Valid text encodes as without the flag, and
     * decode gives back the exact input bytes. */
    CT_TOK_LOSSY = 1 << 1,
};

/* Append the ids of text[0..len) to out (borrows text; out keeps its ids
 * and grows). state may be NULL (a temporary one is made: much slower for
 * small texts). Without CT_TOK_LOSSY, invalid UTF-8 (truncated or overlong
 * sequences, surrogates, bytes 0xC0, 0xC1, 0xF5..0xFF, code points above
 * U+10FFFF) returns CT_ERR_FORMAT "invalid UTF-8 at byte offset N (byte 0xXX)",
 * N counted from text, and appends nothing; so does any other error
 * (CT_ERR_OOM). Never reads past len; text need not be NUL-terminated.
 * Thread-safe with distinct states. */
CT_API ct_status ct_tokenizer_encode(const ct_tokenizer *t, ct_tok_state *state, const char *text,
                                     size_t len, int flags, ct_tokens *out);

/* Offset of the first byte of text[0..len) that starts no valid UTF-8
 * sequence (overlongs, surrogates and code points above U+10FFFF are
 * invalid), or len when all of it is valid. */
CT_API size_t ct_utf8_valid_prefix(const char *text, size_t len);

/* The bytes token `id` stands for (borrowed, *len set; not NUL-terminated).
 * NULL when id is out of range. A token may hold part of a UTF-8 character. */
CT_API const char *ct_tokenizer_token_bytes(const ct_tokenizer *t, int32_t id, size_t *len);
/* Decode ids[0..n) into a NUL-terminated byte string (returned owned through
 * *text, release with free; *len excludes the NUL). Errors: CT_ERR_ARG for an
 * id out of range (naming it and its position), CT_ERR_OOM. */
CT_API ct_status ct_tokenizer_decode(const ct_tokenizer *t, const int32_t *ids, size_t n,
                                     char **text, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
