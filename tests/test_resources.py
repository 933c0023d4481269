"""Resources other than memory (#30): file descriptors, built in, and the
kinds a program names through memleak.h -- counted per stack in a section
of every report with the same deltas as memory, ranked by `report`, held
to a limit by `check`.  Real programs under the real library; the kernel
(/proc/self/fd) is the oracle for descriptors."""

import json
import os
import subprocess


from helpers import (BARE_ENV, CLI_ENV, cli, cli_argv, compile_program, memleak_include,
                     only_pid, report_path, reports_of, wait_for_file)


def resource_sites(report, kind="fd"):
    """first-frame function -> (weight, count) of the report's entries of
    resource `kind`."""
    sites = {}
    for e in report.entries:
        if f"resource={kind}" not in e.extra:
            continue
        name = e.frames[0].function if e.frames else "?"
        w, n = sites.get(name, (0, 0))
        sites[name] = (w + e.bytes, n + e.blocks)
    return sites


def summed(reports, kind="fd"):
    total = {}
    for r in reports:
        for name, (w, n) in resource_sites(r, kind).items():
            tw, tn = total.get(name, (0, 0))
            total[name] = (tw + w, tn + n)
    return {name: v for name, v in total.items() if v != (0, 0)}


def run_traced(prog, *args, cwd, config=None):
    env = dict(CLI_ENV, **({"MEMLEAK_CONFIG": config} if config else {}))
    out = subprocess.run([*cli_argv("run", "-q"), prog, *args], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    return out


def test_a_server_leaking_sockets_and_files_from_two_sites(tmp_path):
    prog = compile_program("fdserver.c", memleak_include())
    out = run_traced(prog, "8", cwd=tmp_path)
    lines = out.stdout.splitlines()
    # what it leaked, what the kernel says is open, what the tracer says is held
    assert lines == ["leaked: 8 sockets, 4 logs", "kernel: 12 more open", "held: 0 12 12"], out.stdout
    reports = reports_of(tmp_path, "fdserver", only_pid(tmp_path, "fdserver"))
    assert [r.header.get("label") for r in reports] == [f"round{i}" for i in range(8)] + [None]
    # each round's report: exactly that round's leaks, at their sites
    for i, r in enumerate(reports[:8]):
        expected = {"serve_client": (1, 1)}
        if i % 2 == 0:
            expected["open_request_log"] = (1, 1)
        if i == 0:
            expected["listen_on_loopback"] = (1, 1)  # closed at the end
        assert resource_sites(r) == expected, (i, resource_sites(r))
    # over the run: only the two leaking sites; everything tidy_work opened
    # (pipes, dup, dup2, fcntl, eventfd, opendir, mkstemp, socketpair,
    # SCM_RIGHTS, close_range) was let go by the call that closed it
    assert summed(reports) == {"serve_client": (8, 8), "open_request_log": (4, 4)}
    last = reports[-1]
    assert last.header["resource-live fd"] == "12 12"
    assert last.header["resource-change fd"] == "-1 -1"
    # descriptors are not memory: neither live-bytes nor allocations count them
    memory = [e for e in last.entries if not any(x.startswith("resource=") for x in e.extra)]
    assert int(last.header["live-bytes"]) == sum(e.bytes for r in reports for e in r.entries
                                                  if not any(x.startswith("resource=") for x in e.extra))
    # their own section: after every memory entry
    kinds = ["resource" if any(x.startswith("resource=") for x in e.extra) else "memory" for e in last.entries]
    assert kinds == sorted(kinds, key=lambda k: k == "resource") and memory

    # report ranks them, the steady socket leak first
    text = cli("report", tmp_path)
    assert text.returncode == 0, text.stderr
    section = text.stdout[text.stdout.index("file descriptors: 12 held at the last report"):]
    assert "descriptor leak suspects, most likely first:" in section
    first, second = section.index("#1 8 held"), section.index("#2 4 held")
    assert first < section.index("serve_client (fdserver.c:") < second < section.index("open_request_log (fdserver.c:")
    # the memory view is not changed by them
    assert "live now:" in text.stdout and " 12 blocks" not in text.stdout.split("\n")[1]
    doc = json.loads(cli("report", "--json", tmp_path).stdout)["processes"][0]
    fd = doc["resources"]["fd"]
    assert (fd["held"], fd["weight"]) == (12, 12)
    assert [s["frames"][0]["function"] for s in fd["suspects"]] == ["serve_client", "open_request_log"]
    assert all(s["kind"] != "resource" for s in doc["stacks"])

    # diff compares memory only: the accept site holds no memory
    names = sorted((n for n in os.listdir(tmp_path) if n.endswith(".memlog")),
                   key=lambda n: int(n[:-len(".memlog")].split("-")[2]))
    compared = cli("diff", tmp_path / names[0], tmp_path / names[-1])
    assert compared.returncode == 0 and "open_request_log" in compared.stdout
    assert "serve_client" not in compared.stdout

    # check holds a process to a number of descriptors
    over = cli("check", "--max-held", "fd=11", tmp_path)
    assert over.returncode == 1 and "file descriptors: 12 held at its end, over --max-held fd=11" in over.stdout
    assert "serve_client (fdserver.c:" in over.stdout
    assert cli("check", "--max-held", "fd=12", tmp_path).returncode == 0
    bad = cli("check", "--max-held", "fd", tmp_path)
    assert bad.returncode == 2 and "give KIND=N" in bad.stderr and "Traceback" not in bad.stderr


def test_without_the_tracer_the_server_runs_the_same(tmp_path):
    prog = compile_program("fdserver.c", memleak_include())
    bare = subprocess.run([prog, "4"], cwd=tmp_path, capture_output=True, text=True, env=BARE_ENV, timeout=60)
    assert bare.returncode == 0 and bare.stderr == ""
    assert bare.stdout == "leaked: 4 sockets, 2 logs\nkernel: 6 more open\nheld: -1 0 0\n"
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".memlog")]


def test_descriptors_can_be_left_untracked(tmp_path):
    prog = compile_program("fdserver.c", memleak_include())
    out = run_traced(prog, "2", cwd=tmp_path, config="fds=no")
    assert out.stdout.splitlines()[-1] == "held: -1 0 0"  # no kind "fd" to ask about
    reports = reports_of(tmp_path, "fdserver", only_pid(tmp_path, "fdserver"))
    assert all(r.header["fds"] == "not tracked (MEMLEAK_CONFIG fds=no)" for r in reports)
    assert not summed(reports)
    text = cli("report", tmp_path).stdout
    assert "file descriptors: not tracked (MEMLEAK_CONFIG fds=no)" in text
    gate = cli("check", "--max-held", "fd=100", tmp_path)
    assert gate.returncode == 1 and "file descriptors not tracked (MEMLEAK_CONFIG fds=no)" in gate.stdout


def fdchurn_report(tmp_path, mode, says):
    """fdchurn.c run traced in `mode`: its one report, once it said `says`."""
    out = run_traced(compile_program("fdchurn.c"), mode, cwd=tmp_path)
    assert out.stdout == says
    (report,) = reports_of(tmp_path, "fdchurn", only_pid(tmp_path, "fdchurn"))
    return report


def test_threads_opening_and_closing_at_once_leave_exact_counts(tmp_path):
    report = fdchurn_report(tmp_path, "threads", "kept 24\n")
    # 8 x 2,000 opened and closed by open, fopen, dup and close, all at once
    assert resource_sites(report) == {"keep_three": (24, 24)}
    assert report.header["resource-live fd"] == "24 24"


def test_a_failed_exec_keeps_close_on_exec_descriptors_counted(tmp_path):
    report = fdchurn_report(tmp_path, "exec", "exec failed\n")
    assert resource_sites(report) == {"opened_for_exec": (2, 2)}


def test_a_forked_child_closes_its_own_copies(tmp_path):
    prog = compile_program("fdchurn.c")
    out = run_traced(prog, "fork", cwd=tmp_path)
    child = int(out.stdout.split()[1])
    # the child's last report is the keeper's, written after it is gone: wait for it
    wait_for_file(report_path(tmp_path, "fdchurn", child, 1))
    parent = [p for p in {int(n.split("-")[1]) for n in os.listdir(tmp_path) if n.endswith(".memlog")}
              if p != child]
    assert len(parent) == 1
    (mine,) = reports_of(tmp_path, "fdchurn", parent[0])
    assert resource_sites(mine) == {"inherited": (2, 2)}
    theirs = reports_of(tmp_path, "fdchurn", child)
    assert theirs[-1].header["reason"] in ("exit", "death") and summed(theirs) == {"inherited": (1, 1)}  # it closed one of the two it inherited


def test_kinds_the_program_names(tmp_path):
    prog = compile_program("gpubuffers.c", memleak_include())
    out = run_traced(prog, "6", cwd=tmp_path)
    # three 1 MiB textures kept; scratch buffers and connections given back
    assert out.stdout == "gpu-buffer: 0 3145728 3\nconnection: 0 0\n"
    reports = reports_of(tmp_path, "gpubuffers", only_pid(tmp_path, "gpubuffers"))
    assert summed(reports, "gpu-buffer") == {"upload_texture": (3 << 20, 3)}
    assert summed(reports, "connection") == {}
    last = reports[-1]
    assert last.header["resource-live gpu-buffer"] == "3145728 3"
    assert last.header["resource-live connection"] == "0 0"
    assert last.header["resource-live fd"] == "0 0"
    text = cli("report", tmp_path).stdout
    assert "resource gpu-buffer: 3 held at the last report, weighing 3,145,728" in text
    assert "file descriptors" not in text  # it opened none while traced
    assert "gpu-buffer leak suspects" in text and "upload_texture (gpubuffers.c:" in text
    assert cli("check", "--max-held", "gpu-buffer=2", tmp_path).returncode == 1
    assert cli("check", "--max-held", "gpu-buffer=3", "--max-held", "connection=0", tmp_path).returncode == 0
    bare = subprocess.run([prog, "2"], cwd=tmp_path, capture_output=True, text=True, env=BARE_ENV, timeout=60)
    assert bare.stdout == "gpu-buffer: -1 0 0\nconnection: 0 0\n"


def test_a_report_file_forging_resource_fields_reads_without_a_traceback(tmp_path):
    path = tmp_path / "forged-1-1.memlog"
    path.write_text("# libmemleak: 0.1.0\n# pid: 1\n# seq: 1\n# reason: exit\n# resource-live fd: x y\n"
                    "# resource-live : 1\n+1 +1 resource=\n\tf\t(/bin/x)\n"
                    "+5 +5 resource=fd resource=gpu\n\tg\t(/bin/x)\n-3 -3 resource=fd\n")
    for args in (("report",), ("report", "--json"), ("check", "--max-held", "fd=0")):
        out = cli(*args, tmp_path)
        assert "Traceback" not in out.stderr, out.stderr
        assert out.returncode in (0, 1), out
    assert "resource gpu: 5 held" in cli("report", tmp_path).stdout


def test_descriptors_open_before_collection_are_said(tmp_path):
    """A program started with descriptors it did not open while traced
    (inherited across an exec: here two pipe ends its starter passed on)
    holds them in no entry; every report and `report` say how many."""
    prog = compile_program("fdchurn.c")
    r, w = os.pipe()
    try:
        out = subprocess.run([*cli_argv("run", "-q"), prog, "threads"], cwd=tmp_path, env=CLI_ENV, capture_output=True,
                             text=True, timeout=180, pass_fds=(r, w))
    finally:
        os.close(r)
        os.close(w)
    assert out.returncode == 0, out.stderr
    (report,) = reports_of(tmp_path, "fdchurn", only_pid(tmp_path, "fdchurn"))
    assert report.header["fds-before-collection"].startswith("2 descriptors (3 and up) were open")
    assert resource_sites(report) == {"keep_three": (24, 24)}  # they are in no entry
    text = cli("report", tmp_path).stdout
    assert "file descriptors: 24 held at the last report (and 2 open before collection started" in text
    assert json.loads(cli("report", "--json", tmp_path).stdout)["processes"][0]["fds_before_collection"] == 2
