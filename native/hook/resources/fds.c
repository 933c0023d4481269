/* File descriptors, the built-in resource kind: every exported call that
 * hands the program a new descriptor is hooked, and records it at the
 * caller's stack (table.c, kind MLK_FD_KIND); every call that closes one
 * lets it go.  Descriptors leak like memory and end servers the same way
 * ("too many open files"), so reports count them per stack with the same
 * deltas (docs/memlog.md, "resources").
 *
 * What glibc opens and closes inside itself (getaddrinfo's sockets, nss's
 * files) goes through its internal calls, not these: unseen both ways.  A
 * descriptor opened unseen and closed seen is simply not held; one opened
 * seen and closed unseen is found stale when its number is handed out
 * again (table.c: an acquisition over a held id ends the old one).
 *
 * Order under threads, as for blocks: a descriptor is let go *before* the
 * real close (after it, another thread could be handed the number and
 * record it first) and recorded after the call that made it.
 *
 * A vfork child runs in its parent's memory until it execs: the calls it
 * makes there (closing descriptors before the exec) must not touch the
 * parent's books, hence the pid check.  Off with MEMLEAK_CONFIG fds=no.
 *
 * The descriptor calls that could take the segment's own descriptor away
 * (close, dup2, dup3, close_range, closefrom) also protect it here. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../control.h"
#include "../hooks.h"
#include "resources.h"

/* Books are kept in this process: collection has begun, fds tracked, not
 * inside our own code, and not a vfork child in its parent's memory. */
static inline int keeping(void)
{
    struct mlk_header *h = mlk_seg;
    return h && mlk_ever_collected && !mlk_in_hook && h->fds_tracked && h->pid == mlk_getpid();
}

/* Descriptor fd was just made by the hooked call this is inlined into: held
 * from its caller's stack (held with no stack while collection is stopped
 * or the thread is not recorded, so that a stale record of the number
 * still ends). */
static inline __attribute__((always_inline)) void opened(int fd)
{
    if (fd < 0 || !keeping())
        return;
    BEGIN_HOOK();
    uint32_t stack = MLK_NO_STACK;
    if (mlk_collecting && !mlk_thread_not_recording) {
        MLK_WALK_FROM_HERE();
        stack = mlk_current_stack(MLK_KIND_RESOURCE + MLK_FD_KIND);
    }
    mlk_resource_acquire(MLK_FD_KIND, (uint64_t)fd, 1, stack);
    END_HOOK();
}

static void closing(int fd)
{
    if (fd < 0 || !keeping())
        return;
    BEGIN_HOOK();
    mlk_resource_release(MLK_FD_KIND, (uint64_t)fd);
    END_HOOK();
}

static void closing_range(unsigned lo, unsigned hi)
{
    if (!keeping())
        return;
    BEGIN_HOOK();
    mlk_resource_release_range(MLK_FD_KIND, lo, hi);
    END_HOOK();
}

/* Before the program closes or overwrites the segment's descriptor it is
 * moved out of the way; when a whole range up to the top is closed, a
 * reporter is started first instead (it holds the segment from then on). */
static void protect_segment_fd(int lo, int hi)
{
    if (mlk_seg_fd < lo || mlk_seg_fd > hi || mlk_in_hook)
        return;
    BEGIN_HOOK();
    mlk_segment_fd_threatened(lo, hi);
    END_HOOK();
}

#define NEXT(type, name, params)                                                                   \
    static type(*next) params;                                                                     \
    if (!LAZY_NEXT(next, name)) {                                                                  \
        errno = ENOSYS;                                                                            \
        return (type)-1;                                                                           \
    }

/* A call that returns a new descriptor. */
#define OPENS(name, params, args)                                                                  \
    EXPORT int name params                                                                         \
    {                                                                                              \
        NEXT(int, #name, params)                                                                   \
        int made = next args;                                                                      \
        opened(made);                                                                              \
        return made;                                                                               \
    }

OPENS(socket, (int domain, int type, int protocol), (domain, type, protocol))
OPENS(accept, (int s, struct sockaddr *addr, socklen_t *len), (s, addr, len))
OPENS(accept4, (int s, struct sockaddr *addr, socklen_t *len, int flags), (s, addr, len, flags))
OPENS(dup, (int fd), (fd))
OPENS(eventfd, (unsigned initval, int flags), (initval, flags))
OPENS(timerfd_create, (int clock, int flags), (clock, flags))
OPENS(epoll_create, (int size), (size))
OPENS(epoll_create1, (int flags), (flags))
OPENS(inotify_init, (void), ())
OPENS(inotify_init1, (int flags), (flags))
OPENS(memfd_create, (const char *name, unsigned flags), (name, flags))
OPENS(creat, (const char *path, mode_t mode), (path, mode))
OPENS(creat64, (const char *path, mode_t mode), (path, mode))
OPENS(__open_2, (const char *path, int flags), (path, flags))
OPENS(__open64_2, (const char *path, int flags), (path, flags))
OPENS(__openat_2, (int dirfd, const char *path, int flags), (dirfd, path, flags))
OPENS(__openat64_2, (int dirfd, const char *path, int flags), (dirfd, path, flags))
OPENS(mkstemp, (char *tmpl), (tmpl))
OPENS(mkstemp64, (char *tmpl), (tmpl))
OPENS(mkostemp, (char *tmpl, int flags), (tmpl, flags))
OPENS(mkostemp64, (char *tmpl, int flags), (tmpl, flags))
OPENS(mkstemps, (char *tmpl, int suffix), (tmpl, suffix))
OPENS(mkostemps, (char *tmpl, int suffix, int flags), (tmpl, suffix, flags))
OPENS(posix_openpt, (int flags), (flags))
OPENS(shm_open, (const char *name, int flags, mode_t mode), (name, flags, mode))

/* open and openat take a mode only with O_CREAT or O_TMPFILE; glibc reads
 * it then, and passing it always is what its own wrappers do. */
#define OPENS_WITH_MODE(name, params, args)                                                        \
    EXPORT int name(params, ...)                                                                   \
    {                                                                                              \
        va_list ap;                                                                                \
        va_start(ap, flags);                                                                       \
        mode_t mode = ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) ? va_arg(ap, mode_t) : 0; \
        va_end(ap);                                                                                \
        NEXT(int, #name, (params, ...))                                                            \
        int made = next args;                                                                      \
        opened(made);                                                                              \
        return made;                                                                               \
    }
#define PARAMS_OPEN const char *path, int flags
#define PARAMS_OPENAT int dirfd, const char *path, int flags
OPENS_WITH_MODE(open, PARAMS_OPEN, (path, flags, mode))
OPENS_WITH_MODE(open64, PARAMS_OPEN, (path, flags, mode))
OPENS_WITH_MODE(openat, PARAMS_OPENAT, (dirfd, path, flags, mode))
OPENS_WITH_MODE(openat64, PARAMS_OPENAT, (dirfd, path, flags, mode))

/* signalfd makes a descriptor only when given -1 (else it changes fd's mask). */
EXPORT int signalfd(int fd, const sigset_t *mask, int flags)
{
    NEXT(int, "signalfd", (int, const sigset_t *, int))
    int r = next(fd, mask, flags);
    if (fd == -1)
        opened(r);
    return r;
}

/* Two at once. */
#define OPENS_PAIR(name, params, args, pair)                                                       \
    EXPORT int name params                                                                         \
    {                                                                                              \
        NEXT(int, #name, params)                                                                   \
        int r = next args;                                                                         \
        if (r == 0) {                                                                              \
            opened(pair[0]);                                                                       \
            opened(pair[1]);                                                                       \
        }                                                                                          \
        return r;                                                                                  \
    }
OPENS_PAIR(pipe, (int fds[2]), (fds), fds)
OPENS_PAIR(pipe2, (int fds[2], int flags), (fds, flags), fds)
OPENS_PAIR(socketpair, (int domain, int type, int protocol, int sv[2]), (domain, type, protocol, sv), sv)

/* fcntl's F_DUPFD and F_DUPFD_CLOEXEC make one; its third argument is an
 * int or a pointer, passed on as the word it is (glibc's own wrapper does). */
#define FCNTL(name)                                                                                \
    EXPORT int name(int fd, int cmd, ...)                                                          \
    {                                                                                              \
        va_list ap;                                                                                \
        va_start(ap, cmd);                                                                         \
        void *arg = va_arg(ap, void *);                                                            \
        va_end(ap);                                                                                \
        NEXT(int, #name, (int, int, ...))                                                          \
        int r = next(fd, cmd, arg);                                                                \
        if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)                                              \
            opened(r);                                                                             \
        return r;                                                                                  \
    }
FCNTL(fcntl)
FCNTL(fcntl64)

/* Descriptors passed by another process (SCM_RIGHTS) are this one's now. */
static inline __attribute__((always_inline)) void received(struct msghdr *msg)
{
    if (!msg || !msg->msg_control || msg->msg_controllen < sizeof(struct cmsghdr) || !keeping())
        return;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(0))
            continue;
        size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        const unsigned char *at = CMSG_DATA(c);
        for (size_t i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, at + i * sizeof fd, sizeof fd);
            opened(fd);
        }
    }
}

EXPORT ssize_t recvmsg(int s, struct msghdr *msg, int flags)
{
    NEXT(ssize_t, "recvmsg", (int, struct msghdr *, int))
    ssize_t r = next(s, msg, flags);
    if (r >= 0)
        received(msg);
    return r;
}

EXPORT int recvmmsg(int s, struct mmsghdr *msgs, unsigned n, int flags, struct timespec *timeout)
{
    NEXT(int, "recvmmsg", (int, struct mmsghdr *, unsigned, int, struct timespec *))
    int r = next(s, msgs, n, flags, timeout);
    for (int i = 0; i < r; i++)
        received(&msgs[i].msg_hdr);
    return r;
}

/* ---- streams and directories: their descriptor is held by the object ---- */

/* A stream's or directory's descriptor: asked for only once collection
 * has begun (opened and closing check the rest). */
#define FD_OF(object, fn) ((object) && mlk_ever_collected ? fn(object) : -1)

static inline __attribute__((always_inline)) FILE *stream_opened(FILE *f)
{
    opened(FD_OF(f, fileno));
    return f;
}

#define OPENS_STREAM(name, params, args)                                                           \
    EXPORT FILE *name params                                                                       \
    {                                                                                              \
        static FILE *(*next) params;                                                               \
        if (!LAZY_NEXT(next, #name)) {                                                             \
            errno = ENOSYS;                                                                        \
            return NULL;                                                                           \
        }                                                                                          \
        return stream_opened(next args);                                                           \
    }
OPENS_STREAM(fopen, (const char *path, const char *mode), (path, mode))
OPENS_STREAM(fopen64, (const char *path, const char *mode), (path, mode))
OPENS_STREAM(tmpfile, (void), ())
OPENS_STREAM(tmpfile64, (void), ())
OPENS_STREAM(popen, (const char *command, const char *mode), (command, mode))

/* freopen closes the stream's descriptor and opens another (often the
 * same number). */
#define REOPENS_STREAM(name)                                                                       \
    EXPORT FILE *name(const char *path, const char *mode, FILE *stream)                            \
    {                                                                                              \
        static FILE *(*next)(const char *, const char *, FILE *);                                  \
        if (!LAZY_NEXT(next, #name)) {                                                             \
            errno = ENOSYS;                                                                        \
            return NULL;                                                                           \
        }                                                                                          \
        closing(FD_OF(stream, fileno));                                                            \
        return stream_opened(next(path, mode, stream));                                            \
    }
REOPENS_STREAM(freopen)
REOPENS_STREAM(freopen64)

#define CLOSES_STREAM(name)                                                                        \
    EXPORT int name(FILE *stream)                                                                  \
    {                                                                                              \
        NEXT(int, #name, (FILE *))                                                                 \
        closing(FD_OF(stream, fileno));                                                            \
        return next(stream);                                                                       \
    }
CLOSES_STREAM(fclose)
CLOSES_STREAM(pclose)

EXPORT DIR *opendir(const char *path)
{
    static DIR *(*next)(const char *);
    if (!LAZY_NEXT(next, "opendir")) {
        errno = ENOSYS;
        return NULL;
    }
    DIR *d = next(path);
    opened(FD_OF(d, dirfd));
    return d;
}

EXPORT int closedir(DIR *d)
{
    NEXT(int, "closedir", (DIR *))
    __asm__("" : "+r"(d)); /* glibc declares d nonnull; a program may still pass NULL (EINVAL there) */
    closing(FD_OF(d, dirfd));
    return next(d);
}

/* ---- closing ---- */

EXPORT int close(int fd)
{
    NEXT(int, "close", (int))
    protect_segment_fd(fd, fd);
    closing(fd);
    return next(fd);
}

/* dup2 and dup3 close newfd (if open) and make it a copy: held from here
 * (the stale record of the number ends).  dup2(fd, fd) does nothing. */
EXPORT int dup2(int oldfd, int newfd)
{
    NEXT(int, "dup2", (int, int))
    protect_segment_fd(newfd, newfd);
    int r = next(oldfd, newfd);
    if (r >= 0 && oldfd != newfd)
        opened(r);
    return r;
}

EXPORT int dup3(int oldfd, int newfd, int flags)
{
    NEXT(int, "dup3", (int, int, int))
    protect_segment_fd(newfd, newfd);
    int r = next(oldfd, newfd, flags);
    opened(r);
    return r;
}

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC 4
#endif

static int clamp(unsigned v) { return (int)(v > 0x7fffffffu ? 0x7fffffff : v); }

EXPORT int close_range(unsigned first, unsigned last, int flags)
{
    NEXT(int, "close_range", (unsigned, unsigned, int))
    protect_segment_fd(clamp(first), clamp(last));
    if (!(flags & CLOSE_RANGE_CLOEXEC) && first <= last)
        closing_range(first, last); /* CLOEXEC only marks them: they end at exec */
    return next(first, last, flags);
}

EXPORT void closefrom(int lowfd)
{
    static void (*next)(int);
    protect_segment_fd(lowfd < 0 ? 0 : lowfd, 0x7fffffff);
    closing_range(lowfd < 0 ? 0 : (unsigned)lowfd, 0x7fffffffu);
    if (LAZY_NEXT(next, "closefrom"))
        next(lowfd);
}

/* ---- exec (hooks_process.c): close-on-exec descriptors end with the image ---- */

void mlk_fds_exec_begins(void)
{
    if (!keeping())
        return;
    BEGIN_HOOK();
    mlk_fds_before_exec();
    END_HOOK();
}

void mlk_fds_exec_returned(void)
{
    if (!keeping())
        return;
    BEGIN_HOOK();
    mlk_fds_exec_failed();
    END_HOOK();
}

/* ---- what was open before: in no entry, but said ---- */

/* Descriptors above 2 open now, but ours (the segment's, the keeper's
 * listening socket): those the program
 * had when collection started (inherited across an exec, opened before an
 * attach or before mtrace()), which no stack here opened. */
uint32_t mlk_fds_open_now(void)
{
    long dir = mlk_syscall6(SYS_openat, AT_FDCWD, (long)"/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0,
                            0, 0);
    if (dir < 0)
        return 0;
    uint32_t n = 0;
    long keeper = mlk_keeper_listener();
    char buf[4096] __attribute__((aligned(8)));
    long got;
    while ((got = mlk_syscall6(SYS_getdents64, dir, (long)buf, sizeof buf, 0, 0, 0)) > 0) {
        for (long at = 0; at < got;) {
            const struct { uint64_t ino; int64_t off; uint16_t reclen; uint8_t type; char name[]; } *e =
                (const void *)(buf + at);
            long fd = 0;
            const char *c = e->name;
            for (; *c >= '0' && *c <= '9' && fd < 1L << 30; c++)
                fd = fd * 10 + (*c - '0');
            if (!*c && c != e->name && fd > 2 && fd != dir && fd != mlk_seg_fd && fd != keeper)
                n++;
            at += e->reclen ? e->reclen : got;
        }
    }
    mlk_syscall6(SYS_close, dir, 0, 0, 0, 0, 0);
    return n;
}
