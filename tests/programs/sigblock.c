/* Blocks every signal in every thread (as many servers do, handling them
 * with sigwait in a dedicated thread -- here: not at all), allocates from
 * three threads, then waits.  SIGUSR1 can never run a handler. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

#include "checkpoint.h"

__attribute__((noinline)) static void *site_worker(void) { return malloc(1000); }

static void *worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 100; i++)
        site_worker();
    return NULL;
}

int main(void)
{
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* threads inherit the mask */
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    checkpoint("blocked");
    for (int i = 0; i < 50; i++)
        site_worker();
    checkpoint("more");
    return 0;
}
