"""The program's own allocation layer (#29): wrappers of malloc take no
blame.  layered.c allocates through my_malloc (a wrapper with a 16-byte
header, as MariaDB's), obscure_alloc (six callers: found by its shape) and
pool_get (two callers: named with --alloc-fns); grouping by function names
their callers, to the byte, and every report says what it folded."""

import json

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
    for command in ("report", "check", "export"):
        extra = ["--max-live", "1"] if command == "check" else ["--format", "json"] if command == "export" else []
        out = cli(command, *extra, "--alloc-fns", "(", tmp_path)
        assert out.returncode == 2, out
        assert out.stderr == (f"libmemleak: {command}: --alloc-fns '(': not a regular expression "
                              "(missing ), unterminated subpattern at position 0)\n")
