"""`libmemleak scan PID...`: what a running traced process has lost, now.

The process's reporter stops its threads for a moment (no signal the
program sees), classifies every live block as valgrind memcheck does --
definitely, indirectly, possibly lost, still reachable -- and writes a
report with reason `scan` whose entries carry each stack's split
(docs/scan.md).  This prints where it is and the answer: the four totals,
and the stacks that lost memory, definitely lost first."""

import sys

from libmemleak.analysis import lost
from libmemleak.live.client import LiveError, request_report
from libmemleak.daemon.reachability import heuristics_field
from libmemleak.files.memlog import MemlogError, read as read_memlog
from libmemleak.outputs.text import render_scan

EXIT_FAILED, EXIT_USAGE = 1, 2


def add_parser(sub):
    p = sub.add_parser("scan", help="what a running traced process has lost: valgrind's categories",
                       description="Stop each traced process PID for a moment, find which of its "
                                   "live blocks are definitely, indirectly or possibly lost or "
                                   "still reachable (valgrind memcheck's rules), and write that "
                                   "in a report (reason: scan). Prints the report's path and "
                                   "the stacks that lost memory.")
    p.add_argument("pids", metavar="PID", type=int, nargs="+")
    p.add_argument("--top", metavar="N", type=int, default=10,
                   help="stacks shown per category (default 10; 0: only the totals)")
    p.add_argument("--full-names", action="store_true", help="C++ names in full")
    p.add_argument("--timeout", metavar="SECONDS", type=float, default=60.0,
                   help="how long to wait for each scan (default 60)")
    p.add_argument("--heuristics", metavar="SET", default="all",
                   help="interior pointers that count as pointers to the start: all (the default: "
                        "valgrind's four and an allocator's header), valgrind (its four, as its "
                        "default: to compare), none, or some of stdstring,length64,newarray,"
                        "multipleinheritance,header")
    p.set_defaults(func=run)


def run(args):
    try:
        heuristics = heuristics_field(args.heuristics)
    except ValueError as e:
        print(f"libmemleak: scan: --heuristics: {e}", file=sys.stderr)
        return EXIT_USAGE
    status = 0
    for pid in args.pids:
        try:
            path = request_report(pid, args.timeout, scan=True, heuristics=heuristics)
        except LiveError as e:
            print(f"libmemleak: scan: {e}", file=sys.stderr)
            status = EXIT_FAILED
            continue
        print(path, flush=True)
        try:
            report = read_memlog(path)
        except (OSError, MemlogError) as e:
            print(f"libmemleak: scan: {e}", file=sys.stderr)
            status = EXIT_FAILED
            continue
        result = lost.from_report(report)
        if result is None:
            why = report.header.get("scan", "the report carries no scan")
            print(f"libmemleak: scan: process {pid}: {why}", file=sys.stderr)
            status = EXIT_FAILED
            continue
        sys.stdout.write(render_scan(result, pid, args.top, args.full_names,
                                     report.header.get("program")))
    return status
