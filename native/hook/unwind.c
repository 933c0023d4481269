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
 * Reading the tables and the libgcc fallback are unwind_cfi.c's; the rule
 * cache and a step by the rules unwind_rules.h's, the remembered walks
 * unwind_walks.h's, the remembered paths unwind_paths.h's (one translation
 * unit with this file, which has the walk itself and its API). */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
#include <unwind.h>

#include "mlk.h"
#include "unwind_cfi.h"

int mlk_unwind_mode = MLK_UNWIND_FAST;

#if defined(__x86_64__)

#include "unwind_rules.h"
#include "unwind_words.h"
#include "unwind_walks.h"
#include "unwind_paths.h"

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
    struct memo *path_memo = NULL; /* whose they are */
    if (m) {
        /* (Nothing named for mlk_walk_remember_stack: mlk_backtrace, our
         * only caller, cleared it -- or memo_of_thread made m just now.) */
        int trying = payoff_try(&m->payoff, whole_walks_bar(m));
        mlk_walk_quick = trying;
        mlk_thread_fast_set(MLK_THREAD_QUICK, trying);
        if (!trying) {
            pc = paths_of(m);
            path_memo = m;
            m = NULL; /* this walk is neither looked for nor written down as a whole walk */
        }
    }
    if (m) {
        int slot, change = 0;
        struct kept_walk *w = recall_first(m, ip, sp, bp, generation, &slot, &change);
        if (w && change == w->steps && (!w->more || w->steps == max)) {
            /* This whole walk is a remembered one, which stays as it is. */
            if (MLK_UNLIKELY(!w->list_tried))
                write_list(m, w); /* found whole again: it may be checked whole from now on */
            if (w->id_for == ID_FOR(kind, unload_epoch))
                *known = w->id; /* the frames are not needed: most backtraces end here */
            else
                for (int k = 0; k < w->steps; k++)
                    ips[k] = w->step[k].ip;
            *truncated = w->more;
            m->last = slot;
            m->payoff.counts += PAYOFF_FIND;
            return w->steps;
        }
        /* (Only now: a walk found whole writes nothing.) */
        out = walk_at(m, m->victim);
        out->generation = 0;
        out->quick_sp = 0;
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
        r = path_walk(path_memo, pc, ips, max, truncated, kind, unload_epoch, known, ip, sp, bp, (uint32_t)generation);
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
        out->generation = 0; /* half written */
    return -1;
}

/* Where mlk_walk_known and mlk_walk_known_older look: the set of walks
 * remembered from the hook frame's state (its index), or -1 where
 * fast_backtrace must (no walk start, a resting thread, a window about to
 * turn). */
struct walk_known_state {
    uint64_t ip, sp, bp;
    uint16_t tag;
};

static inline __attribute__((always_inline)) int walk_known_set_at(struct memo *m, struct mlk_walk_start at,
                                                                    struct walk_known_state *st)
{
    /* (Not resting: every caller has tested mlk_walk_quick, which
     * fast_backtrace sets to "not resting" each time the window turns.
     * No test of m->max: a thread's memo is made, or handed on, for the
     * segment's depth (memo_of_thread), which a process never changes --
     * its forked children copy it -- so it is the depth asked for.) */
    if (m <= MEMO_NONE || payoff_left(&m->payoff) <= 1)
        return -1;
    /* (No test that ip is not our own code's: a walk is remembered from
     * the first state past our frames, so from such a state none is found.) */
    *st = (struct walk_known_state){at.ip, at.sp, at.bp, 0};
    return (int)first_index(at.ip, at.sp, &st->tag);
}

/* mlk_walk_start was set by a hook whose frame is above ours (else it is
 * cleared, or stale). */
static inline __attribute__((always_inline)) int walk_start_above(void)
{
    uint64_t sp = mlk_walk_start.sp, here = (uint64_t)__builtin_frame_address(0);
    return sp > here && sp - here < 65536;
}

static inline __attribute__((always_inline)) int walk_known_set(struct memo *m, struct walk_known_state *st)
{
    return walk_start_above() ? walk_known_set_at(m, mlk_walk_start, st) : -1;
}

/* An id a walk or path was named with (its id_for or id_kind matched):
 * always one interned, below MLK_STACKS_CAP -- mlk_walk_remember_stack is
 * given no other -- which the compiler is told, so that the allocation's
 * fast way does not test it again (as a stack that could be
 * MLK_TRAILER_UNCOUNTED). */
static inline uint32_t known_id(uint32_t id)
{
    if (id >= MLK_STACKS_CAP)
        __builtin_unreachable();
    return id;
}

/* Walk slot s holds from this state to its end, with its id for this
 * kind and epoch: counted and named as fast_backtrace would have. */
static inline __attribute__((always_inline)) uint32_t
walk_known_slot(struct memo *m, int s, const struct walk_known_state *st, int kind, uint32_t unload_epoch)
{
    /* (The victim slot too: its walk is whole until fast_backtrace starts
     * writing over it, which first clears quick_sp.) */
    if (s >= MEMO_WALKS)
        return MLK_NO_STACK;
    const struct kept_walk *w = walk_at(m, s);
    if (w->quick_sp != st->sp || w->id_for != ID_FOR(kind, unload_epoch) ||
        !walk_holds(w, st->ip, st->sp, st->bp, __atomic_load_n(&rules_generation, __ATOMIC_ACQUIRE)))
        return MLK_NO_STACK;
    payoff_found(&m->payoff); /* (left above 1: no turn of the window is due) */
    m->last = s;
    /* (m->last_path is left as it is: a walk found here has its id, so no
     * mlk_walk_remember_stack follows it, and the one that may follow a
     * later walk comes after mlk_backtrace, which clears last_path.) */
    return known_id(w->id);
}

/* (way: a set's entry, the tag of its state << 8 | its slot) */
static inline __attribute__((always_inline)) uint32_t
walk_known_way(struct memo *m, uint16_t way, const struct walk_known_state *st, int kind, uint32_t unload_epoch)
{
    if ((way & 0xff00) != st->tag)
        return MLK_NO_STACK;
    return walk_known_slot(m, way & 0xff, st, kind, unload_epoch);
}

/* A walk start answered is used (mlk_walk_known, mlk_walk_known_older). */
static inline uint32_t start_used(uint32_t id)
{
    if (id != MLK_NO_STACK)
        mlk_walk_start.sp = 0;
    return id;
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
/* The look from a hook frame's state given, `at` (MLK_FRAME_HERE; its sp
 * above us by construction): mlk_walk_known's, and inlined into the
 * allocation's fast way (mlk_trailer_alloc_fast), which makes no call. */
__attribute__((always_inline)) inline uint32_t mlk_walk_known_at(int kind, uint32_t unload_epoch, struct mlk_walk_start at)
{
    struct memo *m = thread_memo;
    struct walk_known_state st;
    int set = walk_known_set_at(m, at, &st);
    /* (The set's front is taken without its tag's test: a walk from
     * another first state is told by its sp, quick_sp, and by its
     * fingerprint, which starts from its first ip -- a bijection of it,
     * walk_seed -- so another ip never matches.  Six instructions a look;
     * a walk of another state met here touches its line for nothing.) */
    return set >= 0 ? walk_known_slot(m, m->latest[set] & 0xff, &st, kind, unload_epoch) : MLK_NO_STACK;
}

uint32_t mlk_walk_known(int kind, uint32_t unload_epoch)
{
    return walk_start_above() ? start_used(mlk_walk_known_at(kind, unload_epoch, mlk_walk_start))
                              : MLK_NO_STACK;
}

/* The same answer from the set's older walks, asked when the latest did
 * not hold.  sqlite3: 1 walk in 6 is an older one, which went the whole
 * way through fast_backtrace before, ~600 instructions more each (-4.3M
 * in all).  (Inside mlk_walk_known, its registers cost the common look
 * more than it saved: churn +16M; tail-called from it, +1.8M on churn,
 * where it is never needed; so stack_walked asks, before its frame.)
 * Looked for in vain, recall_first looks again, so only where older walks
 * clearly pay: older_worth gains 8 a find there and loses 1 a look in
 * vain, and sits at its cap (1000) on sqlite3, near 0 on cc1 -- which
 * paid +7.3M instructions for looking whenever recall_first would (worth
 * > 0), +5.7M from 512 inside stack_walked's frame, +2.1M before it. */
#define OLDER_QUICK_WORTH 512

/* Which older walk, and what the quick look tries next.  sqlite3's walks
 * from one first state come in a fixed order, statement after statement
 * (A B C A B C ...), so the most recent walk of a state -- the front of its
 * set, which the quick look tries -- was never the next one: 1 walk in 6
 * took this slower way.  So the walk that came after each one, when the
 * quick look missed it, is remembered (next_of), tried first here (17k of
 * sqlite3's 32k looks), and -- the saving -- put at the front once its
 * predecessor is found, so that the quick look finds it itself: sqlite3
 * 371.6M -> 368.2M instructions; churn and cc1 unmoved (their states have one walk each, or they rest).  (Trying
 * the guess inside the quick look instead: sqlite3 -0.3M, churn +3.7M.) */

/* Which way of the set is `way` (its tag and slot), or -1. */
static int way_of(const uint16_t *set, uint16_t way)
{
    for (int j = 0; j < MEMO_FIRST_WAYS; j++)
        if (set[j] == way)
            return j;
    return -1;
}

/* Walk `slot` of this set was just found other than as its latest: the
 * front (what the quick look tries) becomes the walk that came after it
 * last time, if that one started here too, else the walk found. */
static void front_for_next(struct memo *m, uint16_t *set, uint16_t tag, int slot)
{
    int next = m->next_of[slot];
    int j = next < MEMO_WALKS ? way_of(set, tag | next) : -1;
    if (j < 0)
        j = way_of(set, tag | slot);
    if (j > 0)
        move_to_front(m, set, j, set[j]);
}
uint32_t mlk_walk_known_older(int kind, uint32_t unload_epoch)
{
    struct memo *m = thread_memo;
    if (m <= MEMO_NONE || m->older_worth < OLDER_QUICK_WORTH)
        return MLK_NO_STACK;
    struct walk_known_state st;
    int at = walk_known_set(m, &st);
    if (at < 0)
        return MLK_NO_STACK;
    uint16_t *set = m->firsts[at];
    int prev = m->last;
    uint32_t id = prev >= 0 ? walk_known_slot(m, m->next_of[prev], &st, kind, unload_epoch) : MLK_NO_STACK;
    for (int i = 1; id == MLK_NO_STACK && i < MEMO_FIRST_WAYS; i++) {
        id = walk_known_way(m, set[i], &st, kind, unload_epoch);
        if (id != MLK_NO_STACK)
            learn_next(m, prev, set[i] & 0xff);
    }
    if (id == MLK_NO_STACK)
        return MLK_NO_STACK;
    front_for_next(m, set, st.tag, m->last);
    m->older_worth = m->older_worth < 1000 ? m->older_worth + 8 : m->older_worth;
    return start_used(id);
}

/* A resting thread's walk from the hook frame's state `at` through its
 * remembered paths, when one holds with its id for this kind and epoch --
 * what fast_backtrace would have found (cc1: 99% of its walks) -- counted in
 * both windows as it would have; else MLK_NO_STACK, nothing counted, and
 * fast_backtrace walks (a window about to turn is left to it too).  Asked
 * by the allocation's way for resting threads (mlk_trailer_alloc_by_path),
 * which then records the block with no more of the whole way: its hook
 * frame, the record and the walk's set-up were ~150 est. cycles of an
 * allocation's ~1,200 on cc1. */
uint32_t mlk_walk_known_path(int kind, uint32_t unload_epoch, struct mlk_walk_start at)
{
    /* (No test of m->max, as walk_known_set_at; none of at.sp's alignment:
     * at is a hook frame's MLK_FRAME_HERE, an aligned frame address.  Not
     * mlk_walk_quick asked, but what it mirrors, m->payoff.resting.) */
    struct memo *m = thread_memo;
    if (m <= MEMO_NONE || !m->payoff.resting || payoff_left(&m->payoff) <= 1)
        return MLK_NO_STACK;
    struct paths *pc = m->paths;
    if (pc <= PATHS_NONE || pc->payoff.resting || payoff_left(&pc->payoff) <= 1)
        return MLK_NO_STACK;
    uint64_t ips[PATH_KEY_STEPS], ip = at.ip, sp = at.sp, bp = at.bp, h;
    if (path_key(ips, &ip, &sp, &bp) != PATH_KEY_WHOLE)
        return MLK_NO_STACK;
    uint32_t generation = (uint32_t)__atomic_load_n(&rules_generation, __ATOMIC_ACQUIRE);
    struct path *p = path_find(pc, ips, ip, sp, bp, path_gen_owner(m, generation), &h);
    if (!p || p->id == MLK_NO_STACK || p->id_kind != (uint8_t)kind || p->id_epoch != unload_epoch)
        return MLK_NO_STACK; /* (one found was moved forward in its set, as fast_backtrace will) */
    m->payoff.counts--; /* (both above 1: no turn due) */
    payoff_found(&pc->payoff);
    /* (m->last and m->last_path are left as they are, as walk_known_slot
     * leaves them: mlk_backtrace clears them before any walk whose stack
     * mlk_walk_remember_stack may name.) */
    return known_id(p->id);
}

void mlk_walk_remember_stack(int kind, uint32_t unload_epoch, uint32_t id)
{
    struct memo *m = thread_memo;
    if (m <= MEMO_NONE || id >= MLK_STACKS_CAP) /* (none such is given: known_id relies on it) */
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
    w->id_for = ID_FOR(kind, unload_epoch);
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
    if (!victims)
        victims = mlk_map_anon(sizeof *victims << VICTIM_BITS); /* (none: rules are computed again) */
    if (!memo_key_made)
        memo_key_made = pthread_key_create(&memo_key, memo_release) == 0;
}

void mlk_unwind_forget(void)
{
    /* Every rule word is one store, so clearing them is enough: a walk
     * racing with this recomputes its rule or uses the word it read. */
    if (victims) /* (first: a rule moving back from them meanwhile is cleared below) */
        for (uint64_t i = 0; i < (1u << VICTIM_BITS); i++)
            __atomic_store_n(&victims[i], 0, __ATOMIC_RELAXED);
    if (cache)
        for (uint64_t i = 0; i < (1u << CACHE_BITS); i++)
            __atomic_store_n(&cache[i], 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&rules_generation, 1, __ATOMIC_RELEASE); /* every thread's remembered walks */
    mlk_cfa_forget();
}

__thread struct mlk_walk_start mlk_walk_start __attribute__((tls_model("initial-exec")));

int mlk_backtrace(uint64_t *ips, int max, int *truncated, int kind, uint32_t unload_epoch, uint32_t *known)
{
    *known = MLK_NO_STACK;
    /* No walk or path named for mlk_walk_remember_stack yet: the quick
     * look and the paths' look leave the one they found named, and a walk
     * that returns before fast_backtrace's memo is set up (our own frames
     * only, or libgcc's turn) must not have the id interned for it given
     * to that one.  (The whole way only: a few stores.) */
    struct memo *m = thread_memo;
    if (m > MEMO_NONE) {
        m->last = -1;
        m->last_path = NULL;
    }
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
uint32_t mlk_walk_known(int kind, uint32_t unload_epoch) { return MLK_NO_STACK; }
uint32_t mlk_walk_known_older(int kind, uint32_t unload_epoch) { return MLK_NO_STACK; }
uint32_t mlk_walk_known_path(int kind, uint32_t unload_epoch, struct mlk_walk_start at)
{
    return MLK_NO_STACK;
}

__thread struct mlk_walk_start mlk_walk_start __attribute__((tls_model("initial-exec")));

int mlk_backtrace(uint64_t *ips, int max, int *truncated, int kind, uint32_t unload_epoch, uint32_t *known)
{
    *known = MLK_NO_STACK;
    return mlk_libgcc_backtrace(ips, max, truncated);
}

#endif
