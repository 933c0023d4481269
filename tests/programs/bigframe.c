/* Frames the fast unwinder's rule words do not hold: a CFA more than 256 KiB
 * above sp (the walk goes to libgcc) and one just within; and a frame that
 * keeps its CFA in rbp (alloca).  Each allocates through a shared wrapper. */
#include <alloca.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"

void *keep[64]; /* (visible: the compiler may not drop the mallocs) */
int kept;

__attribute__((noinline)) static void wrap(size_t size)
{
    keep[kept++] = malloc(size);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void huge_frame(int seed)
{
    volatile char buf[600 << 10]; /* 600 KiB */
    memset((char *)buf, seed, sizeof buf);
    wrap(100 + (size_t)buf[seed]);
    __asm__ volatile("" ::"r"(buf) : "memory");
}

__attribute__((noinline)) static void large_frame(int seed)
{
    volatile char buf[200 << 10]; /* 200 KiB: within a rule word */
    memset((char *)buf, seed, sizeof buf);
    wrap(200 + (size_t)buf[seed]);
    __asm__ volatile("" ::"r"(buf) : "memory");
}

__attribute__((noinline)) static void alloca_frame(int n)
{
    char *p = alloca((size_t)n);
    memset(p, 0, (size_t)n);
    wrap(300 + (size_t)p[n - 1]);
    __asm__ volatile("" ::"r"(p) : "memory");
}

int main(void)
{
    for (int i = 0; i < 5; i++) {
        huge_frame(0);
        large_frame(0);
        alloca_frame(1000 + i * 16);
    }
    checkpoint("done");
    return 0;
}
