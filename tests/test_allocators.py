"""Allocators other than glibc's (#28 items 1 and 2).  A program whose own
malloc wins the symbol lookup is not yet routed: it must never be a silent
blind spot -- said at start, in every report, by report, export and check
(which then cannot pass).  tcmalloc, linked or preloaded after the tracer,
is traced exactly (it used to crash at load)."""

import glob
import os
import subprocess

import pytest

from helpers import CLI_ENV, by_site, cli, compile_program
from libmemleak import memlog, preload_path

TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"
needs_tcmalloc = pytest.mark.skipif(
    not glob.glob("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so*"),
    reason="needs Debian's libgoogle-perftools-dev")


def only_report(directory):
    [name] = [n for n in os.listdir(directory) if n.endswith(".memlog")]
    return memlog.read(os.path.join(directory, name))


def test_a_program_with_its_own_malloc_is_said_to_be_unseen_everywhere(tmp_path):
    prog = compile_program("ownmalloc.c")
    out = cli("run", "-q", prog, cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, "done\n"), out.stderr
    said = [line for line in out.stderr.splitlines() if "not seen" in line]
    assert said == [f"libmemleak: malloc, free, calloc, realloc are defined by {prog}, which the "
                    "program's symbol lookups find before libmemleak's: allocations made through "
                    "it are not seen (libmemleak does not route a program's own allocator yet)"]
    report = only_report(tmp_path)
    assert report.header["blind"] == said[0].removeprefix("libmemleak: ")
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


def test_a_non_pie_program_taking_mallocs_address_is_not_called_blind(tmp_path):
    prog = compile_program("fnptr.c", "-no-pie")
    out = cli("run", "-q", prog, cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, "1\n"), out.stderr
    assert "not seen" not in out.stderr
    report = only_report(tmp_path)
    assert "blind" not in report.header
    assert by_site(report)["main"] == (1234, 1)
    assert cli("check", tmp_path, "--max-live", "1000000").returncode == 0


@needs_tcmalloc
def test_a_program_linked_with_tcmalloc_is_traced_exactly(tmp_path):
    prog = compile_program("tcmalloced.cc", "-ltcmalloc_minimal")
    bare = subprocess.run([prog], capture_output=True, text=True, timeout=60)
    out = cli("run", "-q", prog, cwd=tmp_path)
    assert (out.returncode, out.stdout, out.stderr) == (bare.returncode, bare.stdout, ""), out.stderr
    report = only_report(tmp_path)
    assert "blind" not in report.header
    sites = by_site(report)
    assert sites["site_malloc(unsigned long)"] == (1000, 10)
    assert sites["site_new()"] == (320, 5)
    # a real verdict (1: over the limit), not "not seen" (3)
    assert cli("check", tmp_path, "--max-live", "1000").returncode == 1


@needs_tcmalloc
def test_tcmalloc_preloaded_after_the_tracer_loads(tmp_path):
    env = {k: v for k, v in CLI_ENV.items() if k != "PYTHONPATH"}
    for argv in (["/bin/true"], ["sh", "-c", "echo ok"]):
        p = subprocess.run(argv, env=dict(env, LD_PRELOAD=f"{preload_path()}:{TCMALLOC}"),
                           cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p
        assert "not seen" not in p.stderr


@needs_tcmalloc
def test_tcmalloc_preloaded_ahead_of_the_tracer_is_said(tmp_path):
    prog = compile_program("tcmalloced.cc")
    env = {k: v for k, v in CLI_ENV.items() if k != "PYTHONPATH"}
    p = subprocess.run([prog], env=dict(env, LD_PRELOAD=f"{TCMALLOC}:{preload_path()}"),
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stdout) == (0, "done\n"), p.stderr
    said = (f"malloc, free, calloc, realloc are defined by {TCMALLOC}, which the program's "
            "symbol lookups find before libmemleak's")
    assert said in p.stderr
    assert only_report(tmp_path).header["blind"].startswith(said)
    assert cli("check", tmp_path, "--max-leaks", "0").returncode == 3
