/* The shared-memory segment of one traced process: the only definition.
 *
 * The C hook library includes this file; the Python reporter hands the same
 * text to cffi's ffi.cdef() (after dropping the lines that start with '#' but
 * are not '#define').  So: plain structs, fixed-width types, '#define'
 * constants as plain decimal or hex numbers (the include guard's too), no
 * other preprocessor logic.
 *
 * Who writes what:
 *   - the traced program writes everything except the fields marked
 *     "reporter";
 *   - the reporter writes only the fields marked "reporter".
 * Arrays are append-only; an element becomes visible to readers when its
 * `state` (stacks) or the array's `*_used` count (modules, strings) is stored
 * with release semantics after the element is complete.
 *
 * Layout of the segment (offsets in struct mlk_header):
 *   header | stacks[stacks_cap] | counter stripes[MLK_COUNTER_STRIPES][stacks_cap]
 *   | frames[frames_cap] | modules[modules_cap]
 *   | strings[strings_cap] | the event pool (events_pages pages, when recording)
 * The file is sparse (memfd): untouched capacity costs no memory.
 */
#ifndef MLK_SHM_LAYOUT_H
#define MLK_SHM_LAYOUT_H 1

#include <stdint.h>

#define MLK_MAGIC 0x314b4c4d454d4c4b
#define MLK_LAYOUT_VERSION 26
#define MLK_API_LABEL_MAX 64
#define MLK_LAST_REPORT_MAX 512
#define MLK_MAX_DEPTH 64
#define MLK_BUILD_ID_MAX 32

/* The address table and the region table (struct mlk_header.addr_table,
 * region_table). */
#define MLK_ADDR_SHARDS 256
#define MLK_ADDR_SHARD_BYTES 64
#define MLK_ADDR_SLOTS_AT 8
#define MLK_ADDR_MASK_AT 16
#define MLK_ADDR_STACK_BITS 24
#define MLK_REGION_BYTES 24

/* struct mlk_stack.kind: which allocator family made the blocks. */
#define MLK_KIND_MALLOC 0
#define MLK_KIND_NEW 1
#define MLK_KIND_MMAP 2
/* Anonymous MAP_SHARED mappings: memory a process shares with the children it
 * forks (PostgreSQL's main segment).  Counted in the process that mapped
 * it only; a forked child drops what it inherits (native/hook/addrs.c). */
#define MLK_KIND_SHARED 3
/* Blocks the program announces from memory it manages itself (memleak.h,
 * valgrind's MALLOCLIKE_BLOCK and MEMPOOL_*: native/hook/api/custom.c):
 * inside blocks of the other kinds, so never added to them in totals. */
#define MLK_KIND_CUSTOM 4
/* The stack of a call that misused the allocator (a double free's, a
 * mismatched delete's: struct mlk_misuse.at_stack): it never counts a block. */
#define MLK_KIND_FREE_SITE 5
/* An interpreter's own frames (native/hook/runtimes/cpython.c, docs/
 * languages.md): not a stack but a record, read by the reporter and never
 * counted.  Its frames are words: {code object, fingerprint | first line
 * << 32, name's length | character size << 16, file's likewise, line
 * table's length}, then the three strings' bytes, each padded to a word;
 * or, for the interpreter itself, {0, its version (Py_Version), the
 * address of its evaluation loop, MLK_PY_FRAMES_READ or _NOT_READ |
 * MLK_PYMALLOC_* << 8} -- written again when that changes: the last one
 * counts. */
#define MLK_KIND_PYCODE 6
#define MLK_PY_FRAMES_READ 1
#define MLK_PY_FRAMES_NOT_READ 2
/* pymalloc's domains (native/hook/runtimes/pymalloc.c): routed, or why not. */
#define MLK_PYMALLOC_ROUTED 1
#define MLK_PYMALLOC_RUNNING 2
#define MLK_PYMALLOC_MALLOC 3
#define MLK_PYMALLOC_REPLACED 4
#define MLK_PYMALLOC_NO_INTERFACE 5
/* A stack with interpreter frames is words that are no addresses (user
 * addresses are below 2^47): the tag in the top byte.  First, the native
 * stack's id (MLK_PY_TAG_NATIVE << 56 | id); then per interpreter frame,
 * innermost first, two words: the code object (MLK_PY_TAG_CODE << 56 |
 * address, with 1 << MLK_PY_ENTRY_SHIFT where the frame is the first of
 * its run of the evaluation loop -- the frames up to it stand for one
 * native frame of that loop), and where in it (MLK_PY_TAG_WHERE << 56 |
 * the code's fingerprint (24 bits) << 32 | the instruction's index, or
 * 0xffffffff before the first). */
#define MLK_PY_TAG_SHIFT 56
/* Such a stack's words, at most: the native stack's id and 63 frames. */
#define MLK_PY_MAX_WORDS 127
#define MLK_PY_TAG_NATIVE 129
#define MLK_PY_TAG_CODE 130
#define MLK_PY_TAG_WHERE 131
#define MLK_PY_ENTRY_SHIFT 48
#define MLK_PY_NO_INSTRUCTION 4294967295
/* The custom blocks' table (struct mlk_header.custom_table): nodes of
 * MLK_CUSTOM_NODE_BYTES, each {address (0: unused), size (u64), stack (u32)}
 * first. */
#define MLK_CUSTOM_NODE_BYTES 40
/* Resources other than memory (native/hook/resources/): a stack of kind
 * MLK_KIND_RESOURCE + r counts what resource kind r holds -- its bytes are
 * the resources' weights, its blocks how many are held.  Kind r is named
 * at resource_names + r * MLK_RESOURCE_NAME_MAX in the header (NUL-ended);
 * kind 0 is file descriptors, "fd", when they are tracked.  At most
 * MLK_RESOURCE_KINDS kinds (MLK_KIND_RESOURCE + MLK_RESOURCE_KINDS stays
 * below 64: the reporter keeps a kind in six bits). */
#define MLK_KIND_RESOURCE 16
#define MLK_RESOURCE_KINDS 32
#define MLK_RESOURCE_NAME_MAX 32
#define MLK_DEFAULT_SUPPRESSIONS_MAX 8192

/* struct mlk_header.tracking */
#define MLK_TRACK_TABLE 0
#define MLK_TRACK_TRAILERS 1

/* struct mlk_header.scan_heuristics */
#define MLK_SCAN_HEURISTICS_SET 0x80000000
/* ... its bits: valgrind's four (1-4), and all five with libmemleak's
 * `header` (5). */
#define MLK_SCAN_HEURISTICS_VALGRIND 0x1e
#define MLK_SCAN_HEURISTICS_ALL 0x3e

/* struct mlk_stack.state */
#define MLK_STACK_EMPTY 0
#define MLK_STACK_READY 1
/* struct mlk_header.spawn_error: the step that failed. */
#define MLK_SPAWN_READ 1
#define MLK_SPAWN_EXEC 2
#define MLK_SPAWN_CLONE 3

/* struct mlk_stack.flags: MLK_STACK_CUT, the backtrace was cut at the
 * configured depth (plain '#define NAME number' lines: layout.py reads them). */
#define MLK_STACK_CUT 1

/* What allocations and frees from one stack add up to, as counted by some
 * of the threads: one cache line.  Counting only upwards (allocated, freed)
 * takes two adds per allocation and two per free; live = allocated - freed,
 * summed over the stripes. */
#define MLK_COUNTER_STRIPES 8
struct mlk_counters {
    uint64_t alloc_count;   /* allocations ever made from this stack */
    uint64_t alloc_bytes;
    int64_t freed_count;    /* blocks freed (a partial unmap that splits a */
    int64_t freed_bytes;    /* mapping in two counts -1: one more block) */
    /* Slack: of blocks with a trailer, the bytes the allocator reserved
     * beyond the size asked for (native/hook/trailers.c), allocated and
     * freed; live slack = alloc_slack - freed_slack, summed over stripes. */
    uint64_t alloc_slack;
    uint64_t freed_slack;
    uint64_t reserved[2];
};

/* One distinct allocation backtrace: which stack it is -- written once,
 * then read by every lookup of the stack -- and the reporter's baseline,
 * in one cache line.  What is live from it is counted apart, in counter
 * stripes (struct mlk_header.stripes_off): MLK_COUNTER_STRIPES arrays of
 * stacks_cap struct mlk_counters, stripe k's counters of stack id at
 * index k * stacks_cap + id.  Each thread counts in one stripe: the first
 * seven threads to count much own one each (plain adds, no locked
 * instructions), every other thread adds to the last with atomic adds
 * (native/hook/counters.c).  Threads allocating and freeing through the
 * same stack then do not fight over one cache line, and nobody slows the
 * lookups.  (Seven owners, not two: a server's four workers all own one --
 * the threads on the shared stripe took a slower way besides; a stack's
 * lines touched stay two, its identity and one stripe.)  A stripe apart
 * from the others, not a stack's nine lines side by side: memory is
 * touched only for the stripes some thread counted in, a stripe's pages
 * for the stacks it counted for -- 128 bytes a stack in a one-thread
 * program, where nine lines were 576 (struct mlk_header.stripes_used says
 * which stripes to read; the others are never touched, by the reporter
 * either). */
struct mlk_stack {
    uint64_t hash;          /* of kind, unload_epoch and frames */
    uint32_t state;         /* MLK_STACK_*; READY once the fields below are final */
    uint16_t depth;         /* number of frames */
    uint16_t kind;          /* MLK_KIND_* */
    uint64_t frames_off;    /* index of the first frame in the frames array */
    uint32_t map_epoch;     /* module-map epoch when the stack was first seen */
    uint32_t unload_epoch;  /* module unloads seen before the stack was first seen */
    int64_t reported_bytes;  /* reporter: live bytes as of the last report */
    int64_t reported_blocks; /* reporter: live blocks as of the last report */
    int64_t reported_allocs; /* reporter: allocations made as of the last report */
    uint32_t flags;         /* MLK_STACK_CUT; final once state is READY */
    uint32_t reserved;
};

/* One loaded ELF object.  Entries are never removed: an unloaded object keeps
 * its entry with unload_epoch set, so stacks recorded while it was mapped can
 * still be symbolized after dlclose. */
struct mlk_module {
    uint64_t base;          /* load bias (dlpi_addr): file vaddr + base = address */
    uint64_t lo;            /* lowest mapped address of its PT_LOAD segments */
    uint64_t hi;            /* one past the highest */
    uint32_t load_epoch;    /* map epoch at which it was seen loaded */
    uint32_t unload_epoch;  /* map epoch at which it was seen gone; 0 = loaded */
    uint32_t path_off;      /* path in the strings array */
    uint32_t path_len;
    uint32_t build_id_len;
    uint32_t reserved;
    uint8_t build_id[32];   /* MLK_BUILD_ID_MAX */
};

/* Misuse of the allocator (native/hook/misuse.c): one record per kind of
 * misuse, call, site and allocation stack, counted.  The kinds: */
#define MLK_MISUSE_MAX 256
/* a block freed again (valgrind: Invalid free()) */
#define MLK_MISUSE_DOUBLE_FREE 1
/* a pointer never allocated: `where` says what it is */
#define MLK_MISUSE_INVALID_FREE 2
/* freed by another family's call (Mismatched free() / delete / delete []) */
#define MLK_MISUSE_MISMATCH 3
/* sized delete's size is not the block's (Mismatched new/delete size value) */
#define MLK_MISUSE_SIZE 4
/* an aligned new's block deleted unaligned, or the other way round, or
 * with another alignment (Mismatched new/delete alignment) */
#define MLK_MISUSE_ALIGN 5
/* struct mlk_misuse.call: what freed it (the first five equal the
 * family, MLK_FAMILY_* of native/trailer_format.h, each expects). */
#define MLK_CALL_FREE 0
#define MLK_CALL_DELETE 1
#define MLK_CALL_DELETE_ARRAY 2
#define MLK_CALL_DELETE_ALIGNED 3
#define MLK_CALL_DELETE_ARRAY_ALIGNED 4
#define MLK_CALL_REALLOC 5
/* struct mlk_misuse.where, of an invalid free's pointer */
/* on the calling thread's stack */
#define MLK_WHERE_STACK 1
/* in a loaded module's data */
#define MLK_WHERE_GLOBAL 2
/* not where glibc's chunk header could be (glibc's free: invalid pointer) */
#define MLK_WHERE_NOT_A_BLOCK 3
/* inside a live block, not at its start (offset: how far in) */
#define MLK_WHERE_INTERIOR 4
/* a chunk of one of the program's pools (memleak.h, valgrind's MEMPOOL_ALLOC) */
#define MLK_WHERE_POOL_CHUNK 5
/* a malloc-like block of the program's own (MALLOCLIKE_BLOCK): recorded as
 * a mismatch (valgrind's word), the block's family MLK_BLOCK_CUSTOM */
#define MLK_WHERE_CUSTOM_BLOCK 6
/* struct mlk_misuse.family of such a block (beside MLK_FAMILY_*) */
#define MLK_BLOCK_CUSTOM 6
/* struct mlk_header.misuse_mode (MEMLEAK_CONFIG misuse=) */
#define MLK_MISUSE_OFF 0
/* recorded; the call goes on as it would bare */
#define MLK_MISUSE_REPORT 1
/* recorded; a bad free does not reach the allocator */
#define MLK_MISUSE_HOLD 2
/* struct mlk_misuse.state */
#define MLK_MISUSE_READY 2

struct mlk_misuse {
    uint32_t state;         /* MLK_MISUSE_READY once the fields below are final */
    uint16_t kind;          /* MLK_MISUSE_* */
    uint8_t call;           /* MLK_CALL_* */
    uint8_t family;         /* MLK_FAMILY_* of the block; 255: not known */
    uint32_t at_stack;      /* the misusing call's stack (kind MLK_KIND_FREE_SITE) */
    uint32_t alloc_stack;   /* the block's allocation stack; UINT32_MAX: not known */
    uint32_t where;         /* MLK_WHERE_* (invalid frees) */
    uint32_t first_free;    /* a double free caught in the quarantine: the first free's stack + 1 (0: not known) */
    uint64_t size;          /* the block's size as allocated (0: not known) */
    uint64_t given;         /* sized delete: the size given; invalid free: the address */
    uint64_t offset;        /* an invalid free inside a block: how far in (where MLK_WHERE_INTERIOR) */
    uint32_t align;         /* the block's alignment, if an aligned new's (0: default) */
    uint32_t given_align;   /* the alignment the delete gave (0: none, an unaligned delete) */
    uint64_t count;         /* times it happened (atomic) */
    uint64_t reported;      /* reporter: count as of its last report */
};

/* The event log (MEMLEAK_CONFIG record=, native/hook/events/events.c;
 * docs/events.md): a pool of events_pages pages at events_off -- first
 * their headers, then (from events_data_off) MLK_EVENT_PAGE_BYTES of data
 * each.  A thread claims a FREE page (FILLING, its tid), appends records
 * and publishes `used` after each one (release); it marks the page FULL
 * when the next record would not fit, when the page is a second old, or
 * as the thread ends.  The reporter copies FULL pages out and frees them
 * (and, once the process is gone, what FILLING pages hold). */
#define MLK_EVENT_PAGE_BYTES 32768
#define MLK_EVENT_PAGE_FREE 0
#define MLK_EVENT_PAGE_FILLING 1
#define MLK_EVENT_PAGE_FULL 2
/* A record: a type byte (its low 3 bits; MLK_EVENT_RAW_ADDR set when the
 * address delta is in bytes, else in 8-byte units), then LEB128 varints:
 * time since the page's previous record (in ticks of 2^MLK_EVENT_TICK_SHIFT
 * ns, from the page's first_ns), the address's zigzag delta from the
 * previous record's, the size, and the stack id + 1 (0: not known). */
#define MLK_EVENT_ALLOC 1
#define MLK_EVENT_FREE 2
#define MLK_EVENT_MAP 3
#define MLK_EVENT_UNMAP 4
#define MLK_EVENT_RAW_ADDR 8
/* An UNMAP's type byte also says, in bits 4-5, 1 + the change in the
 * stack's mappings (-1: one gone; 0: one cut; +1: one split in two). */
#define MLK_EVENT_BLOCKS_SHIFT 4
#define MLK_EVENT_TICK_SHIFT 10
/* struct mlk_header.record_mode */
#define MLK_RECORD_OFF 0
#define MLK_RECORD_ALL 1
#define MLK_RECORD_LAST 2
/* The program's attention word (struct mlk_header.attention_addr): bits
 * its hooks look at on their way, one load for all of them. */
#define MLK_ATTEND_EVENTS 1
#define MLK_ATTEND_STATS 2
/* struct mlk_header.alloc_stats_kind, and the statistics asked */
#define MLK_ALLOC_STATS_JEMALLOC 1
#define MLK_ALLOC_STATS 6

struct mlk_event_page {
    uint32_t state;         /* MLK_EVENT_PAGE_*; the reporter sets FREE */
    uint32_t used;          /* bytes of records complete (release) */
    int32_t tid;            /* the thread filling it */
    uint32_t reserved;
    uint64_t claim;         /* the order pages were claimed in */
    uint64_t first_ns;      /* CLOCK_MONOTONIC origin of its times */
    uint64_t last_ns;       /* CLOCK_MONOTONIC of its last record */
};

struct mlk_header {
    uint64_t magic;             /* MLK_MAGIC */
    uint32_t layout_version;    /* MLK_LAYOUT_VERSION */
    uint32_t header_size;       /* sizeof(struct mlk_header) */
    uint64_t segment_size;      /* bytes of the whole segment */

    uint64_t stacks_off;        /* byte offsets from the segment start */
    uint64_t frames_off;
    uint64_t modules_off;
    uint64_t strings_off;
    uint64_t stacks_cap;        /* element capacities */
    uint64_t frames_cap;
    uint64_t modules_cap;
    uint64_t strings_cap;
    uint64_t stacks_used;       /* elements handed out (atomic) */
    uint64_t frames_used;
    uint64_t modules_used;
    uint64_t strings_used;
    uint64_t stripes_off;       /* the counter stripes (struct mlk_stack's comment) */
    uint32_t stripes_used;      /* bit k: stripe k has been counted in (atomic; set before the first count) */
    uint32_t stripes_reserved;

    int32_t pid;                /* the traced process */
    int32_t parent_pid;         /* pid of the process it was forked from, or 0 */
    int32_t reporter_pid;       /* reporter: its pid while it runs, else 0 */
    uint32_t depth;             /* configured backtrace depth */
    uint64_t start_time_ns;     /* CLOCK_REALTIME when this segment was made */
    uint32_t exe_off;           /* path of /proc/self/exe, in strings */
    uint32_t exe_len;
    uint32_t dir_off;           /* directory reports go to, in strings */
    uint32_t dir_len;

    /* Control.  request_seq and done_seq are futex words. */
    uint32_t collecting;        /* 1 while allocations are recorded */
    uint32_t request_seq;       /* bumped for each report request */
    uint32_t done_seq;          /* reporter: request_seq covered by the last report */
    uint32_t signal_requests;   /* count of each kind of request; the reporter */
    uint32_t mtrace_requests;   /* compares them to tell the report's reason */
    uint32_t muntrace_requests;
    uint32_t exit_requests;
    uint32_t seg_fd;            /* the segment's descriptor number in the process */
    uint32_t exec_pending;      /* set just before an exec call, cleared if it fails */
    uint32_t report_signal;     /* the signal whose handler asks for reports, 0 = none */
    uint32_t seen_signal;       /* reporter: the request counts above as of */
    uint32_t seen_mtrace;       /* its last report, to tell the next one's reason */
    uint32_t seen_muntrace;
    uint32_t seen_exit;
    uint32_t report_seq;        /* reporter: SEQ of the last report written */
    uint32_t report_errors;     /* reporter: reports that could not be written */
    uint32_t map_epoch;         /* bumped on each module load/unload seen */
    uint32_t unload_epoch;      /* bumped on each module unload seen */

    /* Health counters: the report prints them so nothing is lost silently. */
    uint64_t dropped_stacks;    /* allocations not attributed: stack table full */
    uint64_t dropped_blocks;    /* allocations not tracked: address table full */
    uint64_t unknown_frees;     /* frees of pointers never seen allocated */
    uint64_t truncated_stacks;  /* unused: the reporter sums the cut stacks' allocations */
    /* Sampling (MEMLEAK_CONFIG sample=BYTES): 0 = every allocation recorded.
     * Otherwise an allocation of s bytes is recorded with probability
     * 1 - exp(-s / sample_bytes) and the stack counters hold the recorded
     * (sampled) blocks only; the reporter scales them up. */
    uint64_t sample_bytes;
    /* The keeper (the root's reporter, which holds a descendant's segment so
     * that a SIGKILL cannot take its data along) starts a reporter for a dead
     * descendant only if none was started and no final report was written. */
    uint32_t reporter_starts;   /* reporters started for this segment */
    uint32_t final_done;        /* reporter: the last report (exit or death) is written */
    /* How the process tracks which stack each live block came from:
     * MLK_TRACK_TABLE (a side table of addresses) or MLK_TRACK_TRAILERS
     * (16 bytes at the end of each block recorded). */
    uint32_t tracking;
    /* Why the last reporter could not start: errno | MLK_SPAWN_* << 16
     * (written by the child that failed; the program says it). */
    uint32_t spawn_error;
    /* The program's name as invoked (argv[0]'s last part), in strings: what
     * reports are named after (redis-server, not the redis-check-rdb its
     * link resolves to).  0/0 in segments of older builds: the reporter then
     * uses exe's last part. */
    uint32_t name_off;
    uint32_t name_len;
    /* Reports asked for from outside the program, without a signal
     * (`libmemleak snapshot PID`: the program's own use of every signal is
     * left alone).  Bumped by the asker, compared by the reporter like the
     * other request counts. */
    uint32_t snapshot_requests;
    uint32_t seen_snapshot;
    /* The process's VmRSS and VmHWM in kB as it exits: a descendant's exit
     * report is written after it is gone, when /proc no longer says.
     * 0 = not known. */
    uint32_t exit_rss_kb;
    uint32_t exit_hwm_kb;
    /* The root dying of a signal it did not handle (SIGTERM, SIGINT,
     * SIGSEGV...): its number, set by the hook's handler as it asks for its
     * final report and waits for it before the signal takes the process --
     * so that `libmemleak run` returns with that report on disk.  The
     * reporter writes it as a `death` report, killed by that signal. */
    uint32_t dying_signal;
    /* The thread that asks for the final report as the process exits (or
     * dies of a signal): everything on its stack is dead -- main has
     * returned, or exit() will not -- so an exit scan takes none of it for
     * a root, as memcheck's leak check at exit does not (a stale pointer in
     * main's old frame kept a lost block "still reachable"). */
    uint32_t exiting_tid;
    uint64_t last_report_ns;    /* reporter: CLOCK_REALTIME of the last report's snapshot */
    /* The reachability scan (native/reporter/scan.c).  It finds the live
     * blocks by their trailers' check words, address XOR this key (0: no
     * trailers, no scan).  scan_requests counts `libmemleak scan PID`
     * requests like the other request counts; scan_at_exit (MEMLEAK_CONFIG
     * scan=exit) makes the final report of a normal exit carry a scan. */
    uint64_t trailer_key;
    uint32_t scan_requests;
    uint32_t seen_scan;
    uint32_t scan_at_exit;
    /* The interior-pointer heuristics a scan applies: 0 = the default (all
     * five: valgrind's four and libmemleak's header); else
     * MLK_SCAN_HEURISTICS_SET | a bit per heuristic (1 stdstring, 2
     * length64, 3 newarray, 4 multipleinheritance, 5 header). */
    uint32_t scan_heuristics;
    /* The address range libmtrace's own private maps are carved from
     * (native/hook/rt.c): not the program's memory, never a root. */
    uint64_t own_lo;
    uint64_t own_hi;
    /* Pausing collection from outside (`libmemleak shell`: stop, start):
     * the program's own collecting flag, at this address in it, is what
     * its hooks read -- the asker writes it (/proc/PID/mem) -- and `paused`
     * tells the program's slow paths (its exit, the report signal,
     * muntrace) that collection is only paused: reports are still owed. */
    uint64_t collecting_addr;
    uint32_t paused;
    /* MEMLEAK_CONFIG exit_timeout in seconds: how long the root waits for
     * its exit report.  Its reporter spends at most half of it waiting for
     * the last reports of descendants already dead (keeper.py), so that
     * they are on disk when the root exits.  0: it does not wait (nor
     * does an older build's root). */
    uint32_t exit_timeout_s;
    /* `libmemleak attach PID` (native/hook/attach.c): CLOCK_REALTIME of the
     * attach, 0 for a process started under the tracer.  Blocks made before
     * it carry no trailer: their frees are counted in unknown_frees.
     * `libmemleak detach PID` asks for a last report (reason detach) with
     * detach_requests, like the other request counts. */
    uint64_t attached_ns;
    uint32_t detach_requests;
    uint32_t seen_detach;
    /* MEMLEAK_CONFIG listen=HOST:PORT, in strings (0/0: none): the root's
     * reporter serves remote shells there (libmemleak/daemon/remote.py). */
    uint32_t listen_off;
    uint32_t listen_len;
    /* What the hook cannot see (native/hook/blind.c: the program's own malloc
     * found before ours, say), one line in strings (0/0: nothing): every
     * report's header carries it, and `check` does not pass such a run.
     * Written as the segment is made, never changed. */
    uint32_t blind_off;
    uint32_t blind_len;
    /* The program's own allocator entry points routed to the hook
     * (native/hook/route/), one line in strings (0/0: none). */
    uint32_t routed_off;
    uint32_t routed_len;
    /* The address table of blocks kept without a trailer (native/hook/
     * addrs.c: a routed allocator's blocks, a sampled process's, ...): the
     * address of its MLK_ADDR_SHARDS shards in the process, each
     * MLK_ADDR_SHARD_BYTES long, with the address of its slot array at
     * MLK_ADDR_SLOTS_AT and the slot mask at MLK_ADDR_MASK_AT; a slot is
     * {address (0: empty), size << MLK_ADDR_STACK_BITS | stack}.  The scan
     * lists these blocks beside the trailed ones (native/reporter/scan_blocks.c). */
    uint64_t addr_table;
    /* Stacks whose walk followed frame pointers through code no unwind
     * table covers (native/hook/unwind_fp.c), and the frames so found: the
     * reports say it, as such frames are the chain's word, not a table's. */
    uint64_t fp_stacks;
    uint64_t fp_frames;
    /* Stacks whose walk ended in such code because the chain did not check
     * out there (no frame pointers, or a thread whose stack extent is not
     * known): their outer callers are missing, and the reports say so. */
    uint64_t fp_stopped_stacks;
    /* The table of anonymous mappings (native/hook/addrs.c), so that the
     * reporter can tell how much of each stack's mappings was ever touched
     * (/proc/PID/pagemap): the address in the process of two words, the
     * address of the region array and the number of regions in it; a
     * region is MLK_REGION_BYTES long: start, end (u64), stack id (u32).
     * Read without a lock, as hostile input: a report taken while the
     * program maps may miscount, never fail. */
    uint64_t region_table;
    /* MEMLEAK_CONFIG alloc_fns=REGEX, in strings (0/0: none): the program's
     * own allocation layer, named by its user; every report's header says
     * it and the analysis folds those functions (docs/cli.md). */
    uint32_t alloc_fns_off;
    uint32_t alloc_fns_len;
    /* Reports the program asks for from its own code (memleak.h's
     * memleak_report, native/hook/api/): api_requests counts them like the
     * other request counts; api_label is the label of the one pending
     * (NUL-terminated; the reporter cleans it again: the program wrote it).
     * last_report is the path of the last report written, set by the
     * reporter before it posts done_seq, for the program to say. */
    uint32_t api_requests;
    uint32_t seen_api;
    char api_label[MLK_API_LABEL_MAX];
    char last_report[MLK_LAST_REPORT_MAX];
    /* A leak check the program asks for (memleak_leak_check, LSan's
     * __lsan_do_recoverable_leak_check): check_requests counts them like
     * the other request counts, and the report that answers carries a
     * scan.  Whenever a report carries a scan the reporter puts its totals
     * here -- bytes and blocks definitely, indirectly, possibly lost and
     * still reachable -- and that report's seq in check_seq, before it
     * posts done_seq (no scan: check_seq unchanged). */
    uint32_t check_requests;
    uint32_t seen_check;
    uint32_t check_seq;
    /* Reporter: the seq of the report whose file is in place and whose
     * baseline is being committed into the stacks (reported_*), 0 once
     * report_seq says it: a successor finding it set knows that report
     * is written and its baseline partly committed (report_reasons.py). */
    uint32_t committing_seq;
    int64_t check_bytes[4];
    int64_t check_blocks[4];
    /* The program's own blocks (memleak.h's malloc-like blocks and pools,
     * native/hook/api/custom.c): the address in the process of two words,
     * the address of the node array and how many nodes were ever used.
     * The scan lists them (hostile input: bounded, checked). */
    uint64_t custom_table;
    /* What the program told the leak check (memleak.h, LSan's interface:
     * native/hook/api/lsan.c): the address in the process of a struct
     * mlk_lsan_table. */
    uint64_t lsan_table;
    /* Resources other than memory (see MLK_KIND_RESOURCE): how many kinds
     * are named (stored with release once the name is complete), whether
     * file descriptors are tracked (kind 0; MEMLEAK_CONFIG fds=no: 0), and
     * acquisitions not tracked (no memory for the table, or every kind
     * taken): reports say them. */
    uint32_t resource_kinds;
    uint32_t fds_tracked;
    uint64_t resources_dropped;
    char resource_names[1024];  /* MLK_RESOURCE_KINDS * MLK_RESOURCE_NAME_MAX */
    /* What the program's __lsan_default_suppressions() returned (LSan's
     * syntax, lines), in strings (0/0: it defines none), read as
     * collection starts: the reports carry it and the analysis applies it
     * as LSan would.  Cut at MLK_DEFAULT_SUPPRESSIONS_MAX bytes. */
    uint32_t default_suppressions_off;
    uint32_t default_suppressions_len;
    /* Descriptors above 2 the process had open when collection started
     * (but libmtrace's own): inherited across an exec, opened before an
     * attach or before mtrace() -- in no entry, so the reports say how
     * many.  A forked child keeps its parent's count. */
    uint32_t fds_before;
    uint32_t reserved_fds;
    /* Misuse of the allocator: the mode, records used (at most
     * MLK_MISUSE_MAX), every misuse seen and those not recorded because
     * the table was full. */
    uint32_t misuse_mode;
    uint32_t misuse_used;
    uint64_t misuse_total;
    uint64_t misuse_dropped;
    /* 1 when the program (or a library) defines its own operator new or
     * delete: malloc's and new's families then meet in ways that are not
     * errors (its new calls malloc; the default delete frees it), so
     * mismatches are not checked (the reports say so). */
    uint32_t misuse_no_families;
    /* Slack (struct mlk_counters.alloc_slack): the smallest block the
     * allocator makes, which a block's reserved bytes are raised to --
     * glibc's 24 usable bytes -- or 0 where it is not known (the reports
     * then say slack is the traced block's share, not the bare one's). */
    uint32_t slack_floor;
    /* The quarantine (MEMLEAK_CONFIG quarantine=BYTES, native/hook/misuse.c):
     * freed blocks held back from the allocator, at most quarantine_cap
     * bytes (0: none), quarantine_held of them now. */
    uint64_t quarantine_cap;
    uint64_t quarantine_held;
    uint64_t quarantine_blocks; /* how many blocks hold quarantine_held bytes */
    /* Reporter: the report it is writing for the requests whose reasons it
     * took (report_seq + 1) and the first of those reasons (1 + its place
     * in report_reasons.py's REASON_FIELDS) -- so that a reporter killed between
     * taking them and posting done_seq leaves its successor to finish the
     * request (write that report if it is not written, else only post),
     * not to write another. */
    uint32_t answering_seq;
    uint32_t answering_reason;
    /* quarantine= asked for but not started (no trailers, misuse=no, or
     * its table could not be mapped): the bytes asked for, so that every
     * report says so. */
    uint64_t quarantine_refused;
    /* The event log (record=; struct mlk_event_page above).  record_* are
     * the configuration (the reporter bounds them), events_* the pool. */
    uint32_t record_mode;       /* MLK_RECORD_* */
    uint32_t events_pages;      /* pages in the pool; 0: no pool */
    uint64_t events_off;        /* the page headers */
    uint64_t events_data_off;   /* the pages' data */
    uint64_t record_cap;        /* record_cap=: bytes of log file at most (0: the default) */
    uint64_t record_keep_bytes; /* record=last: keep about this many bytes of log ... */
    uint64_t record_keep_ns;    /* ... or this long (0: not bounded by time) */
    uint64_t events_start_ns;   /* CLOCK_MONOTONIC when this process's log began */
    uint64_t events_claims;     /* pages claimed (atomic) */
    uint64_t events_lost;       /* records not logged: no page in time, or a signal handler's inside one */
    uint64_t events_waits;      /* times a thread waited for a free page */
    uint32_t events_freed;      /* reporter: futex word, bumped when it frees pages */
    uint32_t events_stop;       /* reporter: the log reached its cap: log no more */
    uint32_t events_drainer;    /* reporters: the pid draining the pool now, 0: none (a descendant's own
                                 * reporter and the keeper may both hold its segment; one drains at a time) */
    uint32_t events_pad;
    /* The allocator's own statistics, asked inside the program (jemalloc's
     * stats.*: native/hook/allocator_stats.c).  alloc_stats_kind says the
     * hook found an allocator to ask (MLK_ALLOC_STATS_JEMALLOC).  The asker
     * bumps alloc_stats_asked and sets MLK_ATTEND_STATS in the program's
     * attention word, at attention_addr in it (/proc/PID/mem); the next
     * allocation that may ask answers: alloc_stats[] (allocated, active,
     * metadata, resident, mapped, retained), alloc_stats_ns (CLOCK_MONOTONIC),
     * alloc_stats_failed, then alloc_stats_answered = the asked count it saw. */
    uint64_t attention_addr;
    uint32_t alloc_stats_kind;
    uint32_t alloc_stats_asked;
    uint32_t alloc_stats_answered;
    uint32_t alloc_stats_failed;
    uint64_t alloc_stats_ns;
    uint64_t alloc_stats[6];    /* MLK_ALLOC_STATS */
    char alloc_stats_version[64];
    /* The root about to exec (native/hook/hooks_process.c): the new image
     * gets a keeper of its own, so the descendants dead by then have their
     * last reports written by this one first, as at the root's exit -- else
     * `run` could return before them.  keeper_wards: descendants the root's
     * keeper has taken so far (its reporter counts them; the root asks only
     * when it has taken some since the root last asked -- a shell's exec
     * tries each directory of PATH in turn).  The root bumps settle_asked
     * and wakes the reporter (on request_seq's futex); the reporter answers
     * settle_done = settle_asked. */
    uint32_t keeper_wards;
    uint32_t settle_asked;
    uint32_t settle_done;
    uint32_t settle_pad;
    /* Whether the reporter lives, told without a system call: a sandboxed
     * program's seccomp policy may refuse kill() and /proc/PID (Firefox's
     * content processes trap both, and its debug builds crash on them).
     * reporter_life is a process-shared robust pthread mutex (initialized
     * by the hook; 40 bytes on x86-64) that the reporter locks and never
     * unlocks: while its thread lives, the mutex's first word holds that
     * thread's id; when the thread dies, however it dies, the kernel walks
     * its robust list, clears the id and sets FUTEX_OWNER_DIED.  The
     * reporter writes reporter_life_tid (the locking thread) and then
     * reporter_life_pid (its pid, release); while that is not the pid in
     * reporter_pid, the hook asks /proc as before. */
    int32_t reporter_life_pid;
    int32_t reporter_life_tid;
    uint64_t reporter_life[8];
    struct mlk_misuse misuse[256]; /* MLK_MISUSE_MAX */
};

/* Objects never to be called lost -- pointers into them, sorted -- and
 * root regions, [lo, hi) pairs: each array's address in the process and
 * its length. */
struct mlk_lsan_table {
    uint64_t ignored_at;
    uint64_t nignored;
    uint64_t roots_at;
    uint64_t nroots;
};

#endif
