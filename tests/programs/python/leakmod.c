/* A C extension that leaks on every call (tests/test_python_frames.py):
 * its leak must be named at its C line, then at the Python line that
 * called it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>

static char *volatile last; /* (so that the compiler keeps the malloc: it is used) */

static PyObject *leak(PyObject *self, PyObject *args)
{
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "n", &n))
        return NULL;
    char *p = malloc((size_t)n); /* LEAK: never freed */
    if (p)
        memset(p, 1, (size_t)n);
    last = p;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"leak", leak, METH_VARARGS, "malloc n bytes and forget them"}, {NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "leakmod", NULL, -1, methods};

PyMODINIT_FUNC PyInit_leakmod(void) { return PyModule_Create(&module); }
