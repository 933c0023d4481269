/* Raw system calls and diagnostics.  Everything here is async-signal-safe and
 * never allocates, so it may run inside malloc, a signal handler or a child
 * between fork and exec.  System calls go straight to the kernel so that our
 * own mmap calls are never seen by our own mmap hook. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>

#include "mlk.h"

#if defined(__x86_64__)
long mlk_syscall6(long n, long a, long b, long c, long d, long e, long f)
{
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret; /* -errno on failure; errno itself is left alone */
}
#else
#include <unistd.h>
long mlk_syscall6(long n, long a, long b, long c, long d, long e, long f)
{
    int saved = errno;
    long ret = syscall(n, a, b, c, d, e, f);
    if (ret == -1)
        ret = -errno;
    errno = saved;
    return ret;
}
#endif

void *mlk_map_anon(size_t len)
{
    long r = mlk_syscall6(SYS_mmap, 0, (long)len, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return (r < 0 && r > -4096) ? NULL : (void *)r;
}

void mlk_unmap(void *p, size_t len)
{
    if (p)
        mlk_syscall6(SYS_munmap, (long)p, (long)len, 0, 0, 0, 0);
}

int mlk_getpid(void) { return (int)mlk_syscall6(SYS_getpid, 0, 0, 0, 0, 0, 0); }

/* Shared (not FUTEX_PRIVATE) futexes: the waker or waiter is another process. */
void mlk_futex_wake(uint32_t *word)
{
    mlk_syscall6(SYS_futex, (long)word, FUTEX_WAKE, 0x7fffffff, 0, 0, 0);
}

int mlk_futex_wait(uint32_t *word, uint32_t expected, int timeout_ms)
{
    struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
    return (int)mlk_syscall6(SYS_futex, (long)word, FUTEX_WAIT, expected, (long)&ts, 0, 0);
}

uint64_t mlk_now_ns(int clock)
{
    struct timespec ts;
    mlk_syscall6(SYS_clock_gettime, clock, (long)&ts, 0, 0, 0, 0);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

size_t mlk_strlen(const char *s)
{
    size_t n = 0;
    while (s && s[n])
        n++;
    return n;
}

void mlk_fmt_u64(char *buf, uint64_t v)
{
    char tmp[21];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (int i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    buf[n] = 0;
}

void mlk_warn(const char *a, const char *b, const char *c)
{
    char line[1024];
    size_t n = 0;
    const char *parts[4] = {"libmemleak: ", a, b, c};
    for (int i = 0; i < 4; i++)
        for (const char *s = parts[i]; s && *s && n < sizeof line - 1; s++)
            line[n++] = *s;
    line[n++] = '\n';
    int saved = errno;
    mlk_syscall6(SYS_write, 2, (long)line, (long)n, 0, 0, 0);
    errno = saved;
}

void mlk_lock(mlk_lock_t *l)
{
    while (__atomic_exchange_n(&l->held, 1, __ATOMIC_ACQUIRE)) {
        int spins = 0;
        while (__atomic_load_n(&l->held, __ATOMIC_RELAXED)) {
            if (++spins < 64)
                __builtin_ia32_pause();
            else
                mlk_syscall6(SYS_sched_yield, 0, 0, 0, 0, 0, 0);
        }
    }
}

void mlk_unlock(mlk_lock_t *l) { __atomic_store_n(&l->held, 0, __ATOMIC_RELEASE); }
