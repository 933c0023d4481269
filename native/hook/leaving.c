/* A process leaving: its exit report (at exit(), at the root's _exit()),
 * its death report as it dies of a signal it does not handle, and the
 * root's exec, before which the last reports of its dead descendants are
 * written -- each asked of the reporter and waited for at most
 * exit_timeout, so that `libmemleak run` returns with them on disk.  What
 * the final report needs of the process as it goes (its memory, the
 * leaving thread) is noted first. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>

#include "control.h"

/* The value in kB of a "Key:   1234 kB" line of /proc/self/status. */
static uint32_t status_kb(const char *status, const char *key)
{
    const char *line = strstr(status, key);
    if (!line)
        return 0;
    uint64_t v = 0;
    for (const char *c = line + strlen(key); *c && *c != '\n'; c++)
        if (*c >= '0' && *c <= '9')
            v = v * 10 + (uint64_t)(*c - '0');
    return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

/* For the exit report, which for a descendant is written after it is gone. */
static void record_exit_memory(void);

/* What the final report needs to know of a process as it leaves: its
 * memory, and the thread leaving (whose stack an exit scan does not read:
 * shm_layout.h, exiting_tid). */
static void note_leaving(void)
{
    record_exit_memory();
    __atomic_store_n(&mlk_seg->exiting_tid, (uint32_t)mlk_syscall6(SYS_gettid, 0, 0, 0, 0, 0, 0), __ATOMIC_RELEASE);
}

static void record_exit_memory(void)
{
    char buf[4096];
    int fd = (int)raw(SYS_open, (long)"/proc/thread-self/status", O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) /* no thread-self before Linux 3.17 */
        fd = (int)raw(SYS_open, (long)"/proc/self/status", O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return;
    long n = raw(SYS_read, fd, (long)buf, sizeof buf - 1);
    raw(SYS_close, fd, 0, 0);
    if (n <= 0)
        return;
    buf[n] = 0;
    mlk_seg->exit_rss_kb = status_kb(buf, "\nVmRSS:");
    mlk_seg->exit_hwm_kb = status_kb(buf, "\nVmHWM:");
}

/* The exit report, asked for as the process leaves -- once: an _exit()
 * after our destructor (by a library finalised after us) asks no second
 * one of a reporter that has ended.  (By pid: a child forked meanwhile asks
 * its own.) */
static int exit_asked_by;

static void exit_report(void)
{
    int pid = mlk_getpid();
    if (!mlk_seg || mlk_is_inert() || !mlk_collecting_or_paused() || mlk_seg->pid != pid ||
        __atomic_exchange_n(&exit_asked_by, pid, __ATOMIC_RELAXED) == pid)
        return;
    int was = mlk_guard_up();
    note_leaving();
    /* A descendant the keeper holds leaves its exit report to the keeper
     * (no Python process per exiting child), if the keeper is still there
     * to see it die and no reporter of its own is running anyway. */
    /* With scan=exit the process waits for its exit report, whoever
     * writes it: the scan needs it alive (its threads stopped, its memory
     * read), not gone. */
    int scan = __atomic_load_n(&mlk_seg->scan_at_exit, __ATOMIC_RELAXED) != 0;
    if (!mlk_is_root() && mlk_keeper_holds_us() && !mlk_reporter_alive() && mlk_keeper_reachable() && !scan)
        mlk_post_request(&mlk_seg->exit_requests);
    else
        mlk_request_report(&mlk_seg->exit_requests, mlk_is_root() || scan);
    mlk_in_hook = was;
}

/* The root dying of a signal it does not handle (signals.c's handler, so
 * async-signal-safe: raw system calls, futexes, no allocation, no spawn):
 * its final report asked for, as a death by `sig`, and waited for -- at
 * most exit_timeout, and not at all when no reporter runs -- so that the
 * report is on disk before the signal ends the process and `libmemleak
 * run` returns.  The exit report's once-only guard holds for it too. */
void mlk_report_dying(int sig)
{
    int pid = mlk_getpid();
    struct mlk_header *h = mlk_seg;
    if (!h || mlk_is_inert() || !mlk_is_root() || !mlk_collecting_or_paused() || h->pid != pid ||
        !mlk_reporter_alive() || __atomic_exchange_n(&exit_asked_by, pid, __ATOMIC_RELAXED) == pid)
        return;
    int was = mlk_guard_up();
    note_leaving();
    __atomic_store_n(&h->dying_signal, (uint32_t)sig, __ATOMIC_RELEASE);
    mlk_wait_for_answer(&h->done_seq, mlk_post_request(&h->exit_requests), mlk_config.exit_timeout_ms);
    mlk_in_hook = was;
}

/* Runs at exit() and return from main, after the program's own atexit
 * handlers and static destructors (our library was initialised before
 * the program, so it is finalised after it). */
__attribute__((destructor)) static void mlk_destructor(void) { exit_report(); }

/* The root leaving by _exit() (dash does; so do programs that skip their
 * exit handlers on purpose) runs no destructor.  Its report would then be a
 * death report written after it is gone -- after `libmemleak run` has
 * returned, and the last reports of its dead descendants with it.  So the
 * root asks for its exit report here, as exit() would.  A descendant's
 * _exit() leaves it to the keeper's death report, as before: a forked child
 * that _exits at once (a failed exec, say) must not start a reporter. */
void mlk_exit_without_handlers(void)
{
    if (mlk_is_root())
        exit_report();
}

/* The root about to exec: the last reports of the descendants dead by now
 * are written before the new image -- whose keeper is a new one -- runs
 * (shm_layout.h, keeper_wards).  Only where the keeper has taken
 * descendants since the last time: a wrapper that execs at once waits for
 * nothing (its reporter may not even be up), and a shell's exec, which
 * tries each directory of PATH in turn, waits once.  At most half of
 * exit_timeout, as at exit. */
static uint32_t wards_settled; /* keeper_wards as of the last settle */

void mlk_settle_before_exec(void)
{
    struct mlk_header *h = mlk_seg;
    if (!mlk_is_root() || !h || mlk_is_inert() || h->pid != mlk_getpid())
        return;
    uint32_t wards = __atomic_load_n(&h->keeper_wards, __ATOMIC_ACQUIRE);
    if (wards == wards_settled || !mlk_reporter_alive())
        return;
    wards_settled = wards;
    int was = mlk_guard_up();
    uint32_t mine = __atomic_add_fetch(&h->settle_asked, 1, __ATOMIC_RELEASE);
    mlk_futex_wake(&h->request_seq); /* (where the reporter waits) */
    mlk_wait_for_answer(&h->settle_done, mine, mlk_config.exit_timeout_ms / 2);
    mlk_in_hook = was;
}
