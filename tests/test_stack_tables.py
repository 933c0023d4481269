"""#62: reports with a stack table (docs/memlog.md, "Stack tables") -- each
stack of a process written once and named by later entries -- read back
to exactly what the old form says, on a real program; a report read alone
finds its frames in its siblings; a hostile table is one line and status 2."""

import os
import random
import re
import shutil
import signal
import subprocess

import pytest

from helpers import cli, env_for, report_path, wait_for_file
from libmemleak.analysis.stack_fold import StackFold
from libmemleak.analysis.trends import analyse
from libmemleak.files import memlog
from libmemleak.files.series import read_series

ROWS = 3000


def _sqlite3_reports(directory, table):
    """sqlite3 fed the same statements, with a report after each of two
    loads and one at its exit; the three reports' paths."""
    os.makedirs(directory)
    p = subprocess.Popen(["sqlite3", ":memory:"], cwd=directory, text=True, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, env=env_for(extra={"MEMLEAK_STACK_TABLE": table}))
    paths = []
    for step in (1, 2):
        rows = " ".join(f"insert into t{step} values({i}, '{'x' * (i % 50)}', randomblob(0));"
                        for i in range(ROWS))
        p.stdin.write(f"create table t{step}(a, b, c); create index i{step} on t{step}(b); begin; {rows} commit;"
                      f" select 'loaded';\n")
        p.stdin.flush()
        assert p.stdout.readline() == "loaded\n"
        p.send_signal(signal.SIGUSR1)
        paths.append(wait_for_file(report_path(str(directory), "sqlite3", p.pid, step)))
    p.stdin.close()
    assert p.wait(timeout=120) == 0
    paths.append(wait_for_file(report_path(str(directory), "sqlite3", p.pid, 3)))
    return paths


def _per_stack(paths):
    """(seq, allocator family, frame lines) -> (bytes, blocks), over the reports."""
    cache, out = {}, {}
    for path in paths:
        report = memlog.read(path, cache)
        assert not report.truncated, report.truncated
        for e in report.entries:
            key = (report.header["seq"], tuple(x for x in e.extra if x.startswith("kind=")), e.frames_text)
            b, n = out.get(key, (0, 0))
            out[key] = (b + e.bytes, n + e.blocks)
    return out


@pytest.fixture(scope="module")
def sqlite3_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("tables")
    return _sqlite3_reports(base / "table", "yes"), _sqlite3_reports(base / "inline", "no")


def test_a_stack_table_reads_back_exactly_as_the_old_form(sqlite3_runs):
    table, inline = sqlite3_runs
    texts = [open(p).read() for p in table]
    assert all("\n@end\n" not in open(p).read() and "stack=" not in open(p).read() for p in inline)
    assert all(t.endswith("@end\n") and "# stack-table-from: 1\n" in t for t in texts)
    # the exit report names stacks the first report defined, without their frames
    lines = texts[2].splitlines()
    named_only = [line.rsplit("=", 1)[1] for line, after in zip(lines, lines[1:] + [""])
                  if line.startswith(("+", "-")) and " stack=" in line and not after.startswith("\t")]
    assert any(f"\n@s {n} " in texts[0] and f"\n@s {n} " not in texts[2] for n in named_only)
    ours, theirs = _per_stack(table), _per_stack(inline)
    assert len(ours) > 100  # more entries than are written with their frames inline
    assert ours == theirs
    assert sum(map(os.path.getsize, table)) < sum(map(os.path.getsize, inline))


def _trends(paths, fold):
    """Each stack's changes, report by report, as the analysis sees them
    (read_series with or without folding the reports as it reads them)."""
    [series], problems = read_series([os.path.dirname(paths[0])], fold=fold)
    assert not problems and len(series.reports) == 3
    assert all((r.entries is None) == bool(fold) for r in series.reports)
    trends = analyse(series).trends
    by_stack = {(t.kind, tuple(t.frames)): (t.deltas, t.block_deltas, t.alloc_deltas) for t in trends}
    assert len(by_stack) == len(trends)
    return by_stack


def test_report_keeps_no_entry_and_counts_the_same(sqlite3_runs):
    """`report`, `check` and `export` fold each report into the stacks'
    trends as it is read and keep none of its entries (memory follows
    the distinct stacks, not the files' size): the same trends as a
    series read whole, from a stack table and from the old form alike."""
    table, inline = sqlite3_runs
    whole = _trends(table, None)
    assert len(whole) > 50 and sum(sum(d) for d, _, _ in whole.values()) > 0
    assert _trends(table, StackFold) == whole == _trends(inline, StackFold)


def test_a_fold_keeps_no_text_per_stack_and_the_json_is_json_dumps(sqlite3_runs):
    """A fold keys a stack by 16 bytes of its frame lines, not by the
    lines (5 KB at a deep Python stack: 93,000 of them were 500 MB of a
    `report`'s 1 GB): no entry read for it, and no stack its table
    resolved, keeps a text.  `report --json` writes each stack as it goes,
    byte for byte what json.dump writes of the whole document."""
    import io
    import json
    from libmemleak.files import stack_tables
    from libmemleak.outputs import json_doc
    table, inline = sqlite3_runs
    for paths in (table, inline):
        cache = {memlog.WITHOUT_TEXT: True}
        whole = memlog.read(paths[-1], {})
        lean = memlog.read(paths[-1], cache)
        assert [e.frames_text for e in lean.entries] == [None] * len(whole.entries)
        assert [e.identity for e in lean.entries] == [stack_tables.stack_identity(e.frames_text)
                                                      for e in whole.entries]
        assert all(text is None for scope in cache.get("stack tables", {}).values()
                   for _, text, _ in scope.stacks.values())
        series, problems = read_series([os.path.dirname(paths[0])], fold=StackFold)
        analyses = [analyse(s) for s in series]
        out = io.StringIO()
        json_doc.write(out, analyses, problems)
        assert out.getvalue() == json.dumps(json_doc.document(analyses, problems), indent=1) + "\n"
        assert json.loads(out.getvalue())["processes"][0]["stacks"]


def test_a_report_read_alone_finds_its_frames_in_its_siblings(sqlite3_runs, tmp_path):
    table, _ = sqlite3_runs
    for path in table:
        shutil.copy(path, tmp_path)
    last = os.path.join(tmp_path, os.path.basename(table[-1]))
    alone = memlog.read(last)          # no cache: reports 1 and 2 are read for their tables
    in_series = memlog.read(table[-1], {})
    assert [(e.bytes, e.frames_text) for e in alone.entries] == [(e.bytes, e.frames_text)
                                                                 for e in in_series.entries]
    assert all(e.frames for e in alone.entries)
    series, problems = read_series([str(tmp_path)])
    assert not problems and not series[0].problems
    r = cli("report", last)  # the live totals need the others, and it says so -- nothing else
    assert r.returncode == 1 and r.stderr.splitlines() == [
        f"libmemleak: report: sqlite3 pid {alone.header['pid']}: reports 1-2 missing: live totals are wrong"]


def test_a_missing_report_loses_only_the_frames_it_alone_defined(sqlite3_runs, tmp_path):
    table, _ = sqlite3_runs
    for path in table[1:]:  # report 1, which defined most stacks, is gone
        shutil.copy(path, tmp_path)
    report = memlog.read(os.path.join(tmp_path, os.path.basename(table[-1])))
    assert "their stacks are defined in report 1 of this process, which is not there" in report.truncated
    assert any(not e.frames for e in report.entries) and any(e.frames for e in report.entries)
    r = cli("report", tmp_path)
    assert r.returncode == 1 and "report 1 missing" in r.stderr and "Traceback" not in r.stderr


HEADER = "# libmemleak: 0.1.0\n# program: /bin/x\n# pid: 7\n# seq: 1\n# reason: exit\n# stack-table-from: 1\n"


@pytest.mark.parametrize("table, says", [
    ("@f 1\n\tf\t(/bin/x)\tx.c:1\n@s 1 2 1\n@s 2 1 1\n@end\n", "loops"),
    ("@f 1\n\tf\t(/bin/x)\tx.c:1\n@s 2 0 1\n@end\n", "stack 1 is named but not defined"),
    ("@f 1\n\tf\t(/bin/x)\tx.c:1\n@s 1 0 1\n@s 1 0 2\n@end\n", "stack 1 is defined twice"),
    ("@f 1\n\tf\t(/bin/x)\tx.c:1\n@f 1\n\tg\t(/bin/x)\tx.c:2\n@s 1 0 1\n@end\n", "frame 1 is defined twice"),
    ("@s 1 0 9\n@end\n", "frame 9 of stack 1 is not defined"),
    ("@s 1 0 99999999999999999999\n@end\n", "not a stack table line"),
    ("@s 1\n@end\n", "not a stack table line"),
    ("@s 0 0 1\n@end\n", "stack 0 is defined"),
    ("@f 1\n\tf\t(/bin/x)\tx.c:1\n" + "".join(f"@s {i} {i + 1} 1\n" for i in range(1, 5001)) + "@s 5001 0 1\n@end\n",
     "deeper than 4096 frames"),
    ("@f 1\n\tf\t(/bin/x)\tx.c:1\n@s 1 0" + " 1" * 5000 + "\n@end\n", "not a stack table line"),
])
def test_a_hostile_stack_table_is_one_line_and_status_2(tmp_path, table, says):
    path = tmp_path / "x-7-1.memlog"
    path.write_text(HEADER + "+64 +1 stack=1\n" + table)
    with pytest.raises(memlog.MemlogError, match=says):
        memlog.read(str(path))
    r = cli("report", path)
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr


def test_a_report_that_names_a_table_from_a_later_report_is_refused(tmp_path):
    path = tmp_path / "x-7-1.memlog"
    path.write_text(HEADER.replace("stack-table-from: 1", "stack-table-from: 5") + "+64 +1 stack=1\n@end\n")
    r = cli("report", path)
    assert r.returncode == 2 and "is not a report before this one" in r.stderr, r.stderr


def test_fuzzed_stack_tables_never_raise_anything_but_a_clear_error(sqlite3_runs, tmp_path):
    table, _ = sqlite3_runs
    data = [open(p, "rb").read() for p in table]
    rnd = random.Random(62)
    for trial in range(400):
        where = tmp_path / str(trial)
        where.mkdir()
        for k, whole in enumerate(data):
            start = whole.index(b"\n@") + 1 if k == trial % 3 else len(whole)
            body = bytearray(whole)
            for _ in range(rnd.randint(1, 6)) if start < len(whole) else ():
                at = rnd.randrange(start, len(body))
                body[at] = rnd.choice(b"0123456789 @\n\tfs-+=x")
            (where / os.path.basename(table[k])).write_bytes(bytes(body))
        try:
            read_series([str(where)])
        except Exception as e:  # noqa: BLE001 -- what is under test
            assert type(e).__name__ == "InputError", repr(e)


def test_a_stack_that_shares_its_callers_reads_as_its_whole_frames(tmp_path):
    """`@s N P F...`: stack N's frames, then stack P's -- the form a writer
    sharing callers (as heaptrack's trace tree) writes; today's writes P 0."""
    path = tmp_path / "x-7-1.memlog"
    path.write_text(HEADER + "+64 +1 stack=3\n+32 +1 stack=1\n"
                    "@f 1\n\tmain\t(/bin/x)\tx.c:9\n@f 2\n\tserve\t(/bin/x)\tx.c:5\n"
                    "@f 3\n\tleak [inlined]\t(/bin/x)\tx.c:2\n\tleak\t(/bin/x)\tx.c:1\n"
                    "@s 1 0 1\n@s 2 1 2\n@s 3 2 3\n@end\n")
    report = memlog.read(str(path))
    assert [[(f.function, f.line, f.inlined) for f in e.frames] for e in report.entries] == [
        [("leak", 2, True), ("leak", 1, False), ("serve", 5, False), ("main", 9, False)],
        [("main", 9, False)]]
    assert report.entries[0].frames_text == ("\tleak [inlined]\t(/bin/x)\tx.c:2\n\tleak\t(/bin/x)\tx.c:1\n"
                                             "\tserve\t(/bin/x)\tx.c:5\n\tmain\t(/bin/x)\tx.c:9")
    assert not report.truncated and report.entries[0].extra == ()


def test_a_forged_seq_costs_nothing_to_look_for(tmp_path):
    """A lone report saying it is report 10^11 of a table begun at 1: its
    earlier reports are looked for in one listing, not one by one."""
    path = tmp_path / "x-7-100000000000.memlog"
    path.write_text(HEADER.replace("# seq: 1\n", "# seq: 100000000000\n") + "+64 +1 stack=1\n@end\n")
    report = memlog.read(str(path))
    assert "defined in reports 1, 2, 3, 4, 5, 6, 7, 8 of this process, which are not there" in report.truncated
    assert report.entries[0].frames == ()


def test_a_report_read_in_parts_is_the_report_read_whole(sqlite3_runs, tmp_path, monkeypatch):
    """A fold reads a report without a stack table a part at a time, cut
    where an entry begins (memlog.read_file: a 477 MB report of deep
    stacks cost three times its size read whole): the same entries, the
    same word on a file cut short, the same line named in an error."""
    _, inline = sqlite3_runs
    path = inline[-1]
    whole = memlog.read(path, {})
    monkeypatch.setattr(memlog, "PART_BYTES", 4096)
    assert os.path.getsize(path) > 10 * 4096
    parts = memlog.read(path, {memlog.WITHOUT_TEXT: True})
    assert parts.header == whole.header and parts.truncated == whole.truncated == ""
    assert [(e.bytes, e.blocks, e.extra, e.identity, e.frames) for e in parts.entries] == \
        [(e.bytes, e.blocks, e.extra, e.identity, e.frames) for e in whole.entries]
    with open(path, "rb") as f:
        data = f.read()
    cut = tmp_path / os.path.basename(path)
    cut.write_bytes(data[:len(data) * 2 // 3])
    assert memlog.read(str(cut), {memlog.WITHOUT_TEXT: True}).truncated == memlog.read(str(cut), {}).truncated != ""
    at = re.compile(rb"\n[-+]").search(data, len(data) // 2).start() + 1
    cut.write_bytes(data[:at] + b"garbage\n" + data[at:])
    errors = []
    for cache in ({memlog.WITHOUT_TEXT: True}, {}):
        with pytest.raises(memlog.MemlogError) as e:
            memlog.read(str(cut), cache)
        errors.append(str(e.value))
    line = data[:at].count(b"\n") + 1
    assert errors[0] == errors[1] and f":{line}:" in errors[0]
