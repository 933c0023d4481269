/* Five blocks made 31 calls deep -- past the default depth of 16 -- and
 * one made from main: the report must say that stacks were cut. */
#include <stdlib.h>

__attribute__((noinline)) void *deep(int n)
{
    if (n == 0)
        return malloc(32);
    void *p = deep(n - 1);
    __asm__ volatile("" ::: "memory"); /* not a tail call: every frame stays */
    return p;
}

int main(void)
{
    static void *keep[6];
    for (int i = 0; i < 5; i++)
        keep[i] = deep(30);
    keep[5] = malloc(8);
    return keep[5] == NULL;
}
