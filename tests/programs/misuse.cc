// Misuse of the allocator, one kind per site function, for the misuse
// reports (#31) and valgrind as their oracle.  argv[1] picks a scenario:
//   mismatch  malloc'd and deleted (x3), new'd and freed (x2), new[]'d and
//             deleted, new'd and deleted as an array, and a derived object
//             deleted through a base without a virtual destructor (a sized
//             delete of 8 bytes for a 48-byte block): glibc lets all of
//             them pass, the program ends normally
//   double    a block freed twice: glibc aborts ("double free detected in
//             tcache 2")
//   invalid   free() of a local and of a global: glibc aborts ("free():
//             invalid pointer")
//   interior  free() of a pointer 8 bytes into a block: glibc aborts
//             ("free(): invalid pointer")
//   aligned   an aligned new's block deleted unaligned (x2), a new'd one
//             deleted aligned, a 64-aligned one deleted as 32-aligned, an
//             aligned new[]'s deleted as one, and a class with alignas(64)
//             made and deleted right (no misuse): glibc lets all pass
//   survive   double, invalid, interior and a realloc of a freed block,
//             one after the other: bare, the first aborts; under
//             misuse=hold it lives on
//   wild      frees whose pointer glibc's free would fault on or lose
//             track of: a 2000-byte block freed twice (glibc merges it
//             into its neighbours once freed), a 32 MiB block freed twice
//             (its pages are gone after the first), an unmapped address
//             freed, deleted and realloc'd: bare, the first aborts; under
//             misuse=hold it lives on
// Each step prints a line before it, so a bare run's output stops where
// glibc aborted.
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <new>
#include <sys/mman.h>

static char global_buffer[64];

struct Base {
    long a;
};
struct Derived : Base {
    char more[40];
};

template <typename T> static T keep(T p)
{
    asm volatile("" : : "r"(p) : "memory");  // the compiler may not pair or drop the calls
    return p;
}

__attribute__((noinline)) static void *site_malloc_for_delete() { return keep(malloc(24)); }
__attribute__((noinline)) static void site_delete_malloced(void *p) { operator delete(keep(p)); }
__attribute__((noinline)) static char *site_new_for_free() { return keep(new char('x')); }
__attribute__((noinline)) static void site_free_newed(char *p) { free(keep(p)); }
__attribute__((noinline)) static int *site_new_array() { return keep(new int[10]); }
__attribute__((noinline)) static void site_delete_array_as_one(int *p) { delete keep(p); }
__attribute__((noinline)) static long *site_new_one() { return keep(new long(7)); }
__attribute__((noinline)) static void site_delete_one_as_array(long *p) { delete[] keep(p); }
__attribute__((noinline)) static Base *site_new_derived() { return keep(static_cast<Base *>(new Derived())); }
__attribute__((noinline)) static void site_delete_as_base(Base *p) { delete keep(p); }

__attribute__((noinline)) static char *site_alloc_twice_freed() { return keep(static_cast<char *>(malloc(100))); }
__attribute__((noinline)) static void site_first_free(char *p) { free(keep(p)); }
__attribute__((noinline)) static void site_second_free(char *p) { free(keep(p)); }

__attribute__((noinline)) static void site_free_local()
{
    char local[32];
    strcpy(local, "on the stack");
    free(keep(local));
}
__attribute__((noinline)) static void site_free_global() { free(keep(global_buffer)); }

__attribute__((noinline)) static char *site_alloc_realloced_freed() { return keep(static_cast<char *>(malloc(200))); }
__attribute__((noinline)) static void site_free_before_realloc(char *p) { free(keep(p)); }
__attribute__((noinline)) static char *site_realloc_freed(char *p) { return keep(static_cast<char *>(realloc(p, 400))); }

__attribute__((noinline)) static char *site_alloc_for_interior() { return keep(static_cast<char *>(malloc(100))); }
__attribute__((noinline)) static void site_free_interior(char *p, int offset) { free(keep(p + offset)); }

__attribute__((noinline)) static char *site_alloc_merged() { return keep(static_cast<char *>(malloc(2000))); }
__attribute__((noinline)) static void site_free_merged(char *p) { free(keep(p)); }
__attribute__((noinline)) static void site_free_merged_again(char *p) { free(keep(p)); }
__attribute__((noinline)) static char *site_alloc_mapped() { return keep(static_cast<char *>(malloc(32 << 20))); }
__attribute__((noinline)) static void site_free_mapped(char *p) { free(keep(p)); }
__attribute__((noinline)) static void site_free_mapped_again(char *p) { free(keep(p)); }
__attribute__((noinline)) static void site_free_unmapped(char *p) { free(keep(p)); }
__attribute__((noinline)) static void site_delete_unmapped(char *p) { operator delete(keep(p)); }
__attribute__((noinline)) static char *site_realloc_unmapped(char *p) { return keep(static_cast<char *>(realloc(p, 10))); }

struct alignas(64) Wide {
    char bytes[100];
};
static const std::align_val_t A64 = std::align_val_t(64), A32 = std::align_val_t(32);
__attribute__((noinline)) static void *site_aligned_new() { return keep(operator new(100, A64)); }
__attribute__((noinline)) static void site_delete_unaligned(void *p) { operator delete(keep(p)); }
__attribute__((noinline)) static void *site_plain_new() { return keep(operator new(40)); }
__attribute__((noinline)) static void site_delete_aligned(void *p) { operator delete(keep(p), A32); }
__attribute__((noinline)) static void *site_aligned_new_64() { return keep(operator new(200, A64)); }
__attribute__((noinline)) static void site_delete_as_32(void *p) { operator delete(keep(p), A32); }
__attribute__((noinline)) static void *site_aligned_new_array() { return keep(operator new[](48, A64)); }
__attribute__((noinline)) static void site_delete_array_as_one_aligned(void *p) { operator delete(keep(p), A64); }
__attribute__((noinline)) static Wide *site_new_wide() { return keep(new Wide()); }
__attribute__((noinline)) static void site_delete_wide(Wide *w) { delete keep(w); }

static void say(const char *what)
{
    printf("%s\n", what);
    fflush(stdout);
}

static void mismatch()
{
    for (int i = 0; i < 3; i++)
        site_delete_malloced(site_malloc_for_delete());
    for (int i = 0; i < 2; i++)
        site_free_newed(site_new_for_free());
    site_delete_array_as_one(site_new_array());
    site_delete_one_as_array(site_new_one());
    site_delete_as_base(site_new_derived());
    say("mismatched: done");
}

static void twice()
{
    char *p = site_alloc_twice_freed();
    site_first_free(p);
    say("double: freeing again");
    site_second_free(p);
    say("double: lived on");
}

static void invalid()
{
    say("invalid: a local");
    site_free_local();
    say("invalid: a global");
    site_free_global();
    say("invalid: lived on");
}

static void interior()
{
    char *p = site_alloc_for_interior();
    memset(p, 'A', 100);
    say("interior: 8 bytes in");
    site_free_interior(p, 8);
    say("interior: 16 bytes in");
    site_free_interior(p, 16);
    say("interior: lived on");
    free(p);
}

static void aligned()
{
    for (int i = 0; i < 2; i++)
        site_delete_unaligned(site_aligned_new());
    site_delete_aligned(site_plain_new());
    site_delete_as_32(site_aligned_new_64());
    site_delete_array_as_one_aligned(site_aligned_new_array());
    Wide *w = site_new_wide();
    printf("aligned: %s\n", reinterpret_cast<uintptr_t>(w) % 64 ? "misaligned" : "64-aligned");
    site_delete_wide(w);
    say("aligned: done");
}

static void realloc_freed()
{
    char *p = site_alloc_realloced_freed();
    site_free_before_realloc(p);
    say("realloc: of a freed block");
    char *q = site_realloc_freed(p);
    printf("realloc: %s\n", q ? "a block" : "NULL");
}

static void wild()
{
    char *merged = site_alloc_merged();
    site_free_merged(merged);
    say("wild: a 2000-byte block freed again");
    site_free_merged_again(merged);
    char *mapped = site_alloc_mapped();
    site_free_mapped(mapped);
    say("wild: a 32 MiB block freed again");
    site_free_mapped_again(mapped);
    char *page = static_cast<char *>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    munmap(page, 4096);
    say("wild: an unmapped address freed");
    site_free_unmapped(page + 64);
    say("wild: deleted");
    site_delete_unmapped(page + 64);
    say("wild: realloc'd");
    char *q = site_realloc_unmapped(page + 64);
    printf("wild: realloc: %s\n", q ? "a block" : "NULL");
    say("wild: lived on");
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "mismatch";
    if (!strcmp(what, "mismatch")) {
        mismatch();
    } else if (!strcmp(what, "double")) {
        twice();
    } else if (!strcmp(what, "invalid")) {
        invalid();
    } else if (!strcmp(what, "interior")) {
        interior();
    } else if (!strcmp(what, "aligned")) {
        aligned();
    } else if (!strcmp(what, "wild")) {
        wild();
    } else if (!strcmp(what, "survive")) {
        twice();
        invalid();
        interior();
        realloc_freed();
    }
    say("end");
    return 0;
}
