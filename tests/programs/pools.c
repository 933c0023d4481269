/* A program with its own allocators, annotated the valgrind way (as
 * PostgreSQL's memory contexts and LMDB are): built once against valgrind's
 * <valgrind/memcheck.h> and run under valgrind, once against libmemleak's
 * (`libmemleak cflags --valgrind`) and run under libmemleak -- the two must
 * put the same blocks of the same sites in the same categories.
 *
 *   - an arena pool (MEMPOOL_*) whose superblocks come from malloc: lists
 *     of nodes, one kept, one dropped whole (its head definitely lost, the
 *     rest indirectly), chunks freed one by one, a pool destroyed with its
 *     chunks, a pool trimmed;
 *   - a slab of malloc-like blocks (MALLOCLIKE/FREELIKE/RESIZEINPLACE) cut
 *     from malloc'd memory, one lost, one resized and kept.
 *
 * Prints, after a leak check in the middle, the counts valgrind's
 * COUNT_LEAKS / COUNT_LEAK_BLOCKS give. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <valgrind/memcheck.h>

#define SUPERBLOCK 4096

struct arena {
    char *blocks[64];
    int nblocks;
    size_t used; /* in the newest superblock */
};

static struct arena *arena_new(void)
{
    struct arena *a = calloc(1, sizeof *a);
    VALGRIND_CREATE_MEMPOOL(a, 0, 0);
    return a;
}

static void *arena_alloc(struct arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (!a->nblocks || a->used + n > SUPERBLOCK) {
        a->blocks[a->nblocks++] = malloc(SUPERBLOCK);
        a->used = 0;
    }
    void *p = a->blocks[a->nblocks - 1] + a->used;
    a->used += n;
    VALGRIND_MEMPOOL_ALLOC(a, p, n);
    return p;
}

static void arena_free(struct arena *a, void *p) { VALGRIND_MEMPOOL_FREE(a, p); }

/* Frees every chunk and the superblocks: the pool is gone. */
static void arena_destroy(struct arena *a)
{
    VALGRIND_DESTROY_MEMPOOL(a);
    for (int i = 0; i < a->nblocks; i++)
        free(a->blocks[i]);
    free(a);
}

struct node {
    struct node *next;
    char payload[40];
};

static struct node *list_of(struct arena *a, int n)
{
    struct node *head = NULL;
    for (int i = 0; i < n; i++) {
        struct node *x = arena_alloc(a, sizeof *x);
        x->next = head;
        head = x;
    }
    return head;
}

/* The slab: malloc-like blocks cut from one malloc'd region. */
static char *slab;
static size_t slab_used;

static void *slab_alloc(size_t n)
{
    void *p = slab + slab_used;
    slab_used += (n + 15) & ~(size_t)15;
    VALGRIND_MALLOCLIKE_BLOCK(p, n, 0, 0);
    return p;
}

static struct arena *kept_arena;
static struct node *kept_list;
static void *kept_slab_block;

__attribute__((noinline)) static void site_kept_list(void) { kept_list = list_of(kept_arena, 10); }

__attribute__((noinline)) static void site_lost_list(void)
{
    struct node *lost = list_of(kept_arena, 6);
    memset(&lost, 0, sizeof lost);
}

__attribute__((noinline)) static void site_freed_chunks(void)
{
    for (int i = 0; i < 20; i++)
        arena_free(kept_arena, arena_alloc(kept_arena, 100));
}

__attribute__((noinline)) static void site_destroyed_pool(void)
{
    struct arena *a = arena_new();
    list_of(a, 30);
    arena_destroy(a);
}

__attribute__((noinline)) static void site_trimmed_pool(struct arena **out)
{
    struct arena *a = arena_new();
    char *first = arena_alloc(a, 64);
    arena_alloc(a, 64);
    arena_alloc(a, 64);
    /* keep only the first chunk's bytes */
    VALGRIND_MEMPOOL_TRIM(a, first, 64);
    *out = a;
}

__attribute__((noinline)) static void site_slab_lost(void)
{
    void *p = slab_alloc(200);
    memset(&p, 0, sizeof p);
}

__attribute__((noinline)) static void site_slab_kept(void)
{
    kept_slab_block = slab_alloc(300);
    VALGRIND_RESIZEINPLACE_BLOCK(kept_slab_block, 300, 120, 0);
}

__attribute__((noinline)) static void site_slab_freed(void)
{
    void *p = slab_alloc(50);
    VALGRIND_FREELIKE_BLOCK(p, 0);
}

static struct arena *trimmed;

int main(void)
{
    kept_arena = arena_new();
    slab = malloc(8192);
    site_kept_list();
    site_lost_list();
    site_freed_chunks();
    site_destroyed_pool();
    site_trimmed_pool(&trimmed);
    site_slab_lost();
    site_slab_kept();
    site_slab_freed();

    VALGRIND_DO_LEAK_CHECK;
    /* (valgrind's own tests' names: a macro whose parameter is named as a
     * field it reads would read the caller's name as the field, #64 item 16) */
    unsigned long leaked, dubious, reached, suppressed;
    VALGRIND_COUNT_LEAKS(leaked, dubious, reached, suppressed);
    printf("bytes: %lu %lu %lu %lu\n", leaked, dubious, reached, suppressed);
    VALGRIND_COUNT_LEAK_BLOCKS(leaked, dubious, reached, suppressed);
    printf("blocks: %lu %lu %lu %lu\n", leaked, dubious, reached, suppressed);
    printf("exists: %d %d\n", (int)VALGRIND_MEMPOOL_EXISTS(kept_arena), (int)VALGRIND_MEMPOOL_EXISTS(&slab));
    fflush(stdout);
    return 0;
}
