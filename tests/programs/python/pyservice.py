"""A small Python service with two leaks at known lines (tests/
test_python_frames.py): a C extension's, and a pure-Python one.  Each
line on stdin "grow N" serves N requests; it answers "ok" and how many
sessions it keeps."""
import sys

import leakmod

sessions = []


def handle(i):
    leakmod.leak(1000)  # CALLS-C
    sessions.append(bytearray(3000))  # PYTHON-LEAK


def serve(n):
    for i in range(n):
        handle(i)  # SERVE


def main():
    for line in sys.stdin:
        word, _, arg = line.partition(" ")
        if word == "grow":
            serve(int(arg))  # MAIN
        print("ok", len(sessions), flush=True)


main()  # MODULE
