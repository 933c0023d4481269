// Ten threads allocating with new and freeing with (sized) delete at once,
// besides malloc and free: a server's pattern past the threads that own a
// counter stripe (the first seven), whose counts go to the shared stripe.
// Totals must be exact.
#include <pthread.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "checkpoint.h"

const int THREADS = 10, PER_THREAD = 4000;

struct Node {
    char payload[56];
};

__attribute__((noinline)) Node *site_cxx_keep() { return new Node(); }   // kept: 10 * 4000 x 56 bytes
__attribute__((noinline)) Node *site_cxx_churn() { return new Node(); }  // deleted (sized) at once
__attribute__((noinline)) char *site_cxx_array(size_t n) { return new char[n]; }  // delete[]d at once
__attribute__((noinline)) void *site_cxx_malloc(size_t n) { return malloc(n); }   // half kept

static void *worker(void *arg)
{
    long id = (long)arg;
    for (int i = 0; i < PER_THREAD; i++) {
        Node *keep = site_cxx_keep();
        keep->payload[0] = (char)id;
        delete site_cxx_churn();
        char *a = site_cxx_array(16 + i % 64);
        memset(a, 1, 16);
        delete[] a;
        void *m = site_cxx_malloc(24);
        if (i % 2)
            free(m);  // kept: 10 * 2000 x 24 bytes
    }
    return nullptr;
}

int main()
{
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], nullptr, worker, (void *)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], nullptr);
    checkpoint("joined");
    return 0;
}
