"""Pool allocators in the way (#64 item 17): a program's own pools hand out
blocks from memory they got from malloc (or mmap) in bulk, so the tracer
blames each refill on whichever call happened to need it -- HAProxy's
pools, GLib's slices, CPython's pymalloc arenas -- and the blocks that
leak are never seen one by one.  Most such pools have a switch that sends
every allocation to malloc; where a stack's innermost frames are a known
pool's, `report` names the pool and its switch (docs/allocators.md has the
table)."""

from dataclasses import dataclass

from libmemleak.analysis.names import short_name

INNERMOST = 8  # frames of a stack looked at for a pool's functions


@dataclass(frozen=True)
class Pool:
    name: str
    functions: frozenset
    switch: str


POOLS = (
    # (not _PyObject_ArenaMmap itself: the interpreter maps its frame stack's
    # chunks through it too -- _PyObject_VirtualAlloc -- and those are no pool;
    # an arena's mmap has new_arena right after it)
    Pool("CPython's pymalloc", frozenset(("pymalloc_alloc", "allocate_from_new_pool", "new_arena",
                                          "_PyObject_Malloc")),
         "run it with PYTHONMALLOC=malloc"),
    Pool("GLib's slice allocator", frozenset(("g_slice_alloc", "g_slice_alloc0", "g_slice_copy",
                                              "magazine_cache_pop_magazine", "slab_allocator_alloc_chunk")),
         "run it with G_SLICE=always-malloc"),
    Pool("HAProxy's pools", frozenset(("pool_alloc", "__pool_alloc", "pool_refill_alloc", "pool_alloc_nocache",
                                       "pool_get_from_os", "pool_get_from_os_noinc")),
         "run haproxy with -dMno-merge,no-cache (HAProxy 2.6 and later)"),
    Pool("APR's pools", frozenset(("apr_palloc", "apr_pcalloc", "apr_pool_create_ex", "allocator_alloc")),
         "build APR with --enable-pool-debug"),
    Pool("libstdc++'s pool allocators", frozenset(("__gnu_cxx::__pool_alloc::allocate",
                                                   "__gnu_cxx::__pool_alloc_base::_M_refill",
                                                   "__gnu_cxx::__mt_alloc::allocate")),
         "run it with GLIBCXX_FORCE_NEW=1"),
)


def pool_of(frames):
    """The Pool whose functions are among a stack's innermost frames, or None."""
    names = {short_name(f.function) for f in frames[:INNERMOST] if f.function}
    return next((p for p in POOLS if p.functions & names), None)


def notes(trends):
    """A line per known pool that stacks with live bytes allocate through."""
    seen = {}
    for t in trends:
        if t.live_bytes > 0 and not t.resource:
            pool = pool_of(t.frames)
            if pool:
                stacks, live = seen.get(pool, (0, 0))
                seen[pool] = (stacks + 1, live + t.live_bytes)
    return [f"pool in the way: {stacks:,} stack{'s' if stacks != 1 else ''} ({live:,} bytes live) allocate "
            f"through {pool.name}: a block is blamed on whichever call refilled the pool, and what leaks from "
            f"it is not seen block by block; {pool.switch} for each allocation's own stack"
            for pool, (stacks, live) in seen.items()]
