/* Which entry points to route, and the one line each outcome is said in
 * (route.h).  Asked the way the program's own lookups ask (RTLD_DEFAULT:
 * the global scope in order) and believed only where the module really
 * defines the symbol -- a non-PIE program that takes free's address
 * answers with its own PLT entry (gcc's cc1), which is no allocator.
 *
 * Only a module that wins the lookup of the malloc family is routed, and
 * then every allocator entry it defines.  An executable that defines
 * operator new and delete alone (a static libstdc++: cc1) forwards them
 * to the malloc and free we already see: its blocks are counted there. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "../mlk.h"
#include "patch.h"
#include "route.h"

#define MAX_ENTRIES 64

char mlk_blind[MLK_BLIND_MAX];
char mlk_routed[MLK_BLIND_MAX];

enum how_routed {
    UNROUTED,
    PATCHED,
    ALIAS,    /* shares a patched address: the first name's hook serves it */
    FORWARDS, /* only jumps to another candidate, c[forwards_to]: routed there */
};

struct candidate {
    const struct mlk_route_entry *entry;
    uint8_t *at;
    size_t size;
    uint8_t saved[32]; /* the bytes before patching, to undo a half-routed module */
    size_t saved_len;
    enum how_routed how;
    int forwards_to;
};

static const char *const family[] = {"malloc", "free", "calloc", "realloc"};

/* The module that defines `name` where the program's lookups find it, if
 * that is not us; its base in `base` and the symbol in `sym`. */
static int defined_before_us(const char *name, const void *self_base, Dl_info *where, const ElfW(Sym) **sym)
{
    void *found = dlsym(RTLD_DEFAULT, name);
    *sym = NULL;
    return found && dladdr1(found, where, (void **)sym, RTLD_DL_SYMENT) && *sym &&
           where->dli_fbase != self_base && where->dli_saddr == found && (*sym)->st_shndx != SHN_UNDEF;
}

static int is_executable(const void *base)
{
    Dl_info exe_info;
    return dladdr((void *)getauxval(AT_PHDR), &exe_info) && exe_info.dli_fbase == base;
}

static const char *module_name(const Dl_info *where)
{
    /* The executable: the loader names it as it was invoked (argv[0]), if
     * at all; its own path is what a reader can find. */
    if (!is_executable(where->dli_fbase) && where->dli_fname && where->dli_fname[0])
        return where->dli_fname;
    static char exe[512];
    long n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    return n > 0 ? exe : "the executable";
}

static void append(char *out, size_t out_len, const char *s)
{
    size_t used = strlen(out);
    snprintf(out + used, out_len - used, "%s", s);
}

static void undo(struct candidate *c, int count)
{
    for (int i = 0; i < count; i++) {
        if (c[i].how != PATCHED)
            continue;
        mlk_code_write(c[i].at, c[i].saved, c[i].saved_len);
        *c[i].entry->original = NULL;
    }
}

/* The blind line for a whole module: `how` it came to be unseen. */
static void say_unseen(char *blind, size_t blind_len, const char *names, int defined, const char *owner,
                       const char *how)
{
    char line[1024];
    snprintf(line, sizeof line, "%s %s defined by %.400s, which the program's symbol lookups find "
             "before libmemleak's, and %s: allocations made through it are not seen", names,
             defined == 1 ? "is" : "are", owner, how);
    append(blind, blind_len, line);
}

void mlk_route_start(const char *why_not, char *blind, size_t blind_len, char *routed, size_t routed_len)
{
    Dl_info self, where;
    const ElfW(Sym) *sym;
    blind[0] = routed[0] = 0;
    if (!dladdr((void *)&mlk_route_start, &self))
        return;
    /* The module that wins the malloc family, and which of it it defines. */
    const void *owner = NULL;
    const char *owner_name = NULL;
    char names[128] = "";
    int defined = 0;
    /* Under attach our library comes last, so whatever defines malloc wins
     * the lookup; the attach reroutes every module's calls through its
     * global offset table (attach.c), which sees all of them except the
     * executable's own calls to a malloc it defines itself (direct calls,
     * no table): only that is a blind spot there. */
    for (size_t i = 0; i < sizeof family / sizeof family[0]; i++) {
        if (!defined_before_us(family[i], self.dli_fbase, &where, &sym) ||
            (mlk_attach_mode && !is_executable(where.dli_fbase)))
            continue;
        if (owner && where.dli_fbase != owner)
            continue; /* one module; a second one ahead of us is rarer than rare */
        owner = where.dli_fbase;
        owner_name = module_name(&where);
        append(names, sizeof names, defined++ ? ", " : "");
        append(names, sizeof names, family[i]);
    }
    if (!owner)
        return;
    if (why_not) {
        say_unseen(blind, blind_len, names, defined, owner_name, why_not);
        return;
    }

    struct candidate c[MAX_ENTRIES];
    int count = 0;
    for (int i = 0; i < mlk_route_entry_count && count < MAX_ENTRIES; i++) {
        const struct mlk_route_entry *e = &mlk_route_entries[i];
        if (!defined_before_us(e->name, self.dli_fbase, &where, &sym) || where.dli_fbase != owner)
            continue;
        size_t size = sym->st_size;
        c[count] = (struct candidate){e, (uint8_t *)where.dli_saddr, size, {0}, size < 32 ? size : 32, UNROUTED, 0};
        count++;
    }

    char why[256], line[1024];
    int routed_count = 0;
    for (int i = 0; i < count; i++) {
        uint64_t to;
        for (int j = 0; j < i && c[i].how == UNROUTED; j++)
            if (c[j].how == PATCHED && c[j].at == c[i].at)
                c[i].how = ALIAS;
        if (c[i].how == UNROUTED && mlk_entry_forwards(c[i].at, c[i].size, &to))
            for (int j = 0; j < count && c[i].how == UNROUTED; j++)
                if (j != i && (uint64_t)c[j].at == to)
                    c[i].how = FORWARDS, c[i].forwards_to = j;
        if (c[i].how != UNROUTED)
            continue;
        memcpy(c[i].saved, c[i].at, c[i].saved_len);
        void *original = mlk_patch_entry(c[i].at, c[i].size, c[i].entry->hook, why, sizeof why);
        if (original) {
            *c[i].entry->original = original;
            c[i].how = PATCHED;
            routed_count++;
            continue;
        }
        if (c[i].entry->role != MLK_ROUTE_ALLOC) {
            /* Half a module routed would count blocks it frees unseen as
             * leaks: all of it goes back, and it is said as not seen. */
            undo(c, count);
            snprintf(line, sizeof line, "could not be routed (%s: %s)", c[i].entry->name, why);
            say_unseen(blind, blind_len, names, defined, owner_name, line);
            return;
        }
        snprintf(line, sizeof line, "%s%s of %.400s could not be routed (%s): allocations made through "
                 "it are not seen", blind[0] ? "; " : "", c[i].entry->name, owner_name, why);
        append(blind, blind_len, line);
    }
    for (int i = 0; i < count; i++) {
        if (c[i].how == ALIAS || (c[i].how == FORWARDS && c[c[i].forwards_to].how == PATCHED))
            routed_count++;
        else if (c[i].how == FORWARDS) {
            snprintf(line, sizeof line, "%s%s of %.400s could not be routed (it jumps to %s, which "
                     "could not): allocations made through it are not seen", blind[0] ? "; " : "",
                     c[i].entry->name, owner_name, c[c[i].forwards_to].entry->name);
            append(blind, blind_len, line);
        }
    }
    snprintf(line, sizeof line, "%d allocator entry points of %.400s (its own %s) are routed to "
             "libmemleak", routed_count, owner_name, names);
    append(routed, routed_len, line);
}
