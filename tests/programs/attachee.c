/* A program started without the tracer, for `libmemleak attach`: it makes
 * blocks before the attach (not counted), then at known points a known
 * set after it, frees some of the earlier ones (counted as frees of
 * blocks from before the attach), and goes on after the detach.  Its
 * output and exit status must not depend on whether anyone attached. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"

#define EARLY 40

__attribute__((noinline)) void *leak_after_attach(size_t n) { return malloc(n); }
__attribute__((noinline)) void *zeroed_after_attach(size_t n) { return calloc(n, 4); }
__attribute__((noinline)) char *copied_after_attach(const char *s) { return strdup(s); }
__attribute__((noinline)) void *grown_after_attach(void *p, size_t n) { return realloc(p, n); }
__attribute__((noinline)) void *after_detach(size_t n) { return malloc(n); }
__attribute__((noinline)) void *linked_after_attach(size_t n) { return malloc(n); }

static void *early[EARLY];
static void *kept[64];

int main(void)
{
    unsigned long sum = 0;
    for (int i = 0; i < EARLY; i++)
        early[i] = malloc(32 + i);
    checkpoint("attach");
    for (int i = 0; i < 10; i++)
        kept[i] = leak_after_attach(100);          /* 10 x 100 */
    for (int i = 10; i < 15; i++)
        kept[i] = zeroed_after_attach(25);         /* 5 x 100 */
    for (int i = 15; i < 18; i++)
        kept[i] = copied_after_attach("0123456789abcdef"); /* 3 x 17 */
    for (int i = 0; i < 20; i++)
        free(early[i]);                            /* 20 frees of earlier blocks */
    kept[18] = grown_after_attach(early[20], 500); /* an earlier block grown: 1 x 500 */
    early[20] = NULL;
    *(void **)early[30] = linked_after_attach(72);  /* reachable only through an older block */
    for (int i = 0; i < 1000; i++) {               /* churn: nothing left */
        char *s = copied_after_attach("churn");
        sum += (unsigned char)s[0];
        free(s);
    }
    printf("sum %lu\n", sum);
    fflush(stdout);
    checkpoint("counted");
    for (int i = 0; i < 5; i++)
        free(kept[i]);                             /* -5 x 100 */
    checkpoint("detach");
    for (int i = 20; i < 30; i++)
        kept[i] = after_detach(64);                /* not traced any more */
    for (int i = 20; i < 30; i++)
        free(kept[i]);
    for (int i = 5; i < 19; i++)
        free(kept[i]);                             /* blocks with trailers, freed by libc */
    free(*(void **)early[30]);
    for (int i = 21; i < EARLY; i++)
        free(early[i]);
    printf("done %lu\n", sum);
    return 7;
}
