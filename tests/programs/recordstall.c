/* For the event log's full pool (tests/test_events.py): "ready", then at
 * a line on stdin N malloc/free pairs, "done" -- while the test holds the
 * reporter stopped, so that no page of the pool is freed. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) void churn(long n)
{
    for (long i = 0; i < n; i++) {
        char *volatile p = malloc(64);
        p[0] = (char)i;
        free(p);
    }
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        return 1;
    churn(n);
    printf("done\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
        return 1;
    return 0;
}
