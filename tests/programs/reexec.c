/* A program that re-executes itself through /proc/self/exe (as Chromium's
 * zygote, runc and many Go programs do), its argv[0] the proc path: the
 * second image leaks 321 bytes and exits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((noinline)) void *site_reexec(size_t n) { return malloc(n); }

static void *volatile keep;

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "again") == 0) {
        keep = site_reexec(321);
        printf("re-executed %d\n", (int)getpid());
        return 0;
    }
    execl("/proc/self/exe", "/proc/self/exe", "again", (char *)NULL);
    perror("execl");
    return 1;
}
