/* Many threads allocating from one stack at once: the total must be exact. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "checkpoint.h"

#define THREADS 8
#define PER_THREAD 5000

__attribute__((noinline)) void *site_thread_leak(size_t n) { return malloc(n); }
__attribute__((noinline)) void *site_thread_churn(size_t n) { return malloc(n); }

static void *worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < PER_THREAD; i++) {
        site_thread_leak(24);        /* kept: 8 * 5000 blocks of 24 bytes */
        free(site_thread_churn(40)); /* freed at once: nets to zero */
    }
    return NULL;
}

int main(void)
{
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    checkpoint("joined");
    return 0;
}
