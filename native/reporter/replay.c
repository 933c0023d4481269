/* Replay of an event log (docs/events.md; libmemleak/analysis/replay.py
 * feeds it): the threads' pages merged by time, each record applied to
 * per-stack counters, the live total's peak found, and -- when asked --
 * each block followed from allocation to free (lifetimes, temporary
 * blocks, what a time window left live).
 *
 * The log is the traced program's writing: every varint is bounded by the
 * page's end, stack ids by MLK_STACKS_CAP, and a record that does not
 * parse ends its page (counted in bad_records) -- never a read outside it.
 *
 * Order: records of one thread in the order it wrote them (its pages are
 * chained); across threads by time, a free before an allocation of the
 * same tick (the hook stamps a free before the real free and an
 * allocation after the real malloc, so an address freed by one thread and
 * handed to another is freed first). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../shm_layout.h"
#include "../event_record.h"

#define EXPORT __attribute__((visibility("default")))
#define STACKS_MAX (1u << 21)   /* MLK_STACKS_CAP of native/hook/mlk.h */
#define LIFE_BUCKETS 40
#define SERIES 5                /* a usage point's columns (struct mlk_replay.series) */

struct page {
    uint8_t *buf;
    uint32_t len;
    uint64_t first_tick;
    struct page *next;          /* the same thread's next page */
};

struct cursor {
    struct page *page, *last;   /* the page being read, the last queued */
    const uint8_t *at, *end;
    int32_t tid;
    uint64_t tick, addr;
    /* the next record, decoded */
    int type;
    int64_t blocks;
    uint64_t ev_tick, ev_addr, size;
    uint32_t stack;             /* + 1; 0: not known */
    uint64_t just_made;         /* the block this thread's last record made (0: it made none) */
};

struct block {
    uint64_t addr, size, tick;
    uint32_t stack;
    uint32_t used;
};

struct mlk_replay {
    struct cursor *open;
    int64_t nopen, capopen;
    /* per stack id */
    uint64_t nstacks;
    int64_t *live_bytes, *live_blocks;
    /* what each stack held at the peak, kept in one pass: before a stack's
     * live counts first change after the latest peak, their values then
     * (the peak's) are saved here and stamped with that peak's number --
     * an undo record, so a new peak costs nothing and no second pass
     * replays the log up to the peak (mlk_rp_at_peak) */
    int64_t *peak_bytes, *peak_blocks;
    uint64_t *peak_stamp, peak_number;
    uint64_t *allocs, *alloc_bytes, *temp_count, *temp_bytes, *win_bytes, *win_blocks, *lifetimes;
    /* what to follow */
    int want_blocks, want_lifetimes;
    uint64_t temp_ticks;        /* freed within this many ticks: temporary */
    int temp_adjacent;          /* temporary: freed by the thread's next record (heaptrack's) */
    uint64_t stack_limit;       /* stack ids (+ 1) above this are not this log's (mlk_rp_stack_limit) */
    uint64_t stop_ordinal;      /* apply records before this ordinal only (UINT64_MAX: all) */
    uint64_t stop_tick;         /* ... and of ticks up to this one */
    int stopped;
    /* totals */
    uint64_t ordinal;
    int64_t total, peak;
    uint64_t peak_ordinal, peak_tick, first_tick, last_tick;
    int64_t any;
    uint64_t unknown_frees, bad_records, records;
    /* the total over time: one point per series_step ticks -- its tick, the
     * total then, the highest total in its step, the allocations made in
     * it and their bytes (SERIES columns) */
    uint64_t series_step, series_next;
    int64_t *series[SERIES], bucket_max, bucket_allocs, bucket_alloc_bytes;
    uint64_t nseries, capseries;
    /* a thread's last block made, kept while it has no page open (its next
     * page may start with that block's free): direct-mapped by tid */
    struct { int32_t tid; uint64_t made; } resting[4096];
    /* live blocks by address (want_blocks) */
    struct block *map;
    uint64_t map_mask, map_used;
};

static void *grow(void *p, uint64_t *cap, uint64_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    uint64_t c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    void *q = realloc(p, c * elem);
    if (!q)
        return NULL;
    memset((char *)q + *cap * elem, 0, (c - *cap) * elem);
    *cap = c;
    return q;
}

/* Times in ns (CLOCK_MONOTONIC of the traced process; UINT64_MAX: no stop). */
EXPORT struct mlk_replay *mlk_rp_new(int want_blocks, int want_lifetimes, uint64_t temp_ns, int temp_adjacent,
                                     uint64_t stop_ordinal, uint64_t stop_ns, uint64_t series_step_ns)
{
    uint64_t temp_ticks = temp_ns ? (temp_ns >> MLK_EVENT_TICK_SHIFT) + 1 : 0;
    uint64_t stop_tick = stop_ns == UINT64_MAX ? UINT64_MAX : stop_ns >> MLK_EVENT_TICK_SHIFT;
    uint64_t series_step = series_step_ns ? (series_step_ns >> MLK_EVENT_TICK_SHIFT) + 1 : 0;
    struct mlk_replay *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->want_blocks = want_blocks || want_lifetimes || temp_ticks;
    r->want_lifetimes = want_lifetimes;
    r->temp_ticks = temp_ticks;
    r->temp_adjacent = temp_adjacent;
    r->want_blocks |= temp_adjacent;
    r->stop_ordinal = stop_ordinal;
    r->stop_tick = stop_tick;
    r->series_step = series_step;
    r->stack_limit = STACKS_MAX;
    return r;
}

/* Stack ids beyond what the log names (plus room) make a record unreadable:
 * the per-stack arrays follow the largest id seen, and a forged one near
 * STACKS_MAX would cost 670 MB with lifetimes. */
EXPORT void mlk_rp_stack_limit(struct mlk_replay *r, uint64_t limit)
{
    r->stack_limit = limit < STACKS_MAX ? limit : STACKS_MAX;
}

static void free_pages(struct page *p)
{
    while (p) {
        struct page *n = p->next;
        free(p->buf);
        free(p);
        p = n;
    }
}

EXPORT void mlk_rp_free(struct mlk_replay *r)
{
    if (!r)
        return;
    for (int64_t i = 0; i < r->nopen; i++)
        free_pages(r->open[i].page);
    free(r->open);
    free(r->live_bytes), free(r->live_blocks), free(r->allocs), free(r->alloc_bytes);
    free(r->peak_bytes), free(r->peak_blocks), free(r->peak_stamp);
    free(r->temp_count), free(r->temp_bytes), free(r->win_bytes), free(r->win_blocks), free(r->lifetimes);
    for (int k = 0; k < SERIES; k++)
        free(r->series[k]);
    free(r->map);
    free(r);
}

/* Per-stack arrays cover id `s`; 0 when memory ran out. */
static int cover(struct mlk_replay *r, uint64_t s)
{
    if (s < r->nstacks)
        return 1;
    uint64_t n = r->nstacks ? r->nstacks : 1024;
    while (n <= s)
        n *= 2;
    uint64_t caps[11];
    int64_t **signed_[] = {&r->live_bytes, &r->live_blocks, &r->peak_bytes, &r->peak_blocks};
    uint64_t **unsigned_[] = {&r->allocs, &r->alloc_bytes, &r->temp_count, &r->temp_bytes, &r->win_bytes,
                              &r->win_blocks, &r->peak_stamp};
    for (int i = 0; i < 4; i++) {
        caps[i] = r->nstacks;
        void *q = grow(*signed_[i], &caps[i], n, 8);
        if (!q)
            return 0;
        *signed_[i] = q;
    }
    for (int i = 0; i < 7; i++) {
        caps[4 + i] = r->nstacks;
        void *q = grow(*unsigned_[i], &caps[4 + i], n, 8);
        if (!q)
            return 0;
        *unsigned_[i] = q;
    }
    if (r->want_lifetimes) {
        uint64_t cap = r->nstacks * LIFE_BUCKETS;
        void *q = grow(r->lifetimes, &cap, n * LIFE_BUCKETS, 8);
        if (!q)
            return 0;
        r->lifetimes = q;
    }
    r->nstacks = n;
    return 1;
}

/* ---- the block map: open addressing, linear probing, backward-shift delete */

static uint64_t slot_of(uint64_t addr, uint64_t mask) { return (addr * 0x9e3779b97f4a7c15ull >> 17) & mask; }

static int map_grow(struct mlk_replay *r)
{
    uint64_t cap = r->map ? (r->map_mask + 1) * 2 : 1 << 16;
    struct block *m = calloc(cap, sizeof *m);
    if (!m)
        return 0;
    if (r->map) {
        for (uint64_t i = 0; i <= r->map_mask; i++) {
            if (!r->map[i].used)
                continue;
            uint64_t j = slot_of(r->map[i].addr, cap - 1);
            while (m[j].used)
                j = (j + 1) & (cap - 1);
            m[j] = r->map[i];
        }
        free(r->map);
    }
    r->map = m;
    r->map_mask = cap - 1;
    return 1;
}

static struct block *map_find(struct mlk_replay *r, uint64_t addr)
{
    if (!r->map)
        return NULL;
    for (uint64_t i = slot_of(addr, r->map_mask);; i = (i + 1) & r->map_mask) {
        if (!r->map[i].used)
            return NULL;
        if (r->map[i].addr == addr)
            return &r->map[i];
    }
}

static void map_put(struct mlk_replay *r, uint64_t addr, uint64_t size, uint32_t stack, uint64_t tick)
{
    if ((!r->map || (r->map_used + 1) * 4 > (r->map_mask + 1) * 3) && !map_grow(r))
        return;
    uint64_t i = slot_of(addr, r->map_mask);
    while (r->map[i].used && r->map[i].addr != addr)
        i = (i + 1) & r->map_mask;
    if (!r->map[i].used)
        r->map_used++;
    r->map[i] = (struct block){addr, size, tick, stack, 1};
}

static void map_erase(struct mlk_replay *r, struct block *b)
{
    uint64_t i = (uint64_t)(b - r->map), j = i;
    r->map[i].used = 0;
    r->map_used--;
    for (;;) {
        j = (j + 1) & r->map_mask;
        if (!r->map[j].used)
            return;
        uint64_t home = slot_of(r->map[j].addr, r->map_mask);
        /* j's entry may move to the hole at i if its home is not in (i, j] */
        if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
            r->map[i] = r->map[j];
            r->map[j].used = 0;
            i = j;
        }
    }
}

/* ---- decoding ------------------------------------------------------------ */

static void start_page(struct cursor *c)
{
    c->at = c->page->buf;
    c->end = c->page->buf + c->page->len;
    c->tick = c->page->first_tick;
    c->addr = 0;
}

/* Decodes the cursor's next record; 0 when its pages are done. */
static int next_record(struct mlk_replay *r, struct cursor *c)
{
    for (;;) {
        if (c->at < c->end) {
            const uint8_t *at = c->at;
            uint8_t t = *at++;
            uint64_t dt, zz, size, stack;
            int type = t & 7;
            if (type >= MLK_EVENT_ALLOC && type <= MLK_EVENT_UNMAP && mlk_varint_get(&at, c->end, &dt) &&
                mlk_varint_get(&at, c->end, &zz) && mlk_varint_get(&at, c->end, &size) &&
                mlk_varint_get(&at, c->end, &stack) &&
                stack <= r->stack_limit) {
                c->tick += dt;
                c->addr = mlk_event_addr_after(t, c->addr, zz);
                c->at = at;
                c->type = type;
                c->ev_tick = c->tick;
                c->ev_addr = c->addr;
                c->size = size;
                c->stack = (uint32_t)stack;
                c->blocks = type == MLK_EVENT_UNMAP ? (int64_t)((t >> MLK_EVENT_BLOCKS_SHIFT) & 3) - 1
                            : type == MLK_EVENT_FREE ? -1 : 1;
                return 1;
            }
            r->bad_records++;
            c->at = c->end; /* the rest of this page cannot be read */
        }
        struct page *done = c->page;
        c->page = done->next;
        free(done->buf);
        free(done);
        if (!c->page)
            return 0;
        start_page(c);
    }
}

/* Adds a page of thread `tid` whose records start at first_ns; the data
 * is copied.  Pages of a thread must be fed in the order it filled them. */
EXPORT int mlk_rp_feed(struct mlk_replay *r, int32_t tid, uint64_t first_ns, const uint8_t *data, uint32_t len)
{
    struct page *p = malloc(sizeof *p);
    uint8_t *buf = malloc(len ? len : 1);
    if (!p || !buf) {
        free(p), free(buf);
        return 0;
    }
    memcpy(buf, data, len);
    *p = (struct page){buf, len, first_ns >> MLK_EVENT_TICK_SHIFT, NULL};
    for (int64_t i = 0; i < r->nopen; i++) {
        if (r->open[i].tid == tid) { /* after the thread's pages still open */
            r->open[i].last->next = p;
            r->open[i].last = p;
            return 1;
        }
    }
    uint64_t cap = (uint64_t)r->capopen;
    struct cursor *o = grow(r->open, &cap, (uint64_t)r->nopen + 1, sizeof *o);
    if (!o) {
        free(p), free(buf);
        return 0;
    }
    r->open = o;
    r->capopen = (int64_t)cap;
    struct cursor *c = &r->open[r->nopen];
    memset(c, 0, sizeof *c);
    c->page = c->last = p;
    c->tid = tid;
    if (r->resting[(uint32_t)tid % 4096].tid == tid)
        c->just_made = r->resting[(uint32_t)tid % 4096].made;
    start_page(c);
    if (next_record(r, c))
        r->nopen++;
    return 1;
}

static void series_to(struct mlk_replay *r, uint64_t tick)
{
    while (r->series_step && tick >= r->series_next) {
        if (r->nseries == r->capseries) {
            uint64_t cap = r->capseries;
            for (int k = 0; k < SERIES; k++) {
                uint64_t c = r->capseries;
                int64_t *a = grow(r->series[k], &c, r->nseries + 1, 8);
                if (!a) {
                    r->series_step = 0;
                    return;
                }
                r->series[k] = a;
                cap = c;
            }
            r->capseries = cap;
        }
        int64_t point[SERIES] = {(int64_t)r->series_next, r->total,
                                 r->bucket_max > r->total ? r->bucket_max : r->total, r->bucket_allocs,
                                 r->bucket_alloc_bytes};
        for (int k = 0; k < SERIES; k++)
            r->series[k][r->nseries] = point[k];
        r->nseries++;
        r->bucket_max = r->total;
        r->bucket_allocs = r->bucket_alloc_bytes = 0;
        /* a quiet stretch: one point at its end, not one per empty step */
        r->series_next = tick - r->series_next > r->series_step ? tick - tick % r->series_step
                                                                : r->series_next + r->series_step;
    }
}

/* Stack s's live counts are about to change: the first time since the
 * latest peak, keep what they were at it. */
static inline void keep_peak(struct mlk_replay *r, uint32_t s)
{
    if (r->peak_stamp[s] != r->peak_number) {
        r->peak_bytes[s] = r->live_bytes[s];
        r->peak_blocks[s] = r->live_blocks[s];
        r->peak_stamp[s] = r->peak_number;
    }
}

static void apply(struct mlk_replay *r, struct cursor *c)
{
    uint64_t tick = c->ev_tick, size = c->size;
    r->records++;
    if (!r->any) {
        r->any = 1;
        r->first_tick = tick;
        r->series_next = r->series_step ? tick - tick % r->series_step + r->series_step : 0;
    }
    r->last_tick = tick;
    series_to(r, tick);
    if (c->type == MLK_EVENT_ALLOC || c->type == MLK_EVENT_MAP) {
        uint32_t s = c->stack - 1;
        if (c->stack == 0 || !cover(r, s)) {
            r->bad_records++;
            return;
        }
        keep_peak(r, s);
        r->live_bytes[s] += (int64_t)size;
        r->live_blocks[s] += c->blocks;
        r->allocs[s]++;
        r->alloc_bytes[s] += size;
        r->bucket_allocs++;
        r->bucket_alloc_bytes += (int64_t)size;
        r->total += (int64_t)size;
        if (r->want_blocks)
            map_put(r, c->ev_addr, size, s, tick);
        if (r->total > r->peak) {
            r->peak = r->total;
            r->peak_ordinal = r->ordinal;
            r->peak_tick = tick;
            r->peak_number++; /* every stack's counts now are this peak's */
        }
        if (r->total > r->bucket_max)
            r->bucket_max = r->total;
        return;
    }
    /* a free, or a piece of a mapping gone */
    struct block *b = r->want_blocks ? map_find(r, c->ev_addr) : NULL;
    uint32_t s;
    if (c->stack) {
        s = c->stack - 1;
    } else if (b) {
        s = b->stack, size = b->size;
    } else {
        r->unknown_frees++;
        return;
    }
    if (!cover(r, s)) {
        r->bad_records++;
        return;
    }
    keep_peak(r, s);
    r->live_bytes[s] -= (int64_t)size;
    r->live_blocks[s] += c->blocks;
    r->total -= (int64_t)size;
    if (!b)
        return;
    if (c->type == MLK_EVENT_UNMAP && b->size != size) { /* a piece of it: the rest stays */
        if (b->addr == c->ev_addr && size < b->size) {
            uint64_t rest = b->size - size, born = b->tick;
            uint32_t stack = b->stack;
            uint64_t at = b->addr + size;
            map_erase(r, b);
            map_put(r, at, rest, stack, born);
        }
        return;
    }
    uint64_t life = tick - b->tick;
    if ((r->temp_ticks && life <= r->temp_ticks) || (r->temp_adjacent && c->just_made == c->ev_addr)) {
        r->temp_count[s]++;
        r->temp_bytes[s] += size;
    }
    if (r->want_lifetimes) {
        int bucket = life ? 64 - __builtin_clzll(life) : 0;
        r->lifetimes[(uint64_t)s * LIFE_BUCKETS + (bucket < LIFE_BUCKETS ? bucket : LIFE_BUCKETS - 1)]++;
    }
    map_erase(r, b);
}

static int before(const struct cursor *a, const struct cursor *b)
{
    if (a->ev_tick != b->ev_tick)
        return a->ev_tick < b->ev_tick;
    int a_free = a->type == MLK_EVENT_FREE || a->type == MLK_EVENT_UNMAP;
    int b_free = b->type == MLK_EVENT_FREE || b->type == MLK_EVENT_UNMAP;
    return a_free && !b_free;
}

/* Applies, in order, every record of the open pages before tick `until`
 * (UINT64_MAX: all of them); returns 0 once the stop point is reached. */
EXPORT int mlk_rp_advance(struct mlk_replay *r, uint64_t until_ns)
{
    uint64_t until = until_ns == UINT64_MAX ? UINT64_MAX : until_ns >> MLK_EVENT_TICK_SHIFT;
    while (!r->stopped && r->nopen) {
        int64_t best = 0;
        for (int64_t i = 1; i < r->nopen; i++)
            if (before(&r->open[i], &r->open[best]))
                best = i;
        struct cursor *c = &r->open[best];
        if (c->ev_tick >= until)
            return 1;
        if (r->ordinal >= r->stop_ordinal || c->ev_tick > r->stop_tick) {
            r->stopped = 1;
            break;
        }
        apply(r, c);
        c->just_made = c->type == MLK_EVENT_ALLOC ? c->ev_addr : 0;
        r->ordinal++;
        if (!next_record(r, c)) {
            r->resting[(uint32_t)c->tid % 4096].tid = c->tid;
            r->resting[(uint32_t)c->tid % 4096].made = c->just_made;
            r->open[best] = r->open[--r->nopen];
        }
    }
    return !r->stopped;
}

/* The usage series' last point: the step the last record fell in, which
 * no later record closed. */
EXPORT void mlk_rp_end_series(struct mlk_replay *r)
{
    if (r->series_step && r->any && r->series_next > r->last_tick)
        series_to(r, r->series_next);
}

/* Moves a reached stop point on to a later one: the replay goes on from
 * where it stopped (the moments of a timeline in one pass). */
EXPORT void mlk_rp_resume(struct mlk_replay *r, uint64_t stop_ordinal, uint64_t stop_ns)
{
    r->stop_ordinal = stop_ordinal;
    r->stop_tick = stop_ns == UINT64_MAX ? UINT64_MAX : stop_ns >> MLK_EVENT_TICK_SHIFT;
    r->stopped = 0;
}

/* What a time window left: the blocks live now that were made at tick lo
 * or later, per stack (win_bytes, win_blocks). */
EXPORT void mlk_rp_window(struct mlk_replay *r, uint64_t lo_ns)
{
    uint64_t lo = lo_ns >> MLK_EVENT_TICK_SHIFT;
    if (!r->map)
        return;
    for (uint64_t i = 0; i <= r->map_mask; i++) {
        struct block *b = &r->map[i];
        if (b->used && b->tick >= lo && cover(r, b->stack)) {
            r->win_bytes[b->stack] += b->size;
            r->win_blocks[b->stack]++;
        }
    }
}

/* Accessors for Python (cffi): the counters and arrays above. */
struct mlk_rp_totals {
    uint64_t records, ordinal, peak_ordinal, peak_tick, first_tick, last_tick, unknown_frees, bad_records,
        nstacks, nseries, live_blocks_followed;
    int64_t total, peak;
};

EXPORT void mlk_rp_totals(const struct mlk_replay *r, struct mlk_rp_totals *t)
{
    *t = (struct mlk_rp_totals){r->records, r->ordinal, r->peak_ordinal, r->peak_tick, r->first_tick,
                                r->last_tick, r->unknown_frees, r->bad_records, r->nstacks, r->nseries,
                                r->map_used, r->total, r->peak};
}

/* Each stack's counts at the peak (of the records applied so far) into
 * peak_bytes and peak_blocks: those that changed after it were kept there
 * (keep_peak), the others are what they are now. */
EXPORT void mlk_rp_at_peak(struct mlk_replay *r)
{
    for (uint64_t s = 0; s < r->nstacks; s++)
        keep_peak(r, (uint32_t)s);
}

/* Column `which` of the per-stack arrays (0 live bytes, 1 live blocks,
 * 2 allocations, 3 bytes allocated, 4 temporary count, 5 temporary bytes,
 * 6 window bytes, 7 window blocks, 8 lifetimes [nstacks * 40]; 9 to 13:
 * the series' ticks, totals, maxima, allocations and their bytes; 14 and
 * 15: live bytes and blocks at the peak, after mlk_rp_at_peak), or NULL. */
EXPORT const void *mlk_rp_column(const struct mlk_replay *r, int which)
{
    const void *cols[] = {r->live_bytes, r->live_blocks, r->allocs,      r->alloc_bytes,   r->temp_count,
                          r->temp_bytes, r->win_bytes,   r->win_blocks,  r->lifetimes,     r->series[0],
                          r->series[1],  r->series[2],   r->series[3],   r->series[4],     r->peak_bytes,
                          r->peak_blocks};
    return which >= 0 && which < (int)(sizeof cols / sizeof cols[0]) ? cols[which] : NULL;
}
