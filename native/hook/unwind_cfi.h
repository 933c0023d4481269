/* Between the unwinder's two files: unwind_cfi.c reads the unwind tables
 * (the FDE of an address, its CFA program run up to it) and keeps libgcc's
 * backtrace as the fallback; unwind.c walks stacks fast with the rules it
 * computes, cached.  Reading the tables runs once per return address, the
 * walk on every allocation: only the walk is hot. */
#ifndef MLK_UNWIND_CFI_H
#define MLK_UNWIND_CFI_H

#include <stdint.h>

#include "mlk.h"

#define REG_RBP 6
#define REG_RSP 7
#define REG_RA 16

struct rule_state {
    int cfa_reg;     /* REG_RSP or REG_RBP */
    int64_t cfa_off;
    int rbp_saved;   /* rbp at CFA + rbp_off, else unchanged */
    int64_t rbp_off;
    int ra_saved;
    int64_t ra_off;
    int ra_undefined; /* the outermost frame */
};

enum { RULE_OK, RULE_END, RULE_UNKNOWN };

/* The rule at pc, computed from the unwind tables: RULE_OK (st filled),
 * RULE_END (the outermost frame, or no unwind information) or
 * RULE_UNKNOWN (what the fast walk does not do: libgcc's turn). */
MLK_HIDDEN int mlk_compute_rule(uint64_t pc, struct rule_state *st);
/* libgcc's _Unwind_Backtrace, the fallback for all the rest. */
MLK_HIDDEN int mlk_libgcc_backtrace(uint64_t *ips, int max, int *truncated);

#endif
