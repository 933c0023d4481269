"""Misuse of the allocator (#31): tests/programs/misuse.cc makes each kind
at a site function of its own, under the real library.  The reports name
each with valgrind's words, exact counts and both stacks; a program that
glibc aborts bare aborts the same under the tracer and its death report
names why; misuse=hold keeps it alive; valgrind, run on the same program,
finds the same kinds at the same sites."""

import json
import os
import re
import shutil
import subprocess

import pytest

from helpers import BARE_ENV, CLI_ENV, cli, cli_argv, compile_program, reports_of

# (kind, call, misusing site, allocating site or None) -> times
MISMATCHES = {
    ("mismatch", "delete", "site_delete_malloced", "site_malloc_for_delete"): 3,
    ("mismatch", "free", "site_free_newed", "site_new_for_free"): 2,
    ("mismatch", "delete", "site_delete_array_as_one", "site_new_array"): 1,
    ("mismatch", "delete[]", "site_delete_one_as_array", "site_new_one"): 1,
    ("size-mismatch", "delete", "site_delete_as_base", "site_new_derived"): 1,
}
SURVIVED = {
    ("double-free", "free", "site_second_free", "site_alloc_twice_freed"): 1,
    ("invalid-free", "free", "site_free_local", None): 1,
    ("invalid-free", "free", "site_free_global", None): 1,
    ("invalid-free", "free", "site_free_interior", "site_alloc_for_interior"): 2,
    ("double-free", "realloc", "site_realloc_freed", "site_alloc_realloced_freed"): 1,
}
ALIGNED = {
    ("align-mismatch", "delete", "site_delete_unaligned", "site_aligned_new"): 2,
    ("align-mismatch", "aligned-delete", "site_delete_aligned", "site_plain_new"): 1,
    ("align-mismatch", "aligned-delete", "site_delete_as_32", "site_aligned_new_64"): 1,
    ("mismatch", "aligned-delete", "site_delete_array_as_one_aligned", "site_aligned_new_array"): 1,
}


def site(frames):
    return next((f.function.split("(")[0] for f in frames if f.function and f.function.startswith("site_")),
                None)


def misuses(report):
    """(kind, call, site, allocating site) -> times of a report's misuse entries."""
    got = {}
    for m in report.misuse:
        key = (m.kind, m.call, site(m.frames), site(m.alloc_frames))
        got[key] = got.get(key, 0) + m.times
    return got


def run(tmp_path, *args, config=None):
    prog = compile_program("misuse.cc")
    options = ["--config", config] if config else []
    p = subprocess.Popen(cli_argv("run", "-q", *options, prog, *args), cwd=tmp_path, env=CLI_ENV,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=120)
    final = reports_of(str(tmp_path), "misuse", p.pid)[-1]
    return p.returncode, out, err, final


def bare(*args):
    prog = compile_program("misuse.cc")
    return subprocess.run([prog, *args], capture_output=True, text=True, env=BARE_ENV, timeout=60)


def test_mismatched_frees_and_sized_deletes_are_counted_with_both_stacks(tmp_path):
    rc, out, err, final = run(tmp_path, "mismatch")
    alone = bare("mismatch")
    assert (rc, out, err) == (alone.returncode, alone.stdout, "")  # as it runs bare
    assert final.header["reason"] == "exit"
    assert misuses(final) == MISMATCHES
    # innermost first: the misusing call's own function, no frame of the tracer before it
    assert all(m.frames[0].function.startswith("site_") for m in final.misuse), final.misuse
    assert final.header["misuse"] == "8 seen since collection started"
    sized = next(m for m in final.misuse if m.kind == "size-mismatch")
    assert (sized.size, sized.given, sized.block) == (48, 8, "new")  # a Derived deleted as a Base
    malloced = next(m for m in final.misuse if m.call == "delete" and m.block == "malloc")
    assert malloced.size == 24
    # report says them with valgrind's words; check fails on them
    text = cli("report", tmp_path)
    assert text.returncode == 0, text.stderr
    assert "allocator misuse: 8 times at 5 sites" in text.stdout
    assert ("Mismatched free() / delete / delete [] -- delete of a 24-byte block malloc'd, 3 times"
            in text.stdout)
    assert "Mismatched new/delete size value: 8 -- sized delete of 8 bytes for a 48-byte block" in text.stdout
    gate = cli("check", "--max-misuse", "0", tmp_path)
    assert gate.returncode == 1 and "8 misuses of the allocator, over --max-misuse 0" in gate.stdout
    assert cli("check", "--max-misuse", "8", tmp_path).returncode == 0


@pytest.mark.parametrize("what, kind, at, made, where", [
    ("double", "double-free", "site_second_free", "site_alloc_twice_freed", ""),
    ("invalid", "invalid-free", "site_free_local", None, "stack"),
    ("interior", "invalid-free", "site_free_interior", "site_alloc_for_interior", "interior"),
])
def test_where_glibc_aborts_bare_it_aborts_traced_and_the_death_report_names_why(tmp_path, what, kind, at, made,
                                                                                 where):
    rc, out, err, final = run(tmp_path, what)
    alone = bare(what)
    assert alone.returncode in (-6, 134) and rc in (-6, 134)  # glibc's abort, under the tracer too
    assert out == alone.stdout
    glibc_says = alone.stderr.strip().splitlines()[0]  # "free(): double free detected in tcache 2"
    assert glibc_says in err
    assert final.header["reason"] == "death"
    assert misuses(final) == {(kind, "free", at, made): 1}
    assert final.misuse[0].where == where


def test_misuse_hold_keeps_a_program_alive_that_glibc_would_abort(tmp_path):
    rc, out, err, final = run(tmp_path, "survive", config="misuse=hold")
    alone = bare("survive")
    assert alone.returncode in (-6, 134)
    assert rc == 0 and err == ""
    # the same output as the bare run, and then the rest it lives to print
    assert out.startswith(alone.stdout) and out.endswith("realloc: NULL\nend\n"), out
    assert misuses(final) == SURVIVED
    assert all(m.frames[0].function.startswith("site_") for m in final.misuse), final.misuse
    where = {site(m.frames): m.where for m in final.misuse if m.kind == "invalid-free"}
    assert where == {"site_free_local": "stack", "site_free_global": "global", "site_free_interior": "interior"}
    inside = sorted((m.offset, m.size, m.block) for m in final.misuse if m.where == "interior")
    assert inside == [(8, 100, "malloc"), (16, 100, "malloc")]  # valgrind: "8 bytes inside a block of size 100"
    assert "misuse=hold" in final.header["misuse"]
    text = cli("report", tmp_path).stdout
    assert "8 bytes inside a 100-byte block malloc'd" in text, text


WILD = {
    ("double-free", "free", "site_free_merged_again", "site_alloc_merged"): 1,
    # its pages went back to the kernel at the first free (32 MiB: past the
    # quarantine): what is left is an address no block is at
    ("invalid-free", "free", "site_free_mapped_again", None): 1,
    ("invalid-free", "free", "site_free_unmapped", None): 1,
    ("invalid-free", "delete", "site_delete_unmapped", None): 1,
    ("invalid-free", "realloc", "site_realloc_unmapped", None): 1,
}


def test_misuse_hold_survives_frees_that_would_fault_and_names_the_first_free(tmp_path):
    """#64 item 8: a free of an unmapped address (a wild pointer; a block
    whose pages were given back) faulted inside the hook reading its chunk
    header, and a second free of a block of 1,024 bytes or more (merged
    into its neighbours once freed) reached glibc, which aborted: under
    misuse=hold the program lives on, each is recorded, and a double free
    names the first free's stack (hold holds freed blocks back, as
    valgrind's freelist does)."""
    rc, out, err, final = run(tmp_path, "wild", config="misuse=hold")
    alone = bare("wild")
    # bare, glibc lets the merged block's second free pass and faults on the
    # unmapped block's header
    assert alone.returncode == -11 and alone.stdout.endswith("a 32 MiB block freed again\n"), alone
    assert (rc, err) == (0, ""), err
    assert out.startswith(alone.stdout) and out.endswith("wild: realloc: NULL\nwild: lived on\nend\n"), out
    assert misuses(final) == WILD
    merged = next(m for m in final.misuse if m.kind == "double-free")
    assert (merged.size, site(merged.freed_frames)) == (2000, "site_free_merged")
    assert {m.where for m in final.misuse if m.kind == "invalid-free"} == {"not-a-block"}
    assert " held of 20000000 (quarantine=)" in final.header["quarantine"]  # hold's own, unasked


def test_aligned_new_deleted_unaligned_or_with_another_alignment_is_named(tmp_path):
    """Aligned new's blocks keep their alignment in the trailer: an
    unaligned delete of one, an aligned delete of an unaligned new's, or
    one with another alignment, is valgrind's (3.22+) "Mismatched
    new/delete alignment"; an alignas(64) class made and deleted right is
    none of them (its sized aligned delete matches both)."""
    rc, out, err, final = run(tmp_path, "aligned")
    alone = bare("aligned")
    assert (rc, out, err) == (alone.returncode, alone.stdout, "") == (0, alone.stdout, "")
    assert "aligned: 64-aligned" in out  # its blocks are still aligned under the tracer
    assert misuses(final) == ALIGNED
    aligns = {site(m.frames): (m.align, m.given_align, m.size, m.block) for m in final.misuse
              if m.kind == "align-mismatch"}
    assert aligns == {"site_delete_unaligned": (64, 0, 100, "aligned-new"),
                      "site_delete_aligned": (0, 32, 40, "new"),
                      "site_delete_as_32": (64, 32, 200, "aligned-new")}
    text = cli("report", tmp_path).stdout
    assert ("Mismatched new/delete alignment alloc value: 64 dealloc value: default-aligned -- delete of a "
            "100-byte block made by aligned new, 2 times") in text, text
    assert "Mismatched new/delete alignment alloc value: default-aligned dealloc value: 32" in text
    assert "Mismatched new/delete alignment alloc value: 64 dealloc value: 32" in text
    doc = json.loads(cli("report", "--json", tmp_path).stdout)
    got = {(m["align"], m["given_align"]) for m in doc["processes"][0]["misuse"] if m["kind"] == "align-mismatch"}
    assert got == {(64, 0), (0, 32), (64, 32)}


def test_misuse_no_checks_nothing_and_says_so(tmp_path):
    """A quarantine asked for cannot start without the checks: every report,
    `report` and `check` say so (not only the warning on stderr)."""
    rc, out, err, final = run(tmp_path, "mismatch", config="misuse=no,quarantine=1048576")
    assert rc == 0 and final.misuse == []
    assert final.header["misuse"] == "not checked (MEMLEAK_CONFIG misuse=no)"
    assert final.header["quarantine"].startswith("not started: quarantine=1048576 was asked for")
    assert "quarantine= is ignored" in err
    gate = cli("check", "--max-misuse", "0", tmp_path)
    assert gate.returncode == 1 and "not checked" in gate.stdout
    assert "note: quarantine not started" in gate.stdout
    assert "quarantine: not started" in cli("report", tmp_path).stdout


VALGRIND_ERROR = re.compile(r"^==\d+== (Invalid free\(\) / delete / delete\[\] / realloc\(\)|"
                            r"Mismatched free\(\) / delete / delete \[\])$")
VALGRIND_SITE = re.compile(r"^==\d+==    (?:at|by) 0x[0-9A-F]+: (site_\w+)")

WORDS = {"double-free": "Invalid free() / delete / delete[] / realloc()",
         "invalid-free": "Invalid free() / delete / delete[] / realloc()",
         "mismatch": "Mismatched free() / delete / delete []"}


def valgrind_errors(argv):
    """(valgrind's words, the first site_ frame) of each error it reports."""
    out = subprocess.run(["valgrind", "--num-callers=12", *argv], capture_output=True, text=True,
                         timeout=300).stderr
    errors, words = [], None
    for line in out.splitlines():
        m = VALGRIND_ERROR.match(line)
        if m:
            words = m.group(1)
            continue
        m = VALGRIND_SITE.match(line)
        if m and words:
            errors.append((words, m.group(1)))
            words = None
    return sorted(errors)


@pytest.mark.skipif(not shutil.which("valgrind"), reason="valgrind is the oracle (Debian: valgrind)")
def test_valgrind_finds_the_same_kinds_at_the_same_sites(tmp_path):
    """valgrind 3.19 has no sized-delete or alignment checks (3.22 added
    them): those are ours alone.  Where a free is inside a block, both say
    how far in and the block's size."""
    prog = compile_program("misuse.cc")
    for what, ours in (("mismatch", MISMATCHES), ("survive", SURVIVED), ("aligned", ALIGNED)):
        expected = sorted((WORDS[kind], at) for (kind, _, at, _), times in ours.items()
                          if kind in WORDS for _ in range(times))
        # valgrind reports each error once per site (later ones are counted, not shown)
        assert sorted(set(valgrind_errors([prog, what]))) == sorted(set(expected)), what
    said = subprocess.run(["valgrind", prog, "survive"], capture_output=True, text=True, timeout=300).stderr
    assert re.findall(r"is (\d+) bytes inside a block of size (\d+) alloc'd", said) == [("8", "100"), ("16", "100")]


def test_free_of_a_pool_chunk_or_of_a_malloc_like_block_is_named(tmp_path):
    """poolfree.c frees (with free()) a chunk of its annotated pool and a
    malloc-like block cut from a slab: bare glibc aborts at the first;
    under misuse=hold both are named with the stack that announced them
    and the program lives on; valgrind calls them what the report does
    (an invalid free of a client-defined block, a mismatched free)."""
    flags = cli("cflags", "--valgrind").stdout.split()
    ours = compile_program("poolfree.c", *flags, name="poolfree_memleak")
    alone = subprocess.run([ours], capture_output=True, text=True, env=BARE_ENV, timeout=60)
    assert alone.returncode in (-6, 134) and alone.stdout == "pool: freeing a chunk\n"
    p = subprocess.run(cli_argv("run", "-q", "--config", "misuse=hold", ours), cwd=tmp_path, env=CLI_ENV,
                       capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stderr) == (0, "") and p.stdout.endswith("lived on\nend\n"), p.stdout
    [final] = [memlog_read(f) for f in tmp_path.glob("poolfree_memleak-*.memlog")]
    assert misuses(final) == {("invalid-free", "free", "site_free_chunk", "site_pool_chunk"): 1,
                              ("mismatch", "free", "site_free_slab_block", "site_slab_block"): 1}
    chunk = next(m for m in final.misuse if m.kind == "invalid-free")
    block = next(m for m in final.misuse if m.kind == "mismatch")
    assert (chunk.where, chunk.size, block.block, block.size) == ("pool-chunk", 32, "custom", 48)
    text = cli("report", tmp_path).stdout
    assert "a 32-byte chunk of the program's own pool (MEMPOOL_ALLOC, memleak.h)" in text, text
    assert "free() of a 48-byte block of the program's own allocator (MALLOCLIKE_BLOCK" in text

    # Where glibc aborts, the death report names it
    died = tmp_path / "died"
    died.mkdir()
    p = subprocess.run(cli_argv("run", "-q", ours), cwd=died, env=CLI_ENV, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode in (-6, 134) and alone.stderr.strip() in p.stderr
    [final] = [memlog_read(f) for f in died.glob("poolfree_memleak-*.memlog")]
    assert final.header["reason"] == "death"
    assert misuses(final) == {("invalid-free", "free", "site_free_chunk", "site_pool_chunk"): 1}

    if shutil.which("valgrind") and os.path.exists("/usr/include/valgrind/memcheck.h"):
        real = compile_program("poolfree.c", name="poolfree_valgrind")
        assert sorted(set(valgrind_errors([real]))) == [
            ("Invalid free() / delete / delete[] / realloc()", "site_free_chunk"),
            ("Mismatched free() / delete / delete []", "site_free_slab_block")]


def test_a_program_with_its_own_operator_new_gets_no_false_mismatches(tmp_path):
    """ownnew.cc replaces operator new with malloc and keeps libstdc++'s
    delete (legal C++): its deletes of malloc's blocks are not mismatches.
    The reports say mismatches were not checked, and double frees still are."""
    prog = compile_program("ownnew.cc")
    p = subprocess.run(cli_argv("run", "-q", "--config", "misuse=hold", prog), cwd=tmp_path, env=CLI_ENV,
                       capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stdout, p.stderr) == (0, "done\n", "")
    [final] = [memlog_read(f) for f in tmp_path.glob("ownnew-*.memlog")]
    assert misuses(final) == {("double-free", "free", "site_twice", "site_twice"): 1}
    assert "the program defines its own operator new or delete" in final.header["misuse"]
    text = cli("report", tmp_path)
    assert "misuse of the allocator not checked for mismatched free/delete/delete[]" in text.stdout
    gate = cli("check", "--max-misuse", "1", tmp_path)  # within the limit, and the gap said
    assert gate.returncode == 0 and "note: misuse of the allocator not checked for mismatched" in gate.stdout


def memlog_read(path):
    from libmemleak.files import memlog
    return memlog.read(str(path))


def test_quarantine_catches_a_double_free_after_the_memory_was_reused(tmp_path):
    """requarantine.c frees a block, allocates (bare: the same memory), and
    frees the first pointer again: bare, glibc frees the other block and
    nothing is said.  Without a quarantine the tracer cannot tell either
    (the memory is another live block's); with quarantine= the block is
    held, the allocation gets other memory, and the second free is named
    with all three stacks -- as valgrind, whose own quarantine holds it."""
    prog = compile_program("requarantine.c")
    assert subprocess.run([prog], capture_output=True, text=True, env=BARE_ENV, timeout=60).stdout == "reused 1\n"

    def traced(config, where):
        where.mkdir()
        p = subprocess.run(cli_argv("run", "-q", "--config", config, prog), cwd=where, env=CLI_ENV,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        report = reports_of(str(where), "requarantine", int(next(iter(os.listdir(where))).split("-")[1]))[-1]
        return p.stdout, report

    out, plain = traced("misuse=report", tmp_path / "plain")
    assert out == "reused 1\n" and not plain.misuse  # what it cannot see without one
    out, held = traced("quarantine=1048576", tmp_path / "held")
    assert out == "reused 0\n"  # the freed block was not handed out again
    assert held.header["quarantine"].startswith("120 bytes of freed blocks held of 1048576")
    # in use to malloc, freed for the program: its own part of RSS, not malloc's free memory
    assert held.header["memory-quarantine"] == "128"  # 120 usable bytes and glibc's 8-byte header
    [m] = held.misuse
    assert (m.kind, m.call, m.times, m.size) == ("double-free", "free", 1, 100)
    assert (site(m.frames), site(m.alloc_frames), site(m.freed_frames)) == \
        ("site_second_free", "site_alloc", "site_first_free")
    shown = cli("report", str(tmp_path / "held")).stdout
    assert "and first freed at:" in shown and "site_first_free" in shown, shown
    doc = json.loads(cli("report", "--json", str(tmp_path / "held")).stdout)
    assert doc["processes"][0]["misuse"][0]["first_free_frames"][0]["function"] == "site_first_free"

    if shutil.which("valgrind"):  # the oracle: its own quarantine holds the block too
        vg = subprocess.run(["valgrind", "--error-exitcode=0", prog], capture_output=True, text=True,
                            env=BARE_ENV, timeout=300).stderr
        invalid = vg[vg.index("Invalid free()"):]
        assert invalid.index("site_second_free") < invalid.index("site_first_free") < invalid.index("site_alloc")


def test_quarantine_holds_a_reallocs_old_block_and_names_a_free_of_it(tmp_path):
    """reallocfree.c frees a block by its pointer from before a realloc:
    bare, glibc grew it in place and the free freed the live block, nothing
    said.  Under quarantine= the realloc moves and holds the old block (as
    valgrind's does): the free is named with the realloc as its first free,
    and valgrind names the same three sites."""
    prog = compile_program("reallocfree.c")
    p = subprocess.run(cli_argv("run", "-q", "--config", "quarantine=1048576", prog), cwd=tmp_path,
                       env=CLI_ENV, capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stderr) == (0, "")
    assert p.stdout == 'moved 1, kept "kept across the realloc"\nend\n'  # the contents came along
    [final] = [memlog_read(f) for f in tmp_path.glob("reallocfree-*.memlog")]
    [m] = final.misuse
    assert (m.kind, m.call, m.times, m.size) == ("double-free", "free", 1, 100)
    assert (site(m.frames), site(m.alloc_frames), site(m.freed_frames)) == \
        ("site_free_old", "site_alloc", "site_grow")
    if shutil.which("valgrind"):
        vg = subprocess.run(["valgrind", prog], capture_output=True, text=True, env=BARE_ENV, timeout=300).stderr
        invalid = vg[vg.index("Invalid free()"):]
        assert invalid.index("site_free_old") < invalid.index("site_grow") < invalid.index("site_alloc")
