"""What a program traced from its start is given: its environment (the
hook library preloaded, the reporter's Python named), and the options of
a MEMLEAK_CONFIG string as the hook reads them.  `run`, `attach`, the demo,
the tests and the benches start traced programs with these."""

import os
import sys

from libmemleak import preload_path


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


def config_value(config, name, default):
    """The value of option `name` in a MEMLEAK_CONFIG string (the last one
    wins, as in the hook library's parser)."""
    found = default
    for item in config.split(","):
        key, _, value = item.strip().partition("=")
        if key.strip() == name and value.strip():
            found = value.strip()
    return found
