"""Processes in a pid namespace of their own (#28 item 3): `unshare --pid`,
containers, Chromium's sandboxed zygote and renderers.  They know themselves
by a pid that means another process out here; they used to be never
reported.  Now the keeper takes the kernel's word for who they are: their
reports are named by the pid the rest of the system knows, say the one
they know themselves by, and answer `snapshot` by that outer pid."""

import os
import subprocess
import time

import pytest

from helpers import CLI_ENV, by_site, cli, cli_argv, compile_program, reports_of, wait_for_file


def _can_unshare(*flags):
    try:
        return subprocess.run(["unshare", *flags, "--fork", "true"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


needs_pidns = pytest.mark.skipif(not _can_unshare("--pid"), reason="cannot make a pid namespace here")


def _outer_pid_of(parent, name, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if f"({name})" in stat and int(stat.rpartition(")")[2].split()[1]) == parent:
                return int(pid)
        time.sleep(0.05)
    raise AssertionError(f"no {name} under {parent}")


def _nsleak_at_its_checkpoint(argv, cwd, env=CLI_ENV):
    """Starts argv (nsleak, run into a pid namespace of its own) and waits
    for its checkpoint: (the process, nsleak's pid out here)."""
    p = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "pid in namespace 1\n"
        assert p.stdout.readline() == "checkpoint leaked\n"
        return p, _outer_pid_of(p.pid, "nsleak")
    except BaseException:
        p.kill()
        p.wait()
        raise


@needs_pidns
@pytest.mark.parametrize("flags", [["--pid"], ["--pid", "--mount-proc"]], ids=["pid", "mount-proc"])
def test_a_process_in_a_pid_namespace_is_reported_by_its_outer_pid(tmp_path, flags):
    if "--mount-proc" in flags and not _can_unshare(*flags):
        pytest.skip("cannot mount a /proc of a new pid namespace here")
    prog = compile_program("nsleak.c")
    # `run` keeps unshare's pid; unshare forked the program into the namespace
    p, outer = _nsleak_at_its_checkpoint(cli_argv("run", "-q", "unshare", *flags, "--fork", prog), tmp_path)
    try:
        # Live, by the pid the rest of the system knows it by.
        out = cli("snapshot", outer, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        first = wait_for_file(str(tmp_path / f"nsleak-{outer}-1.memlog"))
        assert out.stdout.strip() == first
        p.stdin.write("\n")
        p.stdin.flush()
        p.communicate(timeout=60)
        assert p.returncode == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    wait_for_file(str(tmp_path / f"nsleak-{outer}-2.memlog"))
    reports = reports_of(str(tmp_path), "nsleak", outer)
    assert [r.header["reason"] for r in reports] == ["snapshot", "exit"]
    assert all(r.header["pid"] == str(outer) for r in reports)
    assert all(r.header["pid-in-namespace"] == "1" for r in reports)
    assert by_site(reports[0])["site_ns"] == (2100, 7)
    assert by_site(reports[1])["site_ns_later"] == (100, 2)
    assert "site_ns" not in by_site(reports[1])  # nothing changed there since report 1


@needs_pidns
def test_two_pid_1s_in_one_directory_keep_their_reports_apart(tmp_path):
    """#64 item 5: two programs each pid 1 of a namespace of its own, traced
    from inside it, overwrote each other's reports in one directory (4
    reports became 2, `report` showed one process); `snapshot` from outside
    wrote the report but said none was written.  Their names now carry
    their pid namespace, and `report` keeps them apart."""
    if not _can_unshare("--pid", "--mount-proc"):
        pytest.skip("cannot mount a /proc of a new pid namespace here")
    prog = compile_program("nsleak.c")
    procs, outer = [], []
    try:
        for _ in range(2):  # both at their checkpoint at once; unshare forked each into its namespace
            p, pid = _nsleak_at_its_checkpoint(["unshare", "--pid", "--fork", "--mount-proc",
                                                *cli_argv("run", "-q", prog)], tmp_path)
            procs.append(p)
            outer.append(pid)
        for pid in outer:  # from outside, by the pid the host knows
            out = cli("snapshot", pid, cwd=tmp_path)
            assert out.returncode == 0, out.stderr
            assert os.path.exists(out.stdout.strip()), out.stdout
        for p in procs:
            p.stdin.write("\n")
            p.stdin.flush()
            p.communicate(timeout=60)
            assert p.returncode == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    names = sorted(n for n in os.listdir(tmp_path) if n.endswith(".memlog"))
    assert len(names) == 4 and all(n.startswith("nsleak-1@") for n in names), names
    shown = cli("report", tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count("nsleak (pid 1 in pid namespace ") == 2, shown.stdout
    assert shown.stdout.count("2 reports") == 2 and "different programs" not in shown.stderr


@needs_pidns
def test_pid_1_of_a_namespace_is_told_that_a_sigkill_takes_its_reporter_along(tmp_path):
    """#64 item 5: pid 1 of a namespace killed by SIGKILL got no final
    report and no word -- the kernel kills the whole namespace, its
    reporter too.  Said at the start, and by `report` on what is left."""
    if not _can_unshare("--pid", "--mount-proc"):
        pytest.skip("cannot mount a /proc of a new pid namespace here")
    prog = compile_program("nsleak.c")
    p, outer = _nsleak_at_its_checkpoint(["unshare", "--pid", "--fork", "--mount-proc",
                                          *cli_argv("run", "-q", prog)], tmp_path)
    try:
        out = cli("snapshot", outer, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        os.kill(outer, 9)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert ("libmemleak: the program is pid 1 of its pid namespace (a container's entry point): if it "
            "is killed by SIGKILL, the kernel kills its reporter with it and its last state is lost"
            in err), err
    names = [n for n in os.listdir(tmp_path) if n.endswith(".memlog")]
    assert len(names) == 1, names
    shown = cli("report", tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert ("still running at the last report -- or killed: as pid 1 of its pid namespace, a SIGKILL "
            "takes its reporter along and leaves no final report") in shown.stdout, shown.stdout


@needs_pidns
@pytest.mark.parametrize("flags", [["--pid"], ["--pid", "--mount-proc"]], ids=["pid", "mount-proc"])
def test_run_inside_a_pid_namespace_names_the_files_its_reporter_writes(tmp_path, flags):
    """`run` as the namespace's first process said `nsleak-1-N.memlog` where
    its reporter wrote `nsleak-OUTERPID@NS-1.memlog` (the host's /proc, no
    --mount-proc): it names them as the reporter does."""
    if not _can_unshare(*flags):
        pytest.skip("cannot make this pid namespace here")
    prog = compile_program("nsleak.c")
    p = subprocess.run(["unshare", *flags, "--fork", *cli_argv("run", prog)], cwd=tmp_path, env=CLI_ENV,
                       input="\n", capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    said = p.stderr.split("reports go to ", 1)[1].split(";", 1)[0]
    assert said.endswith("-N.memlog"), p.stderr
    assert os.path.exists(said.removesuffix("N.memlog") + "1.memlog"), (said, os.listdir(tmp_path))


@needs_pidns
def test_attach_into_a_pid_namespace_names_the_files_its_reporter_writes(tmp_path):
    """#64 item 5: `attach` to a process in a pid namespace of its own said
    its reports went to PROG-OUTERPID-N.memlog; its reporter, started from
    inside the namespace, names them by the pid the process knows and the
    namespace (PROG-1@NS-N)."""
    if not _can_unshare("--pid", "--mount-proc"):
        pytest.skip("cannot mount a /proc of a new pid namespace here")
    prog = compile_program("attachee.c")
    env = {k: v for k, v in CLI_ENV.items() if k != "PYTHONPATH"}
    p = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", prog], cwd=tmp_path, env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "checkpoint attach\n"
        outer = _outer_pid_of(p.pid, "attachee")
        ns = os.stat(f"/proc/{outer}/ns/pid").st_ino
        out = cli("attach", outer, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert f"{tmp_path}/attachee-1@{ns}-N.memlog" in out.stderr, out.stderr
        shot = cli("snapshot", outer, cwd=tmp_path)
        assert shot.returncode == 0, shot.stderr
        assert shot.stdout.strip() == f"{tmp_path}/attachee-1@{ns}-1.memlog"
    finally:
        p.kill()
        p.wait()
