"""#63: the reporter's C library (native/reporter/*.c) exports its functions
with no header Python can use: each Python module declares the ones it
calls, and the structs they take, in a cffi cdef string of its own.  A
declaration that disagrees with the definition -- a parameter more or
less, int32_t for int64_t, a value for a pointer, a field moved -- is
memory corruption, found by no compiler.  Here every such declaration is
held against the C definition (qualifiers aside: const changes no call
and no layout)."""

import ast
import glob
import os
import re

import cffi

from libmemleak import PACKAGE_DIR
from libmemleak.daemon import layout

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPORTED = re.compile(r"^EXPORT\s+([^;{]*?)\s*\{", re.M | re.S)


def _parsed(declarations):
    """name -> what the functions and structs `declarations` (C text)
    declare: (result, (args...), ...) of a function, ((field, type,
    offset)...) of a struct defined there."""
    ffi = cffi.FFI()
    ffi.include(layout.ffi)  # (the segment's structs and types, which many take)
    ffi.cdef(declarations)
    out = {}
    for key, (tp, _) in ffi._parser._declarations.items():
        kind, _, name = key.partition(" ")
        if kind == "function" and name.startswith("mlk_"):
            out[name] = (_plain(tp.result), tuple(_plain(a) for a in tp.args), tp.ellipsis)
    for name in re.findall(r"\bstruct\s+(mlk_\w+)\s*\{", declarations):
        out[f"struct {name}"] = tuple((field, re.sub(r"\bconst\b\s*", "", f.type.cname), f.offset)
                                      for field, f in ffi.typeof(f"struct {name}").fields)
    return out


def _plain(tp):
    return re.sub(r"\bconst\b\s*", "", tp._get_c_name()).strip()


# A struct's definition in a C file: its body has no braces inside.
STRUCT = re.compile(r"^struct (mlk_\w+) \{[^{}]*\};", re.M)
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
DEFINE = re.compile(r"^#define\s+([A-Z][A-Z0-9_]+)\s+\(?(0x[0-9a-fA-F]+|\d+)u?l?l?\)?\s*$", re.M)


def c_definitions(structs):
    """What the reporter's C files define: its exported functions, and
    those of the structs named in `structs` that its C files and headers
    define (the segment's are layout.py's)."""
    text, constants = "", dict(layout.CONST)
    for path in sorted(glob.glob(os.path.join(ROOT, "native", "reporter", "*.[ch]"))):
        with open(path) as f:
            source = COMMENT.sub("", f.read())
        constants.update((k, int(v, 0)) for k, v in DEFINE.findall(source))
        text += "".join(" ".join(m.group(1).split()) + ";\n" for m in EXPORTED.finditer(source))
        text += "".join(m.group() + "\n" for m in STRUCT.finditer(source) if f"struct {m.group(1)}" in structs)
    # (cffi takes array sizes as plain numbers: the C files' constants and
    # their products worked out)
    named = re.sub(r"\b[A-Z][A-Z0-9_]+\b", lambda m: str(constants.get(m.group(), m.group())), text)
    return _parsed(re.sub(r"\[([0-9 *+()]+)\]", lambda m: f"[{eval(m.group(1))}]", named))


def python_declarations():
    """(module, name) -> signature of every mlk_ function a cdef string in
    the package declares."""
    found = {}
    for path in glob.glob(os.path.join(PACKAGE_DIR, "**", "*.py"), recursive=True):
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "cdef"
                    and node.args and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str) and "mlk_" in node.args[0].value):
                module = os.path.relpath(path, PACKAGE_DIR)
                for name, sig in _parsed(node.args[0].value).items():
                    found[(module, name)] = sig
    return found


def test_every_declaration_of_a_reporter_function_or_struct_is_its_definition():
    declared = python_declarations()
    assert len(declared) >= 60 and ("daemon/stack_keys.py", "struct mlk_rc_store") in declared
    defined = c_definitions({name for _, name in declared if name.startswith("struct ")})
    assert len(defined) >= 60 and "mlk_rc_columns" in defined and "struct mlk_rc_store" in defined
    wrong = [f"{module}: {name}: declared {sig}, defined {defined.get(name)}"
             for (module, name), sig in sorted(declared.items()) if defined.get(name) != sig]
    assert not wrong, "\n".join(wrong)
