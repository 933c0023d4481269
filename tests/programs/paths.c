/* Allocations from many call paths taken in turn, all through one chain of
 * wrappers, at several depths, in the main thread and in threads that come
 * and go.  This is what the unwinder's remembered walks must get exactly
 * right: a walk that matches a remembered one for its first frames and then
 * goes elsewhere, a state met before at another depth, the memory of an
 * exited thread passed on to a new one.
 *
 * Round i calls caller i % CALLERS under i % DEPTHS extra levels of descend()
 * and keeps the block when i % 7 == 0.  ROUNDS is a multiple of 30 * 7, so
 * each (caller, depth) keeps exactly ROUNDS / 210 blocks of 100 + caller
 * bytes per run of rounds(). */
#include <pthread.h>
#include <stdlib.h>

#include "checkpoint.h"

#define ROUNDS 6300
#define CALLERS 6
#define DEPTHS 5

#define OPAQUE() __asm__ volatile("" ::: "memory")

/* -DMIXED_FRAMES: some functions keep a frame pointer and have their CFA
 * computed from rbp, the others not -- as when a program built with frame
 * pointers calls a library built without, and back.  The unwinder must then
 * check the saved rbp words that later steps depend on, and only those. */
#ifdef MIXED_FRAMES
#define FRAME_POINTER __attribute__((optimize("no-omit-frame-pointer")))
#else
#define FRAME_POINTER
#endif

__attribute__((noinline)) static void *wrap3(size_t n) { void *p = malloc(n); OPAQUE(); return p; }
FRAME_POINTER __attribute__((noinline)) static void *wrap2(size_t n) { void *p = wrap3(n); OPAQUE(); return p; }
__attribute__((noinline)) static void *wrap1(size_t n) { void *p = wrap2(n); OPAQUE(); return p; }

#define CALLER(k)                                                                                  \
    __attribute__((noinline)) void *path_caller##k(int keep)                                       \
    {                                                                                              \
        void *p = wrap1(100 + k);                                                                  \
        if (!keep) {                                                                               \
            free(p);                                                                               \
            p = NULL;                                                                              \
        }                                                                                          \
        OPAQUE();                                                                                  \
        return p;                                                                                  \
    }
CALLER(0) CALLER(1) CALLER(2) CALLER(3) CALLER(4) CALLER(5)
static void *(*const callers[CALLERS])(int) = {path_caller0, path_caller1, path_caller2,
                                               path_caller3, path_caller4, path_caller5};

FRAME_POINTER __attribute__((noinline)) void *path_descend(int depth, int which, int keep)
{
    void *p = depth ? path_descend(depth - 1, which, keep) : callers[which](keep);
    OPAQUE();
    return p;
}

static void *volatile kept;

__attribute__((noinline)) static void *rounds(void *arg)
{
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        void *p = path_descend(i % DEPTHS, i % CALLERS, i % 7 == 0);
        if (p)
            kept = p; /* leaked on purpose */
    }
    return NULL;
}

int main(void)
{
    rounds(NULL);
    for (int i = 0; i < 3; i++) { /* one after another: each gets the last one's memory */
        pthread_t t;
        pthread_create(&t, NULL, rounds, NULL);
        pthread_join(t, NULL);
    }
    pthread_t a, b;
    pthread_create(&a, NULL, rounds, NULL);
    pthread_create(&b, NULL, rounds, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    checkpoint("done");
    return 0;
}
