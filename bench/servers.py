#!/usr/bin/env python3
"""Servers under load (issue "Real servers"): redis, memcached and nginx from
Debian, each run bare, under libmemleak, under libmemleak recording an
event log (record=all, #32) and under heaptrack, interleaved round by round
(bare, libmemleak, libmemleak-record, heaptrack, bare, ...), on loopback
with a bounded load.  Prints throughput (requests/s, the median of the
rounds, and its ratio to bare: above 1.0 is faster), the server's peak RSS
(VmHWM; for nginx the master's plus its workers'), and what the recording
tools wrote: the event logs' bytes and bytes per record, heaptrack's file
(memcached is the threaded one, 4 worker threads, but allocates little
per request: its items live in its own slabs; redis with 4 I/O threads
served 2,600 requests/s bare on a 2-core machine, its threads spinning).

    python bench/servers.py                    # 3 rounds of each
    python bench/servers.py --rounds 5 --only redis

Loads: redis-benchmark (SET and GET, 50 clients, 1 KB values), a
pipelined memcached client here (set and get of 1 KB values), ab -c 8
against nginx (2 workers as nobody when run as root).  heaptrack and the
servers are Debian packages (apt-get install heaptrack redis-server
redis-tools memcached nginx-light apache2-utils); a missing one is
skipped with a note."""

import argparse
import glob
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from libmemleak import preload_path  # noqa: E402
from libmemleak.analysis import replay as R  # noqa: E402
from libmemleak.files.events import EventLog  # noqa: E402

TOOLS = ("bare", "libmemleak", "libmemleak-record", "heaptrack")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def start(tool, argv, work):
    env = dict(os.environ)
    for name in ("LD_PRELOAD", "MEMLEAK_CONFIG", "MEMLEAK_ROOT_PID", "MEMLEAK_KEEPER"):
        env.pop(name, None)
    if tool.startswith("libmemleak"):
        env["LD_PRELOAD"] = preload_path()
        env["MEMLEAK_CONFIG"] = f"mtraceinit,dir={work}" + (",record=all,record_cap=64G" if tool.endswith("record")
                                                            else "")
    elif tool == "heaptrack":
        argv = ["heaptrack", "-o", os.path.join(work, "ht"), *argv]
    return subprocess.Popen(argv, cwd=work, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def server_pids(port):
    """The pids listening on `port` and their children (nginx's workers)."""
    out = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True).stdout
    pids = {int(p) for p in re.findall(r"pid=(\d+)", out)}
    for pid in list(pids):
        kids = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True,
                              text=True).stdout.split()
        pids.update(int(k) for k in kids)
    return pids


def peak_rss_mib(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
        except (OSError, StopIteration):
            pass
    return total / 1024


def stop(proc, sig=signal.SIGTERM):
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def capture(tool, work):
    """(bytes, records) a recording tool wrote in `work` (records: None for
    heaptrack); None for the others."""
    if tool == "heaptrack":
        return sum(os.path.getsize(p) for p in glob.glob(os.path.join(work, "ht*"))), None
    if tool != "libmemleak-record":
        return None
    size = records = 0
    deadline = time.monotonic() + 60
    for path in glob.glob(os.path.join(work, "*.events")):
        while True:  # the reporter finishes the log as the server exits: its last counters
            with EventLog(path) as log:
                if log.stats or time.monotonic() > deadline:
                    records += R.replay(log).totals["records"]
                    break
            time.sleep(0.2)
        size += os.path.getsize(path)
    return size, records


# -- the servers and their loads ----------------------------------------------

def redis(tool, work):
    port = free_port()
    proc = start(tool, ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                        "--appendonly", "no"], work)
    if not wait_for_port(port):
        stop(proc)
        return None
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-n", "100000", "-c", "50", "-d",
                          "1000", "-r", "50000", "-t", "set,get", "--csv"],
                         capture_output=True, text=True, timeout=600).stdout
    rates = [float(m) for m in re.findall(r'^"(?:SET|GET)","([\d.]+)"', out, re.M)]
    rss = peak_rss_mib(server_pids(port))
    subprocess.run(["redis-cli", "-p", str(port), "shutdown", "nosave"], capture_output=True,
                   timeout=60)
    stop(proc)
    return (statistics.mean(rates) if rates else None), rss


def memcached(tool, work):
    port = free_port()
    user = ["-u", "nobody"] if os.geteuid() == 0 else []
    proc = start(tool, ["memcached", "-p", str(port), "-U", "0", "-l", "127.0.0.1", "-m", "256",
                        *user], work)
    if not wait_for_port(port):
        stop(proc)
        return None
    value = b"v" * 1000
    n, batch = 100_000, 500
    began = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as s:
        for start_at in range(0, n, batch):
            keys = range(start_at, start_at + batch)
            s.sendall(b"".join(b"set k%d 0 0 1000 noreply\r\n%s\r\n" % (k % 50_000, value)
                               for k in keys))
            s.sendall(b"".join(b"get k%d\r\n" % (k % 50_000) for k in keys))
            want, got = batch, b""
            while got.count(b"END\r\n") < want:
                got += s.recv(1 << 20)
    rate = 2 * n / (time.monotonic() - began)
    rss = peak_rss_mib(server_pids(port))
    stop(proc)
    return rate, rss


NGINX_CONF = """
{user}
worker_processes 2;
daemon off;
master_process on;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{ return 200 "hello\\n"; }}
    }}
}}
"""


def nginx(tool, work):
    port = free_port()
    conf = os.path.join(work, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_CONF.format(dir=work, port=port,
                                  user="user nobody nogroup;" if os.geteuid() == 0 else ""))
    os.chmod(work, 0o755)
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    proc = start(tool, [binary, "-c", conf, "-p", work], work)
    if not wait_for_port(port):
        stop(proc)
        return None
    out = subprocess.run(["ab", "-q", "-n", "40000", "-c", "8", f"http://127.0.0.1:{port}/"],
                         capture_output=True, text=True, timeout=600).stdout
    m = re.search(r"Requests per second:\s+([\d.]+)", out)
    rss = peak_rss_mib(server_pids(port))
    stop(proc, signal.SIGQUIT)
    return (float(m.group(1)) if m else None), rss


SERVERS = {
    "redis": (redis, ("redis-server", "redis-benchmark", "redis-cli")),
    "memcached": (memcached, ("memcached",)),
    "nginx": (nginx, ("ab",)),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="+", choices=sorted(SERVERS))
    args = ap.parse_args()
    tools = [t for t in TOOLS if t != "heaptrack" or shutil.which("heaptrack")]
    if "heaptrack" not in tools:
        print("note: heaptrack not installed: skipped")
    names = []
    for name in args.only or SERVERS:
        missing = [b for b in SERVERS[name][1] if not shutil.which(b)]
        if name == "nginx" and not (shutil.which("nginx") or os.path.exists("/usr/sbin/nginx")):
            missing.append("nginx")
        if missing:
            print(f"note: {name} skipped: {', '.join(missing)} not installed")
        else:
            names.append(name)
    results = {(n, t): [] for n in names for t in tools}
    for r in range(args.rounds):
        for name in names:
            for tool in tools:
                with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as work:
                    got = SERVERS[name][0](tool, work)
                    if got and got[0]:
                        got = (*got, capture(tool, work))
                        results[name, tool].append(got)
                print(f"round {r + 1} {name:13s} {tool:17s} "
                      + (f"{got[0]:10.0f} req/s  {got[1]:7.1f} MiB" if got and got[0] else "failed"),
                      flush=True)
    rule = "=============  =================  ==========  =======  ============  ============  ======="
    print(f"\n{rule}\nserver         tool               req/s       x bare   peak RSS MiB  wrote bytes   B/event\n{rule}")
    for name in names:
        bare = statistics.median(x[0] for x in results[name, "bare"]) if results[name, "bare"] else None
        for tool in tools:
            runs = results[name, tool]
            if not runs:
                print(f"{name:13s}  {tool:17s}  {'failed':>10s}")
                continue
            rate = statistics.median(x[0] for x in runs)
            rss = max(x[1] for x in runs)
            ratio = f"{rate / bare:7.2f}" if bare else "      -"
            wrote = [x[2] for x in runs if x[2]]
            size = statistics.median(w[0] for w in wrote) if wrote else None
            per = statistics.median(w[0] / w[1] for w in wrote) if wrote and wrote[0][1] else None
            print(f"{name:13s}  {tool:17s}  {rate:10.0f}  {ratio}  {rss:12.1f}  "
                  f"{f'{size:12,.0f}' if size is not None else '':>12s}  {f'{per:7.2f}' if per else '':>7s}")
    print(rule)


if __name__ == "__main__":
    main()
