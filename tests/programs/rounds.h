/* The schedule manypaths.c and keyedpaths.c allocate by: ROUNDS allocations
 * from 256 call paths, the first half taking the paths in order, the second
 * in a scattered order (each half a multiple of 768 rounds); round i keeps
 * its block when i % 3 == 0, so each path keeps ROUNDS / 768 blocks per run.
 * descend(p) allocates 100 + p bytes through path p. */
#include <stdlib.h>

#define ROUNDS (768 * 40)

void *kept[9 * (ROUNDS / 3 + 1)]; /* (visible: the compiler may not drop the mallocs; room for nine runs) */
int nkept;

static void allocate_rounds(void *(*descend)(int path))
{
    for (int i = 0; i < ROUNDS; i++) {
        void *p = descend(i < ROUNDS / 2 ? i % 256 : (i * 37) % 256);
        if (i % 3 == 0)
            kept[__atomic_fetch_add(&nkept, 1, __ATOMIC_RELAXED)] = p; /* (runs may be threads at once) */
        else
            free(p);
    }
}
