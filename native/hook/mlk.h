/* Internal interfaces between the C modules of libmtrace.so.
 * Each module's section lists what its neighbours may call; nothing else is
 * shared.  Nothing here may call malloc: this code runs inside malloc. */
#ifndef MLK_H
#define MLK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../shm_layout.h"
#include "../trailer_format.h"

#define MLK_HIDDEN __attribute__((visibility("hidden")))
#define MLK_LIKELY(x) __builtin_expect(!!(x), 1)
#define MLK_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- the thread's hot words ----------------------------------------------
 * Thread-local words the hooks' fast ways read, in one object: in a shared
 * library each thread-local object costs a hook one load of its offset
 * (initial-exec), so one object is one load where six were six (~5
 * instructions an allocation, 2 a free).  Each field keeps its owner and
 * its old name (the macros), documented where it is used. */
struct memo;
struct mlk_thread_counts {   /* stacks.c */
    unsigned stripe_plus_one;
    unsigned claim_in;
    int64_t totals[4];
    char *stripe_base;       /* set_stripe: where its counters of stack 0 are */
};
struct mlk_thread_hot {
    union {
        struct {
            int in_hook;     /* mlk_in_hook, below; MLK_IN_HOOK_BUSY (trailers.c) */
            unsigned no_free_way; /* MLK_THREAD_FREE_WAY, below */
        };
        uint64_t free_closed; /* both: the free's fast way tests them as one word */
    };
    int walk_quick;          /* mlk_walk_quick (unwind.c) */
    int not_recording;       /* mlk_thread_not_recording (api/lsan.c) */
    unsigned fast_alloc;     /* MLK_THREAD_*, below */
    int flag_plus_one;       /* trailers.c's: its fork slot (> 0), a lock (< 0), none yet */
    struct memo *memo;       /* unwind.c's thread_memo */
    int *errno_at;           /* mlk_errno_at (hooks.h) */
    struct mlk_thread_counts counts; /* stacks.c's mine */
};
extern MLK_HIDDEN __thread struct mlk_thread_hot mlk_hot __attribute__((tls_model("initial-exec")));
#define mlk_in_hook (mlk_hot.in_hook)
#define mlk_walk_quick (mlk_hot.walk_quick)
#define mlk_thread_not_recording (mlk_hot.not_recording)
#define mlk_errno_at (mlk_hot.errno_at)

/* The thread's own conditions for the allocation's fast way (trailers.c),
 * a bit each in one word, kept by the places that change them
 * (mlk_thread_fast_set), so that the fast way tests the word once where it
 * tested four: its busy flag is a slot's (trailers.c's set_flag), it looks
 * for whole walks (mlk_walk_quick), it owns a counter stripe (stacks.c),
 * and -- the one bit that must be clear -- it does not record
 * (mlk_thread_not_recording).  A new thread's word is 0: no fast way until
 * each has been set.  Only the thread writes it (inside a hook, or in its
 * own API calls), so a bit may lag its reason only towards "no". */
#define MLK_THREAD_FLAG 1u
#define MLK_THREAD_QUICK 2u
#define MLK_THREAD_STRIPE 4u
#define MLK_THREAD_NOT_RECORDING 8u
#define MLK_THREAD_FAST (MLK_THREAD_FLAG | MLK_THREAD_QUICK | MLK_THREAD_STRIPE)
/* The free's fast way needs two of them, a busy flag (a fork slot) and a
 * stripe of its own: no_free_way is 0 when both hold, so that the free
 * tests it with the guard in one word (free_closed) -- 4 instructions a
 * free.  A new thread's is 1 (mlk_hot's initial value, interpose.c). */
#define MLK_THREAD_FREE_WAY (MLK_THREAD_FLAG | MLK_THREAD_STRIPE)
/* The word, and no_free_way from it: the one place that writes them. */
static inline void mlk_thread_fast_word(unsigned word)
{
    mlk_hot.fast_alloc = word;
    mlk_hot.no_free_way = (word & MLK_THREAD_FREE_WAY) != MLK_THREAD_FREE_WAY;
}
static inline void mlk_thread_fast_set(unsigned bit, int holds)
{
    mlk_thread_fast_word(holds ? mlk_hot.fast_alloc | bit : mlk_hot.fast_alloc & ~bit);
}

/* Why the fast ways (trailers.c) may not be taken now: a bit each, kept by
 * the places that change those conditions (mlk_fast_off_set), so that the
 * fast ways test one word where they tested six.  A bit may be set longer
 * than its reason lasts (a slower way, never a wrong one); never cleared
 * while its reason holds. */
#define MLK_FAST_NO_TRAILERS 1u   /* mlk_trailer_key not made yet */
#define MLK_FAST_NOT_GLIBC 2u     /* the real malloc is not glibc's (!mlk_glibc_heap) */
#define MLK_FAST_NOT_COLLECTED 4u /* !mlk_ever_collected */
#define MLK_FAST_IGNORED 8u       /* mlk_ignored_count != 0 */
#define MLK_FAST_QUARANTINE 16u   /* mlk_quarantine_cap != 0 */
#define MLK_FAST_LAZY_SPAWN 32u   /* mlk_lazy_spawn_at != 0 */
#define MLK_FAST_NOT_READY 64u    /* the real functions not looked up yet (interpose.c's resolve) */
#define MLK_FAST_EVENTS 128u      /* the event log records (MLK_ATTEND_EVENTS, which stays set) */
#define MLK_FAST_GUARDED 256u     /* misuse=hold: a freed pointer is read only once known readable */
#define MLK_FAST_PYTHON 512u      /* Python frames are read (runtimes/cpython.c): an allocation's stack is more than its walk */
extern MLK_HIDDEN uint32_t mlk_fast_off;
MLK_HIDDEN void mlk_fast_off_set(uint32_t reason, int holds);

/* ---- rt.c: raw system calls and diagnostics, usable anywhere ---------- */
MLK_HIDDEN long mlk_syscall6(long n, long a, long b, long c, long d, long e, long f);
/* The loaded object holding addr as dladdr names it -- its start (its
 * dli_fbase) and file name (dli_fname; "" for the main program, where
 * dladdr says argv[0]) -- without dladdr's search of that object's symbols
 * for the nearest one, most of its cost: ~80k instructions a call on an
 * address in libc, and the start asked six such (46% of a traced
 * /bin/true's instructions).  By glibc 2.35's _dl_find_object (unwind_cfi.c),
 * else dladdr.  0: in no object.  name may be NULL. */
MLK_HIDDEN int mlk_object_of(const void *addr, const void **base, const char **name);
MLK_HIDDEN void *mlk_map_anon(size_t len);     /* NULL on failure */
MLK_HIDDEN void mlk_unmap(void *p, size_t len);
MLK_HIDDEN void mlk_own_range(uint64_t *lo, uint64_t *hi); /* where our own maps are */
MLK_HIDDEN int mlk_getpid(void);
MLK_HIDDEN void mlk_futex_wake(uint32_t *word);
MLK_HIDDEN int mlk_futex_wait(uint32_t *word, uint32_t expected, int timeout_ms);
MLK_HIDDEN uint64_t mlk_now_ns(int clock);
/* One line on stderr: "libmemleak: " + the message; no stdio, no malloc. */
MLK_HIDDEN void mlk_warn(const char *a, const char *b, const char *c);
/* One line of any number of parts (async-signal-safe: the stack and write). */
MLK_HIDDEN void mlk_warn_parts(const char *const *parts, size_t count);
/* The report signal (0 = none) and our handler for it (control.c). */
MLK_HIDDEN int mlk_report_signal(void);
MLK_HIDDEN extern void (*const mlk_report_handler)(int);
MLK_HIDDEN void mlk_signals_init(void);  /* signals.c: look the real functions up */
/* signals.c: the root's handlers for the deaths by signal it leaves at the
 * default, which have its final report written first. */
MLK_HIDDEN void mlk_signals_watch_deaths(void);
/* control.c: the root dying of `sig`: its final report asked for and waited for. */
MLK_HIDDEN void mlk_report_dying(int sig);
MLK_HIDDEN int mlk_signal_is_programs(void); /* signals.c: the program took the report signal over */
MLK_HIDDEN size_t mlk_strlen(const char *s);
MLK_HIDDEN void mlk_fmt_u64(char *buf, uint64_t v);  /* buf >= 21 bytes */
/* Each mapping of /proc/self/maps, in address order, to fn(lo, hi, arg)
 * until it returns nonzero (that value returned).  Raw calls, no malloc:
 * usable inside a hook.  -1 when the file cannot be read (no /proc in a
 * sandbox), 0 when fn never stopped it. */
MLK_HIDDEN int mlk_each_mapping(int (*fn)(uint64_t lo, uint64_t hi, void *arg), void *arg);
MLK_HIDDEN int mlk_each_exec_mapping(int (*fn)(uint64_t lo, uint64_t hi, void *arg), void *arg); /* x only */

/* A spinlock that never sleeps in the kernel: held for a few instructions. */
typedef struct { volatile int held; } mlk_lock_t;
MLK_HIDDEN void mlk_lock(mlk_lock_t *l);
MLK_HIDDEN void mlk_unlock(mlk_lock_t *l);
/* Takes l before a fork (acquire), or lets it go after, in parent and child. */
MLK_HIDDEN void mlk_lock_across_fork(mlk_lock_t *l, int acquire);

/* ---- segment.c: the shared memory ------------------------------------- */
#define MLK_STACKS_CAP (1ull << 21)  /* 2M distinct stacks: 512 MiB if all used (a trailer keeps 21 bits) */
#define MLK_FRAMES_CAP (1ull << 26)  /* 64M frames: 512 MiB if all used */
extern MLK_HIDDEN struct mlk_header *mlk_seg;  /* NULL until created */
extern MLK_HIDDEN int mlk_seg_fd;
MLK_HIDDEN int mlk_segment_create(uint32_t depth, const char *dir, const char *listen, const char *alloc_fns);
extern MLK_HIDDEN uint64_t mlk_segment_as_limit; /* RLIMIT_AS that shrank the tables, or 0 */
/* The report directory and program name as the segment was created with
 * them, handed to the reporter in its argv (spawn.c). */
/* What the hook cannot see, one line (route/route.c: the program's own
 * malloc, found before ours, that could not be routed); "" when nothing.
 * And what it routed to itself.  Copied into every segment made (the
 * `blind` and `routed` strings of its header). */
#define MLK_BLIND_MAX 1024
extern MLK_HIDDEN char mlk_blind[MLK_BLIND_MAX];
extern MLK_HIDDEN char mlk_routed[MLK_BLIND_MAX];
extern MLK_HIDDEN char mlk_reporter_dir_arg[4096];
extern MLK_HIDDEN char mlk_reporter_name_arg[256];
/* fork(): prepare copies the segment (our locks held), child maps the copy. */
/* mlk_blind/mlk_routed grew (a module routed after a dlopen): the segment's
 * strings follow. */
MLK_HIDDEN void mlk_segment_say_routing(const char *blind, const char *routed);
MLK_HIDDEN void mlk_segment_fork_prepare(void);
MLK_HIDDEN void mlk_segment_fork_parent(void);
MLK_HIDDEN int mlk_segment_fork_child(void);
MLK_HIDDEN int mlk_segment_move_fd(int lo, int hi); /* 0 = now outside lo..hi */
/* The segment's stacks array: kept in a variable of its own, set with
 * mlk_seg (the counters' every update found it through mlk_seg's header,
 * a second load; a forked child maps its copy at the same address). */
extern MLK_HIDDEN struct mlk_stack *mlk_stacks_base;
static inline struct mlk_stack *mlk_stacks(void) { return mlk_stacks_base; }
/* Counter stripe k (0 to MLK_COUNTER_STRIPES - 1): stacks_cap counters,
 * stack id's at index id (shm_layout.h, struct mlk_stack). */
extern MLK_HIDDEN struct mlk_counters *mlk_stripes_base;
extern MLK_HIDDEN uint64_t mlk_stripe_len; /* stacks_cap */
static inline struct mlk_counters *mlk_stripe(unsigned k) { return mlk_stripes_base + (uint64_t)k * mlk_stripe_len; }
MLK_HIDDEN uint64_t *mlk_frames(void);
MLK_HIDDEN struct mlk_module *mlk_modules(void);
MLK_HIDDEN char *mlk_strings(void);
/* Append a string; returns its offset or UINT32_MAX when full. */
MLK_HIDDEN uint32_t mlk_string_add(const char *s, uint32_t len);

/* ---- modules.c: the loaded-module map --------------------------------- */
MLK_HIDDEN void mlk_modules_scan(void);          /* sync with dl_iterate_phdr */
/* Module unloads seen: the segment's unload_epoch, kept here too so that
 * an allocation reads it with one load (not the segment's address first),
 * and from memory no other process can write. */
extern MLK_HIDDEN uint32_t mlk_unload_epoch;
MLK_HIDDEN void mlk_modules_catch_up(void);      /* rescan if the loader unloaded behind us */
MLK_HIDDEN int mlk_modules_cover(const uint64_t *ips, int n); /* all ips known? */
MLK_HIDDEN void mlk_modules_set_self(const void *any_address_in_libmtrace);
MLK_HIDDEN int mlk_is_self_address(uint64_t ip);
/* Any address in the allocator our malloc forwards to, if that is a library
 * of its own (not libc); and whether ip is in it. */
MLK_HIDDEN void mlk_modules_set_allocator(const void *any_address_in_it);
MLK_HIDDEN int mlk_is_allocator_address(uint64_t ip);
MLK_HIDDEN void mlk_note_allocator(void);
MLK_HIDDEN void mlk_modules_lock_for_fork(int acquire);
/* The addresses a loaded module's PT_LOAD segments span: [*lo, *hi)
 * (lo >= hi when it has none). */
struct dl_phdr_info;
MLK_HIDDEN void mlk_module_range(const struct dl_phdr_info *info, uint64_t *lo, uint64_t *hi);

/* ---- unwind.c: the backtrace of the current thread -------------------- */
/* Fills ips with up to max return addresses of the caller of the allocator
 * (our own frames skipped), innermost first; returns how many.  *truncated
 * is set when more frames existed than max.  *known: when this walk is one
 * remembered whole, for which mlk_walk_remember_stack told the stack id
 * interned for `kind` and `unload_epoch`, that id -- and then ips is left
 * unfilled; else MLK_NO_STACK. */
MLK_HIDDEN int mlk_backtrace(uint64_t *ips, int max, int *truncated, int kind, uint32_t unload_epoch,
                             uint32_t *known);
/* The stack id of this thread's walk from the hook's frame (mlk_walk_start,
 * set) when it is the walk remembered last from that first state, whole
 * and with its id known -- most allocations of programs that repeat their
 * paths -- found without the walk's machinery; else MLK_NO_STACK, and
 * mlk_backtrace walks.  (No depth asked: a thread's remembered walks are
 * made for the segment's, which a process never changes.) */
MLK_HIDDEN uint32_t mlk_walk_known(int kind, uint32_t unload_epoch);
/* The same from a hook frame's state given, not mlk_walk_start (always
 * inlined: the allocation's fast way, mlk_trailer_alloc_fast). */
struct mlk_walk_start;
MLK_HIDDEN uint32_t mlk_walk_known_at(int kind, uint32_t unload_epoch, struct mlk_walk_start at);
/* The same from the older walks remembered from that state, asked where
 * mlk_walk_known said MLK_NO_STACK (out of line: seldom wanted). */
MLK_HIDDEN uint32_t mlk_walk_known_older(int kind, uint32_t unload_epoch);
/* The same for a thread resting from whole walks (!mlk_walk_quick), from
 * its remembered paths and the hook frame's state `at`. */
MLK_HIDDEN uint32_t mlk_walk_known_path(int kind, uint32_t unload_epoch, struct mlk_walk_start at);
/* Whether mlk_walk_known may answer for this thread: its last walk was
 * remembering whole walks (not resting from them: most of gcc's cc1's
 * walks are served by remembered paths instead, which it does not look at). */
/* (mlk_hot's field, above.) */
/* Where the next backtrace of this thread may start: the state of a hook's
 * own frame (its return address, CFA and the caller's rbp), so that the walk
 * need not climb back through our frames.  Set right before the hook asks
 * for a backtrace (the frame is live until then), used once, then cleared. */
struct mlk_walk_start {
    uint64_t ip, sp, bp;
};
extern __thread struct mlk_walk_start mlk_walk_start __attribute__((tls_model("initial-exec")));
/* The state of the frame of the function this expands in (a struct
 * mlk_walk_start): __builtin_frame_address(0) makes the compiler keep rbp
 * as its frame pointer -- [rbp] is the caller's rbp, [rbp + 8] the return
 * address, rbp + 16 the CFA. */
#define MLK_FRAME_HERE()                                                                           \
    ({                                                                                             \
        const uint64_t *fp_ = __builtin_frame_address(0);                                          \
        (struct mlk_walk_start){fp_[1], (uint64_t)fp_ + 16, fp_[0]};                               \
    })
#define MLK_WALK_FROM_HERE() (mlk_walk_start = MLK_FRAME_HERE())
MLK_HIDDEN void mlk_unwind_init(void);  /* before the first mlk_backtrace */
/* A module was unloaded: its addresses may now hold other code, whose
 * unwind rules differ, so cached rules are dropped. */
MLK_HIDDEN void mlk_unwind_forget(void);
/* Tells the walk this thread's last backtrace returned the id interned for it. */
MLK_HIDDEN void mlk_walk_remember_stack(int kind, uint32_t unload_epoch, uint32_t id);
MLK_HIDDEN void mlk_unwind_lock_for_fork(int acquire);
/* How many frames of a walk the frame-pointer fallback found (unwind_fp.c),
 * and whether it ended in code without unwind tables. */
MLK_HIDDEN int mlk_frames_by_fp(const uint64_t *ips, int depth, int *ends_there);
#define MLK_UNWIND_FAST 0
#define MLK_UNWIND_LIBGCC 1
extern MLK_HIDDEN int mlk_unwind_mode;

/* ---- stacks.c: backtrace -> stack id in the shared table --------------- */
#define MLK_NO_STACK UINT32_MAX
/* unload_epoch: the segment's, read once by the caller (it is part of the key). */
/* cut: the walk stopped at the configured depth with frames left (the
 * stack's first interning says so for good: MLK_STACK_CUT). */
MLK_HIDDEN uint32_t mlk_stack_intern(const uint64_t *ips, int depth, int kind, uint32_t unload_epoch, int cut);
/* A record of `words` words (not a stack: never looked up nor counted;
 * MLK_KIND_PYCODE), written in place by fill. */
MLK_HIDDEN void mlk_stack_add_record(int words, void (*fill)(uint64_t *at, const void *arg), const void *arg,
                                     int kind);

/* ---- runtimes/cpython.c: Python frames inside native stacks ------------ */
extern MLK_HIDDEN int mlk_py_reading; /* the process is a CPython whose frames are read */
/* The stack with the calling thread's Python frames over native stack
 * `native` (that one itself when it runs none). */
MLK_HIDDEN uint32_t mlk_py_stack(uint32_t native, int kind, uint32_t unload_epoch);
/* A new stack of Python frames: the code objects not described yet are. */
MLK_HIDDEN void mlk_py_describe_codes(const uint64_t *words, int n);
/* At the segment's making and after a dlopen: an interpreter found? */
MLK_HIDDEN void mlk_py_find_interpreter(void);

/* Of the process's memory (heap blocks, mappings): the stack's counters
 * and the calling thread's totals (memleak_thread). */
MLK_HIDDEN void mlk_stack_count_alloc(uint32_t id, uint64_t bytes); /* one new block */
/* Change live bytes/blocks only (frees, partial unmaps, region splits). */
MLK_HIDDEN void mlk_stack_account(uint32_t id, int64_t bytes, int64_t blocks);
/* Whether this thread owns a counter stripe (its counts then take plain
 * adds, and never a call). */
MLK_HIDDEN int mlk_stack_owns_stripe(void);
/* Before the first count: the key that gives a thread's counter stripe up at its exit. */
MLK_HIDDEN void mlk_stacks_init(void);
/* In a forked child: the stripes the parent's other threads owned are free. */
MLK_HIDDEN void mlk_stacks_fork_child(void);
/* A block with a trailer, counted with its slack (bytes reserved beyond
 * its size), and its free. */
MLK_HIDDEN void mlk_stack_count_trailed(uint32_t id, uint64_t bytes, uint64_t slack);
MLK_HIDDEN void mlk_stack_uncount_trailed(uint32_t id, uint64_t bytes, uint64_t slack);
/* Their halves, for the fast ways (trailers.c): stack id's counters in
 * the stripe this thread owns (NULL: it owns none), the same where
 * mlk_stack_owns_stripe has said it does (the allocation asks before its
 * walk), and a new block's or a free's counts there. */
MLK_HIDDEN struct mlk_counters *mlk_stack_owned_counters(uint32_t id);
MLK_HIDDEN struct mlk_counters *mlk_stack_owned_counters_known(uint32_t id);
MLK_HIDDEN void mlk_stack_count_owned(struct mlk_counters *c, uint64_t bytes, uint64_t slack);
MLK_HIDDEN void mlk_stack_uncount_owned(struct mlk_counters *c, uint64_t bytes, uint64_t slack);
/* Whether this thread counts on the shared stripe (it owns none), and a
 * new block's or a free's counts by a thread that owns none, inline
 * (locked adds; a stripe claimed when one is due). */
MLK_HIDDEN int mlk_stack_on_shared_stripe(void);
MLK_HIDDEN void mlk_stack_count_unowned(uint32_t id, uint64_t bytes, uint64_t slack);
MLK_HIDDEN void mlk_stack_uncount_unowned(uint32_t id, uint64_t bytes, uint64_t slack);
/* The same for what is not the process's memory -- custom blocks (inside
 * heap blocks already counted), resources: the stack's counters only. */
MLK_HIDDEN void mlk_stack_count_alloc_other(uint32_t id, uint64_t bytes);
MLK_HIDDEN void mlk_stack_account_other(uint32_t id, int64_t bytes, int64_t blocks);
/* The calling thread's memory totals since it began: allocated, freed. */
MLK_HIDDEN void mlk_thread_totals(int64_t out[4]);
MLK_HIDDEN void mlk_stacks_lock_for_fork(int acquire);

/* ---- addrs.c: live block -> (stack, size), private to the process ------ */
/* Starts loading the table line of addr, to be inserted after the backtrace. */
MLK_HIDDEN void mlk_addr_prefetch(uint64_t addr);
/* Returns 0 if the block could not be tracked (table memory exhausted).
 * is_new: a new allocation (counted in the stack's totals), or 0 for a block
 * put back after a failed realloc (only live bytes/blocks change). */
MLK_HIDDEN uint64_t mlk_addr_table(void); /* where the scan finds it (shm_layout.h addr_table) */
MLK_HIDDEN int mlk_addr_insert(uint64_t addr, uint32_t stack, uint64_t size, int is_new);
/* Removes the block; returns 1 and fills stack/size if it was tracked.
 * In sampling mode the hooks call it only for blocks mlk_maybe_recorded()
 * does not rule out (the check is theirs, before any other work). */
MLK_HIDDEN int mlk_addr_remove(uint64_t addr, uint32_t *stack, uint64_t *size);
/* Before any block is in the table: hash each block on its own, not by window (runtimes/pymalloc.c). */
MLK_HIDDEN int mlk_addr_hash_each_block(void);
MLK_HIDDEN void mlk_addrs_lock_for_fork(int acquire);
/* The program's own blocks (api/custom.c): where the scan finds them
 * (shm_layout.h custom_table); its lock, held across fork. */
MLK_HIDDEN uint64_t mlk_custom_table(void);
MLK_HIDDEN void mlk_custom_lock_for_fork(int acquire);
/* Ignored objects and root regions (api/lsan.c): where the scan finds them
 * (shm_layout.h lsan_table); a free forgets the ignored pointers into its
 * block, when there are any; a thread's allocations while it has asked for
 * none to be recorded are not counted. */
MLK_HIDDEN uint64_t mlk_lsan_table(void);
extern MLK_HIDDEN volatile uint64_t mlk_ignored_count;
MLK_HIDDEN void mlk_ignored_forget(uint64_t start, uint64_t end);
/* (mlk_hot's field, above.) */
MLK_HIDDEN void mlk_lsan_lock_for_fork(int acquire);
/* The program's __lsan_default_suppressions(), if it has one, into the
 * segment (as collection first starts). */
MLK_HIDDEN void mlk_lsan_read_default_suppressions(void);
/* Anonymous mappings: an interval map, since munmap may cut any part. */
MLK_HIDDEN int mlk_region_insert(uint64_t start, uint64_t len, uint32_t stack);
/* Forget [start, start+len): accounts the removed bytes and pieces. */
MLK_HIDDEN void mlk_region_remove(uint64_t start, uint64_t len);
/* Bytes of [start, start+len) that are tracked regions, and the MLK_KIND_*
 * of the first of them (-1: none). */
MLK_HIDDEN uint64_t mlk_region_tracked(uint64_t start, uint64_t len, int *kind);
/* fork(): the child forgets the MAP_SHARED mappings it inherited (locks held). */
MLK_HIDDEN void mlk_regions_fork_child(void);
MLK_HIDDEN uint64_t mlk_region_table(void); /* for the reporter (shm_layout.h region_table) */
/* PROT_NONE reservations: address space, not memory.  reserve: [start,
 * start+len) is one now (whatever was there is gone); open: its reserved
 * parts become mapped regions of `stack` (MLK_NO_STACK: just forgotten;
 * 0 if one could not be recorded); close: its mapped parts become
 * reserved again; reserved: how many of its bytes are reserved. */
MLK_HIDDEN void mlk_region_reserve(uint64_t start, uint64_t len);
MLK_HIDDEN int mlk_region_open(uint64_t start, uint64_t len, uint32_t stack);
MLK_HIDDEN void mlk_region_close(uint64_t start, uint64_t len);
MLK_HIDDEN uint64_t mlk_region_reserved(uint64_t start, uint64_t len);

/* (trailers.c's: trailers.h) */

/* ---- record.c: what the hooks call ------------------------------------ */
MLK_HIDDEN void mlk_record_alloc(void *p, size_t size, int kind);
MLK_HIDDEN uint32_t mlk_current_stack(int kind); /* the caller's stack id, or MLK_NO_STACK */
/* The same for a block 16 bytes longer than `size`: its trailer records it. */
/* ---- misuse.c: misuse of the allocator, recorded for the reports ----- */
#define MLK_NO_SIZE SIZE_MAX /* a free that gives no size */
/* The free of a block with a trailer (taken: its meta word) by `call`
 * (MLK_CALL_*), `given` its sized delete's size, `align` its aligned
 * delete's alignment (0: none): a mismatch is recorded. */
MLK_HIDDEN void mlk_misuse_trailed(uint64_t meta, int call, size_t given, size_t align);
/* The free of a pointer with no trailer and in no table: a double free or
 * an invalid one is recorded; 1 when the free must not go on (misuse=hold). */
MLK_HIDDEN int mlk_misuse_untrailed(void *p, int call);
MLK_HIDDEN void mlk_misuse_segment_made(void); /* the program's own operator new/delete? */
/* misuse=hold keeps a program alive that frees a wild pointer (an
 * unmapped address, a block whose pages were given back), where glibc's
 * free would fault reading the chunk header: from then on a freed
 * pointer's header and trailer are read only once the kernel says they can
 * be (mlk_block_readable), and the free's fast way is closed
 * (MLK_FAST_GUARDED).  The default, misuse=report, reads them as glibc's
 * own free does -- and faults where it would, at the same free. */
extern MLK_HIDDEN int mlk_reads_guarded;
MLK_HIDDEN void mlk_misuse_guard_reads(void);
MLK_HIDDEN int mlk_block_readable(const void *p);
MLK_HIDDEN void mlk_misuse_lock_for_fork(int acquire);
/* ---- quarantine.c: freed blocks held back (quarantine=BYTES) ---------- */
extern MLK_HIDDEN uint64_t mlk_quarantine_cap; /* 0: no quarantine */
MLK_HIDDEN void mlk_quarantine_start(uint64_t bytes);
/* Holds p, a block with a trailer just marked freed (`bytes` usable),
 * instead of freeing it; gives the oldest back beyond the bound. */
MLK_HIDDEN void mlk_quarantine_put(void *p, uint64_t bytes);
/* 1 when p is held, with the stack that freed it. */
MLK_HIDDEN int mlk_quarantine_holds(void *p, uint32_t *free_stack);
MLK_HIDDEN void mlk_quarantine_lock_for_fork(int acquire);

/* tag: MLK_TRAILER_TAG, the family (the call that made it: what must free it) and alignment */
/* (looked: the quick look, mlk_walk_known, was made for this walk and missed.) */
MLK_HIDDEN void mlk_record_trailed(void *p, size_t usable, size_t size, int kind, uint64_t tag, int looked);
MLK_HIDDEN int mlk_record_free(void *p); /* 1: it was recorded */
/* realloc: forget p's block but return its stack and size (1 if tracked) ... */
MLK_HIDDEN int mlk_record_take(void *p, uint32_t *stack, uint64_t *size);
/* ... and put it back unchanged when the real realloc fails. */
MLK_HIDDEN void mlk_record_put_back(void *p, uint32_t stack, uint64_t size);
MLK_HIDDEN void mlk_record_mmap(void *p, size_t len, int kind); /* MLK_KIND_MMAP or _SHARED */
MLK_HIDDEN void mlk_record_munmap(void *p, size_t len);
MLK_HIDDEN void mlk_record_reserve(void *p, size_t len);
MLK_HIDDEN void mlk_record_mprotect(void *p, size_t len, int prot);

/* ---- sample.c: which allocations are recorded in sampling mode --------- */
extern MLK_HIDDEN uint64_t mlk_sample_bytes;   /* 0 = record every allocation */
extern __thread int64_t mlk_sample_left __attribute__((tls_model("initial-exec")));
MLK_HIDDEN int mlk_sample_slow(size_t size);  /* the countdown ran out: draw again */
/* Record this allocation of `size` bytes?  Byte-weighted Poisson sampling
 * (as jemalloc and tcmalloc do): each thread counts down a random number of
 * bytes with mean mlk_sample_bytes; the allocation that crosses zero is
 * recorded.  The common case is one subtraction on a thread-local. */
/* Count `size` bytes down; 1 if the countdown is still positive. */
static inline int mlk_sample_countdown(size_t size)
{
    int64_t left = mlk_sample_left - (int64_t)(size < (1ull << 62) ? size : (1ull << 62));
    if (MLK_LIKELY(left > 0)) {
        mlk_sample_left = left;
        return 1;
    }
    return 0;
}
static inline int mlk_sample(size_t size)
{
    if (MLK_LIKELY(!mlk_sample_bytes))
        return 1;
    return mlk_sample_countdown(size) ? 0 : mlk_sample_slow(size);
}

/* Sampling mode: may this block have been recorded?  A saturating count of
 * recorded live blocks per hash slot (addrs.c keeps it), so that the free of
 * an unrecorded block -- nearly all of them -- costs one load and no lock.
 * A count is raised before the block's address reaches the program, and a
 * free necessarily follows that, so a zero is exact. */
#define MLK_FILTER_BITS 15
extern MLK_HIDDEN uint8_t mlk_sampled_filter[1u << MLK_FILTER_BITS];
static inline uint32_t mlk_filter_index(uint64_t addr)
{
    return (uint32_t)((addr * 0x9e3779b97f4a7c15ull) >> (64 - MLK_FILTER_BITS));
}
static inline int mlk_maybe_recorded(const void *p)
{
    return !mlk_sample_bytes ||
           __atomic_load_n(&mlk_sampled_filter[mlk_filter_index((uint64_t)p)], __ATOMIC_RELAXED);
}

/* ---- events/events.c: the event log (record=) ------------------------ */
/* MLK_ATTEND_*: what the hooks must do on their way besides counting --
 * log events, answer the reporter's ask for the allocator's statistics.
 * The reporter may set MLK_ATTEND_STATS from outside (attention_addr). */
extern MLK_HIDDEN int mlk_attention;
/* Appends one record (MLK_EVENT_*) to this thread's page of the pool (the
 * caller has seen MLK_ATTEND_EVENTS). */
MLK_HIDDEN void mlk_event(int type, uint64_t addr, uint64_t size, uint32_t stack);
/* The same at an allocation "at rest" (trailers.c: the real allocator has
 * returned, the hook holds no lock, its guard is up), where the
 * allocator's statistics may also be asked. */
MLK_HIDDEN void mlk_event_at_rest(int type, uint64_t addr, uint64_t size, uint32_t stack);
/* Each change to a stack's counters that the log replays: free in the
 * default mode but for one load and a branch. */
#define MLK_EVENT(type, addr, size, stack)                                                         \
    do {                                                                                           \
        if (MLK_UNLIKELY(mlk_attention & MLK_ATTEND_EVENTS))                                       \
            mlk_event(type, (uint64_t)(addr), (uint64_t)(size), stack);                            \
    } while (0)
#define MLK_EVENT_AT_REST(type, addr, size, stack)                                                 \
    do {                                                                                           \
        if (MLK_UNLIKELY(mlk_attention))                                                           \
            mlk_event_at_rest(type, (uint64_t)(addr), (uint64_t)(size), stack);                    \
    } while (0)
/* allocator_stats.c: the allocator's own statistics (jemalloc's stats.*) */
MLK_HIDDEN void mlk_alloc_stats_resolve(void);        /* at start, after dlopen/dlclose */
MLK_HIDDEN void mlk_alloc_stats_answer(uint32_t stack); /* at rest, when asked */
MLK_HIDDEN uint32_t mlk_events_pages_wanted(void); /* the pool the segment is made with */
MLK_HIDDEN void mlk_events_start(void);            /* as collection starts */
MLK_HIDDEN void mlk_events_fork_child(void);

/* ---- control.c and its neighbours (control.h): configuration, triggers, the reporter */
extern MLK_HIDDEN volatile int mlk_collecting;  /* mirror of mlk_seg->collecting */
extern MLK_HIDDEN volatile int mlk_ever_collected;
MLK_HIDDEN void mlk_init(void);                  /* idempotent */
/* attach.c and its side of control.c: a process started without us. */
extern MLK_HIDDEN int mlk_attach_mode;           /* loaded by dlopen and attached */
MLK_HIDDEN int mlk_loaded_as_preload(void);      /* interpose.c */
MLK_HIDDEN void mlk_resolve_real(void);          /* interpose.c */
MLK_HIDDEN int mlk_init_attached(const char *config, char *why, size_t why_len);
MLK_HIDDEN void mlk_detach_report(void);
MLK_HIDDEN void mlk_attach_route_new_modules(void);
/* The next definition of a symbol after ours: RTLD_NEXT as a preload; as an
 * attached copy (not in the global scope) the program's own, RTLD_DEFAULT,
 * seen through a non-PIE executable's canonical PLT entry (next_symbol.c). */
#define MLK_NEXT_HANDLE (mlk_attach_mode ? RTLD_DEFAULT : RTLD_NEXT)
MLK_HIDDEN void *mlk_next_symbol(const char *name);
MLK_HIDDEN void mlk_init_reporter_life(struct mlk_header *h); /* spawn.c: the reporter's life mutex */
/* Asks the reporter for a report, counted in *reason_counter; with `wait`,
 * returns once it is written (1), or 0 when it was not in time. */
MLK_HIDDEN int mlk_request_report(uint32_t *reason_counter, int wait);
MLK_HIDDEN void mlk_after_dl_change(void);
/* The program is about to close or overwrite descriptors lo..hi, which
 * include the segment's: keep the segment reachable. */
MLK_HIDDEN void mlk_segment_fd_threatened(int lo, int hi);
MLK_HIDDEN int mlk_start_collecting(void);
/* Descendants: stack count at which to start the reporter (0 = not armed). */
extern MLK_HIDDEN uint64_t mlk_lazy_spawn_at;
MLK_HIDDEN void mlk_lazy_spawn(void);
MLK_HIDDEN void mlk_stop_collecting(void);
MLK_HIDDEN int mlk_collecting_or_paused(void); /* collecting, or paused from outside (shm_layout.h) */

/* Thread-local recursion guard: set while this thread runs our own code, so
 * that allocations made by the code we call are passed straight through.
 * (mlk_hot's field, above.)  Nonzero is "inside"; its MLK_IN_HOOK_BUSY bit
 * says more: the thread is part-way through a counter update that fork
 * must not split (trailers.c), and fork waits for it to drop.  So code
 * that raises the guard where it may already be up keeps that bit
 * (`was | 1`), and puts the old value back. */
#define MLK_IN_HOOK_BUSY 0x40000000
static inline int mlk_guard_up(void) /* the old value, for `mlk_in_hook = was` */
{
    int was = mlk_in_hook;
    mlk_in_hook = was | 1;
    return was;
}

/* Runs the statements with this thread's guard up and lock `l` held (our
 * own code that takes a lock outside the hooks: the in-program API); a
 * `break` in them ends them, not the guard. */
#define MLK_GUARDED(l, ...)                                                                            \
    do {                                                                                               \
        int mlk_was_ = mlk_guard_up();                                                                 \
        mlk_lock(l);                                                                                   \
        do {                                                                                           \
            __VA_ARGS__;                                                                               \
        } while (0);                                                                                   \
        mlk_unlock(l);                                                                                 \
        mlk_in_hook = mlk_was_;                                                                        \
    } while (0)

#endif
