/* A report's entries (rows) and the frame texts of the reporter's stack
 * keys, as report_core.c merges and writes entries and stack_table.c
 * writes a report's stack table (libmemleak/daemon/report_core.py owns
 * the arrays). */
#ifndef MLK_REPORT_CORE_H
#define MLK_REPORT_CORE_H

#include <stdint.h>

/* One entry of a report: the changed stacks with one key, merged. */
struct mlk_rc_row {
    int64_t key;            /* key id (the Python resolver's) */
    int64_t pos;            /* the lowest position merged into it */
    int64_t bytes;          /* change since the previous report */
    int64_t blocks;
    int64_t live_bytes;     /* live now, over the merged positions */
    int64_t live_blocks;
    int64_t samples;        /* sampled reports: change in recorded blocks behind the
                             * estimate (what it rests on); -1 when not sampled */
    int64_t allocs;         /* allocations made since the previous report; -1 = not known */
    int64_t scan_at;        /* a scan report's: its split of the live blocks is
                             * scans[SCAN_WORDS * scan_at ...] (below); -1: none.  Apart,
                             * so that the rows of a report without a scan -- 10^6 of them
                             * for a big program's first -- are 96 bytes, not 224. */
    int64_t touched;        /* bytes of its mappings ever touched, now; -1 = not measured */
    int64_t touched_changed; /* 1: that differs from the previous report's */
    int64_t slack;          /* live slack now, over the merged positions; -1 = not measured */
};

/* A scanned row's words: lost[8] (bytes, blocks: definitely, indirectly,
 * possibly lost, still reachable), then since[8] (blocks live since each
 * earlier scan, mlk_rc_texts.since_seq). */
#define MLK_RC_SCAN_WORDS 16

/* Where the frame text of each key is: key k's lines are the line ids
 * pool[key_first[k] .. key_first[k] + key_lines[k]); line l is the bytes
 * arena[line_off[l] .. line_off[l + 1]), ending in a newline. */
struct mlk_rc_texts {
    const char *arena;
    const int64_t *line_off;
    const int32_t *pool;
    const int64_t *key_first;
    const int32_t *key_lines;
    const int8_t *key_kind; /* MLK_KIND_* of each key: the allocator family, | CUT_KIND */
    int64_t keys;           /* entries of key_first, key_lines and key_kind */
    const int32_t *since_seq; /* the report seq of each since[] bucket (0: unused), or NULL */
    int32_t depth;          /* the configured depth: what cut= says */
    /* What an entry of each kind says of it, KIND_TEXT_WIDTH bytes a kind
     * (NUL-ended; "" for the built-in words below): " resource=fd" for the
     * resource kinds, whose names the reporter knows.  Or NULL. */
    const char *kind_text;
    /* With a stack table (stack_table.c): an entry whose key is in it says
     * stack=KEY+1, and has its frames inline only when it is one of the
     * report's first inline_rows entries.  A key is in the table when its
     * text outlives the report: stored before `permanent_pool` (the pool's
     * length when this report's temporary texts began) and of lines below
     * `permanent_lines`.  table 0: every entry with its frames, no table. */
    int32_t table;
    int64_t inline_rows;
    int64_t permanent_pool;
    int64_t permanent_lines;
    const int64_t *scans;   /* the rows' scan words (mlk_rc_row.scan_at), or NULL */
};

/* Whether key `key` is in the stack table (see above). */
static inline int mlk_rc_in_table(const struct mlk_rc_texts *t, int64_t key)
{
    if (!t->table || key < 0 || key >= t->keys || t->key_first[key] < 0 || t->key_lines[key] <= 0 ||
        t->key_first[key] + t->key_lines[key] > t->permanent_pool)
        return 0;
    const int32_t *lines = t->pool + t->key_first[key];
    for (int32_t k = 0; k < t->key_lines[key]; k++)
        if (lines[k] < 0 || lines[k] >= t->permanent_lines)
            return 0;
    return 1;
}
#define KIND_TEXT_KINDS 64
#define KIND_TEXT_WIDTH 48

/* v in decimal at p, no sign, no NUL; returns its length (at most 20). */
int mlk_rc_put_count(char *p, int64_t v);

#endif
