"""`libmemleak check PATH... [--max-live BYTES] [--max-growth BYTES]
[--max-leaks N] [--max-definitely-lost BYTES] [--max-held KIND=N]
[--max-misuse N]`: a CI gate over the reports of a test run.  Exit status 0
when every limit holds, 1 (and the offending stacks on stdout) when one is
passed, 2 on bad input, 3 when the reports say the tracer could not see the
heap (no verdict) -- usable in a Makefile, ctest or a CI step."""

import sys

from libmemleak.analysis.names import frame_text, shown_frames
from libmemleak.analysis.trends import analyse, count, human_bytes, resource_title
from libmemleak.analysis import misuse, suppressions
from libmemleak.analysis.replay import timeline_series
from libmemleak.commands.inputs import reports_or_logs
from libmemleak.commands import (EXIT_BAD_INPUT, EXIT_NOT_SEEN, add_layer_options, add_suppressions_option, byte_size,
                                 layer_args, load_suppressions, say_blind)


def add_parser(sub):
    p = sub.add_parser("check", help="exit 1 when the reports pass a limit (for CI)",
                       description="Fail (exit 1) when a process of the reports in PATH has more "
                                   "live bytes at its end than --max-live, a stack that grew more "
                                   "than --max-growth while it ran, more leak suspects than "
                                   "--max-leaks, or more definitely lost bytes at its latest scan "
                                   "than --max-definitely-lost, or more resources of a kind held at "
                                   "its end than --max-held (fd=N: file descriptors), or more misuses of "
                                   "the allocator (double or invalid frees, mismatched deletes) than "
                                   "--max-misuse.  Exit 0 when every limit holds, 2 on bad input, "
                                   "3 when the reports say part of the heap was not seen.")
    p.add_argument("paths", metavar="PATH", nargs="+")
    p.add_argument("--max-live", type=byte_size, metavar="BYTES",
                   help="live bytes a process may hold at its last report")
    p.add_argument("--max-growth", type=byte_size, metavar="BYTES",
                   help="bytes one stack may grow by while the program ran")
    p.add_argument("--max-leaks", type=int, metavar="N", help="leak suspects allowed per process")
    p.add_argument("--max-definitely-lost", type=byte_size, metavar="BYTES",
                   help="definitely lost bytes a process may have at its latest scan (run the "
                        "tests with MEMLEAK_CONFIG=scan=exit or libmemleak run --scan-at-exit); "
                        "a process without a scan fails it")
    p.add_argument("--max-held", action="append", type=_kind_limit, metavar="KIND=N", default=[],
                   help="resources of KIND a process may hold at its last report: fd=N for file "
                        "descriptors, or a kind the program names (memleak_resource_acquire); "
                        "repeatable.  A process whose reports did not track KIND fails it")
    p.add_argument("--max-misuse", type=int, metavar="N",
                   help="misuses of the allocator a process may make (double and invalid frees, "
                        "mismatched free/delete/delete[], sized deletes of another size): 0 in CI.  "
                        "A process whose reports did not check them fails it")
    add_layer_options(p)
    add_suppressions_option(p)
    p.set_defaults(func=run)


def _kind_limit(text):
    import argparse
    kind, sep, number = text.partition("=")
    if not sep or not kind or not number.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: give KIND=N, as fd=100")
    return kind, int(number)


def _show(t, executable, layer=None):
    frames, _, _ = shown_frames(t.frames, executable, keep=3, layer=layer)
    return " <- ".join(frame_text(f) for f in frames)


def _held_over(name, a, kind, limit, executable):
    """Says (and returns True) when the process held more of `kind` at its
    end than `limit`, or its reports did not track it."""
    title = resource_title(kind)
    if kind not in a.resources:
        why = " (MEMLEAK_CONFIG fds=no)" if kind == "fd" and a.fds_untracked else ""
        print(f"{name}: {title} not tracked{why}, so --max-held {kind}={limit} cannot hold")
        return True
    held = a.resources[kind][1]
    if held <= limit:
        return False
    print(f"{name}: {title}: {held:,} held at its end, over --max-held {kind}={limit}")
    for t in sorted((t for t in a.resource_trends if t.resource == kind), key=lambda t: -t.live_blocks)[:5]:
        if t.live_blocks > 0:
            print(f"  {t.live_blocks:>6,} held  {_show(t, executable, a.layer)}")
    return True


def _misuse_over(name, a, limit, executable):
    """Says (and returns True) when the process misused the allocator more
    than `limit` times, or its reports did not check."""
    if a.misuse_unchecked:
        print(f"{name}: misuse of the allocator not checked ({a.misuse_unchecked}), so --max-misuse "
              f"{limit} cannot hold")
        return True
    partly = misuse.partly_checked(a.series)
    if partly:  # said, not failed: a program on jemalloc could never pass otherwise
        print(f"{name}: note: misuse of the allocator not checked for {partly}")
    times = sum(m.times for m in a.misuse)
    if times <= limit:
        return False
    print(f"{name}: {count(times, 'misuse')} of the allocator, over --max-misuse {limit}")
    for m in a.misuse[:5]:
        print(f"  {m.title()} ({count(m.times, 'time')}): {_show(m, executable, a.layer)}")
    return True


def run(args):
    if (args.max_live is None and args.max_growth is None and args.max_leaks is None
            and args.max_definitely_lost is None and not args.max_held and args.max_misuse is None):
        print("libmemleak: check: give at least one limit (--max-live, --max-growth, --max-leaks, "
              "--max-definitely-lost, --max-held, --max-misuse)", file=sys.stderr)
        return EXIT_BAD_INPUT
    rules = load_suppressions("check", args.suppressions)
    layer = layer_args("check", args)
    read = (reports_or_logs("check", args.paths, None, lambda log: timeline_series(log))
            if rules is not None and layer is not None else None)
    if read is None:
        return EXIT_BAD_INPUT
    series, _ = read
    failed = False
    for s in series:
        a = suppressions.apply(analyse(s, "stack", *layer), rules)
        name = f"{s.program} (pid {s.pid})"
        if args.max_live is not None and a.live_bytes > args.max_live:
            failed = True
            print(f"{name}: {human_bytes(a.live_bytes)} live at its end, over --max-live "
                  f"{human_bytes(args.max_live)}")
            for t in a.trends[:5]:
                print(f"  {human_bytes(t.live_bytes):>10s}  {_show(t, s.executable, a.layer)}")
        if args.max_growth is not None:
            for t in a.trends:
                if t.growth_bytes > args.max_growth:
                    failed = True
                    print(f"{name}: grew {human_bytes(t.growth_bytes)}, over --max-growth "
                          f"{human_bytes(args.max_growth)}: {_show(t, s.executable, a.layer)}")
        if args.max_leaks is not None and len(a.suspects) > args.max_leaks:
            failed = True
            print(f"{name}: {len(a.suspects)} leak suspects, over --max-leaks {args.max_leaks}")
            for t in a.suspects[:5]:
                print(f"  {t.verdict}: {_show(t, s.executable, a.layer)}")
        if args.max_definitely_lost is not None:
            if not a.scan:
                failed = True
                print(f"{name}: no reachability scan in its reports, so --max-definitely-lost "
                      "cannot hold (MEMLEAK_CONFIG=scan=exit, or libmemleak scan PID)")
            elif a.scan.totals["definitely-lost"][0] > args.max_definitely_lost:
                failed = True
                nbytes, blocks = a.scan.totals["definitely-lost"]
                print(f"{name}: {human_bytes(nbytes)} in {count(blocks, 'block')} definitely lost at "
                      f"report {a.scan_seq}, over --max-definitely-lost "
                      f"{human_bytes(args.max_definitely_lost)}")
                for t in [t for t in a.suspects if t.lost.get("definitely-lost")][:5]:
                    print(f"  {t.verdict}: {_show(t, s.executable, a.layer)}")
        for kind, limit in args.max_held:
            failed |= _held_over(name, a, kind, limit, s.executable)
        if args.max_misuse is not None:
            failed |= _misuse_over(name, a, args.max_misuse, s.executable)
        if a.quarantine_refused:  # asked for and not had: said whatever the limits
            print(f"{name}: note: quarantine {a.quarantine_refused}")
    if any(not s.complete for s in series):
        return EXIT_BAD_INPUT  # a gap in the reports: the totals judged would be wrong
    if say_blind("check", series):
        # Passing a run whose heap was not seen would be a false pass in CI.
        print("libmemleak: check: no verdict: part of the heap was not seen (exit status 3)",
              file=sys.stderr)
        return EXIT_NOT_SEEN
    return 1 if failed else 0
