/*
 * Chat templates: a model's `chat_template` (tokenizer_config.json, or
 * chat_template.jinja beside it) rendered over a conversation, byte for byte
 * as transformers.js renders it (@huggingface/jinja, data/jinja.h), with the
 * variables Hugging Face passes: messages, add_generation_prompt and the
 * special tokens of the config (bos_token, eos_token, unk_token, sep_token,
 * pad_token, cls_token, mask_token; a string or an AddedToken object's
 * "content"). Also the byte ranges of the rendered text that came from each
 * assistant message, for loss masks in supervised fine-tuning.
 * Leaves out: tokenising the text (ct_tokenizer_encode with
 * CT_TOK_ADDED_TOKENS turns its markup into the special tokens' ids), tools
 * and documents (templates see them as undefined).
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

/* What the template is called in messages ("DIR/tokenizer_config.json (chat_template)").
 * Borrowed; lives as long as t. */
const char *ct_chat_template_name(const ct_chat_template *t);
/* A special token's text ("bos_token", "eos_token", ...), or NULL. Borrowed. */
const char *ct_chat_template_token(const ct_chat_template *t, const char *key);

/* Render msgs[0..n) with add_generation_prompt. Returns the text owned
 * through *text (NUL-terminated; release with free), its length in *len.
 * Thread-safe. Errors: CT_ERR_ARG "NAME:LINE: raise_exception: MSG" when the
 * template refuses the conversation (roles out of order, a role it does not
 * know), or another evaluation error naming the template and line;
 * CT_ERR_FORMAT for text that is not valid UTF-8; CT_ERR_OOM (limits of
 * data/jinja.h exceeded, naming which). */
ct_status ct_chat_render(const ct_chat_template *t, const ct_chat_msg *msgs, size_t n, bool add_generation_prompt,
                         char **text, size_t *len);
/* The same over a JSON array of message objects (borrowed), which may carry
 * more fields than role and content (name, tool_calls, ...). CT_ERR_ARG when
 * messages is not an array. */
ct_status ct_chat_render_json(const ct_chat_template *t, const struct cJSON *messages, bool add_generation_prompt,
                              char **text, size_t *len);

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
 * that closes every conversation with EOS, as Phi-3's does). When the content
 * does not appear as such (a template that rewrites it), the span starts
 * right after the generation prompt. Returns the text as ct_chat_render does
 * and the spans, in message order, owned through *spans (release with free;
 * NULL when there are none) with their count in *n_spans.
 * Errors: those of ct_chat_render, and CT_ERR_FORMAT naming the message and
 * the byte where a prefix's render departs from the whole's (a template
 * spans cannot be found for). */
ct_status ct_chat_render_spans(const ct_chat_template *t, const ct_chat_msg *msgs, size_t n, char **text,
                               size_t *len, ct_chat_span **spans, size_t *n_spans);
ct_status ct_chat_render_spans_json(const ct_chat_template *t, const struct cJSON *messages, char **text,
                                    size_t *len, ct_chat_span **spans, size_t *n_spans);

#endif
