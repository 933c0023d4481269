/* The format of a block's trailer: written by the hook library
 * (native/hook/trailers.c, struct mlk_trailer in mlk.h), read from the stopped
 * program by the reachability scan (native/reporter/scan_blocks.c).  A trailer is
 * a block's last 16 usable bytes, two words:
 *   meta  = log2 alignment << MLK_TRAILER_ALIGN_SHIFT | size << MLK_TRAILER_STACK_BITS
 *           | family << MLK_TRAILER_FAMILY_SHIFT | stack id, for a counted
 *           block (family: the call that made it, MLK_FAMILY_*, three
 *           bits; stack ids are below 2^21, MLK_STACKS_CAP; size: 34 bits,
 *           a block is trailed only below MLK_TRAILED_SIZE_MAX; log2 of an
 *           aligned new's alignment in the top six bits, else 0);
 *           for a block not counted, the stack bits are all set
 *           (MLK_TRAILER_UNCOUNTED) and
 *             bit 63 set (MLK_TRAILER_OURS_META): libmtrace's own block;
 *             bit 62 set (MLK_TRAILER_SIZED): bits 24..61 hold its size;
 *             neither: its size is not kept;
 *   check = the block's address XOR the process's key; once freed, that
 *           XOR MLK_TRAILER_FREED (meta kept), so that a second free of
 *           it is known for one -- as long as the allocator has not
 *           handed the memory out again. */
#ifndef MLK_TRAILER_FORMAT_H
#define MLK_TRAILER_FORMAT_H

#define MLK_TRAILER_STACK_BITS 24
#define MLK_TRAILER_UNCOUNTED ((1u << MLK_TRAILER_STACK_BITS) - 1)
#define MLK_TRAILER_OURS_META ((1ull << 63) | MLK_TRAILER_UNCOUNTED)
#define MLK_TRAILER_SIZED (1ull << 62)
#define MLK_TRAILER_SIZE_BITS 38 /* of an uncounted block's kept size */
#define MLK_TRAILER_SIZE_MASK ((1ull << MLK_TRAILER_SIZE_BITS) - 1)
#define MLK_TRAILER_ID_MASK ((1u << 21) - 1)
#define MLK_TRAILER_FAMILY_SHIFT 21
#define MLK_FAMILY_MALLOC 0    /* malloc, calloc, realloc, memalign...: free() */
#define MLK_FAMILY_NEW 1       /* operator new: delete */
#define MLK_FAMILY_NEW_ARRAY 2 /* operator new[]: delete[] */
#define MLK_FAMILY_NEW_ALIGNED 3       /* operator new(size, align_val_t): its delete */
#define MLK_FAMILY_NEW_ARRAY_ALIGNED 4 /* operator new[](size, align_val_t): its delete[] */
#define MLK_TRAILER_ALIGN_SHIFT 58
#define MLK_TRAILED_SIZE_MAX (1ull << (MLK_TRAILER_ALIGN_SHIFT - MLK_TRAILER_STACK_BITS)) /* 16 GiB */
/* A counted block's meta bits besides its size and stack: its family and
 * log2 of its alignment (0 but for aligned new) -- a constant in most
 * hooks, so that writing a trailer costs one OR for them. */
#define MLK_TRAILER_TAG(family, log2) \
    ((uint64_t)(family) << MLK_TRAILER_FAMILY_SHIFT | (uint64_t)(log2) << MLK_TRAILER_ALIGN_SHIFT)
/* (A negative 32-bit number: a free marks its block with one instruction,
 * `xorq $imm32`; and its bits 31..63 all set make `check` of a freed block
 * the check word of an address no block can have, p ^ FREED being above
 * user space -- a positive 32-bit one would name a live block 2 GB away.) */
#define MLK_TRAILER_FREED 0xffffffffdeadf4eeull

#include <stdint.h>

/* A meta word's stack id (MLK_TRAILER_UNCOUNTED for a block not counted),
 * and the family of a counted block (7 for one not counted). */
static inline uint32_t mlk_trailer_stack_of(uint64_t meta)
{
    uint32_t field = (uint32_t)(meta & MLK_TRAILER_UNCOUNTED);
    return field == MLK_TRAILER_UNCOUNTED ? field : field & MLK_TRAILER_ID_MASK;
}

static inline uint32_t mlk_trailer_family_of(uint64_t meta)
{
    return ((uint32_t)meta >> MLK_TRAILER_FAMILY_SHIFT) & 7;
}

static inline int mlk_family_is_aligned(uint32_t family)
{
    return family - MLK_FAMILY_NEW_ALIGNED <= MLK_FAMILY_NEW_ARRAY_ALIGNED - MLK_FAMILY_NEW_ALIGNED;
}

/* A counted block's size. */
static inline uint64_t mlk_trailer_size_of(uint64_t meta)
{
    return (meta >> MLK_TRAILER_STACK_BITS) & (MLK_TRAILED_SIZE_MAX - 1);
}

/* A counted block's alignment: an aligned new's, else 0. */
static inline uint64_t mlk_trailer_align_of(uint64_t meta)
{
    return mlk_family_is_aligned(mlk_trailer_family_of(meta)) ? 1ull << (meta >> MLK_TRAILER_ALIGN_SHIFT) : 0;
}

#endif
