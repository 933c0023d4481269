/* A thread whose stack begins at a 64 MiB boundary -- where glibc puts an
 * arena's heap -- as one can by chance (a stack right below a range that
 * ends 8 MiB past one) or by choice (pthread_attr_setstack): its own
 * mapping at W, a guard page below it, parked on a mutex.  Where RSS goes
 * must count it among the thread stacks, not as an arena. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "checkpoint.h"
#include "sleeping.h"

#define WINDOW (64ul << 20)
#define STACK (8ul << 20)
#define GUARD 4096ul

static pthread_mutex_t park = PTHREAD_MUTEX_INITIALIZER;
static int parked_tid;

static void *parked(void *unused)
{
    (void)unused;
    __atomic_store_n(&parked_tid, (int)syscall(SYS_gettid), __ATOMIC_RELEASE);
    pthread_mutex_lock(&park);
    pthread_mutex_unlock(&park);
    return NULL;
}

int main(void)
{
    free(malloc(100)); /* (the main arena's [heap]) */
    /* A reservation twice the window, cut to [W - GUARD, W + STACK). */
    char *r = mmap(NULL, 2 * WINDOW, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED)
        return 2;
    char *w = (char *)(((uintptr_t)r + WINDOW) & ~(WINDOW - 1));
    munmap(r, (size_t)(w - GUARD - r));
    munmap(w + STACK, (size_t)(r + 2 * WINDOW - (w + STACK)));
    if (mprotect(w, STACK, PROT_READ | PROT_WRITE) != 0)
        return 3;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstack(&attr, w, STACK);
    pthread_t t;
    pthread_mutex_lock(&park);
    if (pthread_create(&t, &attr, parked, NULL) != 0)
        return 4;
    while (!__atomic_load_n(&parked_tid, __ATOMIC_ACQUIRE) || !sleeping(parked_tid))
        usleep(1000);
    checkpoint("parked");
    pthread_mutex_unlock(&park);
    pthread_join(t, NULL);
    return 0;
}
