/* Blocks in read() and never allocates again: SIGUSR1 must still give a
 * report.  Installs its own SIGUSR1 handler when told to (it then wins). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"

static volatile sig_atomic_t own_handler_ran;
static void own_handler(int sig) { (void)sig; own_handler_ran = 1; }

__attribute__((noinline)) void *site_blocked(void) { return malloc(4242); }

int main(int argc, char **argv)
{
    site_blocked();
    if (argc > 1 && strcmp(argv[1], "own-handler") == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = own_handler;
        sigaction(SIGUSR1, &sa, NULL);
    }
    checkpoint("blocked");
    if (own_handler_ran && write(1, "own handler ran\n", 16) < 0)
        return 1;
    return 0;
}
