"""The `libmemleak` command.  One function per subcommand."""

import argparse
import os
import shutil
import stat
import sys

from libmemleak import __version__, preload_path

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
            if not has_interpreter(f):
                return (f"{path} is statically linked: there is no dynamic loader to preload "
                        "the tracer into (rebuild it without -static)")
    except OSError as e:
        return f"{path}: {e.strerror}"
    return None


def has_interpreter(f):
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    try:
        f.seek(0)
        elf = ELFFile(f)
        return any(seg["p_type"] == "PT_INTERP" for seg in elf.iter_segments())
    except (ELFError, ValueError, KeyError, IndexError, OSError):
        return True  # unreadable program headers: let the loader decide


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
    return env


def cmd_run(args):
    argv = args.command
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        return fail("run: name the program to trace: libmemleak run [--] PROGRAM [ARGS...]")
    if not os.path.exists(preload_path()):
        return fail(f"the hook library is missing ({preload_path()}): reinstall with 'pip install .'")
    program = argv[0] if "/" in argv[0] else shutil.which(argv[0])
    if program is None:
        return fail(f"run: {argv[0]}: command not found", 127)
    why = check_traceable(program)
    if why:
        return fail(f"run: {why}")
    config = args.config
    if args.sample is not None:
        if args.sample < 0:
            return fail("run: --sample takes a number of bytes (0 = record every allocation)")
        # Sampling is for long runs: collect from the start unless the
        # options given say otherwise.
        config = f"{config},sample={args.sample}" if config else f"mtraceinit,sample={args.sample}"
    if config is not None:
        os.environ["MEMLEAK_CONFIG"] = config
    try:
        # exec, not a child: the program keeps this pid (the reports are named
        # after it) and its exit status is the command's.
        env = traced_environment()
        env["MEMLEAK_ROOT_PID"] = str(os.getpid())  # the program keeps this pid
        os.execve(program, argv, env)
    except OSError as e:
        return fail(f"run: {program}: {e.strerror}", 126)


def cmd_preload_path(args):
    path = preload_path()
    if not os.path.exists(path):
        return fail(f"the hook library is missing ({path}): reinstall with 'pip install .'")
    print(path)
    return 0


def cmd_demo(args):
    from libmemleak.demo import run_demo
    return run_demo(args.keep)


def build_parser():
    p = argparse.ArgumentParser(
        prog="libmemleak",
        description="Find what a native program leaks, while it runs. Reports are written as "
                    "PROG-PID-SEQ.memlog on SIGUSR1, on mtrace()/muntrace() and at exit.")
    p.add_argument("--version", action="version", version=f"libmemleak {__version__}")
    sub = p.add_subparsers(dest="command_name", metavar="COMMAND")
    run = sub.add_parser("run", help="run a program traced from its start",
                         description="Run PROGRAM with the tracer preloaded (same pid, same exit "
                                     "status). Send it SIGUSR1 for a report while it runs.")
    run.add_argument("--config", metavar="OPTIONS",
                     help="MEMLEAK_CONFIG options, e.g. 'depth=32,dir=/tmp/reports'")
    run.add_argument("--sample", metavar="BYTES", type=int,
                     help="record a byte-weighted random sample of allocations, one per BYTES "
                          "allocated on average (e.g. 524288), and report scaled estimates: "
                          "much faster on allocation-heavy programs")
    run.add_argument("command", nargs=argparse.REMAINDER, help="[--] PROGRAM [ARGS...]")
    run.set_defaults(func=cmd_run)
    pp = sub.add_parser("preload-path", help="print the path of libmtrace.so for LD_PRELOAD")
    pp.set_defaults(func=cmd_preload_path)
    demo = sub.add_parser("demo", help="trace a bundled leaking example and show its reports")
    demo.add_argument("--keep", metavar="DIR", help="build and run in DIR and keep the files")
    demo.set_defaults(func=cmd_demo)
    return p


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return args.func(args)
