#!/usr/bin/env python3
"""Scale check (issue 4): THREADS threads make BLOCKS live blocks from
2^BITS distinct call stacks, then SIGUSR1; prints the program's time to
allocate (bare and traced), the report's time, its totals and peak RSS of
the program and the reporter.  The report must show every block and every
stack: nothing dropped.

    python bench/scale.py [--threads 64] [--blocks 10000000] [--bits 20] [--stack-table no]
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from libmemleak import preload_path  # noqa: E402
from libmemleak.live.client import open_segment  # noqa: E402


def status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) // 1024  # MiB
    return 0


def reporter_of(pid):
    """The reporter of traced process pid, as its segment names it."""
    segment, fd = open_segment(pid, writable=False)
    try:
        return int(segment.header.reporter_pid) or None
    finally:
        os.close(fd)


def run(exe, args, traced, out, depth, stack_table="yes"):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if traced:
        env.update(LD_PRELOAD=preload_path(), MEMLEAK_PYTHON=sys.executable,
                   MEMLEAK_CONFIG=f"mtraceinit,depth={depth}", MEMLEAK_STACK_TABLE=stack_table)
        env.pop("MEMLEAK_ROOT_PID", None)
    t0 = time.monotonic()
    p = subprocess.Popen([exe, *args], cwd=out, env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE)
    assert p.stdout.readline() == b"checkpoint ready\n"
    alloc = time.monotonic() - t0
    result = {"alloc s": alloc, "rss MiB": status(p.pid, "VmHWM")}
    if traced:
        reporter, private = reporter_of(p.pid), 0
        for seq in (1, 2):  # the first report; a second with (almost) nothing changed
            t1 = time.monotonic()
            p.send_signal(signal.SIGUSR1)
            path = os.path.join(out, f"scale-{p.pid}-{seq}.memlog")
            while not os.path.exists(path):
                # its own memory, not the program's segment it maps (in its VmHWM too)
                private = max(private, status(reporter, "RssAnon") if reporter else 0)
                time.sleep(0.01)
            result[f"report {seq} s"] = time.monotonic() - t1
            result[f"report {seq} MB"] = os.path.getsize(path) / 1e6
        result["reporter private MiB"] = private
        path = os.path.join(out, f"scale-{p.pid}-1.memlog")
        with open(path) as f:  # the header only: the file may be gigabytes
            head = ""
            for line in f:
                if not line.startswith("#"):
                    break
                head += line
        for key in ("live-blocks", "stacks", "dropped-stacks", "dropped-blocks", "truncated-stacks",
                    "corrupt-stacks", "reporter-vm-hwm"):
            m = re.search(rf"^# {key}: (.*)$", head, re.M)
            result[key] = m.group(1) if m else "0"
    p.stdin.write(b"\n")
    p.stdin.close()
    p.wait()
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=64)
    ap.add_argument("--blocks", type=int, default=10_000_000)
    ap.add_argument("--bits", type=int, default=20)
    ap.add_argument("--stack-table", default="yes", choices=("yes", "no"),
                    help="no: reports without a stack table (every entry with its frames), as before #62")
    args = ap.parse_args()
    out = os.path.join(HERE, "out", "scale")
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(out):
        if name.endswith(".memlog"):
            os.unlink(os.path.join(out, name))
    exe = os.path.join(out, "scale")
    subprocess.run(["gcc", "-O2", "-g", os.path.join(HERE, "programs", "scale.c"), "-o", exe,
                    "-lpthread"], check=True)
    a = [str(args.threads), str(args.blocks), str(args.bits)]
    bare = run(exe, a, False, out, 0)
    traced = run(exe, a, True, out, min(2 * args.bits + 8, 64), args.stack_table)  # step + left/right per level
    print(f"{args.threads} threads, {args.blocks} live blocks, {2 ** args.bits} stacks")
    print(f"  bare:   allocate {bare['alloc s']:.2f} s, rss {bare['rss MiB']} MiB")
    print(f"  traced: allocate {traced['alloc s']:.2f} s, rss {traced['rss MiB']} MiB; "
          f"SIGUSR1 -> report {traced['report 1 s']:.2f} s (cold symbols), {traced['report 1 MB']:.1f} MB; "
          f"again, nothing changed: {traced['report 2 s']:.2f} s, {traced['report 2 MB']:.2f} MB")
    print(f"  reporter: peak private memory (RssAnon, sampled) {traced['reporter private MiB']} MiB")
    print("  report: " + ", ".join(f"{k} {traced[k]}" for k in (
        "live-blocks", "stacks", "dropped-stacks", "dropped-blocks", "truncated-stacks",
        "corrupt-stacks", "reporter-vm-hwm")))


if __name__ == "__main__":
    main()
