/* A plugin linked with libmimalloc that calls its API by name: loaded
 * with dlopen (RTLD_LOCAL), its libmimalloc is in no global scope, and
 * appears only after the program started (tests/programs/mihost.c).
 * Each call of plugin_entry keeps 3 x 40 bytes from mi_malloc and makes
 * and frees 100 more (mi_malloc + mi_free, mi_calloc + free). */
#include <mimalloc.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))
#define KEEP() __asm__ volatile("" ::: "memory") /* not a tail call */

void *plugin_kept[64];
int plugin_nkept;

NOINLINE static void site_mi_plugin(void) { plugin_kept[plugin_nkept++] = mi_malloc(40); KEEP(); }

void plugin_entry(void)
{
    for (int i = 0; i < 3; i++)
        site_mi_plugin();
    for (int i = 0; i < 100; i++) {
        mi_free(mi_malloc(64));
        mi_free(mi_calloc(2, 16));
    }
}
