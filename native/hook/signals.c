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

#define NEXT(var, name) (var ? var : (*(void **)&var = dlsym(MLK_NEXT_HANDLE, name), var))

void mlk_signals_init(void)
{
    NEXT(next_sigaction, "sigaction");
    NEXT(next_signal, "signal");
    NEXT(next_sysv_signal, "sysv_signal");
    NEXT(next_bsd_signal, "bsd_signal");
    NEXT(next_sigset, "sigset");
}

EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (!NEXT(next_sigaction, "sigaction")) {
        errno = ENOSYS;
        return -1;
    }
    if (act)
        program_takes(sig, act->sa_handler);
    return next_sigaction(sig, act, old);
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
        return next_##name(sig, handler);                                                          \
    }

SIGNAL_HOOK(signal)
SIGNAL_HOOK(sysv_signal)
SIGNAL_HOOK(bsd_signal)
SIGNAL_HOOK(sigset)
