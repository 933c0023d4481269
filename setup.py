"""Build: compiles native/hook/ into libmemleak/libmtrace.so (a plain shared
library for LD_PRELOAD, not a Python extension), native/reporter/*.c into
libmemleak/libmlkreport.so (the reporter's per-stack loops, loaded with
cffi), and ships the layout header beside them, so that the hook library
and the reporter read the same file."""

import contextlib
import glob
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

from setuptools import Command, Distribution, find_packages, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))

CFLAGS = ["-O2", "-g", "-fPIC", "-std=gnu11", "-fvisibility=hidden",
          # the C++ operator hooks must let bad_alloc unwind through them
          "-fexceptions",
          "-Wall", "-Wextra", "-Wno-unused-parameter"]
LTO_FLAGS = ["-flto=auto"]
LDFLAGS = ["-shared", "-Wl,-z,now", "-Wl,-z,noexecstack", "-Wl,--no-undefined"]
# memleak.h finds the hook library by this name when it was dlopen'ed by an
# attach (no global lookup finds it then): dlopen("libmtrace.so", RTLD_NOLOAD).
HOOK_LDFLAGS = ["-Wl,-soname,libmtrace.so"]
LIBS = ["-ldl", "-lpthread", "-lgcc_s", "-lm"]


def capstone_dir():
    """The installed `capstone` package: its wheel holds libcapstone.so, the
    instruction decoder the hook loads to route a program's own allocator,
    and the headers it is built against."""
    try:
        import capstone
    except ImportError:
        sys.exit("libmemleak: building needs the capstone package (pip install capstone)")
    return os.path.dirname(os.path.abspath(capstone.__file__))


def usdt_flags(cc):
    """-DMLK_USDT where <sys/sdt.h> is there (Debian: systemtap-sdt-dev):
    the sampled mode's otel_memory probes (native/hook/usdt.h).  Without
    it they are left out, said here once."""
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "sdt.c")
        with open(src, "w") as f:
            f.write("#include <sys/sdt.h>\nint main(void) { DTRACE_PROBE1(mlk, check, 1); return 0; }\n")
        found = subprocess.call([*cc, "-c", src, "-o", os.path.join(d, "sdt.o")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0
    if not found:
        print("libmemleak: <sys/sdt.h> not found (Debian: systemtap-sdt-dev): built without the "
              "otel_memory USDT probes (docs/fleet.md)")
    return ["-DMLK_USDT=1"] if found else []


def build_native(out_dir, python=sys.executable):
    sources = sorted(glob.glob(os.path.join(HERE, "native", "hook", "*.c")) +
                     glob.glob(os.path.join(HERE, "native", "hook", "route", "*.c")) +
                     glob.glob(os.path.join(HERE, "native", "hook", "api", "*.c")) +
                     glob.glob(os.path.join(HERE, "native", "hook", "resources", "*.c")) +
                     glob.glob(os.path.join(HERE, "native", "hook", "events", "*.c")) +
                     glob.glob(os.path.join(HERE, "native", "hook", "runtimes", "*.c")))
    cc = shlex.split(os.environ.get("CC", "cc"))
    target = os.path.join(out_dir, "libmtrace.so")
    decoder = capstone_dir()
    probes = usdt_flags(cc)
    with _replaced_whole(target) as building:
        cmd = [*cc, *CFLAGS, *probes, f'-DMLK_PYTHON="{python}"', "-I" + os.path.join(decoder, "include"),
               f'-DMLK_CAPSTONE_BUILT="{os.path.join(decoder, "lib", "libcapstone.so")}"',
               *sources, "-o", building, *LDFLAGS, *HOOK_LDFLAGS, *LIBS]
        # Link-time optimization lets the hot path inline across modules (the
        # hooks, the trailer, the counters): ~2.5% fewer cycles on sqlite3.  A
        # toolchain without it (clang without the gold plugin) builds without.
        lto = [cmd[0], *LTO_FLAGS, *cmd[1:]]
        print(" ".join(shlex.quote(c) for c in lto))
        if subprocess.call(lto) != 0:
            print("libmemleak: building again without link-time optimization")
            subprocess.check_call(cmd)
    # The reporter's loops: no hooks, nothing to interpose, no libraries.
    report_sources = sorted(glob.glob(os.path.join(HERE, "native", "reporter", "*.c")))
    report_flags = [f for f in CFLAGS if f != "-fexceptions"]
    with _replaced_whole(os.path.join(out_dir, "libmlkreport.so")) as building:
        cmd = [*cc, *report_flags, *report_sources, "-o", building, *LDFLAGS]
        print(" ".join(shlex.quote(c) for c in cmd))
        subprocess.check_call(cmd)
    with _replaced_whole(os.path.join(out_dir, "shm_layout.h")) as building:
        shutil.copy(os.path.join(HERE, "native", "shm_layout.h"), building)
    return target


@contextlib.contextmanager
def _replaced_whole(path):
    """A name to build path's new content under, which then replaces path
    in one rename: a process that loads path meanwhile -- a test session
    running from this tree while another rebuilds it -- gets the old file
    or the new one, never one being written ("file too short")."""
    building = f"{path}.building-{os.getpid()}"
    try:
        yield building
        os.replace(building, path)
    finally:
        if os.path.exists(building):
            os.unlink(building)


class BuildWithNative(build_py):
    def run(self):
        super().run()
        out = os.path.join(self.build_lib, "libmemleak")
        os.makedirs(out, exist_ok=True)
        build_native(out)


class BuildNativeInPlace(Command):
    """`python setup.py build_native`: compile libmtrace.so into the source
    tree's libmemleak/, for working on the code without reinstalling."""
    user_options = []

    def initialize_options(self):
        pass

    def finalize_options(self):
        pass

    def run(self):
        build_native(os.path.join(HERE, "libmemleak"))


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True  # the wheel holds a compiled library: platform-specific


if __name__ == "__main__":  # importable by the tests, for build_native()
    setup(
        name="libmemleak",
        version="0.1.0",
        description="Find what a running native program leaks, while it runs",
        long_description=open(os.path.join(HERE, "README.rst"), encoding="utf-8").read(),
        long_description_content_type="text/x-rst",
        license="MIT",
        python_requires=">=3.10",
        packages=find_packages(include=["libmemleak", "libmemleak.*"]),
        package_data={"libmemleak": ["examples/*.c", "include/*.h", "include/valgrind-compat/valgrind/*.h"]},
        # sortedcontainers was declared and never used: the ranking of `report`
        # sorts once, which a plain sort does (issue 20 asked to use it or drop it).
        install_requires=["cffi>=1.15", "pyelftools>=0.29",
                          # the event log's codec (docs/events.md)
                          "zstandard>=0.19",
                          # the x86-64 decoder that routes a program's own malloc (native/hook/route/)
                          "capstone>=5.0.1,<6"],
        entry_points={"console_scripts": ["libmemleak = libmemleak.cli:main"]},
        cmdclass={"build_py": BuildWithNative, "build_native": BuildNativeInPlace},
        distclass=BinaryDistribution,
    )
