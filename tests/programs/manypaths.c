/* Allocations from 256 call paths taken in turn: too many for the
 * unwinder's remembered whole walks (it remembers the last 64), so after a
 * window of walks the thread rests from them.  Its remembered paths do not
 * pay either (128 paths share each key -- the allocator's caller and level
 * 0's function -- more than a set holds, see keyedpaths.c for paths that
 * do), so it walks by the rules alone.  Then, every so often, it tries
 * remembering again.
 *
 * Path p (0..255) descends through eight levels, taking at level L the
 * function for bit L of p, and allocates 100 + p bytes, on rounds.h's
 * schedule: each path keeps ROUNDS / 768 blocks.
 * -DMIXED_FRAMES: the even levels keep a frame pointer (CFA from rbp). */
#include <stdlib.h>

#include "checkpoint.h"
#include "rounds.h"
#define OPAQUE() __asm__ volatile("" ::: "memory")

#ifdef MIXED_FRAMES
#define EVEN_FRAMES __attribute__((optimize("no-omit-frame-pointer")))
#else
#define EVEN_FRAMES
#endif

__attribute__((noipa)) static void *leaf(int path)
{
    void *p = malloc(100 + (size_t)path);
    OPAQUE();
    return p;
}

/* Level L has two functions, levelL_0 and levelL_1 (the path's bit L), each
 * calling level L-1's function for bit L-1: a stack's function names spell
 * its path.  (noipa: the two are identical and must stay two.) */
#define LEVEL(L, PREV, ATTR)                                                                       \
    ATTR __attribute__((noipa)) static void *level##L##_0(int path)                                \
    {                                                                                              \
        void *p = path >> (L - 1) & 1 ? PREV##_1(path) : PREV##_0(path);                           \
        OPAQUE();                                                                                  \
        return p;                                                                                  \
    }                                                                                              \
    ATTR __attribute__((noipa)) static void *level##L##_1(int path)                                \
    {                                                                                              \
        void *p = path >> (L - 1) & 1 ? PREV##_1(path) : PREV##_0(path);                           \
        OPAQUE();                                                                                  \
        return p;                                                                                  \
    }

EVEN_FRAMES __attribute__((noipa)) static void *level0_0(int path) { void *p = leaf(path); OPAQUE(); return p; }
EVEN_FRAMES __attribute__((noipa)) static void *level0_1(int path) { void *p = leaf(path); OPAQUE(); return p; }
LEVEL(1, level0, )
LEVEL(2, level1, EVEN_FRAMES)
LEVEL(3, level2, )
LEVEL(4, level3, EVEN_FRAMES)
LEVEL(5, level4, )
LEVEL(6, level5, EVEN_FRAMES)
LEVEL(7, level6, )

static void *descend(int path) { return path >> 7 & 1 ? level7_1(path) : level7_0(path); }

int main(void)
{
    allocate_rounds(descend);
    checkpoint("done");
    return 0;
}
