/* The keeper, from the traced process's side (the keeper itself is
 * libmemleak/daemon/keeper.py, a thread of the root's reporter). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "control.h"

/* The abstract socket name, and in the root its listening socket until its
 * first reporter takes it over. */
static char keeper_name[48];    /* keeper_name[0] == 0: abstract namespace */
static size_t keeper_name_len;  /* 0 = no keeper */
static int keeper_listen_fd = -1;
/* The keeper runs as the user the root started as, which is what we were
 * when we learned its name.  A worker that drops its privileges later
 * (nginx's run as nobody) still trusts that user's keeper -- and no other:
 * a stranger who binds the name after the keeper died is not it. */
static uid_t keeper_uid;

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
void mlk_keeper_listen(void)
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
void mlk_keeper_find(void)
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
int mlk_keeper_reachable(void)
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
int mlk_keeper_register(void)
{
    return mlk_seg && mlk_seg_fd >= 0 && keeper_send(KEEPER_REGISTER);
}

/* Tell the keeper a report request is posted in our segment. */
int mlk_keeper_request(void) { return keeper_send(KEEPER_REQUEST); }

/* The root's listening socket, for its first reporter to take over; -1 if
 * there is none (or the program closed it: the number may be another's). */
int mlk_keeper_listener(void)
{
    if (keeper_listen_fd >= 0 && !keeper_socket_is_ours(keeper_listen_fd))
        keeper_listen_fd = -1;
    return keeper_listen_fd;
}

/* The reporter has it now: the program keeps no descriptor of it. */
void mlk_keeper_listener_handed_over(void)
{
    if (keeper_listen_fd >= 0)
        raw(SYS_close, keeper_listen_fd, 0, 0);
    keeper_listen_fd = -1;
}

/* A forked child: the root's socket, not yet handed over, is not its own. */
void mlk_keeper_fork_child(void) { mlk_keeper_listener_handed_over(); }
