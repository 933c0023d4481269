/* Three phases that the aggregate reports cannot tell apart and an event
 * log can (tests/test_events.py): a 50 MB peak built in one function and
 * freed, 100,000 temporary blocks made and freed at once by two threads,
 * and 1,000 blocks of 1 KiB leaked slowly in a third.
 *   phases            the three, then exit
 *   phases forever    the three, "ready" on stdout, then one leak every 10 ms until killed
 *   phases churn N    N temporary blocks in one thread, then exit */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *kept[1 << 20]; /* global, so the compiler keeps every store */

__attribute__((noinline)) void build_peak(void)
{
    void *blocks[50];
    for (int i = 0; i < 50; i++) {
        blocks[i] = malloc(1 << 20);
        memset(blocks[i], 1, 1 << 20);
    }
    for (int i = 0; i < 50; i++)
        free(blocks[i]);
}

__attribute__((noinline)) void churn(long n)
{
    for (long i = 0; i < n; i++) {
        char *volatile p = malloc(n > 100000 ? 16 + (size_t)(rand() % 4000) : 64); /* big runs: sizes that compress less */
        p[0] = (char)i;
        free(p);
    }
}

static void *churn_thread(void *arg)
{
    churn((long)arg);
    return NULL;
}

__attribute__((noinline)) void leak_slowly(int i)
{
    kept[i] = malloc(1024);
    memset(kept[i], 2, 1024);
}

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "churn") == 0) {
        churn(atol(argv[2]));
        return 0;
    }
    build_peak();
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, churn_thread, (void *)50000L);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 1000; i++) {
        leak_slowly(i);
        if (i % 50 == 0) /* 200 ms at least, however long the other phases take on a loaded machine */
            usleep(10000);
    }
    if (argc > 1 && strcmp(argv[1], "forever") == 0) {
        printf("ready\n");
        fflush(stdout);
        for (int i = 1000; i < (1 << 20); i++) {
            leak_slowly(i);
            usleep(10000);
        }
    }
    return 0;
}
