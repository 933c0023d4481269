/* Threads one after another, each on a stack of its own that is unmapped
 * once it has been joined, the next one mapped before that (so at another
 * address).  A thread's remembered walks are handed on to the next new
 * thread when it exits: nothing of them may be read as an address in the
 * new thread -- they point into a stack that is gone.  Built without
 * optimization, every frame takes its CFA from rbp, so the first step of
 * each walk re-derives rbp values from where saved rbp words were read. */
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "checkpoint.h"

#define THREADS 6
#define STACK_SIZE (256 << 10)

void *kept[THREADS]; /* (visible: the compiler may not drop the mallocs) */

__attribute__((noinline)) void *site_on_own_stack(size_t n) { return malloc(n); }

static void *worker(void *arg)
{
    for (int i = 0; i < 200; i++)
        free(site_on_own_stack(32));
    kept[(long)arg] = site_on_own_stack(48);
    return NULL;
}

int main(void)
{
    void *previous = NULL;
    for (long i = 0; i < THREADS; i++) {
        void *stack = mmap(NULL, STACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (stack == MAP_FAILED)
            return 2;
        if (previous)
            munmap(previous, STACK_SIZE);
        pthread_attr_t attr;
        pthread_t t;
        pthread_attr_init(&attr);
        pthread_attr_setstack(&attr, stack, STACK_SIZE);
        if (pthread_create(&t, &attr, worker, (void *)i) != 0)
            return 3;
        pthread_join(t, NULL);
        previous = stack;
    }
    checkpoint("done");
    return 0;
}
