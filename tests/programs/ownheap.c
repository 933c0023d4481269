/* An executable with an allocator of its own, as Chromium's allocator shim
 * or a statically linked tcmalloc: it defines the malloc family (and C's
 * aligned variants), so the program's lookups find it before the tracer's.
 * Size classes of 16 bytes over one mapping, each with a free list.
 *
 *   ownheap          leaks 10 x 100 bytes at site_leak (malloc), 3 x 64 at
 *                    site_zeroed (calloc) and one 300-byte block grown by
 *                    realloc at site_grown; everything else is freed.
 *   ownheap wait     the same, then waits for a line on stdin before exit
 *                    (for an attach or a snapshot).
 *   ownheap first    says "ready" and waits for a line before it all (for an
 *                    attach), then as `wait`.
 * The allocator is kept out of line, as it would be in a file of its own
 * (inlined into its callers, no routing could see it). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CLASSES 1024 /* up to 16 KiB: stdio's buffers too */
struct chunk {
    size_t size;
    struct chunk *next;
};
static char *arena, *bump_at;
static struct chunk *free_lists[CLASSES];
#define NOINLINE __attribute__((noinline))

static void *take(size_t n)
{
    size_t c = (n + 15) / 16;
    if (c >= CLASSES) {
        errno = ENOMEM;
        return NULL;
    }
    if (!arena) {
        arena = mmap(NULL, 64 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        bump_at = arena;
    }
    struct chunk *k = free_lists[c];
    if (k) {
        free_lists[c] = k->next;
    } else {
        k = (struct chunk *)bump_at;
        bump_at += 16 + c * 16;
    }
    k->size = c * 16;
    return (char *)k + 16;
}

NOINLINE void *malloc(size_t n) { return take(n); }

NOINLINE void free(void *p)
{
    if (!p)
        return;
    struct chunk *k = (struct chunk *)((char *)p - 16);
    size_t c = k->size / 16;
    k->next = free_lists[c];
    free_lists[c] = k;
}

NOINLINE void *calloc(size_t k, size_t n)
{
    void *p = take(k * n);
    if (p)
        memset(p, 0, k * n);
    return p;
}

NOINLINE void *realloc(void *p, size_t n)
{
    void *q = take(n);
    if (q && p) {
        size_t old = ((struct chunk *)((char *)p - 16))->size;
        memcpy(q, p, old < n ? old : n);
        free(p);
    }
    return q;
}

NOINLINE void *memalign(size_t align, size_t n) { return align <= 16 ? take(n) : NULL; }
NOINLINE void *aligned_alloc(size_t align, size_t n) { return memalign(align, n); }
NOINLINE int posix_memalign(void **out, size_t align, size_t n)
{
    void *p = memalign(align, n);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

void *volatile kept[32];

__attribute__((noinline)) void *site_leak(size_t n) { return malloc(n); }
__attribute__((noinline)) void *site_zeroed(size_t n) { return calloc(1, n); }
__attribute__((noinline)) void *site_grown(void)
{
    char *p = malloc(10);
    strcpy(p, "grown");
    return realloc(p, 300);
}
__attribute__((noinline)) void churn(void)
{
    for (int i = 0; i < 1000; i++) {
        void *p = malloc(40 + i % 200);
        void *q = calloc(4, 25);
        ((volatile char *)q)[99] = 1; /* used: or the compiler drops the pair */
        p = realloc(p, 500);
        free(q);
        free(p);
    }
}

static int wait_for_a_line(void)
{
    char line[16];
    return fgets(line, sizeof line, stdin) != NULL;
}

int main(int argc, char **argv)
{
    int n = 0;
    if (argc > 1 && !strcmp(argv[1], "first")) {
        printf("ready\n");
        fflush(stdout);
        if (!wait_for_a_line())
            return 1;
    }
    churn();
    for (int i = 0; i < 10; i++)
        kept[n++] = site_leak(100);
    for (int i = 0; i < 3; i++)
        kept[n++] = site_zeroed(64);
    kept[n++] = site_grown();
    for (int i = 0; i < n; i++)
        kept[i] = NULL; /* lost: no pointer left */
    printf("done\n");
    fflush(stdout);
    if (argc > 1 && !wait_for_a_line())
        return 1;
    return 0;
}
