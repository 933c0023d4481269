#!/usr/bin/env python3
"""Deterministic cost of tracing (issue 4): instructions and cache misses
counted by valgrind's callgrind, bare and under libmemleak, on cut-down
versions of bench/run.py's cc1 and sqlite3 workloads, and on a C++
program linked with a static tcmalloc, whose allocator entry points are
routed (bench/routed_workload.cc), beside the same program on glibc's
malloc (alloc-glibc): nearly all it does is allocate, so its ratios are
the tracer's cost per allocation, not a program's.  And what tracing
file descriptors costs (fds: bench/programs/fdloop.c opens and closes
descriptors and allocates nearly nothing), with descriptors tracked and
with MEMLEAK_CONFIG fds=no; its table gives the instructions added per
descriptor call (the calls' own kernel time, which callgrind does not
count, is most of their cost bare).  And churn (bench/programs/churn.cc: 2 threads
of malloc/free pairs through three call stacks, a window of 256 live
blocks each): the tracer's cost per pair with nothing else to hide it --
issue 33's third figure (est. cycles added per pair are printed).  alloc-glibc also runs with
MEMLEAK_CONFIG misuse=no, misuse=hold and quarantine=64M: what checking for misuse of the
allocator costs, and that holding bad frees back costs nothing more.
Every allocating workload also runs with record=all: what the event log
costs over the default mode (docs/events.md).

Wall-clock ratios on a shared machine move by 20-40% from run to run;
these counts move by well under 1%, so they are what a change to the hot
path should be judged by.  The estimate of cycles is

    est = Ir + 10 x (L1 misses) + 40 x (last-level misses)

with callgrind's last level set to 512 KiB, 8-way (the L2 of the machine
this was tuned on): a miss there is what costs on real hardware.

    python bench/callgrind.py                  # all four workloads, full and sampled
    python bench/callgrind.py --only cc1 --no-sampled
    python bench/callgrind.py --lib /path/to/libmtrace.so   # another build

Where the stack and heap fall in the caches' sets moves the misses of a
short workload by as much as a small change to the hot path does
(sqlite3: 1.200x-1.207x for one build, with only the environment's size
changed), so every workload but cc1 is measured at LAYOUTS layouts --
the environment padded by LAYOUT_PADS bytes, which moves the stack's
start, and a small library of HEAP_PADS KiB preloaded first, which moves
every mapping after it (the heap's, the tracer's tables: where a routed
allocator's blocks land moved tcmalloc-static's count by up to 6% between
placements, docs/performance.rst) -- and the run with the median estimate
counts; its line gives the spread (--layouts 1: one run each, as before).
cc1 runs once (a minute and a half a run).

Each run writes its counts to a fresh directory; the file of the traced
program is the one named by its pid (libmemleak's reporter is a child
process and gets a file of its own).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from libmemleak import preload_path  # noqa: E402
from run import SAMPLE_BYTES, gen_c, gen_churn, gen_sqlite  # noqa: E402

FD_ROUNDS = 20000     # fdloop.c: 5 descriptors opened and closed a round
FD_CALLS = 10         # descriptor calls a round: 5 that make one, 5 that end one
CC1_FUNCTIONS = 120   # of bench/run.py's 1,500: about a minute under callgrind
SQLITE_ROWS = 8000    # of its 150,000
CHURN_PAIRS = 200000  # malloc/free pairs per thread (2 threads) of bench/programs/churn.cc
LAST_LEVEL = "524288,8,64"
LAYOUTS = 3
LAYOUT_PADS = (0, 1088, 2240)  # bytes added to the environment: the stack starts that much lower
HEAP_PADS = (0, 68, 136)       # KiB of a library preloaded first: every mapping after it that much further


TCMALLOC_STATIC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.a"
ROUTED_ROUNDS = 6


def routed_program(out, static_tcmalloc=True):
    """bench/routed_workload.cc linked with a static tcmalloc (the
    executable defines malloc: traced, its entry points are routed), or
    None without libgoogle-perftools-dev; static_tcmalloc=False: with
    glibc's malloc, reached through the tracer's exported functions -- the
    same work, for comparing the two ways in."""
    if static_tcmalloc and not os.path.exists(TCMALLOC_STATIC):
        return None
    prog = os.path.join(out, "routed_workload" if static_tcmalloc else "alloc_workload")
    link = ["-Wl,--whole-archive", TCMALLOC_STATIC, "-Wl,--no-whole-archive"] if static_tcmalloc else []
    subprocess.run(["g++", "-O2", os.path.join(HERE, "routed_workload.cc"), "-o", prog, *link, "-lpthread"],
                   check=True)
    return prog


def fd_program(out):
    prog = os.path.join(out, "fdloop")
    subprocess.run(["gcc", "-O2", os.path.join(HERE, "programs", "fdloop.c"), "-o", prog], check=True)
    return prog


def workloads(out, only=None):
    cc1 = subprocess.run(["gcc", "-print-prog-name=cc1"], capture_output=True, text=True).stdout.strip()
    found = {
        "cc1": lambda: ([cc1, "-O2", "-quiet", gen_c(out, CC1_FUNCTIONS), "-o", os.path.join(out, "small.s")],
                        None),
        "sqlite3": lambda: (["sqlite3", ":memory:"], gen_sqlite(out, SQLITE_ROWS)),
        "tcmalloc-static": lambda: ((lambda p: [p, str(ROUTED_ROUNDS)] if p else None)(routed_program(out)),
                                    None),
        "alloc-glibc": lambda: ([routed_program(out, False), str(ROUTED_ROUNDS)], None),
        "fds": lambda: ([fd_program(out), str(FD_ROUNDS)], None),
        "churn": lambda: ([gen_churn(out), str(CHURN_PAIRS)], None),
    }
    return {name: make() for name, make in found.items() if not only or name in only}


def totals(path):
    """{event: count} from a callgrind output file's events and totals lines."""
    events = summary = None
    with open(path) as f:
        for line in f:
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith(("summary:", "totals:")):
                summary = [int(x) for x in line.split()[1:]]
    if not events or not summary:
        raise ValueError(f"{path}: no events or totals line (did callgrind finish?)")
    return dict(zip(events, summary))


def measure(argv, stdin_path, env):
    with tempfile.TemporaryDirectory(prefix="mlk-callgrind-") as d:
        cmd = ["valgrind", "--tool=callgrind", "--cache-sim=yes", f"--LL={LAST_LEVEL}",
               f"--callgrind-out-file={d}/cg.%p", *argv]
        stdin = open(stdin_path) if stdin_path else subprocess.DEVNULL
        try:
            p = subprocess.Popen(cmd, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 env=env, cwd=d, text=True)
            _, err = p.communicate()
        finally:
            if stdin_path:
                stdin.close()
        # valgrind runs the program under its own pid: its file is cg.PID;
        # the tracer's forks (the reporter) write files of their own, some
        # nearly as large (not "the largest").
        own = os.path.join(d, f"cg.{p.pid}")
        if p.returncode != 0 or not os.path.exists(own):
            raise RuntimeError(f"{' '.join(argv[:2])}: exit {p.returncode}\n{err[-2000:]}")
        if "cannot be preloaded" in err:  # the loader ignored it: the run measured the bare program
            raise RuntimeError(f"{' '.join(argv[:2])}: the library was not preloaded\n{err[-2000:]}")
        t = totals(own)
    l1 = t.get("I1mr", 0) + t.get("D1mr", 0) + t.get("D1mw", 0)
    ll = t.get("ILmr", 0) + t.get("DLmr", 0) + t.get("DLmw", 0)
    return {"Ir": t["Ir"], "L1": l1, "LL": ll, "est": t["Ir"] + 10 * l1 + 40 * ll}


def heap_pad(kib):
    """A library of `kib` KiB of data, built once into bench/out: preloaded
    first, it moves the mappings made after it."""
    lib = os.path.join(HERE, "out", f"heap_pad_{kib}.so")
    if not os.path.exists(lib):
        os.makedirs(os.path.dirname(lib), exist_ok=True)
        subprocess.run(["cc", "-shared", "-fPIC", "-x", "c", "-", "-o", lib], check=True,
                       input=f"char mlk_bench_heap_pad[{kib} * 1024] = {{1}};\n", text=True)
    return lib


def measure_layouts(argv, stdin_path, env, layouts):
    """measure() at `layouts` layouts: the run with the median estimate,
    with "spread" = (lowest est, highest est)."""
    runs = []
    for pad, kib in list(zip(LAYOUT_PADS, HEAP_PADS))[:layouts]:
        e = dict(env)
        if pad:
            e["MLK_BENCH_LAYOUT"] = "x" * pad
        if kib:
            e["LD_PRELOAD"] = " ".join(filter(None, [heap_pad(kib), e.get("LD_PRELOAD")]))
        runs.append(measure(argv, stdin_path, e))
    runs.sort(key=lambda m: m["est"])
    mid = dict(runs[len(runs) // 2])
    mid["spread"] = (runs[0]["est"], runs[-1]["est"])
    return mid


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", choices=["cc1", "sqlite3", "tcmalloc-static", "alloc-glibc", "fds", "churn"],
                    help="these workloads only")
    ap.add_argument("--lib", default=None, help="the libmtrace.so to measure (default: this checkout's)")
    ap.add_argument("--no-sampled", action="store_true", help=f"skip sampling mode (sample={SAMPLE_BYTES})")
    ap.add_argument("--layouts", type=int, default=LAYOUTS, choices=range(1, len(LAYOUT_PADS) + 1),
                    help=f"layouts each workload but cc1 is measured at; the median counts (default {LAYOUTS})")
    args = ap.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("bench/callgrind.py: valgrind is not installed (apt-get install valgrind)")
    lib = os.path.abspath(args.lib) if args.lib else preload_path()
    if not os.path.exists(lib):
        sys.exit(f"bench/callgrind.py: {lib} does not exist (pip install . builds it)")
    with open(lib, "rb") as f:
        if f.read(4) != b"\x7fELF":  # a copy taken while a build wrote it: every run would be bare
            sys.exit(f"bench/callgrind.py: {lib} is not a shared object (copied mid-build?)")
    out = os.path.join(HERE, "out")
    os.makedirs(out, exist_ok=True)
    reports = tempfile.mkdtemp(prefix="mlk-callgrind-reports-")
    tools = [("bare", None), ("libmemleak", "mtraceinit")]
    if not args.no_sampled:
        tools.append(("libmemleak-sampled", f"mtraceinit,sample={SAMPLE_BYTES}"))
    rows = []
    bare_ir = 0
    for name, (argv, stdin_path) in workloads(out, args.only).items():
        if argv is None:
            print(f"{name}: skipped ({TCMALLOC_STATIC} is not installed: libgoogle-perftools-dev)")
            continue
        base = None
        # What the misuse checks cost (docs/misuse.md): off, and holding
        # bad frees back, on the workload that does nothing but allocate.
        extra = ([("libmemleak-fds=no", "mtraceinit,fds=no")] if name == "fds" else
                 [("libmemleak-misuse=no", "mtraceinit,misuse=no"),
                  ("libmemleak-misuse=hold", "mtraceinit,misuse=hold"),
                  ("libmemleak-quarantine=64M", "mtraceinit,quarantine=67108864")] if name == "alloc-glibc" else [])
        # What recording the event log costs over the default mode (docs/events.md).
        if name != "fds":
            extra.append(("libmemleak-record=all", "mtraceinit,record=all"))
        for tool, config in tools + extra:
            env = dict(os.environ)
            env.pop("LD_PRELOAD", None)
            env.pop("MEMLEAK_CONFIG", None)
            if config:
                # valgrind passes its environment on: the preload is loaded into the
                # program it runs, and the reporter is started from there.
                env["LD_PRELOAD"] = lib
                env["MEMLEAK_CONFIG"] = f"{config},dir={reports}"
            m = measure_layouts(argv, stdin_path, env, 1 if name == "cc1" else args.layouts)
            base = base or m["est"]
            bare_ir = bare_ir if tool != "bare" else m["Ir"]
            rows.append((name, tool, m, m["est"] / base))
            if name == "churn" and tool != "bare":
                print(f"churn: {(m['est'] - base) / (2 * CHURN_PAIRS):.0f} est. cycles added per malloc/free pair "
                      f"({tool})", flush=True)
            if name == "fds" and tool != "bare":
                print(f"fds: {(m['Ir'] - bare_ir) / (FD_ROUNDS * FD_CALLS):.0f} instructions added per "
                      f"descriptor call ({tool})", flush=True)
            low, high = m["spread"]
            spread = f"  ({low / base:5.3f}-{high / base:5.3f}x over layouts)" if high > low else ""
            print(f"{name:8} {tool:19} Ir {m['Ir'] / 1e6:9.1f}M  L1 misses {m['L1'] / 1e6:7.2f}M  "
                  f"LL misses {m['LL'] / 1e6:6.2f}M  est {m['est'] / 1e6:9.1f}M  {m['est'] / base:5.3f}x{spread}",
                  flush=True)
    shutil.rmtree(reports, ignore_errors=True)
    rule = "=========  ==================  ==========  ===========  ===========  ==========  ======"
    print()
    print(rule)
    print("workload   tool                Ir (M)      L1 miss (M)  LL miss (M)  est (M)     x bare")
    print(rule)
    for name, tool, m, ratio in rows:
        print(f"{name:9}  {tool:18}  {m['Ir'] / 1e6:10.1f}  {m['L1'] / 1e6:11.2f}  {m['LL'] / 1e6:11.2f}  "
              f"{m['est'] / 1e6:10.1f}  {ratio:6.3f}")
    print(rule)


if __name__ == "__main__":
    main()
