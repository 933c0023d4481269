/* Memory a process shares with the children it forks (MAP_SHARED |
 * MAP_ANONYMOUS: PostgreSQL's main segment) is counted once, in the process
 * that mapped it, not again in every child.  And a mapping is address space
 * until its pages are written: each report says how much of it was. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint.h"

#define MIB (1024 * 1024)

static char *map(int flags, size_t len)
{
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, flags | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        exit(2);
    madvise(p, len, MADV_NOHUGEPAGE); /* pages of 4 KiB: touched counts are exact */
    return p;
}
__attribute__((noinline)) char *site_shared(void) { return map(MAP_SHARED, 8 * MIB); }
__attribute__((noinline)) char *site_private(void) { return map(MAP_PRIVATE, 16 * MIB); }
__attribute__((noinline)) void *site_child(void) { return malloc(1000); }

static void touch(char *p, size_t len)
{
    for (size_t i = 0; i < len; i += 4096)
        p[i] = 1;
}

int main(void)
{
    char *shared = site_shared(), *private = site_private();
    touch(shared, 1 * MIB);
    touch(private, 2 * MIB);
    checkpoint("mapped");
    for (int i = 0; i < 2; i++) {
        pid_t pid = fork();
        if (pid < 0)
            exit(3);
        if (pid == 0) {
            void *volatile leak = site_child();
            (void)leak;
            touch(shared + 4 * MIB, 1 * MIB); /* the parent's mapping: not the child's to count */
            exit(0);
        }
    }
    while (wait(NULL) > 0)
        ;
    touch(shared + 1 * MIB, 1 * MIB);
    checkpoint("touched");
    return 0;
}
