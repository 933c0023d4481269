"""Anonymous mappings as what they cost: memory a process shares with the
children it forks counted once, in the process that mapped it (PostgreSQL's
main segment was "live" in every backend), and each mapping's touched bytes
beside its mapped ones (MariaDB: 370 MB "live" for 114 MB of RSS)."""
import os

from helpers import Traced, by_site, child_pids_with_reports, cli, compile_program, wait_for_reports

MIB = 1024 * 1024


def fields(entry):
    return dict(x.split("=", 1) for x in entry.extra)


def entry_at(report, site):
    (entry,) = [e for e in report.entries if e.frames and site in [f.function for f in e.frames[:2]]]
    return entry


def test_shared_mappings_count_once_and_touched_bytes_are_told(workdir):
    prog = compile_program("sharedmaps.c")
    t = Traced([prog], workdir)
    mapped, touched = t.reports_at("mapped", "touched")
    assert t.finish() == 0, t.stderr
    shared, private = entry_at(mapped, "site_shared"), entry_at(mapped, "site_private")
    assert (shared.bytes, shared.blocks) == (8 * MIB, 1)
    assert fields(shared)["kind"] == "shared" and fields(shared)["touched"] == str(1 * MIB)
    assert (private.bytes, private.blocks) == (16 * MIB, 1)
    assert fields(private)["kind"] == "mmap" and fields(private)["touched"] == str(2 * MIB)
    assert mapped.header["shared-mappings"].startswith(
        f"{8 * MIB} bytes in 1 shared (MAP_SHARED) mapping, {1 * MIB} touched ({7 * MIB} mapped but never")
    assert mapped.header["anonymous-mappings"].startswith(
        f"{16 * MIB} bytes in 1 private mapping, {2 * MIB} touched ({14 * MIB} mapped but never touched)")

    # The parent touched one more MiB; what its children touched is theirs
    # to fault in, not the parent's.  Unchanged in size, the mapping is
    # listed because its touched bytes moved.
    shared = entry_at(touched, "site_shared")
    assert (shared.bytes, shared.blocks) == (0, 0)
    assert fields(shared)["touched"] == str(2 * MIB)
    assert not [e for e in touched.entries if "site_private" in [f.function for f in e.frames[:2]]]

    children = child_pids_with_reports(workdir, os.path.basename(prog), t.pid, expected=2)
    assert len(children) == 2
    for pid in children:
        (final,) = wait_for_reports(workdir, os.path.basename(prog), pid, 1)
        assert "shared-mappings" not in final.header, final.header
        assert not any(fields(e).get("kind") == "shared" for e in final.entries)
        # A private mapping is the child's own copy: it counts there too.
        private = entry_at(final, "site_private")
        assert (private.bytes, private.blocks) == (16 * MIB, 1)
        assert by_site(final)["site_child"] == (1000, 1)
        assert int(final.header["live-bytes"]) == 16 * MIB + 1000

    # Drawn once, under a root of its own, apart from the private heap.
    out = cli("export", "--format", "collapsed", workdir)
    assert out.returncode == 0, out.stderr
    shared_lines = [line for line in out.stdout.splitlines() if line.startswith("[shared mappings];")]
    assert len(shared_lines) == 1 and shared_lines[0].endswith(f";map {8 * MIB}"), out.stdout
    text = cli("report", "--pid", str(t.pid), workdir).stdout
    assert ("of which: 16.0 MB in private mappings (2.0 MB touched, 14.0 MB never touched); 8.0 MB in "
            "shared mappings (2.0 MB touched here, 6.0 MB never touched; counted in this process") in text, text
