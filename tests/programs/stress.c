/* Stress: worker threads allocate and free through a few stacks while the
 * test sends SIGUSR1 over and over and one thread forks children that
 * allocate and exit.  Each worker ends holding exactly KEEP blocks.  The
 * workers go on until the test has sent its signals (checkpoint
 * "running"), however fast the machine. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint.h"

#define WORKERS 6
#define ROUNDS 20000
#define KEEP 100

__attribute__((noinline)) void *site_stress_keep(size_t n) { return malloc(n); }
__attribute__((noinline)) void *site_stress_churn(size_t n) { return calloc(1, n); }
__attribute__((noinline)) void *site_stress_child(size_t n) { return malloc(n); }

static atomic_int stop;

static void *worker(void *arg)
{
    unsigned seed = (unsigned)(long)arg;
    void *window[64] = {0};
    for (int i = 0; i < ROUNDS || !atomic_load(&stop); i++) {
        seed = seed * 1103515245u + 12345u;
        int slot = (int)(seed >> 16) % 64;
        free(window[slot]);
        window[slot] = site_stress_churn(8 + (seed >> 8) % 200);
        if (i < ROUNDS && i % (ROUNDS / KEEP) == 0)
            site_stress_keep(48);
    }
    for (int s = 0; s < 64; s++)
        free(window[s]);
    return NULL;
}

static void *forker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 5; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            site_stress_child(1000);
            _exit(0);
        }
        waitpid(pid, NULL, 0);
    }
    return NULL;
}

int main(void)
{
    checkpoint("start");
    pthread_t t[WORKERS + 1];
    for (long i = 0; i < WORKERS; i++)
        pthread_create(&t[i], NULL, worker, (void *)(i + 1));
    pthread_create(&t[WORKERS], NULL, forker, NULL);
    checkpoint("running");
    atomic_store(&stop, 1);
    for (int i = 0; i <= WORKERS; i++)
        pthread_join(t[i], NULL);
    checkpoint("done");
    return 0;
}
