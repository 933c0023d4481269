/* The backtrace of the current thread, behind one function.
 *
 * Fast path (x86-64): our own .eh_frame unwinder with a cache of unwind
 * rules per return address.  Compiled code almost always describes a frame
 * as "CFA = rsp or rbp + k; return address at CFA-8; rbp saved at CFA+j or
 * unchanged".  The first time an address is seen, its FDE is found through
 * _dl_find_object and the .eh_frame_hdr search table (no lock, no
 * allocation), the CFA program is run up to that address, and the rule is
 * packed into one word of a shared cache.  After that each frame costs a
 * hash probe and two loads.
 *
 * Anything the fast path does not understand (CFA expressions, as in signal
 * trampolines and PLT stubs; registers saved in other registers; odd
 * pointer encodings) sends the whole backtrace to libgcc's
 * _Unwind_Backtrace, which handles every case but re-parses the unwind
 * tables for every frame.  MEMLEAK_CONFIG=unwind=libgcc forces that path. */
#define _GNU_SOURCE
#include <string.h>
#include <unwind.h>

#include "mlk.h"

int mlk_unwind_mode = MLK_UNWIND_FAST;

/* ---- libgcc ---------------------------------------------------------------- */

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
    if (c->n == 0 && mlk_is_self_address(ip))
        return _URC_NO_REASON; /* our own hook frames: not the program's */
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

static int libgcc_backtrace(uint64_t *ips, int max, int *truncated)
{
    struct collect c = {ips, max, 0, 0};
    _Unwind_Backtrace(collect_one, &c);
    *truncated = c.truncated;
    return c.n;
}

#if defined(__x86_64__)

/* ---- finding the FDE ------------------------------------------------------- */

/* glibc >= 2.35.  Weak, so the library still loads on an older glibc, where
 * the fast path simply reports "not understood" and libgcc does the work. */
struct mlk_dl_find_object {
    unsigned long long dlfo_flags;
    void *dlfo_map_start;
    void *dlfo_map_end;
    void *dlfo_link_map;
    void *dlfo_eh_frame;
    unsigned long long reserved[7];
};
extern int _dl_find_object(void *pc, struct mlk_dl_find_object *result) __attribute__((weak));

#define DW_EH_PE_omit 0xff
#define DW_EH_PE_absptr 0x00
#define DW_EH_PE_udata4 0x03
#define DW_EH_PE_sdata4 0x0b
#define DW_EH_PE_pcrel 0x10
#define DW_EH_PE_datarel 0x30

static uint64_t uleb(const uint8_t **p)
{
    uint64_t v = 0;
    int shift = 0;
    uint8_t b;
    do {
        b = *(*p)++;
        if (shift < 64)
            v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
    } while (b & 0x80);
    return v;
}

static int64_t sleb(const uint8_t **p)
{
    int64_t v = 0;
    int shift = 0;
    uint8_t b;
    do {
        b = *(*p)++;
        if (shift < 64)
            v |= (int64_t)(b & 0x7f) << shift;
        shift += 7;
    } while (b & 0x80);
    if (shift < 64 && (b & 0x40))
        v |= -((int64_t)1 << shift);
    return v;
}

/* The encodings compilers use on x86-64; anything else is "not understood". */
static int read_encoded(const uint8_t **p, uint8_t enc, uint64_t *out)
{
    const uint8_t *at = *p;
    uint64_t v;
    switch (enc & 0x0f) {
    case DW_EH_PE_absptr: memcpy(&v, at, 8); *p += 8; break;
    case DW_EH_PE_udata4: { uint32_t x; memcpy(&x, at, 4); v = x; *p += 4; break; }
    case DW_EH_PE_sdata4: { int32_t x; memcpy(&x, at, 4); v = (uint64_t)(int64_t)x; *p += 4; break; }
    default: return 0;
    }
    switch (enc & 0x70) {
    case 0: break;
    case DW_EH_PE_pcrel: v += (uint64_t)at; break;
    default: return 0;
    }
    *out = v;
    return 1;
}

/* Binary search of .eh_frame_hdr's table (datarel sdata4 pairs). */
static const uint8_t *find_fde(uint64_t pc)
{
    if (!_dl_find_object)
        return NULL;
    struct mlk_dl_find_object fo;
    if (_dl_find_object((void *)pc, &fo) != 0 || !fo.dlfo_eh_frame)
        return NULL;
    const uint8_t *hdr = fo.dlfo_eh_frame;
    if (hdr[0] != 1 || hdr[3] != (DW_EH_PE_datarel | DW_EH_PE_sdata4))
        return NULL;
    const uint8_t *p = hdr + 4;
    uint64_t eh_frame, count;
    if (!read_encoded(&p, hdr[1], &eh_frame) || hdr[2] == DW_EH_PE_omit || !read_encoded(&p, hdr[2], &count))
        return NULL;
    const int32_t *table = (const int32_t *)p;
    uint64_t lo = 0, hi = count;
    while (lo < hi) {
        uint64_t mid = (lo + hi) / 2;
        if ((uint64_t)hdr + (uint64_t)(int64_t)table[2 * mid] <= pc)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    return hdr + table[2 * (lo - 1) + 1];
}

/* ---- running the CFA program ------------------------------------------------ */

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

struct cie {
    uint64_t code_align;
    int64_t data_align;
    uint64_t ra_reg;
    uint8_t fde_enc;
    int has_z;
    const uint8_t *insns, *end;
};

static int parse_cie(const uint8_t *cie, struct cie *out)
{
    uint32_t len;
    memcpy(&len, cie, 4);
    if (len == 0xffffffff || len == 0)
        return 0;
    const uint8_t *end = cie + 4 + len;
    const uint8_t *p = cie + 8;
    uint8_t version = *p++;
    const char *aug = (const char *)p;
    while (*p)
        p++;
    p++;
    out->code_align = uleb(&p);
    out->data_align = sleb(&p);
    out->ra_reg = version == 1 ? *p++ : uleb(&p);
    out->fde_enc = DW_EH_PE_absptr;
    out->has_z = aug[0] == 'z';
    if (out->has_z) {
        uint64_t aug_len = uleb(&p);
        const uint8_t *aug_end = p + aug_len;
        for (const char *a = aug + 1; *a; a++) {
            if (*a == 'R')
                out->fde_enc = *p++;
            else if (*a == 'P') {
                uint8_t enc = *p++;
                uint64_t ignored;
                if (!read_encoded(&p, enc, &ignored))
                    return 0;
            } else if (*a == 'L')
                p++;
            else if (*a == 'S')
                return 0; /* a signal frame: libgcc knows how */
            else
                break;
        }
        p = aug_end;
    } else if (aug[0]) {
        return 0;
    }
    out->insns = p;
    out->end = end;
    return out->ra_reg == REG_RA;
}

#define MAX_REMEMBER 8

/* Runs insns while loc <= pc.  Returns RULE_UNKNOWN on anything unusual. */
static int run_cfa(const uint8_t *p, const uint8_t *end, const struct cie *cie, uint64_t loc,
                   uint64_t pc, struct rule_state *st, const struct rule_state *initial)
{
    struct rule_state saved[MAX_REMEMBER];
    int depth = 0;
    while (p < end) {
        uint8_t op = *p++;
        uint8_t low = op & 0x3f;
        uint64_t reg;
        int64_t off;
        switch (op >> 6) {
        case 1: /* advance_loc */
            loc += low * cie->code_align;
            if (loc > pc)
                return RULE_OK;
            continue;
        case 2: /* offset */
            off = (int64_t)uleb(&p) * cie->data_align;
            if (low == REG_RBP) st->rbp_saved = 1, st->rbp_off = off;
            if (low == REG_RA) st->ra_saved = 1, st->ra_off = off;
            continue;
        case 3: /* restore */
            if (low == REG_RBP) st->rbp_saved = initial->rbp_saved, st->rbp_off = initial->rbp_off;
            if (low == REG_RA) st->ra_saved = initial->ra_saved, st->ra_off = initial->ra_off;
            continue;
        }
        switch (op) {
        case 0x00: break; /* nop */
        case 0x02: /* advance_loc1 */
        case 0x03: /* advance_loc2 */
        case 0x04: { /* advance_loc4 */
            uint32_t delta = 0;
            size_t width = op == 0x02 ? 1 : op == 0x03 ? 2 : 4;
            memcpy(&delta, p, width); /* little-endian */
            p += width;
            loc += delta * cie->code_align;
            if (loc > pc)
                return RULE_OK;
            break;
        }
        case 0x05: /* offset_extended */
            reg = uleb(&p);
            off = (int64_t)uleb(&p) * cie->data_align;
            if (reg == REG_RBP) st->rbp_saved = 1, st->rbp_off = off;
            if (reg == REG_RA) st->ra_saved = 1, st->ra_off = off;
            break;
        case 0x06: /* restore_extended */
            reg = uleb(&p);
            if (reg == REG_RBP) st->rbp_saved = initial->rbp_saved, st->rbp_off = initial->rbp_off;
            if (reg == REG_RA) st->ra_saved = initial->ra_saved, st->ra_off = initial->ra_off;
            break;
        case 0x07: /* undefined */
            reg = uleb(&p);
            if (reg == REG_RA) st->ra_undefined = 1;
            if (reg == REG_RBP) return RULE_UNKNOWN;
            break;
        case 0x08: /* same_value */
            reg = uleb(&p);
            if (reg == REG_RBP) st->rbp_saved = 0;
            if (reg == REG_RA) return RULE_UNKNOWN;
            break;
        case 0x09: /* register */
            reg = uleb(&p);
            (void)uleb(&p);
            if (reg == REG_RBP || reg == REG_RA) return RULE_UNKNOWN;
            break;
        case 0x0a: /* remember_state */
            if (depth == MAX_REMEMBER)
                return RULE_UNKNOWN;
            saved[depth++] = *st;
            break;
        case 0x0b: /* restore_state */
            if (depth == 0)
                return RULE_UNKNOWN;
            *st = saved[--depth];
            break;
        case 0x0c: st->cfa_reg = (int)uleb(&p); st->cfa_off = (int64_t)uleb(&p); break;
        case 0x0d: st->cfa_reg = (int)uleb(&p); break;
        case 0x0e: st->cfa_off = (int64_t)uleb(&p); break;
        case 0x0f: return RULE_UNKNOWN; /* def_cfa_expression */
        case 0x10: /* expression */
        case 0x16: /* val_expression */
            reg = uleb(&p);
            if (reg == REG_RBP || reg == REG_RA || reg == REG_RSP) return RULE_UNKNOWN;
            p += uleb(&p);
            break;
        case 0x11: /* offset_extended_sf */
            reg = uleb(&p);
            off = sleb(&p) * cie->data_align;
            if (reg == REG_RBP) st->rbp_saved = 1, st->rbp_off = off;
            if (reg == REG_RA) st->ra_saved = 1, st->ra_off = off;
            break;
        case 0x12: st->cfa_reg = (int)uleb(&p); st->cfa_off = sleb(&p) * cie->data_align; break;
        case 0x13: st->cfa_off = sleb(&p) * cie->data_align; break;
        case 0x14: /* val_offset */
        case 0x15: /* val_offset_sf */
            reg = uleb(&p);
            if (op == 0x14)
                (void)uleb(&p);
            else
                (void)sleb(&p);
            if (reg == REG_RBP || reg == REG_RA) return RULE_UNKNOWN;
            break;
        case 0x2e: (void)uleb(&p); break; /* GNU_args_size */
        default: return RULE_UNKNOWN;
        }
    }
    return RULE_OK;
}

/* The rule at pc, computed from the unwind tables. */
static int compute_rule(uint64_t pc, struct rule_state *st)
{
    const uint8_t *fde = find_fde(pc);
    if (!fde)
        return RULE_END; /* no unwind info: libgcc would stop here too */
    uint32_t len, cie_off;
    memcpy(&len, fde, 4);
    if (len == 0 || len == 0xffffffff)
        return RULE_UNKNOWN;
    memcpy(&cie_off, fde + 4, 4);
    struct cie cie;
    if (!parse_cie(fde + 4 - cie_off, &cie))
        return RULE_UNKNOWN;
    const uint8_t *p = fde + 8;
    uint64_t start, range;
    if (!read_encoded(&p, cie.fde_enc, &start) || !read_encoded(&p, cie.fde_enc & 0x0f, &range))
        return RULE_UNKNOWN;
    if (pc < start || pc >= start + range)
        return RULE_END;
    if (cie.has_z)
        p += uleb(&p);
    struct rule_state initial = {REG_RSP, 8, 0, 0, 1, -8, 0};
    *st = initial;
    if (run_cfa(cie.insns, cie.end, &cie, start, UINT64_MAX, st, &initial) != RULE_OK)
        return RULE_UNKNOWN;
    initial = *st;
    if (run_cfa(p, fde + 4 + len, &cie, start, pc, st, &initial) != RULE_OK)
        return RULE_UNKNOWN;
    if (st->ra_undefined)
        return RULE_END;
    if ((st->cfa_reg != REG_RSP && st->cfa_reg != REG_RBP) || !st->ra_saved)
        return RULE_UNKNOWN;
    return RULE_OK;
}

/* ---- the rule cache ----------------------------------------------------------
 * One word per rule: bits 0-1 kind (1 = ok, 2 = end, 3 = unknown),
 * bit 2 CFA from rbp, bit 3 rbp saved, bits 16-39 CFA offset (signed),
 * bits 40-51 rbp offset, bits 52-63 return-address offset (signed, bytes).
 * Entries are {key, rule}; a writer clears the key, writes the rule, then
 * publishes the key; a reader checks the key before and after reading. */

#define CACHE_BITS 16
struct cache_entry {
    uint64_t key;
    uint64_t rule;
};
static struct cache_entry *cache;

static int fits(int64_t v, int bits) { return v >= -(1ll << (bits - 1)) && v < (1ll << (bits - 1)); }

static uint64_t pack(int kind, const struct rule_state *st)
{
    if (kind != RULE_OK)
        return (uint64_t)(kind == RULE_END ? 2 : 3);
    if (!fits(st->cfa_off, 24) || !fits(st->rbp_off, 12) || !fits(st->ra_off, 12))
        return 3;
    return 1 | (st->cfa_reg == REG_RBP ? 4u : 0u) | (st->rbp_saved ? 8u : 0u) |
           ((uint64_t)(st->cfa_off & 0xffffff) << 16) | ((uint64_t)(st->rbp_off & 0xfff) << 40) |
           ((uint64_t)(st->ra_off & 0xfff) << 52);
}

static int64_t field(uint64_t rule, int shift, int bits)
{
    int64_t v = (int64_t)((rule >> shift) & ((1ull << bits) - 1));
    return v >= (1ll << (bits - 1)) ? v - (1ll << bits) : v;
}

static uint64_t rule_for(uint64_t pc)
{
    uint64_t h = (pc * 0x9e3779b97f4a7c15ull) >> (64 - CACHE_BITS);
    struct cache_entry *e = &cache[h];
    uint64_t key = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);
    if (key == pc) {
        uint64_t rule = __atomic_load_n(&e->rule, __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&e->key, __ATOMIC_ACQUIRE) == pc)
            return rule;
    }
    struct rule_state st;
    uint64_t rule = pack(compute_rule(pc, &st), &st);
    __atomic_store_n(&e->key, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&e->rule, rule, __ATOMIC_RELEASE);
    __atomic_store_n(&e->key, pc, __ATOMIC_RELEASE);
    return rule;
}

/* ---- the last walk, per thread --------------------------------------------
 * A thread's consecutive allocations mostly share their outer frames (the
 * same loop of the same request handler of the same thread), and walking a
 * frame is a chain of dependent loads and a rule lookup, while checking that
 * a frame is unchanged is one independent load.  So each thread keeps its
 * last walk: the state (ip, sp, bp) at each step and the stack words each
 * step read (the return address, the saved rbp).  When a new walk reaches a
 * state the last one had, and every word the last walk read from there on
 * still holds the value it read, the rest of the walk is the same: a walk is
 * a function of its state, the words it reads and the rules -- which change
 * only when a module goes (rules_generation).  Coroutines, longjmp and
 * reused stack memory change a state or a word, and then the walk goes on
 * frame by frame as without the cache. */

#define WALK_KEPT 48   /* steps of the last walk kept; deeper walks are not kept */
#define WALK_MATCH 8   /* a new walk looks for a kept state in its first steps only */

struct step {
    uint64_t ip, sp, bp;   /* state before the step (ip: the frame recorded) */
    uint64_t ra_at, ra;    /* the return address read (ra_at 0: the last frame) */
    uint64_t bp_at, bp_v;  /* the saved rbp read (bp_at 0: none) */
};

struct walk {
    uint64_t generation;
    int steps;             /* steps kept, each recording one frame */
    int more;              /* 1: the walk stopped at max with state steps[steps] a frame too */
    struct step step[WALK_KEPT + 1];
};

static __thread struct walk last_walk __attribute__((tls_model("initial-exec")));
static uint64_t rules_generation = 1;

/* Is the kept walk still true from step j on? */
static int kept_walk_holds(const struct walk *w, int j)
{
    int same = 1;
    for (int k = j; k < w->steps; k++) {
        const struct step *st = &w->step[k];
        if (st->ra_at)
            same &= *(const uint64_t *)st->ra_at == st->ra;
        if (st->bp_at)
            same &= *(const uint64_t *)st->bp_at == st->bp_v;
    }
    return same;
}

/* A walk ended: it becomes the kept one (if it fitted).  Its first steps
 * may still be in `fresh` (nfresh >= 0).  `next`: it stopped at max, and
 * this state is a frame too; NULL: it reached the end of the stack. */
static void keep_walk(struct walk *w, const struct step *fresh, int nfresh, int kept, int keeping,
                      uint64_t generation, const struct step *next)
{
    if (nfresh >= 0) {
        memcpy(&w->step[0], fresh, (size_t)nfresh * sizeof *fresh);
        kept = nfresh;
    }
    if (!keeping || kept > WALK_KEPT) {
        w->steps = 0;
        return;
    }
    if (next)
        w->step[kept] = *next;
    w->steps = kept;
    w->more = next != NULL;
    w->generation = generation;
}

/* Returns the number of frames, or -1 when libgcc must do it. */
/* This function keeps a frame pointer whatever the build flags: its own
 * frame is where the walk starts. */
static __attribute__((noinline, optimize("no-omit-frame-pointer"))) int
fast_backtrace(uint64_t *ips, int max, int *truncated)
{
    /* Start from our caller's state: this function keeps a frame pointer
     * (libmtrace is built with -fno-omit-frame-pointer), so its CFA is
     * rbp + 16 and the caller's rbp is saved at [rbp]. */
    uint64_t *fp = __builtin_frame_address(0);
    uint64_t ip = (uint64_t)__builtin_return_address(0);
    uint64_t sp = (uint64_t)fp + 16;
    uint64_t bp = fp[0];
    if (mlk_walk_start.sp > sp && mlk_walk_start.sp - sp < 65536) {
        /* The hook's frame, further up this stack: skip our frames below it. */
        ip = mlk_walk_start.ip;
        sp = mlk_walk_start.sp;
        bp = mlk_walk_start.bp;
    }
    int n = 0;
    *truncated = 0;
    struct walk *w = &last_walk;
    uint64_t generation = __atomic_load_n(&rules_generation, __ATOMIC_ACQUIRE);
    int usable = w->generation == generation && w->steps > 0;
    /* The new walk's first steps go here until it is known whether the kept
     * walk is spliced in (it must not be overwritten before). */
    struct step fresh[WALK_MATCH];
    int nfresh = 0;
    int kept = 0;          /* steps of the new walk written into last_walk */
    int keeping = 1;       /* still within WALK_KEPT */
    int search = 0;        /* kept steps below this have a lower sp: no match */

    for (int steps = 0; steps < 256; steps++) {
        int records = n > 0 || !mlk_is_self_address(ip); /* skip our frames at the top only */
        if (records && usable && nfresh >= 0 && nfresh < WALK_MATCH) {
            while (search < w->steps && w->step[search].sp < sp)
                search++;
            int j = search;
            if (j < w->steps && w->step[j].sp == sp && w->step[j].ip == ip && w->step[j].bp == bp) {
                if (kept_walk_holds(w, j)) {
                    /* Splice: the kept steps j.. become steps nfresh.. */
                    int tail = w->steps - j;
                    if (nfresh + tail > WALK_KEPT) {
                        tail = 0; /* cannot keep it all: do not keep this walk */
                        keeping = 0;
                    }
                    for (int k = j; k < w->steps; k++) {
                        if (n >= max) {
                            *truncated = 1;
                            break;
                        }
                        ips[n++] = w->step[k].ip;
                    }
                    int more = w->more;
                    struct step next = w->step[w->steps];
                    if (keeping) {
                        if (nfresh != j) /* else the kept steps are where they belong */
                            memmove(&w->step[nfresh], &w->step[j], (size_t)(tail + 1) * sizeof next);
                        memcpy(&w->step[0], fresh, (size_t)nfresh * sizeof *fresh);
                        w->steps = nfresh + tail;
                    } else {
                        w->steps = 0;
                    }
                    if (*truncated || !more)
                        return n; /* (the kept walk's ending stays as it was) */
                    if (n >= max) {
                        *truncated = 1;
                        return n;
                    }
                    /* The kept walk stopped at max; this one needs more frames:
                     * go on from where it stopped. */
                    ip = next.ip;
                    sp = next.sp;
                    bp = next.bp;
                    kept = keeping ? w->steps : 0;
                    nfresh = -1;      /* no more matching; record into last_walk */
                    usable = 0;
                    records = 1;
                } else {
                    usable = 0;       /* the kept walk is stale: walk on, and replace it */
                }
            }
        }
        if (nfresh >= 0 && (nfresh >= WALK_MATCH || !usable)) {
            /* No splice: from here on the new walk goes straight into last_walk. */
            memcpy(&w->step[0], fresh, (size_t)nfresh * sizeof *fresh);
            kept = nfresh;
            nfresh = -1;
            usable = 0;
        }
        struct step *rec = NULL;
        if (records) {
            if (n >= max) {
                *truncated = 1;
                break;
            }
            ips[n++] = ip;
            if (nfresh >= 0)
                rec = &fresh[nfresh++];
            else if (keeping && kept < WALK_KEPT)
                rec = &w->step[kept++];
            else
                keeping = 0;
            if (rec) {
                rec->ip = ip, rec->sp = sp, rec->bp = bp;
                rec->ra_at = rec->bp_at = 0;
            }
        }
        /* ip is a return address: the rule that applies is the call's. */
        uint64_t rule = rule_for(ip - 1);
        int kind = (int)(rule & 3);
        if (kind == 2)
            goto done;
        if (kind != 1) {
            w->steps = 0;
            w->generation = 0;
            return -1;
        }
        uint64_t cfa = ((rule & 4) ? bp : sp) + (uint64_t)field(rule, 16, 24);
        /* A CFA at or below sp, unaligned, or absurdly far means the rule or
         * the stack is not what we think: let libgcc judge. */
        if (cfa <= sp || (cfa & 7) || cfa - sp > (64u << 20)) {
            w->steps = 0;
            w->generation = 0;
            return -1;
        }
        uint64_t ra_at = cfa + (uint64_t)field(rule, 52, 12);
        uint64_t ra = *(const uint64_t *)ra_at;
        if (rec)
            rec->ra_at = ra_at, rec->ra = ra;
        if (rule & 8) {
            uint64_t bp_at = cfa + (uint64_t)field(rule, 40, 12);
            bp = *(const uint64_t *)bp_at;
            if (rec)
                rec->bp_at = bp_at, rec->bp_v = bp;
        }
        sp = cfa;
        ip = ra;
        if (ip < 4096)
            goto done;
    }
    /* Stopped at max (or after 256 steps): the state now is a frame too. */
    keep_walk(w, fresh, nfresh, kept, keeping, generation, &(struct step){ip, sp, bp, 0, 0, 0, 0});
    return n;
done:
    keep_walk(w, fresh, nfresh, kept, keeping, generation, NULL);
    return n;
}

void mlk_unwind_init(void)
{
    if (!cache)
        cache = mlk_map_anon(sizeof(struct cache_entry) << CACHE_BITS);
}

void mlk_unwind_forget(void)
{
    /* A reader checks the key after reading the rule, so clearing keys is
     * enough: one racing with this recomputes its rule. */
    if (cache)
        for (uint64_t i = 0; i < (1u << CACHE_BITS); i++)
            __atomic_store_n(&cache[i].key, 0, __ATOMIC_RELEASE);
    __atomic_add_fetch(&rules_generation, 1, __ATOMIC_RELEASE); /* every thread's last walk */
}

__thread struct mlk_walk_start mlk_walk_start __attribute__((tls_model("initial-exec")));

int mlk_backtrace(uint64_t *ips, int max, int *truncated)
{
    if (mlk_unwind_mode == MLK_UNWIND_FAST && cache) {
        int n = fast_backtrace(ips, max, truncated);
        mlk_walk_start.sp = 0;
        if (n >= 0)
            return n;
    }
    mlk_walk_start.sp = 0;
    return libgcc_backtrace(ips, max, truncated);
}

#else /* not x86-64: libgcc only */

void mlk_unwind_init(void) {}
void mlk_unwind_forget(void) {}

__thread struct mlk_walk_start mlk_walk_start __attribute__((tls_model("initial-exec")));

int mlk_backtrace(uint64_t *ips, int max, int *truncated)
{
    return libgcc_backtrace(ips, max, truncated);
}

#endif
