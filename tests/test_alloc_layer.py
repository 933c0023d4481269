"""The program's own allocation layer (#29): wrappers of malloc take no
blame.  layered.c allocates through my_malloc (a wrapper with a 16-byte
header, as MariaDB's), obscure_alloc (six callers: found by its shape) and
pool_get (two callers: named with --alloc-fns); grouping by function names
their callers, to the byte, and every report says what it folded."""

import json
import os
import shutil
import subprocess

import pytest

from helpers import cli, compile_program

FOLDED_NOTE = ("allocation layer folded (stacks attributed to its callers; --no-fold shows it): "
               "my_malloc (an allocation function), obscure_alloc (6 callers)")


def by_function(directory, *options):
    out = cli("report", "--group-by", "function", "--all", "--json", *options, directory)
    assert out.returncode == 0, out.stderr
    [process] = json.loads(out.stdout)["processes"]
    got = {s["frames"][0]["function"]: (s["live_bytes"], s["live_blocks"]) for s in process["stacks"]
           if s["frames"] and s["frames"][0]["function"] != "_IO_file_doallocate"}
    return got, process["notes"]


def test_an_allocation_layer_is_folded_into_its_callers(tmp_path):
    prog = compile_program("layered.c", "-O2")
    out = cli("run", "-q", prog, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    parsers = {f"parse_{c}": (3 * 56, 3) for c in "abcdef"}
    got, notes = by_function(tmp_path)
    assert got == {"leak_users": (10 * 116, 10), "leak_sessions": (5 * 216, 5), "pool_get": (6 * 40, 6),
                   **parsers}
    assert notes[0] == FOLDED_NOTE
    # what the heuristics miss, named
    got, notes = by_function(tmp_path, "--alloc-fns", "^pool_get$")
    assert got == {"leak_users": (1160, 10), "leak_sessions": (1080, 5), "caller_one": (160, 4),
                   "caller_two": (80, 2), **parsers}
    assert notes[0] == FOLDED_NOTE.replace("my_malloc (an allocation function), obscure_alloc (6 callers)",
                                           "my_malloc (an allocation function), obscure_alloc (6 callers), "
                                           "pool_get (--alloc-fns)")
    # and none folded: the wrappers take it all, as before
    got, notes = by_function(tmp_path, "--no-fold")
    assert got == {"my_malloc": (2240, 15), "obscure_alloc": (1008, 18), "pool_get": (240, 6)}
    assert not [n for n in notes if n.startswith("allocation layer")]
    # the text report says where each stack's folded frames went
    text = cli("report", "--all", tmp_path).stdout
    assert "(1 frame above, allocation layer: my_malloc)\n       leak_users (layered.c:" in text
    # check names the caller too
    check = cli("check", "--max-live", "100", tmp_path)
    assert check.returncode == 1
    assert "leak_users" in check.stdout and "my_malloc" not in check.stdout


def test_a_bad_alloc_fns_is_one_line(tmp_path):
    for command in ("report", "check", "export", "diff"):
        extra = (["--max-live", "1"] if command == "check" else ["--format", "json"] if command == "export"
                 else [tmp_path] if command == "diff" else [])
        out = cli(command, *extra, "--alloc-fns", "(", tmp_path)
        assert out.returncode == 2, out
        assert out.stderr == (f"libmemleak: {command}: --alloc-fns '(': not a regular expression "
                              "(missing ), unterminated subpattern at position 0)\n")


def test_drawings_fold_the_layer_too(tmp_path):
    """Collapsed stacks, speedscope and pprof draw the callers as leaves,
    and say what they folded: pprof in its comments, the others on stderr."""
    prog = compile_program("layered.c", "-O2")
    assert cli("run", "-q", prog, cwd=tmp_path).returncode == 0
    out = cli("export", "--format", "collapsed", tmp_path)
    assert out.returncode == 0, out.stderr
    leaves = {}
    for line in out.stdout.splitlines():
        stack, value = line.rsplit(" ", 1)
        leaf = stack.split(";")[-1]
        leaves[leaf] = leaves.get(leaf, 0) + int(value)
    assert leaves["leak_users"] == 10 * 116 and leaves["leak_sessions"] == 5 * 216
    assert {f"parse_{c}" for c in "abcdef"} <= set(leaves)
    assert not {"my_malloc", "obscure_alloc", "malloc"} & set(leaves)
    assert "libmemleak: export: note: layered (pid " in out.stderr and FOLDED_NOTE in out.stderr
    # --no-fold draws the wrappers as they were
    plain = cli("export", "--format", "collapsed", "--no-fold", tmp_path).stdout
    assert {line.rsplit(" ", 1)[0].split(";")[-1] for line in plain.splitlines()} >= {"my_malloc"}
    speedscope = json.loads(cli("export", "--format", "speedscope", tmp_path).stdout)
    names = [f["name"] for f in speedscope["shared"]["frames"]]
    [profile] = speedscope["profiles"]
    assert {names[s[-1]] for s in profile["samples"]} >= {"leak_users", "leak_sessions", "pool_get"}
    assert not {"my_malloc", "obscure_alloc"} & {names[s[-1]] for s in profile["samples"]}
    if not shutil.which("go"):
        pytest.skip("needs go (Debian's golang-go) for go tool pprof")
    pb = tmp_path / "heap.pb.gz"
    assert cli("export", "--format", "pprof", "-o", str(pb), tmp_path).returncode == 0
    env = dict(os.environ, HOME=str(tmp_path), GOCACHE=str(tmp_path / "gocache"))
    top = subprocess.run(["go", "tool", "pprof", "-top", "-nodefraction=0", "-sample_index=inuse_space", str(pb)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert top.returncode == 0, top.stderr
    flat = {line.split()[-1]: line.split()[0] for line in top.stdout.splitlines()
            if line.strip().endswith(("leak_users", "leak_sessions", "my_malloc"))}
    assert flat == {"leak_users": f"{10 * 116}B", "leak_sessions": f"{5 * 216}B"}, top.stdout
    comments = subprocess.run(["go", "tool", "pprof", "-comments", str(pb)], capture_output=True, text=True,
                              timeout=120, env=env)
    assert FOLDED_NOTE in comments.stdout, comments.stdout + comments.stderr


def test_blocks_held_through_a_header_are_reachable(tmp_path):
    """my_malloc, obscure_alloc and pool_get hand out malloc's block + 16:
    every pointer the program keeps points 16 bytes in.  valgrind calls all
    39 blocks "possibly lost"; the scan learns the offset per allocation
    site and calls them reachable, saying where and how far in."""
    from libmemleak.files import memlog
    prog = compile_program("layered.c", "-O2")
    out = cli("run", "-q", "--config", "scan=exit", prog, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    [name] = [n for n in os.listdir(tmp_path) if n.endswith(".memlog")]
    h = memlog.read(str(tmp_path / name)).header
    blocks = 10 + 5 + 6 * 3 + 4 + 2
    nbytes = 10 * 116 + 5 * 216 + 18 * 56 + 6 * 40
    assert h["possibly-lost"] == "0 0" and h["still-reachable"] == f"{nbytes} {blocks}"
    assert h["reachable-via-heuristic"] == f"header {nbytes} {blocks}"
    assert h["reachable-through-header"] == ("16 2240 15 my_malloc (layered.c:25); "
                                             "16 1008 18 obscure_alloc (layered.c:32); "
                                             "16 240 6 pool_get (layered.c:33)")
    # valgrind's four alone: as valgrind says it
    os.unlink(tmp_path / name)
    out = cli("run", "-q", "--config", "scan=exit,scan_heuristics=valgrind", prog, cwd=tmp_path)
    [name] = [n for n in os.listdir(tmp_path) if n.endswith(".memlog")]
    h = memlog.read(str(tmp_path / name)).header
    assert h["possibly-lost"] == f"{nbytes} {blocks}" and h["scan-heuristics"] == "valgrind"
    assert "reachable-through-header" not in h
    if shutil.which("valgrind"):
        vg = subprocess.run(["valgrind", "--leak-check=full", "--show-leak-kinds=all", prog],
                            capture_output=True, text=True, timeout=300).stderr
        assert f"possibly lost: {nbytes:,} bytes in {blocks} blocks" in vg, vg


def test_alloc_fns_in_the_config_is_carried_by_every_report(tmp_path):
    """MEMLEAK_CONFIG alloc_fns= names the layer once, at run time: every
    report says it, and report, export and diff fold it without options.
    What a report says there is the traced program's word: only names and
    anchors joined by | are used, nothing that could backtrack for ever."""
    from libmemleak.files import memlog
    prog = compile_program("layered.c", "-O2")
    out = cli("run", "-q", "--config", "alloc_fns=^pool_get$|^nothing_else", prog, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    [name] = [n for n in os.listdir(tmp_path) if n.endswith(".memlog")]
    assert memlog.read(str(tmp_path / name)).header["alloc-fns"] == "^pool_get$|^nothing_else"
    got, notes = by_function(tmp_path)
    assert got["caller_one"] == (160, 4) and got["caller_two"] == (80, 2) and "pool_get" not in got
    assert notes[0].endswith("obscure_alloc (6 callers), pool_get (alloc_fns=)"), notes
    # diff folds the layer too (compared with an empty state: everything is new)
    empty = tmp_path / "before"
    empty.mkdir()
    with open(tmp_path / name) as f, open(empty / name, "w") as g:  # the same process, nothing live yet
        g.write("".join(line for line in f if line.startswith("#")))
    diff = cli("diff", empty, tmp_path / name)
    assert diff.returncode == 0, diff.stderr
    assert "(1 frame above, allocation layer: my_malloc)\n           leak_users (layered.c:" in diff.stdout
    assert "libmemleak: diff: allocation layer folded" in diff.stderr
    assert diff.stderr.rstrip().endswith("pool_get (alloc_fns=)"), diff.stderr  # read from the reports
    assert "allocation layer: pool_get)\n           caller_one (layered.c:" in diff.stdout, diff.stdout
    plain = cli("diff", "--no-fold", empty, tmp_path / name).stdout
    assert "allocation layer" not in plain and "           my_malloc (layered.c:" in plain
    # a hostile report's pattern is refused, in one line, and nothing else changes
    text = (tmp_path / name).read_text().replace("# alloc-fns: ^pool_get$|^nothing_else",
                                                 "# alloc-fns: (a+)+$")
    (tmp_path / name).write_text(text)
    got, notes = by_function(tmp_path)
    assert "pool_get" in got
    assert "alloc-fns '(a+)+$' in the reports is not names joined by | (with ^ and $): not used" in notes
