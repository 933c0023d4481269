"""Suppressions in LeakSanitizer's syntax, for report, export and check:

    # a comment
    leak:libfontconfig      <- any frame whose function, module or file matches
    leak:^g_type_register   <- ^ and $ anchor, * matches anything

A stack is suppressed when one of its frames matches a rule (as LSan
matches a leak's stack).  Suppressed stacks leave the suspects, the stacks
and the live totals; how many there were is said."""

import re

from libmemleak.files.series import InputError
from libmemleak.analysis import trends
from libmemleak.analysis.trends import count


def _regex(pattern):
    anchored_start = pattern.startswith("^")
    anchored_end = pattern.endswith("$") and len(pattern) > 1
    core = pattern[1 if anchored_start else 0:len(pattern) - (1 if anchored_end else 0)]
    body = ".*".join(re.escape(part) for part in core.split("*"))
    return re.compile(("^" if anchored_start else "") + body + ("$" if anchored_end else ""))


def load(path):
    """The rules of a suppressions file; InputError (with the line) if it
    cannot be read or a line is not `leak:PATTERN`."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}") from None
    return parse(lines, path)


def parse(lines, where, strict=True):
    """The rules of suppression lines; with strict, InputError (naming
    `where` and the line) for a line that is not `leak:PATTERN`, else such
    lines are passed over (a program's own suppressions may hold other
    sanitizers' kinds, which LSan passes over too)."""
    rules = []
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        kind, sep, pattern = line.partition(":")
        if not sep or kind.strip() != "leak" or not pattern.strip():
            if not strict:
                continue
            raise InputError(f"{where}:{number}: expected 'leak:PATTERN', got {line[:60]!r}")
        rules.append((pattern.strip(), _regex(pattern.strip())))
    return rules


def from_reports(series):
    """The program's own suppressions (its __lsan_default_suppressions, which
    its reports carry as `default-suppression N` lines): the latest report's."""
    for r in reversed(series.reports):
        lines = [v for k, v in r.header.items() if k.startswith("default-suppression ")]
        if lines:
            return parse(lines, "report", strict=False)
    return []


def matches(rules, frames):
    for f in frames:
        for name in (f.function, f.module, (f.module or "").rsplit("/", 1)[-1], f.file):
            if name and any(regex.search(name) for _, regex in rules):
                return True
    return False


def apply(analysis, rules, whose=""):
    """Leave the suppressed stacks out of an analysis (trends, suspects,
    live totals); a note says how many and how many bytes (and whose
    rules: `whose`)."""
    if not rules:
        return analysis
    kept = [t for t in analysis.trends if not matches(rules, t.frames)]
    gone = len(analysis.trends) - len(kept)
    if gone:
        gone_bytes = sum(t.live_bytes for t in analysis.trends) - sum(t.live_bytes for t in kept)
        analysis.notes.append(f"{count(gone, 'stack')} suppressed{whose} "
                              f"({gone_bytes:,} bytes live)")
    analysis.trends = kept
    keep = {id(t) for t in kept}
    analysis.suspects = [t for t in analysis.suspects if id(t) in keep]
    # The same rules hold for resources (a descriptor a library keeps open on purpose).
    analysis.resource_trends = [t for t in analysis.resource_trends if not matches(rules, t.frames)]
    keep |= {id(t) for t in analysis.resource_trends}
    analysis.resource_suspects = [t for t in analysis.resource_suspects if id(t) in keep]
    analysis.live_bytes = analysis.live_blocks = analysis.custom_bytes = analysis.custom_blocks = 0
    analysis.resources = {name: [0, 0] for name in analysis.resources}  # the kinds tracked stay said
    for t in kept + analysis.resource_trends:
        trends.add_live(analysis, t)
    if analysis.scan:  # a suppressed stack's lost blocks are not lost to check or report
        analysis.scan = analysis.scan.without(lambda entry: matches(rules, entry.frames))
    return analysis
