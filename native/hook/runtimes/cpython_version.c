/* Which CPython this is, and whether its frames' layout is one read
 * (runtimes/cpython_layout.h): its version, by its own symbols; 3.13's
 * offsets as it publishes them, checked against its table. */
#define _GNU_SOURCE
#include <link.h>
#include <string.h>

#include "../mlk.h"
#include "../route/got.h"
#include "cpython.h"
#include "cpython_layout.h"

struct symbol_ask {
    const char *name;
    uintptr_t at;
};

static int symbol_in(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct symbol_ask *ask = arg;
    uintptr_t at = mlk_module_symbol(info, ask->name);
    if (at > 1) /* (1: a module without a GNU hash table, not asked) */
        ask->at = at;
    return ask->at != 0;
}

/* A symbol of the first module that defines it, by the modules' symbol
 * tables -- not dlsym, whose failure (most programs are no Python) leaves
 * a message in a block it mallocs, from inside our hook: not recorded,
 * then freed by the program, an "unknown free" in every report. */
void *mlk_py_symbol(const char *name)
{
    struct symbol_ask ask = {name, 0};
    dl_iterate_phdr(symbol_in, &ask);
    return (void *)ask.at;
}

unsigned long mlk_py_version(void)
{
    const unsigned long *v = mlk_py_symbol("Py_Version"); /* 3.11 and later */
    if (v)
        return *v;
    const char *(*get)(void) = (const char *(*)(void))mlk_py_symbol("Py_GetVersion");
    if (!get)
        return 0;
    const char *s = get(); /* "3.10.12 (main, ...": its major, minor and micro (a release: 0xf0) */
    unsigned long part[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++, s += *s == '.') {
        for (; *s >= '0' && *s <= '9'; s++)
            part[i] = (part[i] * 10 + (unsigned long)(*s - '0')) & 0xff;
        if (*s != '.')
            break;
    }
    return part[0] << 24 | part[1] << 16 | part[2] << 8 | (*s == ' ' || !*s ? 0xf0 : 0);
}

const struct py_layout *const mlk_py_layouts[MLK_PY_LAYOUTS] = {&PY_LAYOUT_311, &PY_LAYOUT_312, &PY_LAYOUT_313};

/* 3.13 publishes its offsets at the head of _PyRuntime: they must be the
 * ones its table holds (a build configured otherwise -- free-threaded,
 * objects traced -- is not read). */
static int debug_offsets_agree(const uint64_t *d, unsigned long version)
{
    const struct py_layout *L = &PY_LAYOUT_313;
    static const struct {
        int word, value;
    } want[] = {
        {DBG_RUNTIME_FINALIZING, PY_LAYOUT_313.runtime_finalizing},
        {DBG_TSTATE_INTERP, PY_LAYOUT_313.tstate_interp},
        {DBG_TSTATE_CURRENT_FRAME, PY_LAYOUT_313.current_frame},
        {DBG_TSTATE_THREAD_ID, PY_LAYOUT_313.tstate_thread_id},
        {DBG_INTERP_CEVAL_GIL, PY_LAYOUT_313.interp_gil},
        {DBG_FRAME_PREVIOUS, PY_LAYOUT_313.frame_previous},
        {DBG_FRAME_EXECUTABLE, PY_LAYOUT_313.frame_code},
        {DBG_FRAME_INSTR_PTR, PY_LAYOUT_313.frame_instr},
        {DBG_FRAME_OWNER, PY_LAYOUT_313.frame_owner},
        {DBG_CODE_FILENAME, PY_LAYOUT_313.code_filename},
        {DBG_CODE_QUALNAME, PY_LAYOUT_313.code_qualname},
        {DBG_CODE_LINETABLE, PY_LAYOUT_313.code_linetable},
        {DBG_CODE_FIRSTLINENO, PY_LAYOUT_313.code_firstlineno},
        {DBG_CODE_ADAPTIVE, PY_LAYOUT_313.code_instructions},
        {DBG_OBJECT_TYPE, OBJECT_TYPE},
        {DBG_BYTES_SIZE, BYTES_SIZE},
        {DBG_BYTES_DATA, BYTES_DATA},
        {DBG_STR_STATE, STR_STATE},
        {DBG_STR_LENGTH, STR_LENGTH},
        {DBG_STR_ASCII_SIZE, PY_LAYOUT_313.str_ascii_data},
    };
    if (memcmp(d, PY_DEBUG_COOKIE, 8) != 0 || d[DBG_VERSION] != version || d[DBG_FREE_THREADED] != 0)
        return 0;
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (d[want[i].word] != (uint64_t)want[i].value)
            return 0;
    return d[DBG_INTERP_GIL_HOLDER] - d[DBG_INTERP_GIL] == (uint64_t)L->gil_last_holder &&
           d[DBG_INTERP_GIL_LOCKED] - d[DBG_INTERP_GIL] == (uint64_t)L->gil_locked;
}

/* Which of mlk_py_layouts the interpreter of `version` has, or -1: none read. */
int mlk_py_layout_of(unsigned long version, const char *rt)
{
    for (int i = 0; i < (int)(MLK_PY_LAYOUTS); i++)
        if (version >= mlk_py_layouts[i]->version_min && version < mlk_py_layouts[i]->version_end)
            return mlk_py_layouts[i] != &PY_LAYOUT_313 || (rt && debug_offsets_agree((const uint64_t *)rt, version)) ? i
                                                                                                              : -1;
    return -1;
}
