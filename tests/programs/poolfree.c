/* free() of memory a program's own allocator handed out (#31): a chunk of
 * an annotated pool (valgrind's MEMPOOL_ALLOC, as PostgreSQL's memory
 * contexts make them) and a malloc-like block cut from a slab
 * (MALLOCLIKE_BLOCK).  Neither was malloc's: bare, glibc aborts at the
 * first ("free(): invalid pointer"); under misuse=hold both are named and
 * the program lives on.  Built against valgrind's <valgrind/memcheck.h>
 * for valgrind (the oracle) and against libmemleak's (`libmemleak cflags
 * --valgrind`) for libmemleak.  Each step prints a line before it. */
#include <stdio.h>
#include <stdlib.h>
#include <valgrind/memcheck.h>

static void say(const char *what)
{
    printf("%s\n", what);
    fflush(stdout);
}

static char pool_anchor;

__attribute__((noinline)) static char *site_pool_chunk(char *superblock)
{
    char *chunk = superblock + 64;
    VALGRIND_MEMPOOL_ALLOC(&pool_anchor, chunk, 32);
    return chunk;
}

__attribute__((noinline)) static char *site_slab_block(char *slab)
{
    char *block = slab + 128;
    VALGRIND_MALLOCLIKE_BLOCK(block, 48, 0, 0);
    return block;
}

__attribute__((noinline)) static void site_free_chunk(char *p) { free(p); }
__attribute__((noinline)) static void site_free_slab_block(char *p) { free(p); }

int main(void)
{
    char *superblock = calloc(1, 4096), *slab = calloc(1, 4096);
    VALGRIND_CREATE_MEMPOOL(&pool_anchor, 0, 0);
    char *chunk = site_pool_chunk(superblock), *block = site_slab_block(slab);
    say("pool: freeing a chunk");
    site_free_chunk(chunk);
    say("slab: freeing a block");
    site_free_slab_block(block);
    say("lived on");
    VALGRIND_FREELIKE_BLOCK(block, 0);
    VALGRIND_DESTROY_MEMPOOL(&pool_anchor);
    free(slab);
    free(superblock);
    say("end");
    return 0;
}
