/* Configuration, triggers, fork handling and starting the reporter (a
 * process leaving -- its exit and death reports -- is leaving.c).
 *
 * The reporter is a Python process that reads the segment and writes the
 * reports.  How it is started, and why that is safe for the program:
 *
 *  - It is started without the program's help, from our constructor (or at
 *    the first mtrace(), or lazily in a forked child), by two raw clone()
 *    calls: the first child is created with no exit signal, so the program
 *    never gets a SIGCHLD for it, and an ordinary wait()/waitpid(-1) never
 *    sees it (only __WCLONE/__WALL waits do, and we reap it ourselves at
 *    once).  That child forks the reporter and exits, so the reporter is
 *    re-parented away from the program: it cannot be reaped, signalled as a
 *    child, or counted by the program.
 *  - Between clone and exec only raw system calls run (no malloc, no locks,
 *    no atfork handlers), so this is safe in a multi-threaded program and in
 *    a signal handler.
 *  - The reporter gets its own session (setsid), so a Ctrl-C or a signal to
 *    the program's process group does not kill it before the final report.
 *    Its stdin and stdout are /dev/null; it keeps stderr for its one-line
 *    errors; every other descriptor of the program is closed in it, so it
 *    holds no pipe or socket of the program open.
 *  - It runs without LD_PRELOAD (so it is not traced) and with
 *    MEMLEAK_REPORTER=1 (so that even a system-wide preload stays inert).
 *  - It needs only two descriptors: the segment (fd 3) and a pidfd of the
 *    program (fd 4) to notice its death.  Everything else it reads from the
 *    segment, so a reporter that dies can be replaced by a new one without
 *    losing anything: the baseline of the next report lives in the segment.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "control.h"
#include "resources/resources.h"
#include "route/route.h"
#include "trailers.h"

volatile int mlk_collecting;
volatile int mlk_ever_collected;

static int init_state;  /* 0 = not yet, 1 = running, 2 = done */
/* The root is the process the user started (its pid is MEMLEAK_ROOT_PID,
 * set by the first traced process for its descendants, or by `libmemleak
 * run`).  It starts its reporter at once and waits at exit for its report.
 * Descendants (forked or exec'd) start a reporter only when one is needed
 * and never wait at exit: their data is safe in the segment the reporter
 * inherits, so builds and shell scripts do not crawl under the tracer. */
static int is_root;
static int inert;       /* we are the reporter, or something made tracing impossible */
static int keeper_holds_us;     /* this process's segment is with the keeper */
static int warned_timeout;

/* ---- report requests ---------------------------------------------------- */

uint32_t mlk_post_request(uint32_t *reason_counter)
{
    struct mlk_header *h = mlk_seg;
    __atomic_add_fetch(reason_counter, 1, __ATOMIC_RELEASE);
    uint32_t mine = __atomic_add_fetch(&h->request_seq, 1, __ATOMIC_ACQ_REL);
    mlk_futex_wake(&h->request_seq);
    return mine;
}

/* Has the report of request `mine` been written?  (The reporter sets
 * done_seq before it clears reporter_pid or exits.) */
static int report_done(uint32_t mine)
{
    return (int32_t)(__atomic_load_n(&mlk_seg->done_seq, __ATOMIC_ACQUIRE) - mine) >= 0;
}

/* Waits until the reporter's counter *answered reaches `mine`, for at most
 * `ms` milliseconds, and not once no reporter runs (async-signal-safe: a
 * futex and the clock). */
void mlk_wait_for_answer(uint32_t *answered, uint32_t mine, uint64_t ms)
{
    uint64_t deadline = mlk_now_ns(CLOCK_MONOTONIC) + ms * 1000000ull;
    for (;;) {
        uint32_t now = __atomic_load_n(answered, __ATOMIC_ACQUIRE);
        if ((int32_t)(now - mine) >= 0 || mlk_now_ns(CLOCK_MONOTONIC) > deadline || !mlk_reporter_alive())
            return;
        mlk_futex_wait(answered, now, 100);
    }
}

int mlk_request_report(uint32_t *reason_counter, int wait)
{
    struct mlk_header *h = mlk_seg;
    if (!h || inert)
        return 0;
    uint32_t mine = mlk_post_request(reason_counter);
    /* A descendant the keeper holds has the keeper write the report, unless
     * a reporter of its own happens to run; if the keeper is gone, it
     * starts its own, as the root does. */
    /* No reporter now may also mean one that answered this very request and
     * left (it sets done_seq before it clears reporter_pid): a thread held
     * off the CPU between posting and looking -- a loaded machine, the exit
     * request -- then started a second reporter, which found the program
     * gone and wrote a stray PROG-PID-2.events (#64 item 7).  Looked at in
     * that order: not alive, then not done. */
    int by_keeper = 0, none = !mlk_reporter_alive() && !report_done(mine);
    if (keeper_holds_us && none) {
        by_keeper = mlk_keeper_request();
        keeper_holds_us = by_keeper;
    }
    if (!by_keeper && none)
        mlk_ensure_reporter();
    if (!wait)
        return 0;
    uint64_t deadline = mlk_now_ns(CLOCK_MONOTONIC) + (uint64_t)mlk_config.exit_timeout_ms * 1000000ull;
    int respawned = 0;
    for (;;) {
        uint32_t done = __atomic_load_n(&h->done_seq, __ATOMIC_ACQUIRE);
        if (report_done(mine))
            return 1;
        if (mlk_now_ns(CLOCK_MONOTONIC) > deadline)
            break;
        if (__atomic_load_n(&h->reporter_pid, __ATOMIC_ACQUIRE) < 0) {
            mlk_say_reporter_failed(); /* no reporter can be started (once) */
            return 0;
        }
        /* A reporter that finished our report may have left since `done`
         * was read: the report is there.  Look again before starting another
         * (it would find the program gone and write a second final report). */
        if (by_keeper) {
            if (!mlk_keeper_reachable() && !report_done(mine)) { /* the keeper died with our request */
                by_keeper = keeper_holds_us = 0;
                mlk_spawn_reporter();
            }
        } else if (!mlk_reporter_alive() && !report_done(mine)) {
            if (respawned++ >= 2)
                break;
            mlk_spawn_reporter();
        }
        mlk_futex_wait(&h->done_seq, done, 100);
    }
    if (!__atomic_exchange_n(&warned_timeout, 1, __ATOMIC_RELAXED))
        mlk_warn("the reporter did not finish a report in time; the program goes on ",
                 "(it will still write it if it can)", "");
    return 0;
}

/* What leaving.c asks of this process's state. */
int mlk_is_root(void) { return is_root; }
int mlk_is_inert(void) { return inert; }
int mlk_keeper_holds_us(void) { return keeper_holds_us; }

/* ---- triggers ----------------------------------------------------------- */

/* A report signal while nothing is collected writes no report; say why,
 * once, or the signal looks swallowed.  write() only: async-signal-safe. */
static int warned_not_collecting;

static void say_not_collecting(void)
{
    if (__atomic_exchange_n(&warned_not_collecting, 1, __ATOMIC_RELAXED))
        return;
    if (mlk_ever_collected)
        mlk_warn("report signal: no report written: collection was stopped by muntrace() ",
                 "(the program's mtrace() starts it again)", "");
    else
        mlk_warn("report signal: no report written: nothing is being collected yet. ",
                 "MEMLEAK_CONFIG is set without mtraceinit, so collection waits for the program's "
                 "first mtrace() call; ",
                 "add mtraceinit to MEMLEAK_CONFIG, or use 'libmemleak run' without --wait-for-mtrace");
}

static void on_report_signal(int sig);

int mlk_report_signal(void) { return mlk_config.signal; }
void (*const mlk_report_handler)(int) = on_report_signal;

static void on_report_signal(int sig)
{
    (void)sig;
    int saved = errno;
    if (mlk_collecting_or_paused() && mlk_seg && mlk_seg->pid == mlk_getpid())
        mlk_request_report(&mlk_seg->signal_requests, 0);
    else if (!mlk_collecting && !inert)
        say_not_collecting();
    errno = saved;
}

/* A descendant that turns out to do real work -- it has made
 * LAZY_SPAWN_STACKS call stacks of its own -- gets its reporter then, so
 * that a SIGKILL later cannot take its data with it.  Shell helpers and
 * children that exec at once never get that far. */
#define LAZY_SPAWN_STACKS 128
uint64_t mlk_lazy_spawn_at;

static void arm_lazy_spawn(void)
{
    if (!mlk_seg)
        return;
    mlk_fast_off_set(MLK_FAST_LAZY_SPAWN, 1); /* (first: the bit never lags its reason) */
    __atomic_store_n(&mlk_lazy_spawn_at, mlk_seg->stacks_used + LAZY_SPAWN_STACKS, __ATOMIC_RELAXED);
}

/* The process is about to confine itself (hooks_process.c, prctl): a
 * seccomp filter will refuse the calls a reporter's start makes (a
 * browser's content process: pidfd_open, prctl, clone -- Firefox logs each
 * as a violation, its debug builds crash), so a process that has none
 * starts it now -- a descendant's starts lazily, by then inside -- and
 * waits until it holds its life mutex (before, its liveness is asked of
 * /proc, which the sandbox refuses too).  None is started from here on. */
/* The lazy start taken off; 0 if another thread took it first. */
static int disarm_lazy_spawn(void)
{
    if (!__atomic_exchange_n(&mlk_lazy_spawn_at, 0, __ATOMIC_RELAXED))
        return 0;
    mlk_fast_off_set(MLK_FAST_LAZY_SPAWN, 0);
    return 1;
}

void mlk_before_sandbox(void)
{
    if (!mlk_seg || inert || mlk_seg->pid != mlk_getpid() || mlk_spawn_confined())
        return;
    if (mlk_collecting_or_paused() && !mlk_reporter_alive()) {
        disarm_lazy_spawn();
        mlk_spawn_reporter();
    }
    mlk_wait_reporter_life(5000);
    mlk_spawn_confine();
}

void mlk_lazy_spawn(void)
{
    if (!disarm_lazy_spawn())
        return; /* another thread got here first */
    if (mlk_seg && mlk_seg->pid == mlk_getpid() && !mlk_reporter_alive())
        mlk_spawn_reporter();
}

/* Say at once, not at the first report, when the report directory cannot
 * take reports (the user is still watching the start).  Only the root:
 * its descendants share the directory. */
static void check_report_dir(void)
{
    struct stat st;
    const char *why = NULL;
    if (stat(mlk_config.dir, &st) != 0)
        why = strerror(errno);
    else if (!S_ISDIR(st.st_mode))
        why = "not a directory";
    else if (access(mlk_config.dir, W_OK | X_OK) != 0)
        why = strerror(errno);
    if (!why)
        return;
    char line[4096 + 256];
    snprintf(line, sizeof line, "report directory %s: %s; a report asked for while it cannot be "
             "written keeps its data for the next one, and the final report goes to "
             "/tmp/libmemleak-%u instead", mlk_config.dir, why, (unsigned)geteuid());
    mlk_warn(line, "", "");
}

int mlk_start_collecting(void)
{
    if (inert)
        return -1;
    if (!mlk_seg) {
        if (mlk_segment_create(mlk_config.depth, mlk_config.dir, mlk_config.listen,
                               mlk_config.alloc_fns) != 0) {
            mlk_warn("cannot create the shared memory segment (memfd, RLIMIT_FSIZE below its "
                     "sparse size, or no address space left under ulimit -v)",
                     "; this process is not traced", "");
            inert = 1;
            return -1;
        }
        mlk_note_allocator();
        mlk_resources_segment_made(mlk_config.fds);
        mlk_seg->misuse_mode = (uint32_t)mlk_config.misuse;
        mlk_misuse_segment_made();
        mlk_lsan_read_default_suppressions();
        mlk_modules_scan();
        mlk_unwind_init();
        mlk_stacks_init();
        mlk_py_find_interpreter();
        /* The reporter also answers this signal when the program blocks it
         * in every thread (the handler then never runs). */
        mlk_seg->report_signal = mlk_signal_is_programs() ? 0 : (uint32_t)mlk_config.signal;
        if (!is_root)
            keeper_holds_us = mlk_keeper_register();
        else
            check_report_dir();
    }
    /* Sampling records few blocks: the side table costs little there, and
     * the unrecorded ones then keep their exact size. */
    if (!mlk_sample_bytes && !mlk_config.track_in_table && mlk_trailers_possible())
        mlk_trailers_enable();
    mlk_early_trailers = 0; /* from now on blocks are recorded, or not at all */
    mlk_seg->tracking = mlk_trailers_in_use() ? MLK_TRACK_TRAILERS : MLK_TRACK_TABLE;
    mlk_seg->trailer_key = mlk_trailers_in_use() ? mlk_trailer_key : 0;
    /* The quarantine finds double frees by the trailers' freed mark, and
     * the misuse checks must be on to hold a held block's second free. */
    int hold = mlk_config.misuse == MLK_MISUSE_HOLD, given = mlk_config.quarantine != MLK_QUARANTINE_UNSET;
    uint64_t quarantine = given ? mlk_config.quarantine : hold ? MLK_HOLD_QUARANTINE : 0;
    if (mlk_trailers_in_use() && mlk_config.misuse != MLK_MISUSE_OFF) {
        mlk_quarantine_start(quarantine);
        if (hold)
            mlk_misuse_guard_reads();
    } else if (given && quarantine) {
        mlk_seg->quarantine_refused = quarantine;
        mlk_warn("quarantine= is ignored: it needs blocks with trailers and misuse checks ",
                 "(not with sample=, track=table or misuse=no)", "");
    }
    /* glibc's smallest chunk: 32 bytes, 24 of them usable (trailers.c). */
    mlk_slack_floor = mlk_glibc_heap ? 24 : 0;
    mlk_seg->slack_floor = mlk_slack_floor;
    mlk_own_range(&mlk_seg->own_lo, &mlk_seg->own_hi);
    mlk_seg->addr_table = mlk_addr_table();
    mlk_seg->custom_table = mlk_custom_table();
    mlk_seg->lsan_table = mlk_lsan_table();
    mlk_seg->region_table = mlk_region_table();
    mlk_seg->scan_at_exit = (uint32_t)mlk_config.scan_at_exit;
    mlk_seg->exit_timeout_s = (uint32_t)(mlk_config.exit_timeout_ms / 1000);
    mlk_seg->scan_heuristics = mlk_config.scan_heuristics;
    mlk_seg->collecting_addr = (uint64_t)(uintptr_t)&mlk_collecting;
    mlk_seg->attention_addr = (uint64_t)(uintptr_t)&mlk_attention;
    mlk_alloc_stats_resolve();
    __atomic_store_n(&mlk_seg->paused, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&mlk_seg->collecting, 1, __ATOMIC_RELEASE);
    mlk_ever_collected = 1;
    mlk_fast_off_set(MLK_FAST_NOT_COLLECTED, 0);
    mlk_events_start(); /* before the first block is counted: the log holds them all */
    mlk_collecting = 1;
    if (is_root && !mlk_reporter_alive())
        mlk_spawn_reporter();
    else if (!is_root && !keeper_holds_us)
        arm_lazy_spawn();
    return 0;
}

void mlk_stop_collecting(void)
{
    mlk_collecting = 0;
    if (mlk_seg) {
        __atomic_store_n(&mlk_seg->paused, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&mlk_seg->collecting, 0, __ATOMIC_RELEASE);
    }
}

int mlk_collecting_or_paused(void)
{
    return mlk_collecting || (mlk_seg && __atomic_load_n(&mlk_seg->paused, __ATOMIC_ACQUIRE));
}

void mlk_segment_fd_threatened(int lo, int hi)
{
    if (!mlk_seg || mlk_seg->pid != mlk_getpid())
        return;
    /* If it cannot be moved, everything is being closed: a reporter started
     * now keeps the segment. */
    if (mlk_segment_move_fd(lo, hi) != 0 && !mlk_reporter_alive())
        mlk_spawn_reporter();
}

void mlk_after_dl_change(void)
{
    if (mlk_seg) {
        mlk_modules_scan();
        mlk_alloc_stats_resolve();
        mlk_py_find_interpreter();
    }
}

/* ---- fork --------------------------------------------------------------- */

static void fork_prepare(void)
{
    mlk_in_hook++;
    mlk_modules_lock_for_fork(1);
    mlk_unwind_lock_for_fork(1);
    mlk_stacks_lock_for_fork(1);
    mlk_addrs_lock_for_fork(1);
    mlk_custom_lock_for_fork(1);
    mlk_resources_lock_for_fork(1);
    mlk_lsan_lock_for_fork(1);
    mlk_trailers_lock_for_fork(1);
    mlk_misuse_lock_for_fork(1);
    if (mlk_ever_collected)
        mlk_segment_fork_prepare();
}

static void fork_parent(void)
{
    mlk_segment_fork_parent();
    mlk_misuse_lock_for_fork(0);
    mlk_trailers_lock_for_fork(0);
    mlk_lsan_lock_for_fork(0);
    mlk_resources_lock_for_fork(0);
    mlk_custom_lock_for_fork(0);
    mlk_addrs_lock_for_fork(0);
    mlk_stacks_lock_for_fork(0);
    mlk_unwind_lock_for_fork(0);
    mlk_modules_lock_for_fork(0);
    mlk_in_hook--;
}

static void fork_child(void)
{
    if (mlk_ever_collected && mlk_segment_fork_child() == 0)
        mlk_regions_fork_child(); /* the parent's shared mappings: counted there */
    else if (mlk_ever_collected) {
        /* Without a segment of its own the child must not touch the
         * parent's: stop recording in it. */
        mlk_collecting = 0;
        mlk_ever_collected = 0;
        mlk_fast_off_set(MLK_FAST_NOT_COLLECTED, 1);
        inert = 1;
        mlk_seg = NULL;
        mlk_stacks_base = NULL;
        mlk_warn("fork: cannot copy the segment; the child is not traced", "", "");
    }
    mlk_events_fork_child();
    mlk_spawn_fork_child();
    is_root = 0;
    mlk_keeper_fork_child();
    keeper_holds_us = mlk_seg ? mlk_keeper_register() : 0;
    mlk_lazy_spawn_at = 0;
    mlk_fast_off_set(MLK_FAST_LAZY_SPAWN, 0);
    if (mlk_collecting && !keeper_holds_us)
        arm_lazy_spawn();
    mlk_misuse_lock_for_fork(0);
    mlk_trailers_fork_child();
    mlk_stacks_fork_child();
    mlk_lsan_lock_for_fork(0);
    mlk_resources_lock_for_fork(0);
    mlk_custom_lock_for_fork(0);
    mlk_addrs_lock_for_fork(0);
    mlk_stacks_lock_for_fork(0);
    mlk_unwind_lock_for_fork(0);
    mlk_modules_lock_for_fork(0);
    mlk_in_hook--;
    /* The child's reporter starts at its first report request or its exit
     * (most children exec at once, and a reporter per fork would be waste);
     * if it exits or dies first, the keeper writes its report.  Without a keeper, it starts
     * once the child has made enough stacks of its own (arm_lazy_spawn). */
}

/* ---- start and exit ----------------------------------------------------- */

static void decide_root(void)
{
    char pid[24];
    mlk_fmt_u64(pid, (uint64_t)mlk_getpid());
    const char *root = secure_getenv("MEMLEAK_ROOT_PID");
    if (!root || !*root) {
        is_root = 1;
        setenv("MEMLEAK_ROOT_PID", pid, 1); /* inherited by descendants */
    } else {
        is_root = strcmp(root, pid) == 0;
    }
    if (is_root)
        mlk_keeper_listen();
    else
        mlk_keeper_find();
}

/* What starting takes, whether at load or at an attach: the report
 * signal, fork handling, the reporter's command line. */
static void start_tracing(void)
{
    mlk_spawn_prepare();
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    mlk_signals_init();
    if (mlk_config.signal) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_report_signal;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaction(mlk_config.signal, &sa, NULL);
    }
}

static void parse_config(const char *config)
{
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd))
        strcpy(cwd, "/");
    snprintf(mlk_config.dir, sizeof mlk_config.dir, "%s", cwd);
    mlk_config_parse(config, cwd);
}

void mlk_init(void)
{
    if (__atomic_load_n(&init_state, __ATOMIC_ACQUIRE) == 2)
        return;
    int expected = 0;
    if (!__atomic_compare_exchange_n(&init_state, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return; /* another thread is initialising; it will finish */
    int was = mlk_guard_up();
    mlk_modules_set_self((void *)&mlk_init);
    if (secure_getenv("MEMLEAK_REPORTER")) {
        inert = 1;
    } else {
        parse_config(secure_getenv("MEMLEAK_CONFIG"));
        mlk_route_start(mlk_config.route ? NULL : "is not routed (MEMLEAK_CONFIG route=no)", mlk_blind,
                        sizeof mlk_blind, mlk_routed, sizeof mlk_routed);
        if (mlk_blind[0])
            mlk_warn(mlk_blind, "", "");
        decide_root();
        start_tracing();
        if (is_root)
            mlk_signals_watch_deaths(); /* (not under attach: nobody waits for an attached process's end) */
        if (mlk_config.collect_at_load)
            mlk_start_collecting();
    }
    mlk_in_hook = was;
    __atomic_store_n(&init_state, 2, __ATOMIC_RELEASE);
}

/* mlk_attach (attach.c): the process was started without us and has just
 * loaded us.  It is the root of what is traced from now on (its children
 * forked later are its descendants); its environment is left alone -- no
 * MEMLEAK_ROOT_PID is set in it, as nothing it execs is traced. */
int mlk_init_attached(const char *config, char *why, size_t why_len)
{
    int expected = 0;
    if (!__atomic_compare_exchange_n(&init_state, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        snprintf(why, why_len, "libmemleak was started in this process before (an attach since "
                 "detached, or one that failed); attaching again is not supported");
        return -1;
    }
    mlk_modules_set_self((void *)&mlk_init);
    mlk_resolve_real();
    parse_config(config);
    /* The executable's own allocator is planned, held for the attacher to
     * write with the threads stopped (attach.c, route.c). */
    mlk_route_start(mlk_config.route ? NULL : "is not routed (MEMLEAK_CONFIG route=no)", mlk_blind,
                    sizeof mlk_blind, mlk_routed, sizeof mlk_routed);
    is_root = 1;
    mlk_keeper_listen();
    start_tracing();
    int r = mlk_start_collecting();
    if (r == 0)
        __atomic_store_n(&mlk_seg->attached_ns, mlk_now_ns(CLOCK_REALTIME), __ATOMIC_RELEASE);
    else
        snprintf(why, why_len, "cannot create the shared memory segment in the process "
                 "(memfd, or RLIMIT_FSIZE below its ~1.3 GiB sparse size)");
    __atomic_store_n(&init_state, 2, __ATOMIC_RELEASE);
    return r;
}

/* mlk_detach: nothing is routed to us any more.  The reporter writes the
 * last report and ends; the hooks a function pointer may still reach pass
 * everything through. */
void mlk_detach_report(void)
{
    if (!mlk_seg)
        return;
    mlk_stop_collecting();
    mlk_request_report(&mlk_seg->detach_requests, 1);
    inert = 1; /* no exit or death report after the last one */
}

/* Only as a preload (or linked in): a copy loaded by dlopen -- `libmemleak
 * attach`, or a program that opens it by accident -- waits for mlk_attach. */
__attribute__((constructor)) static void mlk_constructor(void)
{
    if (mlk_loaded_as_preload())
        mlk_init();
}
