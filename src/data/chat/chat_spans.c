/*
 * The assistant spans of a rendered conversation (data/chat/chat_template.h,
 * ct_chat_render_spans): where each assistant turn starts (after the
 * generation prompt) and ends (its end-of-turn markup), found by rendering
 * the conversation's prefixes, and, for templates that render a turn
 * otherwise when it is the last (Qwen3's thinking), the conversation with a
 * placeholder for the turn's content.
 * Leaves out: loading and rendering (chat_template.c), tokenising.
 */
#include "data/chat/chat_template.h"
#include "data/chat/chat_template_impl.h"
#include "data/chat/jinja_impl.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool chat_starts(const char *s, size_t n, const char *pre, size_t k) { return k <= n && memcmp(s, pre, k) == 0; }

static ct_status chat_span_fail(const ct_chat_template *t, size_t i, const char *what, const char *a, size_t an,
                                const char *b, size_t bn) {
    size_t at = 0;
    while (at < an && at < bn && a[at] == b[at]) at++;
    ct_status st = CT_ERR(CT_ERR_FORMAT,
                          "%s: cannot find the assistant span of message %zu: the render of the conversation %s is "
                          "not the start of the whole conversation's render (they differ at byte %zu)",
                          ct_chat_template_name(t), i, what, at);
    ct_error_hint("spans need a template whose renders of a conversation's first messages begin the render of the "
                  "whole, as most chat templates' do");
    return st;
}

static const char *chat_find(const char *hay, size_t n, const char *needle, size_t k) {
    if (k == 0) return hay;
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(hay + i, needle, k) == 0) return hay + i;
    return NULL;
}

static bool chat_all_space(const char *s, size_t n) { return ju_trim((jstr){s, n}, true, false).n == 0; }

/* What stands for an assistant message's content while its turn is
 * measured: text no conversation holds (private-use characters), which
 * templates copy as it is (no whitespace to trim, no markup to split at). */
#define CHAT_SENTINEL "\xEE\x80\x80" "ctrain-span" "\xEE\x80\x81"

/* messages with message i's content replaced by the sentinel (references to
 * the others); owned, NULL on OOM. */
static cJSON *chat_with_sentinel(const cJSON *messages, size_t i) {
    cJSON *a = cJSON_CreateArray();
    size_t k = 0;
    for (const cJSON *m = messages->child; a && m; m = m->next, k++) {
        cJSON *e = NULL;
        if (k != i) {
            e = cJSON_CreateObjectReference(m->child);
            if (e && !cJSON_IsObject(m)) {
                cJSON_Delete(e);
                e = cJSON_Duplicate(m, true);
            }
        } else {
            e = cJSON_Duplicate(m, true);
            if (e && cJSON_IsObject(e)) {
                cJSON *s = cJSON_CreateString(CHAT_SENTINEL);
                if (!s || !cJSON_ReplaceItemInObjectCaseSensitive(e, "content", s)) {
                    cJSON_Delete(s);
                    cJSON_Delete(e);
                    e = NULL;
                }
            }
        }
        if (!e || !cJSON_AddItemToArray(a, e)) {
            cJSON_Delete(e);
            cJSON_Delete(a);
            a = NULL;
        }
    }
    return a;
}

/* Where assistant message i's turn ends in r[0..rn) (the whole render),
 * for templates that render a message otherwise when it is the last (Qwen3
 * keeps the thinking of turns after the last user query only): the whole
 * conversation is rendered again, w, with the sentinel for the message's
 * content. In w the turn ends where the markup after a last message's
 * content (what follows the sentinel when the conversation ends with the
 * message) stops matching; what follows the turn there is the end of r too
 * (their common suffix), which places the turn's end in r. The content ends
 * in r where that common suffix begins (or at an). */
static ct_status chat_turn_by_sentinel(const ct_chat_template *t, const cJSON *messages, const cJSON *vars, size_t i,
                                       const char *r, size_t rn, size_t an, size_t *content_end, size_t *turn_end) {
    static const size_t sn = sizeof CHAT_SENTINEL - 1;
    cJSON *alt = chat_with_sentinel(messages, i);
    if (!alt) return CT_ERR(CT_ERR_OOM, "out of memory for spans");
    char *w = NULL, *b = NULL;
    size_t wn = 0, bn = 0;
    ct_status st = chat_render_n(t, alt, (size_t)cJSON_GetArraySize(alt), vars, false, &w, &wn);
    if (!st) st = chat_render_n(t, alt, i + 1, vars, false, &b, &bn);
    const char *ws = st || wn < an ? NULL : chat_find(w + an, wn - an, CHAT_SENTINEL, sn);
    const char *bs = st || bn < an ? NULL : chat_find(b + an, bn - an, CHAT_SENTINEL, sn);
    if (!st) {
        bool ok = ws && bs && memcmp(w, r, an) == 0 && !chat_find(r, rn, CHAT_SENTINEL, sn);
        size_t after = ok ? (size_t)(ws - w) + sn : 0; /* in w, right after the sentinel */
        /* the common suffix of r and w, within what follows the turn's start and the sentinel */
        size_t common = 0;
        while (ok && common < rn - an && common < wn - after && r[rn - 1 - common] == w[wn - 1 - common]) common++;
        /* the turn's end in w: the markup after a last message's content, as far as w has it */
        const char *mk = ok ? bs + sn : NULL;
        size_t mn = ok ? bn - (size_t)(mk - b) : 0, k = 0;
        while (k < mn && after + k < wn && mk[k] == w[after + k]) k++;
        size_t rest = wn - (after + k); /* what follows the turn in w */
        if (!ok || rest > common) {
            st = chat_span_fail(t, i, "through it", w ? w : "", w ? wn : 0, r, rn);
        } else {
            *turn_end = rn - rest;
            *content_end = rn - common > an ? rn - common : an;
            if (*content_end > *turn_end) *content_end = *turn_end;
        }
    }
    free(w);
    free(b);
    cJSON_Delete(alt);
    return st;
}

/* How much of the generation prompt gp[0..gn) r[p..rn) has, at most what
 * the template writes before the content of message i there (what precedes
 * the sentinel in the conversation rendered with it), so that a content
 * that begins as the prompt goes on is not taken for prompt. */
static ct_status chat_partial_prompt(const ct_chat_template *t, const cJSON *messages, const cJSON *vars, size_t i,
                                     const char *r, size_t rn, size_t p, const char *gp, size_t gn, size_t *k) {
    static const size_t sn = sizeof CHAT_SENTINEL - 1;
    *k = 0;
    while (*k < gn && p + *k < rn && gp[*k] == r[p + *k]) (*k)++;
    cJSON *alt = chat_with_sentinel(messages, i);
    if (!alt) return CT_ERR(CT_ERR_OOM, "out of memory for spans");
    char *w = NULL;
    size_t wn = 0;
    ct_status st = chat_render_n(t, alt, (size_t)cJSON_GetArraySize(alt), vars, false, &w, &wn);
    const char *ws = st || wn < p || memcmp(w, r, p) != 0 ? NULL : chat_find(w + p, wn - p, CHAT_SENTINEL, sn);
    if (ws) {
        size_t h = 0;
        while (h < *k && p + h < (size_t)(ws - w) && w[p + h] == gp[h]) h++;
        *k = h;
    }
    free(w);
    cJSON_Delete(alt);
    if (st == CT_ERR_OOM) return st;
    if (st) ct_error_clear(); /* a template that refuses the sentinel: no bound from it */
    return CT_OK;
}

/* Where the assistant's turn starts: after the generation prompt when the
 * render before message i with it begins r (*an: its length); else after the
 * render without it, plus as much of the generation prompt as r has there
 * before the content (chat_partial_prompt). *has_gp: whether the template
 * writes a generation prompt at all. */
static ct_status chat_turn_start(const ct_chat_template *t, const cJSON *messages, const cJSON *vars, size_t i,
                                 const char *r, size_t rn, size_t *an, bool *has_gp) {
    char *a = NULL, *p = NULL;
    size_t alen = 0, plen = 0;
    ct_status st = chat_render_n(t, messages, i, vars, true, &a, &alen);
    if (!st) st = chat_render_n(t, messages, i, vars, false, &p, &plen);
    if (!st) *has_gp = alen != plen || memcmp(a, p, alen) != 0;
    if (!st && chat_starts(r, rn, a, alen)) {
        *an = alen;
    } else if (!st) {
        if (!chat_starts(r, rn, p, plen)) {
            st = chat_span_fail(t, i, "before it", p, plen, r, rn);
        } else if (!st) {
            size_t k = 0;
            if (chat_starts(a, alen, p, plen))
                st = chat_partial_prompt(t, messages, vars, i, r, rn, plen, a + plen, alen - plen, &k);
            *an = plen + k;
        }
    }
    free(a);
    free(p);
    return st;
}

ct_status ct_chat_render_spans_json(const ct_chat_template *t, const cJSON *messages, const cJSON *vars, char **text,
                                    size_t *len, ct_chat_span **spans, size_t *n_spans) {
    CT_ASSERT(t && text && spans && n_spans);
    *text = NULL;
    *spans = NULL;
    *n_spans = 0;
    if (len) *len = 0;
    if (!cJSON_IsArray(messages)) return CT_ERR(CT_ERR_ARG, "a conversation is a JSON array of messages");
    size_t n = (size_t)cJSON_GetArraySize(messages), rn = 0;
    char *r = NULL;
    ct_status st = chat_render_n(t, messages, n, vars, false, &r, &rn);
    if (st) return st;
    ct_chat_span *out = calloc(n ? n : 1, sizeof *out);
    if (!out) {
        free(r);
        return CT_ERR(CT_ERR_OOM, "out of memory for spans");
    }
    const char *eos = ct_chat_template_token(t, "eos_token");
    size_t eos_n = eos ? strlen(eos) : 0, k = 0, i = 0;
    for (const cJSON *m = messages->child; m && !st; m = m->next, i++) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role) || strcmp(role->valuestring, "assistant") != 0) continue;
        size_t an = 0, turn_end = 0, content_end = 0;
        bool measured = false, has_gp = false; /* content_end known; a generation prompt */
        st = chat_turn_start(t, messages, vars, i, r, rn, &an, &has_gp);
        /* where it ends: the render through it begins r (or ends as r does, after an EOS) */
        char *b = NULL;
        size_t bn = 0;
        if (!st) st = chat_render_n(t, messages, i + 1, vars, false, &b, &bn);
        if (!st && chat_starts(b, bn, r, an) && chat_starts(r, rn, b, bn)) {
            turn_end = bn;
        } else if (!st) {
            /* b = r[0..p) + a conversation-end suffix (starting with EOS) that r ends with too */
            size_t common = 0;
            while (common < bn && common < rn && b[common] == r[common]) common++;
            bool found = false;
            for (size_t p = common + 1; eos_n && common >= an && p-- > an;) {
                size_t tail = bn - p;
                if (chat_starts(b + p, tail, eos, eos_n) && tail <= rn && memcmp(r + rn - tail, b + p, tail) == 0) {
                    turn_end = p;
                    found = true;
                    break;
                }
            }
            /* else a message rendered otherwise when it is the last */
            if (!found) {
                st = chat_turn_by_sentinel(t, messages, vars, i, r, rn, an, &content_end, &turn_end);
                measured = !st;
            }
        }
        free(b);
        if (st) break;
        size_t start = an;
        if (!measured) content_end = an;
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (cJSON_IsString(content)) {
            /* the content as it is, else trimmed (templates that strip() or |trim it), where
             * only whitespace lies between the generation prompt and it (else the model writes
             * what is there: a thinking block); anywhere in the turn for a template that writes
             * no generation prompt (its header is what comes before the content) */
            jstr cs = {content->valuestring, strlen(content->valuestring)};
            for (int trim = 0; trim < 2; trim++) {
                if (trim) cs = ju_trim(cs, true, true);
                const char *hit = NULL;
                if (measured)
                    hit = cs.n <= content_end - an && !memcmp(r + content_end - cs.n, cs.p, cs.n) ? r + content_end - cs.n
                                                                                                 : NULL;
                else
                    hit = chat_find(r + an, turn_end - an, cs.p, cs.n);
                if (hit && (!has_gp || chat_all_space(r + an, (size_t)(hit - r) - an))) {
                    start = (size_t)(hit - r);
                    if (!measured) content_end = start + cs.n;
                    break;
                }
            }
        }
        /* the markup after the content, without the whitespace that ends the turn */
        size_t end = content_end + ju_trim((jstr){r + content_end, turn_end - content_end}, false, true).n;
        out[k++] = (ct_chat_span){i, start, end};
    }
    if (st) {
        free(out);
        free(r);
        return st;
    }
    if (!k) {
        free(out);
        out = NULL;
    }
    *text = r;
    if (len) *len = rn;
    *spans = out;
    *n_spans = k;
    return CT_OK;
}

ct_status ct_chat_render_spans(const ct_chat_template *t, const ct_chat_msg *msgs, size_t n, char **text,
                               size_t *len, ct_chat_span **spans, size_t *n_spans) {
    CT_ASSERT(msgs || n == 0);
    cJSON *a = NULL;
    ct_status st = chat_msgs_json(msgs, n, &a);
    if (!st) st = ct_chat_render_spans_json(t, a, NULL, text, len, spans, n_spans);
    else {
        *text = NULL;
        *spans = NULL;
        *n_spans = 0;
    }
    cJSON_Delete(a);
    return st;
}
