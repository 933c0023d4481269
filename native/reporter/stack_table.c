/* A report's stack table (docs/memlog.md, "Stack tables"): each call stack
 * of a process written once, not in every report that names it, and the
 * frames stacks share written once too.
 *
 * The stacks are a tree grown from the outermost frame inward, as
 * heaptrack's trace tree: a node is one frame (a line id of the text
 * store: the lines of one return address) called from its parent node.
 * Two stacks that share their callers share those nodes, so a stack new to
 * the process costs the frames in which it differs -- a few nodes for a
 * deep program whose stacks differ near the allocation -- where writing it
 * out costs all of them (3.3 KB for 48 frames).  An entry names its stack's
 * innermost node (stack=N); the report defines, after its entries, every
 * node and frame it names that no earlier report of the same table did.
 *
 * The tree lives in arrays the Python reporter owns (report_core.py's
 * StackTable) and grows when a call says it needs room.  Which nodes and
 * frames a report must define is told by marks: each is marked with the
 * write attempt that defined it, and those marked before the table's
 * first attempt (`scope_first`) count as undefined -- a new table (a new
 * reporter, a report in another directory, a write that failed) is begun
 * by moving scope_first, never by clearing anything. */

#include <stdint.h>
#include <string.h>

#include "report_core.h"

#define EXPORT __attribute__((visibility("default")))

/* The deepest chain of nodes one entry may need defined: a stack's
 * frames, inlined ones counted once (its line ids); a key's lines are
 * bounded by the configured depth and Python's frames (a few hundred). */
#define CHAIN_MAX 4096

struct mlk_rc_table {
    int64_t *parent;         /* node -> its caller's node (0: none: outermost) */
    int32_t *line;           /* node -> the line id of its frame */
    int32_t *mark;           /* node -> the attempt that defined it (0: never) */
    int64_t nodes;           /* node ids in use: 1 .. nodes - 1 */
    int64_t room;            /* entries of parent, line and mark */
    int64_t *slots;          /* open addressing on (parent, line): node id, 0 empty */
    int64_t nslots;          /* a power of two, at least twice `nodes` */
    int32_t *line_mark;      /* line id -> the attempt that defined it (0: never) */
    int64_t nlines;          /* entries of line_mark */
    int64_t permanent_lines; /* line ids from here on are this report's only */
    int32_t stamp;           /* this attempt */
    int32_t scope_first;     /* the table's first attempt */
};

static uint64_t slot_hash(int64_t parent, int32_t line)
{
    uint64_t h = (uint64_t)parent * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uint32_t)line * 0xC2B2AE3D27D4EB4Full;
    return h ^ h >> 29;
}

/* The slot of (parent, line): the node's, or the empty one it would take. */
static int64_t *slot_of(const struct mlk_rc_table *t, int64_t parent, int32_t line)
{
    uint64_t mask = (uint64_t)t->nslots - 1;
    for (uint64_t i = slot_hash(parent, line) & mask;; i = (i + 1) & mask) {
        int64_t node = t->slots[i];
        if (!node || (t->parent[node] == parent && t->line[node] == line))
            return &t->slots[i];
    }
}

/* Put every node back in fresh (all-zero) slots: after Python gave a
 * larger slot array. */
EXPORT void mlk_rc_table_rehash(struct mlk_rc_table *t)
{
    for (int64_t node = 1; node < t->nodes; node++)
        *slot_of(t, t->parent[node], t->line[node]) = node;
}

/* The key's lines, or NULL when it has none to give a node: no text yet,
 * no frames, or a line of this report only (a frame whose symbolization was
 * cut short: the key is written inline, and tried again next time). */
static const int32_t *key_lines(const struct mlk_rc_table *t, const struct mlk_rc_texts *x, int64_t key,
                                int32_t *count)
{
    if (key < 0 || key >= x->keys || x->key_first[key] < 0 || x->key_lines[key] <= 0 ||
        x->key_lines[key] > CHAIN_MAX)
        return NULL;
    const int32_t *lines = x->pool + x->key_first[key];
    for (int32_t k = 0; k < x->key_lines[key]; k++)
        if (lines[k] < 0 || lines[k] >= t->permanent_lines || lines[k] >= t->nlines)
            return NULL;
    *count = x->key_lines[key];
    return lines;
}

/* Give the keys of rows[from..n) that have none their node (key_node[key],
 * 0: none), making the nodes their stacks need.  Returns the first row not
 * done: n when all are, less when the table needs more room (the caller
 * grows it -- more nodes, or twice the slots and a rehash -- and calls
 * again from there). */
EXPORT int64_t mlk_rc_table_nodes(struct mlk_rc_table *t, const struct mlk_rc_row *rows, int64_t from,
                                  int64_t n, const struct mlk_rc_texts *x, int64_t *key_node)
{
    for (int64_t r = from; r < n; r++) {
        int64_t key = rows[r].key;
        int32_t count;
        const int32_t *lines = key < 0 || key >= x->keys || key_node[key] ? NULL : key_lines(t, x, key, &count);
        if (!lines)
            continue;
        if (t->nodes + count > t->room || 2 * (t->nodes + count) > t->nslots)
            return r;
        int64_t node = 0;
        for (int32_t k = count - 1; k >= 0; k--) { /* outermost first: callers are shared */
            int64_t *slot = slot_of(t, node, lines[k]);
            if (!*slot) {
                int64_t made = t->nodes++;
                t->parent[made] = node;
                t->line[made] = lines[k];
                t->mark[made] = 0;
                *slot = made;
            }
            node = *slot;
        }
        key_node[key] = node;
    }
    return n;
}

static int defined(const struct mlk_rc_table *t, int32_t mark)
{
    return mark >= t->scope_first;
}

/* "@s NODE LINE PARENT\n" and, if the line is new to the table, "@f LINE\n"
 * and its frame lines before it. */
static char *put_node(struct mlk_rc_table *t, const struct mlk_rc_texts *x, int64_t node, char *p)
{
    int32_t line = t->line[node];
    if (!defined(t, t->line_mark[line])) {
        memcpy(p, "@f ", 3);
        p += 3;
        p += mlk_rc_put_count(p, line);
        *p++ = '\n';
        int64_t size = x->line_off[line + 1] - x->line_off[line];
        memcpy(p, x->arena + x->line_off[line], (size_t)size);
        p += size;
        t->line_mark[line] = t->stamp;
    }
    memcpy(p, "@s ", 3);
    p += 3;
    p += mlk_rc_put_count(p, node);
    *p++ = ' ';
    p += mlk_rc_put_count(p, line);
    *p++ = ' ';
    p += mlk_rc_put_count(p, t->parent[node]);
    *p++ = '\n';
    t->mark[node] = t->stamp;
    return p;
}

/* The definitions the entries rows[from..to) need that the table does not
 * have yet, outermost node first, into out[0..cap): as mlk_rc_render, stops
 * before an entry whose definitions do not fit (*next: the first row not
 * done), and returns the bytes written, or -(bytes needed) when not even
 * the first fits. */
EXPORT int64_t mlk_rc_table_render(struct mlk_rc_table *t, const struct mlk_rc_row *rows, int64_t from,
                                   int64_t to, const struct mlk_rc_texts *x, const int64_t *key_node, char *out,
                                   int64_t cap, int64_t *next)
{
    int64_t chain[CHAIN_MAX];
    int64_t len = 0, r = from;
    for (; r < to; r++) {
        int64_t key = rows[r].key;
        int64_t node = key >= 0 && key < x->keys ? key_node[key] : 0;
        int n = 0;
        int64_t need = 0;
        for (; node > 0 && node < t->nodes && !defined(t, t->mark[node]) && n < CHAIN_MAX; node = t->parent[node]) {
            chain[n++] = node;
            int32_t line = t->line[node];
            need += 3 * 21 + 4;
            if (!defined(t, t->line_mark[line]))
                need += 24 + x->line_off[line + 1] - x->line_off[line];
        }
        if (len + need > cap) {
            if (r == from)
                len = -need;
            break;
        }
        char *p = out + len;
        while (n)
            p = put_node(t, x, chain[--n], p);
        len = p - out;
    }
    *next = r;
    return len;
}
