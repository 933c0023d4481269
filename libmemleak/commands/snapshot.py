"""`libmemleak snapshot PID...`: a report from a running traced process,
without a signal (memcached shuts down on SIGUSR1; nginx reopens its logs).
Works for every traced process the caller may read: descendants and
workers that dropped their privileges included (libmemleak/live/client.py)."""

import sys

from libmemleak.live.client import LiveError, request_report

EXIT_FAILED = 1


def add_parser(sub):
    p = sub.add_parser("snapshot", help="ask a running traced process for a report, no signal sent",
                       description="Ask each traced process PID for a report now, as its report "
                                   "signal would, without sending it a signal; print the report's "
                                   "path when it is on disk.")
    p.add_argument("pids", metavar="PID", type=int, nargs="+")
    p.add_argument("--timeout", metavar="SECONDS", type=float, default=60.0,
                   help="how long to wait for each report (default 60)")
    p.set_defaults(func=run)


def run(args):
    status = 0
    for pid in args.pids:
        try:
            print(request_report(pid, args.timeout), flush=True)
        except LiveError as e:
            print(f"libmemleak: snapshot: {e}", file=sys.stderr)
            status = EXIT_FAILED
    return status
