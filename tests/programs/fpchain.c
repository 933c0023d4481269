/* Code without unwind tables, as most of Chromium's is: built with
 * -fno-asynchronous-unwind-tables -fno-unwind-tables, so only the frame-
 * pointer chain (-fno-omit-frame-pointer) says who called whom.  Blocks
 * kept from four stacks, each through its own caller of one shared chain:
 *   the main thread           10 x 100 bytes  (main_path)
 *   a thread, default stack   20 x 200 bytes  (default_path)
 *   a thread, 256 KiB stack   30 x 300 bytes  (small_path)
 *   a thread on a stack the program mapped itself (pthread_attr_setstack)
 *                             40 x 400 bytes  (given_path)
 * Built with -fomit-frame-pointer as well: then rbp is any register and
 * the chain must not be believed (the walk ends, the program runs on).
 *
 *   fpchain first   for an attach: a thread is made first and waits; the
 *                   program says "checkpoint ready" and, the line answered,
 *                   lets the thread run default_path and runs main_path. */
#include <pthread.h>
#include <semaphore.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "checkpoint.h"

#define KEEP_CALLER() __asm__ volatile("" ::: "memory") /* not a tail call: the frame stays */

static void *kept[100];
static int nkept;

__attribute__((noinline)) void *leaf_alloc(size_t n)
{
    void *p = malloc(n);
    KEEP_CALLER();
    return p;
}

__attribute__((noinline)) void shared_middle(size_t n, int times)
{
    for (int i = 0; i < times; i++)
        kept[__atomic_fetch_add(&nkept, 1, __ATOMIC_RELAXED)] = leaf_alloc(n);
    KEEP_CALLER();
}

__attribute__((noinline)) void main_path(void) { shared_middle(100, 10); KEEP_CALLER(); }
__attribute__((noinline)) void default_path(void) { shared_middle(200, 20); KEEP_CALLER(); }
__attribute__((noinline)) void small_path(void) { shared_middle(300, 30); KEEP_CALLER(); }
__attribute__((noinline)) void given_path(void) { shared_middle(400, 40); KEEP_CALLER(); }

static void *run(void *path)
{
    ((void (*)(void))path)();
    KEEP_CALLER();
    return NULL;
}

static sem_t go;

static void *run_when_told(void *path)
{
    while (sem_wait(&go) != 0)
        ;
    run(path);
    KEEP_CALLER();
    return NULL;
}

/* The thread exists before the tracer is attached: the tracer never saw it
 * start, so its stack's extent comes from the maps. */
static int made_before_attach(void)
{
    pthread_t t;
    if (sem_init(&go, 0, 0) != 0 || pthread_create(&t, NULL, run_when_told, (void *)default_path) != 0)
        return 3;
    checkpoint("ready");
    sem_post(&go);
    pthread_join(t, NULL);
    main_path();
    checkpoint("done");
    return 0;
}

static void in_thread(void (*path)(void), size_t stack_size, void *given_stack)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (given_stack)
        pthread_attr_setstack(&attr, given_stack, stack_size);
    else if (stack_size)
        pthread_attr_setstacksize(&attr, stack_size);
    pthread_t t;
    if (pthread_create(&t, &attr, run, (void *)path) != 0)
        exit(3);
    pthread_join(t, NULL);
    pthread_attr_destroy(&attr);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        return made_before_attach();
    main_path();
    in_thread(default_path, 0, NULL);
    in_thread(small_path, 256 << 10, NULL);
    size_t given_size = 1 << 20;
    void *given = mmap(NULL, given_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (given == MAP_FAILED)
        return 4;
    in_thread(given_path, given_size, given);
    checkpoint("done");
    return 0;
}
