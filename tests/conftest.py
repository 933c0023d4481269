import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def pytest_sessionstart(session):
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
