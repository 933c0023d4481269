/* A privilege-separated server in miniature (nginx, Apache, php-fpm): the
 * parent forks a worker, which allocates, drops to nobody (when it runs as
 * root) and serves until told to stop.  Its reports must come on request:
 * a report signal, and `libmemleak snapshot` without one. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint.h"

#define NOBODY 65534

__attribute__((noinline)) void *site_master(size_t n) { return malloc(n); }
__attribute__((noinline)) void *site_worker(size_t n) { return malloc(n); }
__attribute__((noinline)) void *site_worker_later(size_t n) { return malloc(n); }

int main(void)
{
    void *volatile keep = site_master(1000);
    pid_t child = fork();
    if (child == 0) {
        keep = site_worker(777);
        if (getuid() == 0 && (setgid(NOBODY) != 0 || setuid(NOBODY) != 0))
            return 3;
        printf("worker %d uid %d\n", (int)getpid(), (int)geteuid());
        fflush(stdout);
        checkpoint("dropped");
        keep = site_worker_later(333);
        checkpoint("later");
        return 0;
    }
    int status = 0;
    waitpid(child, &status, 0);
    (void)keep;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}
