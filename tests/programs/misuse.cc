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
//   survive   double, invalid and a realloc of a freed block, one after the
//             other: bare, the first aborts; under misuse=hold it lives on
// Each step prints a line before it, so a bare run's output stops where
// glibc aborted.
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

static void realloc_freed()
{
    char *p = site_alloc_realloced_freed();
    site_free_before_realloc(p);
    say("realloc: of a freed block");
    char *q = site_realloc_freed(p);
    printf("realloc: %s\n", q ? "a block" : "NULL");
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
    } else if (!strcmp(what, "survive")) {
        twice();
        invalid();
        realloc_freed();
    }
    say("end");
    return 0;
}
