/* Address space reserved PROT_NONE and opened piece by piece, as JITs,
 * language VMs and allocators do.  The reservation is not memory in use;
 * each opened piece is, counted for the code that opened it. */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "checkpoint.h"

#define MIB (1024 * 1024)

__attribute__((noinline)) char *site_reserve(void)
{
    char *r = mmap(NULL, 64 * MIB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED)
        exit(2);
    return r;
}
__attribute__((noinline)) void site_open(char *p, size_t n)
{
    if (mprotect(p, n, PROT_READ | PROT_WRITE) != 0)
        exit(3);
}
__attribute__((noinline)) void site_close(char *p, size_t n)
{
    if (mprotect(p, n, PROT_NONE) != 0)
        exit(4);
}
__attribute__((noinline)) void site_fixed(char *p, size_t n)
{
    if (mmap(p, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != p)
        exit(5);
}
__attribute__((noinline)) void site_flip(char *p, size_t n)
{
    /* W^X style flips of open memory: nothing changes hands */
    if (mprotect(p, n, PROT_READ) != 0 || mprotect(p, n, PROT_READ | PROT_WRITE) != 0)
        exit(6);
}

int main(void)
{
    char *r = site_reserve();
    site_open(r, 1 * MIB);                   /* stays open */
    site_open(r + 8 * MIB, 2 * MIB);
    site_close(r + 8 * MIB + MIB, MIB);      /* half of it closed again */
    site_fixed(r + 16 * MIB, 512 * 1024);
    site_flip(r, 1 * MIB);
    r[0] = 1;
    checkpoint("opened");
    site_close(r, 64 * MIB);                 /* everything closed, still reserved */
    site_open(r + 32 * MIB, 4096);
    checkpoint("closed");
    munmap(r, 64 * MIB);
    checkpoint("unmapped");
    return 0;
}
