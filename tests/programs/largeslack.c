/* Slack of large blocks, which glibc serves by mappings of their own
 * (128 KiB and more): site_large makes 100 blocks of 128 KiB to 530 KiB,
 * keeps them, and prints their slack as glibc's malloc_usable_size says
 * it bare ("large-slack N": the oracle; under the tracer it leaves the
 * trailer out), then exits. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

#define LARGE 100

static void *large[LARGE];

__attribute__((noinline)) static size_t site_large(void)
{
    size_t slack = 0;
    for (int i = 0; i < LARGE; i++) {
        size_t size = 128 * 1024 + 4093 * (size_t)i;
        large[i] = malloc(size);
        slack += malloc_usable_size(large[i]) - size;
    }
    return slack;
}

int main(void)
{
    size_t slack = site_large();
    printf("large-slack %zu\n", slack);
    return 0;
}
