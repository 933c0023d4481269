/* Descriptors under threads, fork and exec (#30).
 *
 *   fdchurn threads   8 threads open and close /dev/null 2,000 times each
 *                     (every 7th through fopen/fclose, every 5th through
 *                     dup/close_range) and each keeps 3 open from
 *                     keep_three: 24 held, whatever the interleaving
 *   fdchurn exec      opens one descriptor close-on-exec and one not
 *                     (opened_for_exec), then tries to exec a program that
 *                     is not there: both are still held when it exits
 *   fdchurn fork      opens two (inherited), forks; the child closes one
 *                     and exits, the parent keeps both
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void die(const char *what)
{
    perror(what);
    exit(2);
}

__attribute__((noinline)) static void keep_three(int *kept)
{
    for (int i = 0; i < 3; i++)
        if ((kept[i] = open("/dev/null", O_RDONLY)) < 0)
            die("open");
}

static void *churn(void *arg)
{
    int kept[3];
    for (int i = 0; i < 2000; i++) {
        if (i % 7 == 0) {
            FILE *f = fopen("/dev/null", "r");
            if (!f)
                die("fopen");
            fclose(f);
        } else if (i % 5 == 0) {
            int fd = open("/dev/null", O_RDONLY), copy = dup(fd);
            if (fd < 0 || copy < 0)
                die("dup");
            close(copy);
            close(fd);
        } else {
            int fd = open("/dev/null", O_RDONLY);
            if (fd < 0)
                die("open");
            close(fd);
        }
        if (i == 1000)
            keep_three(kept);
    }
    return arg;
}

__attribute__((noinline)) static void opened_for_exec(void)
{
    if (open("/dev/null", O_RDONLY | O_CLOEXEC) < 0 || open("/dev/null", O_RDONLY) < 0)
        die("open");
}

__attribute__((noinline)) static int inherited(void)
{
    int a = open("/dev/null", O_RDONLY), b = open("/dev/null", O_RDONLY);
    if (a < 0 || b < 0)
        die("open");
    return a;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "threads";
    if (strcmp(mode, "threads") == 0) {
        pthread_t t[8];
        for (int i = 0; i < 8; i++)
            pthread_create(&t[i], NULL, churn, NULL);
        for (int i = 0; i < 8; i++)
            pthread_join(t[i], NULL);
        printf("kept 24\n");
    } else if (strcmp(mode, "exec") == 0) {
        opened_for_exec();
        fflush(stdout);
        execl("/nonexistent/program", "program", (char *)NULL);
        printf("exec failed\n");
    } else if (strcmp(mode, "fork") == 0) {
        int a = inherited();
        pid_t child = fork();
        if (child == 0) {
            close(a);
            _exit(0);
        }
        int status;
        waitpid(child, &status, 0);
        printf("child %d\n", (int)child);
    }
    return 0;
}
