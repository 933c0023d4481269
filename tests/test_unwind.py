"""The fast .eh_frame unwinder must give exactly the stacks libgcc gives."""

import pytest

from helpers import Traced, by_stack, compile_program


def stacks(workdir, prog, config, checkpoints):
    t = Traced([prog], workdir, config=config)
    report = t.reports_at(*checkpoints)[0]
    assert t.finish() == 0, t.stderr
    return by_stack(report)


@pytest.mark.parametrize("source, flags, checkpoints", [
    ("allocators.c", ("-O2",), ["allocated", "changed"]),
    ("allocators.c", ("-O0",), ["allocated", "changed"]),
    ("cxx.cc", ("-O2",), ["allocated", "freed"]),
    ("threads.c", ("-O2",), ["joined"]),
    ("paths.c", ("-O2",), ["done"]),
    ("paths.c", ("-O0",), ["done"]),
    ("paths.c", ("-O2", "-DMIXED_FRAMES"), ["done"]),
    ("bigframe.c", ("-O2",), ["done"]),
    ("manypaths.c", ("-O2",), ["done"]),
    ("manypaths.c", ("-O2", "-DMIXED_FRAMES"), ["done"]),
    ("keyedpaths.c", ("-O2",), ["done"]),
    ("keyedpaths.c", ("-O2", "-DMIXED_FRAMES"), ["done"]),
])
def test_fast_unwinder_matches_libgcc(tmp_path, source, flags, checkpoints):
    prog = compile_program(source, *flags, name=f"{source.split('.')[0]}{flags[0]}")
    (tmp_path / "fast").mkdir()
    (tmp_path / "gcc").mkdir()
    fast = stacks(tmp_path / "fast", prog, "mtraceinit,unwind=fast", checkpoints)
    slow = stacks(tmp_path / "gcc", prog, "mtraceinit,unwind=libgcc", checkpoints)
    assert fast == slow
    assert len(fast) >= 2
    deepest = max(len(k) for k in fast)
    assert deepest >= 4  # really walked through libc to _start / clone


@pytest.mark.parametrize("flags", [("-O2",), ("-O0",), ("-O2", "-DMIXED_FRAMES")])
def test_remembered_walks_give_every_path_exactly(tmp_path, flags):
    """Thirty call paths taken in turn through one chain of wrappers, in the
    main thread and in five threads (three one after another, two at once):
    each path keeps its exact blocks, whatever walk the unwinder remembered.
    Without frame pointers, with them (every CFA from rbp), and mixed."""
    prog = compile_program("paths.c", *flags, name="paths" + "".join(flags))
    got = {}
    for key, (size, blocks) in stacks(tmp_path, prog, "mtraceinit,unwind=fast", ["done"]).items():
        names = [function for function, _, _ in key]
        callers = [n for n in names if n and n.startswith("path_caller")]
        if not callers:
            continue
        assert names.index(callers[0]) == 3, names  # wrap3, wrap2, wrap1, then the caller
        site = (int(callers[0][-1]), names.count("path_descend") - 1, "main" if "main" in names else "thread")
        b, k = got.get(site, (0, 0))
        got[site] = (b + size, k + blocks)
    # 6300 rounds: each (caller, depth) keeps 30 blocks per run; threads ran 5 times
    expected = {}
    for which in range(6):
        for depth in range(5):
            expected[(which, depth, "main")] = (30 * (100 + which), 30)
            expected[(which, depth, "thread")] = (150 * (100 + which), 150)
    assert got == expected


@pytest.mark.parametrize("flags", [("-O2",), ("-O0",), ("-O2", "-DMIXED_FRAMES")])
@pytest.mark.parametrize("depth", [16, 8])
def test_walks_by_rules_give_every_path_exactly(tmp_path, flags, depth):
    """256 call paths, more than the remembered whole walks hold: the thread
    rests from remembering and walks by the rules, with windows of trying
    again.  Each path keeps 40 blocks of 100 + p bytes; at depth 8 the
    outermost level is cut off, so paths p and p + 128 share a stack."""
    prog = compile_program("manypaths.c", *flags, name="manypaths" + "".join(flags))
    got = stacks(tmp_path, prog, f"mtraceinit,unwind=fast,depth={depth}", ["done"])
    paths = {key: v for key, v in got.items() if key and key[0][0] == "leaf"}
    levels = min(8, depth - 1)
    seen = {}
    for key, value in paths.items():
        names = [f for f, _, _ in key[1:1 + levels]]
        assert [n[:-2] for n in names] == [f"level{k}" for k in range(levels)], key
        seen[sum(int(n[-1]) << k for k, n in enumerate(names))] = value
    if depth == 16:
        assert seen == {p: (40 * (100 + p), 40) for p in range(256)}
    else:  # the outermost level is cut off: p and p + 128 share a stack
        assert seen == {p: (40 * (100 + p) + 40 * (228 + p), 80) for p in range(128)}


@pytest.mark.parametrize("flags", [("-O2",), ("-O0",), ("-O2", "-DMIXED_FRAMES"), ("-O2", "-DTHREADS")])
@pytest.mark.parametrize("depth", [16, 5])
def test_remembered_paths_give_every_path_exactly(tmp_path, flags, depth):
    """256 call paths that differ within their first four frames: the thread
    rests from remembering whole walks, and its remembered paths (first
    frames and stack pointer, then the words read) serve the walks.  Each
    path keeps 40 blocks of 100 + p bytes, whether its stack ends at _start
    (depth 16) or is cut off one frame above the four levels (depth 5);
    with THREADS, 40 more from a second thread that was handed the first
    one's paths."""
    prog = compile_program("keyedpaths.c", *flags, name="keyedpaths" + "".join(flags))
    got = stacks(tmp_path, prog, f"mtraceinit,unwind=fast,depth={depth}", ["done"])
    seen = {}
    for key, value in got.items():
        names = [f for f, _, _ in key]
        if not names or not (names[0] or "").startswith("level0_"):
            continue
        assert [n[:-2] for n in names[:4]] == ["level0", "level1", "level2", "level3"], key
        assert names[4] == "descend" and (depth != 5 or len(names) == 5), key
        path = sum(int(n[-1]) << (2 * level) for level, n in enumerate(names[:4]))
        assert path not in seen, key
        seen[path] = value
    runs = 2 if "-DTHREADS" in flags else 1
    assert seen == {p: (runs * 40 * (100 + p), runs * 40) for p in range(256)}
