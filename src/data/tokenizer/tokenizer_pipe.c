/*
 * Running the generic tokenizer.json pipeline (read by tokenizer_hf.c) over
 * one segment of text between added tokens, as Hugging Face tokenizers and
 * transformers.js do: the normalizer's steps in order (Unicode forms through
 * utf8proc, Prepend, Replace), the pre-tokenizer's steps over a list of
 * pieces (Split with Hugging Face's five behaviours, ByteLevel's prefix
 * space and GPT-2 pattern, Metaspace, Digits), then BPE of every piece:
 * byte-level (each byte its token, ignore_merges, the word cache) or
 * SentencePiece-style (characters or their byte tokens; a piece is cut at
 * each "▁" no token joins across, for the word cache).
 * Leaves out: reading the settings (tokenizer_hf.c), splitting out added
 * tokens and invalid UTF-8 (tokenizer.c), decoding (tokenizer.c,
 * tokenizer_spm.c).
 */
#include "data/tokenizer/tokenizer_impl.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include <xxhash.h>

#define PIPE_MARK "\xE2\x96\x81"

/* The first occurrence of needle[0..k) (k >= 1) in hay[0..n), or NULL. */
static const uint8_t *pipe_find(const uint8_t *hay, size_t n, const void *needle, size_t k) {
    const uint8_t *nd = needle;
    while (n >= k) {
        const uint8_t *p = memchr(hay, nd[0], n - k + 1);
        if (!p) return NULL;
        if (!memcmp(p + 1, nd + 1, k - 1)) return p;
        n -= (size_t)(p + 1 - hay);
        hay = p + 1;
    }
    return NULL;
}

static ct_status pipe_grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return CT_OK;
    size_t nc = *cap ? *cap : 256;
    while (nc < need) {
        if (nc > SIZE_MAX / 4 / elem) return CT_ERR(CT_ERR_OOM, "tokenizer: a text too large to encode");
        nc *= 2;
    }
    void *q = realloc(*p, nc * elem);
    if (!q) return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory for a %zu-byte text", need);
    *p = q;
    *cap = nc;
    return CT_OK;
}

void tok_hf_state_free(ct_tok_state *s) {
    free(s->nbuf[0]);
    free(s->nbuf[1]);
    free(s->pbuf);
    free(s->span[0]);
    free(s->span[1]);
    free(s->seg);
}

/* Free the pipeline's buffers when a huge text made them large. */
static void pipe_trim(ct_tok_state *s) {
    if (s->pbuf_cap > (16u << 20) || s->ncap[0] > (16u << 20) || s->ncap[1] > (16u << 20) ||
        s->span_cap[0] > (1u << 20) || s->span_cap[1] > (1u << 20) || s->seg_cap > (1u << 20)) {
        tok_hf_state_free(s);
        memset(s->nbuf, 0, sizeof s->nbuf);
        memset(s->ncap, 0, sizeof s->ncap);
        s->pbuf = NULL;
        s->pbuf_cap = s->pbuf_n = 0;
        memset(s->span, 0, sizeof s->span);
        memset(s->span_cap, 0, sizeof s->span_cap);
        memset(s->span_n, 0, sizeof s->span_n);
        s->seg = NULL;
        s->seg_cap = s->seg_n = 0;
    }
}

/* ------------------------------------------------------- normalizer */

/* Whether the Unicode form leaves text unchanged for sure: no code point at
 * or above the first one the form can change (U+0300 for NFC, whose
 * compositions start with a combining mark; U+00C0 for NFD; ASCII for the
 * compatibility forms, which map U+00A0 and up). */
static bool pipe_form_noop(tok_norm_kind kind, const uint8_t *p, size_t n) {
    uint8_t lim = kind == TOK_NORM_NFC ? 0xCC : kind == TOK_NORM_NFD ? 0xC3 : 0x80;
    for (size_t i = 0; i < n; i++)
        if (p[i] >= lim) return false;
    return true;
}

/* text[0..n) in Unicode form kind, through utf8proc: owned *res (release
 * with free), its length in *rn. */
static ct_status pipe_form_apply(tok_norm_kind kind, const uint8_t *text, size_t n, uint8_t **res, size_t *rn) {
    int opt = UTF8PROC_STABLE;
    opt |= kind == TOK_NORM_NFC || kind == TOK_NORM_NFKC ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE;
    if (kind == TOK_NORM_NFKC || kind == TOK_NORM_NFKD) opt |= UTF8PROC_COMPAT;
    utf8proc_uint8_t *r8 = NULL;
    utf8proc_ssize_t r = utf8proc_map(text, (utf8proc_ssize_t)n, &r8, (utf8proc_option_t)opt);
    if (r < 0) {
        free(r8);
        return r == UTF8PROC_ERROR_NOMEM ? CT_ERR(CT_ERR_OOM, "tokenizer: out of memory normalising text")
                                         : CT_ERR(CT_ERR_ARG, "tokenizer: Unicode normalisation failed: %s",
                                                  utf8proc_errmsg(r));
    }
    *res = r8;
    *rn = (size_t)r;
    return CT_OK;
}

/* Apply the normalizer's steps; *out, *m: the result (text itself or a state buffer). */
static ct_status pipe_normalise(const tok_hf *hf, ct_tok_state *s, const uint8_t *text, size_t n,
                                const uint8_t **out, size_t *m) {
    const uint8_t *cur = text;
    size_t len = n;
    int which = 0;
    for (int k = 0; k < hf->n_norm && len > 0; k++) {
        const tok_norm_step *st = &hf->norm[k];
        uint8_t *dst;
        size_t dn = 0;
        ct_status e;
        switch (st->kind) {
        case TOK_NORM_NFC: case TOK_NORM_NFD: case TOK_NORM_NFKC: case TOK_NORM_NFKD: {
            if (pipe_form_noop(st->kind, cur, len)) continue;
            uint8_t *res = NULL;
            size_t r = 0;
            if ((e = pipe_form_apply(st->kind, cur, len, &res, &r))) return e;
            if ((e = pipe_grow((void **)&s->nbuf[which], &s->ncap[which], r + 1, 1))) {
                free(res);
                return e;
            }
            dst = s->nbuf[which];
            memcpy(dst, res, r);
            free(res);
            dn = r;
            break;
        }
        case TOK_NORM_PREPEND:
            if ((e = pipe_grow((void **)&s->nbuf[which], &s->ncap[which], len + st->s_len, 1))) return e;
            dst = s->nbuf[which];
            memcpy(dst, st->s, st->s_len);
            memcpy(dst + st->s_len, cur, len);
            dn = len + st->s_len;
            break;
        case TOK_NORM_REPLACE: {
            size_t hits = 0;
            for (const uint8_t *p = cur; (p = pipe_find(p, (size_t)(cur + len - p), st->s, st->s_len)) != NULL;
                 p += st->s_len)
                hits++;
            if (!hits) continue;
            size_t need = len + hits * st->to_len;
            if ((e = pipe_grow((void **)&s->nbuf[which], &s->ncap[which], need, 1))) return e;
            dst = s->nbuf[which];
            const uint8_t *p = cur, *end = cur + len;
            for (;;) {
                const uint8_t *hit = pipe_find(p, (size_t)(end - p), st->s, st->s_len);
                size_t k2 = (size_t)((hit ? hit : end) - p);
                memcpy(dst + dn, p, k2);
                dn += k2;
                if (!hit) break;
                memcpy(dst + dn, st->to, st->to_len);
                dn += st->to_len;
                p = hit + st->s_len;
            }
            break;
        }
        default:
            CT_ASSERT(0);
            return CT_ERR(CT_ERR_ARG, "tokenizer: bad normalizer step");
        }
        cur = dst;
        len = dn;
        which ^= 1;
    }
    *out = cur;
    *m = len;
    return CT_OK;
}

/* ------------------------------------------------------- pieces */

static ct_status span_push(ct_tok_state *s, int list, uint32_t off, uint32_t len) {
    if (len == 0) return CT_OK;
    ct_status e = pipe_grow((void **)&s->span[list], &s->span_cap[list], s->span_n[list] + 1, sizeof(tok_span));
    if (e) return e;
    s->span[list][s->span_n[list]++] = (tok_span){off, len};
    return CT_OK;
}

static ct_status seg_push(ct_tok_state *s, size_t off, size_t len, bool match) {
    ct_status e = pipe_grow((void **)&s->seg, &s->seg_cap, s->seg_n + 1, sizeof(tok_seg));
    if (e) return e;
    s->seg[s->seg_n++] = (tok_seg){(uint32_t)off, (uint32_t)len, match};
    return CT_OK;
}

/* Append bytes to the piece buffer; their offset in *off. */
static ct_status pbuf_put(ct_tok_state *s, const void *p, size_t n, uint32_t *off) {
    if (s->pbuf_n + n > UINT32_MAX) return CT_ERR(CT_ERR_ARG, "tokenizer: a text over 4 GiB");
    ct_status e = pipe_grow((void **)&s->pbuf, &s->pbuf_cap, s->pbuf_n + n, 1);
    if (e) return e;
    if (n) memcpy(s->pbuf + s->pbuf_n, p, n);
    *off = (uint32_t)s->pbuf_n;
    s->pbuf_n += n;
    return CT_OK;
}

/* The segments (matches and the text between) of the piece at off by re,
 * as Hugging Face's find_matches: an empty match splits too. */
static ct_status pipe_regex_segs(const ct_tokenizer *t, ct_tok_state *s, const pcre2_code *re, bool jit,
                                 uint32_t off, uint32_t len) {
    const uint8_t *text = s->pbuf + off;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
    size_t o = 0, prev = 0;
    ct_status e;
    (void)t;
    while (o <= len) {
        int rc = jit ? pcre2_jit_match(re, text, len, o, 0, s->md, s->mctx)
                     : pcre2_match(re, text, len, o, PCRE2_NO_UTF_CHECK, s->md, s->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return CT_ERR(rc == PCRE2_ERROR_NOMEMORY || rc == PCRE2_ERROR_JIT_STACKLIMIT ? CT_ERR_OOM : CT_ERR_ARG,
                          "tokenizer: pattern match failed at byte offset %zu: %s", o, (const char *)msg);
        }
        size_t ms = ov[0], me = ov[1];
        if (ms > prev && (e = seg_push(s, off + prev, ms - prev, false))) return e;
        if (me > ms && (e = seg_push(s, off + ms, me - ms, true))) return e;
        prev = me;
        if (me > ms) {
            o = me;
        } else { /* an empty match: step one character on */
            if (me >= len) break;
            size_t k = tok_utf8_seq(text + me, len - me);
            o = me + (k ? k : 1);
        }
    }
    if (prev < len && (e = seg_push(s, off + prev, len - prev, false))) return e;
    return CT_OK;
}

/* The segments of the piece split at every occurrence of lit. */
static ct_status pipe_string_segs(ct_tok_state *s, const char *lit, size_t lit_len, uint32_t off, uint32_t len) {
    const uint8_t *text = s->pbuf + off;
    size_t prev = 0;
    ct_status e;
    if (lit_len)
        for (const uint8_t *p = text; (p = pipe_find(p, (size_t)(text + len - p), lit, lit_len)) != NULL; p += lit_len) {
            size_t ms = (size_t)(p - text);
            if (ms > prev && (e = seg_push(s, off + prev, ms - prev, false))) return e;
            if ((e = seg_push(s, off + ms, lit_len, true))) return e;
            prev = ms + lit_len;
        }
    if (prev < len && (e = seg_push(s, off + prev, len - prev, false))) return e;
    return CT_OK;
}

/* The segments of the piece: runs of ASCII digits (each digit alone when
 * individual) and the runs between. */
static ct_status pipe_digit_segs(ct_tok_state *s, bool individual, uint32_t off, uint32_t len) {
    const uint8_t *text = s->pbuf + off;
    size_t i = 0;
    ct_status e;
    while (i < len) {
        bool digit = text[i] >= '0' && text[i] <= '9';
        size_t j = i + 1;
        if (!digit || !individual)
            while (j < len && (text[j] >= '0' && text[j] <= '9') == digit) j++;
        if ((e = seg_push(s, off + i, j - i, digit))) return e;
        i = j;
    }
    return CT_OK;
}

/* Fold s->seg into pieces of list `out` by Hugging Face's behaviour (its
 * NormalizedString::split): Removed drops the matches, Isolated keeps every
 * segment, MergedWithPrevious joins a match to the text before it,
 * MergedWithNext to the text after it, Contiguous joins runs of matches. */
static ct_status pipe_fold(ct_tok_state *s, int out, tok_split_how how, bool invert) {
    tok_seg *g = s->seg;
    size_t n = s->seg_n;
    if (invert)
        for (size_t i = 0; i < n; i++) g[i].match = !g[i].match;
    ct_status e = CT_OK;
    size_t first = s->span_n[out]; /* this piece's pieces start here */
    if (how == TOK_SPLIT_MERGED_WITH_NEXT) {
        /* from the end: a match joins the text after it */
        bool prev_match = false;
        size_t start = s->span_n[out];
        for (size_t i = n; i-- > 0 && !e;) {
            if (g[i].match && !prev_match && s->span_n[out] > start) {
                tok_span *last = &s->span[out][s->span_n[out] - 1];
                last->len += last->off - g[i].off;
                last->off = g[i].off;
            } else if (g[i].len) {
                e = span_push(s, out, g[i].off, g[i].len);
            }
            prev_match = g[i].match;
        }
        /* back into text order */
        for (size_t a = start, b = s->span_n[out]; a + 1 < b; a++, b--) {
            tok_span x = s->span[out][a];
            s->span[out][a] = s->span[out][b - 1];
            s->span[out][b - 1] = x;
        }
        return e;
    }
    bool prev_match = false;
    for (size_t i = 0; i < n && !e; i++) {
        bool join = false;
        if (how == TOK_SPLIT_MERGED_WITH_PREVIOUS) join = g[i].match && !prev_match;
        else if (how == TOK_SPLIT_CONTIGUOUS) join = g[i].match == prev_match;
        if (join && s->span_n[out] > first) {
            tok_span *last = &s->span[out][s->span_n[out] - 1];
            last->len = g[i].off + g[i].len - last->off;
        } else if (!(how == TOK_SPLIT_REMOVED && g[i].match)) {
            e = span_push(s, out, g[i].off, g[i].len);
        }
        prev_match = g[i].match;
    }
    return e;
}

/* Metaspace on one piece: ' ' -> "▁", the "▁" in front, then the split. */
static ct_status pipe_metaspace(const ct_tokenizer *t, ct_tok_state *s, const tok_pre_step *st, tok_span sp,
                                bool first, int out) {
    ct_status e;
    const uint8_t *text = s->pbuf + sp.off;
    size_t spaces = 0;
    for (size_t i = 0; i < sp.len; i++) spaces += text[i] == ' ';
    bool starts = sp.len >= 3 ? !memcmp(text, PIPE_MARK, 3) : false;
    if (!starts && spaces && text[0] == ' ') starts = true; /* it will */
    bool pre = !starts && (st->prepend == TOK_PREPEND_ALWAYS || (st->prepend == TOK_PREPEND_FIRST && first));
    if (spaces || pre) {
        size_t need = sp.len + 2 * spaces + (pre ? 3 : 0);
        if (s->pbuf_n + need > UINT32_MAX) return CT_ERR(CT_ERR_ARG, "tokenizer: a text over 4 GiB");
        if ((e = pipe_grow((void **)&s->pbuf, &s->pbuf_cap, s->pbuf_n + need, 1))) return e;
        text = s->pbuf + sp.off; /* the buffer may have moved */
        uint8_t *o = s->pbuf + s->pbuf_n;
        if (pre) {
            memcpy(o, PIPE_MARK, 3);
            o += 3;
        }
        for (size_t i = 0; i < sp.len; i++) {
            if (text[i] == ' ') {
                memcpy(o, PIPE_MARK, 3);
                o += 3;
            } else {
                *o++ = text[i];
            }
        }
        sp = (tok_span){(uint32_t)s->pbuf_n, (uint32_t)need};
        s->pbuf_n += need;
    }
    if (!st->split) return span_push(s, out, sp.off, sp.len);
    s->seg_n = 0;
    if ((e = pipe_string_segs(s, PIPE_MARK, 3, sp.off, sp.len))) return e;
    (void)t;
    return pipe_fold(s, out, TOK_SPLIT_MERGED_WITH_NEXT, false);
}

/* One pre-tokenizer step from list `in` into list 1 - in. */
static ct_status pipe_pre_step(const ct_tokenizer *t, ct_tok_state *s, const tok_pre_step *st, int in,
                               bool at_start) {
    int out = 1 - in;
    s->span_n[out] = 0;
    ct_status e = CT_OK;
    for (size_t k = 0; k < s->span_n[in] && !e; k++) {
        tok_span sp = s->span[in][k];
        s->seg_n = 0;
        switch (st->kind) {
        case TOK_PRE_SPLIT:
            e = st->re ? pipe_regex_segs(t, s, st->re, st->jit, sp.off, sp.len)
                       : pipe_string_segs(s, st->s, st->s_len, sp.off, sp.len);
            if (!e) e = pipe_fold(s, out, st->how, st->invert);
            break;
        case TOK_PRE_DIGITS:
            e = pipe_digit_segs(s, st->individual, sp.off, sp.len);
            if (!e) e = pipe_fold(s, out, st->individual ? TOK_SPLIT_ISOLATED : TOK_SPLIT_CONTIGUOUS, false);
            break;
        case TOK_PRE_BYTELEVEL:
            if (st->prefix_space && s->pbuf[sp.off] != ' ') {
                uint32_t off = 0;
                if ((e = pbuf_put(s, " ", 1, &off))) break;
                if ((e = pipe_grow((void **)&s->pbuf, &s->pbuf_cap, s->pbuf_n + sp.len, 1))) break;
                memcpy(s->pbuf + s->pbuf_n, s->pbuf + sp.off, sp.len);
                s->pbuf_n += sp.len;
                sp = (tok_span){off, sp.len + 1};
            }
            if (!st->re) {
                e = span_push(s, out, sp.off, sp.len);
                break;
            }
            e = pipe_regex_segs(t, s, st->re, st->jit, sp.off, sp.len);
            if (!e) e = pipe_fold(s, out, TOK_SPLIT_ISOLATED, false);
            break;
        case TOK_PRE_METASPACE:
            e = pipe_metaspace(t, s, st, sp, at_start && sp.off == 0, out);
            break;
        default:
            CT_ASSERT(0);
        }
    }
    return e;
}

/* ------------------------------------------------------- the model */

/* The id of the token spelled w[0..n), or -1 (ignore_merges). */
static int32_t pipe_vocab_find(const tok_hf *hf, const uint8_t *w, size_t n) {
    for (size_t i = (size_t)XXH3_64bits(w, n) & hf->voc_mask;; i = (i + 1) & hf->voc_mask) {
        int32_t id = hf->voc_slot[i];
        if (id < 0) return -1;
        if (hf->voc_len[id] == n && !memcmp(hf->voc_keys + hf->voc_off[id], w, n)) return id;
    }
}

/* Byte-level BPE of one piece (each byte its token), through the word cache. */
static ct_status pipe_byte_word(const ct_tokenizer *t, ct_tok_state *s, const uint8_t *w, size_t n,
                                ct_tokens *out) {
    ct_status st = tok_tokens_reserve(out, n);
    if (st) return st;
    uint64_t h = 0;
    bool cache = n <= TOK_CACHE_MAX_WORD;
    if (cache) {
        h = tok_cache_hash(w, n);
        const tok_cache_slot *c = tok_cache_find(s, w, n, h);
        if (c) {
            memcpy(out->ids + out->n, s->ids + c->ids_off, c->n_ids * sizeof *out->ids);
            out->n += c->n_ids;
            return CT_OK;
        }
    }
    if ((st = tok_state_scratch(s, n))) return st;
    size_t k = 0;
    int32_t id = t->hf->ignore_merges ? pipe_vocab_find(t->hf, w, n) : -1;
    if (id >= 0) {
        s->word[k++] = id;
    } else {
        for (size_t i = 0; i < n; i++) s->sym[i].id = t->byte_id[w[i]];
        k = tok_bpe_merge(t, s, n, s->word);
    }
    memcpy(out->ids + out->n, s->word, k * sizeof *out->ids);
    out->n += k;
    if (cache) tok_cache_put(s, w, n, h, s->word, k);
    return CT_OK;
}

static bool pipe_glued(const tok_hf *hf, uint32_t cp) {
    size_t a = 0, b = hf->n_glue;
    while (a < b) {
        size_t m = (a + b) / 2;
        if (hf->glue[m] < cp) a = m + 1;
        else b = m;
    }
    return a < hf->n_glue && hf->glue[a] == cp;
}

/* SentencePiece-style BPE of one piece: cut before each "▁" that follows a
 * character no token joins to a "▁" (merges cannot cross such a point),
 * each part through the word cache. */
static ct_status pipe_spm_word(const ct_tokenizer *t, ct_tok_state *s, const uint8_t *w, size_t n, ct_tokens *out) {
    const tok_hf *hf = t->hf;
    if (hf->ignore_merges) {
        int32_t id = pipe_vocab_find(hf, w, n);
        if (id >= 0) return ct_tokens_push(out, id);
    }
    size_t start = 0;
    uint32_t prev = UINT32_MAX;
    ct_status st = CT_OK;
    for (size_t i = 0; i < n && !st;) {
        size_t k = tok_utf8_seq(w + i, n - i);
        if (!k) k = 1;
        bool mark = k == 3 && w[i] == 0xE2 && w[i + 1] == 0x96 && w[i + 2] == 0x81;
        if (mark && i > start && prev != UINT32_MAX && !pipe_glued(hf, prev)) {
            st = tok_spm_piece(t, s, w + start, i - start, out);
            start = i;
        }
        prev = k == 1 ? w[i] : w[i] & (0x7Fu >> k);
        for (size_t j = 1; j < k; j++) prev = prev << 6 | (w[i + j] & 0x3Fu);
        i += k;
    }
    if (!st) st = tok_spm_piece(t, s, w + start, n - start, out);
    return st;
}

ct_status tok_hf_encode_raw(const ct_tokenizer *t, ct_tok_state *s, const uint8_t *w, size_t n, ct_tokens *out) {
    if (n == 0) return CT_OK;
    ct_status st = t->hf->byte_level ? pipe_byte_word(t, s, w, n, out) : tok_spm_piece(t, s, w, n, out);
    tok_state_trim(s);
    return st;
}

ct_status tok_hf_encode(const ct_tokenizer *t, ct_tok_state *s, const uint8_t *text, size_t n, bool at_start,
                        ct_tokens *out) {
    const tok_hf *hf = t->hf;
    if (n == 0) return CT_OK;
    const uint8_t *norm = text;
    size_t m = 0;
    ct_status st = pipe_normalise(hf, s, text, n, &norm, &m);
    if (st || m == 0) return st;
    uint32_t off = 0;
    s->pbuf_n = 0;
    s->span_n[0] = 0;
    if ((st = pbuf_put(s, norm, m, &off)) || (st = span_push(s, 0, off, (uint32_t)m))) return st;
    int cur = 0;
    for (int k = 0; k < hf->n_pre && !st; k++) {
        st = pipe_pre_step(t, s, &hf->pre[k], cur, at_start);
        cur = 1 - cur;
    }
    for (size_t k = 0; k < s->span_n[cur] && !st; k++) {
        tok_span sp = s->span[cur][k];
        st = hf->byte_level ? pipe_byte_word(t, s, s->pbuf + sp.off, sp.len, out)
                            : pipe_spm_word(t, s, s->pbuf + sp.off, sp.len, out);
    }
    tok_state_trim(s);
    pipe_trim(s);
    return st;
}

/* ------------------------------------------------ where normalised bytes come from */

/* Whether a Unicode form leaves the text before p[0] and the text from it
 * apart: p[0] starts a character below U+0300 (ASCII through IPA), which no
 * form changes together with what precedes it (none composes with a
 * preceding character, and each decomposes to a sequence that begins with a
 * character of combining class 0). */
static bool pipe_form_boundary(uint8_t b) { return b < 0x80 || (b >= 0xC0 && b < 0xCC); }

/* Room for n more bytes in *buf (and their origins in *from). */
static ct_status pipe_map_grow(uint8_t **buf, size_t **from, size_t *cap, size_t used, size_t n) {
    if (used + n + 1 <= *cap) return CT_OK;
    size_t nc = *cap ? *cap : 256;
    while (nc < used + n + 1) {
        if (nc > SIZE_MAX / 2 / sizeof(size_t)) return CT_ERR(CT_ERR_OOM, "tokenizer: a text too large to normalise");
        nc *= 2;
    }
    uint8_t *b = realloc(*buf, nc);
    if (!b) return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory normalising a %zu-byte text", used + n);
    *buf = b;
    size_t *f = realloc(*from, nc * sizeof *f);
    if (!f) return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory normalising a %zu-byte text", used + n);
    *from = f;
    *cap = nc;
    return CT_OK;
}

ct_status ct_tokenizer_unicode_map(const ct_tokenizer *t, const char *text, size_t len, char **norm,
                                   size_t *norm_len, size_t **from) {
    *norm = NULL;
    *from = NULL;
    *norm_len = len;
    const tok_hf *hf = t->hf;
    tok_norm_kind forms[8];
    int nf = 0;
    uint8_t lim = 0xFF; /* the lowest byte that starts a character some form changes */
    for (int k = 0; hf && k < hf->n_norm && nf < 8; k++) {
        tok_norm_kind kind = hf->norm[k].kind;
        if (kind != TOK_NORM_NFC && kind != TOK_NORM_NFD && kind != TOK_NORM_NFKC && kind != TOK_NORM_NFKD) continue;
        forms[nf++] = kind;
        uint8_t l = kind == TOK_NORM_NFC ? 0xCC : kind == TOK_NORM_NFD ? 0xC3 : 0x80;
        if (l < lim) lim = l;
    }
    const uint8_t *s = (const uint8_t *)text;
    size_t first = 0;
    while (first < len && s[first] < lim) first++;
    if (!nf || first == len) return CT_OK;
    uint8_t *out = NULL;
    size_t *fr = NULL, cap = 0, m = 0, i = 0;
    ct_status st = CT_OK;
    while (i < len && !st) {
        size_t j = i;
        while (j < len && s[j] < lim) j++;
        size_t a = j;
        while (a > i && a < len && !pipe_form_boundary(s[a])) a--;
        /* [i, a): as it is */
        if ((st = pipe_map_grow(&out, &fr, &cap, m, a - i))) break;
        memcpy(out + m, s + i, a - i);
        for (size_t k = i; k < a; k++) fr[m++] = k;
        if (a == len) break;
        /* [a, b): the character at j with what it may combine with */
        size_t b = (j > a ? j : a) + 1;
        while (b < len && !pipe_form_boundary(s[b])) b++;
        const uint8_t *in = s + a;
        size_t n = b - a;
        uint8_t *res = NULL;
        for (int f = 0; f < nf && !st; f++) {
            if (pipe_form_noop(forms[f], in, n)) continue;
            uint8_t *r = NULL;
            size_t rn = 0;
            if ((st = pipe_form_apply(forms[f], in, n, &r, &rn))) break;
            free(res);
            res = r;
            in = r;
            n = rn;
        }
        if (st) {
            free(res);
            break;
        }
        size_t cl = b - a, p = 0, q = 0;
        /* the bytes both keep at the start and at the end map one to one; what
         * changed between maps to where the change starts */
        while (p < cl && p < n && s[a + p] == in[p]) p++;
        while (p > 0 && p < cl && (s[a + p] & 0xC0) == 0x80) p--;
        while (q < cl - p && q < n - p && s[b - 1 - q] == in[n - 1 - q]) q++;
        while (q > 0 && (s[b - q] & 0xC0) == 0x80) q--;
        if ((st = pipe_map_grow(&out, &fr, &cap, m, n))) {
            free(res);
            break;
        }
        memcpy(out + m, in, n);
        for (size_t k = 0; k < n; k++) fr[m + k] = k < p ? a + k : k >= n - q ? b - (n - k) : a + p;
        m += n;
        free(res);
        i = b;
    }
    if (st) {
        free(out);
        free(fr);
        return st;
    }
    if (m == len && !memcmp(out, s, len)) { /* composed already: nothing changed */
        free(out);
        free(fr);
        return CT_OK;
    }
    out[m] = '\0';
    fr[m] = len;
    *norm = (char *)out;
    *from = fr;
    *norm_len = m;
    return CT_OK;
}
