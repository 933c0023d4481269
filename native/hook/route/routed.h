/* What routed.c's hooks (the malloc family's usual names) and families.c's
 * (mimalloc's, jemalloc's and tcmalloc's own names) share: the guard around
 * the original, and how a block a call may move or free is forgotten. */
#ifndef MLK_ROUTE_ROUTED_H
#define MLK_ROUTE_ROUTED_H

#include "../hooks.h"

typedef uintptr_t word;

/* The guard is dropped again if operator new throws through us (these
 * files are compiled with -fexceptions). */
static inline void mlk_drop_guard(int *unused)
{
    (void)unused;
    mlk_in_hook = 0;
}
#define GUARDED(call)                                                                              \
    ({                                                                                             \
        int guard_ __attribute__((cleanup(mlk_drop_guard))) = 0;                                   \
        (void)guard_;                                                                              \
        mlk_in_hook = 1;                                                                           \
        call;                                                                                      \
    })

/* The old block of a realloc is forgotten before the call (another thread
 * may be handed its address the moment it is freed) and put back if the
 * allocator refuses and leaves it in place.  `trailed`: the block may be one
 * our exported malloc made through this same allocator, with a trailer (a
 * family whose allocator is also the malloc we forward to: mimalloc's
 * mi_realloc of a malloc'ed block); else only the address table is asked. */
struct mlk_routed_taken {
    struct mlk_trailer *trailer;
    uint64_t trailer_meta;
    int had;
    uint32_t stack;
    uint64_t size;
};
MLK_HIDDEN void mlk_routed_take(void *old, int trailed, struct mlk_routed_taken *taken);
MLK_HIDDEN void mlk_routed_put_back(void *old, struct mlk_routed_taken *taken);
MLK_HIDDEN void mlk_routed_moved(struct mlk_routed_taken *taken); /* the call moved or freed it */

#endif
