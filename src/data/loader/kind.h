/*
 * The example-kind seam: what one training example is, chosen once when a
 * loader opens (the first registered kind whose detect says the source's
 * shards hold it), as a backend is (one table of functions per kind):
 *   tokens  a window of B*T+1 consecutive tokens of plain shards, filling a
 *           whole batch: row b is tokens [p + b*T, p + b*T + T), targets
 *           shifted by one (kind_tokens.c);
 *   sft     an instruction example and its loss mask, from shards with .sft
 *           sidecars, whole examples in rows of T tokens, packed or one per
 *           row (kind_sft.c).
 * A kind knows its examples (their number, each one's length and counted
 * targets, which shard holds them), how to fill a batch row from examples
 * (tokens, targets, positions), which token ranges that reads, and where an
 * example starts (the shard and offset of a resume position). The order
 * (order.h: epochs, shuffling, rank sharding, group-by-length, packing), the
 * prefetch ring and the read-ahead work on example indices and these calls,
 * never asking which kind they have; kinds read shards through the source
 * (data/shard/source.h), never asking where the bytes come from.
 * Adding a kind: a loader_kind_i in its own file and one line in
 * loader_kinds[] (kind.c); see docs/data.md.
 */
#ifndef CT_LOADER_KIND_H
#define CT_LOADER_KIND_H

#include "ctrain/loader.h"
#include "data/shard/source.h"

typedef struct loader_kind loader_kind;

/* What a kind is opened with. */
typedef struct loader_kind_opts {
    int B, T;          /* batch shape */
    int vocab_size;    /* > 0: every token below it (the source checks) */
    int rank;          /* warnings are logged by rank 0 only */
    const char *spec;  /* the data key's value, for messages */
    const char *split; /* "train" | "val": data.<split> in messages */
} loader_kind_opts;

/* A range of tokens a row reads: called once per example, in row order. */
typedef void (*loader_range_fn)(void *arg, int32_t shard, int64_t start, int64_t count);

typedef struct loader_kind_i {
    const char *name; /* "tokens", "sft" */
    /* Whether src's shards hold this kind's examples. An error when they are
     * inconsistent (CT_ERR_FORMAT: some shards are of the kind, some not).
     * The last kind of the registry takes whatever is left. */
    ct_status (*detect)(ct_source *src, bool *yes);
    /* Open over src (borrowed; it outlives the kind): check the shards (and
     * their tokens when o->vocab_size > 0, through the source), measure every
     * example, fill in the base fields. Returns owned *out (release with
     * close, also after a failure, when *out is set). */
    ct_status (*open)(loader_kind **out, ct_source *src, const loader_kind_opts *o);
    void (*close)(loader_kind *k);
    /* Fill one row of `width` tokens from the n examples ex[0..n), placed
     * from column 0 in that order, the columns after them padding: in, tg
     * (-1 where a target does not count) and, unless plain_pos, pos (each
     * token's position inside its example). *counted: targets >= 0 written.
     * Thread-safe (the prefetch thread and the caller's read at once). */
    ct_status (*fill_row)(const loader_kind *k, const int64_t *ex, int n, int32_t *in,
                          int32_t *tg, int32_t *pos, int64_t *counted);
    /* The token ranges fill_row reads for those examples. */
    void (*ranges)(const loader_kind *k, const int64_t *ex, int n, loader_range_fn fn, void *arg);
    /* Where example x starts: its shard and its first token there. */
    void (*where)(const loader_kind *k, int64_t x, int32_t *shard, int64_t *offset);
    /* Statistics of the examples (false and zeros when the kind keeps none),
     * rows being the rows the order makes of epoch 0. */
    bool (*stats)(const loader_kind *k, int64_t rows, ct_loader_sft_stats *out);
    /* A line for the run's log about this data (stats complete, packing on
     * or off); false when there is nothing to say. */
    bool (*describe)(const loader_kind *k, const ct_loader_sft_stats *st, bool packing,
                     char *buf, size_t cap);
} loader_kind_i;

/* The fields every kind fills in at open; its own state follows them. */
struct loader_kind {
    const loader_kind_i *i;
    int64_t n;            /* examples, numbered shard by shard, in order inside each */
    int n_groups;         /* shards */
    int64_t *group_start; /* (n_groups + 1) the first example of each shard; owned */
    int64_t width;        /* tokens of a row: T, or B*T when one example fills a batch */
    int rows;             /* rows per batch: B, or 1 when one example fills a batch */
    int64_t span;         /* tokens one example reads when it fills a row (B*T+1 for a
                           * window: targets reach one past it); 0 for variable ones */
    const char *noun;     /* one example in messages: "window", "example" */
    const int32_t *len;   /* (n) tokens example x fills in its row (1..width); NULL: every
                           * example fills a whole row (the order streams them) */
    const int32_t *cnt;   /* (n) counted targets of example x in its row; NULL: all count */
    bool plain_pos;       /* every row's positions are 0..T-1: fill_row writes none */
    int32_t mode;         /* position mode bits the kind adds (ct_loader_pos.shuffled: 2) */
    int64_t total_tokens; /* in the shards, as stored */
};

extern const loader_kind_i loader_kind_tokens_i;
extern const loader_kind_i loader_kind_sft_i;

/* kind.c: detect and open the kind of src's shards. */
ct_status loader_kind_open(loader_kind **out, ct_source *src, const loader_kind_opts *o);
void loader_kind_close(loader_kind *k); /* NULL is fine */
/* For the kinds: the base fields (group_start for n_groups shards). */
ct_status loader_kind_base_init(loader_kind *k, const loader_kind_i *i, int n_groups);
void loader_kind_base_free(loader_kind *k);
/* The shard holding example x (a binary search of group_start). */
int loader_kind_group_of(const loader_kind *k, int64_t x);

#endif
