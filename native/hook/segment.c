/* The shared-memory segment: a memfd, so it has no name anyone could guess,
 * open or plant a symlink at; only this process and the reporter it hands
 * the descriptor to can map it.  The file is sized for the largest tables we
 * allow but stays sparse, so only the pages actually written cost memory. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>

#include "mlk.h"

struct mlk_header *mlk_seg;
struct mlk_stack *mlk_stacks_base;
struct mlk_counters *mlk_stripes_base;
uint64_t mlk_stripe_len;
int mlk_seg_fd = -1;

#define MODULES_CAP 8192ull
#define STRINGS_CAP (4ull << 20)

/* Descriptors we keep stay clear of the low numbers programs assume free. */
#define MLK_FD_FLOOR 700

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }

/* Sizing the memfd counts against RLIMIT_FSIZE, and going past the soft
 * limit would kill the program with SIGXFSZ.  Raise the soft limit to the
 * hard one just for the ftruncate; if even the hard limit is too small, do
 * without a segment (the caller says so once). */
static int size_memfd(int fd, uint64_t size)
{
    struct rlimit lim;
    int raised = 0;
    if (mlk_syscall6(SYS_getrlimit, RLIMIT_FSIZE, (long)&lim, 0, 0, 0, 0) == 0 &&
        lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < size) {
        if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < size)
            return -1;
        struct rlimit up = {lim.rlim_max, lim.rlim_max};
        if (mlk_syscall6(SYS_setrlimit, RLIMIT_FSIZE, (long)&up, 0, 0, 0, 0) != 0)
            return -1;
        raised = 1;
    }
    long r = mlk_syscall6(SYS_ftruncate, fd, (long)size, 0, 0, 0, 0);
    if (raised)
        mlk_syscall6(SYS_setrlimit, RLIMIT_FSIZE, (long)&lim, 0, 0, 0, 0);
    return r < 0 ? -1 : 0;
}

static int make_memfd(uint64_t size)
{
    int fd = (int)mlk_syscall6(SYS_memfd_create, (long)"libmemleak", MFD_CLOEXEC, 0, 0, 0, 0);
    if (fd < 0)
        return -1;
    if (size_memfd(fd, size) != 0) {
        mlk_syscall6(SYS_close, fd, 0, 0, 0, 0, 0);
        return -1;
    }
    int high = (int)mlk_syscall6(SYS_fcntl, fd, F_DUPFD_CLOEXEC, MLK_FD_FLOOR, 0, 0, 0);
    if (high >= 0) {
        mlk_syscall6(SYS_close, fd, 0, 0, 0, 0, 0);
        fd = high;
    }
    return fd;
}

/* argv[0]'s last part, from /proc/self/cmdline (raw calls: this runs in
 * our constructor and after fork, with no allocation).  A program that
 * rewrote its title ("redis-server *:6379", "nginx: worker process": what
 * an attach or a late fork reads) is named by its first word. */
static void invoked_name(struct mlk_header *h)
{
    char buf[4096];
    /* thread-self: a main thread that called pthread_exit leaves /proc/self
     * without cmdline and exe while the other threads run */
    int fd = (int)mlk_syscall6(SYS_open, (long)"/proc/thread-self/cmdline", O_RDONLY | O_CLOEXEC, 0, 0, 0, 0);
    if (fd < 0)
        fd = (int)mlk_syscall6(SYS_open, (long)"/proc/self/cmdline", O_RDONLY | O_CLOEXEC, 0, 0, 0, 0);
    if (fd < 0)
        return;
    long n = mlk_syscall6(SYS_read, fd, (long)buf, sizeof buf - 1, 0, 0, 0);
    mlk_syscall6(SYS_close, fd, 0, 0, 0, 0, 0);
    if (n <= 0)
        return;
    buf[n] = 0;
    /* Started through /proc (/proc/self/exe, /proc/PID/exe, /proc/self/fd/N:
     * a program re-executing itself, fexecve): argv[0] names the proc file,
     * not the program.  Then exe's name is the one (the reporter's fallback). */
    if (strncmp(buf, "/proc/", 6) == 0)
        return;
    for (char *c = buf; *c; c++)
        if (*c == ' ') {
            *c = 0;
            if (c > buf && c[-1] == ':')
                c[-1] = 0;
            break;
        }
    const char *name = buf;
    for (const char *c = buf; *c; c++)
        if (*c == '/' && c[1])
            name = c + 1;
    uint32_t len = (uint32_t)mlk_strlen(name);
    if (len && name[len - 1] == '/')
        len--;
    if (len == 0 || (len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
        return;
    h->name_off = mlk_string_add(name, len);
    h->name_len = len;
}

char mlk_reporter_dir_arg[4096];
char mlk_reporter_name_arg[256];

/* The directory and name the reporter is started with (spawn.c puts them
 * in its argv): execve copies them while the reporter inherits the
 * program's uid of that moment, so a program that later drops its
 * privileges and rewrites its segment cannot make a more privileged
 * reporter write elsewhere (libmemleak/daemon/trust.py). */
static void copy_arg(char *to, size_t cap, const char *from, size_t n)
{
    if (n >= cap)
        n = cap - 1;
    memcpy(to, from, n);
    to[n] = 0;
}

static void freeze_reporter_args(const struct mlk_header *h, const char *strings)
{
    copy_arg(mlk_reporter_dir_arg, sizeof mlk_reporter_dir_arg, strings + h->dir_off, h->dir_len);
    if (h->name_len) {
        copy_arg(mlk_reporter_name_arg, sizeof mlk_reporter_name_arg, strings + h->name_off, h->name_len);
        return;
    }
    const char *exe = strings + h->exe_off, *base = exe;
    for (uint32_t i = 0; i < h->exe_len; i++)
        if (exe[i] == '/')
            base = exe + i + 1;
    copy_arg(mlk_reporter_name_arg, sizeof mlk_reporter_name_arg, base,
             (size_t)(exe + h->exe_len - base));
}

/* The segment's layout for tables of these capacities; returns its size. */
static uint64_t lay_out(uint64_t stacks_cap, uint64_t frames_cap, uint64_t *stacks_off, uint64_t *stripes_off,
                        uint64_t *frames_off, uint64_t *modules_off, uint64_t *strings_off, uint64_t *events_off,
                        uint64_t *events_data_off)
{
    uint32_t pages = mlk_events_pages_wanted();
    uint64_t off = align_up(sizeof(struct mlk_header), 4096);
    *stacks_off = off;
    off = align_up(off + stacks_cap * sizeof(struct mlk_stack), 4096);
    *stripes_off = off;
    off = align_up(off + MLK_COUNTER_STRIPES * stacks_cap * sizeof(struct mlk_counters), 4096);
    *frames_off = off;
    off = align_up(off + frames_cap * sizeof(uint64_t), 4096);
    *modules_off = off;
    off = align_up(off + MODULES_CAP * sizeof(struct mlk_module), 4096);
    *strings_off = off;
    off = align_up(off + STRINGS_CAP, 4096);
    *events_off = off;
    off = align_up(off + pages * sizeof(struct mlk_event_page), 4096);
    *events_data_off = off;
    return off + (uint64_t)pages * MLK_EVENT_PAGE_BYTES;
}

/* The whole segment (~1.5 GiB of address space, sparse) is mapped in the
 * program and in its reporter.  Under an address-space limit (ulimit -v,
 * RLIMIT_AS) that would take most of what the program may map, and the
 * reporter (a Python process) could not map it at all.  So there the
 * tables shrink until the segment takes an eighth of the limit at most,
 * down to 16K stacks; a table that fills is said and counted as ever. */
#define MIN_STACKS_CAP (1ull << 14)
uint64_t mlk_segment_as_limit;  /* RLIMIT_AS that shrank the tables, 0 if none did */

/* A string field's offset and length as one 64-bit store, so that a line
 * said later (a module routed after a dlopen) is never read as a new
 * offset with an old length.  Empty: 0/0. */
static void set_string(uint32_t *off_len, const char *s)
{
    uint32_t len = (uint32_t)mlk_strlen(s);
    uint32_t off = len ? mlk_string_add(s, len) : 0;
    if (len && off == UINT32_MAX)
        return; /* the strings are full: the old line stays */
    __atomic_store_n((uint64_t *)off_len, (uint64_t)len << 32 | off, __ATOMIC_RELEASE);
}
#define PAIR(f) (__builtin_offsetof(struct mlk_header, f##_off) % 8 == 0 && \
                 __builtin_offsetof(struct mlk_header, f##_len) == __builtin_offsetof(struct mlk_header, f##_off) + 4)
_Static_assert(PAIR(listen) && PAIR(alloc_fns) && PAIR(blind) && PAIR(routed), "shm_layout.h: string pairs");
#undef PAIR

int mlk_segment_create(uint32_t depth, const char *dir, const char *listen, const char *alloc_fns)
{
    uint64_t stacks_cap = MLK_STACKS_CAP, frames_cap = MLK_FRAMES_CAP;
    uint64_t stacks_off, stripes_off, frames_off, modules_off, strings_off, events_off, events_data_off;
#define LAY_OUT() lay_out(stacks_cap, frames_cap, &stacks_off, &stripes_off, &frames_off, &modules_off, \
                          &strings_off, &events_off, &events_data_off)
    uint64_t size = LAY_OUT();
    struct rlimit as;
    if (mlk_syscall6(SYS_getrlimit, RLIMIT_AS, (long)&as, 0, 0, 0, 0) == 0 && as.rlim_cur != RLIM_INFINITY) {
        while (size > as.rlim_cur / 8 && stacks_cap > MIN_STACKS_CAP) {
            stacks_cap >>= 1;
            frames_cap >>= 1;
            size = LAY_OUT();
        }
#undef LAY_OUT
        if (stacks_cap < MLK_STACKS_CAP)
            mlk_segment_as_limit = as.rlim_cur;
    }

    int fd = make_memfd(size);
    if (fd < 0)
        return -1;
    long addr = mlk_syscall6(SYS_mmap, 0, (long)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (addr < 0 && addr > -4096) {
        mlk_syscall6(SYS_close, fd, 0, 0, 0, 0, 0);
        return -1;
    }
    struct mlk_header *h = (struct mlk_header *)addr;
    h->layout_version = MLK_LAYOUT_VERSION;
    h->header_size = sizeof *h;
    h->segment_size = size;
    h->stacks_off = stacks_off;
    h->stripes_off = stripes_off;
    h->frames_off = frames_off;
    h->modules_off = modules_off;
    h->strings_off = strings_off;
    h->stacks_cap = stacks_cap;
    h->frames_cap = frames_cap;
    h->modules_cap = MODULES_CAP;
    h->strings_cap = STRINGS_CAP;
    h->events_off = events_off;
    h->events_data_off = events_data_off;
    h->events_pages = mlk_events_pages_wanted();
    h->pid = mlk_getpid();
    h->depth = depth;
    h->sample_bytes = mlk_sample_bytes;
    h->start_time_ns = mlk_now_ns(CLOCK_REALTIME);
    h->seg_fd = (uint32_t)fd;
    mlk_init_reporter_life(h);
    mlk_stacks_base = (struct mlk_stack *)((char *)h + stacks_off);
    mlk_stripes_base = (struct mlk_counters *)((char *)h + stripes_off);
    mlk_stripe_len = stacks_cap;
    mlk_seg = h;
    mlk_seg_fd = fd;

    char exe[4096];
    long n = mlk_syscall6(SYS_readlink, (long)"/proc/thread-self/exe", (long)exe, sizeof exe - 1, 0, 0, 0);
    if (n < 0)
        n = mlk_syscall6(SYS_readlink, (long)"/proc/self/exe", (long)exe, sizeof exe - 1, 0, 0, 0);
    if (n < 0)
        n = 0;
    h->exe_off = mlk_string_add(exe, (uint32_t)n);
    h->exe_len = (uint32_t)n;
    invoked_name(h);
    h->dir_len = (uint32_t)mlk_strlen(dir);
    h->dir_off = mlk_string_add(dir, h->dir_len);
    set_string(&h->listen_off, listen);
    set_string(&h->alloc_fns_off, alloc_fns);
    set_string(&h->blind_off, mlk_blind);
    set_string(&h->routed_off, mlk_routed);
    freeze_reporter_args(h, (const char *)h + h->strings_off);
    __atomic_store_n(&h->magic, MLK_MAGIC, __ATOMIC_RELEASE);
    return 0;
}

/* Give the segment's descriptor a number outside lo..hi (above if there is
 * room, else below).  The program closes the old number itself right after.
 * Returns -1 when no such number could be had. */
int mlk_segment_move_fd(int lo, int hi)
{
    int moved = -1;
    if (hi < 0x7ffffff0)
        moved = (int)mlk_syscall6(SYS_fcntl, mlk_seg_fd, F_DUPFD_CLOEXEC, hi + 1, 0, 0, 0);
    if (moved < 0 && lo > 3)
        moved = (int)mlk_syscall6(SYS_fcntl, mlk_seg_fd, F_DUPFD_CLOEXEC, 3, 0, 0, 0);
    if (moved < 0)
        return -1;
    if (moved >= lo && moved <= hi) {
        mlk_syscall6(SYS_close, moved, 0, 0, 0, 0, 0);
        return -1;
    }
    mlk_seg_fd = moved;
    mlk_seg->seg_fd = (uint32_t)moved;
    return 0;
}

uint64_t *mlk_frames(void) { return (uint64_t *)((char *)mlk_seg + mlk_seg->frames_off); }
struct mlk_module *mlk_modules(void) { return (struct mlk_module *)((char *)mlk_seg + mlk_seg->modules_off); }
char *mlk_strings(void) { return (char *)mlk_seg + mlk_seg->strings_off; }

/* Callers serialise (the module lock, or single-threaded set-up). */
uint32_t mlk_string_add(const char *s, uint32_t len)
{
    uint64_t used = mlk_seg->strings_used;
    if (used + len + 1 > mlk_seg->strings_cap)
        return UINT32_MAX;
    char *dst = mlk_strings() + used;
    memcpy(dst, s, len);
    dst[len] = 0;
    __atomic_store_n(&mlk_seg->strings_used, used + len + 1, __ATOMIC_RELEASE);
    return (uint32_t)used;
}

void mlk_segment_say_routing(const char *blind, const char *routed)
{
    if (!mlk_seg)
        return; /* not made yet: it takes the lines when it is */
    set_string(&mlk_seg->blind_off, blind);
    set_string(&mlk_seg->routed_off, routed);
}

/* Through a mapping, not write(): writes to a file count against
 * RLIMIT_FSIZE (SIGXFSZ), stores into a mapping do not. */
static void copy_range(char *dst_base, const void *src, uint64_t off, uint64_t len)
{
    memcpy(dst_base + off, src, len);
}

/* fork() support.  The segment is MAP_SHARED, so without care the child
 * would go on writing into the parent's counters.  In the prepare handler
 * (all our locks held, so no counter is being changed) the parent copies
 * what is in use into a fresh memfd; the child maps that copy over the old
 * segment at the same address, so every pointer into it stays valid. */
static int fork_copy_fd = -1;

void mlk_segment_fork_prepare(void)
{
    struct mlk_header *h = mlk_seg;
    fork_copy_fd = -1;
    if (!h)
        return;
    int fd = make_memfd(h->segment_size);
    if (fd < 0)
        return;
    long dst = mlk_syscall6(SYS_mmap, 0, (long)h->segment_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (dst < 0 && dst > -4096) {
        mlk_syscall6(SYS_close, fd, 0, 0, 0, 0, 0);
        return;
    }
    char *base = (char *)dst;
    copy_range(base, h, 0, h->header_size);
    copy_range(base, mlk_stacks(), h->stacks_off, h->stacks_used * sizeof(struct mlk_stack));
    for (unsigned k = 0; k < MLK_COUNTER_STRIPES; k++)
        if (h->stripes_used & (1u << k))
            copy_range(base, mlk_stripe(k), h->stripes_off + k * h->stacks_cap * sizeof(struct mlk_counters),
                       h->stacks_used * sizeof(struct mlk_counters));
    copy_range(base, mlk_frames(), h->frames_off, h->frames_used * sizeof(uint64_t));
    copy_range(base, mlk_modules(), h->modules_off, h->modules_used * sizeof(struct mlk_module));
    copy_range(base, mlk_strings(), h->strings_off, h->strings_used);
    mlk_syscall6(SYS_munmap, dst, (long)h->segment_size, 0, 0, 0, 0);
    fork_copy_fd = fd;
}

void mlk_segment_fork_parent(void)
{
    if (fork_copy_fd >= 0)
        mlk_syscall6(SYS_close, fork_copy_fd, 0, 0, 0, 0, 0);
    fork_copy_fd = -1;
}

/* Returns -1 when the child could not get its own segment: it must then stop
 * recording, or it would corrupt the parent's numbers. */
int mlk_segment_fork_child(void)
{
    struct mlk_header *h = mlk_seg;
    if (!h)
        return 0;
    int fd = fork_copy_fd;
    fork_copy_fd = -1;
    if (fd < 0)
        return -1;
    long addr = mlk_syscall6(SYS_mmap, (long)h, (long)h->segment_size, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_FIXED, fd, 0);
    if (addr != (long)h) {
        mlk_syscall6(SYS_close, fd, 0, 0, 0, 0, 0);
        return -1;
    }
    if (mlk_seg_fd >= 0)
        mlk_syscall6(SYS_close, mlk_seg_fd, 0, 0, 0, 0, 0);
    mlk_seg_fd = fd;
    /* The child's first report holds everything live in it, inherited
     * blocks included: forget what the parent's reporter had reported. */
    struct mlk_stack *st = mlk_stacks();
    for (uint64_t i = 0; i < h->stacks_used; i++) {
        st[i].reported_bytes = 0;
        st[i].reported_blocks = 0;
        st[i].reported_allocs = 0;
    }
    h->last_report_ns = 0;
    h->snapshot_requests = h->seen_snapshot = 0;
    h->exit_rss_kb = h->exit_hwm_kb = 0;
    h->parent_pid = h->pid;
    h->pid = mlk_getpid();
    h->reporter_pid = 0;
    h->reporter_life_pid = h->reporter_life_tid = 0;
    mlk_init_reporter_life(h); /* (the copy holds the parent's reporter's lock) */
    h->reporter_starts = 0;
    h->final_done = 0;
    h->request_seq = h->done_seq = 0;
    h->signal_requests = h->mtrace_requests = h->muntrace_requests = 0;
    h->exit_requests = 0;
    h->seen_signal = h->seen_mtrace = h->seen_muntrace = h->seen_exit = 0;
    h->seg_fd = (uint32_t)fd;
    h->report_seq = 0;
    h->report_errors = 0;
    h->start_time_ns = mlk_now_ns(CLOCK_REALTIME);
    return 0;
}
