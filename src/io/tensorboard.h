/*
 * TensorBoard event-file writer: scalar summaries (loss, lr, ...) appended to
 * dir/events.out.tfevents.<unix seconds>.<hostname>.<pid>.ctrain, which
 * `tensorboard --logdir dir` picks up. The file is a TFRecord stream of
 * tensorflow.Event protobuf messages, encoded by hand (format below).
 * Leaves out: histograms, images, text, graphs, hparams and the tensor-based
 * summaries of newer TensorBoard plugins; scalars use Value.simple_value, which
 * every TensorBoard version reads. No protobuf library is needed.
 *
 * Durability: this is an append-only log, not an atomic-by-rename file. Bytes
 * once written are never rewritten, so a crash can lose the records not yet
 * flushed (at most CT_TB_FLUSH_RECORDS records or CT_TB_FLUSH_SECONDS of them)
 * and may leave a torn last record, but never damages earlier records:
 * TensorBoard's reader stops at a truncated tail and keeps what precedes it.
 *
 * File format (all integers little-endian), one record per Event:
 *   uint64 length                 bytes of data
 *   uint32 masked crc32c(length)  over the 8 length bytes
 *   byte   data[length]           a serialized Event
 *   uint32 masked crc32c(data)
 * crc32c is CRC-32 with the Castagnoli polynomial (reflected 0x82f63b78, init
 * and final xor 0xffffffff); masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8
 * (mod 2^32).
 * Event (protobuf wire format): wall_time = 1 (double, fixed64, unix seconds),
 * step = 2 (int64, varint), file_version = 3 (string), summary = 5 (Summary).
 * Summary: value = 1 (repeated Value). Value: tag = 1 (string),
 * simple_value = 2 (float, fixed32). The first record is an Event whose
 * file_version is "brain.Event:2".
 */
#ifndef CT_TENSORBOARD_H
#define CT_TENSORBOARD_H

#include "ctrain/core.h"

#include <stddef.h>
#include <stdint.h>

/* The writer keeps encoded records in memory and writes them to the file
 * once this many are pending or this many seconds have passed since the last
 * write, whichever comes first (ct_tb_flush writes them at once). */
#define CT_TB_FLUSH_RECORDS 32
#define CT_TB_FLUSH_SECONDS 5.0
/* Longest tag accepted, in bytes. */
#define CT_TB_TAG_MAX 1024

typedef struct ct_tb ct_tb; /* opaque: one open event file */

/* Create dir (and parents) if needed, then a new event file in it, named
 * events.out.tfevents.<unix seconds>.<hostname>.<pid>.ctrain (".1", ".2", ...
 * appended when a file of that name exists already; existing files are never
 * truncated). Writes and flushes the file_version record and fsyncs dir.
 * Returns owned *out; release with ct_tb_close. Not thread-safe per writer.
 * Errors: CT_ERR_IO (the directory or the file cannot be created or written;
 * the message names the path), CT_ERR_OOM. */
ct_status ct_tb_open(ct_tb **out, const char *dir);

/* Append one Event at `step` holding n scalar values tags[i] = vals[i]
 * (borrows both arrays). Values are stored as float32 (simple_value), so large
 * counters lose their low digits; NaN and infinities are stored as such.
 * wall_time is seconds since the Unix epoch (see ct_tb_wall_time).
 * Errors: CT_ERR_ARG (n < 1, an empty tag or one over CT_TB_TAG_MAX bytes),
 * CT_ERR_IO (a write failed, e.g. the disk is full; the message names the
 * file). After an IO error the writer is poisoned: every later call returns
 * CT_ERR_IO, so a torn record is never followed by more data. */
ct_status ct_tb_scalars(ct_tb *tb, int64_t step, double wall_time, int n,
                        const char *const *tags, const double *vals);
/* One scalar: ct_tb_scalars with n = 1. */
ct_status ct_tb_scalar(ct_tb *tb, const char *tag, int64_t step, double value,
                       double wall_time);

/* Push everything written so far to the disk (write the pending records, then
 * fsync). Call it at checkpoints and at the end of a run. CT_ERR_IO naming the
 * file (and the writer is poisoned, as above). */
ct_status ct_tb_flush(ct_tb *tb);

/* Write the pending records and fsync (errors ignored: call ct_tb_flush first
 * to see them), close and free. NULL is fine. */
void ct_tb_close(ct_tb *tb);

/* Full path of the event file (owned by tb; valid until ct_tb_close). */
const char *ct_tb_path(const ct_tb *tb);

/* Seconds since the Unix epoch (CLOCK_REALTIME), for Event.wall_time. */
double ct_tb_wall_time(void);

/* ------------------------------------------------ encoding, for the tests */

/* CRC-32C of n bytes (borrows data), continuing from `crc` (0 to start);
 * ct_tb_crc32c(ct_tb_crc32c(0, a, na), b, nb) == crc32c of a followed by b. */
uint32_t ct_tb_crc32c(uint32_t crc, const void *data, size_t n);
/* TFRecord's masked form of a CRC (see above). */
uint32_t ct_tb_crc_mask(uint32_t crc);
/* Protobuf base-128 varint of v into out (at least 10 bytes); returns the
 * number of bytes written (1..10). Negative int64 values are passed as their
 * two's complement uint64 and take 10 bytes, as protobuf encodes int64. */
size_t ct_tb_put_varint(uint8_t *out, uint64_t v);

#endif
