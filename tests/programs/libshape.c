#include <stdlib.h>

void *volatile shape_sink;

__attribute__((noinline)) void *shared_alloc(size_t n)
{
    void *p = malloc(n); // @shared
    shape_sink = p;
    return p;
}
