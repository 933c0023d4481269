// A program that replaces the global operator new (with malloc) and not
// delete: legal C++ -- libstdc++'s delete frees with free().  Its blocks
// then meet the tracer's delete as malloc's: not a mismatch, and the
// reports must not call it one.  It also frees one block twice by hand
// (double frees are still checked) under misuse=hold.
#include <cstdio>
#include <cstdlib>
#include <new>

void *operator new(std::size_t n)
{
    void *p = std::malloc(n ? n : 1);
    if (!p)
        throw std::bad_alloc();
    return p;
}

__attribute__((noinline)) static void site_twice()
{
    void *p = std::malloc(64);
    std::free(p);
    std::free(p);
}

int main()
{
    for (int i = 0; i < 10; i++)
        delete new long(i);
    site_twice();
    std::puts("done");
    return 0;
}
