/* The allocator's own statistics, asked inside the program: jemalloc's
 * stats.* (allocated, active, metadata, resident, mapped, retained) -- what
 * only its mallctl() can say, where glibc's arenas are read from outside
 * (native/reporter/glibc_arenas.c).
 *
 * When it is asked matters, in someone else's program: mallctl("epoch")
 * takes jemalloc's locks, so it must run where this thread holds none of
 * them -- not in a signal handler (the report signal may interrupt
 * jemalloc itself), not in a thread of our own (a program may need to stay
 * single-threaded: unshare, seccomp sandboxes).  So the reporter asks
 * (alloc_stats_asked, and a bit in the program's attention word, written
 * through /proc/PID/mem as `shell stop` writes the collecting flag) and the
 * next allocation answers, at rest: after the real allocator returned and
 * the hook's counters are done, inside the hook's guard (anything mallctl
 * allocates passes through untraced).  An allocation that jemalloc itself
 * caused (its background thread's pthread_create, under its own lock) must
 * not answer: its stack is checked for jemalloc's code, and a stack cut at
 * the depth, which might hide it, does not answer either. */
#define _GNU_SOURCE
#include <link.h>
#include <string.h>
#include <time.h>

#include "mlk.h"
#include "route/got.h"

typedef int (*mallctl_fn)(const char *name, void *old, size_t *oldlen, void *new_value, size_t newlen);

static mallctl_fn mallctl_at;
static uint64_t code_lo, code_hi;  /* the module that defines it: its mapped range */

/* jemalloc's stats.* in the order of the segment's alloc_stats[]. */
static const char *const stat_names[MLK_ALLOC_STATS] = {
    "stats.allocated", "stats.active", "stats.metadata", "stats.resident", "stats.mapped", "stats.retained",
};

struct found {
    uintptr_t ctl;
    uint64_t lo, hi;
};

/* The first module (in the loader's order, as a lookup would find it) that
 * defines mallctl under one of jemalloc's builds' names, and its range. */
static int find_mallctl(struct dl_phdr_info *info, size_t size, void *arg)
{
    static const char *const names[] = {"mallctl", "je_mallctl", "_rjem_mallctl"};
    (void)size;
    struct found *f = arg;
    uintptr_t at = 0;
    for (size_t i = 0; at <= 1 && i < sizeof names / sizeof names[0]; i++)
        at = mlk_module_symbol(info, names[i]);
    if (at <= 1) /* 1: a module without a GNU hash table, not to be asked */
        return 0;
    f->ctl = at;
    mlk_module_range(info, &f->lo, &f->hi);
    return 1;
}

/* At start and after each dlopen/dlclose (never on an allocation's path):
 * whether the program has jemalloc's mallctl, and where jemalloc's code
 * is.  By the modules' symbol tables, not dlsym: a failed dlsym would leave
 * its message for the program's next dlerror(). */
void mlk_alloc_stats_resolve(void)
{
    struct found f = {0, 0, 0};
    dl_iterate_phdr(find_mallctl, &f);
    __atomic_store_n(&mallctl_at, NULL, __ATOMIC_RELEASE);
    code_lo = f.lo, code_hi = f.hi;
    __atomic_store_n(&mallctl_at, (mallctl_fn)f.ctl, __ATOMIC_RELEASE);
    if (mlk_seg)
        __atomic_store_n(&mlk_seg->alloc_stats_kind, f.ctl ? MLK_ALLOC_STATS_JEMALLOC : 0, __ATOMIC_RELEASE);
}

/* Whether stack id may have been made inside jemalloc: a frame in its
 * code, or frames cut off at the depth that might be. */
static int made_inside_allocator(uint32_t stack)
{
    if (stack >= mlk_seg->stacks_used)
        return 1;
    const struct mlk_stack *s = &mlk_stacks()[stack];
    if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != MLK_STACK_READY || (s->flags & MLK_STACK_CUT))
        return 1;
    const uint64_t *frames = mlk_frames() + s->frames_off;
    for (int i = 0; i < s->depth; i++)
        if (frames[i] >= code_lo && frames[i] < code_hi)
            return 1;
    return 0;
}

__attribute__((noinline, cold)) void mlk_alloc_stats_answer(uint32_t stack)
{
    mallctl_fn ctl = __atomic_load_n(&mallctl_at, __ATOMIC_ACQUIRE);
    struct mlk_header *h = mlk_seg;
    if (!h || !ctl || stack == MLK_NO_STACK || made_inside_allocator(stack))
        return;
    /* One thread answers; the others go on. */
    if (!(__atomic_fetch_and(&mlk_attention, ~MLK_ATTEND_STATS, __ATOMIC_ACQ_REL) & MLK_ATTEND_STATS))
        return;
    uint32_t asked = __atomic_load_n(&h->alloc_stats_asked, __ATOMIC_ACQUIRE);
    uint64_t epoch = 1, v;
    size_t len = sizeof epoch;
    int failed = ctl("epoch", &epoch, &len, &epoch, sizeof epoch) != 0;
    for (int i = 0; i < MLK_ALLOC_STATS; i++) {
        len = sizeof v;
        v = 0;
        /* stats.retained is jemalloc 5's; an older one has none: 0 */
        if (ctl(stat_names[i], &v, &len, NULL, 0) != 0 || len != sizeof v)
            v = 0, failed |= i < 4;
        h->alloc_stats[i] = v;
    }
    const char *version = NULL;
    len = sizeof version;
    if (!h->alloc_stats_version[0] && ctl("version", &version, &len, NULL, 0) == 0 && version) {
        size_t n = strnlen(version, sizeof h->alloc_stats_version - 1);
        memcpy(h->alloc_stats_version, version, n);
        h->alloc_stats_version[n] = 0;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    h->alloc_stats_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    h->alloc_stats_failed = (uint32_t)failed;
    __atomic_store_n(&h->alloc_stats_answered, asked, __ATOMIC_RELEASE);
}
