/* Go with cgo: the walk from C code back into the Go code that called it
 * (#60, docs/languages.md).
 *
 * A cgo call runs its C function on the thread's system stack: Go's
 * runtime.asmcgocall switches stacks and calls it, so a walk from malloc
 * reaches asmcgocall's return address and finds no unwind table there (Go
 * writes none for its code) -- the stack stopped at asmcgocall.  Right
 * after that call asmcgocall switches back, and the instructions that do it
 * say where everything is:
 *
 *     mov  rdi, [rsp + G]      the goroutine (its g), saved before the call
 *     mov  rsi, [rdi + H]      its stack's top (g.stack.hi; .lo just below)
 *     sub  rsi, [rsp + D]      less the depth saved: the goroutine's sp
 *
 * So the offsets are read from the program's own code, in whatever Go
 * version built it, never assumed; code that is not exactly this is no
 * switch (the walk ends there, as before).  From the goroutine's sp: the
 * return address into runtime.cgocall, and on by the frame-pointer chain
 * Go keeps on x86-64 ([rbp] the caller's rbp, [rbp + 8] the return
 * address), every frame checked to lie on that goroutine's stack.  rbp at
 * the switch is cgocall's own (asmcgocall keeps no frame; the C frames
 * restore it).  The goroutine's stack stays where it is meanwhile: Go does
 * not move the stack of a goroutine inside a cgo call (it is "in a
 * syscall").
 *
 * Walks through a switch are libgcc's (unwind_cfi.c gives the address a
 * rule "not understood"): they are made whole each time, never remembered
 * by the fast walk, whose remembered walks check a step by the two words
 * it read -- a switch reads five, on a stack that differs per goroutine. */
#define _GNU_SOURCE
#include <string.h>
#include <sys/mman.h>

#include "../mlk.h"
#include "../unwind_cfi.h"
#include "go.h"

#if defined(__x86_64__)

#define SWITCH_BYTES 14

/* The switches found so far (a program has one: asmcgocall's), so that a
 * libgcc walk -- every frame of one asks -- knows them by one compare;
 * more than fit are looked at again each time. */
#define KNOWN_MAX 4
static uint64_t known[KNOWN_MAX];
static int known_full;

static void note_known(uint64_t ra)
{
    for (int i = 0; i < KNOWN_MAX; i++) {
        uint64_t was = __atomic_load_n(&known[i], __ATOMIC_RELAXED);
        if (was == ra)
            return;
        if (!was && __atomic_compare_exchange_n(&known[i], &was, ra, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return;
        if (was == ra)
            return;
    }
    __atomic_store_n(&known_full, 1, __ATOMIC_RELAXED);
}

/* The switch's offsets from its instructions at ra (whose bytes are known
 * to be mapped), or 0: they are not the switch. */
static int decode(uint64_t ra, struct mlk_go_switch *sw)
{
    const unsigned char *p = (const unsigned char *)ra;
    static const unsigned char load_g[] = {0x48, 0x8b, 0x7c, 0x24};   /* mov rdi, [rsp + disp8] */
    static const unsigned char load_hi[] = {0x48, 0x8b, 0x77};        /* mov rsi, [rdi + disp8] */
    static const unsigned char sub_depth[] = {0x48, 0x2b, 0x74, 0x24}; /* sub rsi, [rsp + disp8] */
    if (memcmp(p, load_g, 4) != 0 || memcmp(p + 5, load_hi, 3) != 0 || memcmp(p + 9, sub_depth, 4) != 0)
        return 0;
    int g = p[4], hi = p[8], depth = p[13];
    /* (Offsets as asmcgocall has them: positive, 8-aligned; .lo below .hi.) */
    if (g >= 128 || depth >= 128 || hi >= 128 || hi < 8 || (g | hi | depth) & 7)
        return 0;
    if (sw)
        *sw = (struct mlk_go_switch){g, hi, depth};
    return 1;
}

int mlk_go_switch_known(uint64_t ra, struct mlk_go_switch *sw)
{
    for (int i = 0; i < KNOWN_MAX; i++) {
        uint64_t k = __atomic_load_n(&known[i], __ATOMIC_RELAXED);
        if (k == ra)
            return decode(ra, sw); /* (its bytes were found mapped when it was noted) */
        if (!k)
            break;
    }
    /* (The rules' walk finds a switch before libgcc is asked; told to use
     * libgcc alone, or with more switches than kept, every frame is looked at.) */
    return (__atomic_load_n(&known_full, __ATOMIC_RELAXED) || mlk_unwind_mode != MLK_UNWIND_FAST) &&
           mlk_go_switch_at(ra, sw);
}

/* The three instructions of the switch back at return address ra, if they
 * are there: their offsets. */
int mlk_go_switch_at(uint64_t ra, struct mlk_go_switch *sw)
{
    if (ra < 4096 || !mlk_in_loaded_object(ra))
        return 0;
    /* (ra's page is mapped -- code returns there; the next one is asked
     * about before the pattern is read across into it.) */
    uint64_t page = ra & ~4095ull;
    if ((ra + SWITCH_BYTES - 1) >> 12 != ra >> 12) {
        unsigned char in_core;
        if (mincore((void *)(page + 4096), 1, &in_core) != 0)
            return 0;
    }
    if (!decode(ra, sw))
        return 0;
    note_known(ra);
    return 1;
}

/* The Go frames above a switch (sw: its offsets), whose frame's sp and
 * rbp are given (as the C frames below left them): written to ips, at most
 * max of them; how many.  *truncated when more followed. */
int mlk_go_frames(const struct mlk_go_switch *sw, uint64_t sp, uint64_t bp, uint64_t *ips, int max,
                  int *truncated)
{
    if (max <= 0 || (sp & 7))
        return 0;
    const char *g = *(const char *const *)(sp + (uint64_t)sw->g);
    if (!g || ((uint64_t)g & 7))
        return 0;
    uint64_t hi = *(const uint64_t *)(g + sw->hi), lo = *(const uint64_t *)(g + sw->hi - 8);
    uint64_t depth = *(const uint64_t *)(sp + (uint64_t)sw->depth), at = hi - depth;
    if (lo >= hi || (at & 7) || at < lo || at > hi - 8 || hi - lo > (1ull << 30))
        return 0;
    int n = 0;
    ips[n++] = *(const uint64_t *)at; /* into runtime.cgocall */
    /* On by the frame-pointer chain, strictly upwards on the goroutine's stack. */
    while (bp > at && bp <= hi - 16 && !(bp & 7)) {
        const uint64_t *frame = (const uint64_t *)bp;
        if (frame[1] < 4096)
            break;
        if (n == max) {
            *truncated = 1;
            break;
        }
        ips[n++] = frame[1];
        at = bp;
        bp = frame[0];
    }
    return n;
}

#else

int mlk_go_switch_at(uint64_t ra, struct mlk_go_switch *sw) { return 0; }
int mlk_go_switch_known(uint64_t ra, struct mlk_go_switch *sw) { return 0; }
int mlk_go_frames(const struct mlk_go_switch *sw, uint64_t sp, uint64_t bp, uint64_t *ips, int max,
                  int *truncated)
{
    return 0;
}

#endif
