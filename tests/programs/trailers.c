/* Blocks whose record lives in the block (a trailer in the 16 bytes the
 * tracer adds) next to blocks it never recorded: the program writes every
 * byte malloc_usable_size grants, reallocs a block from before collection
 * started and one from while it was stopped, and realloc(p, 0) frees.  Run
 * with MEMLEAK_CONFIG set (without mtraceinit), so mtrace() starts
 * collection.  The same reports are expected with track=table.  The sized
 * frees (C23's free_sized, free_aligned_sized; the old cfree) are the
 * tracer's, found with dlsym since glibc 2.36 declares none of them. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <mcheck.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SITE __attribute__((noinline))
SITE void *site_before(void) { return malloc(200); }
SITE void *site_usable(void) { return malloc(100); }
SITE void *site_adopt(void *p) { return realloc(p, 300); }
SITE void *site_zero(void) { return realloc(malloc(40), 0); }
SITE void *site_stopped(void) { return malloc(64); }
SITE void *site_grown_while_stopped(void *p) { return realloc(p, 5000); }
SITE void *site_sized(void) { return malloc(70); }

/* Frees three blocks through the sized frees; returns how many were found. */
static int sized_frees(void)
{
    void (*sized)(void *, size_t) = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "free_sized");
    void (*aligned)(void *, size_t, size_t) =
        (void (*)(void *, size_t, size_t))dlsym(RTLD_DEFAULT, "free_aligned_sized");
    void (*old)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "cfree");
    void *a = site_sized(), *b = site_sized(), *c = site_sized();
    sized ? sized(a, 70) : free(a);
    aligned ? aligned(b, 16, 70) : free(b);
    old ? old(c) : free(c);
    return !!sized + !!aligned + !!old;
}

int main(void)
{
    void *before = site_before();
    void *unseen = malloc(10);
    mtrace();                                /* collection starts */
    char *b = site_usable();
    size_t usable = malloc_usable_size(b);
    memset(b, 0xab, usable);                 /* all of it is the program's */
    before = site_adopt(before);             /* now recorded, at this site */
    void *z = site_zero();                   /* realloc(p, 0) frees p: NULL */
    void *d = site_stopped();
    free(unseen);                            /* never recorded: passed on */
    int sized = sized_frees();               /* nothing left of site_sized */
    mtrace();                                /* report 1 */
    muntrace();                              /* report 2, collection stops */
    d = site_grown_while_stopped(d);         /* leaves site_stopped, recorded nowhere */
    mtrace();                                /* collection starts again */
    free(d);
    if (malloc_usable_size(b) != usable)
        return 3;
    for (size_t i = 0; i < usable; i++)
        if ((unsigned char)b[i] != 0xab)
            return 4;
    free(b);
    mtrace();                                /* report 3 */
    printf("usable %d zero %d sized %d\n", usable >= 100 && usable < 100 + 64, z == NULL, sized);
    free(before);
    return 0;
}
