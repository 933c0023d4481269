/* The rule cache and one step of a walk by the unwind rules.  Included by unwind.c alone,
 * inside its x86-64 part: the walk, its steps and its lookups are one
 * translation unit, so that the steps inline into the loops that run them
 * per frame (split out by duty, not to be compiled apart). */
#ifndef MLK_UNWIND_RULES_H
#define MLK_UNWIND_RULES_H

/* ---- the rule cache ----------------------------------------------------------
 * One 8-byte word per return address, read with one load and no re-check:
 * the key is kept exactly, in half a word.  A return address is below 2^48
 * (user space with 4-level page tables: below 2^47); multiplying it by an
 * odd constant modulo 2^48 is a bijection, so bits 32-47 of the product (the
 * slot) and bits 0-31 (the tag, kept in the word) together name exactly one
 * address.  Rules of addresses above (5-level page tables, an mmap asked to
 * go there) are not kept: each of their steps computes the rule again.  (A
 * word above 2^48 read as a return address from a corrupt stack could meet
 * the rule of the address it equals in its low 48 bits: one chance in about
 * 2^48 / (rules kept), and a walk through a corrupt stack is wrong anyway.)  The other half
 * is the rule, laid out for a walk step to decode each field with one shift
 * or sign extension (a step was 48 instructions with a 16-byte {key, rule}
 * entry read twice around the rule and fields to sign-fix; cc1 takes 15
 * steps per allocation):
 *   bits 32-39  rbp offset / 8 from the CFA (signed), when rbp is saved
 *   bit  40     CFA from rbp (else from rsp)     bit 41  rbp saved
 *   bit  42     the walk ends here               bit 43  not understood
 *   bit  44     no unwind table: by frame pointers (unwind_fp.c)
 *   bits 48-63  CFA offset / 8 (signed)
 * The return address is always at CFA - 8 (a rule saying otherwise is "not
 * understood").  An end, not-understood or by-frame-pointer rule has CFA
 * offset 0 from rsp, which no walk step takes inline (the return address
 * would be below sp), so RULE_STEP's test of the offset sends it, like a
 * slot of another address, to the out-of-line path.  An empty slot (0) is
 * tag 0 with such a rule too. */

#define CACHE_BITS 16
/* Odd (so the product names the address exactly) and below 2^31: x86-64
 * multiplies by it in one instruction, with no register to load it into
 * (a 64-bit constant took two: cc1, -26M instructions).  Its product's bits
 * 32-47 still depend on all of an address's low 48 bits. */
#define RULE_MUL 0x5bd1e995ull
#define RULE_CFA_FROM_BP (1ull << 40)
#define RULE_BP_SAVED (1ull << 41)
#define RULE_ENDS (1ull << 42)
#define RULE_NOT_UNDERSTOOD (1ull << 43)
#define RULE_BY_FP (1ull << 44) /* no table covers it: the frame-pointer fallback (unwind_fp.c) */
#define RULE_BP_OFF(r) ((int64_t)(int8_t)((r) >> 32) * 8)
#define RULE_CFA_OFF(r) (((int64_t)(r) >> 48) * 8)
/* The furthest a CFA may be above sp: further means the rule or the stack
 * is not what we think, and libgcc judges. */
#define MAX_FRAME (64u << 20)
static uint64_t *cache;

/* The slot of a return address whose product with RULE_MUL is h (its tag: (uint32_t)h). */
#define RULE_SLOT(h) (((h) >> 32) & ((1u << CACHE_BITS) - 1))

/* Is v a multiple of 8 whose eighth fits a signed field of `bits` bits? */
static int fits_in_eighths(int64_t v, int bits)
{
    return (v & 7) == 0 && v >= -(8ll << (bits - 1)) && v < (8ll << (bits - 1));
}

static uint64_t pack(int kind, const struct rule_state *st)
{
    if (kind == RULE_END)
        return RULE_ENDS;
    if (kind == RULE_NO_INFO)
        return RULE_BY_FP;
    /* (A CFA below rsp + 8 would put the return address below sp: no walk
     * step takes it, and RULE_STEP's inline way, which no longer checks an
     * rsp rule's CFA, relies on every kept rsp rule's being at least 8.) */
    if (kind != RULE_OK || st->ra_off != -8 || !fits_in_eighths(st->cfa_off, 16) ||
        (st->rbp_saved && !fits_in_eighths(st->rbp_off, 8)) || (st->cfa_reg == REG_RSP && st->cfa_off < 8))
        return RULE_NOT_UNDERSTOOD;
    return (st->cfa_reg == REG_RBP ? RULE_CFA_FROM_BP : 0) | (st->rbp_saved ? RULE_BP_SAVED : 0) |
           (uint64_t)(uint8_t)(st->rbp_off / 8) << 32 | (uint64_t)(uint16_t)(st->cfa_off / 8) << 48;
}

/* ---- rules pushed out of their slot ----------------------------------------
 * The cache is direct-mapped, so two return addresses whose slots meet push
 * each other's rule out, and computing a rule again costs ~2,000
 * instructions (finding the FDE, running its CFA program up to the
 * address): cc1, whose ~11k return addresses fill a sixth of the slots,
 * computed 23k rules for them.  So a rule pushed out moves to a second,
 * smaller table (the victims), where the slot's next miss looks before
 * computing -- and the two trade places.  Only step_slow's way (rule_of)
 * reads it: a walk step still reads one word.  A victim slot serves the
 * slots equal in their low VICTIM_BITS bits; its word is a cache word
 * with the slot's other high bits in bits 45-47 (free in a rule), so that
 * one 8-byte word still names its address exactly (no tearing between
 * threads, as the cache's own words). */
#define VICTIM_BITS 13
#define VICTIM_HIGH_SHIFT 45
_Static_assert(CACHE_BITS - VICTIM_BITS == 3, "a victim word keeps the slot's 3 other bits");
#define VICTIM_HIGH_MASK (7ull << VICTIM_HIGH_SHIFT)
static uint64_t *victims;

/* The rule for return address ra (the call's rule), computed the first time
 * the address is seen and after another address took its slot (unless it
 * is still among the victims). */
static uint64_t rule_of(uint64_t ra)
{
    uint64_t h = ra * RULE_MUL, tag = (uint32_t)h, *slot = &cache[RULE_SLOT(h)];
    uint64_t word = __atomic_load_n(slot, __ATOMIC_RELAXED);
    if ((uint32_t)word == tag && word >> 32) /* (a rule kept is never 0 in its upper half: 0 is empty) */
        return word;
    uint64_t high = RULE_SLOT(h) >> VICTIM_BITS << VICTIM_HIGH_SHIFT;
    uint64_t *victim = victims ? &victims[RULE_SLOT(h) & ((1u << VICTIM_BITS) - 1)] : NULL;
    uint64_t rule = victim ? __atomic_load_n(victim, __ATOMIC_RELAXED) : 0;
    if ((uint32_t)rule == tag && (rule & VICTIM_HIGH_MASK) == high && rule >> 32) {
        rule &= ~VICTIM_HIGH_MASK;
    } else {
        struct rule_state st;
        rule = pack(mlk_compute_rule(ra - 1, &st), &st) | tag;
        if (ra >= (1ull << 48)) /* (the tag does not name it exactly: not kept) */
            return rule;
    }
    __atomic_store_n(slot, rule, __ATOMIC_RELAXED);
    if (victim && word >> 32) /* the rule it pushed out */
        __atomic_store_n(victim, word | high, __ATOMIC_RELAXED);
    return rule;
}


/* One step by the unwind rules, from state (ip, sp, bp) to its caller's;
 * ra_at and bp_at: where it read the return address and the saved rbp (0:
 * not read).  Evaluates to 1, 0 when the walk ended there, -1 when the rule
 * is not one this unwinder follows (libgcc's turn).
 *
 * The inline part is the step nearly every frame takes: the rule in its
 * slot, with a CFA other than 0 above its register.  From rsp -- nearly
 * every frame of code built without frame pointers -- that is all: pack()
 * keeps no rsp rule whose CFA is below rsp + 8, and the largest it keeps
 * is 256 KiB, inside MAX_FRAME; sp is 8-aligned (a walk starts from an
 * aligned frame address and each sp is a CFA).  From rbp, the CFA must
 * still be at least 8 above sp, within MAX_FRAME and 8-aligned, as one
 * rotate and compare.  Everything else -- another address's slot, an
 * empty one (0), an end, a rule not understood or by frame pointers (all
 * of CFA offset 0), a stack not as the rule says -- goes to step_slow,
 * which judges with the rule computed if need be.  (The rsp way without
 * the range check: 24 instructions a step -> 19.)  A macro over the
 * caller's locals: the loop that runs it per frame keeps them in
 * registers. */
struct slow_step {
    uint64_t ip, sp, bp, ra_at, bp_at;
    int r, uses_bp;
};

/* The end of a step by a rule accepted, whose CFA is cfa: the return
 * address and the saved rbp (if the rule saved it) are read, sp becomes
 * the CFA. */
#define FOLLOW_RULE(rule, cfa, ip, sp, bp, ra_at, bp_at)      \
    do {                                                      \
        (ra_at) = (cfa) - 8;                                  \
        (ip) = *(const uint64_t *)(ra_at);                    \
        (bp_at) = 0;                                          \
        if ((rule) & RULE_BP_SAVED) {                         \
            (bp_at) = (cfa) + (uint64_t)RULE_BP_OFF(rule);    \
            (bp) = *(const uint64_t *)(bp_at);                \
        }                                                     \
        (sp) = (cfa);                                         \
    } while (0)

static const uint64_t zero_word;

/* (Values in, values out: a pointer to the walk's locals would keep them in
 * memory on the inline path too.) */
static __attribute__((noinline)) struct slow_step step_slow(uint64_t ip, uint64_t sp, uint64_t bp)
{
    struct slow_step s = {ip, sp, bp, 0, 0, -1, 0};
    uint64_t rule = rule_of(ip);
    s.uses_bp = (rule & (RULE_CFA_FROM_BP | RULE_BY_FP)) != 0;
    if (rule & RULE_BY_FP) {
        /* The step is a function of the state and of the two words it
         * reads, like a rule's: remembered walks and paths check those
         * words as they check a rule's.  (Where it ends the walk for what
         * the words held, the end is remembered by the state alone: a
         * walk through the same state with other words there may end there
         * too -- a shorter stack, never a wrong frame.) */
        uint64_t ra, caller_bp;
        int r = mlk_fp_step(sp, bp, &ra, &caller_bp);
        if (r) {
            s.ip = ra;
            s.sp = bp + 16;
            s.bp = caller_bp;
            s.ra_at = bp + 8;
            s.bp_at = bp;
            if (r == MLK_FP_STEP_BP_UNSURE) {
                /* The caller's rbp is not believed: it is 0 from here
                 * until a rule restores rbp from a frame, and a rule that
                 * would compute a CFA from it ends the walk (below).  The
                 * step "read" the 0 from a word that always holds it, so
                 * that remembered walks, which take rbp from the words
                 * their steps read, have it too. */
                s.bp = 0;
                s.bp_at = (uint64_t)&zero_word;
            }
        }
        s.r = r != 0;
        return s;
    }
    if (rule & (RULE_ENDS | RULE_NOT_UNDERSTOOD)) {
        s.r = rule & RULE_ENDS ? 0 : -1;
        return s;
    }
    if ((rule & RULE_CFA_FROM_BP) && !bp) {
        s.r = 0; /* rbp not known since a frame-pointer step (above): end, no guess */
        return s;
    }
    uint64_t cfa = ((rule & RULE_CFA_FROM_BP) ? bp : sp) + (uint64_t)RULE_CFA_OFF(rule);
    if (cfa < sp + 8 || (cfa & 7) || cfa - sp > MAX_FRAME)
        return s;
    FOLLOW_RULE(rule, cfa, s.ip, s.sp, s.bp, s.ra_at, s.bp_at);
    s.r = s.ip >= 4096;
    return s;
}

#define RULE_STEP(ip, sp, bp, ra_at, bp_at, uses_bp)                                              \
    ({                                                                                             \
        uint64_t h_ = (ip) * RULE_MUL;                                                             \
        uint64_t rule_ = rules[RULE_SLOT(h_)];                                                     \
        int64_t off_ = RULE_CFA_OFF(rule_);                                                        \
        uint64_t cfa_ = 0;                                                                         \
        int r_, inline_ = 0;                                                                       \
        if (MLK_LIKELY((uint32_t)rule_ == (uint32_t)h_ && off_ != 0)) {                            \
            if (MLK_LIKELY(!(rule_ & RULE_CFA_FROM_BP))) {                                         \
                cfa_ = (sp) + (uint64_t)off_;                                                      \
                inline_ = 1;                                                                       \
            } else {                                                                               \
                cfa_ = (bp) + (uint64_t)off_;                                                      \
                uint64_t over_ = cfa_ - 8 - (sp);                                                  \
                inline_ = ((over_ >> 3) | (over_ << 61)) <= (MAX_FRAME - 8) / 8;                   \
            }                                                                                      \
        }                                                                                          \
        if (MLK_LIKELY(inline_)) {                                                                 \
            (uses_bp) = (rule_ & RULE_CFA_FROM_BP) != 0;                                           \
            FOLLOW_RULE(rule_, cfa_, ip, sp, bp, ra_at, bp_at);                                    \
            r_ = (ip) >= 4096;                                                                     \
        } else {                                                                                   \
            struct slow_step s_ = step_slow((ip), (sp), (bp));                                     \
            (ip) = s_.ip;                                                                          \
            (sp) = s_.sp;                                                                          \
            (bp) = s_.bp;                                                                          \
            (ra_at) = s_.ra_at;                                                                    \
            (bp_at) = s_.bp_at;                                                                    \
            (uses_bp) = s_.uses_bp;                                                                \
            r_ = s_.r;                                                                             \
        }                                                                                          \
        r_;                                                                                        \
    })


#endif
