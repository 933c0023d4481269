/* What the allocator does with memory beyond the live blocks (#31): slack
 * and fragmentation, in steps the test drives (a line on stdin each).
 *   step 1: two threads each fragment an arena of their own (every other
 *           of 300 blocks freed, 40 small ones freed into its fastbins),
 *           then park (their stacks are mappings of their own);
 *   step 2: site_tiny makes 100,000 one-byte blocks, site_mixed 10,000 of
 *           1..1000 bytes, site_fill 100 MB in 100,000 blocks of 1000;
 *   step 3: site_thin frees 99 of each 100 of site_fill's blocks: glibc
 *           keeps the freed chunks, which the live ones pin in place.
 * Bare, it prints each site's slack as glibc's malloc_usable_size says it
 * (the oracle: under the tracer, malloc_usable_size leaves the trailer out).
 * Before each step's line it prints glibc's malloc_info() -- the oracle for
 * the arenas' statistics the reporter reads from outside; stdin and stdout
 * have buffers of their own, so that nothing allocates while it waits. */
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sleeping.h"

#define TINY 100000
#define MIXED 10000
#define FILL 100000

static void *tiny[TINY], *mixed[MIXED];
static char *fill[FILL];
static pthread_mutex_t park = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t fragmented;
static char in_buffer[4096], out_buffer[1 << 16];
static __thread void *kept[300], *small[40];

__attribute__((noinline)) static void site_thread_arena(void)
{
    for (int i = 0; i < 300; i++)
        kept[i] = malloc(100 + (size_t)(i % 7) * 300);
    for (int i = 0; i < 300; i += 2)
        free(kept[i]);
    for (int i = 0; i < 40; i++) /* more than the tcache keeps: the rest go to a fastbin */
        small[i] = malloc(24);
    for (int i = 0; i < 40; i++)
        free(small[i]);
}

static int parked_tid[2], past_barrier;

static void *parked(void *which)
{
    parked_tid[(intptr_t)which] = (int)syscall(SYS_gettid);
    site_thread_arena();
    pthread_barrier_wait(&fragmented);
    __atomic_add_fetch(&past_barrier, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&park);
    pthread_mutex_unlock(&park);
    for (int i = 1; i < 300; i += 2)
        free(kept[i]);
    return NULL;
}

__attribute__((noinline)) static size_t site_tiny(void)
{
    size_t slack = 0;
    for (int i = 0; i < TINY; i++) {
        tiny[i] = malloc(1);
        slack += malloc_usable_size(tiny[i]) - 1;
    }
    return slack;
}

__attribute__((noinline)) static size_t site_mixed(void)
{
    size_t slack = 0;
    for (int i = 0; i < MIXED; i++) {
        size_t size = 1 + (size_t)i * 7 % 1000;
        mixed[i] = malloc(size);
        slack += malloc_usable_size(mixed[i]) - size;
    }
    return slack;
}

__attribute__((noinline)) static void site_fill(void)
{
    for (int i = 0; i < FILL; i++) {
        fill[i] = malloc(1000);
        memset(fill[i], 1, 1000);
    }
}

__attribute__((noinline)) static void site_thin(void)
{
    for (int i = 0; i < FILL; i++)
        if (i % 100 != 99) {
            free(fill[i]);
            fill[i] = NULL;
        }
}

/* Until both threads wait for the park mutex in the kernel: a thread
 * stack is then told by the stack pointer /proc gives for a thread in a
 * system call.  (Without this wait, under load a thread just past the
 * barrier could still be running when the report was taken, and its stack
 * was not told: 2 thread stacks counted of 3.) */
static void wait_until_parked(void)
{
    while (__atomic_load_n(&past_barrier, __ATOMIC_ACQUIRE) < 2)
        usleep(1000);
    for (int i = 0; i < 2; i++)
        while (!sleeping(parked_tid[i]))
            usleep(1000);
}

static void step(const char *said)
{
    char line[16];
    malloc_info(0, stdout);
    printf("%s\n", said);
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
        exit(1);
}

int main(void)
{
    pthread_t t[2];
    setvbuf(stdin, in_buffer, _IOFBF, sizeof in_buffer);
    setvbuf(stdout, out_buffer, _IOFBF, sizeof out_buffer);
    pthread_mutex_lock(&park);
    pthread_barrier_init(&fragmented, NULL, 3);
    for (intptr_t i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, parked, (void *)i);
    pthread_barrier_wait(&fragmented);
    wait_until_parked();
    step("parked");
    size_t tiny_slack = site_tiny(), mixed_slack = site_mixed();
    site_fill();
    printf("tiny-slack %zu\nmixed-slack %zu\n", tiny_slack, mixed_slack);
    step("filled");
    site_thin();
    step("thinned");
    pthread_mutex_unlock(&park);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    return 0;
}
