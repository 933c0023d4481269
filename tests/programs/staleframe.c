/* A block whose only pointers were in main's frame -- dead once main has
 * returned (#64 item 3: LeakSanitizer's pointer_to_self and friends):
 * definitely lost at exit, as valgrind says, not kept "still reachable"
 * by stale words the exit path's frames did not overwrite.  The block
 * points to itself too (pointer_to_self). */
#include <stdint.h>
#include <stdlib.h>

__attribute__((noinline)) static void *site_stale(void)
{
    void *p = malloc(1000);
    *(uintptr_t *)p = (uintptr_t)p;
    return p;
}

int main(void)
{
    void *volatile slots[16];
    void *p = site_stale();
    for (int i = 0; i < 16; i++)
        slots[i] = p;
    p = 0;
    (void)slots;
    return 0;
}
