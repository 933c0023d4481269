/* A process that a child floods with SIGPROF and SIGCHLD (a profiler's
 * timer, a busy supervisor): a scan must stop it and see its block every
 * time, never call it exited.  It says "ready" and waits for a line. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) void *site_flooded(size_t n) { return malloc(n); }

static volatile long caught;
static void count(int sig) { (void)sig; caught++; }
static void *volatile keep;

int main(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = count;
    sigaction(SIGPROF, &sa, NULL);
    sigaction(SIGCHLD, &sa, NULL);
    keep = site_flooded(1234);
    pid_t parent = getpid();
    pid_t flooder = fork();
    if (flooder == 0)
        for (;;) {
            kill(parent, SIGPROF);
            kill(parent, SIGCHLD);
        }
    printf("ready\n");
    fflush(stdout);
    char c;
    while (read(0, &c, 1) != 1)
        ; /* EINTR, over and over */
    kill(flooder, SIGKILL);
    waitpid(flooder, NULL, 0);
    printf("done %d\n", caught > 0);
    return 0;
}
