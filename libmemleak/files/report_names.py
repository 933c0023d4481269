"""What a report file is called (docs/memlog.md, "File names"):
PROG-PID[@NS]-SEQ[-LABEL].memlog, every part made harmless first -- the
traced program chooses its name and label, and a more privileged reporter
builds paths from them."""

import os
import re

# What a program name in a file name may hold: the traced program writes the
# name into its segment, and a more privileged reporter builds paths from it.
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._+@=,%~-]")
NAME_MAX_CHARS = 100


def safe_name(prog):
    """`prog` as one harmless file-name part: no '/', no control or
    non-ASCII characters (each becomes '_'), never '.' or '..', never empty,
    at most NAME_MAX_CHARS characters."""
    name = _UNSAFE_NAME.sub("_", str(prog))[:NAME_MAX_CHARS].lstrip(".")
    return name or "unknown"


# A label the program gave its report (memleak.h's memleak_report), as a
# file name carries it: after the sequence number, never a '-' inside and
# never a digit first, so that prog-PID-SEQ-LABEL cannot be read another way.
_UNSAFE_LABEL = re.compile(r"[^A-Za-z0-9._+@=,%~]")
LABEL_MAX_CHARS = 63


def safe_label(label):
    """`label` (the traced program's word) as a file-name part, or ""."""
    text = _UNSAFE_LABEL.sub("_", str(label or ""))[:LABEL_MAX_CHARS]
    if text and not (text[0].isascii() and (text[0].isalpha() or text[0] == "_")):
        text = "_" + text[:LABEL_MAX_CHARS - 1]
    return text


def report_name(prog, pid, seq, label=None, ns=None):
    """PROG-PID-SEQ[-LABEL].memlog; PROG-PID@NS-SEQ... where the pid is one
    of pid namespace NS (its inode) and not the host's (procfs.namespace_tag)."""
    tail = f"-{safe_label(label)}" if safe_label(label) else ""
    return f"{safe_name(prog)}-{_pid_part(pid, ns)}-{int(seq)}{tail}.memlog"


def _pid_part(pid, ns):
    return f"{int(pid)}@{int(ns)}" if ns else f"{int(pid)}"


def report_names(directory, prog, pid, ns=None):
    """The names of one process's reports in `directory`, sorted."""
    prefix = f"{safe_name(prog)}-{_pid_part(pid, ns)}-"
    return sorted(n for n in os.listdir(directory) if n.startswith(prefix) and n.endswith(".memlog"))


def commit_journal_name(prog, pid, seq, ns=None):
    """The hidden file of report `seq`'s baseline commit (daemon/commit_journal.py)."""
    return f".{safe_name(prog)}-{_pid_part(pid, ns)}-{int(seq)}.commit"


def report_in_place(directory, prog, pid, seq, ns=None):
    """Whether report `seq` of a process is in `directory` (whatever its label)."""
    try:
        names = report_names(directory, prog, pid, ns)
    except OSError:
        return False
    return any((m := REPORT_NAME.match(n)) and int(m.group("seq")) == seq for n in names)


# A report's file name (docs/memlog.md, "File names").
REPORT_NAME = re.compile(r"^(?P<prog>.+)-(?P<pid>\d+)(?:@(?P<ns>\d+))?-(?P<seq>\d+)"
                         r"(?:-(?P<label>[A-Za-z_][A-Za-z0-9._+@=,%~]*))?\.memlog$")


def run_name(path):
    """What names one process's reports (PROG-PID[@NS]), from one's path."""
    m = REPORT_NAME.match(os.path.basename(path))
    return f"{m['prog']}-{m['pid']}@{m['ns'] or ''}" if m else os.path.basename(path)
