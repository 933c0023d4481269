"""The `libmemleak` command.  One function per subcommand."""

import argparse
import os
import sys

from libmemleak import __version__, preload_path
from libmemleak.commands import EXIT_CANNOT_RUN, EXIT_USAGE, fail


def cmd_preload_path(args):
    path = preload_path()
    if not os.path.exists(path):
        return fail(f"the hook library is missing ({path}): reinstall with 'pip install .'")
    print(path)
    return 0


def include_dir():
    """Where memleak.h is installed: in the package, beside libmtrace.so."""
    from libmemleak import PACKAGE_DIR
    return os.path.join(PACKAGE_DIR, "include")


def cmd_cflags(args):
    directory = include_dir()
    if not os.path.exists(os.path.join(directory, "memleak.h")):
        return fail(f"memleak.h is missing ({directory}): reinstall with 'pip install .'")
    if args.valgrind:  # its valgrind/ headers ahead of valgrind's own
        compat = os.path.join(directory, "valgrind-compat")
        if not os.path.exists(os.path.join(compat, "valgrind", "memcheck.h")):
            return fail(f"valgrind/memcheck.h is missing ({compat}): reinstall with 'pip install .'")
        print(f"-I{compat} -I{directory}")
        return 0
    print(f"-I{directory}")
    return 0


def cmd_demo(args):
    from libmemleak.demo import run_demo
    return run_demo(args.keep)


def build_parser():
    p = _Parser(
        prog="libmemleak",
        description="Find what a native program leaks, while it runs. Reports are written as "
                    "PROG-PID-SEQ.memlog on SIGUSR1, on mtrace()/muntrace() and at exit.")
    p.add_argument("--version", action="version", version=f"libmemleak {__version__}")
    sub = p.add_subparsers(dest="command_name", metavar="COMMAND", parser_class=_Parser)
    from libmemleak.commands import (attach, check, diff, export, exporter, replay, report, run, scan, shell,
                                     snapshot, symbolize)
    run.add_parser(sub)
    pp = sub.add_parser("preload-path", help="print the path of libmtrace.so for LD_PRELOAD")
    pp.set_defaults(func=cmd_preload_path)
    cf = sub.add_parser("cflags", help="print the compiler flag that finds memleak.h (the in-program API)",
                        description="Print the -I flag for memleak.h, the header through which a "
                                    "program asks the tracer for reports and counts from its own "
                                    "code (docs/api.md), as pkg-config --cflags would: "
                                    "cc $(libmemleak cflags) prog.c")
    cf.add_argument("--valgrind", action="store_true",
                    help="also put libmemleak's valgrind/valgrind.h and valgrind/memcheck.h ahead of "
                         "valgrind's own: a program built with valgrind's annotations (MALLOCLIKE_BLOCK, "
                         "MEMPOOL_*, DO_LEAK_CHECK, COUNT_LEAKS) has them served by libmemleak")
    cf.set_defaults(func=cmd_cflags)
    demo = sub.add_parser("demo", help="trace a bundled leaking example and show its reports")
    demo.add_argument("--keep", metavar="DIR", help="build and run in DIR and keep the files")
    demo.set_defaults(func=cmd_demo)
    attach.add_parser(sub)
    snapshot.add_parser(sub)
    scan.add_parser(sub)
    shell.add_parser(sub)
    symbolize.add_parser(sub)
    report.add_parser(sub)
    diff.add_parser(sub)
    export.add_parser(sub)
    check.add_parser(sub)
    replay.add_parser(sub)
    exporter.add_parser(sub)
    return p


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line in our form (status 2)."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"libmemleak: {message} (see '{self.prog} --help')\n")


def main(argv=None):
    # Text from report files (names with bytes that are not UTF-8) is
    # escaped on the way out, never a UnicodeEncodeError.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError):
            pass
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        return args.func(args)
    except (ImportError, FileNotFoundError) as e:
        if "libmlkreport.so" not in str(e) and "shm_layout.h is missing" not in str(e):
            raise
        # a checkout run in place before its native part was built
        return fail(f"{e} -- in a checkout: python setup.py build_native", EXIT_CANNOT_RUN)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`libmemleak replay F | head`): as `cat` does, stop without a word.
        # stdout is pointed at /dev/null so that Python's flush at exit cannot raise it again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
