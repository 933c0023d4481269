/* A block freed twice with an allocation between the frees that, bare,
 * is handed the freed block's memory: the second free then frees that
 * other block, and nothing complains (glibc sees a live block).  Under
 * quarantine= the first free is held back, the allocation gets other
 * memory, and the second free is caught with the first free's stack. */
#include <stdio.h>
#include <stdlib.h>

void *kept;

__attribute__((noinline)) void *site_alloc(void) { return malloc(100); }
__attribute__((noinline)) void site_first_free(void *p) { free(p); }
__attribute__((noinline)) void site_reuse(void) { kept = malloc(100); }
__attribute__((noinline)) void site_second_free(void *p) { free(p); }

int main(void)
{
    void *p = site_alloc();
    site_first_free(p);
    site_reuse();
    site_second_free(p);
    printf("reused %d\n", kept == p);
    return 0;
}
