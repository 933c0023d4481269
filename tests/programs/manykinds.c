/* 40 kinds of resource named, one held of each (#64 item 15): 32 kinds are
 * tracked at most, fd included -- the 32nd kind and on were dropped
 * without a word in `report`. */
#include <stdio.h>

#include "memleak.h"

int main(void)
{
    char name[16];
    for (int k = 0; k < 40; k++) {
        snprintf(name, sizeof name, "kind%d", k);
        memleak_resource_acquire(name, 1, 1);
    }
    printf("done\n");
    return 0;
}
