/*
 * What chat_template.c shares with chat_spans.c (internal; not installed).
 */
#ifndef CT_CHAT_TEMPLATE_IMPL_H
#define CT_CHAT_TEMPLATE_IMPL_H

#include "data/chat/chat_template.h"

#include <stdbool.h>
#include <stddef.h>

struct cJSON;

/* Render messages[0..n) of JSON array messages (references: nothing is
 * copied) with the variables transformers.js passes: messages,
 * add_generation_prompt, tools and documents (none), the special tokens, then
 * the members of vars (may be NULL; they override the others). Returns the
 * text as ct_chat_render_json does; its errors. */
ct_status chat_render_n(const ct_chat_template *t, const struct cJSON *messages, size_t n, const struct cJSON *vars,
                        bool agp, char **text, size_t *len);

/* msgs[0..n) as a JSON array of {"role", "content"} objects, owned through
 * *out (release with cJSON_Delete). CT_ERR_OOM. */
ct_status chat_msgs_json(const ct_chat_msg *msgs, size_t n, struct cJSON **out);

#endif
