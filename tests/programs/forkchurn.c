/* fork while threads allocate and free: each forked child must inherit
 * counters no thread was part-way through changing.  Four threads churn
 * blocks of one size each (a site each), so that in any consistent copy a
 * site's live bytes are exactly its live blocks times its size; the main
 * thread forks FORKS children, which exit at once (each child's exit
 * report is that copy).  A fork that split a counter update -- a block
 * counted without its bytes, or freed bytes without the block -- breaks
 * the product in that child. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint.h"

#define THREADS 4
#define WINDOW 32
#define FORKS 60

/* (The empty asm after the call: no tail call, so each site is a frame.) */
#define SITE(n)                                                                                   \
    __attribute__((noinline)) void *site_fc_##n(void)                                             \
    {                                                                                             \
        void *p = malloc(n);                                                                      \
        __asm__ volatile("" : : "r"(p) : "memory");                                               \
        return p;                                                                                 \
    }
SITE(48)
SITE(80)
SITE(200)
SITE(1000)

static void *(*const sites[THREADS])(void) = {site_fc_48, site_fc_80, site_fc_200, site_fc_1000};
static atomic_int stop;
static atomic_int started;

static void *churn(void *arg)
{
    void *(*site)(void) = sites[(long)arg];
    void *window[WINDOW] = {0};
    atomic_fetch_add(&started, 1);
    for (unsigned i = 0; !atomic_load_explicit(&stop, memory_order_relaxed); i++) {
        unsigned slot = i % WINDOW;
        free(window[slot]);
        window[slot] = site();
    }
    for (int s = 0; s < WINDOW; s++)
        free(window[s]);
    return NULL;
}

int main(void)
{
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, churn, (void *)i);
    while (atomic_load(&started) < THREADS)
        sched_yield();
    for (int i = 0; i < FORKS; i++) {
        pid_t pid = fork();
        if (pid == 0)
            exit(0); /* (exit, not _exit: the child's exit report) */
        if (pid > 0)
            waitpid(pid, NULL, 0);
        usleep(2000); /* (the threads run on between forks) */
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    checkpoint("done");
    return 0;
}
