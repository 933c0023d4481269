/* Allocations from 256 call paths taken in turn, like manypaths.c, but each
 * path differs from the others within its first four frames: four levels
 * of four functions each.  Too many paths for the unwinder's remembered
 * whole walks, so the thread rests from them -- and then its remembered
 * paths (keyed by the first frame(s) and the stack pointer, checked word by
 * word from there on) serve nearly every walk.
 *
 * Path p (0..255) takes at level L (0 innermost) the function for digit L
 * of p in base 4, and allocates 100 + p bytes, on rounds.h's schedule:
 * each path keeps ROUNDS / 768 blocks per run.
 * -DMIXED_FRAMES: levels 1 and 3 keep a frame pointer (CFA from rbp).
 * -DTHREADS: the rounds run in a thread, then again in a second one, which
 * is handed the first one's remembered walks and paths (and most likely its
 * stack): they must not be taken for its own.
 * -DCONCURRENT: nine threads at once -- two past the seven that own counter
 * stripes, each resting from whole walks and counting its paths' blocks on
 * the shared stripe.
 * -DHANDOVERS: as THREADS, with 65,536 threads between the two that each
 * allocate once and exit: the remembered walks and paths go from thread to
 * thread, and their owner's 16 bits in a path come round (the paths are
 * then dropped: see paths_handed_over). */
#include <pthread.h>
#include <stdlib.h>

#include "checkpoint.h"
#include "rounds.h"
#define OPAQUE() __asm__ volatile("" ::: "memory")

#ifdef MIXED_FRAMES
#define ODD_FRAMES __attribute__((optimize("no-omit-frame-pointer")))
#else
#define ODD_FRAMES
#endif

/* Level 0's four functions allocate; level L's call level L-1's function for
 * digit L-1 of the path.  (noipa: identical functions must stay apart.) */
#define LEAF(D)                                                                                    \
    __attribute__((noipa)) static void *level0_##D(int path)                                      \
    {                                                                                              \
        void *p = malloc(100 + (size_t)path);                                                      \
        OPAQUE();                                                                                  \
        return p;                                                                                  \
    }
LEAF(0)
LEAF(1)
LEAF(2)
LEAF(3)

#define PICK(PREV, L, path)                                                                        \
    ((path) >> (2 * ((L) - 1)) & 3) == 0   ? PREV##_0(path)                                        \
    : ((path) >> (2 * ((L) - 1)) & 3) == 1 ? PREV##_1(path)                                        \
    : ((path) >> (2 * ((L) - 1)) & 3) == 2 ? PREV##_2(path)                                        \
                                           : PREV##_3(path)

#define LEVEL_FN(L, PREV, D, ATTR)                                                                 \
    ATTR __attribute__((noipa)) static void *level##L##_##D(int path)                              \
    {                                                                                              \
        void *p = PICK(PREV, L, path);                                                             \
        OPAQUE();                                                                                  \
        return p;                                                                                  \
    }
#define LEVEL(L, PREV, ATTR)                                                                       \
    LEVEL_FN(L, PREV, 0, ATTR) LEVEL_FN(L, PREV, 1, ATTR) LEVEL_FN(L, PREV, 2, ATTR)              \
    LEVEL_FN(L, PREV, 3, ATTR)

LEVEL(1, level0, ODD_FRAMES)
LEVEL(2, level1, )
LEVEL(3, level2, ODD_FRAMES)

__attribute__((noipa)) static void *descend(int path)
{
    void *p = PICK(level3, 4, path);
    OPAQUE(); /* (not a tail call: descend keeps its frame) */
    return p;
}

static void *once(void *unused)
{
    (void)unused;
    void *volatile p = malloc(24);
    free(p);
    return NULL;
}

static void *rounds(void *unused)
{
    (void)unused;
    allocate_rounds(descend);
    return NULL;
}

int main(void)
{
#if defined(THREADS) || defined(HANDOVERS)
    for (int t = 0; t < 2; t++) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, rounds, NULL) != 0 || pthread_join(thread, NULL) != 0)
            return 1;
#ifdef HANDOVERS
        for (int i = 0; t == 0 && i < 65536; i++)
            if (pthread_create(&thread, NULL, once, NULL) != 0 || pthread_join(thread, NULL) != 0)
                return 1;
#endif
    }
#elif defined(CONCURRENT)
    pthread_t threads[9];
    for (int t = 0; t < 9; t++)
        if (pthread_create(&threads[t], NULL, rounds, NULL) != 0)
            return 1;
    for (int t = 0; t < 9; t++)
        if (pthread_join(threads[t], NULL) != 0)
            return 1;
#else
    rounds(NULL);
#endif
    checkpoint("done");
    return 0;
}
