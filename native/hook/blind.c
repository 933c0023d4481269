/* Blind spots: what the hook cannot see, found at start and said -- once on
 * the program's stderr, and in every report's header (the segment's
 * `blind` string), so that `report`, `export` and `check` say it too.  A
 * measuring tool that sees nothing and says nothing is the worst outcome.
 *
 * Today: an allocator that the program's symbol lookups find before ours.
 * An executable that defines malloc itself (Chromium's allocator shim, a
 * static tcmalloc or jemalloc) or a library preloaded ahead of us wins the
 * lookup; every allocation then bypasses our hooks.  Asked the way the
 * program's own lookups ask (RTLD_DEFAULT: the global scope in order), and
 * believed only when the module really defines it -- a non-PIE program
 * that takes free's address answers with its own PLT entry (gcc's cc1). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <string.h>
#include <unistd.h>

#include "control.h"

char mlk_blind[MLK_BLIND_MAX];

/* The malloc family only: an executable that defines operator new and
 * delete itself (a static libstdc++: gcc's cc1) still forwards them to the
 * malloc and free we see -- its blocks are counted, as kind malloc. */
static const char *const watched[] = {"malloc", "free", "calloc", "realloc"};

static void append(size_t *used, const char *s)
{
    size_t n = strlen(s);
    if (*used + n >= sizeof mlk_blind)
        n = sizeof mlk_blind - 1 - *used;
    memcpy(mlk_blind + *used, s, n);
    *used += n;
    mlk_blind[*used] = 0;
}

void mlk_find_blind_spots(void)
{
    Dl_info self;
    if (!dladdr((void *)&mlk_find_blind_spots, &self))
        return;
    const char *owner = NULL;
    void *owner_base = NULL;
    size_t used = 0;
    int names = 0;
    for (size_t i = 0; i < sizeof watched / sizeof watched[0]; i++) {
        void *found = dlsym(RTLD_DEFAULT, watched[i]);
        Dl_info where;
        const ElfW(Sym) *sym = NULL;
        /* Defined there: a symbol of a real section starts exactly at that
         * address (under any name: tcmalloc's malloc is tc_malloc's alias).
         * A non-PIE program's canonical PLT entry for a function whose
         * address it takes is matched too, by its undefined symbol. */
        if (!found || !dladdr1(found, &where, (void **)&sym, RTLD_DL_SYMENT) || !sym ||
            where.dli_fbase == self.dli_fbase || where.dli_saddr != found ||
            sym->st_shndx == SHN_UNDEF)
            continue;
        if (owner && where.dli_fbase != owner_base)
            continue; /* one module named; a second one is rarer than rare */
        if (!owner) {
            owner_base = where.dli_fbase;
            owner = where.dli_fname && where.dli_fname[0] ? where.dli_fname : NULL;
            if (!owner) { /* the executable: the loader gives it no name */
                static char exe[512];
                long n = readlink("/proc/self/exe", exe, sizeof exe - 1);
                exe[n > 0 ? n : 0] = 0;
                owner = n > 0 ? exe : "the executable";
            }
        }
        append(&used, names++ ? ", " : "");
        append(&used, watched[i]);
    }
    if (!names)
        return;
    append(&used, names == 1 ? " is defined by " : " are defined by ");
    append(&used, owner);
    append(&used, ", which the program's symbol lookups find before libmemleak's: allocations "
                  "made through it are not seen (libmemleak does not route a program's own "
                  "allocator yet)");
}
