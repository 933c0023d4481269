/* jemalloc's own statistics, asked by the reporter inside the program
 * (docs/memory.md): linked with jemalloc, it keeps 10,000 blocks of 1,000
 * bytes (each a 1,024-byte size class under the tracer: 1,000 and the
 * trailer) of 20,000, then churns one small block every millisecond --
 * the allocations that answer the reporter's ask -- until the test writes
 * a line.  Then it prints what its own mallctl says (the oracle) and stops
 * at a checkpoint: idle, it can answer no ask. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/select.h>
#include <unistd.h>

#include "checkpoint.h"

int mallctl(const char *name, void *old, size_t *oldlen, void *new_value, size_t newlen);

#define BLOCKS 20000

__attribute__((noinline)) void *site_kept(size_t n) { return malloc(n); }

static size_t stat(const char *name)
{
    size_t v = 0, len = sizeof v;
    return mallctl(name, &v, &len, NULL, 0) == 0 ? v : 0;
}

static int line_waiting(void)
{
    fd_set in;
    FD_ZERO(&in);
    FD_SET(0, &in);
    struct timeval now = {0, 0};
    return select(1, &in, NULL, NULL, &now) > 0;
}

int main(void)
{
    static void *kept[BLOCKS];
    for (int i = 0; i < BLOCKS; i++)
        kept[i] = site_kept(1000);
    for (int i = 0; i < BLOCKS; i += 2)
        free(kept[i]);
    checkpoint("kept");
    while (!line_waiting()) {
        void *volatile churned = malloc(16); /* volatile: a compiler may drop a malloc freed at once */
        free(churned);
        usleep(1000);
    }
    char c;
    while (read(0, &c, 1) == 1 && c != '\n')
        ;
    uint64_t epoch = 1;
    size_t len = sizeof epoch;
    mallctl("epoch", &epoch, &len, &epoch, sizeof epoch);
    char said[256];
    int n = snprintf(said, sizeof said, "jemalloc %zu %zu %zu %zu %zu %zu\n", stat("stats.allocated"),
                     stat("stats.active"), stat("stats.metadata"), stat("stats.resident"),
                     stat("stats.mapped"), stat("stats.retained"));
    if (write(1, said, (size_t)n) != n)
        return 1;
    checkpoint("idle");
    for (int i = 1; i < BLOCKS; i += 2)
        free(kept[i]);
    return 0;
}
