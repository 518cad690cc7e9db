/*
 * The stop flag behind cli/stop.h. The handler only stores the signal number
 * (async-signal-safe); SA_RESETHAND makes a second signal take the default
 * action, and SA_RESTART keeps file writes from failing with EINTR.
 */
#include "stop.h"

#include <string.h>

static volatile sig_atomic_t stop_flag = 0;
static struct sigaction old_int, old_term;

static void stop_handler(int sig) { stop_flag = sig; }

volatile sig_atomic_t *cli_stop_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = stop_handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    return &stop_flag;
}

void cli_stop_restore(void) {
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
}
