/* Run in a pid namespace of its own (unshare --pid --fork, a container, a
 * sandbox): it knows itself as pid 1 or so.  Leaks 7 x 300 bytes, says its
 * namespace pid, waits at a checkpoint, then leaks 2 x 50 more. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "checkpoint.h"

__attribute__((noinline)) void *site_ns(size_t n) { return malloc(n); }
__attribute__((noinline)) void *site_ns_later(size_t n) { return malloc(n); }

int main(void)
{
    void *volatile keep = NULL;
    for (int i = 0; i < 7; i++)
        keep = site_ns(300);
    printf("pid in namespace %d\n", (int)getpid());
    fflush(stdout);
    checkpoint("leaked");
    for (int i = 0; i < 2; i++)
        keep = site_ns_later(50);
    (void)keep;
    return 0;
}
