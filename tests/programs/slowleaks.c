/* A server in miniature for `libmemleak report`: two real leaks and a
 * cache that only its exit frees, among churn, an LRU cache that
 * plateaus and start-up allocations.  A report is taken after each round.
 *   site_leak        64 bytes every round, never freed      -> suspect
 *   site_rare        one 200-byte block on a rare error path (rounds 2, 5, 7), never freed -> suspect
 *   site_cache_grow  a cache that never evicts one kind of key: 48 bytes a
 *                    round, freed at exit                     -> suspect ("freed at exit")
 *   site_lru         an LRU cache of 16 entries: fills in rounds 1-2, then evicts -> not
 *   site_churn       a thread allocating and freeing up and down -> not
 *   site_startup     allocated once before the first round  -> not */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"

#define ROUNDS 8
#define LRU 16

__attribute__((noinline)) void *site_leak(size_t n) { return malloc(n); }
__attribute__((noinline)) void *site_rare(size_t n) { return malloc(n); }
__attribute__((noinline)) void *site_cache_grow(size_t n) { return malloc(n); }
__attribute__((noinline)) void *site_lru(size_t n) { return malloc(n); }
__attribute__((noinline)) void *site_churn(size_t n) { return malloc(n); }
__attribute__((noinline)) void *site_startup(size_t n) { return malloc(n); }

static void *cache[ROUNDS];
static int cached;
static void *lru[LRU];
static int lru_next;
static void *volatile sink;

static void free_cache(void)
{
    for (int i = 0; i < cached; i++)
        free(cache[i]);
}

static volatile int stop;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *churn(void *arg)
{
    (void)arg;
    void *held[64] = {0};
    unsigned seed = 7;
    while (!stop) {
        pthread_mutex_lock(&lock);
        for (int i = 0; i < 64; i++) {
            seed = seed * 1103515245 + 12345;
            if (held[i] && (seed >> 16) % 3 == 0) {
                free(held[i]);
                held[i] = NULL;
            } else if (!held[i] && (seed >> 16) % 2 == 0) {
                held[i] = site_churn(32 + (seed >> 20) % 256);
            }
        }
        pthread_mutex_unlock(&lock);
    }
    for (int i = 0; i < 64; i++)
        free(held[i]);
    return NULL;
}

int main(void)
{
    atexit(free_cache);
    sink = site_startup(4096);
    pthread_t t;
    pthread_create(&t, NULL, churn, NULL);
    for (int round = 1; round <= ROUNDS; round++) {
        sink = site_leak(64);
        if (round == 2 || round == 5 || round == 7)
            sink = site_rare(200);
        cache[cached++] = site_cache_grow(48);
        for (int i = 0; i < 8; i++) {     /* 8 entries a round into 16 slots */
            free(lru[lru_next]);
            lru[lru_next] = site_lru(100);
            lru_next = (lru_next + 1) % LRU;
        }
        pthread_mutex_lock(&lock);        /* a stable moment for the report */
        checkpoint("round");
        pthread_mutex_unlock(&lock);
    }
    stop = 1;
    pthread_join(t, NULL);
    return 0;
}
