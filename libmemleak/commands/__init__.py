"""One module per subcommand of `libmemleak` (cli.py registers them): each
parses its options, calls the library and maps errors to exit statuses
(docs/cli.md)."""

import re
import sys

from libmemleak.files.memlog import printable
from libmemleak.sizes import byte_size  # noqa: F401 -- the commands' size options take it from here
from libmemleak.files.series import InputError, read_series

# Exit statuses of the libmemleak command (docs/cli.md).  `run` becomes the
# program, so its status is the program's; before that it fails as env(1),
# nohup(1) and timeout(1) do, so a caller can tell the wrapper from the
# program: 127 the program is not found, 126 it is found but cannot be run
# or traced.  Every other mistake in what the user typed is 2.
EXIT_USAGE, EXIT_CANNOT_RUN, EXIT_NOT_FOUND = 2, 126, 127
EXIT_BAD_INPUT = 2
MAX_PROBLEMS_SAID = 20  # lines about unreadable input, then one that counts the rest
EXIT_NOT_SEEN = 3   # check: the tracer said it could not see the heap: no verdict


def fail(message, code=2):
    print(f"libmemleak: {message}", file=sys.stderr)
    return code


def positive(text):
    """An option's value that must be a whole number of at least 1 (argparse
    turns the ValueError into one usage line, status 2)."""
    n = int(text)
    if n < 1:
        raise ValueError(text)
    return n


def say_blind(command, series):
    """One line on stderr per process whose reports say the tracer could
    not see all of its heap; the number of such processes."""
    blind = [s for s in series if s.blind]
    for s in blind:
        for text in s.blind:
            print(f"libmemleak: {command}: {s.program} (pid {s.pid}): NOT SEEN: {text}",
                  file=sys.stderr)
    return len(blind)


def read_reports(command, paths, pid=None, progress=None, fold=None):
    """The series of the reports in `paths` for an offline command, its
    problems said on stderr, one line each; None (after one line) when
    nothing could be read -- the command then exits EXIT_BAD_INPUT.
    fold: as read_series's."""
    try:
        series, problems = read_series(paths, progress, fold)
    except InputError as e:
        print(f"libmemleak: {command}: {printable(e)}", file=sys.stderr)
        return None
    if pid is not None:
        series = [s for s in series if s.pid == pid]
        if not series:
            print(f"libmemleak: {command}: no reports of pid {pid} in {', '.join(paths)}",
                  file=sys.stderr)
            return None
    said = problems + [p for s in series for p in s.problems]
    for problem in said[:MAX_PROBLEMS_SAID]:
        print(f"libmemleak: {command}: {printable(problem)}", file=sys.stderr)
    if len(said) > MAX_PROBLEMS_SAID:
        print(f"libmemleak: {command}: ... and {len(said) - MAX_PROBLEMS_SAID:,} more problems "
              "like these", file=sys.stderr)
    return series, problems


def add_layer_options(parser):
    """The program's allocation layer (analysis/alloc_layer.py): more of it
    by name, or none folded."""
    parser.add_argument("--alloc-fns", metavar="REGEX",
                        help="functions of the program's own allocation layer (wrappers of malloc) "
                             "beyond those recognised: stacks are attributed to their callers")
    parser.add_argument("--no-fold", action="store_true",
                        help="attribute stacks to the first frame of the program's own code, "
                             "allocation wrappers included")


def regex_option(text, option):
    """The compiled regular expression an option gives (None without it);
    InputError, in one line, when it is not one."""
    if text is None:
        return None
    try:
        return re.compile(text)
    except re.error as e:
        raise InputError(f"{option} {text!r}: not a regular expression ({e})") from None


def layer_args(command, args):
    """(alloc_fns, fold) for analyse(), or None after one line when
    --alloc-fns is not a regular expression."""
    try:
        regex_option(args.alloc_fns, "--alloc-fns")
    except InputError as e:
        print(f"libmemleak: {command}: {e}", file=sys.stderr)
        return None
    return args.alloc_fns, not args.no_fold


def add_suppressions_option(parser):
    parser.add_argument("--suppressions", metavar="FILE",
                        help="leave out stacks matching LeakSanitizer-style 'leak:PATTERN' lines")


def load_suppressions(command, path):
    """The rules of --suppressions (an empty list without it); None after
    one line when the file is bad."""
    from libmemleak.analysis import suppressions
    if not path:
        return []
    try:
        return suppressions.load(path)
    except InputError as e:
        print(f"libmemleak: {command}: {e}", file=sys.stderr)
        return None

