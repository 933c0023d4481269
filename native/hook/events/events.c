/* The event log's writer (MEMLEAK_CONFIG record=all|last; docs/events.md):
 * each allocation, free, mapping and unmapping that changes a stack's
 * counters is also appended, as a few bytes, to a page of the segment's
 * event pool that the calling thread owns; the reporter copies full pages
 * out, compresses them and writes the log (libmemleak/daemon/recorder.py).
 *
 * Why pages of the shared segment and not a pipe or a file of our own
 * (heaptrack writes a pipe, memray a file): a thread appends with plain
 * stores to memory only it writes -- no lock, no system call -- and a
 * process killed by SIGKILL loses nothing it logged: the reporter, which
 * outlives it, still maps the pages.  Each page starts its deltas afresh
 * (time from the page's own origin, addresses from zero), so any page
 * decodes alone: the flight recorder drops old pages, a replay merges the
 * threads' pages by time.
 *
 * Why an address delta and not a dense slot number per live block: a slot
 * needs an address -> slot map updated under a lock on every event (the
 * hot path the default mode keeps lock-free), where the replay needs an
 * address map anyway; the delta from the thread's previous block is a
 * byte or two, and the codec folds the repeats.  A free carries its
 * block's size and stack (the trailer or the table says them): a replay
 * of a window that starts after the block was made stays exact per stack.
 *
 * The default mode pays one load and a not-taken branch per event
 * (MLK_EVENT, mlk.h). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>

#include "../control.h"
#include "../../event_record.h"

#define DEFAULT_POOL_BYTES (32ull << 20)
#define MAX_RECORD 48                  /* a type byte and four 10-byte varints, rounded up */
#define PAGE_TICKS_MAX (1ull << 20)    /* a page closes after ~1.07 s: the log lags by no more */
#define WAIT_MS 50
#define WAITS_MAX 60                   /* 3 s for a free page, then the record is lost (counted) */

int mlk_attention;

struct writer {
    struct mlk_event_page *page; /* NULL: none claimed */
    uint8_t *data;
    uint32_t used;
    int busy;                    /* a record is being written (a signal handler's nests) */
    int keyed;                   /* the thread-exit destructor is set */
    int32_t tid;
    uint64_t last_tick;
    uint64_t first_tick;
    uint64_t last_addr;
};
static __thread struct writer w __attribute__((tls_model("initial-exec")));
static pthread_key_t exit_key;

uint32_t mlk_events_pages_wanted(void)
{
    if (mlk_config.record == MLK_RECORD_OFF)
        return 0;
    uint64_t bytes = mlk_config.record_buffer ? mlk_config.record_buffer : DEFAULT_POOL_BYTES;
    return (uint32_t)(bytes / MLK_EVENT_PAGE_BYTES);
}

static struct mlk_event_page *pages(void)
{
    return (struct mlk_event_page *)((char *)mlk_seg + mlk_seg->events_off);
}

static uint8_t *page_data(uint32_t i)
{
    return (uint8_t *)mlk_seg + mlk_seg->events_data_off + (uint64_t)i * MLK_EVENT_PAGE_BYTES;
}

static uint64_t now_ns(void)
{
    struct timespec ts; /* libc's: the vDSO, no system call */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void close_page(void)
{
    if (w.page)
        __atomic_store_n(&w.page->state, MLK_EVENT_PAGE_FULL, __ATOMIC_RELEASE);
    w.page = NULL;
}

/* Thread exit (its pthread key's destructor): the page goes to the
 * reporter.  A later destructor's free opens another page and sets the
 * key again -- glibc runs destructors again while keys are set (up to
 * PTHREAD_DESTRUCTOR_ITERATIONS rounds). */
static void thread_ends(void *unused)
{
    (void)unused;
    w.keyed = 0;
    if (!w.busy)
        close_page();
}

/* The lowest free page (low pages are reused first, so a pool that is
 * drained in time keeps few of its pages in memory); NULL if none. */
static struct mlk_event_page *take_free_page(uint32_t *index)
{
    struct mlk_event_page *p = pages();
    uint32_t n = mlk_seg->events_pages;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t free_ = MLK_EVENT_PAGE_FREE;
        if (__atomic_load_n(&p[i].state, __ATOMIC_RELAXED) == MLK_EVENT_PAGE_FREE &&
            __atomic_compare_exchange_n(&p[i].state, &free_, MLK_EVENT_PAGE_FILLING, 0, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED)) {
            *index = i;
            return &p[i];
        }
    }
    return NULL;
}

/* events_freed + 1 as a wait for a page ran out (0: none did): until the
 * reporter frees a page again, no thread waits -- records are dropped and
 * counted.  A reporter stopped or gone would otherwise cost every page a
 * thread fills 3 s, sometimes under a shard's or the mappings' lock. */
static uint32_t gave_up;

/* A page for this thread, waiting a while for the reporter to free one
 * when the pool is full (it drains every 50 ms; a pool full for seconds
 * means the reporter is gone or stopped). */
static int open_page(uint64_t now)
{
    uint32_t index = 0;
    struct mlk_event_page *p = NULL;
    for (int tries = 0; tries <= WAITS_MAX; tries++) {
        if (__atomic_load_n(&mlk_seg->events_stop, __ATOMIC_RELAXED))
            return 0;
        uint32_t seen = __atomic_load_n(&mlk_seg->events_freed, __ATOMIC_ACQUIRE);
        if ((p = take_free_page(&index)) != NULL)
            break;
        if (tries == WAITS_MAX) {
            __atomic_store_n(&gave_up, seen + 1, __ATOMIC_RELAXED);
            return 0;
        }
        if (tries == 0) {
            if (__atomic_load_n(&gave_up, __ATOMIC_RELAXED) == seen + 1)
                return 0; /* nothing freed since a wait ran out */
            __atomic_add_fetch(&mlk_seg->events_waits, 1, __ATOMIC_RELAXED);
            mlk_ensure_reporter(); /* a forked child's starts lazily: now it is needed */
        }
        mlk_futex_wait(&mlk_seg->events_freed, seen, WAIT_MS);
    }
    if (!w.tid)
        w.tid = (int32_t)mlk_syscall6(SYS_gettid, 0, 0, 0, 0, 0, 0);
    p->tid = w.tid;
    p->used = 0;
    p->claim = __atomic_fetch_add(&mlk_seg->events_claims, 1, __ATOMIC_RELAXED);
    p->first_ns = p->last_ns = now;
    w.page = p;
    w.data = page_data(index);
    w.used = 0;
    w.first_tick = w.last_tick = now >> MLK_EVENT_TICK_SHIFT;
    w.last_addr = 0;
    if (!w.keyed) {
        w.keyed = 1;
        pthread_setspecific(exit_key, (void *)1); /* thread_ends as the thread exits */
    }
    return 1;
}

/* Out of line and cold, as mlk_event is: the hot path's frame stays as
 * small as it was (a larger one leaves more of the hook's stale words on
 * the stack, for a conservative scan to take for pointers). */
__attribute__((noinline, cold)) void mlk_event_at_rest(int type, uint64_t addr, uint64_t size, uint32_t stack)
{
    int attention = __atomic_load_n(&mlk_attention, __ATOMIC_RELAXED);
    if (attention & MLK_ATTEND_EVENTS)
        mlk_event(type, addr, size, stack);
    if (attention & MLK_ATTEND_STATS)
        mlk_alloc_stats_answer(stack);
}

void mlk_event(int type, uint64_t addr, uint64_t size, uint32_t stack)
{
    if (MLK_UNLIKELY(w.busy || !mlk_seg)) {
        /* A signal handler's free inside a record of this thread's: not
         * logged, counted (a child without a segment of its own: neither). */
        if (mlk_seg)
            __atomic_add_fetch(&mlk_seg->events_lost, 1, __ATOMIC_RELAXED);
        return;
    }
    w.busy = 1;
    uint64_t now = now_ns(), tick = now >> MLK_EVENT_TICK_SHIFT;
    if (!w.page || w.used + MAX_RECORD > MLK_EVENT_PAGE_BYTES || tick - w.first_tick >= PAGE_TICKS_MAX) {
        close_page();
        if (!open_page(now)) {
            __atomic_add_fetch(&mlk_seg->events_lost, 1, __ATOMIC_RELAXED);
            w.busy = 0;
            return;
        }
    }
    uint8_t *o = w.data + w.used;
    int64_t delta;
    if (MLK_LIKELY(!(addr & 7) && !(w.last_addr & 7))) {
        *o++ = (uint8_t)type;
        delta = (int64_t)((addr >> 3) - (w.last_addr >> 3));
    } else {
        *o++ = (uint8_t)(type | MLK_EVENT_RAW_ADDR);
        delta = (int64_t)(addr - w.last_addr);
    }
    o = mlk_varint_put(o, tick - w.last_tick);
    o = mlk_varint_put(o, (uint64_t)(delta << 1) ^ (uint64_t)(delta >> 63));
    o = mlk_varint_put(o, size);
    o = mlk_varint_put(o, stack == MLK_NO_STACK ? 0 : (uint64_t)stack + 1);
    w.last_tick = tick;
    w.last_addr = addr;
    w.used = (uint32_t)(o - w.data);
    __atomic_store_n(&w.page->last_ns, now, __ATOMIC_RELAXED);
    __atomic_store_n(&w.page->used, w.used, __ATOMIC_RELEASE);
    w.busy = 0;
}

void mlk_events_start(void)
{
    if (!mlk_seg || !mlk_seg->events_pages || (mlk_attention & MLK_ATTEND_EVENTS))
        return;
    if (mlk_sample_bytes) {
        mlk_seg->record_mode = MLK_RECORD_OFF;
        mlk_warn("record= is ignored with sample=: the event log needs every allocation", "", "");
        return;
    }
    if (!exit_key && pthread_key_create(&exit_key, thread_ends) != 0)
        return;
    mlk_seg->record_mode = (uint32_t)mlk_config.record;
    mlk_seg->record_cap = mlk_config.record_cap;
    mlk_seg->record_keep_bytes = mlk_config.record_keep_bytes;
    mlk_seg->record_keep_ns = mlk_config.record_keep_ns;
    if (!mlk_seg->events_start_ns)
        mlk_seg->events_start_ns = now_ns();
    mlk_fast_off_set(MLK_FAST_EVENTS, 1); /* (first: the free's fast way asks the word, not attention) */
    __atomic_or_fetch(&mlk_attention, MLK_ATTEND_EVENTS, __ATOMIC_RELEASE);
}

/* fork(): the child's segment is a copy without the pool's pages (all
 * free); this thread's page was the parent's. */
void mlk_events_fork_child(void)
{
    w.page = NULL;
    w.busy = 0;
    w.tid = 0;
    if (!mlk_seg)
        return;
    mlk_seg->events_claims = mlk_seg->events_lost = mlk_seg->events_waits = 0;
    mlk_seg->events_freed = mlk_seg->events_stop = 0;
    mlk_seg->events_drainer = 0; /* the parent's reporter's: this pool is the child's own */
    gave_up = 0;
    mlk_seg->events_start_ns = now_ns();
}
