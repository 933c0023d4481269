/* Two suspects of different weight for the ranking (issue #28 item 12):
 *   site_startup_lost  one 432-byte block lost at start-up: definitely lost, never grows
 *   site_steady        1 MiB every round, kept in a table: still reachable, grows in every interval
 *   site_small_grower  48 bytes every round, kept: grows in every interval, a thousandth of the above
 * A report is taken at each round's checkpoint (one of them a scan). */
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"

#define ROUNDS 6

__attribute__((noinline)) void *site_startup_lost(size_t n) { return malloc(n); }
__attribute__((noinline)) void *site_steady(size_t n) { return malloc(n); }
__attribute__((noinline)) void *site_small_grower(size_t n) { return malloc(n); }

static void *table[ROUNDS], *small[ROUNDS];

__attribute__((noinline)) static void lose_one(void)
{
    char *p = site_startup_lost(432);
    memset(p, 1, 432);
}

__attribute__((noinline)) static void scrub_stack(void)
{
    volatile char junk[4096];
    memset((char *)junk, 0, sizeof junk);
}

int main(void)
{
    lose_one();
    scrub_stack();
    for (int round = 0; round < ROUNDS; round++) {
        table[round] = site_steady(1 << 20);
        memset(table[round], 2, 1 << 20);
        small[round] = site_small_grower(48);
        checkpoint("round");
    }
    for (int round = 0; round < ROUNDS; round++)
        free(table[round]);
    free(small[ROUNDS - 1]);  /* the rest stays reachable from small[] */
    return 0;
}
