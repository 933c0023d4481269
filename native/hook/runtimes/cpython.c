/* Python frames inside native stacks (#60, docs/languages.md).
 *
 * When the traced process runs a CPython interpreter, each allocation's
 * stack carries the Python frames that were running: read here, at the
 * allocation, from the calling thread's own frame chain -- no profile
 * function, so a Python call that allocates nothing costs nothing.  Only
 * the calling thread's chain is read, which is safe without the GIL: a
 * thread that allocates is either running the interpreter (holding the
 * GIL) or in C code the interpreter called, and in both cases nobody else
 * changes its frames meanwhile (the chain is this thread's; CPython links
 * a frame in with plain stores of complete frames).
 *
 * The stack becomes the native stack's id followed by, per Python frame,
 * its code object's address and its instruction (shm_layout.h: the tags).
 * A code object may die and another take its address: each frame carries
 * its code's fingerprint too (the addresses of its name, file and line
 * table, and its first line), and a code object is described -- names,
 * first line, line table, copied into the segment as a record -- the
 * first time a new stack names it, while it is alive on this thread's
 * chain.  Lines are worked out by the reporter, from the line table.
 *
 * The layouts read are CPython 3.11's, 3.12's and 3.13's (cpython_layout.h),
 * each checked against its own headers by tests/test_python_frames.py.
 * Another version's frames are not read -- never guessed -- and every
 * report says so (MLK_PY_FRAMES_NOT_READ). */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>

#include "../mlk.h"
#include "cpython.h"
#include "cpython_layout.h"

/* A record's strings, at most (longer ones are cut; a line table cut
 * short gives the lines it holds, then the function's first line). */
#define NAME_MAX_CHARS 256
#define FILE_MAX_CHARS 1024
#define LINETABLE_MAX 16384

int mlk_py_reading;                       /* frames are read: current_stack asks mlk_py_stack */
static int py_seen;                       /* the interpreter was looked for and found */
static void *(*this_thread_state)(void);  /* PyGILState_GetThisThreadState */
static const char *runtime;               /* &_PyRuntime */
static const char *code_type;             /* &PyCode_Type */
static const struct py_layout *layout;    /* the interpreter's (cpython_layout.h) */

#define INLINE static inline __attribute__((always_inline))

static inline const char *ptr_at(const char *base, int off) { return *(const char *const *)(base + off); }

/* A str's hash, as it keeps it (-1 before one is asked for: then its
 * address stands in). */
static inline uint64_t str_hash(const char *s)
{
    int64_t h = s ? *(const int64_t *)(s + STR_HASH) : 0;
    return h != -1 ? (uint64_t)h : (uint64_t)s;
}

/* The code's fingerprint: what tells it from a code object that took the
 * address of a dead one (24 bits: the stack word's room).  Contents, not
 * only addresses: pymalloc gives a freed block to the next request of its
 * size, so a new code object can sit where the dead one did with its name
 * and line table where the dead one's were.  (Not the instructions: the
 * interpreter rewrites them as it specializes.) */
INLINE uint64_t fingerprint(const struct py_layout *L, const char *code)
{
    const char *table = ptr_at(code, L->code_linetable);
    uint64_t head = 0, len = table ? (uint64_t)*(const int64_t *)(table + BYTES_SIZE) : 0;
    /* (Its first 8 bytes in one load, whatever its length: a bytes object
     * of n bytes takes BYTES_DATA + n + 1 bytes, which pymalloc rounds up
     * to a multiple of 16 and glibc's malloc to 40 usable at least -- so
     * bytes 32 to 40 lie inside it, past its length its own and never
     * written; the one-byte ones are static, in an array that goes on
     * past each.  A memcpy call here was a sixth of a frame's cost.) */
    if (len) {
        uint64_t word;
        __builtin_memcpy(&word, table + BYTES_DATA, 8);
        head = len >= 8 ? word : word & ((1ull << (8 * len)) - 1);
    }
    uint64_t x = str_hash(ptr_at(code, L->code_qualname)) * 0x9e3779b97f4a7c15ull ^
                 str_hash(ptr_at(code, L->code_filename)) * 0xc2b2ae3d27d4eb4full ^
                 (head + len) * 0x165667b19e3779f9ull ^ (uint64_t)*(const int *)(code + L->code_firstlineno);
    return (x ^ x >> 29 ^ x >> 47) & 0xffffff;
}

/* Every code object's death, counted: PyCode_Type's dealloc is wrapped
 * (mlk_py_find_interpreter).  A code object cannot die while a frame
 * runs it, and its address can be another's only after it died, so a
 * fingerprint worked out since the last death is still the code's: each
 * thread keeps the fingerprints it worked out, marked with the count --
 * the fingerprint's loads (the name's, the file's, the line table's)
 * were most of a frame's cost. */
static uint64_t code_deaths = 1; /* (0: a cache slot never filled) */
static void (*code_dealloc)(void *);

static void code_dealloc_counted(void *code)
{
    __atomic_add_fetch(&code_deaths, 1, __ATOMIC_RELEASE); /* (before its address is free again) */
    code_dealloc(code);
}

#define PRINTS_BITS 8
struct prints {
    struct {
        uint64_t code, print_epoch; /* its fingerprint | the death count it is good for << 24 */
    } slot[1u << PRINTS_BITS];
};

/* The thread's recent walks: the same native stack under the same Python
 * frames -- the same frames (addresses), at the same instructions, with
 * no code object dead since -- is the same stack, found without its words
 * made and looked up (a frame's address and instruction pointer name its
 * code while no code object has died: the instruction lies inside it).
 * Most allocations are made by a loop's few sites; looking a walk up
 * was two thirds of a Python stack's cost. */
#define MEMO_WAYS 32
#define MEMO_FRAMES ((MLK_PY_MAX_WORDS - 1) / 2)
struct walk_memo {
    uint64_t deaths; /* the death count it is good for; 0: empty */
    uint32_t native, id, unload_epoch;
    uint16_t kind, frames; /* frames: how many it walked */
    uint32_t cut;          /* more frames followed them */
    uintptr_t frame[MEMO_FRAMES], at[MEMO_FRAMES]; /* at: the instruction pointer | entry (step) */
};

struct py_thread {
    struct prints prints;
    struct walk_memo memo[MEMO_WAYS];
};
static __thread struct py_thread *thread_py __attribute__((tls_model("initial-exec")));
static pthread_key_t thread_py_key;

static void thread_py_release(void *t)
{
    thread_py = NULL;
    mlk_unmap(t, sizeof(struct py_thread));
}

/* This thread's fingerprints and walks, made at its first Python stack;
 * NULL when not (then each is worked out). */
static __attribute__((noinline)) struct py_thread *py_thread_made(void)
{
    if (!code_dealloc)
        return NULL;
    struct py_thread *t = mlk_map_anon(sizeof *t);
    if (t && pthread_setspecific(thread_py_key, t) != 0) { /* (else never given back) */
        mlk_unmap(t, sizeof *t);
        t = NULL;
    }
    return thread_py = t;
}

INLINE struct py_thread *py_of_thread(void)
{
    struct py_thread *t = thread_py;
    return MLK_LIKELY(t != NULL) ? t : py_thread_made();
}

INLINE uint64_t fingerprint_of(const struct py_layout *L, struct py_thread *t, const char *code, uint64_t deaths)
{
    if (!t)
        return fingerprint(L, code);
    unsigned i = (unsigned)((uint64_t)code >> 4 ^ (uint64_t)code >> 12) & ((1u << PRINTS_BITS) - 1);
    if (t->prints.slot[i].code == (uint64_t)code && t->prints.slot[i].print_epoch >> 24 == deaths)
        return t->prints.slot[i].print_epoch & 0xffffff;
    uint64_t print = fingerprint(L, code);
    t->prints.slot[i].code = (uint64_t)code;
    t->prints.slot[i].print_epoch = print | deaths << 24;
    return print;
}

/* 3.12 on: the evaluation loop links a shim frame of its own (on the C
 * stack, running no code of the program's) in front of each run's first
 * frame; skipped (a few at most in a row: more are not believed). */
#define SHIMS_MAX 4
INLINE const char *past_shims(const struct py_layout *L, const char *frame, uintptr_t *entry)
{
    if (L->frame_owner < 0)
        return frame;
    for (int k = 0; frame && *(frame + L->frame_owner) == PY_OWNED_BY_CSTACK && k < SHIMS_MAX; k++) {
        *entry = 1;
        frame = ptr_at(frame, L->frame_previous);
    }
    return frame;
}

/* One frame of the walk: its instruction pointer | 1 where it is the
 * first of its run of the evaluation loop (3.11 marks it; 3.12 on, a shim
 * follows it) at *at, and the next frame out. */
INLINE const char *step(const struct py_layout *L, const char *frame, uintptr_t *at)
{
    uintptr_t entry = L->frame_is_entry >= 0 ? *(const uint8_t *)(frame + L->frame_is_entry) != 0 : 0;
    const char *next = past_shims(L, ptr_at(frame, L->frame_previous), &entry);
    *at = (uintptr_t)ptr_at(frame, L->frame_instr) | entry;
    return next;
}

/* The stack of walk memo m, if this walk from `frame` is its. */
INLINE uint32_t memo_holds(const struct py_layout *L, const struct walk_memo *m, const char *frame,
                           uint32_t native, int kind, uint32_t unload_epoch, uint64_t deaths)
{
    if (m->deaths != deaths || m->native != native || m->kind != kind || m->unload_epoch != unload_epoch)
        return MLK_NO_STACK;
    int k = 0;
    for (; frame && k < m->frames; k++) {
        uintptr_t at;
        const char *next = step(L, frame, &at);
        if ((uintptr_t)frame != m->frame[k] || at != m->at[k])
            return MLK_NO_STACK;
        frame = next;
    }
    return k == m->frames && (frame != NULL) == (m->cut != 0) ? m->id : MLK_NO_STACK;
}

/* The calling thread's innermost frame, or NULL: no interpreter on this
 * thread, or one finalizing (its thread states are being freed). */
INLINE const char *innermost_frame(const struct py_layout *L, const char **state)
{
    const char *ts = *state = this_thread_state();
    if (!ts || __atomic_load_n((const void *const *)(runtime + L->runtime_finalizing), __ATOMIC_RELAXED))
        return NULL;
    /* The state is this thread's own (it is one the interpreter gave this
     * thread, not a stale one). */
    if (*(const unsigned long *)(ts + L->tstate_thread_id) != (unsigned long)pthread_self())
        return NULL;
    const char *holder = L->tstate_cframe >= 0 ? ptr_at(ts, L->tstate_cframe) : ts;
    uintptr_t entry;
    return holder ? past_shims(L, ptr_at(holder, L->current_frame), &entry) : NULL;
}

static void check_routing(const char *ts);
static int routing_checked;

/* A Python stack's words (shm_layout.h) from `frame` out, at most
 * MEMO_FRAMES frames (*cut: more followed), each noted in memo m if any:
 * how many words. */
INLINE int stack_words(const struct py_layout *L, const char *frame, uint32_t native, struct py_thread *t,
                       uint64_t deaths, struct walk_memo *m, uint64_t *words, int *frames, int *cut)
{
    int n = 0, k = 0;
    words[n++] = (uint64_t)MLK_PY_TAG_NATIVE << MLK_PY_TAG_SHIFT | native;
    while (frame) {
        if (k == MEMO_FRAMES) {
            *cut = 1; /* the outer frames: the report says the stack was cut */
            break;
        }
        uintptr_t at;
        const char *code = ptr_at(frame, L->frame_code), *next = step(L, frame, &at);
        if (m) {
            m->frame[k] = (uintptr_t)frame;
            m->at[k] = at;
        }
        k++, frame = next;
        /* (3.13: a frame runs a code object, or None -- no code: skipped.) */
        if (L->tstate_cframe < 0 && (!code || ptr_at(code, OBJECT_TYPE) != code_type))
            continue;
        const char *ip = (const char *)(at & ~(uintptr_t)1), *first = code + L->code_instructions;
        /* Before its first instruction (a frame being set up: making its
         * cells, say) it has no line: its function's first is shown. */
        uint64_t index = ip >= first ? (uint64_t)(ip - first) / 2 : MLK_PY_NO_INSTRUCTION;
        words[n++] = (uint64_t)MLK_PY_TAG_CODE << MLK_PY_TAG_SHIFT | (uint64_t)(at & 1) << MLK_PY_ENTRY_SHIFT |
                     (uint64_t)code;
        words[n++] = (uint64_t)MLK_PY_TAG_WHERE << MLK_PY_TAG_SHIFT |
                     fingerprint_of(L, t, code, deaths) << 32 | (index & 0xffffffffu);
    }
    *frames = k;
    return n;
}

INLINE uint32_t py_stack(const struct py_layout *L, uint32_t native, int kind, uint32_t unload_epoch)
{
    const char *ts;
    const char *frame = innermost_frame(L, &ts);
    if (!frame)
        return native;
    if (MLK_UNLIKELY(!routing_checked))
        check_routing(ts);
    struct py_thread *t = py_of_thread();
    uint64_t deaths = __atomic_load_n(&code_deaths, __ATOMIC_ACQUIRE) & ((1ull << 40) - 1);
    struct walk_memo *m = NULL;
    if (t) {
        uintptr_t at;
        step(L, frame, &at);
        uint64_t key = ((uint64_t)frame ^ at * 0x9e3779b97f4a7c15ull) + native;
        m = &t->memo[(key ^ key >> 29) & (MEMO_WAYS - 1)];
        uint32_t id = memo_holds(L, m, frame, native, kind, unload_epoch, deaths);
        if (id != MLK_NO_STACK)
            return id;
        m->deaths = 0; /* (being rewritten: a signal handler's allocation meanwhile finds nothing) */
    }
    uint64_t words[MLK_PY_MAX_WORDS];
    int k, cut = 0;
    int n = stack_words(L, frame, native, t, deaths, m, words, &k, &cut);
    uint32_t id = mlk_stack_intern(words, n, kind, unload_epoch, cut);
    if (id == MLK_NO_STACK)
        return native; /* (full table: the native stack still counts it) */
    if (m) {
        m->native = native, m->id = id, m->unload_epoch = unload_epoch;
        m->kind = (uint16_t)kind, m->frames = (uint16_t)k, m->cut = (uint32_t)cut;
        m->deaths = deaths;
    }
    return id;
}

/* One walk per layout, its offsets constants (the walk is the hot part of
 * a Python allocation).  Each its own function, the size the one walk was:
 * the three inlined into one cost 3.11's walk 2-3% (bench/python.py) -- the
 * compiler inlined less into it. */
static int layout_index; /* 0: 3.11, 1: 3.12, 2: 3.13 */

#define WALK_OF(name, layout)                                                         \
    static __attribute__((noinline)) uint32_t name(uint32_t native, int kind, uint32_t unload_epoch) \
    {                                                                                 \
        return py_stack(&layout, native, kind, unload_epoch);                         \
    }
WALK_OF(py_stack_311, PY_LAYOUT_311)
WALK_OF(py_stack_312, PY_LAYOUT_312)
WALK_OF(py_stack_313, PY_LAYOUT_313)

uint32_t mlk_py_stack(uint32_t native, int kind, uint32_t unload_epoch)
{
    switch (layout_index) {
    case 0:
        return py_stack_311(native, kind, unload_epoch);
    case 1:
        return py_stack_312(native, kind, unload_epoch);
    default:
        return py_stack_313(native, kind, unload_epoch);
    }
}

/* ---- records: each code object described once ------------------------- */

/* Which (code, fingerprint) pairs have a record: a set of their words,
 * filled lock-free; when it is full a code is described again (the
 * reporter keeps one record per pair). */
#define DESCRIBED_BITS 14
static uint64_t *described;

static int note_described(uint64_t key)
{
    if (!described)
        return 0;
    uint64_t mask = (1u << DESCRIBED_BITS) - 1;
    for (uint64_t i = (key * 0x9e3779b97f4a7c15ull) >> (64 - DESCRIBED_BITS), probes = 0; probes < 64;
         i = (i + 1) & mask, probes++) {
        uint64_t was = __atomic_load_n(&described[i], __ATOMIC_ACQUIRE);
        if (was == key)
            return 1;
        if (was == 0 && __atomic_compare_exchange_n(&described[i], &was, key, 0, __ATOMIC_ACQ_REL,
                                                    __ATOMIC_ACQUIRE))
            return 0;
        if (was == key)
            return 1;
    }
    return 0;
}

/* A str's characters (compact strings only: code objects' names and files
 * are), at most max of them: their bytes at *data, the character size. */
static size_t str_bytes(const char *s, size_t max, const char **data, unsigned *char_size)
{
    *char_size = 1;
    if (!s)
        return 0;
    uint32_t state = *(const uint32_t *)(s + STR_STATE);
    unsigned size = state >> 2 & 7;
    if (!(state & 32) || (size != 1 && size != 2 && size != 4))
        return 0; /* not compact: not read */
    *data = s + ((state & 64) ? layout->str_ascii_data : layout->str_compact_data);
    *char_size = size;
    int64_t chars = *(const int64_t *)(s + STR_LENGTH);
    return (size_t)(chars < 0 ? 0 : (uint64_t)chars > max ? max : (uint64_t)chars) * size;
}

static uint64_t *put_bytes(uint64_t *at, const char *data, size_t len)
{
    if (len) {
        at[len / 8] = 0; /* (the last word's padding) */
        memcpy(at, data, len);
    }
    return at + (len + 7) / 8;
}

/* What a code object's record holds (shm_layout.h, MLK_KIND_PYCODE). */
struct description {
    const char *code, *name, *file, *table;
    size_t name_len, file_len, table_len;
    unsigned name_size, file_size;
    uint64_t print;
};

static void fill_description(uint64_t *words, const void *arg)
{
    const struct description *d = arg;
    uint64_t firstline = (uint32_t)*(const int *)(d->code + layout->code_firstlineno);
    words[0] = (uint64_t)d->code;
    words[1] = d->print | firstline << 32;
    words[2] = d->name_len | (uint64_t)d->name_size << 16;
    words[3] = d->file_len | (uint64_t)d->file_size << 16;
    words[4] = d->table_len;
    uint64_t *end = put_bytes(words + 5, d->name, d->name_len);
    end = put_bytes(end, d->file, d->file_len);
    put_bytes(end, d->table, d->table_len);
}

static void describe(const char *code, uint64_t print)
{
    struct description d = {.code = code, .print = print, .name = "", .file = ""};
    d.name_len = str_bytes(ptr_at(code, layout->code_qualname), NAME_MAX_CHARS, &d.name, &d.name_size);
    d.file_len = str_bytes(ptr_at(code, layout->code_filename), FILE_MAX_CHARS, &d.file, &d.file_size);
    const char *bytes = ptr_at(code, layout->code_linetable);
    int64_t table_len = bytes ? *(const int64_t *)(bytes + BYTES_SIZE) : 0;
    d.table_len = (size_t)(table_len < 0 ? 0 : table_len > LINETABLE_MAX ? LINETABLE_MAX : table_len);
    d.table = bytes ? bytes + BYTES_DATA : NULL;
    size_t words = 5 + (d.name_len + 7) / 8 + (d.file_len + 7) / 8 + (d.table_len + 7) / 8;
    mlk_stack_add_record((int)words, fill_description, &d, MLK_KIND_PYCODE);
}

/* A new stack with Python frames (stacks.c, before it is published): its
 * code objects not described yet are. */
void mlk_py_describe_codes(const uint64_t *words, int n)
{
    for (int i = 1; i + 1 < n; i += 2) {
        const char *code = (const char *)(words[i] & ((1ull << 47) - 1));
        uint64_t print = words[i + 1] >> 32 & 0xffffff;
        /* (The pair as one word, never 0: two pairs share one with a
         * chance of about 2^-40; then one of them stays undescribed.) */
        if (!note_described(((uint64_t)code * 0x9e3779b97f4a7c15ull ^ print) | 1))
            describe(code, print);
    }
}

/* ---- finding the interpreter ------------------------------------------- */

/* PyCode_Type's tp_dealloc wrapped (a static type: its slot is plain
 * data, and a dealloc under way reads the old pointer or the new, either
 * of which works).  Without the key that gives a thread's fingerprints
 * back, none are kept. */
static void watch_code_deaths(char *type)
{
    if (pthread_key_create(&thread_py_key, thread_py_release) != 0)
        return;
    void (**slot)(void *) = (void (**)(void *))(type + TYPE_DEALLOC);
    void (*was)(void *) = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (!was || was == code_dealloc_counted)
        return;
    code_dealloc = was;
    __atomic_store_n(slot, code_dealloc_counted, __ATOMIC_RELEASE);
}

/* Does the thread of state ts hold the GIL?  (3.11: the runtime names
 * its holder; 3.12 on, the interpreter's GIL its last holder, and whether
 * it is held.) */
static int holds_gil(const struct py_layout *L, const char *ts)
{
    if (L->runtime_gil_holder >= 0)
        return __atomic_load_n((const char *const *)(runtime + L->runtime_gil_holder), __ATOMIC_ACQUIRE) == ts;
    const char *interp = ptr_at(ts, L->tstate_interp);
    const char *gil = interp ? ptr_at(interp, L->interp_gil) : NULL;
    return gil && __atomic_load_n((const int *)(gil + L->gil_locked), __ATOMIC_ACQUIRE) &&
           __atomic_load_n((const char *const *)(gil + L->gil_last_holder), __ATOMIC_ACQUIRE) == ts;
}

static void copy_words(uint64_t *at, const void *words) { memcpy(at, words, 4 * sizeof *at); }

/* At the segment's making and after each dlopen: is this an interpreter
 * (an executable with one, or a libpython loaded), and can its frames be read? */
static unsigned long found_version;
static void *found_eval;
static int frames_status, pymalloc_status;

/* The interpreter's record (shm_layout.h): what the reports say of it.
 * Written again when that changes (the reporter keeps the last). */
static void interpreter_record(void)
{
    uint64_t record[4] = {0, found_version, (uint64_t)found_eval,
                          (uint64_t)frames_status | (uint64_t)pymalloc_status << 8};
    mlk_stack_add_record(4, copy_words, record, MLK_KIND_PYCODE);
}

void mlk_py_find_interpreter(void)
{
    if (__atomic_load_n(&py_seen, __ATOMIC_ACQUIRE) || !mlk_seg)
        return;
    void *eval = mlk_py_symbol("_PyEval_EvalFrameDefault");
    unsigned long version = eval ? mlk_py_version() : 0;
    if (!version || __atomic_exchange_n(&py_seen, 1, __ATOMIC_ACQ_REL))
        return;
    /* (A debug build -- reference counting's totals kept, objects linked
     * in a list -- lays objects out otherwise: not the layout checked.) */
    const char *rt = mlk_py_symbol("_PyRuntime");
    int index = mlk_py_layout_of(version, rt);
    void *(*state)(void) = (void *(*)(void))mlk_py_symbol("PyGILState_GetThisThreadState");
    const char *type = mlk_py_symbol("PyCode_Type");
    int readable = index >= 0 && !mlk_py_symbol("_Py_RefTotal") && !mlk_py_symbol("_Py_ForgetReference") &&
                   state && rt && type;
    found_version = version, found_eval = eval;
    frames_status = readable ? MLK_PY_FRAMES_READ : MLK_PY_FRAMES_NOT_READ;
    /* (Routed only where frames are read: the first Python stack checks
     * that the routing held.) */
    pymalloc_status = readable ? mlk_pymalloc_route() : 0;
    interpreter_record();
    if (!readable) {
        char v[24] = "3.", *p = v + 2;
        unsigned long minor = version >> 16 & 0xff;
        if (minor >= 10)
            *p++ = (char)('0' + minor / 10);
        *p++ = (char)('0' + minor % 10);
        *p = 0;
        mlk_warn("Python ", v, ": its frames are not read (libmemleak reads CPython 3.11's, 3.12's and "
                               "3.13's, release builds); stacks stop at the interpreter, and every report says so");
        return;
    }
    layout_index = index;
    layout = mlk_py_layouts[index];
    described = mlk_map_anon(sizeof *described << DESCRIBED_BITS);
    this_thread_state = state;
    runtime = rt;
    code_type = type;
    watch_code_deaths((char *)type);
    mlk_fast_off_set(MLK_FAST_PYTHON, 1); /* every allocation's stack takes the whole way, here */
    __atomic_store_n(&mlk_py_reading, 1, __ATOMIC_RELEASE);
}

/* At a Python stack until it is settled (routing_checked): pymalloc's
 * domains still ours (the interpreter's start replaces them where
 * PYTHONMALLOC names an allocator)?  Or, in one that ran before collection
 * started, routed now -- by a thread that holds the GIL (ts: the calling
 * thread's state). */
static void check_routing(const char *ts)
{
    if (pymalloc_status == MLK_PYMALLOC_RUNNING) {
        if (!holds_gil(layout, ts))
            return; /* (not this thread: the next allocation asks again) */
        routing_checked = 1;
        pymalloc_status = mlk_pymalloc_route_running();
        interpreter_record();
        return;
    }
    routing_checked = 1;
    if (pymalloc_status == MLK_PYMALLOC_ROUTED && !mlk_pymalloc_still_routed()) {
        pymalloc_status = MLK_PYMALLOC_REPLACED;
        interpreter_record();
    }
}
