/* Run with jemalloc preloaded after the tracer (or linked in, as Debian's
 * redis is): our malloc hooks count the blocks; jemalloc's own mmaps of
 * its arenas must not be counted a second time. */
#include <stdlib.h>

#include "checkpoint.h"

#define BLOCKS 20000

__attribute__((noinline)) void *site_many(size_t n) { return malloc(n); }
__attribute__((noinline)) void *site_big(size_t n) { return malloc(n); }

int main(void)
{
    static void *keep[BLOCKS];
    for (int i = 0; i < BLOCKS; i++)
        keep[i] = site_many(1000);
    void *volatile big = site_big(8 << 20); /* jemalloc maps this itself too */
    checkpoint("allocated");
    for (int i = 0; i < BLOCKS; i++)
        free(keep[i]);
    free(big);
    checkpoint("freed");
    return 0;
}
