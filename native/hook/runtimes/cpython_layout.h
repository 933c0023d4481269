/* CPython's layouts as runtimes/cpython.c reads them: offsets into its
 * structures, x86-64, one table per version read (3.11, 3.12, 3.13).
 * tests/test_python_frames.py compiles this header beside each of those
 * interpreters' own internal headers and checks every offset of its
 * version there (offsetof), so a wrong one fails a test, never a traced
 * program; a 3.13 interpreter's own published offsets (_Py_DebugOffsets,
 * at the head of _PyRuntime) are checked against its table at start. */
#ifndef MLK_CPYTHON_LAYOUT_H
#define MLK_CPYTHON_LAYOUT_H 1

#include <stdint.h>

/* What differs between the versions read (Include/cpython/pystate.h,
 * Include/internal/pycore_frame.h, Include/cpython/code.h,
 * Include/internal/pycore_runtime.h, Include/internal/pycore_gil.h). */
struct py_layout {
    unsigned long version_min, version_end; /* the versions it is: [min, end) */
    int16_t tstate_cframe;       /* PyThreadState.cframe, or -1: the frame is the state's own (3.13) */
    int16_t current_frame;       /* _PyCFrame.current_frame, or PyThreadState.current_frame */
    int16_t tstate_thread_id;    /* PyThreadState.thread_id: pthread_self() of its thread */
    int16_t tstate_interp;       /* PyThreadState.interp */
    int16_t frame_code;          /* _PyInterpreterFrame.f_code (3.13: f_executable, a code object or None) */
    int16_t frame_previous;      /* .previous */
    int16_t frame_instr;         /* .prev_instr (3.13: instr_ptr): the instruction under way */
    int16_t frame_is_entry;      /* 3.11: .is_entry, the first frame of its run of the evaluation loop */
    int16_t frame_owner;         /* 3.12: .owner; a run's first frame follows a shim the C stack owns */
    int16_t code_firstlineno;    /* PyCodeObject.co_firstlineno */
    int16_t code_filename;       /* .co_filename */
    int16_t code_qualname;       /* .co_qualname */
    int16_t code_linetable;      /* .co_linetable (bytes) */
    int16_t code_instructions;   /* .co_code_adaptive: the instructions, 2 bytes each */
    int16_t runtime_finalizing;  /* _PyRuntimeState._finalizing */
    int16_t runtime_gil_holder;  /* 3.11: .gilstate.tstate_current, the thread state holding the GIL */
    int16_t interp_gil;          /* 3.12: PyInterpreterState.ceval.gil (struct _gil_runtime_state *) */
    int16_t gil_last_holder;     /* _gil_runtime_state.last_holder */
    int16_t gil_locked;          /* .locked */
    int16_t str_ascii_data;      /* sizeof(PyASCIIObject) */
    int16_t str_compact_data;    /* sizeof(PyCompactUnicodeObject) */
};

#define PY_OWNED_BY_CSTACK 3 /* 3.12, 3.13: a shim frame, the entry to a run of the evaluation loop */

static const struct py_layout PY_LAYOUT_311 = {
    .version_min = 0x030b0000ul, .version_end = 0x030c0000ul,
    .tstate_cframe = 56, .current_frame = 8, .tstate_thread_id = 152, .tstate_interp = 16,
    .frame_code = 32, .frame_previous = 48, .frame_instr = 56, .frame_is_entry = 68, .frame_owner = -1,
    .code_firstlineno = 72, .code_filename = 112, .code_qualname = 128, .code_linetable = 136,
    .code_instructions = 184, .runtime_finalizing = 24, .runtime_gil_holder = 576,
    .interp_gil = -1, .gil_last_holder = -1, .gil_locked = -1, .str_ascii_data = 48, .str_compact_data = 72,
};

static const struct py_layout PY_LAYOUT_312 = {
    .version_min = 0x030c0000ul, .version_end = 0x030d0000ul,
    .tstate_cframe = 56, .current_frame = 0, .tstate_thread_id = 136, .tstate_interp = 16,
    .frame_code = 0, .frame_previous = 8, .frame_instr = 56, .frame_is_entry = -1, .frame_owner = 70,
    .code_firstlineno = 68, .code_filename = 112, .code_qualname = 128, .code_linetable = 136,
    .code_instructions = 192, .runtime_finalizing = 24, .runtime_gil_holder = -1,
    .interp_gil = 384, .gil_last_holder = 8, .gil_locked = 16, .str_ascii_data = 40, .str_compact_data = 56,
};

static const struct py_layout PY_LAYOUT_313 = {
    .version_min = 0x030d0000ul, .version_end = 0x030e0000ul,
    .tstate_cframe = -1, .current_frame = 72, .tstate_thread_id = 152, .tstate_interp = 16,
    .frame_code = 0, .frame_previous = 8, .frame_instr = 56, .frame_is_entry = -1, .frame_owner = 70,
    .code_firstlineno = 68, .code_filename = 112, .code_qualname = 128, .code_linetable = 136,
    .code_instructions = 200, .runtime_finalizing = 608, .runtime_gil_holder = -1,
    .interp_gil = 16, .gil_last_holder = 8, .gil_locked = 16, .str_ascii_data = 40, .str_compact_data = 56,
};

/* The same in every version read. */
enum {
    STR_LENGTH = 16, /* PyASCIIObject.length (characters) */
    STR_HASH = 24,   /* .hash (-1: not computed yet) */
    STR_STATE = 32,  /* .state: kind in bits 2-4, compact bit 5, ascii bit 6 */
    BYTES_SIZE = 16, /* PyVarObject.ob_size */
    BYTES_DATA = 32, /* PyBytesObject.ob_sval */
    OBJECT_TYPE = 8, /* PyObject.ob_type */
    TYPE_DEALLOC = 48, /* PyTypeObject.tp_dealloc */
};

/* 3.13's _Py_DebugOffsets (Include/internal/pycore_runtime.h), the words
 * checked against PY_LAYOUT_313: their indexes (8-byte words; word 0 is
 * the cookie).  Its own layout changes between minor versions: read in
 * 3.13 only. */
#define PY_DEBUG_COOKIE "xdebugpy"
enum {
    DBG_VERSION = 1, DBG_FREE_THREADED = 2,
    DBG_RUNTIME_FINALIZING = 4,
    DBG_INTERP_CEVAL_GIL = 14, DBG_INTERP_GIL = 15, DBG_INTERP_GIL_LOCKED = 17, DBG_INTERP_GIL_HOLDER = 18,
    DBG_TSTATE_INTERP = 22, DBG_TSTATE_CURRENT_FRAME = 23, DBG_TSTATE_THREAD_ID = 24,
    DBG_FRAME_PREVIOUS = 29, DBG_FRAME_EXECUTABLE = 30, DBG_FRAME_INSTR_PTR = 31, DBG_FRAME_OWNER = 33,
    DBG_CODE_FILENAME = 35, DBG_CODE_QUALNAME = 37, DBG_CODE_LINETABLE = 38, DBG_CODE_FIRSTLINENO = 39,
    DBG_CODE_ADAPTIVE = 43, DBG_OBJECT_TYPE = 45, DBG_BYTES_SIZE = 65, DBG_BYTES_DATA = 66,
    DBG_STR_STATE = 68, DBG_STR_LENGTH = 69, DBG_STR_ASCII_SIZE = 70,
};

#endif
