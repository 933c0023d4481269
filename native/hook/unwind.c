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
 * tables for every frame.  MEMLEAK_CONFIG=unwind=libgcc forces that path.
 * Reading the tables and the libgcc fallback are unwind_cfi.c's; the walk,
 * the rule cache and the remembered walks and paths are here. */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
#include <unwind.h>

#include "mlk.h"
#include "unwind_cfi.h"

int mlk_unwind_mode = MLK_UNWIND_FAST;
__thread int mlk_walk_quick __attribute__((tls_model("initial-exec")));

#if defined(__x86_64__)

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
 * offset 0 from rsp, which no walk step accepts (the return address would
 * be below sp), so the step's one range check sends it, like a slot of
 * another address, to the out-of-line path.  An empty slot (0) is tag 0 with such a rule too. */

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
    if (kind != RULE_OK || st->ra_off != -8 || !fits_in_eighths(st->cfa_off, 16) ||
        (st->rbp_saved && !fits_in_eighths(st->rbp_off, 8)) || (st->cfa_reg == REG_RSP && st->cfa_off == 0))
        return RULE_NOT_UNDERSTOOD;
    return (st->cfa_reg == REG_RBP ? RULE_CFA_FROM_BP : 0) | (st->rbp_saved ? RULE_BP_SAVED : 0) |
           (uint64_t)(uint8_t)(st->rbp_off / 8) << 32 | (uint64_t)(uint16_t)(st->cfa_off / 8) << 48;
}

/* The rule for return address ra (the call's rule), computed the first time
 * the address is seen and after another address took its slot. */
static uint64_t rule_of(uint64_t ra)
{
    uint64_t h = ra * RULE_MUL, tag = (uint32_t)h, *slot = &cache[RULE_SLOT(h)];
    uint64_t word = __atomic_load_n(slot, __ATOMIC_RELAXED);
    if ((uint32_t)word == tag && word >> 32) /* (a rule kept is never 0 in its upper half: 0 is empty) */
        return word;
    struct rule_state st;
    word = pack(mlk_compute_rule(ra - 1, &st), &st) | tag;
    if (ra < (1ull << 48)) /* (else the tag does not name it exactly: not kept) */
        __atomic_store_n(slot, word, __ATOMIC_RELAXED);
    return word;
}

/* ---- remembered walks, per thread ------------------------------------------
 * Walking a frame is a chain of dependent loads and a rule lookup; checking
 * that a frame is unchanged is one independent load.  So each thread
 * remembers its recent walks: the state (ip, sp, bp) at each step and where
 * the step read the stack (the return address, the saved rbp; the values
 * read are the next state's ip and bp).  A walk is a function of its state,
 * the words it reads and the rules -- which change only when a module goes
 * (rules_generation) -- so when a new walk reaches a state a remembered one
 * had, and every word that one read from there on still holds the value it
 * read, the rest of the new walk is the remembered one.
 *
 * A program's allocations come from a few hundred call paths taken in turn
 * (A B A C A B ...), so one remembered walk is not enough.  A walk's first
 * state looks among the last walks that started there (`firsts`); the one
 * the same furthest gives the frames up to where it parts, and the rest is
 * walked by the rules.  Most walks of programs that repeat their paths turn
 * out to be a remembered one from their first frame on, and then the stack
 * id interned for that one is reused as well.  Coroutines, longjmp and
 * reused stack memory change a state or a word, and then the walk goes on
 * frame by frame.
 *
 * The memory is per thread (no sharing, no locks on the way), mapped at the
 * thread's first walk and passed on to a new thread when it exits. */

#define MEMO_WALKS 64      /* walks remembered per thread, replaced in turn */
/* Sets of walks by first state: 1,024 of them, 16 KiB a thread.  (With 128,
 * a program's hot first states met in one set by chance of where its
 * stack and code sit -- the environment's size moved sqlite3's count by 3%
 * between runs of the same build, 413.9M or 426.8M instructions.) */
#define MEMO_FIRST_SET_BITS 10
#define MEMO_FIRST_WAYS 8  /* walks per set */
/* Looking for a remembered walk and writing each new one down costs about
 * a fifth of what a walk found whole saves (its frames, and interning its
 * stack): where fewer than one walk in MEMO_MIN_FINDS of a window of
 * MEMO_WINDOW is found whole (gcc's cc1: 9%, git: 10%; sqlite3 and jq:
 * 99.9%), a thread walks by the rules alone for a while, then tries again;
 * the while doubles with each window that does not pay (a program's first
 * window, new paths all, may well not), up to MEMO_REST_MAX walks. */
#define MEMO_WINDOW 256
#define MEMO_MIN_FINDS 8
#define MEMO_REST_MAX 16384

/* Whether remembering (whole walks, or paths) pays for a thread: counts down
 * a window of walks that try, or a rest of walks that do not. */
struct payoff {
    unsigned left;         /* walks to go in this window or rest */
    unsigned finds;        /* walks found remembered in this window */
    unsigned rest;         /* the length of the next rest */
    unsigned resting;
};

static void payoff_start(struct payoff *p)
{
    *p = (struct payoff){MEMO_WINDOW, 0, MEMO_WINDOW, 0};
}

/* The window or rest is over: what comes next. */
static __attribute__((noinline)) void payoff_turn(struct payoff *p)
{
    if (p->resting) {
        p->resting = 0;
        p->left = MEMO_WINDOW;
    } else if (p->finds < MEMO_WINDOW / MEMO_MIN_FINDS) {
        p->resting = 1;
        p->left = p->rest;
        p->rest = p->rest < MEMO_REST_MAX ? p->rest * 2 : MEMO_REST_MAX;
    } else {
        p->rest = MEMO_WINDOW;
        p->left = MEMO_WINDOW;
    }
    p->finds = 0;
}

/* Does this walk try remembering? */
static inline int payoff_try(struct payoff *p)
{
    if (MLK_UNLIKELY(--p->left == 0))
        payoff_turn(p);
    return !p->resting;
}

/* 32 bytes: the state's sp is not kept, as the return address sits right
 * below the CFA, which is the next sp (the rules this unwinder follows say
 * so): fewer cache lines to check a remembered walk. */
struct step {
    uint64_t ip, bp;       /* the state (with sp: see step_sp); ip is the frame recorded */
    uint64_t ra_at;        /* where the return address (the next ip) was read; 0: the walk ended */
    uint64_t bp_at;        /* where the saved rbp (the next bp) was read; 0: not read */
};

struct kept_walk {
    int complete;          /* 0: being written (or never was) */
    uint64_t generation;   /* rules_generation it was walked under */
    int steps;             /* frames recorded */
    int more;              /* stopped at max: step[steps] is a frame too */
    uint64_t sp0;          /* the first state's sp */
    uint32_t id, id_kind, id_epoch; /* the stack interned for it (id MLK_NO_STACK: none yet) */
    /* Steps before this one may have had a rule that computes the CFA from
     * rbp (-fno-omit-frame-pointer code, alloca): only up to here must the
     * saved rbp words it read be the same for the walk to be the same, and
     * only up to here are the states' rbp values as the walk had them.
     * Past it rbp is just a callee-saved register whose value no later
     * step uses: its values there, copied from other walks, may be stale. */
    int bp_upto;
    int bp_ok;             /* the states up to this one have their rbp right */
    struct step step[];    /* steps + 1: the last is the state after the last step */
};

struct paths;
struct memo {
    struct memo *next_spare;
    struct paths *paths;   /* see "remembered paths"; NULL: not mapped yet */
    int max;               /* frames per walk it is sized for */
    int victim;            /* the walk slot the next new walk goes into */
    int last;              /* the slot whose walk the last backtrace returned, or -1 */
    struct path *last_path; /* or the path it wrote down (see path_walk), or NULL */
    int older_worth;       /* > 0: looking past the latest walk of a first state has paid */
    unsigned walks_since_check;
    struct payoff payoff;  /* whether remembering whole walks pays (see MEMO_WINDOW) */
    size_t walk_size;
    /* Per first state (hashed), the walks that started there, most recently
     * used first: other bits of the state's hash << 8 | slot (MEMO_WALKS or
     * more: none). */
    uint16_t firsts[1 << MEMO_FIRST_SET_BITS][MEMO_FIRST_WAYS];
    /* then MEMO_WALKS walks of walk_size bytes */
};

#define MEMO_NONE ((struct memo *)1) /* this thread cannot have one (exiting, out of memory) */
static __thread struct memo *thread_memo __attribute__((tls_model("initial-exec")));
static pthread_key_t memo_key;   /* its destructor hands the memo on at thread exit */
static int memo_key_made;
static struct memo *spare_memos;
static mlk_lock_t spare_lock;
static uint64_t rules_generation = 1;

/* The sp of step k's state (for k = steps, of the state after the walk;
 * meaningless when the walk ended by an unwind rule). */
static inline uint64_t step_sp(const struct kept_walk *w, int k)
{
    return k ? w->step[k - 1].ra_at + 8 : w->sp0;
}

static inline struct kept_walk *walk_at(struct memo *m, int slot)
{
    return (struct kept_walk *)((char *)(m + 1) + (size_t)slot * m->walk_size);
}

static inline uint64_t state_hash(uint64_t ip, uint64_t sp)
{
    return (ip ^ sp * 0x9e3779b97f4a7c15ull) * 0xc2b2ae3d27d4eb4full;
}

static void memo_release(void *p)
{
    struct memo *m = p;
    thread_memo = MEMO_NONE; /* allocations in later destructors walk without one */
    mlk_lock(&spare_lock);
    m->next_spare = spare_memos;
    spare_memos = m;
    mlk_unlock(&spare_lock);
}

static struct memo *memo_of_thread(int max)
{
    struct memo *m = thread_memo;
    if (MLK_LIKELY(m > MEMO_NONE))
        return m->max == max ? m : NULL;
    if (m == MEMO_NONE || !memo_key_made)
        return NULL;
    mlk_lock(&spare_lock);
    m = spare_memos;
    if (m && m->max == max)
        spare_memos = m->next_spare;
    else
        m = NULL;
    mlk_unlock(&spare_lock);
    if (m) {
        /* An exited thread's: its walks are not this thread's.  (Its
         * paths stay: one is used only from a state it was walked from,
         * with every word it read still the same -- whose stack that is
         * does not matter.) */
        for (int i = 0; i < MEMO_WALKS; i++)
            walk_at(m, i)->complete = 0;
    } else {
        size_t walk_size = sizeof(struct kept_walk) + (size_t)(max + 1) * sizeof(struct step);
        size_t size = sizeof(struct memo) + MEMO_WALKS * walk_size;
        m = mlk_map_anon(size);
        if (!m) {
            thread_memo = MEMO_NONE;
            return NULL;
        }
        m->max = max;
        m->walk_size = walk_size;
    }
    memset(m->firsts, 0xff, sizeof m->firsts);
    m->older_worth = 64;
    payoff_start(&m->payoff);
    m->victim = 0;
    m->last = -1;
    m->last_path = NULL;
    if (pthread_setspecific(memo_key, m) != 0) {
        memo_release(m);
        return NULL;
    }
    thread_memo = m;
    return m;
}

/* The first step of walk w from step k on whose stack words changed since
 * it was walked (w->steps: none).  Up to there the walk is the same. */
static int first_change(const struct kept_walk *w, int k)
{
    /* The loop every backtrace runs, once per frame: split where the saved
     * rbp words stop mattering.  (A step without a return address, ra_at 0,
     * is one where the walk ended.) */
    const struct step *s = w->step;
    int bp_end = w->bp_upto < w->steps ? w->bp_upto : w->steps;
    for (; k < bp_end; k++)
        if ((s[k].ra_at && *(const uint64_t *)s[k].ra_at != s[k + 1].ip) ||
            (s[k].bp_at && *(const uint64_t *)s[k].bp_at != s[k + 1].bp))
            return k;
#pragma GCC unroll 4
    for (; k < w->steps; k++)
        if (s[k].ra_at && *(const uint64_t *)s[k].ra_at != s[k + 1].ip)
            return k;
    return k;
}

/* rbp in the state after step k of walk w, from the stack as it is now:
 * the saved rbp the latest step up to k read, else bp_at_start (rbp in
 * w's first state, which was checked).  The walk's own record of it may be
 * stale past w->bp_upto. */
static uint64_t bp_after(const struct kept_walk *w, int k, uint64_t bp_at_start)
{
    for (; k >= 0; k--)
        if (w->step[k].bp_at)
            return *(const uint64_t *)w->step[k].bp_at;
    return bp_at_start;
}

/* A rule at a step before `upto` uses rbp: make the walk's rbp values
 * right up to there (stale copies past the old bound are recomputed from
 * the saved-rbp words, still on the stack), and checked from now on. */
static void raise_bp_upto(struct kept_walk *w, int upto)
{
    for (int k = w->bp_ok; k < upto; k++)
        w->step[k + 1].bp = w->step[k].bp_at ? *(const uint64_t *)w->step[k].bp_at : w->step[k].bp;
    if (w->bp_ok < upto)
        w->bp_ok = upto;
    w->bp_upto = upto;
}

/* Did walk w start from state (ip, sp, bp), and is it still usable?  rbp
 * is part of the state only for a walk with a rule that used it (bp_upto >
 * 0): elsewhere rbp is a register like any other, and code that keeps a
 * loop counter or a pointer in it calls the allocator with a new value
 * each time.  (Comparing it always made alloc-glibc's 28k map and string
 * allocations, all from two states, new walks every time.) */
static inline int walk_starts_at(const struct kept_walk *w, uint64_t ip, uint64_t sp, uint64_t bp,
                                 uint64_t generation)
{
    return w->complete && w->generation == generation && w->steps > 0 && w->step[0].ip == ip &&
           w->sp0 == sp && (w->bp_upto == 0 || w->step[0].bp == bp);
}

/* The walks that started at a state, most recently used first. */
static inline uint16_t *first_set(struct memo *m, uint64_t ip, uint64_t sp, uint16_t *tag)
{
    uint64_t h = state_hash(ip, sp);
    *tag = (uint16_t)((h >> 16 & 0xff) << 8);
    return m->firsts[h >> (64 - MEMO_FIRST_SET_BITS)];
}

/* Way i of a set becomes `way`, moved to the front: the ways before it
 * move back one.  (The set is 16 bytes: shifted as one 128-bit value --
 * gcc made the loop a call to memmove, 58 instructions a move on sqlite3.) */
_Static_assert(MEMO_FIRST_WAYS * sizeof(uint16_t) == 16, "a set of first states is one 128-bit value");
static inline void move_to_front(uint16_t *set, int i, uint16_t way)
{
    unsigned __int128 v;
    memcpy(&v, set, sizeof v);
    unsigned __int128 before = v & (((unsigned __int128)1 << (16 * i)) - 1);
    unsigned __int128 after = i < MEMO_FIRST_WAYS - 1 ? v >> (16 * (i + 1)) << (16 * (i + 1)) : 0;
    v = after | before << 16 | way;
    memcpy(set, &v, sizeof v);
}

/* `way` to the front of its set: from where its slot is, else from the last way. */
static void to_front(uint16_t *set, uint16_t way)
{
    int i = 0;
    while (i < MEMO_FIRST_WAYS - 1 && (set[i] & 0xff) != (way & 0xff))
        i++;
    move_to_front(set, i, way);
}

static void walk_to_front(struct memo *m, const struct kept_walk *w, int slot)
{
    uint16_t tag;
    uint16_t *set = first_set(m, w->step[0].ip, w->sp0, &tag);
    to_front(set, tag | (uint16_t)slot);
}

/* The remembered walk that started at state (ip, sp, bp) and is the same
 * furthest (*change: its first changed step), or NULL.  The candidates share
 * their first steps, hence the stack words those read (one cache line or
 * two, loaded once): checking several costs little more than checking one. */
static struct kept_walk *recall_first(struct memo *m, uint64_t ip, uint64_t sp, uint64_t bp,
                                      uint64_t generation, int *slot, int *change)
{
    uint16_t tag;
    uint16_t *set = first_set(m, ip, sp, &tag);
    struct kept_walk *best = NULL;
    /* The latest walk from this state first, on its own: most often the
     * answer (sqlite3: 3 walks in 4), then nothing else is looked at. */
    int s = set[0] & 0xff;
    if ((set[0] & 0xff00) == tag && s < MEMO_WALKS && s != m->victim) {
        struct kept_walk *w = walk_at(m, s);
        if (walk_starts_at(w, ip, sp, bp, generation)) {
            best = w;
            *slot = s;
            *change = first_change(w, 0);
            if (*change == w->steps)
                return best;
        }
    }
    /* Looking past the most recent walk pays where the same few paths
     * alternate (sqlite3: 92% of walks found whole with the older ones, 41%
     * without), not where paths are many (cc1: each one costs a check to
     * where it parts, for few finds). */
    int ways = m->older_worth > 0 || (++m->walks_since_check & 63) == 0 ? MEMO_FIRST_WAYS : 1;
    for (int i = 1; i < ways; i++) {
        s = set[i] & 0xff;
        if ((set[i] & 0xff00) != tag || s >= MEMO_WALKS || s == m->victim)
            continue;
        struct kept_walk *w = walk_at(m, s);
        if (!walk_starts_at(w, ip, sp, bp, generation))
            continue;
        int c = first_change(w, 0);
        if (!best || c > *change) {
            best = w;
            *slot = s;
            *change = c;
            if (c == w->steps) {
                if (i) {
                    move_to_front(set, i, set[i]);
                    m->older_worth = m->older_worth < 1000 ? m->older_worth + 8 : m->older_worth;
                }
                return best;
            }
        }
    }
    if (ways > 1 && m->older_worth > -1000)
        m->older_worth--; /* looked at the older ones for nothing */
    return best;
}

/* The walk in the victim slot is complete: it becomes the latest of those
 * that started at its first state. */
static void remember(struct memo *m, struct kept_walk *w, int steps, int more, uint64_t generation)
{
    int slot = m->victim;
    w->steps = steps;
    w->more = more;
    w->generation = generation;
    w->id = MLK_NO_STACK;
    w->complete = 1;
    if (steps)
        walk_to_front(m, w, slot);
    m->last = slot;
    m->victim = (slot + 1) % MEMO_WALKS;
}

/* One step by the unwind rules, from state (ip, sp, bp) to its caller's;
 * ra_at and bp_at: where it read the return address and the saved rbp (0:
 * not read).  Evaluates to 1, 0 when the walk ended there, -1 when the rule
 * is not one this unwinder follows (libgcc's turn).
 *
 * The inline part is the step nearly every frame takes: the rule in its
 * slot, a CFA at least 8 above sp, within MAX_FRAME and 8-aligned (sp is:
 * a walk starts from an aligned frame address and each sp is a CFA), as
 * one rotate and compare.  Everything else -- another address's slot, an
 * end, a rule not understood, a stack not as the rule says -- goes to
 * step_slow, which judges with the rule computed if need be.  A macro over
 * the caller's locals: the loop that runs it per frame keeps them in
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
        uint64_t cfa_ = ((rule_ & RULE_CFA_FROM_BP) ? (bp) : (sp)) + (uint64_t)RULE_CFA_OFF(rule_); \
        uint64_t ra_at_ = cfa_ - 8;                                                                \
        uint64_t over_ = ra_at_ - (sp);                                                            \
        int r_;                                                                                    \
        if (MLK_LIKELY((uint32_t)rule_ == (uint32_t)h_ &&                                          \
                       ((over_ >> 3) | (over_ << 61)) <= (MAX_FRAME - 8) / 8)) {                   \
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

/* ---- remembered paths, per thread ----------------------------------------
 * Where remembering whole walks by their first state does not pay (a
 * thread "resting", above), it is most often because the thread's paths are
 * too many for MEMO_WALKS and share their first states: gcc's cc1 makes 829k
 * allocations from 8.1k distinct stacks, nearly all through the same few
 * allocator wrappers, so its walks differ only from the second or third
 * frame on.  A path is such a walk made short: its first PATH_KEY_STEPS
 * frames and the state after them are its key, and the rest is the list of
 * the stack words the walk read from there on, in the order it read them,
 * with the values it read.  (A saved rbp word is kept only if a later rule
 * computes its CFA from it: other rbp values are whatever the register held
 * and must not make the path differ.)  The rules are a function of the
 * address, so from the same state the walk reads the same words as long as
 * it reads the same values: checking a path is one load and compare per
 * word, in the walk's order, stopping at the first that differs (so no
 * word is read that the walk itself would not read), and a path that holds
 * gives the frames, how the walk ended, and the stack id interned for it --
 * no walk by rules past the key, no hashing and looking up of the stack.
 *
 * Paths sharing a key (the same wrappers called from the same place) sit
 * together in one set, most recently used first.  Paths are replaced in
 * turn; a set entry left naming a replaced path does not match its key.
 * cc1: 99% of its walks are a remembered path (8.6k written for 789k
 * walks; bench/run.py's 9.6M walks: 69k), 4.5% fewer cycles in all by
 * bench/callgrind.py's count.  More than
 * PATH_WAYS paths under one key (tests/programs/manypaths.c: 32) and they
 * push each other out: then the finds fall under MEMO_MIN_FINDS a window
 * and the thread rests from paths as well, walking by the rules alone. */

#define PATH_KEY_STEPS 3
/* 8k sets of 8 ways: 256 KiB, touched as used.  (2k sets overflowed on
 * cc1: three times as many paths written, 97% found instead of 99%.) */
#define PATH_SET_BITS 13
#define PATH_WAYS 8
#define PATH_IDX_BITS 14           /* a set entry: tag bits | path index + 1 */
#define PATH_IDX_MASK ((1u << PATH_IDX_BITS) - 1)
#define PATH_MAX_COUNT PATH_IDX_MASK
#define PATH_BYTES (4u << 20)      /* the most one thread's paths may take */

/* 12 bytes: the lines a check reads are most of its cost (cc1: 8.1k paths,
 * several times the last-level cache). */
struct path_word {
    uint32_t at;                   /* where the walk read it, from the state's sp */
    uint64_t expect;               /* what it read */
} __attribute__((packed));

struct path {
    uint64_t ip[PATH_KEY_STEPS + 1]; /* the key: first frames, and the state's ip after them */
    uint64_t sp, bp;               /* the state's sp and rbp (rbp compared only if bp_in_key) */
    uint32_t generation;           /* rules_generation it was walked under; 0: being written */
    uint32_t id, id_epoch;         /* the stack interned for it (id MLK_NO_STACK: none yet) */
    uint8_t id_kind;
    uint8_t bp_in_key;             /* a rule uses the state's rbp before any saved one is read */
    uint8_t frames;                /* frames of the whole walk */
    uint8_t more;                  /* it stopped at max */
    uint16_t nwords;
    struct path_word word[];       /* 2 x (max - PATH_KEY_STEPS) at most */
} __attribute__((aligned(64)));

struct paths {
    uint32_t count;                /* paths it has room for */
    uint32_t victim;               /* the one the next new path replaces */
    size_t path_size;
    struct payoff payoff;          /* whether paths pay */
    uint32_t sets[1u << PATH_SET_BITS][PATH_WAYS];
    /* then `count` paths of path_size bytes */
};
#define PATHS_HEAD ((sizeof(struct paths) + 63) & ~(size_t)63) /* paths start on a cache line */
#define PATHS_NONE ((struct paths *)1) /* none for this thread (depth too small, or out of memory) */

static inline struct path *path_at(struct paths *pc, uint32_t i)
{
    return (struct path *)((char *)pc + PATHS_HEAD + (size_t)i * pc->path_size);
}

static struct paths *paths_of(struct memo *m)
{
    if (MLK_LIKELY(m->paths != NULL))
        return m->paths;
    if (m->max <= PATH_KEY_STEPS + 1)
        return m->paths = PATHS_NONE; /* no room for a path past its key */
    size_t words = 2 * (size_t)m->max; /* a return address and a saved rbp per step, at most */
    size_t path_size = (sizeof(struct path) + words * sizeof(struct path_word) + 63) & ~(size_t)63;
    size_t count = (PATH_BYTES - PATHS_HEAD) / path_size;
    if (count > PATH_MAX_COUNT)
        count = PATH_MAX_COUNT;
    struct paths *pc = mlk_map_anon(PATHS_HEAD + count * path_size);
    if (!pc)
        return m->paths = PATHS_NONE;
    pc->count = (uint32_t)count;
    pc->path_size = path_size;
    payoff_start(&pc->payoff);
    return m->paths = pc;
}

static const uint64_t path_mul[] = {0xc2b2ae3d27d4eb4full, 0x165667b19e3779f9ull, 0x27d4eb2f165667c5ull,
                                     0x94d049bb133111ebull};
_Static_assert(PATH_KEY_STEPS <= sizeof path_mul / sizeof path_mul[0], "a multiplier per key frame");

static inline uint64_t path_hash(const uint64_t *ips, uint64_t ip, uint64_t sp)
{
    uint64_t h = sp + ip * 0x9e3779b97f4a7c15ull;
    for (int k = 0; k < PATH_KEY_STEPS; k++)
        h += ips[k] * path_mul[k];
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ h >> 29;
}

/* The walk from state (ip, sp, bp) through the remembered paths; returns as
 * fast_backtrace does, or PATH_PLAIN: walk by the rules alone. */
#define PATH_PLAIN (-2)
/* (Inline: a call and its register saves were 1% of cc1's cost.) */
static inline __attribute__((always_inline)) int
path_walk(struct paths *pc, struct path **last, uint64_t *ips, int max, int *truncated, int kind, uint32_t unload_epoch,
          uint32_t *known, uint64_t ip, uint64_t sp, uint64_t bp, uint32_t generation)
{
    const uint64_t *rules = cache;
    uint64_t ra_at, bp_at;
    int r, uses_bp;
    if (!payoff_try(&pc->payoff))
        return PATH_PLAIN;
    /* The key: the first frames by the rules. */
    for (int k = 0; k < PATH_KEY_STEPS; k++) {
        ips[k] = ip;
        r = RULE_STEP(ip, sp, bp, ra_at, bp_at, uses_bp);
        if (r <= 0)
            return r < 0 ? -1 : k + 1;
    }
    uint64_t h = path_hash(ips, ip, sp);
    uint32_t tag = (uint32_t)h & ~PATH_IDX_MASK;
    uint32_t *set = pc->sets[h >> (64 - PATH_SET_BITS)];
    for (int w = 0; w < PATH_WAYS; w++) {
        uint32_t e = set[w];
        if ((e & ~PATH_IDX_MASK) != tag || !(e & PATH_IDX_MASK))
            continue;
        struct path *p = path_at(pc, (e & PATH_IDX_MASK) - 1);
        int same_key = p->generation == generation && p->ip[PATH_KEY_STEPS] == ip && p->sp == sp &&
                       (!p->bp_in_key || p->bp == bp);
        for (int k = 0; k < PATH_KEY_STEPS; k++)
            same_key &= p->ip[k] == ips[k];
        if (!same_key)
            continue;
        const struct path_word *word = p->word, *end = word + p->nwords;
        while (word < end && *(const uint64_t *)(sp + word->at) == word->expect)
            word++;
        if (word < end)
            continue;
        /* This walk is the path's. */
        for (uint32_t i = 0, moved = e; i <= (uint32_t)w; i++) { /* to the front (not memmove: a call) */
            uint32_t t = set[i];
            set[i] = moved;
            moved = t;
        }
        pc->payoff.finds++;
        if (MLK_LIKELY(p->id != MLK_NO_STACK && p->id_kind == (uint8_t)kind && p->id_epoch == unload_epoch)) {
            *truncated = p->more;
            *known = p->id;
            return p->frames;
        }
        break; /* its frames are walked again, and its id is this walk's */
    }
    /* A new path (or one whose frames are wanted): the rest of the walk by
     * the rules, written down in the slot of the path it replaces (unusable
     * meanwhile).  Which saved rbp words a later rule used is known only at
     * the end: `used` has a bit per word. */
    struct path *p = path_at(pc, pc->victim);
    uint64_t ip_at_key = ip, sp_at_key = sp, bp_at_key = bp;
    uint64_t used[(2 * MLK_MAX_DEPTH + 63) / 64] = {0};
    int nw = 0, last_bp_word = -1, bp_used_first = 0, n = PATH_KEY_STEPS;
    int keep = 1; /* every word within 4 GiB above the state's sp */
    p->generation = 0;
    for (;; n++) {
        if (n >= max) {
            *truncated = 1;
            break;
        }
        ips[n] = ip;
        r = RULE_STEP(ip, sp, bp, ra_at, bp_at, uses_bp);
        if (MLK_UNLIKELY(uses_bp)) { /* the rbp before this step's: the state's, or the last saved one read */
            if (last_bp_word < 0)
                bp_used_first = 1;
            else
                used[last_bp_word / 64] |= 1ull << (last_bp_word % 64);
        }
        if (MLK_UNLIKELY(r < 0))
            return -1;
        if (ra_at) {
            keep &= ra_at - sp_at_key < (1ull << 32);
            used[nw / 64] |= 1ull << (nw % 64);
            p->word[nw++] = (struct path_word){(uint32_t)(ra_at - sp_at_key), ip};
        }
        if (bp_at) {
            keep &= bp_at - sp_at_key < (1ull << 32);
            last_bp_word = nw;
            p->word[nw++] = (struct path_word){(uint32_t)(bp_at - sp_at_key), bp};
        }
        if (r == 0) {
            n++;
            break;
        }
    }
    if (!keep)
        return n;
    /* (Saved rbp words no rule used are not the path's: the register's
     * value then is whatever the code kept in it, and must not matter.) */
    int kept = 0;
    for (int i = 0; i < nw; i++)
        if (used[i / 64] >> (i % 64) & 1)
            p->word[kept++] = p->word[i];
    p->nwords = (uint16_t)kept;
    for (int k = 0; k < PATH_KEY_STEPS; k++)
        p->ip[k] = ips[k];
    p->ip[PATH_KEY_STEPS] = ip_at_key;
    p->sp = sp_at_key;
    p->bp = bp_at_key;
    p->bp_in_key = (uint8_t)bp_used_first;
    p->frames = (uint8_t)n;
    p->more = (uint8_t)*truncated;
    p->id = MLK_NO_STACK;
    p->generation = generation;
    for (int w = PATH_WAYS - 1; w > 0; w--)
        set[w] = set[w - 1];
    set[0] = tag | (pc->victim + 1);
    pc->victim = pc->victim + 1 < pc->count ? pc->victim + 1 : 0;
    *last = p;
    return n;
}

/* Returns the number of frames, or -1 when libgcc must do it.  *known: as
 * for mlk_backtrace.
 *
 * A walk starts with the remembered walks from its first state: one the
 * same to its end is the answer (and most often its stack id as well);
 * else the one the same furthest gives the first frames.  The rest is
 * walked by the rules, frame by frame, and written down as the thread's
 * newest remembered walk.  (Looking for remembered walks at later states as
 * well, through an index of states, was tried: on programs whose walks are
 * many and seldom repeat, gcc's cc1, the looking and splicing cost more
 * instructions than walking by rules, and where walks repeat, sqlite3 or
 * jq, nearly all are found whole from their first state.  Such programs,
 * cc1, are served by remembered paths instead, keyed by their first
 * frames: see path_walk.) */
/* This function keeps a frame pointer whatever the build flags: its own
 * frame is where the walk starts. */
static __attribute__((noinline, optimize("no-omit-frame-pointer"))) int
fast_backtrace(uint64_t *ips, int max, int *truncated, int kind, uint32_t unload_epoch, uint32_t *known)
{
    /* Start from our caller's state: this function keeps a frame pointer
     * (libmtrace is built with -fno-omit-frame-pointer), so its CFA is
     * rbp + 16 and the caller's rbp is saved at [rbp]. */
    const uint64_t *rules = cache;
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
    if (MLK_UNLIKELY(sp & 7))
        return -1; /* cannot be (the steps' check relies on an aligned sp) */
    int n = 0, r, uses_bp;
    uint64_t ra_at = 0, bp_at = 0;
    *truncated = 0;
    /* Our own frames at the top are not the program's. */
    for (int skipped = 0; mlk_is_self_address(ip); skipped++) {
        if (skipped == 64)
            return -1;
        r = RULE_STEP(ip, sp, bp, ra_at, bp_at, uses_bp);
        if (r <= 0)
            return r;
    }
    uint64_t generation = __atomic_load_n(&rules_generation, __ATOMIC_ACQUIRE);
    struct memo *m = memo_of_thread(max);
    struct kept_walk *out = NULL; /* where this walk is written down */
    struct paths *pc = NULL;      /* where a resting thread's walk is looked for */
    struct path **last_path = NULL;
    if (m) {
        m->last = -1;
        m->last_path = NULL;
        int trying = payoff_try(&m->payoff);
        mlk_walk_quick = trying;
        if (!trying) {
            pc = paths_of(m);
            last_path = &m->last_path;
            m = NULL; /* this walk is neither looked for nor written down as a whole walk */
        }
    }
    if (m) {
        int slot, change = 0;
        struct kept_walk *w = recall_first(m, ip, sp, bp, generation, &slot, &change);
        if (w && change == w->steps && (!w->more || w->steps == max)) {
            /* This whole walk is a remembered one, which stays as it is. */
            if (w->id != MLK_NO_STACK && w->id_kind == (uint32_t)kind && w->id_epoch == unload_epoch)
                *known = w->id; /* the frames are not needed: most backtraces end here */
            else
                for (int k = 0; k < w->steps; k++)
                    ips[k] = w->step[k].ip;
            *truncated = w->more;
            m->last = slot;
            m->payoff.finds++;
            return w->steps;
        }
        /* (Only now: a walk found whole writes nothing.) */
        out = walk_at(m, m->victim);
        out->complete = 0;
        out->sp0 = sp;
        out->bp_upto = out->bp_ok = 0;
        if (w) {
            /* Its frames up to the change (included: its state is still
             * right) become ours. */
            int last = change < w->steps ? change : w->steps - 1;
            int take = last + 1 < max ? last + 1 : max;
            memcpy(out->step, w->step, (size_t)take * sizeof(struct step));
            out->step[0].bp = bp; /* (w's may be another rbp: see walk_starts_at) */
            if (w->bp_upto > 0) /* its steps that may have used rbp are ours, and right */
                out->bp_ok = out->bp_upto = w->bp_upto < take ? w->bp_upto : take;
            for (int k = 0; k < take; k++)
                ips[k] = w->step[k].ip;
            n = take;
            const struct step *s = &w->step[take - 1];
            int clamped = take - 1 < last;
            bp = bp_after(w, take - 1, bp);
            sp = s->ra_at + 8;
            if (clamped || change == w->steps) {
                /* Stopped at max within it, or it held to its end. */
                ip = s[1].ip;
                if (!clamped && !w->more)
                    goto ended;
            } else {
                /* Its frame `change` read other words this time: the state
                 * after it is those words'. */
                ip = *(const uint64_t *)s->ra_at;
                if (ip < 4096)
                    goto ended;
            }
        }
    }
    if (!out)
        goto walk_unrecorded;
    /* The walk by rules, written down (the loop nearly every frame of a
     * walk that is not a remembered one runs). */
    int bp_ok = out->bp_ok;
    for (;; n++) {
        if (n >= max) {
            *truncated = 1; /* the state now is a frame too */
            break;
        }
        ips[n] = ip;
        struct step *rec = &out->step[n];
        rec->ip = ip;
        rec->bp = bp;
        if (bp_ok == n - 1)
            bp_ok = n; /* walked here: right */
        r = RULE_STEP(ip, sp, bp, ra_at, bp_at, uses_bp);
        /* Where this step read (both 0 when it ended by its rule; ra_at =
         * sp - 8, as the rules put the return address there) -- written
         * before raise_bp_upto reads it: what the slot held before is
         * another walk's, maybe of another thread's stack, long unmapped. */
        rec->ra_at = ra_at;
        rec->bp_at = bp_at;
        if (MLK_UNLIKELY(uses_bp)) {
            out->bp_ok = bp_ok;
            raise_bp_upto(out, n + 1);
            bp_ok = out->bp_ok;
        }
        if (MLK_UNLIKELY(r <= 0)) {
            if (r < 0)
                goto not_understood;
            n++;
            break;
        }
    }
    out->bp_ok = bp_ok;
    out->step[n] = (struct step){ip, bp, 0, 0};
    remember(m, out, n, *truncated, generation);
    return n;

walk_unrecorded: /* a resting thread, or one that keeps no walks (exiting, out of memory) */
    if (pc > PATHS_NONE && n == 0) {
        r = path_walk(pc, last_path, ips, max, truncated, kind, unload_epoch, known, ip, sp, bp, (uint32_t)generation);
        if (r != PATH_PLAIN)
            return r;
    }
    for (uint64_t *frame = ips + n, *end = ips + max;; frame++) {
        if (frame == end) {
            *truncated = 1;
            return max;
        }
        *frame = ip;
        r = RULE_STEP(ip, sp, bp, ra_at, bp_at, uses_bp);
        if (r < 0)
            return -1;
        if (r == 0)
            return (int)(frame - ips) + 1;
    }

ended: /* where a remembered walk ended, after the frames taken from it */
    if (out) {
        out->step[n] = (struct step){ip, bp, 0, 0};
        remember(m, out, n, *truncated, generation);
    }
    return n;
not_understood:
    if (out)
        out->complete = 0; /* half written */
    return -1;
}

/* fast_backtrace's most common answer, on its own: its first state from the
 * hook's frame, the latest walk remembered from there (recall_first's first
 * look), held to its end, with its id for this kind and epoch.  What
 * fast_backtrace would have done besides -- count the walk in its window and
 * as a find, name the walk for mlk_walk_remember_stack -- is done here too;
 * anything else (no walk start, a resting thread, a window about to turn,
 * another walk) is left to it, untouched.  (Its own frame, its big
 * function's register saves and current_stack's were ~60 instructions of
 * the ~200 a walk found whole cost: churn, sqlite3.) */
uint32_t mlk_walk_known(int max, int kind, uint32_t unload_epoch)
{
    struct memo *m = thread_memo;
    uint64_t sp = mlk_walk_start.sp, here = (uint64_t)__builtin_frame_address(0);
    if (m <= MEMO_NONE || m->max != max || m->payoff.resting || m->payoff.left <= 1 ||
        !(sp > here && sp - here < 65536))
        return MLK_NO_STACK;
    uint64_t ip = mlk_walk_start.ip, bp = mlk_walk_start.bp;
    if (mlk_is_self_address(ip))
        return MLK_NO_STACK;
    uint16_t tag;
    uint16_t *set = first_set(m, ip, sp, &tag);
    int s = set[0] & 0xff;
    if ((set[0] & 0xff00) != tag || s >= MEMO_WALKS || s == m->victim)
        return MLK_NO_STACK;
    const struct kept_walk *w = walk_at(m, s);
    if (!walk_starts_at(w, ip, sp, bp, __atomic_load_n(&rules_generation, __ATOMIC_ACQUIRE)) ||
        w->id == MLK_NO_STACK || w->id_kind != (uint32_t)kind || w->id_epoch != unload_epoch ||
        (w->more && w->steps != max) || first_change(w, 0) != w->steps)
        return MLK_NO_STACK;
    m->payoff.left--; /* (above 1: no turn of the window is due) */
    m->payoff.finds++;
    m->last = s;
    m->last_path = NULL;
    mlk_walk_start.sp = 0;
    return w->id;
}

void mlk_walk_remember_stack(int kind, uint32_t unload_epoch, uint32_t id)
{
    struct memo *m = thread_memo;
    if (m <= MEMO_NONE)
        return;
    struct path *p = m->last_path;
    if (p) {
        p->id = id;
        p->id_kind = (uint8_t)kind;
        p->id_epoch = unload_epoch;
        m->last_path = NULL;
        return;
    }
    if (m->last < 0)
        return;
    struct kept_walk *w = walk_at(m, m->last);
    w->id = id;
    w->id_kind = (uint32_t)kind;
    w->id_epoch = unload_epoch;
}

void mlk_unwind_lock_for_fork(int acquire)
{
    mlk_lock_across_fork(&spare_lock, acquire);
}

/* How many of a walk's frames the frame-pointer fallback found: the frames
 * after a frame whose rule is RULE_BY_FP; and whether the walk ended at
 * such a frame (the chain did not check out there, or the thread's stack
 * extent is not known).  (Called for new stacks only.) */
int mlk_frames_by_fp(const uint64_t *ips, int depth, int *ends_there)
{
    int n = 0;
    *ends_there = 0;
    if (mlk_unwind_mode != MLK_UNWIND_FAST || !cache || depth == 0)
        return 0;
    for (int k = 0; k + 1 < depth; k++)
        n += (rule_of(ips[k]) & RULE_BY_FP) != 0;
    *ends_there = (rule_of(ips[depth - 1]) & RULE_BY_FP) != 0;
    return n;
}

void mlk_unwind_init(void)
{
    mlk_fp_init();
    if (!cache)
        cache = mlk_map_anon(sizeof *cache << CACHE_BITS);
    if (!memo_key_made)
        memo_key_made = pthread_key_create(&memo_key, memo_release) == 0;
}

void mlk_unwind_forget(void)
{
    /* Every rule word is one store, so clearing them is enough: a walk
     * racing with this recomputes its rule or uses the word it read. */
    if (cache)
        for (uint64_t i = 0; i < (1u << CACHE_BITS); i++)
            __atomic_store_n(&cache[i], 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&rules_generation, 1, __ATOMIC_RELEASE); /* every thread's remembered walks */
}

__thread struct mlk_walk_start mlk_walk_start __attribute__((tls_model("initial-exec")));

int mlk_backtrace(uint64_t *ips, int max, int *truncated, int kind, uint32_t unload_epoch, uint32_t *known)
{
    *known = MLK_NO_STACK;
    if (mlk_unwind_mode == MLK_UNWIND_FAST && cache) {
        int n = fast_backtrace(ips, max, truncated, kind, unload_epoch, known);
        mlk_walk_start.sp = 0;
        if (n >= 0)
            return n;
    }
    mlk_walk_start.sp = 0;
    return mlk_libgcc_backtrace(ips, max, truncated);
}

#else /* not x86-64: libgcc only */

void mlk_unwind_init(void) {}
int mlk_frames_by_fp(const uint64_t *ips, int depth, int *ends_there) { return *ends_there = 0; }
void mlk_unwind_forget(void) {}
void mlk_unwind_lock_for_fork(int acquire) {}
void mlk_walk_remember_stack(int kind, uint32_t unload_epoch, uint32_t id) {}
uint32_t mlk_walk_known(int max, int kind, uint32_t unload_epoch) { return MLK_NO_STACK; }

__thread struct mlk_walk_start mlk_walk_start __attribute__((tls_model("initial-exec")));

int mlk_backtrace(uint64_t *ips, int max, int *truncated, int kind, uint32_t unload_epoch, uint32_t *known)
{
    *known = MLK_NO_STACK;
    return mlk_libgcc_backtrace(ips, max, truncated);
}

#endif
