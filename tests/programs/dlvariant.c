/* A plugin built twice (-DVARIANT=1 and 2) with different code and frame
 * layouts at the same offsets, so that a library loaded where the other
 * one was has different unwind rules at the same addresses. */
#include <stdlib.h>
#include <string.h>

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define LEAK CAT(leak_v, VARIANT)

#if VARIANT == 1
__attribute__((noinline)) void *LEAK(void)
{
    void *p = malloc(100);
    __asm__ volatile("" ::: "memory"); /* not a tail call: keep this frame */
    return p;
}
#else
__attribute__((noinline)) static void *inner(volatile char *scratch)
{
    scratch[0] = 1;
    return malloc(200);
}
__attribute__((noinline)) void *LEAK(void)
{
    volatile char scratch[3000]; /* a big frame: a CFA offset variant 1 does not have */
    memset((char *)scratch, 0, sizeof scratch);
    return inner(scratch);
}
#endif

void *plugin_entry(void)
{
    void *p = LEAK();
    __asm__ volatile("" ::: "memory"); /* not a tail call: keep this frame */
    return p;
}

#ifdef CTOR
/* Built with -DCTOR: the leak happens while the loader is still loading us. */
static void *kept;
__attribute__((noinline)) static void at_load(void)
{
    kept = plugin_entry();
    __asm__ volatile("" ::: "memory");
}
__attribute__((constructor)) static void constructor(void) { at_load(); }
#endif
