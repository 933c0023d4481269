/* What a program asks of the tracer from its own code (memleak.h): a
 * report written now, the live totals, and (in memleak.h itself, on top
 * of those) savepoints.  Exported as one table, mlk_api_v1, which the
 * header looks up once: a program built with memleak.h runs unchanged
 * without the tracer, and pays one lookup.
 *
 * Every call is safe in any thread, whether or not the tracer collects;
 * none allocates through the program's malloc. */
#define _GNU_SOURCE
#include <string.h>

#include "../../../libmemleak/include/memleak_abi.h" /* the table's one definition */
#include "../mlk.h"
#include "../resources/resources.h"
#include "custom.h"
#include "lsan.h"

#define EXPORT __attribute__((visibility("default")))

static mlk_lock_t asking_lock; /* one request at a time: the label and the answers are single fields */

/* A request of the program's to the reporter begins: the guard up, the
 * lock taken.  NULL when there is nobody to ask (not traced, collection
 * off): nothing taken then. */
static struct mlk_header *begin_asking(int *was)
{
    struct mlk_header *h = mlk_seg;
    if (!h || !mlk_collecting_or_paused())
        return NULL;
    *was = mlk_guard_up();
    mlk_lock(&asking_lock);
    return h;
}

static void end_asking(int was)
{
    mlk_unlock(&asking_lock);
    mlk_in_hook = was;
}

/* Writes a report now and returns when it is on disk: 0, its path in
 * `path` (when given); -1 when no report could be written (not traced,
 * not collecting, or the reporter did not answer in time). */
static int api_report(const char *label, char *path, size_t path_len)
{
    if (path && path_len)
        path[0] = 0;
    int was;
    struct mlk_header *h = begin_asking(&was);
    if (!h)
        return -1;
    /* As given, cut and terminated: the reporter cleans it for the file
     * name and header (memlog.safe_label), as it must anything here. */
    size_t n = label ? strnlen(label, MLK_API_LABEL_MAX - 1) : 0;
    memcpy(h->api_label, label ? label : "", n);
    h->api_label[n] = 0;
    h->last_report[0] = 0; /* the reporter sets it once the file is in place */
    int done = mlk_request_report(&h->api_requests, 1) && h->last_report[0];
    if (done && path && path_len) {
        size_t n = strnlen(h->last_report, MLK_LAST_REPORT_MAX - 1);
        n = n < path_len - 1 ? n : path_len - 1;
        memcpy(path, h->last_report, n);
        path[n] = 0;
    }
    end_asking(was);
    return done ? 0 : -1;
}

/* Sums the live counters of the stacks whose kind is in [lo, hi]. */
static void sum_live(int lo, int hi, struct memleak_counts *out)
{
    struct mlk_header *h = mlk_seg;
    uint64_t n = __atomic_load_n(&h->stacks_used, __ATOMIC_ACQUIRE);
    if (n > h->stacks_cap)
        n = h->stacks_cap;
    const struct mlk_stack *stacks = mlk_stacks();
    uint32_t used = __atomic_load_n(&h->stripes_used, __ATOMIC_ACQUIRE);
    int64_t bytes = 0, blocks = 0;
    for (uint64_t i = 0; i < n; i++) {
        int kind = stacks[i].kind;
        if (kind < lo || kind > hi || __atomic_load_n(&stacks[i].state, __ATOMIC_ACQUIRE) != MLK_STACK_READY)
            continue;
        for (unsigned s = 0; s < MLK_COUNTER_STRIPES; s++) {
            if (!(used & (1u << s)))
                continue; /* (never counted in: not to be touched) */
            const struct mlk_counters *c = &mlk_stripe(s)[i];
            bytes += (int64_t)__atomic_load_n(&c->alloc_bytes, __ATOMIC_RELAXED) -
                     __atomic_load_n(&c->freed_bytes, __ATOMIC_RELAXED);
            blocks += (int64_t)__atomic_load_n(&c->alloc_count, __ATOMIC_RELAXED) -
                      __atomic_load_n(&c->freed_count, __ATOMIC_RELAXED);
        }
    }
    out->bytes = bytes;
    out->blocks = blocks;
}

/* The bytes and blocks live now (what a report's live-bytes says: heap
 * blocks and mappings, not the program's own blocks inside them, not
 * resources): 0, or -1 when nothing is collected.  Reads each stack's
 * counters: about a millisecond per 10,000 stacks. */
static int api_live(struct memleak_counts *out)
{
    if (out)
        out->bytes = out->blocks = 0;
    if (!mlk_seg || !out || !mlk_ever_collected)
        return -1;
    sum_live(0, MLK_KIND_CUSTOM - 1, out);
    return 0;
}

/* The calling thread's totals (stacks.c keeps them): 0, or -1 (zeros)
 * when nothing is collected.  A few loads. */
static int api_thread_counts(struct memleak_thread_counts *out)
{
    if (!out)
        return -1;
    memset(out, 0, sizeof *out);
    if (!mlk_seg || !mlk_ever_collected)
        return -1;
    int64_t t[4];
    mlk_thread_totals(t);
    *out = (struct memleak_thread_counts){{t[0], t[1]}, {t[2], t[3]}};
    return 0;
}

/* ---- resources other than memory (resources/table.c) ---- */

/* The kind's index (named now if new and `create`), or -1 when not
 * traced; the caller has its guard up. */
static int kind_of(const char *kind, int create)
{
    return mlk_seg && kind && mlk_ever_collected ? mlk_resource_kind(kind, create) : -1;
}

static void api_resource_acquire(const char *kind, uint64_t id, uint64_t weight)
{
    int was = mlk_guard_up();
    int r = kind_of(kind, 1);
    if (r >= 0)
        mlk_resource_acquire(r, id, weight,
                             mlk_collecting && !mlk_thread_not_recording ? mlk_current_stack(MLK_KIND_RESOURCE + r)
                                                                         : MLK_NO_STACK);
    mlk_in_hook = was;
}

static void api_resource_release(const char *kind, uint64_t id)
{
    int was = mlk_guard_up();
    int r = kind_of(kind, 0);
    if (r >= 0)
        mlk_resource_release(r, id);
    mlk_in_hook = was;
}

/* The weight and count of `kind` held now ("fd": descriptors): 0, or -1
 * (zeros) when not traced or no such kind was ever named. */
static int api_resource_live(const char *kind, struct memleak_counts *out)
{
    if (out)
        out->bytes = out->blocks = 0;
    int was = mlk_guard_up();
    int r = kind_of(kind, 0);
    mlk_in_hook = was;
    if (r < 0 || !out)
        return -1;
    sum_live(MLK_KIND_RESOURCE + r, MLK_KIND_RESOURCE + r, out);
    return 0;
}

/* The four totals the reporter put in the segment with its last scan. */
static void read_check_totals(const struct mlk_header *h, struct memleak_leaks *out)
{
    struct memleak_counts *c = &out->definitely;
    for (int i = 0; i < 4; i++)
        c[i] = (struct memleak_counts){h->check_bytes[i], h->check_blocks[i]};
}

/* The stack just below the caller's frame, cleared: the frames of ours
 * that wait for the scan are made over it, and the scan reads this thread's
 * stack from its stack pointer up -- a slot of those frames left unwritten
 * would otherwise show it whatever an earlier call of ours at that depth
 * left there (a hook's saved registers, its spills: the program's
 * pointers), a root the program no longer has.  (valgrind's own frames are
 * never on the program's stack.)  tests/test_api.py's told.c found it: one
 * block or another of its lost ones read as reachable as the hooks' frames
 * changed.  2 KiB: deeper than the waiting frames, well inside the smallest
 * thread stack (PTHREAD_STACK_MIN, 16 KiB). */
static __attribute__((noinline)) void clear_stack_below(void)
{
    char below[2048];
    memset(below, 0, sizeof below);
    __asm__ volatile("" : : "r"(below) : "memory"); /* (not a dead store) */
}

/* A reachability scan now (the reporter stops the threads for it, this
 * one waiting): 0 and its totals; -1 when none could be made (not traced,
 * no trailers, ptrace refused: the report says why).  Its frames are made
 * over cleared stack: see api_leak_check. */
static __attribute__((noinline)) int leak_check_on_cleared(struct memleak_leaks *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    int was;
    struct mlk_header *h = begin_asking(&was);
    if (!h)
        return -1;
    h->check_seq = 0; /* the reporter sets it with the totals of a scan */
    int done = mlk_request_report(&h->check_requests, 1) && __atomic_load_n(&h->check_seq, __ATOMIC_ACQUIRE);
    if (done && out)
        read_check_totals(h, out);
    end_asking(was);
    return done ? 0 : -1;
}

/* The stack below is cleared first, and the check made in frames over it;
 * this one's own frame holds no more than its return address and the
 * program's register it saves (a tail call). */
static int api_leak_check(struct memleak_leaks *out)
{
    clear_stack_below();
    return leak_check_on_cleared(out);
}

/* The totals of the last scan of this process (a leak check's, or any
 * report's that carried one): 0, or -1 when there was none.  valgrind's
 * COUNT_LEAKS after its DO_LEAK_CHECK. */
static int api_last_check(struct memleak_leaks *out)
{
    struct mlk_header *h = mlk_seg;
    if (out)
        memset(out, 0, sizeof *out);
    if (!h || !out || !__atomic_load_n(&h->check_seq, __ATOMIC_ACQUIRE))
        return -1;
    read_check_totals(h, out);
    return 0;
}


EXPORT const struct memleak__api_v1 mlk_api_v1 = {
    1,
    sizeof(struct memleak__api_v1),
    api_report,
    api_live,
    api_leak_check,
    api_last_check,
    mlk_custom_malloclike,
    mlk_custom_freelike,
    mlk_custom_resize,
    mlk_custom_pool_create,
    mlk_custom_pool_destroy,
    mlk_custom_pool_alloc,
    mlk_custom_pool_free,
    mlk_custom_pool_trim,
    mlk_custom_pool_move,
    mlk_custom_pool_change,
    mlk_custom_pool_exists,
    mlk_ignore_object,
    mlk_root_region,
    mlk_thread_recording,
    api_resource_acquire,
    api_resource_release,
    api_resource_live,
    api_thread_counts,
};

/* ---- LeakSanitizer's interface (sanitizer/lsan_interface.h), for code that
 * calls it through weak references or dlsym: the checks are ours.  Neither
 * ever ends the program (LSan's __lsan_do_leak_check may, with its
 * exitcode): a traced program behaves as it would bare. */
EXPORT int __lsan_do_recoverable_leak_check(void)
{
    struct memleak_leaks leaks;
    if (api_leak_check(&leaks) != 0)
        return 0;
    return leaks.definitely.blocks + leaks.indirectly.blocks > 0;
}

EXPORT void __lsan_ignore_object(const void *p) { mlk_ignore_object(p); }

EXPORT void __lsan_register_root_region(const void *p, size_t size) { mlk_root_region(p, size, 1); }

EXPORT void __lsan_unregister_root_region(const void *p, size_t size) { mlk_root_region(p, size, 0); }

EXPORT void __lsan_disable(void) { mlk_thread_recording(0); }

EXPORT void __lsan_enable(void) { mlk_thread_recording(1); }

EXPORT void __lsan_do_leak_check(void)
{
    static int done; /* LSan's: later calls do nothing */
    if (!__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL))
        __lsan_do_recoverable_leak_check();
}

/* ---- heaptrack's API (heaptrack_api.h), for code that reports its own
 * allocator's blocks to heaptrack through weak references or dlsym: the
 * blocks are custom blocks here (custom.c), at the caller's stack. */
EXPORT void heaptrack_malloc(void *ptr, size_t size) { mlk_custom_malloclike(ptr, size); }

EXPORT void heaptrack_free(void *ptr) { mlk_custom_freelike(ptr); }

/* A move or resize: the old block ends, the new one is made at the
 * caller's stack (heaptrack counts a realloc as a new allocation too). */
EXPORT void heaptrack_realloc(void *ptr_in, size_t size, void *ptr_out)
{
    if (ptr_in)
        mlk_custom_freelike(ptr_in);
    if (ptr_out)
        mlk_custom_malloclike(ptr_out, size);
}
