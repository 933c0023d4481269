/* For the otel_memory probes (sampled mode): waits for the file named by
 * argv[1] (a profiler attached), then makes 200,000 blocks of 1,000
 * bytes at site_sampled, freeing every other one at once: 100,000 kept. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline)) void *site_sampled(size_t n) { return malloc(n); }

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    while (access(argv[1], F_OK) != 0)
        usleep(10000);
    void *volatile keep;
    for (int i = 0; i < 200000; i++) {
        keep = site_sampled(1000);
        if (i % 2)
            free(keep);
    }
    (void)keep;
    printf("done\n");
    return 0;
}
