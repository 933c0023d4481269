/* The frame-pointer fallback: one step of a walk through code no unwind
 * table covers (a binary built without .eh_frame for most of its code, as
 * Chromium's is; hand-written assembly; JIT code), by the frame-pointer
 * chain that code keeps -- [rbp] the caller's rbp, [rbp + 8] the return
 * address.
 *
 * A table is a statement about the code; rbp in code without one is only a
 * register, so the chain is followed only where it checks out: the frame
 * lies on the thread's own stack, above sp (frames grow upwards), the
 * return address is inside an object the loader mapped.  Anything else
 * ends the walk there.  The caller's rbp is believed only if it is 0 or
 * again on the stack above this frame: a later step by a table rule may
 * compute its CFA from it, and such steps check only that the CFA is
 * within MAX_FRAME above sp, not that it is mapped.  A caller's rbp that is
 * not (the caller is code with tables that uses rbp as any register, as
 * glibc's __libc_start_main does) is said to the walk, which goes on with
 * rbp unknown until a rule restores it from a frame (unwind.c).
 *
 * "On the thread's own stack" needs its extent, known without a syscall
 * (a walk runs inside malloc, in sandboxes where /proc is out of reach):
 *   - the main thread's stack lies below __libc_stack_end and within
 *     RLIMIT_STACK of it (the kernel keeps other mappings out of that gap);
 *   - a thread made by pthread_create: glibc puts the thread's descriptor
 *     (pthread_self()) at the top of its stack block, and the block holds
 *     the stack size the creator asked for (the pthread_create wrapper
 *     below passes it on) below the descriptor.
 *   - a thread made otherwise (before libmtrace was attached, by a raw
 *     clone, or before the wrapper had a slot): the mapping its sp lies in,
 *     looked up once per thread in /proc/self/maps (raw calls), and only
 *     when a walk first needs the fallback.  Without /proc (a sandbox), no
 *     fallback for it: its walks end where the tables end.
 * A walk on a signal stack is bounded by that stack: the chain back into
 * the interrupted code is not followed. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sys/resource.h>

#include "control.h"
#include "hooks.h"
#include "unwind_cfi.h"

#if defined(__x86_64__)

extern void *__libc_stack_end; /* the ELF loader's: the main thread's initial sp */

static uint64_t main_lo, main_hi;
static __thread uint64_t thread_lo __attribute__((tls_model("initial-exec")));
static __thread uint64_t thread_hi __attribute__((tls_model("initial-exec")));
static __thread int thread_looked_up __attribute__((tls_model("initial-exec")));

void mlk_fp_init(void)
{
    if (main_hi)
        return;
    struct rlimit rl;
    uint64_t limit = 8u << 20;
    if (getrlimit(RLIMIT_STACK, &rl) == 0)
        limit = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (4ull << 30) ? 4ull << 30 : rl.rlim_cur;
    uint64_t top = (uint64_t)__libc_stack_end;
    if (top > limit) {
        main_lo = top - limit;
        main_hi = top;
    }
}

struct mapping_of {
    uint64_t at, lo, hi;
};

static int find_mapping(uint64_t lo, uint64_t hi, void *arg)
{
    struct mapping_of *m = arg;
    if (m->at < lo || m->at >= hi)
        return 0;
    m->lo = lo, m->hi = hi;
    return 1;
}

/* The end of the stack sp is on, or 0 when that is not known. */
static inline uint64_t stack_end(uint64_t sp)
{
    if (sp >= main_lo && sp < main_hi)
        return main_hi;
    if (sp >= thread_lo && sp < thread_hi)
        return thread_hi;
    if (!thread_lo && !thread_looked_up) {
        thread_looked_up = 1;
        struct mapping_of m = {sp, 0, 0};
        if (mlk_each_mapping(find_mapping, &m) == 1) {
            thread_lo = m.lo;
            thread_hi = m.hi;
            return thread_hi;
        }
    }
    return 0;
}

uint64_t mlk_fp_stack_end(uint64_t sp)
{
    return stack_end(sp);
}

/* ---- JIT-compiled code: executable memory no loaded object holds --------
 * A runtime's JIT (V8, the JVM) compiles into anonymous executable memory
 * and keeps frame pointers there: a return address into it is believed
 * where /proc/self/maps says it is executable.  The ranges are kept here,
 * read again (raw calls) on a miss -- at most once per JIT_REREAD misses
 * after the first few, so that a garbage word read as a return address
 * does not make every walk read the maps.  A seqlock: a walk reading the
 * ranges while another thread rewrites them misses (the frame ends it). */
#define JIT_RANGES 128
#define JIT_REREAD 4096
static struct {
    uint64_t lo, hi;
} jit[JIT_RANGES];
static unsigned jit_n, jit_seq, jit_misses, jit_reads;
static int jit_busy;

static int note_exec(uint64_t lo, uint64_t hi, void *arg)
{
    unsigned *n = arg;
    if (mlk_in_loaded_object(lo))
        return 0; /* (a library's or the executable's text: not JIT code) */
    __atomic_store_n(&jit[*n].lo, lo, __ATOMIC_RELAXED);
    __atomic_store_n(&jit[*n].hi, hi, __ATOMIC_RELAXED);
    return ++*n == JIT_RANGES;
}

static int in_jit_ranges(uint64_t ip)
{
    unsigned seq = __atomic_load_n(&jit_seq, __ATOMIC_ACQUIRE);
    if (seq & 1)
        return 0;
    int found = 0;
    for (unsigned i = 0, n = __atomic_load_n(&jit_n, __ATOMIC_RELAXED); !found && i < n && i < JIT_RANGES; i++)
        found = ip >= __atomic_load_n(&jit[i].lo, __ATOMIC_RELAXED) &&
                ip < __atomic_load_n(&jit[i].hi, __ATOMIC_RELAXED);
    return found && __atomic_load_n(&jit_seq, __ATOMIC_ACQUIRE) == seq;
}

static int in_jit_code(uint64_t ip)
{
    if (in_jit_ranges(ip))
        return 1;
    /* (Not in a process that confined itself -- a seccomp sandbox --: a
     * read of /proc there is a call its policy may not allow.) */
    if (mlk_spawn_confined())
        return 0;
    unsigned misses = __atomic_add_fetch(&jit_misses, 1, __ATOMIC_RELAXED);
    if ((__atomic_load_n(&jit_reads, __ATOMIC_RELAXED) >= 8 && misses < JIT_REREAD) ||
        __atomic_exchange_n(&jit_busy, 1, __ATOMIC_ACQUIRE))
        return 0;
    __atomic_store_n(&jit_misses, 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&jit_reads, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&jit_seq, 1, __ATOMIC_ACQ_REL); /* odd: being written */
    unsigned n = 0;
    mlk_each_exec_mapping(note_exec, &n);
    __atomic_store_n(&jit_n, n, __ATOMIC_RELAXED);
    __atomic_add_fetch(&jit_seq, 1, __ATOMIC_ACQ_REL);
    __atomic_store_n(&jit_busy, 0, __ATOMIC_RELEASE);
    return in_jit_ranges(ip);
}

int mlk_fp_step(uint64_t sp, uint64_t bp, uint64_t *ra, uint64_t *caller_bp)
{
    uint64_t end = stack_end(sp);
    if (!end || bp < sp || (bp & 7) || bp > end - 16)
        return 0;
    const uint64_t *frame = (const uint64_t *)bp;
    uint64_t next_bp = frame[0], next_ip = frame[1];
    if (next_ip < 4096 || (!mlk_in_loaded_object(next_ip) && !in_jit_code(next_ip)))
        return 0;
    *ra = next_ip;
    *caller_bp = next_bp;
    if (next_bp && (next_bp < bp + 16 || next_bp > end - 16 || (next_bp & 7)))
        return MLK_FP_STEP_BP_UNSURE;
    return 1;
}

/* ---- pthread_create: the new thread's stack extent ---------------------------
 * The start routine is called through thread_begins, which notes the extent
 * and then tail-calls it (its frame is gone: the thread's stacks are as
 * without libmtrace).  The start and its argument go through a small pool
 * of slots rather than memory from the program's allocator; with every slot
 * taken (threads being made faster than they start), a thread is made as
 * is, without an extent. */
#define START_SLOTS 64
struct thread_start {
    int taken;
    void *(*fn)(void *);
    void *arg;
    uint64_t user_lo;  /* a stack the creator gave: its lowest address; else 0 */
    uint64_t size;     /* the stack size asked for */
    uint64_t guard;
};
static struct thread_start starts[START_SLOTS];

/* The descriptor (struct pthread) and glibc's rounding of the block sit
 * within this much above the descriptor's address. */
#define ABOVE_DESCRIPTOR 8192

static void *thread_begins(void *p)
{
    struct thread_start *s = p;
    void *(*fn)(void *) = s->fn;
    void *arg = s->arg;
    uint64_t self = (uint64_t)pthread_self();
    uint64_t lo = s->user_lo;
    if (!lo && s->size > s->guard + ABOVE_DESCRIPTOR && s->size - s->guard - ABOVE_DESCRIPTOR < self)
        lo = self - (s->size - s->guard - ABOVE_DESCRIPTOR);
    __atomic_store_n(&s->taken, 0, __ATOMIC_RELEASE);
    if (lo && lo < self) {
        thread_lo = lo;
        thread_hi = self;
    }
    return fn(arg);
}

static struct thread_start *take_slot(void)
{
    for (int i = 0; i < START_SLOTS; i++)
        if (!__atomic_load_n(&starts[i].taken, __ATOMIC_RELAXED) &&
            !__atomic_exchange_n(&starts[i].taken, 1, __ATOMIC_ACQUIRE))
            return &starts[i];
    return NULL;
}

/* What the stack of a thread made with attr will be (0: not known). */
static int stack_asked(const pthread_attr_t *attr, struct thread_start *s)
{
    pthread_attr_t defaults;
    if (!attr) {
        if (pthread_getattr_default_np(&defaults) != 0)
            return 0;
        attr = &defaults;
    }
    size_t size = 0, guard = 0, given_size = 0;
    void *given = NULL;
    /* glibc keeps a given stack as its top, NULL when none: getstack says
     * top - size, so a sum of 0 means no stack was given. */
    int ok = pthread_attr_getstack(attr, &given, &given_size) == 0 &&
             pthread_attr_getstacksize(attr, &size) == 0 && pthread_attr_getguardsize(attr, &guard) == 0;
    uint64_t top = (uint64_t)given + given_size;
    if (top && !given_size)
        ok = 0; /* a stack given by its address alone: its extent is not known */
    if (attr == &defaults)
        pthread_attr_destroy(&defaults);
    if (!ok || !size)
        return 0;
    s->size = size;
    s->guard = (guard + 4095) & ~(uint64_t)4095;
    s->user_lo = top ? (uint64_t)given : 0;
    return 1;
}

EXPORT int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    static int (*next)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    if (!LAZY_NEXT(next, "pthread_create"))
        return EAGAIN;
    struct thread_start *s = take_slot();
    if (!s)
        return next(thread, attr, fn, arg);
    if (!stack_asked(attr, s)) {
        __atomic_store_n(&s->taken, 0, __ATOMIC_RELEASE);
        return next(thread, attr, fn, arg);
    }
    s->fn = fn;
    s->arg = arg;
    int r = next(thread, attr, thread_begins, s);
    if (r != 0)
        __atomic_store_n(&s->taken, 0, __ATOMIC_RELEASE);
    return r;
}

#else /* not x86-64: no fast walk, no fallback */

void mlk_fp_init(void) {}

#endif
