/* The backtrace of the current thread, behind one function so the method can
 * change without touching its callers.
 *
 * Now: libgcc's _Unwind_Backtrace, which reads .eh_frame and so works for
 * code built without frame pointers (most distribution libraries).  With
 * glibc >= 2.35 it finds FDEs through _dl_find_object, without the loader
 * lock and without allocating.  It is the robust baseline; a cached
 * .eh_frame unwinder is the planned fast path (issue 4). */
#define _GNU_SOURCE
#include <unwind.h>

#include "mlk.h"

struct collect {
    uint64_t *ips;
    int max;
    int n;
    int truncated;
};

static _Unwind_Reason_Code collect_one(struct _Unwind_Context *ctx, void *arg)
{
    struct collect *c = arg;
    int before_insn = 0;
    uint64_t ip = (uint64_t)_Unwind_GetIPInfo(ctx, &before_insn);
    if (ip == 0)
        return _URC_END_OF_STACK;
    if (mlk_is_self_address(ip)) {
        if (c->n == 0)
            return _URC_NO_REASON; /* our own hook frames: not the program's */
    }
    if (c->n >= c->max) {
        c->truncated = 1;
        return _URC_END_OF_STACK;
    }
    /* A signal frame's IP is the interrupted instruction itself, not a
     * return address; the reporter subtracts one from every address to find
     * the call instruction, so add one here to keep that rule uniform. */
    c->ips[c->n++] = before_insn ? ip + 1 : ip;
    return _URC_NO_REASON;
}

int mlk_backtrace(uint64_t *ips, int max, int *truncated)
{
    struct collect c = {ips, max, 0, 0};
    _Unwind_Backtrace(collect_one, &c);
    *truncated = c.truncated;
    return c.n;
}
