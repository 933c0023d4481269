/* The program's own blocks and pools (custom.c), for api.c's table. */
#ifndef MLK_API_CUSTOM_H
#define MLK_API_CUSTOM_H

#include <stddef.h>

#include "../../../libmemleak/include/memleak_abi.h"
#include "../mlk.h"

/* A pool's flags: memleak_abi.h's MEMLEAK_POOL_*, valgrind's values. */
#define MLK_POOL_FLAGS (MEMLEAK_POOL_AUTO_FREE | MEMLEAK_POOL_METAPOOL)

MLK_HIDDEN void mlk_custom_malloclike(const void *addr, size_t size);
MLK_HIDDEN void mlk_custom_freelike(const void *addr);
MLK_HIDDEN void mlk_custom_resize(const void *addr, size_t old_size, size_t new_size);
MLK_HIDDEN void mlk_custom_pool_create(const void *anchor, unsigned flags);
MLK_HIDDEN void mlk_custom_pool_destroy(const void *anchor);
MLK_HIDDEN void mlk_custom_pool_alloc(const void *anchor, const void *addr, size_t size);
MLK_HIDDEN void mlk_custom_pool_free(const void *anchor, const void *addr);
MLK_HIDDEN void mlk_custom_pool_trim(const void *anchor, const void *addr, size_t size);
MLK_HIDDEN void mlk_custom_pool_move(const void *from, const void *to);
MLK_HIDDEN void mlk_custom_pool_change(const void *anchor, const void *from, const void *to, size_t size);
MLK_HIDDEN int mlk_custom_pool_exists(const void *anchor);
/* Whether addr starts a live block of the program's own: MLK_WHERE_POOL_CHUNK,
 * MLK_WHERE_CUSTOM_BLOCK (its stack and size then set), or 0. */
MLK_HIDDEN int mlk_custom_block_at(const void *addr, uint32_t *stack, uint64_t *size);

#endif
