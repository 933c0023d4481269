/* Allocates through mozarena_lib.c's arena API (routed: seen at its sites)
 * and its slab allocator (not routed: said unseen).  Keeps 3 x 1 MiB arena
 * blocks, frees 2 more, grows one by realloc; keeps one slab block. */
#include <stdio.h>
#include <stddef.h>

typedef size_t arena_id_t;
void *moz_arena_malloc(arena_id_t arena, size_t size);
void *moz_arena_calloc(arena_id_t arena, size_t n, size_t size);
void *moz_arena_realloc(arena_id_t arena, void *p, size_t size);
void moz_arena_free(arena_id_t arena, void *p);
void *slab_malloc(size_t size);

#define NOINLINE __attribute__((noinline))
static void *volatile keep;

NOINLINE static void *site_array_buffer(void) { return moz_arena_calloc(7, 1, 1 << 20); }
NOINLINE static void *site_arena_grown(void) { return moz_arena_realloc(7, moz_arena_malloc(7, 100), 5000); }
NOINLINE static void *site_slab(void) { return slab_malloc(4096); }

int main(void)
{
    void *kept[3];
    for (int i = 0; i < 3; i++)
        kept[i] = site_array_buffer();
    for (int i = 0; i < 2; i++)
        moz_arena_free(7, site_array_buffer());
    keep = site_arena_grown();
    keep = site_slab();
    printf("done %d\n", kept[2] != NULL);
    return 0;
}
