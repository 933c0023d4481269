"""bench/python.py's workload: what a Python service does between
requests -- build records, serialize them, parse them back, keep some
(every object through CPython's allocators)."""
import json
import sys


def build(n):
    rows = []
    for i in range(n):
        rows.append({"id": i, "name": "user%d" % i, "tags": [str(j) for j in range(i % 5)]})
    return rows


def work(rounds):
    total, kept = 0, []
    for r in range(rounds):
        rows = build(2000)
        text = json.dumps(rows)
        back = json.loads(text)
        kept.append(back[r])
        total += len(back) + len(text)
    return total


print(work(int(sys.argv[1]) if len(sys.argv) > 1 else 10))
