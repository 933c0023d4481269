/* malloc/free in a loop 20 frames deep (argv[1] = depth), in one thread or
 * argv[2] threads at once: what one allocation costs when the walk is long
 * (cut at the default depth of 16) and the outer frames repeat -- and, with
 * threads, what the threads' hooks share (bench/run.py deep-threads). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static void *volatile sink;

__attribute__((noinline)) static void leaf(int n)
{
    for (int i = 0; i < n; i++) {
        void *p = malloc(32 + (i & 63));
        sink = p;
        free(p);
    }
}

__attribute__((noinline)) static void descend(int depth, int n)
{
    if (depth == 0) {
        leaf(n);
        return;
    }
    volatile char pad[32];
    pad[0] = (char)depth;
    descend(depth - 1, n);
    __asm__ volatile("" ::: "memory"); /* not a tail call: keep the frame */
}

static int depth = 20;

static void *rounds(void *arg)
{
    (void)arg;
    for (int k = 0; k < 400; k++)
        descend(depth, 10000);
    return NULL;
}

int main(int argc, char **argv)
{
    depth = argc > 1 ? atoi(argv[1]) : 20;
    int threads = argc > 2 ? atoi(argv[2]) : 0;
    if (threads <= 0) {
        rounds(NULL);
    } else {
        pthread_t t[64];
        threads = threads > 64 ? 64 : threads;
        for (int i = 0; i < threads; i++)
            pthread_create(&t[i], NULL, rounds, NULL);
        for (int i = 0; i < threads; i++)
            pthread_join(t[i], NULL);
    }
    printf("done\n");
    return 0;
}
