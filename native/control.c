/* Configuration, triggers, fork/exit handling and starting the reporter.
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
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mlk.h"

volatile int mlk_collecting;
volatile int mlk_ever_collected;

static struct {
    int collect_at_load;
    uint32_t depth;
    int signal;        /* 0 = no report signal */
    int exit_timeout_ms;
    int track_in_table;  /* track=table: no trailers (trailers.c) */
    char dir[4096];
} config = {1, 16, SIGUSR1, 60000, 0, ""};

static int init_state;  /* 0 = not yet, 1 = running, 2 = done */
/* The root is the process the user started (its pid is MEMLEAK_ROOT_PID,
 * set by the first traced process for its descendants, or by `libmemleak
 * run`).  It starts its reporter at once and waits at exit for its report.
 * Descendants (forked or exec'd) start a reporter only when one is needed
 * and never wait at exit: their data is safe in the segment the reporter
 * inherits, so builds and shell scripts do not crawl under the tracer. */
static int is_root;
static int inert;       /* we are the reporter, or something made tracing impossible */

/* The keeper (see "the keeper" below): the abstract socket name, and in the
 * root its listening socket until its first reporter takes it over. */
static char keeper_name[48];    /* keeper_name[0] == 0: abstract namespace */
static size_t keeper_name_len;  /* 0 = no keeper */
static int keeper_listen_fd = -1;
static int keeper_holds_us;     /* this process's segment is with the keeper */
/* The keeper runs as the user the root started as, which is what we were
 * when we learned its name.  A worker that drops its privileges later
 * (nginx's run as nobody) still trusts that user's keeper -- and no other:
 * a stranger who binds the name after the keeper died is not it. */
static uid_t keeper_uid;
#define KEEPER_FD 5             /* where the reporter finds the listening socket */

/* Prepared once at start, so that spawning needs no allocation. */
static char python_path[4096];
static char main_script[4096];
static char *spawn_argv[4];
static char **spawn_envp;
static uint64_t spawned_at_ns;
static int warned_spawn, warned_timeout;

extern char **environ;

/* ---- configuration ------------------------------------------------------ */

static int parse_uint(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0 || n > 18)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return 1;
}

static int parse_signal(const char *s, size_t n)
{
    static const struct {
        const char *name;
        int sig;
    } names[] = {{"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"HUP", SIGHUP},   {"ALRM", SIGALRM},
                 {"PROF", SIGPROF}, {"WINCH", SIGWINCH}, {"URG", SIGURG}, {"IO", SIGIO},
                 {"PWR", SIGPWR},   {"VTALRM", SIGVTALRM}, {"TERM", SIGTERM}, {"INT", SIGINT},
                 {"QUIT", SIGQUIT}, {"CONT", SIGCONT}, {"NONE", 0}};
    uint64_t num;
    if (parse_uint(s, n, &num))
        return num < 65 ? (int)num : -1;
    if (n > 3 && strncasecmp(s, "SIG", 3) == 0)
        s += 3, n -= 3;
    if (n > 6 && strncasecmp(s, "RTMIN+", 6) == 0 && parse_uint(s + 6, n - 6, &num) &&
        (int)num <= SIGRTMAX - SIGRTMIN)
        return SIGRTMIN + (int)num;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i].name) == n && strncasecmp(s, names[i].name, n) == 0)
            return names[i].sig;
    return -1;
}

static void bad_option(const char *opt, size_t n, const char *why)
{
    char buf[256];
    if (n > sizeof buf - 1)
        n = sizeof buf - 1;
    memcpy(buf, opt, n);
    buf[n] = 0;
    mlk_warn("MEMLEAK_CONFIG: ignoring '", buf, why);
}

static const char *skip_blanks(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

static size_t trimmed_length(const char *p, const char *end)
{
    while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    return (size_t)(end - p);
}

/* The options that take a value, and what the value is: for "needs ..."
 * when it is missing.  NULL for anything else. */
static const char *value_wanted(const char *key, size_t n)
{
    static const struct {
        const char *name, *wants;
    } known[] = {{"depth", "': needs a number of frames, 1 to 64 (depth=32)"},
                 {"dir", "': needs a path (dir=/tmp/reports)"},
                 {"signal", "': needs a signal name (signal=USR2) or none"},
                 {"unwind", "': needs fast or libgcc"},
                 {"sample", "': needs a mean number of bytes between samples (sample=524288)"},
                 {"track", "': needs trailers or table"},
                 {"exit_timeout", "': needs a number of seconds"}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strlen(known[i].name) == n && strncmp(key, known[i].name, n) == 0)
            return known[i].wants;
    return NULL;
}

static void parse_config(const char *cfg, const char *cwd)
{
    if (!cfg) {
        config.collect_at_load = 1;
        return;
    }
    config.collect_at_load = 0;
    const char *next = cfg;
    while (*next) {
        /* One item, blanks around it and around its '=' left out
         * ("mtraceinit, depth = 8" is what people write). */
        const char *p = next, *end = next;
        while (*end && *end != ',')
            end++;
        next = *end ? end + 1 : end;
        p = skip_blanks(p, end);
        size_t n = trimmed_length(p, end);
        const char *eq = memchr(p, '=', n);
        size_t key = eq ? trimmed_length(p, eq) : n;
        const char *val = eq ? skip_blanks(eq + 1, p + n) : NULL;
        size_t vn = eq ? (size_t)(p + n - val) : 0;
        uint64_t num;
#define KEY(s) (key == sizeof(s) - 1 && strncmp(p, s, key) == 0)
        if (n == 0) {
        } else if ((!val || vn == 0) && value_wanted(p, key)) {
            bad_option(p, n, value_wanted(p, key));
        } else if (KEY("mtraceinit") && !val) {
            config.collect_at_load = 1;
        } else if (KEY("mtraceinit")) {
            bad_option(p, n, "': mtraceinit takes no value");
        } else if (KEY("depth") && val) {
            if (parse_uint(val, vn, &num) && num >= 1 && num <= MLK_MAX_DEPTH)
                config.depth = (uint32_t)num;
            else
                bad_option(p, n, "': depth must be 1 to 64; using 16");
        } else if (KEY("dir") && val && vn > 0) {
            size_t used = 0;
            if (val[0] != '/') {
                used = strlen(cwd);
                if (used + 1 < sizeof config.dir) {
                    memcpy(config.dir, cwd, used);
                    config.dir[used++] = '/';
                }
            }
            if (used + vn < sizeof config.dir) {
                memcpy(config.dir + used, val, vn);
                config.dir[used + vn] = 0;
            } else {
                bad_option(p, n, "': path too long; reports go to the working directory");
                config.dir[0] = 0;
            }
        } else if (KEY("signal") && val) {
            int sig = parse_signal(val, vn);
            if (sig < 0 || sig == SIGKILL || sig == SIGSTOP)
                bad_option(p, n, "': not a signal name; using USR1");
            else
                config.signal = sig;
        } else if (KEY("unwind") && val) {
            if (vn == 6 && strncmp(val, "libgcc", 6) == 0)
                mlk_unwind_mode = MLK_UNWIND_LIBGCC;
            else if (vn == 4 && strncmp(val, "fast", 4) == 0)
                mlk_unwind_mode = MLK_UNWIND_FAST;
            else
                bad_option(p, n, "': unwind is 'fast' or 'libgcc'; using fast");
        } else if (KEY("sample") && val) {
            if (parse_uint(val, vn, &num) && num <= (1ull << 40))
                mlk_sample_bytes = num;
            else
                bad_option(p, n, "': sample takes a mean number of bytes between samples "
                                 "(0 = record every allocation)");
        } else if (KEY("track") && val) {
            if (vn == 5 && strncmp(val, "table", 5) == 0)
                config.track_in_table = 1;
            else if (vn == 8 && strncmp(val, "trailers", 8) == 0)
                config.track_in_table = 0;
            else
                bad_option(p, n, "': track is 'trailers' or 'table'; using trailers");
        } else if (KEY("exit_timeout") && val) {
            if (parse_uint(val, vn, &num) && num <= 86400)
                config.exit_timeout_ms = (int)num * 1000;
            else
                bad_option(p, n, "': exit_timeout takes seconds (0 to 86400)");
        } else {
            bad_option(p, n, "': unknown option (known: mtraceinit, depth=N, dir=PATH, "
                             "signal=NAME, unwind=fast|libgcc, sample=BYTES, "
                             "track=trailers|table, exit_timeout=SECONDS)");
        }
#undef KEY
    }
}

/* ---- the reporter ------------------------------------------------------- */

static int mentions_us(const char *entry, size_t n)
{
    const char *me = "libmtrace.so";
    size_t m = strlen(me);
    return n >= m && memcmp(entry + n - m, me, m) == 0;
}

/* Environment for the reporter: ours minus our library in LD_PRELOAD, plus
 * MEMLEAK_REPORTER=1.  Built once with the real malloc (guard set). */
static void prepare_spawn(void)
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
    spawn_argv[0] = python_path;
    spawn_argv[1] = "-E";
    spawn_argv[2] = main_script;
    spawn_argv[3] = NULL;

    size_t n = 0;
    for (char **e = environ; e && *e; e++)
        n++;
    spawn_envp = malloc((n + 2) * sizeof *spawn_envp);
    if (!spawn_envp)
        return;
    size_t k = 0;
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "MEMLEAK_REPORTER=", 17) == 0)
            continue;
        if (strncmp(*e, "LD_PRELOAD=", 11) != 0) {
            spawn_envp[k++] = *e;
            continue;
        }
        const char *v = *e + 11;
        size_t len = strlen(v);
        char *out = malloc(11 + len + 1);
        if (!out)
            continue;
        memcpy(out, "LD_PRELOAD=", 11);
        size_t o = 11;
        const char *q = v;
        while (*q) {
            const char *s = q;
            while (*q && *q != ':' && *q != ' ')
                q++;
            if (q > s && !mentions_us(s, (size_t)(q - s))) {
                if (o > 11)
                    out[o++] = ':';
                memcpy(out + o, s, (size_t)(q - s));
                o += (size_t)(q - s);
            }
            while (*q == ':' || *q == ' ')
                q++;
        }
        out[o] = 0;
        if (o > 11)
            spawn_envp[k++] = out;
    }
    spawn_envp[k++] = "MEMLEAK_REPORTER=1";
    spawn_envp[k] = NULL;
}

static long raw(long n, long a, long b, long c) { return mlk_syscall6(n, a, b, c, 0, 0, 0); }

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
    /* From here on the program can tell whether its reporter is alive. */
    __atomic_store_n(&mlk_seg->reporter_pid, mlk_getpid(), __ATOMIC_RELEASE);
    raw(SYS_execve, (long)spawn_argv[0], (long)spawn_argv, (long)spawn_envp);
    /* exec failed: tell the program, so that it does not wait for us. */
    __atomic_store_n(&mlk_seg->reporter_pid, -1, __ATOMIC_RELEASE);
    mlk_futex_wake(&mlk_seg->done_seq);
    for (;;)
        raw(SYS_exit_group, 127, 0, 0);
}

static int keeper_socket_is_ours(int fd);

/* Async-signal-safe: may run in our signal handler. */
static void spawn_reporter(void)
{
    if (!mlk_seg || !spawn_envp || !main_script[0])
        return;
    spawned_at_ns = mlk_now_ns(CLOCK_MONOTONIC);
    mlk_seg->reporter_pid = 0;
    __atomic_add_fetch(&mlk_seg->reporter_starts, 1, __ATOMIC_RELEASE);
    int pidfd = (int)raw(SYS_pidfd_open, mlk_getpid(), 0, 0);
    /* The root's first reporter becomes the keeper: it takes the listening
     * socket, and the program keeps no descriptor of it. */
    int keeper_fd = keeper_listen_fd;
    if (keeper_fd >= 0 && !keeper_socket_is_ours(keeper_fd))
        keeper_fd = keeper_listen_fd = -1; /* the program closed it; the number may be another's */
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
        for (;;)
            raw(SYS_exit_group, 0, 0, 0);
    }
    if (child > 0)
        mlk_syscall6(SYS_wait4, child, 0, __WCLONE, 0, 0, 0);
    if (subreaper)
        raw(SYS_prctl, PR_SET_CHILD_SUBREAPER, 1, 0);
    if (pidfd >= 0)
        raw(SYS_close, pidfd, 0, 0);
    if (child < 0) {
        mlk_seg->reporter_pid = -1;
    } else if (keeper_fd >= 0) {
        raw(SYS_close, keeper_fd, 0, 0);
        keeper_listen_fd = -1;
    }
}

/* ---- the keeper ----------------------------------------------------------
 * A descendant (forked or exec'd) starts its reporter only when it needs one
 * -- a report request, its exit -- so that shells and builds do not start a
 * Python process per fork.  Until then its data lives only in its segment,
 * and a SIGKILL, an OOM kill or an _exit() would take it along.  So each
 * descendant hands a descriptor of its segment and a pidfd of itself to the
 * root's reporter (the keeper) over a unix socket whose abstract name the
 * root puts in MEMLEAK_KEEPER.  When a descendant exits or dies without a
 * reporter of its own, the keeper writes its final report itself.
 *
 * The name is random, but abstract names are visible to every local user,
 * so a descendant hands its segment over only to a socket whose owner has
 * its own uid (SO_PEERCRED), and the keeper accepts only its own user's.
 * Everything here is a raw, non-blocking system call: it runs in fork's
 * child handler, and a full or missing keeper just means no keeper. */

static void keeper_address(struct sockaddr_un *a, socklen_t *len)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    memcpy(a->sun_path, keeper_name, keeper_name_len);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + keeper_name_len);
}

static int keeper_socket_is_ours(int fd)
{
    struct sockaddr_un a, want;
    socklen_t len = sizeof a, want_len;
    keeper_address(&want, &want_len);
    return raw(SYS_getsockname, fd, (long)&a, (long)&len) == 0 && len == want_len &&
           memcmp(&a, &want, len) == 0;
}

/* Root only, at start: make the socket and announce its name. */
static void keeper_listen(void)
{
    keeper_uid = (uid_t)raw(SYS_geteuid, 0, 0, 0);
    static const char hex[] = "0123456789abcdef";
    unsigned char rnd[16];
    if (raw(SYS_getrandom, (long)rnd, sizeof rnd, 1 /* GRND_NONBLOCK */) != (long)sizeof rnd)
        return; /* no unguessable name: no keeper (descendants fall back) */
    char name[sizeof keeper_name];
    size_t n = 0;
    name[n++] = 0;
    memcpy(name + n, "libmemleak-", 11);
    n += 11;
    for (size_t i = 0; i < sizeof rnd; i++) {
        name[n++] = hex[rnd[i] >> 4];
        name[n++] = hex[rnd[i] & 15];
    }
    memcpy(keeper_name, name, n);
    keeper_name_len = n;
    int fd = (int)raw(SYS_socket, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un a;
    socklen_t len;
    keeper_address(&a, &len);
    if (fd < 0 || raw(SYS_bind, fd, (long)&a, len) != 0 || raw(SYS_listen, fd, 4096 /* capped by net.core.somaxconn */, 0) != 0) {
        if (fd >= 0)
            raw(SYS_close, fd, 0, 0);
        keeper_name_len = 0;
        unsetenv("MEMLEAK_KEEPER");
        return;
    }
    int high = (int)raw(SYS_fcntl, fd, F_DUPFD_CLOEXEC, 700);
    if (high >= 0) {
        raw(SYS_close, fd, 0, 0);
        fd = high;
    }
    keeper_listen_fd = fd;
    char value[sizeof keeper_name];
    memcpy(value, keeper_name + 1, n - 1);
    value[n - 1] = 0;
    setenv("MEMLEAK_KEEPER", value, 1); /* inherited by descendants */
}

/* Descendants: where to find the keeper (read once, at start). */
static void keeper_find(void)
{
    keeper_uid = (uid_t)raw(SYS_geteuid, 0, 0, 0);
    const char *v = secure_getenv("MEMLEAK_KEEPER");
    size_t n = v ? strlen(v) : 0;
    if (n == 0 || n + 1 > sizeof keeper_name) {
        keeper_name_len = 0;
        return;
    }
    keeper_name[0] = 0;
    memcpy(keeper_name + 1, v, n);
    keeper_name_len = n + 1;
}

/* A connection to the keeper, if it listens and runs as our user; or -1. */
static int keeper_connect(void)
{
    if (!keeper_name_len)
        return -1;
    int s = (int)raw(SYS_socket, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0)
        return -1;
    struct sockaddr_un a;
    socklen_t len;
    keeper_address(&a, &len);
    struct ucred peer;
    socklen_t peer_len = sizeof peer;
    if (raw(SYS_connect, s, (long)&a, len) == 0 &&
        mlk_syscall6(SYS_getsockopt, s, SOL_SOCKET, SO_PEERCRED, (long)&peer, (long)&peer_len, 0) == 0 &&
        peer.uid == keeper_uid)
        return s;
    raw(SYS_close, s, 0, 0);
    return -1;
}

/* Is the keeper still there?  (A connection without a message: it drops it.) */
static int keeper_reachable(void)
{
    int s = keeper_connect();
    if (s >= 0)
        raw(SYS_close, s, 0, 0);
    return s >= 0;
}

/* One message to the keeper: {tag, our pid}, with descriptors of our
 * segment and of ourselves when we register.  Returns 1 if it was sent. */
#define KEEPER_REGISTER 0x314b4c4d /* "MLK1": hold my segment */
#define KEEPER_REQUEST 0x324b4c4d  /* "MLK2": a report request is posted in it */
static int keeper_send(int32_t tag)
{
    int s = keeper_connect();
    if (s < 0)
        return 0;
    int pidfd = -1;
    int32_t payload[2] = {tag, mlk_getpid()};
    struct iovec iov = {payload, sizeof payload};
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(2 * sizeof(int))];
    } control;
    memset(&control, 0, sizeof control);
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (tag == KEEPER_REGISTER) {
        pidfd = (int)raw(SYS_pidfd_open, mlk_getpid(), 0, 0);
        if (pidfd < 0) {
            raw(SYS_close, s, 0, 0);
            return 0;
        }
        msg.msg_control = control.buf;
        msg.msg_controllen = sizeof control.buf;
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(2 * sizeof(int));
        int fds[2] = {mlk_seg_fd, pidfd};
        memcpy(CMSG_DATA(c), fds, sizeof fds);
    }
    int ok = raw(SYS_sendmsg, s, (long)&msg, MSG_DONTWAIT | MSG_NOSIGNAL) == (long)sizeof payload;
    if (pidfd >= 0)
        raw(SYS_close, pidfd, 0, 0);
    raw(SYS_close, s, 0, 0);
    return ok;
}

/* Hand our segment to the keeper.  Returns 1 if it has it. */
static int keeper_register(void)
{
    return mlk_seg && mlk_seg_fd >= 0 && keeper_send(KEEPER_REGISTER);
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

/* 1 when a reporter is running or being started, 0 when there is none. */
static int reporter_alive(void)
{
    int pid = __atomic_load_n(&mlk_seg->reporter_pid, __ATOMIC_ACQUIRE);
    if (pid > 0)
        return process_alive(pid);
    /* Between our clone and the grandchild publishing its pid: a moment. */
    return pid == 0 && spawned_at_ns && mlk_now_ns(CLOCK_MONOTONIC) - spawned_at_ns < 2000000000ull;
}

static void ensure_reporter(void)
{
    if (reporter_alive())
        return;
    int failed = __atomic_load_n(&mlk_seg->reporter_pid, __ATOMIC_ACQUIRE) < 0;
    if (failed && !__atomic_exchange_n(&warned_spawn, 1, __ATOMIC_RELAXED))
        mlk_warn("could not start the reporter (", python_path,
                 " -E .../_reporter_main.py); the program runs on, but no report is written "
                 "until one starts");
    spawn_reporter();
}

static uint32_t post_request(uint32_t *reason_counter)
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

void mlk_request_report(uint32_t *reason_counter, int wait)
{
    struct mlk_header *h = mlk_seg;
    if (!h || inert)
        return;
    uint32_t mine = post_request(reason_counter);
    /* A descendant the keeper holds has the keeper write the report, unless
     * a reporter of its own happens to run; if the keeper is gone, it
     * starts its own, as the root does. */
    int by_keeper = 0;
    if (keeper_holds_us && !reporter_alive()) {
        by_keeper = keeper_send(KEEPER_REQUEST);
        keeper_holds_us = by_keeper;
    }
    if (!by_keeper)
        ensure_reporter();
    if (!wait)
        return;
    uint64_t deadline = mlk_now_ns(CLOCK_MONOTONIC) + (uint64_t)config.exit_timeout_ms * 1000000ull;
    int respawned = 0;
    for (;;) {
        uint32_t done = __atomic_load_n(&h->done_seq, __ATOMIC_ACQUIRE);
        if (report_done(mine))
            return;
        if (mlk_now_ns(CLOCK_MONOTONIC) > deadline)
            break;
        if (__atomic_load_n(&h->reporter_pid, __ATOMIC_ACQUIRE) < 0)
            return; /* no reporter can be started: already said so */
        /* A reporter that finished our report may have left since `done`
         * was read: the report is there.  Look again before starting another
         * (it would find the program gone and write a second final report). */
        if (by_keeper) {
            if (!keeper_reachable() && !report_done(mine)) { /* the keeper died with our request */
                by_keeper = keeper_holds_us = 0;
                spawn_reporter();
            }
        } else if (!reporter_alive() && !report_done(mine)) {
            if (respawned++ >= 2)
                break;
            spawn_reporter();
        }
        mlk_futex_wait(&h->done_seq, done, 100);
    }
    if (!__atomic_exchange_n(&warned_timeout, 1, __ATOMIC_RELAXED))
        mlk_warn("the reporter did not finish a report in time; the program goes on ",
                 "(it will still write it if it can)", "");
}

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

int mlk_report_signal(void) { return config.signal; }
void (*const mlk_report_handler)(int) = on_report_signal;

static void on_report_signal(int sig)
{
    (void)sig;
    int saved = errno;
    if (mlk_collecting && mlk_seg && mlk_seg->pid == mlk_getpid())
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
    if (mlk_seg)
        __atomic_store_n(&mlk_lazy_spawn_at, mlk_seg->stacks_used + LAZY_SPAWN_STACKS,
                         __ATOMIC_RELAXED);
}

void mlk_lazy_spawn(void)
{
    if (!__atomic_exchange_n(&mlk_lazy_spawn_at, 0, __ATOMIC_RELAXED))
        return; /* another thread got here first */
    if (mlk_seg && mlk_seg->pid == mlk_getpid() && !reporter_alive())
        spawn_reporter();
}

/* Say at once, not at the first report, when the report directory cannot
 * take reports (the user is still watching the start).  Only the root:
 * its descendants share the directory. */
static void check_report_dir(void)
{
    struct stat st;
    const char *why = NULL;
    if (stat(config.dir, &st) != 0)
        why = strerror(errno);
    else if (!S_ISDIR(st.st_mode))
        why = "not a directory";
    else if (access(config.dir, W_OK | X_OK) != 0)
        why = strerror(errno);
    if (!why)
        return;
    char line[4096 + 256];
    snprintf(line, sizeof line, "report directory %s: %s; a report asked for while it cannot be "
             "written keeps its data for the next one, and the final report goes to "
             "/tmp/libmemleak-%u instead", config.dir, why, (unsigned)geteuid());
    mlk_warn(line, "", "");
}

int mlk_start_collecting(void)
{
    if (inert)
        return -1;
    if (!mlk_seg) {
        if (mlk_segment_create(config.depth, config.dir) != 0) {
            mlk_warn("cannot create the shared memory segment (memfd, or RLIMIT_FSIZE below ",
                     "its ~1.3 GiB sparse size); this process is not traced", "");
            inert = 1;
            return -1;
        }
        mlk_modules_scan();
        mlk_unwind_init();
        /* The reporter also answers this signal when the program blocks it
         * in every thread (the handler then never runs). */
        mlk_seg->report_signal = (uint32_t)config.signal;
        if (!is_root)
            keeper_holds_us = keeper_register();
        else
            check_report_dir();
    }
    /* Sampling records few blocks: the side table costs little there, and
     * the unrecorded ones then keep their exact size. */
    if (!mlk_sample_bytes && !config.track_in_table && mlk_trailers_possible())
        mlk_trailers_enable();
    mlk_seg->tracking = mlk_trailer_key ? MLK_TRACK_TRAILERS : MLK_TRACK_TABLE;
    __atomic_store_n(&mlk_seg->collecting, 1, __ATOMIC_RELEASE);
    mlk_ever_collected = 1;
    mlk_collecting = 1;
    if (is_root && !reporter_alive())
        spawn_reporter();
    else if (!is_root && !keeper_holds_us)
        arm_lazy_spawn();
    return 0;
}

void mlk_stop_collecting(void)
{
    mlk_collecting = 0;
    if (mlk_seg)
        __atomic_store_n(&mlk_seg->collecting, 0, __ATOMIC_RELEASE);
}

void mlk_segment_fd_threatened(int lo, int hi)
{
    if (!mlk_seg || mlk_seg->pid != mlk_getpid())
        return;
    /* If it cannot be moved, everything is being closed: a reporter started
     * now keeps the segment. */
    if (mlk_segment_move_fd(lo, hi) != 0 && !reporter_alive())
        spawn_reporter();
}

void mlk_after_dl_change(void)
{
    if (mlk_seg)
        mlk_modules_scan();
}

/* ---- fork --------------------------------------------------------------- */

static void fork_prepare(void)
{
    mlk_in_hook++;
    mlk_modules_lock_for_fork(1);
    mlk_unwind_lock_for_fork(1);
    mlk_stacks_lock_for_fork(1);
    mlk_addrs_lock_for_fork(1);
    mlk_trailers_lock_for_fork(1);
    if (mlk_ever_collected)
        mlk_segment_fork_prepare();
}

static void fork_parent(void)
{
    mlk_segment_fork_parent();
    mlk_trailers_lock_for_fork(0);
    mlk_addrs_lock_for_fork(0);
    mlk_stacks_lock_for_fork(0);
    mlk_unwind_lock_for_fork(0);
    mlk_modules_lock_for_fork(0);
    mlk_in_hook--;
}

static void fork_child(void)
{
    if (mlk_ever_collected && mlk_segment_fork_child() != 0) {
        /* Without a segment of its own the child must not touch the
         * parent's: stop recording in it. */
        mlk_collecting = 0;
        mlk_ever_collected = 0;
        inert = 1;
        mlk_seg = NULL;
        mlk_warn("fork: cannot copy the segment; the child is not traced", "", "");
    }
    spawned_at_ns = 0;
    is_root = 0;
    if (keeper_listen_fd >= 0) { /* the root's, not yet handed over: not ours */
        raw(SYS_close, keeper_listen_fd, 0, 0);
        keeper_listen_fd = -1;
    }
    keeper_holds_us = mlk_seg ? keeper_register() : 0;
    mlk_lazy_spawn_at = 0;
    if (mlk_collecting && !keeper_holds_us)
        arm_lazy_spawn();
    mlk_trailers_fork_child();
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
        keeper_listen();
    else
        keeper_find();
}

void mlk_init(void)
{
    if (__atomic_load_n(&init_state, __ATOMIC_ACQUIRE) == 2)
        return;
    int expected = 0;
    if (!__atomic_compare_exchange_n(&init_state, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return; /* another thread is initialising; it will finish */
    int was = mlk_in_hook;
    mlk_in_hook = 1;
    mlk_modules_set_self((void *)&mlk_init);
    if (secure_getenv("MEMLEAK_REPORTER")) {
        inert = 1;
    } else {
        char cwd[4096];
        if (!getcwd(cwd, sizeof cwd))
            strcpy(cwd, "/");
        snprintf(config.dir, sizeof config.dir, "%s", cwd);
        parse_config(secure_getenv("MEMLEAK_CONFIG"), cwd);
        decide_root();
        prepare_spawn();
        pthread_atfork(fork_prepare, fork_parent, fork_child);
        if (config.signal) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = on_report_signal;
            sa.sa_flags = SA_RESTART;
            sigemptyset(&sa.sa_mask);
            sigaction(config.signal, &sa, NULL);
        }
        if (config.collect_at_load)
            mlk_start_collecting();
    }
    mlk_in_hook = was;
    __atomic_store_n(&init_state, 2, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void mlk_constructor(void) { mlk_init(); }

/* Runs at exit() and return from main, after the program's own atexit
 * handlers and static destructors (our library was initialised before
 * the program, so it is finalised after it). */
__attribute__((destructor)) static void mlk_destructor(void)
{
    if (!mlk_seg || inert || !mlk_collecting || mlk_seg->pid != mlk_getpid())
        return;
    int was = mlk_in_hook;
    mlk_in_hook = 1;
    /* A descendant the keeper holds leaves its exit report to the keeper
     * (no Python process per exiting child), if the keeper is still there
     * to see it die and no reporter of its own is running anyway. */
    if (!is_root && keeper_holds_us && !reporter_alive() && keeper_reachable())
        post_request(&mlk_seg->exit_requests);
    else
        mlk_request_report(&mlk_seg->exit_requests, is_root);
    mlk_in_hook = was;
}
