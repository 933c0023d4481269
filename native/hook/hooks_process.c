/* The hooks that are not about memory: glibc's <mcheck.h> API and exec
 * (the image is replaced); hooks.h has what the hooks share. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "control.h"
#include "hooks.h"
#include "resources/resources.h"

/* ---- glibc's <mcheck.h> API: the program controls reporting ------------- */

/* The program's first mtrace() means "start": it starts collection, or does
 * nothing when collection already runs (MEMLEAK_CONFIG unset or mtraceinit),
 * so the program gets the same reports either way.  Later calls report, or
 * restart collection after a muntrace(). */
EXPORT void mtrace(void)
{
    static int calls;
    BEGIN_HOOK();
    mlk_init();
    int first = __atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED) == 0;
    if (!mlk_collecting)
        mlk_start_collecting();
    else if (!first && mlk_seg)
        mlk_request_report(&mlk_seg->mtrace_requests, 1);
    END_HOOK();
}

EXPORT void muntrace(void)
{
    BEGIN_HOOK();
    if (mlk_collecting_or_paused() && mlk_seg) {
        mlk_stop_collecting();
        mlk_request_report(&mlk_seg->muntrace_requests, 1);
    }
    END_HOOK();
}

/* ---- exec: the image is about to be replaced ------------------------------
 * The old image's reporter must not take the new image's exit for its own
 * death, so each exec entry point marks the segment first (and clears the
 * mark if the call fails).  glibc's exec variants call execve internally,
 * not through the PLT, so each exported one is hooked. */

static void exec_mark(int pending)
{
    if (mlk_seg && mlk_seg->pid == mlk_getpid())
        __atomic_store_n(&mlk_seg->exec_pending, (uint32_t)pending, __ATOMIC_RELEASE);
}


#define EXEC_HOOK(name, params, args)                                                              \
    EXPORT int name params                                                                         \
    {                                                                                              \
        static int (*next) params;                                                                 \
        if (!LAZY_NEXT(next, #name)) {                                                             \
            errno = ENOSYS;                                                                        \
            return -1;                                                                             \
        }                                                                                          \
        mlk_settle_before_exec();                                                                  \
        exec_mark(1);                                                                              \
        mlk_fds_exec_begins();                                                                     \
        int r = next args;                                                                         \
        int saved = errno;                                                                         \
        mlk_fds_exec_returned();                                                                   \
        exec_mark(0);                                                                              \
        errno = saved;                                                                             \
        return r;                                                                                  \
    }

EXEC_HOOK(execve, (const char *path, char *const argv[], char *const envp[]), (path, argv, envp))
EXEC_HOOK(execv, (const char *path, char *const argv[]), (path, argv))
EXEC_HOOK(execvp, (const char *file, char *const argv[]), (file, argv))
EXEC_HOOK(execvpe, (const char *file, char *const argv[], char *const envp[]), (file, argv, envp))
EXEC_HOOK(fexecve, (int fd, char *const argv[], char *const envp[]), (fd, argv, envp))
EXEC_HOOK(execveat, (int dirfd, const char *path, char *const argv[], char *const envp[], int flags),
          (dirfd, path, argv, envp, flags))

/* The list forms: collect the arguments, then go through the vector forms. */
#define MAX_EXEC_ARGS 4096
static int collect_args(const char *arg0, va_list ap, char **argv, char ***envp_out)
{
    int n = 0;
    argv[n++] = (char *)arg0;
    while (argv[n - 1] && n < MAX_EXEC_ARGS)
        argv[n++] = va_arg(ap, char *);
    if (argv[n - 1]) {
        errno = E2BIG;
        return -1;
    }
    if (envp_out)
        *envp_out = va_arg(ap, char **);
    return 0;
}

/* execl and execlp: the arguments collected, then the vector form. */
#define LIST_EXEC_HOOK(name, first, vector)                                                        \
    EXPORT int name(const char *first, const char *arg, ...)                                       \
    {                                                                                              \
        char *argv[MAX_EXEC_ARGS];                                                                 \
        va_list ap;                                                                                \
        va_start(ap, arg);                                                                         \
        int ok = collect_args(arg, ap, argv, NULL);                                                \
        va_end(ap);                                                                                \
        return ok < 0 ? -1 : vector(first, argv);                                                  \
    }

LIST_EXEC_HOOK(execl, path, execv)
LIST_EXEC_HOOK(execlp, file, execvp)

EXPORT int execle(const char *path, const char *arg, ...)
{
    char *argv[MAX_EXEC_ARGS];
    char **envp;
    va_list ap;
    va_start(ap, arg);
    int ok = collect_args(arg, ap, argv, &envp);
    va_end(ap);
    return ok < 0 ? -1 : execve(path, argv, envp);
}

/* ---- _exit: leaving without exit handlers ----------------------------------
 * The root's exit report is asked for here (control.c); then the process
 * ends as glibc's _exit would.  glibc's own exit() reaches its _exit
 * internally, not through these. */
EXPORT void _exit(int status)
{
    /* Nothing set before the root's check: a vfork child calling this
     * shares its parent's memory, thread variables included. */
    mlk_exit_without_handlers();
    for (;;)
        mlk_syscall6(SYS_exit_group, status, 0, 0, 0, 0, 0);
}

EXPORT void _Exit(int status) { _exit(status); }

/* ---- prctl: a process about to confine itself ------------------------------
 * An unprivileged seccomp filter needs no_new_privs first (PR_SET_NO_NEW_PRIVS,
 * or PR_SET_SECCOMP itself): browsers' sandboxes set it through libc's
 * prctl, then install the filter with syscall(SYS_seccomp, ...).  That is
 * the last moment this process can start its reporter (control.c,
 * mlk_before_sandbox).  glibc's prctl is the system call alone: made here. */
EXPORT int prctl(int option, ...)
{
    va_list ap;
    va_start(ap, option);
    unsigned long a2 = va_arg(ap, unsigned long), a3 = va_arg(ap, unsigned long);
    unsigned long a4 = va_arg(ap, unsigned long), a5 = va_arg(ap, unsigned long);
    va_end(ap);
    if (option == PR_SET_NO_NEW_PRIVS || option == PR_SET_SECCOMP) {
        int saved = errno;
        mlk_before_sandbox();
        errno = saved;
    }
    long r = mlk_syscall6(SYS_prctl, option, (long)a2, (long)a3, (long)a4, (long)a5, 0);
    if (r < 0 && r > -4096) {
        errno = (int)-r;
        return -1;
    }
    return (int)r;
}

/* The descriptor calls (close, dup2, ...) are resources/fds.c's: they keep
 * the books of descriptors and protect the segment's own. */
