/* The event log's chunk packing (docs/events.md, "The file"): what the
 * recorder does to a chunk's records before zstd, and the reader undoes.
 *
 * The hook writes each record as it comes (native/hook/events/events.c):
 * a type byte and four varints -- ticks since the page's previous record,
 * the address's delta from the previous record's, the size, the stack id.
 * The addresses are most of what zstd cannot shrink: a free names a block
 * allocated a while ago, an allocation reuses a block freed a moment ago.
 * Packing names such an address by its distance back, in records, to the
 * last record of the same address in the chunk (small numbers, often the
 * same ones), and a record whose size and stack are that record's says so
 * in a bit instead of repeating them.  The fields are then laid out as
 * columns (types, times, addresses, sizes and stacks), so that zstd sees
 * like next to like.  Measured on cc1's log: 3.2 -> 1.0 bytes a record.
 *
 * Exact: unpacking gives back the hook's bytes, so the replay reads a
 * packed log as it reads the records in the segment.  The records are the
 * traced program's writing: a page that does not re-encode to its own
 * bytes (a broken record, a varint not the shortest) is kept verbatim.
 * Unpacking reads a file anyone may have written: every count and index is
 * checked, and a chunk that does not add up is refused whole. */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../shm_layout.h"
#include "../event_record.h"

#define EXPORT __attribute__((visibility("default")))

#define DIST 0x40        /* the address is a distance back to its last record */
#define SAME 0x80        /* ... and the size and stack are that record's */
#define HOOK_BITS 0x3f   /* what the hook's type byte may use */
#define RING 65536       /* records looked back at; further ones are written in full */
#define TABLE (RING * 2) /* the packer's address -> last record, open addressing */
#define PAGE_MAX 65536   /* a page's bytes (the hook's are 32 KiB) */
#define PAGE_RECORDS (PAGE_MAX / 5)
#define MODE_PACKED 0
#define MODE_VERBATIM 1
#define CHUNK_MAX (1u << 28) /* a chunk's records: far more than the recorder's ~1 MiB */
#define COLUMNS 5        /* types, times, addresses, sizes+stacks, verbatim pages */

struct ref {
    uint64_t addr, size;
    uint32_t stack, pad;
};

struct slot {
    uint64_t addr;
    uint32_t seq, gen;
};

struct record {
    uint8_t type;
    uint64_t dt, zz, size, stack, addr;
};

struct mlk_ev_packer {
    struct ref ring[RING];
    struct slot table[TABLE];
    struct record page[PAGE_RECORDS];
    uint32_t gen, inserted;
};

EXPORT struct mlk_ev_packer *mlk_ev_packer_new(void)
{
    return calloc(1, sizeof(struct mlk_ev_packer));
}

EXPORT void mlk_ev_packer_free(struct mlk_ev_packer *p)
{
    free(p);
}

/* ---- the hook's address arithmetic, backwards ---------------------------- */

/* The delta the hook wrote for `addr` after `prev`. */
static uint64_t zz_for(uint8_t type, uint64_t prev, uint64_t addr)
{
    uint64_t d = (type & MLK_EVENT_RAW_ADDR) ? addr - prev : (addr >> 3) - (prev >> 3);
    return (d << 1) ^ (0 - (d >> 63));
}

static uint8_t *put_record(uint8_t *o, const struct record *r)
{
    *o++ = r->type;
    o = mlk_varint_put(o, r->dt);
    o = mlk_varint_put(o, r->zz);
    o = mlk_varint_put(o, r->size);
    return mlk_varint_put(o, r->stack);
}

/* ---- packing ------------------------------------------------------------ */

/* A page's records into p->page, if the page is nothing but records that
 * re-encode to its own bytes; else -1. */
static int parse_page(struct mlk_ev_packer *p, const uint8_t *data, uint32_t len)
{
    const uint8_t *at = data, *end = data + len;
    uint64_t prev = 0;
    int n = 0;
    uint8_t again[24 + 5 * 10];
    while (at < end) {
        const uint8_t *start = at;
        struct record *r = &p->page[n];
        r->type = *at++;
        if ((r->type & ~HOOK_BITS) || !mlk_varint_get(&at, end, &r->dt) ||
            !mlk_varint_get(&at, end, &r->zz) || !mlk_varint_get(&at, end, &r->size) ||
            !mlk_varint_get(&at, end, &r->stack) || r->stack > UINT32_MAX)
            return -1;
        uint8_t *o = put_record(again, r);
        if ((size_t)(o - again) != (size_t)(at - start) || memcmp(again, start, (size_t)(at - start)))
            return -1;
        prev = r->addr = mlk_event_addr_after(r->type, prev, r->zz);
        n++;
    }
    return n;
}

static uint32_t hash(uint64_t addr)
{
    return (uint32_t)(((addr >> 3) * 0x9E3779B97F4A7C15ull) >> 47) & (TABLE - 1);
}

/* The slot of addr in the table (its own, or the empty one where it goes;
 * NULL when the table is too full to take it). */
static struct slot *find(struct mlk_ev_packer *p, uint64_t addr)
{
    for (uint32_t i = hash(addr), probes = 0; probes < TABLE; i = (i + 1) & (TABLE - 1), probes++) {
        struct slot *s = &p->table[i];
        if (s->gen != p->gen)
            return p->inserted < TABLE / 2 ? s : NULL;
        if (s->addr == addr)
            return s;
    }
    return NULL;
}

struct columns {
    uint8_t *at[COLUMNS];
};

/* Packs a chunk: npages pages of records, page i lens[i] bytes of `raw`,
 * one after another.  `out` must hold mlk_ev_pack_bound(raw_len, npages)
 * bytes; returns the packed length.  The layout: five u32 column lengths,
 * then the columns. */
EXPORT uint64_t mlk_ev_pack_bound(uint64_t raw_len, uint32_t npages)
{
    /* each column is written in a region of its own worst case (below), then moved together */
    return 4 * COLUMNS + npages + raw_len * 6;
}

EXPORT int64_t mlk_ev_pack(struct mlk_ev_packer *p, const uint8_t *raw, const uint32_t *lens,
                           uint32_t npages, uint8_t *out, uint64_t out_cap)
{
    uint64_t raw_len = 0;
    for (uint32_t i = 0; i < npages; i++) {
        if (lens[i] > PAGE_MAX)
            return -1;
        raw_len += lens[i];
    }
    if (raw_len > CHUNK_MAX || out_cap < mlk_ev_pack_bound(raw_len, npages))
        return -1;
    /* A record is >= 5 bytes: at most one type byte in 5 (and a mode byte a page), and
     * its distance (< RING: <= 3 bytes) at most 3 bytes in 5; the rest no longer than the hook's. */
    uint64_t room[COLUMNS] = {npages + raw_len, raw_len, raw_len + raw_len / 2, raw_len, raw_len};
    uint8_t *base[COLUMNS];
    struct columns c;
    uint8_t *o = out + 4 * COLUMNS;
    for (int k = 0; k < COLUMNS; k++) {
        base[k] = c.at[k] = o;
        o += room[k];
    }
    if ((uint64_t)(o - out) > out_cap)
        return -1;
    p->gen++;
    if (!p->gen) { /* wrapped: every slot's generation might look current */
        memset(p->table, 0, sizeof p->table);
        p->gen = 1;
    }
    p->inserted = 0;
    uint32_t seq = 0;
    for (uint32_t i = 0; i < npages; raw += lens[i], i++) {
        int n = parse_page(p, raw, lens[i]);
        if (n < 0) {
            *c.at[0]++ = MODE_VERBATIM;
            memcpy(c.at[4], raw, lens[i]);
            c.at[4] += lens[i];
            continue;
        }
        *c.at[0]++ = MODE_PACKED;
        uint64_t prev = 0;
        for (int j = 0; j < n; j++, seq++) {
            struct record *r = &p->page[j];
            struct slot *s = find(p, r->addr);
            uint8_t type = r->type;
            uint64_t ref_distance = 0;
            /* (an 8-byte delta's top bits are lost in the address: only the hook's own one re-encodes) */
            if (s && s->gen == p->gen && seq - s->seq < RING && zz_for(type, prev, r->addr) == r->zz) {
                struct ref *ref = &p->ring[s->seq % RING];
                ref_distance = seq - s->seq;
                type |= DIST;
                if (ref->size == r->size && ref->stack == r->stack)
                    type |= SAME;
            }
            *c.at[0]++ = type;
            c.at[1] = mlk_varint_put(c.at[1], r->dt);
            c.at[2] = mlk_varint_put(c.at[2], (type & DIST) ? ref_distance : r->zz);
            if (!(type & SAME)) {
                c.at[3] = mlk_varint_put(c.at[3], r->size);
                c.at[3] = mlk_varint_put(c.at[3], r->stack);
            }
            p->ring[seq % RING] = (struct ref){r->addr, r->size, (uint32_t)r->stack, 0};
            prev = r->addr;
            if (s) {
                if (s->gen != p->gen) {
                    p->inserted++;
                    s->gen = p->gen;
                    s->addr = r->addr;
                }
                s->seq = seq;
            }
        }
    }
    o = out + 4 * COLUMNS;
    for (int k = 0; k < COLUMNS; k++) {
        uint32_t n = (uint32_t)(c.at[k] - base[k]);
        memcpy(out + 4 * k, &n, 4);
        memmove(o, base[k], n);
        o += n;
    }
    return o - out;
}

/* ---- unpacking ---------------------------------------------------------- */

/* Unpacks what mlk_ev_pack made into the pages' records: raw_out gets
 * exactly the lens' sum of bytes.  Returns 0, or -1 for a packed chunk
 * that is not one (a column short or with bytes left over, a distance
 * past the chunk's start, a page that does not end on a record). */
EXPORT int mlk_ev_unpack(struct mlk_ev_packer *p, const uint8_t *in, uint64_t in_len, const uint32_t *lens,
                         uint32_t npages, uint8_t *raw_out, uint64_t raw_len)
{
    const uint8_t *at[COLUMNS], *end[COLUMNS];
    if (in_len < 4 * COLUMNS)
        return -1;
    uint64_t offset = 4 * COLUMNS;
    for (int k = 0; k < COLUMNS; k++) {
        uint32_t n;
        memcpy(&n, in + 4 * k, 4);
        if (n > in_len - offset)
            return -1;
        at[k] = in + offset;
        end[k] = at[k] + n;
        offset += n;
    }
    if (offset != in_len)
        return -1;
    uint8_t *o = raw_out, *o_end = raw_out + raw_len;
    uint32_t seq = 0;
    for (uint32_t i = 0; i < npages; i++) {
        if (lens[i] > (uint64_t)(o_end - o) || at[0] >= end[0])
            return -1;
        uint8_t *page_end = o + lens[i];
        uint8_t mode = *at[0]++;
        if (mode == MODE_VERBATIM) {
            if (lens[i] > (uint64_t)(end[4] - at[4]))
                return -1;
            memcpy(o, at[4], lens[i]);
            at[4] += lens[i];
            o = page_end;
            continue;
        }
        if (mode != MODE_PACKED)
            return -1;
        uint64_t prev = 0, dist = 0;
        while (o < page_end) {
            struct record r;
            if (at[0] >= end[0])
                return -1;
            uint8_t type = *at[0]++;
            r.type = type & HOOK_BITS;
            if (!mlk_varint_get(&at[1], end[1], &r.dt) ||
                !mlk_varint_get(&at[2], end[2], (type & DIST) ? &dist : &r.zz))
                return -1;
            const struct ref *ref = NULL;
            if (type & DIST) {
                if (dist == 0 || dist > seq || dist >= RING)
                    return -1;
                ref = &p->ring[(seq - dist) % RING];
                r.addr = ref->addr;
                r.zz = zz_for(r.type, prev, r.addr);
            } else {
                if (type & SAME)
                    return -1;
                r.addr = mlk_event_addr_after(r.type, prev, r.zz);
            }
            if (type & SAME) {
                r.size = ref->size;
                r.stack = ref->stack;
            } else if (!mlk_varint_get(&at[3], end[3], &r.size) || !mlk_varint_get(&at[3], end[3], &r.stack) ||
                       r.stack > UINT32_MAX) {
                return -1;
            }
            uint8_t buf[1 + 4 * 10];
            uint8_t *e = put_record(buf, &r);
            if (e - buf > page_end - o)
                return -1;
            memcpy(o, buf, (size_t)(e - buf));
            o += e - buf;
            /* what the record decodes to, as the packer saw it */
            prev = mlk_event_addr_after(r.type, prev, r.zz);
            p->ring[seq % RING] = (struct ref){prev, r.size, (uint32_t)r.stack, 0};
            seq++;
        }
    }
    for (int k = 0; k < COLUMNS; k++)
        if (at[k] != end[k])
            return -1;
    return o == o_end ? 0 : -1;
}
