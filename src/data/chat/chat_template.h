/*
 * Chat templates: a model's `chat_template` (tokenizer_config.json, or
 * chat_template.jinja beside it) rendered over a conversation, byte for byte
 * as transformers.js renders it (@huggingface/jinja, data/chat/jinja.h), with the
 * variables Hugging Face passes: messages, add_generation_prompt and the
 * special tokens of the config (bos_token, eos_token, unk_token, sep_token,
 * pad_token, cls_token, mask_token; a string or an AddedToken object's
 * "content"). Also the byte ranges of the rendered text that came from each
 * assistant message, for loss masks in supervised fine-tuning.
 * The special tokens come from tokenizer_config.json, then
 * special_tokens_map.json, as transformers reads them; those neither names
 * from the tokenizer itself (ct_chat_template_use_tokenizer). tools and
 * documents are none unless a conversation gives tools; other variables
 * (Qwen3's enable_thinking) come as TRL's chat_template_kwargs.
 * Leaves out: tokenising the text (ct_tokenizer_encode with
 * CT_TOK_ADDED_TOKENS turns its markup into the special tokens' ids).
 *
 * Usage:
 *   ct_chat_template *t;
 *   if (ct_chat_template_load(&t, "models/tinyllama")) ... ct_last_error() ...
 *   ct_chat_msg m[] = {{"user", "Hi!"}, {"assistant", "Hello."}};
 *   char *text; size_t len;
 *   ct_chat_render(t, m, 2, false, &text, &len);   // free(text)
 *   ct_chat_template_free(t);
 */
#ifndef CT_CHAT_TEMPLATE_H
#define CT_CHAT_TEMPLATE_H

#include "ctrain/core.h"
#include "ctrain/data.h"

#include <stdbool.h>
#include <stddef.h>

struct cJSON;

typedef struct ct_chat_template ct_chat_template; /* read-only once loaded; shareable across threads */

/* One message: role and content, NUL-terminated UTF-8, borrowed. */
typedef struct ct_chat_msg {
    const char *role;
    const char *content;
} ct_chat_msg;

/* The bytes of a rendered conversation one assistant message accounts for. */
typedef struct ct_chat_span {
    size_t message;    /* index of the assistant message in the conversation */
    size_t start, end; /* [start, end): byte offsets into the rendered text */
} ct_chat_span;

/* Load the chat template of a model directory: DIR/chat_template.jinja when
 * present (as transformers prefers it), else DIR/tokenizer_config.json's
 * chat_template: a string, or a list of {"name", "template"} of which the one
 * named "default" is taken. `path` may also be the tokenizer_config.json
 * itself (or any JSON file of that form). The special tokens come from
 * tokenizer_config.json when there is one. The template is parsed now, so a
 * construct outside the Jinja subset fails here.
 * Returns owned *out; release with ct_chat_template_free.
 * Errors: CT_ERR_IO (no tokenizer_config.json, unreadable), CT_ERR_FORMAT
 * (not JSON, no chat_template, a list without "default" (naming the names
 * there), a template error "FILE (chat_template):LINE: ..."), CT_ERR_OOM. */
ct_status ct_chat_template_load(ct_chat_template **out, const char *path);

/* Load a template given on its own (`ctrain tokenize --chat-template FILE`):
 * FILE is either a JSON object with a chat_template (and maybe the special
 * tokens), or the template's text. Special tokens FILE does not give come
 * from tokens_dir's tokenizer_config.json when tokens_dir is not NULL and has
 * one. Errors as ct_chat_template_load. */
ct_status ct_chat_template_load_file(ct_chat_template **out, const char *file, const char *tokens_dir);

/* A template from text (copied); name names it in errors; bos and eos (may
 * be NULL: undefined in the template) are bos_token and eos_token.
 * Errors: CT_ERR_FORMAT (a template error), CT_ERR_OOM. */
ct_status ct_chat_template_from_text(ct_chat_template **out, const char *text, size_t len, const char *name,
                                     const char *bos, const char *eos);

void ct_chat_template_free(ct_chat_template *t); /* NULL is fine */

/* Give t the special tokens of tokenizer tok for each of bos_token,
 * eos_token, unk_token and pad_token that no config file it was loaded with
 * names (a config's null turns a token off): what transformers' tokenizer
 * classes default them to. The class the config's tokenizer_class names
 * ("Fast" or not): PreTrainedTokenizer (Llama 3's): none; GPT2Tokenizer:
 * <|endoftext|> for bos, eos and unk; Qwen2Tokenizer: <|endoftext|> for
 * eos, unk and pad (no bos); LlamaTokenizer: <s>, </s>, <unk>;
 * GemmaTokenizer: <bos>, <eos>, <unk>, <pad>. No class, or another: by the
 * kind of tokenizer, GPT2Tokenizer's <|endoftext|> for bos, eos and unk
 * (byte-level BPE: the tokenizer's end-of-text token), LlamaTokenizer's BOS,
 * EOS and <unk> (SentencePiece: the BOS and EOS ids the tokenizer uses;
 * <unk> when it is a token). Not thread-safe against renders of t.
 * Errors: CT_ERR_OOM. */
ct_status ct_chat_template_use_tokenizer(ct_chat_template *t, const ct_tokenizer *tok);

/* What the template is called in messages ("DIR/tokenizer_config.json (chat_template)").
 * Borrowed; lives as long as t. */
const char *ct_chat_template_name(const ct_chat_template *t);
/* A special token's text ("bos_token", "eos_token", ...), or NULL. Borrowed. */
const char *ct_chat_template_token(const ct_chat_template *t, const char *key);
/* The template's source text (NUL-terminated; its length in *len, which may
 * be NULL). Borrowed; lives as long as t. */
const char *ct_chat_template_source(const ct_chat_template *t, size_t *len);
/* What a prepared dataset's manifest records of the template it rendered
 * with: {"name": ct_chat_template_name, "template": the source,
 * "special_tokens": {"bos_token": ..., ...} (those it renders with)}.
 * Returns it owned (release with cJSON_Delete); NULL on OOM (error set). */
struct cJSON *ct_chat_template_record(const ct_chat_template *t);

/* Render msgs[0..n) with add_generation_prompt. Returns the text owned
 * through *text (NUL-terminated; release with free), its length in *len.
 * Thread-safe. Errors: CT_ERR_ARG "NAME:LINE: raise_exception: MSG" when the
 * template refuses the conversation (roles out of order, a role it does not
 * know), or another evaluation error naming the template and line;
 * CT_ERR_FORMAT for text that is not valid UTF-8; CT_ERR_OOM (limits of
 * data/chat/jinja.h exceeded, naming which). */
ct_status ct_chat_render(const ct_chat_template *t, const ct_chat_msg *msgs, size_t n, bool add_generation_prompt,
                         char **text, size_t *len);
/* The same over a JSON array of message objects (borrowed), which may carry
 * more fields than role and content (name, tool_calls, reasoning_content,
 * ...). vars (borrowed; may be NULL) is an object of more variables, which
 * override the others (transformers.js passes apply_chat_template's tools
 * and keyword arguments so): ct_chat_conv_vars makes it. CT_ERR_ARG when
 * messages is not an array. An evaluation error on an undefined value names
 * it ("'eos_token' is undefined"), with a hint when it is a special token. */
ct_status ct_chat_render_json(const ct_chat_template *t, const struct cJSON *messages, const struct cJSON *vars,
                              bool add_generation_prompt, char **text, size_t *len);

/* A conversation as TRL's datasets hold one: a JSON array of messages, or an
 * object {"messages": [...], "tools": [...] (optional), "chat_template_kwargs":
 * {...} (optional)}. Sets *messages (borrowed from conv) and *vars: tools and
 * the kwargs' members as one object (owned, release with cJSON_Delete; NULL
 * when there are none). other_keys: whether conv may hold other keys (an
 * example's "id"), else they are an error. Errors: CT_ERR_ARG naming what is
 * wrong (no "messages" array, "tools" not an array, "chat_template_kwargs"
 * not an object, another key), CT_ERR_OOM. */
ct_status ct_chat_conv_vars(const struct cJSON *conv, bool other_keys, const struct cJSON **messages,
                            struct cJSON **vars);

/* Render the conversation (add_generation_prompt false) and find what each
 * assistant message (role "assistant") accounts for: its content as the
 * template writes it (found after the generation prompt as it is, else
 * JavaScript-trimmed for templates that strip it; an empty content starts
 * the span right after the prompt) and the end-of-turn markup after it, up to and
 * including the end-of-turn or EOS token (trailing whitespace excluded):
 * " Hi </s>" -> "Hi </s>" for LLaMA-2, "Hi<|im_end|>" for ChatML,
 * "Hi<|end|>" for Phi-3, "Hi<end_of_turn>" for Gemma. Found by rendering
 * the conversation's prefixes: before message i with the generation prompt
 * (else without), through message i without; each must be a prefix of the
 * whole render, except that the one through message i may end with text the
 * whole render also ends with when it starts with eos_token (a template
 * that closes every conversation with EOS, as Phi-3's does). A template
 * that renders the message otherwise when it is the last (Qwen3 keeps the
 * thinking of the turns after the last user query only) is measured again
 * with a placeholder for the content: what follows the content in the whole
 * render, as far as the markup after a last message goes, ends the turn.
 * The span starts where the content does when only whitespace lies between
 * the generation prompt and it (anywhere in the turn for a template that
 * writes no generation prompt: LLaMA-2's, Mistral's); else (a template that
 * rewrites the content, or writes a thinking block before it) right after
 * the generation prompt
 * (the part of it the whole render has, when a turn there has less of it:
 * Qwen3's empty thinking block with enable_thinking false). Returns the text as ct_chat_render does
 * and the spans, in message order, owned through *spans (release with free;
 * NULL when there are none) with their count in *n_spans.
 * Errors: those of ct_chat_render, and CT_ERR_FORMAT naming the message and
 * the byte where a prefix's render departs from the whole's (a template
 * spans cannot be found for). */
ct_status ct_chat_render_spans(const ct_chat_template *t, const ct_chat_msg *msgs, size_t n, char **text,
                               size_t *len, ct_chat_span **spans, size_t *n_spans);
ct_status ct_chat_render_spans_json(const ct_chat_template *t, const struct cJSON *messages,
                                    const struct cJSON *vars, char **text, size_t *len, ct_chat_span **spans,
                                    size_t *n_spans);

#endif
