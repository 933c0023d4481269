/* What runtimes/cpython.c and runtimes/pymalloc.c share. */
#ifndef MLK_RUNTIMES_CPYTHON_H
#define MLK_RUNTIMES_CPYTHON_H 1

#include "../mlk.h"

/* A symbol of the first module that defines it (by the modules' symbol
 * tables, never dlsym), or NULL. */
MLK_HIDDEN void *mlk_py_symbol(const char *name);
/* pymalloc's domains wrapped, before the interpreter starts: MLK_PYMALLOC_*. */
MLK_HIDDEN int mlk_pymalloc_route(void);
/* The same, in an interpreter already running: by a thread holding its GIL. */
MLK_HIDDEN int mlk_pymalloc_route_running(void);
/* Whether they are still ours once it runs (PYTHONMALLOC replaces them). */
MLK_HIDDEN int mlk_pymalloc_still_routed(void);

#endif
