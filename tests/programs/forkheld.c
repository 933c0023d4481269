/* A fork held inside its clone system call: glibc's fork() takes every
 * malloc arena lock, makes the clone call, and lets go after it.  Here the
 * clone is held (a seccomp user-notification filter on the main thread,
 * answered by a second thread, its supervisor, once the file named by
 * argv[1] exists; every later clone at once), so an attach finds the main thread blocked in clone with
 * every malloc lock held -- the window a program that forks in a loop
 * opens for a moment on every turn, held open.
 *
 * stdout: "forking" before the fork, "forked" after it; then one line of
 * stdin is read, a block of 100,000 bytes allocated per line "grow", and
 * "bye" on end of input. */
#define _GNU_SOURCE
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *release_file;
static int listener = -1;

static void *supervise(void *unused)
{
    (void)unused;
    while (__atomic_load_n(&listener, __ATOMIC_ACQUIRE) < 0)
        usleep(1000);
    for (int first = 1;; first = 0) { /* every later clone (a tracer's own) let through at once */
        struct seccomp_notif req;
        memset(&req, 0, sizeof req);
        if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0)
            continue; /* (the caller went away meanwhile) */
        while (first && access(release_file, F_OK) != 0)
            usleep(10000);
        struct seccomp_notif_resp resp = {.id = req.id, .flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE};
        ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    release_file = argv[1];
    pthread_t supervisor; /* made before the filter: its own calls are not held */
    pthread_create(&supervisor, NULL, supervise, NULL);
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof code / sizeof code[0], code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        perror("no_new_privs");
        return 2;
    }
    int fd = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    if (fd < 0) {
        perror("seccomp");
        return 2;
    }
    __atomic_store_n(&listener, fd, __ATOMIC_RELEASE);
    printf("forking\n");
    fflush(stdout);
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    waitpid(child, NULL, 0);
    printf("forked\n");
    fflush(stdout);
    char line[64];
    int blocks = 0;
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "grow", 4)) {
            void *volatile p = malloc(100000);
            (void)p;
            blocks++;
        }
        printf("ok %d\n", blocks);
        fflush(stdout);
    }
    printf("bye\n");
    return 0;
}
