"""`libmemleak exporter` (#61): every traced process this user may read,
served to Prometheus from its segment -- the same bytes and blocks its
own report says, its reports untouched by the scrapes -- and scraped by a
real Prometheus server on loopback."""

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import urllib.error
import urllib.request

import pytest

from helpers import BENCH_PROGRAMS, CLI_ENV, Traced, cli, cli_argv, compile_program, wait_for
from libmemleak.files import memlog
from libmemleak.live.client import open_segment


def start_exporter(cwd, *options):
    """An exporter on a free loopback port: (process, base URL)."""
    p = subprocess.Popen(cli_argv("exporter", "--listen", "127.0.0.1:0", *options), cwd=cwd, env=CLI_ENV,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()
    assert line.startswith("libmemleak: exporter serving http://127.0.0.1:"), line
    return p, line.split()[3].removesuffix("/metrics")


@contextlib.contextmanager
def exporter_beside(traced, cwd, *options):
    """An exporter while `traced` (a Traced program, or several) runs: its
    base URL; both stopped at the end, whatever happened."""
    exporter, base = start_exporter(cwd, *options)
    try:
        yield base
    finally:
        for t in traced:
            if t.proc.poll() is None:
                t.proc.kill()
        stop(exporter)


def scrape(base):
    with urllib.request.urlopen(f"{base}/metrics", timeout=60) as r:
        assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        return r.read().decode()


def value(page, metric, pid):
    prefix = f'{metric}{{pid="{pid}",'
    found = [line.rpartition(" ")[2] for line in page.splitlines() if line.startswith(prefix)]
    assert len(found) == 1, (metric, pid, page)
    return int(found[0])


def stop(p):
    p.send_signal(signal.SIGTERM)  # (what a service manager sends; a background job ignores SIGINT)
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def test_metrics_say_what_the_programs_own_report_says_and_leave_its_reports_alone(workdir):
    prog = compile_program("nsleak.c")  # 7 x 300 bytes, then a checkpoint
    t = Traced([prog], workdir)
    with exporter_beside([t], workdir) as base:
        assert t.proc.stdout.readline() == f"pid in namespace {t.pid}\n".encode()
        t.expect("leaked")
        first = memlog.read(cli("snapshot", t.pid, cwd=workdir).stdout.strip())
        page = scrape(base)
        live, blocks = int(first.header["live-bytes"]), int(first.header["live-blocks"])
        assert live >= 2100 and blocks >= 7
        assert value(page, "libmemleak_live_bytes", t.pid) == live
        assert value(page, "libmemleak_live_blocks", t.pid) == blocks
        assert value(page, "libmemleak_allocated_bytes_total", t.pid) == int(first.header["allocated-bytes"])
        assert value(page, "libmemleak_freed_bytes_total", t.pid) == (
            int(first.header["allocated-bytes"]) - live)
        assert value(page, "libmemleak_blind", t.pid) == 0
        assert value(page, "libmemleak_rss_bytes", t.pid) > live
        # glibc's free memory by its arenas' own count, as the report reads it
        # (the program waits at its checkpoint: nothing moves between the two)
        free = sum(int(v.split()[2]) + int(v.split()[3]) + int(v.split()[5])
                   for k, v in first.header.items() if k.startswith("memory-malloc-arena "))
        assert value(page, "libmemleak_malloc_free_bytes", t.pid) == free > 0, page
        assert f'libmemleak_live_bytes{{pid="{t.pid}",program="nsleak"}} {live}' in page
        scrape(base)
        # The scrapes moved no baseline: the next report's change is nothing.
        second = memlog.read(cli("snapshot", t.pid, cwd=workdir).stdout.strip())
        assert (second.header["change-bytes"], second.header["change-blocks"]) == ("+0", "+0")
        t.resume()
        assert t.finish() == 0, t.stderr
        # A process that ended is no longer served.
        wait_for(lambda: f'pid="{t.pid}"' not in scrape(base), "the ended process left out")


def test_a_bad_listen_address_is_one_line(workdir):
    out = cli("exporter", "--listen", "nowhere", cwd=workdir)
    assert (out.returncode, out.stderr) == (2, "libmemleak: exporter: --listen 'nowhere': give HOST:PORT "
                                               "(e.g. 127.0.0.1:9465)\n")
    out = cli("exporter", "--suspects", "51", cwd=workdir)
    assert (out.returncode, out.stderr) == (2, "libmemleak: exporter: --suspects 51: give 0 to 50\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = cli("exporter", "--listen", f"127.0.0.1:{port}", cwd=workdir)
    assert (out.returncode, out.stderr) == (1, f"libmemleak: exporter: cannot serve on 127.0.0.1:{port}: "
                                               "Address already in use\n")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not shutil.which("prometheus"), reason="prometheus is not installed")
def test_prometheus_scrapes_the_exporter(workdir, tmp_path):
    prog = compile_program("nsleak.c")
    t = Traced([prog], workdir)
    exporter, base = start_exporter(workdir)
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\n"
                      "scrape_configs:\n  - job_name: libmemleak\n"
                      f"    static_configs:\n      - targets: ['{base.removeprefix('http://')}']\n")
    prometheus = subprocess.Popen(["prometheus", f"--config.file={config}",
                                   f"--storage.tsdb.path={tmp_path / 'data'}",
                                   f"--web.listen-address=127.0.0.1:{port}"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert t.proc.stdout.readline() == f"pid in namespace {t.pid}\n".encode()
        t.expect("leaked")
        live = int(memlog.read(cli("snapshot", t.pid, cwd=workdir).stdout.strip()).header["live-bytes"])
        query = f'libmemleak_live_bytes{{pid="{t.pid}"}}'
        url = f"http://127.0.0.1:{port}/api/v1/query?query={urllib.request.quote(query)}"

        def answered():
            try:
                with urllib.request.urlopen(url, timeout=10) as r:
                    result = json.load(r)["data"]["result"]
            except OSError:
                return None
            return result or None

        wait_for(answered, "Prometheus's answer", timeout=120)
        (series,) = answered()
        assert series["metric"] == {"__name__": "libmemleak_live_bytes", "instance": base.removeprefix("http://"),
                                    "job": "libmemleak", "pid": str(t.pid), "program": "nsleak"}
        assert int(series["value"][1]) == live
        t.resume()
        assert t.finish() == 0, t.stderr
    finally:
        if t.proc.poll() is None:
            t.proc.kill()
        prometheus.terminate()
        prometheus.wait(timeout=60)
        stop(exporter)


GO = shutil.which("go")


def go_pprof_raw(url, tmp_path):
    """`go tool pprof -raw URL`: Go's own reader of the profile, fetched as
    it fetches a Go service's."""
    out = subprocess.run([GO, "tool", "pprof", "-raw", url], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PPROF_TMPDIR=str(tmp_path), GOCACHE=str(tmp_path / "gocache"),
                                  HOME=str(tmp_path)))
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.skipif(not GO, reason="go is not installed")
@pytest.mark.parametrize("config, period", [(None, "1"), ("mtraceinit,sample=524288", "524288")], ids=["exact", "sampled"])
def test_go_tool_pprof_reads_a_process_heap_as_from_a_go_service(workdir, tmp_path, config, period):
    prog = compile_program("nsleak.c")  # 7 x 300 bytes from site_ns, then a checkpoint
    t = Traced([prog], workdir, config=config)
    with exporter_beside([t], workdir) as base:
        assert t.proc.stdout.readline() == f"pid in namespace {t.pid}\n".encode()
        t.expect("leaked")
        raw = go_pprof_raw(f"{base}/debug/pprof/heap?pid={t.pid}", tmp_path)
        assert f"PeriodType: space bytes\nPeriod: {period}\n" in raw, raw
        assert "alloc_objects/count alloc_space/bytes inuse_objects/count inuse_space/bytes[dflt]" in raw, raw
        if config is None:  # exact: the 7 blocks of site_ns, as the report counts them
            samples, rest = raw.split("Samples:\n")[1].split("Locations\n")
            locations, mappings = rest.split("Mappings\n")
            site = next(line.split(":")[0].strip() for line in locations.splitlines() if " site_ns " in line)
            rows = [values.split() for values, _, ids in (line.partition(":") for line in samples.splitlines()[1:])
                    if ids.split()[:1] == [site]]
            assert rows == [["7", "2100", "7", "2100"]], raw
            assert f" {prog} " in mappings and "[FN][FL][LN][IN]" in mappings, mappings
        allocs = go_pprof_raw(f"{base}/debug/pprof/allocs?pid={t.pid}", tmp_path)
        assert "alloc_space/bytes[dflt]" in allocs, allocs
        t.resume()
        assert t.finish() == 0, t.stderr


def _site_rows(raw, function):
    """`go tool pprof -raw`'s sample rows whose innermost location is
    `function`'s: [values...] each."""
    samples, rest = raw.split("Samples:\n")[1].split("Locations\n")
    locations = rest.split("Mappings\n")[0]
    sites = {line.split(":")[0].strip() for line in locations.splitlines() if f" {function} " in line}
    return [values.split() for values, _, ids in (line.partition(":") for line in samples.splitlines()[1:])
            if ids.split()[:1] and ids.split()[0] in sites]


@pytest.mark.skipif(not GO, reason="go is not installed")
def test_each_scrape_says_what_is_live_then_though_the_tables_are_kept(workdir, tmp_path):
    """The exporter keeps a process's frames and the profile's tables from
    one scrape to the next (a Python service's second scrape: 8 s -> 0.6
    s): each profile still counts what is live at its scrape, stacks new
    since the last one among them."""
    prog = compile_program("attachee.c")
    t = Traced([prog], workdir)
    with exporter_beside([t], workdir) as base:
        url = f"{base}/debug/pprof/heap?pid={t.pid}"
        t.expect("attach")
        assert _site_rows(go_pprof_raw(url, tmp_path), "leak_after_attach") == []
        t.resume()
        assert t.proc.stdout.readline() == b"sum 99000\n"
        t.expect("counted")
        assert _site_rows(go_pprof_raw(url, tmp_path), "leak_after_attach") == [["10", "1000", "10", "1000"]]
        t.resume()
        t.expect("detach")
        assert _site_rows(go_pprof_raw(url, tmp_path), "leak_after_attach") == [["10", "1000", "5", "500"]]
        t.resume()
        assert t.finish() == 7, t.stderr


def test_metrics_are_answered_while_a_profile_is_made(workdir):
    """A first profile of a process of many stacks takes seconds to make
    (each stack keyed, symbolized); the exporter served one request at a
    time, so Prometheus's scrapes waited behind it -- past their timeout,
    for a Python service's.  Now /metrics is answered meanwhile, with what
    the process's last sample said."""
    prog = compile_program(os.path.join(BENCH_PROGRAMS, "scale.c"), "-O2", name="scale")
    t = Traced([prog, "2", "65536", "16"], workdir, config="mtraceinit,depth=40")
    with exporter_beside([t], workdir) as base:
        t.expect("ready")
        exporter = next(p for p in _children() if "exporter" in _cmdline(p))
        before = urllib.request.urlopen(f"{base}/metrics", timeout=120).read().decode()
        order = []
        def profile():
            urllib.request.urlopen(f"{base}/debug/pprof/heap?pid={t.pid}", timeout=600).read()
            order.append("profile")
        busy = _cpu_seconds(exporter) + 0.5  # (a /metrics of it costs a hundredth of that)
        thread = threading.Thread(target=profile)
        thread.start()
        wait_for(lambda: _cpu_seconds(exporter) > busy, "the profile being made")
        metrics = urllib.request.urlopen(f"{base}/metrics", timeout=120).read().decode()
        order.append("metrics")
        thread.join(timeout=600)
        assert order == ["metrics", "profile"]
        def live(text):  # (its line: other traced processes of this user are served too)
            return next(line for line in text.splitlines()
                        if line.startswith(f'libmemleak_live_bytes{{pid="{t.pid}"'))
        assert live(metrics) == live(before), metrics
        assert int(live(metrics).split()[-1]) >= 65536 * 24
        t.resume()
        assert t.finish() == 0, t.stderr


def test_a_scraper_that_gives_up_leaves_the_profile_made_and_no_traceback(workdir, tmp_path):
    """A scraper's timeout (Pyroscope's, Parca's: ~10 s) before a first
    profile is made: the exporter goes on making it, says nothing of the
    peer that left, and the next scrape is answered from what was kept --
    the same samples a patient scraper gets."""
    prog = compile_program(os.path.join(BENCH_PROGRAMS, "scale.c"), "-O2", name="scale")
    t = Traced([prog, "2", "65536", "16"], workdir, config="mtraceinit,depth=40")
    exporter, base = start_exporter(workdir)
    try:
        t.expect("ready")
        url = f"{base}/debug/pprof/heap?pid={t.pid}"
        with pytest.raises(OSError):  # (timed out: the profile takes seconds)
            urllib.request.urlopen(url, timeout=0.2).read()
        raw = go_pprof_raw(url, tmp_path)
        rows = _site_rows(raw, "step")  # (leaf's call is in it: the samples of the 65,536 blocks)
        assert sum(int(r[3]) for r in rows) == 65536 * 24 and sum(int(r[2]) for r in rows) == 65536
        t.resume()
        assert t.finish() == 0, t.stderr
    finally:
        if t.proc.poll() is None:
            t.proc.kill()
        stop(exporter)
    said = exporter.stderr.read()
    assert "Traceback" not in said and "Error" not in said, said


def _cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children():
    me = os.getpid()
    with open(f"/proc/{me}/task/{me}/children") as f:
        return [int(p) for p in f.read().split()]


def _cmdline(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().decode("utf-8", "replace")


def test_a_profile_of_no_process_is_said(workdir):
    exporter, base = start_exporter(workdir)
    try:
        for query, code in (("", 400), ("?pid=x", 400), (f"?pid={os.getpid()}", 404)):
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(f"{base}/debug/pprof/heap{query}", timeout=60)
            assert e.value.code == code
    finally:
        stop(exporter)


def test_metrics_rank_the_suspects_as_report_ranks_the_reports(workdir):
    """slowleaks: a report at each of its rounds; the exporter's suspects
    are `libmemleak report`'s over the same reports, in its order, with its
    bytes -- at most K of them, the label set bounded."""
    prog = compile_program("slowleaks.c", "-lpthread")
    t = Traced([prog], workdir, config="mtraceinit")
    with exporter_beside([t], workdir, "--suspects", "2") as base:
        for seq in range(1, 7):
            t.expect("round")
            t.signal_report(seq)
            if seq < 6:
                t.resume()
        page = scrape(base)
        shown = cli("report", "--json", workdir, cwd=workdir)
        assert shown.returncode == 0, shown.stderr
        (doc,) = [p for p in json.loads(shown.stdout)["processes"] if p["pid"] == t.pid]
        expected = [(rank, s["live_bytes"]) for rank, s in enumerate(doc["suspects"][:2], 1)]
        served = [line for line in page.splitlines()  # (the machine's other traced processes are served too)
                  if line.startswith(f'libmemleak_suspect_live_bytes{{pid="{t.pid}",')]
        assert len(served) == 2 == len(expected), (served, doc["suspects"])
        for line, (rank, live) in zip(served, expected):
            assert f'pid="{t.pid}",program="slowleaks",rank="{rank}",site="' in line and line.endswith(f" {live}")
        assert 'site="site_leak (slowleaks.c:' in served[0], served
        t.resume()
        for _ in range(2):
            t.expect("round")
            t.resume()
        assert t.finish() == 0, t.stderr


def test_a_spoilt_segment_or_report_leaves_the_exporter_serving_the_others(workdir):
    """A process may scribble over its own segment and its report files:
    the exporter reads them, one process's garbage costs only that
    process, never a traceback."""
    prog = compile_program("nsleak.c")
    spoilt, clean = Traced([prog], workdir), Traced([prog], workdir)
    exporter, base = start_exporter(workdir)
    try:
        for t in (spoilt, clean):
            assert t.proc.stdout.readline() == f"pid in namespace {t.pid}\n".encode()
            t.expect("leaked")
        segment, fd = open_segment(spoilt.pid)
        try:
            h = segment.header
            h.report_seq = 0x7FFFFFFF  # "reports" far past any
            view = memoryview(segment._map)
            view[h.stacks_off:h.stacks_off + 4096] = os.urandom(4096)  # its stack table
            view.release()
        finally:
            segment.close()
            os.close(fd)
        page = scrape(base)
        assert value(page, "libmemleak_live_blocks", clean.pid) >= 7
        with urllib.request.urlopen(f"{base}/debug/pprof/heap?pid={clean.pid}", timeout=60) as r:
            assert r.status == 200
        for t in (spoilt, clean):
            t.resume()
            t.finish()
    finally:
        for t in (spoilt, clean):
            if t.proc.poll() is None:
                t.proc.kill()
        stop(exporter)
    assert "Traceback" not in exporter.stderr.read()
