// 2 threads x N malloc/free through a few call stacks, with a sliding window
// of live blocks: the tight-loop worst case for a tracer.
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

static const int WINDOW = 256;

__attribute__((noinline)) void *alloc_a(size_t n) { return malloc(n); }
__attribute__((noinline)) void *alloc_b(size_t n) { return malloc(n + 16); }
__attribute__((noinline)) void *alloc_c(size_t n) { return operator new(n + 32); }

static void worker(long iterations, unsigned seed) {
    void *window[WINDOW] = {};
    bool is_new[WINDOW] = {};
    for (long i = 0; i < iterations; i++) {
        int slot = i % WINDOW;
        if (window[slot]) {
            if (is_new[slot]) operator delete(window[slot]);
            else free(window[slot]);
        }
        seed = seed * 1103515245 + 12345;
        size_t n = 16 + (seed >> 16) % 512;
        switch (seed % 3) {
        case 0: window[slot] = alloc_a(n); is_new[slot] = false; break;
        case 1: window[slot] = alloc_b(n); is_new[slot] = false; break;
        default: window[slot] = alloc_c(n); is_new[slot] = true; break;
        }
    }
    for (int s = 0; s < WINDOW; s++)
        if (window[s]) { if (is_new[s]) operator delete(window[s]); else free(window[s]); }
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000000;
    std::thread a(worker, n, 1u), b(worker, n, 2u);
    a.join();
    b.join();
    printf("done %ld\n", n);
    return 0;
}
