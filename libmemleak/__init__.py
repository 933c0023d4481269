"""libmemleak: find what a running native program leaks, while it runs."""

import os

__version__ = "0.1.0"

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def preload_path():
    """Absolute path of the hook library (libmtrace.so) of this installation."""
    return os.path.join(PACKAGE_DIR, "libmtrace.so")
