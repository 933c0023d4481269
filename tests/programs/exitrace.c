/* Threads that allocate while report signals come, then a quick exit
 * report (nothing changed since the last one).  A report that quick, on a
 * loaded machine, often finished in the moment between the exit path
 * reading done_seq and looking for its reporter, which had left: a second
 * reporter was started and wrote a spurious "death" report.
 * argv[1]: how long to run, in ms. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#define BUSY_THREADS 4

__attribute__((noinline)) void *site_busy(size_t n) { return malloc(n); }
__attribute__((noinline)) void *site_kept(size_t n) { return malloc(n); }

static volatile int stop;

static void *busy(void *arg)
{
    (void)arg;
    for (unsigned i = 0; !stop; i++) {
        void *volatile p = site_busy(16 + i % 512);
        free(p);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    long ms = argc > 1 ? atol(argv[1]) : 1000;
    pthread_t t[BUSY_THREADS];
    for (int i = 0; i < BUSY_THREADS; i++)
        pthread_create(&t[i], NULL, busy, NULL);
    struct timespec step = {0, 10 * 1000000};
    void *volatile kept = NULL;
    for (long waited = 0; waited < ms; waited += 10) {
        kept = site_kept(100); /* 100 bytes every 10 ms: a slow leak */
        nanosleep(&step, NULL);
    }
    (void)kept;
    stop = 1;
    for (int i = 0; i < BUSY_THREADS; i++)
        pthread_join(t[i], NULL);
    return 0;
}
