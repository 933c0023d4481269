/* What the control modules share (not the hot path's business):
 *   config.c         MEMLEAK_CONFIG
 *   spawn.c          starting the reporter, knowing whether one runs
 *   keeper_client.c  the keeper, from the traced process's side
 *   control.c        report requests, triggers, fork, start and exit
 *   signals.c        the program's own handlers for the report signal */
#ifndef MLK_CONTROL_H
#define MLK_CONTROL_H

#include <stdint.h>
#include <sys/syscall.h>

#include "mlk.h"

struct mlk_config {
    int collect_at_load;
    uint32_t depth;
    int signal;          /* 0 = no report signal */
    int exit_timeout_ms;
    int track_in_table;  /* track=table: no trailers (trailers.c) */
    int scan_at_exit;    /* scan=exit: the exit report carries a reachability scan */
    uint32_t scan_heuristics; /* scan_heuristics=: the header's field (shm_layout.h) */
    char dir[4096];
    char listen[256];    /* listen=HOST:PORT: the reporter serves remote shells there */
    char alloc_fns[256]; /* alloc_fns=REGEX: the program's allocation layer, for the analysis */
    int route;           /* route=no: leave a program's own allocator alone (route/route.h) */
    int fds;             /* fds=no: file descriptors not tracked (resources/fds.c) */
    int misuse;          /* misuse=: MLK_MISUSE_REPORT, _HOLD or _OFF (misuse.c) */
    uint64_t quarantine; /* quarantine=BYTES: freed blocks held back (misuse.c); 0: none */
#define MLK_QUARANTINE_UNSET UINT64_MAX /* not given: misuse=hold holds MLK_HOLD_QUARANTINE, else none */
/* misuse=hold's quarantine unless quarantine= says otherwise: valgrind's
 * freed-blocks queue (--freelist-vol), so that a second free is caught --
 * with the first free's stack -- while the block's memory is not handed
 * out again or merged into its neighbours (when glibc merges it, its
 * header no longer says where its trailer is). */
#define MLK_HOLD_QUARANTINE 20000000u
    int record;          /* record=: MLK_RECORD_* (events/events.c) */
    uint64_t record_cap, record_keep_bytes, record_keep_ns, record_buffer; /* 0: the defaults */
};
MLK_HIDDEN extern struct mlk_config mlk_config;
MLK_HIDDEN void mlk_config_parse(const char *cfg, const char *cwd);
MLK_HIDDEN int mlk_config_collects_early_with_trailers(const char *cfg);

#define KEEPER_FD 5      /* where the reporter finds the keeper's listening socket */
MLK_HIDDEN void mlk_keeper_listen(void);   /* root, at start */
MLK_HIDDEN void mlk_keeper_find(void);     /* descendants, at start */
MLK_HIDDEN int mlk_keeper_register(void);
MLK_HIDDEN int mlk_keeper_request(void);
MLK_HIDDEN int mlk_keeper_reachable(void);
MLK_HIDDEN int mlk_keeper_listener(void);
MLK_HIDDEN void mlk_keeper_listener_handed_over(void);
MLK_HIDDEN void mlk_keeper_fork_child(void);

MLK_HIDDEN void mlk_spawn_prepare(void);
MLK_HIDDEN void mlk_spawn_reporter(void);  /* async-signal-safe */
MLK_HIDDEN int mlk_reporter_alive(void);
MLK_HIDDEN void mlk_ensure_reporter(void);
MLK_HIDDEN void mlk_before_sandbox(void);       /* the process is about to confine itself */
MLK_HIDDEN void mlk_spawn_confine(void);        /* no reporter is started from here on */
MLK_HIDDEN int mlk_spawn_confined(void);
MLK_HIDDEN void mlk_wait_reporter_life(uint64_t ms);
MLK_HIDDEN void mlk_exit_without_handlers(void); /* the root's _exit(): its exit report */
/* control.c, for leaving.c: a report request posted (its number), and a
 * wait for the reporter's answering counter to reach it (at most ms, not
 * once no reporter runs); what this process is. */
MLK_HIDDEN uint32_t mlk_post_request(uint32_t *reason_counter);
MLK_HIDDEN void mlk_wait_for_answer(uint32_t *answered, uint32_t mine, uint64_t ms);
MLK_HIDDEN int mlk_is_root(void);
MLK_HIDDEN int mlk_is_inert(void);
MLK_HIDDEN int mlk_keeper_holds_us(void);
MLK_HIDDEN void mlk_settle_before_exec(void);    /* the root's exec: descendants' reports first */
MLK_HIDDEN void mlk_say_reporter_failed(void); /* once: why no reporter could start */
MLK_HIDDEN void mlk_spawn_fork_child(void);

/* Raw system calls only: these run in signal handlers, fork's child
 * handler and between clone and exec. */
static inline long raw(long n, long a, long b, long c) { return mlk_syscall6(n, a, b, c, 0, 0, 0); }

#endif
