"""bench/python.py's second workload: what a request handler written in
Python does -- many small function calls, a few objects each (a parser,
a router, a template), where a profile function pays per call."""
import sys


def tokenize(line):
    return line.split()


def route(tokens, table):
    key = tokens[0] if tokens else ""
    return table.get(key, "default")


def render(name, tokens):
    out = []
    for t in tokens:
        out.append(name + ":" + t)
    return len(out)


def handle(line, table):
    tokens = tokenize(line)
    return render(route(tokens, table), tokens)


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def work(rounds):
    table = {"get": "reader", "put": "writer"}
    total = 0
    for i in range(rounds):
        total += handle("get key%d value" % (i % 100), table) + fib(12)
    return total


print(work(int(sys.argv[1]) if len(sys.argv) > 1 else 3000))
