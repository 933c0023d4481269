/* Fingerprints of stack words: how remembered walks (unwind_walks.h) and
 * paths (unwind_paths.h) check, in one pass and one cache line, that every
 * word a walk read still holds the value it read.  Included by unwind.c
 * alone, inside its x86-64 part, before both. */
#ifndef MLK_UNWIND_WORDS_H
#define MLK_UNWIND_WORDS_H

/* ---- fingerprints of stack words -------------------------------------------
 * Each value goes into the fingerprint by a step that is a bijection of the
 * value for a given fingerprint and of the fingerprint for a given value --
 * so words that differ in one place never match, in two or more with odds
 * of 2^-64 -- two words a multiplication: the fingerprint rotated (so that
 * its high bits reach the low ones), ^ a, times k, + b.  (b is multiplied
 * in by the next step's; two words of one step that differ both cancel
 * only where (x ^ a) * k - (x ^ a') * k = b' - b, as with a second
 * multiplication after the add, which was one more instruction a pair.
 * One odd constant for every step: one register held through the loop.) */
#define WORDS_K 0x9fb21c651e98df25ull
static inline uint64_t words_mix2(uint64_t h, uint64_t a, uint64_t b)
{
    return ((h << 31 | h >> 33) ^ a) * WORDS_K + b;
}

static inline uint64_t words_mix1(uint64_t h, uint64_t a)
{
    h = (h ^ a) * WORDS_K;
    return h << 31 | h >> 33;
}

/* The fingerprint of the n words at `at` (eighths above sp), from h on: the
 * odd one first, then two at a time -- four a turn of the loop (a pair
 * left over first), one pointer step and test for four words: cc1's paths
 * check ~13 words. */
#define WORD_AT(i) (*(const uint64_t *)(sp + (uint64_t)at[i] * 8))
static inline uint64_t words_fingerprint(uint64_t h, const uint16_t *at, unsigned n, uint64_t sp)
{
    const uint16_t *end = at + n;
    if (n & 1)
        h = words_mix1(h, WORD_AT(0)), at++;
    if (n & 2)
        h = words_mix2(h, WORD_AT(0), WORD_AT(1)), at += 2;
    for (; at < end; at += 4) {
        h = words_mix2(h, WORD_AT(0), WORD_AT(1));
        h = words_mix2(h, WORD_AT(2), WORD_AT(3));
    }
    return h;
}

/* The fingerprint's first WORDS_LEAD words, straight-line (words_fingerprint
 * mixes an even number in the same pairs): a check of the fingerprint so
 * far can then turn a path away before the rest is read (path_find). */
#define WORDS_LEAD 8
static inline __attribute__((always_inline)) uint64_t words_lead(uint64_t h, const uint16_t *at, uint64_t sp)
{
#pragma GCC unroll 8
    for (int i = 0; i < WORDS_LEAD; i += 2)
        h = words_mix2(h, WORD_AT(i), WORD_AT(i + 1));
    return h;
}

/* The same of values given in a list (when a path or a walk's list is written). */
static uint64_t values_fingerprint(uint64_t h, const uint64_t *v, unsigned n)
{
    unsigned i = 0;
    if (n & 1)
        h = words_mix1(h, v[i++]);
    for (; i < n; i += 2)
        h = words_mix2(h, v[i], v[i + 1]);
    return h;
}

#endif
