/* Resources other than memory, named by the program (#30): "gpu-buffer"s
 * by handle with their bytes as weight, from two call sites --
 * upload_texture keeps every other one, make_scratch gives all back -- and
 * "connection"s by address, counted one each.  Each round ends with a
 * synchronous report.  Prints what memleak_resource_live says.
 *
 *   gpubuffers [ROUNDS]   default 6
 */
#include <stdio.h>
#include <stdlib.h>

#include "memleak.h"

static unsigned long next_handle = 100;

__attribute__((noinline)) static unsigned long upload_texture(unsigned long bytes)
{
    unsigned long h = next_handle++;
    memleak_resource_acquire("gpu-buffer", h, bytes);
    return h;
}

__attribute__((noinline)) static void make_scratch(void)
{
    unsigned long h = next_handle++;
    memleak_resource_acquire("gpu-buffer", h, 4096);
    memleak_resource_release("gpu-buffer", h);
}

__attribute__((noinline)) static void *connect_peer(void)
{
    void *peer = malloc(16);
    memleak_resource_acquire("connection", (uintptr_t)peer, 1);
    return peer;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 6;
    for (int round = 0; round < rounds; round++) {
        unsigned long h = upload_texture(1 << 20);
        if (round % 2)
            memleak_resource_release("gpu-buffer", h);
        make_scratch();
        void *peer = connect_peer();
        memleak_resource_release("connection", (uintptr_t)peer);
        free(peer);
        memleak_report(NULL, NULL, 0);
    }
    struct memleak_counts gpu, conn;
    int traced = memleak_resource_live("gpu-buffer", &gpu);
    memleak_resource_live("connection", &conn);
    printf("gpu-buffer: %d %lld %lld\n", traced, (long long)gpu.bytes, (long long)gpu.blocks);
    printf("connection: %lld %lld\n", (long long)conn.bytes, (long long)conn.blocks);
    return 0;
}
