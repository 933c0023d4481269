"""`libmemleak symbolize REPORT... -o DIR [--sysroot DIR] [--debug-path DIR]`:
reports written without symbols (MEMLEAK_SYMBOLIZE=no on the host that
ran the program: frames as module+offset, each module's build-id in the
header) made into ordinary reports where the binaries and their debug
information are -- mtrace-ng's client/server split, heaptrack's
--sysroot.  Each report is written under its own name in DIR; every other
tool then reads those.

A module is looked up at --sysroot + its path (the capture host's tree,
copied or mounted), its debug information by build-id in --debug-path
directories and the usual places.  A frame whose module cannot be read
stays module+offset, said once per module.  Exit status 0; 1 when a
report could not be written; 2 on a usage mistake or nothing readable."""

import os
import sys

from libmemleak.commands import EXIT_BAD_INPUT
from libmemleak.files.memlog import MemlogError, read as read_memlog
from libmemleak.files.memlog_write import render, write_report
from libmemleak.daemon.segment_types import Module
from libmemleak.files.report_names import REPORT_NAME
from libmemleak.symbols import Frame, Symbolizer

EXIT_FAILED = 1


def add_parser(sub):
    p = sub.add_parser("symbolize", help="symbolize reports written with MEMLEAK_SYMBOLIZE=no",
                       description="Turn reports whose frames are module+offset (MEMLEAK_SYMBOLIZE=no) "
                                   "into ordinary reports, on a host that has the binaries and their "
                                   "debug information.")
    p.add_argument("paths", metavar="REPORT", nargs="+", help="report files or directories of them")
    p.add_argument("-o", "--output", metavar="DIR", required=True,
                   help="directory for the symbolized reports (same names)")
    p.add_argument("--sysroot", metavar="DIR", default="",
                   help="where the capture host's files are: modules are read at DIR + their path")
    p.add_argument("--debug-path", metavar="DIR", action="append", default=[],
                   help="also look for debug files (by build-id, .debug links) here; repeatable")
    p.set_defaults(func=run)


def _report_files(paths):
    for path in paths:
        if os.path.isdir(path):
            yield from (os.path.join(path, n) for n in sorted(os.listdir(path)) if REPORT_NAME.match(n))
        else:
            yield path


class OfflineSymbolizer:
    """Frames of one host's modules, read under a sysroot."""

    def __init__(self, sysroot, debug_dirs):
        self.sysroot = sysroot.rstrip("/")
        self.symbolizer = Symbolizer(debug_dirs)
        self.missing = set()

    def frames(self, frame, build_ids):
        if frame.function is not None or not frame.module:
            return [frame]
        local = self.sysroot + frame.module if self.sysroot else frame.module
        if not os.path.exists(local):
            self.missing.add(local)
            return [frame]
        module = Module(0, local, 0, 0, 0, 0, 0, build_ids.get(frame.module, ""))
        found = self.symbolizer.frames_for(module, frame.offset)
        # the frames name the module as the program had it, not our copy
        return [Frame(f.function, frame.module, f.offset, f.file, f.line, f.inlined) for f in found]


def symbolize_report(path, out_dir, offline):
    report = read_memlog(path)
    build_ids = {k[len("build-id "):]: v for k, v in report.header.items() if k.startswith("build-id ")}
    for entry in report.entries:
        frames = []
        for f in entry.frames:
            frames.extend(offline.frames(f, build_ids))
        entry.frames = frames
        entry.frames_text = None
    header = [(k, v) for k, v in report.header.items() if k != "symbolization"]
    header.append(("symbolization", "offline (libmemleak symbolize)"))
    return write_report(out_dir, os.path.basename(path), render(header, report.entries))


def run(args):
    try:
        os.makedirs(args.output, mode=0o700, exist_ok=True)
    except OSError as e:
        print(f"libmemleak: symbolize: {args.output}: {e.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    offline = OfflineSymbolizer(args.sysroot, args.debug_path)
    written, status = 0, 0
    for path in _report_files(args.paths):
        try:
            print(symbolize_report(path, args.output, offline), flush=True)
            written += 1
        except MemlogError as e:
            print(f"libmemleak: symbolize: {e}: not read", file=sys.stderr)
        except OSError as e:
            print(f"libmemleak: symbolize: {args.output}: {e.strerror}", file=sys.stderr)
            status = EXIT_FAILED
    for local in sorted(offline.missing):
        print(f"libmemleak: symbolize: {local}: not found; its frames stay module+offset "
              "(--sysroot?)", file=sys.stderr)
    if not written and not status:
        print(f"libmemleak: symbolize: no report read in {', '.join(args.paths)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return status
