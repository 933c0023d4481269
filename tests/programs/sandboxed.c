/* A program that puts itself in a sandbox, as a browser's content process
 * does: after start-up, a seccomp filter lets through only the system
 * calls such a process makes (memory, futexes, reading and writing what it
 * holds open, clocks, signals to itself) and traps every other into a
 * SIGSYS handler that counts it and fails it with ENOSYS (as Firefox's
 * release builds do; its debug builds crash).  The tracer inside must make
 * no call the policy refuses.
 *
 * stdin: a first line lets it into the sandbox (a browser's content
 * process initializes first, its reporter is up by then); "leak" allocates a block of 1,000 bytes kept for ever, "temp" one
 * freed at once, "paths" a block of 10 bytes from each of 256 call paths,
 * all freed (work enough for a descendant's reporter to be started
 * lazily); each line answered "ok N" (N the blocks kept).  At end of
 * input it writes "violations: K" and the refused calls' numbers to
 * stdout, and exits 0. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

static volatile int refused[64];
static volatile int refused_count;

static void on_sigsys(int sig, siginfo_t *info, void *context)
{
    (void)sig;
    int i = __atomic_fetch_add(&refused_count, 1, __ATOMIC_RELAXED);
    if (i < 64)
        refused[i] = info->si_syscall;
    ((ucontext_t *)context)->uc_mcontext.gregs[REG_RAX] = -ENOSYS;
}

#define ALLOW(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

static void enter_sandbox(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigsys;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSYS, &sa, NULL);
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        ALLOW(SYS_read), ALLOW(SYS_write), ALLOW(SYS_close), ALLOW(SYS_fstat), ALLOW(SYS_newfstatat),
        ALLOW(SYS_lseek), ALLOW(SYS_mmap), ALLOW(SYS_munmap), ALLOW(SYS_mprotect), ALLOW(SYS_mremap),
        ALLOW(SYS_madvise), ALLOW(SYS_brk), ALLOW(SYS_futex), ALLOW(SYS_getpid), ALLOW(SYS_gettid),
        ALLOW(SYS_clock_gettime), ALLOW(SYS_clock_nanosleep), ALLOW(SYS_nanosleep),
        ALLOW(SYS_sched_yield), ALLOW(SYS_rt_sigaction), ALLOW(SYS_rt_sigprocmask),
        ALLOW(SYS_rt_sigreturn), ALLOW(SYS_restart_syscall), ALLOW(SYS_getrandom),
        ALLOW(SYS_exit), ALLOW(SYS_exit_group),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
    };
    struct sock_fprog prog = {sizeof code / sizeof code[0], code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) {
        perror("seccomp");
        exit(2);
    }
}

__attribute__((noinline)) static void *path_step(int level, unsigned path);
__attribute__((noinline)) static void *path_left(int level, unsigned path)
{
    void *p = path_step(level + 1, path);
    __asm__ volatile("" ::: "memory");
    return p;
}
__attribute__((noinline)) static void *path_right(int level, unsigned path)
{
    void *p = path_step(level + 1, path);
    __asm__ volatile("" ::: "memory");
    return p;
}
__attribute__((noinline)) static void *path_step(int level, unsigned path)
{
    void *p = level == 8 ? malloc(10) : path >> level & 1 ? path_right(level, path) : path_left(level, path);
    __asm__ volatile("" ::: "memory");
    return p;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    char line[64];
    if (!fgets(line, sizeof line, stdin))
        return 2;
    enter_sandbox();
    printf("sandboxed\n");
    int kept = 0;
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "leak", 4)) {
            void *volatile p = malloc(1000);
            (void)p;
            kept++;
        } else if (!strncmp(line, "temp", 4)) {
            free(malloc(1000));
        } else if (!strncmp(line, "paths", 5)) {
            for (unsigned path = 0; path < 256; path++)
                free(path_step(0, path));
        }
        printf("ok %d\n", kept);
    }
    int n = refused_count;
    printf("violations: %d", n);
    for (int i = 0; i < n && i < 64; i++)
        printf(" %d", refused[i]);
    printf("\n");
    return 0;
}
