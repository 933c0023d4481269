/* Every intercepted C allocator, each called from its own function so that
 * the test can find each site by the first frame of its report entry. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "checkpoint.h"

#define SITE __attribute__((noinline))
static void *keep[64];
static int nkeep;
static void *hold(void *p) { keep[nkeep++] = p; return p; }

SITE void site_malloc(void) { for (int i = 0; i < 3; i++) hold(malloc(100)); }
SITE void site_calloc(void) { for (int i = 0; i < 2; i++) hold(calloc(10, 8)); }
SITE void *site_realloc_new(void) { return realloc(NULL, 50); }
SITE void *site_realloc_grow(void *p) { return realloc(p, 500); }
SITE void *site_reallocarray(void) { return reallocarray(NULL, 7, 9); }
SITE void *site_posix_memalign(void) { void *p; return posix_memalign(&p, 64, 256) ? NULL : p; }
SITE void *site_aligned_alloc(void) { return aligned_alloc(64, 128); }
SITE void *site_memalign(void) { return memalign(32, 96); }
SITE void *site_valloc(void) { return valloc(1000); }
SITE void *site_pvalloc(void) { return pvalloc(100); }
SITE void *site_mmap(void) { return mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); }
SITE void *site_mremap(void *p) { return mremap(p, 4096, 5 * 4096, MREMAP_MAYMOVE); }
SITE void *site_mmap_small(void) { return mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); }
SITE void *site_file_mmap(void) { return mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, 0, 0); }
SITE void site_free_one(void *p) { free(p); }
SITE void *site_realloc_keep(void) { return malloc(77); }
SITE void *site_realloc_fails(void *p) { return realloc(p, (size_t)1 << 62); } /* NULL: p stays */

int main(void)
{
    site_malloc();
    site_calloc();
    void *r = site_realloc_new();
    hold(site_reallocarray());
    hold(site_posix_memalign());
    hold(site_aligned_alloc());
    hold(site_memalign());
    hold(site_valloc());
    hold(site_pvalloc());
    char *m = site_mmap();
    void *small = site_mmap_small();
    site_file_mmap(); /* not anonymous: not an allocation */
    void *kept = hold(site_realloc_keep());
    if (site_realloc_fails(kept) != NULL)
        return 3;
    checkpoint("allocated");

    site_free_one(keep[0]);            /* one of site_malloc's blocks */
    r = site_realloc_grow(r);          /* moves r's bytes to this site */
    munmap(m + 4096, 4096);            /* a hole: one mapping becomes two */
    small = site_mremap(small);        /* moves the mapping to this site */
    checkpoint("changed");

    munmap(m, 4096);                   /* the first piece goes entirely */
    free(r);
    free(keep[1]);
    (void)small;
    return 0;                          /* exit report */
}
