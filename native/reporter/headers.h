/* Blocks held through an allocator's header, learned per allocation site
 * (headers.c).  Reporter side only. */
#ifndef MLK_HEADERS_H
#define MLK_HEADERS_H

#include <stdint.h>

#include "scan.h"

#define MLK_HEADER_MAX 64               /* the largest header offset looked for (bytes) */
#define MLK_HEADER_OFFSET_MASK 0x0f     /* in mlk_block.header: the offset first pointed at, / 8 */
#define MLK_HEADER_FROM_REACHABLE 0x80  /* ... and a reachable place pointed there */

struct mlk_headers;
/* Per stack id: the offset and depth of its frames in `frames` (the
 * segment's, validated by the caller or not: bounded here).  NULL if
 * there is nothing to learn from. */
struct mlk_headers *mlk_headers_new(const int64_t *stack_off, const int64_t *stack_depth, int64_t nstacks,
                                    const uint64_t *frames, uint64_t nframes);
void mlk_headers_free(struct mlk_headers *h);
/* An interior pointer `word` into block b, found in a reachable place or not. */
void mlk_header_hit(struct mlk_block *b, uint64_t word, int from_reachable);
/* After the first flood: the sites whose blocks are held at a fixed
 * offset.  Returns how many. */
int64_t mlk_headers_learn(struct mlk_headers *h, const struct mlk_block *blocks, int64_t n);
/* The header offset learned for b's site, or 0. */
uint64_t mlk_headers_offset(const struct mlk_headers *h, const struct mlk_block *b);
/* b was reached through its site's header: counted for the report. */
void mlk_headers_count(struct mlk_headers *h, const struct mlk_block *b);
/* The sites that held blocks so: (return address, offset, blocks, bytes)
 * each, at most cap of them in out; returns how many there are. */
int64_t mlk_headers_list(const struct mlk_headers *h, int64_t *out, int64_t cap);

#endif
