/* jemalloc's non-standard API called by name (mallocx, rallocx, xallocx,
 * sdallocx, dallocx), linked against Debian's libjemalloc2, which ships no
 * headers: the prototypes are jemalloc's documented ones.
 *
 * Kept at exit:
 *   site_mallocx      10 x 100 bytes   mallocx(100, 0)
 *   site_zeroed        4 x  64         mallocx(64, MALLOCX_ZERO)
 *   site_grown         1 x 500         mallocx(50) then rallocx(p, 500)
 * Made and freed: 100 rounds of mallocx + dallocx, mallocx + sdallocx,
 * malloc + dallocx (one allocator, two families), mallocx + free. */
#include <stdio.h>
#include <stdlib.h>

void *mallocx(size_t size, int flags);
void *rallocx(void *ptr, size_t size, int flags);
size_t xallocx(void *ptr, size_t size, size_t extra, int flags);
void dallocx(void *ptr, int flags);
void sdallocx(void *ptr, size_t size, int flags);
#define MALLOCX_ZERO 0x40

#define NOINLINE __attribute__((noinline))
#define KEEP() __asm__ volatile("" ::: "memory") /* not a tail call */

static void *kept[32];
static int nkept;

NOINLINE static void site_mallocx(void) { kept[nkept++] = mallocx(100, 0); KEEP(); }
NOINLINE static void site_zeroed(void) { kept[nkept++] = mallocx(64, MALLOCX_ZERO); KEEP(); }
NOINLINE static void *site_first(void) { void *p = mallocx(50, 0); KEEP(); return p; }
NOINLINE static void site_grown(void *p) { kept[nkept++] = rallocx(p, 500, 0); KEEP(); }
NOINLINE static void *churn_mallocx(size_t n) { void *p = mallocx(n, 0); KEEP(); return p; }
NOINLINE static void *churn_malloc(size_t n) { void *p = malloc(n); KEEP(); return p; }

int main(void)
{
    for (int i = 0; i < 10; i++)
        site_mallocx();
    for (int i = 0; i < 4; i++)
        site_zeroed();
    site_grown(site_first());
    for (int i = 0; i < 100; i++) {
        dallocx(churn_mallocx(40), 0);
        sdallocx(churn_mallocx(56), 56, 0);
        dallocx(churn_malloc(72), 0);
        free(churn_mallocx(88));
    }
    printf("done\n");
    return 0;
}
