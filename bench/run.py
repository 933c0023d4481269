#!/usr/bin/env python3
"""libmemleak benchmark: real programs run bare, under libmemleak, under
heaptrack and (where not too slow) under valgrind memcheck, interleaved in
the same run (A B C D A B C D ...).  Inputs are generated here; nothing is
downloaded.  Prints and writes a table of median wall time, ratio to bare
and peak RSS (program, and for libmemleak its reporter).  A server
workload (kv-server: bench/programs/kvserver.cc, 4 connections, a thread
each) is timed by its bare client's wall time to have a fixed load served
-- 1 / throughput -- and its RSS is the server's.

    python bench/run.py                 # all workloads, 3 rounds
    python bench/run.py --rounds 5 --only churn sqlite3
    python bench/run.py --no-valgrind --out bench/out/results.rst
"""

import argparse
import json
import os
import random
import re
import shutil
import statistics
import signal
import subprocess
import time
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from libmemleak import preload_path  # noqa: E402


# -- inputs -------------------------------------------------------------------

def gen_sqlite(out, rows=150_000):
    path = os.path.join(out, "sqlite.sql" if rows == 150_000 else f"sqlite-{rows}.sql")
    if not os.path.exists(path):
        rnd = random.Random(1)
        with open(path, "w") as f:
            f.write("create table t(id integer, name text, grp integer, val real);\nbegin;\n")
            for i in range(rows):
                f.write(f"insert into t values({i}, 'name{rnd.randrange(10**6)}', {i % 977}, {rnd.random()});\n")
            f.write("commit;\ncreate index t_grp on t(grp);\n")
            f.write("select grp, count(*), avg(val) from t group by grp order by 2 desc limit 3;\n")
            f.write("select count(*) from t a join t b on a.grp = b.grp and b.id = a.id + 977 where a.id < 5000;\n")
    return path


def gen_json(out):
    path = os.path.join(out, "data.json")
    if not os.path.exists(path):
        rnd = random.Random(2)
        items = [{"id": i, "name": f"user{rnd.randrange(10**6)}", "tags": [f"t{rnd.randrange(50)}" for _ in range(5)],
                  "score": rnd.random(), "nested": {"a": i % 13, "b": str(i)}} for i in range(190_000)]
        with open(path, "w") as f:
            json.dump(items, f)
    return path


def gen_c(out, functions=1500):
    path = os.path.join(out, "big.c" if functions == 1500 else f"big-{functions}.c")
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write("unsigned long strlen(const char *);\nstruct s { int a; double b; char c[16]; };\n")
            for i in range(functions):
                f.write(f"int f{i}(struct s *p, int n) {{ int acc = {i};\n"
                        f"  for (int k = 0; k < n; k++) {{ acc += p[k].a * {i % 7 + 1} + (int)p[k].b;\n"
                        f"    if (acc > {1000 + i}) acc ^= (int)strlen(p[k].c); }}\n"
                        f"  return acc + (n > {i % 10} ? f{max(i - 1, 0)}(p, n - 1) : 0); }}\n")
    return path


def gen_python(out):
    path = os.path.join(out, "dicts.py")
    with open(path, "w") as f:
        f.write("d = {f'key{i}': str(i) for i in range(2_000_000)}\n"
                "b = [bytes(1024) for _ in range(200_000)]\n"
                "print(len(d), len(b))\n")
    return path


def gen_churn(out):
    exe = os.path.join(out, "churn")
    src = os.path.join(HERE, "programs", "churn.cc")
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        subprocess.run(["g++", "-O2", "-g", "-pthread", src, "-o", exe], check=True)
    return exe


def gen_deep(out):
    exe = os.path.join(out, "deep")
    src = os.path.join(HERE, "programs", "deep.c")
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        subprocess.run(["gcc", "-O2", "-g", "-pthread", src, "-o", exe], check=True)
    return exe


def gen_kvserver(out):
    """The threaded server and its load generator, built here."""
    built = []
    for name, compiler, flags in (("kvserver", "g++", ["-O2", "-g", "-pthread"]),
                                  ("kvclient", "gcc", ["-O2", "-g", "-pthread"])):
        exe = os.path.join(out, name)
        src = os.path.join(HERE, "programs", name + (".cc" if compiler == "g++" else ".c"))
        if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
            subprocess.run([compiler, *flags, src, "-o", exe], check=True)
        built.append(exe)
    return built


SHELL_LOOP = "for i in $(seq 300); do /bin/true; x=$(echo hi); done"


def gen_measure(out):
    exe = os.path.join(out, "measure")
    src = os.path.join(HERE, "programs", "measure.c")
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        subprocess.run(["gcc", "-O2", src, "-o", exe], check=True)
    return exe


def workloads(out):
    cc1 = subprocess.run(["gcc", "-print-prog-name=cc1"], capture_output=True, text=True).stdout.strip()
    kvserver, kvclient = gen_kvserver(out)
    return {
        "sqlite3": (["sqlite3", ":memory:"], gen_sqlite(out), True),
        "jq": (["jq", "-c", "map(select(.score > 0.5)) | length", gen_json(out)], None, False),
        "cc1": ([cc1, "-O2", "-quiet", gen_c(out), "-o", os.path.join(out, "big.s")], None, False),
        "python3": ([os.path.realpath(sys.executable), gen_python(out)], None, False),
        "churn": ([gen_churn(out), "10000000"], None, False),
        # 4M malloc/free pairs 20 frames deep: the cost of one long walk
        "deep": ([gen_deep(out), "20"], None, False),
        # the same in 2 threads at once (2 x 4M pairs): what their hooks share
        "deep-threads": ([gen_deep(out), "20", "2"], None, False),
        # 900 short processes: what tracing every process of a script costs
        "shell": (["bash", "-c", SHELL_LOOP], None, False),
        # a threaded server driven flat out on loopback: 4 connections x 1M requests,
        # a thread each (the client, run bare, says when all were answered)
        "kv-server": ([kvserver, PORT_FILE], None, False, [kvclient, PORT, "4", "1000000"]),
    }


PORT_FILE, PORT = "{port_file}", "{port}"  # filled in by run_once for a server's run


SAMPLE_BYTES = 524288  # jemalloc's and tcmalloc's usual mean sampling interval

# -- running --------------------------------------------------------------------

def _wait_for_reporters(work, timeout=300):
    """This run's reporters still writing (descendants' last reports) must
    not run into the next measurement.  Only this run's: a reporter is
    started as `python -E -B _reporter_main.py DIR NAME`, and every process
    of the run reports into `work` (dir= below).  Other traced programs on
    the machine are none of the bench's business."""
    mine = os.fsencode(work)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = False
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    args = f.read().split(b"\0")
            except OSError:
                continue
            if any(a.endswith(b"_reporter_main.py") for a in args) and mine in args:
                busy = True
                break
        if not busy:
            return
        time.sleep(0.1)


def _bare_env():
    env = dict(os.environ)
    for name in ("LD_PRELOAD", "MEMLEAK_CONFIG", "MEMLEAK_ROOT_PID", "MEMLEAK_KEEPER"):
        env.pop(name, None)
    return env


def _drive(driver, port_file, server, timeout):
    """A server's run: its port once written, the bare client's wall seconds
    to have its load served, or None if the server ended first or the client
    did not end within `timeout`."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(port_file):
        if server.poll() is not None or time.monotonic() > deadline:
            return None
        time.sleep(0.05)
    port = open(port_file).read().strip()
    t0 = time.monotonic()
    try:
        client = subprocess.run([port if a == PORT else a for a in driver], env=_bare_env(), timeout=timeout,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    except subprocess.TimeoutExpired:
        return None
    wall = time.monotonic() - t0
    if client.returncode != 0:
        raise RuntimeError(f"{' '.join(driver)}: {client.stderr.strip() or 'exited with %d' % client.returncode}")
    return wall


def run_once(tool, argv, stdin_path, out, timeout, driver=None):
    """Returns (wall seconds, peak RSS of the program in KiB, reporter peak KiB or None),
    or None if the run did not end within `timeout` seconds (it is killed: a tool
    that hangs -- heaptrack once did, in a forked shell -- must not stop the bench).
    With a `driver` (a server's client), the seconds are the client's: see _drive."""
    work = os.path.join(out, "run-" + tool)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = _bare_env()
    port_file = os.path.join(work, "port")
    cmd = [port_file if a == PORT_FILE else a for a in argv]
    # Every process of a run reports into its work directory (a process that
    # changes directory too), so that the run waits for its own reporters.
    config = f"mtraceinit,dir={work}"
    if tool == "libmemleak":
        env["LD_PRELOAD"] = preload_path()
        env["MEMLEAK_PYTHON"] = sys.executable
        env["MEMLEAK_CONFIG"] = config
    elif tool == "libmemleak-libgcc":
        env["LD_PRELOAD"] = preload_path()
        env["MEMLEAK_PYTHON"] = sys.executable
        env["MEMLEAK_CONFIG"] = f"{config},unwind=libgcc"
    elif tool == "libmemleak-sampled":
        env["LD_PRELOAD"] = preload_path()
        env["MEMLEAK_PYTHON"] = sys.executable
        env["MEMLEAK_CONFIG"] = f"{config},sample={SAMPLE_BYTES}"
    elif tool == "heaptrack":
        cmd = ["heaptrack", "-o", os.path.join(work, "ht"), *cmd]
    elif tool == "valgrind":
        cmd = ["valgrind", "--tool=memcheck", "--leak-check=full", "--log-file=" + os.path.join(work, "vg.log"), *cmd]
    stdin = open(stdin_path) if stdin_path else subprocess.DEVNULL
    result = os.path.join(work, "measure.out")
    proc = subprocess.Popen([gen_measure(out), result, *cmd], cwd=work, env=env, stdin=stdin,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        served = _drive(driver, port_file, proc, timeout) if driver else 0.0
        status = proc.wait(timeout=timeout) if served is not None else None
    except subprocess.TimeoutExpired:
        status = None
    finally:
        if stdin_path:
            stdin.close()
    if status is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None
    if status != 0:
        raise RuntimeError(f"{tool}: the measuring wrapper exited with {status}")
    wall_s, rss_kb, code = open(result).read().split()
    wall, maxrss = (served or float(wall_s)), int(rss_kb)
    if code != "0":
        raise RuntimeError(f"{tool}: {' '.join(cmd)} exited with {code}")
    reporter = None
    if tool.startswith("libmemleak"):
        _wait_for_reporters(work)  # the keeper writes descendants' reports after the root exits
        reports = [n for n in os.listdir(work) if n.endswith(".memlog")]
        if reports:
            text = open(os.path.join(work, sorted(reports)[-1])).read()
            m = re.search(r"^# reporter-vm-hwm: (\d+) kB", text, re.M)
            reporter = int(m.group(1)) if m else None
    return wall, maxrss, reporter


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="*", help="workload names")
    ap.add_argument("--no-valgrind", action="store_true")
    ap.add_argument("--libgcc", action="store_true", help="also run libmemleak with unwind=libgcc")
    ap.add_argument("--no-sampled", action="store_true",
                    help=f"skip the sampling-mode rows (sample={SAMPLE_BYTES})")
    ap.add_argument("--out", default=os.path.join(HERE, "out", "results.rst"))
    args = ap.parse_args()
    out = os.path.join(HERE, "out")
    os.makedirs(out, exist_ok=True)
    if not os.path.exists(preload_path()):
        sys.exit("libmtrace.so is missing: pip install . (or python setup.py build_native)")
    tools = ["bare", "libmemleak"] + (["libmemleak-libgcc"] if args.libgcc else [])
    tools += [] if args.no_sampled else ["libmemleak-sampled"]
    for name in ("heaptrack", "valgrind"):
        if name == "valgrind" and args.no_valgrind:
            continue
        if shutil.which(name):
            tools.append(name)
        else:
            print(f"({name} is not installed: skipped; apt-get install {name})")
    wl = workloads(out)
    names = args.only or list(wl)
    results = {}
    hung = {}
    for rnd in range(args.rounds):
        for name in names:
            argv, stdin_path, valgrind_ok, *driver = wl[name]
            for tool in tools:
                if tool == "valgrind" and not valgrind_ok:
                    continue
                if tool == "valgrind" and rnd > 0:
                    continue  # one valgrind round: it is slow and steady
                bare_runs = results.get((name, "bare"))
                limit = max(120.0, 100 * bare_runs[0][0]) if bare_runs else 3600.0
                run = run_once(tool, argv, stdin_path, out, limit, *driver)
                if run is None:
                    hung[(name, tool)] = hung.get((name, tool), 0) + 1
                    print(f"round {rnd + 1} {name:8} {tool:18} did not end in {limit:.0f} s: killed",
                          flush=True)
                    continue
                wall, rss, rep = run
                results.setdefault((name, tool), []).append((wall, rss, rep))
                print(f"round {rnd + 1} {name:8} {tool:18} {wall:7.2f}s  rss {rss / 1024:7.1f} MiB"
                      + (f"  reporter {rep / 1024:.1f} MiB" if rep else ""), flush=True)
    # Noise on a shared machine only ever adds time, so besides the medians'
    # ratio the table gives the fastest runs' (fastest traced / fastest bare),
    # which moves far less from one run of the bench to the next.
    lines = ["=========  ==================  ========  ========  ========  ===========  ============",
             "workload   tool                median s  x bare    x best    rss MiB      reporter MiB",
             "=========  ==================  ========  ========  ========  ===========  ============"]
    for name in names:
        if (name, "bare") not in results:
            continue  # every bare run hung: nothing to compare with
        bare = statistics.median(w for w, _, _ in results[(name, "bare")])
        bare_best = min(w for w, _, _ in results[(name, "bare")])
        for tool in tools:
            rows = results.get((name, tool))
            if not rows:
                continue
            med = statistics.median(w for w, _, _ in rows)
            best = min(w for w, _, _ in rows)
            rss = max(r for _, r, _ in rows) / 1024
            reps = [r for _, _, r in rows if r]
            rep = f"{max(reps) / 1024:.0f}" if reps else ""
            lines.append(f"{name:9}  {tool:18}  {med:8.2f}  {med / bare:8.2f}  {best / bare_best:8.2f}  {rss:11.1f}"
                         f"  {rep:>12}")
    lines.append(lines[0])
    for (name, tool), n in sorted(hung.items()):
        lines.append(f"{name} under {tool}: {n} of {args.rounds} runs hung and were killed "
                     "(not in the median)")
    table = "\n".join(lines)
    print("\n" + table)
    with open(args.out, "w") as f:
        f.write(table + "\n")
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
