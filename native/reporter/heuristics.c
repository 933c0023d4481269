/* valgrind memcheck's leak-check heuristics (--leak-check-heuristics, all
 * four on by default there, and here): interior pointers that C++ and
 * some C libraries hold on purpose, which make a block reachable instead of
 * possibly lost.  An interior pointer p into block b counts as pointing to
 * b's start when
 *
 *   stdstring            p == b + 24, b's second word (capacity) is b's
 *                        size - 25 and its first (length) at most that:
 *                        a copy-on-write std::string's characters;
 *   length64             p == b + 8 and b's first word is b's size - 8: a
 *                        length in front of the data (sqlite3's allocator);
 *   newarray             p == b + 8 and b's first word n > 0 divides b's
 *                        size - 8: new[] of elements with a destructor;
 *   multipleinheritance  the word at p and b's first word both point to
 *                        vtables -- tables in a readable file mapping whose
 *                        first 21 words hold, among null entries, two
 *                        pointers into executable file mappings before
 *                        anything else: a pointer to a secondary base.
 *
 * The rules are memcheck's (mc_leakcheck.c), read from its source; this is
 * our own code.  The words are read from the stopped process; a small
 * cache keeps each block's first words and each address's vtable verdict,
 * as a heap full of interior pointers asks about the same ones often. */
#include <stdlib.h>
#include <string.h>

#include "heuristics.h"
#include "world.h"

#define VTABLE_WORDS 21
#define CACHE 4096
#define PAGE 4096ull

struct head_entry {
    int64_t block_plus1;
    uint64_t word[3];
};

struct vtable_entry {
    uint64_t addr_plus1;
    int verdict;
};

struct mlk_heuristics {
    int pid;
    unsigned set;
    const struct mlk_file_map *maps; /* sorted, the process's file mappings */
    int nmaps;
    struct head_entry heads[CACHE];
    struct vtable_entry vtables[CACHE];
};

struct mlk_heuristics *mlk_heuristics_new(int pid, unsigned set, const struct mlk_file_map *maps,
                                          int nmaps)
{
    struct mlk_heuristics *h = calloc(1, sizeof *h);
    if (h) {
        h->pid = pid;
        h->set = set;
        h->maps = maps;
        h->nmaps = nmaps;
    }
    return h;
}

void mlk_heuristics_free(struct mlk_heuristics *h) { free(h); }

static const struct mlk_file_map *file_map_of(const struct mlk_heuristics *h, uint64_t addr)
{
    int lo = 0, hi = h->nmaps;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (h->maps[mid].hi <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < h->nmaps && h->maps[lo].lo <= addr ? &h->maps[lo] : NULL;
}

static const uint64_t *head_of(struct mlk_heuristics *h, int64_t index, const struct mlk_block *b)
{
    struct head_entry *e = &h->heads[(uint64_t)index % CACHE];
    if (e->block_plus1 != index + 1) {
        memset(e->word, 0, sizeof e->word);
        uint64_t len = b->size < sizeof e->word ? b->size & ~7ull : sizeof e->word;
        mlk_read_mem(h->pid, b->start, e->word, (size_t)len);
        e->block_plus1 = index + 1;
    }
    return e->word;
}

static int is_vtable(struct mlk_heuristics *h, uint64_t addr)
{
    if (addr < PAGE || (addr & 7))
        return 0;
    struct vtable_entry *e = &h->vtables[(addr >> 3) % CACHE];
    if (e->addr_plus1 == addr + 1)
        return e->verdict;
    int verdict = 0;
    const struct mlk_file_map *m = file_map_of(h, addr);
    if (m && m->readable) {
        uint64_t words[VTABLE_WORDS] = {0};
        uint64_t last = addr + (VTABLE_WORDS - 1) * 8;
        if (last > m->hi - 8)
            last = m->hi - 8;
        size_t n = last >= addr ? (size_t)((last - addr) / 8 + 1) : 0;
        mlk_read_mem(h->pid, addr, words, n * 8);
        int functions = 0;
        for (size_t i = 0; i < n && functions < 2; i++) {
            if (!words[i])
                continue; /* vtables may hold null entries */
            const struct mlk_file_map *f = file_map_of(h, words[i]);
            if (!f || !f->executable)
                break;    /* not a pointer to code: not a vtable */
            functions++;
        }
        verdict = functions == 2;
    }
    e->addr_plus1 = addr + 1;
    e->verdict = verdict;
    return verdict;
}

int mlk_heuristic_reaches(struct mlk_heuristics *h, uint64_t p, int64_t index, const struct mlk_block *b)
{
    if (!h || !h->set)
        return MLK_HEUR_NONE;
    const uint64_t *w = head_of(h, index, b);
    if ((h->set & (1u << MLK_HEUR_STDSTRING)) && p == b->start + 24 && b->size >= 25 &&
        w[1] + 25 == b->size && w[0] <= w[1])
        return MLK_HEUR_STDSTRING;
    if ((h->set & (1u << MLK_HEUR_LENGTH64)) && p == b->start + 8 && b->size >= 8 && w[0] > 0 &&
        b->size - 8 == w[0])
        return MLK_HEUR_LENGTH64;
    if ((h->set & (1u << MLK_HEUR_NEWARRAY)) && p == b->start + 8 && b->size >= 8 && w[0] > 0 &&
        (b->size - 8) % w[0] == 0)
        return MLK_HEUR_NEWARRAY;
    /* The block's own first word first: cached, and for all but C++ objects
     * not a vtable -- the word at p would cost a read of the process. */
    if ((h->set & (1u << MLK_HEUR_MULTIPLE_INHERITANCE)) && !(p & 7) && p + 8 <= b->start + b->size &&
        !(w[0] & 7) && w[0] >= PAGE && is_vtable(h, w[0])) {
        uint64_t inner = 0;
        if (p - b->start + 8 <= sizeof(uint64_t) * 3)
            inner = w[(p - b->start) / 8];
        else
            mlk_read_mem(h->pid, p, &inner, 8);
        if (!(inner & 7) && inner >= PAGE && is_vtable(h, inner))
            return MLK_HEUR_MULTIPLE_INHERITANCE;
    }
    return MLK_HEUR_NONE;
}
