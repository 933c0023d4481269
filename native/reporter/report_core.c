/* The reporter's per-stack loops, in C: libmlkreport.so, loaded by the
 * Python reporter through cffi (libmemleak/daemon/report_core.py).  Never loaded
 * into a traced program.
 *
 * Why C: a report touches every stack of the segment (to find the changed
 * ones) and writes every changed one.  In Python each per-stack step costs
 * 0.3-0.5 us on our machines, and a report of 100,000 changed stacks took
 * 1.8 s in a dozen such steps; here the same work is a few tens of ms.
 * Python keeps what needs judgement -- which module an address is in,
 * symbolization, the header -- and calls these once per report.
 *
 * Everything here is plain arithmetic on caller-owned arrays: no
 * allocation, no I/O, no global state. */

#include <stdint.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "../shm_layout.h"
#include "report_core.h"

#define EXPORT __attribute__((visibility("default")))

/* The counters of stacks 0..n-1, summed over the stripes.  A stack that is
 * not ok (not ready, or damaged) gets zeros everywhere, so it never looks
 * changed.  Per stack, all stripes' frees are read before any stripe's
 * allocations: a free racing with us is then counted at most after its own
 * allocation, and live can never go negative.  The 64-bit counters wrap, as
 * they do in the program. */
EXPORT void mlk_rc_columns(const struct mlk_stack *stacks, const struct mlk_counters *stripes, int64_t stripe_len,
                           const uint32_t *stripes_used, int64_t n, const uint8_t *ok,
                           int64_t *live_bytes, int64_t *live_blocks,
                           int64_t *alloc_count, int64_t *alloc_bytes,
                           int64_t *reported_bytes, int64_t *reported_blocks,
                           int64_t *reported_allocs, int64_t *live_slack)
{
    /* Stripes nobody counted in are never read (that would touch their
     * pages); the mask is read again after a stack's frees, so that an
     * allocation counted in a stripe first used meanwhile is read too. */
    uint32_t used = __atomic_load_n(stripes_used, __ATOMIC_ACQUIRE);
    for (int64_t i = 0; i < n; i++) {
        if (!ok[i]) {
            live_bytes[i] = live_blocks[i] = alloc_count[i] = alloc_bytes[i] = 0;
            reported_bytes[i] = reported_blocks[i] = reported_allocs[i] = live_slack[i] = 0;
            continue;
        }
        const struct mlk_stack *s = &stacks[i];
        uint64_t freed_count = 0, freed_bytes = 0, count = 0, bytes = 0, freed_slack = 0, slack = 0;
        for (int k = 0; k < MLK_COUNTER_STRIPES; k++) {
            if (!(used & (1u << k)))
                continue;
            const struct mlk_counters *c = &stripes[k * stripe_len + i];
            freed_count += (uint64_t)__atomic_load_n(&c->freed_count, __ATOMIC_RELAXED);
            freed_bytes += (uint64_t)__atomic_load_n(&c->freed_bytes, __ATOMIC_RELAXED);
            freed_slack += __atomic_load_n(&c->freed_slack, __ATOMIC_RELAXED);
        }
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        used = __atomic_load_n(stripes_used, __ATOMIC_ACQUIRE);
        for (int k = 0; k < MLK_COUNTER_STRIPES; k++) {
            if (!(used & (1u << k)))
                continue;
            const struct mlk_counters *c = &stripes[k * stripe_len + i];
            count += __atomic_load_n(&c->alloc_count, __ATOMIC_RELAXED);
            bytes += __atomic_load_n(&c->alloc_bytes, __ATOMIC_RELAXED);
            slack += __atomic_load_n(&c->alloc_slack, __ATOMIC_RELAXED);
        }
        live_slack[i] = (int64_t)(slack - freed_slack);
        alloc_count[i] = (int64_t)count;
        alloc_bytes[i] = (int64_t)bytes;
        live_bytes[i] = (int64_t)(bytes - freed_bytes);
        live_blocks[i] = (int64_t)(count - freed_count);
        reported_bytes[i] = s->reported_bytes;
        reported_blocks[i] = s->reported_blocks;
        reported_allocs[i] = s->reported_allocs;
    }
}

static int any_scanned(const int64_t *cats)
{
    for (int k = 1; k < 8; k += 2)
        if (cats[k])
            return 1;
    return 0;
}

/* Position i is an entry of the report: its live bytes or blocks differ
 * from the reported ones, a scan found blocks of it, or its mappings'
 * touched bytes moved.  (One predicate for mlk_rc_unkeyed and
 * mlk_rc_merge: a position the merge takes must have had its key made.) */
static int position_shown(int64_t i, const int64_t *live_bytes, const int64_t *live_blocks,
                          const int64_t *reported_bytes, const int64_t *reported_blocks, const int64_t *scan,
                          const int64_t *touched, const int64_t *touched_before)
{
    return live_bytes[i] != reported_bytes[i] || live_blocks[i] != reported_blocks[i] ||
           (scan && any_scanned(&scan[8 * i])) || (touched && touched[i] != touched_before[i]);
}

/* How many positions (< n) are entries (position_shown): room for the
 * rows of mlk_rc_merge. */
EXPORT int64_t mlk_rc_shown(int64_t n, const int64_t *live_bytes, const int64_t *live_blocks,
                            const int64_t *reported_bytes, const int64_t *reported_blocks, const int64_t *scan,
                            const int64_t *touched, const int64_t *touched_before)
{
    int64_t found = 0;
    for (int64_t i = 0; i < n; i++)
        found += position_shown(i, live_bytes, live_blocks, reported_bytes, reported_blocks, scan, touched,
                                touched_before);
    return found;
}

/* Positions (< n) that are entries (position_shown) and whose key
 * (key_of[pos]) is not known yet (< 0): the reporter resolves those in
 * Python before merging.  Returns how many; writes at most cap. */
EXPORT int64_t mlk_rc_unkeyed(int64_t n, const int64_t *live_bytes, const int64_t *live_blocks,
                              const int64_t *reported_bytes, const int64_t *reported_blocks, const int64_t *scan,
                              const int64_t *touched, const int64_t *touched_before,
                              const int64_t *key_of, int64_t *out, int64_t cap)
{
    int64_t found = 0;
    for (int64_t i = 0; i < n; i++) {
        if (key_of[i] >= 0 ||
            !position_shown(i, live_bytes, live_blocks, reported_bytes, reported_blocks, scan, touched, touched_before))
            continue;
        if (found < cap)
            out[found] = i;
        found++;
    }
    return found;
}

/* A row is an entry of the report: it changed, a scan found blocks of it,
 * or more (or less) of its mappings is touched than the last report said. */
static int row_shown(const struct mlk_rc_row *r, const int64_t *scans)
{
    return r->bytes || r->blocks ||
           (r->scan_at >= 0 && scans && any_scanned(&scans[MLK_RC_SCAN_WORDS * r->scan_at])) ||
           r->touched_changed;
}

/* Report order (docs/memlog.md): growth before shrinkage, and within
 * each, the largest change first -- +4096 before +8, and -16384 before -8
 * (a report made only of frees lists the biggest first, not the smallest). */
static int sign_group(int64_t bytes, int64_t blocks)
{
    if (bytes != 0)
        return bytes > 0 ? 0 : 2;
    return blocks >= 0 ? 1 : 2;
}

static uint64_t magnitude(int64_t v) { return v < 0 ? -(uint64_t)v : (uint64_t)v; }

static int row_order(const void *a, const void *b)
{
    const struct mlk_rc_row *x = a, *y = b;
    int gx = sign_group(x->bytes, x->blocks), gy = sign_group(y->bytes, y->blocks);
    if (gx != gy)
        return gx < gy ? -1 : 1;
    if (x->bytes != y->bytes)
        return magnitude(x->bytes) > magnitude(y->bytes) ? -1 : 1;
    if (x->blocks != y->blocks)
        return magnitude(x->blocks) > magnitude(y->blocks) ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Merge the changed positions by key and sort them into report order.
 * slot_of_key: nkeys entries, all -1 on entry and again on return (scratch
 * the caller keeps between reports).  rows: room for n.  Returns the
 * number of rows; keys whose merged change is zero in bytes and blocks are
 * left out.  -1 if a changed position has no valid key. */
EXPORT int64_t mlk_rc_merge(int64_t n, const int64_t *live_bytes, const int64_t *live_blocks,
                            const int64_t *reported_bytes, const int64_t *reported_blocks,
                            const int64_t *key_of, int64_t nkeys, int64_t *slot_of_key,
                            const int64_t *sampled_live, const int64_t *sampled_reported,
                            const int64_t *alloc_count, const int64_t *reported_allocs,
                            const int64_t *scan, const int64_t *age, const int64_t *touched,
                            const int64_t *touched_before, const int64_t *slack,
                            struct mlk_rc_row *rows, int64_t *scans)
{
    int64_t used = 0, bad = 0;
    for (int64_t i = 0; i < n; i++) {
        /* a scan report lists every stack the scan found blocks of; a
         * mapping is listed when its touched bytes changed */
        if (!position_shown(i, live_bytes, live_blocks, reported_bytes, reported_blocks, scan, touched, touched_before))
            continue;
        int touch_moved = touched && touched[i] != touched_before[i];
        int64_t key = key_of[i];
        if (key < 0 || key >= nkeys) {
            bad = 1;
            continue;
        }
        /* wrapping arithmetic, as the counters themselves */
        uint64_t db = (uint64_t)live_bytes[i] - (uint64_t)reported_bytes[i];
        uint64_t dk = (uint64_t)live_blocks[i] - (uint64_t)reported_blocks[i];
        int64_t ds = sampled_live ? sampled_live[i] - sampled_reported[i] : -1;
        int64_t da = alloc_count ? alloc_count[i] - reported_allocs[i] : -1;
        int64_t slot = slot_of_key[key];
        if (slot < 0) {
            slot_of_key[key] = used;
            rows[used] = (struct mlk_rc_row){key, i, (int64_t)db, (int64_t)dk,
                                             live_bytes[i], live_blocks[i], ds, da, scan ? used : -1,
                                             touched ? touched[i] : -1, touch_moved, slack ? slack[i] : -1};
            if (scan) {  /* (scans: room for as many rows, MLK_RC_SCAN_WORDS each) */
                int64_t *words = &scans[MLK_RC_SCAN_WORDS * used];
                memcpy(words, &scan[8 * i], 8 * sizeof *words);
                if (age)
                    memcpy(words + 8, &age[8 * i], 8 * sizeof *words);
                else
                    memset(words + 8, 0, 8 * sizeof *words);
            }
            used++;
        } else {
            struct mlk_rc_row *r = &rows[slot];
            r->bytes = (int64_t)((uint64_t)r->bytes + db);
            r->blocks = (int64_t)((uint64_t)r->blocks + dk);
            r->live_bytes = (int64_t)((uint64_t)r->live_bytes + (uint64_t)live_bytes[i]);
            r->live_blocks = (int64_t)((uint64_t)r->live_blocks + (uint64_t)live_blocks[i]);
            if (sampled_live)
                r->samples += ds;
            if (alloc_count)
                r->allocs += da;
            if (scan)
                for (int k = 0; k < 8; k++)
                    scans[MLK_RC_SCAN_WORDS * r->scan_at + k] += scan[8 * i + k];
            if (scan && age)
                for (int k = 0; k < 8; k++)
                    scans[MLK_RC_SCAN_WORDS * r->scan_at + 8 + k] += age[8 * i + k];
            if (touched) {
                r->touched += touched[i];
                r->touched_changed |= touch_moved;
            }
            if (slack)
                r->slack += slack[i];
        }
    }
    int64_t kept = 0;
    for (int64_t r = 0; r < used; r++) {
        slot_of_key[rows[r].key] = -1;
        if (row_shown(&rows[r], scans))
            rows[kept++] = rows[r];
    }
    qsort(rows, (size_t)kept, sizeof *rows, row_order);
    return bad ? -1 : kept;
}

/* Merge rows whose keys print the same frames (canon[key]: the first key
 * seen with that text, or -1 for itself), as the original MTrace merged
 * identically formatted stacks: two keys can differ only below what a
 * report shows (return addresses in one line of code, a frame of our own
 * hooks, a different allocator entry point), and a user must see one
 * entry per stack.  slot_of_key: as for mlk_rc_merge.  Rows stay in
 * report order; returns their new number. */
EXPORT int64_t mlk_rc_merge_same_text(struct mlk_rc_row *rows, int64_t n, const int64_t *canon,
                                      int64_t ncanon, int64_t *slot_of_key, int64_t nkeys, int64_t *scans)
{
    int64_t used = 0, merged = 0;
    for (int64_t r = 0; r < n; r++) {
        struct mlk_rc_row row = rows[r];
        int64_t key = row.key;
        if (key >= 0 && key < ncanon && canon[key] >= 0)
            key = canon[key];
        if (key < 0 || key >= nkeys) {
            rows[used++] = row;
            continue;
        }
        int64_t slot = slot_of_key[key];
        if (slot < 0) {
            slot_of_key[key] = used;
            row.key = key;
            rows[used++] = row;
            continue;
        }
        struct mlk_rc_row *into = &rows[slot];
        into->bytes = (int64_t)((uint64_t)into->bytes + (uint64_t)row.bytes);
        into->blocks = (int64_t)((uint64_t)into->blocks + (uint64_t)row.blocks);
        into->live_bytes = (int64_t)((uint64_t)into->live_bytes + (uint64_t)row.live_bytes);
        into->live_blocks = (int64_t)((uint64_t)into->live_blocks + (uint64_t)row.live_blocks);
        if (into->samples != -1)
            into->samples += row.samples;
        if (into->allocs != -1)
            into->allocs += row.allocs;
        if (row.pos < into->pos)
            into->pos = row.pos;
        if (scans && into->scan_at >= 0 && row.scan_at >= 0)
            for (int k = 0; k < MLK_RC_SCAN_WORDS; k++)
                scans[MLK_RC_SCAN_WORDS * into->scan_at + k] += scans[MLK_RC_SCAN_WORDS * row.scan_at + k];
        if (into->touched != -1 && row.touched != -1)
            into->touched += row.touched;
        into->touched_changed |= row.touched_changed;
        merged = 1;
    }
    int64_t kept = 0;
    for (int64_t r = 0; r < used; r++) {
        if (rows[r].key >= 0 && rows[r].key < nkeys)
            slot_of_key[rows[r].key] = -1;
        if (row_shown(&rows[r], scans))
            rows[kept++] = rows[r];
    }
    if (merged)
        qsort(rows, (size_t)kept, sizeof *rows, row_order);
    return kept;
}

/* Keys of rows[0..nrows) that have no text yet (MLK_RC_NO_TEXT, or beyond
 * its nkeys entries): the reporter symbolizes those.  Returns how many; writes at most cap. */
EXPORT int64_t mlk_rc_textless(const struct mlk_rc_row *rows, int64_t nrows,
                               const int64_t *key_first, int64_t nkeys, int64_t *out, int64_t cap)
{
    int64_t found = 0;
    for (int64_t r = 0; r < nrows; r++) {
        int64_t key = rows[r].key;
        if (key >= 0 && (key >= nkeys || key_first[key] == MLK_RC_NO_TEXT)) {
            if (found < cap)
                out[found] = rows[r].key;
            found++;
        }
    }
    return found;
}

/* In key_kind: the key's stack was cut at the configured depth. */
#define CUT_KIND 0x40

/* How an entry names its allocator family; malloc's is left unsaid. */
static const char *const kind_field[] = {[MLK_KIND_NEW] = " kind=new", [MLK_KIND_MMAP] = " kind=mmap",
                                         [MLK_KIND_SHARED] = " kind=shared", [MLK_KIND_CUSTOM] = " kind=custom"};
#define KIND_FIELDS ((int)(sizeof kind_field / sizeof kind_field[0]))
/* A scan report's split of an entry's live blocks (docs/memlog.md). */
static const char *const category_field[4] = {" definitely-lost=", " indirectly-lost=",
                                              " possibly-lost=", " still-reachable="};

static int put_signed(char *p, int64_t v)
{
    char tmp[24];
    int n = 0;
    uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    int len = 0;
    p[len++] = v < 0 ? '-' : '+';
    while (n)
        p[len++] = tmp[--n];
    return len;
}

/* An amount (the scan's bytes and blocks are not changes): no sign. */
int mlk_rc_put_count(char *p, int64_t v)
{
    int len = put_signed(p, v);
    if (p[0] == '+')
        memmove(p, p + 1, (size_t)--len);
    return len;
}

/* Write the entries rows[from..to) in the report format ("+bytes +blocks"
 * then the key's frame lines) into out[0..cap).  Stops before an entry
 * that does not fit; *next is the first row not written.  Returns the
 * number of bytes written; if not even the first entry fits, returns
 * -(bytes it needs). */
EXPORT int64_t mlk_rc_render(const struct mlk_rc_row *rows, int64_t from, int64_t to,
                             const struct mlk_rc_texts *t, char *out, int64_t cap, int64_t *next)
{
    int64_t len = 0, r = from;
    int32_t buf[MLK_RC_LINES_MAX];
    for (; r < to; r++) {
        const struct mlk_rc_row *row = &rows[r];
        int32_t lines = 0;
        const int32_t *ids = mlk_rc_text_of(t, row->key, buf, &lines);
        int64_t node = mlk_rc_in_table(t, row->key, ids, lines) ? row->key + 1 : 0;
        if (!ids || (node > 0 && r >= t->inline_rows))
            lines = 0;
        int64_t need = 144 + 240 + 240 + 64 + KIND_TEXT_WIDTH; /* five signed numbers, the kind, "cut=", "touched=", "samples=", "allocs=", "slack=",
                                         * four categories' "name=bytes/blocks", "since=" with
                                         * eight "seq:blocks", "stack=", a newline */
        for (int32_t k = 0; k < lines; k++)
            need += t->line_off[ids[k] + 1] - t->line_off[ids[k]];
        if (len + need > cap) {
            if (r == from)
                len = -need;
            break;
        }
        char *p = out + len;
        p += put_signed(p, row->bytes);
        *p++ = ' ';
        p += put_signed(p, row->blocks);
        int kind = row->key >= 0 && row->key < t->keys ? t->key_kind[row->key] : 0;
        if (kind & CUT_KIND) {
            memcpy(p, " cut=", 5);
            p += 5;
            p += mlk_rc_put_count(p, t->depth);
            kind &= ~CUT_KIND;
        }
        const char *said = kind > 0 && kind < KIND_FIELDS ? kind_field[kind] : NULL;
        if (t->kind_text && kind > 0 && kind < KIND_TEXT_KINDS && t->kind_text[kind * KIND_TEXT_WIDTH])
            said = t->kind_text + kind * KIND_TEXT_WIDTH;
        if (said) {
            size_t n = strnlen(said, KIND_TEXT_WIDTH - 1);
            memcpy(p, said, n);
            p += n;
        }
        if (row->touched >= 0 && (kind == MLK_KIND_MMAP || kind == MLK_KIND_SHARED)) {
            memcpy(p, " touched=", 9);
            p += 9;
            p += mlk_rc_put_count(p, row->touched);
        }
        if (row->allocs != -1) {
            memcpy(p, " allocs=", 8);
            p += 8;
            p += put_signed(p, row->allocs);
        }
        if (row->slack > 0) { /* an amount now, not a change; none: 0 (docs/memlog.md) */
            memcpy(p, " slack=", 7);
            p += 7;
            p += mlk_rc_put_count(p, row->slack);
        }
        if (row->samples != -1) {
            memcpy(p, " samples=", 9);
            p += 9;
            p += put_signed(p, row->samples);
        }
        const int64_t *lost = row->scan_at >= 0 && t->scans ? &t->scans[MLK_RC_SCAN_WORDS * row->scan_at] : NULL;
        const int64_t *since = lost ? lost + 8 : NULL;
        if (lost)
            for (int c = 0; c < 4; c++) {
                if (!lost[2 * c + 1])
                    continue;
                size_t n = strlen(category_field[c]);
                memcpy(p, category_field[c], n);
                p += n;
                p += mlk_rc_put_count(p, lost[2 * c]);
                *p++ = '/';
                p += mlk_rc_put_count(p, lost[2 * c + 1]);
            }
        if (since && t->since_seq) {
            int first = 1;
            for (int k = 0; k < 8; k++) {
                if (!since[k] || !t->since_seq[k])
                    continue;
                memcpy(p, first ? " since=" : ",", first ? 7 : 1);
                p += first ? 7 : 1;
                first = 0;
                p += mlk_rc_put_count(p, t->since_seq[k]);
                *p++ = ':';
                p += mlk_rc_put_count(p, since[k]);
            }
        }
        if (node > 0) {
            memcpy(p, " stack=", 7);
            p += 7;
            p += mlk_rc_put_count(p, node);
        }
        *p++ = '\n';
        for (int32_t k = 0; k < lines; k++) {
            int64_t size = t->line_off[ids[k] + 1] - t->line_off[ids[k]];
            memcpy(p, t->arena + t->line_off[ids[k]], (size_t)size);
            p += size;
        }
        len = p - out;
    }
    *next = r;
    return len;
}

static int is_resource(const struct mlk_rc_row *row, const int8_t *key_kind, int64_t nkeys, int first_resource_kind)
{
    return row->key >= 0 && row->key < nkeys && (key_kind[row->key] & ~CUT_KIND) >= first_resource_kind;
}

/* Moves the rows of resource keys (key_kind, less CUT_KIND, at least
 * `first_resource_kind`) after all the others, each group in its order:
 * a report's resources are a section of their own, after memory's
 * (docs/memlog.md).  scratch: room for `room` rows -- the resource rows,
 * a few descriptors' stacks among a million (not a copy of them all).
 * Returns 0, or how many rows scratch needs when it has too few. */
EXPORT int64_t mlk_rc_resources_last(struct mlk_rc_row *rows, int64_t n, const int8_t *key_kind, int64_t nkeys,
                                     int first_resource_kind, struct mlk_rc_row *scratch, int64_t room)
{
    int64_t later = 0;
    for (int64_t r = 0; r < n; r++)
        later += is_resource(&rows[r], key_kind, nkeys, first_resource_kind);
    if (later > room)
        return later;
    int64_t memory = 0;
    later = 0;
    for (int64_t r = 0; r < n; r++) {
        if (is_resource(&rows[r], key_kind, nkeys, first_resource_kind))
            scratch[later++] = rows[r];
        else
            rows[memory++] = rows[r];
    }
    memcpy(rows + memory, scratch, (size_t)later * sizeof *rows);
    return 0;
}

/* Record that a report now covers these columns: reported := live, for the
 * stacks whose values changed (untouched lines stay clean). */
EXPORT void mlk_rc_commit(struct mlk_stack *stacks, int64_t n, const int64_t *live_bytes,
                          const int64_t *live_blocks, const int64_t *reported_bytes,
                          const int64_t *reported_blocks, const int64_t *alloc_count,
                          const int64_t *reported_allocs)
{
    for (int64_t i = 0; i < n; i++) {
        if (alloc_count[i] != reported_allocs[i])
            stacks[i].reported_allocs = alloc_count[i];
        if (live_bytes[i] != reported_bytes[i])
            stacks[i].reported_bytes = live_bytes[i];
        if (live_blocks[i] != reported_blocks[i])
            stacks[i].reported_blocks = live_blocks[i];
    }
}

/* What mlk_rc_commit will write, as records of 4 words (the stack's id --
 * ids[i], or i where ids is NULL --, its live bytes, blocks and
 * allocations), written to fd as they are found, through a small buffer:
 * how many, or -1 (a write failed).  Written before the report is put in
 * place, so that a reporter killed in the middle of the commit leaves its
 * successor what to finish (libmemleak/daemon/commit_journal.py). */
static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w, len -= (size_t)w;
    }
    return 0;
}

EXPORT int64_t mlk_rc_commit_records(int fd, int64_t n, const int64_t *ids, const int64_t *live_bytes,
                                     const int64_t *live_blocks, const int64_t *reported_bytes,
                                     const int64_t *reported_blocks, const int64_t *alloc_count,
                                     const int64_t *reported_allocs)
{
    int64_t buf[4 * 2048], found = 0;
    size_t used = 0;
    for (int64_t i = 0; i < n; i++) {
        if (alloc_count[i] == reported_allocs[i] && live_bytes[i] == reported_bytes[i] &&
            live_blocks[i] == reported_blocks[i])
            continue;
        if (used == sizeof buf / sizeof *buf) {
            if (write_all(fd, buf, sizeof buf) != 0)
                return -1;
            used = 0;
        }
        buf[used++] = ids ? ids[i] : i;
        buf[used++] = live_bytes[i];
        buf[used++] = live_blocks[i];
        buf[used++] = alloc_count[i];
        found++;
    }
    return used && write_all(fd, buf, used * sizeof *buf) != 0 ? -1 : found;
}

/* A report request from outside the program (`libmemleak snapshot`):
 * counted with the same atomic increments the program's own requests use,
 * so that none is lost when both ask at once.  Returns the request's
 * number; the caller wakes the reporter and waits for done_seq to reach it. */
EXPORT uint32_t mlk_rc_post_snapshot(struct mlk_header *h)
{
    __atomic_add_fetch(&h->snapshot_requests, 1, __ATOMIC_RELEASE);
    return __atomic_add_fetch(&h->request_seq, 1, __ATOMIC_ACQ_REL);
}

/* A scan request from outside (`libmemleak scan PID`): as a snapshot
 * request, counted apart so the reporter knows to scan. */
EXPORT uint32_t mlk_rc_post_scan(struct mlk_header *h)
{
    __atomic_add_fetch(&h->scan_requests, 1, __ATOMIC_RELEASE);
    return __atomic_add_fetch(&h->request_seq, 1, __ATOMIC_ACQ_REL);
}

/* A reporter's standby taking the place of a reporter that died: the
 * reporter's pid goes from `dead` to `standby`, unless the program (which
 * claims it the same way before it starts a reporter) got there first.
 * Returns 1 if the standby has it. */
EXPORT int mlk_rc_claim_reporter(struct mlk_header *h, int32_t dead, int32_t standby)
{
    return __atomic_compare_exchange_n(&h->reporter_pid, &dead, standby, 0, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE);
}
