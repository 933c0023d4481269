/* Threads allocating and freeing flat out while the test scans the process
 * again and again: the scan must stop them, find exactly what is known,
 * and let them go on unchanged.
 *   site_kept     100 x 40 B  still reachable (a global array)
 *   site_dropped   50 x 24 B  definitely lost
 *   site_churn    blocks each thread holds in a local array: never lost
 * argv[1]: how long to run, ms -- or "-": print "ready" once the threads
 * run and go on until a line on stdin (no clock in the test's way);
 * argv[2] "spawn": one more thread creates
 * and joins short-lived threads all the while (threads that appear and
 * exit while a scan stops the others).  Prints "done 1" and exits 0. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define THREADS 4
#define HELD 16

__attribute__((noinline)) void *site_kept(size_t n) { return calloc(1, n); }
__attribute__((noinline)) void *site_dropped(size_t n) { return calloc(1, n); }
__attribute__((noinline)) void *site_churn(size_t n) { return malloc(n); }

void *g_kept[100];
void *volatile g_sink;
static volatile int stop;
static long churned[THREADS];

static void *churn(void *arg)
{
    long id = (long)arg;
    void *held[HELD] = {0};
    unsigned x = (unsigned)id * 2654435761u + 1;
    long n = 0;
    while (!stop) {
        x = x * 1103515245u + 12345;
        unsigned slot = (x >> 8) % HELD;
        free(held[slot]);
        held[slot] = site_churn(16 + (x >> 16) % 2000);
        memset(held[slot], (int)n, 16);
        n++;
    }
    for (int i = 0; i < HELD; i++)
        free(held[i]);
    churned[id] = n;
    return NULL;
}

static void *short_lived(void *arg)
{
    free(site_churn(64));
    return arg;
}

static void *spawner(void *arg)
{
    (void)arg;
    while (!stop) {
        pthread_t t;
        if (pthread_create(&t, NULL, short_lived, NULL) == 0)
            pthread_join(t, NULL);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int until_told = argc > 1 && strcmp(argv[1], "-") == 0;
    long ms = argc > 1 && !until_told ? atol(argv[1]) : 3000;
    for (int i = 0; i < 100; i++)
        g_kept[i] = site_kept(40);
    for (int i = 0; i < 50; i++)
        g_sink = site_dropped(24);
    g_sink = NULL;
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, churn, (void *)i);
    pthread_t spawning;
    int spawn = argc > 2 && strcmp(argv[2], "spawn") == 0;
    if (spawn)
        pthread_create(&spawning, NULL, spawner, NULL);
    if (until_told) {
        printf("ready\n");
        fflush(stdout);
        char line[8];
        if (!fgets(line, sizeof line, stdin))
            return 2;
    } else {
        struct timespec d = {ms / 1000, (ms % 1000) * 1000000};
        nanosleep(&d, NULL);
    }
    stop = 1;
    if (spawn)
        pthread_join(spawning, NULL);
    long total = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        total += churned[i];
    }
    printf("done %ld\n", total > 0 ? 1L : 0L);
    return 0;
}
