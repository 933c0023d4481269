/* Sampling mode: many small and a few big blocks from known sites, churn
 * through a third, and threads, so the estimates can be checked against
 * the truth.  Usage: sampled SMALL_COUNT */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "checkpoint.h"

#define BIG_COUNT 500
#define THREADS 4

static void **small_blocks;
static void *big_blocks[BIG_COUNT];
static long small_count;

__attribute__((noinline)) void *site_small(void) { return malloc(48); }
__attribute__((noinline)) void *site_big(void) { return malloc(200000); }
__attribute__((noinline)) void *site_churn(size_t n) { return malloc(n); }

static void *churn(void *arg)
{
    (void)arg;
    for (int i = 0; i < 200000; i++) {
        void *volatile p = site_churn(64 + (size_t)(i % 512));
        free(p);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    small_count = argc > 1 ? atol(argv[1]) : 1000000;
    small_blocks = calloc((size_t)small_count, sizeof *small_blocks); /* @site_table */
    for (long i = 0; i < small_count; i++)
        small_blocks[i] = site_small();
    for (int i = 0; i < BIG_COUNT; i++)
        big_blocks[i] = site_big();
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, churn, NULL);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    checkpoint("allocated");
    for (long i = 0; i < small_count; i++)
        free(small_blocks[i]);
    for (int i = 0; i < BIG_COUNT; i++)
        free(big_blocks[i]);
    free(small_blocks);
    checkpoint("freed");
    return 0;
}
