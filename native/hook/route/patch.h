/* Entry patching: make a function's first instruction a jump to a hook,
 * and keep its overwritten instructions, moved, in a trampoline that
 * continues into the rest of it (Frida's interceptor and funchook work this
 * way; this is our own, decoding with Capstone). */
#ifndef MLK_ROUTE_PATCH_H
#define MLK_ROUTE_PATCH_H

#include <stddef.h>
#include <stdint.h>

/* A patch made ready and not yet written: the function's first `moved`
 * bytes are to become a jump to `stub` (which jumps to the hook); `tramp`
 * runs the original function -- before the patch is written as after. */
struct mlk_patch {
    uint8_t *fn;
    size_t moved;
    uint8_t *stub;
    void *tramp;
};

/* Makes ready the routing of the function at `fn` (`size` bytes, as its
 * symbol says) to `hook`: decodes its first instructions, builds the stub
 * and the trampoline.  Nothing of the function is written.  0, or -1 with
 * the reason in `why` ("a jump inside it lands in its first bytes", ...).
 * May call the loader (dladdr) and map memory. */
int mlk_patch_prepare(uint8_t *fn, size_t size, void *hook, struct mlk_patch *plan, char *why, size_t why_len);

/* Writes a prepared patch: *original is set to the trampoline, then the
 * jump written.  System calls and stores only -- no lock, no loader, no
 * malloc -- so that it may run while the program's other threads are
 * stopped wherever they were (an attach).  0, or -1 (mprotect refused:
 * nothing written, *original NULL again). */
int mlk_patch_commit(const struct mlk_patch *plan, void **original);

/* Writes `len` bytes of code at `at` (text made writable for the
 * moment): one 8-byte store when they sit in one aligned word, so that a
 * thread racing through sees old or new, never half; else byte by byte --
 * at start-up no other thread runs the allocator.  0, or -1 (mprotect
 * refused). */
int mlk_code_write(uint8_t *at, const uint8_t *bytes, size_t len);

/* Whether the function at `fn` is only a jump elsewhere (aligned_alloc
 * compiled to `jmp memalign`): 1 and its destination in `target`. */
int mlk_entry_forwards(const uint8_t *fn, size_t size, uint64_t *target);

#endif
