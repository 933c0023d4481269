"""Report files are hostile input (#28 item 8): whatever bytes a file holds,
every reader and every output either answers or says one line -- never a
traceback, never memory without bound, never a control character on the
terminal.  A seeded mutation loop over real reports, run in a child with
its address space capped, plus the cases users met."""

import os
import subprocess
import sys
import textwrap

import pytest

from helpers import CLI_ENV, cli, cli_argv, compile_program

CASES = 2500


@pytest.fixture(scope="module")
def real_reports(tmp_path_factory):
    """Three reports of a real traced run (slowleaks, two signals and exit)."""
    where = tmp_path_factory.mktemp("fuzz-seed")
    prog = compile_program("reach.c")
    out = subprocess.run(cli_argv("run", "-q", "--scan-at-exit", prog), cwd=where, env=CLI_ENV,
                         input="\n" * 10, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    names = sorted(os.listdir(where))
    assert names
    return where


FUZZER = textwrap.dedent('''
    import io, os, random, resource, sys, tempfile, traceback
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    from libmemleak.files.series import InputError, read_series
    from libmemleak.analysis.trends import analyse
    from libmemleak.commands.export import FORMATS, BINARY
    from libmemleak.outputs import text

    seed_dir, cases = sys.argv[1], int(sys.argv[2])
    seeds = [open(os.path.join(seed_dir, n), "rb").read() for n in sorted(os.listdir(seed_dir))]
    rng = random.Random(20261124)
    NASTY = [b"\\x1b[2J", b"\\xff\\xfe", b"\\x00", b"\\r", b"\\t", b"\\n", b"#", b"+", b"-",
             b"99999999999", b"1" * 5000, b"-1", b"0x", b"(", b")", b":", b"\\xc3", b"\\xe2\\x80\\xae",
             b"# seq: 99999999999\\n", b"# pid: -5\\n", b"# seq: 0\\n", b"# blind: x\\n",
             b"+1 +1 definitely-lost=99999999999999999999/1\\n", b"+9e99 +1\\n", b"\\t\\t\\t\\n",
             b" kind=shared touched=99999999999999999999999", b"+4096 +1 kind=mmap touched=-7\\n",
             b" touched=1" + b"9" * 5000, b"# alloc-fns: (a+)+$\\n", b"# alloc-fns: ^site|x$\\n",
             b"# reachable-through-header: 16 x y \\xff\\n", b"# anonymous-mappings: 1 bytes in\\n",
             b"# reason: call\\n# label: \\x1b[2J../x\\n", b"# label: " + b"L" * 5000 + b"\\n",
             b"+0 +0 misuse=double-free call=free times=+1 alloc-frames=99999\\n",
             b" misuse=size-mismatch given=x size=-1 alloc-frames=-3",
             b"+0 +0 misuse=\\x1b[2J call=\\xff times=+99999999999999999999 given=" + b"9" * 5000 + b"\\n",
             b"+0 +0 misuse=size-mismatch call=delete times=-4\\n\\tf\\t(/x)\\n",
             b"+0 +0 misuse=invalid-free call=free times=+1 where=interior offset=-9 size=x\\n",
             b"+0 +0 misuse=align-mismatch call=aligned-delete times=+1 align=" + b"9" * 5000 +
             b" given-align=-1\\n", b" align=x given-align=0x40 offset=99999999999999999999999",
             b" slack=99999999999999999999999", b" slack=-5", b" slack=x", b"# live-slack: 7\\n",
             b"# memory-heap: 1 2\\n", b"# memory-arena 0: 9 x\\n# memory-arena 1: 1 1\\n",
             b"# memory-allocator-free: 99999999999999999999999\\n", b"# memory-heap-live: -1 -1\\n",
             b"# vm-rss: 5 kB\\n# memory-thread-stacks: 9 9 9\\n# memory-tracer: \\x1b[2J 1 1\\n"]

    def mutate(data):
        data = bytearray(data)
        for _ in range(rng.randint(1, 6)):
            kind = rng.randrange(5)
            at = rng.randrange(len(data) + 1)
            if kind == 0 and data:
                data[min(at, len(data) - 1)] = rng.randrange(256)
            elif kind == 1:
                data[at:at] = rng.choice(NASTY)
            elif kind == 2:
                del data[at:at + rng.randint(1, 200)]
            elif kind == 3:
                data = data[:at]
            else:
                line_end = data.find(b"\\n", at)
                if line_end > 0:
                    data[at:at] = data[at:line_end + 1] * rng.randint(1, 50)
        return bytes(data)

    with tempfile.TemporaryDirectory() as work:
        for case in range(cases):
            for n in os.listdir(work):
                os.unlink(os.path.join(work, n))
            victim = rng.randrange(len(seeds))
            for i, data in enumerate(seeds):
                with open(os.path.join(work, f"reach-4242-{i + 1}.memlog"), "wb") as f:
                    f.write(mutate(data) if i == victim or rng.random() < 0.2 else data)
            try:
                series, problems = read_series([work])
            except InputError:
                continue
            try:
                analyses = [analyse(s) for s in series]
                out = io.StringIO()
                text.write(out, analyses, problems)
                assert "\\x1b" not in out.getvalue(), "an escape reached the text output"
                for name, write in FORMATS.items():
                    sink = io.BytesIO() if name in BINARY else io.StringIO()
                    write(sink, analyses, problems)
                    if name not in BINARY:
                        sink.getvalue().encode("utf-8", "backslashreplace")
            except Exception:
                print(f"case {case}:", file=sys.stderr)
                traceback.print_exc()
                sys.exit(1)
    print(f"{cases} cases")
''')


def test_mutated_reports_never_break_a_reader_or_an_output(real_reports, tmp_path):
    script = tmp_path / "fuzz.py"
    script.write_text(FUZZER)
    out = subprocess.run([sys.executable, str(script), str(real_reports), str(CASES)], env=CLI_ENV,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout == f"{CASES} cases\n"


def _one_report(directory, header_extra="", frame="site\t(/bin/x)\tx.c:1"):
    directory.mkdir(exist_ok=True)
    (directory / "x-7-1.memlog").write_bytes(
        ("# libmemleak: 0.1.0\n# program: /bin/x\n# pid: 7\n# seq: 1\n# reason: exit\n"
         + header_extra + "+64 +1\n\t").encode() + frame.encode("utf-8", "surrogateescape") + b"\n")


def test_a_huge_program_field_is_cut_where_it_is_echoed(tmp_path):
    """#64 item 12: a 10 MB `# program:` line was echoed whole on stderr
    (two programs under one pid: both named)."""
    _one_report(tmp_path / "two")
    (tmp_path / "two" / "y-7-1.memlog").write_text(
        "# libmemleak: 0.1.0\n# program: /bin/y" + "P" * (10 << 20) + "\x1b[2J\n# pid: 7\n# seq: 1\n"
        "# reason: exit\n+64 +1\n\tsite\t(/bin/x)\tx.c:1\n")
    r = cli("report", tmp_path / "two")
    assert r.returncode == 0, r.stderr
    assert "reports of 2 different programs" in r.stderr and "characters, cut" in r.stderr
    assert len(r.stderr) < 2000 and "\x1b" not in r.stderr + r.stdout


def test_the_cases_users_met(tmp_path):
    # A frame name that is not UTF-8, exported to a file: escaped, no traceback.
    _one_report(tmp_path / "latin", frame="caf\udce9\t(/bin/x)\tx.c:1")
    for fmt in ("collapsed", "html", "flamegraph", "json", "speedscope"):
        target = tmp_path / f"out.{fmt}"
        r = cli("export", "--format", fmt, "-o", target, tmp_path / "latin")
        assert r.returncode == 0 and "Traceback" not in r.stderr, (fmt, r.stderr)
        assert target.stat().st_size > 0
    r = cli("report", tmp_path / "latin")
    assert r.returncode == 0 and "Traceback" not in r.stderr
    # A forged seq of 10^11: one line, at once, no set of that size.
    (tmp_path / "huge").mkdir()
    (tmp_path / "huge" / "x-7-1.memlog").write_text(
        "# pid: 7\n# seq: 1\n# reason: signal\n+64 +1\n\tsite\t(/bin/x)\n")
    (tmp_path / "huge" / "x-7-2.memlog").write_text(
        "# pid: 7\n# seq: 99999999999\n# reason: exit\n+64 +1\n\tsite\t(/bin/x)\n")
    for command in (["report"], ["check", "--max-live", "0"], ["export", "--format", "json"]):
        r = cli(*command, tmp_path / "huge", timeout=60)
        assert "Traceback" not in r.stderr and "MemoryError" not in r.stderr, r.stderr
        assert "out of range: not read" in r.stderr
    # An escape sequence in a frame and in a file name: shown escaped.
    _one_report(tmp_path / "esc", frame="evil\x1b[2J\t(/bin/x)\tx.c:1")
    (tmp_path / "esc" / "y\x1b[31m-8-1.memlog").write_text("garbage\n")
    r = cli("report", "--all", tmp_path / "esc")
    assert "\x1b" not in r.stdout + r.stderr
    assert "evil?[2J" in r.stdout
    assert "y\\x1b[31m-8-1.memlog" in r.stderr
    # 10,000 junk files: a few lines and a count, not 10,000 lines.
    junk = tmp_path / "junk"
    junk.mkdir()
    for i in range(10_000):
        (junk / f"j{i}.memlog").write_text("not a report\n")
    _one_report(junk)
    r = cli("report", junk, timeout=300)
    assert r.returncode == 0
    lines = r.stderr.splitlines()
    assert len(lines) <= 21 and lines[-1].endswith("more problems like these"), lines[-3:]


def test_diff_of_two_different_programs_says_so(tmp_path):
    """#64 item 15: `diff` of reports of two programs compared them silently."""
    _one_report(tmp_path / "x")
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "y-8-1.memlog").write_text(
        "# libmemleak: 0.1.0\n# program: /bin/y\n# pid: 8\n# seq: 1\n# reason: exit\n+64 +1\n\tsite\t(/bin/y)\ty.c:1\n")
    r = cli("diff", tmp_path / "x", tmp_path / "y")
    assert r.returncode == 0, r.stderr
    assert "BEFORE is of x and AFTER of y: two different programs" in r.stderr
    same = cli("diff", tmp_path / "x", tmp_path / "x")
    assert "different programs" not in same.stderr


def test_a_truncated_report_is_called_truncated(real_reports, tmp_path):
    """#64 item 15: a report cut short -- inside a line, or at a line's end
    with entries missing -- was read as if whole; `check` judged it."""
    name = sorted(n for n in os.listdir(real_reports) if n.endswith(".memlog"))[0]
    whole = (real_reports / name).read_bytes()
    entries_at = whole.index(b"\n+") + 1
    last_entry = whole.rindex(b"\n+") + 1
    for cut in (len(whole) - 7, last_entry):  # inside its last line; before its last entry
        where = tmp_path / str(cut)
        where.mkdir()
        (where / name).write_bytes(whole[:cut])
        r = cli("report", where)
        assert r.returncode == 1 and f"{name}: truncated or altered (" in r.stderr, r.stderr  # as a gap
        gate = cli("check", "--max-leaks", "1000", where)
        assert gate.returncode == 2, gate.stdout + gate.stderr
    assert entries_at < last_entry  # (the cut above left entries out)
    (tmp_path / "whole").mkdir()
    (tmp_path / "whole" / name).write_bytes(whole)
    r = cli("report", tmp_path / "whole")
    assert "truncated" not in r.stderr, r.stderr


def mutations(good, seed, most, count=300):
    """`count` copies of `good` with 1 to `most` bytes changed, each cut
    at a random length."""
    import random
    rng = random.Random(seed)
    for _ in range(count):
        data = bytearray(good)
        for _ in range(rng.randint(1, most)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        yield bytes(data[:rng.randint(0, len(data))])


def test_a_commit_journal_is_believed_only_whole_ours_and_of_its_seq(tmp_path):
    """A report directory's commit journal (daemon/commit_journal.py) is
    read by a successor reporter: a planted, cut, resized, symlinked or
    mutated one is not believed (None), and never read without bound."""
    import struct
    from array import array
    from libmemleak.daemon import commit_journal as cj
    records = array("q", [0, 4242, 1, 1, 3, 100, 2, 5])
    assert cj.write(str(tmp_path), "prog", 7, None, 2, lambda fd: os.write(fd, records.tobytes()) // 32)
    [name] = os.listdir(tmp_path)
    path = tmp_path / name
    good = path.read_bytes()
    assert cj.read(str(tmp_path), "prog", 7, None, 2, 10) == records
    assert cj.read(str(tmp_path), "prog", 7, None, 3, 10) is None      # another seq's
    assert cj.read(str(tmp_path), "prog", 7, None, 2, 1) is None       # more records than stacks
    path.write_bytes(good[:-1])
    assert cj.read(str(tmp_path), "prog", 7, None, 2, 10) is None      # cut
    path.write_bytes(struct.pack("<8sQQ", cj.MAGIC, 2, 1 << 60))
    assert cj.read(str(tmp_path), "prog", 7, None, 2, 1 << 62) is None  # a count its size does not hold
    for data in mutations(good, seed=48, most=4):
        path.write_bytes(data)
        got = cj.read(str(tmp_path), "prog", 7, None, 2, 10)
        assert got is None or len(got) % 4 == 0
    path.unlink()
    (tmp_path / "elsewhere").write_bytes(good)
    os.symlink(tmp_path / "elsewhere", path)
    assert cj.read(str(tmp_path), "prog", 7, None, 2, 10) is None      # never through a link


def test_an_answer_cache_file_is_believed_only_line_by_line_ours_and_bounded(tmp_path):
    """The symbolizer's answer cache (symbols/answer_cache.py) lies where
    any program of the user can write: each line is checked, a mutated one
    is passed over, a linked or foreign file is not read, a huge one not
    at all."""
    import json
    from libmemleak.symbols import answer_cache as ac
    cache = ac.AnswerCache(str(tmp_path / "cache"))
    prog = compile_program("blocked.c")
    shelf = cache.shelf(prog, "", None)
    rows = (("f", "/src/a.c", 12, True), ("main", "/src/a.c", 30, False))
    shelf.put(0x1234, rows)
    shelf.put(0x99, ((None, None, None, False),))
    shelf.flush()
    path = tmp_path / "cache" / shelf.name
    good = path.read_bytes()
    assert cache.shelf(prog, "", None).get(0x1234) == rows
    for data in mutations(good, seed=49, most=6):
        path.write_bytes(data)
        got = cache.shelf(prog, "", None).get(0x1234)
        assert got is None or (len(got) == 2 and all(len(r) == 4 for r in got))
    for bad in ([1], [-1, [["f", None, 1, False]]], [1, []], [1, [["f", None, -3, False]]],
                [1, [["f", None, 1, 0]]], [1, [[{"a": 1}, None, 1, False]]], [1, [["x" * 5000, None, 1, False]]],
                [1, [["f", None, 1, False]] * 65], "[" * 100000):
        path.write_text(bad if type(bad) is str else json.dumps(bad) + "\n")
        assert cache.shelf(prog, "", None).get(1) is None
    path.write_bytes(good)
    os.chmod(path, 0o600)
    os.chown(path, 65534, 65534)                                          # another user's
    assert cache.shelf(prog, "", None).get(0x1234) is None
    path.unlink()
    (tmp_path / "elsewhere").write_bytes(good)
    os.symlink(tmp_path / "elsewhere", path)
    assert cache.shelf(prog, "", None).get(0x1234) is None                # never through a link
    path.unlink()
    with open(path, "wb") as f:
        f.truncate(ac.MAX_FILE_BYTES + 1)
    assert cache.shelf(prog, "", None).get(0x1234) is None                # never past the bound
