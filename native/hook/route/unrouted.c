/* Allocator entry points that nothing routes: the blind spot they leave is
 * said, in every report's `blind` line (and `check` exits 3 on it).
 *
 * An allocator module -- the one whose malloc we forward to, or one whose
 * family route.c routed -- may export more ways to allocate than we know:
 * mozjemalloc's moz_arena_* before they were routed here (each Firefox
 * ArrayBuffer a 1 MB block, RSS 209 MB and 38 KB seen, "no leak
 * suspects"), a newer mimalloc's or jemalloc's additions.  Such a module
 * is read for exported functions named PREFIX_malloc, _calloc or _realloc
 * beside a PREFIX_free: a pair we do not route is an allocator of its own
 * whose blocks we cannot see.  Not counted: the names we route, glibc's
 * __libc_* (every allocator's aliases of its malloc family), and glibc
 * itself (none of its exports is such a pair).  Only allocator modules are
 * read: a library's sqlite3_malloc/sqlite3_free or g_malloc/g_free calls
 * malloc, and is seen through it. */
#define _GNU_SOURCE
#include <string.h>

#include "../hooks.h"
#include "got.h"
#include "route.h"

#define CANDIDATES 64
#define SHOWN 6 /* names said at most, then "..." */

struct found {
    const char *name[CANDIDATES];
    unsigned char prefix[CANDIDATES]; /* its length */
    unsigned char frees[CANDIDATES];
    int count;
};

static int routed_name(const char *name)
{
    for (int i = 0; i < mlk_route_entry_count; i++)
        if (!strcmp(mlk_route_entries[i].name, name))
            return 1;
    return 0;
}

/* The length of `name`'s prefix before _malloc/_calloc/_realloc (frees 0)
 * or _free (frees 1); 0 when it has none of them. */
static size_t prefix_of(const char *name, int *frees)
{
    static const char *const ends[] = {"_malloc", "_calloc", "_realloc", "_free"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
        size_t e = strlen(ends[i]);
        if (n > e && n - e < 256 && !strcmp(name + n - e, ends[i])) {
            *frees = i == 3;
            return n - e;
        }
    }
    return 0;
}

static void note(const char *name, uintptr_t addr, void *arg)
{
    (void)addr;
    struct found *f = arg;
    int frees;
    size_t prefix = prefix_of(name, &frees);
    if (!prefix || f->count == CANDIDATES || !strncmp(name, "__libc_", 7) || routed_name(name))
        return;
    f->name[f->count] = name;
    f->prefix[f->count] = (unsigned char)prefix;
    f->frees[f->count++] = (unsigned char)frees;
}

static int paired(const struct found *f, int i)
{
    for (int j = 0; j < f->count; j++)
        if (f->frees[j] != f->frees[i] && f->prefix[j] == f->prefix[i] &&
            !strncmp(f->name[j], f->name[i], f->prefix[i]))
            return 1;
    return 0;
}

struct module_ask {
    const void *base;
    char *blind;
    size_t blind_len;
};

static void append(char *out, size_t out_len, const char *s)
{
    size_t n = strlen(out);
    if (n + 1 < out_len)
        strncat(out, s, out_len - n - 1);
}

static void say_module(struct dl_phdr_info *info, struct module_ask *ask)
{
    const char *path = info->dlpi_name && *info->dlpi_name ? info->dlpi_name : "the executable";
    const char *file = strrchr(path, '/');
    file = file ? file + 1 : path;
    if (!strncmp(file, "libc.so", 7) || !strncmp(file, "libc-", 5))
        return;
    struct found f = {.count = 0};
    mlk_module_each_function(info, note, &f);
    char names[256] = "";
    int shown = 0;
    for (int i = 0; i < f.count; i++) {
        if (!paired(&f, i))
            continue;
        if (shown++ < SHOWN) {
            append(names, sizeof names, shown > 1 ? ", " : "");
            append(names, sizeof names, f.name[i]);
        } else if (shown == SHOWN + 1) {
            append(names, sizeof names, ", ...");
        }
    }
    if (!shown)
        return;
    append(ask->blind, ask->blind_len, ask->blind[0] ? "; " : "");
    append(ask->blind, ask->blind_len, path);
    append(ask->blind, ask->blind_len, " exports allocator entry points libmemleak does not route (");
    append(ask->blind, ask->blind_len, names);
    append(ask->blind, ask->blind_len, "): blocks made through them are not seen");
}

static int find_module(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct module_ask *ask = arg;
    uintptr_t lowest = UINTPTR_MAX;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_LOAD && info->dlpi_phdr[i].p_vaddr < lowest)
            lowest = info->dlpi_phdr[i].p_vaddr;
    if (lowest == UINTPTR_MAX || (const void *)(info->dlpi_addr + (lowest & ~(uintptr_t)4095)) != ask->base)
        return 0;
    say_module(info, ask);
    return 1;
}

void mlk_route_say_unrouted(const void *module, char *blind, size_t blind_len)
{
    if (!module)
        return;
    struct module_ask ask = {module, blind, blind_len};
    dl_iterate_phdr(find_module, &ask);
}
