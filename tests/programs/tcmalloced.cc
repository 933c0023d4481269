// Linked with -ltcmalloc_minimal (tcmalloc's malloc and operator new are
// the ones libc's lookups find after the tracer's): it used to crash at
// load, our early path and tcmalloc's MallocExtension calling each other.
// Leaks 10 x 100 bytes (malloc) and 5 x 64 bytes (new[]) at known sites.
#include <cstdio>
#include <cstdlib>

__attribute__((noinline)) void *site_malloc(size_t n) { return malloc(n); }
__attribute__((noinline)) int *site_new() { return new int[16]; }

int main()
{
    void *volatile keep = nullptr;
    for (int i = 0; i < 10; i++)
        keep = site_malloc(100);
    for (int i = 0; i < 5; i++)
        keep = site_new();
    for (int i = 0; i < 1000; i++)
        free(malloc(50 + i));
    for (int i = 0; i < 1000; i++)
        delete new long(i);
    (void)keep;
    std::puts("done");
    return 0;
}
