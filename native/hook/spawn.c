/* Starting the reporter, and knowing whether one runs.  Why it is safe
 * for the program is told at the top of control.c. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "control.h"

/* Prepared once at start, so that spawning needs no allocation. */
static char python_path[4096];
static char main_script[4096];
static char *spawn_argv[7];
static char **spawn_envp;
/* A reporter is being started by a thread of ours (between claiming the
 * reporter's place and its process's pid published): the place is 0 then,
 * and "none" would start another. */
static int spawning;
/* The process has set no_new_privs, the step before a seccomp filter
 * (mlk_before_sandbox): a reporter's start may make calls its policy
 * refuses, so none is made in it -- whether a filter followed cannot be
 * asked without such a call. */
static int confined;
static int warned_confined;

void mlk_spawn_confine(void) { __atomic_store_n(&confined, 1, __ATOMIC_RELEASE); }
int mlk_spawn_confined(void) { return __atomic_load_n(&confined, __ATOMIC_ACQUIRE); }

/* Waits, at most ms, until the reporter holds its life mutex -- from then
 * on whether it lives is known without a system call (reporter_process_alive). */
void mlk_wait_reporter_life(uint64_t ms)
{
    uint64_t deadline = mlk_now_ns(CLOCK_MONOTONIC) + ms * 1000000ull;
    for (;;) {
        int pid = __atomic_load_n(&mlk_seg->reporter_pid, __ATOMIC_ACQUIRE);
        uint32_t life = (uint32_t)__atomic_load_n(&mlk_seg->reporter_life_pid, __ATOMIC_ACQUIRE);
        if (pid <= 0 || (int)life == pid || mlk_now_ns(CLOCK_MONOTONIC) > deadline)
            return;
        mlk_futex_wait((uint32_t *)&mlk_seg->reporter_life_pid, life, 20);
    }
}
static int warned_spawn;

extern char **environ;


/* Environment for the reporter: ours without LD_PRELOAD, plus
 * MEMLEAK_REPORTER=1.  None of the program's preloads is for our Python,
 * and some cannot load there: Firefox gives its children
 * LD_PRELOAD=libmozsandbox.so, found through a library path the reporter
 * lacks -- "cannot be preloaded" on the program's stderr, 7-13 times a run
 * (#64 item 10).  Built once, in a mapping of its own rather than the
 * program's heap: after an attach, a scan walks glibc's heap, where a block
 * of ours without a trailer would be one of the program's older blocks --
 * and, our data being no root, a definitely lost one. */
void mlk_spawn_prepare(void)
{
    Dl_info info;
    const char *self = NULL;
    if (dladdr((void *)&mlk_init, &info) && info.dli_fname)
        self = info.dli_fname;
    const char *py = secure_getenv("MEMLEAK_PYTHON");
#ifdef MLK_PYTHON
    if (!py || !*py)
        py = MLK_PYTHON;
#endif
    if (!py || !*py)
        py = "/usr/bin/python3";
    snprintf(python_path, sizeof python_path, "%s", py);
    if (self) {
        const char *slash = strrchr(self, '/');
        int dirlen = slash ? (int)(slash - self) : 1;
        snprintf(main_script, sizeof main_script, "%.*s/_reporter_main.py", dirlen, slash ? self : ".");
    }
    /* -E: the program's PYTHON* variables are not ours.  -B: the reporter
     * runs as the program's user and under its limits (RLIMIT_FSIZE of a
     * few bytes once truncated a .pyc in the installation, and every later
     * reporter failed to start): it never writes into the installation. */
    spawn_argv[0] = python_path;
    spawn_argv[1] = "-E";
    spawn_argv[2] = "-B";
    spawn_argv[3] = main_script;
    spawn_argv[4] = mlk_reporter_dir_arg;   /* filled when the segment is made */
    spawn_argv[5] = mlk_reporter_name_arg;
    spawn_argv[6] = NULL;

    size_t n = 0;
    for (char **e = environ; e && *e; e++)
        n++;
    size_t array = (n + 2) * sizeof *spawn_envp;
    long mem = mlk_syscall6(SYS_mmap, 0, (long)array, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem < 0 && mem > -4096)
        return;
    spawn_envp = (char **)mem;
    size_t k = 0;
    for (char **e = environ; e && *e; e++)
        if (strncmp(*e, "MEMLEAK_REPORTER=", 17) != 0 && strncmp(*e, "LD_PRELOAD=", 11) != 0 &&
            strncmp(*e, "MEMLEAK_STANDBY_PIPE=", 21) != 0) /* (daemon/standby.py's, never the program's) */
            spawn_envp[k++] = *e;
    spawn_envp[k++] = "MEMLEAK_REPORTER=1";
    spawn_envp[k] = NULL;
}

/* Runs in the grandchild: only raw system calls from here on. */
static __attribute__((noreturn)) void exec_reporter(int seg_fd, int pidfd, int keeper_fd)
{
    raw(SYS_setsid, 0, 0, 0);
    int s = (int)raw(SYS_fcntl, seg_fd, F_DUPFD, 10);
    int p = pidfd >= 0 ? (int)raw(SYS_fcntl, pidfd, F_DUPFD, 10) : -1;
    int k = keeper_fd >= 0 && p >= 0 ? (int)raw(SYS_fcntl, keeper_fd, F_DUPFD, 10) : -1;
    raw(SYS_dup2, s, 3, 0);
    if (p >= 0)
        raw(SYS_dup2, p, 4, 0);
    if (k >= 0)
        raw(SYS_dup2, k, KEEPER_FD, 0);
    int null = (int)raw(SYS_open, (long)"/dev/null", O_RDWR, 0);
    if (null >= 0) {
        raw(SYS_dup2, null, 0, 0);
        raw(SYS_dup2, null, 1, 0);
    }
    int first_to_close = k >= 0 ? KEEPER_FD + 1 : p >= 0 ? 4 + 1 : 4;
    if (raw(SYS_close_range, first_to_close, ~0u, 0) < 0)
        for (int fd = first_to_close; fd < 65536; fd++)
            raw(SYS_close, fd, 0, 0);
    uint64_t empty = 0;
    mlk_syscall6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&empty, 0, 8, 0, 0);
    /* The reporter's script must be readable by whoever we run as now (a
     * service account cannot read a venv under a private home): Python
     * would only print its own error and exit. */
    long err = 0;
    int script = (int)raw(SYS_open, (long)main_script, O_RDONLY | O_CLOEXEC, 0);
    if (script < 0) {
        err = -script | (MLK_SPAWN_READ << 16);
    } else {
        raw(SYS_close, script, 0, 0);
        err = -raw(SYS_execve, (long)spawn_argv[0], (long)spawn_argv, (long)spawn_envp) | (MLK_SPAWN_EXEC << 16);
    }
    /* Failed: say why, and tell the program, so that it does not wait for us. */
    __atomic_store_n(&mlk_seg->spawn_error, (uint32_t)err, __ATOMIC_RELAXED);
    __atomic_store_n(&mlk_seg->reporter_pid, -1, __ATOMIC_RELEASE);
    mlk_futex_wake(&mlk_seg->done_seq);
    for (;;)
        raw(SYS_exit_group, 127, 0, 0);
}

/* The reachability scan stops the program with ptrace from its reporter,
 * which Yama's default (ptrace_scope 1: only an ancestor may trace) forbids
 * a descendant.  LeakSanitizer's answer, here too: name the tracer with
 * PR_SET_PTRACER.  Only under scope 1 (elsewhere it is not needed, or does
 * not help), once the reporter's pid is published (as its start's middle
 * process is reaped).  A program that names a tracer of its own afterwards (a crash
 * handler) takes the slot back; a scan then says it was refused. */
static void let_reporter_trace(void)
{
    char scope = 0;
    int fd = (int)raw(SYS_open, (long)"/proc/sys/kernel/yama/ptrace_scope", O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return;
    long n = raw(SYS_read, fd, (long)&scope, 1);
    raw(SYS_close, fd, 0, 0);
    if (n != 1 || scope != '1')
        return;
    int pid = __atomic_load_n(&mlk_seg->reporter_pid, __ATOMIC_ACQUIRE);
    if (pid > 0)
        raw(SYS_prctl, PR_SET_PTRACER, pid, 0);
}

static int process_alive(int pid);
static int reporter_process_alive(int pid);

/* Async-signal-safe: may run in our signal handler. */
void mlk_spawn_reporter(void)
{
    if (!mlk_seg || !spawn_envp || !main_script[0])
        return;
    if (__atomic_load_n(&confined, __ATOMIC_ACQUIRE)) {
        if (!__atomic_exchange_n(&warned_confined, 1, __ATOMIC_RELAXED))
            mlk_warn("this process confined itself (no_new_privs: a seccomp sandbox) and its reporter is gone: ",
                     "none can be started in it now, and its reports are not written ",
                     "(its reporter was killed, or could not start before)");
        return;
    }
    /* Claim the reporter's place from the one that is gone, unless its
     * standby took it over meanwhile (libmemleak/daemon/standby.py): then that one
     * is the reporter. */
    int gone = __atomic_load_n(&mlk_seg->reporter_pid, __ATOMIC_ACQUIRE);
    if (gone > 0 && reporter_process_alive(gone))
        return;
    if (!__atomic_compare_exchange_n(&mlk_seg->reporter_pid, &gone, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return;
    __atomic_add_fetch(&spawning, 1, __ATOMIC_ACQ_REL);
    __atomic_add_fetch(&mlk_seg->reporter_starts, 1, __ATOMIC_RELEASE);
    int pidfd = (int)raw(SYS_pidfd_open, mlk_getpid(), 0, 0);
    /* The root's first reporter becomes the keeper: it takes the listening
     * socket, and the program keeps no descriptor of it. */
    int keeper_fd = mlk_keeper_listener();
    /* The reporter is a grandchild whose parent exits at once, so that it is
     * not our child.  But an orphan goes to the nearest child subreaper
     * above it -- us, if the program made itself one -- and would turn up in
     * its wait().  (A direct child with no exit signal would not, but exec
     * gives it SIGCHLD back.)  So a subreaper stops being one until the
     * middle process is reaped, which is when its orphan has moved on.  An
     * orphan of the program's own in that moment of microseconds would go
     * to the next subreaper up, or init. */
    int subreaper = 0;
    raw(SYS_prctl, PR_GET_CHILD_SUBREAPER, (long)&subreaper, 0);
    if (subreaper)
        raw(SYS_prctl, PR_SET_CHILD_SUBREAPER, 0, 0);
    long child = mlk_syscall6(SYS_clone, 0 /* no exit signal */, 0, 0, 0, 0, 0);
    if (child == 0) {
        long grandchild = mlk_syscall6(SYS_clone, SIGCHLD, 0, 0, 0, 0, 0);
        if (grandchild == 0)
            exec_reporter(mlk_seg_fd, pidfd, keeper_fd);
        /* The reporter's pid, published before we are reaped: from then on
         * the program can tell whether its reporter is alive, however long
         * its start takes (a loaded machine, valgrind: the grandchild once
         * published it itself, and 2 s without it counted as "none" -- a
         * second reporter was started).  Unless it has failed already and
         * said so (-1). */
        int none = 0;
        if (grandchild > 0)
            __atomic_compare_exchange_n(&mlk_seg->reporter_pid, &none, (int)grandchild, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE);
        else if (__atomic_compare_exchange_n(&mlk_seg->reporter_pid, &none, -1, 0, __ATOMIC_ACQ_REL,
                                             __ATOMIC_ACQUIRE))
            __atomic_store_n(&mlk_seg->spawn_error, (uint32_t)(-grandchild | (MLK_SPAWN_CLONE << 16)),
                             __ATOMIC_RELAXED);
        for (;;)
            raw(SYS_exit_group, 0, 0, 0);
    }
    if (child > 0) {
        mlk_syscall6(SYS_wait4, child, 0, __WCLONE, 0, 0, 0);
        let_reporter_trace();
    }
    if (subreaper)
        raw(SYS_prctl, PR_SET_CHILD_SUBREAPER, 1, 0);
    __atomic_sub_fetch(&spawning, 1, __ATOMIC_ACQ_REL);
    if (pidfd >= 0)
        raw(SYS_close, pidfd, 0, 0);
    if (child < 0) {
        __atomic_store_n(&mlk_seg->spawn_error, (uint32_t)(-child | (MLK_SPAWN_CLONE << 16)), __ATOMIC_RELAXED);
        mlk_seg->reporter_pid = -1;
    } else if (keeper_fd >= 0) {
        mlk_keeper_listener_handed_over();
    }
}

/* Is pid a live process (not a zombie nobody reaped)?  Raw calls only. */
static int process_alive(int pid)
{
    char path[40] = "/proc/";
    mlk_fmt_u64(path + 6, (uint64_t)pid);
    size_t n = mlk_strlen(path);
    memcpy(path + n, "/stat", 6);
    int fd = (int)raw(SYS_open, (long)path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return raw(SYS_kill, pid, 0, 0) != -ESRCH;
    char buf[512];
    long got = raw(SYS_read, fd, (long)buf, sizeof buf - 1);
    raw(SYS_close, fd, 0, 0);
    if (got <= 0)
        return 0;
    buf[got] = 0;
    /* "pid (comm) S ...": the state follows the last ')'. */
    char *close = NULL;
    for (char *c = buf; *c; c++)
        if (*c == ')')
            close = c;
    return close && close[1] == ' ' && close[2] != 'Z' && close[2] != 'X';
}

/* The reporter's life mutex (shm_layout.h): process-shared and robust, so
 * that the kernel marks it when the reporter's thread dies. */
void mlk_init_reporter_life(struct mlk_header *h)
{
    _Static_assert(sizeof h->reporter_life >= sizeof(pthread_mutex_t), "reporter_life too small");
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init((pthread_mutex_t *)(void *)h->reporter_life, &a);
    pthread_mutexattr_destroy(&a);
}

/* Is reporter `pid` alive?  Without a system call once it holds its life
 * mutex -- a sandbox may refuse every call process_alive makes (Firefox's
 * content processes logged a violation for kill()); before that, in the
 * reporter's first moment (its Python's start-up, a few tens of ms), as
 * /proc says. */
static int reporter_process_alive(int pid)
{
    if (__atomic_load_n(&mlk_seg->reporter_life_pid, __ATOMIC_ACQUIRE) == pid) {
        /* (glibc's mutex: its lock word first, the owner's thread id in
         * its low 30 bits, FUTEX_TID_MASK) */
        uint32_t word = __atomic_load_n((uint32_t *)(void *)mlk_seg->reporter_life, __ATOMIC_ACQUIRE);
        return (word & 0x3fffffffu) == (uint32_t)__atomic_load_n(&mlk_seg->reporter_life_tid, __ATOMIC_RELAXED);
    }
    return process_alive(pid);
}

/* 1 when a reporter is running or being started, 0 when there is none. */
int mlk_reporter_alive(void)
{
    int pid = __atomic_load_n(&mlk_seg->reporter_pid, __ATOMIC_ACQUIRE);
    if (pid > 0)
        return reporter_process_alive(pid);
    return pid == 0 && __atomic_load_n(&spawning, __ATOMIC_ACQUIRE) > 0;
}

static const char *errno_words(int e)
{
    switch (e) {
    case EACCES: return "permission denied";
    case ENOENT: return "no such file";
    case ENOTDIR: return "a part of the path is not a directory";
    case EPERM: return "not permitted";
    case ENOEXEC: return "not an executable";
    case ELOOP: return "too many symbolic links";
    case ENOMEM: return "out of memory";
    case EAGAIN: return "out of processes (RLIMIT_NPROC)";
    default: return "failed";
    }
}

/* Once: the reporter could not be started, why, as which user, and what
 * to do (async-signal-safe: raw calls and the stack). */
void mlk_say_reporter_failed(void)
{
    if (__atomic_exchange_n(&warned_spawn, 1, __ATOMIC_RELAXED))
        return;
    uint32_t err = __atomic_load_n(&mlk_seg->spawn_error, __ATOMIC_RELAXED);
    int step = (int)(err >> 16), e = (int)(err & 0xffff);
    char uid[24];
    mlk_fmt_u64(uid, (uint64_t)raw(SYS_geteuid, 0, 0, 0));
    const char *parts[] = {"cannot start the reporter as uid ", uid, ": ",
                           step == MLK_SPAWN_READ ? main_script : python_path, ": ",
                           step ? errno_words(e) : "it did not start",
                           step == MLK_SPAWN_READ   ? " (read)"
                           : step == MLK_SPAWN_EXEC ? " (exec)"
                           : step == MLK_SPAWN_CLONE ? " (clone: a seccomp filter or a sandbox may forbid the "
                                                       "program new processes)"
                                                     : "",
                           "; the program runs on, but no report is written. Install libmemleak where "
                           "this user can run it (a system-wide or shared `pip install`), or set "
                           "MEMLEAK_PYTHON to a Python that has it"};
    mlk_warn_parts(parts, sizeof parts / sizeof parts[0]);
}

void mlk_ensure_reporter(void)
{
    if (mlk_reporter_alive())
        return;
    if (__atomic_load_n(&mlk_seg->reporter_pid, __ATOMIC_ACQUIRE) < 0)
        mlk_say_reporter_failed();
    mlk_spawn_reporter();
}

/* A forked child has started no reporter of its own yet. */
void mlk_spawn_fork_child(void)
{
    spawning = 0;
    /* A child confines itself anew if it is to be (a zygote's renderer):
     * no_new_privs alone refuses nothing, and the prctl is seen again. */
    confined = 0;
}
