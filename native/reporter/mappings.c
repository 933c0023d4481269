/* How much of each stack's anonymous mappings the program ever touched:
 * a mapping is address space until a page is written, and a 370 MB buffer
 * pool of which 12 MB was used is not 370 MB of memory.  Reporter side: it
 * reads the hook's table of mappings out of the program (shm_layout.h
 * region_table) and asks /proc/PID/pagemap which of their pages are present
 * or swapped out.  The table is read without a lock while the program may
 * change it, so everything read is checked and bounded like hostile input:
 * a torn read miscounts one report, it never reads past what is asked. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../shm_layout.h"
#include "world.h"

#define EXPORT __attribute__((visibility("default")))
#define PAGE 4096ull
#define MAX_REGIONS (1u << 22)   /* more than any program maps; a bigger count is damage */
#define BATCH 2048               /* regions read per process_vm_readv */
#define USER_TOP (1ull << 57)    /* above every user address, 5-level tables included */

struct region_words {
    uint64_t start, end;
    uint32_t stack, pad;
};
_Static_assert(sizeof(struct region_words) == MLK_REGION_BYTES, "shm_layout.h region");

/* Pages of [lo, hi) present or swapped out; *budget counts pages looked at.
 * -1 when pagemap cannot be read there, -2 when the budget runs out. */
static int64_t touched_pages(int pagemap, uint64_t lo, uint64_t hi, int64_t *budget)
{
    uint64_t entries[512];
    int64_t touched = 0;
    for (uint64_t page = lo / PAGE, last = hi / PAGE; page < last;) {
        size_t want = last - page < 512 ? (size_t)(last - page) : 512;
        if (*budget < (int64_t)want)
            return -2;
        ssize_t n = pread(pagemap, entries, want * 8, (off_t)(page * 8));
        if (n <= 0)
            return -1;
        *budget -= n / 8;
        for (ssize_t i = 0; i < n / 8; i++)
            touched += (entries[i] >> 62) != 0; /* bit 63 present, 62 swapped */
        page += (uint64_t)n / 8;
    }
    return touched;
}

/* Adds to touched[s] the bytes of stack s's mappings ever touched, for
 * stacks below nstacks (the segment's stacks: their kinds), and to
 * sums[3 * kind ...] the mapped bytes, mappings and touched bytes of each
 * MLK_KIND_* (what the report's header says).  max_pages bounds the work
 * (pages looked at).  Returns the number of mappings measured; -1 (errno
 * set) when the table or pagemap cannot be read (the process is gone, or
 * not ours to read); -2 when max_pages ran out first (counts partial). */
EXPORT int64_t mlk_rc_touched(int pid, uint64_t table, const struct mlk_stack *stacks, int64_t nstacks,
                              int64_t *touched, int64_t *sums, int64_t max_pages)
{
    uint64_t words[2] = {0, 0}; /* the region array, its count */
    if (!table)
        return errno = EINVAL, -1;
    errno = 0;
    if (mlk_read_mem(pid, table, words, sizeof words) != sizeof words)
        return errno = errno == ESRCH || errno == EPERM ? errno : EFAULT, -1;
    uint64_t array = words[0], count = words[1];
    if (count > MAX_REGIONS)
        return errno = EINVAL, -1;
    if (!count)
        return 0;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/pagemap", pid);
    int pagemap = open(path, O_RDONLY | O_CLOEXEC);
    if (pagemap < 0)
        return -1;
    struct region_words *batch = malloc(BATCH * sizeof *batch);
    if (!batch) {
        close(pagemap);
        return errno = ENOMEM, -1;
    }
    int64_t measured = 0, budget = max_pages, result = 0;
    for (uint64_t at = 0; at < count && result == 0; at += BATCH) {
        uint64_t n = count - at < BATCH ? count - at : BATCH;
        size_t want = (size_t)n * sizeof *batch;
        if (mlk_read_mem(pid, array + at * sizeof *batch, batch, want) != want)
            memset(batch, 0, want); /* the array moved under us: nothing from this batch */
        for (uint64_t i = 0; i < n; i++) {
            const struct region_words *r = &batch[i];
            if (r->start >= r->end || r->end > USER_TOP || (r->start | r->end) % PAGE ||
                (int64_t)r->stack >= nstacks)
                continue;
            int64_t pages = touched_pages(pagemap, r->start, r->end, &budget);
            if (pages == -2) {
                result = -2;
                break;
            }
            if (pages < 0)
                continue; /* unreadable there: not counted */
            touched[r->stack] += pages * (int64_t)PAGE;
            unsigned kind = __atomic_load_n(&stacks[r->stack].kind, __ATOMIC_RELAXED);
            if (kind <= MLK_KIND_SHARED) {
                sums[3 * kind] += (int64_t)(r->end - r->start);
                sums[3 * kind + 1]++;
                sums[3 * kind + 2] += pages * (int64_t)PAGE;
            }
            measured++;
        }
    }
    free(batch);
    close(pagemap);
    return result ? result : measured;
}
