/* A block realloc'd and then freed by its old pointer (a use after
 * realloc): bare, glibc either grew it in place -- the free then frees the
 * live block and nothing complains -- or moved it, and the free is a
 * double free it may or may not catch.  Under quarantine= the realloc
 * always moves, holds the old block, and the free is caught with the
 * realloc's stack as the first free -- as valgrind, whose realloc always
 * moves. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) char *site_alloc(void) { return malloc(100); }
__attribute__((noinline)) char *site_grow(char *p) { return realloc(p, 200); }
__attribute__((noinline)) void site_free_old(char *p) { free(p); }

int main(void)
{
    char *p = site_alloc();
    strcpy(p, "kept across the realloc");
    char *q = site_grow(p);
    printf("moved %d, kept \"%s\"\n", q != p, q);
    site_free_old(p);
    free(q == p ? NULL : q);
    puts("end");
    return 0;
}
