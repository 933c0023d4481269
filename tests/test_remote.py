"""The remote mode (#24): a traced process started with listen=HOST:PORT in
one network namespace, driven by `libmemleak shell HOST:PORT` from
another (loopback where namespaces cannot be made), with the secret it
printed -- and refused with any other."""

import contextlib
import os
import re
import subprocess
import time
import uuid


from helpers import CLI_ENV, cli, cli_argv, compile_program
from libmemleak.files import memlog

SECRET_LINE = re.compile(r"listening on (\S+) for remote shells of pid (\d+): libmemleak shell "
                         r"HOST:(\d+) with the secret ([0-9a-f]{64}) \(also in (\S+)\)")


def _ip(*args):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20).returncode == 0


@contextlib.contextmanager
def far_side():
    """(prefix to run a command in another network namespace, its address),
    or the loopback's when no namespace can be made here."""
    name = "mlk" + uuid.uuid4().hex[:8]
    a, b = name + "a", name + "b"
    if not (_ip("netns", "add", name) and _ip("link", "add", a, "type", "veth", "peer", "name", b)):
        _ip("netns", "del", name)
        yield [], "127.0.0.1"
        return
    try:
        ok = (_ip("link", "set", b, "netns", name) and _ip("addr", "add", "10.213.7.1/30", "dev", a)
              and _ip("link", "set", a, "up")
              and _ip("netns", "exec", name, "ip", "addr", "add", "10.213.7.2/30", "dev", b)
              and _ip("netns", "exec", name, "ip", "link", "set", b, "up")
              and _ip("netns", "exec", name, "ip", "link", "set", "lo", "up"))
        if ok:
            yield ["ip", "netns", "exec", name], "10.213.7.2"
        else:
            yield [], "127.0.0.1"
    finally:
        _ip("link", "del", a)
        _ip("netns", "del", name)


def read_until_secret(p):
    """The program's stderr up to the reporter's listening line."""
    while True:
        line = p.stderr.readline().decode()
        assert line, "the reporter never said where it listens"
        m = SECRET_LINE.search(line)
        if m:
            return m


def test_a_remote_shell_across_network_namespaces(tmp_path):
    prog = compile_program("slowleaks_server.cc")
    remote_dir, local_dir = tmp_path / "target", tmp_path / "shell"
    remote_dir.mkdir()
    with far_side() as (prefix, address):
        p = subprocess.Popen([*prefix, *cli_argv("run", "-q", "--config", f"listen={address}:0", prog)],
                             cwd=remote_dir, env=CLI_ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        try:
            m = read_until_secret(p)
            port, secret, secret_file = m.group(3), m.group(4), m.group(5)
            with open(secret_file) as f:
                assert f.read() == f"{secret}\nlistening on {address}:{port}\n"
            assert os.stat(secret_file).st_mode & 0o777 == 0o600
            for _ in range(3):
                assert p.stdout.readline() == b"checkpoint round\n"
                p.stdin.write(b"\n")
                p.stdin.flush()
            assert p.stdout.readline() == b"checkpoint round\n"  # round 4, held there
            target = f"{address}:{port}"
            # Noise first: a client that sends nonsense and one that says nothing
            # and leaves; the server goes on serving.
            import socket
            for junk in (b"\xff garbage\n", b""):
                with socket.create_connection((address, int(port)), timeout=10) as raw:
                    raw.recv(4096)  # the hello
                    raw.sendall(junk)
            # A wrong secret: refused, nothing served.
            out = cli("shell", target, "--dir", local_dir, "-c", "report",
                      env=dict(CLI_ENV, MEMLEAK_SECRET="00" * 32), timeout=60)
            assert (out.returncode, out.stderr) == (1, f"libmemleak: shell: {target} refused: wrong secret\n")
            assert not os.listdir(remote_dir)
            # The right one.
            out = cli("shell", target, "--dir", local_dir, "-c", "report; top 3; stop; start; scan",
                      env=dict(CLI_ENV, MEMLEAK_SECRET=secret), timeout=120)
            assert out.returncode == 0, out.stderr
            assert f"slowleaks_server (pid {p.pid}): 2 reports" in out.stdout  # top took one, read from the copy
            assert "what grew from report 1 to report 2" in out.stdout
            assert "definitely lost: 300 bytes in 1 block" in out.stdout       # round 2's error path
            assert "parse_error_path (slowleaks_server.cc:30)" in out.stdout
            assert "recording paused" in out.stdout and "recording resumed" in out.stdout
            assert "definitely lost" in out.stdout
            names = sorted(os.listdir(remote_dir))
            assert [n.rsplit("-", 1)[1] for n in names] == ["1.memlog", "2.memlog", "3.memlog"]
            assert sorted(os.listdir(local_dir)) == names  # copies of what the far side wrote
            for n in names:
                assert (local_dir / n).read_bytes() == (remote_dir / n).read_bytes()
            first = memlog.read(str(local_dir / names[0]))
            assert first.header["reason"] == "snapshot"
            assert memlog.read(str(local_dir / names[1])).header["reason"] == "snapshot"   # top's
            assert memlog.read(str(local_dir / names[2])).header["reason"] == "scan"
            p.stdin.write(b"\n" * 8)
            p.stdin.flush()
            p.communicate(timeout=60)
            assert p.returncode == 0
            assert not os.path.exists(secret_file)  # gone with the reporter
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_remote_shell_mistakes_are_one_line(tmp_path):
    out = cli("shell", "127.0.0.1:1", "-c", "report", env=dict(CLI_ENV, MEMLEAK_SECRET="ab"))
    assert out.returncode == 1
    assert out.stderr.startswith("libmemleak: shell: cannot connect to 127.0.0.1:1: ")
    out = cli("shell", "nowhere", "-c", "report")
    assert (out.returncode, out.stderr) == (2, "libmemleak: shell: 'nowhere' is neither a PID nor HOST:PORT\n")
    # a file it cannot read, or one that is no event log: said so (#64 item 15)
    (tmp_path / "x.events").mkdir()
    out = cli("shell", tmp_path / "x.events", "-c", "report")
    assert out.returncode == 2 and out.stderr.endswith("x.events': Is a directory\n"), out.stderr
    (tmp_path / "y-1-1.memlog").write_text("# libmemleak: 0.1.0\n")
    out = cli("shell", tmp_path / "y-1-1.memlog", "-c", "report")
    assert out.returncode == 2 and "is not an event log" in out.stderr and out.stderr.count("\n") == 1
    out = cli("shell", "127.0.0.1:1", "-c", "report", env={k: v for k, v in CLI_ENV.items()
                                                             if k != "MEMLEAK_SECRET"})
    assert (out.returncode, out.stderr) == (
        1, "libmemleak: shell: no secret: give --secret-file FILE or set MEMLEAK_SECRET\n")


def test_attach_with_listen_says_where_and_the_secret_file_serves_a_shell(tmp_path):
    """An attached daemon's stderr is a log nobody reads: attach says where
    it listens and which file holds the secret, and that file is what the
    shell takes; detach ends the server and removes the file."""
    prog = compile_program("attachee.c")
    p = subprocess.Popen([prog], cwd=tmp_path, env={k: v for k, v in CLI_ENV.items() if k != "PYTHONPATH"},
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert p.stdout.readline() == b"checkpoint attach\n"
        out = cli("attach", "--config", "listen=127.0.0.1:0", p.pid, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        m = re.search(r"listening on 127\.0\.0\.1:(\d+) for remote shells: libmemleak shell HOST:\1 "
                      r"--secret-file (\S+) \(copy that file", out.stderr)
        assert m, out.stderr
        port, secret_file = m.group(1), m.group(2)
        p.stdin.write(b"\n")
        p.stdin.flush()
        assert p.stdout.readline() == b"sum 99000\n"
        assert p.stdout.readline() == b"checkpoint counted\n"
        copies = tmp_path / "copies"
        out = cli("shell", f"127.0.0.1:{port}", "--secret-file", secret_file, "--dir", copies,
                  "-c", "report")
        assert out.returncode == 0, out.stderr
        assert "+1,000 B +10 blocks  leak_after_attach" in out.stdout
        assert cli("detach", "-q", p.pid, cwd=tmp_path).returncode == 0
        deadline = time.monotonic() + 120  # (a loaded machine: the detach's reporter ends when it ends)
        while os.path.exists(secret_file) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(secret_file)
        p.communicate(b"\n\n", timeout=60)
        assert p.returncode == 7
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
