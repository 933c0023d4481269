/* What runtimes/cpython.c and runtimes/pymalloc.c share. */
#ifndef MLK_RUNTIMES_CPYTHON_H
#define MLK_RUNTIMES_CPYTHON_H 1

#include "../mlk.h"

struct py_layout; /* cpython_layout.h */

/* The layouts read (3.11's, 3.12's, 3.13's), by index. */
#define MLK_PY_LAYOUTS 3
extern MLK_HIDDEN const struct py_layout *const mlk_py_layouts[MLK_PY_LAYOUTS];
/* The interpreter's version (PY_VERSION_HEX), or 0: none. */
MLK_HIDDEN unsigned long mlk_py_version(void);
/* Which of mlk_py_layouts is its, or -1: none read (rt: &_PyRuntime). */
MLK_HIDDEN int mlk_py_layout_of(unsigned long version, const char *rt);
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
