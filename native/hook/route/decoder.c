/* The x86-64 decoder behind the entry patcher: Capstone, the library the
 * `capstone` Python package ships (its wheel holds libcapstone.so and the
 * headers we build against).  It is loaded with dlopen only in a process
 * that has an entry to route, so a program whose malloc is ours pays
 * nothing for it.  Capstone is given memory of ours (a mapping, never the
 * program's malloc: the very functions being routed). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <capstone/capstone.h>

#include "../hooks.h"
#include "decoder.h"

/* ---- memory for Capstone: a bump allocator over one mapping ----------- */
#define ARENA_SIZE (1 << 20) /* Capstone's handle and one detailed instruction: ~20 KB */
static char *arena;
static size_t arena_used;

static void *arena_malloc(size_t n)
{
    if (!arena && !(arena = mlk_map_anon(ARENA_SIZE)))
        return NULL;
    size_t start = (arena_used + 16 + 15) & ~(size_t)15;
    if (start + n > ARENA_SIZE)
        return NULL;
    ((size_t *)(arena + start))[-1] = n;
    arena_used = start + n;
    return arena + start;
}

static void *arena_calloc(size_t k, size_t n)
{
    size_t total;
    return __builtin_mul_overflow(k, n, &total) ? NULL : arena_malloc(total); /* fresh: zeroed */
}

static void *arena_realloc(void *p, size_t n)
{
    void *q = arena_malloc(n);
    if (q && p) {
        size_t had = ((size_t *)p)[-1];
        memcpy(q, p, had < n ? had : n);
    }
    return q;
}

static void arena_free(void *p) { (void)p; /* a handful of blocks, kept for the process's life */ }

/* ---- the library -------------------------------------------------------- */
static struct {
    cs_err (*open)(cs_arch, cs_mode, csh *);
    cs_err (*option)(csh, cs_opt_type, size_t);
    cs_insn *(*malloc_insn)(csh);
    bool (*disasm_iter)(csh, const uint8_t **, size_t *, uint64_t *, cs_insn *);
    bool (*insn_group)(csh, const cs_insn *, unsigned int);
    unsigned int (*version)(int *, int *);
} cs;
static csh handle;
static cs_insn *insn;
static int opened; /* 1: ready; -1: failed (said once by the caller) */

#ifndef MLK_CAPSTONE_BUILT
#define MLK_CAPSTONE_BUILT ""
#endif

/* Beside our own library in an installed package (site-packages/capstone/
 * lib/ next to site-packages/libmemleak/), else where the build found it
 * (a build in the source tree, run from its virtual environment). */
static void *load_library(char *tried, size_t tried_len)
{
    Dl_info self;
    char path[4096];
    void *(*open_fn)(const char *, int) = mlk_real.dlopen ? mlk_real.dlopen : dlopen;
    tried[0] = 0;
    if (dladdr((void *)&load_library, &self) && self.dli_fname) {
        const char *slash = strrchr(self.dli_fname, '/');
        int dir = slash ? (int)(slash - self.dli_fname) : 1;
        snprintf(path, sizeof path, "%.*s/../capstone/lib/libcapstone.so", dir,
                 slash ? self.dli_fname : ".");
        void *lib = open_fn(path, RTLD_NOW | RTLD_LOCAL);
        if (lib)
            return lib;
        snprintf(tried, tried_len, "%s", path);
    }
    if (MLK_CAPSTONE_BUILT[0]) {
        void *lib = open_fn(MLK_CAPSTONE_BUILT, RTLD_NOW | RTLD_LOCAL);
        if (lib)
            return lib;
        size_t used = strlen(tried);
        snprintf(tried + used, tried_len - used, "%s%s", used ? " or " : "", MLK_CAPSTONE_BUILT);
    }
    return NULL;
}

int mlk_decoder_open(char *why, size_t why_len)
{
    if (opened)
        return opened > 0 ? 0 : -1;
    opened = -1;
    char tried[2048];
    void *lib = load_library(tried, sizeof tried);
    if (!lib) {
        snprintf(why, why_len, "the instruction decoder (Capstone's libcapstone.so) is not found at %s: "
                 "pip install capstone beside libmemleak", tried[0] ? tried : "any known place");
        return -1;
    }
#define GET(field, name) *(void **)&cs.field = dlsym(lib, name)
    GET(open, "cs_open");
    GET(option, "cs_option");
    GET(malloc_insn, "cs_malloc");
    GET(disasm_iter, "cs_disasm_iter");
    GET(insn_group, "cs_insn_group");
    GET(version, "cs_version");
#undef GET
    int major = 0, minor = 0;
    if (!cs.open || !cs.option || !cs.malloc_insn || !cs.disasm_iter || !cs.insn_group || !cs.version ||
        (cs.version(&major, &minor), major != CS_API_MAJOR)) {
        snprintf(why, why_len, "the instruction decoder found (Capstone %d.%d) is not the version "
                 "libmemleak was built with (%d.x)", major, minor, CS_API_MAJOR);
        return -1;
    }
    cs_opt_mem mem = {arena_malloc, arena_calloc, arena_realloc, arena_free, vsnprintf};
    if (cs.option(0, CS_OPT_MEM, (size_t)&mem) != CS_ERR_OK || cs.open(CS_ARCH_X86, CS_MODE_64, &handle) != CS_ERR_OK ||
        cs.option(handle, CS_OPT_DETAIL, CS_OPT_ON) != CS_ERR_OK || !(insn = cs.malloc_insn(handle))) {
        snprintf(why, why_len, "the instruction decoder (Capstone) did not start");
        return -1;
    }
    opened = 1;
    return 0;
}

static int is_rip_relative(const cs_x86 *x)
{
    for (int i = 0; i < x->op_count; i++)
        if (x->operands[i].type == X86_OP_MEM && x->operands[i].mem.base == X86_REG_RIP)
            return 1;
    return 0;
}

int mlk_decode(const uint8_t *code, size_t avail, uint64_t at, struct mlk_insn *out)
{
    if (opened <= 0)
        return -1;
    const uint8_t *p = code;
    size_t left = avail;
    uint64_t address = at;
    if (!cs.disasm_iter(handle, &p, &left, &address, insn))
        return -1;
    const cs_x86 *x = &insn->detail->x86;
    memset(out, 0, sizeof *out);
    out->len = (uint8_t)insn->size;
    out->kind = MLK_INSN_PLAIN;
    out->padding = insn->id == X86_INS_NOP || insn->id == X86_INS_INT3;
    int relative = cs.insn_group(handle, insn, CS_GRP_BRANCH_RELATIVE);
    if (relative && x->op_count == 1 && x->operands[0].type == X86_OP_IMM) {
        out->target = (uint64_t)x->operands[0].imm;
        if (insn->id == X86_INS_JMP)
            out->kind = MLK_INSN_JMP;
        else if (insn->id == X86_INS_CALL)
            out->kind = MLK_INSN_CALL;
        else if (x->opcode[0] >= 0x70 && x->opcode[0] <= 0x7f)
            out->kind = MLK_INSN_JCC, out->cc = x->opcode[0] & 0xf;
        else if (x->opcode[0] == 0x0f && x->opcode[1] >= 0x80 && x->opcode[1] <= 0x8f)
            out->kind = MLK_INSN_JCC, out->cc = x->opcode[1] & 0xf;
        else
            out->kind = MLK_INSN_FIXED; /* loop, loope, loopne, jrcxz */
        return 0;
    }
    if (relative) {
        out->kind = MLK_INSN_FIXED;
        return 0;
    }
    if (is_rip_relative(x)) {
        if (x->encoding.disp_size != 4 || !x->encoding.disp_offset)
            out->kind = MLK_INSN_FIXED;
        else
            out->disp_offset = x->encoding.disp_offset;
    }
    if (cs.insn_group(handle, insn, CS_GRP_RET) || cs.insn_group(handle, insn, CS_GRP_IRET) ||
        insn->id == X86_INS_JMP || insn->id == X86_INS_UD2 || insn->id == X86_INS_INT3 || insn->id == X86_INS_HLT)
        out->kind = out->kind == MLK_INSN_FIXED ? MLK_INSN_FIXED : MLK_INSN_END;
    return 0;
}
