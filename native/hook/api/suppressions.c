/* __lsan_default_suppressions: a program (or a library in it) that
 * defines it tells LeakSanitizer which leaks are expected.  Read once as
 * collection starts; the text goes in the segment (default_suppressions)
 * and every report carries it, so the analysis applies it as LSan would.
 *
 * Where it is: an executable's functions are in its dynamic symbol table
 * only when it was linked -rdynamic or a library it links against uses
 * them, and LSan's runtime is linked into the executable, so programs
 * define it plainly.  So: a module that exports it (found by the modules'
 * own hash tables -- a dlsym that fails leaves an error message allocated
 * behind), else the executable's full symbol table (.symtab), read from
 * /proc/self/exe with raw calls.  A stripped executable without it
 * exported cannot be asked. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "../mlk.h"
#include "../route/got.h"

#define NAME "__lsan_default_suppressions"
typedef const char *(*suppressions_fn)(void);

static int exported(struct dl_phdr_info *info, size_t size, void *found)
{
    (void)size;
    if (info->dlpi_name && mlk_module_defines(info, NAME) == 1 && info->dlpi_phnum)
        *(int *)found = 1;
    return *(int *)found;
}

static int executable_bias(struct dl_phdr_info *info, size_t size, void *bias)
{
    (void)size;
    *(uint64_t *)bias = info->dlpi_addr; /* the first module is the executable */
    return 1;
}

/* The function's address from the executable's .symtab, or 0. */
static uint64_t from_symtab(void)
{
    long fd = mlk_syscall6(SYS_openat, AT_FDCWD, (long)"/proc/self/exe", O_RDONLY | O_CLOEXEC, 0, 0, 0);
    if (fd < 0)
        return 0;
    struct { uint64_t pad[6]; int64_t size; uint64_t rest[11]; } st; /* struct stat, x86-64 */
    _Static_assert(sizeof st == 144, "struct stat on x86-64");
    uint64_t found = 0;
    if (mlk_syscall6(SYS_fstat, fd, (long)&st, 0, 0, 0, 0) == 0 && st.size >= (int64_t)sizeof(Elf64_Ehdr)) {
        size_t len = (size_t)st.size;
        long map = mlk_syscall6(SYS_mmap, 0, (long)len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map > 0 || map < -4095) {
            const unsigned char *file = (const unsigned char *)map;
            const Elf64_Ehdr *eh = (const Elf64_Ehdr *)file;
            /* Checked as a file could be anything: every offset within it. */
            if (!memcmp(eh->e_ident, ELFMAG, SELFMAG) && eh->e_shentsize == sizeof(Elf64_Shdr) &&
                eh->e_shoff < len && eh->e_shnum <= (len - eh->e_shoff) / sizeof(Elf64_Shdr)) {
                const Elf64_Shdr *sh = (const Elf64_Shdr *)(file + eh->e_shoff);
                for (unsigned i = 0; i < eh->e_shnum && !found; i++) {
                    if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum)
                        continue;
                    const Elf64_Shdr *strs = &sh[sh[i].sh_link];
                    if (sh[i].sh_offset > len || sh[i].sh_size > len - sh[i].sh_offset ||
                        strs->sh_offset > len || strs->sh_size > len - strs->sh_offset)
                        continue;
                    const Elf64_Sym *sym = (const Elf64_Sym *)(file + sh[i].sh_offset);
                    const char *names = (const char *)file + strs->sh_offset;
                    for (uint64_t k = 0; k < sh[i].sh_size / sizeof *sym; k++)
                        if (ELF64_ST_TYPE(sym[k].st_info) == STT_FUNC && sym[k].st_shndx != SHN_UNDEF &&
                            strs->sh_size >= sizeof NAME && sym[k].st_name <= strs->sh_size - sizeof NAME &&
                            !memcmp(names + sym[k].st_name, NAME, sizeof NAME)) {
                            found = sym[k].st_value;
                            break;
                        }
                }
            }
            mlk_syscall6(SYS_munmap, map, (long)len, 0, 0, 0, 0);
        }
    }
    mlk_syscall6(SYS_close, fd, 0, 0, 0, 0, 0);
    if (!found)
        return 0;
    uint64_t bias = 0;
    dl_iterate_phdr(executable_bias, &bias);
    return found + bias;
}

void mlk_lsan_read_default_suppressions(void)
{
    if (!mlk_seg)
        return;
    int found = 0;
    dl_iterate_phdr(exported, &found);
    suppressions_fn fn = found ? (suppressions_fn)dlsym(RTLD_DEFAULT, NAME) : NULL;
    if (!fn)
        fn = (suppressions_fn)(uintptr_t)from_symtab();
    const char *text = fn ? fn() : NULL;
    if (!text)
        return;
    uint32_t n = 0;
    while (n < MLK_DEFAULT_SUPPRESSIONS_MAX && text[n])
        n++;
    uint32_t off = n ? mlk_string_add(text, n) : UINT32_MAX;
    if (off == UINT32_MAX)
        return;
    mlk_seg->default_suppressions_off = off;
    __atomic_store_n(&mlk_seg->default_suppressions_len, n, __ATOMIC_RELEASE);
}
