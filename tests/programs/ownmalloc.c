/* An executable that defines malloc itself, as Chromium's allocator shim or
 * a program linked with a static tcmalloc does: the program's lookups find
 * its malloc before the tracer's.  A bump allocator over one mapping; free
 * forgets nothing, in one byte (ret) with the next function right after
 * it: too short for the jump that would route it, so the tracer cannot
 * see this allocator and must say so.  It leaks 10 blocks of 100 bytes
 * at site_leak. */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

static char *arena, *next_free;

static void *bump(size_t n)
{
    if (!arena) {
        arena = mmap(NULL, 64 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        next_free = arena;
    }
    n = (n + 15) & ~(size_t)15;
    char *p = next_free;
    next_free += n + 16;
    memcpy(p, &n, sizeof n);
    return p + 16;
}

void *malloc(size_t n) { return bump(n); }
/* free: `ret`, one byte, and calloc starts at the next byte. */
__asm__(".text\n.globl free\n.type free, @function\nfree:\n\tret\n.size free, 1\n"
        ".globl calloc\n.type calloc, @function\ncalloc:\n\tjmp calloc_impl\n.size calloc, 5\n");
void *calloc_impl(size_t k, size_t n);
void *calloc_impl(size_t k, size_t n) { return bump(k * n); } /* fresh mapping: zeroed */
void *realloc(void *p, size_t n)
{
    void *q = bump(n);
    if (p) {
        size_t old;
        memcpy(&old, (char *)p - 16, sizeof old);
        memcpy(q, p, old < n ? old : n);
    }
    return q;
}

__attribute__((noinline)) void *site_leak(size_t n) { return malloc(n); }

int main(void)
{
    void *volatile keep = NULL;
    for (int i = 0; i < 10; i++)
        keep = site_leak(100);
    (void)keep;
    printf("done\n");
    return 0;
}
