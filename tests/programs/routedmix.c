/* Every mix of realloc, aligned, calloc and free calls that a program
 * linked with another allocator makes through the standard names (#64 item
 * 1): ROUNDS of each, everything freed again, then one block of each kind
 * kept at a site of its own.  Linked with -lmimalloc or -ltcmalloc_minimal,
 * whose own entry points the tracer routes: a block must be counted once,
 * whichever of its entry points made, grew or freed it. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDS 10000
#define SITE __attribute__((noinline))

static void *keep(void *p)
{
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

/* (keep() after each call: no tail call, each site a frame of its own) */
SITE void *kept_malloc_grown(void) { return keep(realloc(keep(malloc(40)), 4000)); }
SITE void *kept_posix_memalign(void) { void *p; return posix_memalign(&p, 64, 256) ? NULL : keep(p); }
SITE void *kept_aligned_alloc(void) { return keep(aligned_alloc(128, 512)); }
SITE void *kept_memalign(void) { return keep(memalign(32, 96)); }
SITE void *kept_calloc_shrunk(void) { return keep(realloc(keep(calloc(100, 10)), 300)); }

static void churn(int i)
{
    size_t n = 16 + (size_t)(i % 64) * 24;
    void *a = realloc(keep(malloc(n)), n * 3);        /* grown: moved or in place */
    a = realloc(a, n / 2 + 1);                         /* shrunk */
    void *b = NULL;
    if (posix_memalign(&b, 64 << (i % 3), n))
        abort();
    void *c = aligned_alloc(32 << (i % 4), (n + 31) & ~(size_t)31);
    void *d = memalign(16 << (i % 5), n);
    void *e = calloc(i % 7 + 1, n);
    e = realloc(e, n * 5);
    void *f = realloc(NULL, n);                        /* realloc as malloc */
    void *g = realloc(keep(malloc(n)), 0);             /* realloc as free (glibc: NULL) */
    free(a), free(b), free(c), free(d), free(e), free(f), free(g);
}

int main(void)
{
    for (int i = 0; i < ROUNDS; i++)
        churn(i);
    void *kept[] = {kept_malloc_grown(), kept_posix_memalign(), kept_aligned_alloc(), kept_memalign(),
                    kept_calloc_shrunk()};
    printf("done %d\n", (int)(sizeof kept / sizeof kept[0]));
    return 0;
}
