/* 4,096 call sites, each a function of its own, allocating through one
 * wrapper: 4,096 return addresses one frame above the allocator's caller,
 * whose unwind rules meet in the unwinder's rule cache (64k slots, chosen
 * by a hash: ~128 pairs of these addresses share a slot) and push each
 * other out on every round -- the stacks must stay exact while they do.
 *
 * Site 0xNNN keeps ROUNDS blocks of 16 + (NNN & 63) bytes; nothing is
 * freed.  Checkpoint "done" after the rounds. */
#include <stdlib.h>

#include "checkpoint.h"
#define OPAQUE() __asm__ volatile("" ::: "memory")
#define ROUNDS 3

__attribute__((noipa)) static void *grab(int site)
{
    void *p = malloc(16 + (size_t)(site & 63));
    OPAQUE();
    return p;
}

/* site_NNN (NNN: three hex digits).  Each begins with 0 to 60 bytes of
 * nops, a number as random as its hash: sites of one size would put their
 * return addresses at a fixed step, which the cache's multiplicative hash
 * spreads over distinct slots -- none would meet.  And each has a frame
 * of one of 8 sizes, so that a rule taken for another site's would read
 * the return address from the wrong place. */
#define PAD(n) (8 + (((0x##n * 2654435761u) >> 11) % 8) * 16)
#define SITE(n)                                                                                    \
    __attribute__((noipa)) static void *site_##n(void)                                             \
    {                                                                                              \
        __asm__ volatile(".skip ((0x" #n " * 2654435761) >> 7) % 61, 0x90");                      \
        volatile char pad[PAD(n)];                                                                 \
        pad[0] = 0;                                                                                \
        void *p = grab(0x##n);                                                                     \
        OPAQUE();                                                                                  \
        return p;                                                                                  \
    }
#define SITES16(p)                                                                                 \
    SITE(p##0) SITE(p##1) SITE(p##2) SITE(p##3) SITE(p##4) SITE(p##5) SITE(p##6) SITE(p##7)        \
    SITE(p##8) SITE(p##9) SITE(p##a) SITE(p##b) SITE(p##c) SITE(p##d) SITE(p##e) SITE(p##f)
#define SITES256(p)                                                                                \
    SITES16(p##0) SITES16(p##1) SITES16(p##2) SITES16(p##3) SITES16(p##4) SITES16(p##5)            \
    SITES16(p##6) SITES16(p##7) SITES16(p##8) SITES16(p##9) SITES16(p##a) SITES16(p##b)            \
    SITES16(p##c) SITES16(p##d) SITES16(p##e) SITES16(p##f)
SITES256(0) SITES256(1) SITES256(2) SITES256(3) SITES256(4) SITES256(5) SITES256(6) SITES256(7)
SITES256(8) SITES256(9) SITES256(a) SITES256(b) SITES256(c) SITES256(d) SITES256(e) SITES256(f)

#define REF16(p)                                                                                   \
    site_##p##0, site_##p##1, site_##p##2, site_##p##3, site_##p##4, site_##p##5, site_##p##6,     \
        site_##p##7, site_##p##8, site_##p##9, site_##p##a, site_##p##b, site_##p##c,              \
        site_##p##d, site_##p##e, site_##p##f,
#define REF256(p)                                                                                  \
    REF16(p##0) REF16(p##1) REF16(p##2) REF16(p##3) REF16(p##4) REF16(p##5) REF16(p##6)            \
    REF16(p##7) REF16(p##8) REF16(p##9) REF16(p##a) REF16(p##b) REF16(p##c) REF16(p##d)            \
    REF16(p##e) REF16(p##f)
static void *(*const sites[])(void) = {REF256(0) REF256(1) REF256(2) REF256(3) REF256(4) REF256(5)
                                           REF256(6) REF256(7) REF256(8) REF256(9) REF256(a)
                                               REF256(b) REF256(c) REF256(d) REF256(e) REF256(f)};
#define NSITES (sizeof sites / sizeof sites[0])

static void *kept[ROUNDS][NSITES];

int main(void)
{
    for (int r = 0; r < ROUNDS; r++)
        for (unsigned i = 0; i < NSITES; i++)
            kept[r][i] = sites[i]();
    checkpoint("done");
    return kept[0][0] == NULL;
}
