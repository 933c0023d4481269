"""`libmemleak report PATH...`: ranked leak suspects, live totals and
trends for every process whose reports are found in PATH (files or
directories) -- or whose event logs (PROG-PID.events) are given: a log is
read as --moments reports evenly spaced over it (analysis/replay.py).
Exit status: 0; 1 when a process's reports are incomplete (a gap in its
sequence: its sums would be wrong); 2 when nothing could be read or the
options are wrong."""

import sys

from libmemleak.analysis.trends import analyse
from libmemleak.outputs import json_doc, text
from libmemleak.analysis import suppressions
from libmemleak.commands import (EXIT_BAD_INPUT, add_layer_options, add_suppressions_option, byte_size, layer_args,
                                 load_suppressions, positive, regex_option)
from libmemleak.analysis.replay import timeline_series
from libmemleak.commands.inputs import progress_bar, reports_or_logs
from libmemleak.files.series import InputError


def add_parser(sub):
    p = sub.add_parser("report", help="rank leak suspects across a process's reports",
                       description="Read the reports in PATH (files or directories) and show, "
                                   "per process, what is live and which stacks leak: those "
                                   "whose live bytes grow steadily across the reports.")
    p.add_argument("paths", metavar="PATH", nargs="+")
    p.add_argument("--pid", type=int, help="only this process")
    p.add_argument("--top", type=int, metavar="N",
                   help="suspects shown (as many as fit the terminal; 10 in a pipe)")
    p.add_argument("--min-bytes", type=byte_size, default=0, metavar="BYTES",
                   help="leave out stacks with fewer live bytes")
    p.add_argument("--include", metavar="REGEX", help="only stacks with a frame (function or "
                                                       "module) matching REGEX")
    p.add_argument("--exclude", metavar="REGEX", help="leave out stacks with a frame matching REGEX")
    p.add_argument("--all", action="store_true", help="every stack, not only suspects")
    p.add_argument("--frames", type=positive, default=4, metavar="N",
                   help="frames shown per stack, from the program's own code on (4)")
    p.add_argument("--group-by", choices=("stack", "site", "function"), default="stack",
                   help="one entry per call stack (default), per allocation site in the "
                        "program's own code, or per function there")
    p.add_argument("--full-names", action="store_true", help="C++ names with their template "
                                                            "arguments and parameters")
    p.add_argument("--json", action="store_true", help="the JSON document (docs/report-json.md)")
    p.add_argument("--moments", type=positive, default=16, metavar="N",
                   help="an event log (PROG-PID.events) is read as N reports evenly spaced over it (16)")
    add_layer_options(p)
    add_suppressions_option(p)
    p.set_defaults(func=run)


def default_top(processes, out=sys.stdout):
    """On a terminal, as many suspects as fit one screen (each takes seven
    to nine rows, its verdict wrapping on a narrow one; a process's summary
    up to ten, its memory and slack lines included); in a pipe, 10."""
    if not out.isatty():
        return 10
    import shutil
    rows = shutil.get_terminal_size().lines
    return max(1, (rows - 10 * processes) // (9 * max(1, processes)))


def _matches(pattern, trend):
    return any(pattern.search(f.function or "") or pattern.search(f.module or "")
               for f in trend.frames)


def run(args):
    try:
        include = regex_option(args.include, "--include")
        exclude = regex_option(args.exclude, "--exclude")
    except InputError as e:
        print(f"libmemleak: report: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    rules = load_suppressions("report", args.suppressions)
    layer = layer_args("report", args)
    read = None
    if rules is not None and layer is not None:
        read = reports_or_logs("report", args.paths, args.pid,
                               lambda log: timeline_series(log, min(args.moments, 1000)), progress_bar())
    if read is None:
        return EXIT_BAD_INPUT
    series, problems = read
    analyses = []
    for s in series:
        a = suppressions.apply(analyse(s, args.group_by, *layer), rules)
        keep = (lambda t: t.live_bytes >= args.min_bytes
                and (include is None or _matches(include, t))
                and (exclude is None or not _matches(exclude, t)))
        a.trends = [t for t in a.trends if keep(t)]
        a.suspects = [t for t in a.suspects if keep(t)]
        analyses.append(a)
    try:
        if args.json:
            json_doc.write(sys.stdout, analyses, problems)
        else:
            text.write(sys.stdout, analyses, [], top=args.top or default_top(len(analyses)),
                       full_names=args.full_names, all_stacks=args.all, frames=args.frames)
    except BrokenPipeError:
        return 0
    return 1 if any(not s.complete for s in series) else 0
