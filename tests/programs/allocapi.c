/* Allocator queries and odd frees: malloc_usable_size, malloc_trim,
 * mallinfo2; a library loaded with RTLD_DEEPBIND (which binds malloc to
 * libc's first) allocating and freeing, a block it keeps, one of ours it
 * frees; and a free of a block allocated behind the tracer's back (libc's
 * __libc_malloc, called by name).  Usage: allocapi PLUGIN [many] */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

#include "checkpoint.h"

__attribute__((noinline)) void *site_kept(void) { return malloc(1000); }
__attribute__((noinline)) void *site_handed_over(void) { return malloc(2000); }

int main(int argc, char **argv)
{
    void *kept = site_kept();
    if (malloc_usable_size(kept) < 1000)
        return 10;
    malloc_trim(0);
    struct mallinfo2 mi = mallinfo2();
    if (mi.uordblks < 1000)
        return 11;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_DEEPBIND);
    if (!h)
        return 12;
    void *(*deep_alloc)(void) = (void *(*)(void))dlsym(h, "deep_alloc");
    void (*deep_free)(void *) = (void (*)(void *))dlsym(h, "deep_free");
    void *(*unseen_alloc)(void) = (void *(*)(void))dlsym(h, "unseen_alloc");
    static void *volatile deep_kept;
    deep_kept = deep_alloc();      /* kept: seen at deep_alloc */
    deep_free(deep_alloc());
    free(unseen_alloc());          /* a free of a pointer it never saw */
    for (int i = 0; argc > 2 && i < 1500; i++)
        free(unseen_alloc());      /* "many": an allocator we do not see, at scale */
    printf("usable %d trim ok\n", malloc_usable_size(kept) >= 1000);
    fflush(stdout);
    deep_free(site_handed_over()); /* freed by the plugin, through its routed table */
    checkpoint("done");
    free(kept);
    return 0;
}
