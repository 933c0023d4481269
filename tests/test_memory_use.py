"""What the allocator does with memory beyond the live blocks (#31):
slack per stack, and where resident memory goes.  tests/programs/
heapshape.c, driven step by step under the real library with real
SIGUSR1s: 100,000 one-byte blocks and 10,000 of mixed sizes, whose slack
the bare run's malloc_usable_size gives exactly; 100 MB of which 99% is
freed in a pattern glibc cannot give back; two parked threads."""

import json
import os
import shutil
import signal
import subprocess
import time
from xml.etree import ElementTree

import pytest

from helpers import (BARE_ENV, CLI_ENV, Traced, cli, cli_argv, compile_program, only_pid, report_path,
                     wait_for_reports)
from libmemleak.files import memlog

MB = 1 << 20


def bare_slack():
    prog = compile_program("heapshape.c", "-pthread")
    out = subprocess.run([prog], input="\n\n\n", capture_output=True, text=True, env=BARE_ENV,
                         timeout=60).stdout
    return {line.split()[0]: int(line.split()[1]) for line in out.splitlines() if "-slack " in line}


def site_of(entry):
    return next((f.function for f in entry.frames if f.function and f.function.startswith("site_")), None)


def slack_by_site(report):
    out = {}
    for e in report.entries:
        for x in e.extra:
            if x.startswith("slack="):
                out[site_of(e)] = out.get(site_of(e), 0) + int(x[6:])
    return out


def traced_run(tmp_path):
    """Reports 1-3 taken after each step by SIGUSR1, the 4th by the shell's
    `memory` after the last step (its output returned), the 5th at exit;
    and the program's malloc_info() printed before each step's line."""
    prog = compile_program("heapshape.c", "-pthread")
    p = subprocess.Popen(cli_argv("run", "-q", prog), cwd=tmp_path, env=CLI_ENV, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    infos = []
    try:
        for seq, said in enumerate(("parked", "filled", "thinned"), 1):
            lines = []
            while (line := p.stdout.readline()) and line.strip() != said:
                lines.append(line)
            infos.append(malloc_info("".join(lines)))
            os.kill(p.pid, signal.SIGUSR1)
            wait_for_reports(str(tmp_path), "heapshape", p.pid, seq, timeout=120)
            if said == "thinned":
                shown = cli("shell", str(p.pid), "-c", "memory")
                assert shown.returncode == 0, shown.stderr
            p.stdin.write("\n")
            p.stdin.flush()
        assert p.wait(timeout=120) == 0
    finally:
        p.kill()
    return shown.stdout, wait_for_reports(str(tmp_path), "heapshape", p.pid, 5, timeout=120), infos


def test_a_thread_stack_at_an_arena_boundary_is_a_thread_stack(tmp_path):
    """A thread's stack that begins at a 64 MiB boundary, where glibc puts
    an arena's heap (tests/programs/alignedstack.c): counted among the
    thread stacks, and no arena made of it.  (By chance the same befell
    heapshape's second thread in ~1 run in 25: its stack ended where the
    tracer's range began, 2 MiB-aligned; test_slack_and_where_rss_goes then
    counted 2 thread stacks of 3.)"""
    prog = compile_program("alignedstack.c", "-pthread")
    t = Traced([prog], tmp_path)
    t.expect("parked")
    report = t.signal_report(1)
    t.resume()
    assert t.finish() == 0, t.stderr
    resident, mapped, count = numbers(report, "memory-thread-stacks")
    assert count == 2 and mapped >= 8 * MB, report.header["memory-thread-stacks"]
    assert numbers(report, "memory-heap")[2] == 1, report.header["memory-heap"]  # the main arena's alone
    assert report.header["memory-malloc-arenas"].split()[0] == "1", report.header["memory-malloc-arenas"]


def malloc_info(text):
    """Per arena (<heap nr=N>) of glibc's malloc_info XML: the fast and
    rest totals (count, size) and the system's current and max sizes."""
    root = ElementTree.fromstring(text[text.index("<malloc "):text.index("</malloc>") + len("</malloc>")])
    out = []
    for heap in root.findall("heap"):
        total = {t.get("type"): (int(t.get("count")), int(t.get("size"))) for t in heap.findall("total")}
        system = {t.get("type"): int(t.get("size")) for t in heap.findall("system")}
        out.append((total["fast"], total["rest"], system["current"], system["max"]))
    return out


def arenas_said(report):
    """The report's memory-malloc-arena lines: (system, max, top,
    bins_bytes, bins_chunks, fast_bytes, fast_chunks) per arena."""
    n = int(report.header["memory-malloc-arenas"].split()[0])
    return [tuple(numbers(report, f"memory-malloc-arena {i}")) for i in range(n)]


def numbers(report, key):
    return [int(w) for w in report.header[key].split()]


def test_slack_and_where_rss_goes(tmp_path):
    expected = bare_slack()
    assert expected["tiny-slack"] == 100000 * 23  # glibc: a 1-byte block has 24 usable bytes
    shell, reports, infos = traced_run(tmp_path)
    parked, filled, thinned, asked, _ = reports

    # glibc's own statistics of each arena, read from outside while the
    # program waits on stdin, equal to what its malloc_info() printed just
    # before: the main arena and the two threads' (each with free chunks
    # in its bins and its fastbins).  malloc_info adds each binned chunk's
    # size with its flag bits (PREV_INUSE at least), mallinfo2 and the
    # report without: up to 7 bytes a chunk apart.
    for report, info in zip((parked, filled, thinned), infos):
        said = arenas_said(report)
        assert len(said) == len(info) == 3, (said, info)
        for (system, top_max, top, bins_bytes, bins_chunks, fast_bytes, fast_chunks), \
                (fast, rest, current, most) in zip(said, info):
            assert (system, top_max) == (current, most)
            assert (fast_chunks, fast_bytes) == fast
            assert bins_chunks + 1 == rest[0]  # malloc_info counts the top chunk among the rest
            assert bins_chunks <= rest[1] - (top + bins_bytes) <= 7 * bins_chunks, (rest, top, bins_bytes)
        assert not report.header["memory-malloc-arenas"].endswith("partial")
    threads = arenas_said(parked)[1:]
    assert all(a[6] > 0 and a[4] > 0 for a in threads), threads  # fastbins and bins both read
    # After the thinning, the main arena's free memory is ~99 MB of chunks
    # between the live ones (fragmentation), not its top: 99,000 freed
    # chunks of 1,024 bytes under the tracer (1,000 asked, its trailer, the
    # header), less the 7 the thread's tcache keeps, merged 99 to a chunk.
    main = arenas_said(thinned)[0]
    assert 97 * 10 ** 6 < main[3] <= 99000 * 1024 and main[2] < MB, main
    assert 990 <= main[4] <= 1000, main
    assert sum(c for c in numbers(thinned, "memory-malloc-free 0")[::2]) == main[4] + main[6]

    # Slack per stack, exact: what the bare program's blocks would have had.
    slack = slack_by_site(filled)
    assert slack["site_tiny"] == expected["tiny-slack"]
    assert slack["site_mixed"] == expected["mixed-slack"]
    assert "site_fill" not in slack  # 1000 bytes fill a 1008-byte chunk's usable bytes exactly
    assert int(filled.header["live-slack"]) >= sum(slack.values())
    # ... and a stack's slack is said again when its blocks change.
    assert slack_by_site(reports[4]).get("site_tiny", expected["tiny-slack"]) == expected["tiny-slack"]

    # Where RSS goes: the heap holds ~100 MB; after the thinning, ~1 MB of
    # it is live and glibc keeps ~99 MB free (none of it is given back).
    fill_live = sum(e.bytes for r in reports[:3] for e in r.entries if site_of(e) == "site_fill")
    assert fill_live == 1000 * 1000
    heap_resident = numbers(thinned, "memory-heap")[0]
    free = int(thinned.header["memory-allocator-free"])
    assert heap_resident > 100 * 10 ** 6
    assert 97 * 10 ** 6 < free < 101 * 10 ** 6, free
    assert int(filled.header["memory-allocator-free"]) < 2 * MB  # before: all of it in use
    # (no mappings of its own: every live byte is a heap block's)
    assert numbers(thinned, "memory-heap-live") == [int(thinned.header["live-bytes"]),
                                                    int(thinned.header["live-blocks"])]
    # Two parked threads: their stacks, and the main thread's.
    assert numbers(parked, "memory-thread-stacks")[2] == 3
    assert numbers(thinned, "memory-tracer")[0] > 0

    # The shell's `memory`: the same split, live, a line a part.
    free_line = next(line for line in shell.splitlines() if "malloc holds free" in line)
    assert "MB" in free_line and 90 < float(free_line.split()[-2]) < 100, shell
    assert "the main arena's heap ([heap])" in shell and "thread stacks:" in shell, shell
    assert "glibc's arenas, by its own statistics:" in shell and "arena 2:" in shell, shell
    assert "free chunks by size:" in shell, shell
    assert int(asked.header["memory-allocator-free"]) > 97 * 10 ** 6

    # `report` answers "RSS grew, nothing leaks: why?", and names the slack.
    out = cli("report", str(tmp_path)).stdout
    assert "RSS grew by" in out and "malloc's free memory by" in out, out
    assert "(most in the main arena: " in out and "between live blocks -- fragmentation)" in out, out
    assert "glibc's own count, in 3 arenas: " in out, out
    assert "slack: " in out and "site_tiny" in out, out
    tiny_line = next(line for line in out.splitlines() if "site_tiny" in line and "a block" in line)
    assert "23 a block" in tiny_line and "100,000 blocks" in tiny_line
    doc = json.loads(cli("report", "--json", str(tmp_path)).stdout)["processes"][0]
    assert doc["live_slack"] == int(reports[-1].header["live-slack"])
    assert doc["memory"]["allocator_free"] == int(reports[-1].header["memory-allocator-free"])
    assert len(doc["memory"]["malloc_arenas"]) == 3, doc["memory"]


JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


@pytest.mark.skipif(not os.path.exists(JEMALLOC), reason="needs Debian's libjemalloc2")
def test_jemallocs_own_statistics(tmp_path):
    """jemalloc's stats.*, asked by the reporter and answered by the
    program's next allocation (tests/programs/jemallocstats.c): equal to
    what the program's own mallctl says right after; an idle program keeps
    its last answer, said with its age; report and the shell say where
    jemalloc's free memory is."""
    prog = compile_program("jemallocstats.c", f"-l:{os.path.basename(JEMALLOC)}")
    t = Traced([prog], tmp_path)
    try:
        t.expect("kept")
        t.resume()                      # it churns a small block a millisecond
        churning = t.signal_report(1)
        t.resume()                      # it stops, and says what its own mallctl says
        own = [int(w) for w in t.proc.stdout.readline().decode().split()[1:]]
        t.expect("idle")
        idle = t.signal_report(2)
        shown = cli("shell", str(t.pid), "-c", "memory")
        t.resume()
        assert t.finish() == 0, t.stderr
    finally:
        t.proc.kill()
    words = churning.header["allocator-stats"].split()
    assert words[0] == "jemalloc" and words[7] == "0.000", words   # answered for this report
    said = [int(w) for w in words[1:7]]
    allocated, active, metadata, resident, mapped, retained = said
    # Between its answer and the program's own: small blocks churned, freed.
    assert abs(allocated - own[0]) <= 4096 and active == own[1] and mapped == own[4], (said, own)
    assert 10000 * 1024 <= allocated < 10000 * 1024 + MB, said   # 1,000 bytes + trailer: 1 KiB classes
    assert active >= allocated + 9 * MB, said     # every other block freed: its pages stay active
    assert resident >= active and mapped >= active and metadata > 0, said
    assert churning.header["allocator-version"].startswith("jemalloc 5."), churning.header
    # Idle, it cannot answer: the last answer, with its age.
    idle_words = idle.header["allocator-stats"].split()
    assert idle_words[1:7] == words[1:7] and float(idle_words[7]) > 0.1, idle_words
    # report: jemalloc's free memory, by its own count -- from a report it
    # answered (the idle ones' stale answer is shown, not counted).
    answered = tmp_path / "answered"
    answered.mkdir()
    shutil.copy(report_path(str(tmp_path), t.prog, t.pid, 1), answered)
    out = cli("report", str(answered)).stdout
    assert "malloc's free memory 9." in out and "(jemalloc's own count: 9." in out, out
    assert "free inside pages that hold live blocks -- fragmentation" in out, out
    assert "jemalloc's own count" not in cli("report", str(tmp_path)).stdout
    assert "jemalloc, by its own statistics (" in shown.stdout and "no allocation since" in shown.stdout, \
        shown.stdout + shown.stderr
    # glibc's arenas: glibc's malloc serves (nearly) nothing here.
    assert glibc_free(churning) < MB


def glibc_free(report):
    n = report.header["memory-malloc-arenas"].split()[0]
    return sum(sum(numbers(report, f"memory-malloc-arena {i}")[k] for k in (2, 3, 5)) for i in range(int(n))) \
        if n.isdigit() else 0


def test_a_thread_running_when_its_stack_pointer_is_read_is_asked_again_until_it_waits():
    """The thread a report signal lands on runs its handler, then waits
    again: thread_stack_pointers asks a running thread again (bounded), so
    its stack is told.  tests/programs/spinner.c: a thread that runs until
    SIGUSR2, the main thread in pause()."""
    from libmemleak.daemon import memory_use
    prog = compile_program("spinner.c", "-pthread")
    p = subprocess.Popen([prog], stdout=subprocess.PIPE, text=True, env=BARE_ENV)
    try:
        assert p.stdout.readline().strip() == "spinning"
        # (The main thread is not asked again: its stack is [stack] anyway.
        # Until it is in pause(), it may still be on its way there.)
        deadline = time.monotonic() + 60
        while memory_use._stack_pointer(p.pid, str(p.pid)) in (None, memory_use.RUNNING):
            assert time.monotonic() < deadline, "the main thread never waited"
            time.sleep(0.01)
        # Running: no stack pointer, however long it is asked for.
        assert len(memory_use.thread_stack_pointers(p.pid, settle_s=0.05)) == 1  # the main thread's
        os.kill(p.pid, signal.SIGUSR2)
        # Stopped by the signal, it waits in pause(): asked again until then.
        sps = memory_use.thread_stack_pointers(p.pid, settle_s=60)
        assert len(sps) == 2, sps
        stacks = [m for m in memory_use.read_smaps(p.pid) if any(m.start <= sp < m.end for sp in sps)]
        assert len(stacks) == 2 and sum(m.path == "[stack]" for m in stacks) == 1, stacks
    finally:
        p.kill()
        p.wait()


def test_regions_behind_guard_pages_are_no_thread_stacks_of_a_one_thread_program(tmp_path):
    """#64 item 4: an rw mapping right above a PROT_NONE page is how glibc
    lays out a thread's stack -- and how JavaScript engines and allocators
    lay out their own regions: a one-thread program had 101 "thread
    stacks" (a 16-thread Firefox 1,947).  Guard pages now count only for
    threads whose stack pointer did not tell (guarded.c: five such regions,
    one thread)."""
    prog = compile_program("guarded.c")
    out = cli("run", "-q", prog, cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, "mapped\n"), out.stderr
    [name] = [n for n in os.listdir(tmp_path) if n.endswith(".memlog")]
    report = memlog.read(str(tmp_path / name))
    resident, mapped, count = numbers(report, "memory-thread-stacks")
    assert count == 1, report.header["memory-thread-stacks"]  # [stack] alone
    assert numbers(report, "memory-anonymous")[0] >= 5 * 65536, report.header["memory-anonymous"]


def test_an_arena_read_as_it_changed_is_said_torn_not_used():
    """#64 item 4: an exit report taken mid-teardown had one arena field
    reading 293 TB, used as it was.  An arena whose figures exceed all the
    process has mapped, or whose free memory exceeds what it has from the
    system, is torn: `partial`, and its line says not known."""
    from libmemleak.daemon import glibc_arenas
    raw = glibc_arenas.ffi.new("struct mlk_glibc_arena *")
    raw.system, raw.max_system, raw.top, raw.bins_bytes = 1 << 20, 1 << 20, 293 << 40, 4096
    torn = glibc_arenas._arena(raw[0], 1 << 30)
    raw.top = 8192
    fine = glibc_arenas._arena(raw[0], 1 << 30)
    assert torn.torn and not fine.torn
    lines = dict(glibc_arenas.header_lines(([fine, torn], 2)))
    assert lines["memory-malloc-arenas"] == "2 partial"
    assert lines["memory-malloc-arena 0"].startswith(f"{1 << 20} {1 << 20} 8192 4096")
    assert lines["memory-malloc-arena 1"] == "not known: read as the program changed it (torn)"


def test_the_slack_of_blocks_glibc_maps_on_their_own_is_what_it_is_bare(tmp_path):
    """#64 item 4: a block of 128 KiB and more is a mapping of its own,
    whole pages, where the trailer fits in the last page's rounding: its
    slack was 16 bytes a block short."""
    prog = compile_program("largeslack.c")
    bare = subprocess.run([prog], capture_output=True, text=True, env=BARE_ENV, timeout=60).stdout
    expected = int(bare.split()[1])
    out = cli("run", "-q", prog, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    report = memlog.read(report_path(str(tmp_path), "largeslack", only_pid(str(tmp_path), "largeslack"), 1))
    assert slack_by_site(report)["site_large"] == expected
