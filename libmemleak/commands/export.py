"""`libmemleak export --format F [-o FILE] [--since SEQ] PATH...`: the reports
in PATH in a format other tools read: html (one self-contained report
page), flamegraph, speedscope, collapsed (flamegraph.pl, inferno), pprof
(go tool pprof, Pyroscope, Parca) and json (the document of `report
--json`).  What is drawn is what is live at the last report, or with
--since SEQ what grew after report SEQ.  PATH may be an event log
(PROG-PID.events, `run --record`): then what was live at its peak, or
with --at TIME at that moment (analysis/replay.py).  Exit status 0; 2
when nothing could be read, the format is unknown or the output cannot
be written."""

import sys

from libmemleak.analysis.trends import analyse, growth_since
from libmemleak.commands.inputs import progress_bar, reports_or_logs
from libmemleak.outputs import collapsed, flamegraph, flamegraph_svg, html_report, json_doc, pprof, speedscope
from libmemleak.analysis import suppressions
from libmemleak.commands import (EXIT_BAD_INPUT, add_layer_options, add_suppressions_option, layer_args,
                                 load_suppressions, say_blind)
from libmemleak.files.events import is_event_log

FORMATS = {"collapsed": collapsed.write, "flamegraph": flamegraph.write, "html": html_report.write,
           "json": json_doc.write, "pprof": pprof.write, "speedscope": speedscope.write}
# The formats that draw one quantity per stack: --since makes it the growth.
DRAWN = {"collapsed", "flamegraph", "pprof", "speedscope"}
BINARY = {"pprof"}
# What each format's file is, and the name that opens it where it belongs:
# a flamegraph is an HTML page (zoom, search) -- or, written to a name
# ending in .svg, the static SVG flamegraph.pl makes.
SUFFIX = {"collapsed": (".folded", "collapsed stacks"), "flamegraph": (".html", "an HTML page"),
          "html": (".html", "an HTML page"), "json": (".json", "JSON"),
          "pprof": (".pb.gz", "a gzipped pprof profile"), "speedscope": (".json", "speedscope's JSON")}
NOT_FOR_A_TERMINAL = {"flamegraph", "html", "pprof"}


def add_parser(sub):
    p = sub.add_parser("export", help="write the reports in another format (html, flamegraph, "
                                      "speedscope, pprof, collapsed, json)",
                       description="Read the reports in PATH and write them as FORMAT: html (one "
                                   "self-contained page), flamegraph, speedscope, pprof (go tool "
                                   "pprof, Pyroscope, Parca), collapsed stacks (flamegraph.pl, "
                                   "inferno) or the JSON document of `report --json`.")
    p.add_argument("paths", metavar="PATH", nargs="+")
    p.add_argument("--format", "-f", required=True, choices=sorted(FORMATS))
    p.add_argument("-o", "--output", metavar="FILE", help="where to write (default: stdout)")
    p.add_argument("--pid", type=int, help="only this process")
    p.add_argument("--since", type=int, metavar="SEQ",
                   help="draw what grew after report SEQ instead of what is live (flamegraph, "
                        "speedscope, pprof, collapsed): the leak between two reports")
    p.add_argument("--at", metavar="TIME",
                   help="with an event log (PROG-PID.events): what was live at TIME (seconds from its "
                        "start, 300ms, 10:02:03) instead of at its peak")
    add_layer_options(p)
    add_suppressions_option(p)
    p.set_defaults(func=run)


def run(args):
    if args.since is not None and args.format not in DRAWN:
        print(f"libmemleak: export: --since draws growth: it goes with "
              f"{', '.join(sorted(DRAWN))}, not {args.format}", file=sys.stderr)
        return EXIT_BAD_INPUT
    suffix, what = SUFFIX[args.format]
    if not args.output and args.format in NOT_FOR_A_TERMINAL and sys.stdout.isatty():
        print(f"libmemleak: export: {args.format} is {what}, not for a terminal: "
              f"-o {args.format}{suffix}", file=sys.stderr)
        return EXIT_BAD_INPUT
    as_svg = args.format == "flamegraph" and bool(args.output) and args.output.lower().endswith(".svg")
    if args.output and not args.output.endswith(suffix) and not as_svg:
        print(f"libmemleak: export: note: {args.format} writes {what}; a name ending in {suffix} "
              f"opens it where it belongs", file=sys.stderr)
    rules = load_suppressions("export", args.suppressions)
    layer = layer_args("export", args)
    logs = any(is_event_log(p) for p in args.paths)
    if logs and args.since is not None:
        print("libmemleak: export: an event log is exported at its peak or --at TIME, not --since",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.at is not None and not logs:
        print("libmemleak: export: --at TIME goes with an event log (PROG-PID.events)", file=sys.stderr)
        return EXIT_BAD_INPUT
    read = None
    if rules is not None and layer is not None:
        read = reports_or_logs("export", args.paths, args.pid, log_moment(args.at, page=args.format == "html"),
                               progress_bar())
    if read is None:
        return EXIT_BAD_INPUT
    series, problems = read
    say_blind("export", series)
    analyses = [suppressions.apply(analyse(s, "stack", *layer), rules) for s in series]
    if args.since is not None:
        analyses = [g for g in (growth_since(a, args.since) for a in analyses) if g is not None]
        if not analyses:
            print(f"libmemleak: export: no process has a report {args.since} and one after it",
                  file=sys.stderr)
            return EXIT_BAD_INPUT
    try:
        mode = "wb" if args.format in BINARY else "w"
        # names read from reports may hold bytes that are not UTF-8: escaped, never a traceback
        out = ((open(args.output, mode) if mode == "wb" else
                open(args.output, mode, encoding="utf-8", errors="backslashreplace"))
               if args.output else sys.stdout)
    except OSError as e:
        print(f"libmemleak: export: {args.output}: {e.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        writer = flamegraph_svg.write if as_svg else FORMATS[args.format]
        if args.since is not None and args.format in ("flamegraph", "speedscope"):
            writer(out, analyses, problems, what=f"growth since report {args.since}")
        else:
            writer(out, analyses, problems)
    except BrokenPipeError:
        pass
    finally:
        if args.output:
            out.close()
    if args.format in ("collapsed", "speedscope"):  # no room for it in the file
        for note in collapsed.drawing_notes(analyses):
            print(f"libmemleak: export: note: {note}", file=sys.stderr)
    return 0


def log_moment(at, page=False):
    """What export draws of an event log: what was live at its peak or at
    `at` (a series of one report); page (html): the log as a timeline of
    reports instead of its peak -- the page ranks suspects and charts them
    -- and either way its live total over time, charted at full resolution."""
    from libmemleak.analysis import replay
    from libmemleak.commands.inputs import parse_time

    def moment(log):
        at_ns = parse_time(at, log.head, replay.start_ns(log)) if at is not None else None
        if page and at_ns is None:
            return replay.timeline_series(log, usage=True)
        return replay.moment_series(log, at_ns, usage=page)
    return moment
