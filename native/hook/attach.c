/* Tracing a process that was started without us (`libmemleak attach PID`).
 *
 * The attacher (native/reporter/inject.c) makes one of the process's
 * threads call dlopen() on this library and then mlk_attach().  Loaded that
 * way, our malloc is not the one the program's symbol lookups find (it
 * would be only as a preload), so the program's calls are routed to our
 * hooks by rewriting the entries of every loaded module's global offset
 * table that name a function we hook (the technique of heaptrack's
 * injector): JUMP_SLOT entries (calls through the PLT) and GLOB_DAT ones
 * (function pointers taken later).  The dlopen hook routes modules loaded
 * afterwards.  mlk_detach() writes the entries back; the library stays
 * loaded, its hooks inert -- a thread may still be returning into them,
 * and a function pointer taken meanwhile may still point at them.
 *
 * The order of routing matters while other threads run: frees (and
 * reallocs) are routed first everywhere, then allocations.  A block made by
 * libc's malloc and freed by our free is a block from before the attach
 * (counted as such); the reverse -- our block freed by libc's free -- would
 * be counted live for ever, so it must not happen.
 *
 * An executable that defines malloc itself calls it directly, through no
 * table: its entries are patched (route.c), which needs its other threads
 * stopped -- the attacher does that between mlk_attach and
 * mlk_attach_finish, calling mlk_attach_patch with the threads' places in
 * mlk_attach_places.
 * Then the frees' pass runs in mlk_attach and the allocations' only in
 * mlk_attach_finish, after the executable's free is patched. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>

#include "control.h"
#include "route/got.h"
#include "route/route.h"

#define EXPORT __attribute__((visibility("default")))

int mlk_attach_mode;

static mlk_lock_t routing_lock;
static int attached; /* 1 while routed */
static char status[512];
static int allocations_routed; /* the second pass has run (or runs with every later one) */

static int set_status(const char *a, const char *b)
{
    snprintf(status, sizeof status, "%s%s", a, b);
    return -1;
}

static int route_each(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    return mlk_got_route_module(info, data);
}

/* Route every loaded module's entries (those already routed are left):
 * the frees', and the allocations' too once they are due. */
static int route_all(void)
{
    mlk_lock(&routing_lock);
    struct mlk_got_pass frees = {.frees = 1, .families = 1, .remember = 1},
                        rest = {.frees = 0, .families = 1, .remember = 1};
    dl_iterate_phdr(route_each, &frees);
    if (!frees.failed && __atomic_load_n(&allocations_routed, __ATOMIC_ACQUIRE))
        dl_iterate_phdr(route_each, &rest);
    mlk_unlock(&routing_lock);
    return frees.failed || rest.failed ? -1 : 0;
}

/* After a dlopen through our hook: route what it loaded. */
void mlk_attach_route_new_modules(void)
{
    if (__atomic_load_n(&attached, __ATOMIC_ACQUIRE))
        route_all();
}

/* Called in the process by the attacher, on one of its threads, the others
 * running.  config is MEMLEAK_CONFIG's syntax (the attacher adds the report
 * directory).  Returns "" when attached, else why not, in one line. */
EXPORT const char *mlk_attach(const char *config)
{
    int was = mlk_guard_up();
    status[0] = 0;
    if (mlk_loaded_as_preload())
        set_status("the process is already traced (libmtrace.so preloaded)", "");
    else if (__atomic_load_n(&attached, __ATOMIC_ACQUIRE))
        set_status("the process is already attached", "");
    else if (mlk_got_find_ours(status, sizeof status) == 0) {
        mlk_attach_mode = 1;
        if (mlk_init_attached(config, status, sizeof status) == 0) {
            /* attached before routing: a dlopen another thread makes through
             * an entry just routed routes what it loads */
            __atomic_store_n(&attached, 1, __ATOMIC_RELEASE);
            /* With entries of the executable to patch, allocations wait for
             * mlk_attach_finish, after its free is patched. */
            __atomic_store_n(&allocations_routed, !mlk_route_held(), __ATOMIC_RELEASE);
            if (route_all() != 0) {
                __atomic_store_n(&attached, 0, __ATOMIC_RELEASE);
                mlk_lock(&routing_lock);
                mlk_got_unroute_all();
                mlk_unlock(&routing_lock);
                mlk_stop_collecting();
                set_status("out of memory for the routing table; nothing routed", "");
            }
        }
    }
    mlk_in_hook = was;
    return status;
}

/* How many of the executable's entries wait to be patched with its other
 * threads stopped (0: no need to stop them). */
EXPORT int mlk_attach_patches_waiting(void)
{
    return __atomic_load_n(&attached, __ATOMIC_ACQUIRE) ? mlk_route_held() : 0;
}

/* Where the attacher writes the stopped threads' instruction pointers for
 * mlk_attach_patch (process_vm_writev): a buffer of ours, not the borrowed
 * thread's stack, whose size nobody knows (a stack the program gave a
 * thread may have no guard page below it).  Pages never written cost
 * nothing. */
#define ATTACH_PLACES_MAX 65536
EXPORT uint64_t mlk_attach_places[ATTACH_PLACES_MAX];

/* Called with every other thread of the process stopped; the first npcs
 * entries of mlk_attach_places are their instruction pointers.  Writes the
 * executable's patches: "" when done (or refused: mlk_attach_finish says
 * it), "busy" when a thread is part-way through the bytes to overwrite
 * (nothing written: let the threads run and call again), or why not.
 * Takes no lock and calls neither the loader nor malloc: a stopped thread
 * may hold theirs. */
EXPORT const char *mlk_attach_patch(int npcs)
{
    int was = mlk_guard_up();
    status[0] = 0;
    if (npcs < 0 || npcs > ATTACH_PLACES_MAX)
        set_status("more threads than libmemleak can check (65536)", "");
    else if (mlk_route_commit_held(mlk_attach_places, npcs) == 1)
        set_status("busy", "");
    mlk_in_hook = was;
    return status;
}

/* After mlk_attach (and mlk_attach_patch, if any), the threads running:
 * the allocations' pass, and what was routed said.  `why_not` says why
 * the executable's patches, if any wait still, were not written. */
EXPORT const char *mlk_attach_finish(const char *why_not)
{
    int was = mlk_guard_up();
    status[0] = 0;
    if (!__atomic_load_n(&attached, __ATOMIC_ACQUIRE)) {
        set_status("the process is not attached", "");
    } else {
        __atomic_store_n(&allocations_routed, 1, __ATOMIC_RELEASE);
        if (route_all() != 0)
            set_status("out of memory for the routing table; allocations not routed", "");
        char reason[300];
        snprintf(reason, sizeof reason, "was not routed (%s)",
                 why_not && why_not[0] ? why_not : "the attacher did not stop the program's threads");
        mlk_route_say_held(reason, mlk_blind, sizeof mlk_blind, mlk_routed, sizeof mlk_routed);
        mlk_segment_say_routing(mlk_blind, mlk_routed);
    }
    mlk_in_hook = was;
    return status;
}

/* Undo the routing and stop collecting; the reporter writes its last
 * report (reason detach) and ends.  Returns "" or why not. */
EXPORT const char *mlk_detach(void)
{
    int was = mlk_guard_up();
    status[0] = 0;
    if (!__atomic_exchange_n(&attached, 0, __ATOMIC_ACQ_REL)) {
        set_status("the process is not attached", "");
    } else {
        mlk_lock(&routing_lock);
        mlk_got_unroute_all();
        mlk_unlock(&routing_lock);
        mlk_detach_report();
    }
    mlk_in_hook = was;
    return status;
}

/* After mlk_detach: how many of the executable's entries are still patched
 * (their hooks inert), to be written back with the other threads stopped
 * by mlk_detach_unpatch.  No thread can be part-way through a patch's
 * bytes (a jump is one instruction; the rest int3), and one inside the
 * trampoline runs on into the original: any stop will do. */
EXPORT int mlk_detach_patches_left(void)
{
    return __atomic_load_n(&attached, __ATOMIC_ACQUIRE) ? 0 : mlk_route_patched_held();
}

EXPORT const char *mlk_detach_unpatch(void)
{
    int was = mlk_guard_up();
    status[0] = 0;
    if (__atomic_load_n(&attached, __ATOMIC_ACQUIRE))
        set_status("the process is attached", "");
    else
        mlk_route_unpatch_held();
    mlk_in_hook = was;
    return status;
}
