/* Allocates, says so, then waits to be killed (or execs when asked). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"

__attribute__((noinline)) void *site_spin(void) { return malloc(6060); }

int main(int argc, char **argv)
{
    site_spin();
    checkpoint("ready");
    if (argc > 2 && strcmp(argv[1], "exec") == 0)
        execv(argv[2], argv + 2);
    if (argc > 1 && strcmp(argv[1], "abort") == 0)
        abort();
    if (argc > 1 && strcmp(argv[1], "_exit") == 0)
        _exit(5);
    if (argc > 1 && strcmp(argv[1], "SIGSEGV") == 0)
        *(volatile int *)(argv[0] - (long)argv[0]) = 1; /* a store through NULL */
    checkpoint("second");
    return 0;
}
