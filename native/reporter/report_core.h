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

/* A key's text is a run of line ids; line l is the bytes arena[line_off[l]
 * .. line_off[l + 1]), ending in a newline.  key_first[k] says where key k's
 * run is: at pool[key_first[k] .. + key_lines[k]) (stored: a key with a
 * frame Python named for this key alone -- merged Python frames, a
 * symbolization cut short); MLK_RC_DERIVED: made from the key's own words
 * when read -- each frame token's line id (token_line), our own frames'
 * (-1) left out -- which is what a stored run of such a key would hold, so
 * a key's frames are not kept twice (docs/performance.rst); MLK_RC_NO_TEXT:
 * none yet. */
#define MLK_RC_NO_TEXT (-1)
#define MLK_RC_DERIVED (-2)
#define MLK_RC_LINES_MAX 4096 /* frames of a key at most (stack_keys.c KEY_WORDS_MAX) */

/* What derived runs are made from: the key table (stack_keys.c struct
 * mlk_rc_keys: kind code, then frame tokens) and each token's line id. */
struct mlk_rc_derive {
    const int32_t *words;
    const int64_t *start;
    const int32_t *len;
    int64_t nkeys;
    const int32_t *token_line;
    int64_t ntokens;
};

/* Key `key`'s line ids: a pointer into `pool`, or into buf
 * (MLK_RC_LINES_MAX entries) for a derived run; *n of them.  NULL: the key
 * has no text (or a derived run cannot be made: a frame not named). */
static inline const int32_t *mlk_rc_key_line_ids(const int32_t *pool, const int64_t *key_first,
                                                 const int32_t *key_lines, int64_t keys,
                                                 const struct mlk_rc_derive *d, int64_t key, int32_t *buf,
                                                 int32_t *n)
{
    if (key < 0 || key >= keys)
        return NULL;
    int64_t first = key_first[key];
    if (first >= 0) {
        *n = key_lines[key];
        return pool + first;
    }
    if (first != MLK_RC_DERIVED || !d || key >= d->nkeys || d->len[key] < 1 || d->len[key] > MLK_RC_LINES_MAX + 1)
        return NULL;
    const int32_t *w = d->words + d->start[key];
    int32_t got = 0;
    for (int32_t i = 1; i < d->len[key]; i++) {
        int32_t l = w[i] >= 0 && w[i] < d->ntokens ? d->token_line[w[i]] : -2;
        if (l >= 0)
            buf[got++] = l;
        else if (l != -1)
            return NULL;
    }
    *n = got;
    return buf;
}

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
    const struct mlk_rc_derive *derive; /* derived runs' source, or NULL (none derived) */
};

/* Key `key`'s line ids (mlk_rc_key_line_ids), *n of them, or NULL. */
static inline const int32_t *mlk_rc_text_of(const struct mlk_rc_texts *t, int64_t key, int32_t *buf, int32_t *n)
{
    return mlk_rc_key_line_ids(t->pool, t->key_first, t->key_lines, t->keys, t->derive, key, buf, n);
}

/* Whether key `key`, whose line ids are lines[0..n) (NULL: no text), is in
 * the stack table (see above): a derived run outlives any report. */
static inline int mlk_rc_in_table(const struct mlk_rc_texts *t, int64_t key, const int32_t *lines, int32_t n)
{
    if (!t->table || !lines || n <= 0 || (t->key_first[key] >= 0 && t->key_first[key] + n > t->permanent_pool))
        return 0;
    for (int32_t k = 0; k < n; k++)
        if (lines[k] < 0 || lines[k] >= t->permanent_lines)
            return 0;
    return 1;
}
#define KIND_TEXT_KINDS 64
#define KIND_TEXT_WIDTH 48

/* v in decimal at p, no sign, no NUL; returns its length (at most 20). */
int mlk_rc_put_count(char *p, int64_t v);

#endif
