/*
 * `ctrain prepare --format sft`: instruction data (JSONL) to llm.c token
 * shards plus a loss-mask sidecar per shard (data/shard/sft_shard.h), and a
 * manifest ("format": "ctrain-sft/1"; fields in sft_prepare.c).
 *
 * Each JSONL line is one example, its kind told by its keys:
 *  - {"prompt": "...", "completion": "..."}: the tokenizer's document token
 *    (what plain prepare starts each document with: the BOS a tokenizer
 *    puts before a text, LLaMA's <s>, Llama 3's <|begin_of_text|>, Gemma's
 *    <bos>, as TRL's tokenizer(text) has it; else <|endoftext|>: GPT-2,
 *    Qwen, where TRL has no token) + encode(prompt + completion) + EOS
 *    (tokenizer_config.json's eos_token where there is one, as TRL appends
 *    eos_token): the text encoded whole, as TRL's SFTTrainer tokenises
 *    prompt-completion data (so " vehicle" after "?\n" is LLaMA's one token
 *    "▁vehicle", not a lone "▁" and then "▁vehicle"); special-token text in
 *    them stays text. The tokens that reach past the prompt's last byte and
 *    the EOS count: the mask starts at the token holding the completion's
 *    first byte, even when that token starts inside the prompt ("Answer:"
 *    + " Paris" with GPT-2: " Paris" counts; "Answer: " + "Paris": the one
 *    token " Paris" straddles the boundary and counts). TRL instead masks
 *    the first len(encode(prompt)) tokens, which is the same mask whenever
 *    encode(prompt) begins encode(prompt + completion) (most prompts: those
 *    that end in "?\n", ":" or a word before a completion that starts with
 *    a space). Where it does not, TRL's count is off: a token that straddles
 *    the boundary is left out, and a prompt whose end tokenises otherwise
 *    before the completion (GPT-2 splits "\n\n" before a letter into two
 *    "\n") has a prompt token counted; here the bytes decide.
 *  - Alpaca's {"instruction", "input" (optional), "output"}: the Stanford
 *    Alpaca prompt (with or without its input section) as the prompt, the
 *    output as the completion.
 *  - {"messages": [{"role", "content"}, ...]} (with TRL's optional "tools"
 *    and "chat_template_kwargs", which become template variables): rendered
 *    by the model's chat template (add_generation_prompt false), encoded
 *    whole with
 *    CT_TOK_ADDED_TOKENS (markup becomes the special tokens' ids, as
 *    `ctrain tokenize --chat`); the tokens that overlap an assistant span of
 *    ct_chat_render_spans count. Nothing is added: the template writes BOS
 *    and end-of-turn tokens itself (one that ends no assistant turn with EOS
 *    gets none; Llama 3.1's and Gemma 3's write their BOS, so an example
 *    holds one, as transformers' apply_chat_template tokenises with
 *    add_special_tokens=False).
 * A line of none of these kinds, invalid JSON or UTF-8, a field of the
 * wrong type, an empty completion, a conversation without an assistant
 * message or one the template refuses: a bad line (the run fails listing
 * them, or skips them with skip_bad_lines). Examples over max_len tokens are
 * truncated (the first max_len tokens: the prompt kept, the completion's end
 * cut, the EOS lost) or dropped; a truncated example left with no counted
 * token is dropped too. Examples are sequential: SFT sets are small.
 * Leaves out: packing and batching (the loader), conversational
 * prompt/completion lists (TRL's {"prompt": [messages], ...}).
 */
#ifndef CT_SFT_PREPARE_H
#define CT_SFT_PREPARE_H

#include "ctrain/core.h"
#include "ctrain/data.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum ct_sft_kind {
    CT_SFT_KIND_PROMPT_COMPLETION = 0,
    CT_SFT_KIND_ALPACA = 1,
    CT_SFT_KIND_MESSAGES = 2,
    CT_SFT_KIND_COUNT
} ct_sft_kind;
/* "prompt_completion", "alpaca", "messages" (the manifest's names). */
const char *ct_sft_kind_name(ct_sft_kind k);

typedef enum ct_sft_len_policy {
    CT_SFT_LEN_TRUNCATE = 0,
    CT_SFT_LEN_DROP = 1,
    CT_SFT_LEN_COUNT
} ct_sft_len_policy;

/* The Alpaca prompts (Stanford Alpaca's PROMPT_DICT), %s for the fields. */
#define CT_SFT_ALPACA_INPUT                                                                              \
    "Below is an instruction that describes a task, paired with an input that provides further "        \
    "context. Write a response that appropriately completes the request.\n\n### Instruction:\n%s\n\n" \
    "### Input:\n%s\n\n### Response:\n"
#define CT_SFT_ALPACA_NO_INPUT                                                                   \
    "Below is an instruction that describes a task. Write a response that appropriately "       \
    "completes the request.\n\n### Instruction:\n%s\n\n### Response:\n"

/* ------------------------------------------------- one line, one example */

/* An example: its tokens and one mask byte per token (1: counts). Zero-
 * initialise; ct_sft_encode_line refills it; release with ct_sft_example_free. */
typedef struct ct_sft_example {
    ct_tokens ids;
    uint8_t *mask;   /* [ids.n] */
    size_t mask_cap;
    ct_sft_kind kind;
} ct_sft_example;
void ct_sft_example_free(ct_sft_example *ex);

/* A tokenizer, its encoder state and the chat template: what turns lines
 * into examples. One thread at a time. */
typedef struct ct_sft_encoder ct_sft_encoder;
/* tokenizer: as ct_tokenizer_load takes it. chat_template: a file as
 * ct_chat_template_load_file takes it, or NULL for the tokenizer directory's
 * own (whose absence is an error only when a messages line comes).
 * Returns owned *out; release with ct_sft_encoder_free. Errors: those of
 * ct_tokenizer_load and of loading a named template; CT_ERR_FORMAT when the
 * tokenizer has no document token or no EOS. */
ct_status ct_sft_encoder_init(ct_sft_encoder **out, const char *tokenizer, const char *chat_template);
void ct_sft_encoder_free(ct_sft_encoder *e); /* NULL is fine */
const ct_tokenizer *ct_sft_encoder_tokenizer(const ct_sft_encoder *e);
int32_t ct_sft_encoder_bos(const ct_sft_encoder *e); /* the document token prompt/completion examples start with */
int32_t ct_sft_encoder_eos(const ct_sft_encoder *e); /* what ends their completion */
/* The template's name, or NULL when none is loaded (yet). Borrowed. */
const char *ct_sft_encoder_template(const ct_sft_encoder *e);
/* The template itself (what the manifest records), or NULL. Borrowed. */
const struct ct_chat_template *ct_sft_encoder_chat_template(const ct_sft_encoder *e);

/* Turn one JSONL line (borrowed, need not be NUL-terminated) into *ex.
 * A bad line returns CT_OK with *bad set and the reason in why[cap] (the
 * error state is left clear). Other errors end the run: CT_ERR_OOM, and for
 * a messages line when no chat template can be had, the loader's error
 * (CT_ERR_IO, CT_ERR_FORMAT) with a hint. */
ct_status ct_sft_encode_line(ct_sft_encoder *e, const char *line, size_t len, ct_sft_example *ex, bool *bad,
                             char *why, size_t cap);

/* Where each token of ids (the encoding of text[0..len) with
 * CT_TOK_ADDED_TOKENS or without) lies in text: token i covers
 * [start[i], start[i+1]) (start has n + 1 entries; start[n] = len). Tokens'
 * bytes (ct_tokenizer_token_bytes) are matched against the text in order;
 * SentencePiece's "▁" may stand for a space or a "▁" in the text, and the
 * "▁" the encoder prefixes a piece with (which the text lacks) takes no
 * byte: where the text has a space there too, ct_tokenizer_decode, which
 * drops exactly those, tells which it is. The offsets are those of decoding
 * each prefix ids[0..i) (the reference the tests hold them to), in one pass.
 * A tokenizer whose normalizer has a Unicode form (Qwen's NFC) spells the
 * text in that form: the tokens are matched against it and their offsets
 * taken back to the text's bytes (ct_tokenizer_unicode_map: a token inside a
 * run of characters the form changed starts where the run does), as Hugging
 * Face's offsets follow the normalizer's alignments.
 * CT_ERR_FORMAT when the tokens do not spell the text. */
ct_status ct_sft_token_offsets(const ct_tokenizer *t, const char *text, size_t len, const int32_t *ids, size_t n,
                               size_t *start);

/* ------------------------------------------------------------ the run */

typedef struct ct_sft_report {
    int64_t bytes_total, bytes_done;    /* input bytes */
    int64_t examples, tokens, counted_tokens; /* written */
    int64_t train_examples, train_tokens, val_examples, val_tokens;
    int64_t truncated, dropped, bad_lines;
    int64_t kind_examples[CT_SFT_KIND_COUNT];
    int train_shards, val_shards;
    double seconds;
} ct_sft_report;

typedef void (*ct_sft_progress_fn)(const ct_sft_report *r, void *user);

typedef struct ct_sft_opts {
    const char *tokenizer;        /* directory or tokenizer.json */
    const char *out_dir;
    const char *const *inputs;    /* JSONL files, directories, globs, "-" for stdin */
    int n_inputs;
    const char *chat_template;    /* NULL: the tokenizer directory's */
    bool skip_bad_lines;          /* false: bad lines fail the run */
    int64_t val_examples;         /* > 0: the first examples go to validation */
    double val_fraction;          /* > 0: examples chosen by their line's hash */
    int64_t max_len;              /* > 0: most tokens per example; 0: no limit */
    ct_sft_len_policy max_len_policy;
    int64_t shard_tokens;         /* 0: 100,000,000; a longer example gets a shard of its own */
    bool overwrite;               /* replace outputs already in out_dir */
    ct_sft_progress_fn progress;  /* may be NULL; called on this thread */
    void *user;
} ct_sft_opts;

/* Run a preparation (sequentially). Outputs are staged in out_dir and moved
 * into place only when every line was read, the manifest last: a failed or
 * interrupted run leaves out_dir as it was (and removes it if it made it).
 * *rep (may be NULL) is filled as far as the run got. Errors: CT_ERR_ARG
 * (options; out_dir already holding prepared files without overwrite; no
 * example left; none left for train), CT_ERR_FORMAT ("FILE: N bad JSONL
 * lines (line 3: ...; ...)"), CT_ERR_IO, CT_ERR_OOM. */
ct_status ct_sft_prepare_run(const ct_sft_opts *o, ct_sft_report *rep);

#endif
