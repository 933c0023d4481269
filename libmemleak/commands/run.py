"""`libmemleak run PROGRAM`: the program traced from its start -- exec'd
with the hook library preloaded, so that it keeps run's pid and exit
status (`--wait`: run_wait.py, a child whose final report run waits
for)."""

import argparse
import os
import shutil
import stat
import sys

from libmemleak import preload_path
from libmemleak.commands import EXIT_CANNOT_RUN, EXIT_NOT_FOUND, fail
from libmemleak.daemon.procfs import namespace_tag
from libmemleak.files.report_names import REPORT_NAME
from libmemleak.sizes import byte_size
from libmemleak.tracing import config_value, traced_environment


def add_parser(sub):
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


ELF_MAGIC = b"\x7fELF"
PT_INTERP = 3


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


def _reports_of(directory, pid):
    """The paths of the reports of the process `run` started, by its pid
    (whatever image wrote them: an exec changes the name), oldest first."""
    ns = namespace_tag()
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = []
    for name in names:
        m = REPORT_NAME.match(name)
        if m and int(m["pid"]) == pid and (int(m["ns"]) if m["ns"] else None) == ns:
            try:
                found.append((os.stat(os.path.join(directory, name)).st_mtime_ns, int(m["seq"]), name))
            except OSError:
                continue
    return [os.path.join(directory, name) for _, _, name in sorted(found)]


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
        return run_waiting(start, argv, int(timeout) if timeout.isdigit() else 60,
                           lambda pid: _reports_of(report_dir_of(config), pid))
    return start()
