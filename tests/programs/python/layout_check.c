/* Compiled by tests/test_python_frames.py beside a CPython's own internal
 * headers: every offset the hook reads for that version (native/hook/
 * runtimes/cpython_layout.h) is the one CPython's compiler gives. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>
#include <internal/pycore_runtime.h>
#if PY_VERSION_HEX >= 0x030c0000
#include <internal/pycore_gil.h>
#include <internal/pycore_interp.h>
#endif
#include <stddef.h>
#include <stdio.h>

#include "cpython_layout.h"

#if PY_VERSION_HEX >= 0x030d0000
#define L PY_LAYOUT_313
#elif PY_VERSION_HEX >= 0x030c0000
#define L PY_LAYOUT_312
#else
#define L PY_LAYOUT_311
#endif

static int wrong;

static void same(long ours, long theirs, const char *what)
{
    if (ours != theirs) {
        fprintf(stderr, "%s: ours %ld, CPython's %ld\n", what, ours, theirs);
        wrong = 1;
    }
}

#define SAME(ours, type, field) same(ours, (long)offsetof(type, field), #type "." #field)

static void check_thread_and_runtime(void)
{
#if PY_VERSION_HEX >= 0x030d0000
    same(L.tstate_cframe, -1, "no cframe");
    SAME(L.current_frame, PyThreadState, current_frame);
#else
    SAME(L.tstate_cframe, PyThreadState, cframe);
    SAME(L.current_frame, _PyCFrame, current_frame);
#endif
    SAME(L.tstate_thread_id, PyThreadState, thread_id);
    SAME(L.tstate_interp, PyThreadState, interp);
    SAME(L.runtime_finalizing, _PyRuntimeState, _finalizing);
#if PY_VERSION_HEX >= 0x030c0000
    same(L.runtime_gil_holder, -1, "no runtime GIL holder");
    SAME(L.interp_gil, PyInterpreterState, ceval.gil);
    SAME(L.gil_last_holder, struct _gil_runtime_state, last_holder);
    SAME(L.gil_locked, struct _gil_runtime_state, locked);
#else
    SAME(L.runtime_gil_holder, _PyRuntimeState, gilstate.tstate_current);
#endif
}

static void check_frames_and_code(void)
{
#if PY_VERSION_HEX >= 0x030d0000
    SAME(L.frame_code, _PyInterpreterFrame, f_executable);
    SAME(L.frame_instr, _PyInterpreterFrame, instr_ptr);
#else
    SAME(L.frame_code, _PyInterpreterFrame, f_code);
    SAME(L.frame_instr, _PyInterpreterFrame, prev_instr);
#endif
#if PY_VERSION_HEX >= 0x030c0000
    same(L.frame_is_entry, -1, "no is_entry");
    SAME(L.frame_owner, _PyInterpreterFrame, owner);
    same(PY_OWNED_BY_CSTACK, FRAME_OWNED_BY_CSTACK, "a shim frame's owner");
#else
    SAME(L.frame_is_entry, _PyInterpreterFrame, is_entry);
    same(L.frame_owner, -1, "no shim frames");
#endif
    SAME(L.frame_previous, _PyInterpreterFrame, previous);
    SAME(L.code_firstlineno, PyCodeObject, co_firstlineno);
    SAME(L.code_filename, PyCodeObject, co_filename);
    SAME(L.code_qualname, PyCodeObject, co_qualname);
    SAME(L.code_linetable, PyCodeObject, co_linetable);
    SAME(L.code_instructions, PyCodeObject, co_code_adaptive);
    _Static_assert(sizeof(_Py_CODEUNIT) == 2, "an instruction is two bytes");
}

static void check_objects(void)
{
    SAME(STR_LENGTH, PyASCIIObject, length);
    SAME(STR_HASH, PyASCIIObject, hash);
    SAME(STR_STATE, PyASCIIObject, state);
    same(L.str_ascii_data, sizeof(PyASCIIObject), "an ASCII str's characters follow it");
    same(L.str_compact_data, sizeof(PyCompactUnicodeObject), "a compact str's characters follow it");
    SAME(BYTES_SIZE, PyVarObject, ob_size);
    SAME(BYTES_DATA, PyBytesObject, ob_sval);
    SAME(OBJECT_TYPE, PyObject, ob_type);
    SAME(TYPE_DEALLOC, PyTypeObject, tp_dealloc);
    same(PY_VERSION_HEX >= L.version_min && PY_VERSION_HEX < L.version_end, 1, "the table's versions");
    /* The str state's bits as the hook reads them: kind 2-4, compact 5, ascii 6. */
    PyASCIIObject s = {0};
    s.state.kind = 4;
    s.state.compact = 1;
    s.state.ascii = 1;
    unsigned state;
    __builtin_memcpy(&state, (char *)&s + STR_STATE, sizeof state);
    same((state >> 2 & 7) == 4 && (state & 32) && (state & 64), 1, "the str state's bits");
}

/* 3.13: where the hook finds each published offset it checks. */
static void check_debug_offsets(void)
{
#if PY_VERSION_HEX >= 0x030d0000
#define WORD(ours, field) same(8 * (ours), (long)offsetof(_Py_DebugOffsets, field), "_Py_DebugOffsets." #field)
    WORD(DBG_VERSION, version);
    WORD(DBG_FREE_THREADED, free_threaded);
    WORD(DBG_RUNTIME_FINALIZING, runtime_state.finalizing);
    WORD(DBG_INTERP_CEVAL_GIL, interpreter_state.ceval_gil);
    WORD(DBG_INTERP_GIL, interpreter_state.gil_runtime_state);
    WORD(DBG_INTERP_GIL_LOCKED, interpreter_state.gil_runtime_state_locked);
    WORD(DBG_INTERP_GIL_HOLDER, interpreter_state.gil_runtime_state_holder);
    WORD(DBG_TSTATE_INTERP, thread_state.interp);
    WORD(DBG_TSTATE_CURRENT_FRAME, thread_state.current_frame);
    WORD(DBG_TSTATE_THREAD_ID, thread_state.thread_id);
    WORD(DBG_FRAME_PREVIOUS, interpreter_frame.previous);
    WORD(DBG_FRAME_EXECUTABLE, interpreter_frame.executable);
    WORD(DBG_FRAME_INSTR_PTR, interpreter_frame.instr_ptr);
    WORD(DBG_FRAME_OWNER, interpreter_frame.owner);
    WORD(DBG_CODE_FILENAME, code_object.filename);
    WORD(DBG_CODE_QUALNAME, code_object.qualname);
    WORD(DBG_CODE_LINETABLE, code_object.linetable);
    WORD(DBG_CODE_FIRSTLINENO, code_object.firstlineno);
    WORD(DBG_CODE_ADAPTIVE, code_object.co_code_adaptive);
    WORD(DBG_OBJECT_TYPE, pyobject.ob_type);
    WORD(DBG_BYTES_SIZE, bytes_object.ob_size);
    WORD(DBG_BYTES_DATA, bytes_object.ob_sval);
    WORD(DBG_STR_STATE, unicode_object.state);
    WORD(DBG_STR_LENGTH, unicode_object.length);
    WORD(DBG_STR_ASCII_SIZE, unicode_object.asciiobject_size);
    same(sizeof PY_DEBUG_COOKIE - 1, sizeof(((_Py_DebugOffsets *)0)->cookie), "the cookie's length");
#endif
}

int main(void)
{
    check_thread_and_runtime();
    check_frames_and_code();
    check_objects();
    check_debug_offsets();
    return wrong;
}
