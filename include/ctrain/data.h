/*
 * ctrain data: the tokenizers (encode and decode) and the growable token
 * vector they fill. Two kinds of vocabulary behind one interface:
 *  - GPT-2 byte-level BPE, from OpenAI's encoder.json + vocab.bpe or a Hugging
 *    Face tokenizer.json with a ByteLevel pre-tokenizer. Pre-tokenisation runs
 *    GPT-2's pattern through PCRE2 (JIT, UTF, UCP); the output is
 *    token-for-token the npm package gpt-3-encoder's.
 *  - SentencePiece-style BPE with byte fallback (LLaMA, LLaMA 2, TinyLlama,
 *    Mistral), from the tokenizer.json those models ship: "▁" for spaces and
 *    before each text, <0xXX> tokens for characters outside the vocabulary,
 *    BOS/EOS. The output is token-for-token the npm package
 *    llama-tokenizer-js's (and Hugging Face tokenizers').
 * Any other Hugging Face tokenizer.json with a BPE model is read generically
 * (Llama 3.x, Qwen2.5/Qwen3, SmolLM2, Gemma 3): its normalizer (NFC, NFD,
 * NFKC, NFKD, Prepend, Replace), pre_tokenizer (Split by any regex or string,
 * ByteLevel, Metaspace, Digits), ignore_merges, added tokens and
 * post_processor BOS; the output is token-for-token transformers.js's
 * (@lenml/tokenizers) on those models' files.
 * Leaves out: WordPiece and Unigram models, other normalizers and
 * pre-tokenizers (refused with CT_ERR_FORMAT naming the file and key), shard
 * writing and the tokenised-data cache (data/prepare/prepare.c, data/prepare/cache.c).
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

/* The kind of vocabulary (what a token's bytes are), not the whole pipeline:
 * the identity tells tokenizers apart. */
typedef enum ct_tok_kind {
    CT_TOK_KIND_GPT2_BPE = 0, /* byte-level BPE (GPT-2; Llama 3, Qwen, SmolLM2) */
    CT_TOK_KIND_SPM_BPE = 1,  /* SentencePiece-style BPE with byte fallback (LLaMA, Gemma) */
    CT_TOK_KIND_COUNT
} ct_tok_kind;

/* Load a tokenizer from `path`: a directory holding encoder.json + vocab.bpe
 * (tried first), tokenizer.json, or Hugging Face's vocab.json + merges.txt
 * (the formats of encoder.json and vocab.bpe); or the path of one of those
 * files, of tokenizer_config.json, special_tokens_map.json or config.json (the
 * directory it is in is read), or of a tokenizer.json by any other name.
 * The kind comes from the files: the GPT-2 pair, or a tokenizer.json
 * with model.type "BPE" and either
 *  - model.byte_fallback true: SentencePiece-style. The normalizer is absent,
 *    Prepend "▁", Replace " " -> "▁", or a Sequence of those two; the
 *    pre_tokenizer is absent or Metaspace ("▁"; add_prefix_space, or
 *    prepend_scheme always | first | never; split). BOS/EOS come from
 *    tokenizer_config.json beside the file (bos_token, eos_token) when it has
 *    them, else from post_processor (a TemplateProcessing that starts with a
 *    special token) and the tokens <s> and </s>;
 *  - a ByteLevel pre_tokenizer without add_prefix_space and no normalizer:
 *    GPT-2-style;
 *  - anything else: the generic pipeline (see the top of this file). The
 *    vocabulary is byte-level when the pre_tokenizer has a ByteLevel step, else
 *    it must have byte_fallback. BOS is the post_processor's leading special
 *    token (TemplateProcessing); EOS tokenizer_config.json's eos_token, else the
 *    post_processor's trailing one, else <|endoftext|> or </s>.
 * With encoder.json, <|endoftext|> (when present) is the special token; in a
 * tokenizer.json the special added_tokens are. Added tokens that are not
 * special are part of ordinary text: they are matched in every mode, as
 * Hugging Face matches them (Gemma's "\n\n" and "<table>", Qwen's <think>).
 * Returns owned *out; release with ct_tokenizer_free. Errors name the file
 * and what was wrong: CT_ERR_IO (missing/unreadable), CT_ERR_FORMAT
 * (malformed JSON, a merge line that is not two symbols, a merge naming an
 * unknown symbol, duplicate ids, a kind not supported: the message names the
 * JSON key, e.g. model.type, normalizer.normalizers[0].type,
 * pre_tokenizer.pretokenizers[0].pattern.Regex, and the kinds that are;
 * vocab.bpe errors give the line number), CT_ERR_OOM. */
CT_API ct_status ct_tokenizer_load(ct_tokenizer **out, const char *path);
CT_API void ct_tokenizer_free(ct_tokenizer *t); /* NULL is fine */

CT_API ct_tok_kind ct_tokenizer_kind(const ct_tokenizer *t);
/* Number of ids (largest id + 1). */
CT_API int ct_tokenizer_vocab_size(const ct_tokenizer *t);
/* Id of the end-of-text token: <|endoftext|> for GPT-2, EOS (</s>) for
 * SentencePiece, tokenizer_config.json's eos_token for the generic pipeline
 * (Llama 3.1's <|eot_id|>, Qwen3's <|im_end|>, Gemma 3's <end_of_turn>); -1
 * when the vocabulary has none. */
CT_API int32_t ct_tokenizer_eot(const ct_tokenizer *t);
/* Id of the token that starts a document, as the model was trained:
 * <|endoftext|> for GPT-2 (as llm.c's preparation puts it), BOS (<s>) for
 * SentencePiece; for the generic pipeline the post_processor's BOS (Llama 3's
 * <|begin_of_text|>, Gemma's <bos>), else the end-of-text token
 * (<|endoftext|> when the vocabulary has it: Qwen, SmolLM2; else EOS); -1
 * when there is none. */
CT_API int32_t ct_tokenizer_bos(const ct_tokenizer *t);
/* Whether the model's own tokenizer puts that BOS before every text it
 * encodes for the model (SentencePiece LLaMA; a tokenizer.json whose
 * post_processor starts with a special token: Llama 3's <|begin_of_text|>,
 * Gemma's <bos>), rather than only between documents (GPT-2, Qwen). */
CT_API bool ct_tokenizer_adds_bos(const ct_tokenizer *t);
/* Identity string, stable across runs and machines, that changes whenever
 * the vocabulary, merges, special tokens or (SentencePiece) the way spaces
 * are marked change: "gpt2-bpe:", "spm-bpe:" or (the generic pipeline, whose
 * normalizer, pre-tokenizer, model options, added tokens and BOS/EOS are
 * hashed too) "hf-bpe:" / "hf-spm:" + 16 hex digits of a hash over them. Borrowed; lives as long as t. Used to key cached tokenisations
 * and recorded in manifests. */
CT_API const char *ct_tokenizer_identity(const ct_tokenizer *t);

/* ---- the tokenizer on disk, and whose tokenizer is whose
 * A model directory (Hugging Face layout, a ctrain run.dir or checkpoint)
 * carries its tokenizer as files beside the weights; shards carry the
 * identity of theirs in manifest.json (ctrain prepare). Two tokenizers are
 * the same when their identities are: the same vocabulary and merges read
 * from encoder.json + vocab.bpe, vocab.json + merges.txt or a tokenizer.json
 * give one identity. */

#define CT_TOK_FILES_MAX 8 /* files of one tokenizer on disk, at most */

/* The files t was read from, in the order read: encoder.json and vocab.bpe,
 * vocab.json and merges.txt, or tokenizer.json; then tokenizer_config.json
 * and special_tokens_map.json when they are beside a Hugging Face file.
 * Paths as opened, borrowed (live as long as t). *save_as (may be NULL) gets
 * the name ct_tokenizer_save_files gives file i. NULL when i is out of range. */
CT_API int ct_tokenizer_num_files(const ct_tokenizer *t);
CT_API const char *ct_tokenizer_file(const ct_tokenizer *t, int i, const char **save_as);

/* Write t's files into directory dir (which must exist) under the names
 * Hugging Face reads (vocab.json + merges.txt for GPT-2's pair whatever it
 * was called, tokenizer.json, tokenizer_config.json, special_tokens_map.json),
 * each atomically, and remove the other tokenizer file names from dir
 * (encoder.json, vocab.bpe, ...), so that dir loads as t. Does nothing when
 * t was read from dir itself. Not thread-safe against other writers of dir.
 * Errors: CT_ERR_IO naming the file and the system error, CT_ERR_OOM. */
CT_API ct_status ct_tokenizer_save_files(const ct_tokenizer *t, const char *dir);
/* Whether directory dir holds a tokenizer file (one of the names above). */
CT_API bool ct_tokenizer_dir_has_files(const char *dir);
/* Copy the tokenizer files in from_dir (those of the names above that are
 * there) into to_dir, each atomically. names[0..*n) get the names copied
 * (static strings; names has room for CT_TOK_FILES_MAX; may be NULL).
 * Copies nothing (and *n = 0) when from_dir has none. Errors: CT_ERR_IO,
 * CT_ERR_OOM (naming the file). */
CT_API ct_status ct_tokenizer_copy_files(const char *from_dir, const char *to_dir, const char **names,
                                         int *n);

#define CT_TOK_WHERE_MAX 1280 /* bytes of a ct_tok_info path */

/* What a model directory or a set of shards says about its tokenizer. */
typedef struct ct_tok_info {
    char identity[32];              /* ct_tokenizer_identity; "" when it names none */
    int64_t vocab_size;             /* ids; 0 when unknown */
    char where[CT_TOK_WHERE_MAX];   /* what says so: the directory, or SHARDS/manifest.json */
    char origin[CT_TOK_WHERE_MAX];  /* shards: the --tokenizer prepare read, as given; else "" */
    char load[CT_TOK_WHERE_MAX];    /* a path ct_tokenizer_load reads that tokenizer from, when
                                     * one is at hand (it may have changed since: compare the
                                     * identity); else "" */
} ct_tok_info;

/* The tokenizer of model directory dir: its tokenizer files, loaded (about
 * 0.2 s for GPT-2's). A directory without any (or a path that is not a
 * directory) names none: identity "". Errors: those of ct_tokenizer_load
 * (files there that do not load, naming them). */
CT_API ct_status ct_tok_info_of_dir(ct_tok_info *out, const char *dir);
/* The tokenizer of the shards spec names (a shard file, glob or directory,
 * as the loader takes it): manifest.json in their directory, written by
 * ctrain prepare (format "ctrain-shards/..."). None (identity "") when there
 * is no manifest, it is another program's, or a named shard file is not
 * among the manifest's shards. Errors: CT_ERR_FORMAT for a ctrain manifest
 * that does not parse or lacks a valid tokenizer.identity (naming the file
 * and key), CT_ERR_OOM. */
CT_API ct_status ct_tok_info_of_shards(ct_tok_info *out, const char *spec);
/* The record of a loaded tokenizer, read from `where`. */
CT_API void ct_tok_info_of(ct_tok_info *out, const ct_tokenizer *t, const char *where);
/* CT_OK when a and b name the same tokenizer, or either names none; else
 * CT_ERR_ARG naming both identities, sizes and sources, with a_name and
 * b_name saying what each belongs to (e.g. "model.init_from = DIR",
 * "data.train = SHARDS"), and a hint. */
CT_API ct_status ct_tok_info_match(const ct_tok_info *a, const char *a_name, const ct_tok_info *b,
                                   const char *b_name);

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
     * gpt-3-encoder reference and llm.c's encode_ordinary. (Added tokens
     * that are not special are matched with or without it.) */
    CT_TOK_ALLOW_SPECIAL = 1 << 0,
    /* Invalid UTF-8 is encoded instead of refused (byte-level BPE can
     * represent any bytes): each maximal run of bytes that start no valid
     * UTF-8 sequence is a word of its own, BPE-merged like any word, and the
     * valid text on either side is pre-tokenised as if the run were the end
     * or the start of the text. Valid text encodes as without the flag, and
     * decode gives back the exact input bytes. */
    CT_TOK_LOSSY = 1 << 1,
    /* Every added token of the tokenizer (tokenizer.json's added_tokens,
     * special or not, and the special tokens) is matched in the text and
     * becomes its id, as Hugging Face tokenizers split added tokens out of a
     * text before encoding the rest: the markup a chat template writes
     * (<|im_start|>, <start_of_turn>, </s>) becomes one token each. The
     * longest match wins at a position; the text between is encoded as
     * usual (SentencePiece: each piece with its "▁" prefix, as with
     * CT_TOK_ALLOW_SPECIAL). Now the same as CT_TOK_ALLOW_SPECIAL, since
     * the added tokens that are not special are always matched. Whitespace
     * beside an added token with lstrip / rstrip is dropped, as
     * transformers.js does (single_word: refused by the generic pipeline). */
    CT_TOK_ADDED_TOKENS = 1 << 2,
};

/* Append the ids of text[0..len) to out (borrows text; out keeps its ids
 * and grows). No BOS or EOS is added. SentencePiece: spaces become "▁" and
 * the text (or, with CT_TOK_ALLOW_SPECIAL, each piece between special tokens)
 * gets the "▁" prefix its tokenizer.json asks for; the merges then run over
 * the whole text as Hugging Face's normalizer form and llama-tokenizer-js do
 * (or within the pieces of a Metaspace split); empty text gives no ids. state may be NULL (a temporary one is made: much slower for
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
 * NULL when id is out of range. A token may hold part of a UTF-8 character.
 * SentencePiece: decoded ("▁" as a space; no prefix space is dropped). */
CT_API const char *ct_tokenizer_token_bytes(const ct_tokenizer *t, int32_t id, size_t *len);
/* Where the bytes the tokens spell come from in the text, when the
 * tokenizer's normalizer has a Unicode form (a tokenizer.json's NFC, NFD,
 * NFKC or NFKD: Qwen's NFC) that changes it: "e" + U+0301 is the one
 * character "é" in Qwen's tokens. *norm gets text[0..len) in those forms
 * (owned, NUL-terminated, release with free), *norm_len its length, and
 * *from[*norm_len + 1] (owned, release with free) the byte of text each of
 * its bytes came from: the characters a form changed map, every byte, to
 * where the change starts in text (a span of text that starts or ends at a
 * character below U+0300 never splits a change); from[*norm_len] = len.
 * When no form changes the text (or the tokenizer has none), *norm and
 * *from are NULL and *norm_len = len. Other normalizer steps (Prepend,
 * Replace) are not applied. Thread-safe. Errors: CT_ERR_ARG (text that is
 * not valid UTF-8), CT_ERR_OOM. */
CT_API ct_status ct_tokenizer_unicode_map(const ct_tokenizer *t, const char *text, size_t len, char **norm,
                                          size_t *norm_len, size_t **from);
/* Decode ids[0..n) into a NUL-terminated byte string. SentencePiece: "▁"
 * becomes a space, byte tokens are reassembled into the bytes they stand
 * for (invalid UTF-8 is kept as it is), special tokens give their text, and
 * the space of the "▁" prefix is dropped where encode added one (the start,
 * and after special tokens when every piece gets one), so that
 * decode(encode(x)) == x for the normaliser form. Returned owned through
 * *text (release with free; *len excludes the NUL). Errors: CT_ERR_ARG for an
 * id out of range (naming it and its position), CT_ERR_OOM. */
CT_API ct_status ct_tokenizer_decode(const ct_tokenizer *t, const int32_t *ids, size_t n,
                                     char **text, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
