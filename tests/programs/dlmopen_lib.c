/* A library for dlmopen_main.c: it allocates with whatever malloc its
 * namespace's C library has. */
#include <stdlib.h>

void *lib_alloc(size_t n) { return malloc(n); }
