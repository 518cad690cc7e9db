/*
 * Instruction-tuning sidecars (.sft): the example boundaries and the loss
 * mask of one llm.c token shard (train_000000.bin -> train_000000.sft), as
 * `ctrain prepare --format sft` writes them. The tokens stay in the .bin, so
 * every tool that reads shards still reads them; the sidecar says where each
 * example starts and which tokens' predictions count. The format is
 * specified in sft_shard.c next to the reader.
 * Leaves out: tokenising and rendering examples (data/prepare/sft_prepare.h),
 * batching (the loader).
 */
#ifndef CT_SFT_SHARD_H
#define CT_SFT_SHARD_H

#include "ctrain/core.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CT_SFT_MAGIC 20261125     /* int32 at byte 0 */
#define CT_SFT_VERSION 1
#define CT_SFT_HEADER_BYTES 32

struct ct_shard;
typedef struct ct_sft_shard ct_sft_shard; /* an open sidecar: opaque, read-only */

/* The sidecar path of a shard path: its ".bin" suffix replaced by ".sft"
 * (a name without ".bin" gets ".sft" appended). CT_ERR_ARG when it does not
 * fit in cap bytes. */
ct_status ct_sft_sidecar_path(char *buf, size_t cap, const char *shard_path);

/* Map the sidecar at `path` and validate all of it against `shard` (borrowed;
 * only its token count and path are used, so a remote shard does too): magic,
 * version, sizes, example offsets strictly increasing from 0 to the shard's
 * token count, the counted-token total against the mask's bits, unused bits
 * of the last mask byte zero, and no example whose first token is marked (a
 * first token has nothing before it inside its example to be predicted from).
 * Returns owned *out; release with ct_sft_close.
 * Errors: CT_ERR_IO (missing or unreadable), CT_ERR_FORMAT naming the
 * sidecar (and the shard when they disagree), with what was expected and
 * found; CT_ERR_OOM. An open sidecar may be read from several threads. */
ct_status ct_sft_open(ct_sft_shard **out, const char *path, const struct ct_shard *shard);
/* The same over a sidecar's bytes already in memory (fetched from a URL):
 * copies data[0..len); `name` and `shard_name` name the two in errors;
 * shard_tokens is the token count of the shard it belongs to. */
ct_status ct_sft_open_bytes(ct_sft_shard **out, const char *name, const void *data, size_t len,
                            int64_t shard_tokens, const char *shard_name);
/* The same over a sidecar's bytes handed over by the caller (a mapping, or
 * memory fetched from a URL): nothing is copied; release(data, len) (NULL:
 * nothing to give back) runs when the sidecar closes, or at once when this
 * fails. */
ct_status ct_sft_open_mem(ct_sft_shard **out, const char *name, const void *data, size_t len,
                          void (*release)(const void *data, size_t len), int64_t shard_tokens,
                          const char *shard_name);
/* How ct_sft_open words a sidecar it cannot map (for a source that maps it). */
const struct ct_file_map_msgs *ct_sft_file_msgs(void);
void ct_sft_close(ct_sft_shard *s); /* NULL is fine */

const char *ct_sft_path(const ct_sft_shard *s);
int64_t ct_sft_num_examples(const ct_sft_shard *s);
int64_t ct_sft_num_tokens(const ct_sft_shard *s);   /* = the shard's */
int64_t ct_sft_counted_tokens(const ct_sft_shard *s); /* tokens whose bit is set */

/* Example i (0 <= i < num_examples, checked with CT_ASSERT): its tokens are
 * the shard's [*start, *end), end > start. */
void ct_sft_example_range(const ct_sft_shard *s, int64_t i, int64_t *start, int64_t *end);
/* The example that holds token position pos (0 <= pos < num_tokens;
 * CT_ASSERT): a binary search over the offsets. */
int64_t ct_sft_example_of(const ct_sft_shard *s, int64_t pos);
/* Whether the prediction of token i (from the tokens before it in its
 * example) counts in the loss: i is a completion or assistant token. */
bool ct_sft_counts(const ct_sft_shard *s, int64_t i);
/* The targets of one example's row: in[0..n) are the shard's tokens
 * [start, start + n) (0 <= start, start + n <= num_tokens; CT_ASSERT);
 * tg[t] = in[t + 1] when token start + t + 1 counts, else -1 (tg[n - 1] is
 * -1: its next token is not in the row). Returns the targets set. One pass
 * over the mask's bits, for the loader's rows (ct_sft_counts per token is
 * the same, a call each). */
int64_t ct_sft_targets(const ct_sft_shard *s, int64_t start, int64_t n, const int32_t *in,
                       int32_t *tg);
/* How many tokens of [start, end) count (0 <= start <= end <= num_tokens,
 * checked with CT_ASSERT): a popcount over the mask's bytes. */
int64_t ct_sft_count_range(const ct_sft_shard *s, int64_t start, int64_t end);
/* mask[k] = 1 when token start+k counts, else 0, for k < count.
 * CT_ERR_ARG when the range is outside the shard. */
ct_status ct_sft_read_mask(const ct_sft_shard *s, int64_t start, int64_t count, uint8_t *mask);

/* A sidecar written example by example, then committed atomically (temp
 * file, fsync, rename) beside its shard, exactly one of commit or abort.
 * open: CT_ERR_IO, CT_ERR_OOM (owned *out).
 * add: one example of n >= 1 tokens, mask[k] != 0 when token k counts
 *   (borrowed); CT_ERR_ARG when n < 1 or mask[0] is set, CT_ERR_OOM.
 * commit consumes w: CT_ERR_ARG when no example was added, CT_ERR_IO.
 * The whole mask and the offsets are held in memory until commit (an eighth
 * of a byte per token and 8 bytes per example). */
typedef struct ct_sft_writer ct_sft_writer;
ct_status ct_sft_writer_open(ct_sft_writer **out, const char *path);
ct_status ct_sft_writer_add(ct_sft_writer *w, const uint8_t *mask, int64_t n);
int64_t ct_sft_writer_examples(const ct_sft_writer *w);
int64_t ct_sft_writer_tokens(const ct_sft_writer *w);
int64_t ct_sft_writer_counted(const ct_sft_writer *w);
ct_status ct_sft_writer_commit(ct_sft_writer *w);
void ct_sft_writer_abort(ct_sft_writer *w); /* NULL is fine */

#endif
