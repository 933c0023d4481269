/* Routing modules' calls through their global offset tables (got.c). */
#ifndef MLK_ROUTE_GOT_H
#define MLK_ROUTE_GOT_H

#include <link.h>
#include <stddef.h>
#include <stdint.h>

struct mlk_got_pass {
    int frees;       /* 1: the frees' names (routed first while threads run), 0: the rest */
    int families;    /* allocator families by name too (mi_malloc, mallocx): under attach */
    int remember;    /* keep what each entry held, for mlk_got_unroute_all */
    int not_its_own; /* leave names the module defines itself */
    uintptr_t only;  /* mlk_got_route_deepbind: the load bias of the one module routed */
    int failed;      /* out of memory for the remembered entries */
};

/* Our hooks' addresses, looked up once (dlsym on our own library).  0, or
 * -1 with why. */
int mlk_got_find_ours(char *why, size_t why_len);
/* Our definition of `name` if it is one we route (hooks_dlsym.c), else NULL. */
void *mlk_got_ours_for(const char *name);
/* Route one module's entries for the names of `pass` (ours left alone).
 * Returns 1 when remembering failed (stop iterating), else 0. */
int mlk_got_route_module(struct dl_phdr_info *info, struct mlk_got_pass *pass);
/* Write every remembered entry back (the caller holds its lock). */
void mlk_got_unroute_all(void);
/* A module just loaded with RTLD_DEEPBIND (handle): route its entries. */
void mlk_got_route_deepbind(void *handle);
/* Whether the module defines `name`, by its GNU hash table (no dlsym,
 * whose failures leave a malloc'ed message behind); 1 when it has none. */
int mlk_module_defines(const struct dl_phdr_info *info, const char *name);
/* The address of the function or object `name` that module info defines;
 * 0 if it defines none, 1 if that cannot be told (no GNU hash table). */
uintptr_t mlk_module_symbol(const struct dl_phdr_info *info, const char *name);
/* each(name, address, arg) for every function the module exports (its GNU
 * hash table's symbols; none without one). */
void mlk_module_each_function(const struct dl_phdr_info *info,
                              void (*each)(const char *name, uintptr_t addr, void *arg), void *arg);

#endif
