/* The program's own handlers for our report signal.
 *
 * The report signal (SIGUSR1 unless signal= says otherwise) is the seed's
 * interface, but many servers own it: memcached shuts down on SIGUSR1,
 * nginx reopens its logs.  A handler the program installs for it wins (we
 * never fight the program for a signal), and from then on `kill -USR1`
 * reaches the program, not us.  So the moment the program takes the
 * signal over, one line on stderr says so and names the way that needs
 * no signal (`libmemleak snapshot PID`).  The hooks only look; the real
 * call is made unchanged. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>

#include "mlk.h"

#define EXPORT __attribute__((visibility("default")))

static int warned;

/* Called with the handler the program is about to install for `sig`. */
static void program_takes(int sig, void (*handler)(int))
{
    if (mlk_in_hook || sig <= 0 || sig != mlk_report_signal() || handler == mlk_report_handler)
        return;
    if (__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        return;
    /* The reporter no longer answers it either (a blocked report signal is
     * answered from outside), and reports stop suggesting `kill -USR1`. */
    if (mlk_seg)
        __atomic_store_n(&mlk_seg->report_signal, 0, __ATOMIC_RELAXED);
    char name[24] = "signal ";
    const char *shown = name;
    if (sig == SIGUSR1)
        shown = "SIGUSR1";
    else if (sig == SIGUSR2)
        shown = "SIGUSR2";
    else
        mlk_fmt_u64(name + 7, (uint64_t)sig);
    char pid[24];
    mlk_fmt_u64(pid, (uint64_t)mlk_getpid());
    const char *parts[] = {"the program installs its own handler for ", shown,
                           ": from now on that signal is the program's and asks for no report; "
                           "ask with: libmemleak snapshot ", pid};
    mlk_warn_parts(parts, sizeof parts / sizeof parts[0]);
}

int mlk_signal_is_programs(void) { return __atomic_load_n(&warned, __ATOMIC_RELAXED); }

/* The real functions, looked up at start (mlk_signals_init) so that a
 * program calling them from a signal handler never waits on dlsym's lock;
 * looked up on first use if a constructor calls them before ours ran. */
static int (*next_sigaction)(int, const struct sigaction *, struct sigaction *);
typedef __sighandler_t (*signal_fn)(int, __sighandler_t);
static signal_fn next_signal, next_sysv_signal, next_bsd_signal, next_sigset;

#define NEXT(var, name) (var ? var : (*(void **)&var = mlk_next_symbol(name), var))

void mlk_signals_init(void)
{
    NEXT(next_sigaction, "sigaction");
    NEXT(next_signal, "signal");
    NEXT(next_sysv_signal, "sysv_signal");
    NEXT(next_bsd_signal, "bsd_signal");
    NEXT(next_sigset, "sigset");
}

/* ---- the root's death by a signal it does not handle ------------------
 *
 * A process killed by SIGTERM, SIGINT, SIGSEGV... ended before its
 * reporter wrote its final report: `libmemleak run` returned, and the
 * report landed ~0.8 s later (#64 item 13).  So in the root, each signal
 * whose default ends the process and that the program leaves at its
 * default gets our handler, which asks for the final report (as a death
 * by that signal: control.c's mlk_report_dying), waits for it, puts the
 * default back and sends the signal again -- the process dies of it as it
 * would have, with its status and core.  The program never sees the
 * handler: a disposition it asks for reads as the default, and one it
 * sets replaces ours.  SIGKILL cannot be caught: its report is still
 * written after the death (docs/cli.md). */
static const int death_signals[] = {SIGHUP,  SIGINT,  SIGQUIT, SIGILL,  SIGTRAP,   SIGABRT, SIGBUS,
                                    SIGFPE,  SIGUSR2, SIGSEGV, SIGPIPE, SIGALRM,   SIGTERM, SIGXCPU,
                                    SIGXFSZ, SIGVTALRM, SIGPROF, SIGSYS};
static volatile sig_atomic_t ours[65]; /* the signal has our death handler */

static void death_handler(int sig, siginfo_t *info, void *context)
{
    (void)info, (void)context;
    int saved = errno;
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    next_sigaction(sig, &dfl, NULL);
    ours[sig] = 0;
    /* A second one while the report is written (Ctrl-C again) ends the
     * process at once, as the first would have without us. */
    uint64_t mine = 1ull << (sig - 1);
    mlk_syscall6(SYS_rt_sigprocmask, SIG_UNBLOCK, (long)&mine, 0, 8, 0, 0);
    mlk_report_dying(sig);
    errno = saved;
    /* Again, to this thread: at its default now, it ends the process here
     * (a fault's instruction is not run again). */
    mlk_syscall6(SYS_tgkill, mlk_getpid(), mlk_syscall6(SYS_gettid, 0, 0, 0, 0, 0, 0), sig, 0, 0, 0);
}

void mlk_signals_watch_deaths(void)
{
    if (!NEXT(next_sigaction, "sigaction"))
        return;
    for (size_t i = 0; i < sizeof death_signals / sizeof death_signals[0]; i++) {
        int sig = death_signals[i];
        struct sigaction old, sa;
        if (sig == mlk_report_signal() || next_sigaction(sig, NULL, &old) != 0 ||
            (old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL)
            continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = death_handler;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK; /* (SA_ONSTACK: the program's alternate stack, if it has one) */
        sigemptyset(&sa.sa_mask); /* (another signal meanwhile: its own disposition, as without us) */
        ours[sig] = 1;
        if (next_sigaction(sig, &sa, NULL) != 0)
            ours[sig] = 0;
    }
}

/* What the program reads of a disposition: the default where ours stands. */
static void as_default(int sig, struct sigaction *old)
{
    if (old && sig > 0 && sig < 65 && (old->sa_flags & SA_SIGINFO) && old->sa_sigaction == death_handler) {
        memset(old, 0, sizeof *old);
        old->sa_handler = SIG_DFL;
    }
}

EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (!NEXT(next_sigaction, "sigaction")) {
        errno = ENOSYS;
        return -1;
    }
    if (act)
        program_takes(sig, act->sa_handler);
    int r = next_sigaction(sig, act, old);
    if (r == 0) {
        as_default(sig, old);
        if (act && sig > 0 && sig < 65)
            ours[sig] = 0; /* the program's now */
    }
    return r;
}

/* glibc's signal() and its variants call sigaction inside libc, past the
 * hook above: each is hooked itself. */
#define SIGNAL_HOOK(name)                                                                          \
    EXPORT __sighandler_t name(int sig, __sighandler_t handler)                                    \
    {                                                                                              \
        if (!NEXT(next_##name, #name)) {                                                           \
            errno = ENOSYS;                                                                        \
            return SIG_ERR;                                                                        \
        }                                                                                          \
        program_takes(sig, handler);                                                               \
        __sighandler_t was = next_##name(sig, handler);                                            \
        if (sig > 0 && sig < 65 && was != SIG_ERR && ours[sig]) {                                  \
            ours[sig] = 0; /* the program's now; ours read as the default */                       \
            if ((void *)was == (void *)death_handler)                                              \
                was = SIG_DFL;                                                                     \
        }                                                                                          \
        return was;                                                                                \
    }

SIGNAL_HOOK(signal)
SIGNAL_HOOK(sysv_signal)
SIGNAL_HOOK(bsd_signal)
SIGNAL_HOOK(sigset)
