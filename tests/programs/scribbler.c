/* A hostile traced program: after it drops to nobody it rewrites its own
 * segment -- the directory its reports go to, its name and its executable's
 * path -- hoping that root's reporter builds paths from them.
 *   scribbler worker NEWDIR NEWNAME NEWEXE   a forked worker does it (root's keeper reports it)
 *   scribbler self   NEWDIR NEWNAME NEWEXE   the process itself does it (root's own reporter)
 * Each replacement is cut or padded to the original's length.
 *   scribbler table   points the segment's address table (which the scan
 *                     reads) at a forgery: a slot array claiming 2^31 slots
 *                     of which one page is mapped, holding garbage, one
 *                     plausible block and one of 512 GiB that starts in it
 *                     and runs on where nothing is mapped; another shard's
 *                     array at the top of
 *                     the address space.  And its table of mappings (which
 *                     every report reads, for touched pages): 2^22 regions
 *                     claimed over one mapped page, the first a terabyte,
 *                     the others garbage.  Its table of announced blocks
 *                     (custom_table): 2^30 nodes claimed over one page,
 *                     garbage, a 512 GiB block, a thousand copies of one
 *                     block spanning a whole mapping.  What it told the
 *                     check (lsan_table): 2^40 ignored pointers at the top
 *                     of the address space, 2^32 root regions of which the
 *                     4,096 read are each the whole address space.  Its
 *                     resource kinds: 2^32 claimed, their names garbage
 *                     without an end (a newline, a header line, bytes
 *                     beyond ASCII), and two stacks' kinds rewritten, one
 *                     to a resource kind never named, one to no kind at
 *                     all.  Its own suppressions: its executable's path
 *                     rewritten as lines of bytes that are not UTF-8 and
 *                     escapes, and pointed at.  Its misuse records: 2^32
 *                     claimed, garbage kinds, calls and stacks, counts at
 *                     2^64 - 1 and baselines above them, and one plausible
 *                     double free counted 5.  And glibc's own heap, which
 *                     every report reads for the arenas' statistics: a
 *                     freed chunk in the unsorted bin whose list link
 *                     points back at itself, a list without an end (put
 *                     right before it goes on).  Prints "forged", waits
 *                     for a line. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm_layout.h"

#define NOBODY 65534

__attribute__((noinline)) void *site_scribbler(size_t n) { return malloc(n); }

static struct mlk_header *own_segment(void)
{
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[512];
    unsigned long lo = 0;
    while (maps && fgets(line, sizeof line, maps))
        if (strstr(line, "memfd:libmemleak") && strstr(line, "rw-s")) {
            lo = strtoul(line, NULL, 16);
            break;
        }
    if (maps)
        fclose(maps);
    return (struct mlk_header *)lo;
}

static void overwrite(struct mlk_header *h, uint32_t off, uint32_t len, const char *with)
{
    char *s = (char *)h + h->strings_off + off;
    size_t n = strlen(with);
    for (uint32_t i = 0; i < len; i++)
        s[i] = i < n ? with[i] : '/';
}

static int scribble(char **argv)
{
    struct mlk_header *h = own_segment();   /* found while still root */
    void *volatile keep = site_scribbler(4321);
    (void)keep;
    if (!h)
        return 4;
    if (getuid() == 0 && (setgid(NOBODY) != 0 || setuid(NOBODY) != 0))
        return 3;
    overwrite(h, h->dir_off, h->dir_len, argv[2]);
    overwrite(h, h->name_off, h->name_len, argv[3]);
    overwrite(h, h->exe_off, h->exe_len, argv[4]);
    printf("scribbled %d uid %d\n", (int)getpid(), (int)geteuid());
    fflush(stdout);
    return 0;
}

static int forge_table(void)
{
    static char in_buffer[256], out_buffer[256]; /* stdio must not allocate while the heap is forged */
    setvbuf(stdin, in_buffer, _IOFBF, sizeof in_buffer);
    setvbuf(stdout, out_buffer, _IOFBF, sizeof out_buffer);
    struct mlk_header *h = own_segment();
    if (!h)
        return 4;
    static uint64_t shards[MLK_ADDR_SHARDS * MLK_ADDR_SHARD_BYTES / 8];
    uint64_t *slots = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (slots == MAP_FAILED)
        return 5;
    munmap((char *)slots + 4096, 4096); /* the rest of the claimed 2^31 slots: unmapped */
    for (int i = 0; i < 512; i += 2) {
        slots[i] = 0x1001ull * (uint64_t)i + 3;     /* unaligned, or below the first page */
        slots[i + 1] = ~0ull;                       /* a size of 2^40 and more */
    }
    void *block = site_scribbler(64);
    slots[100] = (uint64_t)block;                  /* plausible: a real block, stack 12345 */
    slots[101] = (64ull << MLK_ADDR_STACK_BITS) | 12345;
    slots[102] = (uint64_t)(slots + 256);           /* starts in mapped memory, runs 512 GiB past it */
    slots[103] = ((1ull << 39) << MLK_ADDR_STACK_BITS) | 7;
    shards[MLK_ADDR_SLOTS_AT / 8] = (uint64_t)slots;
    shards[MLK_ADDR_MASK_AT / 8] = (1ull << 31) - 1;
    shards[(MLK_ADDR_SHARD_BYTES + MLK_ADDR_SLOTS_AT) / 8] = ~0ull - 4095;
    shards[(MLK_ADDR_SHARD_BYTES + MLK_ADDR_MASK_AT) / 8] = (1ull << 20) - 1;
    shards[(2 * MLK_ADDR_SHARD_BYTES + MLK_ADDR_SLOTS_AT) / 8] = (uint64_t)slots;
    shards[(2 * MLK_ADDR_SHARD_BYTES + MLK_ADDR_MASK_AT) / 8] = 12345; /* not 2^k - 1 */
    h->addr_table = (uint64_t)shards;
    static uint64_t regions_table[2];
    uint64_t *regions = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (regions == MAP_FAILED)
        return 5;
    for (int i = 0; i < 512; i++)
        regions[i] = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1); /* start, end, stack: garbage */
    regions[0] = 4096;                 /* a terabyte, page-aligned, of stack 0 */
    regions[1] = 1ull << 40;
    regions[2] = 0;
    regions_table[0] = (uint64_t)regions;
    regions_table[1] = 1u << 22;       /* over one mapped page */
    h->region_table = (uint64_t)regions_table;
    static uint64_t custom_table[2];
    uint64_t *nodes = mmap(NULL, 8192 * 8, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *span = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (nodes == MAP_FAILED || span == MAP_FAILED)
        return 5;
    for (int i = 0; i < 8192; i++)
        nodes[i] = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 7); /* garbage */
    for (int i = 0; i < 1000; i++) { /* node = 5 words: address, size, stack | pool, ... */
        nodes[5 * i] = (uint64_t)span;
        nodes[5 * i + 1] = 1 << 20;
        nodes[5 * i + 2] = 3;
    }
    nodes[5 * 1000] = (uint64_t)span; /* 512 GiB from a mapped start */
    nodes[5 * 1000 + 1] = 1ull << 39;
    custom_table[0] = (uint64_t)nodes;
    custom_table[1] = 1u << 30;
    h->custom_table = (uint64_t)custom_table;
    static uint64_t lsan_table[4];
    uint64_t *roots = mmap(NULL, 4096 * 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (roots == MAP_FAILED)
        return 5;
    for (int i = 0; i < 4096; i++) {
        roots[2 * i] = (uint64_t)i;
        roots[2 * i + 1] = ~0ull - (uint64_t)i;
    }
    lsan_table[0] = ~0ull - 4095;
    lsan_table[1] = 1ull << 40;
    lsan_table[2] = (uint64_t)roots;
    lsan_table[3] = 1ull << 32;
    h->lsan_table = (uint64_t)lsan_table;
    h->resource_kinds = 0xffffffffu;
    for (size_t i = 0; i < sizeof h->resource_names; i++)
        h->resource_names[i] = (char)("\n# pid: 1 resource-live x: \xff\x1b"[i % 27]);
    struct mlk_stack *stacks = (struct mlk_stack *)((char *)h + h->stacks_off);
    if (h->stacks_used >= 2) {
        stacks[0].kind = MLK_KIND_RESOURCE + MLK_RESOURCE_KINDS - 1;
        stacks[1].kind = 255;
    }
    static const char lines[] = "leak:\xff\xfe*\nleak:\x1b[2J\n\n#\nleak:^$\nrace:\x80\n";
    char *exe = (char *)h + h->strings_off + h->exe_off;
    for (uint32_t i = 0; i < h->exe_len; i++)
        exe[i] = lines[i % (sizeof lines - 1)];
    h->default_suppressions_off = h->exe_off;
    h->default_suppressions_len = h->exe_len;
    for (int i = 0; i < MLK_MISUSE_MAX; i++) {
        struct mlk_misuse *m = &h->misuse[i];
        m->state = i % 3 ? MLK_MISUSE_READY : 0xdead;
        m->kind = (uint16_t)(i * 7919);
        m->call = (uint8_t)(i * 31);
        m->family = (uint8_t)i;
        m->at_stack = i % 2 ? 0xfffffff0u - (uint32_t)i : (uint32_t)(h->stacks_used + (uint64_t)i);
        m->alloc_stack = 0x7fffffffu + (uint32_t)i;
        m->where = 0xffffffffu;
        m->size = ~0ull;
        m->given = ~0ull - (uint64_t)i;
        m->count = ~0ull;
        m->reported = ~0ull - 1;
    }
    struct mlk_misuse *plausible = &h->misuse[1];
    plausible->kind = MLK_MISUSE_DOUBLE_FREE;
    plausible->call = MLK_CALL_FREE;
    plausible->at_stack = 0;
    plausible->alloc_stack = h->stacks_used > 1 ? 1 : 0;
    plausible->count = 5;
    plausible->reported = 0;
    h->misuse_used = 0xffffffffu;
    h->misuse_total = ~0ull;
    h->misuse_dropped = ~0ull;
    /* Too big for the tcache: the freed chunk goes to the unsorted bin (the
     * block after it keeps it from the top); its bk is then made its own. */
    uint64_t *unsorted = site_scribbler(2000), *after = site_scribbler(64);
    free(unsorted);
    uint64_t bk = unsorted[1];
    unsorted[1] = (uint64_t)unsorted - 16;
    printf("forged\n");
    fflush(stdout);
    char line[8];
    int got = fgets(line, sizeof line, stdin) != NULL;
    unsorted[1] = bk;
    free(after);
    return got ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "table") == 0)
        return forge_table();
    if (argc != 5)
        return 2;
    if (strcmp(argv[1], "self") == 0)
        return scribble(argv);
    pid_t child = fork();
    if (child == 0)
        _exit(scribble(argv));
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}
