/* Dies of a signal it does not handle (#64 item 13): leaks 10 x 100 bytes,
 * says whether it sees SIGTERM's and SIGINT's dispositions as the default
 * (the tracer's handler must not show), then by argv[1]:
 *   wait   waits at a checkpoint for the test's signal (SIGTERM, SIGINT...)
 *   segv   writes through a null pointer
 *   abort  calls abort()
 * Its final report must be on disk when `libmemleak run` returns. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"

__attribute__((noinline)) static void *site_before_death(size_t n) { return malloc(n); }

int main(int argc, char **argv)
{
    const char *how = argc > 1 ? argv[1] : "wait";
    void *volatile keep;
    for (int i = 0; i < 10; i++)
        keep = site_before_death(100);
    (void)keep;
    struct sigaction term, intr;
    sigaction(SIGTERM, NULL, &term);
    intr.sa_handler = signal(SIGINT, SIG_DFL);
    printf("defaults: %s %s\n", term.sa_handler == SIG_DFL && !(term.sa_flags & SA_SIGINFO) ? "yes" : "no",
           intr.sa_handler == SIG_DFL ? "yes" : "no");
    fflush(stdout);
    if (!strcmp(how, "segv")) {
        volatile int *nowhere = NULL;
        *nowhere = 1;
    } else if (!strcmp(how, "abort")) {
        abort();
    }
    checkpoint("waiting");
    return 0;
}
