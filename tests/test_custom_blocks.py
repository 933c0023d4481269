"""The program's own allocators (#30): blocks and pools announced the
valgrind way -- MALLOCLIKE_BLOCK, MEMPOOL_* -- through the valgrind headers
`libmemleak cflags --valgrind` puts ahead of valgrind's own, served by
libmemleak.  valgrind is the oracle: the same program built against its
real header and run under it puts the same blocks of the same sites in the
same categories, and COUNT_LEAKS says the same numbers."""

import json
import shutil
import subprocess

import pytest

from helpers import BARE_ENV, CLI_ENV, cli, compile_program
from test_scan import run_scan_at_exit, scanned_sites, site_of, valgrind

needs_valgrind = pytest.mark.skipif(not shutil.which("valgrind") or
                                    not __import__("os").path.exists("/usr/include/valgrind/memcheck.h"),
                                    reason="valgrind and its headers (Debian: valgrind) are the oracle")

# pools.c's sites at its exit, as valgrind 3.19 puts them: a pool's chunks
# and a slab's malloc-like blocks are blocks of their own; the malloc'd
# superblocks and slab that hold them are left out; a destroyed pool's
# chunks, freed chunks and a trimmed pool's cut chunks are gone.
AT_EXIT = {
    ("site_kept_list", "still-reachable"): (480, 10),
    ("site_lost_list", "definitely-lost"): (48, 1),
    ("site_lost_list", "indirectly-lost"): (240, 5),
    ("site_trimmed_pool", "still-reachable"): (64 + 528, 2),  # the chunk kept, and the pool's struct
    ("site_slab_lost", "still-reachable"): (200, 1),  # the slab's own pointer is to its first block
    ("site_slab_kept", "still-reachable"): (120, 1),  # resized in place from 300
}
COUNTS = "bytes: 288 0 1920 0\nblocks: 6 0 15 0\nexists: 1 0\n"


def with_our_headers():
    flags = cli("cflags", "--valgrind")
    assert flags.returncode == 0, flags.stderr
    return compile_program("pools.c", *flags.stdout.split(), name="pools_memleak")


def entries_of_site(report, site):
    return [e for e in report.entries if site_of(e) == site]


@needs_valgrind
def test_a_pool_allocator_annotated_for_valgrind_is_seen_as_valgrind_sees_it(tmp_path):
    ours = with_our_headers()
    final, out = run_scan_at_exit(ours, tmp_path)
    assert out.stdout == COUNTS  # COUNT_LEAKS after DO_LEAK_CHECK, as under valgrind
    assert out.stderr == ""
    got = scanned_sites(final)
    assert {k: v for k, v in got.items() if k in AT_EXIT or k[0].startswith("site_")} == AT_EXIT, got
    # the superblocks and the slab that hold the program's blocks were set aside
    assert final.header["scan-set-aside"] == f"{2 * 4096 + 8192} 3"  # two superblocks, the slab
    # valgrind, the same source against its own header
    real = compile_program("pools.c", name="pools_valgrind")
    per_site, totals = valgrind([real], tmp_path)
    assert per_site == AT_EXIT, per_site
    vg = subprocess.run(["valgrind", "-q", "--leak-check=no", real], capture_output=True, text=True,
                        timeout=300)
    assert vg.stdout == COUNTS
    assert totals["definitely-lost"] == (48, 1) and totals["indirectly-lost"] == (240, 5)


def test_the_programs_blocks_are_entries_apart_from_the_totals(tmp_path):
    """Each custom block is counted at the stack that announced it
    (kind=custom); their bytes lie inside the superblocks, which stay in
    live-bytes, so the totals count no byte twice: custom-live says them."""
    ours = with_our_headers()
    final, _ = run_scan_at_exit(ours, tmp_path)
    first = sorted(tmp_path.glob("pools_memleak-*-1.memlog"))[0]
    from libmemleak.files import memlog
    check = memlog.read(str(first))
    assert check.header["reason"] == "check"
    assert check.header["custom-live"] == "1152 19"
    custom = [e for e in check.entries if "kind=custom" in e.extra]
    assert sum(e.bytes for e in custom) == 1152 and sum(e.blocks for e in custom) == 19
    heap = [e for e in check.entries if "kind=custom" not in e.extra]
    assert (sum(e.bytes for e in heap), sum(e.blocks for e in heap)) == (
        int(check.header["live-bytes"]), int(check.header["live-blocks"]))
    # the stack is the announcing function's caller chain, not the header's
    lost = entries_of_site(check, "site_lost_list")
    assert [f.function for f in lost[0].frames[:3]] == ["arena_alloc", "list_of", "site_lost_list"]
    # report ranks the lost pool chunks, with the kind said
    text = cli("report", tmp_path)
    assert text.returncode == 0, text.stderr
    assert "site_lost_list" in text.stdout and "the program's own blocks" in text.stdout, text.stdout
    doc = json.loads(cli("report", "--json", str(first)).stdout)["processes"][0]
    assert (doc["custom_bytes"], doc["custom_blocks"]) == (1152, 19)
    assert (doc["live_bytes"], doc["live_blocks"]) == (int(check.header["live-bytes"]),
                                                       int(check.header["live-blocks"]))
    # drawings keep them under a root of their own (no byte drawn twice under one tree)
    folded = cli("export", "--format", "collapsed", str(first))
    assert folded.returncode == 0, folded.stderr
    assert any(line.startswith("[the program's own blocks, inside its heap blocks];")
               and "site_kept_list" in line for line in folded.stdout.splitlines()), folded.stdout


def test_without_the_tracer_the_annotations_cost_nothing_and_count_nothing(tmp_path):
    ours = with_our_headers()
    bare = subprocess.run([ours], capture_output=True, text=True, env=BARE_ENV, timeout=60)
    assert bare.returncode == 0 and bare.stderr == ""
    assert bare.stdout == "bytes: 0 0 0 0\nblocks: 0 0 0 0\nexists: 0 0\n"
    assert not list(tmp_path.glob("*.memlog"))


def test_a_pool_destroyed_frees_its_chunks_and_stacks_net_to_zero(tmp_path):
    """Adding every report of a run gives, per stack, what is live at the
    end: the destroyed pool's 30 chunks and the freed chunks net to zero."""
    ours = with_our_headers()
    out = cli("run", "-q", ours, cwd=tmp_path, env=CLI_ENV)
    assert out.returncode == 0, out.stderr
    from libmemleak.files import memlog
    net = {}
    for path in tmp_path.glob("pools_memleak-*.memlog"):
        for e in memlog.read(str(path)).entries:
            if "kind=custom" in e.extra:
                site = site_of(e)
                b, k = net.get(site, (0, 0))
                net[site] = (b + e.bytes, k + e.blocks)
    assert net.get("site_destroyed_pool", (0, 0)) == (0, 0)
    assert net.get("site_freed_chunks", (0, 0)) == (0, 0)
    assert net["site_trimmed_pool"] == (64, 1) and net["site_slab_kept"] == (120, 1)


# LMDB's own source, as the lmdb package on PyPI ships it (lib/: LMDB
# 0.9.x, whose mdb.c announces its page pool with VGMEMP_* under
# -DUSE_VALGRIND).  Fetched once into the test build directory.
LMDB_SDIST = "lmdb==3.0.0"


def lmdb_library():
    """The directory of LMDB's mdb.c, midl.c and lmdb.h, fetched from PyPI
    once; skipped when PyPI cannot be reached -- except in CI, where that
    is a failure."""
    import os
    import sys
    import tarfile
    from helpers import BUILD
    name = LMDB_SDIST.replace("==", "-")
    lib = os.path.join(BUILD, name, "lib")
    if os.path.exists(os.path.join(lib, "mdb.c")):
        return lib
    os.makedirs(BUILD, exist_ok=True)
    got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                          "-d", BUILD, LMDB_SDIST], capture_output=True, text=True, timeout=300)
    archive = os.path.join(BUILD, name + ".tar.gz")
    if got.returncode != 0 or not os.path.exists(archive):
        if os.environ.get("CI"):
            pytest.fail(f"cannot fetch LMDB's source from PyPI: {got.stderr.strip()[-300:]}")
        pytest.skip("LMDB's source comes from PyPI (pip download lmdb), which cannot be reached")
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(name + "/lib/") and m.isfile()]
        tar.extractall(BUILD, members=members, filter="data")
    return lib


@needs_valgrind
def test_lmdb_a_real_library_annotated_for_valgrind_is_seen_as_valgrind_sees_it(tmp_path):
    """LMDB built with -DUSE_VALGRIND: its dirty pages are chunks of a pool
    per environment, handed out from malloc'd blocks or its free list.  A
    program leaks an environment with an open write transaction.  Built
    once against valgrind's header and run under valgrind, once against
    ours and run under libmemleak: per site, the same bytes and blocks in
    the same categories, and the same four totals."""
    lib = lmdb_library()
    sources = (f"-I{lib}", "-DUSE_VALGRIND", f"{lib}/mdb.c", f"{lib}/midl.c")
    flags = cli("cflags", "--valgrind").stdout.split()
    ours = compile_program("lmdbleak.c", *flags, *sources, name="lmdbleak_memleak")
    real = compile_program("lmdbleak.c", *sources, name="lmdbleak_valgrind")
    # the environments' directories: names of one length (LMDB keeps the path)
    (tmp_path / "ml").mkdir()
    (tmp_path / "vg").mkdir()
    final, out = run_scan_at_exit(ours, tmp_path, "", str(tmp_path / "ml"))
    assert (out.stdout, out.stderr) == ("left open: yes\n", "")
    got = scanned_sites(final)
    per_site, totals = valgrind([real, str(tmp_path / "vg")], tmp_path)
    assert got == per_site, (got, per_site)
    # the forgotten transaction's pages are pool chunks, lost with the environment
    assert got[("site_forgotten_txn", "indirectly-lost")][1] > 10
    for category in ("definitely-lost", "indirectly-lost", "possibly-lost", "still-reachable"):
        assert final.header[category] == "%d %d" % totals[category], category
    # the malloc'd pages that hold them were set aside, not counted twice
    assert final.header["scan-set-aside"] == final.header["custom-live"]
