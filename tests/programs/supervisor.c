/* A parent that reaps whatever it is given, as a service supervisor does:
 * with argv[1] = "subreaper" it makes itself a child subreaper first, so
 * orphans below it become its children.  It forks one worker and then
 * reaps every child it has, printing each pid, until it has none left;
 * at its checkpoint "idle" it says whether any child has turned up since.
 * The worker allocates between checkpoints and exits. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint.h"

__attribute__((noinline)) void *site_supervisor(void) { return malloc(1212); }
__attribute__((noinline)) void *site_worker_first(void) { return malloc(7000); }
__attribute__((noinline)) void *site_worker_second(void) { return malloc(300); }

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "subreaper") == 0 && prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        return 2;
    site_supervisor();
    fflush(stdout);
    pid_t worker = fork();
    if (worker < 0)
        return 2;
    if (worker == 0) {
        printf("worker %d\n", (int)getpid());
        fflush(stdout);
        site_worker_first();
        checkpoint("first");
        site_worker_second();
        site_worker_second();
        checkpoint("second");
        exit(0);
    }
    pid_t pid;
    int status;
    while ((pid = waitpid(-1, &status, 0)) > 0)
        printf("reaped %d\n", (int)pid);
    fflush(stdout);
    checkpoint("idle");
    pid = waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == ECHILD)
        printf("no children\n");
    else
        printf("a child: %d\n", (int)pid);
    return 0;
}
