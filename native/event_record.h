/* An event log record's pieces (docs/events.md, "The file"), written by the
 * hook (native/hook/events/events.c) and read by the reporter's packing
 * and replay (native/reporter/event_pack.c, replay.c): LEB128 varints and
 * the address a record's delta gives.  Static inline: each side compiles
 * its own copy, neither links the other.  Included after shm_layout.h
 * (which has no include guard: cffi reads it too). */
#ifndef MLK_EVENT_RECORD_H
#define MLK_EVENT_RECORD_H

#include <stdint.h>

static inline uint8_t *mlk_varint_put(uint8_t *o, uint64_t v)
{
    while (v >= 0x80) {
        *o++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *o++ = (uint8_t)v;
    return o;
}

/* A varint from *at, not past end (it is the traced program's writing):
 * 1, or 0 for one cut short or longer than 64 bits' worth of bytes. */
static inline int mlk_varint_get(const uint8_t **at, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*at >= end)
            return 0;
        uint8_t b = *(*at)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 1;
        }
    }
    return 0;
}

/* The address a record of this type byte gives after the previous record's
 * address prev, from its zigzag delta zz (in 8-byte units unless the type
 * byte says MLK_EVENT_RAW_ADDR). */
static inline uint64_t mlk_event_addr_after(uint8_t type, uint64_t prev, uint64_t zz)
{
    uint64_t delta = (zz >> 1) ^ (0 - (zz & 1));
    return (type & MLK_EVENT_RAW_ADDR) ? prev + delta : ((prev >> 3) + delta) << 3;
}

#endif
