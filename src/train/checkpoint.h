/*
 * The checkpoint store: everything an exact resume needs, written so that a
 * crash or a full disk never leaves a checkpoint that looks complete but is
 * not, and never harms the checkpoints already there.
 *
 * Layout. run_dir/checkpoints/step_%08lld/ holds
 *   config.json + model.safetensors  the weights in Hugging Face layout, F32,
 *                                    uncompressed, so the directory loads as it
 *                                    is with ct_model_load_hf (model.init_from);
 *   NAME.bin or NAME.bin.zst         one file per training-state blob the
 *                                    caller passes ("optimizer", "state", ...);
 *                                    .zst when compression is on (one zstd frame,
 *                                    level 3, streamed through a bounded buffer);
 *   MANIFEST.json                    written last: format "ctrain-checkpoint",
 *                                    version, step, the caller's model signature,
 *                                    the parameter count, and for every file its
 *                                    size and xxh64 (for a blob also its raw size
 *                                    and the xxh64 of its raw bytes). The
 *                                    manifest's own "manifest_xxh64", its last
 *                                    key, hashes every byte of the file before
 *                                    that key, so a damaged manifest is caught too.
 * Hashes are written as 16 lowercase hex digits (JSON numbers cannot hold 64
 * bits exactly).
 *
 * Atomicity. A save writes into step_%08lld.tmp-<pid> beside the final
 * directory (each file written through a temp file, fsynced and renamed),
 * re-syncs every file and the directory, renames the directory to its final
 * name and fsyncs checkpoints/ (and run_dir). Any failure removes the temporary
 * directory and leaves the existing checkpoints as they were. A checkpoint of
 * the same step that already exists is replaced: it is first renamed to a
 * *.tmp-* name, so a crash in between loses at most that step. Only after the
 * rename are old checkpoints pruned: the keep_last highest steps are kept, the
 * one just written always among them; a pruned directory is renamed to a
 * *.tmp-* name before it is removed, so it never looks half-complete.
 * Temporary directories left by a dead process (its pid is not running) are
 * removed by save, list and latest; those of a live process are left alone.
 *
 * Leaves out: what goes inside the blobs (the trainer serialises its optimizer,
 * RNG, loader and scheduler state), sharded (multi-rank) checkpoints, and
 * locking: one process writes a run directory at a time.
 */
#ifndef CT_CHECKPOINT_H
#define CT_CHECKPOINT_H

#include "ctrain/core.h"
#include "ctrain/model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CT_CKPT_FORMAT "ctrain-checkpoint"
#define CT_CKPT_VERSION 1
#define CT_CKPT_NAME_MAX 64 /* bytes of a blob name, [A-Za-z0-9_-] only */

/* One training-state blob to save: stored as NAME.bin (or NAME.bin.zst).
 * data is borrowed for the duration of ct_ckpt_save. */
typedef struct ct_ckpt_blob {
    const char *name;
    const void *data;
    size_t size; /* bytes; 0 is fine */
} ct_ckpt_blob;

typedef struct ct_ckpt_opts {
    bool compress;         /* zstd the blobs (never the weights) */
    int keep_last;         /* checkpoints to keep after a save; 0 = keep all */
    int64_t keep_also;     /* a step pruning never removes (run.keep_best's); -1: none */
    const char *signature; /* the model's shape, checked on resume; NULL = none */
} ct_ckpt_opts;

/* compress = false, keep_last = 0, keep_also = -1, signature = NULL. */
ct_ckpt_opts ct_ckpt_opts_default(void);

/* A signature string for m's shape: architecture, every size of the config,
 * the switches and the parameter count. Writes at most cap bytes (NUL
 * included) into buf; CT_ERR_ARG when it does not fit. */
ct_status ct_ckpt_signature(const ct_model *m, char *buf, size_t cap);

/* Save a checkpoint of `step` (>= 0) under run_dir/checkpoints (created when
 * missing). Borrows model (only read; non-const because the weight writer
 * takes it so) and the blobs. o may be NULL (defaults). The final directory's
 * path is copied into out_dir (cap bytes) when out_dir is not NULL.
 * Errors: CT_ERR_ARG (negative step, bad or duplicate blob name, out_dir too
 * small, path too long), CT_ERR_IO (naming the path and the system error: no
 * space, file too large, fsync or close failure, an unwritable run_dir),
 * CT_ERR_OOM. On any error nothing of this save remains on disk, with one
 * exception: when only the fsync of checkpoints/ after the final rename fails,
 * the complete checkpoint stays in place and CT_ERR_IO says its durability is
 * not confirmed (verify still guards every later read). Pruning failures only
 * log a warning. */
ct_status ct_ckpt_save(const char *run_dir, int64_t step, ct_model *model,
                       const ct_ckpt_blob *blobs, int n_blobs, const ct_ckpt_opts *o,
                       char *out_dir, size_t cap);

/* Check a checkpoint directory: the manifest's own hash, format and version,
 * and that every file it lists exists with the listed size and xxh64. When
 * signature is not NULL it must equal the manifest's: otherwise CT_ERR_ARG
 * naming both. The manifest's step goes to *step when step is not NULL.
 * Errors: CT_ERR_IO (a missing or unreadable file), CT_ERR_FORMAT (a size or
 * hash mismatch, a malformed manifest: naming the file and what was expected),
 * CT_ERR_ARG (signature), CT_ERR_OOM. */
ct_status ct_ckpt_verify(const char *ckpt_dir, const char *signature, int64_t *step);
/* Prune run_dir's checkpoints as a save does (keep the keep_last highest
 * steps, `keep` among them, and keep_also; 0 keeps all): a resume that finds its work done
 * finishes a prune its killed predecessor never reached. Failures warn. */
void ct_ckpt_prune(const char *run_dir, int64_t keep, int keep_last, int64_t keep_also);

/* Steps of the checkpoint directories in run_dir/checkpoints (step_<digits>
 * only, temporary directories excluded), ascending; they are not verified.
 * Returns owned *steps (release with free; NULL when *n is 0). A missing
 * checkpoints directory is not an error (*n = 0). Removes stale temporary
 * directories. Errors: CT_ERR_IO (unreadable directory), CT_ERR_OOM. */
ct_status ct_ckpt_list(const char *run_dir, int64_t **steps, int *n);

/* The newest checkpoint in run_dir/checkpoints that verifies and whose
 * manifest step matches its directory name: its path goes to out_dir (cap
 * bytes) and its step to *step (either may be NULL). Each newer one that fails
 * is logged as a warning naming it and why, and the next older is tried. A
 * signature mismatch on the newest intact checkpoint is returned at once
 * (CT_ERR_ARG naming both signatures): the run was made with another model.
 * Errors: CT_ERR_IO "no valid checkpoint in DIR/checkpoints" (none, or none
 * verified), CT_ERR_ARG (signature, out_dir too small), CT_ERR_OOM. */
ct_status ct_ckpt_latest(const char *run_dir, const char *signature, char *out_dir, size_t cap,
                         int64_t *step);

/* Read blob `name` of a checkpoint: decompresses a .zst file and checks the
 * stored file's size and xxh64 and the raw bytes' size and xxh64 against the
 * manifest. Returns owned *data (malloc'd; release with free; never NULL on
 * success, even for 0 bytes) and its size in *size.
 * Errors: CT_ERR_IO (missing or unreadable file), CT_ERR_FORMAT (no such blob
 * in the manifest, mismatch, corrupt zstd data: naming the file),
 * CT_ERR_ARG (bad name), CT_ERR_OOM. */
ct_status ct_ckpt_read_blob(const char *ckpt_dir, const char *name, void **data, size_t *size);

#endif
