/* Blocks of known reachability, for the scan (tests/test_scan.py), each
 * from its own function so that each category lands on its own stack:
 *   site_global     48 B  still reachable (a global points at it)
 *   site_child      24 B  still reachable (only the global's block points at it)
 *   site_stack      40 B  still reachable (a local of main)
 *   site_tls        56 B  still reachable (a __thread variable)
 *   site_interior  200 B  possibly lost   (a global points 8 bytes into it)
 *   site_lost      100 B  definitely lost, pointing to
 *   site_indirect   32 B  indirectly lost, pointing to
 *   site_indirect2  16 B  indirectly lost
 *   site_cycle   2 x 64 B a cycle nothing points to: one definitely lost
 *                         (the lower address leads), one indirectly lost
 *   site_forgotten  8 x 72 B  definitely lost (pointers overwritten)
 *   site_tree_root  80 B  definitely lost, the root of a binary tree of
 *   site_tree_node 6 x 40 B  indirectly lost
 *   site_ptree_root 88 B  possibly lost (a global points into it), the
 *                         root of site_ptree_node 2 x 40 B, possibly lost
 *                         too (reached only through a possibly lost block)
 *   site_reach_interior 56 B possibly lost (site_global's block points
 *                         16 bytes into it: a reachable block's interior pointer)
 *   site_lost2      32 B  definitely lost, pointing 8 bytes into
 *   site_indirect_interior 48 B  indirectly lost (from a lost block, interior
 *                         pointers count too)
 * Stops at checkpoint "built" (a scan now), then exits. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"

#define SITE(name) __attribute__((noinline)) void *name(size_t n) { void *p = malloc(n); memset(p, 0, n); return p; }
SITE(site_global) SITE(site_child) SITE(site_stack) SITE(site_tls) SITE(site_interior)
SITE(site_lost) SITE(site_indirect) SITE(site_indirect2) SITE(site_cycle) SITE(site_forgotten)
SITE(site_tree_root) SITE(site_tree_node) SITE(site_ptree_root) SITE(site_ptree_node)
SITE(site_reach_interior) SITE(site_lost2) SITE(site_indirect_interior)

void **g_reach;
char *g_interior;
char *g_ptree; /* points 16 bytes into the root of a tree */
__thread void *t_block;
void *volatile g_sink;

__attribute__((noinline)) static void make_lost(void)
{
    void **lost = site_lost(100);
    void **ind = site_indirect(32);
    ind[0] = site_indirect2(16);
    lost[3] = ind;
    void **a = site_cycle(64), **b = site_cycle(64);
    a[0] = b;
    b[0] = a;
    for (int i = 0; i < 8; i++)
        g_sink = site_forgotten(72);
    g_sink = NULL;
    void **root = site_tree_root(80);
    for (int i = 0; i < 2; i++) {
        void **node = site_tree_node(40);
        root[i] = node;
        node[0] = site_tree_node(40);
        node[1] = site_tree_node(40);
    }
    memset(&root, 0, sizeof root);
    void **proot = site_ptree_root(88);
    proot[0] = site_ptree_node(40);
    proot[1] = site_ptree_node(40);
    g_ptree = (char *)proot + 16;
    memset(&proot, 0, sizeof proot);
    g_reach[4] = (char *)site_reach_interior(56) + 16;
    void **lost2 = site_lost2(32);
    lost2[1] = (char *)site_indirect_interior(48) + 8;
    memset(&lost2, 0, sizeof lost2);
    /* nothing of these is left in registers or this frame once it returns;
     * the frame itself lies below the stack pointer then */
    memset(&lost, 0, sizeof lost);
    memset(&ind, 0, sizeof ind);
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
}

__attribute__((noinline)) static void wipe_stack(void)
{
    volatile char junk[4096];
    memset((char *)junk, 0, sizeof junk);
}

int main(void)
{
    g_reach = site_global(48);
    g_reach[2] = site_child(24);
    void *volatile on_stack = site_stack(40);
    t_block = site_tls(56);
    g_interior = (char *)site_interior(200) + 8;
    make_lost();
    wipe_stack();
    checkpoint("built");
    (void)on_stack;
    return 0;
}
