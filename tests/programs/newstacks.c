/* Many threads making new call stacks at once: 16 threads, 2^14 stacks (a
 * binary recursion 14 levels deep: the path taken is the stack), one kept
 * block each.  The stack index grows several times while the other threads
 * go on adding to it; no stack may be dropped.  (Two frames a level: trace
 * it at depth 40.) */
#include <pthread.h>
#include <stdlib.h>

#include "checkpoint.h"

#define THREADS 16
#define BITS 14
#define BLOCKS (1 << BITS)

void *kept[BLOCKS]; /* (visible: the compiler may not drop the mallocs) */

__attribute__((noinline)) static void *site_new_stack(void) { void *p = malloc(24); __asm__ volatile("" ::: "memory"); return p; }
static void *step(int level, unsigned path);
__attribute__((noinline)) static void *left(int level, unsigned path) { void *p = step(level + 1, path); __asm__ volatile("" ::: "memory"); return p; }
__attribute__((noinline)) static void *right(int level, unsigned path) { void *p = step(level + 1, path); __asm__ volatile("" ::: "memory"); return p; }
__attribute__((noinline)) static void *step(int level, unsigned path)
{
    void *p;
    if (level == BITS)
        p = site_new_stack();
    else if (path >> level & 1)
        p = right(level, path);
    else
        p = left(level, path);
    __asm__ volatile("" ::: "memory");
    return p;
}

static void *worker(void *arg)
{
    for (long i = (long)arg; i < BLOCKS; i += THREADS)
        kept[i] = step(0, (unsigned)i);
    return NULL;
}

int main(void)
{
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    checkpoint("ready");
    return 0;
}
