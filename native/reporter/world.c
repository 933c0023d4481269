/* Stopping every thread of a traced process, from outside it, so that the
 * reachability scan sees one consistent picture -- and resuming them as if
 * nothing happened.
 *
 * How (the technique LeakSanitizer's stop-the-world uses from inside, here
 * from the reporter): PTRACE_SEIZE each thread listed in /proc/PID/task,
 * then PTRACE_INTERRUPT it.  SEIZE, unlike ATTACH, sends no SIGSTOP: the
 * program sees no signal, its handlers do not run, a parent waiting for it
 * sees no stop.  A thread blocked in a system call leaves it for the stop
 * and restarts it on resume, as after a debugger's stop (the few calls the
 * kernel never restarts -- epoll_wait, for one -- return EINTR, as they do
 * after SIGSTOP/SIGCONT; programs that handle signals handle that).  The
 * listing repeats until it finds no thread it has not stopped: a thread
 * created meanwhile is stopped in its turn.  A signal that arrives as a
 * thread stops is noted and delivered again when the thread is resumed.
 *
 * If the reporter dies while the threads are stopped, the kernel detaches
 * them and they run on: a scan can never leave the program stopped. */
#define _GNU_SOURCE
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "grow.h"
#include "world.h"

#define EXPORT __attribute__((visibility("default")))
#define LISTING_ROUNDS 30

int64_t mlk_now_monotonic_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int known(const struct mlk_world *w, int tid)
{
    for (int i = 0; i < w->nthreads; i++)
        if (w->threads[i].tid == tid)
            return 1;
    return 0;
}

static int add_thread(struct mlk_world *w, int tid)
{
    struct mlk_thread *threads = mlk_grow(w->threads, w->nthreads, &w->cap, sizeof *threads, 64);
    if (!threads)
        return -1;
    w->threads = threads;
    memset(&w->threads[w->nthreads], 0, sizeof w->threads[0]);
    w->threads[w->nthreads++].tid = tid;
    return 0;
}

static void drop_thread(struct mlk_world *w, int i)
{
    w->threads[i] = w->threads[--w->nthreads];
}

/* The pid that traces `tid` already, from /proc, or 0. */
static int tracer_of(int pid, int tid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/task/%d/status", pid, tid);
    FILE *f = fopen(path, "re");
    int tracer = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "TracerPid: %d", &tracer) == 1)
            break;
    fclose(f);
    return tracer;
}

EXPORT int mlk_thread_is_zombie(int pid, int tid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/task/%d/stat", pid, tid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *close = strrchr(buf, ')');
    return !close || close[1] != ' ' || close[2] == 'Z' || close[2] == 'X';
}

/* The process has a thread that is neither gone nor a zombie (its main
 * thread may have called pthread_exit while the others run). */
static int process_alive(int pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    if (!d)
        return errno != ENOENT && errno != ESRCH;
    int alive = 0;
    struct dirent *e;
    while (!alive && (e = readdir(d)) != NULL)
        alive = atoi(e->d_name) > 0 && !mlk_thread_is_zombie(pid, atoi(e->d_name));
    closedir(d);
    return alive;
}

static int yama_scope(void)
{
    FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "re");
    int scope = -1;
    if (f) {
        if (fscanf(f, "%d", &scope) != 1)
            scope = -1;
        fclose(f);
    }
    return scope;
}

static void refused(int pid, int tid, int err, char *why, int why_len)
{
    int tracer = tracer_of(pid, tid);
    int scope = yama_scope();
    if (tracer > 0)
        snprintf(why, (size_t)why_len, "process %d is already traced by process %d (a debugger "
                 "or strace?): its threads cannot be stopped", pid, tracer);
    else if (err == EPERM && scope > 0)
        snprintf(why, (size_t)why_len, "not allowed to stop the threads of process %d (ptrace: %s; "
                 "kernel.yama.ptrace_scope is %d)", pid, strerror(err), scope);
    else
        snprintf(why, (size_t)why_len, "not allowed to stop the threads of process %d (ptrace: %s; "
                 "seccomp or a container may forbid ptrace)", pid, strerror(err));
}

/* Registers and stack pointer of a stopped thread. */
static void read_registers(struct mlk_thread *t)
{
    struct iovec iov = {t->regs, sizeof t->regs};
    if (ptrace(PTRACE_GETREGSET, t->tid, (void *)NT_PRSTATUS, &iov) != 0) {
        t->nregs = 0;
        return;
    }
    t->nregs = (int)(iov.iov_len / sizeof(uint64_t));
#if defined(__x86_64__)
    t->sp = t->regs[19]; /* struct user_regs_struct: rsp */
#elif defined(__aarch64__)
    t->sp = t->regs[31]; /* struct user_pt_regs: sp */
#else
    t->sp = 0; /* unknown: the whole stack mapping is scanned */
#endif
}

/* Wait for a seized and interrupted thread to stop.  0: stopped;
 * 1: it is gone (exited meanwhile). */
static int wait_stopped(struct mlk_thread *t)
{
    for (;;) {
        int status;
        pid_t r = waitpid(t->tid, &status, __WALL);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        if (WIFEXITED(status) || WIFSIGNALED(status))
            return 1;
        if (!WIFSTOPPED(status))
            continue;
        if ((status >> 16) == PTRACE_EVENT_STOP)
            return 0;  /* our interrupt, or a group stop: stopped either way */
        /* A signal on its way to the thread: keep it for the resume, and
         * stay stopped (this stop is as good as the interrupt's). */
        t->signal = WSTOPSIG(status);
        return 0;
    }
}

EXPORT struct mlk_world *mlk_world_stop(int pid, char *why, int why_len)
{
    return mlk_world_stop_except(pid, 0, why, why_len);
}

EXPORT struct mlk_world *mlk_world_stop_except(int pid, int except_tid, char *why, int why_len)
{
    struct mlk_world *w = calloc(1, sizeof *w);
    char path[64];
    if (!w) {
        snprintf(why, (size_t)why_len, "out of memory");
        return NULL;
    }
    w->pid = pid;
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    for (int round = 0; round < LISTING_ROUNDS; round++) {
        DIR *d = opendir(path);
        if (!d) {
            int err = errno; /* before process_alive's own calls */
            if (err == ENOENT || !process_alive(pid))
                snprintf(why, (size_t)why_len, "process %d has exited", pid);
            else
                snprintf(why, (size_t)why_len, "cannot list the threads of process %d: %s", pid,
                         strerror(err));
            mlk_world_resume(w);
            return NULL;
        }
        int first_new = w->nthreads, failed = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            int tid = atoi(e->d_name);
            if (tid <= 0 || tid == except_tid || known(w, tid) || mlk_thread_is_zombie(pid, tid))
                continue;
            if (ptrace(PTRACE_SEIZE, tid, 0, 0) != 0) {
                /* Exited since the listing; a thread in the middle of
                 * exiting refuses with EPERM: gone too, not a refusal. */
                if (errno == ESRCH || (errno == EPERM && mlk_thread_is_zombie(pid, tid)))
                    continue;
                refused(pid, tid, errno, why, why_len);
                failed = 1;
                break;
            }
            if (add_thread(w, tid) != 0) {
                ptrace(PTRACE_DETACH, tid, 0, 0);
                snprintf(why, (size_t)why_len, "out of memory");
                failed = 1;
                break;
            }
            ptrace(PTRACE_INTERRUPT, tid, 0, 0);
        }
        closedir(d);
        for (int i = first_new; i < w->nthreads;) {
            if (wait_stopped(&w->threads[i]) != 0) {
                ptrace(PTRACE_DETACH, w->threads[i].tid, 0, 0);
                drop_thread(w, i);
                continue;
            }
            read_registers(&w->threads[i]);
            i++;
        }
        if (failed) {
            mlk_world_resume(w);
            return NULL;
        }
        if (w->nthreads == first_new) { /* nothing new: all are stopped */
            if (w->nthreads == 0 && !except_tid) {
                /* Every thread listed was gone by the time it was seized:
                 * threads come and go.  Dead only if the process says so. */
                if (process_alive(pid))
                    continue;
                snprintf(why, (size_t)why_len, "process %d has exited", pid);
                mlk_world_resume(w);
                return NULL;
            }
            w->stopped_ns = mlk_now_monotonic_ns();
            w->mem_pid = w->nthreads ? w->threads[0].tid : except_tid;
            for (int i = 0; i < w->nthreads; i++)
                if (w->threads[i].tid == pid)
                    w->mem_pid = pid; /* the main thread, when it is alive */
            return w;
        }
    }
    snprintf(why, (size_t)why_len, "process %d kept creating threads while they were being "
             "stopped (%d rounds)", pid, LISTING_ROUNDS);
    mlk_world_resume(w);
    return NULL;
}

EXPORT void mlk_world_resume(struct mlk_world *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->nthreads; i++)
        ptrace(PTRACE_DETACH, w->threads[i].tid, 0, (void *)(long)w->threads[i].signal);
    free(w->threads);
    free(w);
}

EXPORT int mlk_world_threads(const struct mlk_world *w) { return w ? w->nthreads : 0; }

EXPORT void mlk_world_forget_thread(struct mlk_world *w, int tid)
{
    for (int i = 0; w && tid > 0 && i < w->nthreads; i++)
        if (w->threads[i].tid == tid) {
            w->threads[i].dead_stack = 1; /* its stack region claimed, and none of it read */
            w->threads[i].nregs = 0;      /* nor its registers */
        }
}

EXPORT uint64_t mlk_world_pc(const struct mlk_world *w, int i)
{
    if (!w || i < 0 || i >= w->nthreads)
        return 0;
    const struct mlk_thread *t = &w->threads[i];
#if defined(__x86_64__)
    return t->nregs > 16 ? t->regs[16] : 0; /* struct user_regs_struct: rip */
#elif defined(__aarch64__)
    return t->nregs > 32 ? t->regs[32] : 0; /* struct user_pt_regs: pc */
#else
    return 0;
#endif
}

EXPORT size_t mlk_read_mem(int pid, uint64_t addr, void *buf, size_t len)
{
    size_t done = 0, got = 0;
    while (done < len) {
        struct iovec local = {(char *)buf + done, len - done};
        struct iovec remote = {(void *)(uintptr_t)(addr + done), len - done};
        ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
        if (n > 0) {
            done += (size_t)n;
            got += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == ESRCH || errno == EPERM)) { /* the process is gone or not ours */
            memset((char *)buf + done, 0, len - done);
            break;
        }
        /* Unreadable from here to the end of its page: zeros. */
        uint64_t at = addr + done;
        size_t skip = (size_t)(((at | 4095) + 1) - at);
        if (skip > len - done)
            skip = len - done;
        memset((char *)buf + done, 0, skip);
        done += skip;
    }
    return got;
}
