/* Blocks announced with sizes no block can have (#64 item 15): SIZE_MAX
 * was counted as -1 byte.  One real custom block of 100 bytes beside them. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "memleak.h"

static char arena[4096];

__attribute__((noinline)) static void site_huge(void) { memleak_malloclike(arena, SIZE_MAX); }
__attribute__((noinline)) static void site_past_the_end(void) { memleak_malloclike(arena + 64, UINTPTR_MAX - 100); }
__attribute__((noinline)) static void site_real(void) { memleak_malloclike(arena + 256, 100); }

int main(void)
{
    site_huge();
    site_past_the_end();
    site_real();
    memleak_resize(arena + 256, 100, SIZE_MAX); /* refused: stays 100 */
    printf("done\n");
    return 0;
}
