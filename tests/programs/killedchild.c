/* A forked child that does real work (many call stacks of its own) and is
 * then SIGKILLed by the test: its data must not die with it. */
#include <stdio.h>
#include <stdlib.h>
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

int main(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        for (unsigned path = 0; path < 256; path++) /* 256 distinct stacks */
            step(0, path);
        site_child_big();
        printf("child %d\n", (int)getpid());
        fflush(stdout);
        checkpoint("child"); /* the test kills us here */
        return 3;
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == 9 ? 0 : 1;
}
