/*
 * The run's tokenizer: the one the shards were prepared with (manifest.json
 * beside data.train and data.val), the one the starting model carries (the
 * files beside the checkpoint resumed and beside model.init_from's weights)
 * and data.tokenizer must be one tokenizer; its files go into run.dir, and
 * from there into every checkpoint, so the saved model loads with its own
 * tokenizer, and with no other.
 * Leaves out: identities and file handling (data/tokenizer/tokenizer_ident.c,
 * data/tokenizer/tokenizer_files.c).
 */
#ifndef CT_RUN_TOKENIZER_H
#define CT_RUN_TOKENIZER_H

#include "ctrain/config.h"
#include "ctrain/core.h"

/* Refuse a run whose tokenizers differ: CT_ERR_ARG naming both (identity,
 * size, the directory or manifest and the config key). resume_dir is the
 * checkpoint resumed ("" for a fresh run). Reads only. A model directory
 * whose tokenizer files do not load is refused (CT_ERR_ARG with the reason)
 * unless data.tokenizer names a tokenizer that loads, which then stands for
 * the model's. Errors: CT_ERR_ARG, CT_ERR_IO / CT_ERR_FORMAT (data.tokenizer
 * does not load; a damaged ctrain manifest), CT_ERR_OOM. */
ct_status run_tokenizer_check(const ct_config *cfg, const char *resume_dir);

/* Put the run's tokenizer files into dir (run.dir; it exists): the starting
 * model's when it has them, else data.tokenizer's, else those the shards'
 * manifest names (when they still have the manifest's identity). When
 * data.train's (else data.val's) manifest records the chat template its
 * examples were rendered with (prepare --format sft), dir/tokenizer_config.json
 * gets it as "chat_template", with the special tokens it rendered with that
 * the config lacks (SentencePiece's bos_token and eos_token only when they
 * are the tokenizer's own), so `ctrain chat --model RUN` and transformers'
 * apply_chat_template use it. Logs where they came from, or why the run has
 * none. Errors: those of run_tokenizer_check, CT_ERR_IO (writing). */
ct_status run_tokenizer_write(const ct_config *cfg, const char *resume_dir, const char *dir);

#endif
