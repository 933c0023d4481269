/* A program that checks a region of its own code for leaks (memleak.h):
 * the region loses 3 x 48 bytes (site_lost: no pointer left), keeps
 * 2 x 64 (site_kept: a global points to them) and churns.  It prints what
 * the scope and a leak check found, and what LeakSanitizer's interface,
 * called through a weak reference as test harnesses do, says.  Without
 * the tracer: -1 and zeros, "lsan: absent". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memleak.h"

extern int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

void *volatile kept[2];

__attribute__((noinline)) void site_lost(void)
{
    for (int i = 0; i < 3; i++) {
        void *volatile p = malloc(48);
        memset(p, 0x5a, 48);
        p = NULL;
    }
}

__attribute__((noinline)) void site_kept(void)
{
    for (int i = 0; i < 2; i++)
        kept[i] = malloc(64);
}

__attribute__((noinline)) void churn(void)
{
    for (int i = 0; i < 100; i++)
        free(malloc(32 + i));
}

/* What the region's frames left on the stack: no stale pointer may make a
 * lost block look reachable to the scan. */
__attribute__((noinline)) void wipe_stack(void)
{
    volatile char junk[16384];
    memset((char *)junk, 0, sizeof junk);
}

static void print(const char *what, int r, const struct memleak_counts *c)
{
    printf("%s: %d %lld %lld\n", what, r, (long long)c->bytes, (long long)c->blocks);
}

int main(void)
{
    struct memleak_scope scope;
    struct memleak_scope_result result;
    struct memleak_leaks leaks;

    setvbuf(stdout, NULL, _IONBF, 0); /* no stdio buffer in the heap */
    int r = memleak_scope_begin(&scope, 1);
    site_lost();
    site_kept();
    churn();
    wipe_stack();
    r = memleak_scope_end(&scope, &result);
    print("scope left", r, &result.left);
    print("scope lost", r, &result.lost);
    r = memleak_leak_check(&leaks);
    print("definitely", r, &leaks.definitely);
    print("reachable", r, &leaks.reachable);
    if (__lsan_do_recoverable_leak_check)
        printf("lsan: %d\n", __lsan_do_recoverable_leak_check());
    else
        printf("lsan: absent\n");
    return 0;
}
