"""The reachability scan (#21): programs with known reachability, scanned
live (`libmemleak scan PID`) and at exit (scan=exit), each category per
stack asserted to the byte and block -- against valgrind memcheck's own
answer where valgrind is installed (.ci/run installs it), and against the
known layout of the program where valgrind cannot see the moment (a live
scan mid-run)."""

import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from helpers import CLI_ENV, cli, cli_argv, compile_program, reports_of
from libmemleak.files import memlog
from libmemleak.analysis.lost import CATEGORIES, categories_of, header_totals, since_of

HAVE_VALGRIND = shutil.which("valgrind") is not None
needs_valgrind = pytest.mark.skipif(not HAVE_VALGRIND, reason="valgrind is not installed")

VALGRIND_RECORD = re.compile(
    r"== (?:(?P<total>[\d,]+) \((?P<direct>[\d,]+) direct, [\d,]+ indirect\)|(?P<plain>[\d,]+)) "
    r"bytes in (?P<blocks>[\d,]+) blocks are (?P<kind>definitely lost|indirectly lost|possibly lost|"
    r"still reachable) in loss record")
VALGRIND_FRAME = re.compile(r"==\s+(?:at|by) 0x[0-9A-F]+: (\S+)")
VALGRIND_TOTAL = re.compile(r"==\s+(definitely lost|indirectly lost|possibly lost|still reachable): "
                            r"([\d,]+) bytes in ([\d,]+) blocks")


def _int(text):
    return int(text.replace(",", ""))


def valgrind(argv, cwd, stdin="", env=None, options=()):
    """valgrind memcheck's leak check at exit, with the settings whose
    semantics the scan implements: (per site function, category) ->
    (bytes, blocks), and the four totals."""
    out = subprocess.run(["valgrind", "--leak-check=full", "--show-leak-kinds=all",
                          "--run-libc-freeres=no", "--run-cxx-freeres=no",
                          "--num-callers=30", *options, *argv], cwd=cwd, input=stdin, capture_output=True,
                         text=True, timeout=300, env=env).stderr
    per_site, totals, record = {}, {}, None
    for line in out.splitlines():
        if "HEAP SUMMARY:" in line:  # the check at exit follows; a program's own checks came before
            per_site, totals, record = {}, {}, None
        m = VALGRIND_RECORD.search(line)
        if m:
            nbytes = _int(m["direct"] or m["plain"])
            record = [m["kind"].replace(" ", "-"), nbytes, _int(m["blocks"])]
            continue
        m = VALGRIND_FRAME.search(line)
        if m and record and m.group(1).startswith("site_"):
            key = (m.group(1).split("(")[0], record[0])
            b, k = per_site.get(key, (0, 0))
            per_site[key] = (b + record[1], k + record[2])
            record = None
            continue
        m = VALGRIND_TOTAL.search(line)
        if m:
            totals[m.group(1).replace(" ", "-")] = (_int(m.group(2)), _int(m.group(3)))
    for name in CATEGORIES:
        totals.setdefault(name, (0, 0))
    return per_site, totals


def site_of(entry):
    """The site function's name, without a C++ signature."""
    return next((f.function.split("(")[0] for f in entry.frames
                 if f.function and f.function.startswith("site_")), None)


def scanned_sites(report):
    """(per site function, category) -> (bytes, blocks) of a scan report."""
    per_site = {}
    for entry in report.entries:
        site = site_of(entry)
        for name, (nbytes, blocks) in categories_of(entry).items():
            if site and blocks:
                b, k = per_site.get((site, name), (0, 0))
                per_site[(site, name)] = (b + nbytes, k + blocks)
    return per_site


def survivors(report, site):
    ages = {}
    for entry in report.entries:
        if site_of(entry) == site:
            for seq, n in since_of(entry).items():
                ages[seq] = ages.get(seq, 0) + n
    return ages


def run_scan_at_exit(prog, cwd, stdin="", *args, env=CLI_ENV, config="scan=exit"):
    p = subprocess.Popen(cli_argv("run", "-q", "--config", config, prog, *args), cwd=cwd, env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    out = subprocess.CompletedProcess(p.args, None, *p.communicate(stdin, timeout=120))
    out.returncode = p.returncode
    assert out.returncode == 0, out.stderr
    final = reports_of(str(cwd), os.path.basename(prog), p.pid)[-1]
    assert final.header["reason"] == "exit"
    return final, out


REACH_AT_EXIT = {
    # main's frame is gone at exit: its local no longer holds site_stack's block
    ("site_stack", "definitely-lost"): (40, 1),
    ("site_global", "still-reachable"): (48, 1),
    ("site_child", "still-reachable"): (24, 1),
    ("site_tls", "still-reachable"): (56, 1),
    ("site_interior", "possibly-lost"): (200, 1),
    ("site_lost", "definitely-lost"): (100, 1),
    ("site_indirect", "indirectly-lost"): (32, 1),
    ("site_indirect2", "indirectly-lost"): (16, 1),
    ("site_cycle", "definitely-lost"): (64, 1),
    ("site_cycle", "indirectly-lost"): (64, 1),
    ("site_forgotten", "definitely-lost"): (576, 8),
    ("site_tree_root", "definitely-lost"): (80, 1),
    ("site_tree_node", "indirectly-lost"): (240, 6),
    ("site_ptree_root", "possibly-lost"): (88, 1),
    ("site_ptree_node", "possibly-lost"): (80, 2),
    ("site_reach_interior", "possibly-lost"): (56, 1),
    ("site_lost2", "definitely-lost"): (32, 1),
    ("site_indirect_interior", "indirectly-lost"): (48, 1),
}


@pytest.mark.parametrize("config", ["scan=exit", "scan=exit,track=table"])
def test_scan_at_exit_gives_each_category_per_stack(tmp_path, config):
    """track=table: the blocks are listed from the hook's address table,
    not found by their trailers -- the same answer."""
    final, out = run_scan_at_exit(compile_program("reach.c"), tmp_path, "\n", config=config)
    assert out.stdout == "checkpoint built\n"
    assert scanned_sites(final) == REACH_AT_EXIT
    assert header_totals(final.header) == {"definitely-lost": (892, 13), "indirectly-lost": (400, 10),
                                           "possibly-lost": (424, 5), "still-reachable": (128, 3)}
    assert float(final.header["scan-pause-ms"]) > 0
    assert final.header["scan-threads"] == "1"


@needs_valgrind
def test_scan_at_exit_matches_valgrind_per_stack(tmp_path):
    prog = compile_program("reach.c")
    expected, totals = valgrind([prog], tmp_path, "\n")
    assert expected == REACH_AT_EXIT  # the program does what it says
    final, _ = run_scan_at_exit(prog, tmp_path, "\n")
    assert scanned_sites(final) == expected
    assert header_totals(final.header) == totals


@needs_valgrind
def test_a_routed_allocators_blocks_are_scanned_as_valgrind_sees_them(tmp_path):
    """A program with its own malloc (routed, #29): its blocks come from the
    address table.  valgrind replaces the executable's malloc when told
    to (--soname-synonyms=somalloc=NONE) and is the oracle."""
    prog = compile_program("ownheap.c")
    expected, totals = valgrind([prog], tmp_path, options=["--soname-synonyms=somalloc=NONE"])
    assert totals["definitely-lost"] == (1492, 14)  # the program does what it says
    final, _ = run_scan_at_exit(prog, tmp_path)
    assert "routed" in final.header
    assert scanned_sites(final) == expected
    assert header_totals(final.header) == totals


def scan_live(pid, *options):
    out = cli("scan", *options, pid)
    assert out.returncode == 0, out.stderr
    path = out.stdout.splitlines()[0]
    return memlog.read(path), out.stdout


def test_live_scan_of_a_running_process(tmp_path):
    """Mid-run, main's local still holds its block; the program goes on
    unchanged after the scan and its exit report follows as usual."""
    prog = compile_program("reach.c")
    p = subprocess.Popen(cli_argv("run", "-q", prog), cwd=tmp_path, env=CLI_ENV, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline() == b"checkpoint built\n"
    report, shown = scan_live(p.pid)
    assert report.header["reason"] == "scan"
    expected = dict(REACH_AT_EXIT)
    expected[("site_stack", "still-reachable")] = expected.pop(("site_stack", "definitely-lost"))
    assert scanned_sites(report) == expected
    assert header_totals(report.header) == {"definitely-lost": (852, 12), "indirectly-lost": (400, 10),
                                            "possibly-lost": (424, 5), "still-reachable": (168, 4)}
    # what the user reads: the totals, then the stacks, definitely lost first
    assert "definitely lost: 852 bytes in 12 blocks" in shown
    assert shown.index("site_forgotten") < shown.index("site_tree_root") < shown.index("site_interior")
    out, err = p.communicate(b"\n", timeout=60)
    assert p.returncode == 0 and out == b"" and err == b""
    reasons = [r.header["reason"] for r in reports_of(str(tmp_path), "reach", p.pid)]
    assert reasons == ["scan", "exit"]


def test_other_threads_roots_registers_stacks_tls(tmp_path):
    """A worker thread blocked in read() holds one block in its TLS, one on
    its stack, one only in a register: all still reachable; it dropped one."""
    prog = compile_program("reach_threads.c", "-O2", "-fno-optimize-sibling-calls", "-fno-builtin")
    p = subprocess.Popen(cli_argv("run", "-q", prog), cwd=tmp_path, env=CLI_ENV, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline() == b"checkpoint held\n"
    report, _ = scan_live(p.pid)
    sites = scanned_sites(report)
    assert sites == {("site_thread_tls", "still-reachable"): (64, 1),
                     ("site_thread_stack", "still-reachable"): (72, 1),
                     ("site_thread_register", "still-reachable"): (96, 1),
                     ("site_thread_lost", "definitely-lost"): (48, 1)}
    assert report.header["scan-threads"] == "2"
    p.communicate(b"\n", timeout=60)
    assert p.returncode == 0


def test_twenty_scans_of_threads_allocating_flat_out(tmp_path):
    """Exact every time, and the program's behaviour unchanged."""
    prog = compile_program("scanchurn.c")
    # (it churns until told: twenty scans take what they take on a loaded machine)
    p = subprocess.Popen(cli_argv("run", "-q", prog, "-"), cwd=tmp_path, env=CLI_ENV, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline() == b"ready\n"
    for n in range(1, 21):
        report, _ = scan_live(p.pid)
        sites = scanned_sites(report)
        assert sites[("site_kept", "still-reachable")] == (4000, 100)
        assert sites[("site_dropped", "definitely-lost")] == (1200, 50)
        assert not [k for k in sites if k[0] == "site_churn" and k[1] != "still-reachable"], sites
        assert report.header["scan-threads"] == "5"
        # the survivors view: what the first scan saw is still there, each time
        assert survivors(report, "site_kept") == ({} if n == 1 else {1: 100})
        assert survivors(report, "site_dropped") == ({} if n == 1 else {1: 50})
        churned = survivors(report, "site_churn")  # replaced all the while: few are old
        assert sum(churned.values()) <= 64 and max(churned, default=n) >= n - 8
    out, err = p.communicate(b"\n", timeout=120)
    assert p.returncode == 0, err
    assert out == b"done 1\n" and err == b""
    reasons = [r.header["reason"] for r in reports_of(str(tmp_path), "scanchurn", p.pid)]
    assert reasons == ["scan"] * 20 + ["exit"]


def test_a_process_traced_already_is_said_and_left_alone(tmp_path):
    """Under a debugger (here: the test holds it with PTRACE_SEIZE), the
    scan cannot stop the threads: one clear line, a report without
    categories, exit status 1, the program untouched."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    prog = compile_program("reach.c")
    p = subprocess.Popen(cli_argv("run", "-q", prog), cwd=tmp_path, env=CLI_ENV, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline() == b"checkpoint built\n"
    PTRACE_SEIZE, PTRACE_DETACH = 0x4206, 17
    if libc.ptrace(PTRACE_SEIZE, p.pid, None, None) != 0:
        p.kill()
        pytest.skip(f"cannot ptrace here: errno {ctypes.get_errno()}")
    try:
        out = cli("scan", p.pid)
    finally:
        libc.ptrace(PTRACE_DETACH, p.pid, None, None)
    assert out.returncode == 1
    assert f"already traced by process {os.getpid()}" in out.stderr
    report = memlog.read(out.stdout.splitlines()[0])
    assert header_totals(report.header) is None
    assert report.header["scan"].startswith("not made: process")
    _, err = p.communicate(b"\n", timeout=60)
    assert p.returncode == 0
    assert b"already traced" in err  # the reporter said it once on the program's stderr


def test_a_sampled_process_cannot_be_scanned(tmp_path):
    prog = compile_program("reach.c")
    p = subprocess.Popen(cli_argv("run", "-q", "--config", "sample=4096", prog), cwd=tmp_path,
                         env=CLI_ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    assert p.stdout.readline() == b"checkpoint built\n"
    out = cli("scan", p.pid)
    assert out.returncode == 1 and out.stdout == ""
    assert "cannot be scanned: the scan needs every block tracked" in out.stderr
    p.communicate(b"\n", timeout=60)
    assert p.returncode == 0


def test_scan_of_no_process_and_of_an_untraced_one():
    out = cli("scan", 999999999 % 4194304)
    assert out.returncode == 1 and "libmemleak: scan:" in out.stderr
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        out = cli("scan", sleeper.pid)
        assert out.returncode == 1
        assert "is not traced by libmemleak" in out.stderr
    finally:
        sleeper.kill()
        sleeper.wait()


# The variables `libmemleak run` gives the program, of the same lengths,
# so that a program that copies its environment (perl, git) allocates
# alike under valgrind.
# Hash seeds fixed: perl's and python's hash tables (and so which of their
# blocks only interior pointers reach) differ from run to run otherwise.
# valgrind gives its programs three variables of its own: ours get them too
# (perl copies its environment into its heap, four blocks a variable).
# python3 with its own allocator grew a second 128 KB arena in one run of
# five (under valgrind too, now and then): with PYTHONMALLOC=malloc every
# object is a block of its own and the answer is the same each time.
SEEDED_ENV = dict(CLI_ENV, PERL_HASH_SEED="0", PYTHONHASHSEED="0", PYTHONMALLOC="malloc",
                  GLIBCPP_FORCE_NEW="1", GLIBCXX_FORCE_NEW="1", LD_LIBRARY_PATH="/usr/lib/debug")


def environment_like_ours():
    env = dict(SEEDED_ENV)
    env.update(MEMLEAK_CONFIG="mtraceinit,scan=exit", MEMLEAK_PYTHON=sys.executable,
               MEMLEAK_ROOT_PID="1" * len(str(os.getpid())), MEMLEAK_KEEPER="libmemleak-" + "0" * 32)
    return env


@needs_valgrind
@pytest.mark.parametrize("argv", [["sqlite3", ":memory:", ".quit"], ["git", "--version"],
                                  ["perl", "-e", "my %h = map { $_ => [$_] } 1..1000; print 1"],
                                  ["/usr/bin/python3", "-c", "d = {i: [i] for i in range(1000)}"]],
                         ids=["sqlite3", "git", "perl", "python3"])
def test_real_programs_at_exit_match_valgrinds_totals(tmp_path, argv):
    """What valgrind says at exit (with --run-libc-freeres=no, no
    heuristics), we say: the lost categories to the byte, every category
    to the block.  (git and perl keep strings whose lengths differ under
    valgrind -- LD_PRELOAD's value, our pid -- so their reachable and
    possibly lost bytes are compared to the block only.)"""
    if not shutil.which(argv[0]):
        pytest.skip(f"{argv[0]} is not installed")
    final, _ = run_scan_at_exit(argv[0], tmp_path, "", *argv[1:], env=SEEDED_ENV)
    _, expected = valgrind(argv, tmp_path, env=environment_like_ours())
    ours = header_totals(final.header)
    assert {k: v[1] for k, v in ours.items()} == {k: v[1] for k, v in expected.items()}
    for name in ("definitely-lost", "indirectly-lost"):
        assert ours[name] == expected[name]
    if argv[0] not in ("git", "perl"):
        assert ours == expected


def test_report_check_and_json_use_the_scan(tmp_path):
    """`run --scan-at-exit`, then the offline tools: report shows the totals
    and ranks definitely lost stacks first; check gates on them; --json
    carries them."""
    import json
    p = subprocess.Popen(cli_argv("run", "-q", "--scan-at-exit", compile_program("reach.c")),
                         cwd=tmp_path, env=CLI_ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.communicate(b"\n", timeout=60)
    assert p.returncode == 0
    out = cli("report", tmp_path)
    assert out.returncode == 0, out.stderr
    assert ("scan (report 1): definitely lost 892 B in 13 blocks, indirectly lost 400 B in 10 blocks, "
            "possibly lost 424 B in 5 blocks, still reachable 128 B in 3 blocks") in out.stdout
    ranked = [line for line in out.stdout.splitlines() if line.startswith("  #")]
    assert ranked[0].startswith("  #1 576 B live in 8 blocks -- definitely lost: 576 B in 8 blocks")
    assert "definitely lost: 64 B in 1 block (and 64 B indirectly)" in out.stdout
    doc = json.loads(cli("report", "--json", tmp_path).stdout)["processes"][0]
    assert doc["scan"]["definitely_lost"] == {"bytes": 892, "blocks": 13}
    assert doc["suspects"][0]["reachability"] == {"definitely_lost": {"bytes": 576, "blocks": 8}}
    page = tmp_path / "r.html"
    assert cli("export", "--format", "html", "-o", page, tmp_path).returncode == 0
    assert ("reachability scan (report 1): definitely lost <b>892 B</b> in 13 blocks"
            in page.read_text())
    gate = cli("check", "--max-definitely-lost", "892", tmp_path)
    assert gate.returncode == 0, gate.stdout
    gate = cli("check", "--max-definitely-lost", "891", tmp_path)
    assert gate.returncode == 1
    assert "892 B in 13 blocks definitely lost at report 1, over --max-definitely-lost 891 B" in gate.stdout


def test_check_without_a_scan_fails_the_definitely_lost_gate(tmp_path):
    p = subprocess.Popen(cli_argv("run", "-q", compile_program("reach.c")), cwd=tmp_path, env=CLI_ENV,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.communicate(b"\n", timeout=60)
    gate = cli("check", "--max-definitely-lost", "0", tmp_path)
    assert gate.returncode == 1
    assert "no reachability scan in its reports" in gate.stdout


def test_threads_that_come_and_go_while_the_scan_stops_the_others(tmp_path):
    prog = compile_program("scanchurn.c")
    p = subprocess.Popen(cli_argv("run", "-q", prog, "20000", "spawn"), cwd=tmp_path, env=CLI_ENV,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(0.5)
    threads = set()
    for _ in range(10):
        report, _ = scan_live(p.pid)
        sites = scanned_sites(report)
        assert sites[("site_kept", "still-reachable")] == (4000, 100)
        assert sites[("site_dropped", "definitely-lost")] == (1200, 50)
        assert not [k for k in sites if k[0] == "site_churn" and k[1] != "still-reachable"], sites
        threads.add(int(report.header["scan-threads"]))
    # main, 4 churning, the spawner, and short-lived ones (one running, one
    # perhaps still exiting as the next starts)
    assert threads <= {6, 7, 8}, threads
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert out == b"done 1\n" and err == b""


def test_a_process_flooded_with_signals_is_scanned_every_time(tmp_path):
    """(#28 item 4) A process its child floods with SIGPROF and SIGCHLD was
    called "exited" by 2 of 8 scans.  Each scan sees it alive, its block
    still reachable; the program ends as it would have."""
    prog = compile_program("sigflood.c")
    p = subprocess.Popen(cli_argv("run", "-q", prog), cwd=tmp_path, env=CLI_ENV, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert p.stdout.readline() == b"ready\n"
        for _ in range(8):
            report, _ = scan_live(p.pid)
            assert scanned_sites(report)[("site_flooded", "still-reachable")] == (1234, 1)
        out, err = p.communicate(b"\n", timeout=60)
    finally:
        p.kill()
    assert (p.returncode, out, err) == (0, b"done 1\n", b"")


PY_HOLDING = ("import sys\nkeep = {i: [str(i)] * 3 for i in range(20000)}\nprint('ready', flush=True)\n"
              "sys.stdin.readline()\nprint(len(keep))\n")


@pytest.mark.parametrize("argv,ready,stdin", [
    ([sys.executable, "-c", PY_HOLDING], "ready", "\n"),
    (["sqlite3", ":memory:"], "ready",
     "create table t(a, b);\ninsert into t select value, printf('%0200d', value) from "
     "generate_series(1, 5000);\nselect 'ready';\n"),
], ids=["python3", "sqlite3"])
def test_a_live_scan_of_a_real_program_finds_every_block_once(tmp_path, argv, ready, stdin):
    """Scanned as the first report, each stack's split adds up to its live
    blocks: every block the counters know was found, none twice.  The
    program then ends as it would have."""
    if not shutil.which(argv[0]):
        pytest.skip(f"{argv[0]} is not installed")
    env = dict(CLI_ENV, PYTHONMALLOC="malloc")
    p = subprocess.Popen(cli_argv("run", "-q", *argv), cwd=tmp_path, env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if argv[0] == "sqlite3":
        p.stdin.write(stdin)
        p.stdin.flush()
    assert p.stdout.readline().strip() == ready
    report, _ = scan_live(p.pid)
    checked = 0
    for entry in report.entries:
        if "kind=mmap" in entry.extra:
            continue
        split = categories_of(entry)
        assert sum(k for _, k in split.values()) == entry.blocks, (entry.extra, entry.frames[:2])
        assert sum(b for b, _ in split.values()) == entry.bytes
        checked += entry.blocks
    assert checked > 100
    out, err = p.communicate("\n" if argv[0] != "sqlite3" else ".quit\n", timeout=60)
    assert p.returncode == 0, err
    assert err == ""
    if argv[0] != "sqlite3":
        assert out == "20000\n"


def test_scan_at_exit_of_a_descendant(tmp_path):
    """A program the traced one starts (here through sh) waits for its exit
    report when it carries a scan: the scan needs it alive."""
    prog = compile_program("reach.c")
    p = subprocess.run(cli_argv("run", "-q", "--scan-at-exit", "sh", "-c", f"echo | {prog}"), cwd=tmp_path,
                       env=CLI_ENV, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    names = [n for n in os.listdir(tmp_path) if n.startswith("reach-")]
    assert len(names) == 1, names
    final = memlog.read(str(tmp_path / names[0]))
    assert final.header["reason"] == "exit"
    assert header_totals(final.header)["definitely-lost"] == (892, 13)


VALGRIND_HEURISTIC = re.compile(r"==\s+(stdstring|length64|newarray|multipleinheritance)\s*: ([\d,]+) bytes in "
                                r"([\d,]+) blocks")


@needs_valgrind
def test_valgrinds_heuristics_as_valgrind_applies_them(tmp_path):
    """C++'s interior pointers (a copy-on-write string's characters, new[]
    of destructible elements, a secondary base) and a length in front of
    the data: still reachable by valgrind's default heuristics, per stack
    and per heuristic as valgrind says; possibly lost with none."""
    prog = compile_program("heuristics.cc")
    expected, totals = valgrind([prog], tmp_path)
    out = subprocess.run(["valgrind", "--leak-check=full", "--show-leak-kinds=all", "--run-libc-freeres=no",
                          "--run-cxx-freeres=no", prog], capture_output=True, text=True, timeout=300).stderr
    via = {m.group(1): (_int(m.group(2)), _int(m.group(3))) for m in VALGRIND_HEURISTIC.finditer(out)}
    assert set(via) == {"stdstring", "length64", "newarray", "multipleinheritance"}
    final, _ = run_scan_at_exit(prog, tmp_path)
    assert scanned_sites(final) == expected
    assert header_totals(final.header) == totals
    ours = dict((name, (int(b), int(k))) for name, b, k in
                (item.split() for item in final.header["reachable-via-heuristic"].split(", ")))
    assert ours == via
    assert final.header["scan-heuristics"] == "all"


def test_no_heuristics_leaves_interior_pointers_possibly_lost(tmp_path):
    prog = compile_program("heuristics.cc")
    p = subprocess.Popen(cli_argv("run", "-q", "--config", "scan=exit,scan_heuristics=none", prog), cwd=tmp_path,
                         env=CLI_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.communicate(timeout=60)
    final = reports_of(str(tmp_path), "heuristics", p.pid)[-1]
    sites = scanned_sites(final)
    for site in ("site_length64", "site_new_array", "site_second_base", "site_plain_inner"):
        assert [k for k in sites if k[0] == site] == [(site, "possibly-lost")], sites
    assert final.header["scan-heuristics"] == "none" and "reachable-via-heuristic" not in final.header
    bad = cli("scan", "--heuristics", "stdstring,bogus", os.getpid())
    assert bad.returncode == 2 and "'bogus' is not a heuristic" in bad.stderr


def test_live_scan_of_a_descendant(tmp_path):
    """A program the traced one started (here by sh, which waits for it):
    its scan is served like its reports (by the keeper when it has no
    reporter of its own), with the same answer as a root's."""
    prog = compile_program("reach.c")
    p = subprocess.Popen(cli_argv("run", "-q", "sh", "-c", f"{prog}; echo done"), cwd=tmp_path, env=CLI_ENV,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline() == b"checkpoint built\n"
    child = None
    deadline = time.monotonic() + 10
    while child is None and time.monotonic() < deadline:
        found = subprocess.run(["pgrep", "-P", str(p.pid), "-x", "reach"], capture_output=True, text=True)
        child = int(found.stdout.split()[0]) if found.stdout.split() else None
        if child is None:
            time.sleep(0.05)
    assert child, "the child is not found"
    report, _ = scan_live(child)
    assert header_totals(report.header)["definitely-lost"] == (852, 12)
    out, err = p.communicate(b"\n", timeout=60)
    assert p.returncode == 0 and out == b"done\n", err


@pytest.mark.parametrize("directory", ["plain", "track-sample"])
def test_blocks_made_before_collection_keep_their_trailers_whatever_the_directory_is_called(
        tmp_path, directory):
    """glibc's setenv tree is rooted in a node made by the tracer's own
    first setenv; later nodes hang from it.  The decision to trailer those
    early blocks read MEMLEAK_CONFIG with strstr, so a report directory
    whose path held 'track' or 'sample' left the root untrailed and the
    tree 'lost' (24 B definitely, 120 B indirectly).  (#28 item 5)"""
    from libmemleak import preload_path
    prog = compile_program("envtree.c")
    where = tmp_path / directory
    where.mkdir()
    env = {k: v for k, v in CLI_ENV.items() if k != "PYTHONPATH"}
    env.update(LD_PRELOAD=preload_path(), MEMLEAK_CONFIG=f"mtraceinit,dir={where},scan=exit")
    out = subprocess.run([prog], env=env, capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout) == (0, "value-7\n"), out.stderr
    [report] = reports_of(str(where), "envtree", int(os.listdir(where)[0].split("-")[-2]))
    assert report.header["tracking"] == "trailers"
    assert header_totals(report.header)["definitely-lost"] == (0, 0)
    assert header_totals(report.header)["indirectly-lost"] == (0, 0)


@needs_valgrind
def test_a_pointer_left_in_mains_dead_frame_keeps_nothing_reachable_at_exit(tmp_path):
    """#64 item 3: at exit the exiting thread's stack is dead (main has
    returned; exit() does not), yet stale words the exit path did not
    overwrite kept a lost block "still reachable" (4 of LeakSanitizer's
    tests).  Its stack and registers are no root in an exit scan."""
    prog = compile_program("staleframe.c")
    expected, totals = valgrind([prog], tmp_path)
    assert expected == {("site_stale", "definitely-lost"): (1000, 1)}, expected
    final, _ = run_scan_at_exit(prog, tmp_path)
    assert scanned_sites(final) == expected
