/*
 * SIGINT / SIGTERM for `ctrain train`: the first signal sets a flag that the
 * training loop polls after every step (it then checkpoints and returns) and
 * says so at once on stderr ("finishing step k, then checkpointing; press
 * Ctrl-C again to stop without saving"); a second one ends the program at
 * once, saying which checkpoint is the last (or that there is none).
 * The process exits 128 + the signal number after a stop (130 for SIGINT,
 * 143 for SIGTERM), as a shell reports a signal, so scripts can tell a
 * stopped run from a finished one.
 */
#ifndef CT_CLI_STOP_H
#define CT_CLI_STOP_H
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

/* Install the handlers; returns the flag they set to the signal number
 * (0 until a signal arrives). quiet: say nothing (ranks other than 0).
 * Call once. */
volatile sig_atomic_t *cli_stop_install(bool quiet);
/* What the handlers say: steps done so far, and the step of the last
 * checkpoint written (-1: none). Call after every step. */
void cli_stop_progress(int64_t step, int64_t checkpoint_step);
/* Put the previous handlers back. */
void cli_stop_restore(void);
#endif
