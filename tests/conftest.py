import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def pytest_sessionstart(session):
    # The reporters' answer cache (symbols/answer_cache.py) in a directory
    # of this run's own: the suite neither writes into the user's
    # ~/.cache nor starts from what an earlier run left there.
    import tempfile
    os.environ["XDG_CACHE_HOME"] = session.config._libmemleak_cache = \
        tempfile.mkdtemp(prefix="libmemleak-tests-cache-")
    # Running from a source tree without an installed build: compile the
    # hook library in place, so the tests exercise the current sources.
    from libmemleak import PACKAGE_DIR, preload_path
    source_tree = os.path.exists(os.path.join(PACKAGE_DIR, os.pardir, "native", "shm_layout.h"))
    if source_tree:
        import importlib.util
        spec = importlib.util.spec_from_file_location(
            "libmemleak_setup", os.path.join(PACKAGE_DIR, os.pardir, "setup.py"))
        setup_module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(setup_module)
        setup_module.build_native(PACKAGE_DIR)
    if not os.path.exists(preload_path()):
        pytest.exit(f"libmtrace.so missing at {preload_path()}: run 'pip install .'", 2)


@pytest.fixture
def workdir(tmp_path):
    return tmp_path


def pytest_sessionfinish(session):
    cache = getattr(session.config, "_libmemleak_cache", None)
    if cache:
        import shutil
        shutil.rmtree(cache, ignore_errors=True)
