"""OpenTelemetry's otel_memory USDT probes (#61): in the sampled mode the
hook fires alloc(ptr, size, weight) for each block it records and
free(ptr) for each recorded block freed -- read by a real bpftrace, and
the same samples the reports count."""

import os
import shutil
import subprocess

import pytest

from helpers import CLI_ENV, cli_argv, compile_program
from libmemleak import preload_path
from libmemleak.files import memlog


def _bpftrace_works():
    if not shutil.which("bpftrace"):
        return False
    try:
        return subprocess.run(["bpftrace", "-e", "BEGIN { exit(); }"], capture_output=True,
                              timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _has_probes():
    out = subprocess.run(["readelf", "-n", preload_path()], capture_output=True, text=True)
    return "Provider: otel_memory" in out.stdout


def test_the_library_carries_the_probes_where_sdt_h_is():
    if not any(os.path.exists(f"/usr/include/{d}sys/sdt.h") for d in ("", "x86_64-linux-gnu/")):
        pytest.skip("built without <sys/sdt.h> (systemtap-sdt-dev)")
    out = subprocess.run(["readelf", "-n", preload_path()], capture_output=True, text=True).stdout
    notes = [line.split(":", 1)[1].strip() for line in out.splitlines()
             if line.strip().startswith(("Provider:", "Name:"))]
    assert {("otel_memory", "alloc"), ("otel_memory", "free")} <= set(zip(notes[::2], notes[1::2])), out


@pytest.mark.skipif(not _bpftrace_works() or not _has_probes(),
                    reason="bpftrace cannot attach here, or the library has no probes")
def test_bpftrace_sees_the_samples_the_reports_count(workdir, tmp_path):
    prog = compile_program("sampledleak.c")
    go = tmp_path / "attached"
    lib = preload_path()
    script = (f"usdt:{lib}:otel_memory:alloc /comm == \"sampledleak\"/ "
              f"{{ @allocs = count(); @weight = sum(arg2); }} "
              f"usdt:{lib}:otel_memory:alloc /comm == \"sampledleak\" && arg1 == 1000/ {{ @thousands = count(); }} "
              f"usdt:{lib}:otel_memory:free /comm == \"sampledleak\"/ {{ @frees = count(); }}")
    tracer = subprocess.Popen(["bpftrace", "-e", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        line = tracer.stdout.readline()
        assert line.startswith("Attaching"), line + tracer.stderr.read()
        go.touch()  # (the program allocates once the probes are attached)
        run = subprocess.run(cli_argv("run", "-q", "--sample", "65536", prog, str(go)), cwd=workdir,
                             env=CLI_ENV, capture_output=True, text=True, timeout=300)
        assert (run.returncode, run.stdout) == (0, "done\n"), run.stderr
    finally:
        tracer.send_signal(2)
        out, err = tracer.communicate(timeout=60)
    said = {line.split(":")[0].lstrip("@"): int(line.split(":")[1])
            for line in out.splitlines() if line.startswith("@")}
    (path,) = [n for n in os.listdir(workdir) if n.endswith(".memlog")]
    report = memlog.read(os.path.join(workdir, path))  # its only report, at exit: every sample kept
    samples = sum(int(x[len("samples="):]) for e in report.entries for x in e.extra if x.startswith("samples="))
    assert said["allocs"] - said["frees"] == samples > 1000, (said, samples)
    # Nearly all are site_sampled's blocks of 1,000 bytes (the C runtime
    # makes a few of its own), and the weights estimate what was
    # allocated: 200,000 of them, 200 MB.
    assert said["thousands"] > 0.99 * said["allocs"], said
    assert 0.8 * 200_000_000 < said["weight"] < 1.2 * 200_000_000, said
