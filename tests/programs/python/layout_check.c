/* Compiled by tests/test_python_frames.py beside CPython's own internal
 * headers: every offset the hook reads (native/hook/runtimes/
 * cpython_layout.h) is the one CPython's compiler gives. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>
#include <internal/pycore_runtime.h>
#include <stddef.h>

#include "cpython_layout.h"

#define SAME(ours, type, field) _Static_assert(ours == offsetof(type, field), #ours " is " #type "." #field)
SAME(TSTATE_CFRAME, PyThreadState, cframe);
SAME(TSTATE_THREAD_ID, PyThreadState, thread_id);
SAME(CFRAME_CURRENT, _PyCFrame, current_frame);
SAME(FRAME_CODE, _PyInterpreterFrame, f_code);
SAME(FRAME_PREVIOUS, _PyInterpreterFrame, previous);
SAME(FRAME_PREV_INSTR, _PyInterpreterFrame, prev_instr);
SAME(FRAME_IS_ENTRY, _PyInterpreterFrame, is_entry);
SAME(CODE_FIRSTLINENO, PyCodeObject, co_firstlineno);
SAME(CODE_FILENAME, PyCodeObject, co_filename);
SAME(CODE_QUALNAME, PyCodeObject, co_qualname);
SAME(CODE_LINETABLE, PyCodeObject, co_linetable);
SAME(CODE_INSTRUCTIONS, PyCodeObject, co_code_adaptive);
SAME(RUNTIME_FINALIZING, _PyRuntimeState, _finalizing);
SAME(RUNTIME_GIL_HOLDER, _PyRuntimeState, gilstate.tstate_current);
SAME(STR_LENGTH, PyASCIIObject, length);
SAME(STR_HASH, PyASCIIObject, hash);
SAME(STR_STATE, PyASCIIObject, state);
_Static_assert(STR_ASCII_DATA == sizeof(PyASCIIObject), "an ASCII str's characters follow it");
_Static_assert(STR_COMPACT_DATA == sizeof(PyCompactUnicodeObject), "a compact str's characters follow it");
SAME(BYTES_SIZE, PyVarObject, ob_size);
SAME(BYTES_DATA, PyBytesObject, ob_sval);
SAME(TYPE_DEALLOC, PyTypeObject, tp_dealloc);
_Static_assert(sizeof(_Py_CODEUNIT) == 2, "an instruction is two bytes");
_Static_assert(PY_VERSION_HEX >= READ_VERSION_MIN && PY_VERSION_HEX < READ_VERSION_END, "a version read");

/* The str state's bits as the hook reads them: kind 2-4, compact 5, ascii 6. */
int main(void)
{
    PyASCIIObject s = {0};
    s.state.kind = 4;
    s.state.compact = 1;
    s.state.ascii = 1;
    unsigned state;
    __builtin_memcpy(&state, (char *)&s + STR_STATE, sizeof state);
    return (state >> 2 & 7) == 4 && (state & 32) && (state & 64) ? 0 : 1;
}
