/* A program that tells the leak check about its memory: an object kept on
 * purpose but pointed to by nothing (ignored), a table the program hides
 * from the scan whose pointers are roots (a root region), allocations made
 * while recording is off, and blocks of its own allocator reported the
 * heaptrack way.  Mode "lsan": through LeakSanitizer's and heaptrack's
 * interfaces, by weak references (as code built for them calls them);
 * mode "api": through memleak.h.  The two must give the same report.
 * Mode "late": announces one block, says "ready" and waits for a line (an
 * attach), announces and ends 70,000 more, then one of 4321 bytes it keeps
 * -- the header, which found no tracer at first, must find the attached one
 * without a report or a check to make it look. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "memleak.h"

extern void __lsan_ignore_object(const void *p) __attribute__((weak));
extern void __lsan_register_root_region(const void *p, size_t size) __attribute__((weak));
extern void __lsan_unregister_root_region(const void *p, size_t size) __attribute__((weak));
extern void __lsan_disable(void) __attribute__((weak));
extern void __lsan_enable(void) __attribute__((weak));
extern void heaptrack_malloc(void *ptr, size_t size) __attribute__((weak));
extern void heaptrack_free(void *ptr) __attribute__((weak));

static int lsan;
static uintptr_t hidden_table, hidden_other; /* pointers the scan cannot read */
#define HIDE(p) ((uintptr_t)(p) ^ 0x5a5a5a5a5a5a5a5aull)

static void ignore(const void *p)
{
    if (!lsan)
        memleak_ignore(p);
    else if (__lsan_ignore_object)
        __lsan_ignore_object(p);
}

static void root_region(const void *p, size_t n, int on)
{
    if (!lsan)
        memleak_root_region(p, n, on);
    else if (on && __lsan_register_root_region)
        __lsan_register_root_region(p, n);
    else if (!on && __lsan_unregister_root_region)
        __lsan_unregister_root_region(p, n);
}

static void recording(int on)
{
    if (!lsan)
        memleak_recording(on);
    else if (on && __lsan_enable)
        __lsan_enable();
    else if (!on && __lsan_disable)
        __lsan_disable();
}

struct cached {
    char *child;
    char name[92];
};

__attribute__((noinline)) static void site_ignored(void)
{
    struct cached *c = malloc(sizeof *c);
    c->child = malloc(24); /* reachable through the ignored block */
    ignore(&c->name[10]);  /* a pointer into it is enough */
    memset(&c, 0, sizeof c);
}

__attribute__((noinline)) static void site_ignored_then_freed(void)
{
    char *p = malloc(72);
    ignore(p);
    free(p);
    p = malloc(72); /* most likely the same address: not ignored any more */
    memset(&p, 0, sizeof p);
}

__attribute__((noinline)) static void *site_rooted(void) { return malloc(40); }

__attribute__((noinline)) static void site_not_rooted(void **table) { table[1] = malloc(56); }

__attribute__((noinline)) static void site_root_table(void)
{
    void **table = calloc(8, sizeof *table);
    table[0] = site_rooted();
    hidden_table = HIDE(table);
    root_region(table, 8 * sizeof *table, 1);
    /* a second table, registered and then unregistered: not a root */
    void **other = calloc(8, sizeof *other);
    site_not_rooted(other);
    hidden_other = HIDE(other);
    root_region(other, 8 * sizeof *other, 1);
    root_region(other, 8 * sizeof *other, 0);
    memset(&table, 0, sizeof table);
    memset(&other, 0, sizeof other);
}

/* A root region inside a MAP_SHARED mapping (#64 item 3: never read, though
 * the docs said a root region is read as a root). */
__attribute__((noinline)) static void *site_rooted_shared(void) { return malloc(48); }

__attribute__((noinline)) static void site_shared_root(void)
{
    void **page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED)
        abort();
    page[3] = site_rooted_shared();
    root_region(page, 4096, 1);
    memset(&page, 0, sizeof page);
}

__attribute__((noinline)) static void site_unrecorded(void)
{
    recording(0);
    recording(0); /* nested */
    char *p = malloc(50);
    recording(1);
    char *q = malloc(60);
    recording(1);
    memset(&p, 0, sizeof p);
    memset(&q, 0, sizeof q);
}

__attribute__((noinline)) static void site_lost(void)
{
    char *p = malloc(30);
    memset(&p, 0, sizeof p);
}

static char arena[256];
static void *kept_from_arena;

__attribute__((noinline)) static void site_own_allocator(void)
{
    if (lsan) {
        if (heaptrack_malloc) {
            heaptrack_malloc(arena, 16);
            heaptrack_malloc(arena + 32, 48);
            heaptrack_free(arena + 32);
        }
    } else {
        memleak_malloclike(arena, 16);
        memleak_malloclike(arena + 32, 48);
        memleak_freelike(arena + 32);
    }
    kept_from_arena = arena;
}

static char late[70000];

static int announced_late(void)
{
    char line[16];
    memleak_malloclike(late, 1);
    memleak_freelike(late);
    printf("ready\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
        return 1;
    for (int i = 0; i < 70000; i++) {
        memleak_malloclike(late + i, 1);
        memleak_freelike(late + i);
    }
    memleak_malloclike(late, 4321);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "late"))
        return announced_late();
    lsan = argc > 1 && !strcmp(argv[1], "lsan");
    site_ignored();
    site_ignored_then_freed();
    site_root_table();
    site_shared_root();
    site_unrecorded();
    site_lost();
    site_own_allocator();
    struct memleak_leaks leaks;
    int status = memleak_leak_check(&leaks);
    printf("check: %d definitely %lld %lld reachable %lld %lld\n", status, (long long)leaks.definitely.bytes,
           (long long)leaks.definitely.blocks, (long long)leaks.reachable.bytes,
           (long long)leaks.reachable.blocks);
    return 0;
}
