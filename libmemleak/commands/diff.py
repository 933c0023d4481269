"""`libmemleak diff BEFORE AFTER`: what changed between two states -- two
reports of one process (what was live at each), two directories of
reports, two runs of one program -- with stacks matched by function and
file:line, so that it survives ASLR and rebuilds.  Exit status: 0; 2 when
a side cannot be read."""

import json
import sys

from libmemleak.analysis import alloc_layer
from libmemleak.analysis.compare import compare
from libmemleak.analysis.names import frame_lines
from libmemleak.commands import EXIT_BAD_INPUT, add_layer_options, layer_args, positive
from libmemleak.analysis.trends import count, human_bytes
from libmemleak.outputs.json_doc import frame_dict
from libmemleak.files.series import InputError


def add_parser(sub):
    p = sub.add_parser("diff", help="what grew, shrank, appeared or went away between two states",
                       description="Compare what was live at BEFORE and at AFTER: each a report "
                                   "file (what was live when it was written) or a directory of "
                                   "reports (what was live at the last report of each process).")
    p.add_argument("before", metavar="BEFORE")
    p.add_argument("after", metavar="AFTER")
    p.add_argument("--top", type=int, default=20, metavar="N", help="stacks shown (20)")
    p.add_argument("--frames", type=positive, default=4, metavar="N",
                   help="frames shown per stack, from the program's own code on (4)")
    p.add_argument("--json", action="store_true",
                   help='{"stacks": [{"status", "change_bytes", "change_blocks", "frames"}]}')
    add_layer_options(p)
    p.set_defaults(func=run)


def run(args):
    options = layer_args("diff", args)
    if options is None:
        return EXIT_BAD_INPUT
    try:
        changes, notes, config = compare(args.before, args.after)
    except InputError as e:
        print(f"libmemleak: diff: {e}", file=sys.stderr)
        return 2
    # The program's allocation layer, folded as `report` folds it (from
    # the changed stacks: what the reports say of allocations is not kept;
    # the functions the reports' alloc-fns names too).
    layer = alloc_layer.find([(c.frames, None) for c in changes], None, *options, config=config)
    for note in notes + layer.notes():
        print(f"libmemleak: diff: {note}", file=sys.stderr)
    if args.json:
        json.dump({"stacks": [{"status": c.status, "change_bytes": c.change_bytes,
                               "change_blocks": c.change_blocks,
                               "before_bytes": c.before_bytes, "after_bytes": c.after_bytes,
                               "frames": [frame_dict(f) for f in c.frames]} for c in changes]},
                  sys.stdout, indent=1)
        print()
        return 0
    total = sum(c.change_bytes for c in changes)
    print(f"{count(len(changes), 'stack')} changed, {human_bytes(total, sign=True)} in all")
    for c in changes[:args.top]:
        print(f"  {c.status:6s} {human_bytes(c.change_bytes, sign=True):>10s} {count(c.change_blocks, 'block', sign=True)}")
        for line in frame_lines(c.frames, keep=args.frames, layer=layer):
            print(f"           {line}")
    if len(changes) > args.top:
        print(f"  ({len(changes) - args.top} more: --top N)")
    return 0
