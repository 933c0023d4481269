/* An allocator of its own, as a library: mozjemalloc's arena API by its
 * names (moz_arena_malloc, _calloc, _realloc, _memalign, _free, whose
 * first argument is the arena) and a slab allocator nobody routes
 * (slab_malloc, slab_free) -- both over mmap, never through malloc
 * (#64 item 2: Firefox's ArrayBuffers are moz_arena_callocs). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define EXPORT __attribute__((visibility("default")))
typedef size_t arena_id_t;

static void *block(size_t size)
{
    size_t total = (size + 16 + 4095) & ~(size_t)4095;
    char *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    ((size_t *)p)[0] = total;
    ((size_t *)p)[1] = size;
    return p + 16;
}

static void unblock(void *p)
{
    if (p)
        munmap((char *)p - 16, ((size_t *)((char *)p - 16))[0]);
}

EXPORT void *moz_arena_malloc(arena_id_t arena, size_t size) { (void)arena; return block(size); }
EXPORT void *moz_arena_calloc(arena_id_t arena, size_t n, size_t size) { (void)arena; return block(n * size); }
EXPORT void *moz_arena_memalign(arena_id_t arena, size_t align, size_t size) { (void)arena, (void)align; return block(size); }
EXPORT void moz_arena_free(arena_id_t arena, void *p) { (void)arena; unblock(p); }
EXPORT void *moz_arena_realloc(arena_id_t arena, void *p, size_t size)
{
    (void)arena;
    void *q = block(size);
    if (q && p) {
        size_t had = ((size_t *)((char *)p - 16))[1];
        memcpy(q, p, had < size ? had : size);
        unblock(p);
    }
    return q;
}
EXPORT void *slab_malloc(size_t size) { return block(size); }
EXPORT void slab_free(void *p) { unblock(p); }
