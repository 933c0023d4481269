"""`libmemleak export --format F [-o FILE] PATH...`: the reports in PATH in a
format other tools read.  Today: collapsed (flamegraph.pl, inferno),
pprof (go tool pprof, Pyroscope, Parca) and json (the document of
`report --json`).  Exit status 0; 2 when nothing
could be read, the format is unknown or the output cannot be written."""

import sys

from libmemleak.analysis.trends import analyse
from libmemleak.outputs import collapsed, json_doc, pprof
from libmemleak.series import InputError, read_series

FORMATS = {"collapsed": collapsed.write, "json": json_doc.write, "pprof": pprof.write}
BINARY = {"pprof"}


def add_parser(sub):
    p = sub.add_parser("export", help="write the reports in another format (collapsed, json)",
                       description="Read the reports in PATH and write them as FORMAT: "
                                   "collapsed stacks of live bytes (flamegraph.pl, inferno) or "
                                   "the JSON document of `report --json`.")
    p.add_argument("paths", metavar="PATH", nargs="+")
    p.add_argument("--format", "-f", required=True, choices=sorted(FORMATS))
    p.add_argument("-o", "--output", metavar="FILE", help="where to write (default: stdout)")
    p.add_argument("--pid", type=int, help="only this process")
    p.set_defaults(func=run)


def run(args):
    try:
        series, problems = read_series(args.paths)
    except InputError as e:
        print(f"libmemleak: export: {e}", file=sys.stderr)
        return 2
    if args.pid is not None:
        series = [s for s in series if s.pid == args.pid]
    for problem in problems + [p for s in series for p in s.problems]:
        print(f"libmemleak: export: {problem}", file=sys.stderr)
    analyses = [analyse(s) for s in series]
    try:
        mode = "wb" if args.format in BINARY else "w"
        out = open(args.output, mode) if args.output else sys.stdout
    except OSError as e:
        print(f"libmemleak: export: {args.output}: {e.strerror}", file=sys.stderr)
        return 2
    try:
        FORMATS[args.format](out, analyses, problems)
    except BrokenPipeError:
        pass
    finally:
        if args.output:
            out.close()
    return 0
