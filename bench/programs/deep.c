/* malloc/free in a loop 20 frames deep (argv[1] = depth), one thread: what
 * one allocation costs when the walk is long and the outer frames repeat. */
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

int main(int argc, char **argv)
{
    int depth = argc > 1 ? atoi(argv[1]) : 20;
    for (int k = 0; k < 400; k++)
        descend(depth, 10000);
    printf("done\n");
    return 0;
}
