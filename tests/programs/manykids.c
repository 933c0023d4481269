/* A parent that forks many short-lived children, as a shell or a build
 * does: child i leaks 100 + i bytes from site_child and exits with 3.  The
 * parent runs up to four at a time (or argv[2]). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) void *site_child(size_t n) { return malloc(n); }
__attribute__((noinline)) void *site_parent(void) { return malloc(4321); }

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 40;
    int at_once = argc > 2 ? atoi(argv[2]) : 4;
    int running = 0, failed = 0, status;
    site_parent();
    for (int i = 0; i < n; i++) {
        if (running == at_once) {
            wait(&status);
            failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 3;
            running--;
        }
        fflush(stdout); /* else every child would print it again */
        pid_t pid = fork();
        if (pid == 0) {
            site_child(100 + i);
            exit(3);
        }
        if (pid < 0)
            return 2;
        printf("%d %d\n", pid, i);
        running++;
    }
    while (running--) {
        wait(&status);
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 3;
    }
    fflush(stdout);
    return failed;
}
