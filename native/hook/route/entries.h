/* The allocator entry points routed.c has hooks for, as data: a row per
 * name -- which argument is the size, the count, the old pointer, what the
 * call does with them (enum shape, routed.c), the kind of block, and
 * whether an unrouted one would be a way to allocate or to free. */
#ifndef MLK_ROUTE_ENTRIES_H
#define MLK_ROUTE_ENTRIES_H

/* The usual names, first: where names share one address (tcmalloc's
 * malloc is tc_malloc, its operator new may be folded into it), the first
 * one routes it.  Only the module that wins their lookup is routed (route.c). */
#define USUAL(X)                                                                                   \
    X("malloc", malloc, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC, MLK_ROUTE_CORE)                     \
    X("free", free, FREE, NONE, NONE, 0, 0, MLK_ROUTE_CORE)                                        \
    X("calloc", calloc, ALLOC, 1, 0, NONE, MLK_KIND_MALLOC, MLK_ROUTE_CORE)                        \
    X("realloc", realloc, REALLOC, 1, NONE, 0, MLK_KIND_MALLOC, MLK_ROUTE_CORE)                    \
    X("reallocarray", reallocarray, REALLOC, 2, 1, 0, MLK_KIND_MALLOC, BY_SHAPE)                   \
    X("memalign", memalign, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                       \
    X("aligned_alloc", aligned_alloc, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)             \
    X("posix_memalign", posix_memalign, POSIX_ALIGN, 2, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)     \
    X("valloc", valloc, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                           \
    X("pvalloc", pvalloc, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                         \
    X("cfree", cfree, FREE, NONE, NONE, 0, 0, BY_SHAPE)                                            \
    X("free_sized", free_sized, FREE, NONE, NONE, 0, 0, BY_SHAPE)                                  \
    X("free_aligned_sized", free_aligned_sized, FREE, NONE, NONE, 0, 0, BY_SHAPE)                  \
    X("_Znwm", new, ALLOC, 0, NONE, NONE, MLK_KIND_NEW, BY_SHAPE)                                  \
    X("_Znam", new_array, ALLOC, 0, NONE, NONE, MLK_KIND_NEW, BY_SHAPE)                            \
    X("_ZnwmRKSt9nothrow_t", new_nothrow, ALLOC, 0, NONE, NONE, MLK_KIND_NEW, BY_SHAPE)            \
    X("_ZnamRKSt9nothrow_t", new_array_nothrow, ALLOC, 0, NONE, NONE, MLK_KIND_NEW, BY_SHAPE)      \
    X("_ZnwmSt11align_val_t", new_aligned, ALLOC, 0, NONE, NONE, MLK_KIND_NEW, BY_SHAPE)           \
    X("_ZnamSt11align_val_t", new_array_aligned, ALLOC, 0, NONE, NONE, MLK_KIND_NEW, BY_SHAPE)     \
    X("_ZnwmSt11align_val_tRKSt9nothrow_t", new_aligned_nothrow, ALLOC, 0, NONE, NONE, MLK_KIND_NEW, BY_SHAPE) \
    X("_ZnamSt11align_val_tRKSt9nothrow_t", new_array_aligned_nothrow, ALLOC, 0, NONE, NONE, MLK_KIND_NEW, BY_SHAPE) \
    X("_ZdlPv", delete, FREE, NONE, NONE, 0, 0, BY_SHAPE)                                          \
    X("_ZdaPv", delete_array, FREE, NONE, NONE, 0, 0, BY_SHAPE)                                    \
    X("_ZdlPvm", delete_sized, FREE, NONE, NONE, 0, 0, BY_SHAPE)                                   \
    X("_ZdaPvm", delete_array_sized, FREE, NONE, NONE, 0, 0, BY_SHAPE)                             \
    X("_ZdlPvRKSt9nothrow_t", delete_nothrow, FREE, NONE, NONE, 0, 0, BY_SHAPE)                    \
    X("_ZdaPvRKSt9nothrow_t", delete_array_nothrow, FREE, NONE, NONE, 0, 0, BY_SHAPE)              \
    X("_ZdlPvSt11align_val_t", delete_aligned, FREE, NONE, NONE, 0, 0, BY_SHAPE)                   \
    X("_ZdaPvSt11align_val_t", delete_array_aligned, FREE, NONE, NONE, 0, 0, BY_SHAPE)             \
    X("_ZdlPvmSt11align_val_t", delete_sized_aligned, FREE, NONE, NONE, 0, 0, BY_SHAPE)            \
    X("_ZdaPvmSt11align_val_t", delete_array_sized_aligned, FREE, NONE, NONE, 0, 0, BY_SHAPE)      \
    X("_ZdlPvSt11align_val_tRKSt9nothrow_t", delete_aligned_nothrow, FREE, NONE, NONE, 0, 0, BY_SHAPE) \
    X("_ZdaPvSt11align_val_tRKSt9nothrow_t", delete_array_aligned_nothrow, FREE, NONE, NONE, 0, 0, BY_SHAPE)

/* name, id, shape, size_at, count_at, ptr_at, kind, role (BY_SHAPE: a way
 * to free if it frees, else a way to allocate) */
#define MI(X)                                                                                      \
    X("mi_malloc", mi_malloc, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                                \
    X("mi_zalloc", mi_zalloc, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                                \
    X("mi_malloc_small", mi_malloc_small, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                    \
    X("mi_zalloc_small", mi_zalloc_small, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                    \
    X("mi_calloc", mi_calloc, ALLOC, 1, 0, NONE, MLK_KIND_MALLOC, BY_SHAPE)                                   \
    X("mi_mallocn", mi_mallocn, ALLOC, 1, 0, NONE, MLK_KIND_MALLOC, BY_SHAPE)                                 \
    X("mi_malloc_aligned", mi_malloc_aligned, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                \
    X("mi_malloc_aligned_at", mi_malloc_aligned_at, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)          \
    X("mi_zalloc_aligned", mi_zalloc_aligned, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                \
    X("mi_zalloc_aligned_at", mi_zalloc_aligned_at, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)          \
    X("mi_calloc_aligned", mi_calloc_aligned, ALLOC, 1, 0, NONE, MLK_KIND_MALLOC, BY_SHAPE)                   \
    X("mi_calloc_aligned_at", mi_calloc_aligned_at, ALLOC, 1, 0, NONE, MLK_KIND_MALLOC, BY_SHAPE)             \
    X("mi_memalign", mi_memalign, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                            \
    X("mi_aligned_alloc", mi_aligned_alloc, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                  \
    X("mi_valloc", mi_valloc, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                                \
    X("mi_pvalloc", mi_pvalloc, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                              \
    X("mi_posix_memalign", mi_posix_memalign, POSIX_ALIGN, 2, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)          \
    X("mi_new", mi_new, ALLOC, 0, NONE, NONE, MLK_KIND_NEW, BY_SHAPE)                                         \
    X("mi_new_n", mi_new_n, ALLOC, 1, 0, NONE, MLK_KIND_NEW, BY_SHAPE)                                        \
    X("mi_new_nothrow", mi_new_nothrow, ALLOC, 0, NONE, NONE, MLK_KIND_NEW, BY_SHAPE)                         \
    X("mi_new_aligned", mi_new_aligned, ALLOC, 0, NONE, NONE, MLK_KIND_NEW, BY_SHAPE)                         \
    X("mi_new_aligned_nothrow", mi_new_aligned_nothrow, ALLOC, 0, NONE, NONE, MLK_KIND_NEW, BY_SHAPE)         \
    X("mi_strdup", mi_strdup, STRDUP, NONE, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                            \
    X("mi_strndup", mi_strndup, STRDUP, NONE, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                          \
    X("mi_realpath", mi_realpath, REALPATH, NONE, NONE, 1, MLK_KIND_MALLOC, BY_SHAPE)                         \
    X("mi_realloc", mi_realloc, REALLOC, 1, NONE, 0, MLK_KIND_MALLOC, BY_SHAPE)                               \
    X("mi_reallocn", mi_reallocn, REALLOC, 2, 1, 0, MLK_KIND_MALLOC, BY_SHAPE)                                \
    X("mi_reallocarray", mi_reallocarray, REALLOC, 2, 1, 0, MLK_KIND_MALLOC, BY_SHAPE)                        \
    X("mi_reallocf", mi_reallocf, REALLOCF, 1, NONE, 0, MLK_KIND_MALLOC, BY_SHAPE)                            \
    X("mi_rezalloc", mi_rezalloc, REALLOC, 1, NONE, 0, MLK_KIND_MALLOC, BY_SHAPE)                             \
    X("mi_recalloc", mi_recalloc, REALLOC, 2, 1, 0, MLK_KIND_MALLOC, BY_SHAPE)                                \
    X("mi_realloc_aligned", mi_realloc_aligned, REALLOC, 1, NONE, 0, MLK_KIND_MALLOC, BY_SHAPE)               \
    X("mi_realloc_aligned_at", mi_realloc_aligned_at, REALLOC, 1, NONE, 0, MLK_KIND_MALLOC, BY_SHAPE)         \
    X("mi_rezalloc_aligned", mi_rezalloc_aligned, REALLOC, 1, NONE, 0, MLK_KIND_MALLOC, BY_SHAPE)             \
    X("mi_rezalloc_aligned_at", mi_rezalloc_aligned_at, REALLOC, 1, NONE, 0, MLK_KIND_MALLOC, BY_SHAPE)       \
    X("mi_recalloc_aligned", mi_recalloc_aligned, REALLOC, 2, 1, 0, MLK_KIND_MALLOC, BY_SHAPE)                \
    X("mi_recalloc_aligned_at", mi_recalloc_aligned_at, REALLOC, 2, 1, 0, MLK_KIND_MALLOC, BY_SHAPE)          \
    X("mi_new_realloc", mi_new_realloc, REALLOC, 1, NONE, 0, MLK_KIND_NEW, BY_SHAPE)                          \
    X("mi_new_reallocn", mi_new_reallocn, REALLOC, 2, 1, 0, MLK_KIND_NEW, BY_SHAPE)                           \
    X("mi_expand", mi_expand, EXPAND, 1, NONE, 0, MLK_KIND_MALLOC, BY_SHAPE)                                  \
    X("mi_heap_malloc", mi_heap_malloc, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                      \
    X("mi_heap_zalloc", mi_heap_zalloc, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                      \
    X("mi_heap_malloc_small", mi_heap_malloc_small, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)          \
    X("mi_heap_calloc", mi_heap_calloc, ALLOC, 2, 1, NONE, MLK_KIND_MALLOC, BY_SHAPE)                         \
    X("mi_heap_mallocn", mi_heap_mallocn, ALLOC, 2, 1, NONE, MLK_KIND_MALLOC, BY_SHAPE)                       \
    X("mi_heap_malloc_aligned", mi_heap_malloc_aligned, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)      \
    X("mi_heap_malloc_aligned_at", mi_heap_malloc_aligned_at, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE) \
    X("mi_heap_zalloc_aligned", mi_heap_zalloc_aligned, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)      \
    X("mi_heap_zalloc_aligned_at", mi_heap_zalloc_aligned_at, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE) \
    X("mi_heap_calloc_aligned", mi_heap_calloc_aligned, ALLOC, 2, 1, NONE, MLK_KIND_MALLOC, BY_SHAPE)         \
    X("mi_heap_calloc_aligned_at", mi_heap_calloc_aligned_at, ALLOC, 2, 1, NONE, MLK_KIND_MALLOC, BY_SHAPE)   \
    X("mi_heap_alloc_new", mi_heap_alloc_new, ALLOC, 1, NONE, NONE, MLK_KIND_NEW, BY_SHAPE)                   \
    X("mi_heap_alloc_new_n", mi_heap_alloc_new_n, ALLOC, 2, 1, NONE, MLK_KIND_NEW, BY_SHAPE)                  \
    X("mi_heap_strdup", mi_heap_strdup, STRDUP, NONE, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                  \
    X("mi_heap_strndup", mi_heap_strndup, STRDUP, NONE, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                \
    X("mi_heap_realpath", mi_heap_realpath, REALPATH, NONE, NONE, 2, MLK_KIND_MALLOC, BY_SHAPE)               \
    X("mi_heap_realloc", mi_heap_realloc, REALLOC, 2, NONE, 1, MLK_KIND_MALLOC, BY_SHAPE)                     \
    X("mi_heap_reallocn", mi_heap_reallocn, REALLOC, 3, 2, 1, MLK_KIND_MALLOC, BY_SHAPE)                      \
    X("mi_heap_reallocf", mi_heap_reallocf, REALLOCF, 2, NONE, 1, MLK_KIND_MALLOC, BY_SHAPE)                  \
    X("mi_heap_rezalloc", mi_heap_rezalloc, REALLOC, 2, NONE, 1, MLK_KIND_MALLOC, BY_SHAPE)                   \
    X("mi_heap_recalloc", mi_heap_recalloc, REALLOC, 3, 2, 1, MLK_KIND_MALLOC, BY_SHAPE)                      \
    X("mi_heap_realloc_aligned", mi_heap_realloc_aligned, REALLOC, 2, NONE, 1, MLK_KIND_MALLOC, BY_SHAPE)     \
    X("mi_heap_realloc_aligned_at", mi_heap_realloc_aligned_at, REALLOC, 2, NONE, 1, MLK_KIND_MALLOC, BY_SHAPE) \
    X("mi_heap_rezalloc_aligned", mi_heap_rezalloc_aligned, REALLOC, 2, NONE, 1, MLK_KIND_MALLOC, BY_SHAPE)   \
    X("mi_heap_rezalloc_aligned_at", mi_heap_rezalloc_aligned_at, REALLOC, 2, NONE, 1, MLK_KIND_MALLOC, BY_SHAPE) \
    X("mi_heap_recalloc_aligned", mi_heap_recalloc_aligned, REALLOC, 3, 2, 1, MLK_KIND_MALLOC, BY_SHAPE)      \
    X("mi_heap_recalloc_aligned_at", mi_heap_recalloc_aligned_at, REALLOC, 3, 2, 1, MLK_KIND_MALLOC, BY_SHAPE) \
    X("mi_free", mi_free, FREE, NONE, NONE, 0, 0, BY_SHAPE)                                                   \
    X("mi_cfree", mi_cfree, FREE, NONE, NONE, 0, 0, BY_SHAPE)                                                 \
    X("mi_free_size", mi_free_size, FREE, NONE, NONE, 0, 0, BY_SHAPE)                                         \
    X("mi_free_aligned", mi_free_aligned, FREE, NONE, NONE, 0, 0, BY_SHAPE)                                   \
    X("mi_free_size_aligned", mi_free_size_aligned, FREE, NONE, NONE, 0, 0, BY_SHAPE)                         \
    X("mi_heap_destroy", mi_heap_destroy, HEAP_DESTROY, NONE, NONE, 0, 0, BY_SHAPE)

/* jemalloc's API under one prefix: "" (Debian's libjemalloc), "je_", "_rjem_" (Rust). */
#define JE(X, p, P)                                                                                \
    X(#p "mallocx", P##mallocx, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                              \
    X(#p "rallocx", P##rallocx, REALLOC, 1, NONE, 0, MLK_KIND_MALLOC, BY_SHAPE)                               \
    X(#p "xallocx", P##xallocx, XALLOCX, 1, NONE, 0, MLK_KIND_MALLOC, BY_SHAPE)                               \
    X(#p "dallocx", P##dallocx, FREE, NONE, NONE, 0, 0, BY_SHAPE)                                             \
    X(#p "sdallocx", P##sdallocx, FREE, NONE, NONE, 0, 0, BY_SHAPE)
#define JE_PREFIXED(X, p, P)                                                                       \
    JE(X, p, P)                                                                                    \
    X(#p "malloc", P##malloc, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                                \
    X(#p "calloc", P##calloc, ALLOC, 1, 0, NONE, MLK_KIND_MALLOC, BY_SHAPE)                                   \
    X(#p "realloc", P##realloc, REALLOC, 1, NONE, 0, MLK_KIND_MALLOC, BY_SHAPE)                               \
    X(#p "free", P##free, FREE, NONE, NONE, 0, 0, BY_SHAPE)                                                   \
    X(#p "posix_memalign", P##posix_memalign, POSIX_ALIGN, 2, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)          \
    X(#p "aligned_alloc", P##aligned_alloc, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                  \
    X(#p "memalign", P##memalign, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                            \
    X(#p "valloc", P##valloc, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)

#define TC(X)                                                                                      \
    X("tc_malloc", tc_malloc, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                                \
    X("tc_malloc_skip_new_handler", tc_malloc_skip_new_handler, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE) \
    X("tc_calloc", tc_calloc, ALLOC, 1, 0, NONE, MLK_KIND_MALLOC, BY_SHAPE)                                   \
    X("tc_memalign", tc_memalign, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                            \
    X("tc_valloc", tc_valloc, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                                \
    X("tc_pvalloc", tc_pvalloc, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                              \
    X("tc_posix_memalign", tc_posix_memalign, POSIX_ALIGN, 2, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)          \
    X("tc_realloc", tc_realloc, REALLOC, 1, NONE, 0, MLK_KIND_MALLOC, BY_SHAPE)                               \
    X("tc_new", tc_new, ALLOC, 0, NONE, NONE, MLK_KIND_NEW, BY_SHAPE)                                         \
    X("tc_newarray", tc_newarray, ALLOC, 0, NONE, NONE, MLK_KIND_NEW, BY_SHAPE)                               \
    X("tc_new_nothrow", tc_new_nothrow, ALLOC, 0, NONE, NONE, MLK_KIND_NEW, BY_SHAPE)                         \
    X("tc_newarray_nothrow", tc_newarray_nothrow, ALLOC, 0, NONE, NONE, MLK_KIND_NEW, BY_SHAPE)               \
    X("tc_new_aligned", tc_new_aligned, ALLOC, 0, NONE, NONE, MLK_KIND_NEW, BY_SHAPE)                         \
    X("tc_newarray_aligned", tc_newarray_aligned, ALLOC, 0, NONE, NONE, MLK_KIND_NEW, BY_SHAPE)               \
    X("tc_new_aligned_nothrow", tc_new_aligned_nothrow, ALLOC, 0, NONE, NONE, MLK_KIND_NEW, BY_SHAPE)         \
    X("tc_newarray_aligned_nothrow", tc_newarray_aligned_nothrow, ALLOC, 0, NONE, NONE, MLK_KIND_NEW, BY_SHAPE) \
    X("tc_free", tc_free, FREE, NONE, NONE, 0, 0, BY_SHAPE)                                                   \
    X("tc_cfree", tc_cfree, FREE, NONE, NONE, 0, 0, BY_SHAPE)                                                 \
    X("tc_free_sized", tc_free_sized, FREE, NONE, NONE, 0, 0, BY_SHAPE)                                       \
    X("tc_delete", tc_delete, FREE, NONE, NONE, 0, 0, BY_SHAPE)                                               \
    X("tc_deletearray", tc_deletearray, FREE, NONE, NONE, 0, 0, BY_SHAPE)                                     \
    X("tc_delete_nothrow", tc_delete_nothrow, FREE, NONE, NONE, 0, 0, BY_SHAPE)                               \
    X("tc_deletearray_nothrow", tc_deletearray_nothrow, FREE, NONE, NONE, 0, 0, BY_SHAPE)                     \
    X("tc_delete_sized", tc_delete_sized, FREE, NONE, NONE, 0, 0, BY_SHAPE)                                   \
    X("tc_deletearray_sized", tc_deletearray_sized, FREE, NONE, NONE, 0, 0, BY_SHAPE)                         \
    X("tc_delete_aligned", tc_delete_aligned, FREE, NONE, NONE, 0, 0, BY_SHAPE)                               \
    X("tc_deletearray_aligned", tc_deletearray_aligned, FREE, NONE, NONE, 0, 0, BY_SHAPE)                     \
    X("tc_delete_sized_aligned", tc_delete_sized_aligned, FREE, NONE, NONE, 0, 0, BY_SHAPE)                   \
    X("tc_deletearray_sized_aligned", tc_deletearray_sized_aligned, FREE, NONE, NONE, 0, 0, BY_SHAPE)         \
    X("tc_delete_aligned_nothrow", tc_delete_aligned_nothrow, FREE, NONE, NONE, 0, 0, BY_SHAPE)               \
    X("tc_deletearray_aligned_nothrow", tc_deletearray_aligned_nothrow, FREE, NONE, NONE, 0, 0, BY_SHAPE)

/* mozjemalloc's arenas (Firefox's libmozglue or executable): each
 * JavaScript ArrayBuffer is a 1 MB moz_arena_calloc that never passes
 * through malloc.  The arena is the first argument. */
#define MOZ(X)                                                                                     \
    X("moz_arena_malloc", moz_arena_malloc, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)                  \
    X("moz_arena_calloc", moz_arena_calloc, ALLOC, 2, 1, NONE, MLK_KIND_MALLOC, BY_SHAPE)                     \
    X("moz_arena_realloc", moz_arena_realloc, REALLOC, 2, NONE, 1, MLK_KIND_MALLOC, BY_SHAPE)                 \
    X("moz_arena_memalign", moz_arena_memalign, ALLOC, 2, NONE, NONE, MLK_KIND_MALLOC, BY_SHAPE)              \
    X("moz_arena_free", moz_arena_free, FREE, NONE, NONE, 1, 0, BY_SHAPE)

/* The families called by their own names, in any module that defines them. */
#define FAMILIES(X) MI(X) JE(X, , ) JE_PREFIXED(X, je_, je_) JE_PREFIXED(X, _rjem_, _rjem_) TC(X) MOZ(X)
#define ALL(X) USUAL(X) FAMILIES(X)

#endif
