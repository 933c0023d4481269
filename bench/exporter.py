#!/usr/bin/env python3
"""What a scrape of the exporter's /debug/pprof/heap costs (#61) for a
Python service -- every stack with its Python frames, the heaviest kind
-- the first (cold: stacks keyed, symbolized, Python frames made) and
the next ones (the exporter keeps frames and tables).  Parca's and
Pyroscope's scrape timeouts are about 10 s.

    python bench/exporter.py                 # a Python process that imported a set of the stdlib
    python bench/exporter.py --scrapes 3 --python /usr/bin/python3

Prints per scrape: wall seconds, the exporter's CPU seconds, samples in
the profile and its gzipped size."""

import argparse
import gzip
import os
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))

SERVICE = ("import json, email.parser, http.client, asyncio, decimal, xml.dom.minidom, sqlite3, csv, argparse, "
           "logging, unittest, tarfile, zipfile\n"
           "keep = [json.dumps({'k': list(range(i % 40))}) for i in range(5000)]\n"
           "print('ready', flush=True)\n"
           "import sys; sys.stdin.readline()\n")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def samples_in(profile):
    """Sample messages (field 2) at the top level of a profile.proto."""
    data, i, n = gzip.decompress(profile), 0, 0
    while i < len(data):
        key, i = _varint(data, i)
        wire = key & 7
        if wire == 0:
            _, i = _varint(data, i)
        elif wire == 2:
            size, i = _varint(data, i)
            i += size
            n += key >> 3 == 2
        else:
            raise ValueError(f"wire type {wire}")
    return n


def _varint(data, i):
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7f) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default=sys.executable, help="the traced interpreter")
    ap.add_argument("--scrapes", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=600,
                    help="seconds a scrape waits, as a scraper's timeout (10: Pyroscope's, Parca's)")
    args = ap.parse_args()
    cli = [sys.executable, "-m", "libmemleak"]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
    service = subprocess.Popen([*cli, "run", "-q", args.python, "-c", SERVICE], env=env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, cwd="/tmp")
    exporter = subprocess.Popen([*cli, "exporter", "--listen", "127.0.0.1:0"], env=env, stderr=subprocess.PIPE,
                                text=True, cwd="/tmp")
    try:
        assert service.stdout.readline() == b"ready\n"
        base = exporter.stderr.readline().split()[3].removesuffix("/metrics")
        spy = None
        if os.environ.get("BENCH_PY_SPY"):  # a raw py-spy profile of the exporter, to this file
            spy = subprocess.Popen(["py-spy", "record", "--format", "raw", "--rate", "100", "-o",
                                    os.environ["BENCH_PY_SPY"], "--pid", str(exporter.pid)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1)
        for i in range(args.scrapes):
            wall, cpu = time.monotonic(), cpu_seconds(exporter.pid)
            metrics = urllib.request.urlopen(f"{base}/metrics", timeout=600).read()
            print(f"/metrics {i + 1}: {time.monotonic() - wall:.2f} s wall, {cpu_seconds(exporter.pid) - cpu:.2f} s "
                  f"CPU, {len(metrics)} bytes", flush=True)
            wall, cpu = time.monotonic(), cpu_seconds(exporter.pid)
            try:
                profile = urllib.request.urlopen(f"{base}/debug/pprof/heap?pid={service.pid}",
                                                 timeout=args.timeout).read()
            except OSError as e:  # (a timeout)
                print(f"scrape {i + 1}: gave up after {time.monotonic() - wall:.2f} s ({e})", flush=True)
                continue
            print(f"scrape {i + 1}: {time.monotonic() - wall:.2f} s wall, {cpu_seconds(exporter.pid) - cpu:.2f} s "
                  f"CPU, {samples_in(profile)} samples, {len(profile)} bytes", flush=True)
        if spy:
            spy.send_signal(2)
            spy.wait()
    finally:
        exporter.terminate()
        said = exporter.communicate()[1].strip()
        if said:
            print(f"the exporter said: {said}")
        service.communicate(b"\n", timeout=120)


if __name__ == "__main__":
    main()
