/* fork: the child reports under its own pid, with what it inherited. */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint.h"

__attribute__((noinline)) void *site_before_fork(void) { return malloc(1111); }
__attribute__((noinline)) void *site_in_child(void) { return malloc(2222); }
__attribute__((noinline)) void *site_in_parent(void) { return malloc(3333); }

int main(void)
{
    site_before_fork();
    pid_t pid = fork();
    if (pid == 0) {
        site_in_child();
        site_in_child();
        exit(7);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    site_in_parent();
    return WIFEXITED(status) && WEXITSTATUS(status) == 7 ? 0 : 1;
}
