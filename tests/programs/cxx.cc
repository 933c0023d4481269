// C++ allocation through every operator new/delete form, templates and the
// standard library; and bad_alloc thrown through our hook.
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

extern "C" {
#include "checkpoint.h"
}

#define SITE __attribute__((noinline))

namespace storage {
template <typename T> struct Pool {
    std::vector<T *> items;
    SITE T *grab(int n) { T *p = new T[n]; items.push_back(p); return p; }
};
}

struct alignas(64) Wide { char bytes[128]; };

static void *sink[32];
SITE void site_new() { sink[0] = new long(7); sink[1] = new long(8); }
SITE void site_nothrow() { sink[2] = new (std::nothrow) char[40]; }
SITE void site_aligned() { sink[3] = new Wide; }
SITE void site_aligned_array() { sink[4] = new Wide[2]; }
SITE void site_deleted() { delete new int(1); delete[] new char[10]; }
SITE bool site_bad_alloc() {
    try {
        sink[5] = new char[(size_t)1 << 62];
    } catch (const std::bad_alloc &) {
        return true;
    }
    return false;
}
SITE void site_after_throw() { sink[6] = new char[33]; }

int main() {
    storage::Pool<double> pool;
    pool.grab(4);  // 32 bytes from Pool<double>::grab
    site_new();
    site_nothrow();
    site_aligned();
    site_aligned_array();
    site_deleted();
    if (!site_bad_alloc())
        return 3;
    site_after_throw();
    checkpoint("allocated");
    delete static_cast<long *>(sink[0]);
    ::operator delete(sink[3], std::align_val_t(64));  // aligned delete
    checkpoint("freed");
    return 0;
}
