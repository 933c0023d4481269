/* Daemonizes the classic way, then allocates at a known site and waits for
 * signals.  argv[1]: a file to write the daemon's pid into. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline)) void *site_daemon(void) { return malloc(5150); }

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    if (fork() > 0)
        return 0; /* the parent returns to the shell */
    setsid();
    if (fork() > 0)
        _exit(0);
    int pidfd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (int fd = 0; fd < 1024; fd++)  /* close every descriptor, one by one */
        if (fd != pidfd)
            close(fd);
    closefrom(pidfd + 1);               /* and the modern way */
    if (chdir("/") != 0)
        return 1;
    site_daemon();
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%d\n", (int)getpid());
    if (write(pidfd, buf, (size_t)n) != n)
        return 1;
    close(pidfd);
    for (;;)
        pause(); /* SIGUSR1 for reports, SIGTERM to stop */
}
