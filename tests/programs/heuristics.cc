// Interior pointers valgrind's leak-check heuristics accept as reaching a
// block's start (tests/test_scan.py): each from its own site.
//   site_cow_string   a copy-on-write std::string's characters (stdstring)
//   site_length64     8 bytes into a block whose first word is its length
//   site_new_array    new[] of elements with a destructor (newarray)
//   site_second_base  a pointer to a secondary base (multipleinheritance)
//   site_plain_inner  16 bytes into a zeroed block: still possibly lost
#define _GLIBCXX_USE_CXX11_ABI 0
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

struct Item {
    ~Item() { x = 0; }
    int x;
};
struct A {
    virtual ~A() {}
    long a = 1;
};
struct B {
    virtual ~B() {}
    long b = 2;
};
struct C : A, B {
    long c = 3;
};

std::string *g_string;
Item *g_items;
B *g_second;
char *g_length64;
char *g_inner;

__attribute__((noinline)) std::string *site_cow_string() { return new std::string(40, 'x'); }
__attribute__((noinline)) char *site_length64(size_t n)
{
    uint64_t *p = static_cast<uint64_t *>(malloc(n + 8));
    p[0] = n;
    return reinterpret_cast<char *>(p + 1);
}
__attribute__((noinline)) Item *site_new_array() { return new Item[3]; }
__attribute__((noinline)) B *site_second_base() { return new C; }
__attribute__((noinline)) char *site_plain_inner() { return static_cast<char *>(calloc(1, 64)) + 16; }

int main()
{
    g_string = site_cow_string();
    g_length64 = site_length64(100);
    g_items = site_new_array();
    g_second = site_second_base();
    g_inner = site_plain_inner();
    return 0;
}
