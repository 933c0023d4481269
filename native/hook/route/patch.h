/* Entry patching: make a function's first instruction a jump to a hook,
 * and keep its overwritten instructions, moved, in a trampoline that
 * continues into the rest of it (Frida's interceptor and funchook work this
 * way; this is our own, decoding with Capstone). */
#ifndef MLK_ROUTE_PATCH_H
#define MLK_ROUTE_PATCH_H

#include <stddef.h>
#include <stdint.h>

/* Routes calls of the function at `fn` (`size` bytes, as its symbol says)
 * to `hook`.  Returns the address that runs the original function -- also
 * stored in *original before the jump is written, where the hook finds it
 * -- or NULL with the reason in `why` ("its first 5 bytes are a jump
 * target", ...): the function is then left untouched. */
void *mlk_patch_entry(uint8_t *fn, size_t size, void *hook, void **original, char *why, size_t why_len);

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
