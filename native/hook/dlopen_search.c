/* Where the loader would have looked for a bare library name the program
 * passes to dlopen.  The loader searches the calling object's DT_RUNPATH
 * (or its DT_RPATH), and takes the caller from dlopen's return address --
 * ours, since the hook calls the real dlopen (and must: it routes the new
 * module once it is loaded).  So a program loading a plugin by its bare
 * name from its own RUNPATH ($ORIGIN/plugins) got "cannot open shared
 * object file" under the tracer, and only there.  For such a name the hook
 * asks here first: the full path of the file in the caller's own search
 * path, where the loader, asked by the caller, would have taken it from
 * there; else NULL, and the name goes to the loader as it was.
 *
 * The loader's order, for a caller with DT_RUNPATH: LD_LIBRARY_PATH, the
 * RUNPATH, its cache, the default directories -- a name found in
 * LD_LIBRARY_PATH is the loader's answer for us too, so only the RUNPATH
 * is searched here.  For a caller with DT_RPATH only: that RPATH first
 * (then the executable's, which the loader applies to our call as well).
 * A name already loaded is found by the loader whoever asks.  Not followed
 * (the name goes as it was): search-path tokens other than $ORIGIN ($LIB,
 * $PLATFORM), the glibc-hwcaps subdirectories, and secure-execution
 * programs (setuid), whose $ORIGIN the loader restricts. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "hooks.h"

static uintptr_t absolute(uintptr_t v, uintptr_t base)
{
    return v < base ? v + base : v;
}

/* The directory of object lm, for $ORIGIN (the executable's: /proc/self/exe's). */
static int origin_of(const struct link_map *lm, char *dir, size_t dir_len)
{
    const char *name = lm->l_name;
    ssize_t n;
    if (name && name[0]) {
        n = (ssize_t)strlen(name);
        if ((size_t)n >= dir_len)
            return -1;
        memcpy(dir, name, (size_t)n + 1);
    } else {
        n = readlink("/proc/self/exe", dir, dir_len - 1);
        if (n <= 0)
            return -1;
        dir[n] = 0;
    }
    char *slash = strrchr(dir, '/');
    if (!slash)
        return -1;
    *(slash == dir ? slash + 1 : slash) = 0;
    return 0;
}

/* `file` in search-path entry `entry` (len bytes; $ORIGIN expanded) into
 * out, if it exists there: 1; 0 if not; -1 for an entry not followed. */
static int try_entry(const char *entry, size_t len, const char *origin, const char *file, char *out,
                     size_t out_len)
{
    char dir[4096];
    size_t used = 0;
    for (size_t i = 0; i < len;) {
        const char *token = NULL;
        size_t skip = 0;
        if (entry[i] == '$') {
            if (len - i >= 7 && memcmp(entry + i, "$ORIGIN", 7) == 0)
                token = origin, skip = 7;
            else if (len - i >= 9 && memcmp(entry + i, "${ORIGIN}", 9) == 0)
                token = origin, skip = 9;
            else
                return -1; /* $LIB, $PLATFORM: the loader's to expand */
        }
        if (token) {
            size_t t = strlen(token);
            if (used + t >= sizeof dir)
                return -1;
            memcpy(dir + used, token, t);
            used += t;
            i += skip;
        } else {
            if (used + 1 >= sizeof dir)
                return -1;
            dir[used++] = entry[i++];
        }
    }
    dir[used] = 0;
    int n = snprintf(out, out_len, "%s%s%s", used ? dir : ".", "/", file);
    if (n < 0 || (size_t)n >= out_len)
        return -1;
    return access(out, F_OK) == 0;
}

/* The first entry of `list` (colon-separated) that holds `file`: 1, with
 * its path in out; 0: none; -1: an entry not followed came first. */
static int search_list(const char *list, const char *origin, const char *file, char *out, size_t out_len)
{
    for (const char *p = list;;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        int r = try_entry(p, len, origin, file, out, out_len);
        if (r != 0)
            return r;
        if (!end)
            return 0;
        p = end + 1;
    }
}

const char *mlk_dlopen_search(const char *file, uintptr_t caller, char *out, size_t out_len)
{
    if (!file || !file[0] || strchr(file, '/') || getauxval(AT_SECURE) || !mlk_real.dlopen)
        return NULL;
    Dl_info info, mine;
    struct link_map *lm = NULL, *self = NULL;
    if (!dladdr1((void *)caller, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm || !lm->l_ld ||
        (dladdr1((void *)&mlk_dlopen_search, &mine, (void **)&self, RTLD_DL_LINKMAP) && lm == self))
        return NULL;
    const char *strtab = NULL;
    uintptr_t runpath = 0, rpath = 0;
    int has_runpath = 0, has_rpath = 0;
    for (const ElfW(Dyn) *d = lm->l_ld; d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_STRTAB)
            strtab = (const char *)absolute(d->d_un.d_ptr, lm->l_addr);
        else if (d->d_tag == DT_RUNPATH)
            runpath = d->d_un.d_val, has_runpath = 1;
        else if (d->d_tag == DT_RPATH)
            rpath = d->d_un.d_val, has_rpath = 1;
    }
    int is_executable = !lm->l_name || !lm->l_name[0];
    if (!strtab || !(has_runpath || (has_rpath && !is_executable)))
        return NULL; /* the loader searches for us what it would for the caller */
    void *loaded = mlk_real.dlopen(file, RTLD_LAZY | RTLD_NOLOAD);
    if (loaded) {
        mlk_real.dlclose(loaded);
        return NULL;
    }
    char origin[4096];
    if (origin_of(lm, origin, sizeof origin) != 0)
        return NULL;
    if (has_runpath) {
        const char *library_path = getenv("LD_LIBRARY_PATH");
        if (library_path && search_list(library_path, origin, file, out, out_len) != 0)
            return NULL; /* found there (the loader's first place), or not followed */
    }
    return search_list(strtab + (has_runpath ? runpath : rpath), origin, file, out, out_len) == 1 ? out : NULL;
}
