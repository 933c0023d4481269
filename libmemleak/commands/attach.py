"""`libmemleak attach PID` and `libmemleak detach PID`: trace a process
that is already running, from now on, and stop (libmemleak/live/attach.py).

Exit statuses (docs/cli.md): 0 done, 1 the process cannot be attached to or
detached from (one line says why; it runs on untouched), 2 a usage mistake."""

import os
import sys

from libmemleak.tracing import config_value
from libmemleak.daemon.procfs import report_pid

EXIT_FAILED = 1


def add_parser(sub):
    p = sub.add_parser("attach", help="trace a running process from now on, without restarting it",
                       description="Load the tracer into the running process PID (dynamically "
                                   "linked, glibc 2.34 or later) and trace its allocations from "
                                   "now on, as 'libmemleak run' would have. Blocks it made before "
                                   "are not counted; their frees are (frees-before-attach). Ask "
                                   "for reports with 'libmemleak snapshot PID' or 'libmemleak "
                                   "shell PID'; 'libmemleak detach PID' stops.")
    p.add_argument("pid", metavar="PID", type=int)
    p.add_argument("--config", metavar="OPTIONS", default="",
                   help="MEMLEAK_CONFIG options, e.g. 'depth=32,dir=/tmp/reports'; reports go to "
                        "the current directory unless dir= says; no report signal unless "
                        "signal= names one (the program's signals are its own)")
    p.add_argument("--library", metavar="PATH",
                   help="libmtrace.so as the process sees it (another mount namespace)")
    p.add_argument("-q", "--quiet", action="store_true", help="say nothing on success")
    p.set_defaults(func=run_attach)
    d = sub.add_parser("detach", help="stop tracing an attached process; a last report is written",
                       description="Undo what 'libmemleak attach PID' did: the process's "
                                   "allocation calls go straight to its allocator again and a "
                                   "last report (reason: detach) is written. The library stays "
                                   "loaded, inert.")
    d.add_argument("pid", metavar="PID", type=int)
    d.add_argument("-q", "--quiet", action="store_true", help="say nothing on success")
    d.set_defaults(func=run_detach)


def _say(message):
    print(f"libmemleak: {message}", file=sys.stderr, flush=True)


def attach_config(config):
    """The options the process gets: the report directory made absolute
    here (the process's working directory is not the user's), and no
    report signal unless asked for."""
    items = [item.strip() for item in config.split(",") if item.strip()]
    directory = os.path.normpath(os.path.join(os.getcwd(), config_value(config, "dir", ".")))
    items = [i for i in items if not i.startswith("dir=")] + [f"dir={directory}"]
    if config_value(config, "signal", None) is None:
        items.append("signal=none")
    return ",".join(items), directory


def run_attach(args):
    from libmemleak.live.attach import AttachError, attach, wait_for_reporter  # loads the C side
    from libmemleak.files.memlog import header_text
    config, directory = attach_config(args.config)
    if not os.path.isdir(directory) or not os.access(directory, os.W_OK | os.X_OK):
        _say(f"attach: the report directory {directory} is missing or not writable: nothing done")
        return EXIT_FAILED
    try:
        tid, kept_ms = attach(args.pid, config, args.library, say=_say)
    except AttachError as e:
        _say(f"attach: {e}")
        return EXIT_FAILED
    started, found_directory, name, blind = wait_for_reporter(args.pid)
    if blind:  # the process's stderr is not the user's: said here, as in every report
        _say(f"attach: NOT SEEN: {header_text(blind)}")  # the process wrote it: no escapes
    directory = found_directory or directory
    name = name or str(args.pid)
    if started is False:
        _say(f"attach: process {args.pid} is traced, but no reporter could be started for it (a "
             "seccomp filter or a sandbox may forbid it new processes; its stderr says why): no "
             "report will be written")
        return EXIT_FAILED
    if started is None:
        _say(f"attach: process {args.pid} is traced, but its reporter did not start (see its "
             "stderr); reports will be written when one can be started")
    if not args.quiet:
        _say(f"attached to {name} (pid {args.pid}; thread {tid} was borrowed for {kept_ms:.1f} ms); "
             f"reports go to {directory}/{name}-{report_pid(args.pid)}-N.memlog; ask for one with: libmemleak "
             f"snapshot {args.pid} (or libmemleak shell {args.pid}); stop with: libmemleak detach "
             f"{args.pid}")
        if config_value(config, "listen", None):
            _say_where_it_listens(args.pid)
    return 0


def _say_where_it_listens(pid):
    """The reporter prints its remote address and secret on the program's
    stderr (a log, for a daemon): say where the attaching user finds them."""
    import time
    from libmemleak.daemon.remote import secret_path
    path = secret_path(pid)
    for _ in range(100):
        try:
            with open(path) as f:
                where = f.read().splitlines()[1:2]
            if where:
                port = where[0].rpartition(":")[2]
                _say(f"{where[0]} for remote shells: libmemleak shell HOST:{port} --secret-file "
                     f"{path} (copy that file to where the shell runs)")
                return
        except OSError:
            pass
        time.sleep(0.05)
    _say("remote shells: the process did not say where it listens (see its stderr)")


def run_detach(args):
    from libmemleak.live.attach import AttachError, detach, last_report_written
    try:
        tid, kept_ms = detach(args.pid, say=_say)
    except AttachError as e:
        _say(f"detach: {e}")
        return EXIT_FAILED
    if not last_report_written(args.pid):
        _say(f"detached from pid {args.pid}, but no last report was written: it has no reporter "
             "(see its stderr)")
        return EXIT_FAILED
    if not args.quiet:
        _say(f"detached from pid {args.pid} (thread {tid} was borrowed for {kept_ms:.1f} ms, the "
             "last report written)")
    return 0
