/* Scale check: T threads allocate N live blocks in all, from 2^B distinct
 * call stacks (a binary recursion B levels deep: the path taken is the
 * stack).  Prints "checkpoint ready" and waits for a line on stdin (the
 * tests' checkpoint protocol: tests/test_robustness.py runs it too), then
 * frees everything.  Usage: scale THREADS BLOCKS BITS */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int threads, bits;
static long blocks;
static void **slots;

__attribute__((noinline)) static void *leaf(void) { return malloc(24); }
static void *step(int level, unsigned long path);
__attribute__((noinline)) static void *left(int level, unsigned long path) { void *p = step(level + 1, path); __asm__ volatile("" ::: "memory"); return p; }
__attribute__((noinline)) static void *right(int level, unsigned long path) { void *p = step(level + 1, path); __asm__ volatile("" ::: "memory"); return p; }
__attribute__((noinline)) static void *step(int level, unsigned long path)
{
    void *p;
    if (level == bits)
        p = leaf();
    else if (path >> level & 1)
        p = right(level, path);
    else
        p = left(level, path);
    __asm__ volatile("" ::: "memory");
    return p;
}

static void *worker(void *arg)
{
    long t = (long)arg;
    for (long i = t; i < blocks; i += threads)
        slots[i] = step(0, (unsigned long)(i * 2654435761u) & ((1ul << bits) - 1));
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    threads = atoi(argv[1]);
    blocks = atol(argv[2]);
    bits = atoi(argv[3]);
    slots = calloc((size_t)blocks, sizeof *slots);
    pthread_t *t = calloc((size_t)threads, sizeof *t);
    for (long i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    printf("checkpoint ready\n");
    fflush(stdout);
    char c;
    do {
        if (read(0, &c, 1) != 1)
            return 1;
    } while (c != '\n');
    for (long i = 0; i < blocks; i++)
        free(slots[i]);
    free(slots);
    free(t);
    return 0;
}
