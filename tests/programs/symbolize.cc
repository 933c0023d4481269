// Call sites for symbolization tests.  Lines marked "// @NAME" are looked up
// by the tests, so the expected file:line values follow edits here.
#include <cstdlib>
#include <vector>

extern "C" {
#include "checkpoint.h"
void *shared_alloc(size_t n);  // in libshape.so
}

void *volatile sink;
volatile int counter;

namespace storage {
template <typename T> struct Pool {
    std::vector<T *> items;
    __attribute__((noinline)) T *grab(int n) {
        T *p = new T[n];  // @grab
        items.push_back(p);
        return p;
    }
};
}  // namespace storage

static inline __attribute__((always_inline)) void *inner_alloc(size_t n) {
    void *p = malloc(n);  // @inner
    sink = p;
    return p;
}

static inline __attribute__((always_inline)) void *middle_alloc(size_t n) {
    void *p = inner_alloc(n + 1);  // @middle
    counter = counter + 1;
    return p;
}

__attribute__((noinline)) void *site_inlined(size_t n) {
    void *p = middle_alloc(n);  // @outer
    counter = counter + 2;
    return p;
}

int main() {
    storage::Pool<double> pool;
    pool.grab(4);  // @main_grab
    site_inlined(9);  // @main_inlined
    auto make = [](size_t n) {
        void *p = malloc(n);  // @lambda
        sink = p;
        return p;
    };
    make(21);
    shared_alloc(300);  // @main_shared
    checkpoint("ready");
    return 0;
}
