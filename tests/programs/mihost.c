/* Loads a plugin (argv[1]) with dlopen, calls its plugin_entry, closes it;
 * twice, so that what the plugin brings (its own allocator) comes, goes
 * and comes back. */
#include <dlfcn.h>
#include <stdio.h>

#include "checkpoint.h"

int main(int argc, char **argv)
{
    for (int round = 0; round < 2; round++) {
        void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "%s\n", dlerror());
            return 2;
        }
        void (*entry)(void) = (void (*)(void))dlsym(h, "plugin_entry");
        entry();
        if (round == 0)
            checkpoint("loaded");
        dlclose(h);
    }
    checkpoint("done");
    return 0;
}
