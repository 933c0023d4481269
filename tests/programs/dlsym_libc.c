/* Allocations through libc's own malloc and free, looked up in libc's
 * handle (as Python's ctypes.CDLL("libc.so.6") does): 30 blocks of 700
 * bytes kept, 20 of 300 freed at once, through free looked up the same way.
 * The program's own RTLD_NEXT lookup of malloc must still find the
 * definition that follows the program -- the tracer's -- and a lookup of a
 * name libc does not define must still fail: exit status 3 or 4 if not. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>

#include "checkpoint.h"

static void *(*libc_malloc)(size_t);
static void (*libc_free)(void *);
void *kept[30];

__attribute__((noinline)) void *site_dlsym_malloc(size_t n) { return libc_malloc(n); }

int main(void)
{
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    if (!libc)
        return 2;
    *(void **)&libc_malloc = dlsym(libc, "malloc");
    *(void **)&libc_free = dlvsym(libc, "free", "GLIBC_2.2.5");
    if (!libc_malloc || !libc_free)
        return 2;
    if (dlsym(RTLD_NEXT, "malloc") != (void *)malloc)
        return 3;
    if (dlsym(libc, "no_such_function_here") != NULL)
        return 4;
    for (int i = 0; i < 30; i++)
        kept[i] = site_dlsym_malloc(700);
    for (int i = 0; i < 20; i++)
        libc_free(site_dlsym_malloc(300));
    checkpoint("done");
    for (int i = 0; i < 30; i++)
        libc_free(kept[i]);
    return 0;
}
