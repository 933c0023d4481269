/* Between the unwinder's files: unwind_cfi.c reads the unwind tables
 * (the FDE of an address, its CFA program run up to it) and keeps libgcc's
 * backtrace as the fallback; unwind_fp.c steps by frame pointers where no
 * table covers the code; unwind.c walks stacks fast with the rules it
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

enum { RULE_OK, RULE_END, RULE_UNKNOWN, RULE_NO_INFO };

/* The rule at pc, computed from the unwind tables: RULE_OK (st filled),
 * RULE_END (the outermost frame), RULE_NO_INFO (no table covers pc: the
 * frame-pointer fallback's turn, unwind_fp.c) or RULE_UNKNOWN (what the
 * fast walk does not do: libgcc's turn). */
MLK_HIDDEN int mlk_compute_rule(uint64_t pc, struct rule_state *st);
/* A module was unloaded: the marks left in long CFA programs (see
 * unwind_cfi.c) are not to be trusted any more. */
MLK_HIDDEN void mlk_cfa_forget(void);
/* Is pc inside an object the loader mapped (the executable or a library)? */
MLK_HIDDEN int mlk_in_loaded_object(uint64_t pc);
/* _dl_find_object's answer for addr: 1, with the object's start and its
 * struct link_map; 0, in no object; -1, no _dl_find_object (glibc < 2.35). */
MLK_HIDDEN int mlk_find_object(const void *addr, void **start, void **link_map);
/* One step by the frame-pointer chain from state (sp, bp), if the frame
 * at bp checks out: 1 with the return address and the caller's rbp,
 * MLK_FP_STEP_BP_UNSURE when that rbp is not on the stack above, 0 when
 * the frame does not check out (the walk ends). */
#define MLK_FP_STEP_BP_UNSURE 2
/* The end of this thread's stack when sp lies on it and its extent is
 * known (see unwind_fp.c), else 0. */
MLK_HIDDEN uint64_t mlk_fp_stack_end(uint64_t sp);
MLK_HIDDEN int mlk_fp_step(uint64_t sp, uint64_t bp, uint64_t *ra, uint64_t *caller_bp);
MLK_HIDDEN void mlk_fp_init(void); /* the main thread's stack extent */
/* libgcc's _Unwind_Backtrace, the fallback for all the rest. */
MLK_HIDDEN int mlk_libgcc_backtrace(uint64_t *ips, int max, int *truncated);

#endif
