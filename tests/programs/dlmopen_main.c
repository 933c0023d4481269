/* Loads argv[1] into a link-map namespace of its own (dlmopen, LM_ID_NEWLM)
 * and allocates 50 blocks of 777 bytes through it -- made by that
 * namespace's own C library, which the tracer is not in front of -- and 10
 * of 333 bytes of its own. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>

#include "checkpoint.h"

void *kept[60];

__attribute__((noinline)) void *site_own_namespace_main(size_t n) { return malloc(n); }

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    void *lib = dlmopen(LM_ID_NEWLM, argv[1], RTLD_NOW);
    if (!lib)
        return 2;
    void *(*lib_alloc)(size_t);
    *(void **)&lib_alloc = dlsym(lib, "lib_alloc");
    if (!lib_alloc)
        return 2;
    for (int i = 0; i < 50; i++)
        kept[i] = lib_alloc(777);
    for (int i = 50; i < 60; i++)
        kept[i] = site_own_namespace_main(333);
    checkpoint("done");
    return 0;
}
