"""memleak.h (#30): a program asks the tracer from its own code -- a
report written now with a label, the live totals, savepoints -- built with
the flag `libmemleak cflags` prints, with nothing to link; without the
tracer it runs the same, its counts 0."""

import os
import re
import subprocess

import pytest

from helpers import BARE_ENV, by_site, cli, compile_program, memleak_include
from libmemleak.files import memlog



def built(tmp_path, compiler="gcc", name="apicalls"):
    """apicalls.c compiled against the header `libmemleak cflags` names."""
    include = memleak_include()
    out = str(tmp_path / name)
    source = os.path.join(os.path.dirname(__file__), "programs", "apicalls.c")
    language = ["-x", "c++"] if compiler == "g++" else []
    subprocess.run([compiler, "-g", "-O0", include, *language, source, "-o", out], check=True)
    return out


def attached_then_released(argv, cwd):
    """A program started bare that says "ready" and waits for a line: the
    tracer attached to it, then the line sent (the caller waits for it
    and kills it if anything fails)."""
    from test_attach import expect, start_bare
    p = start_bare(argv, cwd)
    try:
        expect(p, "ready\n")
        out = cli("attach", "-q", p.pid, cwd=cwd)
        assert out.returncode == 0, out.stderr
        p.stdin.write(b"\n")
        p.stdin.close()
    except BaseException:
        p.kill()
        p.wait()
        raise
    return p


def said(stdout):
    """{what: (status, rest...)} of apicalls' lines."""
    lines = {}
    for line in stdout.splitlines():
        what, _, rest = line.partition(": ")
        lines[what] = rest.split(" ", 1) if what.startswith("report") else rest.split()
    return lines


def test_a_program_asks_for_a_labelled_report_counts_and_savepoints(tmp_path):
    prog = built(tmp_path)
    out = cli("run", "-q", prog, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    got = said(out.stdout)
    # the reports it asked for, written as it waited: their paths, labels and names
    status, before = got["report before"]
    assert status == "0" and re.fullmatch(rf"{tmp_path}/apicalls-\d+-1-before\.memlog", before), before
    status, after = got["report after"]
    assert status == "0" and after.endswith("-2-after_the_leak.memlog"), after
    first, second = memlog.read(before), memlog.read(after)
    assert (first.header["reason"], first.header["label"]) == ("call", "before")
    assert (second.header["reason"], second.header["label"]) == ("call", "after_the_leak")
    assert by_site(first)["leak_before"] == (500, 5)
    assert (first.header["live-bytes"], first.header["live-blocks"]) == ("500", "5")
    # since the savepoint: leak_between's 3 x 1000, the churn given back
    assert got["since"] == ["0", "3000", "3"]
    assert by_site(second)["leak_between"] == (3000, 3)
    # the live totals it was told are what the next report says
    assert got["live"] == ["0", second.header["live-bytes"], second.header["live-blocks"]]
    assert "asserted" in got
    # the labelled reports are one series with the rest: report and diff read them
    text = cli("report", tmp_path)
    assert text.returncode == 0 and "3 reports" in text.stdout, text.stdout
    diff = cli("diff", before, after)
    assert diff.returncode == 0 and "leak_between (apicalls.c:" in diff.stdout


def test_without_the_tracer_it_runs_the_same_and_counts_nothing(tmp_path):
    prog = built(tmp_path)
    bare = subprocess.run([prog, "assert"], capture_output=True, text=True, env=BARE_ENV, timeout=60)
    assert bare.returncode == 0 and bare.stderr == ""
    assert bare.stdout == ("report before: -1 \nsince: -1 0 0\nlive: -1 0 0\nreport after: -1 \nasserted\n"
                           "not reached under the tracer\n")
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".memlog")]


def test_an_assert_on_a_savepoint_says_what_was_added_and_aborts(tmp_path):
    prog = built(tmp_path)
    out = cli("run", "-q", prog, "assert", cwd=tmp_path)
    assert out.returncode in (-6, 134), (out.returncode, out.stderr)  # SIGABRT, passed on
    assert re.search(r"apicalls\.c:\d+: libmemleak: 77 bytes in 1 blocks live since the savepoint\n",
                     out.stderr), out.stderr
    assert "not reached" not in out.stdout


THREAD_COUNTS_BARE = ("thread since: -1 0 0\nprocess since: -1 0 0\n"
                      "handing over: -1 allocated 0 0 freed 0 0\nworker since, after: -1 0 0\n"
                      "noise live: -1 0 0\n")


def test_a_thread_counts_its_own_allocations_apart_from_the_others(tmp_path):
    """memleak_thread / memleak_thread_save: the worker's savepoint sees its
    own 3 x 100 leaked (its churn given back) while another thread makes
    1000 x 1000 meanwhile, which the process's savepoint counts; a block it
    hands over stays in its count (jemalloc's thread.allocated/deallocated
    model) and the other thread's free comes off that thread's.  Its
    assert aborts naming the 800 bytes; bare, every count is -1 and zeros
    and the assert passes."""
    prog = compile_program("threadcounts.c", memleak_include())
    out = cli("run", "-q", prog, cwd=tmp_path)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert out.stdout == ("thread since: 0 300 3\nprocess since: 0 1000300 1003\n"
                          "handing over: 0 allocated 500 1 freed 0 0\nworker since, after: 0 800 4\n"
                          "noise live: 0 999500 999\n")
    asserted = cli("run", "-q", prog, "assert", cwd=tmp_path)
    assert asserted.returncode in (-6, 134), (asserted.returncode, asserted.stderr)
    assert re.search(r"threadcounts\.c:\d+: libmemleak: 800 bytes in 4 blocks live since the savepoint\n",
                     asserted.stderr), asserted.stderr
    for argv in ([prog], [prog, "assert"]):
        bare = subprocess.run(argv, capture_output=True, text=True, env=BARE_ENV, timeout=60)
        assert (bare.returncode, bare.stdout, bare.stderr) == (0, THREAD_COUNTS_BARE, "")


def test_the_header_is_cxx_too(tmp_path):
    prog = built(tmp_path, "g++", "apicalls_cxx")
    out = cli("run", "-q", prog, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert said(out.stdout)["since"] == ["0", "3000", "3"]


def test_the_header_finds_an_attached_tracer(tmp_path):
    """Attached, the tracer was loaded by dlopen, in no global scope: the
    header finds it by its soname."""
    prog = built(tmp_path)
    p = attached_then_released([prog, "wait"], tmp_path)
    try:
        stdout = p.stdout.read().decode()
        assert p.wait(timeout=60) == 0
        got = said(stdout)
        assert got["report before"][0] == "0" and got["report before"][1].endswith("-1-before.memlog")
        assert got["since"] == ["0", "3000", "3"]
    finally:
        p.kill()
        p.wait()


def test_a_label_cannot_leave_the_directory_or_reach_the_terminal(tmp_path):
    """The label is the program's word, written into its segment (which a
    program can also write directly): the reporter cleans it."""
    from libmemleak.files.report_names import report_name, safe_label
    prog = built(tmp_path)
    out = cli("run", "-q", prog, "nasty", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    status, path = said(out.stdout)["report nasty"]
    assert status == "0" and os.path.dirname(path) == str(tmp_path), path
    assert os.path.basename(path).endswith("-1-_.._.._etc_x___2J_9.memlog"), path
    assert memlog.read(path).header["label"] == "_.._.._etc_x___2J_9"
    # the reporter's own cleaning, as it would meet a forged segment
    assert safe_label("../\x1b[2J\u202e") == "_..___2J_"
    assert safe_label("9lives") == "_9lives"  # never a digit first: prog-PID-SEQ-LABEL reads one way
    assert report_name("p", 5, 2, "-7") == "p-5-2-_7.memlog"


def test_a_region_checked_for_leaks_and_lsans_interface(tmp_path):
    """memleak_scope_begin/end (gperftools' NoLeaks as two calls) and
    memleak_leak_check: the counts it prints are the leaks it made, as
    valgrind counts them; LeakSanitizer's recoverable check, called
    through a weak reference, answers too.  Without the tracer: -1, zeros,
    no LSan."""
    import shutil
    from test_scan import valgrind
    prog = compile_program("scopecheck.c", memleak_include())
    out = cli("run", "-q", prog, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout == ("scope left: 0 272 5\nscope lost: 0 144 3\ndefinitely: 0 144 3\n"
                          "reachable: 0 128 2\nlsan: 1\n")
    reports = sorted((memlog.read(str(p)) for p in tmp_path.glob("*.memlog")),
                     key=lambda r: int(r.header["seq"]))
    assert [r.header["reason"] for r in reports] == ["check", "check", "check", "check", "exit"]
    assert reports[1].header["definitely-lost"] == "144 3"
    bare = subprocess.run([prog], capture_output=True, text=True, env=BARE_ENV, timeout=60)
    assert bare.stdout == ("scope left: -1 0 0\nscope lost: -1 0 0\ndefinitely: -1 0 0\n"
                           "reachable: -1 0 0\nlsan: absent\n")
    if shutil.which("valgrind"):  # the oracle: the same blocks lost and kept at its exit
        # (libc's own freeing at exit on: without the tracer the header's one
        # dlopen(RTLD_NOLOAD) leaves glibc's per-thread dl state, 68 bytes)
        _sites, totals = valgrind([prog], tmp_path, options=("--run-libc-freeres=yes",))
        assert totals["definitely-lost"] == (144, 3) and totals["still-reachable"] == (128, 2), totals


# told.c's sites at its leak check: what the program told the check decides
TOLD = {
    ("site_ignored", "still-reachable"): (104 + 24, 2),  # ignored by an interior pointer, and its child
    ("site_ignored_then_freed", "definitely-lost"): (72, 1),  # the free ended the ignoring
    ("site_root_table", "definitely-lost"): (128, 2),  # both tables: hidden, in the heap
    ("site_rooted", "still-reachable"): (40, 1),  # pointed to from the registered root region
    ("site_rooted_shared", "still-reachable"): (48, 1),  # from one in a MAP_SHARED mapping
    ("site_not_rooted", "indirectly-lost"): (56, 1),  # its region was unregistered
    ("site_lost", "definitely-lost"): (30, 1),
    ("site_own_allocator", "still-reachable"): (16, 1),  # a custom block; the other one was freed
}


@pytest.mark.parametrize("mode", ["api", "lsan"])
def test_a_program_tells_the_check_what_to_ignore_where_its_roots_are_and_what_not_to_record(tmp_path, mode):
    """memleak.h's ignore, root regions and recording switch, and the same
    through LeakSanitizer's and heaptrack's interfaces called by weak
    references: the check's categories per site follow what it was told;
    allocations made while recording was off are in no entry."""
    from test_scan import scanned_sites
    prog = compile_program("told.c", memleak_include())
    out = cli("run", "-q", prog, mode, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "check: 0 definitely 230 4 reachable 232 5\n"
    check = next(memlog.read(str(p)) for p in tmp_path.glob("told-*-1.memlog"))
    assert check.header["reason"] == "check"
    got = {k: v for k, v in scanned_sites(check).items()}
    assert got == TOLD, got
    assert "site_unrecorded" not in {f.function for e in check.entries for f in e.frames}
    assert check.header["custom-live"] == "16 1"
    bare = subprocess.run([prog, mode], capture_output=True, text=True, env=BARE_ENV, timeout=60)
    assert bare.returncode == 0 and bare.stdout == "check: -1 definitely 0 0 reachable 0 0\n"


def test_blocks_announced_after_an_attach_are_seen(tmp_path):
    """The header looks for the tracer once; a program attached to later,
    whose only calls are frequent ones (a pool's blocks), still finds it:
    the frequent calls look again every 65,536 -- the block it announces
    after that is in the attached process's final report."""
    prog = compile_program("told.c", memleak_include())
    p = attached_then_released([prog, "late"], tmp_path)
    try:
        assert p.wait(timeout=120) == 0
        final = sorted((memlog.read(str(x)) for x in tmp_path.glob(f"told-{p.pid}-*.memlog")),
                       key=lambda r: int(r.header["seq"]))[-1]
        assert final.header["reason"] == "exit"
        late = [e for e in final.entries if "kind=custom" in e.extra and e.bytes == 4321]
        assert len(late) == 1 and late[0].frames[0].function == "announced_late", final.entries
        assert final.header["custom-live"] == "4321 1"
    finally:
        p.kill()
        p.wait()


@pytest.mark.parametrize("exported", [False, True], ids=["symtab", "rdynamic"])
def test_the_programs_own_lsan_suppressions_are_applied(tmp_path, exported):
    """__lsan_default_suppressions, defined in the executable as test suites
    do -- found in its full symbol table, or exported with -rdynamic --
    is carried by the reports and applied by report and check, as LSan
    applies it (its other sanitizers' lines passed over)."""
    prog = compile_program("suppressed.c", *(["-rdynamic"] if exported else []),
                           name="suppressed_rdynamic" if exported else None)
    out = cli("run", "-q", "--scan-at-exit", prog, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout == "done\n", out.stderr
    [name] = [n for n in os.listdir(tmp_path) if n.endswith(".memlog")]
    report = memlog.read(str(tmp_path / name))
    assert report.header["default-suppression 1"] == "leak:expected_leak"
    assert report.header["default-suppression 2"] == "race:not_ours"
    assert report.header["definitely-lost"] == "1024 2"  # the report itself holds everything
    text = cli("report", tmp_path).stdout
    assert "1 stack suppressed by the program's __lsan_default_suppressions (1,000 bytes live)" in text
    assert "real_leak (suppressed.c:" in text and "expected_leak" not in text
    assert cli("check", "--max-definitely-lost", "24", tmp_path).returncode == 0
    over = cli("check", "--max-definitely-lost", "23", tmp_path)
    assert over.returncode == 1 and "24 B in 1 block definitely lost" in over.stdout


def test_a_block_no_address_space_can_hold_is_ignored_and_said_once(tmp_path):
    """#64 item 15: memleak_malloclike(p, SIZE_MAX) counted -1 byte."""
    prog = compile_program("hugeblock.c", memleak_include())
    out = cli("run", "-q", prog, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout == "done\n", out.stderr
    said = [line for line in out.stderr.splitlines() if "too large for the address space" in line]
    assert len(said) == 1 and said[0].startswith("libmemleak: memleak_malloclike"), out.stderr
    [name] = [n for n in os.listdir(tmp_path) if n.endswith(".memlog")]
    report = memlog.read(str(tmp_path / name))
    custom = [(e.bytes, e.blocks, e.frames[0].function) for e in report.entries if "kind=custom" in e.extra]
    assert custom == [(100, 1, "site_real")], custom


def test_kinds_of_resource_past_the_32nd_are_said_not_tracked(tmp_path):
    prog = compile_program("manykinds.c", memleak_include())
    out = cli("run", "-q", prog, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout == "done\n", out.stderr
    assert out.stderr.count("a 33rd kind of resource was named") == 1, out.stderr
    shown = cli("report", tmp_path)
    assert "resource kind30: 1 held" in shown.stdout and "kind31" not in shown.stdout  # fd + 31 named
    assert "note: resources-dropped: 9 acquisitions of resources not tracked (a 33rd kind" in shown.stdout
