/* A forked child that is SIGKILLed by the test: its data must not die with
 * it.  Modes (argv[1]), with argv[2] = how many distinct stacks it makes:
 *   keeper    the child stops at a checkpoint; the root's keeper holds it
 *   nokeeper  the child first execs itself without MEMLEAK_KEEPER, so only
 *             its own (lazily started) reporter can save it
 *   orphan    the parent exits at once; the child lives on (a daemon) and
 *             waits, with its output closed, to be killed */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint.h"

static void *volatile sink;

__attribute__((noinline)) static void leaf(void) { sink = malloc(10); }
static void step(int level, unsigned path);
__attribute__((noinline)) static void left(int level, unsigned path) { step(level + 1, path); __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) static void right(int level, unsigned path) { step(level + 1, path); __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) static void step(int level, unsigned path)
{
    if (level == 8)
        leaf();
    else if (path >> level & 1)
        right(level, path);
    else
        left(level, path);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void *site_child_big(void) { return malloc(5555); }

static void work(unsigned paths)
{
    for (unsigned path = 0; path < paths; path++) /* distinct stacks */
        step(0, path);
    site_child_big();
    printf("child %d\n", (int)getpid());
    fflush(stdout);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "keeper";
    unsigned paths = argc > 2 ? (unsigned)atoi(argv[2]) : 256;
    if (strcmp(mode, "exec-child") == 0) {
        work(paths);
        checkpoint("child");
        return 3;
    }
    pid_t pid = fork();
    if (pid == 0) {
        if (strcmp(mode, "nokeeper") == 0) {
            unsetenv("MEMLEAK_KEEPER");
            execl("/proc/self/exe", argv[0], "exec-child", argc > 2 ? argv[2] : "256", (char *)NULL);
            _exit(97);
        }
        work(paths);
        if (strcmp(mode, "orphan") == 0) {
            int null = open("/dev/null", O_RDWR);
            dup2(null, 0);
            dup2(null, 1);
            dup2(null, 2);
            for (;;)
                pause();
        }
        checkpoint("child"); /* the test kills us here */
        return 3;
    }
    if (strcmp(mode, "orphan") == 0)
        return 0;
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == 9 ? 0 : 1;
}
