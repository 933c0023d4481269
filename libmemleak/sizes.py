"""Numbers of bytes as the command line and MEMLEAK_CONFIG take them:
digits with an optional K, M or G (powers of 1024).  A module of its own
so that cli.py and commands/ both use it without importing each other."""

import re

_SIZE = re.compile(r"(\d{1,18})([kKmMgG]?)")


def byte_size(text):
    """An option's number of bytes (argparse turns the ValueError into one
    usage line, status 2)."""
    m = _SIZE.fullmatch(text.strip())
    if not m:
        raise ValueError(text)
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]
