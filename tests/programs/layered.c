/* A program's own allocation layer above malloc, as MariaDB's my_malloc:
 * the wrapper takes 16 more bytes for a header of its own and hands out
 * the pointer past it.
 *   my_malloc (a well-known wrapper name), from two callers that leak:
 *     leak_users      10 x 100 bytes   (+16 header each)
 *     leak_sessions    5 x 200
 *   obscure_alloc (a wrapper no one knows by name), from six callers,
 *     each keeping 3 x 40 (+16): found by its shape
 *   pool_get, from two callers (caller_one 4 x 24, caller_two 2 x 24, +16):
 *     only with --alloc-fns
 * Every block is kept (reachable from `kept`): the scan finds them held
 * through the header offset. */
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))
#define KEEP() __asm__ volatile("" ::: "memory") /* not a tail call */
#define HEADER 16

void *kept[200];
int nkept;

NOINLINE void *my_malloc(size_t n)
{
    char *p = malloc(n + HEADER);
    if (!p)
        return NULL;
    memcpy(p, &n, sizeof n); /* the header: the size */
    return p + HEADER;
}

NOINLINE void *obscure_alloc(size_t n) { char *p = malloc(n + HEADER); KEEP(); return p ? p + HEADER : NULL; }
NOINLINE void *pool_get(size_t n) { char *p = malloc(n + HEADER); KEEP(); return p ? p + HEADER : NULL; }

NOINLINE void leak_users(void) { kept[nkept++] = my_malloc(100); KEEP(); }
NOINLINE void leak_sessions(void) { kept[nkept++] = my_malloc(200); KEEP(); }

#define OBSCURE_CALLER(name)                                                                       \
    NOINLINE void name(void)                                                                       \
    {                                                                                              \
        for (int i = 0; i < 3; i++)                                                                \
            kept[nkept++] = obscure_alloc(40);                                                     \
        KEEP();                                                                                    \
    }
OBSCURE_CALLER(parse_a)
OBSCURE_CALLER(parse_b)
OBSCURE_CALLER(parse_c)
OBSCURE_CALLER(parse_d)
OBSCURE_CALLER(parse_e)
OBSCURE_CALLER(parse_f)

NOINLINE void caller_one(void) { kept[nkept++] = pool_get(24); KEEP(); }
NOINLINE void caller_two(void) { kept[nkept++] = pool_get(24); KEEP(); }

int main(void)
{
    for (int i = 0; i < 10; i++)
        leak_users();
    for (int i = 0; i < 5; i++)
        leak_sessions();
    parse_a(), parse_b(), parse_c(), parse_d(), parse_e(), parse_f();
    for (int i = 0; i < 4; i++)
        caller_one();
    for (int i = 0; i < 2; i++)
        caller_two();
    return 0;
}
