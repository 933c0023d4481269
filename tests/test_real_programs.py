"""Third-party programs under the tracer: output and exit status unchanged,
and every process (the driver and the programs it runs) writes its report."""

import os
import subprocess
import time


from helpers import env_for
from libmemleak.files import memlog


def run_both(argv, cwd, **kw):
    traced = subprocess.run(argv, cwd=cwd, env=env_for(), capture_output=True, text=True,
                            timeout=120, **kw)
    bare = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, **kw)
    return traced, bare


def wait_for_reports(directory, progs, timeout=30):
    """Descendants write their report just after they exit: wait for them.
    Reports are named as the programs were invoked (gcc, as, ld -- not the
    x86_64-linux-gnu-gcc-12 or ld.bfd their links resolve to).  Returns
    the progs seen."""
    deadline = time.monotonic() + timeout
    while True:
        names = [n for n in os.listdir(directory) if n.endswith(".memlog")]
        execs = {n.rsplit("-", 2)[0] for n in names}
        found = {p for p in progs if p in execs}
        if found == set(progs) or time.monotonic() > deadline:
            return found, names
        time.sleep(0.05)


def test_gcc_driver_and_every_program_it_runs(tmp_path):
    src = tmp_path / "hello.c"
    src.write_text('#include <stdio.h>\nint main(void) { puts("hello"); return 4; }\n')
    (tmp_path / "t").mkdir()
    (tmp_path / "b").mkdir()
    traced = subprocess.run(["gcc", "-O2", str(src), "-o", "hello"], cwd=tmp_path / "t",
                            env=env_for(), capture_output=True, text=True, timeout=120)
    bare = subprocess.run(["gcc", "-O2", str(src), "-o", "hello"], cwd=tmp_path / "b",
                          capture_output=True, text=True, timeout=120)
    assert (traced.returncode, traced.stdout, traced.stderr) == (bare.returncode, bare.stdout, bare.stderr)
    run = subprocess.run([str(tmp_path / "t" / "hello")], capture_output=True, text=True)
    assert (run.returncode, run.stdout) == (4, "hello\n")
    progs = ["gcc", "cc1", "as", "collect2", "ld"]  # named as invoked (not x86_64-linux-gnu-as)
    found, names = wait_for_reports(tmp_path / "t", progs)
    assert found == set(progs), names
    assert len({n.split("-")[-2] for n in names}) == len(names)  # one process, one pid
    # All written by one Python process, the driver's reporter (the keeper):
    # no reporter was started per cc1, as or ld.
    writers = {memlog.read(str(tmp_path / "t" / n)).header["reporter-pid"] for n in names}
    assert len(writers) == 1, writers


def test_git_and_perl(tmp_path):
    traced, bare = run_both(["git", "init", "-q", "repo"], tmp_path / ".")
    assert traced.returncode == 0 and traced.stderr == bare.stderr
    traced, bare = run_both(["git", "-C", "repo", "status", "--porcelain", "--branch"], tmp_path)
    assert (traced.returncode, traced.stdout) == (bare.returncode, bare.stdout)
    code = 'my %h; $h{$_} = "x" x $_ for 1..5000; print scalar(keys %h), "\\n"; exit 3'
    traced, bare = run_both(["perl", "-e", code], tmp_path)
    assert (traced.returncode, traced.stdout, traced.stderr) == (3, "5000\n", "") == \
        (bare.returncode, bare.stdout, bare.stderr)
    found, names = wait_for_reports(tmp_path, ["git", "perl"])
    assert found == {"git", "perl"}, names
