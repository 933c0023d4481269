/* A report's stack table (docs/memlog.md, "Stack tables"): each call stack
 * of a process written once, in the first report that names it, and each
 * frame once, however many stacks share it.  Entries name their stack
 * (stack=N) instead of listing its frames: a stack is one line of frame
 * numbers (~3 bytes a frame) where it was its frames' text (~70 bytes a
 * frame), and a frame's text is written once per table.
 *
 * Stack N is key N-1 of the reporter (text_store.py's TextStore): its
 * frames are the key's line ids, and a frame is a line (the lines of one
 * return address).  Which stacks and frames a report must define is told
 * by marks: each is marked with the write attempt that defined it, and
 * those marked before the table's first attempt (`scope_first`) count as
 * undefined -- a new table (a new reporter, a report in another directory,
 * a write that failed) is begun by moving scope_first, never by clearing
 * anything. */

#include <stdint.h>
#include <string.h>

#include "report_core.h"

#define EXPORT __attribute__((visibility("default")))

struct mlk_rc_table {
    int32_t *key_mark;   /* key id -> the attempt that defined its stack (0: never) */
    int64_t nkeys;       /* entries of key_mark */
    int32_t *line_mark;  /* line id -> the attempt that defined it (0: never) */
    int64_t nlines;      /* entries of line_mark */
    int32_t stamp;       /* this attempt */
    int32_t scope_first; /* the table's first attempt */
};

/* "@f LINE\n" and its frame lines. */
static char *put_frame(const struct mlk_rc_texts *x, int32_t line, char *p)
{
    memcpy(p, "@f ", 3);
    p += 3;
    p += mlk_rc_put_count(p, line);
    *p++ = '\n';
    int64_t size = x->line_off[line + 1] - x->line_off[line];
    memcpy(p, x->arena + x->line_off[line], (size_t)size);
    return p + size;
}

/* The definitions the entries rows[from..to) need that the table does not
 * have yet -- each new frame ("@f LINE" and its lines), then each new stack
 * ("@s N 0 LINE LINE ...": its frames innermost first, called from no
 * other stack) -- into out[0..cap).  As mlk_rc_render: stops before an
 * entry whose definitions do not fit (*next: the first row not done), and
 * returns the bytes written, or -(bytes needed) when not even the first
 * fits. */
EXPORT int64_t mlk_rc_table_render(struct mlk_rc_table *t, const struct mlk_rc_row *rows, int64_t from,
                                   int64_t to, const struct mlk_rc_texts *x, char *out, int64_t cap, int64_t *next)
{
    int64_t len = 0, r = from;
    int32_t buf[MLK_RC_LINES_MAX];
    for (; r < to; r++) {
        int64_t key = rows[r].key;
        int32_t count = 0;
        const int32_t *lines = mlk_rc_text_of(x, key, buf, &count);
        if (!mlk_rc_in_table(x, key, lines, count) || key >= t->nkeys || t->key_mark[key] >= t->scope_first)
            continue;
        int64_t need = 3 * 21 + 8 + 21 * (int64_t)count;
        for (int32_t k = 0; k < count; k++)
            if (lines[k] >= t->nlines || t->line_mark[lines[k]] < t->scope_first)
                need += 24 + x->line_off[lines[k] + 1] - x->line_off[lines[k]];
        if (len + need > cap) {
            if (r == from)
                len = -need;
            break;
        }
        char *p = out + len;
        for (int32_t k = 0; k < count; k++)
            if (lines[k] < t->nlines && t->line_mark[lines[k]] < t->scope_first) {
                p = put_frame(x, lines[k], p);
                t->line_mark[lines[k]] = t->stamp;
            }
        memcpy(p, "@s ", 3);
        p += 3;
        p += mlk_rc_put_count(p, key + 1);
        memcpy(p, " 0", 2);
        p += 2;
        for (int32_t k = 0; k < count; k++) {
            *p++ = ' ';
            p += mlk_rc_put_count(p, lines[k]);
        }
        *p++ = '\n';
        t->key_mark[key] = t->stamp;
        len = p - out;
    }
    *next = r;
    return len;
}
