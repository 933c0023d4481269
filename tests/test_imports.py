"""The package's modules import one another without a circle (#63): the
graph of module-level imports inside libmemleak/ has no cycle.  (Imports
inside functions, kept there to stay out of start-up, are not in it.)"""

import ast
import os

from libmemleak import PACKAGE_DIR


def module_graph():
    root = os.path.dirname(PACKAGE_DIR)
    graph = {}
    for where, _, files in os.walk(PACKAGE_DIR):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(where, name)
            module = os.path.relpath(path, root)[:-3].replace(os.sep, ".").removesuffix(".__init__")
            deps = set()
            with open(path, encoding="utf-8") as f:
                for node in ast.parse(f.read()).body:
                    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("libmemleak"):
                        deps.add(node.module)
                        deps.update(f"{node.module}.{a.name}" for a in node.names)
                    elif isinstance(node, ast.Import):
                        deps.update(a.name for a in node.names if a.name.startswith("libmemleak"))
            graph[module] = deps
    return {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}


def test_no_module_level_import_circle():
    graph = module_graph()
    assert "libmemleak.daemon.reporter" in graph and "libmemleak.fleet.server" in graph
    state, cycles = {}, []

    def visit(module, path):
        state[module] = "open"
        for dep in sorted(graph[module]):
            if state.get(dep) == "open":
                cycles.append(path[path.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, path + [dep])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_pyflakes_finds_nothing():
    """No unused import, undefined name or shadowed import in the package,
    its tests and benches (ruff's F rules, pyflakes'): a name that shadows
    an import once turned a report's health note into a function's repr."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout's, not the installed
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "F", "--output-format", "concise",
                        "--no-cache", *(os.path.join(root, d) for d in ("libmemleak", "tests", "bench"))],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
