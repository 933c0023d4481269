/* Unloads behind the tracer's back, as libc does with its own NSS and iconv
 * modules: each plugin is closed through libc's dlclose directly, not the
 * interposed one, and the next one -- the other build, placed where the
 * first was -- leaks from its constructor, before dlopen returns.
 * Usage: dlbehind PLUGIN1 PLUGIN2 ITERATIONS */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "checkpoint.h"

int main(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    int (*libc_dlclose)(void *) = libc ? (int (*)(void *))dlsym(libc, "dlclose") : NULL;
    if (!libc_dlclose)
        return 3;
    int n = atoi(argv[3]);
    for (int i = 0; i < n; i++)
        for (int v = 1; v <= 2; v++) {
            void *h = dlopen(argv[v], RTLD_NOW | RTLD_LOCAL);
            if (!h) {
                fprintf(stderr, "dlopen: %s\n", dlerror());
                return 4;
            }
            libc_dlclose(h);
        }
    checkpoint("done");
    return 0;
}
