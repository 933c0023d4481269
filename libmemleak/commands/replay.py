"""`libmemleak replay FILE`: what an event log (PROG-PID.events, recorded
with `run --record`) alone can tell -- the moment of the highest live heap
and what was live then, what was live at any moment, what a time window
left live, which allocations were temporary, how long each stack's blocks
live, the live total over time.  Exit status: 0; 2 when the file cannot be
read (one line)."""

import json
import sys

from libmemleak.analysis import alloc_layer
from libmemleak.analysis import replay as R
from libmemleak.analysis.names import frame_lines
from libmemleak.analysis.trends import count, human_bytes
from libmemleak.commands import EXIT_BAD_INPUT, add_layer_options, layer_args, positive
from libmemleak.commands.inputs import BadTime, parse_duration, parse_time, with_log
from libmemleak.files.memlog import parse_frame


def add_parser(sub):
    p = sub.add_parser("replay", help="replay an event log: peak, a moment, a window, temporary allocations",
                       description="Answer from an event log (PROG-PID.events, written with `run --record`): "
                                   "by default the peak -- the moment the most memory was live, and what "
                                   "was live then, per stack.  TIME is seconds from the log's start "
                                   "(12.5, 12.5s, 300ms, 2m) or a clock time (10:02:03).")
    p.add_argument("file", metavar="FILE")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--peak", action="store_true", help="what was live at the peak (the default)")
    what.add_argument("--at", metavar="TIME", help="what was live at TIME")
    what.add_argument("--between", nargs=2, metavar=("T1", "T2"),
                      help="what was allocated from T1 on and still live at T2 (a leak in a window)")
    what.add_argument("--temporary", action="store_true",
                      help="allocations freed at once -- by the thread's very next call, as heaptrack "
                           "counts them -- or, with --within, soon after they were made; per stack")
    what.add_argument("--lifetimes", action="store_true", help="how long each stack's blocks lived")
    what.add_argument("--usage", action="store_true", help="the live total over time")
    p.add_argument("--within", metavar="DURATION",
                   help="--temporary: freed within this long of their allocation (1ms, 50us)")
    p.add_argument("--top", type=positive, default=10, metavar="N", help="stacks shown (10)")
    p.add_argument("--frames", type=positive, default=4, metavar="N", help="frames shown per stack (4)")
    p.add_argument("--json", action="store_true", help="the answer as JSON (docs/events.md)")
    add_layer_options(p)
    p.set_defaults(func=run)


def run(args):
    if layer_args("replay", args) is None:
        return EXIT_BAD_INPUT
    done = with_log("replay", args.file, lambda log: answer(args, log))
    return EXIT_BAD_INPUT if done is None else done


def answer(args, log):
    within = parse_duration(args.within) if args.within else 0
    whole = R.replay(log, blocks=args.temporary or args.lifetimes, lifetimes=args.lifetimes,
                     temporary_ns=within if args.temporary else 0,
                     temporary_adjacent=args.temporary and not within,
                     series_step_ns=R.usage_step(log) if args.usage else 0)
    t = whole.totals
    unread = R.unread_note(whole)
    if unread:
        print(f"libmemleak: replay: {unread}", file=sys.stderr)
    base = R.baseline(log, whole)
    start = R.start_ns(log)
    doc = {"program": log.head.get("program"), "pid": log.head.get("pid"), "mode": log.head.get("mode"),
           "records": t["records"], "unused_records": t["bad_records"], "start_ns": start, "end_ns": t["last_ns"],
           "baseline_known": base.known, "before_log_bytes": sum(b for b, _ in base.live.values())}
    if args.at is not None:
        at, live = R.live_moment(log, whole, base, parse_time(args.at, log.head, start))
        doc.update(view="at", at_ns=at, stacks=rows(log, live))
    elif args.between:
        lo, hi = (parse_time(x, log.head, start) for x in args.between)
        if hi < lo:
            raise BadTime("--between: T2 is before T1")
        part = R.replay(log, stop_ns=hi, window_from_ns=lo)
        left = {i: (b, part.columns["window_blocks"].get(i, 0)) for i, b in part.columns["window_bytes"].items()}
        doc.update(view="between", from_ns=lo, to_ns=hi, stacks=rows(log, left))
    elif args.temporary:
        temp = {i: (b, whole.columns["temp_count"].get(i, 0)) for i, b in whole.columns["temp_bytes"].items()}
        doc.update(view="temporary", within_ns=within, stacks=rows(log, temp, whole.columns["allocs"]))
    elif args.lifetimes:
        doc.update(view="lifetimes", tick_ns=1 << log.head.get("tick_shift", 10),
                   stacks=[dict(r, lifetimes=whole.lifetimes.get(r["id"], []))
                           for r in rows(log, {i: (whole.columns["alloc_bytes"].get(i, 0), n)
                                               for i, n in whole.columns["allocs"].items()})])
    elif args.usage:
        doc.update(view="usage", usage=[{"ns": a, "live_bytes": b + doc["before_log_bytes"],
                                         "max_bytes": c + doc["before_log_bytes"], "allocations": d,
                                         "allocated_bytes": e} for a, b, c, d, e in whole.series])
    else:
        moment, live = R.live_moment(log, whole, base)
        doc.update(view="peak", peak_ns=moment if t["peak"] > 0 else start,
                   peak_bytes=sum(b for b, _ in live.values()), stacks=rows(log, live))
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        print()
    else:
        show(doc, args, start, log.head.get("exe"), log.head.get("alloc_fns"))
    return 0


def rows(log, values, allocs=None):
    """values: id -> (bytes, count) -> rows, largest first."""
    out = []
    for i, (b, n) in sorted(values.items(), key=lambda kv: (-kv[1][0], kv[0])):
        kind, lines = log.stacks.get(i, ("unknown", []))
        row = {"id": i, "bytes": b, "blocks": n, "kind": kind, "frames": lines}
        if allocs is not None:
            row["allocations"] = allocs.get(i, 0)
        out.append(row)
    return out


def show(doc, args, start, exe, config):
    """The answer as text; stacks named from the program's own code on, its
    allocation layer folded as `report` folds it."""
    exe = exe if isinstance(exe, str) else None
    framed = [(r, [parse_frame(line.strip("\t")) for line in r["frames"]]) for r in doc.get("stacks", ())]
    layer = alloc_layer.find([(frames, r.get("allocations")) for r, frames in framed], exe,
                             *layer_args("replay", args), config=config if isinstance(config, str) else None)
    for note in layer.notes():
        print(f"libmemleak: replay: {note}", file=sys.stderr)

    def when(ns):
        return f"+{(ns - start) / 1e9:.3f} s"
    end = doc["end_ns"]
    print(f"{doc['program']} (pid {doc['pid']}): {count(doc['records'], 'record')} over "
          f"{max(0, end - start) / 1e9:.3f} s")
    view = doc["view"]
    if view == "peak":
        print(f"peak: {human_bytes(doc['peak_bytes'])} live at {when(doc['peak_ns'])}")
    elif view == "at":
        print(f"live at {when(doc['at_ns'])}: {human_bytes(sum(r['bytes'] for r in doc['stacks']))}")
    elif view == "between":
        print(f"allocated from {when(doc['from_ns'])} and still live at {when(doc['to_ns'])}: "
              f"{human_bytes(sum(r['bytes'] for r in doc['stacks']))}")
    elif view == "temporary":
        n = sum(r["blocks"] for r in doc["stacks"])
        how = f"freed within {doc['within_ns'] / 1e6:g} ms" if doc["within_ns"] else "freed at once"
        print(f"temporary ({how}): {count(n, 'allocation')}, "
              f"{human_bytes(sum(r['bytes'] for r in doc['stacks']))}")
    elif view == "usage":
        before = start
        for p in doc["usage"]:
            rate = p["allocations"] / max(p["ns"] - before, 1) * 1e9
            print(f"  {when(p['ns']):>12s}  {human_bytes(p['live_bytes']):>10s}  (max "
                  f"{human_bytes(p['max_bytes'])})  {p['allocations']:,} allocations ({rate:,.0f}/s, "
                  f"{human_bytes(p['allocated_bytes'])})")
            before = p["ns"]
        return
    for r, frames in framed[:args.top]:
        if view == "temporary":
            head = f"{count(r['blocks'], 'allocation')} of {r['allocations']:,}, {human_bytes(r['bytes'])}"
        elif view == "lifetimes":
            head = f"{count(r['blocks'], 'allocation')}: {lifetime_words(r['lifetimes'], doc['tick_ns'])}"
        else:
            head = f"{human_bytes(r['bytes']):>10s} {count(r['blocks'], 'block')}"
        print(f"  {head}")
        for line in (frame_lines(frames, exe, keep=args.frames, layer=layer) if frames
                     else ["(stack not named in the log)"]):
            print(f"      {line}")
    if len(doc["stacks"]) > args.top:
        print(f"  ({len(doc['stacks']) - args.top} more: --top N)")


def lifetime_words(buckets, tick_ns):
    """'12 < 1 us, 40 < 1 ms, 3 < 1 s, 1 longer' from log2 buckets of ticks."""
    if not buckets:
        return "none freed"
    edges = ((1_000, "1 us"), (1_000_000, "1 ms"), (1_000_000_000, "1 s"))
    counts = [0] * (len(edges) + 1)
    for b, n in enumerate(buckets):
        upper = (1 << b) * tick_ns  # lifetimes in this bucket are below this
        k = next((j for j, (limit, _) in enumerate(edges) if upper <= limit), len(edges))
        counts[k] += n
    words = [f"{n:,} < {name}" for n, (_, name) in zip(counts, edges) if n]
    if counts[-1]:
        words.append(f"{counts[-1]:,} longer")
    return ", ".join(words) + " (freed)"
