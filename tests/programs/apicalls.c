/* A program that asks the tracer from its own code (memleak.h): a report
 * written now with a label, the live totals, a savepoint compared and
 * asserted.  It prints what it was told, so that the test compares it with
 * the reports; without the tracer it runs the same, its counts 0.
 *
 *   apicalls          the run below
 *   apicalls assert   then leaks one more block after a savepoint and
 *                     asserts nothing was added: aborts under the tracer
 *   apicalls wait     says "ready" and waits for a line first (an attach)
 *   apicalls nasty    asks for one report with a label made to escape the
 *                     report directory and the terminal, and stops */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memleak.h"

static void *kept[64];
static int nkept;

__attribute__((noinline)) void leak_before(void)
{
    for (int i = 0; i < 5; i++)
        kept[nkept++] = malloc(100);
}

__attribute__((noinline)) void leak_between(void)
{
    for (int i = 0; i < 3; i++)
        kept[nkept++] = malloc(1000);
}

__attribute__((noinline)) void churn(void)
{
    for (int i = 0; i < 100; i++)
        free(malloc(64 + i));
}

int main(int argc, char **argv)
{
    char path[4096];
    struct memleak_counts live, added;
    struct memleak_savepoint sp;

    if (argc > 1 && !strcmp(argv[1], "wait")) {
        char line[16];
        printf("ready\n");
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin))
            return 1;
    }
    if (argc > 1 && !strcmp(argv[1], "nasty")) {
        int r = memleak_report("../../etc/x\n\x1b[2J-9", path, sizeof path);
        printf("report nasty: %d %s\n", r, path);
        return 0;
    }
    leak_before();
    int r = memleak_report("before", path, sizeof path);
    printf("report before: %d %s\n", r, path);
    memleak_save(&sp);
    leak_between();
    churn();
    r = memleak_since(&sp, &added);
    printf("since: %d %lld %lld\n", r, (long long)added.bytes, (long long)added.blocks);
    r = memleak_live(&live);
    printf("live: %d %lld %lld\n", r, (long long)live.bytes, (long long)live.blocks);
    r = memleak_report("after the leak", path, sizeof path);
    printf("report after: %d %s\n", r, path);
    memleak_save(&sp);
    churn();
    MEMLEAK_ASSERT_NOTHING_ADDED(sp); /* churn gives everything back */
    printf("asserted\n");
    fflush(stdout);
    if (argc > 1 && !strcmp(argv[1], "assert")) {
        memleak_save(&sp);
        kept[nkept++] = malloc(77);
        MEMLEAK_ASSERT_NOTHING_ADDED(sp);
        printf("not reached under the tracer\n");
    }
    return 0;
}
