/*
 * SIGINT / SIGTERM for `ctrain train`: the first signal sets a flag that the
 * training loop polls after every step (it then checkpoints and returns); a
 * second one of the same kind ends the program at once (default action).
 * The process exits 128 + the signal number after a stop (130 for SIGINT,
 * 143 for SIGTERM), as a shell reports a signal, so scripts can tell a
 * stopped run from a finished one.
 */
#ifndef CT_CLI_STOP_H
#define CT_CLI_STOP_H
#include <signal.h>

/* Install the handlers; returns the flag they set to the signal number
 * (0 until a signal arrives). Call once. */
volatile sig_atomic_t *cli_stop_install(void);
/* Put the previous handlers back. */
void cli_stop_restore(void);
#endif
