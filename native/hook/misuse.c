/* Misuse of the allocator, seen where the free hooks read a block's
 * trailer: a block freed again, a pointer freed that was never allocated
 * (on the stack, in a module's data, inside a block, a chunk of one of
 * the program's pools), a block freed by another family's call (malloc'd
 * and deleted, new[]'d and deleted, aligned-new'd and deleted unaligned),
 * a sized delete whose size is not the block's, an aligned delete whose
 * alignment is not the block's.  Each is recorded in the segment with
 * the misusing call's stack and the block's allocation stack, counted
 * per (kind, call, both stacks): the reports list them, with valgrind's
 * words.
 *
 * What it costs: nothing on a good free but the compare of the trailer's
 * family bits, which the free reads anyway (and, for a sized or aligned
 * delete, of its size or alignment); a misuse takes a backtrace and a
 * short locked search.
 *
 * What it cannot see (no shadow memory): a second free after the
 * allocator handed the memory out again, or merged it with a neighbour
 * (glibc then aborts on its own, "double free or corruption") -- unless
 * the quarantine (quarantine.c) still held the block, which it then names
 * with the first free's stack;
 * a free of a pointer into a block's middle whose preceding word looks
 * like a chunk header, or more than INTERIOR_REACH before the block's
 * end; blocks made without a trailer (sampling, track=table, before
 * collection, a routed allocator's). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "api/custom.h"
#include "hooks.h"

static mlk_lock_t lock;

/* One misuse as seen, before it is counted. */
struct seen {
    int kind, call, family;  /* MLK_MISUSE_*, MLK_CALL_*, MLK_FAMILY_* (255: not known) */
    uint32_t alloc_stack;    /* MLK_NO_STACK: not known */
    uint32_t where;          /* invalid frees: MLK_WHERE_* */
    uint32_t first_free;     /* the quarantine's first free of it, or MLK_NO_STACK */
    uint32_t align, given_align;
    uint64_t size, given, offset;
};

/* Whether record m is the same misuse as s at stack `at`: the same kind,
 * call, stacks and, for a size or alignment mismatch, the same values. */
static int same(const struct mlk_misuse *m, const struct seen *s, uint32_t at)
{
    if (m->kind != s->kind || m->call != s->call || m->family != s->family || m->at_stack != at ||
        m->alloc_stack != s->alloc_stack || m->where != s->where)
        return 0;
    if (s->kind == MLK_MISUSE_SIZE)
        return m->given == s->given;
    if (s->kind == MLK_MISUSE_ALIGN)
        return m->align == s->align && m->given_align == s->given_align;
    return 1;
}

/* The record for this misuse, made if new; NULL when the table is full. */
static struct mlk_misuse *record_of(struct mlk_header *h, const struct seen *s, uint32_t at)
{
    uint32_t n = h->misuse_used;
    for (uint32_t i = 0; i < n && i < MLK_MISUSE_MAX; i++)
        if (same(&h->misuse[i], s, at))
            return &h->misuse[i];
    if (n >= MLK_MISUSE_MAX)
        return NULL;
    struct mlk_misuse *m = &h->misuse[n];
    m->kind = (uint16_t)s->kind;
    m->call = (uint8_t)s->call;
    m->family = (uint8_t)s->family;
    m->at_stack = at;
    m->alloc_stack = s->alloc_stack;
    m->where = s->where;
    m->size = s->size;
    m->given = s->given; /* an invalid free's: the first such address */
    m->offset = s->offset;
    m->align = s->align;
    m->given_align = s->given_align;
    __atomic_store_n(&m->state, MLK_MISUSE_READY, __ATOMIC_RELEASE);
    __atomic_store_n(&h->misuse_used, n + 1, __ATOMIC_RELEASE);
    return m;
}

/* Records one misuse at the caller's stack (the walk skips our frames). */
static void record(const struct seen *s)
{
    BEGIN_HOOK();
    struct mlk_header *h = mlk_seg;
    __atomic_add_fetch(&h->misuse_total, 1, __ATOMIC_RELAXED);
    uint32_t at = mlk_current_stack(MLK_KIND_FREE_SITE);
    mlk_lock(&lock);
    struct mlk_misuse *m = record_of(h, s, at);
    if (m) {
        if (!m->first_free && s->first_free != MLK_NO_STACK)
            m->first_free = s->first_free + 1;
        __atomic_add_fetch(&m->count, 1, __ATOMIC_RELAXED);
    } else {
        __atomic_add_fetch(&h->misuse_dropped, 1, __ATOMIC_RELAXED);
    }
    mlk_unlock(&lock);
    END_HOOK();
}

static int watching(void)
{
    return mlk_seg && mlk_collecting && mlk_seg->misuse_mode != MLK_MISUSE_OFF;
}

/* An aligned new's family is its unaligned one's, aligned: the two differ
 * in alignment only (valgrind's "Mismatched new/delete alignment"), not
 * in kind. */
static uint32_t unaligned(uint32_t family)
{
    return mlk_family_is_aligned(family) ? family - (MLK_FAMILY_NEW_ALIGNED - MLK_FAMILY_NEW) : family;
}

void mlk_misuse_trailed(uint64_t meta, int call, size_t given, size_t align)
{
    uint32_t stack = mlk_trailer_stack_of(meta);
    if (stack == MLK_TRAILER_UNCOUNTED || mlk_in_hook || !watching())
        return; /* a block not counted keeps no family; our own frees are not the program's */
    uint32_t family = mlk_trailer_family_of(meta), expected = FAMILY_FREED_BY(call);
    struct seen s = {.call = call, .family = (int)family, .alloc_stack = stack, .first_free = MLK_NO_STACK,
                     .size = mlk_trailer_size_of(meta), .align = (uint32_t)mlk_trailer_align_of(meta)};
    if (family != expected) {
        if (mlk_seg->misuse_no_families)
            return;
        s.kind = unaligned(family) == unaligned(expected) ? MLK_MISUSE_ALIGN : MLK_MISUSE_MISMATCH;
        s.given_align = (uint32_t)align;
        record(&s);
        return;
    }
    if (given != MLK_NO_SIZE && given != s.size) {
        s.kind = MLK_MISUSE_SIZE, s.given = given;
        record(&s);
        s.given = 0;
    }
    if (align && align != s.align) {
        s.kind = MLK_MISUSE_ALIGN, s.given_align = (uint32_t)align;
        record(&s);
    }
}

/* The allocation stack and size a freed block's trailer still holds, if
 * they are plausible (glibc's tcache writes its key over the meta word of
 * the smallest blocks once they are freed). */
static int freed_meta(uint64_t meta, size_t usable, uint32_t *stack, uint64_t *size, int *family)
{
    uint64_t sz = mlk_trailer_size_of(meta);
    uint32_t id = mlk_trailer_stack_of(meta);
    int fam = (int)mlk_trailer_family_of(meta);
    if (id == MLK_TRAILER_UNCOUNTED || fam > MLK_FAMILY_NEW_ARRAY_ALIGNED || id >= mlk_seg->stacks_used ||
        sz + MLK_TRAILER_SIZE > usable || usable - (sz + MLK_TRAILER_SIZE) >= 32)
        return 0;
    *stack = id, *size = sz, *family = fam;
    return 1;
}

/* The calling thread's stack, [lo, hi), asked once per thread (glibc
 * reads /proc/self/maps for the main thread's: under the guard, its own
 * allocations and descriptors pass straight through). */
static __thread uint64_t stack_lo __attribute__((tls_model("initial-exec")));
static __thread uint64_t stack_hi __attribute__((tls_model("initial-exec")));

static int on_this_threads_stack(uint64_t a)
{
    if (!stack_hi) {
        pthread_attr_t attr;
        void *lo = NULL;
        size_t size = 0;
        BEGIN_HOOK();
        if (pthread_getattr_np(pthread_self(), &attr) == 0) {
            pthread_attr_getstack(&attr, &lo, &size);
            pthread_attr_destroy(&attr);
        }
        END_HOOK();
        stack_lo = (uint64_t)lo;
        stack_hi = size ? (uint64_t)lo + size : 1;
    }
    return a >= stack_lo && a < stack_hi;
}

/* How far past a pointer the search for the block around it reads: a
 * pointer further than this before its block's end is not named. */
#define INTERIOR_REACH (64 * 1024)
#define WINDOW 1024

/* Copies n bytes at `from` without faulting on an unmapped or unreadable
 * page (the kernel copies, and says how much it could); -1 if the kernel
 * will not (a sandbox's filter). */
static long read_own(void *to, uint64_t from, size_t n)
{
    struct iovec local = {to, n}, remote = {(void *)from, n};
    return mlk_syscall6(SYS_process_vm_readv, mlk_getpid(), (long)&local, 1, (long)&remote, 1, 0);
}

/* misuse=hold's guarded reads (mlk.h).  Whether [a, a + n) can be read
 * is asked of the kernel -- a copy of it that fails rather than faults --
 * except inside the main heap as brk left it, mapped from its start
 * (sbrk(0) at start-up) to today's break: glibc's own chunks of the main
 * arena are there, and a free of one pays no system call.  (A chunk
 * merged into the top and the top trimmed by another thread between the
 * two looks is the one race left: a double free past the quarantine,
 * freed while another thread's free shrinks the heap below it.) */
int mlk_reads_guarded;
static uint64_t heap_lo;
static int readable_unknown; /* the kernel refused the copy (a sandbox): read as before */

void mlk_misuse_guard_reads(void)
{
    heap_lo = (uint64_t)sbrk(0);
    mlk_reads_guarded = 1;
    mlk_fast_off_set(MLK_FAST_GUARDED, 1);
}

/* Whether the 16 bytes at a (a chunk header, a trailer) can be read. */
static int readable(uint64_t a)
{
    uint64_t buf[2];
    if (a >= heap_lo && a + sizeof buf <= (uint64_t)sbrk(0) && a + sizeof buf > a)
        return 1;
    long got = read_own(buf, a, sizeof buf);
    if (got == -EFAULT || (got >= 0 && got < (long)sizeof buf))
        return 0;
    if (got < 0 && !__atomic_exchange_n(&readable_unknown, 1, __ATOMIC_RELAXED))
        mlk_warn("misuse=hold cannot ask the kernel whether a freed pointer can be read (process_vm_readv "
                 "refused): a free of an unmapped address faults as it would bare", "", "");
    return 1;
}

int mlk_block_readable(const void *p)
{
    uint64_t a = (uint64_t)p;
    if (a < 16 || !readable(a - 16)) /* the chunk header */
        return 0;
    if (!mlk_glibc_heap)
        return 1; /* another allocator's header is its own to read */
    size_t usable = mlk_glibc_usable(p);
    _Static_assert(MLK_TRAILER_SIZE == 16, "readable() reads a trailer's 16 bytes");
    return usable < MLK_TRAILER_SIZE || readable(a + usable - MLK_TRAILER_SIZE);
}

/* Whether the two words at w are the trailer of a live counted block that
 * starts before p and whose chunk p lies in; its start and meta then. */
static int encloses(const uint64_t *w, uint64_t at, uint64_t p, uint64_t *start, uint64_t *meta)
{
    uint64_t b = w[1] ^ mlk_trailer_key, size = mlk_trailer_size_of(w[0]);
    uint32_t stack = mlk_trailer_stack_of(w[0]);
    if (b >= p || (b & 15) || stack == MLK_TRAILER_UNCOUNTED || stack >= mlk_seg->stacks_used ||
        mlk_trailer_family_of(w[0]) > MLK_FAMILY_NEW_ARRAY_ALIGNED || b + size > at ||
        at - (b + size) >= 4096 + 32) /* a mapped chunk's slack is under a page */
        return 0;
    *start = b, *meta = w[0];
    return 1;
}

/* The live block with a trailer that p points into, not at its start:
 * found by its trailer -- the first after p whose check word names a
 * block starting before p -- read forward from p, at most INTERIOR_REACH
 * bytes, never past what can be read.  Trailers of glibc's chunks sit 8
 * bytes off 16 (16 for a mapped chunk): every word is tried. */
static int enclosing_block(uint64_t p, uint64_t *start, uint64_t *meta)
{
    uint64_t buf[(WINDOW + MLK_TRAILER_SIZE) / 8];
    uint64_t from = p & ~7ull;
    for (uint64_t off = 0; off < INTERIOR_REACH; off += WINDOW) {
        long got = read_own(buf, from + off, sizeof buf);
        if (got < (long)MLK_TRAILER_SIZE)
            return 0;
        for (long i = 0; (i + 2) * 8 <= got; i++)
            if (encloses(&buf[i], from + off + (uint64_t)i * 8, p, start, meta))
                return 1;
        if (got < (long)sizeof buf)
            return 0;
    }
    return 0;
}

/* What an invalid free's pointer is: on the stack, a global, one of the
 * program's own blocks, inside a block, or no block glibc could have made
 * (usable: its chunk header's reading; 0 if implausible; wild: not even
 * readable); 0 when it is not ours to judge (another allocator's block, or
 * one from before collection started). */
static uint32_t classify(uint64_t a, size_t usable, int wild, struct seen *s)
{
    if (on_this_threads_stack(a))
        return MLK_WHERE_STACK;
    if (mlk_modules_cover(&a, 1))
        return MLK_WHERE_GLOBAL;
    uint32_t custom = mlk_custom_block_at((void *)a, &s->alloc_stack, &s->size);
    if (custom == MLK_WHERE_CUSTOM_BLOCK)
        s->family = MLK_BLOCK_CUSTOM;
    if (custom)
        return custom;
    if (wild)
        return MLK_WHERE_NOT_A_BLOCK; /* no allocator made a block there */
    if (!mlk_glibc_heap || usable)
        return 0;
    uint64_t start, meta;
    if (enclosing_block(a, &start, &meta)) {
        s->alloc_stack = mlk_trailer_stack_of(meta);
        s->family = (int)mlk_trailer_family_of(meta);
        s->size = mlk_trailer_size_of(meta);
        s->offset = a - start;
        return MLK_WHERE_INTERIOR;
    }
    return MLK_WHERE_NOT_A_BLOCK;
}

int mlk_misuse_untrailed(void *p, int call)
{
    if (mlk_in_hook || !mlk_trailer_key || mlk_sample_bytes)
        return 0;
    int watch = watching(), hold = watch && mlk_seg->misuse_mode == MLK_MISUSE_HOLD;
    if (!watch && !mlk_quarantine_cap)
        return 0;
    /* The hook already read p's usable size this way (to look for a
     * trailer): reading it again reads nothing new -- unless p cannot be
     * read at all (misuse=hold's guard said so): then it is no block. */
    int wild = mlk_reads_guarded && !mlk_block_readable(p);
    size_t usable = wild ? 0 : block_usable(p);
    struct seen s = {.call = call, .family = 255, .alloc_stack = MLK_NO_STACK, .first_free = MLK_NO_STACK};
    if (usable >= MLK_TRAILER_SIZE) {
        struct mlk_trailer *t = mlk_trailer_at(p, usable);
        if (t->check == ((uint64_t)p ^ mlk_trailer_key ^ MLK_TRAILER_FREED)) {
            int held = mlk_quarantine_cap && mlk_quarantine_holds(p, &s.first_free);
            if (watch) {
                s.kind = MLK_MISUSE_DOUBLE_FREE;
                freed_meta(t->meta, usable, &s.alloc_stack, &s.size, &s.family);
                record(&s);
            }
            return held || hold; /* a held block is live to the allocator: never passed on */
        }
    }
    if (!watch)
        return 0;
    BEGIN_HOOK();
    s.where = classify((uint64_t)p, usable, wild, &s);
    END_HOOK();
    if (!s.where)
        return 0;
    /* A malloc-like block of the program's own freed by free(): valgrind
     * calls it a mismatch, the rest invalid frees. */
    s.kind = s.where == MLK_WHERE_CUSTOM_BLOCK ? MLK_MISUSE_MISMATCH : MLK_MISUSE_INVALID_FREE;
    s.given = (uint64_t)p;
    record(&s);
    return hold;
}

void mlk_misuse_lock_for_fork(int acquire)
{
    mlk_lock_across_fork(&lock, acquire);
    mlk_quarantine_lock_for_fork(acquire);
}

/* Whether every global operator new and delete the program calls is ours
 * (then a block's family is what made it): asked as collection starts. */
void mlk_misuse_segment_made(void)
{
    static const char *const names[] = {"_Znwm",   "_Znam",   "_ZdlPv",  "_ZdaPv",
                                        "_ZdlPvm", "_ZdaPvm", "_ZnwmSt11align_val_t", "_ZnamSt11align_val_t",
                                        "_ZdlPvSt11align_val_t", "_ZdaPvSt11align_val_t"};
    const void *mine, *theirs;
    if (!mlk_object_of((void *)&mlk_misuse_segment_made, &mine, NULL))
        return;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *f = dlsym(RTLD_DEFAULT, names[i]);
        if (f && mlk_object_of(f, &theirs, NULL) && theirs != mine) {
            mlk_seg->misuse_no_families = 1;
            return;
        }
    }
}
