/* A server that leaks descriptors from two call sites (#30): in each round
 * it accepts three connections and forgets to close one of them
 * (serve_client's accept), and in every other round it forgets to close
 * the log file it opened with fopen (open_request_log).  Everything else
 * it opens -- the clients' sockets, pipes, an eventfd, dup/dup2/fcntl
 * copies, a directory stream, a socketpair and a descriptor passed over
 * it with SCM_RIGHTS, a mkstemp file, close_range -- it closes again, each
 * through the call that should end it.
 *
 * After each round it asks for a report (memleak_report, synchronous), so
 * the counts of each report are exact; it prints what it leaked and, with
 * memleak_resource_live, what the tracer says it holds.
 *
 *   fdserver [ROUNDS]      default 8
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "memleak.h"

#ifndef SYS_close_range
#include <sys/syscall.h>
#endif

static void die(const char *what)
{
    perror(what);
    exit(2);
}

static int leaked_sockets, leaked_logs;

/* The kernel's word: how many descriptors the process has open. */
static int open_now(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        die("/proc/self/fd");
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own */
}

static int listen_on_loopback(struct sockaddr_in *addr)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0)
        die("socket");
    memset(addr, 0, sizeof *addr);
    addr->sin_family = AF_INET;
    addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof *addr;
    if (bind(s, (struct sockaddr *)addr, sizeof *addr) || listen(s, 16) ||
        getsockname(s, (struct sockaddr *)addr, &len))
        die("listen");
    return s;
}

static int connect_client(const struct sockaddr_in *addr)
{
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c < 0 || connect(c, (const struct sockaddr *)addr, sizeof *addr))
        die("connect");
    return c;
}

/* The first leak site: a connection accepted and, for the round's first
 * client, never closed. */
__attribute__((noinline)) static int serve_client(int listener, int keep)
{
    int conn = accept(listener, NULL, NULL);
    if (conn < 0)
        die("accept");
    if (write(conn, "hi\n", 3) != 3)
        die("write");
    if (keep) {
        leaked_sockets++;
        return conn; /* forgotten */
    }
    close(conn);
    return -1;
}

/* The second leak site: a log file per request, not closed every other round. */
__attribute__((noinline)) static void open_request_log(int round)
{
    FILE *log = fopen("/dev/null", "w");
    if (!log)
        die("fopen");
    fprintf(log, "round %d\n", round);
    if (round % 2 == 0) {
        leaked_logs++;
        return; /* forgotten */
    }
    fclose(log);
}

/* Opened and closed again, by every pair of calls the tracer follows. */
__attribute__((noinline)) static void tidy_work(void)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC))
        die("pipe2");
    int copy = dup(p[0]);
    int copy2 = fcntl(p[1], F_DUPFD_CLOEXEC, 100);
    int e = eventfd(0, 0);
    if (copy < 0 || copy2 < 0 || e < 0)
        die("dup");
    if (dup2(e, copy) != copy) /* closes the dup'd pipe end, copy is now the eventfd's */
        die("dup2");
    close(copy);
    close(copy2);
    close(e);
    close(p[0]);
    close(p[1]);

    DIR *d = opendir("/");
    if (!d)
        die("opendir");
    closedir(d);

    char name[] = "/tmp/fdserver-XXXXXX";
    int t = mkstemp(name);
    if (t < 0)
        die("mkstemp");
    unlink(name);
    close(t);

    /* a descriptor passed over a socketpair is the receiver's: closed there */
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
        die("socketpair");
    int passed = open("/dev/null", O_RDONLY);
    char byte = 'x', control[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {&byte, 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                         .msg_controllen = sizeof control};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &passed, sizeof passed);
    if (sendmsg(sv[0], &msg, 0) != 1)
        die("sendmsg");
    close(passed);
    memset(control, 0, sizeof control);
    msg.msg_controllen = sizeof control;
    if (recvmsg(sv[1], &msg, 0) != 1)
        die("recvmsg");
    int got;
    memcpy(&got, CMSG_DATA(CMSG_FIRSTHDR(&msg)), sizeof got);
    close(got);

    /* two descriptors in a row, closed together */
    int x = open("/dev/null", O_RDONLY);
    int a = fcntl(x, F_DUPFD, 500), b = fcntl(x, F_DUPFD, 501);
    close(x);
    if (a != 500 || b != 501 || close_range(500, 501, 0))
        die("close_range");
    close(sv[0]);
    close(sv[1]);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 8;
    int before = open_now();
    struct sockaddr_in addr;
    int listener = listen_on_loopback(&addr);
    for (int round = 0; round < rounds; round++) {
        for (int k = 0; k < 3; k++) {
            int client = connect_client(&addr);
            serve_client(listener, k == 0);
            char buf[3];
            if (read(client, buf, 3) != 3)
                die("read");
            close(client);
        }
        open_request_log(round);
        tidy_work();
        char label[32];
        snprintf(label, sizeof label, "round%d", round);
        memleak_report(label, NULL, 0);
    }
    close(listener);
    struct memleak_counts held;
    int traced = memleak_resource_live("fd", &held) == 0;
    printf("leaked: %d sockets, %d logs\n", leaked_sockets, leaked_logs);
    printf("kernel: %d more open\n", open_now() - before);
    printf("held: %d %lld %lld\n", traced ? 0 : -1, (long long)held.blocks, (long long)held.bytes);
    return 0;
}
