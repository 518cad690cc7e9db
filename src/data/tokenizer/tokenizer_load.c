/*
 * Loading the GPT-2 tokenizer: encoder.json + vocab.bpe (OpenAI's files; the
 * same formats as Hugging Face's vocab.json + merges.txt) or a Hugging Face
 * tokenizer.json holding a byte-level BPE model, turned into the
 * tables tokenizer.c encodes with (token bytes by id, the byte -> id table,
 * merge ranks keyed by pairs of ids, special tokens), plus the identity hash.
 * Both formats go through one builder, so the same vocabulary gives the same
 * tables and identity whichever files it came from.
 * What a vocabulary must be, in both formats and both kinds (GPT-2 and
 * SentencePiece-style): every token at least one byte (the encoder never
 * emits an empty token, and BPE cannot build one); every spelling and every
 * id used once; ids whole numbers below TOK_MAX_IDS (2^24) and few gaps: at
 * least half of the ids 0..largest name a token. The tables, the model's
 * embedding (ct_tokenizer_vocab_size rows) and the shards' id width all
 * follow the largest id, so a single stray id like 16,000,000 in a file of
 * 50,000 tokens is refused rather than costing gigabytes. An id without a
 * token is never produced and does not decode (tokenizer.c checks
 * TOK_NO_TOKEN). Each merge (pair of symbols) is listed once.
 * Leaves out: encoding and decoding (tokenizer.c); which files a path names
 * and the record of them (tokenizer_files.c); the settings of SentencePiece
 * files (tokenizer_spm.c) and of every other tokenizer.json
 * (tokenizer_hf.c), which the fixed forms send there.
 */
#include "data/tokenizer/tokenizer_impl.h"
#include "io/fileio.h"

#include <cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define TOK_MAX_IDS (1 << 24) /* ids from this on are refused as implausible */
#define TOK_EOT_TEXT "<|endoftext|>"
#define TOK_KINDS                                                                               \
    "supported: BPE, byte-level (a ByteLevel pre_tokenizer) or SentencePiece-style (model.byte_fallback " \
    "true); WordPiece, Unigram and WordLevel models are not"

/* ------------------------------------------------------- the byte alphabet */

/* GPT-2 shows each byte as one printable code point: bytes that are printable
 * Latin-1 ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand for themselves; the
 * other 68, in increasing order, become U+0100, U+0101, ... Fills cp_of[256]
 * and byte_of[324] (-1 where a code point is no byte). */
static void load_byte_alphabet(uint32_t cp_of[256], int16_t byte_of[324]) {
    uint32_t next = 256;
    for (int i = 0; i < 324; i++) byte_of[i] = -1;
    for (uint32_t b = 0; b < 256; b++) {
        bool shown = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        cp_of[b] = shown ? b : next++;
        byte_of[cp_of[b]] = (int16_t)b;
    }
}

/* ------------------------------------------------------- building blocks */

static ct_status load_grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return CT_OK;
    size_t nc = *cap ? *cap : 1024;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (!q) return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory for %zu table entries", nc);
    *p = q;
    *cap = nc;
    return CT_OK;
}

static ct_status load_add_entry(load_builder *b, const char *s, size_t len, int32_t id, bool special,
                                bool raw) {
    ct_status st = load_grow((void **)&b->e, &b->cap_e, b->n_e + 1, sizeof *b->e);
    if (st) return st;
    b->e[b->n_e++] = (load_entry){s, (uint32_t)len, id, special, raw, false, false, !raw};
    return CT_OK;
}

static ct_status load_add_merge(load_builder *b, const char *a, size_t alen, const char *bs,
                                size_t blen, int64_t where) {
    ct_status st = load_grow((void **)&b->m, &b->cap_m, b->n_m + 1, sizeof *b->m);
    if (st) return st;
    b->m[b->n_m++] = (load_merge){a, bs, (uint32_t)alen, (uint32_t)blen, where, -1, -1};
    return CT_OK;
}

static size_t load_hash(const char *s, size_t len) { return (size_t)XXH3_64bits(s, len); }

/* Index of the entry spelled s[0..len), or -1. */
int32_t tok_load_find(const load_builder *b, const char *s, size_t len) {
    for (size_t i = load_hash(s, len) & b->mask;; i = (i + 1) & b->mask) {
        int32_t k = b->index[i];
        if (k < 0) return -1;
        if (b->e[k].len == len && memcmp(b->e[k].s, s, len) == 0) return k;
    }
}

/* Quote a token for a message: control bytes, quotes and backslashes
 * escaped, whole characters only, "..." when it does not fit (cap >= 16). */
const char *tok_load_quote(char *buf, size_t cap, const char *s, size_t len) {
    size_t o = 0, i = 0;
    buf[o++] = '"';
    while (i < len) {
        char tmp[16];
        size_t k = 0, j = i;
        unsigned char c = (unsigned char)s[j];
        if (c < 0x20 || c == 0x7F || c == '"' || c == '\\') {
            k = (size_t)snprintf(tmp, sizeof tmp, "\\x%02X", c);
            j++;
        } else {
            do tmp[k++] = s[j++];
            while (j < len && k < 4 && ((unsigned char)s[j] & 0xC0) == 0x80);
        }
        if (o + k + 5 > cap) break; /* room for ..." and the NUL */
        memcpy(buf + o, tmp, k);
        o += k;
        i = j;
    }
    snprintf(buf + o, cap - o, "%s\"", i < len ? "..." : "");
    return buf;
}

/* The largest id against the number of tokens: at least half of the ids
 * 0..largest must name a token (the header's rule). Names the token holding
 * the largest id. */
static ct_status load_check_ids(const load_builder *b) {
    size_t top = 0;
    for (size_t k = 1; k < b->n_e; k++)
        if (b->e[k].id > b->e[top].id) top = k;
    if (b->n_e == 0 || (uint64_t)b->e[top].id + 1 <= 2 * (uint64_t)b->n_e) return CT_OK;
    char q[96];
    const load_entry *e = &b->e[top];
    ct_status st = CT_ERR(CT_ERR_FORMAT,
                          "%s: token %s has id %d, but the file holds only %zu tokens: expected ids that "
                          "number the tokens from 0 with few gaps (at least half of the ids 0..%d naming a "
                          "token, so the largest id may be at most %zu here)",
                          b->vocab_file, tok_load_quote(q, sizeof q, e->s, e->len), (int)e->id, b->n_e,
                          (int)e->id, 2 * b->n_e - 1);
    ct_error_hint("a vocabulary of N tokens uses ids 0..N-1; renumber the stray id");
    return st;
}

/* Put entry k into the index; CT_ERR_FORMAT when its spelling is there. */
static ct_status load_index_put(load_builder *b, size_t k) {
    const load_entry *e = &b->e[k];
    size_t i = load_hash(e->s, e->len) & b->mask;
    for (; b->index[i] >= 0; i = (i + 1) & b->mask) {
        const load_entry *o = &b->e[b->index[i]];
        if (o->len == e->len && memcmp(o->s, e->s, e->len) == 0) {
            char q[96];
            return CT_ERR(CT_ERR_FORMAT, "%s: token %s appears twice (ids %d and %d)", b->vocab_file,
                          tok_load_quote(q, sizeof q, e->s, e->len), (int)o->id, (int)e->id);
        }
    }
    b->index[i] = (int32_t)k;
    return CT_OK;
}

/* (Re)build the index over every entry, with room for as many again. */
static ct_status load_index_build(load_builder *b) {
    size_t slots = 16;
    while (slots < 4 * b->n_e) slots *= 2;
    free(b->index);
    b->index = malloc(slots * sizeof *b->index);
    if (!b->index) return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory indexing %zu tokens", b->n_e);
    memset(b->index, 0xFF, slots * sizeof *b->index);
    b->mask = slots - 1;
    b->n_indexed = 0;
    for (size_t k = 0; k < b->n_e; k++) {
        ct_status st = load_index_put(b, k);
        if (st) return st;
        b->n_indexed++;
    }
    return CT_OK;
}

/* Index the entries added since the last call (growing the index when half
 * full); refuses a spelling seen twice. */
static ct_status load_index_more(load_builder *b) {
    if (!b->index || 2 * b->n_e > b->mask + 1) return load_index_build(b);
    for (; b->n_indexed < b->n_e; b->n_indexed++) {
        ct_status st = load_index_put(b, b->n_indexed);
        if (st) return st;
    }
    return CT_OK;
}

/* Index every entry by its spelling; refuses a spelling seen twice, and ids
 * too sparse (load_check_ids). */
static ct_status load_index(load_builder *b) {
    ct_status cst = load_check_ids(b);
    if (cst) return cst;
    return load_index_more(b);
}

/* Decode one UTF-8 code point of s[0..len) at *i and step past it. A byte
 * that starts no complete sequence comes back as 0xFFFFFFFF (one byte used). */
static uint32_t load_next_cp(const char *s, size_t len, size_t *i) {
    const unsigned char *u = (const unsigned char *)s + *i;
    size_t left = len - *i, n = u[0] < 0x80 ? 1 : u[0] >= 0xF0 ? 4 : u[0] >= 0xE0 ? 3 : u[0] >= 0xC0 ? 2 : 0;
    if (n == 0 || n > left) {
        (*i)++;
        return 0xFFFFFFFFu;
    }
    uint32_t cp = n == 1 ? u[0] : u[0] & (0x7Fu >> n);
    for (size_t k = 1; k < n; k++) cp = cp << 6 | (u[k] & 0x3Fu);
    *i += n;
    return cp;
}

/* ------------------------------------------------------- tables from a builder */

ct_status tok_pairs_init(tok_pair_map *m, size_t n) {
    size_t slots = 16;
    while (slots < 2 * n + 16) slots *= 2;
    m->slots = malloc(slots * sizeof *m->slots);
    if (!m->slots) return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory for %zu merges", n);
    for (size_t i = 0; i < slots; i++) m->slots[i] = (tok_pair){TOK_PAIR_EMPTY, 0, 0};
    m->mask = slots - 1;
    m->count = 0;
    return CT_OK;
}

/* Set pair (left, right) -> (rank, merged). keep_max: keep the larger rank
 * when the pair is already there (else the new rank replaces it). */
void tok_pairs_set(tok_pair_map *m, int32_t left, int32_t right, int32_t rank, int32_t merged,
                           bool keep_max) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & m->mask;
    while (m->slots[i].key != TOK_PAIR_EMPTY && m->slots[i].key != key) i = (i + 1) & m->mask;
    tok_pair *p = &m->slots[i];
    if (p->key == TOK_PAIR_EMPTY) {
        CT_ASSERT(m->count < m->mask); /* sized for every merge and alias */
        *p = (tok_pair){key, rank, merged};
        m->count++;
    } else if (!keep_max || rank > p->rank) {
        p->rank = rank;
        p->merged = merged;
    }
}

/* Token bytes of every id, the byte table, the special list and eot. */
ct_status tok_load_byte_tables(ct_tokenizer *t, const load_builder *b) {
    uint32_t cp_of[256];
    int16_t byte_of[324];
    load_byte_alphabet(cp_of, byte_of);
    int32_t max_id = -1;
    size_t total = 0, n_special = 0;
    for (size_t k = 0; k < b->n_e; k++) {
        if (b->e[k].id > max_id) max_id = b->e[k].id;
        total += b->e[k].len;
        n_special += b->e[k].special;
    }
    if (max_id < 0) return CT_ERR(CT_ERR_FORMAT, "%s: the vocabulary is empty", b->vocab_file);
    t->n_ids = max_id + 1;
    t->tok_off = malloc((size_t)t->n_ids * sizeof *t->tok_off);
    t->tok_len = malloc((size_t)t->n_ids * sizeof *t->tok_len);
    t->tok_bytes = malloc(total + 1);
    t->special = malloc((n_special + 1) * sizeof *t->special);
    if (!t->tok_off || !t->tok_len || !t->tok_bytes || !t->special)
        return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory for %d tokens", (int)t->n_ids);
    for (int32_t i = 0; i < t->n_ids; i++) t->tok_len[i] = TOK_NO_TOKEN;
    size_t off = 0;
    t->eot = -1;
    for (size_t k = 0; k < b->n_e; k++) {
        const load_entry *e = &b->e[k];
        if (t->tok_len[e->id] != TOK_NO_TOKEN) {
            char q1[96], q2[96];
            const load_entry *o = NULL;
            for (size_t j = 0; j < k && !o; j++)
                if (b->e[j].id == e->id) o = &b->e[j];
            return CT_ERR(CT_ERR_FORMAT, "%s: id %d is given to two tokens, %s and %s", b->vocab_file,
                          (int)e->id, tok_load_quote(q1, sizeof q1, o->s, o->len),
                          tok_load_quote(q2, sizeof q2, e->s, e->len));
        }
        t->tok_off[e->id] = (uint32_t)off;
        if (e->raw) {
            memcpy(t->tok_bytes + off, e->s, e->len);
            off += e->len;
        } else {
            for (size_t i = 0; i < e->len;) {
                uint32_t cp = load_next_cp(e->s, e->len, &i);
                if (cp >= 324 || byte_of[cp] < 0) {
                    char q[96];
                    ct_status st = CT_ERR(CT_ERR_FORMAT,
                                          "%s: token %s (id %d) holds U+%04" PRIX32
                                          ", which is not in GPT-2's byte alphabet: not a byte-level BPE vocabulary",
                                          b->vocab_file, tok_load_quote(q, sizeof q, e->s, e->len), (int)e->id, cp);
                    return st;
                }
                t->tok_bytes[off++] = (char)byte_of[cp];
            }
        }
        t->tok_len[e->id] = (uint32_t)(off - t->tok_off[e->id]);
        if (e->special) t->special[t->n_special++] = e->id;
        if (e->len == strlen(TOK_EOT_TEXT) && memcmp(e->s, TOK_EOT_TEXT, e->len) == 0) t->eot = e->id;
    }
    /* the one-character token of each byte value */
    for (int v = 0; v < 256; v++) {
        char s[4];
        size_t n = 0;
        uint32_t cp = cp_of[v];
        if (cp < 0x80) s[n++] = (char)cp;
        else {
            s[n++] = (char)(0xC0 | (cp >> 6));
            s[n++] = (char)(0x80 | (cp & 0x3F));
        }
        int32_t k = tok_load_find(b, s, n);
        if (k < 0 || b->e[k].raw) {
            char q[16];
            return CT_ERR(CT_ERR_FORMAT,
                          "%s: no token for byte 0x%02X (spelled %s): not a byte-level BPE vocabulary",
                          b->vocab_file, v, tok_load_quote(q, sizeof q, s, n));
        }
        t->byte_id[v] = b->e[k].id;
    }
    return tok_load_specials(t, b);
}

/* Where a merge came from, for messages: "vocab.bpe:12" or "tokenizer.json: model.merges[11]". */
static void load_merge_site(char *buf, size_t cap, const load_builder *b, const load_merge *m) {
    if (b->merges_by_line) snprintf(buf, cap, "%s:%" PRId64, b->merges_file, m->where);
    else snprintf(buf, cap, "%s: model.merges[%" PRId64 "]", b->merges_file, m->where);
}

ct_status tok_load_dup_merge(const load_builder *b, const load_merge *m, const load_merge *first) {
    char site[512], at[64], qa[96], qb[96];
    load_merge_site(site, sizeof site, b, m);
    if (b->merges_by_line) snprintf(at, sizeof at, "line %" PRId64, first->where);
    else snprintf(at, sizeof at, "model.merges[%" PRId64 "]", first->where);
    ct_status st = CT_ERR(CT_ERR_FORMAT, "%s: merge %s %s is listed twice (first at %s); expected each pair of "
                          "symbols once", site, tok_load_quote(qa, sizeof qa, m->a, m->alen),
                          tok_load_quote(qb, sizeof qb, m->b, m->blen), at);
    ct_error_hint("delete the repeated merge");
    return st;
}

/* The merge table (and each merge's ids, into b->m). gpt-3-encoder keys its
 * ranks by the pair joined with a comma (a JavaScript array used as an object
 * key), so a pair of symbols whose comma-joined spelling equals a merge's,
 * split at another comma, gets that merge's rank too: for GPT-2, 11 such
 * aliases like ("\",", "\"") for the merge ("\"", ",\""). Both halves of each
 * alias join to the same token as the merge itself. With `aliases` (GPT-2's
 * form) we add them so that ranks are the reference's; transformers.js keys
 * by JSON arrays, which have no such aliases (the generic pipeline). */
ct_status tok_load_merge_table(ct_tokenizer *t, const load_builder *b, bool aliases) {
    /* each comma in a merge can give one alias */
    size_t n_pairs = b->n_m;
    for (size_t r = 0; aliases && r < b->n_m; r++) {
        for (uint32_t i = 0; i < b->m[r].alen; i++) n_pairs += b->m[r].a[i] == ',';
        for (uint32_t i = 0; i < b->m[r].blen; i++) n_pairs += b->m[r].b[i] == ',';
    }
    ct_status st = tok_pairs_init(&t->pairs, n_pairs);
    if (st) return st;
    char *joined = NULL;
    size_t cap = 0;
    for (size_t r = 0; r < b->n_m; r++) {
        const load_merge *m = &b->m[r];
        int32_t ka = tok_load_find(b, m->a, m->alen), kb = tok_load_find(b, m->b, m->blen);
        char site[512], q[96];
        if (ka < 0 || kb < 0 || b->e[ka].raw || b->e[kb].raw) {
            bool left = ka < 0 || b->e[ka].raw;
            load_merge_site(site, sizeof site, b, m);
            st = CT_ERR(CT_ERR_FORMAT, "%s: merge symbol %s is not a token of %s", site,
                        left ? tok_load_quote(q, sizeof q, m->a, m->alen) : tok_load_quote(q, sizeof q, m->b, m->blen),
                        b->vocab_file);
            goto fail;
        }
        size_t need = (size_t)m->alen + m->blen + 1;
        if (need > cap) {
            char *p = realloc(joined, need * 2);
            if (!p) {
                st = CT_ERR(CT_ERR_OOM, "tokenizer: out of memory joining merges");
                goto fail;
            }
            joined = p;
            cap = need * 2;
        }
        memcpy(joined, m->a, m->alen);
        memcpy(joined + m->alen, m->b, m->blen);
        int32_t kab = tok_load_find(b, joined, (size_t)m->alen + m->blen);
        if (kab < 0 || b->e[kab].raw) {
            load_merge_site(site, sizeof site, b, m);
            st = CT_ERR(CT_ERR_FORMAT, "%s: merged symbol %s is not a token of %s", site,
                        tok_load_quote(q, sizeof q, joined, (size_t)m->alen + m->blen), b->vocab_file);
            goto fail;
        }
        const tok_pair *dup = tok_pair_find(&t->pairs, b->e[ka].id, b->e[kb].id);
        if (dup) {
            st = tok_load_dup_merge(b, m, &b->m[dup->rank]);
            goto fail;
        }
        tok_pairs_set(&t->pairs, b->e[ka].id, b->e[kb].id, (int32_t)r, b->e[kab].id, false);
        b->m[r].ida = b->e[ka].id;
        b->m[r].idb = b->e[kb].id;
    }
    /* the comma aliases */
    for (size_t r = 0; aliases && r < b->n_m; r++) {
        const load_merge *m = &b->m[r];
        if (!memchr(m->a, ',', m->alen) && !memchr(m->b, ',', m->blen)) continue;
        size_t n = (size_t)m->alen + 1 + m->blen;
        if (n > cap) {
            char *p = realloc(joined, n * 2);
            if (!p) {
                st = CT_ERR(CT_ERR_OOM, "tokenizer: out of memory joining merges");
                goto fail;
            }
            joined = p;
            cap = n * 2;
        }
        memcpy(joined, m->a, m->alen);
        joined[m->alen] = ',';
        memcpy(joined + m->alen + 1, m->b, m->blen);
        for (size_t c = 0; c < n; c++) {
            if (joined[c] != ',' || c == m->alen) continue;
            int32_t kx = tok_load_find(b, joined, c), ky = tok_load_find(b, joined + c + 1, n - c - 1);
            if (kx < 0 || ky < 0 || b->e[kx].raw || b->e[ky].raw) continue;
            /* x + y: the key without the comma at c */
            char *xy = malloc(n);
            if (!xy) {
                st = CT_ERR(CT_ERR_OOM, "tokenizer: out of memory joining merges");
                goto fail;
            }
            memcpy(xy, joined, c);
            memcpy(xy + c, joined + c + 1, n - c - 1);
            int32_t kxy = tok_load_find(b, xy, n - 1);
            free(xy);
            if (kxy < 0 || b->e[kxy].raw) continue; /* the reference would emit no id here */
            tok_pairs_set(&t->pairs, b->e[kx].id, b->e[ky].id, (int32_t)r, b->e[kxy].id, true);
        }
    }
    t->n_merges = (int64_t)b->n_m;
    free(joined);
    return CT_OK;
fail:
    free(joined);
    return st;
}

static int load_cmp_id(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* prefix + ":" + XXH64 over the canonical content: every (id, bytes) by id,
 * the merges in order as id pairs, the special ids in increasing order, then
 * extra. GPT-2's ("gpt2-bpe", no extra) is what it always was. */
ct_status tok_load_identity(ct_tokenizer *t, const load_builder *b, const char *prefix, const void *extra,
                            size_t n_extra) {
    XXH64_state_t *h = XXH64_createState();
    if (!h) return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory hashing the identity");
    XXH64_reset(h, 0);
    char tag[64];
    snprintf(tag, sizeof tag, "ctrain %s identity v1", prefix);
    XXH64_update(h, tag, strlen(tag) + 1);
    for (int32_t id = 0; id < t->n_ids; id++) {
        if (t->tok_len[id] == TOK_NO_TOKEN) continue;
        uint8_t hdr[8];
        uint32_t len = t->tok_len[id];
        for (int k = 0; k < 4; k++) {
            hdr[k] = (uint8_t)((uint32_t)id >> (8 * k));
            hdr[4 + k] = (uint8_t)(len >> (8 * k));
        }
        XXH64_update(h, hdr, sizeof hdr);
        XXH64_update(h, t->tok_bytes + t->tok_off[id], len);
    }
    static const char mtag[] = "merges";
    XXH64_update(h, mtag, sizeof mtag);
    for (size_t r = 0; r < b->n_m; r++) {
        int32_t ids[2] = {b->m[r].ida, b->m[r].idb}; /* set by the merge table */
        uint8_t le[8];
        for (int k = 0; k < 4; k++) {
            le[k] = (uint8_t)((uint32_t)ids[0] >> (8 * k));
            le[4 + k] = (uint8_t)((uint32_t)ids[1] >> (8 * k));
        }
        XXH64_update(h, le, sizeof le);
    }
    static const char stag[] = "special";
    XXH64_update(h, stag, sizeof stag);
    int32_t *sp = malloc((t->n_special + 1) * sizeof *sp);
    if (!sp) {
        XXH64_freeState(h);
        return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory hashing the identity");
    }
    memcpy(sp, t->special, t->n_special * sizeof *sp);
    qsort(sp, t->n_special, sizeof *sp, load_cmp_id);
    for (size_t i = 0; i < t->n_special; i++) {
        uint8_t le[4] = {(uint8_t)sp[i], (uint8_t)(sp[i] >> 8), (uint8_t)(sp[i] >> 16), (uint8_t)(sp[i] >> 24)};
        XXH64_update(h, le, sizeof le);
    }
    free(sp);
    if (n_extra) XXH64_update(h, extra, n_extra);
    snprintf(t->identity, sizeof t->identity, "%s:%016" PRIx64, prefix, (uint64_t)XXH64_digest(h));
    XXH64_freeState(h);
    return CT_OK;
}

static ct_status load_build(ct_tokenizer *t, load_builder *b) {
    ct_status st = load_index(b);
    if (!st) st = tok_load_byte_tables(t, b);
    if (!st) st = tok_load_merge_table(t, b, true);
    if (!st) st = tok_load_identity(t, b, "gpt2-bpe", NULL, 0);
    if (!st) st = tok_compile_pattern(t);
    t->bos = t->eot; /* GPT-2 starts documents with <|endoftext|> */
    return st;
}

static void load_builder_free(load_builder *b) {
    free(b->e);
    free(b->m);
    free(b->index);
}

/* ------------------------------------------------------- file formats */

/* A JSON number that is a whole id in [0, TOK_MAX_IDS). */
static bool load_json_id(const cJSON *v, int32_t *id) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d < TOK_MAX_IDS) || d != (double)(int32_t)d) return false;
    *id = (int32_t)d;
    return true;
}

static ct_status load_parse_json(const char *path, const char *text, size_t len, cJSON **out) {
    const char *end = NULL;
    *out = NULL;
    /* JSON is UTF-8 (RFC 8259), as the tokenizers library reads it: a raw byte
     * that is not would reach the normalisers and encoders as text no input
     * can match (escapes are checked by the parser: a lone surrogate fails) */
    size_t ok = ct_utf8_valid_prefix(text, len);
    if (ok != len)
        return CT_ERR(CT_ERR_FORMAT, "%s: not valid UTF-8 at byte offset %zu (a JSON file is UTF-8 "
                      "text)", path, ok);
    *out = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!*out) {
        size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        return CT_ERR(CT_ERR_FORMAT, "%s: not valid JSON (parsing stopped at byte offset %zu)", path, at);
    }
    if (!cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        return CT_ERR(CT_ERR_FORMAT, "%s: expected a JSON object at the top level", path);
    }
    return CT_OK;
}

/* Entries from a {"token": id, ...} object (encoder.json, model.vocab). */
static ct_status load_vocab_object(load_builder *b, const cJSON *obj, const char *what) {
    if (!cJSON_IsObject(obj))
        return CT_ERR(CT_ERR_FORMAT, "%s: %s is not a JSON object of token -> id", b->vocab_file, what);
    for (const cJSON *c = obj->child; c; c = c->next) {
        int32_t id;
        if (!load_json_id(c, &id)) {
            char q[96];
            return CT_ERR(CT_ERR_FORMAT, "%s: %s: the id of token %s is not an integer in 0..%d",
                          b->vocab_file, what, tok_load_quote(q, sizeof q, c->string, strlen(c->string)),
                          TOK_MAX_IDS - 1);
        }
        if (!c->string[0])
            return CT_ERR(CT_ERR_FORMAT, "%s: %s: token \"\" (id %d) is the empty string; expected every token "
                          "to hold at least one character", b->vocab_file, what, (int)id);
        ct_status st = load_add_entry(b, c->string, strlen(c->string), id, false, false);
        if (st) return st;
    }
    return CT_OK;
}

/* OpenAI's pair: encoder.json ({"token": id}) and vocab.bpe (a "#version"
 * line, then one merge per line: two symbols separated by one space, in rank
 * order), or Hugging Face's vocab.json + merges.txt, the same formats under
 * other names. <|endoftext|>, when present, is the special token. */
ct_status tok_load_gpt2_files(ct_tokenizer *t, const char *enc_path, const char *bpe_path) {
    char *enc_text = NULL, *bpe_text = NULL;
    size_t enc_len = 0, bpe_len = 0;
    cJSON *root = NULL;
    load_builder b = {.vocab_file = enc_path, .merges_file = bpe_path, .merges_by_line = true};
    ct_status st = ct_file_read_all(enc_path, &enc_text, &enc_len);
    if (!st) st = ct_file_read_all(bpe_path, &bpe_text, &bpe_len);
    if (!st) st = load_parse_json(enc_path, enc_text, enc_len, &root);
    if (!st) st = load_vocab_object(&b, root, "the top-level object");
    for (size_t k = 0; !st && k < b.n_e; k++)
        if (b.e[k].len == strlen(TOK_EOT_TEXT) && memcmp(b.e[k].s, TOK_EOT_TEXT, b.e[k].len) == 0)
            b.e[k].special = b.e[k].raw = true;
    int64_t line = 0;
    const char *blank = NULL; /* first blank line, only allowed after the last merge */
    int64_t blank_line = 0;
    for (const char *p = bpe_text; !st && p && p < bpe_text + bpe_len;) {
        const char *nl = memchr(p, '\n', (size_t)(bpe_text + bpe_len - p));
        const char *e = nl ? nl : bpe_text + bpe_len;
        const char *next = nl ? nl + 1 : e;
        line++;
        size_t n = (size_t)(e - p);
        if (n && p[n - 1] == '\r') n--;
        if (line == 1 && n >= 8 && memcmp(p, "#version", 8) == 0) {
            p = next;
            continue;
        }
        if (n == 0) {
            if (!blank) {
                blank = p;
                blank_line = line;
            }
            p = next;
            continue;
        }
        char q[96];
        if (blank) {
            st = CT_ERR(CT_ERR_FORMAT, "%s:%" PRId64 ": blank line before the last merge (line %" PRId64 ")",
                        bpe_path, blank_line, line);
            break;
        }
        const char *sp = memchr(p, ' ', n);
        if (!sp || sp == p || sp == p + n - 1 || memchr(sp + 1, ' ', (size_t)(p + n - sp - 1))) {
            st = CT_ERR(CT_ERR_FORMAT, "%s:%" PRId64 ": expected two symbols separated by one space, got %s",
                        bpe_path, line, tok_load_quote(q, sizeof q, p, n));
            break;
        }
        st = load_add_merge(&b, p, (size_t)(sp - p), sp + 1, (size_t)(p + n - sp - 1), line);
        p = next;
    }
    if (!st) st = load_build(t, &b);
    load_builder_free(&b);
    cJSON_Delete(root);
    free(enc_text);
    free(bpe_text);
    return st;
}

static bool load_json_is(const cJSON *v, const char *s) {
    return cJSON_IsString(v) && strcmp(v->valuestring, s) == 0;
}

/* Hugging Face tokenizer.json: model {type "BPE", vocab {token: id}, merges
 * ["a b", ...] or [["a", "b"], ...]}, added_tokens [{id, content, special,
 * lstrip, rstrip}]. Two fixed forms keep their own builders (and identities):
 * GPT-2's byte-level BPE (a ByteLevel pre_tokenizer, nothing else) and LLaMA's
 * SentencePiece BPE (byte_fallback, tok_spm_build); every other file goes
 * through the generic pipeline (tok_hf_build), which checks the rest. */
ct_status tok_load_hf_file(ct_tokenizer *t, const char *path) {
    char *text = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    load_builder b = {.vocab_file = path, .merges_file = path, .merges_by_line = false};
    ct_status st = ct_file_read_all(path, &text, &len);
    if (!st) st = load_parse_json(path, text, len, &root);
    if (st) goto done;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!cJSON_IsObject(model)) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: no \"model\" object: not a Hugging Face tokenizer.json", path);
        ct_error_hint("give the directory holding the tokenizer files (encoder.json + vocab.bpe, "
                      "vocab.json + merges.txt, or tokenizer.json), or the path of a tokenizer.json");
        goto done;
    }
    if (type && !load_json_is(type, "BPE")) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: model.type is %s, expected \"BPE\" (" TOK_KINDS ")", path,
                    cJSON_IsString(type) ? type->valuestring : "not a string");
        goto done;
    }
    bool gpt2 = tok_hf_is_gpt2_form(root), spm = !gpt2 && tok_spm_is_form(root, path);
    if ((st = load_vocab_object(&b, cJSON_GetObjectItemCaseSensitive(model, "vocab"), "model.vocab"))) goto done;
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsArray(merges)) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: model.merges is not an array", path);
        goto done;
    }
    int64_t i = 0;
    for (const cJSON *m = merges->child; m; m = m->next, i++) {
        char q[96];
        if (cJSON_IsString(m)) {
            const char *s = m->valuestring, *sp = strchr(s, ' ');
            size_t n = strlen(s);
            if (!sp || sp == s || !sp[1] || strchr(sp + 1, ' ')) {
                st = CT_ERR(CT_ERR_FORMAT, "%s: model.merges[%" PRId64 "]: expected \"a b\" (two symbols, one space), got %s",
                            path, i, tok_load_quote(q, sizeof q, s, n));
                goto done;
            }
            st = load_add_merge(&b, s, (size_t)(sp - s), sp + 1, n - (size_t)(sp - s) - 1, i);
        } else if (cJSON_GetArraySize(m) == 2 && cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 1)) && cJSON_GetArrayItem(m, 0)->valuestring[0] &&
                   cJSON_GetArrayItem(m, 1)->valuestring[0]) {
            const char *x = cJSON_GetArrayItem(m, 0)->valuestring, *y = cJSON_GetArrayItem(m, 1)->valuestring;
            st = load_add_merge(&b, x, strlen(x), y, strlen(y), i);
        } else {
            st = CT_ERR(CT_ERR_FORMAT, "%s: model.merges[%" PRId64 "]: expected \"a b\" or [\"a\", \"b\"]", path, i);
        }
        if (st) goto done;
    }
    /* added tokens: their text is taken as is (not byte-alphabet text); the
     * special ones are matched only on request */
    if ((st = load_index_more(&b))) goto done;
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    i = 0;
    for (const cJSON *a = cJSON_IsArray(added) ? added->child : NULL; a; a = a->next, i++) {
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(a, "content");
        int32_t id;
        if (!load_json_id(cJSON_GetObjectItemCaseSensitive(a, "id"), &id) || !cJSON_IsString(content) ||
            !content->valuestring[0]) {
            st = CT_ERR(CT_ERR_FORMAT, "%s: added_tokens[%" PRId64 "]: expected {\"id\": integer, \"content\": text}",
                        path, i);
            goto done;
        }
        bool special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "special"));
        size_t n = strlen(content->valuestring);
        int32_t k = tok_load_find(&b, content->valuestring, n);
        if (k >= 0) {
            if (b.e[k].id != id) {
                char q[96];
                st = CT_ERR(CT_ERR_FORMAT, "%s: added_tokens[%" PRId64 "]: %s has id %d, but model.vocab gives it %d",
                            path, i, tok_load_quote(q, sizeof q, content->valuestring, n), (int)id, (int)b.e[k].id);
                goto done;
            }
            b.e[k].raw = true;
            b.e[k].special = b.e[k].special || special;
        } else {
            if ((st = load_add_entry(&b, content->valuestring, n, id, special, true))) goto done;
            if ((st = load_index_more(&b))) goto done;
            k = (int32_t)b.n_e - 1;
        }
        b.e[k].lstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "lstrip"));
        b.e[k].rstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "rstrip"));
    }
    if (gpt2) {
        st = load_build(t, &b);
    } else if (!(st = load_index(&b))) {
        st = spm ? tok_spm_build(t, &b, root, path) : tok_hf_build(t, &b, root, path);
    }
done:
    load_builder_free(&b);
    cJSON_Delete(root);
    free(text);
    return st;
}

/* ------------------------------------------------------- public */

void ct_tokenizer_free(ct_tokenizer *t) {
    if (!t) return;
    tok_spm_free(&t->spm);
    tok_hf_free(t->hf);
    free(t->trie);
    free(t->tok_off);
    free(t->tok_len);
    free(t->tok_bytes);
    free(t->special);
    free(t->added);
    free(t->pairs.slots);
    pcre2_code_free(t->re);
    for (int i = 0; i < t->n_files; i++) free(t->files[i]);
    free(t);
}

int ct_tokenizer_vocab_size(const ct_tokenizer *t) { return t->n_ids; }
int32_t ct_tokenizer_eot(const ct_tokenizer *t) { return t->eot; }
int32_t ct_tokenizer_bos(const ct_tokenizer *t) { return t->bos; }
bool ct_tokenizer_adds_bos(const ct_tokenizer *t) { return t->adds_bos && t->bos >= 0; }
ct_tok_kind ct_tokenizer_kind(const ct_tokenizer *t) { return t->kind; }
const char *ct_tokenizer_identity(const ct_tokenizer *t) { return t->identity; }
