"""The `libmemleak` command.  One function per subcommand."""

import argparse
import os
import shutil
import stat
import sys

from libmemleak import __version__, preload_path
from libmemleak.daemon.procfs import namespace_tag
from libmemleak.sizes import byte_size

ELF_MAGIC = b"\x7fELF"
PT_INTERP = 3


def fail(message, code=2):
    print(f"libmemleak: {message}", file=sys.stderr)
    return code


def check_traceable(path):
    """None if `path` can be traced with LD_PRELOAD, else why not."""
    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:2] == b"#!":
                return None  # a script: its interpreter is what gets traced
            if head[:4] != ELF_MAGIC:
                return f"{path} is not an ELF executable or a script"
            if st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                return (f"{path} is setuid/setgid: the dynamic loader ignores LD_PRELOAD for it, "
                        "so it cannot be traced")
            from libmemleak.symbols.elfcheck import has_interpreter  # pyelftools: only when it runs
            if not has_interpreter(f):
                return (f"{path} is statically linked: there is no dynamic loader to preload "
                        "the tracer into (rebuild it without -static)")
    except OSError as e:
        return f"{path}: {e.strerror}"
    return None


def traced_environment(env=None):
    env = dict(os.environ if env is None else env)
    lib = preload_path()
    existing = [p for p in env.get("LD_PRELOAD", "").replace(" ", ":").split(":")
                if p and not p.endswith("/libmtrace.so")]
    env["LD_PRELOAD"] = ":".join([lib, *existing])
    env["MEMLEAK_PYTHON"] = sys.executable
    env.pop("MEMLEAK_REPORTER", None)
    env.pop("MEMLEAK_ROOT_PID", None)  # the traced program is a new root
    env.pop("MEMLEAK_KEEPER", None)    # with a keeper of its own
    env.pop("MEMLEAK_ANNOUNCE", None)  # `run` sets it for its own program only
    return env


# Exit statuses of the libmemleak command (docs/cli.md).  `run` becomes the
# program, so its status is the program's; before that it fails as env(1),
# nohup(1) and timeout(1) do, so a caller can tell the wrapper from the
# program: 127 the program is not found, 126 it is found but cannot be run
# or traced.  Every other mistake in what the user typed is 2.
EXIT_USAGE, EXIT_CANNOT_RUN, EXIT_NOT_FOUND = 2, 126, 127

def run_config(args):
    """MEMLEAK_CONFIG for `run`, or (None, why not).  `run` collects from
    the start: a bare MEMLEAK_CONFIG means "wait for the program's
    mtrace()", which almost no program calls, so `run --config
    depth=32` used to trace nothing (issue: silent non-tracing).

    A MEMLEAK_CONFIG the user exported is kept (their dir= was lost):
    its options come first and --config's after them, so that where both
    set one, --config wins (the hook's parser takes the last)."""
    exported = [i.strip() for i in os.environ.get("MEMLEAK_CONFIG", "").split(",") if i.strip()]
    if args.wait_for_mtrace:
        exported = [i for i in exported if i != "mtraceinit"]
    items = exported + [i.strip() for i in (args.config or "").split(",") if i.strip()]
    if args.sample is not None:
        items.append(f"sample={args.sample}")
    if args.scan_at_exit and "scan=exit" not in items:
        items.append("scan=exit")
    if args.record and args.record_last:
        return None, "run: --record (every event, to a file) and --record-last (the last ones) exclude each other"
    if args.record:
        items.append("record=all")
    if args.record_cap:
        items.append(f"record_cap={args.record_cap}")
    if args.record_last:
        items += ["record=last", f"record_keep={args.record_last}"]
    if args.wait_for_mtrace:
        if "mtraceinit" in items:
            return None, "run: --wait-for-mtrace and mtraceinit in --config contradict each other"
    elif "mtraceinit" not in items:
        items.insert(0, "mtraceinit")
    return ",".join(items), None


def config_overrides(exported, config):
    """The options of the exported MEMLEAK_CONFIG that --config (or
    --sample, --scan-at-exit) sets otherwise: ["depth=8 by depth=32"]."""
    def values(text):
        out = {}
        for item in text.split(","):
            key, eq, value = item.strip().partition("=")
            if eq and key.strip():
                out[key.strip()] = value.strip()
        return out
    before, after = values(exported), values(config)
    return [f"{k}={v} by {k}={after[k]}" for k, v in before.items() if after.get(k, v) != v]


def config_value(config, name, default):
    """The value of option `name` in a MEMLEAK_CONFIG string (the last one
    wins, as in the hook library's parser)."""
    found = default
    for item in config.split(","):
        key, _, value = item.strip().partition("=")
        if key.strip() == name and value.strip():
            found = value.strip()
    return found


def report_dir_of(config):
    return os.path.normpath(os.path.join(os.getcwd(), config_value(config, "dir", ".")))


def _pid_as_proc_says():
    """Our pid as /proc numbers it -- the reporter's numbering: in a pid
    namespace with the host's /proc (unshare --pid without --mount-proc),
    the host's pid, not the one getpid() says."""
    try:
        return int(os.readlink("/proc/self"))
    except (OSError, ValueError):
        return os.getpid()


def announce(argv, config, wait_for_mtrace):
    """What valgrind and heaptrack say at start: what is traced, where the
    reports go and how to ask for one."""
    pid = _pid_as_proc_says()
    ns = namespace_tag()
    named = f"{pid}@{ns}" if ns else pid  # as the reporter names the reports (in a pid namespace too)
    name = os.path.basename(argv[0])
    where = report_dir_of(config)
    signal_name = config_value(config, "signal", "USR1").upper().removeprefix("SIG")
    if wait_for_mtrace:
        start = "collection starts at the program's first mtrace() call"
    elif signal_name == "NONE":
        start = f"ask for a report with: libmemleak snapshot {pid}"
    else:
        start = f"ask for a report with: kill -{signal_name} {pid} (or: libmemleak snapshot {pid})"
    lines = [f"tracing {name} (pid {pid}); reports go to {where}/{name}-{named}-N.memlog; {start}; "
             "a final one at exit"]
    for line in lines:
        print(f"libmemleak: {line}", file=sys.stderr, flush=True)


def cmd_run(args):
    argv = args.command
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        return fail("run: name the program to trace: libmemleak run [--] PROGRAM [ARGS...]")
    if not os.path.exists(preload_path()):
        return fail(f"the hook library is missing ({preload_path()}): reinstall with 'pip install .'",
                    EXIT_CANNOT_RUN)
    program = argv[0] if "/" in argv[0] else shutil.which(argv[0])
    if program is None or not os.path.exists(program):
        return fail(f"run: {argv[0]}: command not found", EXIT_NOT_FOUND)
    why = check_traceable(program)
    if why:
        return fail(f"run: {why}", EXIT_CANNOT_RUN)
    exported = os.environ.get("MEMLEAK_CONFIG", "")
    config, why = run_config(args)
    if why:
        return fail(why)
    overridden = config_overrides(exported, config)
    if overridden:
        print(f"libmemleak: run: your MEMLEAK_CONFIG is kept, but run's options win over "
              f"{', '.join(overridden)}", file=sys.stderr, flush=True)
    os.environ["MEMLEAK_CONFIG"] = config

    def start():
        # exec, not a child: the program keeps this pid (the reports are named
        # after it) and its exit status is the command's (--wait: the child's).
        env = traced_environment()
        env["MEMLEAK_ROOT_PID"] = str(os.getpid())  # the program keeps this pid
        if not args.quiet:
            env["MEMLEAK_ANNOUNCE"] = "1"  # the reporter lists the reports at the end
            announce(argv, config, args.wait_for_mtrace)
        try:
            os.execve(program, argv, env)
        except OSError as e:
            return fail(f"run: {program}: {e.strerror}", EXIT_CANNOT_RUN)
    if args.wait:
        from libmemleak.commands.run_wait import run_waiting
        timeout = config_value(config, "exit_timeout", "60")
        return run_waiting(start, argv, int(timeout) if timeout.isdigit() else 60)
    return start()


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
    run = sub.add_parser("run", help="run a program traced from its start",
                         description="Run PROGRAM with the tracer preloaded (same pid, same exit "
                                     "status). Send it SIGUSR1 for a report while it runs.")
    run.add_argument("--config", metavar="OPTIONS",
                     help="MEMLEAK_CONFIG options, e.g. 'depth=32,dir=/tmp/reports' "
                          "(collection still starts at once; see --wait-for-mtrace)")
    run.add_argument("--sample", metavar="BYTES", type=byte_size,
                     help="record a byte-weighted random sample of allocations, one per BYTES "
                          "allocated on average (e.g. 524288), and report scaled estimates: "
                          "cheaper on allocation-heavy programs, but small or rare leaks may "
                          "be missed (see docs/sampling.md)")
    run.add_argument("--wait-for-mtrace", action="store_true",
                     help="collect nothing until the program calls mtrace() (as a bare "
                          "MEMLEAK_CONFIG without mtraceinit does)")
    run.add_argument("--scan-at-exit", action="store_true",
                     help="the exit report carries a reachability scan: each stack's blocks "
                          "split into definitely, indirectly, possibly lost and still reachable, "
                          "as valgrind says them (MEMLEAK_CONFIG scan=exit; docs/scan.md)")
    run.add_argument("--record", action="store_true",
                     help="also log every allocation and free, with its time, to PROG-PID.events for "
                          "`libmemleak replay` (peak, temporary allocations, time windows) "
                          "(MEMLEAK_CONFIG record=all; docs/events.md)")
    run.add_argument("--record-cap", metavar="BYTES",
                     help="--record: stop logging when the file reaches this size (default 1G; K, M, G)")
    run.add_argument("--record-last", metavar="BYTES|SECONDSs",
                     help="a flight recorder: keep only the last BYTES (64M) or SECONDS (30s) of the log "
                          "in memory, and write it with every report and at death "
                          "(MEMLEAK_CONFIG record=last,record_keep=)")
    run.add_argument("-q", "--quiet", action="store_true",
                     help="say nothing on stderr at start and at the end")
    run.add_argument("--wait", action="store_true",
                     help="run the program as a child and return only once its final report is on disk, "
                          "also when it is killed by SIGKILL or exits without atexit handlers (Go); "
                          "signals sent to run go to the program (docs/cli.md)")
    run.add_argument("command", nargs=argparse.REMAINDER, help="[--] PROGRAM [ARGS...]")
    run.set_defaults(func=cmd_run)
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
    from libmemleak.commands import (attach, check, diff, export, exporter, replay, report, scan, shell,
                                     snapshot, symbolize)
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
