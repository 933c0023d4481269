/* Roots only other threads have: a worker thread keeps one block in its
 * TLS, one in a local of its stack and one (x86-64) only in a register,
 * and dropped one (definitely lost), then blocks in read() while the test
 * scans the process at checkpoint "held".
 *   site_thread_tls      64 B  still reachable
 *   site_thread_stack    72 B  still reachable
 *   site_thread_register 96 B  still reachable (x86-64; elsewhere held on the stack)
 *   site_thread_lost     48 B  definitely lost */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "checkpoint.h"

#define SITE(name) __attribute__((noinline)) void *name(size_t n) { void *p = malloc(n); memset(p, 0, n); return p; }
SITE(site_thread_tls) SITE(site_thread_stack) SITE(site_thread_register) SITE(site_thread_lost)

__thread void *t_kept;
void *volatile g_sink;
static int ready[2], go[2];

/* Blocks in read(go) with p in r15 only: a callee-saved register the
 * kernel keeps, which no C code of this thread spills while it waits. */
__attribute__((noinline)) static void wait_holding(void *p)
{
#if defined(__x86_64__)
    char c;
    register void *keep __asm__("r15") = p;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "0"((long)SYS_read), "D"((long)go[0]), "S"(&c), "d"(1L), "r"(keep)
                     : "rcx", "r11", "memory");
    (void)ret;
#else
    void *volatile held = p;
    char c;
    if (read(go[0], &c, 1) < 0)
        _exit(97);
    (void)held;
#endif
}

__attribute__((noinline)) static void *pass_through(void *p)
{
    __asm__ volatile("" : "+r"(p)); /* not a copy the compiler keeps elsewhere */
    return p;
}

static void *worker(void *arg)
{
    (void)arg;
    t_kept = site_thread_tls(64);
    void *volatile on_stack = site_thread_stack(72);
    g_sink = site_thread_lost(48);
    g_sink = NULL;
    char c = 'r';
    if (write(ready[1], &c, 1) != 1)
        _exit(96);
    wait_holding(pass_through(site_thread_register(96)));
    (void)on_stack;
    return NULL;
}

int main(void)
{
    pthread_t t;
    char c;
    if (pipe(ready) || pipe(go) || pthread_create(&t, NULL, worker, NULL))
        return 1;
    if (read(ready[0], &c, 1) != 1)
        return 1;
    checkpoint("held");
    if (write(go[1], "g", 1) != 1)
        return 1;
    pthread_join(t, NULL);
    return 0;
}
