/* CPython 3.11's layout as runtimes/cpython.c reads it: offsets into its
 * structures, x86-64.  tests/test_python_frames.py compiles this header
 * beside CPython's own internal headers and checks every offset there
 * (offsetof), so a wrong one fails a test, never a traced program. */
#ifndef MLK_CPYTHON_LAYOUT_H
#define MLK_CPYTHON_LAYOUT_H 1

/* CPython 3.11's layout (x86-64; Include/cpython/pystate.h,
 * Include/internal/pycore_frame.h, Include/cpython/code.h,
 * Include/cpython/unicodeobject.h). */
enum {
    TSTATE_CFRAME = 56,       /* PyThreadState.cframe */
    TSTATE_THREAD_ID = 152,   /* PyThreadState.thread_id: pthread_self() of its thread */
    CFRAME_CURRENT = 8,       /* _PyCFrame.current_frame */
    FRAME_CODE = 32,          /* _PyInterpreterFrame.f_code */
    FRAME_PREVIOUS = 48,      /* .previous */
    FRAME_PREV_INSTR = 56,    /* .prev_instr: the instruction under way (_Py_CODEUNIT *) */
    FRAME_IS_ENTRY = 68,      /* .is_entry: the first frame of its run of the evaluation loop */
    CODE_FIRSTLINENO = 72,    /* PyCodeObject.co_firstlineno */
    CODE_FILENAME = 112,      /* .co_filename */
    CODE_QUALNAME = 128,      /* .co_qualname */
    CODE_LINETABLE = 136,     /* .co_linetable (bytes) */
    CODE_INSTRUCTIONS = 184,  /* .co_code_adaptive: the instructions, 2 bytes each */
    RUNTIME_FINALIZING = 24,  /* _PyRuntimeState._finalizing */
    RUNTIME_GIL_HOLDER = 576, /* .gilstate.tstate_current: the thread state holding the GIL */
    STR_LENGTH = 16,          /* PyASCIIObject.length (characters) */
    STR_HASH = 24,            /* .hash (-1: not computed yet) */
    STR_STATE = 32,           /* .state: kind in bits 2-4, compact bit 5, ascii bit 6 */
    STR_ASCII_DATA = 48,      /* sizeof(PyASCIIObject) */
    STR_COMPACT_DATA = 72,    /* sizeof(PyCompactUnicodeObject) */
    BYTES_SIZE = 16,          /* PyVarObject.ob_size */
    BYTES_DATA = 32,          /* PyBytesObject.ob_sval */
    TYPE_DEALLOC = 48,        /* PyTypeObject.tp_dealloc */
};
#define READ_VERSION_MIN 0x030b0000ul /* 3.11.0 */
#define READ_VERSION_END 0x030c0000ul /* 3.12: another layout (shim frames, no cframe) */

#endif
