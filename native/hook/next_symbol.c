/* The definition our hook of a name forwards to: the next one after ours.
 *
 * As a preload that is RTLD_NEXT.  As an attached copy (dlopen'ed, after
 * the program's own definitions in its lookups) it is the program's own,
 * asked with RTLD_DEFAULT -- except where the program is a non-PIE
 * executable that takes the function's address.  The linker then gives the
 * executable a "canonical" PLT entry for it, an undefined dynamic symbol
 * with a value, so that &free is the same everywhere; dlsym answers with
 * that entry, and the entry jumps through the executable's GOT slot -- the
 * slot an attach routes to our hook.  Our free would call itself for ever
 * (Debian's /usr/bin/python3 takes free's address: attached, it died of
 * the recursion's stack overflow).  So an answer lying in a module that
 * does not define the name is passed over, and the first module after it
 * in the lookup order that does define it is asked, through its own handle
 * (which finds the default version, as the loader would). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>

#include "mlk.h"
#include "route/got.h"

struct search {
    const char *name;
    uintptr_t found;      /* dlsym's answer */
    uintptr_t self_bias;  /* our own module, never the answer */
    int holder_seen;      /* the module holding `found` has been passed */
    int holder_defines;   /* ... and defines the name (no canonical PLT) */
    const char *next_name; /* the first defining module after it */
};

static int holds(const struct dl_phdr_info *info, uintptr_t addr)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && addr >= lo && addr - lo < ph->p_memsz)
            return 1;
    }
    return 0;
}

static int look(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct search *s = data;
    if (!s->holder_seen) {
        if (holds(info, s->found)) {
            s->holder_seen = 1;
            s->holder_defines = mlk_module_symbol(info, s->name) != 0;
            return s->holder_defines; /* a real definition: done */
        }
        return 0;
    }
    if (info->dlpi_addr == s->self_bias || !info->dlpi_name || !info->dlpi_name[0] ||
        mlk_module_symbol(info, s->name) <= 1)
        return 0;
    s->next_name = info->dlpi_name;
    return 1;
}

void *mlk_next_symbol(const char *name)
{
    void *found = dlsym(MLK_NEXT_HANDLE, name);
    if (!mlk_attach_mode || !found)
        return found;
    const void *self;
    if (!mlk_object_of((const void *)&mlk_next_symbol, &self, NULL))
        return found;
    struct search s = {name, (uintptr_t)found, (uintptr_t)self, 0, 0, NULL};
    dl_iterate_phdr(look, &s);
    if (!s.holder_seen || s.holder_defines)
        return found;
    if (!s.next_name)
        return NULL; /* a PLT entry and nothing behind it: never call it */
    /* (The module is loaded already: RTLD_NOLOAD only hands out a handle.
     * This library's own dlopen reference binds to the C library's, not to
     * our hook: attached, we come after it in every lookup.) */
    void *module = dlopen(s.next_name, RTLD_LAZY | RTLD_NOLOAD);
    if (!module)
        return NULL;
    void *next = dlsym(module, name);
    dlclose(module);
    return next;
}
