/* Loaded with RTLD_DEEPBIND: its own references to malloc/free bind to
 * libc's first, past the preloaded tracer (which routes them through the
 * plugin's offset table).  unseen_alloc calls libc's malloc by its
 * internal name, which nothing routes: an allocator the tracer cannot see. */
#include <stdlib.h>

extern void *__libc_malloc(size_t);

__attribute__((noinline)) void *deep_alloc(void) { return malloc(321); }
void deep_free(void *p) { free(p); }
__attribute__((noinline)) void *unseen_alloc(void) { return __libc_malloc(123); }
