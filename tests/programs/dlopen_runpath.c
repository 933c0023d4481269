/* Loads a plugin by its bare name, found through the program's own
 * DT_RUNPATH ($ORIGIN/plug), and allocates 20 blocks of 555 bytes through
 * it; a name that is nowhere must still fail.  Exit status 2 if the plugin
 * is not found, 3 if the missing one is. */
#include <dlfcn.h>
#include <stdlib.h>

#include "checkpoint.h"

void *kept[20];

int main(void)
{
    void *plugin = dlopen("libplugin.so", RTLD_NOW);
    if (!plugin)
        return 2;
    if (dlopen("libnowhere-at-all.so", RTLD_NOW))
        return 3;
    void *(*lib_alloc)(size_t);
    *(void **)&lib_alloc = dlsym(plugin, "lib_alloc");
    for (int i = 0; i < 20; i++)
        kept[i] = lib_alloc(555);
    checkpoint("done");
    return 0;
}
