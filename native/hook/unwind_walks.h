/* Each thread's remembered walks, and whether remembering pays.  Included by unwind.c alone,
 * inside its x86-64 part: the walk, its steps and its lookups are one
 * translation unit, so that the steps inline into the loops that run them
 * per frame (split out by duty, not to be compiled apart). */
#ifndef MLK_UNWIND_WALKS_H
#define MLK_UNWIND_WALKS_H

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
    uint64_t counts;       /* walks to go in this window or rest (payoff_left), and walks found
                              remembered in this window (payoff_finds): a find is one add */
    unsigned rest;         /* the length of the next rest */
    unsigned resting;
};
#define PAYOFF_FIND (1ull << 32)
static inline unsigned payoff_left(const struct payoff *p) { return (uint32_t)p->counts; }
static inline unsigned payoff_finds(const struct payoff *p) { return (unsigned)(p->counts >> 32); }
/* A walk found remembered, with no turn due (payoff_left above 1, so the
 * low half does not borrow): a walk gone and a find, in one add (the
 * quick look's four instructions were two adds through a vector register). */
static inline void payoff_found(struct payoff *p) { p->counts += PAYOFF_FIND - 1; }

/* What a window must find for remembering to pay, and the longest rest. */
struct payoff_bar {
    unsigned min_finds, rest_max;
};
/* Against walking by the rules alone (whole walks, and paths). */
static const struct payoff_bar bar_alone = {MEMO_WINDOW / MEMO_MIN_FINDS, MEMO_REST_MAX};

static void payoff_start(struct payoff *p)
{
    *p = (struct payoff){MEMO_WINDOW, MEMO_WINDOW, 0};
}

/* The window or rest is over: what comes next. */
static __attribute__((noinline)) void payoff_turn(struct payoff *p, const struct payoff_bar *bar)
{
    unsigned left;
    if (p->resting) {
        p->resting = 0;
        left = MEMO_WINDOW;
    } else if (payoff_finds(p) < bar->min_finds) {
        p->resting = 1;
        left = p->rest < bar->rest_max ? p->rest : bar->rest_max;
        p->rest = left < bar->rest_max ? left * 2 : bar->rest_max;
    } else {
        p->rest = MEMO_WINDOW;
        left = MEMO_WINDOW;
    }
    p->counts = left; /* (no finds yet) */
}

/* Does this walk try remembering? */
static inline int payoff_try(struct payoff *p, const struct payoff_bar *bar)
{
    if (MLK_UNLIKELY((uint32_t)--p->counts == 0)) /* (left is never 0 here: no borrow) */
        payoff_turn(p, bar);
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

/* What checking a remembered walk reads, on its first cache line: where
 * each stack word the walk read is (a return address; a saved rbp where a
 * rule used one, see bp_upto), in eighths above the walk's first sp and in
 * its order, and one fingerprint of the values it read (words_fingerprint,
 * started from walk_seed: the first state's ip, rbp where it matters, and
 * the rules' generation) -- with the walk's stack id, all the quick look
 * reads (mlk_walk_known_at): 2 bytes a word, so a walk of up to 17 words is
 * checked on one line, where the words with their values took 3 or 4
 * besides the walk's head (sqlite3: its quick looks missed the first-level
 * cache ~600k times).  Every word is read, so a list is written only where
 * all lie on this thread's own stack, between the first sp and the
 * stack's known end (as a path's, see struct path: a memo's walks are
 * dropped when another thread takes it). */
#define QUICK_WORDS 49 /* (the list's two lines: a walk of 16 frames reads 34 words at most) */
struct kept_walk {
    /* -- the list, first: what the quick look reads -- */
    uint64_t quick_sp;     /* sp0, once the list is written; 0: none (see write_list) */
    uint64_t sum;          /* the fingerprint of its words' values, from walk_seed */
    uint64_t id_for;       /* the kind and unload epoch id was interned for (ID_FOR), or ID_FOR_NONE */
    uint32_t id;           /* the stack interned for it (MLK_NO_STACK: none yet) */
    uint8_t nwords;
    uint8_t bp_in_seed;    /* bp_upto > 0: the first state's rbp is part of it */
    uint16_t at[QUICK_WORDS];
    /* -- the walk -- */
    /* rules_generation it was walked under; 0: being written (or never
     * was), or a walk of no frames, which is never looked for */
    uint64_t generation;
    int steps;             /* frames recorded */
    int more;              /* stopped at max: step[steps] is a frame too */
    uint64_t sp0;          /* the first state's sp */
    int list_tried;        /* write_list ran (else the list is not written yet) */
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
_Static_assert(offsetof(struct kept_walk, at) + 17 * sizeof(uint16_t) == 64, "17 words on the first line");
_Static_assert(offsetof(struct kept_walk, generation) == 128, "the list on two lines");

struct paths;
static void paths_handed_over(struct paths *pc, uint32_t owner);
struct memo {
    struct memo *next_spare;
    struct paths *paths;   /* see "remembered paths"; NULL: not mapped yet */
    int max;               /* frames per walk it is sized for */
    int victim;            /* the walk slot the next new walk goes into */
    int last;              /* the slot whose walk the last backtrace returned, or -1 */
    struct path *last_path; /* or the path it wrote down (see path_walk), or NULL */
    int older_worth;       /* > 0: looking past the latest walk of a first state has paid */
    uint32_t owner;        /* counted up each time a thread takes it: whose its paths are */
    unsigned walks_since_check;
    struct payoff payoff;  /* whether remembering whole walks pays (see MEMO_WINDOW) */
    size_t walk_size;
    /* Per walk slot, the slot of the walk that came next the last time the
     * next one was not the latest of its first state (MEMO_WALKS or more:
     * none): see mlk_walk_known_older. */
    uint8_t next_of[MEMO_WALKS];
    /* Each set's front (firsts[i][0]) again, side by side: all the quick
     * look reads of the sets (mlk_walk_known_at), 2 KiB where the fronts
     * of the sets in use were a cache line each of 16 KiB. */
    uint16_t latest[1 << MEMO_FIRST_SET_BITS];
    /* Per first state (hashed), the walks that started there, most recently
     * used first: other bits of the state's hash << 8 | slot (MEMO_WALKS or
     * more: none).  Changed by move_to_front only, which keeps `latest`. */
    uint16_t firsts[1 << MEMO_FIRST_SET_BITS][MEMO_FIRST_WAYS];
    /* then MEMO_WALKS walks of walk_size bytes */
};

#define MEMO_NONE ((struct memo *)1) /* this thread cannot have one (exiting, out of memory) */
#define thread_memo (mlk_hot.memo) /* this thread's (mlk.h's hot words) */
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

/* A walk's checks at most: a return address and a saved rbp per step. */
#define MEMO_CHECKS(max) (2 * ((size_t)(max) + 1))
#define ID_FOR(kind, unload_epoch) ((uint64_t)(unload_epoch) << 32 | (uint32_t)(kind))
#define ID_FOR_NONE (~0ull)

/* Walks start on cache lines, so that a walk's list (what the quick look
 * reads) is its first line, and its head with its first step's state (what
 * walk_starts_at reads) one line too. */
#define MEMO_HEAD ((sizeof(struct memo) + 63) & ~(size_t)63)
static inline struct kept_walk *walk_at(struct memo *m, int slot)
{
    return (struct kept_walk *)((char *)m + MEMO_HEAD + (size_t)slot * m->walk_size);
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
        for (int i = 0; i < MEMO_WALKS; i++) {
            walk_at(m, i)->generation = 0;
            walk_at(m, i)->quick_sp = 0; /* (its list's words may lie beyond this thread's stack) */
        }
    } else {
        size_t walk_size = (sizeof(struct kept_walk) + (size_t)(max + 1) * sizeof(struct step) + 63) & ~(size_t)63;
        size_t size = MEMO_HEAD + MEMO_WALKS * walk_size;
        m = mlk_map_anon(size);
        if (!m) {
            thread_memo = MEMO_NONE;
            return NULL;
        }
        m->max = max;
        m->walk_size = walk_size;
    }
    memset(m->firsts, 0xff, sizeof m->firsts);
    memset(m->latest, 0xff, sizeof m->latest);
    memset(m->next_of, 0xff, sizeof m->next_of);
    m->older_worth = 64;
    m->owner++; /* (the paths of the thread that had it are not this one's: see struct path) */
    paths_handed_over(m->paths, m->owner);
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

/* Where checking walk w's list starts: its first state's ip (the state's
 * sp is compared exactly), rbp where a rule uses it (bp_upto > 0: see
 * walk_starts_at), and the rules' generation. */
static inline uint64_t walk_seed(uint64_t ip, uint64_t generation, int bp_in_seed, uint64_t bp)
{
    uint64_t c = words_mix1(generation, ip); /* (a bijection of ip, spread over all 64 bits) */
    return bp_in_seed ? words_mix1(c, bp) : c;
}

/* Whether walk w, started from (ip, sp, bp) -- sp compared with its list's
 * quick_sp by the caller -- still holds: every stack word it read holds
 * what it read (the fingerprint of them all; see struct kept_walk). */
static inline int walk_holds(const struct kept_walk *w, uint64_t ip, uint64_t sp, uint64_t bp, uint64_t generation)
{
    return words_fingerprint(walk_seed(ip, generation, w->bp_in_seed, bp), w->at, w->nwords, sp) == w->sum;
}

/* A new walk has no list (quick_sp 0: the quick look never finds it) until
 * recall_first has found it whole once (first_change, by its steps), which
 * then writes the list (write_list).  Most walks of a program with many
 * paths (cc1) are never found again: writing every walk's list when it was
 * walked cost cc1 0.4%. */
static inline void list_unwritten(struct kept_walk *w)
{
    w->quick_sp = 0;
    w->list_tried = 0;
}

/* Walk w's list, from its steps (first_change's words, in its order), where
 * it may have one: every word within 2^16 eighths above sp0 and on this
 * thread's stack, no more than QUICK_WORDS of them, and not a walk cut at
 * another depth than the memo's (max). */
static __attribute__((noinline)) void write_list(const struct memo *m, struct kept_walk *w)
{
    const struct step *s = w->step;
    uint64_t at[MEMO_CHECKS(MLK_MAX_DEPTH)], value[MEMO_CHECKS(MLK_MAX_DEPTH)], off = 0, furthest = 0;
    int n = 0;
    w->list_tried = 1; /* (not again) */
    if (w->more && w->steps != m->max)
        return;
    for (int k = 0; k < w->steps; k++) {
        if (s[k].ra_at) {
            at[n] = s[k].ra_at - w->sp0;
            value[n++] = s[k + 1].ip;
        }
        if (k < w->bp_upto && s[k].bp_at) {
            at[n] = s[k].bp_at - w->sp0;
            value[n++] = s[k + 1].bp;
        }
    }
    for (int i = 0; i < n; i++) {
        off |= at[i];
        furthest = at[i] > furthest ? at[i] : furthest;
    }
    uint64_t end = mlk_fp_stack_end(w->sp0);
    if (n > QUICK_WORDS || (off & 7) || off >= 8ull << 16 || !end || w->sp0 >= end || end - w->sp0 <= furthest)
        return; /* a word below sp0, too far above it or off this thread's stack: no list */
    for (int i = 0; i < n; i++)
        w->at[i] = (uint16_t)(at[i] / 8);
    w->nwords = (uint8_t)n;
    w->bp_in_seed = w->bp_upto > 0;
    w->sum = values_fingerprint(walk_seed(s[0].ip, w->generation, w->bp_in_seed, s[0].bp), value, (unsigned)n);
    w->quick_sp = w->sp0; /* (last: usable from now on) */
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
    return w->generation == generation && w->step[0].ip == ip && w->sp0 == sp &&
           (w->bp_upto == 0 || w->step[0].bp == bp);
}

/* The walks that started at a state, most recently used first. */
static inline unsigned first_index(uint64_t ip, uint64_t sp, uint16_t *tag)
{
    uint64_t h = state_hash(ip, sp);
    *tag = (uint16_t)((h >> 16 & 0xff) << 8);
    return (unsigned)(h >> (64 - MEMO_FIRST_SET_BITS));
}

static inline uint16_t *first_set(struct memo *m, uint64_t ip, uint64_t sp, uint16_t *tag)
{
    return m->firsts[first_index(ip, sp, tag)];
}

/* Way i of a set becomes `way`, moved to the front: the ways before it
 * move back one.  (The set is 16 bytes: shifted as one 128-bit value --
 * gcc made the loop a call to memmove, 58 instructions a move on sqlite3.) */
_Static_assert(MEMO_FIRST_WAYS * sizeof(uint16_t) == 16, "a set of first states is one 128-bit value");
static inline void move_to_front(struct memo *m, uint16_t *set, int i, uint16_t way)
{
    unsigned __int128 v;
    memcpy(&v, set, sizeof v);
    unsigned __int128 before = v & (((unsigned __int128)1 << (16 * i)) - 1);
    unsigned __int128 after = i < MEMO_FIRST_WAYS - 1 ? v >> (16 * (i + 1)) << (16 * (i + 1)) : 0;
    v = after | before << 16 | way;
    memcpy(set, &v, sizeof v);
    m->latest[(set - m->firsts[0]) / MEMO_FIRST_WAYS] = way;
}

/* `way` to the front of its set: from where its slot is, else from the last way. */
static void to_front(struct memo *m, uint16_t *set, uint16_t way)
{
    int i = 0;
    while (i < MEMO_FIRST_WAYS - 1 && (set[i] & 0xff) != (way & 0xff))
        i++;
    move_to_front(m, set, i, way);
}

static void walk_to_front(struct memo *m, const struct kept_walk *w, int slot)
{
    uint16_t tag;
    uint16_t *set = first_set(m, w->step[0].ip, w->sp0, &tag);
    to_front(m, set, tag | (uint16_t)slot);
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
    /* Looking past the most recent walk pays where the same few paths
     * alternate (sqlite3: 92% of walks found whole with the older ones, 41%
     * without), not where paths are many (cc1: each one costs a check to
     * where it parts, for few finds). */
    int ways = m->older_worth > 0 || (++m->walks_since_check & 63) == 0 ? MEMO_FIRST_WAYS : 1;
    for (int i = 0; i < ways; i++) {
        int s = set[i] & 0xff;
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
                    move_to_front(m, set, i, set[i]);
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

/* Walk `slot` came after walk `prev` (-1: none known) other than as the
 * latest of its first state: the guess mlk_walk_known_older tries first. */
static inline void learn_next(struct memo *m, int prev, int slot)
{
    if (prev >= 0)
        m->next_of[prev] = (uint8_t)slot;
}

/* The walk in the victim slot is complete: it becomes the latest of those
 * that started at its first state. */
static void remember(struct memo *m, struct kept_walk *w, int steps, int more, uint64_t generation)
{
    int slot = m->victim;
    w->steps = steps;
    w->more = more;
    w->id = MLK_NO_STACK;
    w->id_for = ID_FOR_NONE;
    if (steps) {
        list_unwritten(w);
        w->generation = generation; /* (complete: generation is never 0) */
        walk_to_front(m, w, slot);
    }
    m->last = slot;
    m->victim = (slot + 1) % MEMO_WALKS;
}


#endif
