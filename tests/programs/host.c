/* Loads a plugin with dlopen, lets it leak, closes it with dlclose; the
 * report must still name the plugin's function and file. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "checkpoint.h"

int main(int argc, char **argv)
{
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 2;
    }
    void *(*entry)(void) = (void *(*)(void))dlsym(h, "plugin_entry");
    entry();
    entry();
    dlclose(h);
    checkpoint("closed");
    return 0;
}
