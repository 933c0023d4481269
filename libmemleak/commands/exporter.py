"""`libmemleak exporter --listen HOST:PORT`: one process per host (or
pod) that serves every traced process this user may read to Prometheus
(/metrics), from their segments, without touching them and without
writing a report (libmemleak/fleet/)."""

import signal
import sys

EXIT_FAILED = 1
EXIT_USAGE = 2
DEFAULT_LISTEN = "127.0.0.1:9465"
DEFAULT_SUSPECTS = 5
MAX_SUSPECTS = 50  # a bounded label set


def add_parser(sub):
    p = sub.add_parser("exporter", help="serve the traced processes' numbers to Prometheus (/metrics)",
                       description="Serve every traced process this user may read over HTTP: "
                                   "/metrics in Prometheus's text format (live bytes and blocks, "
                                   "allocated and freed bytes, RSS, blind spots; labelled by pid, "
                                   "program, and pod/namespace/container where it runs in one). "
                                   "Nothing is written to the processes or their report files.")
    p.add_argument("--listen", metavar="HOST:PORT", default=DEFAULT_LISTEN,
                   help=f"address to serve on (default {DEFAULT_LISTEN}; [::1]:PORT for IPv6; "
                        "port 0 picks a free one, said on stderr)")
    p.add_argument("--suspects", metavar="K", type=int, default=DEFAULT_SUSPECTS,
                   help=f"leak suspects served per process in /metrics, ranked as `report` ranks its "
                        f"reports (default {DEFAULT_SUSPECTS}, at most {MAX_SUSPECTS}; 0: none)")
    p.set_defaults(func=run)


def parse_listen(text):
    """(host, port) of HOST:PORT or [HOST]:PORT, or None."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        return None
    return (host or "0.0.0.0"), int(port)


def run(args):
    where = parse_listen(args.listen)
    if where is None:
        print(f"libmemleak: exporter: --listen {args.listen!r}: give HOST:PORT (e.g. {DEFAULT_LISTEN})",
              file=sys.stderr)
        return EXIT_USAGE
    if not 0 <= args.suspects <= MAX_SUSPECTS:
        print(f"libmemleak: exporter: --suspects {args.suspects}: give 0 to {MAX_SUSPECTS}", file=sys.stderr)
        return EXIT_USAGE
    from libmemleak.fleet.server import serve
    # SIGTERM (a service manager's stop) ends it as ^C does: its scrapes
    # answered, its segments let go.  (^C alone is not enough: a job started
    # in the background, under nohup or by a CI runner ignores SIGINT.)
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        serve(*where, suspects=args.suspects)
    except OSError as e:
        print(f"libmemleak: exporter: cannot serve on {args.listen}: {e.strerror or e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        pass
    return 0


def _interrupted(signum, frame):
    raise KeyboardInterrupt
