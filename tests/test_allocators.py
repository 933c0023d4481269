"""Allocators other than glibc's (#28 items 1 and 2, #29).  A program whose
own malloc wins the symbol lookup has its allocator's entry points routed
to the hook (native/hook/route/) and is traced exactly; what cannot be
routed is never a silent blind spot -- said at start, in every report, by
report, export and check (which then cannot pass).  tcmalloc, linked,
statically linked or preloaded before or after the tracer, is traced
exactly (it used to crash at load)."""

import glob
import os
import subprocess

import pytest

from helpers import CHROMIUM, CLI_ENV, PROGRAMS, by_site, cli, compile_program
from libmemleak import preload_path
from libmemleak.files import memlog

TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"
TCMALLOC_STATIC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.a"
needs_tcmalloc = pytest.mark.skipif(
    not glob.glob("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so*"),
    reason="needs Debian's libgoogle-perftools-dev")


def only_report(directory):
    [name] = [n for n in os.listdir(directory) if n.endswith(".memlog")]
    return memlog.read(os.path.join(directory, name))


def test_an_allocator_too_short_to_route_is_said_to_be_unseen_everywhere(tmp_path):
    prog = compile_program("ownmalloc.c")  # its free is one byte: `ret`
    out = cli("run", "-q", prog, cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, "done\n"), out.stderr
    said = [line for line in out.stderr.splitlines() if "not seen" in line]
    assert said == [f"libmemleak: malloc, free, calloc, realloc are defined by {prog}, which the "
                    "program's symbol lookups find before libmemleak's, and could not be routed "
                    "(free: it is shorter than the 5-byte jump that routes it): allocations made "
                    "through it are not seen"]
    report = only_report(tmp_path)
    assert report.header["blind"] == said[0].removeprefix("libmemleak: ")
    assert "routed" not in report.header  # all of the module or none of it
    assert "site_leak" not in by_site(report)    # what it made, unseen, as said
    text = cli("report", tmp_path)
    assert text.returncode == 0
    assert f"note: NOT SEEN: malloc, free, calloc, realloc are defined by {prog}" in text.stdout
    assert "no leak suspects among the allocations libmemleak saw (NOT SEEN above)" in text.stdout
    check = cli("check", tmp_path, "--max-leaks", "0")
    assert check.returncode == 3, check
    assert check.stderr.endswith("libmemleak: check: no verdict: part of the heap was not seen "
                                 "(exit status 3)\n")
    export = cli("export", "--format", "json", tmp_path)
    assert export.returncode == 0
    assert f"NOT SEEN: malloc, free, calloc, realloc are defined by {prog}" in export.stderr
    assert "NOT SEEN" in export.stdout  # the JSON's notes


OWNHEAP_LEAKS = {"site_leak": (1000, 10), "site_zeroed": (192, 3), "site_grown": (300, 1)}


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_a_program_with_its_own_malloc_is_routed_and_traced_exactly(tmp_path, opt):
    prog = compile_program("ownheap.c", opt, "-fno-optimize-sibling-calls")
    out = cli("run", "-q", prog, cwd=tmp_path)
    assert (out.returncode, out.stdout, out.stderr) == (0, "done\n", ""), out.stderr
    report = only_report(tmp_path)
    assert "blind" not in report.header
    # aligned_alloc, a jump to memalign at -O2, is routed there
    assert report.header["routed"] == (f"7 allocator entry points of {prog} (its own malloc, free, "
                                       "calloc, realloc) are routed to libmemleak")
    sites = by_site(report)
    assert {site: sites.get(site) for site in OWNHEAP_LEAKS} == OWNHEAP_LEAKS
    # the churn: 1000 rounds of malloc, calloc, realloc and two frees, all freed; libc's
    # stdout buffer (4 KB: a pipe) comes from the program's malloc too, through libc's PLT
    assert sites["_IO_file_doallocate"] == (4096, 1)
    assert sum(bytes_ for bytes_, _ in sites.values()) == 1492 + 4096
    assert report.header["allocations"] == str(3000 + 14 + 1 + 1)  # site_grown's first malloc, stdout
    assert "unknown-frees" not in report.header
    text = cli("report", tmp_path)
    assert f"note: routed: 7 allocator entry points of {prog}" in text.stdout
    assert cli("check", tmp_path, "--max-live", "1000").returncode == 1  # a verdict, not "not seen"


def test_a_program_with_its_own_malloc_under_route_no_is_said_unseen(tmp_path):
    prog = compile_program("ownheap.c")
    out = cli("run", "-q", "--config", "route=no", prog, cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, "done\n"), out.stderr
    blind = only_report(tmp_path).header["blind"]
    assert blind == (f"malloc, free, calloc, realloc are defined by {prog}, which the program's symbol "
                     "lookups find before libmemleak's, and is not routed (MEMLEAK_CONFIG route=no): "
                     "allocations made through it are not seen")
    assert cli("check", tmp_path, "--max-leaks", "0").returncode == 3


def test_a_non_pie_program_taking_mallocs_address_is_not_called_blind(tmp_path):
    prog = compile_program("fnptr.c", "-no-pie")
    out = cli("run", "-q", prog, cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, "1\n"), out.stderr
    assert "not seen" not in out.stderr
    report = only_report(tmp_path)
    assert "blind" not in report.header
    assert by_site(report)["main"] == (1234, 1)
    assert cli("check", tmp_path, "--max-live", "1000000").returncode == 0


def tcmalloced_leaks_exactly(directory, routed):
    """tcmalloced.cc's one report: its two leaks to the byte, nothing said
    unseen, its `routed` line ending so, and a real verdict from check (1:
    over the limit), not "not seen" (3)."""
    report = only_report(directory)
    assert "blind" not in report.header
    assert report.header["routed"].endswith(routed), report.header["routed"]
    sites = by_site(report)
    assert sites["site_malloc(unsigned long)"] == (1000, 10)
    assert sites["site_new()"] == (320, 5)
    assert cli("check", directory, "--max-live", "1000").returncode == 1


@needs_tcmalloc
def test_a_program_linked_with_tcmalloc_is_traced_exactly(tmp_path):
    prog = compile_program("tcmalloced.cc", "-ltcmalloc_minimal")
    bare = subprocess.run([prog], capture_output=True, text=True, timeout=60)
    out = cli("run", "-q", prog, cwd=tmp_path)
    assert (out.returncode, out.stdout, out.stderr) == (bare.returncode, bare.stdout, ""), out.stderr
    # malloc reaches tcmalloc through the tracer's malloc; tcmalloc's own
    # names (tc_malloc, ...) are routed, and the tracer's forwarding goes
    # past those routes.  (This test once compiled -ltcmalloc_minimal before
    # the source, and the linker dropped it: tcmalloc was never linked.)
    assert "libtcmalloc_minimal" in subprocess.run(["ldd", prog], capture_output=True, text=True).stdout
    tcmalloced_leaks_exactly(tmp_path, "entry points of /lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 "
                                       "(tcmalloc's tc_*) are routed to libmemleak")


@needs_tcmalloc
def test_tcmalloc_preloaded_after_the_tracer_loads(tmp_path):
    env = {k: v for k, v in CLI_ENV.items() if k != "PYTHONPATH"}
    for argv in (["/bin/true"], ["sh", "-c", "echo ok"]):
        p = subprocess.run(argv, env=dict(env, LD_PRELOAD=f"{preload_path()}:{TCMALLOC}"),
                           cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p
        assert "not seen" not in p.stderr


@needs_tcmalloc
def test_a_program_linked_with_a_static_tcmalloc_is_routed_exactly(tmp_path):
    """libtcmalloc_minimal.a linked in: the executable exports malloc and
    operator new itself, and the tracer's lose the lookup."""
    prog = compile_program("tcmalloced.cc", "-Wl,--whole-archive", TCMALLOC_STATIC,
                           "-Wl,--no-whole-archive", name="tcmalloced_static")
    bare = subprocess.run([prog], capture_output=True, text=True, timeout=60)
    out = cli("run", "-q", prog, cwd=tmp_path)
    assert (out.returncode, out.stdout, out.stderr) == (bare.returncode, bare.stdout, ""), out.stderr
    tcmalloced_leaks_exactly(tmp_path, f"of {prog} (its own malloc, free, calloc, realloc) are routed "
                                       "to libmemleak")


@needs_tcmalloc
def test_tcmalloc_preloaded_ahead_of_the_tracer_is_routed(tmp_path):
    prog = compile_program("tcmalloced.cc")
    env = {k: v for k, v in CLI_ENV.items() if k != "PYTHONPATH"}
    p = subprocess.run([prog], env=dict(env, LD_PRELOAD=f"{TCMALLOC}:{preload_path()}"),
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stdout, p.stderr) == (0, "done\n", ""), p.stderr
    tcmalloced_leaks_exactly(tmp_path, f"of {TCMALLOC} (its own malloc, free, calloc, realloc) are "
                                       "routed to libmemleak")


needs_mimalloc = pytest.mark.skipif(not os.path.exists("/usr/include/mimalloc.h"),
                                    reason="needs Debian's libmimalloc-dev")
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
needs_jemalloc = pytest.mark.skipif(not os.path.exists(JEMALLOC), reason="needs Debian's libjemalloc2")

# mimalloced.c: what it keeps, each at its own site; its churn across the
# families (mi_malloc + free, malloc + mi_free, mi_calloc + mi_free_size,
# a heap mi_heap_destroy frees whole) leaves nothing.
MIMALLOC_KEPT = {"site_mi_malloc": (1000, 10), "site_mi_calloc": (500, 5), "site_mi_aligned": (192, 3),
                 "site_mi_grown": (300, 1), "site_mi_strdup": (12, 2), "site_mi_heap_kept": (280, 4),
                 "site_mi_new": (48, 2)}


def mimalloc_exactly(report):
    sites = by_site(report)
    assert {site: sites.get(site) for site in MIMALLOC_KEPT} == MIMALLOC_KEPT
    assert not [site for site in sites if site.startswith("churn")], sites
    # the two heaps' own structures: the kept one only (the other went with mi_heap_destroy)
    assert sites["mi_heap_new_in_arena"][1] == 1
    assert "unknown-frees" not in report.header and "blind" not in report.header


@needs_mimalloc
def test_a_program_calling_mimalloc_by_name_is_traced_exactly(tmp_path):
    """mi_malloc, mi_calloc, mi_zalloc_aligned, mi_realloc, mi_strdup,
    mi_new, mi_heap_malloc never pass through malloc: mimalloc's own names
    are routed, and a block is one block whichever family frees it."""
    prog = compile_program("mimalloced.c", "-O2", "-lmimalloc")
    out = cli("run", "-q", prog, cwd=tmp_path)
    assert (out.returncode, out.stdout, out.stderr) == (0, "done\n", ""), out.stderr
    report = only_report(tmp_path)
    assert report.header["routed"].endswith("allocator entry points of /lib/x86_64-linux-gnu/libmimalloc.so.2 "
                                            "(mimalloc's mi_*) are routed to libmemleak")
    mimalloc_exactly(report)
    assert cli("check", tmp_path, "--max-live", "1000").returncode == 1  # a verdict


# routedmix.c's kept blocks, one a site; its 10,000 rounds of every mix
# leave nothing.
ROUTEDMIX_KEPT = {"kept_malloc_grown": (4000, 1), "kept_posix_memalign": (256, 1), "kept_aligned_alloc": (512, 1),
                  "kept_memalign": (96, 1), "kept_calloc_shrunk": (300, 1)}


@pytest.mark.parametrize("allocator", ["glibc", "mimalloc", "tcmalloc"])
def test_every_mix_of_realloc_aligned_and_free_through_a_routed_allocator_counts_once(tmp_path, allocator):
    """#64 item 1: linked with mimalloc, realloc growth and posix_memalign /
    aligned_alloc were counted twice (mimalloc's own realloc and
    posix_memalign jump to its routed mi_* entries), and after freeing
    everything 21-38 phantom live blocks per 10,000 calls stayed; linked
    with tcmalloc, its posix_memalign calls its routed tc_memalign: 63
    blocks shown live, 1,000 frees of blocks never seen."""
    if allocator == "mimalloc" and not os.path.exists("/usr/include/mimalloc.h"):
        pytest.skip("needs Debian's libmimalloc-dev")
    if allocator == "tcmalloc" and not os.path.exists(TCMALLOC):
        pytest.skip("needs Debian's libgoogle-perftools-dev")
    link = {"glibc": [], "mimalloc": ["-lmimalloc"], "tcmalloc": ["-ltcmalloc_minimal"]}[allocator]
    prog = compile_program("routedmix.c", "-O2", *link, name=f"routedmix_{allocator}")
    out = cli("run", "-q", prog, cwd=tmp_path)
    assert (out.returncode, out.stdout, out.stderr) == (0, "done 5\n", ""), out.stderr
    report = only_report(tmp_path)
    sites = by_site(report)
    assert {site: sites.get(site) for site in ROUTEDMIX_KEPT} == ROUTEDMIX_KEPT, sites
    # nothing else the program's own code made is live (stdio's buffer aside)
    rest = {site: v for site, v in sites.items() if site not in ROUTEDMIX_KEPT and v != (0, 0)}
    assert sum(blocks for _, blocks in rest.values()) <= 1, rest
    assert "unknown-frees" not in report.header and "blind" not in report.header, report.header
    if allocator != "glibc":
        assert report.header["routed"].endswith("are routed to libmemleak"), report.header["routed"]


@needs_jemalloc
def test_jemallocs_own_api_is_traced_exactly(tmp_path):
    """mallocx, rallocx, sdallocx, dallocx: jemalloc's non-standard API,
    beside its malloc, which blocks it frees too."""
    prog = compile_program("jemallocx.c", "-O2", f"-l:{os.path.basename(JEMALLOC)}")
    out = cli("run", "-q", prog, cwd=tmp_path)
    assert (out.returncode, out.stdout, out.stderr) == (0, "done\n", ""), out.stderr
    report = only_report(tmp_path)
    assert report.header["routed"] == ("5 allocator entry points of /lib/x86_64-linux-gnu/libjemalloc.so.2 "
                                       "(jemalloc's mallocx family) are routed to libmemleak")
    sites = by_site(report)
    assert {s: sites.get(s) for s in ("site_mallocx", "site_zeroed", "site_grown")} == {
        "site_mallocx": (1000, 10), "site_zeroed": (256, 4), "site_grown": (500, 1)}
    assert not [site for site in sites if site.startswith("churn")], sites
    assert "unknown-frees" not in report.header


PAGE = """<html><body><script>
const keep = [];
for (let i = 0; i < 2000; i++) {
  const d = document.createElement('div'); d.textContent = 'row ' + i;
  document.body.appendChild(d); keep.push(d);
}
</script></body></html>"""


@pytest.mark.skipif(not CHROMIUM, reason="needs Debian's chromium")
def test_headless_chromium_is_routed_and_traced(tmp_path):
    """Chromium's executable defines malloc (its allocator shim): before
    routing the browser showed 3 allocations.  It still renders the page
    and exits cleanly, and its heap is seen with stacks of many frames,
    followed by frame pointers where its code has no unwind tables."""
    page = tmp_path / "page.html"
    page.write_text(PAGE)
    reports = tmp_path / "reports"
    reports.mkdir()
    out = cli("run", "-q", "--config", f"dir={reports}", CHROMIUM, "--headless", "--no-sandbox",
              "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
              "--dump-dom", page.as_uri(), cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "<div>row 1999</div>" in out.stdout
    assert "not seen" not in out.stderr
    browser = [memlog.read(str(p)) for p in reports.glob("chromium-*-1.memlog")
               if memlog.read(str(p)).header.get("reason") == "exit"]
    assert browser, sorted(os.listdir(reports))
    main = max(browser, key=lambda r: int(r.header["allocations"]))
    assert "blind" not in main.header
    assert main.header["routed"].endswith("/chromium (its own malloc, free, calloc, realloc) are "
                                          "routed to libmemleak")
    assert int(main.header["allocations"]) > 100_000
    # Little of Chromium's code has unwind tables; its frame pointers carry
    # the walks on (before the fallback: 2,251 of 3,469 stacks one frame deep).
    assert "frames of" in main.header["frame-pointers"]
    shallow = sum(1 for e in main.entries if len(e.frames) < 4)
    assert shallow * 100 < len(main.entries), (shallow, len(main.entries))
    assert max(len(e.frames) for e in main.entries) >= 8


@needs_mimalloc
def test_mimalloc_brought_by_a_dlopened_plugin_is_routed(tmp_path):
    """A plugin linked with libmimalloc, loaded with dlopen (RTLD_LOCAL)
    after start: its libmimalloc is in no global scope and was not there
    when the program started.  It is routed as the plugin opens, and again
    after a dlclose took it away and a dlopen brought it back -- among the
    big mappings a program has by then (our own, the segment, mimalloc's
    arenas), its trampolines are placed in a free gap of the maps."""
    from helpers import Traced, PROGRAMS
    plugin = os.path.join(str(tmp_path), "miplugin.so")
    subprocess.run(["gcc", "-g", "-O1", "-shared", "-fPIC", os.path.join(PROGRAMS, "miplugin.c"), "-o", plugin,
                    "-lmimalloc"], check=True)
    host = compile_program("mihost.c", "-ldl")
    t = Traced([host, plugin], tmp_path)
    loaded, done = t.reports_at("loaded", "done")
    assert t.finish() == 0, t.stderr
    assert t.stderr == "", t.stderr
    assert by_site(loaded)["site_mi_plugin"] == (3 * 40, 3)  # the churn left nothing
    assert by_site(done)["site_mi_plugin"] == (3 * 40, 3)
    assert "blind" not in done.header
    assert done.header["routed"].count("allocator entry points of /lib/x86_64-linux-gnu/libmimalloc.so.2 "
                                       "(mimalloc's mi_*) are routed to libmemleak") == 1  # said once
    # Where it is not routed (route=no), the run, every later report and check say so.
    (tmp_path / "unrouted").mkdir()
    t = Traced([host, plugin], tmp_path / "unrouted", config="mtraceinit,route=no")
    loaded, done = t.reports_at("loaded", "done")
    assert t.finish() == 0, t.stderr
    said = [line for line in t.stderr.splitlines() if "libmimalloc" in line]
    assert len(said) == 1 and "is not routed (MEMLEAK_CONFIG route=no)" in said[0], t.stderr  # once, two loads
    assert "libmimalloc.so.2" in loaded.header["blind"] and "site_mi_plugin" not in by_site(loaded)
    assert cli("check", "--max-live", "100000000", tmp_path / "unrouted").returncode == 3


def test_an_arena_api_is_routed_and_an_unrouted_allocator_is_said_unseen(tmp_path):
    """#64 item 2: Firefox's moz_arena_malloc/calloc/realloc/free (each
    ArrayBuffer a 1 MB moz_arena_calloc) were not seen: RSS grew 209 MB,
    live bytes 38 KB, "no leak suspects", `check --max-leaks 0` exited 0
    and no `blind` line.  mozarena_lib.c has that API (routed now: its
    blocks exact at their sites) and a slab allocator beside it that
    nothing routes: named in the blind line, and check says no verdict."""
    lib = tmp_path / "libmozarena.so"
    subprocess.run(["gcc", "-g", "-O0", "-shared", "-fPIC", os.path.join(PROGRAMS, "mozarena_lib.c"), "-o", lib],
                   check=True)
    prog = compile_program("mozarena.c", f"-L{tmp_path}", f"-Wl,-rpath,{tmp_path}", "-lmozarena",
                           name=f"mozarena_{os.getpid()}")
    runs = tmp_path / "runs"
    runs.mkdir()
    out = cli("run", "-q", prog, cwd=runs)
    assert (out.returncode, out.stdout) == (0, "done 1\n"), out.stderr
    said = f"{lib} exports allocator entry points libmemleak does not route (slab_free, slab_malloc)"
    assert out.stderr == f"libmemleak: {said}: blocks made through them are not seen\n", out.stderr
    report = only_report(runs)
    assert said in report.header["blind"]
    assert report.header["routed"].endswith("(mozjemalloc's moz_arena_*) are routed to libmemleak")
    sites = by_site(report)
    assert sites["site_array_buffer"] == (3 << 20, 3)  # kept; the two freed are gone
    assert sites["site_arena_grown"] == (5000, 1)
    assert cli("check", "--max-leaks", "0", runs).returncode == 3  # no verdict on what was not seen
