/* Loaded with RTLD_DEEPBIND: its own references to malloc/free bind to
 * libc's first, past the preloaded tracer. */
#include <stdlib.h>

__attribute__((noinline)) void *deep_alloc(void) { return malloc(321); }
void deep_free(void *p) { free(p); }
