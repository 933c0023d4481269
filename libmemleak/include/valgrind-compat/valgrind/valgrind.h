/* libmemleak's stand-in for valgrind's <valgrind/valgrind.h>.
 *
 * `libmemleak cflags --valgrind` puts this directory ahead of the real
 * headers, so a program built with valgrind annotations (PostgreSQL's
 * USE_VALGRIND, LMDB's, a pool allocator's) has them served by libmemleak
 * when it runs under the tracer, and does nothing at all without it:
 *
 *   VALGRIND_MALLOCLIKE_BLOCK, _FREELIKE_BLOCK, _RESIZEINPLACE_BLOCK
 *   VALGRIND_CREATE_MEMPOOL(_EXT), _DESTROY_MEMPOOL, _MEMPOOL_ALLOC, _FREE,
 *   _TRIM, _MOVE_MEMPOOL, _MEMPOOL_CHANGE, _MEMPOOL_EXISTS
 *       -> memleak.h's custom blocks and pools (docs/api.md)
 *
 * Everything else a program may ask valgrind for compiles and does what
 * valgrind's own macros do on a machine without valgrind: nothing, with
 * valgrind's default result.  RUNNING_ON_VALGRIND is 0 -- the program is
 * not running on valgrind, and must not switch to code paths meant for it
 * (CPython's pymalloc would stop pooling).  The request numbers and the
 * client-request mechanism are not defined: a program that builds its own
 * requests with VALGRIND_DO_CLIENT_REQUEST gets valgrind's default. */
#ifndef __VALGRIND_H
#define __VALGRIND_H

#include "../../memleak.h"

/* The version of valgrind's interface this header follows (3.19). */
#define __VALGRIND_MAJOR__ 3
#define __VALGRIND_MINOR__ 19

#define LIBMEMLEAK_VALGRIND_COMPAT 1

/* Raw requests: valgrind's default, the arguments evaluated for their
 * side effects as the real macros do. */
#define VALGRIND_DO_CLIENT_REQUEST_EXPR(_zzq_default, _zzq_request, _zzq_arg1, _zzq_arg2, _zzq_arg3,   \
                                        _zzq_arg4, _zzq_arg5)                                          \
    ((void)(_zzq_request), (void)(_zzq_arg1), (void)(_zzq_arg2), (void)(_zzq_arg3), (void)(_zzq_arg4), \
     (void)(_zzq_arg5), (_zzq_default))
#define VALGRIND_DO_CLIENT_REQUEST_STMT(_zzq_request, _zzq_arg1, _zzq_arg2, _zzq_arg3, _zzq_arg4,      \
                                        _zzq_arg5)                                                     \
    do {                                                                                               \
        (void)VALGRIND_DO_CLIENT_REQUEST_EXPR(0, _zzq_request, _zzq_arg1, _zzq_arg2, _zzq_arg3,        \
                                              _zzq_arg4, _zzq_arg5);                                   \
    } while (0)
#define VALGRIND_DO_CLIENT_REQUEST(_zzq_rlval, _zzq_default, _zzq_request, _zzq_arg1, _zzq_arg2,       \
                                   _zzq_arg3, _zzq_arg4, _zzq_arg5)                                    \
    do {                                                                                               \
        (_zzq_rlval) = VALGRIND_DO_CLIENT_REQUEST_EXPR(_zzq_default, _zzq_request, _zzq_arg1,          \
                                                       _zzq_arg2, _zzq_arg3, _zzq_arg4, _zzq_arg5);    \
    } while (0)

#define RUNNING_ON_VALGRIND 0
#define VALGRIND_DISCARD_TRANSLATIONS(_qzz_addr, _qzz_len) ((void)(_qzz_addr), (void)(_qzz_len))
#define VALGRIND_INNER_THREADS(_qzz_addr) ((void)(_qzz_addr))
#define VALGRIND_COUNT_ERRORS 0u
#define VALGRIND_DISABLE_ERROR_REPORTING ((void)0)
#define VALGRIND_ENABLE_ERROR_REPORTING ((void)0)
#define VALGRIND_MONITOR_COMMAND(command) ((void)(command), 0)
#define VALGRIND_CLO_CHANGE(option) ((void)(option))
#define VALGRIND_STACK_REGISTER(start, end) ((void)(start), (void)(end), 0u)
#define VALGRIND_STACK_DEREGISTER(id) ((void)(id))
#define VALGRIND_STACK_CHANGE(id, start, end) ((void)(id), (void)(start), (void)(end))
#define VALGRIND_LOAD_PDB_DEBUGINFO(fd, ptr, total_size, delta)                                      \
    ((void)(fd), (void)(ptr), (void)(total_size), (void)(delta))
#define VALGRIND_MAP_IP_TO_SRCLOC(addr, buf64) ((void)(addr), (void)(buf64), 0u)
#define VALGRIND_CHANGE_ERR_DISABLEMENT(_qzz_delta) ((void)(_qzz_delta))
#define VALGRIND_NON_SIMD_CALL0(_qyy_fn) 0ul
#define VALGRIND_NON_SIMD_CALL1(_qyy_fn, _qyy_arg1) ((void)(_qyy_arg1), 0ul)
#define VALGRIND_NON_SIMD_CALL2(_qyy_fn, _qyy_arg1, _qyy_arg2) ((void)(_qyy_arg1), (void)(_qyy_arg2), 0ul)
#define VALGRIND_NON_SIMD_CALL3(_qyy_fn, _qyy_arg1, _qyy_arg2, _qyy_arg3)                            \
    ((void)(_qyy_arg1), (void)(_qyy_arg2), (void)(_qyy_arg3), 0ul)

/* valgrind's printf family prints only under valgrind: 0 characters. */
static inline int memleak__vg_printf(const char *format, ...)
{
    (void)format;
    return 0;
}
#define VALGRIND_PRINTF memleak__vg_printf
#define VALGRIND_PRINTF_BACKTRACE memleak__vg_printf

/* ---- the heap-block and pool requests: libmemleak's custom blocks ---- */

/* The block's redzone (rzB) and zeroing only matter to valgrind's own
 * error checks. */
#define VALGRIND_MALLOCLIKE_BLOCK(addr, sizeB, rzB, is_zeroed)                                       \
    do {                                                                                               \
        (void)(rzB);                                                                                   \
        (void)(is_zeroed);                                                                             \
        memleak_malloclike(addr, sizeB);                                                               \
    } while (0)
#define VALGRIND_FREELIKE_BLOCK(addr, rzB)                                                           \
    do {                                                                                               \
        (void)(rzB);                                                                                   \
        memleak_freelike(addr);                                                                        \
    } while (0)
#define VALGRIND_RESIZEINPLACE_BLOCK(addr, oldSizeB, newSizeB, rzB)                                  \
    do {                                                                                               \
        (void)(rzB);                                                                                   \
        memleak_resize(addr, oldSizeB, newSizeB);                                                      \
    } while (0)

#define VALGRIND_MEMPOOL_AUTO_FREE MEMLEAK_POOL_AUTO_FREE
#define VALGRIND_MEMPOOL_METAPOOL MEMLEAK_POOL_METAPOOL
#define VALGRIND_CREATE_MEMPOOL(pool, rzB, is_zeroed)                                                \
    do {                                                                                               \
        (void)(rzB);                                                                                   \
        (void)(is_zeroed);                                                                             \
        memleak_pool_create(pool, 0);                                                                  \
    } while (0)
#define VALGRIND_CREATE_MEMPOOL_EXT(pool, rzB, is_zeroed, flags)                                     \
    do {                                                                                               \
        (void)(rzB);                                                                                   \
        (void)(is_zeroed);                                                                             \
        memleak_pool_create(pool, flags);                                                              \
    } while (0)
#define VALGRIND_DESTROY_MEMPOOL(pool) memleak_pool_destroy(pool)
#define VALGRIND_MEMPOOL_ALLOC(pool, addr, size) memleak_pool_alloc(pool, addr, size)
#define VALGRIND_MEMPOOL_FREE(pool, addr) memleak_pool_free(pool, addr)
#define VALGRIND_MEMPOOL_TRIM(pool, addr, size) memleak_pool_trim(pool, addr, size)
#define VALGRIND_MOVE_MEMPOOL(poolA, poolB) memleak_pool_move(poolA, poolB)
#define VALGRIND_MEMPOOL_CHANGE(pool, addrA, addrB, size) memleak_pool_change(pool, addrA, addrB, size)
#define VALGRIND_MEMPOOL_EXISTS(pool) memleak_pool_exists((const void *)(pool))

#endif
