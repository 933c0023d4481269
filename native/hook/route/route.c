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

#include "../hooks.h"
#include "got.h"
#include "patch.h"
#include "route.h"


char mlk_blind[MLK_BLIND_MAX];
char mlk_routed[MLK_BLIND_MAX];

enum how_routed {
    UNROUTED,
    PREPARED, /* its patch is ready, not written */
    PATCHED,
    REFUSED,  /* could not be routed: why[] says */
    ALIAS,    /* shares a patched address: the first name's hook serves it */
    FORWARDS, /* only jumps to another candidate, c[forwards_to]: routed there */
};

struct candidate {
    const struct mlk_route_entry *entry;
    uint8_t *at;
    size_t size;
    uint8_t saved[32]; /* the bytes a patch overwrote, to undo a half-routed module */
    size_t saved_len;
    enum how_routed how;
    int forwards_to;
    int index;           /* its index in mlk_route_entries */
    int trailed;         /* its allocator also serves our exported malloc (blocks may carry trailers) */
    const char *needs;   /* a function of the same module it cannot be routed without */
    void *needed;        /* that function, when found */
    struct mlk_patch patch;
    char why[160];
};

static const char *const family[] = {"malloc", "free", "calloc", "realloc"};

/* A candidate per entry at most, never fewer (a free left out would make
 * every block a leak).  Used at start (one thread, under init's lock) and
 * after a dlopen (under after_lock): off the stack, one array. */
static struct candidate candidates[MLK_ROUTE_MAX_ENTRIES];

/* The modules whose families were looked at (routed, or said not to be),
 * at start and after each dlopen since: none is looked at twice. */
#define FAMILY_MODULES_MAX 64
static const void *families_done[FAMILY_MODULES_MAX];
static int nfamilies_done;
static const void *self_base;           /* libmtrace's */
static const char *started_why_not;     /* mlk_route_start's reason not to patch */
static int started;                     /* mlk_route_start has run */
static const void *routed_in[MLK_ROUTE_MAX_ENTRIES]; /* the module each family entry was routed in */
static mlk_lock_t after_lock;           /* two threads' dlopen or dlclose: one at a time */

static void route_families(void *scope, const void *next_base, const char *why_not, char *blind,
                           size_t blind_len, char *routed, size_t routed_len);

/* The module that defines `name` where lookups in `scope` find it
 * (RTLD_DEFAULT: the program's own lookups; a dlopen handle: what it and
 * its dependencies define), if that is not us; its base in `base` and the
 * symbol in `sym`.  (A family's own names, mi_malloc, are defined by its
 * allocator alone: wherever it is.) */
static int defined_before_us(void *scope, const char *name, const void *self_base, Dl_info *where,
                             const ElfW(Sym) **sym)
{
    void *found = dlsym(scope, name);
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
        mlk_real_unredirect(c[i].at);
        *c[i].entry->original = NULL;
        c[i].how = PREPARED;
    }
}

/* The blind line for a whole module: `who` (what it defines and where)
 * `how` it came to be unseen. */
static void say_unseen(char *blind, size_t blind_len, const char *who, const char *how)
{
    char line[1200];
    snprintf(line, sizeof line, "%s%s %s: allocations made through it are not seen", blind[0] ? "; " : "",
             who, how);
    append(blind, blind_len, line);
}

/* Who a winning module's malloc family is, for that line. */
static void owner_who(char *who, size_t who_len, const char *names, int defined, const char *owner)
{
    snprintf(who, who_len, "%s %s defined by %.400s, which the program's symbol lookups find before "
             "libmemleak's, and", names, defined == 1 ? "is" : "are", owner);
}

/* A module's routing in three steps, so that an attach can write the
 * patches while the program's threads are stopped and do the rest while
 * they run.  First the plan: entries that share an address or only jump
 * to another candidate are routed there; the rest each get a patch made
 * ready (nothing written).  -1 when a free-like entry cannot be routed:
 * half a module routed would count the blocks it frees unseen as leaks, so
 * none of it is, and `refused` says which and why. */
static int plan_module(struct candidate *c, int count, char *refused, size_t refused_len)
{
    for (int i = 0; i < count; i++) {
        uint64_t to;
        for (int j = 0; j < i && c[i].how == UNROUTED; j++)
            if (c[j].how == PREPARED && c[j].at == c[i].at)
                c[i].how = ALIAS;
        if (c[i].how == UNROUTED && mlk_entry_forwards(c[i].at, c[i].size, &to))
            for (int j = 0; j < count && c[i].how == UNROUTED; j++)
                if (j != i && (uint64_t)c[j].at == to)
                    c[i].how = FORWARDS, c[i].forwards_to = j;
        if (c[i].how != UNROUTED)
            continue;
        if (c[i].needs && !c[i].needed)
            snprintf(c[i].why, sizeof c[i].why, "%s is not defined beside it", c[i].needs);
        else if (mlk_patch_prepare(c[i].at, c[i].size, c[i].entry->hook, &c[i].patch, c[i].why,
                                   sizeof c[i].why) == 0) {
            c[i].how = PREPARED;
            continue;
        }
        c[i].how = REFUSED;
        if (c[i].entry->role != MLK_ROUTE_ALLOC) {
            snprintf(refused, refused_len, "%s: %s", c[i].entry->name, c[i].why);
            return -1;
        }
    }
    return 0;
}

/* Then the writes.  Each entry's state goes in before its jump (the hook
 * may run at once), and so does the redirect of our exported hooks' calls
 * of the function to its trampoline, which runs the original before the
 * jump is written as after: no call goes through both hooks, counted
 * twice.  Stores and system calls only (mlk_patch_commit): it may run with
 * the program's threads stopped anywhere.  -1 when a free-like entry's
 * jump cannot be written: all undone, `refused` says. */
static int commit_module(struct candidate *c, int count, char *refused, size_t refused_len)
{
    for (int i = 0; i < count; i++) {
        if (c[i].how != PREPARED)
            continue;
        c[i].saved_len = c[i].patch.moved; /* (at most 19: a jump's 5 and one more instruction) */
        memcpy(c[i].saved, c[i].at, c[i].saved_len);
        mlk_route_entry_routed(c[i].index, c[i].trailed, c[i].needed);
        mlk_real_redirect(c[i].at, c[i].patch.tramp);
        if (mlk_patch_commit(&c[i].patch, c[i].entry->original) == 0) {
            c[i].how = PATCHED;
            continue;
        }
        mlk_real_unredirect(c[i].at);
        c[i].how = REFUSED;
        snprintf(c[i].why, sizeof c[i].why, "its code cannot be made writable (mprotect refused)");
        if (c[i].entry->role != MLK_ROUTE_ALLOC) {
            undo(c, count);
            snprintf(refused, refused_len, "%s: %s", c[i].entry->name, c[i].why);
            return -1;
        }
    }
    return 0;
}

/* And what was done, said: in `blind` what is not seen (all of the
 * module, `who`, when `refused`), in `routed` as `what`. */
static void say_module(const struct candidate *c, int count, const char *refused, const char *owner_name,
                       const char *who, const char *what, char *blind, size_t blind_len, char *routed,
                       size_t routed_len)
{
    char line[1024];
    if (refused) {
        snprintf(line, sizeof line, "could not be routed (%s)", refused);
        say_unseen(blind, blind_len, who, line);
        return;
    }
    int routed_count = 0;
    for (int i = 0; i < count; i++)
        if (c[i].how == REFUSED) {
            snprintf(line, sizeof line, "%s%s of %.400s could not be routed (%s): allocations made through "
                     "it are not seen", blind[0] ? "; " : "", c[i].entry->name, owner_name, c[i].why);
            append(blind, blind_len, line);
        }
    for (int i = 0; i < count; i++) {
        if (c[i].how == PATCHED || c[i].how == ALIAS ||
            (c[i].how == FORWARDS && c[c[i].forwards_to].how == PATCHED))
            routed_count++;
        else if (c[i].how == FORWARDS) {
            snprintf(line, sizeof line, "%s%s of %.400s could not be routed (it jumps to %s, which "
                     "could not): allocations made through it are not seen", blind[0] ? "; " : "",
                     c[i].entry->name, owner_name, c[c[i].forwards_to].entry->name);
            append(blind, blind_len, line);
        }
    }
    snprintf(line, sizeof line, "%s%d allocator entry points of %.400s (%s) are routed to libmemleak",
             routed[0] ? "; " : "", routed_count, owner_name, what);
    append(routed, routed_len, line);
}

/* Routes the candidates of one module now: all of them, or for a refused
 * free-like entry none. */
static void route_module(struct candidate *c, int count, const char *owner_name, const char *who,
                         const char *what, char *blind, size_t blind_len, char *routed, size_t routed_len)
{
    char refused[256];
    int ok = plan_module(c, count, refused, sizeof refused) == 0 &&
             commit_module(c, count, refused, sizeof refused) == 0;
    say_module(c, count, ok ? NULL : refused, owner_name, who, what, blind, blind_len, routed, routed_len);
}

/* ---- under attach: the executable's entries, written with its threads stopped
 * The program's threads run through its allocator while an attach plans;
 * a jump written over instructions a thread is part-way through would
 * send it into the middle of the jump.  So the executable's patches are
 * planned here and held; the attacher stops every other thread, hands
 * over where each one is, and mlk_route_commit_held writes them if none
 * is inside the bytes to be overwritten (else it asks for another try).
 * One module at most: only the executable is patched under attach. */
enum held_state { HELD_NONE, HELD_READY, HELD_DONE, HELD_REFUSED, HELD_SAID };
static struct {
    struct candidate c[MLK_ROUTE_MAX_ENTRIES];
    int count;
    enum held_state state;
    char refused[256], owner_name[512], who[1024], what[256];
} held;

static void hold(const struct candidate *c, int count, const char *owner_name, const char *who, const char *what)
{
    if (held.state != HELD_NONE)
        return; /* (cannot be: the executable is one module, looked at once) */
    memcpy(held.c, c, (size_t)count * sizeof *c);
    held.count = count;
    snprintf(held.owner_name, sizeof held.owner_name, "%s", owner_name);
    snprintf(held.who, sizeof held.who, "%s", who);
    snprintf(held.what, sizeof held.what, "%s", what);
    held.state = plan_module(held.c, count, held.refused, sizeof held.refused) == 0 ? HELD_READY : HELD_REFUSED;
}

static int held_that_are(enum how_routed how)
{
    int n = 0;
    for (int i = 0; i < held.count; i++)
        n += held.c[i].how == how;
    return n;
}

int mlk_route_held(void) { return held.state == HELD_READY ? held_that_are(PREPARED) : 0; }

int mlk_route_commit_held(const uint64_t *pcs, int npcs)
{
    if (held.state != HELD_READY)
        return 0;
    for (int i = 0; i < held.count; i++) {
        const struct candidate *c = &held.c[i];
        for (int k = 0; c->how == PREPARED && k < npcs; k++)
            if (pcs[k] > (uint64_t)c->at && pcs[k] < (uint64_t)c->at + c->patch.moved)
                return 1;
    }
    held.state = commit_module(held.c, held.count, held.refused, sizeof held.refused) == 0 ? HELD_DONE
                                                                                          : HELD_REFUSED;
    return 0;
}

int mlk_route_patched_held(void) { return held_that_are(PATCHED); }

void mlk_route_unpatch_held(void)
{
    for (int i = 0; i < held.count; i++)
        if (held.c[i].how == PATCHED && mlk_code_write(held.c[i].at, held.c[i].saved, held.c[i].saved_len) == 0)
            held.c[i].how = PREPARED; /* (its trampoline stays: a thread may be in it, and our calls go there) */
}

void mlk_route_say_held(const char *why_not_written, char *blind, size_t blind_len, char *routed,
                        size_t routed_len)
{
    if (held.state == HELD_READY)
        say_unseen(blind, blind_len, held.who, why_not_written);
    else if (held.state == HELD_DONE || held.state == HELD_REFUSED)
        say_module(held.c, held.count, held.state == HELD_REFUSED ? held.refused : NULL, held.owner_name,
                   held.who, held.what, blind, blind_len, routed, routed_len);
    if (held.state != HELD_NONE)
        held.state = HELD_SAID;
}

/* Adds to c the entries [from, mlk_route_entry_count) that `*module`
 * defines, as `scope` finds them. */
static int collect(void *scope, int from, const void *self_base, const void **module, struct candidate *c,
                   int count)
{
    Dl_info where;
    const ElfW(Sym) *sym;
    for (int i = from; i < mlk_route_entry_count; i++) {
        const struct mlk_route_entry *e = &mlk_route_entries[i];
        if (!defined_before_us(scope, e->name, self_base, &where, &sym))
            continue;
        if (!*module)
            *module = where.dli_fbase;
        if (where.dli_fbase != *module)
            continue;
        size_t size = sym->st_size;
        c[count] = (struct candidate){.entry = e, .at = (uint8_t *)where.dli_saddr, .size = size,
                                      .how = UNROUTED, .index = i};
        if (!strcmp(e->name, "mi_heap_destroy")) {
            /* Its blocks are forgotten by walking the heap before it goes. */
            c[count].needs = "mi_heap_visit_blocks";
            void *visitor = dlsym(scope, c[count].needs);
            Dl_info vw;
            if (visitor && dladdr(visitor, &vw) && vw.dli_fbase == *module)
                c[count].needed = visitor;
        }
        count++;
    }
    return count;
}

/* The names of the family entries in c, for the routed line. */
static void family_names(const struct candidate *c, int count, char *out, size_t out_len)
{
    out[0] = 0;
    const char *seen[4] = {0};
    int n = 0;
    for (int i = 0; i < count && n < 4; i++) {
        const char *name = c[i].entry->name, *label;
        if (!strncmp(name, "mi_", 3))
            label = "mimalloc's mi_*";
        else if (!strncmp(name, "tc_", 3))
            label = "tcmalloc's tc_*";
        else if (!strncmp(name, "je_", 3))
            label = "jemalloc's je_*";
        else if (!strncmp(name, "_rjem_", 6))
            label = "jemalloc's _rjem_*";
        else if (!strncmp(name, "moz_arena_", 10))
            label = "mozjemalloc's moz_arena_*";
        else
            label = "jemalloc's mallocx family";
        int known = 0;
        for (int j = 0; j < n; j++)
            known |= seen[j] == label;
        if (!known) {
            append(out, out_len, n ? ", " : "");
            append(out, out_len, label);
            seen[n++] = label;
        }
    }
}

static int new_family_module(struct dl_phdr_info *info, size_t size, void *found);

void mlk_route_start(const char *why_not, char *blind, size_t blind_len, char *routed, size_t routed_len)
{
    Dl_info where;
    const ElfW(Sym) *sym;
    const void *self, *next_base;
    blind[0] = routed[0] = 0;
    if (!mlk_object_of((void *)&mlk_route_start, &self, NULL))
        return;
    mlk_ensure_real(); /* what our exported hooks forward to, before anything moves */
    if (!mlk_real.malloc || !mlk_object_of(mlk_real_home((void *)mlk_real.malloc), &next_base, NULL))
        next_base = NULL;
    /* The module that wins the malloc family, and which of it it defines. */
    const void *owner = NULL;
    const char *owner_name = NULL;
    char names[128] = "";
    int defined = 0;
    /* Under attach our library comes last, so whatever defines malloc wins
     * the lookup; the attach reroutes every module's calls through its
     * global offset table (attach.c), which sees all of them except the
     * executable's own calls to a malloc it defines itself (direct calls,
     * no table): only the executable is patched there (held). */
    for (size_t i = 0; i < sizeof family / sizeof family[0]; i++) {
        if (!defined_before_us(RTLD_DEFAULT, family[i], self, &where, &sym) ||
            (mlk_attach_mode && !is_executable(where.dli_fbase)))
            continue;
        if (owner && where.dli_fbase != owner)
            continue; /* one module; a second one ahead of us is rarer than rare */
        owner = where.dli_fbase;
        owner_name = module_name(&where);
        append(names, sizeof names, defined++ ? ", " : "");
        append(names, sizeof names, family[i]);
    }
    struct candidate *c = candidates;
    char what[256], who[1024];
    if (owner)
        owner_who(who, sizeof who, names, defined, owner_name);
    if (owner && why_not)
        say_unseen(blind, blind_len, who, why_not);
    else if (owner) {
        const void *module = owner;
        int count = collect(RTLD_DEFAULT, 0, self, &module, c, 0);
        snprintf(what, sizeof what, "its own %s", names);
        for (int i = 0; i < count; i++)
            c[i].trailed = owner == next_base; /* (under attach: our malloc forwards to it) */
        if (mlk_attach_mode)
            hold(c, count, owner_name, who, what);
        else
            route_module(c, count, owner_name, who, what, blind, blind_len, routed, routed_len);
    }
    /* Ways to allocate that the module we forward to, or the one that wins
     * malloc, exports beside it and nobody routes: said (unrouted.c). */
    mlk_route_say_unrouted(owner, blind, blind_len);
    if (next_base != owner)
        mlk_route_say_unrouted(next_base, blind, blind_len);
    families_done[0] = owner;
    nfamilies_done = 1;
    self_base = self;
    started_why_not = why_not;
    /* (Most programs load no such family: then none of its ~150 names is
     * looked up, each failing through the loader's error path -- half of
     * a traced /bin/true's instructions.) */
    int found = 0;
    dl_iterate_phdr(new_family_module, &found);
    if (found)
        route_families(RTLD_DEFAULT, next_base, why_not, blind, blind_len, routed, routed_len);
    __atomic_store_n(&started, 1, __ATOMIC_RELEASE);
}

/* Families called by name, in the modules `scope` finds (at start: the
 * modules behind ours, a library linked or preloaded after us --
 * libmimalloc, libjemalloc, tcmalloc; after a dlopen: the module opened and
 * its dependencies), one module at a time: the first entry defined by a
 * module not done yet picks the next.  A module is looked at once. */
static void route_families(void *scope, const void *next_base, const char *why_not, char *blind,
                           size_t blind_len, char *routed, size_t routed_len)
{
    struct candidate *c = candidates;
    Dl_info where;
    const ElfW(Sym) *sym;
    char what[256], who[1024];
    while (nfamilies_done < FAMILY_MODULES_MAX) {
        const void *module = NULL;
        for (int i = mlk_route_usual_count; i < mlk_route_entry_count && !module; i++) {
            if (!defined_before_us(scope, mlk_route_entries[i].name, self_base, &where, &sym))
                continue;
            int seen = 0;
            for (int j = 0; j < nfamilies_done; j++)
                seen |= families_done[j] == where.dli_fbase;
            if (!seen)
                module = where.dli_fbase;
        }
        if (!module)
            break;
        families_done[nfamilies_done++] = module;
        int count = collect(scope, mlk_route_usual_count, self_base, &module, c, 0);
        if (!count || !dladdr((void *)c[0].at, &where))
            continue;
        const char *name = module_name(&where);
        family_names(c, count, what, sizeof what);
        snprintf(who, sizeof who, "%s entry points of %.400s", what, name);
        if (mlk_attach_mode && !is_executable(module)) {
            /* A library's: the attach routes its callers' offset-table
             * slots for these names (attach.c), as for malloc. */
            char line[1024];
            snprintf(line, sizeof line, "%sallocator entry points of %.400s (%s) are routed to libmemleak "
                     "through the offset tables of the modules that call them", routed[0] ? "; " : "", name, what);
            append(routed, routed_len, line);
            continue;
        }
        int again = 0; /* a second copy of an allocator: its names' hooks serve the first */
        for (int i = 0; i < count; i++)
            again |= *c[i].entry->original != NULL;
        const char *why = why_not ? why_not : again ? "could not be routed: the same names of another "
                                                      "module are routed already" : NULL;
        if (why) {
            say_unseen(blind, blind_len, who, why);
            continue;
        }
        for (int i = 0; i < count; i++)
            c[i].trailed = module == next_base;
        if (mlk_attach_mode) {
            hold(c, count, name, who, what);
            continue;
        }
        route_module(c, count, name, who, what, blind, blind_len, routed, routed_len);
        for (int i = 0; i < count; i++)
            if (*c[i].entry->original)
                routed_in[c[i].index] = module;
        mlk_route_say_unrouted(module, blind, blind_len);
    }
}

void mlk_route_after_dlclose(void)
{
    if (!__atomic_load_n(&started, __ATOMIC_ACQUIRE))
        return;
    mlk_lock(&after_lock);
    for (int j = nfamilies_done - 1; j >= 1; j--) {
        Dl_info still;
        const void *base = families_done[j];
        if (!base || (dladdr(base, &still) && still.dli_fbase == base))
            continue;
        /* Unloaded: its names may be routed again when it comes back. */
        for (int i = 0; i < mlk_route_entry_count; i++)
            if (routed_in[i] == base) {
                *mlk_route_entries[i].original = NULL;
                routed_in[i] = NULL;
            }
        families_done[j] = families_done[--nfamilies_done];
    }
    mlk_unlock(&after_lock);
}

/* One name of each family: a module defining none has none to route. */
static const char *const family_marks[] = {"mi_malloc", "mallocx", "je_mallocx", "_rjem_mallocx", "tc_malloc",
                                           "moz_arena_malloc"};

static int new_family_module(struct dl_phdr_info *info, size_t size, void *found)
{
    (void)size;
    uintptr_t lowest = UINTPTR_MAX; /* where it is mapped from, as dladdr's dli_fbase says */
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_LOAD && info->dlpi_phdr[i].p_vaddr < lowest)
            lowest = info->dlpi_phdr[i].p_vaddr;
    const void *base = (const void *)(info->dlpi_addr + (lowest & ~(uintptr_t)4095));
    if (lowest == UINTPTR_MAX || base == self_base)
        return 0;
    for (int j = 0; j < nfamilies_done; j++)
        if (families_done[j] == base)
            return 0;
    for (size_t i = 0; i < sizeof family_marks / sizeof family_marks[0]; i++)
        if (mlk_module_defines(info, family_marks[i]))
            return *(int *)found = 1;
    return 0;
}

void mlk_route_say_blind(const char *line)
{
    mlk_lock(&after_lock);
    if (!strstr(mlk_blind, line)) {
        append(mlk_blind, sizeof mlk_blind, mlk_blind[0] ? "; " : "");
        append(mlk_blind, sizeof mlk_blind, line);
        mlk_warn(line, "", "");
        mlk_segment_say_routing(mlk_blind, mlk_routed);
    }
    mlk_unlock(&after_lock);
}

void mlk_route_after_dlopen(void *handle)
{
    if (!handle || !__atomic_load_n(&started, __ATOMIC_ACQUIRE))
        return;
    static char blind[MLK_BLIND_MAX], routed[MLK_BLIND_MAX]; /* under the lock */
    mlk_lock(&after_lock); /* families_done is read and changed under it */
    int found = 0;
    dl_iterate_phdr(new_family_module, &found);
    if (!found) {
        mlk_unlock(&after_lock);
        return;
    }
    blind[0] = routed[0] = 0;
    route_families(handle, NULL, started_why_not, blind, sizeof blind, routed, sizeof routed);
    /* Said once, from now on in every report as what was said at start: a
     * module that comes back after an unload is not said again. */
    int new_blind = blind[0] && !strstr(mlk_blind, blind), new_routed = routed[0] && !strstr(mlk_routed, routed);
    if (new_blind) {
        append(mlk_blind, sizeof mlk_blind, mlk_blind[0] ? "; " : "");
        append(mlk_blind, sizeof mlk_blind, blind);
        mlk_warn(blind, "", "");
    }
    if (new_routed) {
        append(mlk_routed, sizeof mlk_routed, mlk_routed[0] ? "; " : "");
        append(mlk_routed, sizeof mlk_routed, routed);
    }
    if (new_blind || new_routed)
        mlk_segment_say_routing(mlk_blind, mlk_routed);
    mlk_unlock(&after_lock);
}
