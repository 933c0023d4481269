/* Raw system calls and diagnostics.  Everything here is async-signal-safe and
 * never allocates, so it may run inside malloc, a signal handler or a child
 * between fork and exec.  System calls go straight to the kernel so that our
 * own mmap calls are never seen by our own mmap hook. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <string.h>
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

/* Our own memory (tables, the unwinder's memos) is carved out of one
 * reserved range of address space, so that the reachability scan can tell
 * it from the program's: the unwinder keeps copies of register and stack
 * words -- heap addresses among them -- which must not count as the
 * program's references (native/reporter/scan.c skips [own_lo, own_hi)).
 * Reserving costs no memory (PROT_NONE, MAP_NORESERVE); a piece becomes
 * memory when mapped over, and goes back to PROT_NONE when unmapped.  The
 * range is handed out by a bump pointer and never reused: our maps are few
 * and grow by doubling, so the total stays within twice the largest.  If
 * the reservation fails (RLIMIT_AS), maps come from anywhere, as before. */
#define OWN_RESERVE_BYTES (16ull << 30)
#define OWN_RESERVE_SMALLER (1ull << 30)
static uint64_t own_lo, own_hi, own_next;
static uint32_t own_state; /* 0 not tried, 1 being reserved, 2 done */

static long map_fixed(uint64_t at, size_t len, int prot)
{
    return mlk_syscall6(SYS_mmap, (long)at, (long)len, prot,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

static void reserve_own_range(void)
{
    uint32_t expected = 0;
    if (__atomic_compare_exchange_n(&own_state, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        uint64_t sizes[2] = {OWN_RESERVE_BYTES, OWN_RESERVE_SMALLER};
        for (int i = 0; i < 2 && !own_lo; i++) {
            long r = mlk_syscall6(SYS_mmap, 0, (long)sizes[i], PROT_NONE,
                                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (!(r < 0 && r > -4096)) {
                own_lo = own_next = (uint64_t)r;
                own_hi = own_lo + sizes[i];
            }
        }
        __atomic_store_n(&own_state, 2, __ATOMIC_RELEASE);
        return;
    }
    while (__atomic_load_n(&own_state, __ATOMIC_ACQUIRE) != 2)
        mlk_syscall6(SYS_sched_yield, 0, 0, 0, 0, 0, 0);
}

void mlk_own_range(uint64_t *lo, uint64_t *hi)
{
    if (__atomic_load_n(&own_state, __ATOMIC_ACQUIRE) != 2)
        reserve_own_range();
    *lo = own_lo;
    *hi = own_hi;
}

void *mlk_map_anon(size_t len)
{
    if (__atomic_load_n(&own_state, __ATOMIC_ACQUIRE) != 2)
        reserve_own_range();
    size_t rounded = (len + 4095) & ~(size_t)4095;
    if (own_lo && rounded <= own_hi - own_lo) {
        uint64_t at = __atomic_fetch_add(&own_next, rounded, __ATOMIC_RELAXED);
        if (at + rounded <= own_hi && at >= own_lo) {
            long r = map_fixed(at, rounded, PROT_READ | PROT_WRITE);
            if (!(r < 0 && r > -4096))
                return (void *)r;
        }
    }
    long r = mlk_syscall6(SYS_mmap, 0, (long)len, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return (r < 0 && r > -4096) ? NULL : (void *)r;
}

void mlk_unmap(void *p, size_t len)
{
    if (!p)
        return;
    uint64_t at = (uint64_t)p;
    if (at >= own_lo && at < own_hi) /* back to reserved address space */
        map_fixed(at, (len + 4095) & ~(size_t)4095, PROT_NONE);
    else
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

static uint64_t parse_hex(const char **p, const char *end)
{
    uint64_t v = 0;
    for (; *p < end; (*p)++) {
        char c = **p;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            break;
        v = v << 4 | (uint64_t)d;
    }
    return v;
}

static int each_mapping(int (*fn)(uint64_t lo, uint64_t hi, void *arg), void *arg, int exec_only);

int mlk_each_mapping(int (*fn)(uint64_t lo, uint64_t hi, void *arg), void *arg)
{
    return each_mapping(fn, arg, 0);
}

int mlk_each_exec_mapping(int (*fn)(uint64_t lo, uint64_t hi, void *arg), void *arg)
{
    return each_mapping(fn, arg, 1);
}

/* (exec_only: the mappings whose permissions say x, "r-xp") */
static int each_mapping(int (*fn)(uint64_t lo, uint64_t hi, void *arg), void *arg, int exec_only)
{
    long fd = mlk_syscall6(SYS_openat, -100 /* AT_FDCWD */, (long)"/proc/self/maps", 0 /* O_RDONLY */, 0, 0, 0);
    if (fd < 0)
        return -1;
    char buf[4096];
    size_t have = 0;
    int stopped = 0;
    while (!stopped) {
        long n = mlk_syscall6(SYS_read, fd, (long)(buf + have), (long)(sizeof buf - have), 0, 0, 0);
        if (n <= 0)
            break;
        have += (size_t)n;
        const char *line = buf, *end = buf + have;
        for (const char *nl; !stopped && (nl = memchr(line, '\n', (size_t)(end - line))); line = nl + 1) {
            const char *p = line;
            uint64_t lo = parse_hex(&p, nl);
            p++;
            uint64_t hi = parse_hex(&p, nl);
            if (!exec_only || (nl - p > 4 && p[3] == 'x'))
                stopped = fn(lo, hi, arg);
        }
        have = (size_t)(end - line);
        memmove(buf, line, have);
        if (have == sizeof buf)
            have = 0; /* a line longer than the buffer: not a maps line */
    }
    mlk_syscall6(SYS_close, fd, 0, 0, 0, 0, 0);
    return stopped;
}

void mlk_warn_parts(const char *const *parts, size_t count)
{
    char line[1024];
    size_t n = 0;
    for (const char *s = "libmemleak: "; *s; s++)
        line[n++] = *s;
    for (size_t i = 0; i < count; i++)
        for (const char *s = parts[i]; s && *s && n < sizeof line - 1; s++)
            line[n++] = *s;
    line[n++] = '\n';
    int saved = errno;
    mlk_syscall6(SYS_write, 2, (long)line, (long)n, 0, 0, 0);
    errno = saved;
}

void mlk_warn(const char *a, const char *b, const char *c)
{
    const char *parts[3] = {a, b, c};
    mlk_warn_parts(parts, 3);
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

void mlk_lock_across_fork(mlk_lock_t *l, int acquire)
{
    if (acquire)
        mlk_lock(l);
    else
        mlk_unlock(l);
}
