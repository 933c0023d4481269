/* The main thread calls pthread_exit while a worker goes on: the process
 * then has a zombie main thread, without maps, fds or memory of its own in
 * /proc -- the reporter must not take that for an exec, and snapshot,
 * scan and attach must look through the worker.  The worker allocates
 * 10 x 100 bytes at site_worker, stops at checkpoint "ready" and exits 5. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "checkpoint.h"

static void *kept[10];

__attribute__((noinline)) void *site_worker(size_t n) { return malloc(n); }

static void *work(void *arg)
{
    (void)arg;
    checkpoint("started");
    for (int i = 0; i < 10; i++)
        kept[i] = site_worker(100);
    checkpoint("ready");
    exit(5);
}

int main(void)
{
    pthread_t t;
    pthread_create(&t, NULL, work, NULL);
    pthread_exit(NULL);
}
