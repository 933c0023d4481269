// Linked with -ltcmalloc_minimal (tcmalloc's malloc and operator new are
// the ones libc's lookups find after the tracer's): it used to crash at
// load, our early path and tcmalloc's MallocExtension calling each other.
// Leaks 10 x 100 bytes (malloc) and 5 x 64 bytes (new[]) at known sites.
//
//   tcmalloced        does it all and exits.
//   tcmalloced wait   first starts four threads that allocate and free
//                     without pause (through malloc and operator new), says
//                     "ready" and waits for a line (an attach meanwhile
//                     must write its patches while they run through the
//                     allocator); then the same leaks, the threads stopped,
//                     "done", and waits for a line again before exit.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

__attribute__((noinline)) void *site_malloc(size_t n) { return malloc(n); }
__attribute__((noinline)) int *site_new() { return new int[16]; }

static std::atomic<bool> stop_churning;

__attribute__((noinline)) static void churn()
{
    for (unsigned i = 0; !stop_churning.load(std::memory_order_relaxed); i++) {
        free(malloc(32 + i % 512));
        delete new long(i);
    }
}

int main(int argc, char **argv)
{
    bool wait = argc > 1;
    std::vector<std::thread> churners;
    std::string line;
    if (wait) {
        for (int i = 0; i < 4; i++)
            churners.emplace_back(churn);
        std::puts("ready");
        std::fflush(stdout);
        if (!std::getline(std::cin, line))
            return 1;
    }
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
    stop_churning = true;
    for (auto &t : churners)
        t.join();
    std::puts("done");
    std::fflush(stdout);
    if (wait && !std::getline(std::cin, line))
        return 1;
    return 0;
}
