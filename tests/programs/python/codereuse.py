"""Code objects that die and whose blocks the next one takes (tests/
test_python_frames.py): each generation compiles a function whose
allocation stands on another line of "gen.py", keeps what it made, and
drops the function -- pymalloc then gives its code object's blocks to the
next generation's."""
import sys

kept = []
for k in range(40):
    source = "def make():\n" + "\n" * k + "    return bytearray(5000)\n"  # line k + 2
    namespace = {}
    exec(compile(source, "gen.py", "exec"), namespace)
    kept.append(namespace["make"]())
    del namespace
sys.stdin.readline()  # held here while the test takes its snapshot
