/* One function whose CFA program is long (~5 KB), allocating from 512 call
 * sites: each call passes two arguments on the stack, so the CFA's offset
 * changes around every call and each return address has a rule of its own
 * (its CFA 16 bytes further than the function's body).  The unwinder works
 * out a long program's rules from marks it left on one run to its end
 * (native/hook/unwind_cfi.c): the stacks must be libgcc's.  The sites are
 * asked in a shuffled order, so that rules are wanted before, between and
 * after the marks.
 *
 * Site i keeps ROUNDS blocks of 16 + i bytes; nothing is freed.
 * Checkpoint "done" after the rounds. */
#include <stdlib.h>

#include "checkpoint.h"
#define ROUNDS 3
#define SITES 512

static void *kept[SITES * ROUNDS];
static int nkept;

__attribute__((noipa)) static void *grab(int site, long a, long b, long c, long d, long e, long x, long y)
{
    return malloc(16 + (size_t)site + (size_t)(a + b + c + d + e + x + y - 28));
}

#define CASE(n) case n: return grab(n, 1, 2, 3, 4, 5, 6, 7);
#define CASES8(n) CASE(n##0) CASE(n##1) CASE(n##2) CASE(n##3) CASE(n##4) CASE(n##5) CASE(n##6) CASE(n##7)
#define CASES64(n) CASES8(n##0) CASES8(n##1) CASES8(n##2) CASES8(n##3) CASES8(n##4) CASES8(n##5) CASES8(n##6) CASES8(n##7)

/* (Octal case labels: 0000-0777.) */
__attribute__((noipa)) static void *big(int i)
{
    switch (i) {
        CASES64(00) CASES64(01) CASES64(02) CASES64(03) CASES64(04) CASES64(05) CASES64(06) CASES64(07)
    }
    return NULL;
}

int main(void)
{
    for (int r = 0; r < ROUNDS; r++)
        for (int k = 0; k < SITES; k++)
            kept[nkept++] = big((k * 37 + 11) % SITES);
    checkpoint("done");
    return kept[0] == NULL;
}
