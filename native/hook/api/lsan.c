/* What the program tells the leak check about its memory (memleak.h, and
 * LeakSanitizer's interface, which maps to the same):
 *
 *   - an ignored object: the block a pointer points into is never called
 *     lost; the scan takes it as reachable, and what it points to with it
 *     (LSan's __lsan_ignore_object).  Kept as the pointer given, sorted;
 *     the scan finds the block (an interior pointer too), and a free of
 *     the block forgets it (mlk_ignored_forget, from the free paths, which
 *     pay one load of `mlk_ignored_count` while none is ignored);
 *   - a root region: memory the program manages itself (mmap'd tables,
 *     a GC's roots) whose words the scan reads as roots
 *     (__lsan_register_root_region);
 *   - a thread's allocations not recorded for a while: disable/enable,
 *     nesting (__lsan_disable/__lsan_enable).  Such a block is not
 *     counted in any report and never called lost; its pointers are
 *     followed like a root's (trailers.c writes it as one of libmtrace's
 *     own blocks, which the scan treats so).
 *
 * The scan reads the first two from struct mlk_lsan_table (shm_layout.h
 * lsan_table), as hostile input. */
#define _GNU_SOURCE
#include <string.h>

#include "../mlk.h"
#include "lsan.h"

#define IGNORED_CAP (1u << 20) /* pointers; more are refused, and said once */
#define ROOTS_CAP 4096         /* regions */

static mlk_lock_t lock;
static struct mlk_lsan_table table; /* what the scan reads */
static uint64_t *ignored;           /* sorted; table.ignored_at */
static uint64_t *roots;             /* [lo, hi) pairs; table.roots_at */
volatile uint64_t mlk_ignored_count;
static int warned_full;
/* This thread holds `lock`: a free from a signal handler that interrupted
 * it must not wait for it (mlk_ignored_forget). */
static __thread int holding __attribute__((tls_model("initial-exec")));

uint64_t mlk_lsan_table(void) { return (uint64_t)&table; }

static void full(const char *what)
{
    if (!__atomic_exchange_n(&warned_full, 1, __ATOMIC_RELAXED))
        mlk_warn("too many ", what, " for the leak check; further ones are not taken");
}

/* The first index whose pointer is >= p. */
static uint64_t lower_bound(uint64_t p)
{
    uint64_t lo = 0, hi = table.nignored;
    while (lo < hi) {
        uint64_t mid = (lo + hi) / 2;
        if (ignored[mid] < p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

#define GUARDED(...)                                                                                   \
    MLK_GUARDED(&lock, holding = 1; do { __VA_ARGS__; } while (0); holding = 0)

void mlk_ignore_object(const void *p)
{
    uint64_t at = (uint64_t)p;
    if (!at)
        return;
    GUARDED({
        if (!ignored && !(ignored = mlk_map_anon(IGNORED_CAP * sizeof *ignored)))
            break;
        __atomic_store_n(&table.ignored_at, (uint64_t)ignored, __ATOMIC_RELEASE);
        uint64_t i = lower_bound(at);
        if (i < table.nignored && ignored[i] == at)
            break;
        if (table.nignored == IGNORED_CAP) {
            full("ignored objects");
            break;
        }
        memmove(&ignored[i + 1], &ignored[i], (table.nignored - i) * sizeof *ignored);
        ignored[i] = at;
        __atomic_store_n(&table.nignored, table.nignored + 1, __ATOMIC_RELEASE);
        __atomic_store_n(&mlk_ignored_count, table.nignored, __ATOMIC_RELAXED);
        mlk_fast_off_set(MLK_FAST_IGNORED, 1);
    });
}

/* The block [start, end) ends: pointers into it are forgotten, so that the
 * next block at that address is not ignored. */
void mlk_ignored_forget(uint64_t start, uint64_t end)
{
    if (holding)
        return; /* a signal handler's free inside our own call: left ignored */
    GUARDED({
        uint64_t i = lower_bound(start), j = i;
        while (j < table.nignored && ignored[j] < end)
            j++;
        if (j > i) {
            memmove(&ignored[i], &ignored[j], (table.nignored - j) * sizeof *ignored);
            __atomic_store_n(&table.nignored, table.nignored - (j - i), __ATOMIC_RELEASE);
            __atomic_store_n(&mlk_ignored_count, table.nignored, __ATOMIC_RELAXED);
            mlk_fast_off_set(MLK_FAST_IGNORED, table.nignored != 0);
        }
    });
}

void mlk_root_region(const void *p, size_t size, int add)
{
    uint64_t lo = (uint64_t)p, hi = lo + size;
    if (!size || hi < lo)
        return;
    GUARDED({
        if (!roots && !(roots = mlk_map_anon(ROOTS_CAP * 2 * sizeof *roots)))
            break;
        __atomic_store_n(&table.roots_at, (uint64_t)roots, __ATOMIC_RELEASE);
        uint64_t n = table.nroots, i = 0;
        while (i < n && !(roots[2 * i] == lo && roots[2 * i + 1] == hi))
            i++;
        if (add && i == n) {
            if (n == ROOTS_CAP) {
                full("root regions");
                break;
            }
            roots[2 * n] = lo;
            roots[2 * n + 1] = hi;
            __atomic_store_n(&table.nroots, n + 1, __ATOMIC_RELEASE);
        } else if (!add && i < n) { /* LSan: only an exact match is unregistered */
            roots[2 * i] = roots[2 * (n - 1)];
            roots[2 * i + 1] = roots[2 * (n - 1) + 1];
            __atomic_store_n(&table.nroots, n - 1, __ATOMIC_RELEASE);
        }
    });
}

void mlk_thread_recording(int on)
{
    if (on) {
        if (mlk_thread_not_recording > 0)
            mlk_thread_not_recording--;
    } else {
        mlk_thread_not_recording++;
    }
    mlk_thread_fast_set(MLK_THREAD_NOT_RECORDING, mlk_thread_not_recording != 0);
}

void mlk_lsan_lock_for_fork(int acquire)
{
    mlk_lock_across_fork(&lock, acquire);
}

