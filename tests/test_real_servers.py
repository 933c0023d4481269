"""Real servers from Debian's packages, as people run them, on loopback with
a bounded load (issue "Real servers"): redis (jemalloc in a shared
library), memcached (which shuts down on SIGUSR1), nginx (workers that
run as nobody), PostgreSQL (forked backends, shared memory) and HAProxy
(its own pools).  .ci/run installs them; a machine without them skips."""

import contextlib
import glob
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from helpers import BENCH_PROGRAMS, CLI_ENV, cli, cli_argv, reports_of, wait_for_reports
from libmemleak.files import memlog

sys.path.insert(0, os.path.dirname(BENCH_PROGRAMS))
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the server drops privileges: needs root")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def traced(argv, cwd):
    return subprocess.Popen(cli_argv("run", "-q", *argv), cwd=cwd, env=CLI_ENV, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


@contextlib.contextmanager
def serving(proc):
    """The server process, killed at the end if a failure left it running."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def wait_for_port(port, proc, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


def snapshot(pid):
    r = cli("snapshot", pid)
    assert r.returncode == 0, r.stderr
    report = memlog.read(r.stdout.strip())
    assert report.header["reason"] == "snapshot"
    return report


@pytest.mark.skipif(not shutil.which("redis-server") or not shutil.which("redis-benchmark"),
                    reason="needs Debian's redis-server and redis-tools")
def test_redis_live_bytes_match_its_own_count(workdir):
    """Debian's redis uses jemalloc from a shared library: its arenas were
    counted on top of the blocks (live-bytes 122 MB for a 89 MB process).
    With ~1 KB values jemalloc's size classes round little, so libmemleak's
    live bytes (requested sizes) land within 10% of redis's used_memory
    (jemalloc's allocated bytes, rounded to its classes)."""
    port = free_port()
    server = traced(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                     "--appendonly", "no"], workdir)
    with serving(server):
        wait_for_port(port, server)
        subprocess.run(["redis-benchmark", "-p", str(port), "-n", "20000", "-d", "1000", "-t", "set",
                        "-r", "10000", "-q"], capture_output=True, timeout=120, check=True)
        report = snapshot(server.pid)
        info = subprocess.run(["redis-cli", "-p", str(port), "info", "memory"], capture_output=True,
                              text=True, timeout=30).stdout
        used = int(next(line.split(":")[1] for line in info.splitlines()
                        if line.startswith("used_memory:")))
        live = int(report.header["live-bytes"])
        assert abs(live - used) <= 0.10 * used, (live, used)
        assert not [e for e in report.entries
                    if e.frames and "libjemalloc" in (e.frames[0].module or "") and e.bytes > 1 << 20]
        assert reports_of(str(workdir), "redis-server", server.pid)
        subprocess.run(["redis-cli", "-p", str(port), "shutdown", "nosave"], capture_output=True,
                       timeout=30)
        assert server.wait(timeout=60) == 0
    reasons = [r.header["reason"] for r in wait_for_reports(str(workdir), "redis-server",
                                                             server.pid, 2)]
    assert reasons == ["snapshot", "exit"]
    # redis's own allocation layer (zmalloc & co) is folded into its callers;
    # OpenSSL's start-up, many stacks but few allocations, is not taken for one
    text = cli("report", str(workdir)).stdout
    [folded] = [line for line in text.splitlines() if "allocation layer folded" in line]
    assert "zmalloc (an allocation function)" in folded and "EVP_add_cipher" not in folded, folded


def memcached_command(port, line, read_until=b"END\r\n"):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(line)
        data = b""
        while not data.endswith(read_until):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


@needs_root
@pytest.mark.skipif(not shutil.which("memcached"), reason="needs Debian's memcached")
def test_memcached_reports_without_the_signal_that_stops_it(workdir):
    """memcached's SIGUSR1 handler shuts it down: snapshot asks without it,
    memcached serves on, and it was told once that USR1 is its own."""
    port = free_port()
    os.chmod(workdir, 0o755)
    server = traced(["memcached", "-p", str(port), "-U", "0", "-l", "127.0.0.1", "-u", "nobody",
                     "-m", "64"], workdir)
    with serving(server):
        wait_for_port(port, server)
        value = b"x" * 1000
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            for i in range(2000):
                s.sendall(b"set key%d 0 0 %d\r\n%s\r\n" % (i, len(value), value))
                assert s.recv(64) == b"STORED\r\n"
        report = snapshot(server.pid)
        assert int(report.header["live-bytes"]) > 0
        assert memcached_command(port, b"get key7\r\n").startswith(b"VALUE key7 0 1000\r\n")
        assert server.poll() is None  # still serving
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=60)
    said = [line for line in err.decode().splitlines() if "installs its own handler" in line]
    assert len(said) == 1 and "SIGUSR1" in said[0], err
    reasons = [r.header["reason"] for r in wait_for_reports(str(workdir), "memcached",
                                                             server.pid, 2)]
    assert reasons[0] == "snapshot" and reasons[-1] in ("exit", "death")


from servers import NGINX_CONF  # noqa: E402 -- bench/servers.py runs the same nginx


def children(pid):
    out = subprocess.run(["ps", "-o", "pid=,uid=", "--ppid", str(pid)], capture_output=True,
                         text=True).stdout
    return [tuple(map(int, line.split())) for line in out.splitlines() if line.strip()]


@needs_root
@pytest.mark.skipif(not shutil.which("nginx") and not os.path.exists("/usr/sbin/nginx"),
                    reason="needs Debian's nginx")
def test_nginx_workers_running_as_nobody_report_on_request(workdir):
    """nginx's workers drop to nobody; its USR1 reopens the logs.  Every
    worker reports on `snapshot`; a USR1 to a worker stays nginx's."""
    port = free_port()
    os.chmod(workdir, 0o755)
    conf = workdir / "nginx.conf"
    conf.write_text(NGINX_CONF.format(dir=workdir, port=port, user="user nobody nogroup;"))
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    master = traced([nginx, "-c", str(conf), "-p", str(workdir)], workdir)
    with serving(master):
        wait_for_port(port, master)
        for _ in range(50):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
                assert r.read() == b"hello\n"
        deadline = time.monotonic() + 10
        while len(children(master.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        workers = children(master.pid)
        assert len(workers) == 2 and all(uid == 65534 for _, uid in workers), workers
        for pid, _ in workers:
            report = snapshot(pid)
            assert report.header["parent-pid"] == str(master.pid)
        # nginx's own USR1 (reopen the logs) still works and writes no report
        pid = workers[0][0]
        os.kill(pid, signal.SIGUSR1)
        time.sleep(1.0)
        assert len(reports_of(str(workdir), "nginx", pid)) == 1
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
            assert r.read() == b"hello\n"
        master.send_signal(signal.SIGQUIT)  # graceful stop
        assert master.wait(timeout=60) == 0
    for pid, _ in workers:
        reasons = [r.header["reason"] for r in wait_for_reports(str(workdir), "nginx", pid, 2)]
        assert reasons == ["snapshot", "exit"], (pid, reasons)


def postgres_bin():
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return os.path.dirname(found[-1]) if found else None


def as_server_user():
    """PostgreSQL refuses to run as root.  As root, a user namespace makes
    it the postgres user (nobody where there is none) while its files stay
    root's: the test's Python, under /root, stays readable."""
    if os.geteuid() != 0:
        return []
    try:
        user = pwd.getpwnam("postgres")
    except KeyError:
        user = pwd.getpwnam("nobody")
    return ["unshare", "--user", f"--map-user={user.pw_uid}", f"--map-group={user.pw_gid}"]


@pytest.mark.skipif(not postgres_bin() or not shutil.which("psql"), reason="needs Debian's postgresql")
def test_postgresql_shared_memory_counts_once_in_the_postmaster(workdir):
    """PostgreSQL's main segment (an anonymous MAP_SHARED mapping) was live
    in every forked backend too, and filled 83% of a flamegraph of the
    run: it is the postmaster's, counted there once, with how much of it
    the postmaster touched; no backend counts it."""
    pgbin, user = postgres_bin(), as_server_user()
    data, sockets = os.path.join(workdir, "data"), str(workdir)
    init = subprocess.run([*user, os.path.join(pgbin, "initdb"), "-D", data, "-A", "trust", "-U", "postgres"],
                          capture_output=True, text=True, timeout=300)
    if init.returncode != 0 and user and "unshare" in init.stderr:
        pytest.skip(f"no user namespaces here: {init.stderr.strip()}")
    assert init.returncode == 0, init.stderr
    port = free_port()
    server = subprocess.Popen([*user, *cli_argv("run", "-q", os.path.join(pgbin, "postgres"), "-D", data,
                                                "-k", sockets, "-p", port, "-c", "listen_addresses=",
                                                "-c", "shared_buffers=16MB", "-c", "huge_pages=off")],
                              cwd=workdir, env=CLI_ENV, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    with serving(server):
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(sockets, f".s.PGSQL.{port}")):
            assert server.poll() is None and time.monotonic() < deadline, server.communicate()
            time.sleep(0.1)
        for _ in range(3):  # three backends, forked and gone
            q = subprocess.run(["psql", "-h", sockets, "-p", str(port), "-U", "postgres", "-At", "-c",
                                "select count(*) > 100 from pg_class"], capture_output=True, text=True,
                               timeout=120)
            assert q.stdout.strip() == "t", q.stderr
        report = snapshot(server.pid)
        [segment] = [e for e in report.entries if "kind=shared" in e.extra]
        fields = dict(x.split("=", 1) for x in segment.extra)
        assert segment.bytes >= 16 << 20 and segment.blocks == 1, segment
        assert 0 < int(fields["touched"]) <= segment.bytes
        assert report.header["shared-mappings"].startswith(f"{segment.bytes} bytes in 1 shared (MAP_SHARED) "
                                                          f"mapping, {fields['touched']} touched")
        server.send_signal(signal.SIGTERM)  # smart shutdown
        assert server.wait(timeout=120) == 0
    # the children's last reports: the keeper may still be writing them
    # (on a loaded machine, seconds after the postmaster is gone)
    deadline = time.monotonic() + 120
    while True:
        names = [n for n in os.listdir(workdir) if n.startswith("postgres-") and n.endswith(".memlog")]
        others = {int(n.split("-")[1]) for n in names} - {server.pid}
        if len(others) >= 3 + 3 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(others) >= 3 + 3, names  # the backends, the checkpointer, the writers...
    for pid in others:
        for r in wait_for_reports(str(workdir), "postgres", pid, 1):
            assert not [e for e in r.entries if "kind=shared" in e.extra], (pid, r.header)
            assert "shared-mappings" not in r.header
    # the postmaster gives it back as it stops
    final = wait_for_reports(str(workdir), "postgres", server.pid, 2)[-1]
    assert final.header["reason"] == "exit"
    assert [(e.bytes, e.blocks) for e in final.entries if "kind=shared" in e.extra] == [(-segment.bytes, -1)]
    # ... and `report`, which says what is live now, no longer counts it
    text = cli("report", "--pid", server.pid, workdir).stdout
    assert "live now:" in text and "shared mappings" not in text, text


HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None)
HAPROXY_CONF = """global
    maxconn 200
defaults
    mode http
    timeout connect 5s
    timeout client 10s
    timeout server 10s
frontend fe
    bind 127.0.0.1:{port}
    http-request return status 200 content-type text/plain string ok
"""


@pytest.mark.skipif(not HAPROXY, reason="needs Debian's haproxy")
def test_haproxys_pools_are_named_in_the_way_with_their_switch(workdir):
    """#64 item 17, on the program it came from: HAProxy serves its
    connections' buffers and sessions from pools that it refills from
    malloc, so their blocks are blamed on whichever request refilled them.
    `report` says a pool is in the way and names HAProxy's own switch;
    under that switch (-dMno-merge,no-cache) what is live through the pools
    is what HAProxy holds, each block at its own stack, not the cache's
    refills.  (The note stays under the switch: the pools' functions are
    still on the path, and a report cannot see the command line.)"""
    outcomes = {}
    for switch in ([], ["-dMno-merge,no-cache"]):
        work = workdir / ("plain" if not switch else "no-cache")
        work.mkdir()
        port = free_port()
        conf = work / "haproxy.cfg"
        conf.write_text(HAPROXY_CONF.format(port=port))
        server = traced([HAPROXY, "-db", *switch, "-f", str(conf)], work)
        with serving(server):
            wait_for_port(port, server)
            for _ in range(300):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
                    assert r.read() == b"ok"
            snapshot(server.pid)
            shown = cli("report", work).stdout  # (the snapshot: haproxy still serves)
            server.send_signal(signal.SIGTERM)
            server.communicate(timeout=60)
        outcomes[bool(switch)] = [line.strip() for line in shown.splitlines() if "pool in the way" in line]
    assert len(outcomes[False]) == 1 and "through HAProxy's pools" in outcomes[False][0], outcomes
    assert outcomes[False][0].endswith("run haproxy with -dMno-merge,no-cache (HAProxy 2.6 and later) for "
                                       "each allocation's own stack")
    live = {k: int(re.search(r"\(([\d,]+) bytes live\)", v[0]).group(1).replace(",", "")) if v else 0
            for k, v in outcomes.items()}
    assert live[True] * 10 < live[False], outcomes  # (300 requests: 174,200 bytes cached, 2,240 held)
