"""`libmemleak export --format F [-o FILE] PATH...`: the reports in PATH in a
format other tools read.  Today: collapsed (flamegraph.pl, inferno),
pprof (go tool pprof, Pyroscope, Parca) and json (the document of
`report --json`).  Exit status 0; 2 when nothing
could be read, the format is unknown or the output cannot be written."""

import sys

from libmemleak.analysis.trends import analyse
from libmemleak.outputs import collapsed, flamegraph, html_report, json_doc, pprof
from libmemleak.analysis import suppressions
from libmemleak.commands import (EXIT_BAD_INPUT, add_suppressions_option, load_suppressions,
                                 read_reports)

FORMATS = {"collapsed": collapsed.write, "flamegraph": flamegraph.write, "html": html_report.write,
           "json": json_doc.write, "pprof": pprof.write}
BINARY = {"pprof"}


def add_parser(sub):
    p = sub.add_parser("export", help="write the reports in another format (pprof, collapsed, json)",
                       description="Read the reports in PATH and write them as FORMAT: pprof "
                                   "(go tool pprof, Pyroscope, Parca), collapsed stacks of live "
                                   "bytes (flamegraph.pl, inferno) or the JSON document of "
                                   "`report --json`.")
    p.add_argument("paths", metavar="PATH", nargs="+")
    p.add_argument("--format", "-f", required=True, choices=sorted(FORMATS))
    p.add_argument("-o", "--output", metavar="FILE", help="where to write (default: stdout)")
    p.add_argument("--pid", type=int, help="only this process")
    add_suppressions_option(p)
    p.set_defaults(func=run)


def run(args):
    rules = load_suppressions("export", args.suppressions)
    read = read_reports("export", args.paths, args.pid) if rules is not None else None
    if read is None:
        return EXIT_BAD_INPUT
    series, problems = read
    analyses = [suppressions.apply(analyse(s), rules) for s in series]
    try:
        mode = "wb" if args.format in BINARY else "w"
        out = open(args.output, mode) if args.output else sys.stdout
    except OSError as e:
        print(f"libmemleak: export: {args.output}: {e.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        FORMATS[args.format](out, analyses, problems)
    except BrokenPipeError:
        pass
    finally:
        if args.output:
            out.close()
    return 0
