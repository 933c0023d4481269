"""The remote mode: a shell on another host drives a traced process.

With MEMLEAK_CONFIG listen=HOST:PORT the process's reporter (the root's
only) serves the control channel over TCP (Server, a thread of the
reporter): the same requests `libmemleak snapshot`, `scan` and the shell's
stop/start make locally through the segment, and the reports' text sent
back, so that the far side keeps copies and answers `top`, `trend` and
`diff` from them with the same analysis.

Nothing is served before the client proves it knows the secret: at start
the reporter makes 32 random bytes, writes them hex-encoded to a file only
its user may read (/tmp/libmemleak-UID/remote-PID.secret, exclusive
create, no-follow) and prints them once on the program's stderr; a client
answers a fresh random challenge with HMAC-SHA256(secret, challenge), so
the secret never crosses the network.  A wrong answer is refused after a
second's pause and the connection closed.  The traffic itself is not
encrypted: across an untrusted network, tunnel it (ssh -L).

The protocol: one JSON object per line each way.
  server: {"libmemleak": VERSION, "pid", "program", "challenge": HEX}
  client: {"answer": HEX}            server: {"ok": true} | {"error": WHY}
  client: {"op": "report", "scan": BOOL, "heuristics": INT|null}
          {"op": "collecting", "on": BOOL}
          {"op": "fetch", "have": [NAME, ...]}
  server: {"ok": true, "name": NAME, ...} | {"error": WHY}
          fetch answers {"ok": true, "reports": [[NAME, TEXT], ...]}: the
          process's reports the client does not have yet."""

import hashlib
import hmac
import json
import os
import secrets
import socket
import sys
import threading
import time

from libmemleak import __version__
from libmemleak.memlog import report_names

SECRET_BYTES = 32
REFUSE_PAUSE_SECONDS = 1.0
MAX_LINE = 1 << 20            # a client's request line, at most
CLIENT_TIMEOUT = 600.0


class RemoteError(Exception):
    """Why the remote process cannot be reached or asked (one line)."""


def parse_address(text):
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise RemoteError(f"{text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def answer(secret_hex, challenge_hex):
    return hmac.new(bytes.fromhex(secret_hex), bytes.fromhex(challenge_hex), hashlib.sha256).hexdigest()


def _send(sock, obj):
    sock.sendall(json.dumps(obj).encode() + b"\n")


class _Lines:
    """Newline-delimited JSON from a socket."""

    def __init__(self, sock, limit=None):
        self.sock, self.buf, self.limit = sock, b"", limit

    def read(self):
        while b"\n" not in self.buf:
            if self.limit and len(self.buf) > self.limit:
                raise RemoteError("request too long")
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise RemoteError("connection closed")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        try:
            return json.loads(line)
        except ValueError:
            raise RemoteError("not a libmemleak remote message") from None


# -- the server: a thread of the root's reporter ----------------------------------

def secret_path(pid):
    from libmemleak.reporter import fallback_directory
    return os.path.join(fallback_directory(), f"remote-{pid}.secret")


def write_secret(pid, bound):
    """A new secret, in an owner-only file (the secret on its first line,
    where it listens on the second); its path and value."""
    path = secret_path(pid)
    value = secrets.token_hex(SECRET_BYTES)
    try:
        os.unlink(path)  # a previous reporter's, for this pid (pids are reused)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{value}\nlistening on {bound}\n")
    return path, value


class Server:
    """Serves one client at a time (a shell is one user at a prompt)."""

    def __init__(self, segment, address, say):
        self.seg, self.say = segment, say
        self.pid = segment.header.pid
        host, port = parse_address(address)
        self.listener = socket.create_server((host, port), family=_family(host), reuse_port=False)
        self.listener.settimeout(None)
        bound = self.listener.getsockname()
        self.secret_file, self.secret = write_secret(self.pid, f"{bound[0]}:{bound[1]}")
        path = self.secret_file
        say(f"listening on {bound[0]}:{bound[1]} for remote shells of pid {self.pid}: "
            f"libmemleak shell HOST:{bound[1]} with the secret {self.secret} (also in {path})")

    def start(self):
        threading.Thread(target=self._serve_forever, name="libmemleak-remote", daemon=True).start()

    def close(self):
        """The reporter ends: no more shells, and the secret goes."""
        self.listener.close()
        try:
            os.unlink(self.secret_file)
        except OSError:
            pass

    def _serve_forever(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(CLIENT_TIMEOUT)
                try:
                    self._serve(conn)
                except (RemoteError, OSError, ValueError, TypeError, KeyError):
                    pass  # the client went away or spoke nonsense: the next one

    def _serve(self, conn):
        lines = _Lines(conn, MAX_LINE)
        challenge = secrets.token_hex(32)
        _send(conn, {"libmemleak": __version__, "pid": self.pid,
                     "program": self.seg.program_name(), "challenge": challenge})
        reply = lines.read()
        expected = answer(self.secret, challenge)
        if not isinstance(reply, dict) or not hmac.compare_digest(str(reply.get("answer", "")), expected):
            time.sleep(REFUSE_PAUSE_SECONDS)
            _send(conn, {"error": "wrong secret"})
            return
        _send(conn, {"ok": True})
        while True:
            request = lines.read()
            _send(conn, self._answer(request if isinstance(request, dict) else {}))

    def _answer(self, request):
        from libmemleak.live import LiveError, request_on_segment, set_collecting_on_segment
        op = request.get("op")
        try:
            if op == "report":
                heuristics = request.get("heuristics")
                path = request_on_segment(self.seg, float(request.get("timeout", 60)),
                                          bool(request.get("scan")),
                                          int(heuristics) if heuristics is not None else None)
                return {"ok": True, "name": os.path.basename(path)}
            if op == "collecting":
                set_collecting_on_segment(self.seg, bool(request.get("on")))
                return {"ok": True}
            if op == "fetch":
                have = set(request.get("have") or ())
                return {"ok": True, "reports": self._reports(have)}
        except LiveError as e:
            return {"error": str(e)}
        return {"error": f"unknown request {op!r}"}

    def _reports(self, have):
        directory = self.seg.report_dir()
        out = []
        for name in report_names(directory, self.seg.program_name(), self.pid):
            if name not in have:
                try:
                    with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as f:
                        out.append([name, f.read()])
                except OSError:
                    continue
        return out


def _family(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def serve_if_asked(segment, say):
    """Start the server when the segment names an address (the root's
    reporter only); says why not in one line if it cannot."""
    h = segment.header
    if not h.listen_len or h.parent_pid:
        return None
    address = segment.string(h.listen_off, h.listen_len)
    try:
        server = Server(segment, address, say)
    except (OSError, RemoteError) as e:
        say(f"listen={address}: cannot serve remote shells: {getattr(e, 'strerror', None) or e}")
        return None
    server.start()
    return server


# -- the client: what the shell talks to ---------------------------------------------

class Client:
    """A connection to a remote process's reporter; its reports mirrored
    into `directory`."""

    def __init__(self, address, secret, directory, timeout=60.0):
        host, port = parse_address(address)
        self.address, self.directory, self.timeout = address, directory, timeout
        try:
            bytes.fromhex(secret.strip())
        except ValueError:
            raise RemoteError("the secret is not the hex string the process printed") from None
        try:
            self.sock = socket.create_connection((host, port), timeout=30)
        except OSError as e:
            raise RemoteError(f"cannot connect to {address}: {e.strerror or e}") from None
        # a silent peer (not a libmemleak remote) must not hang the shell
        self.sock.settimeout(max(60.0, timeout + 30.0))
        self.lines = _Lines(self.sock)
        try:
            hello = self.lines.read()
            if not isinstance(hello, dict) or "challenge" not in hello or "pid" not in hello:
                raise RemoteError(f"{address} is not a libmemleak remote")
            try:
                self.pid, self.program = int(hello["pid"]), str(hello.get("program", "?"))
                response = answer(secret.strip(), str(hello["challenge"]))
            except ValueError:
                raise RemoteError(f"{address} is not a libmemleak remote") from None
        except OSError as e:
            raise RemoteError(f"{address}: {e.strerror or e or 'timed out'}") from None
        self._exchange({"answer": response}, "refused: ")

    def _exchange(self, message, refused=""):
        """Send one message, read the answer: it must say ok."""
        try:
            _send(self.sock, message)
            reply = self.lines.read()
        except OSError as e:
            raise RemoteError(f"{self.address}: {e.strerror or e or 'timed out'}") from None
        if not isinstance(reply, dict) or not reply.get("ok"):
            why = reply.get("error", "failed") if isinstance(reply, dict) else "not understood"
            raise RemoteError(f"{self.address} {refused}{why}" if refused else f"{self.address}: {why}")
        return reply

    def _ask(self, **request):
        return self._exchange(request)

    def sync(self):
        """Copy the reports not here yet; their number."""
        have = [n for n in os.listdir(self.directory) if n.endswith(".memlog")]
        got = self._ask(op="fetch", have=have).get("reports") or []
        for item in got:
            if not (isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item)):
                continue
            name, text = item
            if os.path.basename(name) != name or not name.endswith(".memlog"):
                continue  # a name that would leave the directory: not ours to write
            fd = os.open(os.path.join(self.directory, name),
                         os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
        return len(got)

    def request_report(self, scan=False, heuristics=None):
        name = str(self._ask(op="report", scan=scan, heuristics=heuristics, timeout=self.timeout).get("name"))
        if os.path.basename(name) != name:
            raise RemoteError(f"{self.address}: not understood")
        self.sync()
        return os.path.join(self.directory, name)

    def set_collecting(self, on):
        self._ask(op="collecting", on=on)

    def close(self):
        self.sock.close()


def read_secret(args_secret_file):
    """The secret: --secret-file, else $MEMLEAK_SECRET, else asked for."""
    if args_secret_file:
        try:
            with open(args_secret_file) as f:
                return f.readline().strip()  # the second line says where it listens
        except OSError as e:
            raise RemoteError(f"{args_secret_file}: {e.strerror}") from None
    if os.environ.get("MEMLEAK_SECRET"):
        return os.environ["MEMLEAK_SECRET"].strip()
    if sys.stdin.isatty():
        import getpass
        return getpass.getpass("secret (printed by the process, or in its remote-PID.secret): ")
    raise RemoteError("no secret: give --secret-file FILE or set MEMLEAK_SECRET")
