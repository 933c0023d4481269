/* Making a running process call a function: what `libmemleak attach` and
 * `detach` stand on (libmemleak/live/attach.py decides what to call).
 *
 * One thread of the process is borrowed; the others run on.  It is seized
 * (PTRACE_SEIZE + PTRACE_INTERRUPT: no signal the program sees), its
 * registers and vector state saved; each call sets the argument registers,
 * points the instruction pointer at the function and pushes a return
 * address of 0, so that the function's return faults at address 0 -- a
 * stop we catch and never deliver.  At the end the saved state is written
 * back and the thread let go: it goes on where it was, as after a signal
 * handler.  A thread stopped in a system call has orig_rax kept, so the
 * kernel restarts the call exactly as after a debugger's stop (gdb's
 * inferior calls do the same).
 *
 * Which thread: one blocked in a system call that no allocator or loader
 * holds a lock across -- read, epoll_wait, nanosleep, futex waits last --
 * so that the loader and malloc we call cannot wait on a lock the thread
 * itself holds.  Failing that (a thread that only computes), one whose
 * instruction pointer is outside the C runtime (the caller passes those
 * ranges): its own code holds no lock of the loader's or malloc's.
 *
 * If we die while a call runs, the kernel lets the thread go and the fault
 * at address 0 kills the process -- as with a debugger killed mid-call; so
 * the caller waits for the call for as long as it takes. */
#define _GNU_SOURCE
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "world.h"

#define EXPORT __attribute__((visibility("default")))
#define XSTATE_MAX (64 * 1024)
#define STACK_SKIP 1024 /* below the thread's sp: its red zone and more */
#define NT_X86_XSTATE_ 0x202

struct mlk_hijack {
    int pid, tid;
    int signal;                 /* one that arrived meanwhile: delivered at the end */
    int in_call;
    struct user_regs_struct saved;
    size_t xstate_len;
    unsigned char *xstate;
    uint64_t scratch;           /* next free byte below the saved sp, going down */
    int64_t stopped_ns;         /* when the thread stopped */
    int forking_rounds;         /* tries that found a thread inside fork() */
};

/* The system calls of a fork: glibc's fork() takes every malloc arena
 * lock, makes the call, and lets go after it -- a thread in one holds
 * them all, and no thread's malloc gets through until it returns (a
 * program that forks in a loop is in one every turn).  clone with
 * CLONE_THREAD makes a thread and holds none; clone3's flags are not in
 * its registers, so it is taken for a fork. */
static int is_fork_call(long nr, unsigned long first_arg)
{
    return (nr == SYS_clone && !(first_arg & CLONE_THREAD)) || nr == SYS_clone3 ||
           nr == SYS_fork || nr == SYS_vfork;
}

/* System calls malloc makes holding an arena lock (which the malloc calls
 * of the loader would then wait on), and a fork's.  The loader's own lock
 * is recursive: a thread stopped in the loader's reads may call it again. */
static int holds_locks_across(long nr, unsigned long first_arg)
{
    return nr == SYS_mmap || nr == SYS_munmap || nr == SYS_brk || nr == SYS_mprotect ||
           nr == SYS_madvise || nr == SYS_mremap || is_fork_call(nr, first_arg);
}

/* The thread's system call and its first argument as /proc says (-1: not
 * in one). */
static long syscall_of(int pid, int tid, unsigned long *first_arg)
{
    char path[64], buf[96];
    snprintf(path, sizeof path, "/proc/%d/task/%d/syscall", pid, tid);
    *first_arg = 0;
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    long nr = -1;
    if (!fgets(buf, sizeof buf, f) || sscanf(buf, "%ld %lx", &nr, first_arg) < 1)
        nr = -1;
    fclose(f);
    return nr;
}

#define RANK_FORKING (-3) /* in a fork: every thread's malloc waits on it */

/* Lower is better; -1: not a candidate now.  A futex wait may be inside
 * a lock of the runtime's (waiting, so not holding that one): last. */
static int rank_of(int pid, int tid)
{
    if (mlk_thread_is_zombie(pid, tid))
        return -2;
    unsigned long first_arg;
    long nr = syscall_of(pid, tid, &first_arg);
    if (nr >= 0 && is_fork_call(nr, first_arg))
        return RANK_FORKING;
    if (nr < 0 || holds_locks_across(nr, first_arg))
        return -1;
    if (nr == SYS_futex)
        return 2 + (tid != pid);
    return tid == pid ? 0 : 1;
}

static int outside(uint64_t ip, const uint64_t *lo, const uint64_t *hi, int n)
{
    for (int i = 0; i < n; i++)
        if (ip >= lo[i] && ip < hi[i])
            return 0;
    return 1;
}

static int wait_stop(int tid, int *status)
{
    for (;;) {
        pid_t r = waitpid(tid, status, __WALL);
        if (r == tid)
            return 0;
        if (r < 0 && errno != EINTR)
            return -1;
    }
}

/* Seize and stop tid; its registers in h->saved.  0: stopped. */
static int seize(struct mlk_hijack *h, int tid, char *why, int why_len)
{
    if (ptrace(PTRACE_SEIZE, tid, 0, 0) != 0) {
        if (errno == ESRCH)
            return -1;
        snprintf(why, (size_t)why_len, "ptrace: %s", strerror(errno));
        return -2;
    }
    ptrace(PTRACE_INTERRUPT, tid, 0, 0);
    int status;
    for (;;) {
        if (wait_stop(tid, &status) != 0 || WIFEXITED(status) || WIFSIGNALED(status))
            return -1;
        if (WIFSTOPPED(status) && (status >> 16) == PTRACE_EVENT_STOP)
            break;
        if (WIFSTOPPED(status)) { /* a signal on its way: keep it, stay stopped */
            h->signal = WSTOPSIG(status);
            break;
        }
    }
    h->tid = tid;
    h->stopped_ns = mlk_now_monotonic_ns();
    return ptrace(PTRACE_GETREGS, tid, 0, &h->saved) == 0 ? 0 : -1;
}

static void let_go(struct mlk_hijack *h)
{
    ptrace(PTRACE_DETACH, h->tid, 0, (void *)(long)h->signal);
    h->tid = 0;
    h->signal = 0;
}

static int list_threads(int pid, int *tids, int cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < cap)
        if (atoi(e->d_name) > 0)
            tids[n++] = atoi(e->d_name);
    closedir(d);
    return n;
}

/* One look for a thread at a safe point; 1 found (seized), 0 not now, -1 error. */
static int try_round(struct mlk_hijack *h, const uint64_t *lo, const uint64_t *hi, int navoid,
                     int any_outside, char *why, int why_len)
{
    int tids[4096];
    int n = list_threads(h->pid, tids, 4096);
    if (n <= 0) {
        snprintf(why, (size_t)why_len, "process %d has exited", h->pid);
        return -1;
    }
    int ranks[4096];
    for (int i = 0; i < n; i++) {
        ranks[i] = rank_of(h->pid, tids[i]);
        if (ranks[i] == RANK_FORKING) {
            /* Any thread borrowed now would wait in malloc for the fork to
             * end -- for ever, were the forking thread stopped. */
            h->forking_rounds++;
            snprintf(why, (size_t)why_len, "thread %d of process %d was inside fork() (which holds "
                     "malloc's locks) at every try", tids[i], h->pid);
            return 0;
        }
    }
    for (int want = 0; want <= 3; want++) {
        for (int i = 0; i < n; i++) {
            int rank = ranks[i];
            if (rank == -2 || (!any_outside && rank != want))
                continue;
            if (any_outside && want > 0)
                return 0;
            int r = seize(h, tids[i], why, why_len);
            if (r == -2)
                return -1;
            if (r != 0)
                continue;
            long orig = (long)h->saved.orig_rax;
            if ((orig >= 0 && !holds_locks_across(orig, h->saved.rdi) && rank >= 0) ||
                outside(h->saved.rip, lo, hi, navoid))
                return 1;
            let_go(h); /* it left its call, inside the runtime: not here */
        }
    }
    return 0;
}

EXPORT struct mlk_hijack *mlk_hijack_begin(int pid, const uint64_t *avoid_lo, const uint64_t *avoid_hi,
                                           int navoid, int rounds, char *why, int why_len)
{
#if !defined(__x86_64__)
    (void)pid, (void)avoid_lo, (void)avoid_hi, (void)navoid, (void)rounds;
    snprintf(why, (size_t)why_len, "attach is implemented for x86-64 only");
    return NULL;
#else
    struct mlk_hijack *h = calloc(1, sizeof *h);
    if (!h || !(h->xstate = malloc(XSTATE_MAX))) {
        free(h);
        snprintf(why, (size_t)why_len, "out of memory");
        return NULL;
    }
    h->pid = pid;
    for (int round = 0; round < rounds; round++) {
        int r = try_round(h, avoid_lo, avoid_hi, navoid, round >= rounds / 2, why, why_len);
        if (r < 0)
            break;
        if (r == 1) {
            struct iovec iov = {h->xstate, XSTATE_MAX};
            h->xstate_len = ptrace(PTRACE_GETREGSET, h->tid, (void *)NT_X86_XSTATE_, &iov) == 0 ? iov.iov_len : 0;
            h->scratch = (h->saved.rsp - STACK_SKIP) & ~(uint64_t)15;
            return h;
        }
        struct timespec pause = {0, 5 * 1000 * 1000};
        nanosleep(&pause, NULL);
        if (round == rounds - 1 && h->forking_rounds < rounds)
            snprintf(why, (size_t)why_len, "no thread of process %d came to a safe point (blocked in a "
                     "system call, or running its own code) in %d tries", pid, rounds);
    }
    free(h->xstate);
    free(h);
    return NULL;
#endif
}

EXPORT int mlk_hijack_tid(const struct mlk_hijack *h) { return h->tid; }

/* Put len bytes on the borrowed thread's stack, below what it uses; their
 * address in the process, or 0. */
EXPORT uint64_t mlk_hijack_push(struct mlk_hijack *h, const void *data, size_t len)
{
    uint64_t at = (h->scratch - len) & ~(uint64_t)15;
    struct iovec local = {(void *)data, len}, remote = {(void *)(uintptr_t)at, len};
    if (process_vm_writev(h->tid, &local, 1, &remote, 1, 0) != (ssize_t)len)
        return 0; /* through the borrowed thread: the main one may be a zombie */
    h->scratch = at;
    return at;
}

EXPORT int mlk_write_mem(int pid, uint64_t addr, const void *buf, size_t len)
{
    struct iovec local = {(void *)buf, len}, remote = {(void *)(uintptr_t)addr, len};
    return process_vm_writev(pid, &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -1;
}

/* Start func(args...) on the borrowed thread.  0: running. */
EXPORT int mlk_hijack_call(struct mlk_hijack *h, uint64_t func, const uint64_t *args, int nargs,
                           char *why, int why_len)
{
#if defined(__x86_64__)
    struct user_regs_struct r = h->saved;
    uint64_t zero = 0;
    uint64_t sp = (h->scratch - 64) & ~(uint64_t)15;
    sp -= 8; /* the return address: at the call, sp + 8 is 16-aligned */
    if (mlk_write_mem(h->tid, sp, &zero, 8) != 0) {
        snprintf(why, (size_t)why_len, "cannot write the thread's stack: %s", strerror(errno));
        return -1;
    }
    unsigned long long *slots[6] = {&r.rdi, &r.rsi, &r.rdx, &r.rcx, &r.r8, &r.r9};
    for (int i = 0; i < nargs && i < 6; i++)
        *slots[i] = args[i];
    r.rsp = sp;
    r.rip = func;
    r.rax = 0;
    r.orig_rax = (unsigned long long)-1; /* no system call restart on this resume */
    if (ptrace(PTRACE_SETREGS, h->tid, 0, &r) != 0 || ptrace(PTRACE_CONT, h->tid, 0, 0) != 0) {
        snprintf(why, (size_t)why_len, "ptrace: %s", strerror(errno));
        return -1;
    }
    h->in_call = 1;
    return 0;
#else
    (void)h, (void)func, (void)args, (void)nargs;
    snprintf(why, (size_t)why_len, "attach is implemented for x86-64 only");
    return -1;
#endif
}

/* Wait up to timeout_ms for the call to return.  0: returned, *ret set;
 * 1: still running; -1: it crashed or the thread is gone (why says). */
EXPORT int mlk_hijack_wait(struct mlk_hijack *h, int timeout_ms, uint64_t *ret, char *why, int why_len)
{
    int64_t deadline = mlk_now_monotonic_ns() + (int64_t)timeout_ms * 1000000;
    for (;;) {
        int status;
        pid_t r = waitpid(h->tid, &status, __WALL | WNOHANG);
        if (r == 0) {
            if (mlk_now_monotonic_ns() > deadline)
                return 1;
            struct timespec pause = {0, 1000 * 1000};
            nanosleep(&pause, NULL);
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 || WIFEXITED(status) || WIFSIGNALED(status)) {
            snprintf(why, (size_t)why_len, "thread %d ended during the call", h->tid);
            h->in_call = 0;
            h->tid = 0;
            return -1;
        }
        if (!WIFSTOPPED(status))
            continue;
        int sig = WSTOPSIG(status);
        if ((status >> 16) != 0 || (sig != SIGSEGV && sig != SIGBUS && sig != SIGILL)) {
            /* Another signal (or a group stop): kept for the end, not delivered
             * into the call. */
            if ((status >> 16) == 0)
                h->signal = sig;
            ptrace(PTRACE_CONT, h->tid, 0, 0);
            continue;
        }
#if defined(__x86_64__)
        struct user_regs_struct regs;
        ptrace(PTRACE_GETREGS, h->tid, 0, &regs);
        h->in_call = 0;
        if (sig == SIGSEGV && regs.rip == 0) {
            *ret = regs.rax;
            return 0;
        }
        snprintf(why, (size_t)why_len, "the call faulted (signal %d at 0x%llx)", sig,
                 (unsigned long long)regs.rip);
#endif
        return -1;
    }
}

/* Give the thread back as it was; how long it was kept, in ns. */
EXPORT int64_t mlk_hijack_end(struct mlk_hijack *h)
{
    int64_t kept = 0;
    if (h->tid) {
#if defined(__x86_64__)
        ptrace(PTRACE_SETREGS, h->tid, 0, &h->saved);
        if (h->xstate_len) {
            struct iovec iov = {h->xstate, h->xstate_len};
            ptrace(PTRACE_SETREGSET, h->tid, (void *)NT_X86_XSTATE_, &iov);
        }
#endif
        kept = mlk_now_monotonic_ns() - h->stopped_ns;
        let_go(h);
    }
    free(h->xstate);
    free(h);
    return kept;
}
