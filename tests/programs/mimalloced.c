/* A program linked with libmimalloc that calls its API by name (mi_*), and
 * crosses families: mimalloc's free of a block from malloc, free of an
 * mi_malloc'ed one -- one block, whichever entry made or frees it.
 *
 * Kept at exit (each site its own function):
 *   site_mi_malloc        10 x 100 bytes   mi_malloc
 *   site_mi_calloc         5 x 100         mi_calloc(4, 25)
 *   site_mi_aligned        3 x  64         mi_zalloc_aligned(64, 64)
 *   site_mi_grown          1 x 300         mi_malloc(10) then mi_realloc(p, 300)
 *   site_mi_strdup         2 x   6         mi_strdup("hello")
 *   site_mi_heap_kept      4 x  70         mi_heap_malloc on a heap never destroyed
 *   site_mi_new            2 x  24         mi_new
 * Made and freed (nothing left): 100 rounds of mi_malloc + free,
 * malloc + mi_free, mi_malloc + mi_free, mi_calloc + mi_free_size, and
 * 20 mi_heap_malloc blocks on a heap that mi_heap_destroy frees at once.
 *   mimalloced wait   says "ready" and waits for a line on stdin before it starts
 *                     (for an attach), then "done" and waits for another. */
#include <mimalloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))
#define KEEP() __asm__ volatile("" ::: "memory") /* not a tail call */

static void *kept[64];
static int nkept;

NOINLINE static void site_mi_malloc(void) { kept[nkept++] = mi_malloc(100); KEEP(); }
NOINLINE static void site_mi_calloc(void) { kept[nkept++] = mi_calloc(4, 25); KEEP(); }
NOINLINE static void site_mi_aligned(void) { kept[nkept++] = mi_zalloc_aligned(64, 64); KEEP(); }
NOINLINE static void *site_mi_first(void) { void *p = mi_malloc(10); KEEP(); return p; }
NOINLINE static void site_mi_grown(void *p) { kept[nkept++] = mi_realloc(p, 300); KEEP(); }
NOINLINE static void site_mi_strdup(void) { kept[nkept++] = mi_strdup("hello"); KEEP(); }
NOINLINE static void site_mi_heap_kept(mi_heap_t *h) { kept[nkept++] = mi_heap_malloc(h, 70); KEEP(); }
NOINLINE static void site_mi_new(void) { kept[nkept++] = mi_new(24); KEEP(); }

NOINLINE static void *churn_mi_malloc(size_t n) { void *p = mi_malloc(n); KEEP(); return p; }
NOINLINE static void *churn_malloc(size_t n) { void *p = malloc(n); KEEP(); return p; }
NOINLINE static void *churn_mi_calloc(size_t n) { void *p = mi_calloc(1, n); KEEP(); return p; }
NOINLINE static void *churn_heap(mi_heap_t *h, size_t n) { void *p = mi_heap_malloc(h, n); KEEP(); return p; }

static void wait_for_line(void)
{
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        exit(2);
}

int main(int argc, char **argv)
{
    int waits = argc > 1 && !strcmp(argv[1], "wait");
    if (waits) {
        printf("ready\n");
        fflush(stdout);
        wait_for_line();
    }
    for (int i = 0; i < 10; i++)
        site_mi_malloc();
    for (int i = 0; i < 5; i++)
        site_mi_calloc();
    for (int i = 0; i < 3; i++)
        site_mi_aligned();
    site_mi_grown(site_mi_first());
    site_mi_strdup();
    site_mi_strdup();
    site_mi_new();
    site_mi_new();
    for (int i = 0; i < 100; i++) {
        free(churn_mi_malloc(40));    /* mi_malloc'ed, freed by free */
        mi_free(churn_malloc(48));    /* malloc'ed, freed by mi_free */
        mi_free(churn_mi_malloc(56));
        mi_free_size(churn_mi_calloc(72), 72);
    }
    mi_heap_t *doomed = mi_heap_new();
    for (int i = 0; i < 20; i++)
        churn_heap(doomed, 50);
    mi_heap_destroy(doomed);          /* its 20 blocks freed at once */
    mi_heap_t *kept_heap = mi_heap_new();
    for (int i = 0; i < 4; i++)
        site_mi_heap_kept(kept_heap);
    printf("done\n");
    fflush(stdout);
    if (waits)
        wait_for_line();
    return 0;
}
