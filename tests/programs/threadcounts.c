/* The calling thread's counts (memleak_thread, thread savepoints): a worker
 * leaks 3 x 100 bytes and churns while another thread allocates 1000 x 1000
 * at the same time; the worker's own savepoint sees only its 300 bytes, the
 * process's sees both.  Then it hands a 500-byte block to the other thread,
 * which frees it: the block stays in the worker's count (allocated there)
 * and comes off the other's.  Everything is printed by main at the end, so
 * that stdio's buffer is not one of the counted blocks.  With `assert`,
 * the worker asserts its savepoint at the end (it aborts: 800 bytes). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memleak.h"

static pthread_barrier_t step;
static void *handed;
static void *volatile kept[1003];
static int assert_at_end;

static struct {
    int thread_r, process_r, handed_r, after_r, noise_r;
    struct memleak_counts thread_since, process_since, after, noise_live;
    struct memleak_thread_counts before_handing, after_handing;
} seen;

static __attribute__((noinline)) void leak_three(void)
{
    for (int i = 0; i < 3; i++)
        kept[1000 + i] = malloc(100);
}

static __attribute__((noinline)) void churn(void)
{
    for (int i = 0; i < 100; i++) {
        void *volatile p = malloc(64);
        free(p);
    }
}

static void *noise(void *unused)
{
    (void)unused;
    pthread_barrier_wait(&step); /* 1: the worker took its savepoints */
    for (int i = 0; i < 1000; i++)
        kept[i] = malloc(1000);
    pthread_barrier_wait(&step); /* 2: allocated */
    pthread_barrier_wait(&step); /* 3: a block was handed over */
    free(handed);
    seen.noise_r = memleak_thread_live(&seen.noise_live);
    pthread_barrier_wait(&step); /* 4: freed */
    return NULL;
}

static void *worker(void *unused)
{
    (void)unused;
    struct memleak_savepoint mine, whole;
    memleak_thread_save(&mine);
    memleak_save(&whole);
    pthread_barrier_wait(&step); /* 1 */
    leak_three();
    churn();
    pthread_barrier_wait(&step); /* 2 */
    seen.thread_r = memleak_since(&mine, &seen.thread_since);
    seen.process_r = memleak_since(&whole, &seen.process_since);
    seen.handed_r = memleak_thread(&seen.before_handing);
    handed = malloc(500);
    pthread_barrier_wait(&step); /* 3 */
    pthread_barrier_wait(&step); /* 4 */
    memleak_thread(&seen.after_handing);
    seen.after_r = memleak_since(&mine, &seen.after);
    if (assert_at_end)
        MEMLEAK_ASSERT_NOTHING_ADDED(mine);
    return NULL;
}

static long long d(int64_t a, int64_t b) { return (long long)(a - b); }

int main(int argc, char **argv)
{
    assert_at_end = argc > 1 && strcmp(argv[1], "assert") == 0;
    pthread_t a, b;
    pthread_barrier_init(&step, NULL, 2);
    pthread_create(&a, NULL, noise, NULL);
    pthread_create(&b, NULL, worker, NULL);
    pthread_join(b, NULL);
    pthread_join(a, NULL);
    printf("thread since: %d %lld %lld\n", seen.thread_r, (long long)seen.thread_since.bytes,
           (long long)seen.thread_since.blocks);
    printf("process since: %d %lld %lld\n", seen.process_r, (long long)seen.process_since.bytes,
           (long long)seen.process_since.blocks);
    const struct memleak_thread_counts *x = &seen.before_handing, *y = &seen.after_handing;
    printf("handing over: %d allocated %lld %lld freed %lld %lld\n", seen.handed_r,
           d(y->allocated.bytes, x->allocated.bytes), d(y->allocated.blocks, x->allocated.blocks),
           d(y->freed.bytes, x->freed.bytes), d(y->freed.blocks, x->freed.blocks));
    printf("worker since, after: %d %lld %lld\n", seen.after_r, (long long)seen.after.bytes,
           (long long)seen.after.blocks);
    printf("noise live: %d %lld %lld\n", seen.noise_r, (long long)seen.noise_live.bytes,
           (long long)seen.noise_live.blocks);
    return 0;
}
