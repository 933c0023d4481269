/* libmemleak's stand-in for valgrind's <valgrind/memcheck.h> (see
 * valgrind.h beside it).
 *
 *   VALGRIND_DO_LEAK_CHECK and its ADDED, CHANGED, NEW and QUICK forms
 *       -> memleak_leak_check: a reachability scan now, written as a report
 *          (reason check).  The forms differ only in what valgrind prints;
 *          the report is the same, its entries the change since the last.
 *   VALGRIND_COUNT_LEAKS, VALGRIND_COUNT_LEAK_BLOCKS
 *       -> the last check's totals: leaked = definitely + indirectly lost,
 *          dubious = possibly lost, reachable = still reachable,
 *          suppressed = 0 (libmemleak suppresses in `report`, not here);
 *          all 0 with no check made.
 *
 * The memory-state requests (MAKE_MEM_*, CHECK_*, GET/SET_VBITS, ...) are
 * valgrind's business and do nothing here, with valgrind's default results:
 * the checks find nothing wrong, GET/SET_VBITS say "not on valgrind" (0). */
#ifndef __MEMCHECK_H
#define __MEMCHECK_H

#include "valgrind.h"

#define VALGRIND_MAKE_MEM_NOACCESS(_qzz_addr, _qzz_len) ((void)(_qzz_addr), (void)(_qzz_len), 0)
#define VALGRIND_MAKE_MEM_UNDEFINED(_qzz_addr, _qzz_len) ((void)(_qzz_addr), (void)(_qzz_len), 0)
#define VALGRIND_MAKE_MEM_DEFINED(_qzz_addr, _qzz_len) ((void)(_qzz_addr), (void)(_qzz_len), 0)
#define VALGRIND_MAKE_MEM_DEFINED_IF_ADDRESSABLE(_qzz_addr, _qzz_len) ((void)(_qzz_addr), (void)(_qzz_len), 0)
#define VALGRIND_CREATE_BLOCK(_qzz_addr, _qzz_len, _qzz_desc)                                        \
    ((void)(_qzz_addr), (void)(_qzz_len), (void)(_qzz_desc), 0)
#define VALGRIND_DISCARD(_qzz_blkindex) ((void)(_qzz_blkindex), 0)
#define VALGRIND_CHECK_MEM_IS_ADDRESSABLE(_qzz_addr, _qzz_len) ((void)(_qzz_addr), (void)(_qzz_len), 0)
#define VALGRIND_CHECK_MEM_IS_DEFINED(_qzz_addr, _qzz_len) ((void)(_qzz_addr), (void)(_qzz_len), 0)
#define VALGRIND_CHECK_VALUE_IS_DEFINED(__lvalue) ((void)sizeof(__lvalue), 0)
#define VALGRIND_GET_VBITS(zza, zzvbits, zznbytes) ((void)(zza), (void)(zzvbits), (void)(zznbytes), 0)
#define VALGRIND_SET_VBITS(zza, zzvbits, zznbytes) ((void)(zza), (void)(zzvbits), (void)(zznbytes), 0)
#define VALGRIND_DISABLE_ADDR_ERROR_REPORTING_IN_RANGE(_qzz_addr, _qzz_len) ((void)(_qzz_addr), (void)(_qzz_len), 0)
#define VALGRIND_ENABLE_ADDR_ERROR_REPORTING_IN_RANGE(_qzz_addr, _qzz_len) ((void)(_qzz_addr), (void)(_qzz_len), 0)

static inline void memleak__vg_leak_check(void)
{
    struct memleak_leaks ignored;
    (void)memleak_leak_check(&ignored);
}
#define VALGRIND_DO_LEAK_CHECK memleak__vg_leak_check()
#define VALGRIND_DO_ADDED_LEAK_CHECK memleak__vg_leak_check()
#define VALGRIND_DO_CHANGED_LEAK_CHECK memleak__vg_leak_check()
#define VALGRIND_DO_NEW_LEAK_CHECK memleak__vg_leak_check()
#define VALGRIND_DO_QUICK_LEAK_CHECK memleak__vg_leak_check()

/* valgrind's four lvalues, bytes or blocks, from the last check.  (The
 * parameters are named as no field is: a parameter named `reachable`
 * would replace the field's name too, whatever the caller passed.) */
#define memleak__vg_count(_qzz_leaked, _qzz_dubious, _qzz_reachable, _qzz_suppressed, _qzz_field)   \
    do {                                                                                               \
        struct memleak_leaks memleak__l;                                                               \
        (void)memleak_last_check(&memleak__l);                                                         \
        (_qzz_leaked) = memleak__l.definitely._qzz_field + memleak__l.indirectly._qzz_field;           \
        (_qzz_dubious) = memleak__l.possibly._qzz_field;                                               \
        (_qzz_reachable) = memleak__l.reachable._qzz_field;                                            \
        (_qzz_suppressed) = 0;                                                                         \
    } while (0)
#define VALGRIND_COUNT_LEAKS(_qzz_leaked, _qzz_dubious, _qzz_reachable, _qzz_suppressed)             \
    memleak__vg_count(_qzz_leaked, _qzz_dubious, _qzz_reachable, _qzz_suppressed, bytes)
#define VALGRIND_COUNT_LEAK_BLOCKS(_qzz_leaked, _qzz_dubious, _qzz_reachable, _qzz_suppressed)       \
    memleak__vg_count(_qzz_leaked, _qzz_dubious, _qzz_reachable, _qzz_suppressed, blocks)

#endif
