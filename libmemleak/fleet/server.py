"""The exporter's HTTP side: GET /metrics (Prometheus),
/debug/pprof/heap?pid=PID and /debug/pprof/allocs?pid=PID (pprof, as Go
serves them), and / (what is served).  Requests are served side by
side, a thread each, at most MAX_REQUESTS at once (more are closed
unanswered): a profile can take seconds to make, and a Prometheus scrape
must not wait for it, nor a peer that sends its request slowly hold the
others up.  Everything else is 404; a request line or header that is too
long is refused by http.server itself."""

import http.server
import socket
import socketserver
import sys
import threading
import urllib.parse

from libmemleak.fleet.metrics import exposition
from libmemleak.fleet.processes import Processes

PROFILES = {"/debug/pprof/heap": "heap", "/debug/pprof/allocs": "allocs"}
INDEX = (b"<html><head><title>libmemleak exporter</title></head><body>"
         b"<h1>libmemleak exporter</h1><p><a href=\"/metrics\">/metrics</a>: every traced process "
         b"this exporter may read, in Prometheus's text format.</p><p>/debug/pprof/heap?pid=PID, "
         b"/debug/pprof/allocs?pid=PID: a process's heap as Go's net/http/pprof serves it.</p>"
         b"</body></html>\n")


MAX_REQUESTS = 16  # served at once


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "libmemleak-exporter"
    timeout = 10      # seconds a peer may take to send its request
    processes = None  # set by serve()

    def do_GET(self):
        try:
            self._get()
        except Exception as e:  # noqa: BLE001 -- one line, never a traceback; the next scrape is served
            print(f"libmemleak: exporter: {self.path[:200]!r}: {type(e).__name__}: {e}", file=sys.stderr,
                  flush=True)
            self._answer(500, "text/plain; charset=utf-8", b"internal error: said on the exporter's stderr\n")

    def _get(self):
        path, _, query = self.path.partition("?")
        if path == "/metrics":
            body = exposition(self.processes.samples()).encode("utf-8")
            self._answer(200, "text/plain; version=0.0.4; charset=utf-8", body)
        elif path in PROFILES:
            self._profile(PROFILES[path], urllib.parse.parse_qs(query).get("pid", [""])[0])
        elif path == "/":
            self._answer(200, "text/html; charset=utf-8", INDEX)
        else:
            self._answer(404, "text/plain; charset=utf-8", b"not found: try /metrics\n")

    def _profile(self, which, pid):
        if not pid.isdigit() or len(pid) > 10:
            self._answer(400, "text/plain; charset=utf-8", b"give the process: ?pid=PID\n")
            return
        body = self.processes.profile(int(pid), which)
        if body is None:
            self._answer(404, "text/plain; charset=utf-8",
                         f"no traced process {pid} this exporter may read\n".encode())
            return
        self._answer(200, "application/octet-stream", body,
                     {"Content-Disposition": f'attachment; filename="{which}"'})

    def _answer(self, status, content_type, body, headers=None):
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the peer gave up waiting (a scraper's timeout): what was made is kept for its next scrape

    def log_message(self, format, *args):  # noqa: A002 -- http.server's name
        pass  # (a scrape every few seconds: no line each)


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True      # (a request still being served does not hold the exit)
    block_on_close = False

    def __init__(self, *args):
        self.slots = threading.BoundedSemaphore(MAX_REQUESTS)
        super().__init__(*args)

    def process_request(self, request, client_address):
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)  # (busy: the peer sees the connection closed)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class _IPv6Server(_Server):
    address_family = socket.AF_INET6


def serve(host, port, suspects=5, say=lambda line: print(line, file=sys.stderr, flush=True)):
    """Serve until interrupted, `suspects` a process in /metrics.  Raises
    OSError when the address cannot be bound."""
    processes = Processes(suspects, say)
    handler = type("BoundHandler", (Handler,), {"processes": processes})
    server_class = _IPv6Server if ":" in host else _Server
    with server_class((host, port), handler) as server:
        shown = f"[{host}]" if ":" in host else host
        say(f"libmemleak: exporter serving http://{shown}:{server.server_address[1]}/metrics "
            "(every traced process this user may read)")
        try:
            server.serve_forever()
        finally:
            processes.close()
