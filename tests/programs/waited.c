/* `run --wait` (tests/test_run_wait.py): leaks 3 blocks of 1000 bytes,
 * says "ready", then as argv[1] says: "kill" dies of SIGKILL (no handler
 * runs: the reporter writes the report after the death), "exit N" exits
 * with N, "exit_group N" leaves by the raw system call (past libc, as a Go
 * program does: no exit handler runs, no wrapper sees it), "wait" waits for a line on stdin, "daemon" leaves a
 * child that outlives it (a daemon `run` must not wait for). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

__attribute__((noinline)) void *site_waited(size_t n)
{
    void *p = malloc(n);
    memset(p, 1, n);
    return p;
}

int main(int argc, char **argv)
{
    for (int i = 0; i < 3; i++)
        site_waited(1000);
    const char *how = argc > 1 ? argv[1] : "";
    if (!strcmp(how, "daemon") && fork() == 0) {
        close(1); /* (nobody waits for its output either) */
        close(2);
        sleep(30); /* outlives its parent, still named as it */
        _exit(0);
    }
    printf("ready\n");
    fflush(stdout);
    if (!strcmp(how, "kill"))
        raise(SIGKILL);
    if (!strcmp(how, "exit_group"))
        syscall(SYS_exit_group, argc > 2 ? atoi(argv[2]) : 0);
    if (!strcmp(how, "wait")) {
        char line[16];
        if (!fgets(line, sizeof line, stdin))
            return 5;
    }
    return argc > 2 ? atoi(argv[2]) : 0;
}
