"""The fast .eh_frame unwinder must give exactly the stacks libgcc gives."""

import pytest

from helpers import Traced, by_stack, cli, compile_program


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


@pytest.mark.parametrize("flags", [("-O2",), ("-O0",), ("-O2", "-DMIXED_FRAMES"), ("-O2", "-DTHREADS"),
                                   ("-O2", "-DCONCURRENT"), ("-O2", "-DHANDOVERS")])
@pytest.mark.parametrize("depth", [16, 5])
def test_remembered_paths_give_every_path_exactly(tmp_path, flags, depth):
    """256 call paths that differ within their first four frames: the thread
    rests from remembering whole walks, and its remembered paths (first
    frames and stack pointer, then the words read) serve the walks.  Each
    path keeps 40 blocks of 100 + p bytes, whether its stack ends at _start
    (depth 16) or is cut off one frame above the four levels (depth 5);
    with THREADS, 40 more from a second thread that was handed the first
    one's memo (its paths are not the second thread's own) -- with
    HANDOVERS, after 65,536 threads between them took it in turn (the
    paths' 16 bits of owner come round: they are dropped); with CONCURRENT,
    360 from nine threads at once, two of them counting on the shared
    stripe."""
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
    runs = 2 if "-DTHREADS" in flags or "-DHANDOVERS" in flags else 9 if "-DCONCURRENT" in flags else 1
    assert seen == {p: (runs * 40 * (100 + p), runs * 40) for p in range(256)}


def test_rules_pushed_out_of_the_rule_cache_come_back_exact(tmp_path):
    """4,096 call sites one frame above the allocator's caller: their
    return addresses' rules meet in the rule cache (~128 pairs share a
    slot) and push each other out every round, and come back from the
    pushed-out rules' table.  Every site keeps exactly its 3 blocks, and the
    stacks are libgcc's."""
    prog = compile_program("manyrules.c", "-O2", name="manyrules")
    (tmp_path / "fast").mkdir()
    (tmp_path / "gcc").mkdir()
    fast = stacks(tmp_path / "fast", prog, "mtraceinit,unwind=fast", ["done"])
    slow = stacks(tmp_path / "gcc", prog, "mtraceinit,unwind=libgcc", ["done"])
    assert fast == slow
    seen = {}
    for key, value in fast.items():
        names = [f for f, _, _ in key]
        if names[:1] != ["grab"]:
            continue
        assert names[1].startswith("site_") and names[2] == "main", names
        site = int(names[1][5:], 16)
        assert site not in seen, names
        seen[site] = value
    assert seen == {s: (3 * (16 + (s & 63)), 3) for s in range(4096)}


def cfa_program_bytes(prog, function):
    """The length of the CFA program of `function`'s FDE in prog's .eh_frame."""
    from elftools.elf.elffile import ELFFile
    with open(prog, "rb") as f:
        elf = ELFFile(f)
        address = elf.get_section_by_name(".symtab").get_symbol_by_name(function)[0]["st_value"]
        for entry in elf.get_dwarf_info().EH_CFI_entries():
            header = getattr(entry, "header", None)
            if header is not None and "initial_location" in header and \
                    header["initial_location"] <= address < header["initial_location"] + header["address_range"]:
                return header["length"]
    raise AssertionError(f"no FDE for {function}")


def test_rules_of_a_long_cfa_program_come_from_its_marks(tmp_path):
    """One function with a 6 KB CFA program (tests/programs/longcfa.c): 512
    call sites, each pushing two stack arguments, so each return address
    has a rule of its own.  The unwinder runs such a program to its end
    once, leaving marks, and works each later rule out from the last mark
    below it (native/hook/unwind_cfi.c); the sites are asked in a shuffled
    order.  Every site's blocks are under big and main (a rule worked out
    wrong breaks its site's stack off there: the report groups stacks by
    line, and the sites share one), to the byte, and the stacks are
    libgcc's."""
    prog = compile_program("longcfa.c", "-O2", name="longcfa")
    assert cfa_program_bytes(prog, "big") >= 4096  # (long enough to be marked: MARKED_MIN_BYTES)
    (tmp_path / "fast").mkdir()
    (tmp_path / "gcc").mkdir()
    fast = stacks(tmp_path / "fast", prog, "mtraceinit,unwind=fast", ["done"])
    slow = stacks(tmp_path / "gcc", prog, "mtraceinit,unwind=libgcc", ["done"])
    assert fast == slow
    # (grab, an allocation wrapper, is folded into its caller by the report)
    under_big = {key: value for key, value in fast.items() if key and key[0][0] in ("grab", "big")}
    assert len(under_big) == 1, list(under_big)[:3]
    (key, value), = under_big.items()
    assert [f for f, _, _ in key][:2] == ["big", "main"], key
    assert value == (sum(3 * (16 + i) for i in range(512)), 3 * 512)


NO_TABLES = ("-O2", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables")


def paths_of(report):
    """X_path -> (frames below leaf_alloc as names, bytes, blocks)."""
    got = {}
    for key, (size, blocks) in by_stack(report).items():
        names = [function for function, _, _ in key]
        if names and names[0] == "leaf_alloc":
            path = names[2] if len(names) > 2 else "?"
            assert path not in got, names
            got[path] = (names, size, blocks)
    return got


def test_frame_pointers_followed_through_code_without_unwind_tables(tmp_path):
    """Code built without unwind tables but with frame pointers (most of
    Chromium): the walk follows the chain there -- in the main thread, in
    threads with the default stack, a small one and a stack the program
    mapped itself -- back into code with tables, to _start and clone3; each
    path exact in bytes and blocks, and the report says how many frames
    the chain gave.  libgcc, which knows tables only, stops at the first
    frame."""
    prog = compile_program("fpchain.c", *NO_TABLES, "-fno-omit-frame-pointer", name="fpchain")
    t = Traced([prog], tmp_path, config="mtraceinit")
    report = t.reports_at("done")[0]
    assert t.finish() == 0, t.stderr
    got = paths_of(report)
    top = ["leaf_alloc", "shared_middle"]
    in_thread = ["run", "start_thread", "clone3"]
    assert got == {
        "main_path": (top + ["main_path", "main", "__libc_start_call_main", "__libc_start_main_impl",
                             "_start"], 1000, 10),
        "default_path": (top + ["default_path"] + in_thread, 4000, 20),
        "small_path": (top + ["small_path"] + in_thread, 9000, 30),
        "given_path": (top + ["given_path"] + in_thread, 16000, 40),
    }
    # 3 chain frames for the main thread's path (shared_middle, main_path,
    # main, then __libc_start_call_main: 4), 4 for each thread's; at least
    # those (thread creation's own stacks pass through the program too).
    said = report.header["frame-pointers"]
    frames, stacks = int(said.split()[0]), int(said.split()[3])
    assert stacks >= 4 and frames >= 4 + 3 * 4, said
    assert "stacks-ended-without-tables" not in report.header  # every chain checked out

    (tmp_path / "gcc").mkdir()
    t = Traced([prog], tmp_path / "gcc", config="mtraceinit,unwind=libgcc")
    report = t.reports_at("done")[0]
    assert t.finish() == 0, t.stderr
    assert {names[0]: (b, k) for names, b, k in paths_of(report).values()} == {"leaf_alloc": (30000, 100)}
    assert "frame-pointers" not in report.header


def test_a_chain_that_does_not_check_out_ends_the_walk(tmp_path):
    """The same code without frame pointers: rbp is any register there, so
    the chain is not believed -- the walk ends at the first frame, the
    program runs as it would, every block is counted."""
    prog = compile_program("fpchain.c", *NO_TABLES, "-fomit-frame-pointer", name="fpchain-nofp")
    t = Traced([prog], tmp_path, config="mtraceinit")
    report = t.reports_at("done")[0]
    assert t.finish() == 0, t.stderr
    sites = {key[0][0]: v for key, v in by_stack(report).items() if key and key[0][0] == "leaf_alloc"}
    assert sites == {"leaf_alloc": (30000, 100)}
    # and the report says those stacks lack their callers
    ended = report.header["stacks-ended-without-tables"]
    assert int(ended.split()[0]) >= 1 and ended.endswith("their outer callers are missing"), ended
    text = cli("report", tmp_path).stdout
    assert "note: stacks cut short: " in text


def test_frame_pointers_followed_in_threads_made_before_an_attach(tmp_path):
    """A thread that existed before `libmemleak attach` was never seen
    starting, so its stack's extent is looked up in the maps, once, when a
    walk first needs the chain: its path through code without tables is
    whole, as the main thread's."""
    from test_attach import attached_between, detach_and_let_finish
    prog = compile_program("fpchain.c", *NO_TABLES, "-fno-omit-frame-pointer", name="fpchain")
    with attached_between([prog, "first"], tmp_path, "checkpoint ready\n", "checkpoint done\n") as (p, out, report):
        assert out.stderr == ""
        top = ["leaf_alloc", "shared_middle"]
        assert paths_of(report) == {
            "main_path": (top + ["main_path", "made_before_attach", "main", "__libc_start_call_main",
                                 "__libc_start_main_impl", "_start"], 1000, 10),
            "default_path": (top + ["default_path", "run", "run_when_told", "start_thread", "clone3"],
                             4000, 20),
        }
        assert "stacks-ended-without-tables" not in report.header
        detach_and_let_finish(p, tmp_path)
