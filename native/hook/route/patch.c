/* Entry patching (patch.h).  For a function F:
 *
 *   F:      jmp rel32 stub          5 bytes; the rest of the moved
 *           int3 ...                instructions' bytes become int3
 *   stub:   jmp [rip+0]; .quad hook
 *   tramp:  F's first instructions, moved (relative branches and
 *           RIP-relative operands re-aimed), then jmp [rip+0]; .quad F+n
 *
 * The stub and the trampoline live in a page of ours within reach of a
 * rel32 from F (+-2 GiB), so that F's patch is the shortest jump there is:
 * the fewer bytes overwritten, the fewer functions refused.  A function is
 * refused, with the reason, rather than patched on a guess: shorter than
 * the jump, an instruction that cannot move (loop, jrcxz), bytes Capstone
 * cannot decode, or a jump anywhere in the function landing inside the
 * bytes to be overwritten.  A function shorter than the jump borrows the
 * alignment padding after it, when there is enough. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "../mlk.h"
#include "decoder.h"
#include "patch.h"

#define JMP_REL32_LEN 5
#define JMP_ABS_LEN 14 /* jmp [rip+0]; .quad target */
#define SLOT 128
#define STUB_AT 0
#define TRAMP_AT 16
#define REGION (64 * 1024)
#define MAX_REGIONS 16
#define REACH ((int64_t)1 << 30) /* where a region is tried, from F: well inside rel32's 2 GiB */
#define FAR_REACH (((int64_t)1 << 31) - ((int64_t)64 << 20)) /* a free gap found in the maps may be further */

static struct region {
    uint8_t *base;
    size_t used;
} regions[MAX_REGIONS];
static int region_count;

static long sys(long n, long a, long b, long c, long d, long e, long f)
{
    return mlk_syscall6(n, a, b, c, d, e, f);
}

static int fits_rel32(int64_t delta) { return delta >= INT32_MIN && delta <= INT32_MAX; }

static void put_rel32(uint8_t *at, int64_t delta)
{
    int32_t v = (int32_t)delta;
    memcpy(at, &v, 4);
}

static uint8_t *put_jmp_abs(uint8_t *at, uint64_t target)
{
    static const uint8_t jmp_rip[6] = {0xff, 0x25, 0, 0, 0, 0};
    memcpy(at, jmp_rip, sizeof jmp_rip);
    memcpy(at + 6, &target, 8);
    return at + JMP_ABS_LEN;
}

/* A fresh mapping within REACH of `near`, tried outwards a step at a time
 * (MAP_FIXED_NOREPLACE: never over something mapped; on kernels before
 * 4.17 it is a hint, and an answer elsewhere is given back). */
static uint8_t *map_near(uint64_t near)
{
    const uint64_t step = 1 << 20;
    uint64_t origin = near & ~(step - 1);
    for (uint64_t d = step; d < (uint64_t)REACH; d += step) {
        for (int side = 0; side < 2; side++) {
            uint64_t at = side ? origin + d : origin - d;
            if (side == 0 && origin < d + step)
                continue;
            long r = sys(SYS_mmap, (long)at, REGION, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
            if (r < 0 && r > -4096)
                continue;
            if ((uint64_t)r == at)
                return (uint8_t *)r;
            sys(SYS_munmap, r, REGION, 0, 0, 0, 0);
        }
    }
    return NULL;
}

/* The free gap nearest `near` so far, for gap_near. */
struct gap_search {
    uint64_t near, prev_hi, best, best_distance;
};

static int consider_gap(uint64_t lo, uint64_t hi, void *arg)
{
    struct gap_search *g = arg;
    if (lo > g->prev_hi && lo - g->prev_hi >= REGION) { /* the gap [prev_hi, lo) */
        uint64_t at = g->near < g->prev_hi ? g->prev_hi : g->near > lo - REGION ? lo - REGION : g->near;
        at &= ~(uint64_t)(REGION - 1);
        if (at < g->prev_hi)
            at += REGION;
        uint64_t distance = at > g->near ? at - g->near : g->near - at;
        if (at + REGION <= lo && distance < g->best_distance) {
            g->best = at;
            g->best_distance = distance;
        }
    }
    if (hi > g->prev_hi)
        g->prev_hi = hi;
    return 0;
}

/* The free gap of the address space nearest `near` (/proc/self/maps, read
 * with raw calls: no malloc), as the address of REGION bytes in it within
 * FAR_REACH; 0 when there is none or the maps cannot be read (no /proc in
 * a sandbox).  Needed after start: a library dlopen'ed later sits among
 * large mappings (our own reservations, the segment, an allocator's
 * arenas) that fill the space map_near walks through. */
static uint64_t gap_near(uint64_t near)
{
    struct gap_search g = {near, 1 << 16, 0, (uint64_t)FAR_REACH};
    mlk_each_mapping(consider_gap, &g);
    return g.best;
}

static uint8_t *slot_near(uint64_t fn)
{
    static uint64_t no_room_near; /* the last function with none: its neighbours have none either */
    for (int i = 0; i < region_count; i++) {
        int64_t delta = (int64_t)((uint64_t)regions[i].base - fn);
        if (delta > -FAR_REACH && delta < FAR_REACH && regions[i].used + SLOT <= REGION) {
            sys(SYS_mprotect, (long)regions[i].base, REGION, PROT_READ | PROT_WRITE, 0, 0, 0);
            regions[i].used += SLOT;
            return regions[i].base + regions[i].used - SLOT;
        }
    }
    if (region_count == MAX_REGIONS)
        return NULL;
    if (no_room_near && (fn > no_room_near ? fn - no_room_near : no_room_near - fn) < (16u << 20))
        return NULL;
    uint8_t *base = map_near(fn); /* the first free megabyte outwards, within 1 GiB */
    uint64_t gap = base ? 0 : gap_near(fn);
    if (gap) {
        long r = sys(SYS_mmap, (long)gap, REGION, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if ((uint64_t)r == gap)
            base = (uint8_t *)r;
        else if (!(r < 0 && r > -4096))
            sys(SYS_munmap, r, REGION, 0, 0, 0, 0);
    }
    if (!base) {
        no_room_near = fn;
        return NULL;
    }
    regions[region_count].base = base;
    regions[region_count].used = SLOT;
    region_count++;
    return base;
}

static void seal(uint8_t *slot)
{
    for (int i = 0; i < region_count; i++)
        if (slot >= regions[i].base && slot < regions[i].base + REGION)
            sys(SYS_mprotect, (long)regions[i].base, REGION, PROT_READ | PROT_EXEC, 0, 0, 0);
}

static int refuse(char *why, size_t why_len, const char *what, long at)
{
    if (at >= 0)
        snprintf(why, why_len, "%s (at +%ld)", what, at);
    else
        snprintf(why, why_len, "%s", what);
    return -1;
}

/* A function shorter than the jump (a free that only returns) may borrow
 * the padding that aligns the next function: nops or int3 up to the next
 * 16-byte boundary, where no other symbol starts.  How many bytes. */
static size_t padding_after(const uint8_t *fn, size_t size)
{
    if (size >= JMP_REL32_LEN)
        return 0;
    uint64_t end = ((uint64_t)fn + size + 15) & ~15ull;
    size_t n = 0;
    struct mlk_insn in;
    while ((uint64_t)fn + size + n < end &&
           mlk_decode(fn + size + n, end - ((uint64_t)fn + size + n), (uint64_t)fn + size + n, &in) == 0 &&
           in.padding)
        n += in.len;
    Dl_info at;
    for (size_t k = 0; k < n; k++)
        if (dladdr(fn + size + k, &at) && at.dli_saddr && (const uint8_t *)at.dli_saddr != fn)
            return k; /* another symbol starts here */
    return n;
}

int mlk_entry_forwards(const uint8_t *fn, size_t size, uint64_t *target)
{
    char why[8];
    struct mlk_insn in;
    if (mlk_decoder_open(why, sizeof why) != 0 || !size ||
        mlk_decode(fn, size, (uint64_t)fn, &in) != 0 || in.kind != MLK_INSN_JMP)
        return 0;
    *target = in.target;
    return 1;
}

/* The instructions to move: at least JMP_REL32_LEN bytes of whole
 * instructions, all inside the function.  Their total length, or -1. */
static int measure_prologue(const uint8_t *fn, size_t size, struct mlk_insn *insns, int *count, char *why,
                            size_t why_len)
{
    size_t off = 0, room = size + padding_after(fn, size);
    *count = 0;
    while (off < JMP_REL32_LEN) {
        if (off >= room)
            return refuse(why, why_len, "it is shorter than the 5-byte jump that routes it", -1);
        struct mlk_insn *in = &insns[(*count)++];
        if (mlk_decode(fn + off, room - off, (uint64_t)fn + off, in) != 0)
            return refuse(why, why_len, "its first instructions cannot be decoded", (long)off);
        if (in->kind == MLK_INSN_FIXED)
            return refuse(why, why_len, "an instruction there cannot be moved (loop or jrcxz)", (long)off);
        off += in->len;
    }
    if (off > room)
        return refuse(why, why_len, "it is shorter than the 5-byte jump that routes it", -1);
    return (int)off;
}

/* No jump anywhere in the function may land inside the bytes replaced. */
static int check_jump_targets(const uint8_t *fn, size_t size, int moved, char *why, size_t why_len)
{
    uint64_t lo = (uint64_t)fn + 1, hi = (uint64_t)fn + (uint64_t)moved;
    for (size_t off = 0; off < size;) {
        struct mlk_insn in;
        if (mlk_decode(fn + off, size - off, (uint64_t)fn + off, &in) != 0)
            return refuse(why, why_len, "part of its code cannot be decoded, so its jump targets "
                          "cannot be checked", (long)off);
        if ((in.kind == MLK_INSN_JMP || in.kind == MLK_INSN_JCC || in.kind == MLK_INSN_CALL ||
             in.kind == MLK_INSN_FIXED) && in.target >= lo && in.target < hi)
            return refuse(why, why_len, "a jump inside it lands in its first bytes, which the "
                          "routing jump would overwrite", (long)off);
        off += in.len;
    }
    return 0;
}

/* Writes the moved instructions at `out` (which runs at `out` itself).
 * Returns the end, or NULL when a target is out of rel32 reach. */
static uint8_t *relocate(const uint8_t *fn, const struct mlk_insn *insns, int count, uint8_t *out)
{
    const uint8_t *src = fn;
    for (int i = 0; i < count; i++) {
        const struct mlk_insn *in = &insns[i];
        uint64_t from = (uint64_t)out;
        switch (in->kind) {
        case MLK_INSN_JMP:  /* each re-encoded in its rel32 form: e9, e8, 0f 8x */
        case MLK_INSN_CALL:
        case MLK_INSN_JCC: {
            int opcode_len = in->kind == MLK_INSN_JCC ? 2 : 1;
            int64_t delta = (int64_t)(in->target - (from + (uint64_t)opcode_len + 4));
            if (!fits_rel32(delta))
                return NULL;
            if (in->kind == MLK_INSN_JCC) {
                out[0] = 0x0f;
                out[1] = (uint8_t)(0x80 | in->cc);
            } else {
                out[0] = in->kind == MLK_INSN_JMP ? 0xe9 : 0xe8;
            }
            put_rel32(out + opcode_len, delta);
            out += opcode_len + 4;
            break;
        }
        default: /* PLAIN or END: the same bytes, a RIP-relative displacement re-aimed */
            memcpy(out, src, in->len);
            if (in->disp_offset) {
                int32_t disp;
                memcpy(&disp, src + in->disp_offset, 4);
                uint64_t target = (uint64_t)src + in->len + (int64_t)disp;
                int64_t moved = (int64_t)(target - (from + in->len));
                if (!fits_rel32(moved))
                    return NULL;
                put_rel32(out + in->disp_offset, moved);
            }
            out += in->len;
        }
        src += in->len;
    }
    return out;
}

int mlk_code_write(uint8_t *at, const uint8_t *bytes, size_t len)
{
    uint64_t page = (uint64_t)at & ~4095ull, end = ((uint64_t)at + len + 4095) & ~4095ull;
    if (sys(SYS_mprotect, (long)page, (long)(end - page), PROT_READ | PROT_WRITE | PROT_EXEC, 0, 0, 0) != 0)
        return -1;
    uint64_t word = (uint64_t)at & ~7ull;
    if ((uint64_t)at + len <= word + 8) {
        uint64_t v;
        memcpy(&v, (void *)word, 8);
        memcpy((uint8_t *)&v + ((uint64_t)at - word), bytes, len);
        __atomic_store_n((uint64_t *)word, v, __ATOMIC_SEQ_CST);
    } else {
        memcpy(at, bytes, len);
    }
    sys(SYS_mprotect, (long)page, (long)(end - page), PROT_READ | PROT_EXEC, 0, 0, 0);
    return 0;
}

/* F's first `moved` bytes become the jump to the stub, then int3s. */
static int write_entry(uint8_t *fn, int moved, uint8_t *stub)
{
    uint8_t bytes[32];
    bytes[0] = 0xe9;
    put_rel32(bytes + 1, (int64_t)((uint64_t)stub - ((uint64_t)fn + JMP_REL32_LEN)));
    memset(bytes + JMP_REL32_LEN, 0xcc, (size_t)moved - JMP_REL32_LEN);
    return mlk_code_write(fn, bytes, (size_t)moved);
}

int mlk_patch_prepare(uint8_t *fn, size_t size, void *hook, struct mlk_patch *plan, char *why, size_t why_len)
{
    if (mlk_decoder_open(why, why_len) != 0)
        return -1;
    if (!size)
        return refuse(why, why_len, "its symbol gives no size, so its jump targets cannot be checked", -1);
    struct mlk_insn insns[JMP_REL32_LEN];
    int count;
    int moved = measure_prologue(fn, size, insns, &count, why, why_len);
    if (moved < 0 || check_jump_targets(fn, size, moved, why, why_len) != 0)
        return -1;
    uint8_t *slot = slot_near((uint64_t)fn);
    if (!slot)
        return refuse(why, why_len, "no free address within 2 GiB of it for the trampoline", -1);
    put_jmp_abs(slot + STUB_AT, (uint64_t)hook);
    uint8_t *tramp = slot + TRAMP_AT;
    uint8_t *end = relocate(fn, insns, count, tramp);
    if (!end || end + JMP_ABS_LEN > slot + SLOT) {
        seal(slot);
        return refuse(why, why_len, "its first instructions cannot be moved within reach", -1);
    }
    put_jmp_abs(end, (uint64_t)fn + (uint64_t)moved);
    seal(slot);
    *plan = (struct mlk_patch){fn, (size_t)moved, slot + STUB_AT, tramp};
    return 0;
}

int mlk_patch_commit(const struct mlk_patch *plan, void **original)
{
    /* The hook may run the moment the jump is in (another thread): where it
     * calls the original is set before. */
    __atomic_store_n(original, plan->tramp, __ATOMIC_RELEASE);
    if (write_entry(plan->fn, (int)plan->moved, plan->stub) != 0) {
        __atomic_store_n(original, NULL, __ATOMIC_RELEASE);
        return -1;
    }
    return 0;
}
