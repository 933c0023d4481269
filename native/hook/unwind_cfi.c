/* Reading the unwind tables (.eh_frame, through _dl_find_object and
 * .eh_frame_hdr's search table: no lock, no allocation) and running a CFA
 * program up to an address, for the rule cache of unwind.c; and libgcc's
 * _Unwind_Backtrace, the fallback for frames those rules cannot describe. */
#define _GNU_SOURCE
#include <string.h>
#include <unwind.h>

#include "unwind_cfi.h"
#include "runtimes/go.h"

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
    struct mlk_go_switch sw;
    if (!before_insn && MLK_UNLIKELY(mlk_go_switch_known(ip, &sw))) {
        /* A cgo call's C code ends here: on into the Go code that called
         * it, from this frame's sp (the C callee's CFA) and rbp. */
        c->ips[c->n++] = ip;
        c->n += mlk_go_frames(&sw, (uint64_t)_Unwind_GetCFA(ctx), (uint64_t)_Unwind_GetGR(ctx, 6), c->ips + c->n,
                              c->max - c->n, &c->truncated);
        return _URC_END_OF_STACK;
    }
    /* A signal frame's IP is the interrupted instruction itself, not a
     * return address; the reporter subtracts one from every address to find
     * the call instruction, so add one here to keep that rule uniform. */
    c->ips[c->n++] = before_insn ? ip + 1 : ip;
    return _URC_NO_REASON;
}

int mlk_libgcc_backtrace(uint64_t *ips, int max, int *truncated)
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

/* A LEB128 number's bits; *bits: how many it was written with (7 a byte). */
static uint64_t leb128(const uint8_t **p, int *bits)
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
    *bits = shift;
    return v;
}

static uint64_t uleb(const uint8_t **p)
{
    int bits;
    return leb128(p, &bits);
}

static int64_t sleb(const uint8_t **p)
{
    int bits;
    int64_t v = (int64_t)leb128(p, &bits);
    /* the last byte's bit 6, now bit bits - 1, is the sign */
    if (bits < 64 && ((uint64_t)v >> (bits - 1) & 1))
        v |= -((int64_t)1 << bits);
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

int mlk_find_object(const void *addr, void **start, void **link_map)
{
    struct mlk_dl_find_object fo;
    if (!_dl_find_object)
        return -1;
    if (_dl_find_object((void *)addr, &fo) != 0)
        return 0;
    *start = fo.dlfo_map_start;
    *link_map = fo.dlfo_link_map;
    return 1;
}

int mlk_in_loaded_object(uint64_t pc)
{
    void *start, *map;
    return mlk_find_object((const void *)pc, &start, &map) > 0;
}

/* Binary search of .eh_frame_hdr's table (datarel sdata4 pairs).  NULL with
 * *no_info set: no table covers pc (code without unwind tables, JIT code). */
static const uint8_t *find_fde(uint64_t pc, int *no_info)
{
    *no_info = 0;
    if (!_dl_find_object)
        return NULL; /* (nothing known either way: no fallback) */
    struct mlk_dl_find_object fo;
    *no_info = 1;
    if (_dl_find_object((void *)pc, &fo) != 0 || !fo.dlfo_eh_frame)
        return NULL;
    const uint8_t *hdr = fo.dlfo_eh_frame;
    *no_info = 0; /* a table in a form not read here says nothing either way */
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
    if (lo == 0) {
        *no_info = 1; /* before the first function the table covers */
        return NULL;
    }
    return hdr + table[2 * (lo - 1) + 1];
}

/* ---- running the CFA program ------------------------------------------------ */

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

/* ---- marks: resuming a long CFA program --------------------------------------
 * A rule is worked out once per return address by running its function's
 * CFA program from the start up to the address -- again from the start for
 * each of the function's call sites.  Most programs are short; a few are
 * not, and they are the ones asked most: cc1's largest, 20 KB of ops for
 * one function, was run 190 times, 1.9 MB of the 2.1 MB of ops its 5.3k
 * rules ran (28M instructions).  So a long program, the first time one of
 * its addresses is asked, is run to its end once, leaving a mark every
 * MARK_BYTES or so -- its state after an advance, where no remembered
 * state is pending -- and each address asked after resumes from the last
 * mark at or below it.  (The run from the start up to any pc at or above a
 * mark's address does exactly the ops before the mark: resuming there
 * gives what that run gives.)  One table for the process, a slot per
 * program (direct-mapped by its FDE's address), taken with a try-lock: a
 * thread that finds it held -- another thread working a rule out, or the
 * one it interrupted, for a signal handler's allocation; after fork, a
 * thread the child does not have -- runs the program from the start. */
#define MARKED_MIN_BYTES 1024 /* shorter programs run from the start */
#define MARK_BYTES 256
#define MARKS 128
#define MARK_SLOTS 16
struct cfa_mark {
    uint64_t loc;
    const uint8_t *p;
    struct rule_state st;
};
struct fde_marks {
    const uint8_t *fde; /* whose (NULL: none) */
    uint32_t generation; /* marks_generation when made */
    uint32_t n, spacing;
    uint64_t last_at;   /* (while marking) the program offset of the latest mark */
    struct cfa_mark mark[MARKS];
};
static struct fde_marks *marks; /* MARK_SLOTS of them, mapped at first use */
static int marks_held, marks_unmapped;
/* Counted up when a module is unloaded (mlk_cfa_forget): another program
 * may then sit at a marked FDE's address.  (A count, not a clearing under
 * the lock: the forget may not wait for a holder.) */
static uint32_t marks_generation;

void mlk_cfa_forget(void)
{
    __atomic_add_fetch(&marks_generation, 1, __ATOMIC_RELEASE);
}

/* While marking (m), after an advance: a mark here, if it is time. */
static inline void mark_here(struct fde_marks *m, const uint8_t *start, const uint8_t *p, uint64_t loc,
                             const struct rule_state *st, int depth)
{
    if (m && depth == 0 && m->n < MARKS && (uint64_t)(p - start) >= m->last_at + m->spacing) {
        m->mark[m->n++] = (struct cfa_mark){loc, p, *st};
        m->last_at = (uint64_t)(p - start);
    }
}

/* Runs insns while loc <= pc.  Returns RULE_UNKNOWN on anything unusual.
 * m: marks to leave on the way (see above), or NULL. */
static int run_cfa(const uint8_t *p, const uint8_t *end, const struct cie *cie, uint64_t loc,
                   uint64_t pc, struct rule_state *st, const struct rule_state *initial, struct fde_marks *m)
{
    struct rule_state saved[MAX_REMEMBER];
    const uint8_t *start = p;
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
            mark_here(m, start, p, loc, st, depth);
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
            mark_here(m, start, p, loc, st, depth);
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

/* The FDE program [p, end) of `fde` run up to pc from its marks (made now
 * if they are another program's): its result; or -1, the table not to be
 * had (held, or not mapped), nothing done.  *st: the initial state in. */
static int run_marked(const uint8_t *fde, const uint8_t *p, const uint8_t *end, const struct cie *cie,
                      uint64_t start, uint64_t pc, struct rule_state *st, const struct rule_state *initial)
{
    if (__atomic_exchange_n(&marks_held, 1, __ATOMIC_ACQUIRE))
        return -1;
    if (!marks && !marks_unmapped && !(marks = mlk_map_anon(MARK_SLOTS * sizeof *marks)))
        marks_unmapped = 1;
    int r = -1;
    if (marks) {
        struct fde_marks *m = &marks[((uint64_t)fde * 0x9e3779b97f4a7c15ull) >> 60];
        _Static_assert(MARK_SLOTS == 16, "the slot is the product's top 4 bits");
        uint32_t generation = __atomic_load_n(&marks_generation, __ATOMIC_ACQUIRE);
        if (m->fde != fde || m->generation != generation) {
            uint64_t len = (uint64_t)(end - p);
            m->fde = NULL;
            m->n = 1;
            m->mark[0] = (struct cfa_mark){start, p, *st}; /* (a run from the start) */
            m->spacing = len / MARKS > MARK_BYTES ? (uint32_t)(len / MARKS) : MARK_BYTES;
            m->last_at = 0;
            struct rule_state whole = *st;
            (void)run_cfa(p, end, cie, start, UINT64_MAX, &whole, initial, m); /* (marks up to where it stops) */
            m->fde = fde;
            m->generation = generation;
        }
        uint32_t lo = 0, hi = m->n; /* the last mark at or below pc: mark[0]'s is start, pc's at least */
        while (hi - lo > 1) {
            uint32_t mid = (lo + hi) / 2;
            if (m->mark[mid].loc <= pc)
                lo = mid;
            else
                hi = mid;
        }
        *st = m->mark[lo].st;
        r = run_cfa(m->mark[lo].p, end, cie, m->mark[lo].loc, pc, st, initial, NULL);
    }
    __atomic_store_n(&marks_held, 0, __ATOMIC_RELEASE);
    return r;
}

/* The rule at pc, computed from the unwind tables. */
int mlk_compute_rule(uint64_t pc, struct rule_state *st)
{
    int no_info;
    const uint8_t *fde = find_fde(pc, &no_info);
    if (!fde) {
        /* (A cgo call's switch back to Go: libgcc's turn, runtimes/go.c.) */
        if (no_info && mlk_go_switch_at(pc + 1, NULL))
            return RULE_UNKNOWN;
        return no_info ? RULE_NO_INFO : RULE_END; /* (libgcc would stop here) */
    }
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
        return mlk_go_switch_at(pc + 1, NULL) ? RULE_UNKNOWN : RULE_NO_INFO; /* between the functions the table covers */
    if (cie.has_z)
        p += uleb(&p);
    struct rule_state initial = {REG_RSP, 8, 0, 0, 1, -8, 0};
    *st = initial;
    if (run_cfa(cie.insns, cie.end, &cie, start, UINT64_MAX, st, &initial, NULL) != RULE_OK)
        return RULE_UNKNOWN;
    initial = *st;
    const uint8_t *end = fde + 4 + len;
    int r = end - p >= MARKED_MIN_BYTES ? run_marked(fde, p, end, &cie, start, pc, st, &initial) : -1;
    if (r < 0)
        r = run_cfa(p, end, &cie, start, pc, st, &initial, NULL);
    if (r != RULE_OK)
        return RULE_UNKNOWN;
    if (st->ra_undefined)
        return RULE_END;
    if ((st->cfa_reg != REG_RSP && st->cfa_reg != REG_RBP) || !st->ra_saved)
        return RULE_UNKNOWN;
    return RULE_OK;
}


#endif /* x86-64 */
